"""Permission rules as data: allow, ask or deny a call by tool and by glob.

    from lionfactory.coding import Rule, coding_toolkit

    rules = [
        Rule("bash", "git push*", "ask", reason="pushes to the shared remote",
             examples=["git push origin main", "cd x && git push"],
             counterexamples=["git status"]),
        Rule("editor", "*.lock", "deny", reason="lock files are generated"),
    ]
    branch.register(coding_toolkit, workspace_root=repo, rules=rules, mode="auto")

A `Rule` names a tool (``"*"``: every tool) and, optionally, a glob
(`fnmatch`, case-sensitive; ``*`` also crosses ``/`` and spaces):

* for ``bash`` the glob is matched against **each simple command** of the
  script, read by a real shell grammar (the commands joined by ``&&``,
  ``;``, ``|``, inside subshells, groups, loops, functions and command
  substitutions, in arguments, strings and here-documents), as its words
  joined by single spaces, starting at the program's base name
  (``/usr/bin/git  push`` is ``git push``), normalized the one way
  `deny_destructive_commands` reads them too: wrappers (``env``, ``command``,
  ``builtin``, ``exec``, ``nice``, ``timeout``, ``nohup``, ``stdbuf``,
  ``sudo``, ``xargs``, ``coproc``, ``find -exec``...) and leading
  ``VAR=value`` assignments are looked through, line continuations and
  ``$'...'`` quoting are resolved, git's global options are skipped (``git -C
  . push`` is ``git push``), and the scripts of ``sh -c '...'`` (whatever the
  shell's options), ``env -S '...'``, ``eval`` and a here-document fed to a
  shell are checked command by command too. The glob is also tried on the
  command as written (``sudo rm x``, ``git -c k=v push``). A script matches
  when any of its commands does. A script that does not parse, or nests
  scripts more than eight levels deep, is refused (`ToolDenied`, saying why)
  by a rule set that has bash globs, whatever the rules say: they cannot tell
  what it would run;
* for the file tools (reader, editor, search, code_nav, ast_search,
  code_check) it is matched against **each path the call touches, as the
  tool's workspace resolves it** (`Tool.targets`): one root-relative POSIX
  form, so ``../<root name>/src/a.py``, ``<root>//src/a.py`` and
  ``./src/../src/a.py`` are all ``src/a.py``; for an ``apply_patch`` every
  file of the patch and both ends of a ``*** Move to:``. A path the tool
  refuses (outside the workspace, protected) is not among them: the call
  never touches it;
* without a glob the rule matches every call of the tool.

Of the rules that match a call, the strictest decides: ``deny`` over ``ask``
over ``allow``; between equally strict rules the later one speaks (its
reason is the one given), so a toolkit's own rules, which follow its
mode's, explain themselves. A call no rule matches runs. ``deny`` refuses the call
(`ToolDenied`, the model reads the reason); ``ask`` holds it for a person
(`ApprovalRequired`: `Branch.run` pauses with `ApprovalPending`).

``examples`` must match the rule and ``counterexamples`` must not; both are
checked when the rule is made, so a rule that does not say what its author
meant fails at once, before any call (as the Codex CLI checks its rules'
examples when it loads them). Rules are JSON-ready (`Rule.to_dict`,
`Rule.from_dict`) and persist with the branch they were registered on.

Rules judge what a call *says*; like any word filter they cannot see what a
program computes (``sh -c "$X"``, a script in the repository). The kernel
confinement of the toolkit's processes is what holds a program in; rules
decide what a person wants to be asked about.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import attrs

from lionfactory._messages import tuple_of
from lionfactory._shell.commands import ShellTooDeep, normalized_commands
from lionfactory._shell.parse import ShellSyntaxError
from lionfactory._tool import Tool, stated_targets
from lionfactory.errors import ApprovalRequired, ToolDenied

__all__ = ["MODES", "PATH_ARGUMENTS", "Decision", "Mode", "Rule", "RuleHook", "mode_rules"]

Decision = Literal["allow", "ask", "deny"]
Mode = Literal["read_only", "ask_edits", "accept_edits", "auto"]

_STRICTNESS = {"allow": 0, "ask": 1, "deny": 2}

PATH_ARGUMENTS: Mapping[str, str] = {
    "reader": "path",
    "editor": "file_path",
    "search": "path",
    "code_nav": "path",
    "ast_search": "path",
    "code_check": "paths",
    # A real rewind of files (its targets: its paths, or "." for all of them).
    "checkpoint": "paths",
}
"""The argument a rule's glob is matched against, per file tool, when the call's
tool does not state its targets (a hook called outside a tool's own pipeline)."""


def simple_commands(script: str) -> list[str]:
    """The commands of a bash script as a rule sees them, each as its words joined by spaces.

    The script is read by the shell grammar `lionfactory.coding.simple_commands`
    uses, so the commands joined by operators, inside subshells, groups,
    loops, functions and command substitutions (in arguments, strings and
    here-documents) all count, and then normalized the one way
    `deny_destructive_commands` normalizes them too: each command starts at
    the program's base name, seen through wrappers (``env``, ``sudo``,
    ``timeout``, ``xargs``, ``find -exec``, ``coproc``...) and assignments,
    git's global options skipped (``git -C . push`` is ``git push``); the
    scripts it would run (``sh -c '...'`` whatever the shell's options,
    ``env -S '...'``, ``eval``'s joined arguments, the here-document or
    here-string fed to a shell without ``-c``) follow as commands of their own.

    Raises:
        ShellSyntaxError: the script, or a script it runs, does not parse.
        ShellTooDeep: scripts nest too deeply to be read (a `ShellSyntaxError`).
    """
    return [command.text for command in normalized_commands(script)]


def _command_forms(script: str) -> list[str]:
    """Every spelling of every command of `script` a glob is matched against."""
    return [form for command in normalized_commands(script) for form in command.forms]


def _check_tool(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise TypeError(f"a rule's tool must be a tool name or '*', got {value!r:.200}")


def _check_match(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise TypeError(f"a rule's match must be a non-empty glob or None, got {value!r:.200}")


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple_of(str, value, "rule examples must be strings")


@attrs.frozen
class Rule:
    """Allow, ask or deny the calls of a tool whose command or path matches a glob.

    Args:
        tool: the tool's name, or ``"*"`` for every tool.
        match: a glob on each simple command (bash, normalized) or on each
            path the call touches as the tool resolves it (file tools);
            None matches every call of the tool.
        decision: ``"allow"``, ``"ask"`` (hold for a person) or ``"deny"``.
        reason: what the model (for a denial) or the person (for an ask)
            reads; a default naming the rule is used when empty.
        examples: commands or paths the rule must match.
        counterexamples: commands or paths it must not match.

    Raises:
        ValueError: an unknown decision, a glob on a tool that has neither
            a command nor a path, an example the rule does not match or a
            counterexample it does (the message names it).
        TypeError: a field of the wrong type.
    """

    _saved_as_data: ClassVar[bool] = True
    """A saved branch stores a Rule among factory arguments as its `to_dict` data."""

    tool: str = attrs.field(validator=_check_tool)
    match: str | None = attrs.field(default=None, validator=_check_match)
    decision: Decision = attrs.field(default="allow")
    reason: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    examples: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    counterexamples: tuple[str, ...] = attrs.field(default=(), converter=_strings)

    def __attrs_post_init__(self) -> None:
        if self.decision not in _STRICTNESS:
            raise ValueError(
                f"a rule's decision must be 'allow', 'ask' or 'deny', got {self.decision!r}"
            )
        if self.match is not None and self.tool != "bash" and self.tool not in PATH_ARGUMENTS:
            raise ValueError(
                f"rule for {self.tool!r} has a match {self.match!r}, but only bash (commands) "
                f"and the file tools ({', '.join(PATH_ARGUMENTS)}) have something to match; "
                f"drop match to rule every call of {self.tool!r}"
            )
        if (self.examples or self.counterexamples) and self.match is None:
            raise ValueError(
                f"rule {self.describe()} has examples but no match: it matches every call"
            )
        for example in (*self.examples, *self.counterexamples) if self.tool == "bash" else ():
            try:
                simple_commands(example)
            except ShellSyntaxError as exc:
                raise ValueError(
                    f"rule {self.describe()} has an example that is not valid shell, "
                    f"{example!r:.200}: {exc.message}"
                ) from None
        for example in self.examples:
            if not self._matches_text(example, None):
                raise ValueError(
                    f"rule {self.describe()} does not match its example {example!r}; fix the "
                    f"glob (bash globs are matched against each simple command, e.g. "
                    f"'git push*')"
                )
        for counter in self.counterexamples:
            if self._matches_text(counter, None):
                raise ValueError(
                    f"rule {self.describe()} matches its counterexample {counter!r}; narrow "
                    f"the glob"
                )

    def describe(self) -> str:
        """The rule in one line, as error messages and pending calls name it."""
        what = f" {self.match!r}" if self.match is not None else ""
        return f"{self.tool}{what} -> {self.decision}"

    def matches(self, tool: str, arguments: Mapping[str, Any], root: Path | None = None) -> bool:
        """Whether this rule applies to a call of `tool` with `arguments`.

        Args:
            tool: the called tool's name.
            arguments: the call's arguments, as the model sent them.
            root: the workspace root, to make absolute paths relative.
        """
        if self.tool not in ("*", tool):
            return False
        if self.match is None:
            return True
        if tool == "bash":
            command = arguments.get("command")
            return isinstance(command, str) and self._matches_text(command, None, tool)
        key = PATH_ARGUMENTS.get(tool)
        if key is None:
            return False
        targets = stated_targets(tool, arguments)
        if targets is not None:
            # The tool's own account: every path it resolved, in one form.
            return any(fnmatch.fnmatchcase(path, self.match) for path in targets)
        value = arguments.get(key)
        if value is None and tool != "code_check":
            value = "."
        values = value if isinstance(value, list) else [value]
        return any(isinstance(v, str) and self._matches_text(v, root, tool) for v in values)

    def _matches_text(self, text: str, root: Path | None, tool: str | None = None) -> bool:
        glob = self.match
        if glob is None:
            return True
        if (tool or self.tool) == "bash":
            try:
                commands = _command_forms(text)
            except ShellSyntaxError:
                # What cannot be read (or is nested too deeply to read)
                # could run anything: it matches every glob (and `RuleHook`
                # refuses it outright).
                return True
            return any(fnmatch.fnmatchcase(c, glob) for c in commands)
        return fnmatch.fnmatchcase(_normal_path(text, root), glob)

    def to_dict(self) -> dict[str, Any]:
        """The rule as JSON-ready data."""
        return {
            "tool": self.tool,
            "match": self.match,
            "decision": self.decision,
            "reason": self.reason,
            "examples": list(self.examples),
            "counterexamples": list(self.counterexamples),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rule:
        """A rule from `to_dict` data (or hand-written JSON); its examples are checked again.

        Raises:
            ValueError, TypeError: as for the constructor, or unknown keys.
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"a rule must be an object, got {data!r:.200}")
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"a rule has unknown keys {unknown}; known: {sorted(known)}")
        return cls(**dict(data))


def _normal_path(text: str, root: Path | None) -> str:
    """A path as rules see it: relative to the workspace, ``.`` and ``..`` folded.

    For a tool that does not state its targets. With the root known, the
    path is folded from the root, as a workspace resolves it: so
    ``../<root name>/src/a.py`` and ``<root>//src/a.py`` are ``src/a.py``.
    """
    path = text.replace("\\", "/")
    if root is not None:
        base = posixpath.normpath(os.fspath(root))
        full = posixpath.normpath(posixpath.join(base, path))
        if full == base:
            return "."
        if full.startswith(base.rstrip("/") + "/"):
            return full[len(base.rstrip("/")) + 1 :]
    normal = posixpath.normpath(path) if path else "."
    return normal


def _read_only(what: str) -> str:
    """Why ``read_only`` denies a call, and what the model can do instead.

    The model did nothing wrong: the branch's mode forbids the tool. So the
    reason names the mode and the tool's effect, and offers the two ways on:
    look with a tool that only reads, or ask the user, who chose the mode.
    """
    return (
        f"the branch runs in read_only mode, which allows only tools that read, and {what}; "
        f"look with a reading tool (reader, search) instead, or tell the user what you would "
        f"change and ask them to switch the mode"
    )


MODES: Mapping[str, tuple[Rule, ...]] = {
    # Look, never touch: no edits, no commands (bash can change anything),
    # no sandbox merges; reading, searching and checking run.
    "read_only": (
        Rule("editor", decision="deny", reason=_read_only("editor changes files")),
        Rule("bash", decision="deny", reason=_read_only("bash runs commands")),
        Rule("sandbox", decision="deny", reason=_read_only("sandbox changes the sandbox")),
        # Listing, diffing and dry runs state no targets: they still run.
        Rule("checkpoint", "*", "deny", reason=_read_only("a real rewind changes files")),
    ),
    # A person approves every file change, every command and every sandbox step.
    "ask_edits": (
        Rule("editor", decision="ask", reason="changes a file"),
        Rule("bash", decision="ask", reason="runs a command"),
        Rule("sandbox", decision="ask", reason="changes the sandbox or merges it"),
        Rule("checkpoint", "*", "ask", reason="rewinds files to a checkpoint"),
    ),
    # File changes run at once (they stay in the workspace, and git shows
    # them), a rewind of files too (it writes through the editor's path,
    # leaves others' changes alone and can itself be undone); commands and
    # sandbox steps are asked about.
    "accept_edits": (
        Rule("bash", decision="ask", reason="runs a command"),
        Rule("sandbox", decision="ask", reason="changes the sandbox or merges it"),
    ),
    # Nothing is asked: only the rules given, and the kernel confinement of
    # the toolkit's processes, hold the agent.
    "auto": (),
}
"""What each permission `mode` of `coding_toolkit` expands to (added before the given rules)."""


def mode_rules(mode: str | None) -> tuple[Rule, ...]:
    """The rules of a permission mode (none for None).

    Raises:
        ValueError: an unknown mode.
    """
    if mode is None:
        return ()
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)} or None, got {mode!r}")
    return MODES[mode]


def as_rules(rules: Iterable[Rule | Mapping[str, Any]] | None) -> tuple[Rule, ...]:
    """Rules given as `Rule` objects or their JSON form.

    Raises:
        TypeError: a string, or an entry that is neither.
    """
    if rules is None:
        return ()
    if isinstance(rules, (str, bytes, Mapping)):
        raise TypeError(f"rules must be a list of Rule objects, got {rules!r:.200}")
    out = []
    for rule in rules:
        if isinstance(rule, Rule):
            out.append(rule)
        elif isinstance(rule, Mapping):
            out.append(Rule.from_dict(rule))
        else:
            raise TypeError(f"rules must be Rule objects (or their dicts), got {rule!r:.200}")
    return tuple(out)


@attrs.frozen
class RuleHook:
    """The security hook that applies a rule set: the strictest matching rule decides.

    Attributes:
        rules: the rules, in the order given.
        root: the workspace root (absolute paths inside it are made relative).
    """

    rules: tuple[Rule, ...]
    root: Path | None = None

    def decide(self, tool: str, arguments: Mapping[str, Any]) -> tuple[Decision, Rule | None]:
        """The decision for a call, and the rule that made it (None: no rule matched).

        The strictest matching rule; of equally strict ones, the last. A
        bash script that does not parse, judged by a rule set that has bash
        globs, is ``("deny", None)``: see `unreadable`.
        """
        if self.unreadable(tool, arguments) is not None:
            return ("deny", None)
        best: Rule | None = None
        for rule in self.rules:
            if rule.matches(tool, arguments, self.root) and (
                best is None or _STRICTNESS[rule.decision] >= _STRICTNESS[best.decision]
            ):
                best = rule
        return ("allow", None) if best is None else (best.decision, best)

    def unreadable(self, tool: str, arguments: Mapping[str, Any]) -> str | None:
        """Why the rules cannot read a bash call's script, or None when they can.

        A script that does not parse is refused, not judged: the rules
        cannot tell which commands it would run, and a shell runs the lines
        before a syntax error. Only a rule set with bash globs reads
        scripts; without one the script is not this hook's to refuse.
        """
        if tool != "bash" or not any(r.tool == "bash" and r.match for r in self.rules):
            return None
        command = arguments.get("command")
        if not isinstance(command, str):
            return None
        try:
            simple_commands(command)
        except ShellTooDeep as exc:
            return f"The command could not be checked against the approval rules: {exc.message}."
        except ShellSyntaxError as exc:
            return (
                f"The command could not be checked against the approval rules: {exc.message}. "
                f"Fix the syntax (quote characters meant literally) and send it again."
            )
        return None

    def __call__(self, tool: str, arguments: dict[str, Any]) -> None:
        """Let the call through, refuse it (`ToolDenied`) or ask (`ApprovalRequired`)."""
        unreadable = self.unreadable(tool, arguments)
        if unreadable is not None:
            raise ToolDenied(unreadable, tool)
        decision, rule = self.decide(tool, arguments)
        if rule is None or decision == "allow":
            return
        reason = rule.reason or f"the rule {rule.describe()} matches this call"
        if decision == "deny":
            raise ToolDenied(f"{reason} (rule {rule.describe()}); do something else", tool)
        raise ApprovalRequired(reason, tool=tool, hook=f"rule {rule.describe()}")


def rule_set(
    mode: str | None, rules: Sequence[Rule | Mapping[str, Any]] | None
) -> tuple[Rule, ...]:
    """A mode's rules, then the given ones, each checked (examples included)."""
    return (*mode_rules(mode), *as_rules(rules))


# The conversation's own tool: evicting or summarising messages changes
# nothing a read-only session protects (files, processes, the sandbox).
_CONVERSATION_TOOLS = frozenset({"context"})


def hinted_rules(mode: str | None, tools: Iterable[Tool]) -> tuple[Rule, ...]:
    """The rules `mode` adds for `tools` by what each says of itself.

    ``read_only`` denies every tool whose hints do not say it is read-only
    (the conversation's own ``context`` aside), so a new tool that changes
    things is denied without anyone listing it; the other modes add none.
    """
    if mode != "read_only":
        return ()
    listed = {rule.tool for rule in MODES["read_only"]}
    return tuple(
        Rule(
            tool.name,
            decision="deny",
            reason=_read_only(f"{tool.name} can change things"),
        )
        for tool in tools
        if not (tool.hints is not None and tool.hints.read_only)
        and tool.name not in listed
        and tool.name not in _CONVERSATION_TOOLS
    )

"""Policy hooks: pre hooks that refuse tool calls a careful reviewer would refuse.

`deny_destructive_commands` is the example policy the coding toolkit ships.
It guards the ``bash`` tool against commands that destroy work or the machine
and cannot be undone: ``rm -rf``, ``git reset --hard``, a forced ``git push``,
``git clean -f``, ``sudo`` and friends, formatting or overwriting disks.

It catches accidents; it is not a security boundary. It reads the command
with a real shell grammar (tree-sitter's bash grammar, through
`simple_commands`), so every simple command of a script is checked: each
side of ``&&``, ``||``, ``;`` and ``|``, subshells, loops, function bodies,
command substitutions (``echo $(rm -rf d)``) and ``eval``'s text. It reads
commands through the one normalization the permission rules share
(`lionfactory.coding.rules.simple_commands`): the usual wrappers (``env``,
``env -S``, ``timeout``, ``nice``, ``sudo``, ``xargs``, ``coproc``, ``find
-exec``, ``sh -c '...'`` with any options), line continuations and ``$'...'``
quoting, and the same nesting limit (deeper scripts are denied); but a word
filter cannot win against a program that computes what it runs: a shell
script (``sh -c 'x=rm; $x -rf d'``, ``eval``, globs, ``set -- rm -rf d;
"$@"``), ``python -c "shutil.rmtree(...)"``, a git alias or a script in the
repository all delete files the filter never sees. What confines an agent is
isolation enforced by the kernel: run the tools under the process isolation
policy (a mount/PID namespace or Landlock), in a container, or in the
toolkit's ``sandbox`` (a git worktree) when that matters.

Writing another policy hook
---------------------------
A pre hook is any callable, sync or async, with the signature
``hook(tool_name: str, arguments: dict) -> dict | None`` (what `Tool.pre` holds). It
runs before the arguments are validated, so it sees them exactly as the model
sent them and must not assume a key exists or has the right type:

* return ``None`` to let the call through unchanged;
* return a new dict to replace the arguments (for example to add a default
  ``timeout``); do not mutate the one you were given;
* raise ``ToolDenied(reason)`` to refuse the call. The model reads the reason
  as the tool's answer, so say what was refused and what to do instead.

A hook that guards one tool should ignore the others (check `tool_name`), so
it can also be registered under ``"*"``. Attach hooks either through the
toolkit, which attaches them to the tools it builds for each branch::

    branch.register(coding_toolkit, hooks={"bash": {"security": [deny_destructive_commands]}})

or to any single tool, which returns a new Tool (tools are never mutated)::

    guarded = bash_tool(workspace_root=repo).with_hooks(pre=[deny_destructive_commands])
    branch.register(guarded)

A denial reaches the model through `Branch.act` as an error message
(``Tool 'bash' denied the call: ...``); the loop goes on.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath
from typing import Any

import attrs

from lionfactory._echo import shorten
from lionfactory._shell.commands import (
    GIT_VALUED,
    ShellTooDeep,
    git_command,
    normalized_commands,
    program_name,
)
from lionfactory._shell.flags import has_long, long_flags, short_flags
from lionfactory._shell.parse import MAX_COMMAND_CHARS, ShellSyntaxError
from lionfactory.errors import ToolDenied

__all__ = ["deny_destructive_commands"]

_ELEVATORS = frozenset({"sudo", "sudoedit", "doas", "su", "pkexec", "run0"})
_DISK_TOOLS = frozenset(
    {"mke2fs", "mkswap", "wipefs", "fdisk", "sfdisk", "cfdisk", "parted", "sgdisk"}
    | {"mkdosfs", "mkntfs", "mkexfatfs", "mkudffs", "mkreiserfs", "mformat"}
    | {"blkdiscard", "shred"}
)
_POWER = frozenset({"shutdown", "reboot", "halt", "poweroff"})
# `systemctl reboot`, `loginctl poweroff`, `init 0`, `telinit 6`.
_POWER_VERBS = frozenset(
    {"reboot", "poweroff", "halt", "kexec", "soft-reboot", "emergency", "rescue"}
    | {"suspend", "hibernate", "hybrid-sleep", "suspend-then-hibernate"}
)
_RUNLEVELS = frozenset({"0", "1", "6", "s", "S", "single"})
# A policy reads these two as taking a value too: a word after them is then
# also checked as the subcommand (see `_git_subcommands`).
_GIT_OPTIONS_WITH_VALUE = GIT_VALUED | {"--exec-path", "--list-cmds"}
# Subcommands git ships, so that a word after an option git may learn to take
# a value for (like `--attr-source REV`) is not mistaken for the subcommand.
_GIT_SUBCOMMANDS = frozenset(
    {"add", "am", "apply", "bisect", "blame", "branch", "checkout", "cherry-pick", "clean"}
    | {"clone", "commit", "config", "describe", "diff", "fetch", "grep", "init", "log"}
    | {"merge", "mv", "pull", "push", "rebase", "reflog", "remote", "reset", "restore"}
    | {"revert", "rm", "show", "stash", "status", "switch", "tag", "worktree", "gc"}
)
_HARMLESS_DEVICES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})


def deny_destructive_commands(tool_name: str, arguments: dict[str, Any]) -> None:
    """Pre hook: refuse destructive ``bash`` commands with a reason the model can act on.

    Denied (in any spelling shlex accepts, with or without a path such as
    ``/bin/rm``, and behind ``env``/``timeout``/``xargs``/``find -exec``/``sh -c``):

    * ``rm`` with both recursive and force flags (``-rf``, ``-fr``, ``-r -f``,
      ``--recursive --force``), or with ``--no-preserve-root``;
    * ``git reset --hard``; ``git push`` with ``--force``, ``-f``,
      ``--force-with-lease``, ``--mirror`` or a ``+refspec``; every ``git
      clean`` except a dry run (``-n``), because ``-c clean.requireForce=false``
      or the repository's configuration makes it delete without ``-f``;
    * ``sudo``, ``sudoedit``, ``doas``, ``su``, ``pkexec``, ``run0``;
    * ``mkfs*``, ``mkdosfs``, ``mkntfs``, ``wipefs``, ``fdisk`` and other
      disk tools, ``shred``; ``dd`` writing to a device (``of=/dev/sda``, also
      spelled ``of=//dev/sda`` or ``of=/proc/self/root/dev/sda``);
    * recursive ``chmod``/``chown``/``chgrp`` on a system-level path (``/``,
      ``/etc``, ``/usr/lib``), or a recursive ``chmod`` that lets others write
      (``777``, ``1777``, ``go+w``, ``a+rwX``);
    * ``shutdown``, ``reboot``, ``halt``, ``poweroff``; ``systemctl`` or
      ``loginctl`` ``reboot``/``poweroff``/``halt``/...; ``init 0``/``6``.

    A command longer than the ``bash`` tool accepts is denied without being
    read (the scan is linear, and this bounds it). Calls of other tools pass
    through, and so does a missing or non-string ``command`` (validation
    reports it). A command that is not valid shell syntax (an unclosed quote)
    is denied, because what cannot be read cannot be cleared.

    Args:
        tool_name: the tool being called; only ``"bash"`` is inspected.
        arguments: the call's arguments as the model sent them.

    Raises:
        ToolDenied: the command is destructive; the reason says what to do instead.
    """
    if tool_name != "bash":
        return
    command = arguments.get("command")
    if not isinstance(command, str):
        return
    if len(command) > MAX_COMMAND_CHARS:
        raise ToolDenied(
            f"The command is {len(command):,} characters long; the bash tool takes at most "
            f"{MAX_COMMAND_CHARS:,}. Write long content to a file with the editor and run a "
            f"short command on it. (policy: deny_destructive_commands)"
        )
    reason = _check_script(command, depth=0)
    if reason is not None:
        raise ToolDenied(f"{reason} (policy: deny_destructive_commands)")


def _check_script(script: str, *, depth: int = 0) -> str | None:
    """Why `script` is refused, or None: each command it runs, as the rules see it.

    The commands come from the one normalization the permission rules use
    too (`normalized_commands`: wrappers, ``find -exec``, ``eval``, inner
    shells and their here-documents looked through), so a spelling one of
    them understands cannot pass the other. `depth` is unused; kept so
    callers that name it still work.
    """
    del depth
    try:
        commands = normalized_commands(script)
    except ShellTooDeep as exc:
        return f"The command could not be checked: {exc.message}."
    except ShellSyntaxError as exc:
        # What the policy cannot read it cannot clear: a shell would still
        # run the parts it understands.
        return (
            f"The command could not be checked: {exc.message}. Fix the syntax (quote "
            f"characters meant literally) and send it again."
        )
    for command in commands:
        elevator = next((w for w in command.wrappers if w in _ELEVATORS), None)
        if elevator is not None:
            return _elevate(elevator, [], 0)
        checker = _CHECKERS.get(command.name)
        if checker is None:
            if command.name.startswith("mkfs"):
                return _disk_reason(command.program)
            continue
        reason = checker(command.program, list(command.args), 0)
        if reason is not None:
            return reason
    return None


def _rm(token: str, args: list[str], _depth: int) -> str | None:
    short = short_flags(args)
    # Among rm's long options, three characters are unambiguous.
    recursive = bool(short & {"r", "R"}) or has_long(args, "--recursive", shortest=3)
    force = "f" in short or has_long(args, "--force", shortest=3)
    if "--no-preserve-root" in long_flags(args):
        return (
            f"`{token} --no-preserve-root` can delete the whole filesystem and is denied. "
            f"Delete the specific files you created instead."
        )
    if recursive and force:
        shown = _shown(token, args)
        return (
            f"`{shown}` deletes a directory tree recursively without confirmation, which "
            f"cannot be undone, and is denied. Delete the specific files you created with "
            f"`rm <file>` (no -r/-f), or ask the user to remove the directory."
        )
    return None


def _shown(token: str, args: Sequence[str]) -> str:
    """The command as the model wrote it, cut to a readable length."""
    return shorten(shlex.join([token, *args[:50]]), 300)


def _git_subcommands(args: Sequence[str]) -> list[tuple[str, list[str]]]:
    """The subcommand git runs, with its arguments; two candidates when unsure.

    Global options with a separate value are skipped. When the first plain
    word is not a subcommand git ships (it may be the value of an option this
    list does not know yet), the next plain word is checked as well, so an
    unknown option cannot hide ``reset --hard`` behind it.
    """
    found: list[tuple[str, list[str]]] = []
    rest = git_command(args, _GIT_OPTIONS_WITH_VALUE)
    while rest and len(found) < 2:
        found.append((rest[0], list(rest[1:])))
        if rest[0] in _GIT_SUBCOMMANDS:
            break
        rest = git_command(rest[1:], _GIT_OPTIONS_WITH_VALUE)
    return found


def _git(token: str, args: list[str], _depth: int) -> str | None:
    for subcommand, rest in _git_subcommands(args):
        reason = _git_reason(subcommand, rest)
        if reason is not None:
            return reason
    return None


def _git_reason(subcommand: str, rest: list[str]) -> str | None:
    short = short_flags(rest)
    if subcommand == "reset" and has_long(rest, "--hard", shortest=4):
        return (
            "`git reset --hard` throws away uncommitted changes and is denied. Use "
            "`git stash` to set changes aside, `git restore <file>` for one file, or "
            "`git reset --soft`/`--mixed` to move the branch and keep the work."
        )
    if subcommand == "push":
        forced = (
            "f" in short
            or has_long(rest, "--force", shortest=5)
            or has_long(rest, "--force-with-lease", shortest=5)
            or has_long(rest, "--mirror", shortest=4)
            or any(arg.startswith("+") for arg in rest)
        )
        if forced:
            return (
                "A forced `git push` (--force, -f, --force-with-lease, --mirror or a "
                "+refspec) rewrites history others may rely on and is denied. Push without "
                "force after integrating the remote changes (`git pull --rebase`), or ask "
                "the user to force-push."
            )
    if subcommand == "clean":
        # Without -f git normally refuses, but `-c clean.requireForce=false`
        # (or the repository's own configuration) makes it delete anyway:
        # only a dry run is certain to delete nothing.
        dry_run = "n" in short or has_long(rest, "--dry-run", shortest=3)
        if not dry_run:
            return (
                "`git clean` deletes untracked files permanently and is denied. See what "
                "it would remove with `git clean -n`, then delete specific files with "
                "`rm <file>`."
            )
    return None


def _elevate(token: str, _args: list[str], _depth: int) -> str | None:
    return (
        f"`{program_name(token)}` runs a command with elevated privileges and is denied. Run "
        f"the command without it (work inside the workspace as the current user), or ask "
        f"the user to run it."
    )


def _disk_reason(token: str) -> str:
    return (
        f"`{program_name(token)}` formats, partitions or overwrites disks or files beyond "
        f"recovery and is denied. Ask the user if this is really needed."
    )


def _disk(token: str, _args: list[str], _depth: int) -> str | None:
    return _disk_reason(token)


def _device_path(target: str) -> str:
    """`target` with the spellings that reach /dev another way undone.

    ``//dev/sda`` (POSIX keeps a leading double slash), ``/./dev/sda`` and
    ``/proc/self/root/dev/sda`` (any process's root is ``/``) all name
    ``/dev/sda``.
    """
    path = re.sub(r"/{2,}", "/", target)
    path = os.path.normpath(path) if path else path
    while True:
        stripped = re.sub(r"^/proc/[^/]+/(?:root|task/[^/]+/root)(?=/|$)", "", path)
        if stripped == path:
            break
        path = os.path.normpath("/" + stripped.lstrip("/"))
    return path


def _dd(token: str, args: list[str], _depth: int) -> str | None:
    for arg in args:
        target = arg.removeprefix("of=")
        if target == arg:
            continue
        path = _device_path(target)
        escapes = path.startswith("../") and "/dev/" in path
        if not (path.startswith("/dev/") or escapes):
            continue
        if path not in _HARMLESS_DEVICES and not path.startswith("/dev/fd/"):
            return (
                f"`dd {shorten(arg, 200)}` overwrites a device and is denied. Write to a "
                f"regular file in the workspace instead."
            )
    return None


def _is_system_path(arg: str) -> bool:
    """``/``, ``~`` or a path at most two levels below ``/`` (``/etc``, ``/usr/lib``)."""
    if arg.startswith("~"):
        return len(PurePosixPath(arg).parts) <= 1
    path = PurePosixPath(os.path.normpath(arg)) if arg.startswith("/") else None
    return path is not None and len(path.parts) <= 3


_SYMBOLIC_CLAUSE = re.compile(r"([ugoa]*)((?:[-+=][rwxXstugo]*)+)")


def _lets_others_write(mode: str) -> bool:
    """Whether a chmod mode gives others write access (``777``, ``1777``, ``o+w``, ``a+rwX``)."""
    if mode.isdigit():
        return len(mode) <= 5 and int(mode[-1]) & 2 == 2
    for clause in mode.split(","):
        match = _SYMBOLIC_CLAUSE.fullmatch(clause)
        if match is None:
            continue
        who, actions = match.groups()
        if who and not ({"o", "a"} & set(who)):
            continue
        for action in re.findall(r"[-+=][rwxXstugo]*", actions):
            # An empty `who` (`+w`) is masked by the umask, which normally
            # keeps others from writing; only an explicit o or a is certain.
            if action[0] in "+=" and "w" in action and who:
                return True
    return False


def _chmod(token: str, args: list[str], _depth: int) -> str | None:
    recursive = "R" in short_flags(args) or has_long(args, "--recursive", shortest=5)
    if not recursive:
        return None
    operands = [a for a in args if not a.startswith("-") or _SYMBOLIC_CLAUSE.fullmatch(a)]
    world_writable = token.endswith("chmod") and any(_lets_others_write(a) for a in operands[:1])
    if world_writable or any(_is_system_path(a) for a in operands):
        return (
            f"`{_shown(token, args)}` changes permissions or owners of a whole system "
            f"tree (or makes a tree writable by others) and is denied. Change the specific "
            f"files inside the workspace that need it."
        )
    return None


def _power(token: str, _args: list[str], _depth: int) -> str | None:
    return f"`{program_name(token)}` stops or restarts the machine and is denied."


@attrs.frozen
class _FirstWord:
    """Denies a program whose first plain word (a verb, a runlevel) is one of `words`."""

    words: frozenset[str]
    effect: str

    def __call__(self, token: str, args: list[str], _depth: int) -> str | None:
        plain = [a for a in args if not a.startswith("-")]
        if plain and plain[0] in self.words:
            return f"`{program_name(token)} {plain[0]}` {self.effect} and is denied."
        return None


_service_manager = _FirstWord(_POWER_VERBS, "stops, suspends or restarts the machine")
_init = _FirstWord(_RUNLEVELS, "halts, reboots or drops the machine to single-user mode")


_Checker = Callable[[str, list[str], int], "str | None"]
_CHECKERS: dict[str, _Checker] = {
    "rm": _rm,
    "git": _git,
    "dd": _dd,
    "chmod": _chmod,
    "chown": _chmod,
    "chgrp": _chmod,
    **dict.fromkeys(_ELEVATORS, _elevate),
    **dict.fromkeys(_DISK_TOOLS, _disk),
    **dict.fromkeys(_POWER, _power),
    "systemctl": _service_manager,
    "loginctl": _service_manager,
    "init": _init,
    "telinit": _init,
}

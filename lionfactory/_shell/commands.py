"""A script's commands as a policy sees them: every program it runs, normalized.

`lionfactory._shell.parse` cuts a script into simple commands with a real
shell grammar. This module reads each one the way the shell would run it and
is the one normalization every command policy shares (the permission rules
and `deny_destructive_commands` alike), so that no policy can be walked
around by a spelling another one understands:

* keywords and leading ``VAR=value`` assignments are skipped;
* wrappers that run another program are looked through: ``env`` (and the
  command line of ``env -S``), ``command``, ``builtin``, ``exec``, ``nice``,
  ``ionice``, ``timeout``, ``time``, ``nohup``, ``stdbuf``, ``setsid``,
  ``sudo``, ``doas``, ``xargs``, ``coproc``, ``flock``, ``watch``,
  ``chroot``, ``unbuffer``; each with the options of its own that take a
  value, so the value is not taken for the program;
* the commands of ``find -exec/-execdir/-ok/-okdir ... ;`` are commands too;
* the scripts a command runs are read in turn: ``sh|bash|... -c SCRIPT``
  (whatever options come first, ``--rcfile FILE`` and ``-o OPT`` included),
  a here-document or here-string fed to a shell given no ``-c``, and
  ``eval``'s joined arguments (after an ``eval --``);
* git's global options (``-C DIR``, ``-c k=v``, ``--git-dir``,
  ``--work-tree``, ``--no-pager``, ``-P``...) are skipped in the command's
  `Normalized.words`, so ``git -C . push`` reads ``git push``.

Line continuations and ANSI-C quoting inside words are resolved by the
parser. Scripts nest (``sh -c "sh -c '...'"``, a here-document fed to a
shell inside a here-document, substitutions inside substitutions); past
`MAX_NESTING` levels `ShellTooDeep` is raised, and every policy refuses
such a script instead of judging part of it.
"""

from __future__ import annotations

import collections
import functools
import os
import shlex
from collections.abc import Sequence

import attrs

from lionfactory._shell.parse import ShellSyntaxError
from lionfactory._shell.parse import simple_commands as parse_script

__all__ = [
    "GIT_VALUED",
    "MAX_NESTING",
    "SHELLS",
    "Command",
    "Normalized",
    "ShellTooDeep",
    "git_command",
    "normalized_commands",
    "parse_command",
    "program_name",
]

MAX_NESTING = 8
"""How deeply scripts may nest (inner shell scripts, here-documents run by a
shell, substitutions inside substitutions) before a policy refuses to judge.

Eight levels is far more than any script a person writes on purpose; the
bound keeps a crafted script from making a policy check work without end.
"""

# Everything the scripts of one command line may add up to before a policy
# gives up reading: one shell may be fed the same here-document many times
# over (`{ sh; sh; sh; } <<EOF`), and each copy may do the same inside.
_MAX_READ_CHARS = 1 << 20

# Words that may precede the real program of a simple command in a script.
_KEYWORDS = frozenset({"{", "}", "!", "if", "then", "do", "else", "elif", "while", "until"})

# Programs that run another program given as their remaining arguments, with
# the options of theirs that take a separate value (so the value is not taken
# for the program), and how many plain operands come before the program.
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    # env's options are read by `_env_option`, a cluster letter by letter.
    "env": (frozenset(), 0),
    "nohup": (frozenset(), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "--class", "-n", "--classdata"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "time": (frozenset({"-f", "--format", "-o", "--output"}), 0),
    "command": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "builtin": (frozenset(), 0),
    "coproc": (frozenset(), 0),
    "xargs": (
        frozenset(
            {"-a", "--arg-file", "-d", "--delimiter", "-E", "-I", "-L", "-n", "--max-args"}
            | {"-P", "--max-procs", "-s", "--max-chars", "--process-slot-var"}
        ),
        0,
    ),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "setsid": (frozenset(), 0),
    "unbuffer": (frozenset(), 0),
    "watch": (frozenset({"-n", "--interval"}), 0),
    "flock": (frozenset({"-w", "--timeout", "-E", "--conflict-exit-code"}), 1),
    "chroot": (frozenset({"--userspec", "--groups"}), 1),
    "sudo": (
        frozenset({"-u", "--user", "-g", "--group", "-C", "--close-from", "-D", "--chdir"})
        | frozenset({"-h", "--host", "-p", "--prompt", "-r", "--role", "-t", "--type"})
        | frozenset({"-T", "--command-timeout", "-U", "--other-user", "-R", "--chroot"}),
        0,
    ),
    "doas": (frozenset({"-u", "-C"}), 0),
}
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish"})
"""Programs that run a script given with ``-c`` or on their standard input."""

# Shell options that take the next word as their value: without knowing
# them, `bash --rcfile F -c '...'` would be read as running the file F.
_SHELL_VALUED = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})

# git's global options that take the next word as their value.
GIT_VALUED = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"}
    | {"--attr-source"}
)

_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
# `source FILE` reads a script from FILE: these name its standard input.
_STDIN_FILES = frozenset({("/dev/stdin",), ("/dev/fd/0",), ("/proc/self/fd/0",), ("-",)})


class ShellTooDeep(ShellSyntaxError):
    """A script nests scripts more deeply than `MAX_NESTING`, or is too much to read."""


@attrs.frozen
class Command:
    """One simple command, seen through its wrappers.

    Attributes:
        program: the program token as written (``/bin/rm``), or None when
            the command is only assignments or wrappers.
        args: the arguments after the program.
        scripts: inner command lines the command would run (``sh -c``, ``env -S``).
        wrappers: the base names of the wrappers looked through, outermost first.
    """

    program: str | None
    args: tuple[str, ...] = ()
    scripts: tuple[str, ...] = ()
    wrappers: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The program's base name (``rm`` for ``/bin/rm``), or ``""``."""
        return "" if self.program is None else program_name(self.program)


def program_name(token: str) -> str:
    """A program token's base name (``rm`` for ``/bin/rm``)."""
    return os.path.basename(token)


def _is_assignment(token: str) -> bool:
    name, equals, _ = token.partition("=")
    return bool(equals) and name.isidentifier()


def parse_command(argv: Sequence[str]) -> Command:
    """Look through keywords, assignments and wrappers to the program `argv` runs."""
    scripts: list[str] = []
    wrappers: list[str] = []
    last = -1  # where the last wrapper stands
    index = 0
    while index < len(argv):
        token = argv[index]
        name = program_name(token)
        if token in _KEYWORDS or _is_assignment(token):
            index += 1  # a keyword, or a VAR=value assignment before the program
            continue
        if name in _WRAPPERS:
            wrappers.append(name)
            last = index
            if name == "coproc":
                # `coproc NAME { ...; }` names the coprocess; a simple
                # command after coproc takes no name.
                named = index + 2 < len(argv) and argv[index + 2] in _KEYWORDS
                index += 2 if named else 1
            else:
                index, script = _skip_wrapper(argv, index, name)
                scripts.extend(() if script is None else (script,))
            continue
        args = tuple(argv[index + 1 :])
        if name in SHELLS:
            script = _shell_script(args)
            scripts.extend(() if script is None else (script,))
        return Command(token, args, tuple(scripts), tuple(wrappers))
    if last >= 0 and not scripts:
        # Wrappers and no program (`sudo -i`, `env`): the last wrapper is
        # what runs, and policies judge it as the program.
        return Command(argv[last], tuple(argv[last + 1 :]), (), tuple(wrappers[:-1]))
    return Command(None, (), tuple(scripts), tuple(wrappers))


def _skip_wrapper(argv: Sequence[str], index: int, name: str) -> tuple[int, str | None]:
    """The index of the program a wrapper at `index` runs, and the command line of ``env -S``."""
    with_value, operands = _WRAPPERS[name]
    index += 1
    while index < len(argv):
        token = argv[index]
        if token == "--":
            index += 1
            break
        option = token.startswith("-") and len(token) > 1
        if option and name == "env":
            index, script = _env_option(argv, index)
            if script is not None:
                # env -S splits its string into words and runs them followed by
                # the remaining arguments, which are no options of env's any
                # more: `env -S 'rm' -rf d` is `rm -rf d`.
                quoted = (shlex.quote(word) for word in argv[index:])
                return len(argv), " ".join([script, *quoted])
        elif option:
            index += 2 if token in with_value else 1
        elif name in ("env", "sudo") and _is_assignment(token):
            index += 1
        elif operands:
            operands -= 1
            index += 1
        else:
            break
    return index + operands, None


# GNU env's options: these take a value (attached in a cluster, or the next
# word); the rest are flags. Like env, parsing stops at the first word that
# is not an option, and a cluster such as ``-iS'rm -rf d'`` is read letter by
# letter, so ``-S`` hidden inside it is still found.
_ENV_VALUED = frozenset("uCS")
_ENV_LONG_VALUED = frozenset({"--unset", "--chdir", "--split-string"})


def _env_option(argv: Sequence[str], index: int) -> tuple[int, str | None]:
    """The index after the ``env`` option at `index` (and its value), and its ``-S`` string."""
    token = argv[index]
    if token.startswith("--"):
        name, equals, value = token.partition("=")
        if name == "--split-string" and equals:
            return index + 1, value
        if name in _ENV_LONG_VALUED and not equals:
            if name == "--split-string" and index + 1 < len(argv):
                return index + 2, argv[index + 1]
            return index + 2, None
        return index + 1, None
    for position, letter in enumerate(token[1:], start=2):
        if letter in _ENV_VALUED:
            value = token[position:]
            if not value and index + 1 < len(argv):
                index += 1
                value = argv[index]
            return index + 1, (value if letter == "S" else None)
    return index + 1, None


def _shell_script(rest: Sequence[str]) -> str | None:
    """The script of ``sh -c SCRIPT``, or None when the shell runs a file or reads stdin.

    Like bash, every option comes before the script, which is the first word
    that is not an option; options that take a value (``-o OPT``,
    ``--rcfile FILE``) take the word after them.
    """
    has_c = False
    index = 0
    while index < len(rest):
        token = rest[index]
        if token in _SHELL_VALUED:
            index += 2
            continue
        if token == "--":
            index += 1
            break
        if token.startswith(("-", "+")) and not token.startswith("--") and len(token) > 1:
            has_c = has_c or "c" in token[1:]
            index += 1
            continue
        if token.startswith("--"):
            index += 1
            continue
        break
    if has_c and index < len(rest):
        return rest[index]
    return None


@attrs.frozen
class Normalized:
    """One command a script runs, as every command policy sees it.

    Attributes:
        program: the program as written (``/usr/bin/git``), wrappers looked through.
        args: its arguments, as the program receives them.
        wrappers: the base names of the wrappers it was found behind (``sudo``...).
        depth: how deeply it is nested (0: a command of the script itself).
        written: the words of the command as written, wrappers included.
    """

    program: str
    args: tuple[str, ...]
    wrappers: tuple[str, ...] = ()
    depth: int = 0
    written: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The program's base name (``git`` for ``/usr/bin/git``)."""
        return program_name(self.program)

    @property
    def words(self) -> tuple[str, ...]:
        """The base name and the arguments; for git, without its global options."""
        if self.name == "git":
            return ("git", *git_command(self.args))
        return (self.name, *self.args)

    @property
    def text(self) -> str:
        """`words` joined by single spaces: what a rule's glob is matched against."""
        return " ".join(self.words)

    @property
    def forms(self) -> tuple[str, ...]:
        """Every spelling a rule's glob may be meant for, `text` first.

        `text`, then the program with every argument (git's global options
        kept: ``git -c k=v push``), then the words as written from the first
        wrapper on (``sudo rm -rf d``), each from the program's base name.
        """
        forms = [self.text, " ".join((self.name, *self.args))]
        written = list(self.written)
        while written and (written[0] in _KEYWORDS or _is_assignment(written[0])):
            written.pop(0)
        if written:
            forms.append(" ".join((program_name(written[0]), *written[1:])))
        return tuple(dict.fromkeys(forms))


def git_command(args: Sequence[str], valued: frozenset[str] = GIT_VALUED) -> tuple[str, ...]:
    """The arguments of git from the subcommand on: the global options before it skipped.

    Args:
        args: git's arguments (after the program).
        valued: the global options whose value is the next word.
    """
    index = 0
    while index < len(args):
        token = args[index]
        if token in valued:
            index += 2
        elif token.startswith("-"):
            index += 1
        else:
            break
    return tuple(args[index:])


def normalized_commands(script: str) -> tuple[Normalized, ...]:
    """Every command `script` runs, through wrappers and inner scripts, in reading order.

    Raises:
        ShellSyntaxError: the script, or a script it runs, does not parse.
        ShellTooDeep: scripts nest deeper than `MAX_NESTING` (or add up to
            more than a policy reads).
    """
    return _normalized(script)


@functools.lru_cache(maxsize=64)
def _normalized(script: str) -> tuple[Normalized, ...]:
    # Cached: the rules of a set, the destructive-command policy and their
    # re-check after the other pre hooks all read the same script of one call.
    found: list[Normalized] = []
    pending: collections.deque[tuple[str, int]] = collections.deque([(script, 0)])
    seen: set[str] = set()
    budget = _MAX_READ_CHARS
    while pending:
        text, depth = pending.popleft()
        if text in seen:
            continue  # the same script, read once already no deeper than here
        seen.add(text)
        budget -= len(text)
        if depth > MAX_NESTING or budget < 0:
            raise ShellTooDeep(_too_deep(depth > MAX_NESTING), 0)
        for simple in parse_script(text):
            level = depth + simple.nesting
            if level > MAX_NESTING:
                raise ShellTooDeep(_too_deep(True), 0)
            argvs: list[tuple[tuple[str, ...], int]] = [(simple.words, level)]
            while argvs:
                words, at = argvs.pop()
                command = parse_command(words)
                scripts = command.scripts
                if command.name in SHELLS and not scripts:
                    # A shell given no -c script runs what its stdin holds.
                    scripts = simple.stdin
                if command.name in ("source", ".") and command.args[:1] in _STDIN_FILES:
                    scripts = (*scripts, *simple.stdin)
                if command.name == "eval" and command.args:
                    # eval joins its arguments with spaces and runs the
                    # result; like any builtin it ends its options at `--`.
                    args = command.args[1:] if command.args[0] == "--" else command.args
                    scripts = (*scripts, " ".join(args))
                if command.program is not None:
                    found.append(
                        Normalized(command.program, command.args, command.wrappers, at, words)
                    )
                    if command.name == "find":
                        inner = _find_commands(command.args)
                        argvs.extend((argv, at + 1) for argv in reversed(inner))
                pending.extend((inner, at + 1) for inner in scripts)
    return tuple(found)


def _too_deep(nested: bool) -> str:
    if nested:
        return (
            f"the command nests scripts more than {MAX_NESTING} levels deep (shells inside "
            f"shells, here-documents run by a shell, substitutions inside substitutions), "
            f"too deep to be checked; run the inner command directly"
        )
    return (
        "the command runs more script text than can be checked (the same here-document "
        "fed to many shells); run the inner commands directly"
    )


def _find_commands(args: Sequence[str]) -> list[tuple[str, ...]]:
    """The commands of find's ``-exec``/``-execdir``/``-ok``/``-okdir`` actions."""
    commands: list[tuple[str, ...]] = []
    index = 0
    while index < len(args):
        if args[index] not in _FIND_EXEC:
            index += 1
            continue
        end = index + 1
        while end < len(args) and args[end] not in (";", "+"):
            end += 1
        if end > index + 1:
            commands.append(tuple(args[index + 1 : end]))
        index = end + 1
    return commands

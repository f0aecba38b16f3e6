"""Read a command line the way a POSIX shell would, for policy hooks.

Nothing here runs anything; the script itself is cut into simple commands by
the shell grammar of `lionfactory._shell_parse`. `parse_command` looks through keywords,
``VAR=value`` assignments and wrapper programs (``env``, ``timeout``,
``xargs``, ...) to the program that actually runs, and collects the inner
command lines it would run (``sh -c '...'``, ``env -S '...'``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence

import attrs

__all__ = [
    "Command",
    "has_long",
    "long_flags",
    "parse_command",
    "program_name",
    "short_flags",
]

# Words that may precede the real program of a simple command in a script.
_KEYWORDS = frozenset({"{", "}", "!", "if", "then", "do", "else", "elif", "while", "until"})

# Programs that run another program given as their remaining arguments, with
# the options of theirs that take a separate value (so the value is not taken
# for the program), and how many plain operands come before the program.
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "env": (frozenset({"-u", "--unset", "-C", "--chdir"}), 0),
    "nohup": (frozenset(), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "--class", "-n", "--classdata"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "time": (frozenset({"-f", "--format", "-o", "--output"}), 0),
    "command": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "builtin": (frozenset(), 0),
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
}
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish"})


@attrs.frozen
class Command:
    """One simple command, seen through its wrappers.

    Attributes:
        program: the program token as written (``/bin/rm``), or None when
            the command is only assignments or wrappers.
        args: the arguments after the program.
        scripts: inner command lines the command would run (``sh -c``, ``env -S``).
    """

    program: str | None
    args: tuple[str, ...] = ()
    scripts: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The program's base name (``rm`` for ``/bin/rm``), or ``""``."""
        return "" if self.program is None else program_name(self.program)


def program_name(token: str) -> str:
    return os.path.basename(token)


def _is_assignment(token: str) -> bool:
    name, equals, _ = token.partition("=")
    return bool(equals) and name.isidentifier()


def parse_command(argv: Sequence[str]) -> Command:
    """Look through keywords, assignments and wrappers to the program `argv` runs."""
    scripts: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        name = program_name(token)
        if token in _KEYWORDS or _is_assignment(token):
            index += 1  # a keyword, or a VAR=value assignment before the program
            continue
        if name in _WRAPPERS:
            if name == "env":
                index, script = _skip_env(argv, index)
                scripts.extend(() if script is None else (script,))
            else:
                index = _skip_wrapper(argv, index, name)
            continue
        args = tuple(argv[index + 1 :])
        if name in _SHELLS:
            script = _shell_script(args)
            scripts.extend(() if script is None else (script,))
        return Command(token, args, tuple(scripts))
    return Command(None, (), tuple(scripts))


def _skip_wrapper(argv: Sequence[str], index: int, name: str) -> int:
    """The index of the program a wrapper at `index` runs."""
    with_value, operands = _WRAPPERS[name]
    index += 1
    while index < len(argv):
        token = argv[index]
        if token == "--":
            index += 1
            break
        if token.startswith("-") and len(token) > 1:
            index += 2 if token in with_value else 1
        elif name == "env" and _is_assignment(token):
            index += 1
        elif operands:
            operands -= 1
            index += 1
        else:
            break
    return index + operands


# GNU env's options: these take a value (attached in a cluster, or the next
# word); the rest are flags. Like env, parsing stops at the first word that
# is not an option, and a cluster such as ``-iS'rm -rf d'`` is read letter by
# letter, so ``-S`` hidden inside it is still found.
_ENV_VALUED = frozenset("uCS")
_ENV_LONG_VALUED = frozenset({"--unset", "--chdir", "--split-string"})


def _skip_env(argv: Sequence[str], index: int) -> tuple[int, str | None]:
    """The index of the program ``env`` at `index` runs, and its ``-S`` command line."""
    script: str | None = None
    index += 1
    while index < len(argv):
        token = argv[index]
        if token == "--":
            index += 1
            break
        if token.startswith("--"):
            name, equals, value = token.partition("=")
            if name == "--split-string" and equals:
                script = value
            elif name in _ENV_LONG_VALUED and not equals:
                if name == "--split-string" and index + 1 < len(argv):
                    script = argv[index + 1]
                index += 1
            index += 1
            if script is not None:
                break
            continue
        if token.startswith("-") and len(token) > 1:
            for position, letter in enumerate(token[1:], start=2):
                if letter in _ENV_VALUED:
                    value = token[position:]
                    if not value and index + 1 < len(argv):
                        index += 1
                        value = argv[index]
                    if letter == "S":
                        script = value
                    break
            index += 1
            if script is not None:
                break  # everything after the split string belongs to its command
            continue
        if _is_assignment(token):
            index += 1
            continue
        break
    if script is not None:
        # env -S splits its string into words and runs them followed by the
        # remaining arguments: `env -S 'rm' -rf d` is `rm -rf d`.
        return len(argv), " ".join([script, *(shlex.quote(word) for word in argv[index:])])
    return index, script


def _shell_script(rest: Sequence[str]) -> str | None:
    """The script of ``sh -c SCRIPT``, or None when the shell runs a file or reads stdin."""
    has_c = False
    index = 0
    while index < len(rest):
        token = rest[index]
        if token in ("-o", "+o", "-O", "+O"):
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


def short_flags(args: Sequence[str]) -> set[str]:
    """The single-letter flags in clusters such as ``-rf`` (before any ``--``)."""
    flags: set[str] = set()
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            flags.update(arg[1:])
    return flags


def long_flags(args: Sequence[str]) -> list[str]:
    out = []
    for arg in args:
        if arg == "--":
            break
        if arg.startswith("--") and len(arg) > 2:
            out.append(arg.partition("=")[0])
    return out


def has_long(args: Sequence[str], option: str, *, shortest: int) -> bool:
    """Whether `option` is given, in full or abbreviated to at least `shortest` characters.

    GNU getopt and git both accept an unambiguous prefix (``--rec``, ``--forc``).
    """
    return any(len(flag) >= shortest and option.startswith(flag) for flag in long_flags(args))

"""Read a command's flags the way its program would, for policy hooks.

The commands themselves come from `lionfactory._shell.commands`, the one
normalization every command policy shares (wrappers looked through, inner
scripts read); this module only answers which flags a command was given.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["has_long", "long_flags", "short_flags"]


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

r"""Split a command line into words exactly as ``shlex.split`` does, in linear time.

``shlex`` builds each word one character at a time (``token = token + char``
on an attribute, which CPython cannot do in place), so a long word costs time
quadratic in its length: a 400,000-character command took seconds, all of it
on the event loop. This splitter takes whole runs of ordinary characters with
one regular expression and joins each word's pieces once, so the cost is
linear. It follows ``shlex.split(command)`` (POSIX mode, no comments) to the
character, a property the tests check against ``shlex`` on random input:

* words are separated by runs of space, tab, carriage return or newline;
* single quotes keep everything up to the next ``'``;
* inside double quotes a backslash escapes only ``"`` and ``\``, and is kept
  before any other character;
* outside quotes a backslash escapes any one character;
* ``''`` and ``""`` are empty words; an unclosed quote or a trailing
  backslash is a ``ValueError`` with shlex's message.
"""

from __future__ import annotations

import re

__all__ = ["leading_assignments", "split", "unquoted_operator"]

_PIECE = re.compile(
    r"""
    (?P<space>[ \t\r\n]+)
  | (?P<plain>[^ \t\r\n'"\\]+)
  | '(?P<single>[^']*)'
  | "(?P<double>(?:[^"\\]|\\.)*)"
  | \\(?P<escaped>.)
  | (?P<open>['"])
  | (?P<trailing>\\)
    """,
    re.VERBOSE | re.DOTALL,
)
_DOUBLE_ESCAPE = re.compile(r'\\(["\\])')
# An unclosed double quote whose text ends inside an escape: shlex reports
# the escape, not the quote.
_ENDS_IN_ESCAPE = re.compile(r'(?:[^"\\]|\\.)*\\', re.DOTALL)


# Longest first at one position, so "&&" is named rather than "&".
_OPERATOR = re.compile(r"&&|\|\||\$\(|[;|&<>`\n]")


def unquoted_operator(command: str) -> str | None:
    """The first shell operator outside quotes and escapes in `command`, or None.

    What counts as quoted is exactly what `split` keeps literal; after an
    unclosed quote everything is quoted. Linear, like `split`.
    """
    for match in _PIECE.finditer(command):
        kind = match.lastgroup
        if kind in ("plain", "space"):
            found = _OPERATOR.search(match.group(kind))
            if found is not None:
                return found.group()
        elif kind == "open":
            return None
    return None


def split(command: str) -> list[str]:
    """The words of `command`, identical to ``shlex.split(command)``.

    Raises:
        ValueError: an unclosed quote ("No closing quotation") or a trailing
            backslash ("No escaped character").
    """
    words: list[str] = []
    pieces: list[str] = []
    in_word = False
    for match in _PIECE.finditer(command):
        kind = match.lastgroup
        if kind == "space":
            if in_word:
                words.append("".join(pieces))
                pieces.clear()
                in_word = False
            continue
        if kind == "open":
            rest = command[match.end() :]
            if match.group(kind) == '"' and _ENDS_IN_ESCAPE.fullmatch(rest):
                raise ValueError("No escaped character")
            raise ValueError("No closing quotation")
        if kind == "trailing":
            raise ValueError("No escaped character")
        in_word = True
        text = match.group(kind or "")
        if kind == "double" and "\\" in text:
            text = _DOUBLE_ESCAPE.sub(r"\1", text)
        pieces.append(text)
    if in_word:
        words.append("".join(pieces))
    return words


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def leading_assignments(command: str) -> int:
    """How many of `command`'s first words are ``NAME=value`` assignments.

    A word counts when it starts with an unquoted ``NAME=`` (as in a shell:
    ``'A=b' cmd`` runs a program named ``A=b``); its value may be quoted.
    """
    count = 0
    start_of_word = True
    for match in _PIECE.finditer(command):
        kind = match.lastgroup
        if kind == "space":
            start_of_word = True
            continue
        if start_of_word:
            if kind != "plain" or not _ASSIGNMENT.match(match.group(kind)):
                return count
            count += 1
            start_of_word = False
    return count

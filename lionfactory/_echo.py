"""Quote model input in an error message without handing it back whole.

A model can send a 10 MB path, tool name or argument; an error that quotes it
verbatim costs that much context again (and a log line of that size). Every
error text that repeats something the model sent goes through `echo` (a
``repr``-style quote) or `shorten` (the text itself), which keep the first
`ECHO_LIMIT` characters and say how many more there were: enough to recognise
the value, never enough to flood a prompt.
"""

from __future__ import annotations

import reprlib

__all__ = ["ECHO_LIMIT", "echo", "shorten"]

ECHO_LIMIT = 200
"""Characters of model input an error message repeats; the rest is counted, not shown."""

_REPR = reprlib.Repr()
_REPR.maxstring = ECHO_LIMIT
_REPR.maxother = ECHO_LIMIT
_REPR.maxlevel = 4


def shorten(text: str, limit: int = ECHO_LIMIT) -> str:
    """`text` cut to `limit` characters, followed by how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit:,} more characters]"


def echo(value: object, limit: int = ECHO_LIMIT) -> str:
    """A ``repr``-style quote of `value` of about `limit` characters at most.

    Strings are cut before quoting, so a huge string is never copied whole;
    other values go through `reprlib` (bounded depth and width) and are cut
    after.
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        return f"{value[:limit]!r}...[{len(value) - limit:,} more characters]"
    try:
        text = _REPR.repr(value)
    except Exception:  # a hostile __repr__ must not turn an error into a crash
        text = f"<{type(value).__name__}>"
    return shorten(text, limit)

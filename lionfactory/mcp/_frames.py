"""Decoding one JSON-RPC frame of the stdio transport, whatever its nesting.

``json.loads`` recurses once per level of nesting, so a line of 100,000 ``[``
characters, or a well-formed ``tools/call`` whose arguments nest 5,000
levels, raises `RecursionError` instead of a `ValueError`. A stream server
that let that escape would end the connection for every later request, and
a malformed frame must cost only its own reply.

So `decode_frame` tries the C decoder first (fast, and what nearly every
frame gets), and only when it runs out of stack parses the text again with
`loads_iteratively`: the same grammar on an explicit stack, which builds
arbitrarily deep values without recursing. The deep value is then judged
where every tool call's arguments are judged (`Branch.act` refuses
arguments nesting deeper than its limit with a `ToolInputError` the model
can act on), so a client learns what was wrong with its call rather than
getting a bare parse error for valid JSON.

Rejected: raising the recursion limit around ``json.loads`` (the C decoder
would then overflow the C stack and crash the process instead), and
refusing deep frames outright (valid JSON that a tool's own validation
should explain).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, cast

__all__ = ["decode_frame", "loads_iteratively"]

# The C string scanner json.loads itself uses (no recursion: strings do not nest).
_scanstring = cast(
    "Callable[[str, int, bool], tuple[str, int]]",
    json.decoder.scanstring,  # type: ignore[attr-defined]
)
_SPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9]\d*))(\.\d+)?([eE][-+]?\d+)?")
_CONSTANTS: dict[str, Any] = {
    "null": None,
    "true": True,
    "false": False,
    "NaN": float("nan"),
    "Infinity": float("inf"),
    "-Infinity": float("-inf"),
}


def decode_frame(line: bytes) -> Any:
    """The JSON value of one frame.

    Raises:
        ValueError: the frame is not JSON (its text says where); never
            `RecursionError`, however deep the frame nests.
    """
    try:
        return json.loads(line)
    except RecursionError:
        pass
    # Decoded as json.loads decodes bytes (it succeeded at that before recursing).
    return loads_iteratively(line.decode(json.detect_encoding(line), "surrogatepass"))


def _fail(message: str, text: str, position: int) -> json.JSONDecodeError:
    return json.JSONDecodeError(message, text, position)


def _scalar(text: str, position: int) -> tuple[Any, int]:
    """A string, number or constant starting at `position`, and the position after it."""
    if text.startswith('"', position):
        return _scanstring(text, position + 1, True)
    for word, value in _CONSTANTS.items():
        if text.startswith(word, position):
            return value, position + len(word)
    number = _NUMBER.match(text, position)
    if number is None or number.end() == position:
        raise _fail("Expecting value", text, position)
    whole, fraction, exponent = number.groups()
    if fraction or exponent:
        return float(number.group()), number.end()
    return int(whole), number.end()  # ValueError past Python's digit limit, as json.loads


def _key(text: str, position: int) -> tuple[str, int]:
    """An object's key and its colon, starting at `position`; the position after the colon."""
    if not text.startswith('"', position):
        raise _fail("Expecting property name enclosed in double quotes", text, position)
    key, position = _scanstring(text, position + 1, True)
    position = _SPACE.match(text, position).end()  # type: ignore[union-attr]
    if not text.startswith(":", position):
        raise _fail("Expecting ':' delimiter", text, position)
    return key, _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]


def loads_iteratively(text: str) -> Any:
    """``json.loads(text)`` on an explicit stack: no recursion, any depth.

    Raises:
        json.JSONDecodeError: `text` is not one JSON value.
    """
    space = _SPACE.match
    # Open containers, innermost last, with the key an object's next value goes under.
    stack: list[tuple[dict[str, Any] | list[Any], str]] = []
    position = space(text, 0).end()  # type: ignore[union-attr]
    while True:
        # A value starts at `position`: open a container, or read a scalar.
        opener = text[position : position + 1]
        if opener in ("{", "["):
            position = space(text, position + 1).end()  # type: ignore[union-attr]
            closer = "}" if opener == "{" else "]"
            if text.startswith(closer, position):
                value: Any = {} if opener == "{" else []
                position += 1
            elif opener == "{":
                key, position = _key(text, position)
                stack.append(({}, key))
                continue
            else:
                stack.append(([], ""))
                continue
        else:
            value, position = _scalar(text, position)
        # A value is complete: put it in its container, closing containers as they end.
        while True:
            position = space(text, position).end()  # type: ignore[union-attr]
            if not stack:
                if position != len(text):
                    raise _fail("Extra data", text, position)
                return value
            container, key = stack[-1]
            if isinstance(container, dict):
                container[key] = value
            else:
                container.append(value)
            delimiter = text[position : position + 1]
            if delimiter == ",":
                position = space(text, position + 1).end()  # type: ignore[union-attr]
                if isinstance(container, dict):
                    key, position = _key(text, position)
                    stack[-1] = (container, key)
                break
            if delimiter == ("}" if isinstance(container, dict) else "]"):
                stack.pop()
                value, position = container, position + 1
                continue
            raise _fail("Expecting ',' delimiter", text, position)

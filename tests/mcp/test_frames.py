"""The stdio frame decoder: json.loads's answers, at any depth, without recursion."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lionfactory.mcp._frames import decode_frame, loads_iteratively

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=30,
)


@given(JSON_VALUES, st.sampled_from([None, 2]))
def test_the_iterative_parser_reads_what_json_loads_reads(
    value: object, indent: int | None
) -> None:
    text = json.dumps(value, indent=indent)
    assert loads_iteratively(text) == json.loads(text)


@pytest.mark.parametrize(
    "text", ["", "[1,]", '{"a"}', "[1 2]", '{"a":1,}', "nul", "[", "01", "1 2", "{1:2}", '"abc']
)
def test_the_iterative_parser_refuses_what_json_loads_refuses(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        loads_iteratively(text)


def test_a_frame_nested_100000_levels_is_decoded_without_recursion() -> None:
    value = decode_frame(b"[" * 100_000 + b"]" * 100_000)
    depth = 0
    while value:
        assert isinstance(value, list)
        value, depth = value[0], depth + 1
    assert depth == 99_999


def test_an_unclosed_deep_frame_is_a_value_error_not_a_recursion_error() -> None:
    with pytest.raises(ValueError, match="Expecting value"):
        decode_frame(b"[" * 100_000)


def test_a_frame_that_is_not_utf8_is_a_value_error() -> None:
    with pytest.raises(UnicodeDecodeError, match="utf-8"):
        decode_frame(b"[" * 5000 + b"\xff")


def test_a_deep_utf16_frame_is_decoded_as_json_loads_decodes_it() -> None:
    assert decode_frame(("[" * 2000 + '"\u00e9"' + "]" * 2000).encode("utf-16")) is not None

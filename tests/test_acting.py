"""`lionfactory._acting`: the fast JSON encoding of tool results matches json.dumps exactly."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lionfactory import Branch
from lionfactory._acting import encode_json, encode_json_string


def _reference(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def test_every_code_point_is_escaped_as_json_does() -> None:
    # Long enough for the fast path: each code point sits inside a 200-character string.
    for start in range(0, sys.maxunicode + 1, 4096):
        chars = "".join(chr(c) for c in range(start, min(start + 4096, sys.maxunicode + 1)))
        for i in range(0, len(chars), 64):
            text = "x" * 150 + chars[i : i + 64] + '"\\/\n\t\r\b\f\x00\x1f\x7f'
            assert encode_json_string(text) == json.dumps(text, ensure_ascii=False)


def test_a_lone_surrogate_is_encoded_as_json_does() -> None:
    text = "row\n" * 100 + "\ud800 end"
    assert encode_json_string(text) == json.dumps(text, ensure_ascii=False)
    assert encode_json({"content": text}) == _reference({"content": text})


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=300),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=20), json_values, max_size=8))
def test_a_response_mapping_encodes_like_json_dumps(value: dict[str, Any]) -> None:
    assert encode_json(value) == _reference(value)


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_any_other_value_encodes_like_json_dumps(value: Any) -> None:
    assert encode_json(value) == _reference(value)


def test_values_json_cannot_encode_go_through_default_str() -> None:
    value = {"path": object.__new__(type("P", (), {"__str__": lambda self: "p"})), 1: "k"}
    assert encode_json(value) == _reference(value)
    assert encode_json({"big": {1, 2}, "text": "y" * 500}) == _reference(
        {"big": {1, 2}, "text": "y" * 500}
    )


def test_non_string_keys_and_special_floats_match() -> None:
    for value in ({1: "a", "b": 2}, {"nan": math.nan, "inf": -math.inf}, {"t": (1, "x" * 200)}):
        assert encode_json(value) == _reference(value)


def test_a_circular_result_raises_like_json_dumps() -> None:
    value: dict[str, Any] = {"content": "x" * 200}
    value["self"] = value
    with pytest.raises(ValueError, match="Circular reference"):
        _reference(value)
    with pytest.raises(ValueError, match="Circular reference"):
        encode_json(value)


def test_an_integer_too_long_to_print_raises_like_json_dumps() -> None:
    value = {"n": 10 ** (sys.get_int_max_str_digits() + 10)}
    with pytest.raises(ValueError, match="integer string conversion"):
        _reference(value)
    with pytest.raises(ValueError, match="integer string conversion"):
        encode_json(value)


async def test_outcome_names_a_typed_failure_and_agrees_with_failed(tmp_path: Path) -> None:
    """A missing file is ``"failed"`` (a response that reports it), bad arguments ``"error"``."""
    from lionfactory.tools import reader_tool

    (tmp_path / "x.txt").write_text("x\n", encoding="utf-8")
    branch = Branch()
    branch.register(reader_tool, workspace_root=str(tmp_path))
    done = await branch.act("reader", {"action": "read", "path": "x.txt"})
    missing = await branch.act("reader", {"action": "read", "path": "nope.txt"})
    invalid = await branch.act("reader", {"action": "read", "path": "x.txt", "limit": "many"})
    assert (done.outcome, done.failed, done.ok) == ("done", False, True)
    assert (missing.outcome, missing.failed, missing.ok) == ("failed", True, True)
    assert (invalid.outcome, invalid.failed, invalid.ok) == ("error", True, False)


async def test_an_action_result_stays_frozen_and_a_call_leaves_no_context_behind() -> None:
    """`execute_call` enters the call (and an approval) without scope objects: both end with it."""
    import attrs

    from lionfactory import function_tool
    from lionfactory._approvals import approval_for
    from lionfactory._call import current_call

    seen: list[tuple[str | None, bool]] = []

    def hook(tool: str, arguments: dict[str, Any]) -> None:
        """Record the call context and whether this very call is approved (hooks see it)."""
        context = current_call()
        seen.append((None if context is None else context.tool, approval_for(tool, arguments)))

    async def probe(fail: bool) -> dict[str, Any]:
        """Raise if asked."""
        if fail:
            raise RuntimeError("boom")
        return {"success": True}

    branch = Branch()
    branch.register(attrs.evolve(function_tool(probe), pre=(hook,)))
    done = await branch.act("probe", {"fail": False})
    failed = await branch.act("probe", {"fail": True})
    approved = await branch._act("probe", {"fail": False}, None, approved=True)
    assert (done.outcome, failed.outcome, approved.outcome) == ("done", "error", "done")
    assert failed.error_type == "RuntimeError"
    assert seen == [("probe", False), ("probe", False), ("probe", True)]
    assert current_call() is None
    assert not approval_for("probe", {"fail": False})
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        done.error = "changed"  # type: ignore[misc]
    assert done == attrs.evolve(done)

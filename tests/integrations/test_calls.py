"""What every adapter is given: a branch, a tool, or a list of unbound tools with unique names."""

from __future__ import annotations

import pytest

from lionfactory import Branch, function_tool
from lionfactory.integrations._calls import model_view, tool_source
from lionfactory.tools import context_tool


def shout(text: str) -> str:
    """Upper-case text."""
    return text.upper()


def test_a_branch_is_live_and_a_list_is_fixed():
    branch = Branch()
    live = tool_source(branch)
    fixed = tool_source([function_tool(shout)])
    branch.register(function_tool(shout))
    assert list(live.tools) == ["shout"]
    assert list(fixed.tools) == ["shout"]
    assert fixed.branch is None


@pytest.mark.parametrize("bad", ["reader", 42, [function_tool(shout), "x"], None])
def test_anything_else_is_a_type_error(bad):
    with pytest.raises(TypeError, match="expected a Branch, a Tool or a list of Tools"):
        tool_source(bad)


def test_duplicate_names_are_refused():
    with pytest.raises(ValueError, match="two tools are named 'shout'"):
        tool_source([function_tool(shout), function_tool(shout)])


def test_a_tool_bound_to_a_branch_must_come_with_its_branch():
    branch = Branch()
    with pytest.raises(ValueError, match="pass that Branch to the adapter"):
        tool_source(context_tool(branch))


async def test_a_fixed_list_runs_calls_with_the_same_error_payload_as_a_branch():
    fixed = tool_source(function_tool(shout))
    ok = await fixed.call("shout", {"text": "hi"}, call_id="c1")
    assert ok.call_id == "c1"
    assert model_view(ok) == {"result": "HI"}
    bad = await fixed.call("shout", {"txt": "hi"})
    via_branch = Branch()
    via_branch.register(function_tool(shout))
    same = await via_branch.act("shout", {"txt": "hi"})
    assert model_view(bad) == model_view(same)
    assert model_view(bad)["error_type"] == "ToolInputError"

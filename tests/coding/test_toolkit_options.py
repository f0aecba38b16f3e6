"""Each toolkit rule written once: the sub-agent options, the default tools, the hook runner."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from lionfactory import Branch
from lionfactory._catalogue import WORKSPACE_TOOLS
from lionfactory.coding import ALL_CODING_TOOLS, DEFAULT_CODING_TOOLS, coding_toolkit
from lionfactory.coding._toolkit import NOT_FOR_SUBAGENTS, SUBAGENT_OPTIONS


def _keyword_options() -> set[str]:
    return {
        p.name
        for p in inspect.signature(coding_toolkit).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }


def test_every_toolkit_option_reaches_subagents_or_is_excluded_with_a_reason():
    options = _keyword_options()
    assert set(SUBAGENT_OPTIONS) | set(NOT_FOR_SUBAGENTS) == options
    assert not set(SUBAGENT_OPTIONS) & set(NOT_FOR_SUBAGENTS)
    assert all(reason.strip() for reason in NOT_FOR_SUBAGENTS.values())


def test_the_subagent_tool_is_given_every_passed_option_as_the_parent_got_it(workspace: Path):
    branch = Branch()
    hooks = {"reader": {"pre": [lambda name, args: None]}}
    tools = coding_toolkit(
        branch,
        workspace_root=workspace,
        tools=["reader", "subagent"],
        hooks=hooks,
        notify_threshold=0.5,
        mode="ask_edits",
        isolation="none",
    )
    [subagent] = [t for t in tools if t.name == "subagent"]
    passed = subagent.handler.factory_kwargs
    assert set(passed) == set(SUBAGENT_OPTIONS)
    assert passed["hooks"] is hooks
    assert passed["notify_threshold"] == 0.5
    assert passed["mode"] == "ask_edits"
    # The parent's resolved isolation, not the string it was given.
    assert not isinstance(passed["isolation"], str)


def test_the_defaults_are_todays_workspace_tools_and_context_never_the_opt_ins():
    assert set(DEFAULT_CODING_TOOLS) <= set(ALL_CODING_TOOLS)
    assert set(DEFAULT_CODING_TOOLS) >= {*WORKSPACE_TOOLS, "context"} - {"jobs"}
    assert not {"sandbox", "subagent", "jobs"} & set(DEFAULT_CODING_TOOLS)


async def test_a_security_hook_returning_a_non_dict_is_a_type_error(workspace: Path):
    (workspace / "a.txt").write_text("a\n")
    [reader] = coding_toolkit(
        Branch(),
        workspace_root=workspace,
        tools=["reader"],
        hooks={"reader": {"security": lambda n, a: None, "pre": lambda n, a: None}},
    )
    ok = await reader(action="read", path="a.txt")
    assert ok["success"] is True
    [bad] = coding_toolkit(
        Branch(),
        workspace_root=workspace,
        tools=["reader"],
        hooks={
            "reader": {
                "security": lambda n, a: (n, a) if a.get("x") else None,
                "pre": lambda n, a: {**a, "x": 1},
            }
        },
    )
    with pytest.raises(TypeError, match=r"security hook .* must return a dict or None, got tuple"):
        await bad(action="read", path="a.txt")

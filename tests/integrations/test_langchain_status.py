"""LangChain's own ToolNode sees ``status="error"`` whenever the tool says its call failed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from lionfactory import Branch
from lionfactory.coding import coding_toolkit
from lionfactory.integrations.langchain import langchain_tools


def run_node(branch: Branch, calls: list[dict[str, object]]) -> dict[str, ToolMessage]:
    """One turn of a LangGraph agent: the scripted reply's calls run by the prebuilt ToolNode."""
    replies = iter([AIMessage(content="", tool_calls=calls), AIMessage(content="finished")])
    model = GenericFakeChatModel(messages=replies)

    async def agent(state: MessagesState) -> dict[str, object]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(langchain_tools(branch)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    out = asyncio.run(builder.compile().ainvoke({"messages": [HumanMessage("go")]}))
    return {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}


@pytest.mark.parametrize(
    ("call", "status"),
    [
        ({"name": "reader", "args": {"action": "read", "path": "x.txt"}}, "success"),
        ({"name": "reader", "args": {"action": "read", "path": "missing.txt"}}, "error"),
        ({"name": "bash", "args": {"command": "false"}}, "error"),
        (
            {
                "name": "editor",
                "args": {
                    "action": "edit",
                    "file_path": "x.txt",
                    "old_string": "absent",
                    "new_string": "y",
                },
            },
            "error",
        ),
    ],
)
def test_the_status_follows_the_tools_own_judgement(
    tmp_path: Path, call: dict[str, object], status: str
) -> None:
    (tmp_path / "x.txt").write_text("hello\n", encoding="utf-8")
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=tmp_path)
    if call["name"] == "editor":
        asyncio.run(branch.act("reader", {"action": "read", "path": "x.txt"}))
    (message,) = run_node(branch, [{**call, "id": "c1"}]).values()
    assert message.status == status, message.content


def test_a_tools_own_failure_predicate_is_what_sets_the_status() -> None:
    """A result the default rule calls a success, but the tool itself calls a failure."""
    import attrs

    from lionfactory import function_tool

    def lookup(key: str) -> dict[str, object]:
        """Look a key up."""
        return {"key": key, "found": key == "known"}

    tool = attrs.evolve(function_tool(lookup), failed=lambda result: not result.get("found"))
    branch = Branch()
    branch.register(tool)
    calls = [
        {"name": "lookup", "args": {"key": "known"}, "id": "hit"},
        {"name": "lookup", "args": {"key": "other"}, "id": "miss"},
    ]
    answered = run_node(branch, calls)
    assert answered["hit"].status == "success"
    assert answered["miss"].status == "error", answered["miss"].content

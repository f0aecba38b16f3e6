"""LangGraph's own graph (a chat node, the prebuilt ToolNode, a checkpointer) pausing on approvals.

The held call surfaces as LangGraph's ``interrupt()``; resuming the graph
with ``Command(resume=...)`` carries out the decision. The model is
LangChain's ``GenericFakeChatModel`` playing scripted ``AIMessage``s.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from lionfactory import Branch, function_tool
from lionfactory.errors import ApprovalRequired
from lionfactory.integrations.langchain import langchain_tools


def deploy_branch(ran: list[str]) -> Branch:
    def deploy(target: str) -> str:
        """Deploy to a target."""
        ran.append(target)
        return f"deployed {target}"

    def ask_for_prod(tool: str, arguments: dict[str, Any]) -> None:
        if arguments.get("target") != "staging":
            raise ApprovalRequired("deploys to production")

    branch = Branch()
    branch.register(function_tool(deploy).with_hooks(pre=[ask_for_prod]))
    return branch


def graph_for(branch: Branch, calls: list[dict[str, Any]]) -> Any:
    replies = iter([AIMessage(content="", tool_calls=calls), AIMessage(content="finished")])
    model = GenericFakeChatModel(messages=replies)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(langchain_tools(branch)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver())


CONFIG = {"configurable": {"thread_id": "t1"}}
PROD = {"name": "deploy", "args": {"target": "prod"}, "id": "lg-prod"}
STAGING = {"name": "deploy", "args": {"target": "staging"}, "id": "lg-staging"}


def answers(state: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}


async def paused_graph(ran: list[str]) -> tuple[Branch, Any, dict[str, Any]]:
    branch = deploy_branch(ran)
    graph = graph_for(branch, [STAGING, PROD])
    state = await graph.ainvoke({"messages": [HumanMessage("deploy")]}, CONFIG)
    return branch, graph, state


def test_a_held_call_interrupts_the_graph_and_approval_runs_it_once() -> None:
    async def scenario() -> None:
        ran: list[str] = []
        branch, graph, state = await paused_graph(ran)
        (asked,) = state["__interrupt__"]
        assert asked.value["call_id"] == "lg-prod"
        assert asked.value["reason"] == "deploys to production"
        # ToolNode runs a reply's calls concurrently; the held call waits for
        # the others to finish (and be recorded) before it pauses the graph.
        assert ran == ["staging"]
        state = await graph.ainvoke(Command(resume=True), CONFIG)
        # The node ran again on resume; the staging call was answered from the record.
        assert ran == ["staging", "prod"]
        assert state["messages"][-1].content == "finished"
        got = answers(state)
        assert json.loads(got["lg-prod"].content) == {"result": "deployed prod"}
        assert got["lg-prod"].status == "success"
        assert branch.pending_calls == ()

    asyncio.run(scenario())


def test_a_denial_resume_answers_the_model_with_the_reason() -> None:
    async def scenario() -> None:
        ran: list[str] = []
        branch, graph, _ = await paused_graph(ran)
        resume = {"decision": "deny", "reason": "change freeze"}
        state = await graph.ainvoke(Command(resume=resume), CONFIG)
        assert ran == ["staging"]
        assert json.loads(answers(state)["lg-staging"].content) == {"result": "deployed staging"}
        denied = answers(state)["lg-prod"]
        assert denied.status == "error" and "change freeze" in denied.content
        assert branch.pending_calls == ()

    asyncio.run(scenario())


def test_approving_with_edited_arguments_runs_those() -> None:
    async def scenario() -> None:
        ran: list[str] = []
        _, graph, _ = await paused_graph(ran)
        resume = {"decision": "approve", "arguments": {"target": "canary"}}
        await graph.ainvoke(Command(resume=resume), CONFIG)
        assert ran == ["staging", "canary"]

    asyncio.run(scenario())


def test_outside_a_graph_the_held_call_is_answered_and_decided_on_the_branch() -> None:
    ran: list[str] = []
    branch = deploy_branch(ran)
    (tool,) = langchain_tools(branch)
    call = {"type": "tool_call", **PROD}
    first = asyncio.run(tool.ainvoke(call))
    assert first.status == "error" and json.loads(first.content)["status"] == "awaiting_approval"
    again = asyncio.run(tool.ainvoke(call))
    assert json.loads(again.content)["status"] == "awaiting_approval" and ran == []
    branch.approve("lg-prod")
    done = asyncio.run(tool.ainvoke(call))
    assert done.status == "success" and ran == ["prod"]


def test_two_calls_sharing_one_id_are_held_apart_and_each_runs_as_itself() -> None:
    """A host that repeats an id: the branch holds both, and each runs with its own arguments."""
    ran: list[str] = []
    branch = deploy_branch(ran)
    (tool,) = langchain_tools(branch)
    prod = {"type": "tool_call", "name": "deploy", "args": {"target": "prod"}, "id": "dup"}
    stage = {"type": "tool_call", "name": "deploy", "args": {"target": "stage"}, "id": "dup"}
    asyncio.run(tool.ainvoke(prod))
    asyncio.run(tool.ainvoke(stage))
    held = branch.pending_calls
    assert [p.arguments["target"] for p in held] == ["prod", "stage"]
    assert len({p.id for p in held}) == 2
    branch.approve(held[1].id)
    done = asyncio.run(tool.ainvoke(stage))
    assert done.status == "success" and ran == ["stage"]
    still = asyncio.run(tool.ainvoke(prod))
    assert json.loads(still.content)["status"] == "awaiting_approval" and ran == ["stage"]

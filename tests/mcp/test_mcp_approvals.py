"""`ask_person`: a held call asked about through elicitation, or refused with a clear error."""

from __future__ import annotations

from typing import Any

import pytest

from lionfactory import Branch, function_tool
from lionfactory.errors import ApprovalRequired
from lionfactory.mcp._approvals import APPROVAL_SCHEMA, ask_person
from lionfactory.mcp._protocol import call_result

RAN: list[str] = []


def deploy(target: str) -> str:
    """Deploy."""
    RAN.append(target)
    return f"deployed {target}"


def ask(tool: str, arguments: dict[str, Any]) -> None:
    raise ApprovalRequired("deploys to production")


async def held() -> tuple[Branch, Any]:
    RAN.clear()
    branch = Branch()
    branch.register(function_tool(deploy).with_hooks(pre=[ask]))
    return branch, await branch.act("deploy", {"target": "prod"}, call_id="m1")


def answering(action: str, content: dict[str, Any] | None, asked: list[Any]):
    async def elicit(message: str, schema: dict[str, Any]):
        asked.append((message, schema))
        return action, content

    return elicit


async def test_without_elicitation_the_result_says_a_person_must_approve() -> None:
    branch, action = await held()
    result = await ask_person(branch, action, None)
    wire = call_result(result, None)
    assert wire["isError"] is True
    assert "A person must approve" in wire["content"][0]["text"]
    assert RAN == [] and [p.id for p in branch.pending_calls] == ["m1"]


async def test_an_accepted_elicitation_runs_the_call_once() -> None:
    branch, action = await held()
    asked: list[Any] = []
    result = await ask_person(branch, action, answering("accept", {"approve": True}, asked))
    assert result.outcome == "done" and RAN == ["prod"]
    ((message, schema),) = asked
    assert "deploys to production" in message and schema == APPROVAL_SCHEMA
    assert branch.pending_calls == ()
    assert call_result(result, None)["isError"] is False


async def test_a_declined_elicitation_denies_with_the_persons_reason() -> None:
    branch, action = await held()
    answer = answering("accept", {"approve": False, "reason": "not on Fridays"}, [])
    result = await ask_person(branch, action, answer)
    assert RAN == [] and "not on Fridays" in str(result.error)
    assert branch.pending_calls == ()


async def test_a_dismissed_or_failed_elicitation_keeps_the_call_pending() -> None:
    branch, action = await held()
    result = await ask_person(branch, action, answering("cancel", None, []))
    assert result.error_type == "ApprovalPending" and RAN == []

    async def broken(message: str, schema: dict[str, Any]):
        raise RuntimeError("no back channel")

    result = await ask_person(branch, action, broken)
    assert result.error_type == "ApprovalPending"
    assert [p.id for p in branch.pending_calls] == ["m1"]


def sdk_server(branch: Branch) -> Any:
    """A minimal SDK server whose tools/call is wired as the lionfactory server's should be."""
    from mcp import types
    from mcp.server.lowlevel import Server

    from lionfactory.mcp._approvals import client_elicitation

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult.model_validate(
            {"tools": [t.schema("mcp") for t in branch.tools.values()]}
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        action = await branch.act(params.name, params.arguments or {}, call_id="m1")
        action = await ask_person(branch, action, client_elicitation(ctx))
        return types.CallToolResult.model_validate(call_result(action, None))

    return Server("approvals", on_list_tools=list_tools, on_call_tool=call_tool)


async def test_the_official_client_answers_the_elicitation_and_the_call_runs_once() -> None:
    # The handshake protocols carry elicitation/create as a server-to-client request.
    from mcp import Client, types

    branch, _ = await held()
    branch.deny("m1", "reset")  # start from a fresh held call below
    await branch.settle()
    RAN.clear()
    questions: list[str] = []

    async def approve(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        questions.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with Client(sdk_server(branch), mode="legacy", elicitation_callback=approve) as client:
        result = await client.call_tool("deploy", {"target": "prod"})
    assert not result.is_error, result
    assert RAN == ["prod"] and len(questions) == 1 and "deploys to production" in questions[0]
    assert branch.pending_calls == ()


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_that_cannot_be_asked_gets_an_error_and_the_call_stays_pending(
    mode: str,
) -> None:
    # No elicitation callback (legacy), or the 2026-07-28 protocol, which has no
    # server-to-client requests: the call is refused with the must-approve text.
    from mcp import Client, types

    async def approve(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approve": True})

    callback = approve if mode == "auto" else None

    branch, _ = await held()
    branch.deny("m1", "reset")
    await branch.settle()
    RAN.clear()
    async with Client(sdk_server(branch), mode=mode, elicitation_callback=callback) as client:
        result = await client.call_tool("deploy", {"target": "prod"})
    assert result.is_error and "A person must approve" in result.content[0].text
    assert RAN == [] and [p.id for p in branch.pending_calls] == ["m1"]


def deploy_tools() -> Any:
    return function_tool(deploy).with_hooks(pre=[ask])


@pytest.mark.parametrize("answer", ["approve", "none"])
async def test_lionfactorys_own_server_asks_a_client_that_can_be_asked(answer: str) -> None:
    """`create_mcp_server`: elicitation when the client declared it, else the must-approve text."""
    from mcp import Client, types

    from lionfactory.mcp import create_mcp_server

    RAN.clear()
    questions: list[str] = []

    async def approve(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        questions.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    callback = approve if answer == "approve" else None
    server = create_mcp_server(deploy_tools)
    async with Client(server, mode="legacy", elicitation_callback=callback) as client:
        result = await client.call_tool("deploy", {"target": "prod"})
        if answer == "approve":
            assert not result.is_error, result
            assert RAN == ["prod"] and len(questions) == 1
        else:
            assert result.is_error and RAN == []
            said = " ".join(getattr(block, "text", "") for block in result.content)
            assert "approv" in said.lower(), said

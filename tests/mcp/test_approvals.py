"""`ask_person`: a held call asked about through elicitation, or refused with a clear error."""

from __future__ import annotations

from typing import Any

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

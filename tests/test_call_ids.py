"""Call ids are unique per reply: an approval names exactly one call."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lionfactory import Branch, ModelReply, ToolCall, function_tool
from lionfactory.errors import ApprovalPending, ApprovalRequired
from lionfactory.testing import ScriptedModel

RAN: list[str] = []


def deploy(target: str) -> str:
    """Deploy to a target."""
    RAN.append(target)
    return f"deployed to {target}"


def ask_always(tool: str, arguments: dict[str, Any]) -> None:
    raise ApprovalRequired(f"deploys to {arguments.get('target')}")


def branch_with(reply: ModelReply) -> Branch:
    RAN.clear()
    branch = Branch("You ship.", chat_model=ScriptedModel([reply, "shipped"]))
    branch.register(function_tool(deploy).with_hooks(pre=[ask_always]))
    return branch


def twin(call_id: str) -> ModelReply:
    return ModelReply(
        tool_calls=(
            ToolCall(id=call_id, name="deploy", arguments={"target": "staging"}),
            ToolCall(id=call_id, name="deploy", arguments={"target": "production"}),
        )
    )


async def test_two_calls_with_one_id_are_both_held_under_distinct_ids() -> None:
    branch = branch_with(twin("dup"))
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("ship")
    ids = [c.id for c in paused.value.calls]
    assert ids == ["dup", "dup-2"]
    assert branch.pending_calls == paused.value.calls
    (assistant,) = [m for m in branch.messages if m.role == "assistant"]
    assert [c.id for c in assistant.tool_calls] == ids
    assert assistant.metadata["provider_call_ids"] == {"dup-2": "dup"}


async def test_approving_the_first_of_two_twin_ids_runs_exactly_that_call() -> None:
    """The attack: ``approve(calls[0].id)`` then ``resume()`` ran the other call."""
    branch = branch_with(twin("dup"))
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("ship")
    first, second = paused.value.calls
    branch.approve(first.id)
    with pytest.raises(ApprovalPending) as still:
        await branch.resume()
    assert RAN == ["staging"]
    assert still.value.calls == (second,) and branch.pending_calls == (second,)
    answers = {m.call_id: json.loads(m.content) for m in branch.messages if m.role == "tool"}
    assert answers == {"dup": {"result": "deployed to staging"}}


async def test_empty_ids_get_ids_of_their_own() -> None:
    branch = branch_with(twin(""))
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("ship")
    ids = [c.id for c in paused.value.calls]
    assert all(ids) and len(set(ids)) == 2
    assert [c.id for c in branch.pending_calls] == ids


async def test_an_id_reused_by_a_later_reply_is_renamed_too() -> None:
    RAN.clear()
    again = ModelReply(tool_calls=(ToolCall(id="c1", name="deploy", arguments={"target": "b"}),))
    first = ModelReply(tool_calls=(ToolCall(id="c1", name="deploy", arguments={"target": "a"}),))
    branch = Branch("You ship.", chat_model=ScriptedModel([first, again, "done"]))
    branch.register(function_tool(deploy))
    assert await branch.run("ship") == "done"
    calls = [c.id for m in branch.messages if m.role == "assistant" for c in m.tool_calls]
    assert calls == ["c1", "c1-2"] and RAN == ["a", "b"]


async def test_act_with_the_id_of_a_held_call_does_not_replace_it() -> None:
    branch = branch_with(twin("x"))
    first = await branch.act("deploy", {"target": "a"}, call_id="same")
    second = await branch.act("deploy", {"target": "b"}, call_id="same")
    assert first.pending is not None and second.pending is not None
    assert [p.arguments["target"] for p in branch.pending_calls] == ["a", "b"]
    assert len({p.id for p in branch.pending_calls}) == 2

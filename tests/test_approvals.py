"""Ask, pause, resume: a hook asks, the loop pauses, a person decides, the call runs once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lionfactory import Branch, PendingCall, Tool, function_tool
from lionfactory.errors import (
    ApprovalPending,
    ApprovalRequired,
    ConfigurationError,
    LionfactoryError,
    ToolDenied,
)
from lionfactory.testing import ScriptedModel, tool_call

RAN: list[dict[str, Any]] = []


def deploy(target: str) -> str:
    """Deploy to a target."""
    RAN.append({"target": target})
    return f"deployed {target}"


def add(a: int, b: int = 0) -> int:
    """Add two numbers."""
    return a + b


def ask_for_prod(tool: str, arguments: dict[str, Any]) -> None:
    if arguments.get("target") == "prod":
        raise ApprovalRequired("deploys to production")


def refuse_moon(tool: str, arguments: dict[str, Any]) -> None:
    if arguments.get("target") == "moon":
        raise ToolDenied("no deploys to the moon")


def deploy_tool() -> Tool:
    return function_tool(deploy).with_hooks(pre=[refuse_moon, ask_for_prod])


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


def tool_messages(branch: Branch) -> dict[str, dict[str, Any]]:
    return {m.call_id: json.loads(m.content) for m in branch.messages if m.role == "tool"}


def test_the_approval_errors_are_lionfactory_errors() -> None:
    assert issubclass(ApprovalRequired, LionfactoryError)
    assert issubclass(ApprovalPending, LionfactoryError)
    import lionfactory.errors

    tree = lionfactory.errors.__doc__ or ""
    assert "ApprovalPending" in tree and "TurnLimitReached" in tree


async def test_a_hook_that_asks_holds_the_call_as_pending() -> None:
    branch = Branch()
    branch.register(deploy_tool())
    result = await branch.act("deploy", {"target": "prod"}, call_id="c1")
    assert result.outcome == "pending" and not result.ok and result.error is None
    assert RAN == []
    (pending,) = branch.pending_calls
    assert (pending.id, pending.tool, pending.arguments) == ("c1", "deploy", {"target": "prod"})
    assert pending.reason == "deploys to production"
    assert pending.hook.endswith("ask_for_prod")
    assert pending.decision == "undecided"
    # No tool message yet: the call has no result until it is decided.
    assert tool_messages(branch) == {}


async def test_a_call_no_hook_asks_about_runs_as_before() -> None:
    branch = Branch()
    branch.register(deploy_tool())
    result = await branch.act("deploy", {"target": "staging"})
    assert result.outcome == "done" and RAN == [{"target": "staging"}]
    assert branch.pending_calls == ()


async def test_outside_a_branch_the_ask_is_raised_with_the_tool_and_hook_filled_in() -> None:
    with pytest.raises(ApprovalRequired, match="needs a person's approval") as raised:
        await deploy_tool()(target="prod")
    assert raised.value.tool == "deploy" and raised.value.hook.endswith("ask_for_prod")


async def test_run_pauses_after_running_the_other_calls_of_the_reply() -> None:
    model = ScriptedModel(
        [[tool_call("deploy", target="staging"), tool_call("deploy", target="prod")], "done"]
    )
    branch = Branch(chat_model=model)
    branch.register(deploy_tool())
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("ship it")
    assert [c.arguments for c in paused.value.calls] == [{"target": "prod"}]
    assert RAN == [{"target": "staging"}]
    # Nothing was sent to the model after the reply that asked.
    assert len(model.calls) == 1
    assert [c.id for c in branch.pending_calls] == [paused.value.calls[0].id]


async def test_approve_then_resume_runs_the_call_once_and_continues_the_loop() -> None:
    model = ScriptedModel([tool_call("deploy", target="prod"), "shipped"])
    branch = Branch(chat_model=model)
    branch.register(deploy_tool())
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("ship it")
    call_id = paused.value.calls[0].id
    branch.approve(call_id)
    assert await branch.resume() == "shipped"
    assert RAN == [{"target": "prod"}]
    assert tool_messages(branch)[call_id] == {"result": "deployed prod"}
    # The model saw the call's result on the turn after resuming.
    assert model.calls[1].messages[-1].call_id == call_id
    assert branch.pending_calls == ()
    with pytest.raises(ConfigurationError, match="nothing to resume"):
        await branch.resume()
    assert RAN == [{"target": "prod"}]


async def test_deny_gives_the_model_the_reason_as_the_call_result() -> None:
    model = ScriptedModel([tool_call("deploy", target="prod"), "ok, not deploying"])
    branch = Branch(chat_model=model)
    branch.register(deploy_tool())
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("ship it")
    call_id = paused.value.calls[0].id
    branch.deny(call_id, "freeze until Monday")
    assert await branch.resume() == "ok, not deploying"
    assert RAN == []
    seen = tool_messages(branch)[call_id]
    assert seen["error_type"] == "ToolDenied" and "freeze until Monday" in seen["error"]


async def test_deny_needs_a_reason_and_decisions_need_a_pending_call() -> None:
    branch = Branch()
    branch.register(deploy_tool())
    await branch.act("deploy", {"target": "prod"}, call_id="c1")
    with pytest.raises(ValueError, match="reason"):
        branch.deny("c1", " ")
    with pytest.raises(KeyError, match="no pending call 'nope'"):
        branch.approve("nope")


async def test_edited_arguments_run_and_are_judged_by_the_hooks_again() -> None:
    branch = Branch(chat_model=ScriptedModel([tool_call("deploy", target="prod"), "a", "b"]))
    branch.register(deploy_tool())
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("ship")
    call_id = paused.value.calls[0].id
    branch.approve(call_id, arguments={"target": "moon"})
    await branch.resume()
    assert RAN == []
    seen = tool_messages(branch)[call_id]
    assert seen["error_type"] == "ToolDenied" and "moon" in seen["error"]


async def test_edited_arguments_that_pass_the_hooks_are_the_ones_that_run() -> None:
    branch = Branch()
    branch.register(deploy_tool())
    await branch.act("deploy", {"target": "prod"}, call_id="c1")
    branch.approve("c1", arguments={"target": "canary"})
    (result,) = await branch.settle()
    assert result.outcome == "done" and RAN == [{"target": "canary"}]


async def test_resume_with_an_undecided_call_runs_the_decided_ones_and_pauses_again() -> None:
    model = ScriptedModel(
        [[tool_call("deploy", target="prod"), tool_call("deploy", target="prod")], "done"]
    )
    branch = Branch(chat_model=model)
    branch.register(deploy_tool())
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("twice")
    first, second = paused.value.calls
    branch.approve(first.id)
    with pytest.raises(ApprovalPending) as again:
        await branch.resume()
    assert [c.id for c in again.value.calls] == [second.id]
    assert RAN == [{"target": "prod"}] and len(model.calls) == 1
    branch.deny(second.id, "once is enough")
    assert await branch.resume() == "done"
    assert RAN == [{"target": "prod"}]


async def test_run_refuses_while_calls_of_an_earlier_run_wait() -> None:
    branch = Branch(chat_model=ScriptedModel([tool_call("deploy", target="prod")]))
    branch.register(deploy_tool())
    with pytest.raises(ApprovalPending):
        await branch.run("ship")
    with pytest.raises(ConfigurationError, match="wait for a decision"):
        await branch.run("something else")


async def test_a_call_saved_as_started_is_never_run_again_after_a_reload() -> None:
    branch = Branch()
    branch.register(deploy_tool())
    await branch.act("deploy", {"target": "prod"}, call_id="c1")
    branch.approve("c1")
    data = branch.to_dict()
    # What a save taken between "started" and "done" holds.
    data["pending"][0]["status"] = "executing"
    restored = Branch.from_dict(data, resources={"tool:deploy": deploy_tool()})
    (result,) = await restored.settle()
    assert RAN == []
    assert result.error_type == "ApprovalInterrupted" and "not run again" in str(result.error)
    assert restored.pending_calls == ()


async def test_pending_calls_and_decisions_survive_to_dict_and_from_dict() -> None:
    branch = Branch()
    branch.register(deploy_tool())
    await branch.act("deploy", {"target": "prod"}, call_id="c1")
    await branch.act("deploy", {"target": "prod"}, call_id="c2")
    branch.approve("c1", arguments={"target": "canary"})
    restored = Branch.from_json(branch.to_json(), resources={"tool:deploy": deploy_tool()})
    assert restored.pending_calls == branch.pending_calls
    assert restored.pending_calls[0].decision == "approved"
    await restored.settle()
    assert RAN == [{"target": "canary"}]
    assert [p.id for p in restored.pending_calls] == ["c2"]


def test_a_malformed_saved_pending_call_is_a_configuration_error() -> None:
    data = Branch().to_dict()
    data["pending"] = [{"id": "x", "tool": "t", "arguments": {}, "reason": "r", "status": "bogus"}]
    with pytest.raises(ConfigurationError, match="malformed"):
        Branch.from_dict(data)


def test_a_save_from_before_approvals_loads_with_nothing_pending() -> None:
    data = Branch().to_dict()
    del data["pending"]
    assert Branch.from_dict(data).pending_calls == ()


async def test_a_clone_holds_the_calls_undecided() -> None:
    branch = Branch()
    branch.register(deploy_tool())
    await branch.act("deploy", {"target": "prod"}, call_id="c1")
    branch.approve("c1")
    clone = branch.clone()
    assert clone.pending_calls[0].decision == "undecided"
    await clone.settle()
    await branch.settle()
    assert RAN == [{"target": "prod"}]


async def test_two_concurrent_settles_run_an_approved_call_once() -> None:
    import trio

    gate = trio.Event()

    async def slow(target: str) -> str:
        """Deploy slowly."""
        await gate.wait()
        RAN.append({"target": target})
        return "ok"

    branch = Branch()
    branch.register(function_tool(slow, name="deploy").with_hooks(pre=[ask_for_prod]))
    await branch.act("deploy", {"target": "prod"}, call_id="c1")
    branch.approve("c1")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(branch.settle)
        nursery.start_soon(branch.settle)
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert RAN == [{"target": "prod"}]


def test_pending_call_records_round_trip_and_refuse_unknown_fields() -> None:
    pending = PendingCall(id="c", tool="t", arguments={"a": 1}, reason="why", hook="h")
    assert PendingCall.from_dict(pending.to_dict()) == pending
    with pytest.raises(ValueError, match="unknown fields"):
        PendingCall.from_dict({**pending.to_dict(), "extra": 1})
    with pytest.raises(TypeError, match="JSON-ready"):
        PendingCall(id="c", tool="t", arguments={"a": object()}, reason="why")


async def test_approve_refuses_arguments_that_are_not_a_mapping() -> None:
    branch = Branch()
    branch.register(function_tool(add).with_hooks(pre=[lambda t, a: ask_always()]))
    await branch.act("add", {"a": 1}, call_id="c1")
    with pytest.raises(TypeError, match="mapping"):
        branch.approve("c1", arguments=["a"])  # type: ignore[arg-type]


def ask_always() -> None:
    raise ApprovalRequired("always")

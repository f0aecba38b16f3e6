"""pydantic-ai's own agent loop, driven by its offline `FunctionModel`, calling our tools."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _scenario import (
    BAD_EDIT_ERROR,
    EXAMPLES,
    FINAL,
    STEPS,
    check_task,
    every_builtin,
    make_task,
    recorded_calls,
    recording_copy,
)
from jsonschema import Draft202012Validator
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from lionfactory import function_tool
from lionfactory.errors import ToolDenied
from lionfactory.integrations.pydantic_ai import pydantic_ai_toolset
from lionfactory.testing import assert_no_foreign_bindings


def scripted(steps: tuple[tuple[str, dict[str, Any]], ...], final: str, seen: list[Any]):
    """A FunctionModel that makes one call per turn, then answers `final`."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append((messages[-1], [t.name for t in info.function_tools]))
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < len(steps):
            name, arguments = steps[turn]
            return ModelResponse(parts=[ToolCallPart(name, arguments, tool_call_id=f"pa{turn}")])
        return ModelResponse(parts=[TextPart(final)])

    return FunctionModel(respond)


def retried(request: ModelMessage) -> list[str]:
    """The texts of the calls pydantic-ai sent back to the model for a retry."""
    assert isinstance(request, ModelRequest)
    return [
        str(part.content)
        for part in request.parts
        if isinstance(part, RetryPromptPart)
        or (isinstance(part, ToolReturnPart) and getattr(part, "outcome", None) == "retried")
    ]


def run(agent: Agent[None, str], prompt: str) -> str:
    # pydantic-ai runs on asyncio; the adapted tools run there unchanged.
    return asyncio.run(agent.run(prompt)).output


def test_agent_reads_then_edits_and_corrects_an_invalid_call(tmp_path):
    task = make_task(tmp_path)
    seen: list[Any] = []
    agent = Agent(scripted(STEPS, FINAL, seen), toolsets=[pydantic_ai_toolset(task.branch)])
    assert run(agent, "Change hello to goodbye in notes.txt.") == FINAL
    check_task(task)
    # The invalid call came back to the model as pydantic-ai's retry, in our words.
    (retry,) = retried(seen[2][0])
    assert BAD_EDIT_ERROR in retry
    assert seen[0][1] == ["reader", "editor"]
    # The branch recorded the calls under pydantic-ai's tool call ids.
    assert [m.call_id for m in task.branch.messages.active if m.role == "tool"] == [
        "pa0",
        "pa1",
        "pa2",
    ]


def test_edit_before_read_is_refused_as_a_typed_response(tmp_path):
    task = make_task(tmp_path)
    seen: list[Any] = []
    agent = Agent(scripted(STEPS[2:], "gave up", seen), toolsets=[pydantic_ai_toolset(task.branch)])
    assert run(agent, "edit") == "gave up"
    returned = [p for p in seen[1][0].parts if isinstance(p, ToolReturnPart)]
    assert returned[0].content["success"] is False
    assert "has not been read" in returned[0].content["error"]
    assert (task.workspace / "notes.txt").read_text() == "hello world\n"


def test_the_toolset_is_live_a_tool_registered_later_is_offered(tmp_path):
    task = make_task(tmp_path)
    toolset = pydantic_ai_toolset(task.branch)

    def shout(text: str) -> str:
        """Upper-case text."""
        return text.upper()

    task.branch.register(function_tool(shout))
    seen: list[Any] = []
    agent = Agent(scripted((("shout", {"text": "hi"}),), "done", seen), toolsets=[toolset])
    assert run(agent, "shout") == "done"
    assert seen[0][1] == ["reader", "editor", "shout"]
    assert recorded_calls(task.branch)[-1] == ("shout", {"text": "hi"}, {"result": "HI"})


def test_a_tool_list_runs_without_a_branch():
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    seen: list[Any] = []
    model = scripted((("add", {"a": 2, "b": "x"}), ("add", {"a": 2, "b": 3})), "5", seen)
    agent = Agent(model, toolsets=[pydantic_ai_toolset([function_tool(add)])])
    assert run(agent, "2+3") == "5"
    (retry,) = retried(seen[1][0])
    assert "b: Input should be a valid integer" in retry
    assert [p.content for p in seen[2][0].parts if isinstance(p, ToolReturnPart)] == [{"result": 5}]


def test_tools_bound_to_a_branch_are_refused_as_a_list(tmp_path):
    task = make_task(tmp_path)
    with pytest.raises(ValueError, match="pass that Branch to the adapter"):
        pydantic_ai_toolset(list(task.branch.tools.values()))


def test_clone_safety_each_toolset_acts_on_its_own_branch(tmp_path):
    task = make_task(tmp_path)
    clone = task.branch.clone()
    seen: list[Any] = []
    # The source reads; the clone (copied before the read) has no evidence.
    read = Agent(scripted(STEPS[:1], "read", seen), toolsets=[pydantic_ai_toolset(task.branch)])
    edit_in_clone = Agent(scripted(STEPS[2:], "no", seen), toolsets=[pydantic_ai_toolset(clone)])
    assert run(read, "read") == "read"
    assert run(edit_in_clone, "edit") == "no"
    assert (task.workspace / "notes.txt").read_text() == "hello world\n"
    assert [c[0] for c in recorded_calls(task.branch)] == ["reader"]
    assert [c[0] for c in recorded_calls(clone)] == ["editor"]
    assert recorded_calls(clone)[0][2]["success"] is False
    assert_no_foreign_bindings(task.branch)
    assert_no_foreign_bindings(clone)


def test_schema_fidelity_every_builtin_validates_and_round_trips(tmp_path):
    branch = every_builtin(tmp_path)
    for name, tool in branch.tools.items():
        copy, recorder = recording_copy(tool)
        toolset = pydantic_ai_toolset([copy])
        steps = tuple((name, arguments) for arguments in EXAMPLES[name])
        seen: list[Any] = []
        agent = Agent(scripted(steps, "ok", seen), toolsets=[toolset])
        assert run(agent, "go") == "ok"
        info_tools = asyncio.run(_definitions(toolset))
        schema = info_tools[name]
        Draft202012Validator.check_schema(schema)
        for arguments, request in zip(EXAMPLES[name], recorder.requests, strict=True):
            Draft202012Validator(schema).validate(arguments)
            assert request == tool.request_model.model_validate(arguments), name


async def _definitions(toolset: Any) -> dict[str, Any]:
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    tools = await toolset.get_tools(ctx)
    return {name: t.tool_def.parameters_json_schema for name, t in tools.items()}


def test_pydantic_ai_test_model_calls_every_tool_of_a_branch(tmp_path):
    # pydantic-ai's TestModel builds arguments from the exported schemas
    # itself: each built-in's schema is usable by the framework as exported.
    task = make_task(tmp_path)
    agent = Agent(TestModel(call_tools=["reader"]), toolsets=[pydantic_ai_toolset(task.branch)])
    run(agent, "go")
    assert [c[0] for c in recorded_calls(task.branch)] == ["reader"]


def test_a_denial_and_a_crash_come_back_as_the_error_payload():
    def deny(name: str, arguments: dict[str, Any]) -> None:
        raise ToolDenied("no shouting today")

    def shout(text: str) -> str:
        """Upper-case text."""
        return text.upper()

    def crash() -> None:
        """Always fails."""
        raise RuntimeError("boom")

    tools = [function_tool(shout).with_hooks(pre=[deny]), function_tool(crash)]
    seen: list[Any] = []
    model = scripted((("shout", {"text": "hi"}), ("crash", {})), "ok", seen)
    agent = Agent(model, toolsets=[pydantic_ai_toolset(tools)])
    assert run(agent, "go") == "ok"
    (denied,) = [p.content for p in seen[1][0].parts if isinstance(p, ToolReturnPart)]
    (crashed,) = [p.content for p in seen[2][0].parts if isinstance(p, ToolReturnPart)]
    assert denied["error_type"] == "ToolDenied"
    assert "no shouting today" in denied["error"]
    assert crashed["error_type"] == "RuntimeError"
    assert "boom" in crashed["error"]


# -- approvals -------------------------------------------------------------------


def _deploy_branch(ran: list[str]):
    from lionfactory import Branch
    from lionfactory.errors import ApprovalRequired as Ask

    def deploy(target: str) -> str:
        """Deploy to a target."""
        ran.append(target)
        return f"deployed {target}"

    def ask_for_prod(tool: str, arguments: dict[str, Any]) -> None:
        if arguments.get("target") != "staging":
            raise Ask("deploys to production")

    branch = Branch()
    branch.register(function_tool(deploy).with_hooks(pre=[ask_for_prod]))
    return branch


def _deploy_model(target: str) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]
        if returned:
            return ModelResponse(parts=[TextPart(f"result: {returned[-1].content}")])
        return ModelResponse(
            parts=[ToolCallPart("deploy", {"target": target}, tool_call_id="pa-1")]
        )

    return FunctionModel(respond)


def test_a_held_call_ends_the_run_with_deferred_requests_and_resumes_once():
    from pydantic_ai import DeferredToolRequests, DeferredToolResults

    ran: list[str] = []
    branch = _deploy_branch(ran)
    agent = Agent(
        _deploy_model("prod"),
        output_type=[str, DeferredToolRequests],
        toolsets=[pydantic_ai_toolset(branch)],
    )
    first = asyncio.run(agent.run("deploy"))
    assert isinstance(first.output, DeferredToolRequests)
    (asked,) = first.output.approvals
    assert asked.tool_call_id == "pa-1"
    assert first.output.metadata["pa-1"]["reason"] == "deploys to production"
    assert ran == [] and [p.id for p in branch.pending_calls] == ["pa-1"]

    decisions = DeferredToolResults(approvals={"pa-1": True})
    second = asyncio.run(
        agent.run(message_history=first.all_messages(), deferred_tool_results=decisions)
    )
    assert second.output == "result: {'result': 'deployed prod'}"
    assert ran == ["prod"] and branch.pending_calls == ()
    # The same decisions again run nothing: the branch already settled the call.
    third = asyncio.run(
        agent.run(message_history=first.all_messages(), deferred_tool_results=decisions)
    )
    assert third.output == second.output and ran == ["prod"]


def test_approved_override_args_run_instead_and_meet_the_hooks_again():
    from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved

    ran: list[str] = []
    branch = _deploy_branch(ran)
    agent = Agent(
        _deploy_model("prod"),
        output_type=[str, DeferredToolRequests],
        toolsets=[pydantic_ai_toolset(branch)],
    )
    first = asyncio.run(agent.run("deploy"))
    decisions = DeferredToolResults(
        approvals={"pa-1": ToolApproved(override_args={"target": "canary"})}
    )
    asyncio.run(agent.run(message_history=first.all_messages(), deferred_tool_results=decisions))
    assert ran == ["canary"]
    (held,) = [m for m in branch.messages if m.role == "tool"]
    assert held.call_id == "pa-1"

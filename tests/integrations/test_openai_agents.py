"""The OpenAI Agents SDK's own `Runner`, driven by a scripted `Model`, calling our tools."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
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
from agents import Agent, ModelResponse, RunConfig, Runner, Usage
from agents.models.interface import Model
from jsonschema import Draft202012Validator
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from lionfactory import function_tool
from lionfactory.integrations.openai_agents import openai_agents_tools, strict_schema
from lionfactory.testing import assert_no_foreign_bindings


class ScriptedAgentsModel(Model):
    """An Agents SDK model that makes one call per turn, then answers `final`.

    `inputs` keeps what the runner sent each turn; `tools` the tool names offered.
    """

    def __init__(self, steps: tuple[tuple[str, dict[str, Any] | str], ...], final: str) -> None:
        self.steps, self.final = steps, final
        self.inputs: list[Any] = []
        self.tools: list[list[str]] = []

    async def get_response(self, system_instructions, input, model_settings, tools, *rest, **kw):
        self.inputs.append(input)
        self.tools.append([t.name for t in tools])
        turn = len(self.inputs) - 1
        if turn < len(self.steps):
            name, arguments = self.steps[turn]
            text = arguments if isinstance(arguments, str) else json.dumps(arguments)
            item: Any = ResponseFunctionToolCall(
                type="function_call", call_id=f"oa{turn}", name=name, arguments=text
            )
        else:
            item = ResponseOutputMessage(
                id="msg",
                type="message",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text=self.final, annotations=[])],
            )
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests run without streaming")


def run(model: ScriptedAgentsModel, tools: list[Any]) -> str:
    agent = Agent(name="coder", instructions="You edit files.", model=model, tools=tools)
    # Tracing off: the SDK would otherwise try to upload traces over the network.
    config = RunConfig(tracing_disabled=True)
    return asyncio.run(
        Runner.run(agent, "Change hello to goodbye.", run_config=config)
    ).final_output


def tool_output(model: ScriptedAgentsModel, turn: int, call_id: str) -> Any:
    (item,) = [
        i
        for i in model.inputs[turn]
        if isinstance(i, dict)
        and i.get("type") == "function_call_output"
        and i["call_id"] == call_id
    ]
    return json.loads(item["output"])


def test_runner_reads_then_edits_and_corrects_an_invalid_call(tmp_path):
    task = make_task(tmp_path)
    model = ScriptedAgentsModel(STEPS, FINAL)
    assert run(model, openai_agents_tools(task.branch)) == FINAL
    check_task(task)
    error = tool_output(model, 2, "oa1")
    assert error["error_type"] == "ToolInputError"
    assert BAD_EDIT_ERROR in error["error"]
    assert model.tools[0] == ["reader", "editor"]
    assert [m.call_id for m in task.branch.messages.active if m.role == "tool"] == [
        "oa0",
        "oa1",
        "oa2",
    ]


def test_arguments_that_are_not_json_come_back_as_an_error_to_read(tmp_path):
    task = make_task(tmp_path)
    model = ScriptedAgentsModel((("reader", '{"action": "read", "path": '),), "sorry")
    assert run(model, openai_agents_tools(task.branch)) == "sorry"
    error = tool_output(model, 1, "oa0")
    assert error["error_type"] == "ToolInputError"
    assert "were not valid JSON" in error["error"]


def test_strict_mode_only_where_every_argument_is_required(tmp_path):
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    def greet(name: str = "you") -> str:
        """Greet someone."""
        return f"hello {name}"

    add_tool, greet_tool = openai_agents_tools([function_tool(add), function_tool(greet)])
    assert add_tool.strict_json_schema is True
    assert greet_tool.strict_json_schema is False
    assert (
        greet_tool.params_json_schema
        == function_tool(greet).schema("openai")["function"]["parameters"]
    )
    with pytest.raises(ValueError, match="'greet' cannot be strict"):
        openai_agents_tools(function_tool(greet), strict=True)
    (loose,) = openai_agents_tools(function_tool(add), strict=False)
    assert loose.strict_json_schema is False


def test_clone_safety_each_tool_list_acts_on_its_own_branch(tmp_path):
    task = make_task(tmp_path)
    clone = task.branch.clone()
    assert run(ScriptedAgentsModel(STEPS[:1], "read"), openai_agents_tools(task.branch)) == "read"
    in_clone = ScriptedAgentsModel(STEPS[2:], "refused")
    assert run(in_clone, openai_agents_tools(clone)) == "refused"
    assert tool_output(in_clone, 1, "oa0")["success"] is False
    assert (task.workspace / "notes.txt").read_text() == "hello world\n"
    assert [c[0] for c in recorded_calls(task.branch)] == ["reader"]
    assert [c[0] for c in recorded_calls(clone)] == ["editor"]
    assert_no_foreign_bindings(task.branch)
    assert_no_foreign_bindings(clone)


def test_schema_fidelity_every_builtin_validates_and_round_trips(tmp_path):
    branch = every_builtin(tmp_path)
    for name, tool in branch.tools.items():
        copy, recorder = recording_copy(tool)
        (adapted,) = openai_agents_tools(copy)
        schema = adapted.params_json_schema
        Draft202012Validator.check_schema(schema)
        steps = tuple((name, arguments) for arguments in EXAMPLES[name])
        assert run(ScriptedAgentsModel(steps, "ok"), [adapted]) == "ok"
        for arguments, request in zip(EXAMPLES[name], recorder.requests, strict=True):
            Draft202012Validator(schema).validate(arguments)
            assert request == tool.request_model.model_validate(arguments), name
        assert adapted.strict_json_schema is (strict_schema(tool) is not None)


# -- approvals -------------------------------------------------------------------


def _deploy_branch(ran: list[str]):
    from lionfactory import Branch
    from lionfactory.errors import ApprovalRequired

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


async def _run_with_approvals(target: str, decide: Any) -> tuple[Any, list[str], Any]:
    ran: list[str] = []
    branch = _deploy_branch(ran)
    model = ScriptedAgentsModel((("deploy", {"target": target}),), "finished")
    agent = Agent(
        name="ops", instructions="Deploy.", model=model, tools=openai_agents_tools(branch)
    )
    config = RunConfig(tracing_disabled=True)
    result = await Runner.run(agent, "deploy", run_config=config)
    interruptions = list(result.interruptions)
    if interruptions:
        assert ran == [] and [p.id for p in branch.pending_calls] == ["oa0"]
        state = result.to_state()
        for item in interruptions:
            decide(state, item)
        result = await Runner.run(agent, state, run_config=config)
    return result, ran, (model, branch, interruptions)


def test_a_held_call_interrupts_the_run_and_approve_runs_it_once():
    result, ran, (model, branch, interruptions) = asyncio.run(
        _run_with_approvals("prod", lambda state, item: state.approve(item))
    )
    assert [i.raw_item.call_id for i in interruptions] == ["oa0"]
    assert result.final_output == "finished"
    assert ran == ["prod"] and branch.pending_calls == ()
    assert tool_output(model, 1, "oa0") == {"result": "deployed prod"}
    (message,) = [m for m in branch.messages if m.role == "tool"]
    assert message.call_id == "oa0"


def test_a_rejected_call_never_runs():
    result, ran, _ = asyncio.run(
        _run_with_approvals("prod", lambda state, item: state.reject(item))
    )
    assert result.final_output == "finished" and ran == []


def test_a_call_no_hook_asks_about_runs_without_interruption():
    _, ran, (_, branch, interruptions) = asyncio.run(
        _run_with_approvals("staging", lambda state, item: None)
    )
    assert interruptions == [] and ran == ["staging"] and branch.pending_calls == ()

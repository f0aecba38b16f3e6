"""lionagi's own ReAct loop, driven by its mock iModel (`LionAGIMockFactory`), calling our tools.

lionagi asks the model for JSON that names the actions to run (its
``action_requests``), runs them, and shows their outputs in the next round.
The mock model answers each round with scripted JSON. lionagi keeps a log
it writes under ``./data/logs``, so every test runs in its temporary
directory and writes that log there itself.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
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
from lionagi.protocols.messages import ActionResponse
from lionagi.testing import LionAGIMockFactory

from lionfactory.integrations.lionagi import lionagi_tools
from lionfactory.testing import assert_no_foreign_bindings


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def rounds(steps: tuple[tuple[str, dict[str, Any]], ...], final: str) -> list[str]:
    """The mock model's replies: one action per ReAct round, then the final answer."""
    replies = [
        json.dumps(
            {
                "analysis": f"round {i}",
                "extension_needed": True,
                "action_required": True,
                "action_requests": [{"function": name, "arguments": arguments}],
            }
        )
        for i, (name, arguments) in enumerate(steps)
    ]
    done = {"analysis": "done", "extension_needed": False, "action_required": False}
    return [*replies, json.dumps({**done, "action_requests": []}), json.dumps({"answer": final})]


def react(tools: list[Any], steps: tuple[tuple[str, dict[str, Any]], ...], final: str) -> Any:
    lion = LionAGIMockFactory.create_mocked_branch(responses=rounds(steps, final), tools=tools)
    answer = asyncio.run(
        lion.ReAct(instruction="Change hello to goodbye.", max_extensions=len(steps) + 1)
    )
    # Write lionagi's log here (the test's directory) and empty it, or lionagi
    # writes it at interpreter exit into whatever the directory is then.
    lion.dump_logs(clear=True, persist_path=Path.cwd() / "lionagi-log.json")
    return answer, [m.content.output for m in lion.messages if isinstance(m, ActionResponse)]


def test_react_reads_then_edits_and_corrects_an_invalid_call(tmp_path):
    task = make_task(tmp_path)
    answer, outputs = react(lionagi_tools(task.branch), STEPS, FINAL)
    assert answer == FINAL
    check_task(task)
    # lionagi showed the model lionfactory's error for the invalid call.
    assert outputs[1]["error_type"] == "ToolInputError"
    assert BAD_EDIT_ERROR in outputs[1]["error"]
    assert outputs[2]["success"] is True


def test_clone_safety_each_tool_list_acts_on_its_own_branch(tmp_path):
    task = make_task(tmp_path)
    clone = task.branch.clone()
    react(lionagi_tools(task.branch), STEPS[:1], "read")
    _, outputs = react(lionagi_tools(clone), STEPS[2:], "refused")
    assert outputs[0]["success"] is False
    assert (task.workspace / "notes.txt").read_text() == "hello world\n"
    assert [c[0] for c in recorded_calls(task.branch)] == ["reader"]
    assert [c[0] for c in recorded_calls(clone)] == ["editor"]
    assert_no_foreign_bindings(task.branch)
    assert_no_foreign_bindings(clone)


def test_schema_fidelity_every_builtin_validates_and_round_trips(tmp_path):
    branch = every_builtin(tmp_path)
    for name, tool in branch.tools.items():
        copy, recorder = recording_copy(tool)
        (adapted,) = lionagi_tools(copy)
        schema = adapted.tool_schema["function"]["parameters"]
        assert adapted.function == name
        Draft202012Validator.check_schema(schema)
        steps = tuple((name, arguments) for arguments in EXAMPLES[name])
        _, outputs = react([adapted], steps, "ok")
        assert outputs == [{"success": True}] * len(steps), name
        for arguments, request in zip(EXAMPLES[name], recorder.requests, strict=True):
            Draft202012Validator(schema).validate(arguments)
            assert request == tool.request_model.model_validate(arguments), name


def test_lionagis_call_ids_are_the_branchs_record_ids(tmp_path):
    task = make_task(tmp_path)
    lion = LionAGIMockFactory.create_mocked_branch(responses=rounds(STEPS[:1], "read"))
    seen: list[str] = []

    from lionagi.hooks.bus import HookPoint

    lion.register_tools(lionagi_tools(task.branch, lion_branch=lion))
    lion._hooks.on(HookPoint.TOOL_PRE, lambda call_id, **_: seen.append(call_id))
    asyncio.run(lion.ReAct(instruction="Read notes.txt.", max_extensions=2))
    lion.dump_logs(clear=True, persist_path=Path.cwd() / "lionagi-log.json")
    ids = [m.call_id for m in task.branch.messages if m.role == "tool"]
    assert len(seen) == 1 and ids == seen

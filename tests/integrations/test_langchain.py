"""LangChain's tool-calling loop with its fake chat model, calling our tools.

LangChain's own loop without LangGraph is the one its documentation shows:
bind the tools to the chat model, ``ainvoke`` it, run each tool call with
``tool.ainvoke(tool_call)``, append the ToolMessages, repeat until the
model answers without tool calls. The model is LangChain's
``GenericFakeChatModel`` playing scripted ``AIMessage``s, given
``bind_tools`` so it records what LangChain exports for each tool.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
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
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from lionfactory.integrations.langchain import langchain_tools
from lionfactory.testing import assert_no_foreign_bindings

READ_ARGS = dict(STEPS[0][1])
BAD_EDIT_ARGS = dict(STEPS[1][1])


class ScriptedChatModel(GenericFakeChatModel):
    """GenericFakeChatModel that accepts tools and keeps what it was sent."""

    exported: list[dict[str, Any]] = Field(default_factory=list)
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        self.exported = [convert_to_openai_tool(t) for t in tools]
        return self

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return await super()._agenerate(messages, *args, **kwargs)


def scripted(steps: Sequence[tuple[str, dict[str, Any]]], final: str) -> ScriptedChatModel:
    replies = [
        AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": f"lc{i}"}])
        for i, (n, a) in enumerate(steps)
    ]
    return ScriptedChatModel(messages=iter([*replies, AIMessage(content=final)]))


async def agent_loop(model: ScriptedChatModel, tools: list[BaseTool], prompt: str) -> str:
    by_name = {t.name: t for t in tools}
    bound = model.bind_tools(tools)
    messages: list[BaseMessage] = [HumanMessage(prompt)]
    while True:
        reply = await bound.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return str(reply.content)
        for call in reply.tool_calls:
            messages.append(await by_name[call["name"]].ainvoke(call))


def run(model: ScriptedChatModel, tools: list[BaseTool]) -> str:
    return asyncio.run(agent_loop(model, tools, "Change hello to goodbye."))


def tool_message(model: ScriptedChatModel, turn: int) -> ToolMessage:
    message = model.seen[turn][-1]
    assert isinstance(message, ToolMessage)
    return message


def test_loop_reads_then_edits_and_corrects_an_invalid_call(tmp_path):
    task = make_task(tmp_path)
    model = scripted(STEPS, FINAL)
    assert run(model, langchain_tools(task.branch)) == FINAL
    check_task(task)
    error = tool_message(model, 2)
    assert error.tool_call_id == "lc1"
    assert BAD_EDIT_ERROR in json.loads(str(error.content))["error"]
    assert error.artifact["error_type"] == "ToolInputError"
    assert [t["function"]["name"] for t in model.exported] == ["reader", "editor"]


def test_sync_invoke_runs_the_call_and_records_it(tmp_path):
    task = make_task(tmp_path)
    reader = langchain_tools(task.branch)[0]
    message = reader.invoke(
        {"type": "tool_call", "name": "reader", "id": "sync-1", "args": READ_ARGS}
    )
    assert isinstance(message, ToolMessage) and message.status == "success"
    assert "hello world" in message.artifact["content"]
    assert [(m.role, m.call_id) for m in task.branch.messages][-1] == ("tool", "sync-1")


def test_sync_invoke_inside_a_running_loop_says_to_use_ainvoke(tmp_path):
    task = make_task(tmp_path)
    reader = langchain_tools(task.branch)[0]

    async def inside() -> None:
        reader.invoke(READ_ARGS)

    with pytest.raises(RuntimeError, match="ainvoke"):
        asyncio.run(inside())
    assert recorded_calls(task.branch) == []


def test_failed_calls_have_status_error_and_successes_success(tmp_path):
    task = make_task(tmp_path)
    reader, editor = langchain_tools(task.branch)

    def call(tool: BaseTool, call_id: str, args: dict[str, Any]) -> ToolMessage:
        return asyncio.run(
            tool.ainvoke({"type": "tool_call", "name": tool.name, "id": call_id, "args": args})
        )

    # Editing before reading is a typed failure (success: false).
    assert call(editor, "e1", dict(STEPS[2][1])).status == "error"
    assert call(editor, "e2", dict(BAD_EDIT_ARGS)).status == "error"
    assert call(reader, "r1", READ_ARGS).status == "success"
    assert call(reader, "r2", {"action": "read", "path": "../outside"}).status == "error"


def test_the_langchain_call_id_is_the_branchs_record_id(tmp_path):
    task = make_task(tmp_path)
    model = scripted(STEPS, FINAL)
    run(model, langchain_tools(task.branch))
    ids = [m.call_id for m in task.branch.messages if m.role == "tool"]
    assert ids == ["lc0", "lc1", "lc2"]


def test_a_model_argument_cannot_choose_the_recorded_call_id(tmp_path):
    task = make_task(tmp_path)
    reader = langchain_tools(task.branch)[0]
    args = {**READ_ARGS, "__lionfactory_call_id__": "forged"}
    asyncio.run(reader.ainvoke({"type": "tool_call", "name": "reader", "id": "real", "args": args}))
    assert [m.call_id for m in task.branch.messages if m.role == "tool"] == ["real"]


def test_clone_safety_each_tool_list_acts_on_its_own_branch(tmp_path):
    task = make_task(tmp_path)
    clone = task.branch.clone()
    assert run(scripted(STEPS[:1], "read"), langchain_tools(task.branch)) == "read"
    in_clone = scripted(STEPS[2:], "refused")
    assert run(in_clone, langchain_tools(clone)) == "refused"
    assert tool_message(in_clone, 1).artifact["success"] is False
    assert (task.workspace / "notes.txt").read_text() == "hello world\n"
    assert [c[0] for c in recorded_calls(task.branch)] == ["reader"]
    assert [c[0] for c in recorded_calls(clone)] == ["editor"]
    assert_no_foreign_bindings(task.branch)
    assert_no_foreign_bindings(clone)


def _inlined(schema: Any) -> Any:
    """`schema` with every local ``$ref`` replaced by its definition, and no ``$defs``."""
    defs = schema.get("$defs", {}) if isinstance(schema, dict) else {}

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            rest = {k: v for k, v in node.items() if k != "$ref"}
            return walk({**defs[ref.removeprefix("#/$defs/")], **rest})
        return {k: walk(v) for k, v in node.items() if k != "$defs"}

    return walk(schema)


def test_schema_fidelity_every_builtin_validates_and_round_trips(tmp_path):
    branch = every_builtin(tmp_path)
    for name, tool in branch.tools.items():
        copy, recorder = recording_copy(tool)
        adapted = langchain_tools(copy)
        model = scripted([(name, arguments) for arguments in EXAMPLES[name]], "ok")
        assert run(model, adapted) == "ok"
        (exported,) = model.exported
        schema = exported["function"]["parameters"]
        # LangChain drops only the schema's own description (the tool has one),
        # and inlines the definitions a schema refers to ($defs, $ref).
        ours = _inlined(tool.schema("openai")["function"]["parameters"])
        assert _inlined(schema) == {k: v for k, v in ours.items() if k != "description"}
        assert exported["function"]["description"] == tool.description
        Draft202012Validator.check_schema(schema)
        for arguments, request in zip(EXAMPLES[name], recorder.requests, strict=True):
            Draft202012Validator(schema).validate(arguments)
            assert request == tool.request_model.model_validate(arguments), name

"""Tool-call arguments no encoder can take back: the loop answers them and keeps working.

Arguments nested hundreds or thousands of levels deep (JSON encoding
recurses), integers past Python's 4,300-digit limit for printing, and lone
surrogates (valid in a Python string, refused by every UTF-8 writer): each
arrives from a model, becomes a `ToolInputError` tool message, and nothing
unencodable is kept in the log, so the next run and a save still work.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from lionfactory import Branch, ModelReply, ToolCall, function_tool
from lionfactory.models import OpenAICompatible
from lionfactory.testing import ScriptedModel


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def nested_list(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def nested_text(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


SHAPES = {
    "nested 990 deep": {"text": "x", "extra": nested(990)},
    "nested 5000 deep": {"extra": nested(5000)},
    "list nested 5000 deep": {"extra": nested_list(5000)},
    "5000-digit integer": {"text": 10**5000},
    "lone surrogate": {"text": "\ud800"},
    "lone surrogate in a key": {"\udfff": "x"},
}

RAW_SHAPES = {
    "nested 990 deep": '{"text": "x", "extra": ' + nested_text(990) + "}",
    "nested 5000 deep": '{"extra": ' + nested_text(5000) + "}",
    "5000-digit integer": '{"text": ' + "9" * 5000 + "}",
    "lone surrogate": '{"text": "\\ud800"}',
}


def echo(text: str = "") -> dict[str, str]:
    """Say `text` back."""
    return {"text": text}


def branch_with(model: Any) -> Branch:
    branch = Branch(chat_model=model)
    branch.register(function_tool(echo))
    return branch


def assert_input_error(branch: Branch) -> None:
    tool_messages = [m for m in branch.messages.active if m.role == "tool"]
    payload = json.loads(tool_messages[-1].content)
    assert payload["error_type"] == "ToolInputError"
    assert "Call the tool again" in payload["error"]


def assert_stays_usable(branch: Branch) -> None:
    text = branch.to_json()
    text.encode("utf-8")
    assert json.loads(text)["messages"]


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
async def test_run_answers_unencodable_arguments_and_the_next_run_works(shape: str) -> None:
    call = ToolCall(name="echo", arguments=SHAPES[shape])
    model = ScriptedModel([ModelReply(text="", tool_calls=(call,)), "done", "again"])
    branch = branch_with(model)

    assert await branch.run("go") == "done"
    assert_input_error(branch)
    assert await branch.run("once more") == "again"
    assert_stays_usable(branch)


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
async def test_act_answers_unencodable_arguments(shape: str) -> None:
    branch = branch_with(None)

    result = await branch.act("echo", SHAPES[shape])

    assert result.error_type == "ToolInputError"
    assert_input_error(branch)
    assert (await branch.act("echo", {"text": "fine"})).result == {"text": "fine"}
    assert_stays_usable(branch)


async def test_a_lone_surrogate_in_the_reply_text_is_not_stored() -> None:
    branch = branch_with(ScriptedModel(["bad \ud800 text", "fine"]))

    await branch.run("go")

    assert_stays_usable(branch)
    assert await branch.run("again") == "fine"


def openai_model(arguments: str) -> OpenAICompatible:
    def handle(request: httpx.Request) -> httpx.Response:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "echo", "arguments": arguments},
                }
            ],
        }
        body = {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
        return httpx.Response(200, json=body)

    return OpenAICompatible(
        base_url="http://model.invalid/v1", model="m", transport=httpx.MockTransport(handle)
    )


@pytest.mark.parametrize("shape", RAW_SHAPES, ids=list(RAW_SHAPES))
async def test_openai_compatible_decodes_hostile_arguments_into_a_marked_call(shape: str) -> None:
    model = openai_model(RAW_SHAPES[shape])

    reply = await model([], [])

    (call,) = reply.tool_calls
    assert call.arguments == {} and call.arguments_error


@pytest.mark.parametrize("shape", RAW_SHAPES, ids=list(RAW_SHAPES))
async def test_openai_compatible_run_with_hostile_arguments_keeps_working(shape: str) -> None:
    first = openai_model(RAW_SHAPES[shape])
    calls = 0

    async def model(messages: Any, tools: Any) -> ModelReply:
        nonlocal calls
        calls += 1
        return await first(messages, tools) if calls == 1 else ModelReply(text="done")

    branch = branch_with(model)

    assert await branch.run("go") == "done"
    assert_input_error(branch)
    assert_stays_usable(branch)

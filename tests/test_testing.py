from __future__ import annotations

import pytest

from lionfactory import Branch, ModelReply, ToolCall, function_tool
from lionfactory.errors import ScriptExhaustedError
from lionfactory.testing import FunctionModel, ScriptedModel, tool_call


def echo(text: str) -> str:
    """Echo."""
    return text


async def test_scripted_model_accepts_every_reply_form():
    model = ScriptedModel(
        [
            {"tool": "echo", "arguments": {"text": "a"}},
            [tool_call("echo", text="b"), ToolCall(name="echo", arguments={"text": "c"})],
            ModelReply(text="thinking", tool_calls=(tool_call("echo", text="d"),)),
            "done",
        ]
    )
    branch = Branch(chat_model=model)
    branch.register(function_tool(echo))
    assert await branch.run("go") == "done"
    results = [m.content for m in branch.messages if m.role == "tool"]
    assert results == ['{"result": "a"}', '{"result": "b"}', '{"result": "c"}', '{"result": "d"}']
    assert model.remaining == 0


def test_scripted_model_rejects_malformed_entries():
    with pytest.raises(TypeError, match="needs a 'tool' name"):
        ScriptedModel([{"arguments": {}}])
    with pytest.raises(TypeError, match="unexpected keys"):
        ScriptedModel([{"tool": "x", "args": {}}])
    with pytest.raises(TypeError, match="cannot turn"):
        ScriptedModel([42])


async def test_exhausted_script_names_the_last_message():
    model = ScriptedModel(["only one"])
    branch = Branch(chat_model=model)
    await branch.run("first")
    with pytest.raises(ScriptExhaustedError, match="'second'"):
        await branch.run("second")


async def test_function_model_sees_messages_and_tools_and_may_be_async():
    async def answer(messages, tools):
        if messages[-1].role == "tool":
            return f"tool said {messages[-1].content}"
        return tool_call(tools[0].name, text=messages[-1].content)

    model = FunctionModel(answer)
    branch = Branch(chat_model=model)
    branch.register(function_tool(echo))
    assert await branch.run("hello") == 'tool said {"result": "hello"}'
    assert len(model.calls) == 2
    assert model.calls[0].tool_names == ["echo"]

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import pytest
from pydantic import BaseModel, ConfigDict, Field

from lionfactory import Tool, ToolHints, reports_failure
from lionfactory.errors import ToolDenied, ToolInputError


class EchoRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="What to echo.")
    times: int = Field(1, ge=1, description="How often.")


class EchoResponse(BaseModel):
    echoed: str


async def echo(request: EchoRequest) -> EchoResponse:
    return EchoResponse(echoed=request.text * request.times)


def make_tool(**kwargs) -> Tool:
    return Tool(
        name="echo",
        description="Echo text.\n\nSecond paragraph the model must see too.",
        request_model=EchoRequest,
        handler=echo,
        **kwargs,
    )


async def test_call_validates_and_returns_json_ready_dict():
    assert await make_tool()(text="ab", times=2) == {"echoed": "abab"}


@pytest.mark.parametrize("bad", [{"times": 2}, {"text": "a", "times": 0}, {"text": "a", "x": 1}])
async def test_invalid_arguments_raise_tool_input_error_naming_the_field(bad):
    with pytest.raises(ToolInputError) as info:
        await make_tool()(**bad)
    assert "Invalid arguments for tool 'echo'" in str(info.value)
    assert info.value.errors and all("loc" in e and "msg" in e for e in info.value.errors)
    assert "call the tool again" in str(info.value)


def test_schema_styles_carry_the_whole_description():
    tool = make_tool()
    openai = tool.schema("openai")
    assert openai["type"] == "function"
    fn = openai["function"]
    assert fn["name"] == "echo"
    assert "Second paragraph" in fn["description"]
    params = fn["parameters"]
    assert params["required"] == ["text"]
    assert params["properties"]["times"] == {
        "default": 1,
        "description": "How often.",
        "minimum": 1,
        "type": "integer",
    }
    assert params["additionalProperties"] is False
    assert "title" not in params
    anthropic = tool.schema("anthropic")
    assert anthropic == {"name": "echo", "description": fn["description"], "input_schema": params}
    mcp = tool.schema("mcp")
    assert mcp == {"name": "echo", "description": fn["description"], "inputSchema": params}


def test_schema_keeps_a_property_called_title():
    class Req(BaseModel):
        title: str = Field(description="The title.")

    async def handler(request: Req) -> dict:
        return {}

    tool = Tool(name="t", description="d", request_model=Req, handler=handler)
    assert tool.schema()["function"]["parameters"]["properties"]["title"]["type"] == "string"


def test_schema_is_a_copy():
    tool = make_tool()
    tool.schema()["function"]["parameters"]["properties"].clear()
    assert tool.schema()["function"]["parameters"]["properties"]


def test_unknown_schema_style_is_refused():
    with pytest.raises(ValueError, match="'openai', 'anthropic' or 'mcp'"):
        make_tool().schema("gemini")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "a b", "x" * 65, "tool.name", "ünï"])
def test_bad_names_are_refused_at_construction(name):
    with pytest.raises(ValueError, match="got"):
        Tool(name=name, description="d", request_model=EchoRequest, handler=echo)


def test_request_model_must_be_a_pydantic_class():
    with pytest.raises(TypeError, match="pydantic model class"):
        Tool(name="x", description="d", request_model=dict, handler=echo)  # type: ignore[arg-type]


def test_tool_is_immutable_and_with_hooks_returns_a_new_tool():
    tool = make_tool()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        tool.name = "other"  # type: ignore[misc]
    hooked = tool.with_hooks(pre=[lambda n, a: None])
    assert hooked is not tool
    assert tool.pre == ()
    assert len(hooked.pre) == 1


async def test_pre_hooks_run_in_order_and_may_rewrite_arguments():
    seen = []

    def first(name, args):
        seen.append(("first", dict(args)))
        return {**args, "text": args["text"].upper()}

    async def second(name, args):
        seen.append(("second", dict(args)))

    tool = make_tool().with_hooks(pre=[first, second])
    assert await tool(text="ab") == {"echoed": "AB"}
    assert seen == [("first", {"text": "ab"}), ("second", {"text": "AB"})]


async def test_a_pre_hook_rewrite_is_validated():
    tool = make_tool().with_hooks(pre=[lambda n, a: {"text": 5}])
    with pytest.raises(ToolInputError):
        await tool(text="ok")


async def test_pre_hook_denial_names_the_tool():
    def deny(name, args):
        raise ToolDenied("no echoing today")

    with pytest.raises(ToolDenied) as info:
        await make_tool().with_hooks(pre=[deny])(text="x")
    assert info.value.tool == "echo"
    assert "no echoing today" in str(info.value)


async def test_post_hooks_may_replace_the_result():
    async def add(name, args, result):
        return {**result, "seen_by": name}

    def keep(name, args, result):
        return None

    tool = make_tool().with_hooks(post=[add, keep])
    assert await tool(text="a") == {"echoed": "a", "seen_by": "echo"}


async def test_on_error_hooks_turn_an_exception_into_a_result():
    async def boom(request):
        raise RuntimeError("disk on fire")

    calls = []

    def first(name, args, exc):
        calls.append("first")

    def second(name, args, exc):
        calls.append("second")
        return {"recovered": str(exc)}

    def third(name, args, exc):  # never reached: second handled it
        calls.append("third")

    tool = Tool(
        name="boom",
        description="d",
        request_model=EchoRequest,
        handler=boom,
        on_error=[first, second, third],
    )
    assert await tool(text="a") == {"recovered": "disk on fire"}
    assert calls == ["first", "second"]


async def test_unhandled_exception_propagates():
    async def boom(request):
        raise RuntimeError("disk on fire")

    tool = Tool(name="boom", description="d", request_model=EchoRequest, handler=boom)
    with pytest.raises(RuntimeError, match="disk on fire"):
        await tool(text="a")


async def test_non_dict_handler_result_is_wrapped():
    async def handler(request):
        return [1, 2]

    tool = Tool(name="t", description="d", request_model=EchoRequest, handler=handler)
    assert await tool(text="a") == {"result": [1, 2]}


def test_run_sync_works_from_plain_code():
    assert make_tool().run_sync(text="z") == {"echoed": "z"}


async def test_run_sync_refuses_inside_an_event_loop():
    with pytest.raises(RuntimeError, match="await tool"):
        make_tool().run_sync(text="z")


@pytest.mark.parametrize(
    ("result", "failed"),
    [
        ({"success": True}, False),
        ({"success": False, "error": "x"}, True),
        ({"status": "ok"}, False),
        ({"status": "diagnostics"}, False),
        ({"status": "matches"}, False),
        ({"status": "error"}, True),
        ({"status": "unavailable"}, True),
        ({"return_code": 0, "timed_out": False}, False),
        ({"return_code": 1, "timed_out": False}, True),
        ({"return_code": 2, "timed_out": False}, True),
        ({"return_code": 0, "timed_out": True}, True),
        ({"return_code": -1, "error": "refused"}, True),
        ({"return_code": None, "timed_out": False, "error": "refused"}, True),
        ({"return_code": None, "timed_out": True}, True),
        ({"anything": 1}, False),
        ("plain text from a custom tool", False),
    ],
)
def test_reports_failure_is_the_one_rule_for_every_response_type(
    result: object, failed: bool
) -> None:
    assert reports_failure(result) is failed


class _Judged(BaseModel):
    state: str

    @classmethod
    def reports_failure(cls, data: Mapping[str, Any]) -> bool:
        return data.get("state") == "broken"


def test_a_tool_asks_its_failed_predicate_first() -> None:
    tool = attrs.evolve(make_tool(), response_model=_Judged, failed=lambda r: r == {"x": 1})
    assert tool.reports_failure({"x": 1}) is True
    assert tool.reports_failure({"state": "broken"}) is False


def test_a_tool_asks_its_response_model_next() -> None:
    tool = attrs.evolve(make_tool(), response_model=_Judged)
    assert tool.reports_failure({"state": "broken"}) is True
    assert tool.reports_failure({"success": False}) is False  # the model's rule, not the default


def test_a_tool_that_states_nothing_gets_the_default_rule() -> None:
    tool = make_tool()
    assert tool.reports_failure({"success": False}) is True
    assert tool.reports_failure("plain") is False


def test_hints_and_response_model_are_checked() -> None:
    with pytest.raises(TypeError, match="response_model"):
        attrs.evolve(make_tool(), response_model=dict)
    with pytest.raises(TypeError):
        attrs.evolve(make_tool(), hints={"title": "x"})
    with pytest.raises(TypeError):
        ToolHints("t", read_only="yes")  # type: ignore[arg-type]
    assert ToolHints.reading("Read") == ToolHints("Read", read_only=True, idempotent=True)


def test_builtins_judge_their_own_failures() -> None:
    """bash, code_check and ast_search say in their response models what failure is."""
    from lionfactory.tools import ast_search_tool, bash_tool, code_check_tool

    bash = bash_tool()
    assert bash.reports_failure({"return_code": 1}) and not bash.reports_failure({"return_code": 0})
    for tool in (code_check_tool(), ast_search_tool()):
        assert tool.reports_failure({"status": "unavailable"})
        assert not tool.reports_failure({"status": "ok"})

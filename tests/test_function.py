from __future__ import annotations

import time

import anyio
import anyio.lowlevel
import pytest

from lionfactory import function_tool
from lionfactory.errors import ToolInputError


def f(a: int, b: str | None = None, *, c: list[int] = [], d: int | str = 3) -> dict:  # noqa: B006
    """Combine things.

    A second paragraph that must reach the model.

    Args:
        a: the first number,
            described on two lines.
        b: an optional label.
        c: some integers.
        d: a number or a string.

    Returns:
        The arguments.
    """
    return {"a": a, "b": b, "c": c, "d": d}


EXPECTED_PARAMETERS = {
    "type": "object",
    "additionalProperties": False,
    "required": ["a"],
    "properties": {
        "a": {"type": "integer", "description": "the first number, described on two lines."},
        "b": {
            "anyOf": [{"type": "string"}, {"type": "null"}],
            "default": None,
            "description": "an optional label.",
        },
        "c": {
            "type": "array",
            "items": {"type": "integer"},
            "default": [],
            "description": "some integers.",
        },
        "d": {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "default": 3,
            "description": "a number or a string.",
        },
    },
}


@pytest.mark.parametrize(
    ("style", "path"),
    [
        ("openai", ("function", "parameters")),
        ("anthropic", ("input_schema",)),
        ("mcp", ("inputSchema",)),
    ],
)
def test_schema_from_signature_in_every_style(style, path):
    schema = function_tool(f).schema(style)
    params = schema
    for key in path:
        params = params[key]
    assert params == EXPECTED_PARAMETERS
    body = schema.get("function", schema)
    assert body["name"] == "f"
    assert "A second paragraph that must reach the model." in body["description"]


async def test_call_passes_arguments_and_wraps_non_dict_results():
    tool = function_tool(f)
    assert await tool(a=1, d="x") == {"a": 1, "b": None, "c": [], "d": "x"}

    def count(n: int) -> int:
        return n + 1

    assert await function_tool(count)(n=1) == {"result": 2}


async def test_mutable_defaults_are_not_shared_between_calls():
    def grow(items: list[int] = []) -> list[int]:  # noqa: B006
        items.append(1)
        return items

    tool = function_tool(grow)
    assert await tool() == {"result": [1]}
    assert await tool() == {"result": [1]}


async def test_missing_required_argument_is_an_input_error():
    with pytest.raises(ToolInputError, match="a: Field required"):
        await function_tool(f)(b="x")


async def test_positional_only_parameters_are_passed_positionally():
    def pos(x: int, /, y: int) -> int:
        return x * 10 + y

    assert await function_tool(pos)(x=1, y=2) == {"result": 12}


async def test_parameter_named_like_a_basemodel_attribute_keeps_its_name():
    def shadow(json: str, schema: int = 0) -> str:
        return f"{json}{schema}"

    tool = function_tool(shadow)
    props = tool.schema()["function"]["parameters"]["properties"]
    assert set(props) == {"json", "schema"}
    assert await tool(json="a", schema=2) == {"result": "a2"}


async def test_async_functions_are_awaited():
    async def later(x: int) -> int:
        await anyio.lowlevel.checkpoint()
        return x

    assert await function_tool(later)(x=5) == {"result": 5}


async def test_sync_function_does_not_block_the_event_loop():
    started = anyio.Event()
    release = anyio.Event()
    ticks = 0

    def slow() -> str:
        # Blocks its thread until the event loop has made progress: this can
        # only finish if the loop keeps running while the function runs.
        anyio.from_thread.run_sync(started.set)
        deadline = time.monotonic() + 10
        while not anyio.from_thread.run_sync(release.is_set):
            if time.monotonic() > deadline:
                return "loop was blocked"
            time.sleep(0.001)
        return "done"

    async def ticker():
        nonlocal ticks
        await started.wait()
        for _ in range(5):
            ticks += 1
            await anyio.lowlevel.checkpoint()
        release.set()

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        result = await function_tool(slow)()
    assert result == {"result": "done"}
    assert ticks == 5


def test_name_and_description_overrides():
    tool = function_tool(f, name="combine", description="Short.")
    assert tool.name == "combine"
    assert tool.description == "Short."


@pytest.mark.parametrize(
    "fn",
    [lambda *args: None, lambda **kw: None, lambda _hidden: None],
    ids=["varargs", "varkw", "underscore"],
)
def test_unsupported_signatures_are_refused(fn):
    with pytest.raises(TypeError):
        function_tool(fn)


def test_non_callable_is_refused():
    with pytest.raises(TypeError, match="needs a callable"):
        function_tool(42)  # type: ignore[arg-type]

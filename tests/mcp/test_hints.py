"""Titles, annotations and output schemas of the built-ins, through both MCP servers."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from mcp import Client

from lionfactory import Branch, function_tool
from lionfactory.coding import ALL_CODING_TOOLS, coding_toolkit
from lionfactory.mcp import create_mcp_server
from lionfactory.mcp._hints import hints_for, output_schema
from lionfactory.mcp._protocol import ServedTools
from lionfactory.tools import reader_tool


def test_every_coding_tool_has_hints_and_an_output_schema() -> None:
    tools = coding_toolkit(Branch(), tools=list(ALL_CODING_TOOLS))
    for tool in tools:
        assert hints_for(tool) is not None, tool.name
        assert output_schema(tool) is not None, tool.name


def test_every_coding_tool_describes_itself() -> None:
    """Hints and the response model are set by each factory, not kept in a table."""
    for tool in coding_toolkit(Branch(), tools=list(ALL_CODING_TOOLS)):
        assert tool.hints is not None and tool.hints.title, tool.name
        assert tool.response_model is not None, tool.name
        assert tool.response_model.__name__.endswith("Response"), tool.name


def test_a_users_tool_named_like_a_builtin_gets_no_hints() -> None:
    def bash(command: str) -> str:
        """Pretend to run a command."""
        return command

    tool = function_tool(bash)
    assert hints_for(tool) is None and output_schema(tool) is None
    entry = ServedTools.of([tool]).listing("2025-11-25")[0]
    assert set(entry) == {"name", "description", "inputSchema"}


def test_a_reader_that_may_fetch_urls_is_open_world() -> None:
    closed = hints_for(reader_tool())
    opened = hints_for(reader_tool(allowed_hosts=["example.org"]))
    assert closed is not None and closed.open_world is False
    assert opened is not None and opened.open_world is True


def test_the_listing_is_built_once_per_era() -> None:
    served = ServedTools.of(coding_toolkit(Branch(), tools=["reader"]))
    assert served.listing("2025-06-18") is served.listing("2025-11-25")
    assert served.listing("2025-03-26") is not served.listing("2025-06-18")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("alpha\n", encoding="utf-8")
    return tmp_path


async def test_the_sdk_server_lists_hints_and_returns_valid_structured_content(
    workspace: Path,
) -> None:
    server = create_mcp_server(
        [(coding_toolkit, {"workspace_root": workspace, "tools": ["reader", "editor"]})]
    )
    async with Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        # The client validates structured content against the output schema.
        read = await client.call_tool("reader", {"action": "read", "path": "notes.txt"})
    assert tools["reader"].annotations is not None
    assert tools["reader"].annotations.read_only_hint is True
    assert tools["editor"].output_schema is not None
    assert not read.is_error
    assert read.structured_content is not None
    assert read.structured_content["content"] == "1\talpha"


_JSON_VALUES = [None, True, False, 0, -3, 7, 1.5, "", "x", [], ["a"], [1, None], {}, {"k": 1}]
_OF_TYPE = {
    "null": [None],
    "boolean": [True, False],
    "integer": [0, -3, 7],
    "number": [0, 1.5],
    "string": ["", "x"],
    "array": [[], ["a"], [1, None]],
    "object": [{}, {"k": 1}],
}


def _pydantic_schema(tool: object) -> dict[str, Any]:
    """The response schema as pydantic writes it, opened as `output_schema` opens it."""
    model = tool.response_model  # type: ignore[attr-defined]
    schema: dict[str, Any] = model.model_json_schema(mode="serialization")
    schema.pop("additionalProperties", None)
    return schema


def _declared_types(field: dict[str, Any]) -> list[str]:
    branches = field.get("anyOf", [field])
    return [b["type"] for b in branches if isinstance(b.get("type"), str)]


@functools.cache
def _schemas() -> tuple[tuple[str, dict[str, Any], dict[str, Any] | None], ...]:
    """Every built-in's name, pydantic's output schema and the served one, made once.

    The examples only read them; building the toolkit and pydantic's schema
    for each of 400 examples was most of the test's time.
    """
    tools = coding_toolkit(Branch(), tools=list(ALL_CODING_TOOLS))
    return tuple((tool.name, _pydantic_schema(tool), output_schema(tool)) for tool in tools)


@given(data=st.data())
@settings(max_examples=400, deadline=None)
def test_served_output_schemas_accept_exactly_what_pydantics_do(data: st.DataObject) -> None:
    """Type lists in place of ``anyOf`` of bare types change no verdict, for any built-in."""
    from jsonschema import Draft202012Validator

    tool_name, original, served = data.draw(st.sampled_from(_schemas()))
    assert served is not None
    fields: dict[str, dict[str, Any]] = original["properties"]
    required = set(original.get("required", ()))
    instance: dict[str, Any] = {}
    for name, field in [*fields.items(), ("extra", {})]:
        if name not in required and data.draw(st.booleans()):
            continue  # left out
        fitting = [v for t in _declared_types(field) for v in _OF_TYPE[t]]
        # Mostly a value of a declared type, so that whole instances are valid too.
        pool = fitting if fitting and data.draw(st.integers(0, 9)) else _JSON_VALUES
        instance[name] = data.draw(st.sampled_from(pool))
    verdicts = {Draft202012Validator(schema).is_valid(instance) for schema in (original, served)}
    assert len(verdicts) == 1, (tool_name, instance)
    event(f"valid: {verdicts.pop()}")  # both kinds are drawn (--hypothesis-show-statistics)


def test_optional_fields_are_served_as_type_lists_and_richer_unions_as_written() -> None:
    from lionfactory.mcp._hints import _type_lists

    schema = {
        "properties": {
            "a": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "b": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]},
            "c": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
            "d": {"items": {"anyOf": [{"type": "integer"}, {"type": "string"}]}},
        }
    }
    assert _type_lists(schema) == {
        "properties": {
            "a": {"type": ["string", "null"], "default": None},
            "b": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]},
            "c": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
            "d": {"items": {"type": ["integer", "string"]}},
        }
    }
    reader = output_schema(reader_tool(workspace_root=Path.cwd()))
    assert reader is not None
    assert reader["properties"]["content"]["type"] == ["string", "null"]
    assert "anyOf" not in str(reader["properties"]["content"])

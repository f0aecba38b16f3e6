"""Titles, annotations and output schemas of the built-ins, through both MCP servers."""

from __future__ import annotations

from pathlib import Path

import pytest
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

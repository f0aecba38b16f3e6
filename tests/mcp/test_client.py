"""`McpServer` and `mcp_tools`: an MCP server's tools as lionfactory Tools."""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp import StdioServerParameters

from lionfactory import Branch
from lionfactory.errors import LionfactoryError, McpConnectionError, ToolInputError
from lionfactory.mcp import McpServer, McpToolResponse, mcp_tools, qualified_name
from lionfactory.mcp._client import _response
from lionfactory.testing import assert_no_foreign_bindings

READ = {"action": "read", "path": "notes.txt"}
EDIT = {"action": "edit", "file_path": "notes.txt", "old_string": "beta", "new_string": "BETA"}
HTTPX2_GENERATORS = pytest.mark.filterwarnings(
    r"ignore:Async generator 'http(x|core)2\.:ResourceWarning"  # see test_serve.py
)

StdioServer = Callable[..., StdioServerParameters]


def connect(stdio_server: StdioServer, *extra: str, mode: str = "auto") -> McpServer:
    params = stdio_server(*extra)
    return McpServer.stdio([params.command, *params.args], env=params.env, mode=mode)


async def test_mcp_tools_returns_qualified_working_tools(stdio_server: StdioServer) -> None:
    async with connect(stdio_server) as server:
        tools = mcp_tools(server)
        reader = tools[0]
        result = await reader(**READ)
    assert server.name == "lionfactory"
    assert [t.name for t in tools][:2] == ["mcp__lionfactory__reader", "mcp__lionfactory__editor"]
    assert all(t.bound_to is None for t in tools)
    assert result["success"] is True
    assert result["structured_content"]["content"] == "1\talpha\n2\tbeta"
    # The text the server sent, even though it repeats structured_content.
    assert json.loads(result["content"]) == result["structured_content"]


async def test_the_request_model_is_built_from_the_input_schema(
    stdio_server: StdioServer,
) -> None:
    async with connect(stdio_server) as server:
        reader = mcp_tools(server, include=["reader"])[0]
        listed = server.tools[0]
        assert reader.schema("mcp")["inputSchema"] == listed.input_schema
        with pytest.raises(ToolInputError, match="action: Input should be 'read', 'open'"):
            await reader(action="reed", path="notes.txt")
        assert reader.request_model.model_validate(READ).arguments() == READ


async def test_registered_tools_survive_clone(
    stdio_server: StdioServer, git_workspace: Path
) -> None:
    async with connect(stdio_server) as server:
        branch = Branch("system")
        branch.register(mcp_tools, server=server, include=["reader", "editor"])
        read = await branch.act("mcp__lionfactory__reader", READ)
        clone = branch.clone()
        assert_no_foreign_bindings(clone)
        assert list(clone.tools) == ["mcp__lionfactory__reader", "mcp__lionfactory__editor"]
        assert clone.provenance("mcp__lionfactory__reader").kwargs["server"] is server
        again = await clone.act("mcp__lionfactory__reader", READ)
        # The clone shares the connection, so it shares the remote session:
        # the read made through the source branch counts for its edit.
        edit = await clone.act("mcp__lionfactory__editor", EDIT)
    assert read.result is not None and read.result["success"] is True
    assert again.result is not None and again.result["success"] is True
    assert edit.result is not None and edit.result["success"] is True, edit.result
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == "alpha\nBETA\n"


async def test_separate_connections_have_separate_remote_sessions(
    stdio_server: StdioServer,
) -> None:
    async with connect(stdio_server) as first, connect(stdio_server) as second:
        reader = mcp_tools(first, include=["reader"])[0]
        editor = mcp_tools(second, include=["editor"])[0]
        await reader(**READ)
        refused = await editor(**EDIT)
    assert refused["success"] is False
    assert "has not been read" in refused["error"]


async def test_a_remote_failure_is_a_typed_failure(stdio_server: StdioServer) -> None:
    async with connect(stdio_server) as server:
        bash = mcp_tools(server, include=["bash"])[0]
        result = await bash(command="false")
    assert result["success"] is False
    assert result["structured_content"]["return_code"] == 1
    assert result["error"] == "The tool reported a failure; see structured_content."


async def test_a_call_after_the_connection_closed_is_a_typed_failure(
    stdio_server: StdioServer,
) -> None:
    async with connect(stdio_server) as server:
        reader = mcp_tools(server, include=["reader"])[0]
    assert not server.connected
    result = await reader(**READ)
    assert result["success"] is False
    assert "cannot be reached (its connection is closed)" in result["error"]


async def test_include_and_prefix(stdio_server: StdioServer) -> None:
    async with connect(stdio_server) as server:
        tools = mcp_tools(server, include=["search", "reader"], prefix="lf_")
        with pytest.raises(ValueError, match=r"has no tool\(s\) \['nope'\]; it has: reader"):
            mcp_tools(server, include=["nope"])
        with pytest.raises(TypeError, match="the string 'reader'"):
            mcp_tools(server, include="reader")
    assert [t.name for t in tools] == ["lf_search", "lf_reader"]


@HTTPX2_GENERATORS
async def test_mcp_tools_over_http_in_a_session(http_url: str) -> None:
    async with McpServer.http(http_url, name="remote files", mode="legacy") as server:
        tools = {t.name: t for t in mcp_tools(server, include=["reader", "editor"])}
        await tools["mcp__remote_files__reader"](**READ)
        edit = await tools["mcp__remote_files__editor"](**EDIT)
    assert edit["success"] is True, edit


def test_mcp_tools_needs_an_open_server() -> None:
    server = McpServer.stdio([sys.executable, "-c", "pass"])
    with pytest.raises(RuntimeError, match="open it first"):
        mcp_tools(server)
    with pytest.raises(TypeError, match="must be an McpServer"):
        mcp_tools("server")  # type: ignore[arg-type]


def test_server_constructors_check_their_arguments() -> None:
    with pytest.raises(ValueError, match="non-empty list of words, got 'lionfactory mcp serve'"):
        McpServer.stdio("lionfactory mcp serve")
    with pytest.raises(ValueError, match="http:// or https:// URL, got 'ftp://x'"):
        McpServer.http("ftp://x")


@pytest.mark.parametrize(
    ("server", "tool", "prefix", "expected"),
    [
        ("files", "read", None, "mcp__files__read"),
        ("my server", "read.file", None, "mcp__my_server__read_file"),
        ("files", "read", "fs_", "fs_read"),
        ("ünïcode", "tööl", None, "mcp__n_code__t_l"),
    ],
)
def test_qualified_names_keep_to_the_allowed_characters(
    server: str, tool: str, prefix: str | None, expected: str
) -> None:
    assert qualified_name(server, tool, prefix=prefix) == expected


def test_long_qualified_names_are_cut_to_64_and_stay_distinct() -> None:
    first = qualified_name("server", "a" * 80 + "_one")
    second = qualified_name("server", "a" * 80 + "_two")
    assert len(first) == len(second) == 64
    assert first != second
    assert first.startswith("mcp__server__aaaa")


def test_an_image_is_passed_on_as_a_data_url_like_the_readers() -> None:
    from mcp import types

    result = types.CallToolResult(
        content=[
            types.TextContent(text="see"),
            types.ImageContent(data="AAAA", mime_type="image/png"),
        ]
    )
    response = McpToolResponse.model_validate(_response(result).model_dump())
    assert response.content == "see\ndata:image/png;base64,AAAA"
    assert response.success is True


def test_audio_and_oversized_images_are_described() -> None:
    from mcp import types

    huge = "A" * (8 * 1024 * 1024)
    result = types.CallToolResult(
        content=[
            types.AudioContent(data="AAAA", mime_type="audio/wav"),
            types.ImageContent(data=huge, mime_type="image/png"),
        ]
    )
    response = _response(result)
    assert response.content == "[audio: audio/wav, 3 bytes]\n[image: image/png, 6291456 bytes]"


# A third-party server, written with the SDK's own MCPServer, that can die,
# hang and publish a schema lionfactory did not write.
FAKE_SERVER = """
import os
import anyio
from mcp import types
from mcp.server.mcpserver import MCPServer

app = MCPServer("fake")

@app.tool()
def exit_now() -> str:
    '''Exit the server process.'''
    os._exit(3)

@app.tool()
async def nap(seconds: float) -> str:
    '''Sleep, then answer.'''
    await anyio.sleep(seconds)
    return "rested"

@app.tool()
def greet(name: str, times: int = 1, loud: bool = False) -> str:
    '''Greet someone.'''
    text = ("hello " + name + " ") * times
    return text.upper() if loud else text

@app.tool()
def linked() -> list:
    '''Answer with a link to a resource and an embedded one.'''
    return [
        types.TextContent(type="text", text="see these"),
        types.ResourceLink(
            type="resource_link", uri="file:///big.log", name="big.log",
            mime_type="text/plain", size=12345,
        ),
        types.EmbeddedResource(
            type="resource",
            resource=types.TextResourceContents(
                uri="file:///small.txt", mime_type="text/plain", text="tiny contents"
            ),
        ),
    ]

@app.resource("file:///notes.md", name="notes", mime_type="text/markdown")
def notes() -> str:
    return "# notes"

app.run()
"""


@pytest.fixture
def fake_server(tmp_path: Path) -> list[str]:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER, encoding="utf-8")
    return [sys.executable, str(script)]


async def test_a_third_party_servers_tools_work(fake_server: list[str]) -> None:
    async with McpServer.stdio(fake_server) as server:
        greet = mcp_tools(server, include=["greet"])[0]
        result = await greet(name="ada", times=2, loud=True)
        with pytest.raises(ToolInputError, match="times"):
            await greet(name="ada", times="twice")
    assert greet.name == "mcp__fake__greet"
    assert result["success"] is True
    assert "HELLO ADA HELLO ADA" in result["content"] + str(result["structured_content"])


async def test_a_server_that_dies_gives_a_typed_failure(fake_server: list[str]) -> None:
    async with McpServer.stdio(fake_server, errlog=sys.stderr) as server:
        tools = {t.name: t for t in mcp_tools(server, prefix="")}
        died = await tools["exit_now"]()
        after = await tools["greet"](name="ada")
    assert died["success"] is False
    assert "cannot be reached (the connection closed)" in died["error"]
    assert after["success"] is False


async def test_a_server_that_does_not_answer_in_time_gives_a_typed_failure(
    fake_server: list[str],
) -> None:
    async with McpServer.stdio(fake_server, timeout=0.5, connect_timeout=60) as server:
        nap = mcp_tools(server, include=["nap"])[0]
        slow = await nap(seconds=30)
        quick = await nap(seconds=0)
    assert slow["success"] is False
    assert "did not answer in time (0.5 s)" in slow["error"]
    assert quick["success"] is True


# -- connection failures: one typed error, within the timeout -------------------

SILENT = [sys.executable, "-c", "import sys; sys.stdin.read()"]  # never answers; exits at EOF


async def test_a_silent_server_fails_within_the_timeout_with_one_typed_error() -> None:
    started = time.monotonic()
    with pytest.raises(McpConnectionError) as caught:
        async with McpServer.stdio(SILENT, name="silent", timeout=2, errlog=sys.stderr):
            pass
    elapsed = time.monotonic() - started
    error = caught.value
    assert (error.server, error.phase) == ("silent", "initialize")
    assert "no answer within the timeout of 2 s" in str(error)
    assert isinstance(error, ConnectionError) and isinstance(error, LionfactoryError)
    assert 1.9 <= elapsed < 3.5, elapsed


async def test_connect_timeout_overrides_timeout_for_the_connection_only() -> None:
    started = time.monotonic()
    with pytest.raises(McpConnectionError, match="timeout of 1 s"):
        async with McpServer.stdio(SILENT, timeout=60, connect_timeout=1, errlog=sys.stderr):
            pass
    assert time.monotonic() - started < 2.5


async def test_a_program_that_exits_at_once_fails_in_initialize() -> None:
    command = [sys.executable, "-c", "pass"]
    with pytest.raises(McpConnectionError) as caught:
        async with McpServer.stdio(command, timeout=30, errlog=sys.stderr):
            pass
    error = caught.value
    assert error.phase == "initialize"
    assert error.server == f"{sys.executable} -c pass"
    assert "closed the connection before answering" in error.reason
    assert not isinstance(error.__cause__, BaseExceptionGroup)


async def test_a_missing_program_fails_in_start(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-server")
    with pytest.raises(McpConnectionError) as caught:
        async with McpServer.stdio([missing]):
            pass
    assert caught.value.phase == "start"
    assert "could not be started (FileNotFoundError" in caught.value.reason
    assert isinstance(caught.value.__cause__, FileNotFoundError)


@HTTPX2_GENERATORS
async def test_a_refused_http_connection_fails_in_initialize() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(McpConnectionError) as caught:
        async with McpServer.http(f"http://127.0.0.1:{port}/mcp", timeout=10):
            pass
    assert caught.value.phase == "initialize"
    assert caught.value.server == f"http://127.0.0.1:{port}/mcp"


async def test_a_call_on_a_dead_connection_raises_in_call(fake_server: list[str]) -> None:
    async with McpServer.stdio(fake_server, errlog=sys.stderr) as server:
        with pytest.raises(McpConnectionError) as caught:
            await server.call_tool("exit_now", {})
    assert (caught.value.server, caught.value.phase) == ("fake", "call")


async def test_resource_links_and_embedded_resources_are_kept(fake_server: list[str]) -> None:
    async with McpServer.stdio(fake_server) as server:
        linked = mcp_tools(server, include=["linked"])[0]
        result = await linked()
    assert result["success"] is True
    assert result["content"] == (
        "see these\n[resource_link: file:///big.log (big.log, text/plain)]\n"
        "[resource: file:///small.txt, text/plain]\ntiny contents"
    )
    assert result["resources"] == [
        {
            "kind": "resource_link",
            "uri": "file:///big.log",
            "name": "big.log",
            "mime_type": "text/plain",
            "text": None,
            "size": 12345,
        },
        {
            "kind": "resource",
            "uri": "file:///small.txt",
            "name": None,
            "mime_type": "text/plain",
            "text": "tiny contents",
            "size": None,
        },
    ]


async def test_the_resources_tool_lists_and_reads_when_asked_for(fake_server: list[str]) -> None:
    async with McpServer.stdio(fake_server) as server:
        assert "mcp__fake__resources" not in [t.name for t in mcp_tools(server)]
        tool = mcp_tools(server, include=[], resources=True)[0]
        listed = await tool(action="list")
        read = await tool(action="read", uri="file:///notes.md")
        missing = await tool(action="read", uri="file:///nope")
        with pytest.raises(ToolInputError, match="needs the uri"):
            await tool(action="read")
    assert tool.name == "mcp__fake__resources"
    assert listed["success"] is True
    assert [(r["uri"], r["name"], r["mime_type"]) for r in listed["resources"]] == [
        ("file:///notes.md", "notes", "text/markdown")
    ]
    assert read["resources"][0]["text"] == "# notes"
    assert read["resources"][0]["mime_type"] == "text/markdown"
    assert missing["success"] is False
    assert "List the resources to find a valid uri" in missing["error"]


async def test_the_resources_tool_is_refused_for_a_server_without_resources(
    stdio_server: StdioServer,
) -> None:
    async with connect(stdio_server, "--tools", "reader") as server:
        if server.has_resources:
            pytest.skip("this lionfactory server serves resources")
        with pytest.raises(ValueError, match="serves no resources"):
            mcp_tools(server, resources=True)


@pytest.mark.parametrize("mode", ["legacy", "auto", "2026-07-28"])
async def test_mcp_tools_read_over_stdio_in_each_mode(stdio_server: StdioServer, mode: str) -> None:
    async with connect(stdio_server, mode=mode) as server:
        reader = mcp_tools(server, include=["reader"])[0]
        result = await reader(**READ)
        version = server.protocol_version
    assert version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert result["success"] is True
    assert result["structured_content"]["content"] == "1\talpha\n2\tbeta"


@HTTPX2_GENERATORS
@pytest.mark.parametrize("mode", ["legacy", "auto", "2026-07-28"])
async def test_mcp_tools_read_over_http_in_each_mode(http_url: str, mode: str) -> None:
    async with McpServer.http(http_url, mode=mode) as server:
        reader = mcp_tools(server, include=["reader"])[0]
        result = await reader(**READ)
        version = server.protocol_version
    assert version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
    assert result["success"] is True
    assert json.loads(result["content"]) == result["structured_content"]


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode must be one of"):
        McpServer.stdio(["x"], mode="2025-11-25")
    with pytest.raises(ValueError, match="mode must be one of"):
        McpServer.http("http://127.0.0.1:1/mcp", mode="modern")

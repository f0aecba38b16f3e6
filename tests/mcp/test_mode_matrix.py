"""Every client-facing MCP feature, through the official client in its default mode and each other.

The SDK's `Client` defaults to ``mode="auto"``, which speaks 2026-07-28 to a
server that offers it; a feature tested only with ``mode="legacy"`` can be
broken for every user who takes the default. Each feature here runs in the
default mode (the client built without ``mode``), the handshake
(``"legacy"``) and every modern version the SDK speaks, over lionfactory's
own stdio loop and over HTTP (the SDK's server).

The last tests are the guard: they ask the real server which methods it
answers and which capabilities it advertises, in each era, and fail when one
is not in `COVERED`, so a new feature cannot be served without joining the
matrix.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import make_git_workspace, serving_http, stdio_parameters
from mcp import Client, StdioServerParameters, types
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types.methods import CLIENT_REQUESTS
from mcp_types.version import LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS

from lionfactory import function_tool
from lionfactory.errors import ApprovalRequired
from lionfactory.mcp._stateless import PROGRESS_ENVIRONMENT

pytestmark = pytest.mark.filterwarnings(
    r"ignore:Async generator 'http(x|core)2\.:ResourceWarning"  # see test_serve.py
)

DEFAULT = "default"
"""The client built without ``mode``: what a user gets."""
MODES = [DEFAULT, "legacy", *MODERN_PROTOCOL_VERSIONS]
TRANSPORTS = ["stdio", "http"]

COVERED: dict[str, str] = {
    # The connection itself: every test below opens one in its mode.
    "initialize": "every legacy connection",
    "ping": "test_tools_list_and_call",
    "server/discover": "every modern connection",
    "tools/list": "test_tools_list_and_call",
    "tools/call": "test_tools_list_and_call, test_progress, test_approvals",
    "resources/list": "test_resources_list_templates_and_read",
    "resources/templates/list": "test_resources_list_templates_and_read",
    "resources/read": "test_resources_list_templates_and_read",
    "resources/subscribe": "test_resource_subscriptions",
    "resources/unsubscribe": "test_resource_subscriptions",
}
"""Each method a client may send that the server answers, and the matrix test covering it."""

CAPABILITIES_COVERED = {"tools", "resources"}
"""The server capabilities whose features the matrix covers."""


def client_for(target: Any, mode: str, **options: Any) -> Client:
    if mode == DEFAULT:
        return Client(target, **options)
    return Client(target, mode=mode, **options)


def expected_version(mode: str) -> str:
    return LATEST_HANDSHAKE_VERSION if mode == "legacy" else MODERN_PROTOCOL_VERSIONS[-1]


@pytest.fixture
def workspace(git_workspace: Path) -> Path:
    (git_workspace / "src").mkdir()
    (git_workspace / "src" / "app.py").write_text("print('hi')\n", encoding="utf-8")
    return git_workspace


@pytest.fixture(scope="module")
def served_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`workspace` for the tests that connect: they only read it, so one for the module."""
    root = make_git_workspace(tmp_path_factory.mktemp("matrix") / "repo")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('hi')\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def served_http_url(served_workspace: Path) -> Iterator[str]:
    """One HTTP server for the module, ticking progress every 0.2 s (each test its own session)."""
    with serving_http(served_workspace, env={PROGRESS_ENVIRONMENT: "0.2"}) as url:
        yield url


@pytest.fixture
def connect(
    served_workspace: Path, request: pytest.FixtureRequest
) -> Callable[..., AbstractAsyncContextManager[Client]]:
    @asynccontextmanager
    async def connected(transport: str, mode: str, **options: Any) -> AsyncIterator[Client]:
        if transport == "stdio":
            server = stdio_parameters(served_workspace)
            async with client_for(server, mode, **options) as client:
                assert client.protocol_version == expected_version(mode)
                yield client
            return
        url = request.getfixturevalue("served_http_url")
        async with client_for(url, mode, **options) as client:
            assert client.protocol_version == expected_version(mode)
            yield client

    return connected


def text(result: types.CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_tools_list_and_call(transport: str, mode: str, connect: Any) -> None:
    async with connect(transport, mode) as client:
        listed = await client.list_tools()
        assert {"reader", "editor", "bash"} <= {tool.name for tool in listed.tools}
        result = await client.call_tool("reader", {"action": "read", "path": "notes.txt"})
        assert not result.is_error, text(result)
        assert "beta" in text(result)
        failed = await client.call_tool("reader", {"action": "read", "path": "missing.txt"})
        assert failed.is_error
        if mode == "legacy":
            # The SDK marks ping deprecated (gone in 2026-07-28) in every mode.
            with pytest.warns(MCPDeprecationWarning):
                await client.send_ping()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_resources_list_templates_and_read(
    transport: str, mode: str, connect: Any, served_workspace: Path
) -> None:
    async with connect(transport, mode) as client:
        # A pinned version adopts no discover result, so it knows no capabilities.
        pinned = mode in MODERN_PROTOCOL_VERSIONS
        assert pinned or client.server_capabilities.resources is not None
        page = await client.list_resources()
        assert [r.name for r in page.resources] == ["notes.txt", "src/app.py"]
        (template,) = (await client.list_resource_templates()).resource_templates
        assert template.uri_template == served_workspace.as_uri() + "/{+path}"
        read = await client.read_resource((served_workspace / "src" / "app.py").as_uri())
        assert getattr(read.contents[0], "text", None) == "print('hi')\n"
        with pytest.raises(MCPError, match="protected") as refused:
            await client.read_resource((served_workspace / ".env").as_uri())
        assert refused.value.error.code == -32002


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_resource_subscriptions(
    transport: str, mode: str, connect: Any, served_workspace: Path
) -> None:
    """The handshake's subscribe pair where it is advertised; not advertised where it is gone."""
    async with connect(transport, mode) as client:
        resources = client.server_capabilities.resources
        uri = (served_workspace / "notes.txt").as_uri()
        if resources is None or not resources.subscribe:
            # Only the stdio loop watches files; the 2026-07-28 era removed the pair.
            assert transport == "http" or mode != "legacy"
            return
        assert transport == "stdio" and mode == "legacy"
        # The SDK marks the pair deprecated (gone in 2026-07-28) in every mode.
        with pytest.warns(MCPDeprecationWarning):
            await client.subscribe_resource(uri)
        with pytest.warns(MCPDeprecationWarning):
            await client.unsubscribe_resource(uri)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.usefixtures("fast_progress")
async def test_progress(transport: str, mode: str, connect: Any) -> None:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    async with connect(transport, mode) as client:
        # Three intervals of `fast_progress`: ticks come however late a loaded machine is.
        result = await client.call_tool(
            "bash", {"command": "sleep 0.6"}, progress_callback=on_progress
        )
    assert not result.is_error, text(result)
    assert seen and seen == sorted(seen)


RAN: list[str] = []


def deploy(target: str) -> str:
    """Deploy."""
    RAN.append(target)
    return f"deployed {target}"


def ask(tool: str, arguments: dict[str, Any]) -> None:
    raise ApprovalRequired("deploys to production")


def deploy_tools() -> Any:
    return function_tool(deploy).with_hooks(pre=[ask])


@pytest.mark.parametrize("mode", MODES)
async def test_approvals(mode: str) -> None:
    """A held call: asked through elicitation in the handshake era, refused with the reason else.

    2026-07-28 has no server-to-client requests, so a modern client is told a
    person must approve, and the call waits.
    """
    from lionfactory.mcp import create_mcp_server

    RAN.clear()
    questions: list[str] = []

    async def approve(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        questions.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    server = create_mcp_server(deploy_tools)
    async with client_for(server, mode, elicitation_callback=approve) as client:
        result = await client.call_tool("deploy", {"target": "prod"})
    if mode == "legacy":
        assert not result.is_error, text(result)
        assert RAN == ["prod"] and len(questions) == 1
    else:
        assert result.is_error and RAN == []
        assert "A person must approve" in text(result)


# -- the guard ------------------------------------------------------------------


def _probe_stdio(server: StdioServerParameters, era: str) -> tuple[set[str], dict[str, Any]]:
    """The methods the real stdio server answers in `era`, and the capabilities it advertises."""
    version = LATEST_HANDSHAKE_VERSION if era == "legacy" else era
    methods = sorted({m for m, v in CLIENT_REQUESTS if v == version})
    envelope = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    frames = []
    first = "initialize" if era == "legacy" else "server/discover"
    for i, method in enumerate([first, *methods]):
        params: dict[str, Any] = {}
        if era == "legacy" and method == "initialize":
            params = {"protocolVersion": version, "capabilities": {}}
        elif era != "legacy":
            params = {"_meta": envelope}
        frames.append(json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}))
    done = subprocess.run(
        [server.command, *server.args],
        input="\n".join(frames) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**(server.env or {}), "PATH": "/usr/bin:/bin"},
    )
    replies = {}
    for line in done.stdout.splitlines():
        reply = json.loads(line)
        if "id" in reply:
            replies[reply["id"]] = reply
    answered = set()
    for i, method in enumerate([first, *methods]):
        reply = replies[i]
        if reply.get("error", {}).get("code") != -32601:
            answered.add(method)
    capabilities = replies[0]["result"]["capabilities"]
    return answered, capabilities


@pytest.mark.parametrize("era", ["legacy", *MODERN_PROTOCOL_VERSIONS])
def test_every_method_the_stdio_server_answers_is_in_the_mode_matrix(
    era: str, workspace: Path, stdio_server: Callable[..., StdioServerParameters]
) -> None:
    answered, capabilities = _probe_stdio(stdio_server(), era)
    assert "tools/call" in answered and "resources/read" in answered  # the probe works
    uncovered = answered - set(COVERED)
    assert not uncovered, f"add a test in every mode to this file for {sorted(uncovered)}"
    assert set(capabilities) <= CAPABILITIES_COVERED, capabilities


@pytest.mark.parametrize("mode", ["legacy", DEFAULT])
async def test_every_capability_the_http_server_advertises_is_in_the_mode_matrix(
    mode: str, workspace: Path, start_http: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    async with start_http() as url, client_for(url, mode) as client:
        advertised = client.server_capabilities.model_dump(exclude_none=True)
    assert set(advertised) <= CAPABILITIES_COVERED, advertised


def test_the_matrix_names_only_tests_that_exist() -> None:
    here = globals()
    for covering in COVERED.values():
        for name in covering.split(", "):
            assert name.startswith("every ") or name in here, name

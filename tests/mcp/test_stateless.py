"""The 2026-07-28 protocol next to the handshake: the official client in every mode, two replicas.

Over HTTP a 2026-07-28 call has no session, so it runs on a branch of its
own: a read in one request is no evidence for the next, and an edit needs
the ``expected_hash`` of the file's content (the reader's ``content_hash``).
Over stdio the process serves one client, so the connection keeps its branch
in every era.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from _test_helpers import eventually, processes_tagged
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS

from lionfactory.mcp._stateless import MODERN_VERSIONS

HTTPX2_GENERATORS = pytest.mark.filterwarnings(
    r"ignore:Async generator 'http(x|core)2\.:ResourceWarning"  # see test_serve.py
)
READ = {"action": "read", "path": "notes.txt"}
EDIT = {"action": "edit", "file_path": "notes.txt", "old_string": "beta", "new_string": "BETA"}
MODES = ["legacy", "auto", "2026-07-28"]
NOTES = "alpha\nbeta\n"
StartHttp = Callable[..., AbstractAsyncContextManager[str]]


def text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


def test_the_modern_versions_are_the_sdks() -> None:
    assert MODERN_VERSIONS == MODERN_PROTOCOL_VERSIONS


def expected_version(mode: str) -> str:
    return LATEST_HANDSHAKE_VERSION if mode == "legacy" else "2026-07-28"


@asynccontextmanager
async def connected(
    transport: str,
    mode: str,
    stdio_server: Callable[..., StdioServerParameters],
    start_http: StartHttp,
) -> AsyncIterator[Client]:
    if transport == "stdio":
        async with Client(stdio_server(), mode=mode) as client:
            yield client
        return
    async with start_http() as url, Client(url, mode=mode) as client:
        yield client


@HTTPX2_GENERATORS
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", MODES)
async def test_the_official_client_lists_reads_and_is_refused_an_unread_edit(
    transport: str,
    mode: str,
    stdio_server: Callable[..., StdioServerParameters],
    git_workspace: Path,
    start_http: StartHttp,
) -> None:
    async with connected(transport, mode, stdio_server, start_http) as client:
        listed = await client.list_tools()
        edit = await client.call_tool("editor", EDIT)
        read = await client.call_tool("reader", READ)
        version = client.protocol_version
    assert version == expected_version(mode)
    assert "reader" in [t.name for t in listed.tools]
    if mode != "legacy":
        # Cacheable in 2026-07-28: the listing is fixed while the process runs.
        assert listed.ttl_ms == 300_000
        assert listed.cache_scope == "public"
    assert not read.is_error
    assert read.structured_content["content"] == "1\talpha\n2\tbeta"
    assert edit.is_error
    assert "has not been read" in edit.structured_content["error"]
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == NOTES


@HTTPX2_GENERATORS
async def test_a_stateless_http_read_is_no_evidence_for_the_next_request(http_url: str) -> None:
    async with Client(http_url, mode="2026-07-28") as client:
        read = await client.call_tool("reader", READ)
        edit = await client.call_tool("editor", EDIT)
    assert not read.is_error
    assert edit.is_error
    assert "has not been read" in edit.structured_content["error"]


@HTTPX2_GENERATORS
async def test_a_handshake_session_over_http_keeps_its_evidence(http_url: str) -> None:
    async with Client(http_url, mode="legacy") as client:
        await client.call_tool("reader", READ)
        edit = await client.call_tool("editor", EDIT)
    assert not edit.is_error, text(edit)


async def test_a_stdio_connection_keeps_its_branch_in_the_2026_era(
    stdio_server: Callable[..., StdioServerParameters], git_workspace: Path
) -> None:
    async with Client(stdio_server(), mode="2026-07-28") as client:
        await client.call_tool("reader", READ)
        edit = await client.call_tool("editor", EDIT)
    assert not edit.is_error, text(edit)
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == "alpha\nBETA\n"


class Alternating(httpx2.AsyncBaseTransport):
    """Sends each HTTP request to the next of several servers in turn (a plain load balancer)."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.sent: list[int] = []
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = self.ports[len(self.sent) % len(self.ports)]
        self.sent.append(port)
        request.url = request.url.copy_with(port=port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def two_replicas(start_http: StartHttp) -> AsyncIterator[tuple[Client, Alternating]]:
    """Two server processes on one workspace, behind one client that alternates between them."""
    async with start_http() as first, start_http() as second:
        ports = [httpx2.URL(first).port, httpx2.URL(second).port]
        balancer = Alternating([p for p in ports if p is not None])
        http = httpx2.AsyncClient(transport=balancer, timeout=httpx2.Timeout(60.0))
        async with (
            http,
            Client(streamable_http_client(first, http_client=http), mode="2026-07-28") as client,
        ):
            yield client, balancer


@HTTPX2_GENERATORS
async def test_two_replicas_serve_one_conversation_alternately(
    git_workspace: Path, start_http: StartHttp
) -> None:
    async with two_replicas(start_http) as (client, balancer):
        before = len(balancer.sent)
        first = await client.call_tool("reader", READ)
        second = await client.call_tool("reader", {**READ, "offset": 1})
        refused = await client.call_tool("editor", EDIT)
        served = balancer.sent[before:]
    assert len(set(served)) == 2, served  # both replicas answered calls
    assert served[0] != served[1]
    assert first.structured_content["content"] == "1\talpha\n2\tbeta"
    assert second.structured_content["content"] == "2\tbeta"
    assert refused.is_error
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == NOTES


@HTTPX2_GENERATORS
async def test_a_read_on_one_replica_proves_an_edit_on_the_other(
    git_workspace: Path, start_http: StartHttp
) -> None:
    async with two_replicas(start_http) as (client, balancer):
        before = len(balancer.sent)
        read = await client.call_tool("reader", READ)
        digest = read.structured_content["content_hash"]
        edit = await client.call_tool("editor", {**EDIT, "expected_hash": digest})
        served = balancer.sent[before:]
    assert served[0] != served[1]
    assert not edit.is_error, text(edit)
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == "alpha\nBETA\n"


@HTTPX2_GENERATORS
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", MODES)
async def test_an_edit_with_the_reads_hash_applies_in_every_mode(
    transport: str,
    mode: str,
    stdio_server: Callable[..., StdioServerParameters],
    git_workspace: Path,
    start_http: StartHttp,
) -> None:
    async with connected(transport, mode, stdio_server, start_http) as client:
        read = await client.call_tool("reader", READ)
        edit = await client.call_tool(
            "editor", {**EDIT, "expected_hash": read.structured_content["content_hash"]}
        )
    assert not edit.is_error, text(edit)
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == "alpha\nBETA\n"


@HTTPX2_GENERATORS
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", MODES)
async def test_a_wrong_hash_is_refused_with_advice_to_read_again(
    transport: str,
    mode: str,
    stdio_server: Callable[..., StdioServerParameters],
    git_workspace: Path,
    start_http: StartHttp,
) -> None:
    async with connected(transport, mode, stdio_server, start_http) as client:
        await client.call_tool("reader", READ)
        edit = await client.call_tool("editor", {**EDIT, "expected_hash": "0" * 64})
    assert edit.is_error
    assert "read" in edit.structured_content["error"].lower()
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == NOTES


@HTTPX2_GENERATORS
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.usefixtures("fast_progress")
async def test_a_long_call_reports_progress_every_interval(
    transport: str,
    mode: str,
    stdio_server: Callable[..., StdioServerParameters],
    start_http: StartHttp,
) -> None:
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with connected(transport, mode, stdio_server, start_http) as client:
        result = await client.call_tool(
            "bash", {"command": "sleep 1.2"}, progress_callback=on_progress
        )
        quiet: list[float] = []

        async def count(progress: float, total: float | None, message: str | None) -> None:
            quiet.append(progress)

        await client.call_tool("reader", READ, progress_callback=count)
    assert not result.is_error, text(result)
    # Six intervals of 0.2 s; at least half of them reported (a loaded
    # machine may be late); the values grow.
    assert len(seen) >= 3, seen
    values = [p for p, _ in seen]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert all(message and message.startswith("running for ") for _, message in seen)
    assert quiet == []  # a quick call sends none


@pytest.mark.usefixtures("fast_progress")
async def test_a_call_without_a_progress_token_sends_no_progress(
    stdio_server: Callable[..., StdioServerParameters],
) -> None:
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)

    async with Client(stdio_server(), mode="2026-07-28", message_handler=on_message) as client:
        # Three intervals of `fast_progress` in which a token would have had a tick.
        result = await client.call_tool("bash", {"command": "sleep 0.6"})
    assert not result.is_error
    assert seen == []


async def test_cancelling_a_2026_call_over_http_ends_its_command(
    http_url: str, git_workspace: Path
) -> None:
    marker = git_workspace / "finished"
    async with Client(http_url, mode="2026-07-28") as client:
        # The same command, not cancelled, does leave its file.
        control = await client.call_tool("bash", {"command": "sh -c 'sleep 0.1; touch control'"})
        assert not control.is_error, text(control)
        assert (git_workspace / "control").exists()
        tag = f"cancelled-{uuid.uuid4().hex}"
        command = f"sh -c 'touch started; sleep 60; touch finished' {tag}"
        async with anyio.create_task_group() as group:
            group.start_soon(client.call_tool, "bash", {"command": command})
            await eventually((git_workspace / "started").exists, 30)
            group.cancel_scope.cancel()
        # The shell that would touch the file is gone: it can never finish.
        await eventually(lambda: not processes_tagged(tag), 30)
    assert not marker.exists()


_LINES = re.compile(r"(\d+) lines? of output so far")


# Six lines over 1.2 s: six progress intervals of `fast_progress`.
def _ticking(workspace: Path) -> str:
    """Six lines, each after the test saw the one before it counted in a progress message.

    Paced by the test, not by the clock: on a loaded machine a command
    sleeping between lines could finish before the call that waits for it
    had begun, and a report or two was all there was to see.
    """
    acked = f"{workspace}/ack"
    return (
        f"for i in 1 2 3 4 5 6; do echo line $i; until [ -e {acked}$i ]; do sleep 0.02; done; done"
    )


def _pacing(
    workspace: Path, seen: list[tuple[float, str | None]]
) -> Callable[[float, float | None, str | None], Awaitable[None]]:
    """A progress callback that records each message and lets the command go on."""

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))
        match = _LINES.search(message or "")
        for line in range(1, int(match.group(1)) + 1 if match else 1):
            (workspace / f"ack{line}").touch()

    return on_progress


def _before_counting(seen: list[tuple[float, str | None]]) -> int:
    """How many messages came before the first that counts lines."""
    for index, (_, message) in enumerate(seen):
        if _LINES.search(message or ""):
            return index
    return len(seen)


def _line_counts(seen: list[tuple[float, str | None]]) -> list[int]:
    counts = []
    for _, message in seen:
        match = _LINES.search(message or "")
        if match:
            counts.append(int(match.group(1)))
    return counts


@HTTPX2_GENERATORS
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.usefixtures("fast_progress")
async def test_a_bash_call_reports_its_lines_of_output_as_they_grow(
    transport: str,
    mode: str,
    stdio_server: Callable[..., StdioServerParameters],
    start_http: StartHttp,
    git_workspace: Path,
) -> None:
    seen: list[tuple[float, str | None]] = []
    async with connected(transport, mode, stdio_server, start_http) as client:
        result = await client.call_tool(
            "bash",
            {"command": _ticking(git_workspace)},
            progress_callback=_pacing(git_workspace, seen),
        )
    assert not result.is_error, text(result)
    # Each of the six lines was counted before the next was written.
    assert len(seen) >= 6, seen
    counts = _line_counts(seen)
    # Every message from the command's start on counts the lines (a tick
    # before the program started has nothing to count yet).
    assert counts and len(counts) == len(seen) - _before_counting(seen), seen
    assert counts == sorted(counts) and counts[-1] > counts[0] >= 0, seen
    assert counts[-1] <= 6


@HTTPX2_GENERATORS
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.usefixtures("fast_progress")
async def test_a_jobs_wait_reports_the_jobs_lines_of_output_as_they_grow(
    transport: str,
    stdio_server: Callable[..., StdioServerParameters],
    start_http: StartHttp,
    git_workspace: Path,
) -> None:
    seen: list[tuple[float, str | None]] = []
    # A session (legacy mode): the job must outlive the call that started it.
    async with connected(transport, "legacy", stdio_server, start_http) as client:
        started = await client.call_tool(
            "bash", {"command": _ticking(git_workspace), "background": True}
        )
        job_id = started.structured_content["job_id"]
        waited = await client.call_tool(
            "jobs",
            {"action": "wait", "job_id": job_id, "timeout": 60_000},
            progress_callback=_pacing(git_workspace, seen),
        )
    assert not waited.is_error, text(waited)
    assert waited.structured_content["return_code"] == 0, text(waited)
    assert len(seen) >= 5, seen  # the first line may be out before the wait begins
    counts = _line_counts(seen)
    assert counts and len(counts) == len(seen) - _before_counting(seen), seen
    assert counts == sorted(counts) and counts[-1] > counts[0], seen


@HTTPX2_GENERATORS
@pytest.mark.parametrize(
    ("transport", "mode"),
    # Over HTTP in 2026-07-28 the client also puts the name in an Mcp-Name
    # header, and the HTTP server refuses a 100 KB header before any MCP
    # code sees it; the legacy HTTP call reaches the SDK path's message.
    [*(("stdio", mode) for mode in MODES), ("http", "legacy")],
)
async def test_a_huge_unknown_tool_name_gets_a_short_error(
    transport: str,
    mode: str,
    stdio_server: Callable[..., StdioServerParameters],
    start_http: StartHttp,
) -> None:
    name = "x" * 100_000
    async with connected(transport, mode, stdio_server, start_http) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool(name, {})
    assert caught.value.code == INVALID_PARAMS
    message = caught.value.message
    assert len(message) < 3_000, len(message)
    assert message.startswith("Unknown tool 'xxxx")
    assert "99,900 more characters" in message
    assert "reader" in message and "bash" in message  # the served names, to pick from

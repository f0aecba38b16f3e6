"""``lionfactory mcp serve --store``: sessions that survive a restart and span servers.

Real server processes (killed with SIGKILL, started again), the real ``mcp``
client. The client reaches the servers through `Router`, an HTTP transport
that sends each request to the server the test chooses: a restarted server
on a new port, or two servers in turn, as a load balancer would.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from anyio.abc import Process
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from lionfactory.backends import RedisBranchStore, SqliteBranchStore
from lionfactory.mcp._stored_sessions import CLOSED_KEY, NotThisSession, session_branch_id

NOTES = "alpha\nbeta\n"  # what the git_workspace fixture commits


def serve_command(workspace: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "lionfactory",
        "mcp",
        "serve",
        "--workspace",
        str(workspace),
        *extra,
    ]


HTTPX2_GENERATORS = pytest.mark.filterwarnings(
    r"ignore:Async generator 'http(x|core)2\.:ResourceWarning"
)

pytestmark = [pytest.mark.slow, HTTPX2_GENERATORS]

READ = {"action": "read", "path": "notes.txt"}
EDIT = {"action": "edit", "file_path": "notes.txt", "old_string": "beta", "new_string": "BETA"}
EDIT_AGAIN = {"action": "edit", "file_path": "notes.txt", "old_string": "alpha", "new_string": "A"}


class Router(httpx2.AsyncBaseTransport):
    """Send every request to the servers in `urls` in turn, as a load balancer would.

    The optional GET stream is refused (405 says "none here").
    """

    def __init__(self) -> None:
        self.urls: list[str] = []
        self.sent: list[tuple[str, int]] = []  # (JSON-RPC method, port)
        self.statuses: list[int] = []
        self.session: str | None = None
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.method == "GET":
            return httpx2.Response(405, request=request)
        body = json.loads(request.content or b"{}")
        method = body.get("method", request.method) if isinstance(body, dict) else "batch"
        port = httpx2.URL(self.urls[len(self.sent) % len(self.urls)]).port or 0
        self.sent.append((method, port))
        request.url = request.url.copy_with(port=port)
        self.session = request.headers.get("mcp-session-id") or self.session
        response = await self.inner.handle_async_request(request)
        self.statuses.append(response.status_code)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def http_server(workspace: Path, store: str) -> AsyncIterator[tuple[str, Process]]:
    command = serve_command(workspace, "--transport", "http", "--port", "0", "--store", store)
    async with await anyio.open_process(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    ) as process:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(30):
            while b"\n" not in seen:
                seen += await process.stderr.receive()
        line = seen.decode().splitlines()[0]
        assert "serving MCP at http://127.0.0.1:" in line, line
        try:
            yield line.rsplit(" ", 1)[1], process
        finally:
            if process.returncode is None:
                process.terminate()
            with anyio.fail_after(10):
                await process.wait()


async def kill(process: Process) -> None:
    process.send_signal(signal.SIGKILL)
    await process.wait()
    assert process.returncode == -signal.SIGKILL


@asynccontextmanager
async def routed_client(router: Router, url: str) -> AsyncIterator[Client]:
    """The SDK's client over `router`; the HTTP client is ours to close."""
    timeout = httpx2.Timeout(30, read=60)
    async with (
        httpx2.AsyncClient(transport=router, timeout=timeout) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
    ):
        yield client


def result_of(call: Any) -> dict[str, Any]:
    assert not call.is_error, call.content
    return dict(call.structured_content)


async def test_a_session_survives_a_killed_server_with_its_conversation_and_evidence(
    git_workspace: Path, tmp_path: Path
) -> None:
    store_url = f"sqlite:///{tmp_path / 'sessions.db'}"
    router = Router()
    async with http_server(git_workspace, store_url) as (first_url, first):
        router.urls = [first_url]
        async with routed_client(router, first_url) as client:
            result_of(await client.call_tool("reader", READ))
            await kill(first)
            async with http_server(git_workspace, store_url) as (second_url, _second):
                router.urls = [second_url]
                # The restarted server has never seen this session id: it
                # resumes it from the store, and the read before the restart
                # is evidence enough for the edit.
                edited = result_of(await client.call_tool("editor", EDIT))
    assert edited["success"] is True
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == "alpha\nBETA\n"
    assert router.session is not None
    async with SqliteBranchStore(tmp_path / "sessions.db") as store:
        branch = await store.load(session_branch_id(router.session, "http"))
    calls = [m.tool_calls[0].name for m in branch.messages.record if m.tool_calls]
    assert calls == ["reader", "editor"]


async def test_without_a_store_a_restarted_server_does_not_know_the_session(
    git_workspace: Path,
) -> None:
    """The contrast: the same sequence without --store loses the session."""
    router = Router()
    plain = serve_command(git_workspace, "--transport", "http", "--port", "0")
    async with http_server_plain(plain) as (first_url, first):
        router.urls = [first_url]
        async with routed_client(router, first_url) as client:
            result_of(await client.call_tool("reader", READ))
            await kill(first)
            async with http_server_plain(plain) as (second_url, _):
                router.urls = [second_url]
                with pytest.raises(Exception, match="Session not found"):
                    await client.call_tool("editor", EDIT)
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == NOTES


@asynccontextmanager
async def http_server_plain(command: list[str]) -> AsyncIterator[tuple[str, Process]]:
    async with await anyio.open_process(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    ) as process:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(30):
            while b"\n" not in seen:
                seen += await process.stderr.receive()
        try:
            yield seen.decode().splitlines()[0].rsplit(" ", 1)[1], process
        finally:
            if process.returncode is None:
                process.terminate()
            with anyio.fail_after(10):
                await process.wait()


async def test_two_servers_sharing_a_redis_store_serve_alternate_calls_of_one_session(
    git_workspace: Path, redis_url: str
) -> None:
    router = Router()
    async with (
        http_server(git_workspace, redis_url) as (a_url, _a),
        http_server(git_workspace, redis_url) as (b_url, _b),
    ):
        router.urls = [a_url, b_url]
        async with routed_client(router, a_url) as client:
            read = result_of(await client.call_tool("reader", READ))
            edit = result_of(await client.call_tool("editor", EDIT))
            again = result_of(await client.call_tool("editor", EDIT_AGAIN))
            final = result_of(await client.call_tool("reader", READ))
    # Every request went to the other server than the one before: the
    # handshake's follow-ups and the tool listing as well as the calls.
    ports = [httpx2.URL(u).port for u in (a_url, b_url)]
    assert [port for _, port in router.sent] == [ports[i % 2] for i in range(len(router.sent))]
    calls = [port for method, port in router.sent if method == "tools/call"]
    assert set(calls) == set(ports), router.sent
    assert "tools/list" in [method for method, _ in router.sent]
    # No server answered "Session not found", not even to the notification
    # that follows the handshake (the client would not have said so).
    assert all(status < 300 for status in router.statuses), router.statuses
    assert read["success"] and edit["success"] and again["success"], (edit, again)
    assert final["content"] == "1\tA\n2\tBETA"
    assert router.session is not None
    async with RedisBranchStore(redis_url) as store:
        branch = await store.load(session_branch_id(router.session, "http"))
        # Made at the handshake, saved after each of the 4 calls, then stored as
        # closed when the client's DELETE ended the session.
        assert await store.version(branch.id) == 6
        assert branch.metadata.get(CLOSED_KEY)
    calls = [m.tool_calls[0].name for m in branch.messages.record if m.tool_calls]
    assert calls == ["reader", "editor", "editor", "reader"]


async def test_a_stdio_session_resumes_by_name_after_the_server_exits(
    git_workspace: Path, tmp_path: Path, stdio_server: Callable[..., StdioServerParameters]
) -> None:
    store = f"sqlite:///{tmp_path / 'stdio.db'}"
    async with Client(stdio_server("--store", store, "--session", "alice")) as client:
        result_of(await client.call_tool("reader", READ))
    async with Client(stdio_server("--store", store, "--session", "bob")) as other:
        refused = await other.call_tool("editor", EDIT)
    assert refused.is_error  # another session name has no evidence
    async with Client(stdio_server("--store", store, "--session", "alice")) as client:
        edited = result_of(await client.call_tool("editor", EDIT))
    assert edited["success"] is True
    assert json.loads(json.dumps(edited))["success"] is True


def test_the_cli_refuses_an_unknown_store_url(
    git_workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lionfactory._cli import main

    assert main(["mcp", "serve", "--workspace", str(git_workspace), "--store", "pg://x"]) == 2
    assert "sqlite:///path.db" in capsys.readouterr().err


def test_the_cli_reports_an_unreachable_store_before_serving(
    git_workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lionfactory._cli import main

    missing = git_workspace.parent / "no-such-dir" / "x.db"
    assert (
        main(["mcp", "serve", "--workspace", str(git_workspace), "--store", f"sqlite:///{missing}"])
        == 2
    )
    assert "must exist" in capsys.readouterr().err
    # Nothing listens on port 1: the store is checked once, at start.
    assert (
        main(
            ["mcp", "serve", "--workspace", str(git_workspace), "--store", "redis://127.0.0.1:1/0"]
        )
        == 1
    )
    assert "cannot use the store" in capsys.readouterr().err


def two_servers(tmp_path: Path) -> tuple[Any, Any, SqliteBranchStore, SqliteBranchStore]:
    """Two servers' session registries and stores over one SQLite file, in this process."""
    from lionfactory import Branch
    from lionfactory.mcp import SessionBranches
    from lionfactory.mcp._stored_sessions import StoredSessions
    from lionfactory.tools import reader_tool

    def new_branch() -> Branch:
        branch = Branch(name="mcp-session")
        branch.register(reader_tool, workspace_root=tmp_path)
        return branch

    stores = SqliteBranchStore(tmp_path / "s.db"), SqliteBranchStore(tmp_path / "s.db")
    servers = [
        (SessionBranches(new_branch), StoredSessions(store, new_branch, {})) for store in stores
    ]
    return servers[0], servers[1], stores[0], stores[1]


async def test_a_new_session_gets_one_branch_with_the_session_id_even_on_concurrent_calls(
    tmp_path: Path,
) -> None:
    (sessions, stored), _, store, _ = two_servers(tmp_path)
    adopted = []

    async def first_call() -> None:
        await stored.resume(sessions, "abc")
        adopted.append(sessions.get("abc"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(first_call)
        tg.start_soon(first_call)
    assert adopted[0] is adopted[1] is not None
    assert adopted[0].id == session_branch_id("abc", "http")
    assert list(adopted[0].tools) == ["reader"]
    await store.aclose()


async def test_a_server_picks_up_the_newer_save_of_another_and_a_racing_save_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (a_sessions, a), (b_sessions, b), a_store, b_store = two_servers(tmp_path)
    (tmp_path / "n.txt").write_text("x\n", encoding="utf-8")
    await a.resume(a_sessions, "s")
    with a_sessions.use("s") as branch:
        await branch.act("reader", {"action": "read", "path": "n.txt"})
    await a.save("s", branch)
    await b.resume(b_sessions, "s")  # b never saw the session: it loads a's save
    b_branch = b_sessions.get("s")
    assert b_branch is not None and len(b_branch.messages.record) == 2
    await b_branch.act("reader", {"action": "read", "path": "n.txt"})
    await b.save("s", b_branch)
    # a's next call starts from b's save, not from its own stale copy.
    await a.resume(a_sessions, "s")
    assert len(a_sessions.get("s").messages.record) == 4
    # Two servers answering at the same moment: the later save is refused
    # and logged; nothing raises into the call.
    stale = a_sessions.get("s")
    await b.resume(b_sessions, "s")
    fresh = b_sessions.get("s")
    await fresh.act("reader", {"action": "read", "path": "n.txt"})
    await b.save("s", fresh)
    await stale.act("reader", {"action": "read", "path": "n.txt"})
    with caplog.at_level("WARNING", logger="lionfactory"):
        await a.save("s", stale)
    assert "was not saved" in caplog.text
    assert await a_store.version(session_branch_id("s", "http")) == 3
    await a_store.aclose()
    await b_store.aclose()


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One store shared by the servers of a test: a SQLite file, or a real redis-server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    url: str = request.getfixturevalue("redis_url")
    return url


async def hijack(url: str, session: str) -> httpx2.Response:
    """What a hostile client does: a tools/call (the edit) under a session id it did not get."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call"}
    call["params"] = {"name": "editor", "arguments": EDIT}
    headers = {
        "mcp-session-id": session,
        "mcp-protocol-version": "2025-11-25",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }
    async with httpx2.AsyncClient(timeout=60) as http:
        return await http.post(url, json=call, headers=headers)


async def test_an_http_client_cannot_take_over_a_stdio_session_by_its_name(
    git_workspace: Path, store_url: str, stdio_server: Callable[..., StdioServerParameters]
) -> None:
    """A stdio session read notes.txt; ``mcp-session-id: stdio`` (or its name) gets nothing."""
    async with (
        Client(stdio_server("--store", store_url)) as unnamed,
        Client(stdio_server("--store", store_url, "--session", "alice")) as named,
    ):
        result_of(await unnamed.call_tool("reader", READ))
        result_of(await named.call_tool("reader", READ))
        async with http_server(git_workspace, store_url) as (url, _):
            for session in ("stdio", "alice", "stdio:alice"):
                response = await hijack(url, session)
                assert response.status_code == 404, (session, response.text)
                assert "Session not found" in response.text
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == NOTES


async def test_two_stdio_servers_on_one_store_do_not_share_a_session_unless_named(
    git_workspace: Path, store_url: str, stdio_server: Callable[..., StdioServerParameters]
) -> None:
    async with Client(stdio_server("--store", store_url)) as first:
        result_of(await first.call_tool("reader", READ))
        async with Client(stdio_server("--store", store_url)) as second:
            refused = await second.call_tool("editor", EDIT)
    assert refused.is_error, refused.content
    assert "has not been read" in refused.content[0].text  # type: ignore[union-attr]
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == NOTES


async def test_a_stdio_session_named_like_an_http_session_gets_none_of_its_evidence(
    git_workspace: Path, store_url: str, stdio_server: Callable[..., StdioServerParameters]
) -> None:
    router = Router()
    async with http_server(git_workspace, store_url) as (url, _):
        router.urls = [url]
        async with routed_client(router, url) as client:
            result_of(await client.call_tool("reader", READ))
    assert router.session is not None
    async with Client(stdio_server("--store", store_url, "--session", router.session)) as stdio:
        refused = await stdio.call_tool("editor", EDIT)
    assert refused.is_error, refused.content
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == NOTES


async def test_an_http_session_id_is_resumed_only_when_an_http_server_stored_it(
    tmp_path: Path,
) -> None:
    """A branch at the session's id that no HTTP server stored (no transport mark) is refused."""
    from lionfactory import Branch

    (sessions, stored), _, store, _ = two_servers(tmp_path)
    await stored.create("issued")
    assert await stored.resumable("issued")
    assert not await stored.resumable("never-issued")
    planted = Branch(name="mcp-session").to_dict()
    planted["id"] = str(session_branch_id("planted", "http"))
    await store.save(Branch.from_dict(planted))
    assert not await stored.resumable("planted")
    with pytest.raises(NotThisSession, match="was not stored as one"):
        await stored.resume(sessions, "planted")
    await store.aclose()


def test_a_session_name_must_be_printable_and_short() -> None:
    from lionfactory.mcp._stored_sessions import check_session_name

    assert check_session_name("alice") == "alice"
    for bad in ("", "x" * 201, "a\nb", "\x1b[2J"):
        with pytest.raises(ValueError, match="session name"):
            check_session_name(bad)


def test_the_cli_refuses_a_session_name_with_control_characters(
    git_workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lionfactory._cli import main

    store = f"sqlite:///{tmp_path / 'x.db'}"
    argv = ["mcp", "serve", "--workspace", str(git_workspace), "--store", store]
    assert main([*argv, "--session", "a\nb"]) == 2
    assert "printable" in capsys.readouterr().err


def shout_tool() -> Any:
    """A user's own factory (module-level, not a built-in)."""
    from lionfactory import function_tool

    def shout(text: str) -> str:
        """Say it louder.

        Args:
            text: what to say.
        """
        return text.upper()

    return function_tool(shout)


async def test_a_server_with_a_store_serves_the_applications_own_factory(tmp_path: Path) -> None:
    """The factories handed to the server are registered, so stored sessions can name them."""
    from mcp import Client

    from lionfactory._registration import FACTORIES
    from lionfactory.mcp import create_mcp_server

    store = SqliteBranchStore(tmp_path / "s.db")
    server = create_mcp_server(shout_tool, store=store)
    assert FACTORIES.name_of(shout_tool) is not None
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("shout", {"text": "hi"})
    assert not result.is_error, result
    assert "HI" in result.content[0].text
    await store.aclose()


def test_a_store_refuses_a_factory_no_stored_session_could_name(tmp_path: Path) -> None:
    from lionfactory import function_tool
    from lionfactory.errors import ConfigurationError
    from lionfactory.mcp import create_mcp_server

    def local() -> Any:
        return function_tool(str.upper)

    with pytest.raises(ConfigurationError, match="must name their factories"):
        create_mcp_server(local, store=SqliteBranchStore(tmp_path / "s.db"))


def test_the_cli_refuses_a_store_inside_the_served_workspace(
    git_workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The served agent's editor or bash could rewrite it, and forge sessions."""
    from lionfactory._cli import main

    inside = git_workspace / "sessions.db"
    argv = ["mcp", "serve", "--workspace", str(git_workspace), "--store", f"sqlite:///{inside}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "inside the served workspace" in err and "--allow-writable-store" in err
    assert not inside.exists()


def test_a_store_outside_the_workspace_and_the_bash_roots_is_accepted(
    git_workspace: Path, tmp_path: Path
) -> None:
    from lionfactory._cli import _check_store_location

    outside = tmp_path / "state" / "sessions.db"
    _check_store_location(
        f"sqlite:///{outside}", git_workspace, ["reader", "editor"], "none", allow=False
    )


def test_a_store_an_unconfined_bash_could_write_is_refused_or_warned_about(
    git_workspace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lionfactory._cli import _check_store_location

    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    with pytest.raises(ValueError, match="unconfined"):
        _check_store_location(url, git_workspace, ["bash"], "none", allow=False)
    _check_store_location(url, git_workspace, ["bash"], "none", allow=True)
    assert "warning: the store" in capsys.readouterr().err


def test_a_store_behind_a_link_into_the_workspace_is_refused(
    git_workspace: Path, tmp_path: Path
) -> None:
    from lionfactory._cli import _check_store_location

    link = tmp_path / "elsewhere"
    link.symlink_to(git_workspace)
    with pytest.raises(ValueError, match="inside the served workspace"):
        _check_store_location(
            f"sqlite:///{link / 's.db'}", git_workspace, ["reader"], "none", allow=False
        )

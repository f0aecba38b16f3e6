"""Attacks on what a session grants over MCP, with raw HTTP requests and raw stdio frames.

A session's branch holds its read-before-edit evidence, so reaching it lets
a request edit what the session read. Sessionless (2026-07-28) requests must
never reach one; ids a server never issued, or a client ended, must grant
nothing, in this process or after a restart on the same store; a page from
another origin must not drive the tools; ids that are not JSON-RPC ids are
refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from conftest import NOTES, http_server
from test_stdio import Raw, serve_command

ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
HANDSHAKE = "2025-11-25"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
READ = {"action": "read", "path": "notes.txt"}
EDIT = {"action": "edit", "file_path": "notes.txt", "old_string": "beta", "new_string": "BETA"}


def reply_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC reply in a JSON or an SSE response."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return dict(response.json())
    for line in response.text.splitlines():
        if line.startswith("data: ") and line[6:].strip():
            data = json.loads(line[6:])
            if "id" in data:
                return dict(data)
    raise AssertionError(f"no reply in {response.text!r:.300}")


async def open_session(http: httpx.AsyncClient, url: str) -> str:
    """A handshake-era session (initialize, initialized); its id."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": HANDSHAKE,
            "capabilities": {},
            "clientInfo": {"name": "attacker", "version": "1"},
        },
    }
    opened = await http.post(url, json=init, headers=ACCEPT)
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await http.post(url, json=note, headers=session_headers(session))
    return session


def session_headers(session: str) -> dict[str, str]:
    return {**ACCEPT, "Mcp-Session-Id": session, "MCP-Protocol-Version": HANDSHAKE}


async def session_call(
    http: httpx.AsyncClient, url: str, session: str, tool: str, arguments: dict[str, Any]
) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return await http.post(url, json=body, headers=session_headers(session))


async def sessionless_call(
    http: httpx.AsyncClient, url: str, tool: str, arguments: dict[str, Any], session: str | None
) -> dict[str, Any]:
    headers = {
        **ACCEPT,
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    if session is not None:
        headers["Mcp-Session-Id"] = session
    body = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": MODERN_META},
    }
    response = await http.post(url, json=body, headers=headers)
    assert response.status_code == 200, response.text
    return reply_of(response)


def tool_text(reply: dict[str, Any]) -> str:
    return "\n".join(block["text"] for block in reply["result"]["content"])


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60) as client:
        yield client


async def test_a_sessionless_request_with_a_live_sessions_id_does_not_get_its_evidence(
    git_workspace: Path, http: httpx.AsyncClient
) -> None:
    async with http_server(git_workspace) as url:
        session = await open_session(http, url)
        read = await session_call(http, url, session, "reader", READ)
        assert read.status_code == 200 and "alpha" in tool_text(reply_of(read))
        attack = await sessionless_call(http, url, "editor", EDIT, session)
        assert "has not been read" in tool_text(attack)
        assert (git_workspace / "notes.txt").read_text() == NOTES
        # The session itself still holds its evidence.
        edited = await session_call(http, url, session, "editor", EDIT)
        assert '"success": true' in tool_text(reply_of(edited))


@pytest.mark.parametrize("store", [False, True])
async def test_a_made_up_session_id_grants_nothing_and_creates_nothing(
    store: bool, git_workspace: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    extra = ("--store", f"sqlite:///{tmp_path / 's.db'}") if store else ()
    made_up = "f" * 32
    async with http_server(git_workspace, *extra) as url:
        reply = await sessionless_call(http, url, "reader", READ, made_up)
        assert "alpha" in tool_text(reply)
        # No stored session was made under the id: a handshake-era request
        # with it is answered as for any id this server never issued.
        later = await session_call(http, url, made_up, "editor", EDIT)
        assert later.status_code == 404, later.text
    assert (git_workspace / "notes.txt").read_text() == NOTES


@pytest.mark.parametrize("store", [False, True])
async def test_a_deleted_session_stays_dead_also_after_a_restart(
    store: bool, git_workspace: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    extra = ("--store", f"sqlite:///{tmp_path / 's.db'}") if store else ()
    async with http_server(git_workspace, *extra) as url:
        session = await open_session(http, url)
        read = await session_call(http, url, session, "reader", READ)
        assert read.status_code == 200
        deleted = await http.delete(url, headers=session_headers(session))
        assert deleted.status_code < 300, deleted.text
        again = await session_call(http, url, session, "editor", EDIT)
        assert again.status_code == 404, again.text
    async with http_server(git_workspace, *extra) as url:
        revived = await session_call(http, url, session, "editor", EDIT)
        assert revived.status_code == 404, revived.text
    assert (git_workspace / "notes.txt").read_text() == NOTES


async def test_only_the_served_origin_may_drive_the_tools(
    git_workspace: Path, http: httpx.AsyncClient
) -> None:
    async with http_server(git_workspace) as url:
        port = httpx.URL(url).port
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {}},
        }
        for origin in ("http://localhost:9", f"http://localhost:{port + 1}", "http://evil.test"):
            refused = await http.post(url, json=init, headers={**ACCEPT, "Origin": origin})
            assert refused.status_code == 403, (origin, refused.status_code)
        for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
            allowed = await http.post(url, json=init, headers={**ACCEPT, "Origin": origin})
            assert allowed.status_code == 200, (origin, allowed.text)


async def test_an_allowed_origin_option_lets_that_origin_in(
    git_workspace: Path, tmp_path: Path, http: httpx.AsyncClient
) -> None:
    script = tmp_path / "serve_origin.py"
    script.write_text(
        "import sys\n"
        "from lionfactory.tools import reader_tool\n"
        "from lionfactory.mcp import serve_mcp\n"
        "serve_mcp([(reader_tool, {'workspace_root': sys.argv[1]})], transport='http', port=0,\n"
        "    allowed_origins=['http://localhost:3000'],\n"
        "    on_ready=lambda url: print('serving', url, file=sys.stderr, flush=True))\n"
    )
    async with await anyio.open_process(
        [sys.executable, str(script), str(git_workspace)], stdout=subprocess.DEVNULL
    ) as process:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(30):
            while b"\n" not in seen:
                seen += await process.stderr.receive()
        url = seen.decode().split()[1]
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {}},
        }
        ok = await http.post(url, json=init, headers={**ACCEPT, "Origin": "http://localhost:3000"})
        no = await http.post(url, json=init, headers={**ACCEPT, "Origin": "http://localhost:3001"})
        process.terminate()
    assert ok.status_code == 200 and no.status_code == 403


@pytest.fixture
async def raw(git_workspace: Path) -> AsyncIterator[Raw]:
    command = serve_command(git_workspace)
    async with await anyio.open_process(command, stderr=subprocess.DEVNULL) as process:
        yield Raw(process)
        process.kill()


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "1.5", "1e3", "null", '{"a":1}'])
async def test_stdio_refuses_ids_that_are_not_strings_or_integers(raw: Raw, bad: str) -> None:
    await raw.initialize(HANDSHAKE)
    assert raw.process.stdin is not None
    frame = '{"jsonrpc":"2.0","id":' + bad + ',"method":"ping","params":{}}\n'
    await raw.process.stdin.send(frame.encode())
    reply = await raw.receive()  # json.loads: the reply is JSON (no NaN echoed)
    assert reply["id"] is None and reply["error"]["code"] == -32600, reply
    # Strings and integers are ids.
    assert (await raw.request("ping"))["result"] == {}
    await raw.send({"id": "s-1", "method": "ping"})
    assert (await raw.receive())["id"] == "s-1"

"""``lionfactory mcp serve`` over stdio, spoken to in raw JSON-RPC: versions, hints, shutdown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from mcp import Client, StdioServerParameters
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, KNOWN_PROTOCOL_VERSIONS

from lionfactory.mcp._protocol import HANDSHAKE_VERSIONS, KNOWN_VERSIONS

READ = {"action": "read", "path": "notes.txt"}


class Raw:
    """A JSON-RPC client on a server's stdin and stdout, one line per message."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.buffer = b""
        self.next_id = 0

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

    async def receive(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        with anyio.fail_after(30):
            while b"\n" not in self.buffer:
                self.buffer += await self.process.stdout.receive()
        line, self.buffer = self.buffer.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        return reply

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        await self.send({"id": self.next_id, "method": method, "params": params or {}})
        reply = await self.receive()
        assert reply["id"] == self.next_id, reply
        return reply

    async def initialize(self, version: str) -> dict[str, Any]:
        reply = await self.request(
            "initialize",
            {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw"}},
        )
        await self.send({"method": "notifications/initialized"})
        return reply


def serve_command(workspace: Path) -> list[str]:
    return [sys.executable, "-m", "lionfactory", "mcp", "serve", "--workspace", str(workspace)]


@pytest.fixture
async def raw(git_workspace: Path) -> AsyncIterator[Raw]:
    command = serve_command(git_workspace)
    async with await anyio.open_process(command, stderr=subprocess.DEVNULL) as process:
        yield Raw(process)
        process.kill()


def test_the_protocol_versions_are_the_sdks() -> None:
    assert KNOWN_VERSIONS == KNOWN_PROTOCOL_VERSIONS
    assert HANDSHAKE_VERSIONS == HANDSHAKE_PROTOCOL_VERSIONS


async def test_initialize_answers_the_clients_version_or_the_latest(raw: Raw) -> None:
    reply = await raw.initialize("2024-11-05")
    assert reply["result"]["protocolVersion"] == "2024-11-05"
    assert reply["result"]["serverInfo"]["name"] == "lionfactory"
    assert reply["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert (await raw.request("ping"))["result"] == {}


async def test_an_unknown_version_gets_the_latest_handshake_version(raw: Raw) -> None:
    reply = await raw.initialize("1999-01-01")
    assert reply["result"]["protocolVersion"] == HANDSHAKE_PROTOCOL_VERSIONS[-1]


async def test_discover_is_not_found_so_auto_clients_use_the_handshake(raw: Raw) -> None:
    reply = await raw.request("server/discover")
    assert reply["error"]["code"] == -32601


async def test_a_line_that_is_not_json_is_a_parse_error_and_the_server_goes_on(raw: Raw) -> None:
    assert raw.process.stdin is not None
    await raw.process.stdin.send(b"{not json\n")
    assert (await raw.receive())["error"]["code"] == -32700
    assert (await raw.request("ping"))["result"] == {}


async def test_the_2024_11_05_protocol_gets_no_structured_content_or_hints(raw: Raw) -> None:
    await raw.initialize("2024-11-05")
    tools = (await raw.request("tools/list"))["result"]["tools"]
    result = (await raw.request("tools/call", {"name": "reader", "arguments": READ}))["result"]
    assert all(set(tool) == {"name", "description", "inputSchema"} for tool in tools)
    assert "structuredContent" not in result
    assert json.loads(result["content"][0]["text"])["content"] == "1\talpha\n2\tbeta"


async def test_the_2025_03_26_protocol_gets_annotations_but_no_output_schema(raw: Raw) -> None:
    await raw.initialize("2025-03-26")
    tools = {t["name"]: t for t in (await raw.request("tools/list"))["result"]["tools"]}
    result = (await raw.request("tools/call", {"name": "reader", "arguments": READ}))["result"]
    assert tools["reader"]["annotations"]["readOnlyHint"] is True
    assert "outputSchema" not in tools["reader"] and "title" not in tools["reader"]
    assert "structuredContent" not in result


async def test_the_2025_06_18_protocol_gets_structured_content_equal_to_the_text(raw: Raw) -> None:
    await raw.initialize("2025-06-18")
    result = (await raw.request("tools/call", {"name": "reader", "arguments": READ}))["result"]
    assert result["isError"] is False
    assert result["structuredContent"] == json.loads(result["content"][0]["text"])


async def test_builtins_carry_a_title_hints_and_an_output_schema(
    git_workspace: Path,
) -> None:
    command = serve_command(git_workspace)
    parameters = StdioServerParameters(command=command[0], args=command[1:])
    async with Client(parameters, mode="legacy") as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        # The client checks structuredContent against the output schema.
        read = await client.call_tool("reader", READ)
    assert not read.is_error
    reader, editor, bash = tools["reader"], tools["editor"], tools["bash"]
    assert reader.title == "Read files"
    assert reader.annotations is not None and reader.annotations.read_only_hint is True
    assert reader.annotations.open_world_hint is False
    assert editor.annotations is not None and editor.annotations.destructive_hint is True
    assert editor.annotations.read_only_hint is False
    assert bash.annotations is not None and bash.annotations.open_world_hint is True
    for tool in tools.values():
        assert tool.output_schema is not None, tool.name
        assert "additionalProperties" not in tool.output_schema


async def _started_pid(fifo: Path) -> int:
    """The host pid of the command, once it says (through `fifo`) that it runs.

    The served toolkit confines commands in their own PID namespace, where
    ``$$`` means nothing on the host. The command keeps `fifo` open as its
    descriptor 3 across ``exec``, so it is the host process holding that
    file open (other than this test, which reads it).
    """
    handle = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        data = b""
        with anyio.fail_after(30):
            while not data.endswith(b"\n"):
                await anyio.wait_readable(handle)
                data += os.read(handle, 64)
        wanted = os.stat(fifo)
        holders = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                held = os.stat(entry / "fd" / "3")
            except OSError:
                continue
            if (held.st_dev, held.st_ino) == (wanted.st_dev, wanted.st_ino):
                holders.add(int(entry.name))
    finally:
        os.close(handle)
    assert len(holders) == 1, holders
    return holders.pop()


async def _ended(pid: int) -> None:
    """Return when process `pid` (not necessarily a child) has ended."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        with anyio.fail_after(10):
            await anyio.wait_readable(handle)
    finally:
        os.close(handle)


async def test_closing_stdin_ends_the_server_and_its_running_command(
    raw: Raw, git_workspace: Path
) -> None:
    fifo = git_workspace / "started"
    os.mkfifo(fifo)
    await raw.initialize("2025-11-25")
    command = {"command": "sh -c 'exec 3>started; echo go >&3; exec sleep 60'", "timeout": 120_000}
    await raw.send(
        {"id": 99, "method": "tools/call", "params": {"name": "bash", "arguments": command}}
    )
    sleeper = await _started_pid(fifo)
    assert raw.process.stdin is not None
    await raw.process.stdin.aclose()
    with anyio.fail_after(10):
        assert await raw.process.wait() == 0
    await _ended(sleeper)


async def test_a_cancelled_call_gets_no_reply_and_its_command_is_killed(
    raw: Raw, git_workspace: Path
) -> None:
    fifo = git_workspace / "started"
    os.mkfifo(fifo)
    await raw.initialize("2025-11-25")
    command = {"command": "sh -c 'exec 3>started; echo go >&3; exec sleep 60'", "timeout": 120_000}
    await raw.send(
        {"id": 7, "method": "tools/call", "params": {"name": "bash", "arguments": command}}
    )
    sleeper = await _started_pid(fifo)
    await raw.send({"method": "notifications/cancelled", "params": {"requestId": 7}})
    assert (await raw.request("ping"))["result"] == {}
    await _ended(sleeper)
    # The next reply is the next request's: the cancelled call got none.
    assert (await raw.request("ping"))["id"] == raw.next_id


def test_serving_stdio_never_imports_the_sdk(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "x"}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    requests.write_text("".join(json.dumps(m) + "\n" for m in messages), encoding="utf-8")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from lionfactory._cli import cli_factories\n"
        "from lionfactory.mcp import serve_mcp\n"
        f"serve_mcp(cli_factories('coding', None, Path({str(tmp_path)!r})))\n"
        "leaked = sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types'))\n"
        "print(leaked, file=sys.stderr)\n"
    )
    with requests.open("rb") as stdin:
        done = subprocess.run(
            [sys.executable, "-c", code],
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, 2]
    assert len(replies[1]["result"]["tools"]) == 8  # the seven tools, and jobs with bash
    assert done.stderr.strip().splitlines()[-1] == "[]"


async def test_a_request_of_megabytes_and_requests_sharing_a_chunk_are_read_whole(
    raw: Raw, git_workspace: Path
) -> None:
    await raw.initialize("2025-11-25")
    content = "".join(f"line {i}\n" for i in range(400_000))  # about 4.5 MB, 70 chunks
    write = {"action": "write", "file_path": "big.txt", "content": content}
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "editor", "arguments": write},
        },
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
    ]
    assert raw.process.stdin is not None
    await raw.process.stdin.send("".join(json.dumps(m) + "\n" for m in batch).encode())
    replies = {reply["id"]: reply for reply in [await raw.receive() for _ in batch]}
    assert replies[1]["result"] == {} and replies[3]["result"] == {}
    assert replies[2]["result"]["isError"] is False, replies[2]
    assert (git_workspace / "big.txt").read_text(encoding="utf-8") == content


async def test_a_client_that_stops_reading_ends_the_server_quietly(git_workspace: Path) -> None:
    command = serve_command(git_workspace)
    async with await anyio.open_process(command) as process:
        assert process.stdin is not None and process.stdout is not None
        assert process.stderr is not None
        await process.stdout.aclose()  # nobody reads the replies any more
        message = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        await process.stdin.send(json.dumps(message).encode() + b"\n")
        with anyio.fail_after(30):
            status = await process.wait()
        errors = b""
        async for chunk in process.stderr:
            errors += chunk
    assert status == 0, errors
    assert b"Traceback" not in errors


async def test_two_calls_in_flight_with_one_id_both_get_replies(raw: Raw) -> None:
    await raw.initialize("2025-11-25")
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call"}
    call["params"] = {"name": "reader", "arguments": READ}
    assert raw.process.stdin is not None
    await raw.process.stdin.send((json.dumps(call) + "\n").encode() * 2)
    replies = [await raw.receive(), await raw.receive()]
    assert [r["id"] for r in replies] == [5, 5]
    assert all(r["result"]["isError"] is False for r in replies)
    assert (await raw.request("ping"))["result"] == {}

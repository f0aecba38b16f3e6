"""``lionfactory mcp serve`` over stdio, spoken to in raw JSON-RPC: versions, hints, shutdown."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from mcp import Client, StdioServerParameters
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, KNOWN_PROTOCOL_VERSIONS

from lionfactory._acting import ActionResult
from lionfactory.mcp._protocol import HANDSHAKE_VERSIONS, KNOWN_VERSIONS, ServedTools
from lionfactory.mcp._stdio import Handshake, answer_initialize, serve_stdio, server_info

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
    assert reply["result"]["capabilities"] == {
        "tools": {"listChanged": False},
        "resources": {"subscribe": True, "listChanged": True},
    }
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


def test_a_stdio_server_builds_its_tools_once(tmp_path: Path) -> None:
    """The branch built to list the tools is the connection's: calls do not build another."""
    (tmp_path / "notes.txt").write_text("hello\n", encoding="utf-8")
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from lionfactory.mcp import serve_mcp\n"
        "from lionfactory.tools.reader import reader_tool\n"
        "built = []\n"
        "def counted(**kwargs):\n"
        "    built.append(kwargs)\n"
        "    return reader_tool(**kwargs)\n"
        f"serve_mcp([(counted, {{'workspace_root': Path({str(tmp_path)!r})}})])\n"
        "print(len(built), file=sys.stderr)\n"
    )
    read = {"name": "reader", "arguments": READ}
    with subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as server:
        assert server.stdin is not None and server.stdout is not None
        replies = []
        for request_id in (1, 2, 3):  # one at a time: end of file cancels calls in flight
            params = read if request_id > 1 else {"protocolVersion": "x"}
            method = "tools/call" if request_id > 1 else "initialize"
            message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            server.stdin.write(json.dumps(message) + "\n")
            server.stdin.flush()
            replies.append(json.loads(server.stdout.readline()))
        _, errors = server.communicate(timeout=60)
    assert server.returncode == 0, errors
    assert [r["id"] for r in replies] == [1, 2, 3]
    assert all(r["result"]["isError"] is False for r in replies[1:]), replies
    assert errors.strip().splitlines()[-1] == "1"


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


async def _fill_the_unread_pipe(raw: Raw, git_workspace: Path) -> None:
    """Replies a client does not read: four of about 40 KB, for a pipe that holds 64 KiB.

    The first fits; the second finds room for part of it, which is what a
    blocking write waits on until the client reads.
    """
    (git_workspace / "wide.txt").write_text(("y" * 120 + "\n") * 400, encoding="utf-8")
    await raw.initialize("2025-11-25")
    for request_id in range(1, 5):
        arguments = {"action": "read", "path": "wide.txt", "limit": 150}
        await raw.send(
            {
                "id": request_id,
                "method": "tools/call",
                "params": {"name": "reader", "arguments": arguments},
            }
        )


async def test_replies_stuck_in_a_full_pipe_do_not_stop_the_calls_behind_them(
    raw: Raw, git_workspace: Path
) -> None:
    """A reply the client has no room for waits on the event loop, not in a blocking write.

    Writing a 40 KB reply into a pipe with 24 KB free blocks the writing
    thread until the client reads; when that thread is the event loop's,
    every call stops with it. Here the client reads nothing, and a command
    sent after the stuck replies still runs.
    """
    await _fill_the_unread_pipe(raw, git_workspace)
    fifo = git_workspace / "started"
    os.mkfifo(fifo)
    handle = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        command = {"command": "sleep 0.5; echo ran > started", "timeout": 60_000}
        call = {"name": "bash", "arguments": command}
        await raw.send({"id": 9, "method": "tools/call", "params": call})
        with anyio.fail_after(15):
            await anyio.wait_readable(handle)
        assert os.read(handle, 64) == b"ran\n"
    finally:
        os.close(handle)
    seen = {(await raw.receive())["id"] for _ in range(5)}  # and every reply still comes
    assert seen == {1, 2, 3, 4, 9}


async def test_closing_stdin_ends_the_server_while_its_replies_go_unread(
    raw: Raw, git_workspace: Path
) -> None:
    """The stdio shutdown (close stdin, wait for the exit) works on a client that stopped reading.

    A blocking write of a reply with nowhere to go never saw the end of file.
    """
    await _fill_the_unread_pipe(raw, git_workspace)
    await anyio.sleep(0.5)  # the reads are done and their replies wait for room
    assert raw.process.stdin is not None
    await raw.process.stdin.aclose()
    with anyio.fail_after(10):
        assert await raw.process.wait() == 0


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


ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
}
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"


async def test_discover_with_the_2026_envelope_names_the_version_and_is_cacheable(
    raw: Raw,
) -> None:
    reply = await raw.request("server/discover", {"_meta": ENVELOPE})
    result = reply["result"]
    assert result["supportedVersions"] == ["2026-07-28"]
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert result["resultType"] == "complete"
    assert (result["ttlMs"], result["cacheScope"]) == (300_000, "public")
    assert result["_meta"][SERVER_INFO_KEY]["name"] == "lionfactory"


async def test_a_2026_listing_and_call_carry_result_type_and_server_info(raw: Raw) -> None:
    listed = (await raw.request("tools/list", {"_meta": ENVELOPE}))["result"]
    called = await raw.request(
        "tools/call", {"name": "reader", "arguments": READ, "_meta": ENVELOPE}
    )
    assert (listed["ttlMs"], listed["cacheScope"], listed["resultType"]) == (
        300_000,
        "public",
        "complete",
    )
    assert listed["tools"][0]["outputSchema"]["type"] == "object"
    result = called["result"]
    assert result["resultType"] == "complete"
    assert result["_meta"][SERVER_INFO_KEY]["name"] == "lionfactory"
    assert result["structuredContent"]["content"] == "1\talpha\n2\tbeta"


async def test_a_2026_connection_refuses_the_handshake_with_the_served_versions(raw: Raw) -> None:
    await raw.request("server/discover", {"_meta": ENVELOPE})
    reply = await raw.initialize("2025-11-25")
    assert reply["error"]["code"] == -32022
    assert reply["error"]["data"] == {"supported": ["2026-07-28"], "requested": "2025-11-25"}


async def test_a_handshake_connection_refuses_an_enveloped_request(raw: Raw) -> None:
    await raw.initialize("2025-11-25")
    reply = await raw.request("tools/list", {"_meta": ENVELOPE})
    assert reply["error"]["code"] == -32600
    assert "began with the initialize handshake" in reply["error"]["message"]


async def test_an_unsupported_2026_era_version_is_named_with_the_supported_ones(raw: Raw) -> None:
    envelope = {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    reply = await raw.request("tools/list", {"_meta": envelope})
    assert reply["error"]["code"] == -32022
    assert reply["error"]["data"] == {"supported": ["2026-07-28"], "requested": "2099-01-01"}


async def test_a_2026_request_without_client_capabilities_is_invalid_params(raw: Raw) -> None:
    await raw.request("server/discover", {"_meta": ENVELOPE})
    envelope = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    reply = await raw.request(
        "tools/call", {"name": "reader", "arguments": READ, "_meta": envelope}
    )
    assert reply["error"]["code"] == -32602
    assert "clientCapabilities" in reply["error"]["message"]


async def test_ping_is_gone_in_the_2026_era(raw: Raw) -> None:
    reply = await raw.request("ping", {"_meta": ENVELOPE})
    assert reply["error"]["code"] == -32601


@pytest.mark.usefixtures("fast_progress")
async def test_a_progress_token_gets_notifications_before_the_reply(raw: Raw) -> None:
    meta = {**ENVELOPE, "progressToken": "tok"}
    await raw.send(
        {
            "id": 99,
            "method": "tools/call",
            # Four intervals of `fast_progress` (the server inherits the variable).
            "params": {"name": "bash", "arguments": {"command": "sleep 0.8"}, "_meta": meta},
        }
    )
    notes = []
    while "id" not in (message := await raw.receive()):
        notes.append(message)
    assert message["id"] == 99
    assert len(notes) >= 2
    assert {n["method"] for n in notes} == {"notifications/progress"}
    assert {n["params"]["progressToken"] for n in notes} == {"tok"}


def _nested(depth: int) -> str:
    """JSON text of objects nested `depth` levels: ``{"a":{"a":...{}...}}``."""
    return '{"a":' * depth + "{}" + "}" * depth


async def test_a_line_of_100000_brackets_is_a_parse_error_and_the_server_goes_on(
    raw: Raw,
) -> None:
    assert raw.process.stdin is not None
    await raw.process.stdin.send(b"[" * 100_000 + b"\n")
    reply = await raw.receive()
    assert reply["id"] is None and reply["error"]["code"] == -32700
    assert (await raw.request("ping"))["result"] == {}


async def test_arguments_nesting_5000_levels_are_the_tools_input_error(raw: Raw) -> None:
    await raw.initialize("2025-11-25")
    deep = _nested(5000)
    line = (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"reader",'
        f'"arguments":{{"action":"read","path":"notes.txt","deep":{deep}}}}}}}\n'
    )
    assert raw.process.stdin is not None
    await raw.process.stdin.send(line.encode())
    reply = await raw.receive()
    assert reply["id"] == 1
    result = reply["result"]
    assert result["isError"] is True
    assert result["_meta"]["lionfactory/error"]["error_type"] == "ToolInputError"
    assert "nest deeper than" in result["content"][0]["text"]
    assert (await raw.request("ping"))["result"] == {}


async def test_a_deep_id_or_cancellation_is_refused_and_the_server_goes_on(raw: Raw) -> None:
    assert raw.process.stdin is not None
    deep_id = f'{{"jsonrpc":"2.0","id":{_nested(5000)},"method":"ping"}}\n'
    await raw.process.stdin.send(deep_id.encode())
    reply = await raw.receive()
    assert reply["id"] is None and reply["error"]["code"] == -32600
    cancel = (
        '{"jsonrpc":"2.0","method":"notifications/cancelled",'
        f'"params":{{"requestId":{_nested(5000)}}}}}\n'
    )
    await raw.process.stdin.send(cancel.encode())
    assert (await raw.request("ping"))["result"] == {}


async def test_a_client_that_never_reads_is_no_longer_read_and_then_gets_every_reply(
    raw: Raw, git_workspace: Path
) -> None:
    """Back-pressure: replies nobody reads stop the reading, so the server holds a bounded amount.

    Each reply is about 30 KB; 3,000 unread ones would be 90 MB. Once its
    queue is full the server stops reading, so the client's write of the
    requests (about 400 KB, far beyond the pipe's buffer) cannot finish until
    the client reads. Then every request gets its reply.
    """
    (git_workspace / "wide.txt").write_text("x" * 100 + "\n" * 1 + ("y" * 60 + "\n") * 400)
    await raw.initialize("2025-11-25")
    count = 3000
    call = {"name": "reader", "arguments": {"action": "read", "path": "wide.txt"}}
    requests = b"".join(
        json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": call}).encode()
        + b"\n"
        for i in range(1, count + 1)
    )
    assert raw.process.stdin is not None
    written = anyio.Event()

    async def write_all() -> None:
        assert raw.process.stdin is not None
        await raw.process.stdin.send(requests)
        written.set()

    seen: set[int] = set()
    async with anyio.create_task_group() as group:
        group.start_soon(write_all)
        with anyio.move_on_after(5):
            await written.wait()
        assert not written.is_set(), "the server kept reading requests nobody read replies to"
        with anyio.fail_after(300):
            while len(seen) < count:
                reply = await raw.receive()
                if "error" in reply:
                    assert reply["error"]["code"] == -32000, reply  # busy: refused whole
                else:
                    assert reply["result"]["isError"] is False
                seen.add(reply["id"])
    assert seen == set(range(1, count + 1))
    assert (await raw.request("ping"))["result"] == {}


class InProcess:
    """`serve_stdio` on two OS pipes inside the test, with an `act` the test controls."""

    def __init__(self) -> None:
        self.requests_read, self.requests = os.pipe()
        self.replies, self.replies_write = os.pipe()
        self.buffer = b""

    async def send(self, *messages: dict[str, Any]) -> None:
        data = b"".join(json.dumps({"jsonrpc": "2.0", **m}).encode() + b"\n" for m in messages)
        while data:
            await anyio.wait_writable(self.requests)
            data = data[os.write(self.requests, data) :]

    async def receive(self) -> dict[str, Any]:
        with anyio.fail_after(30):
            while b"\n" not in self.buffer:
                await anyio.wait_readable(self.replies)
                self.buffer += os.read(self.replies, 1 << 16)
        line, self.buffer = self.buffer.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        for fd in (self.requests_read, self.requests, self.replies, self.replies_write):
            with contextlib.suppress(OSError):
                os.close(fd)


def _served(tmp_path: Path) -> ServedTools:
    from lionfactory import Branch
    from lionfactory.tools import reader_tool

    branch = Branch()
    branch.register(reader_tool, workspace_root=tmp_path)
    return ServedTools.of(branch.tools.values())


def _serve_in(
    group: anyio.abc.TaskGroup,
    served: ServedTools,
    act: Callable[[str, Mapping[str, Any]], Awaitable[ActionResult]],
    stdin: int,
    stdout: int,
    **options: Any,
) -> None:
    """Start `serve_stdio` in `group` on the two descriptors."""
    group.start_soon(
        functools.partial(
            serve_stdio, served, act, name="t", version="0", stdin=stdin, stdout=stdout, **options
        )
    )


async def test_calls_beyond_the_in_flight_limit_are_refused_and_pings_still_answered(
    tmp_path: Path,
) -> None:
    release = anyio.Event()
    started = 0

    async def act(tool: str, arguments: Mapping[str, Any]) -> ActionResult:
        nonlocal started
        started += 1
        await release.wait()
        raise RuntimeError("released")

    pipes = InProcess()
    try:
        async with anyio.create_task_group() as group:
            _serve_in(
                group,
                _served(tmp_path),
                act,
                pipes.requests_read,
                pipes.replies_write,
                max_in_flight=3,
            )
            call = {"method": "tools/call", "params": {"name": "reader", "arguments": {}}}
            await pipes.send(*({"id": i, **call} for i in range(1, 6)))
            refused = [await pipes.receive(), await pipes.receive()]
            assert [r["id"] for r in refused] == [4, 5]
            assert all(r["error"]["code"] == -32000 for r in refused)
            assert "Wait for their replies" in refused[0]["error"]["message"]
            assert started == 3
            await pipes.send({"id": 6, "method": "ping"})
            assert (await pipes.receive())["id"] == 6
            release.set()
            failed = [await pipes.receive() for _ in range(3)]
            assert sorted(r["id"] for r in failed) == [1, 2, 3]
            assert all(r["error"]["code"] == -32603 for r in failed)
            await pipes.send({"id": 7, **call})  # room again once they finished
            assert (await pipes.receive())["id"] == 7
            os.close(pipes.requests)
    finally:
        pipes.close()


async def test_replies_larger_than_a_sockets_buffer_reach_a_slow_reader_whole(
    tmp_path: Path,
) -> None:
    """Over a socket pair (how Node spawns a server), replies are written part by part as it drains.

    The reads' replies are about 0.5 MB each, more than twice what the socket
    holds, and the client reads them in small pieces with pauses.
    """
    import socket

    from lionfactory import Branch
    from lionfactory.tools import reader_tool

    (tmp_path / "wide.txt").write_text(("z" * 200 + "\n") * 2000, encoding="utf-8")
    branch = Branch()
    branch.register(reader_tool, workspace_root=tmp_path)
    served = ServedTools.of(branch.tools.values())

    async def act(tool: str, arguments: Mapping[str, Any]) -> ActionResult:
        return await branch.act(tool, dict(arguments))

    requests_read, requests = os.pipe()
    client, server = socket.socketpair()
    client.setblocking(False)
    try:
        async with anyio.create_task_group() as group:
            _serve_in(group, served, act, requests_read, server.fileno())
            arguments = {"action": "read", "path": "wide.txt", "limit": 2000}
            call = {"name": "reader", "arguments": arguments}
            calls = b"".join(
                json.dumps(
                    {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": call}
                ).encode()
                + b"\n"
                for i in range(1, 4)
            )
            os.write(requests, calls)
            received = b""
            with anyio.fail_after(60):
                while received.count(b"\n") < 3:
                    await anyio.wait_readable(client)
                    received += client.recv(4096)
                    await anyio.sleep(0.0005)  # a slow reader
            os.close(requests)
        replies = [json.loads(line) for line in received.splitlines()]
        assert sorted(r["id"] for r in replies) == [1, 2, 3]
        for reply in replies:
            assert len(reply["result"]["structuredContent"]["content"]) > 250_000
    finally:
        for fd in (requests_read,):
            with contextlib.suppress(OSError):
                os.close(fd)
        client.close()
        server.close()


@pytest.mark.parametrize("target", ["file", "terminal"])
async def test_replies_to_a_file_or_a_terminal_are_written_whole(
    tmp_path: Path, target: str
) -> None:
    """Replies to a descriptor without per-call non-blocking writes (file, terminal) come whole."""
    import pty
    import tty

    async def act(tool: str, arguments: Mapping[str, Any]) -> ActionResult:
        raise AssertionError("no call is made")

    requests_read, requests = os.pipe()
    if target == "file":
        out = os.open(tmp_path / "replies", os.O_WRONLY | os.O_CREAT, 0o600)
        reader = None
    else:
        reader, out = pty.openpty()
        tty.setraw(out)  # no newline translation
    try:
        async with anyio.create_task_group() as group:
            _serve_in(group, _served(tmp_path), act, requests_read, out)
            pings = b"".join(
                json.dumps({"jsonrpc": "2.0", "id": i, "method": "ping"}).encode() + b"\n"
                for i in range(1, 201)
            )
            os.write(requests, pings)
            os.close(requests)
        if reader is None:
            written = (tmp_path / "replies").read_bytes()
        else:
            written = b""
            with anyio.fail_after(10):
                while written.count(b"\n") < 200:
                    await anyio.wait_readable(reader)
                    written += os.read(reader, 1 << 16)
        replies = [json.loads(line) for line in written.splitlines()]
        assert [r["id"] for r in replies] == list(range(1, 201))
    finally:
        for fd in (requests_read, out, reader):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


async def test_an_exception_while_answering_answers_that_request_and_the_server_goes_on(
    tmp_path: Path,
) -> None:
    async def act(tool: str, arguments: Mapping[str, Any]) -> ActionResult:
        return "not an ActionResult"  # type: ignore[return-value]  # encoding it fails

    pipes = InProcess()
    try:
        async with anyio.create_task_group() as group:
            _serve_in(group, _served(tmp_path), act, pipes.requests_read, pipes.replies_write)
            call = {"method": "tools/call", "params": {"name": "reader", "arguments": {}}}
            await pipes.send({"id": 1, **call})
            reply = await pipes.receive()
            assert reply["id"] == 1 and reply["error"]["code"] == -32603
            assert "AttributeError" in reply["error"]["message"]
            await pipes.send({"id": 2, "method": "ping"})
            assert (await pipes.receive()) == {"jsonrpc": "2.0", "id": 2, "result": {}}
            os.close(pipes.requests)
    finally:
        pipes.close()


async def _never_called(tool: str, arguments: Mapping[str, Any]) -> ActionResult:
    raise AssertionError("no call was made")


def _info() -> dict[str, Any]:
    return server_info("t", "0", None, None)


async def test_an_initialize_waiting_before_the_server_loads_is_answered_then_served_on(
    tmp_path: Path,
) -> None:
    """`answer_initialize`: the reply comes at once; the server reads what followed it first."""
    pipes = InProcess()
    try:
        initialize = {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {}}
        await pipes.send(
            {"id": 1, "method": "initialize", "params": initialize},
            {"method": "notifications/initialized"},
            {"id": 2, "method": "tools/list"},
        )
        handshake = answer_initialize(
            _info(), stdin=pipes.requests_read, stdout=pipes.replies_write
        )
        assert handshake is not None and handshake.version == "2025-03-26"
        reply = await pipes.receive()
        assert reply == {
            "jsonrpc": "2.0",
            "id": 1,
            "result": {**_info(), "protocolVersion": "2025-03-26"},
        }
        async with anyio.create_task_group() as group:
            _serve_in(
                group,
                _served(tmp_path),
                _never_called,
                pipes.requests_read,
                pipes.replies_write,
                handshake=handshake,
            )
            tools = (await pipes.receive())["result"]["tools"]
            # The connection speaks the version agreed early: 2025-03-26 has no outputSchema.
            assert [t["name"] for t in tools] == ["reader"] and "outputSchema" not in tools[0]
            await pipes.send({"id": 3, "method": "ping"})
            assert (await pipes.receive()) == {"jsonrpc": "2.0", "id": 3, "result": {}}
            os.close(pipes.requests)
    finally:
        pipes.close()


@pytest.mark.parametrize(
    "first",
    [
        b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n',
        b'{"jsonrpc": "2.0", "id": 1.5, "method": "initialize", "params": {}}\n',
        b'{"jsonrpc": "2.0", "id": 1, "method": "initial',
        b"{not json\n",
    ],
    ids=["another-method", "a-bad-id", "an-incomplete-line", "not-json"],
)
def test_a_first_request_that_is_not_an_initialize_is_left_to_the_server(first: bytes) -> None:
    """Only a whole, valid initialize is answered early; the rest reaches the server as sent."""
    pipes = InProcess()
    try:
        os.write(pipes.requests, first)
        handshake = answer_initialize(
            _info(), stdin=pipes.requests_read, stdout=pipes.replies_write
        )
        assert handshake is not None and handshake.version is None and handshake.unread == first
        # It writes before it returns, if at all: nothing to read means nothing was answered.
        assert select.select([pipes.replies], [], [], 0)[0] == []
    finally:
        pipes.close()


def test_nothing_waiting_is_nothing_read() -> None:
    pipes = InProcess()
    try:
        assert (
            answer_initialize(_info(), stdin=pipes.requests_read, stdout=pipes.replies_write)
            is None
        )
    finally:
        pipes.close()


async def test_a_handshake_that_told_the_client_of_another_server_is_refused(
    tmp_path: Path,
) -> None:
    pipes = InProcess()
    try:
        other = server_info("someone else", "0", None, None)
        with pytest.raises(ValueError, match="someone else"):
            await serve_stdio(
                _served(tmp_path),
                _never_called,
                name="t",
                version="0",
                stdin=pipes.requests_read,
                stdout=pipes.replies_write,
                handshake=Handshake("2025-03-26", b"", other),
            )
    finally:
        pipes.close()


async def test_the_command_line_answers_a_waiting_initialize_and_serves_the_session(
    git_workspace: Path,
) -> None:
    """Sent before the server has loaded, initialize and the calls after it are all answered."""
    command = serve_command(git_workspace)
    initialize = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x"}}
    async with await anyio.open_process(command, stderr=subprocess.DEVNULL) as process:
        raw = Raw(process)
        await raw.send({"id": 1, "method": "initialize", "params": initialize})
        reply = await raw.receive()
        assert reply["result"]["protocolVersion"] == "2025-06-18"
        assert reply["result"]["capabilities"]["resources"] == {
            "subscribe": True,
            "listChanged": True,
        }
        await raw.send({"method": "notifications/initialized"})
        raw.next_id = 1
        result = (await raw.request("tools/call", {"name": "reader", "arguments": READ}))["result"]
        assert result["structuredContent"]["content"] == "1\talpha\n2\tbeta"
        process.kill()


def test_a_usage_error_found_after_the_early_initialize_ends_the_server_after_it(
    tmp_path: Path,
) -> None:
    """The trade-off: the handshake is answered, then the error and status come as before."""
    initialize = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x"}}
    waiting, writer = os.pipe()
    try:
        # Written before the server starts: it is waiting when the server looks.
        request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize}
        os.write(writer, json.dumps(request).encode() + b"\n")
        done = subprocess.run(
            [*serve_command(tmp_path), "--tools", "no_such_tool"],
            stdin=waiting,
            capture_output=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(waiting)
        os.close(writer)
    assert json.loads(done.stdout)["result"]["protocolVersion"] == "2025-06-18"
    assert done.returncode == 2
    assert b"unknown coding tool(s) ['no_such_tool']" in done.stderr

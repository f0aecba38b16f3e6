"""Nothing a served call started outlives ``lionfactory mcp serve`` (or ``lionfactory call``).

The command ends with `os._exit` once it is done, which skips `atexit`: a
background job, or the git of a first snapshot still being taken, went on
after the server had gone, for init to reap (a job of ``sleep 60`` for a
minute). Each route ends the command its own way: the official Python client
closes a stdio server's input, TypeScript clients send it SIGTERM, an HTTP
server gets SIGTERM, ``call`` returns. A server killed with SIGKILL runs no
hook at all: its jobs end because their supervisor kills its commands when
its socket to the server closes, and a snapshot's git because bwrap dies
with the server (``--die-with-parent``) and takes its PID namespace along.
Real servers, real bwrap, real git; a process of the test's is one whose
working directory is in the test's temporary folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from _test_helpers import eventually, processes_in, stopped
from conftest import SOURCE_ROOT, http_process, serve_command, stdio_parameters
from mcp import Client

from lionfactory._os.isolation import containment

pytestmark = pytest.mark.skipif(
    containment() != "bwrap", reason="the default toolkits' processes run under bwrap here"
)

JOB = {"command": "sleep 60", "background": True}
CALL_JOB = {"name": "bash", "arguments": JOB}
HELLO = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "test", "version": "1"},
}


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The served workspace; the checkpoint store goes beside it, in the test's folder."""
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / "notes.txt").write_text("alpha\n", encoding="utf-8")
    monkeypatch.setenv("LIONFACTORY_STATE_DIR", str(tmp_path / "state"))
    yield root
    for pid in processes_in(tmp_path):  # a failed run's leftovers
        os.kill(pid, 9)


def served(workspace: Path, *extra: str) -> Client:
    parameters = stdio_parameters(workspace, *extra)
    assert parameters.env is not None
    parameters.env["LIONFACTORY_STATE_DIR"] = os.environ["LIONFACTORY_STATE_DIR"]
    return Client(parameters)


@pytest.mark.parametrize("toolkit", ["standalone", "coding"])
async def test_a_background_job_ends_with_a_stdio_server(workspace: Path, toolkit: str) -> None:
    async with served(workspace, "--toolkit", toolkit) as client:
        started = await client.call_tool("bash", JOB)
        assert not started.is_error, started.structured_content
        assert started.structured_content["job_id"]
        assert processes_in(workspace)
    # The client waited for the server's process to end: nothing of its is left.
    assert processes_in(workspace.parent) == []


@pytest.mark.parametrize("toolkit", ["standalone", "coding"])
@pytest.mark.parametrize("name", ["SIGTERM", "SIGKILL"])
def test_a_background_job_ends_with_a_stdio_server_on_a_signal(
    workspace: Path, toolkit: str, name: str
) -> None:
    """SIGTERM: as at the end of its input; SIGKILL: through the job's supervisor alone.

    SIGTERM is how a client on the TypeScript SDK before 1.24.3 closes a
    stdio server (later ones too, when it has not exited 2 s after its input
    closed): calls are cancelled, the exit hooks run, the status is 0.
    SIGKILL runs no hook: the supervisor the job runs under kills it when its
    socket to the server closes, and its PID namespace ends with it.
    """
    with _serving(workspace, toolkit, CALL_JOB) as server:
        assert processes_in(workspace)
        server.send_signal(getattr(signal, name))
        assert server.wait(timeout=30) == (0 if name == "SIGTERM" else -signal.SIGKILL)
    if name == "SIGTERM":
        assert processes_in(workspace.parent) == []  # its hooks ended the job before it exited
    _all_gone(workspace.parent)


def _all_gone(folder: Path) -> None:
    deadline = time.monotonic() + 30
    while processes_in(folder) and time.monotonic() < deadline:
        time.sleep(0.01)  # polled: nothing reports another process's end
    assert processes_in(folder) == []


@pytest.mark.filterwarnings(r"ignore:Async generator 'http(x|core)2\.:ResourceWarning")
@pytest.mark.parametrize("toolkit", ["standalone", "coding"])
async def test_a_background_job_ends_with_an_http_server_on_sigterm(
    workspace: Path, toolkit: str
) -> None:
    """SIGTERM while the session is open, as a process manager stops a server.

    uvicorn shuts down in order and then raised SIGTERM again into the
    default handler, so the process died of it before its exit hooks ran.
    """
    async with _http_session(workspace, toolkit) as (client, server):
        started = await client.call_tool("bash", JOB)
        assert not started.is_error, started.structured_content
        assert processes_in(workspace)
        await _stopped_by_sigterm(server)
    assert processes_in(workspace.parent) == []


@asynccontextmanager
async def _http_session(
    workspace: Path, toolkit: str
) -> AsyncIterator[tuple[Client, anyio.abc.Process]]:
    """An HTTP server of `toolkit` and a handshake session open on it."""
    async with (
        http_process(workspace, "--toolkit", toolkit) as (url, server),
        Client(url, mode="legacy") as client,
    ):
        yield client, server


async def _stopped_by_sigterm(server: anyio.abc.Process) -> None:
    """SIGTERM, as a process manager stops a server: it ends in order, with status 0."""
    server.terminate()
    with anyio.fail_after(30):
        assert await server.wait() == 0


def test_a_background_job_ends_with_the_call_command(workspace: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lionfactory", "call", "--json", "bash", json.dumps(JOB)],
        cwd=workspace,
        env={**os.environ, "PYTHONPATH": SOURCE_ROOT},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["job_id"]
    assert "the background job ends when this command does" in done.stderr
    assert processes_in(workspace.parent) == []


@pytest.mark.filterwarnings(r"ignore:Async generator 'http(x|core)2\.:ResourceWarning")
@pytest.mark.parametrize("route", ["stdio, input closed", "http, SIGTERM", "stdio, SIGKILL"])
async def test_a_first_snapshot_under_way_ends_with_the_server(workspace: Path, route: str) -> None:
    """Cancelled by the exit hooks; after SIGKILL, which runs none, git dies with the server.

    The snapshot's git runs under bwrap with ``--die-with-parent`` (the
    coding toolkit's default isolation): killed with the server, bwrap takes
    its PID namespace, and git in it, along.
    """
    # Enough files that the first snapshot's git runs for a while after the
    # editor call that started it has answered.
    for folder in range(100):
        place = workspace / f"pkg{folder}"
        place.mkdir()
        for index in range(200):
            (place / f"m{index}.txt").write_text(f"{folder} {index}\n" * 8, encoding="utf-8")

    seen: dict[int, float] = {}

    def long_git_running() -> bool:
        # The snapshot runs several gits with Python between them: wait for
        # one that has run for a while (hashing the tree), not one about to end.
        now = [p for p in processes_in(workspace.parent) if _cmdline(p).startswith(b"git")]
        seen.update({pid: seen.get(pid, time.monotonic()) for pid in now})
        return any(time.monotonic() - seen[pid] > 0.3 for pid in now)

    async def start_the_snapshot(client: Client) -> None:
        wrote = await client.call_tool(
            "editor", {"action": "write", "file_path": "new.txt", "content": "x\n"}
        )
        assert not wrote.is_error, wrote.structured_content
        await eventually(long_git_running, 60)

    if route == "stdio, SIGKILL":
        write = {"action": "write", "file_path": "new.txt", "content": "x\n"}
        with _serving(workspace, "coding", {"name": "editor", "arguments": write}) as server:
            await eventually(long_git_running, 60)
            # Stopped, git cannot finish by itself before the check below
            # (it would in a few seconds); SIGKILL ends a stopped process too.
            for pid in processes_in(workspace.parent):
                if _cmdline(pid).startswith(b"git"):
                    os.kill(pid, signal.SIGSTOP)
            server.kill()
            server.wait()
        await anyio.to_thread.run_sync(_all_gone, workspace.parent)
        return
    if route.startswith("stdio"):
        async with served(workspace, "--toolkit", "coding") as client:
            await start_the_snapshot(client)  # then the client closes the server's input
    else:
        async with _http_session(workspace, "coding") as (client, server):
            await start_the_snapshot(client)
            await _stopped_by_sigterm(server)
    assert processes_in(workspace.parent) == []


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read()
    except OSError:
        return b""


@contextlib.contextmanager
def _serving(
    workspace: Path, toolkit: str, call: dict[str, Any]
) -> Iterator[subprocess.Popen[bytes]]:
    """A stdio server of `toolkit`, initialized by hand, which has answered `call` (no error)."""
    server = subprocess.Popen(
        serve_command(workspace, "--toolkit", toolkit),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": SOURCE_ROOT},
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        for message in (
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HELLO},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call},
        ):
            server.stdin.write(json.dumps(message).encode() + b"\n")
            server.stdin.flush()
            if "id" in message:
                reply = json.loads(server.stdout.readline())
                assert "result" in reply, reply
        assert reply["result"]["isError"] is False, reply
        yield server
    finally:
        stopped(server)
        server.stdin.close()
        server.stdout.close()


PROGRAM = """
import signal, sys
from lionfactory import Branch
from lionfactory.mcp import serve_mcp
from lionfactory.tools import reader_tool

got = []
signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
branch = Branch("served")
branch.register(reader_tool, workspace_root=sys.argv[2])
ready = lambda where: print("ready", where, file=sys.stderr, flush=True)
serve_mcp(branch, transport=sys.argv[1], port=0, on_ready=ready)
print("returned after", got, file=sys.stderr, flush=True)
"""


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_programs_own_sigterm_handler_gets_the_signal(workspace: Path, transport: str) -> None:
    """`serve_mcp` ends on SIGTERM only where the program left it to the default action."""
    server = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, transport, str(workspace)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": SOURCE_ROOT},
    )
    assert server.stdin is not None and server.stdout is not None and server.stderr is not None
    try:
        ready = server.stderr.readline().decode()
        assert ready.startswith("ready "), ready

        def answered(request: dict[str, Any]) -> None:
            assert server.stdin is not None and server.stdout is not None
            server.stdin.write(json.dumps(request).encode() + b"\n")
            server.stdin.flush()
            assert "result" in json.loads(server.stdout.readline())

        # Any answer: the server runs, and handles signals if it does, by now.
        if transport == "http":
            with pytest.raises(urllib.error.HTTPError):
                urllib.request.urlopen(ready.split()[1], timeout=30)
        else:
            answered({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HELLO})
        server.terminate()
        if transport == "stdio":
            # Its handler took the signal: the server goes on answering.
            answered({"jsonrpc": "2.0", "id": 2, "method": "ping"})
            server.stdin.close()  # now it ends, at the end of its input
        # Over HTTP, uvicorn shut down in order and raised the signal into it.
        assert server.wait(timeout=30) == 0
        assert server.stderr.read().decode().splitlines()[-1] == "returned after [15]"
    finally:
        stopped(server)
        for stream in (server.stdin, server.stdout, server.stderr):
            stream.close()

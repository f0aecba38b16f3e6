"""A git workspace and ``lionfactory mcp serve`` started as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import anyio.abc
import pytest
from _test_helpers import drained, stopped
from mcp import StdioServerParameters

import lionfactory
from lionfactory.mcp._stateless import PROGRESS_ENVIRONMENT

# The SDK starts a stdio server with a small safe environment (no PYTHONPATH):
# point the server's Python at the checkout under test, so a worktree's tests
# exercise that worktree's server and not whichever copy is installed.
SOURCE_ROOT = str(Path(lionfactory.__file__).resolve().parents[1])
# The served toolkit's checkpoint stores go to the tests' state directory.
SERVER_ENV = {
    "PYTHONPATH": SOURCE_ROOT,
    **{k: v for k, v in os.environ.items() if k == "LIONFACTORY_STATE_DIR"},
}

NOTES = "alpha\nbeta\n"


@pytest.fixture
def git_workspace(tmp_path: Path) -> Path:
    """A git repository with one committed file, ``notes.txt``."""
    return make_git_workspace(tmp_path / "repo")


def make_git_workspace(root: Path) -> Path:
    """Make `root` a git repository with one committed file, ``notes.txt``."""
    root.mkdir()
    (root / "notes.txt").write_text(NOTES, encoding="utf-8")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    for argv in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "init"]):
        subprocess.run(argv, cwd=root, check=True, env={**env, "PATH": "/usr/bin:/bin"})
    return root


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


@pytest.fixture
def stdio_server(git_workspace: Path) -> Callable[..., StdioServerParameters]:
    """``stdio_server(*options)``: how to start ``lionfactory mcp serve`` on the workspace."""

    def parameters(*extra: str) -> StdioServerParameters:
        return stdio_parameters(git_workspace, *extra)

    return parameters


def stdio_parameters(workspace: Path, *extra: str) -> StdioServerParameters:
    """How to start ``lionfactory mcp serve`` over stdio on `workspace`."""
    command = serve_command(workspace, *extra)
    # The SDK passes only a few variables on; the progress interval a test
    # set (`fast_progress`) goes too.
    chosen = {k: v for k, v in os.environ.items() if k == PROGRESS_ENVIRONMENT}
    return StdioServerParameters(command=command[0], args=command[1:], env={**SERVER_ENV, **chosen})


@asynccontextmanager
async def http_server(workspace: Path, *extra: str) -> AsyncIterator[str]:
    """Run ``lionfactory mcp serve --transport http --port 0`` on `workspace`; yield its URL."""
    async with http_process(workspace, *extra) as (url, _):
        yield url


@asynccontextmanager
async def http_process(
    workspace: Path, *extra: str
) -> AsyncIterator[tuple[str, anyio.abc.Process]]:
    """`http_server`'s URL and process; on the way out, SIGTERM unless the process has ended."""
    command = serve_command(workspace, "--transport", "http", "--port", "0", *extra)
    async with await anyio.open_process(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    ) as process:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(20):
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


@contextmanager
def serving_http(
    workspace: Path, *extra: str, env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """`http_server` as a plain subprocess, for a server shared by a module's tests.

    An async fixture lives in one test's event loop; this needs none. Its
    stderr is drained by a thread (the pipe never fills), the first line
    names the URL. Every test still opens its own session. `env` is set over
    the test's environment.
    """
    command = serve_command(workspace, "--transport", "http", "--port", "0", *extra)
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    assert process.stderr is not None
    lines, thread = drained(process.stderr, "mcp serve stderr")
    try:
        line = lines.get(timeout=30).decode()
        assert "serving MCP at http://127.0.0.1:" in line, line
        yield line.split()[-1]
    finally:
        stopped(process)
        thread.join(timeout=10)
        process.stderr.close()


@pytest.fixture
async def http_url(git_workspace: Path) -> AsyncIterator[str]:
    """Run ``lionfactory mcp serve --transport http --port 0`` and yield its URL."""
    async with http_server(git_workspace) as url:
        yield url


@pytest.fixture
def start_http(git_workspace: Path) -> Callable[..., AbstractAsyncContextManager[str]]:
    """Start one more HTTP server process on the workspace (an async context manager)."""

    def start(*extra: str) -> AbstractAsyncContextManager[str]:
        return http_server(git_workspace, *extra)

    return start


@pytest.fixture
def fast_progress(monkeypatch: pytest.MonkeyPatch) -> float:
    """Servers started by this test report progress every 0.2 s instead of every 0.5 s."""
    monkeypatch.setenv(PROGRESS_ENVIRONMENT, "0.2")
    return 0.2

"""Shared fixtures: a temporary workspace, hypothesis profiles, a real redis-server, deep trees."""

from __future__ import annotations

import os
import queue
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _test_helpers import drained, stopped
from _test_helpers import hermetic_git as make_git_hermetic
from hypothesis import HealthCheck, settings

# CI gets a fixed, derandomised budget so runs are repeatable and bounded;
# locally, HYPOTHESIS_PROFILE=long explores more.
settings.register_profile(
    "ci",
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Checkpoint stores of the toolkits tests build go to a temporary state
# directory, never the developer's own (subprocesses inherit it).
if not os.environ.get("LIONFACTORY_STATE_DIR"):
    os.environ["LIONFACTORY_STATE_DIR"] = tempfile.mkdtemp(prefix="lionfactory-state-")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace directory inside the test's temporary directory."""
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def hermetic_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No global or system git configuration leaks in, and no sandbox is left in /tmp."""
    make_git_hermetic(monkeypatch, tmp_path)


@pytest.fixture
def hermetic_git_identity(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`hermetic_git`, and commits get a fixed author and committer."""
    make_git_hermetic(monkeypatch, tmp_path, identity=True)


@pytest.fixture
def deep_directory() -> Iterator[Callable[[Path, int], Path]]:
    """``make(root, depth)``: `root`/d/d/... `depth` levels down, as a command can make it.

    Deeper than Python's recursion limit is the point: `pathlib`'s
    ``mkdir(parents=True)``, `os.makedirs` and, on Python 3.11, `os.walk` and
    `shutil.rmtree` recurse once a level. The chain is made one directory at
    a time relative to the last, and removed the same way afterwards (pytest's
    own clean-up of old temporary folders would recurse on it).
    """
    made: list[Path] = []

    def make(root: Path, depth: int) -> Path:
        fd = os.open(root, os.O_RDONLY)
        try:
            for _ in range(depth):
                os.mkdir("d", dir_fd=fd)
                child = os.open("d", os.O_RDONLY, dir_fd=fd)
                os.close(fd)
                fd = child
        finally:
            os.close(fd)
        made.append(root / "d")
        return root.joinpath(*["d"] * depth)

    yield make
    for top in made:
        _remove_tree(os.fspath(top))


def _remove_tree(top: str) -> None:
    """`shutil.rmtree` without recursion (paths stay under PATH_MAX here)."""
    stack = [(top, False)]
    while stack:
        path, emptied = stack.pop()
        if emptied:
            os.rmdir(path)
            continue
        stack.append((path, True))
        with os.scandir(path) as scan:
            for entry in scan:
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, False))
                else:
                    os.unlink(entry.path)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real ``redis-server`` on a free loopback port for the whole run; yields its URL.

    Started from the Debian package's binary with no persistence, in a
    temporary directory, and shut down after the last test. Without the
    binary the tests that need it fail in CI (``CI`` set: CI installs it, so
    its absence is a broken setup) and are skipped elsewhere.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        message = "redis-server is not installed (apt-get install redis-server)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    directory = tmp_path_factory.mktemp("redis")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    argv += ["--dir", str(directory)]
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    log: threading.Thread | None = None
    try:
        log = _wait_until_ready(process, port)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stopped(process)
        if log is not None:
            log.join(timeout=10)  # the log reaches its end once the server is gone
        assert process.stdout is not None
        process.stdout.close()


def _wait_until_ready(process: subprocess.Popen[bytes], port: int) -> threading.Thread:
    """Return once redis-server logs that it accepts connections and answers PING.

    A thread drains its log (so the pipe never fills) and hands the lines
    over; the fixture waits on them, with no polling, for 20 s at most.
    """
    assert process.stdout is not None
    lines, thread = drained(process.stdout, "redis-server log")
    seen: list[bytes] = []
    deadline = time.monotonic() + 20
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"redis-server did not become ready in 20 s: {b''.join(seen)[-2000:]!r}")
        if not line:
            pytest.fail(f"redis-server exited: {b''.join(seen)[-2000:]!r}")
        seen.append(line)
        if b"Ready to accept connections" in line:
            break
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"PING\r\n")
        assert conn.recv(64).startswith(b"+PONG")
    return thread


@pytest.fixture
def redis_url(redis_server: str) -> str:
    """The session's Redis URL (every test names its own keys: see `redis_namespace`)."""
    return redis_server


@pytest.fixture
def redis_namespace() -> str:
    """A key prefix no other test uses, so tests share one server without clearing it."""
    return f"t{uuid.uuid4().hex[:12]}"

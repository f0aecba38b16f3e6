"""Processes started by tools: nothing outlives a call, nothing grows without bound.

Every child here is tagged with a unique token on its command line, so a
leftover is found by scanning ``/proc`` whatever its process group, and the
group itself is checked with ``os.killpg(pgid, 0)``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import tracemalloc
import uuid
from pathlib import Path

import anyio
import pytest
import trio
from _test_helpers import open_descriptors, opened_since
from hypothesis import event, given, settings
from hypothesis import strategies as st

from lionfactory.tools.bash import HEAD_BYTES, bash_tool

PY = sys.executable

# Starts `children` grandchildren (each may ignore SIGTERM, one forks a
# great-grandchild), reports the group id on stdout and in the ready file,
# then hangs: only a kill of the whole group ends it.
SPAWNER = """\
import os, signal, subprocess, sys, time
token, children, ignore_term, ready = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
if ignore_term:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = (
    "import os, signal, sys, time\\n"
    "if sys.argv[2] == '1': signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    "if sys.argv[3] == '0' and os.fork() == 0: time.sleep(120)\\n"
    "time.sleep(120)\\n"
)
for i in range(children):
    subprocess.Popen([sys.executable, "-c", code, token, sys.argv[3], str(i)])
print(os.getpgid(0), flush=True)
if ready != "-":
    with open(ready, "w") as f:
        f.write(str(os.getpgid(0)))
time.sleep(120)
"""


def tagged(token: str) -> list[int]:
    """Live (non-zombie) processes whose command line carries `token`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def spawner_command(token: str, children: int, ignore_term: bool, ready: str = "-") -> str:
    return f"{PY} -I -S spawner.py {token} {children} {int(ignore_term)} {ready}"


@pytest.fixture
def spawner_workspace(workspace: Path) -> Path:
    (workspace / "spawner.py").write_text(SPAWNER)
    return workspace


@pytest.mark.parametrize("ignore_term", [False, True], ids=["plain", "ignores-SIGTERM"])
async def test_a_timeout_leaves_no_process_in_the_group(spawner_workspace: Path, ignore_term):
    token = uuid.uuid4().hex
    bash = bash_tool(workspace_root=spawner_workspace)
    answer = await bash(command=spawner_command(token, 3, ignore_term), timeout=2000)
    assert answer["timed_out"] is True
    pgid = int(answer["stdout"].split()[0])
    # In the call's PID namespace the group's leader is outside: id 0.
    assert pgid == 0 or not group_alive(pgid)
    assert tagged(token) == []


@pytest.mark.parametrize("ignore_term", [False, True], ids=["plain", "ignores-SIGTERM"])
async def test_a_cancelled_call_leaves_no_process_in_the_group(spawner_workspace, ignore_term):
    token = uuid.uuid4().hex
    ready = spawner_workspace / "ready"
    os.mkfifo(ready)
    bash = bash_tool(workspace_root=spawner_workspace)

    def read_ready() -> str:
        with open(ready) as fifo:
            return fifo.read()

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            command = spawner_command(token, 3, ignore_term, str(ready))
            nursery.start_soon(lambda: bash(command=command, timeout=60_000))
            pgid = int(await trio.to_thread.run_sync(read_ready, abandon_on_cancel=True))
            assert (pgid == 0 or group_alive(pgid)) and len(tagged(token)) >= 4
            nursery.cancel_scope.cancel()
    assert pgid == 0 or not group_alive(pgid)
    assert tagged(token) == []


async def cancel_after(
    workspace: Path, token: str, children: int, delay: float, timeout_ms: int
) -> str:
    bash = bash_tool(workspace_root=workspace)
    with trio.move_on_after(delay) as scope:
        answer = await bash(command=spawner_command(token, children, True), timeout=timeout_ms)
        return "timed out" if answer["timed_out"] else "finished"
    assert scope.cancelled_caught
    return "cancelled"


@settings(max_examples=12)
@given(children=st.integers(0, 2), delay=st.floats(0, 0.4), timeout_ms=st.integers(1, 400))
def test_cancelling_or_timing_out_at_any_moment_leaves_nothing(
    children: int, delay: float, timeout_ms: int
):
    """Cancelled or timed out at any moment, a call leaves no process behind.

    The moment is random: before the launch, during it, while grandchildren
    start, or after they all run.

    12 examples: each waits up to 0.4 s for its deadline, and killed
    grandchildren stay zombies until this machine's init reaps them (about
    a second), which the runner waits for.
    """
    token = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="lf-proc-") as base:
        (Path(base) / "spawner.py").write_text(SPAWNER)
        event(trio.run(cancel_after, Path(base), token, children, delay, timeout_ms))
    assert tagged(token) == []


FLOOD = (
    "import sys\n"
    "chunk = b'x' * 1_000_000\n"
    "for _ in range(10):\n"
    "    sys.stdout.buffer.write(chunk)\n"
)


@pytest.mark.slow
async def test_64_concurrent_calls_printing_10_mb_each_use_bounded_memory(workspace: Path):
    """640 MB through 64 concurrent calls: all finish, each keeps its cap, memory stays small."""
    (workspace / "flood.py").write_text(FLOOD)
    bash = bash_tool(workspace_root=workspace)
    answers: list[dict[str, object]] = []
    # The tool keeps the supervisor its first call starts (its socket and
    # pidfd stay open while the tool lives): counted once, before the flood.
    await bash(command="true")
    fds = open_descriptors()

    async def one() -> None:
        answers.append(await bash(command=f"{PY} -I -S flood.py", timeout=120_000))

    tracemalloc.start()
    try:
        async with anyio.create_task_group() as group:
            for _ in range(64):
                group.start_soon(one)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(answers) == 64
    for answer in answers:
        assert answer["return_code"] == 0 and answer["error"] is None, answer["stderr"]
        head, marker, tail = str(answer["stdout"]).split("\n")
        assert head == tail == "x" * HEAD_BYTES
        assert "10,000,000 bytes in all" in marker
    # Unbounded capture would hold 640 MB; the caps allow 64 x 100 KB kept
    # plus pipe chunks in flight.
    assert peak < 48_000_000, f"peak traced memory {peak:,} bytes"
    # No more than before: the supervisor keeps one prepared runner (a socket
    # and a pidfd) for the next call, and which of the flood's runners it
    # kept is arbitrary, so the descriptors may differ but not grow.
    assert len(open_descriptors()) <= len(fds), opened_since(fds)
    json.dumps(answers)

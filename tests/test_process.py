"""The process runner: deadlines, group kills, capped drains, launch errors."""

from __future__ import annotations

import os
import sys
import tracemalloc
from functools import partial
from pathlib import Path

import pytest
import trio
from _test_helpers import eventually, open_descriptors, opened_since, processes_in

from lionfactory._os.process import (
    DEFAULT_MAX_BYTES,
    LaunchError,
    ProcessResult,
    ReadPace,
    run_process,
)

PY = sys.executable

# Starts a grandchild (which inherits our pipes), reports the group id, then
# hangs: only a kill of the whole group ends it.
SPAWN_AND_HANG = (
    "import os, subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "print(os.getpgid(0), flush=True)\n"
    "time.sleep(60)\n"
)


def group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def read_fifo(path: Path) -> str:
    with open(path) as fifo:
        return fifo.read()


async def test_returns_output_and_exit_code(tmp_path: Path) -> None:
    result = await run_process(
        [PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
        cwd=tmp_path,
        timeout=30,
    )
    assert (result.stdout, result.stderr, result.returncode) == ("out\n", "err\n", 3)
    assert not result.timed_out
    assert not result.truncated


async def test_runs_in_the_given_directory(tmp_path: Path) -> None:
    result = await run_process(
        [PY, "-c", "import os; print(os.getcwd())"], cwd=tmp_path, timeout=30
    )
    assert result.stdout.strip() == str(tmp_path)


async def test_child_leads_its_own_process_group(tmp_path: Path) -> None:
    result = await run_process(
        [PY, "-c", "import os; print(os.getpgid(0))"], cwd=tmp_path, timeout=30
    )
    assert int(result.stdout) == result.pgid == result.pid
    assert result.pgid != os.getpgid(0)


async def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    result = await run_process([PY, "-c", SPAWN_AND_HANG], cwd=tmp_path, timeout=1)
    assert result.timed_out
    assert result.returncode == -9
    assert int(result.stdout) == result.pgid
    assert not group_exists(result.pgid)


async def test_leftover_background_process_is_killed_after_a_normal_exit(tmp_path: Path) -> None:
    detach = (
        "import os, subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
        "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(os.getpgid(0))\n"
    )
    result = await run_process([PY, "-c", detach], cwd=tmp_path, timeout=30)
    assert not result.timed_out
    assert result.returncode == 0
    assert not group_exists(result.pgid)


async def test_grandchild_holding_the_pipes_does_not_outlast_its_parent(tmp_path: Path) -> None:
    """The leader exits at once; a grandchild keeps stdout open but is killed, no timeout."""
    keep_pipe = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('leader done')\n"
    )
    result = await run_process([PY, "-c", keep_pipe], cwd=tmp_path, timeout=30)
    assert not result.timed_out
    assert result.stdout == "leader done\n"
    assert result.duration < 20


async def test_cancellation_kills_the_whole_group(tmp_path: Path) -> None:
    fifo = tmp_path / "pgid"
    os.mkfifo(fifo)
    script = (
        "import os, subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "with open(sys.argv[1], 'w') as f:\n"
        "    f.write(str(os.getpgid(0)))\n"
        "time.sleep(60)\n"
    )
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: run_process([PY, "-c", script, str(fifo)], cwd=tmp_path, timeout=60)
            )
            pgid = int(await trio.to_thread.run_sync(read_fifo, fifo, abandon_on_cancel=True))
            assert group_exists(pgid)
            nursery.cancel_scope.cancel()
    assert not group_exists(pgid)


async def test_huge_output_is_capped_on_both_streams_with_bounded_memory(tmp_path: Path) -> None:
    """50 MB on each stream, interleaved: no deadlock, 100,000 bytes kept, memory bounded."""
    flood = (
        "import sys\n"
        "chunk = b'x' * 1_000_000\n"
        "for _ in range(50):\n"
        "    sys.stdout.buffer.write(chunk)\n"
        "    sys.stderr.buffer.write(chunk.replace(b'x', b'y'))\n"
    )
    tracemalloc.start()
    try:
        result = await run_process([PY, "-c", flood], cwd=tmp_path, timeout=120)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.returncode == 0
    assert (result.stdout_bytes, result.stderr_bytes) == (50_000_000, 50_000_000)
    assert result.stdout_truncated and result.stderr_truncated
    out_kept, out_notice = result.stdout.split("\n", 1)
    err_kept, err_notice = result.stderr.split("\n", 1)
    assert out_kept == "x" * DEFAULT_MAX_BYTES
    assert err_kept == "y" * DEFAULT_MAX_BYTES
    assert "stdout truncated" in out_notice and "50,000,000" in out_notice
    assert "stderr truncated" in err_notice
    assert peak < 5_000_000


async def test_truncation_notice_can_be_left_out(tmp_path: Path) -> None:
    result = await run_process(
        [PY, "-c", "print('a' * 50)"],
        cwd=tmp_path,
        timeout=30,
        max_bytes=10,
        announce_truncation=False,
    )
    assert result.stdout == "a" * 10
    assert result.stdout_truncated


async def test_a_cut_multibyte_character_is_dropped_not_replaced(tmp_path: Path) -> None:
    result = await run_process(
        [PY, "-c", "print('é' * 10)"],
        cwd=tmp_path,
        timeout=30,
        max_bytes=5,
        announce_truncation=False,
    )
    assert result.stdout == "éé"


async def test_stdin_is_empty(tmp_path: Path) -> None:
    result = await run_process(
        [PY, "-c", "import sys; print(repr(sys.stdin.read()))"], cwd=tmp_path, timeout=30
    )
    assert result.stdout == "''\n"


async def test_env_replaces_the_environment(tmp_path: Path) -> None:
    result = await run_process(
        [PY, "-c", "import os; print(sorted(k for k in os.environ if k != 'LC_CTYPE'))"],
        cwd=tmp_path,
        timeout=30,
        env={"ONLY_THIS": "1"},
    )
    assert result.stdout.strip() == "['ONLY_THIS']"


async def test_missing_program_is_a_launch_error(tmp_path: Path) -> None:
    with pytest.raises(LaunchError) as info:
        await run_process([str(tmp_path / "no-such-program")], cwd=tmp_path, timeout=30)
    assert info.value.program == str(tmp_path / "no-such-program")
    assert "No such file" in info.value.message


async def test_non_executable_program_is_a_launch_error(tmp_path: Path) -> None:
    script = tmp_path / "garbage"
    script.write_bytes(b"\x00\x01 not a program")
    script.chmod(0o755)
    with pytest.raises(LaunchError, match="Exec format error"):
        await run_process([str(script)], cwd=tmp_path, timeout=30)


async def test_missing_working_directory_is_a_launch_error(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="missing"):
        await run_process([PY, "-c", "pass"], cwd=tmp_path / "missing", timeout=30)


async def test_empty_argv_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty"):
        await run_process([], cwd=tmp_path, timeout=30)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
async def test_no_file_descriptor_leaks(tmp_path: Path) -> None:
    async def run_some() -> None:
        for _ in range(5):
            await run_process([PY, "-c", "print(1)"], cwd=tmp_path, timeout=30)
        await run_process([PY, "-c", "import time; time.sleep(60)"], cwd=tmp_path, timeout=0.2)

    await run_some()  # warm up lazily opened descriptors (trio's wakeup fds, ...)
    before = open_descriptors()
    await run_some()
    assert opened_since(before) == set()


async def test_a_launch_failure_leaks_no_file_descriptor(tmp_path: Path) -> None:
    async def fail_some() -> None:
        for _ in range(5):
            with pytest.raises(LaunchError):
                await run_process([str(tmp_path / "missing")], cwd=tmp_path, timeout=30)

    await fail_some()
    before = open_descriptors()
    await fail_some()
    assert opened_since(before) == set()


async def test_an_endless_writer_is_killed_at_its_deadline_and_the_loop_keeps_running(
    tmp_path: Path,
) -> None:
    flood = "import sys\nwhile True:\n    sys.stdout.buffer.write(b'x' * 1_000_000)\n"
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.01)
            ticks += 1

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            result = await run_process([PY, "-c", flood], cwd=tmp_path, timeout=1)
            nursery.cancel_scope.cancel()
    assert result.timed_out and result.stdout_bytes > DEFAULT_MAX_BYTES
    assert ticks >= 10  # the drain gave the loop its turns while it read


async def test_on_output_sees_every_chunk_of_both_streams_even_past_the_cap(
    tmp_path: Path,
) -> None:
    seen: list[bytes] = []
    script = "import sys\nfor i in range(500): print('x' * 99)\nprint('e', file=sys.stderr)"
    result = await run_process(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        timeout=60,
        max_bytes=1000,
        on_output=seen.append,
    )
    assert result.returncode == 0
    assert result.stdout_truncated  # only 1,000 bytes kept...
    data = b"".join(seen)
    assert data.count(b"\n") == 501  # ...but every line was seen as it came
    assert len(data) == 500 * 100 + 2


async def test_a_chatty_writer_loses_nothing_and_keeps_its_order(tmp_path: Path) -> None:
    # Thousands of small flushed writes: the reader pauses between short reads
    # to let the pipe gather them, and must still see every byte in order.
    code = (
        "import sys\nfor i in range(3000):\n    print(i, flush=True)\n    sys.stderr.write('e')\n"
    )
    seen: list[bytes] = []
    result = await run_process(
        [sys.executable, "-c", code], cwd=tmp_path, timeout=60, on_output=seen.append
    )
    expected = "".join(f"{i}\n" for i in range(3000))
    assert result.stdout == expected
    assert result.stderr == "e" * 3000
    assert b"".join(seen).count(b"\n") == 3000


def test_a_garbled_info_file_names_no_process() -> None:
    from lionfactory._os import process

    for data in (b"", b"{", b'{"child-pid": "7"}', b'{"child-pid": 1}', b"[]", b'{"x": 5}'):
        report = os.memfd_create("info")
        os.write(report, data)  # the offset moves on: the report is read from 0
        try:
            assert process._reported_pid(report) is None, data
        finally:
            os.close(report)
    report = os.memfd_create("info")
    os.write(report, b'{"child-pid": 4242}')
    assert process._reported_pid(report) == 4242
    os.close(report)


_DIES_MID_LAUNCH = """
import os, subprocess, sys
from pathlib import Path
from lionfactory._os.isolation import workspace_isolation

cwd = Path(sys.argv[1])
launch = workspace_isolation(sys.argv[2], cwd).launch(
    ["true"], cwd=cwd, env=None, report_first_process=True
)
# This process ends before bwrap reports which process it made: what it
# reads the report from is gone by then (closed first, so that it always is).
os.close(launch.first_process)
subprocess.Popen(launch.argv, env=launch.env, cwd=cwd, pass_fds=launch.pass_fds,
                 start_new_session=True)
os._exit(0)
"""


@pytest.mark.parametrize("mechanism", ["none", "bwrap"])
async def test_a_launcher_that_ends_mid_launch_leaves_no_sandbox_process_waiting(
    tmp_path: Path, mechanism: str
) -> None:
    # bwrap reports its sandbox's first process (--info-fd) after making it
    # and before letting it go on: a report pipe whose reader had gone
    # killed bwrap with SIGPIPE there, and the first process waited forever.
    from lionfactory._os import isolation

    if isolation.containment() != "bwrap":
        pytest.skip("bwrap launches need bwrap")
    place = tmp_path / "launched"
    place.mkdir()
    done = await trio.run_process(
        [sys.executable, "-c", _DIES_MID_LAUNCH, str(place), mechanism],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert done.returncode == 0
    try:
        await eventually(lambda: not processes_in(place), 10)
    finally:
        for pid in processes_in(place):
            os.kill(pid, 9)


def _running_with(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as file:
                if marker.encode() in file.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


async def test_the_sandbox_first_process_is_awaited_not_the_whole_proc_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lionfactory._os import isolation, process

    if isolation.containment() != "bwrap":
        pytest.skip("the unconfined PID namespace is bwrap's only where bwrap works")

    async def no_scan(*args: object, **kwargs: object) -> None:
        raise AssertionError("the group was scanned in /proc")

    monkeypatch.setattr(process, "_wait_group_gone", no_scan)
    marker = "31.4159"
    iso = isolation.workspace_isolation("none", tmp_path)
    result = await run_process(
        ["sh", "-c", f"setsid sleep {marker} & sleep {marker}1 & echo started"],
        cwd=tmp_path,
        timeout=30,
        isolation=iso,
    )
    assert result.stdout == "started\n"
    # The namespace died with its first process: neither the detached nor
    # the background sleep outlived the call.
    assert _running_with(marker) == []


# -- pacing the pipe reads ----------------------------------------------------------


async def test_a_read_after_the_writer_exited_is_not_paused(autojump_clock: object) -> None:
    exited = trio.Event()
    exited.set()
    pace = ReadPace(exited)
    start = trio.current_time()
    for _ in range(40):
        await pace.after(10)
    assert trio.current_time() == start


async def test_a_pause_ends_when_the_writer_exits(autojump_clock: object) -> None:
    exited = trio.Event()
    pace = ReadPace(exited)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:

        async def exit_soon() -> None:
            await trio.sleep(0.0002)
            exited.set()

        nursery.start_soon(exit_soon)
        await pace.after(10)  # the first short read already pauses
    assert trio.current_time() - start == pytest.approx(0.0002)


async def test_pauses_double_while_reads_stay_short(autojump_clock: object) -> None:
    pace = ReadPace(trio.Event())
    waited = []
    for size in (10, 10, 10, 10, 10, 10, 64 * 1024, 10):
        start = trio.current_time()
        await pace.after(size)
        waited.append(round(trio.current_time() - start, 6))
    # A full read: the writer is fast, so it is read on at once and the
    # pauses start again from a millisecond.
    assert waited == [0.001, 0.002, 0.004, 0.008, 0.008, 0.008, 0.0, 0.001]


async def test_without_the_exit_the_first_reads_are_prompt(autojump_clock: object) -> None:
    pace = ReadPace()
    start = trio.current_time()
    for _ in range(16):
        await pace.after(10)
    assert trio.current_time() == start
    await pace.after(10)
    assert trio.current_time() - start == pytest.approx(0.001)


def _has_text(path: Path) -> bool:
    return path.exists() and path.read_text() != ""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
async def test_a_cancelled_run_leaves_no_descriptor_and_no_process(tmp_path: Path) -> None:
    async def cancel_some(round_: str) -> list[int]:
        groups = []
        for n in range(3):
            marker = tmp_path / f"pgid-{round_}-{n}"
            script = (
                "import os, time\n"
                f"open({str(marker)!r}, 'w').write(str(os.getpgid(0)))\n"
                "time.sleep(60)\n"
            )
            # Cancelled once the child runs (it wrote its group), not after a guess.
            run = partial(run_process, [PY, "-c", script], cwd=tmp_path, timeout=60)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run)
                await eventually(partial(_has_text, marker), 30)
                nursery.cancel_scope.cancel()
            groups.append(int(marker.read_text()))
        return groups

    await cancel_some("warm-up")
    before = open_descriptors()
    groups = await cancel_some("counted")
    assert opened_since(before) == set()
    assert not any(group_exists(pgid) for pgid in groups)


@pytest.mark.parametrize("start", ["pidfd", "no pidfd for this child", "no pidfd on this system"])
async def test_every_way_of_waiting_for_the_child_gives_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    from lionfactory._os import process as process_module

    if start == "no pidfd for this child":

        def refuse(pid: int, flags: int = 0) -> int:
            raise PermissionError("refused by a seccomp filter")

        monkeypatch.setattr(process_module.os, "pidfd_open", refuse)
    elif start == "no pidfd on this system":
        monkeypatch.setattr(process_module, "_PIDFD", False)
    done = await run_process(
        [PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
        cwd=tmp_path,
        timeout=30,
    )
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    slow = await run_process([PY, "-c", "import time; time.sleep(60)"], cwd=tmp_path, timeout=0.3)
    assert slow.timed_out
    assert not group_exists(slow.pgid)


def test_a_run_under_asyncio_waits_for_its_child_and_its_deadline(tmp_path: Path) -> None:
    import asyncio

    async def main() -> tuple[ProcessResult, ProcessResult]:
        done = await run_process([PY, "-c", "print('hi')"], cwd=tmp_path, timeout=30)
        hang = [PY, "-c", "import time; time.sleep(60)"]
        slow = await run_process(hang, cwd=tmp_path, timeout=0.3)
        return done, slow

    done, slow = asyncio.run(main())
    assert done.stdout == "hi\n" and done.returncode == 0
    assert slow.timed_out and not group_exists(slow.pgid)

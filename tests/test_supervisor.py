"""The branch supervisor: how each command it starts is set up, and what is left when it ends.

Every test starts a real supervisor under a real mechanism (bwrap, Landlock)
and runs real programs through it; the shell-level behaviour (background
jobs, shared loopback and /tmp, kills) is tested through the tools in
``tests/tools/test_jobs.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from _test_helpers import eventually, mechanism_params, processes_tagged

from lionfactory._os.isolation import Isolation, workspace_isolation
from lionfactory._os.process import LaunchError, ProcessResult
from lionfactory._os.supervisor import (
    RemoteProcess,
    Supervisor,
    _hand,
    _runner_word,
    run_supervised,
)

PY = sys.executable


@pytest.fixture(params=mechanism_params())
def isolation(request: pytest.FixtureRequest, tmp_path: Path) -> Isolation:
    root = tmp_path / "ws"
    root.mkdir()
    return workspace_isolation(request.param, root)


@pytest.fixture
def supervisor(isolation: Isolation) -> Iterator[Supervisor]:
    started = Supervisor.start(isolation, isolation.policy.writable[0])
    try:
        yield started
    finally:
        started.close()


def root_of(supervisor: Supervisor) -> Path:
    return supervisor.isolation.policy.writable[0]


async def run(
    supervisor: Supervisor,
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 60,
) -> ProcessResult:
    return await run_supervised(
        supervisor,
        argv,
        cwd=root_of(supervisor) if cwd is None else cwd,
        timeout=timeout,
        env=env,
        max_bytes=100_000,
    )


def submitted(supervisor: Supervisor, argv: list[str], **env: str) -> RemoteProcess:
    """Hand `argv` to the supervisor as it is (no host-side program check) and wait for it."""
    read, write = os.pipe()
    try:
        sock = supervisor.submit(
            argv,
            cwd=root_of(supervisor),
            env={"PATH": os.environ["PATH"], **env},
            stdout=write,
            stderr=write,
        )
    finally:
        os.close(write)
        os.close(read)
    process = RemoteProcess.first_report(sock)
    try:
        assert process.wait(60) is not None
    finally:
        process.close()
    return process


def status_field(text: str, name: str) -> str:
    (line,) = [line for line in text.splitlines() if line.startswith(f"{name}:")]
    return line.split(":", 1)[1].strip()


def stat_fields(pid: int) -> list[bytes]:
    """The fields of ``/proc/PID/stat`` after the command name (state first); [] when gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return []
    return data[data.rindex(b")") + 2 :].split()


def descendants(pid: int) -> dict[int, bytes]:
    """Live descendants of `pid`, each with its start time (to tell a reused pid)."""
    parents: dict[int, int] = {}
    started: dict[int, bytes] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = stat_fields(int(name))
        if len(fields) > 19 and fields[0] not in (b"Z", b"X"):
            parents[int(name)] = int(fields[1])
            started[int(name)] = fields[19]
    found = {}
    for child in parents:
        ancestor = parents[child]
        while ancestor > 1 and ancestor != pid:
            ancestor = parents.get(ancestor, 0)
        if ancestor == pid:
            found[child] = started[child]
    return found


def alive(pid: int, start: bytes) -> bool:
    fields = stat_fields(pid)
    return len(fields) > 19 and fields[19] == start and fields[0] not in (b"Z", b"X")


def depth(pid: int) -> int:
    try:
        return len(status_field(Path(f"/proc/{pid}/status").read_text(), "NSpid").split())
    except OSError:
        return 0


async def test_a_command_is_not_the_first_process_of_its_own_pid_namespace(
    supervisor: Supervisor,
) -> None:
    # NSpid lists the pid in every namespace from the host's down: the
    # innermost is the command's own namespace, whose first process (1) is
    # the runner that reaps for it.
    first = await run(supervisor, ["cat", "/proc/self/status"])
    second = await run(supervisor, ["cat", "/proc/self/status"])
    supervisor_pids = status_field(Path("/proc/self/status").read_text(), "NSpid").split()
    for result in (first, second):
        assert result.returncode == 0, result.stderr
        pids = status_field(result.stdout, "NSpid").split()
        assert pids[-1] == "2"
        # The host's, the sandbox's (where the mechanism makes one) and its own.
        assert len(pids) > len(supervisor_pids)


async def test_each_command_gets_a_new_pid_namespace(supervisor: Supervisor) -> None:
    # A freed namespace's inode number is handed to the next one, so the
    # three commands are alive together when they read theirs: each waits
    # until all three have written theirs.
    script = (
        "import os, sys, time\n"
        "link = os.readlink('/proc/self/ns/pid')\n"
        "open(os.path.join(sys.argv[1], str(os.getpid()) + link), 'w').close()\n"
        "deadline = time.monotonic() + 30\n"
        "while len(os.listdir(sys.argv[1])) < 3 and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print(link)\n"
    )
    barrier = root_of(supervisor) / "barrier"
    barrier.mkdir()
    links = set()

    async def one() -> None:
        result = await run(supervisor, [PY, "-I", "-S", "-c", script, str(barrier)])
        assert result.returncode == 0, result.stderr
        links.add(result.stdout.strip())

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(one)
    outside = os.readlink("/proc/self/ns/pid")
    assert len(links) == 3 and outside not in links


async def test_the_command_has_only_stdin_stdout_and_stderr_open(supervisor: Supervisor) -> None:
    script = (
        "import os\n"
        "def is_open(fd):\n"
        "    try:\n"
        "        os.fstat(fd)\n"
        "    except OSError:\n"
        "        return False\n"
        "    return True\n"
        "print([fd for fd in range(1024) if is_open(fd)])\n"
        "print(os.readlink('/proc/self/fd/0'))\n"
    )
    result = await run(supervisor, [PY, "-I", "-S", "-c", script])
    assert result.returncode == 0, result.stderr
    opened, stdin = result.stdout.splitlines()
    assert opened == "[0, 1, 2]"
    assert stdin == "/dev/null"


async def test_the_command_gets_exactly_the_requested_environment(supervisor: Supervisor) -> None:
    env = {"PATH": os.environ["PATH"], "LF_ONE": "1", "LF_SPACED": "a b"}
    result = await run(supervisor, ["env", "-0"], env=env)
    assert result.returncode == 0, result.stderr
    seen = dict(entry.split("=", 1) for entry in result.stdout.split("\0") if entry)
    # The sandbox's private temp dir is the one addition (TMPDIR and friends).
    assert seen == {**env, **supervisor.overlay}


async def test_the_command_runs_in_the_requested_directory(supervisor: Supervisor) -> None:
    sub = root_of(supervisor) / "sub dir"
    sub.mkdir()
    result = await run(supervisor, ["pwd", "-P"], cwd=sub)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(sub)


async def test_the_command_inherits_the_umask_the_supervisor_started_with(
    isolation: Isolation,
) -> None:
    previous = os.umask(0o027)
    try:
        supervisor = Supervisor.start(isolation, isolation.policy.writable[0])
    finally:
        os.umask(previous)
    try:
        result = await run(supervisor, ["sh", "-c", "umask"])
    finally:
        supervisor.close()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0027"


async def test_the_command_gets_signals_at_their_defaults_and_none_blocked(
    supervisor: Supervisor,
) -> None:
    # Python ignores SIGPIPE and SIGXFSZ at start-up; an ignored disposition
    # survives exec, so a command would not die writing to a closed pipe.
    result = await run(supervisor, ["cat", "/proc/self/status"])
    assert result.returncode == 0, result.stderr
    ignored = int(status_field(result.stdout, "SigIgn"), 16)
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (number - 1)), signal.Signals(number).name
    assert int(status_field(result.stdout, "SigBlk"), 16) == 0


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
async def test_a_pipelines_writer_dies_of_sigpipe_like_from_a_shell(supervisor: Supervisor) -> None:
    # With SIGPIPE ignored, `yes` would get EPIPE instead and exit 1.
    script = "yes | head -n 1 > /dev/null; echo ${PIPESTATUS[0]}"
    result = await run(supervisor, ["bash", "-c", script])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(128 + signal.SIGPIPE)


def test_a_missing_program_is_reported_as_an_exec_error(supervisor: Supervisor) -> None:
    process = submitted(supervisor, ["/nonexistent/program"])
    assert process.returncode == 127
    assert process.exec_error == "No such file or directory (/nonexistent/program)"


def test_a_program_not_on_path_is_reported_as_an_exec_error(supervisor: Supervisor) -> None:
    process = submitted(supervisor, ["lf-no-such-program-anywhere"])
    assert process.returncode == 127
    assert process.exec_error is not None
    assert process.exec_error.startswith("No such file or directory (")


def test_a_file_that_is_not_executable_is_reported_as_an_exec_error(
    supervisor: Supervisor,
) -> None:
    plain = root_of(supervisor) / "plain.sh"
    plain.write_text("#!/bin/sh\necho ran\n")
    plain.chmod(0o644)
    process = submitted(supervisor, [str(plain)])
    assert process.returncode == 127
    assert process.exec_error == f"Permission denied ({plain})"


def test_a_directory_is_reported_as_an_exec_error(supervisor: Supervisor) -> None:
    process = submitted(supervisor, [str(root_of(supervisor))])
    assert process.returncode == 127
    assert process.exec_error == f"Permission denied ({root_of(supervisor)})"


async def test_path_lookup_skips_a_non_executable_match_like_execvp(
    supervisor: Supervisor,
) -> None:
    root = root_of(supervisor)
    first, second = root / "first", root / "second"
    for directory, mode in ((first, 0o644), (second, 0o755)):
        directory.mkdir()
        program = directory / "lf-tool"
        program.write_text(f"#!/bin/sh\necho {directory.name}\n")
        program.chmod(mode)
    result = await run(supervisor, ["lf-tool"], env={"PATH": f"{first}:{second}"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "second"
    # Only the non-executable one: its failure, not "not found", is the answer.
    process = submitted(supervisor, ["lf-tool"], PATH=f"{root / 'missing'}:{first}")
    assert process.returncode == 127
    assert process.exec_error == f"Permission denied ({first / 'lf-tool'})"


async def test_run_supervised_turns_an_exec_failure_inside_into_a_launch_error(
    supervisor: Supervisor,
) -> None:
    # The host finds the program; the sandbox does not (it is made
    # non-executable after the host-side check would have passed: here the
    # check is skipped by naming a program only the request's PATH holds).
    hidden = root_of(supervisor) / "bin"
    hidden.mkdir()
    program = hidden / "lf-later"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o644)
    with pytest.raises(LaunchError, match="not found on PATH"):
        await run(supervisor, ["lf-later"], env={"PATH": str(hidden)})


async def test_a_failed_start_leaves_the_next_command_working(supervisor: Supervisor) -> None:
    assert submitted(supervisor, ["/nonexistent/program"]).returncode == 127
    result = await run(supervisor, ["echo", "still here"])
    assert (result.returncode, result.stdout) == (0, "still here\n")


async def test_exit_codes_and_signals_are_the_commands_own(supervisor: Supervisor) -> None:
    assert (await run(supervisor, ["sh", "-c", "exit 3"])).returncode == 3
    killed = await run(supervisor, ["sh", "-c", "kill -TERM $$"])
    assert killed.returncode == -signal.SIGTERM


async def test_a_timed_out_command_is_killed_with_its_namespace(supervisor: Supervisor) -> None:
    tag = f"lf-sleeper-{os.getpid()}-{time.monotonic_ns()}"
    script = f"import os, time\nif os.fork() == 0:\n    os.setsid()\ntime.sleep(600) # {tag}"
    result = await run(supervisor, [PY, "-I", "-S", "-c", script], timeout=1)
    assert result.timed_out
    assert not processes_tagged(tag)


async def prepared_tree(supervisor: Supervisor) -> dict[int, bytes]:
    """The supervisor's processes once the next command's namespace is ready.

    That is the sandbox's own (the mechanism's init, the supervisor) and the
    prepared namespace's runner, one PID namespace deeper (its leader has
    exited by then).
    """
    tree: dict[int, bytes] = {}

    def ready() -> bool:
        tree.clear()
        tree.update(descendants(supervisor.popen.pid))
        depths = sorted(map(depth, tree))
        return len(depths) > 1 and depths[-1] > depths[-2]

    await eventually(ready, 30)
    return tree


async def test_closing_the_supervisor_leaves_no_process_not_even_the_prepared_namespace(
    supervisor: Supervisor,
) -> None:
    assert (await run(supervisor, ["true"])).returncode == 0
    tree = await prepared_tree(supervisor)
    supervisor.close()
    await eventually(lambda: not any(alive(pid, start) for pid, start in tree.items()), 30)


async def test_a_command_still_starts_when_the_prepared_namespace_was_killed(
    supervisor: Supervisor,
) -> None:
    assert (await run(supervisor, ["true"])).returncode == 0
    tree = await prepared_tree(supervisor)
    deepest = max(map(depth, tree))
    (runner,) = [pid for pid in tree if depth(pid) == deepest]
    os.kill(runner, signal.SIGKILL)
    await eventually(lambda: not alive(runner, tree[runner]), 30)
    result = await run(supervisor, ["echo", "started"])
    assert (result.returncode, result.stdout) == (0, "started\n")


# -- where the kernel refuses a PID namespace per command --------------------


@pytest.fixture
def flat_supervisor(isolation: Isolation) -> Iterator[Supervisor]:
    started = Supervisor.start(isolation, isolation.policy.writable[0], command_namespaces=False)
    try:
        yield started
    finally:
        started.close()


async def test_without_namespaces_a_command_runs_in_the_supervisors_namespace(
    flat_supervisor: Supervisor, supervisor: Supervisor
) -> None:
    flat = await run(flat_supervisor, ["readlink", "/proc/self/ns/pid"])
    again = await run(flat_supervisor, ["readlink", "/proc/self/ns/pid"])
    own = await run(supervisor, ["readlink", "/proc/self/ns/pid"])
    assert flat.returncode == again.returncode == own.returncode == 0
    assert flat.stdout == again.stdout != own.stdout


async def test_without_namespaces_what_the_command_leaves_in_its_group_is_killed(
    flat_supervisor: Supervisor,
) -> None:
    tag = f"lf-leftover-{os.getpid()}-{time.monotonic_ns()}"
    script = f"import os, time\nif os.fork() == 0:\n    time.sleep(600) # {tag}\n"
    result = await run(flat_supervisor, [PY, "-I", "-S", "-c", script])
    assert result.returncode == 0, result.stderr
    assert not processes_tagged(tag)


async def test_without_namespaces_exec_errors_and_exit_codes_are_reported(
    flat_supervisor: Supervisor,
) -> None:
    process = submitted(flat_supervisor, ["/nonexistent/program"])
    assert process.returncode == 127
    assert process.exec_error == "No such file or directory (/nonexistent/program)"
    assert (await run(flat_supervisor, ["sh", "-c", "exit 5"])).returncode == 5
    fds = await run(flat_supervisor, ["ls", "/proc/self/fd"])
    assert fds.stdout.split() == ["0", "1", "2", "3"]  # 3: ls's own listing


def test_the_supervisors_command_line_does_not_carry_its_source(supervisor: Supervisor) -> None:
    """It runs from a memfd (``/proc/self/fd/N``), so ``ps`` shows one short line."""
    deadline = time.monotonic() + 30
    argv: list[bytes] = []
    # Empty while bwrap is still entering its namespaces.
    while not any(argv) and time.monotonic() < deadline:
        with open(f"/proc/{supervisor.popen.pid}/cmdline", "rb") as cmdline:
            argv = cmdline.read().split(b"\0")
    assert b"def main" not in b" ".join(argv)
    assert any(arg.startswith(b"/proc/self/fd/") for arg in argv), argv
    assert sum(map(len, argv)) < 8192


@pytest.fixture
def unconfined(tmp_path: Path) -> Iterator[Supervisor]:
    started = Supervisor.start(workspace_isolation("none", tmp_path), tmp_path)
    try:
        yield started
    finally:
        started.close()


async def test_a_lent_runner_refuses_a_malformed_request_and_serves_the_next(
    unconfined: Supervisor, tmp_path: Path
) -> None:
    runner = await unconfined.lend()
    if runner is None:
        pytest.skip("no PID namespace per command here: nothing is lent")
    handed = _hand(runner, b'{"argv": ["true"], "cwd": ')
    assert handed is not None
    word = None
    with trio.fail_after(30):
        while word is None:
            await trio.lowlevel.wait_readable(runner.channel)
            word = _runner_word(runner.channel)
    for fd in (*handed[0], *handed[1]):
        os.close(fd)
    assert word["status"] == 127 << 8
    assert str(word["exec_error"]).startswith("bad request")
    unconfined.give_back(runner)
    result = await run_supervised(
        unconfined,
        ["sh", "-c", "echo out; echo err >&2"],
        cwd=tmp_path,
        timeout=30,
        env=None,
        max_bytes=1000,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "out\n", "err\n")


async def test_a_lent_runner_looks_each_program_up_on_its_own_request_s_path(
    unconfined: Supervisor, tmp_path: Path
) -> None:
    # One runner serves these calls one after the other: the PATH it
    # searches is each request's, not the one an earlier request named.
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        program = tmp_path / name / "lf-which"
        program.write_text(f"#!/bin/sh\necho {name}\n")
        program.chmod(0o755)
    seen = []
    for name in ("first", "second", "first"):
        path = f"{tmp_path / name}:/usr/bin:/bin"
        result = await run_supervised(
            unconfined, ["lf-which"], cwd=tmp_path, timeout=30, env={"PATH": path}, max_bytes=1000
        )
        seen.append(result.stdout.strip())
    assert seen == ["first", "second", "first"]
    # No PATH at all: the default one, as os.execvpe has it.
    result = await run_supervised(
        unconfined, ["true"], cwd=tmp_path, timeout=30, env={}, max_bytes=1000
    )
    assert result.returncode == 0
    with pytest.raises(LaunchError):
        await run_supervised(
            unconfined, ["lf-which"], cwd=tmp_path, timeout=30, env={}, max_bytes=1000
        )


async def test_a_signal_ignored_where_the_supervisor_starts_stays_ignored_in_its_commands(
    tmp_path: Path,
) -> None:
    # As through a shell or subprocess: every other signal is set to its
    # default in the command, an ignored one (nohup's SIGHUP, say) is not.
    previous = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    try:
        started = Supervisor.start(workspace_isolation("none", tmp_path), tmp_path)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    try:
        result = await run(started, ["cat", "/proc/self/status"])
    finally:
        started.close()
    assert result.returncode == 0, result.stderr
    ignored = int(status_field(result.stdout, "SigIgn"), 16)
    assert ignored & (1 << (signal.SIGUSR2 - 1))
    assert not ignored & (1 << (signal.SIGPIPE - 1))
    assert int(status_field(result.stdout, "SigCgt"), 16) == 0


def test_the_host_reads_a_runners_answer_in_the_format_the_runner_packs_it() -> None:
    """The wire format is written twice: the runner's script is never imported by the package."""
    from lionfactory._os import supervisor, supervisor_main

    assert supervisor._ANSWER.format == supervisor_main.ANSWER.format
    packed = supervisor_main.ANSWER.pack(9 << 8, 4242)
    assert supervisor._ANSWER.unpack(packed) == (9 << 8, 4242)
    assert supervisor_main.read_answer(packed) == {"status": 9 << 8, "pid": 4242}

"""The ``jobs`` tool: background commands and kept output, read and ended by id.

``bash(command=..., background=True)`` starts a command and answers at once
with a ``job_id``; ``jobs`` lists the branch's jobs, pages through a job's
output (or through the full text of a foreground output that was longer than
the message cap, by its ``output_id``), waits for a job to print something or
open a port, and kills a job with every process it started.

Decisions:

* **Jobs belong to the branch that started them.** Every call carries its
  branch's id (the call context `Branch.act` sets), and the jobs and kept
  outputs of one branch are invisible to every other, a clone included: a
  clone starts with none. A call made outside any branch uses a table of its
  own. Ids are random, so one cannot be guessed from another.
* **Output goes to a file, never through memory.** A job's stdout and stderr
  (interleaved, as a terminal shows them) go straight to a file in a private
  directory (mode 0700, outside the workspace, so no file tool lists it and
  no confined process is given it to write). Nothing is lost and no reader
  task has to outlive the call that started the job.
* **Bounded.** At most `MAX_JOBS` jobs per branch are kept (running or
  finished but not yet forgotten); past that, a start is refused and the
  refusal says how to make room. Kept output is bounded per branch by
  `OUTPUT_BUDGET_BYTES`: the oldest finished outputs are dropped first, and
  asking for a dropped one says so.
* **Nothing outlives its owner.** `kill` ends the job's whole process group
  (under bwrap or Landlock's PID namespace, the whole confinement);
  `Branch.aclose()` kills every job of the branch and removes its kept
  output; at interpreter exit every job still running is killed.
* **A job starts under a supervisor** (`lionfactory._os.supervisor`), which
  kills every command it started when its socket to this process closes:
  so a job dies with this process even when it is killed with SIGKILL and no
  exit hook runs. A confined job runs in the branch's confinement; an
  unconfined one (``"none"``) under the supervisor that prepares the PID
  namespaces of the same tool's foreground calls (the branch's, or the
  tool's own outside any branch), in a namespace of its own there, so a
  ``setsid`` child or a double-forked daemon dies with the job. Where that
  supervisor cannot serve it (the kernel refuses commands a namespace
  inside it, or it cannot start), the job starts directly, in a bwrap PID
  namespace of its own where one can be had: it then dies with this process
  only through the exit hooks.
* **A credential that appears while a job runs** (``cargo login`` writing
  into an exposed toolchain) is checked for before the branch's next
  command or ``jobs`` call. Under bwrap it is then hidden inside the
  running confinement, from the job too (`lionfactory._os.rehide`); what
  the job read before that check, or holds open, it keeps. Under Landlock a
  running process's rules cannot change (only a process may narrow its own
  domain, never its running children's), so the job keeps reading the file
  until it ends, and only later commands get a confinement that hides it; the
  same happens under bwrap when the kernel refuses the helper's mount.
* **A sessionless MCP call keeps nothing**: its branch closes when the call
  returns, jobs included, and the output it kept comes back embedded in
  the call's result (`lionfactory.mcp._stateless`).
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread
import attrs
from pydantic import Field

from lionfactory._call import current_call, current_progress, on_branch_collected
from lionfactory._os.at_exit import at_exit
from lionfactory._os.isolation import Isolation, private_directory
from lionfactory._os.process import LaunchError, _check_program
from lionfactory._os.rehide import hide_appeared
from lionfactory._os.supervisor import RemoteProcess, Supervisor, SupervisorGone, run_supervised
from lionfactory._tool import Tool, ToolHints
from lionfactory.tools._models import ToolModel

__all__ = [
    "MAX_JOBS",
    "OUTPUT_BUDGET_BYTES",
    "JobInfo",
    "JobsRequest",
    "JobsResponse",
    "jobs_tool",
]

MAX_JOBS = 16
"""Jobs a branch may hold at once (running, or finished and not yet killed/forgotten)."""

OUTPUT_BUDGET_BYTES = 256 * 1024 * 1024
"""Bytes of kept output per branch; the oldest finished outputs are dropped past it."""

PAGE_BYTES = 100_000
"""Most bytes of output one ``output`` call returns."""

MAX_WAIT_MS = 600_000
"""Longest ``wait`` one call may ask for."""

MAX_OFFSET = (1 << 53) - 1
"""Largest ``offset`` accepted (far past any kept output; a file offset must fit 63 bits)."""

MAX_REPEAT = 1000
"""Largest count in an ``until`` repetition (``a{1000}``), RE2's own limit."""

_POLL_START = 0.002
_POLL_MAX = 0.1


def _now() -> float:
    return time.monotonic()


@attrs.define(eq=False)
class _Output:
    """One kept output file: a job's, or a foreground stream past its cap."""

    id: str
    path: Path
    created: float
    label: str
    job: _Job | None = None
    # A foreground call is still writing or reading it: never dropped then.
    busy: bool = False

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0


@attrs.define(eq=False)
class _Job:
    """A background process and where its output goes.

    A job a supervisor started is reached only through its report socket
    (kill, status); its pid is one of the supervisor's namespace, never
    signalled from here. A job started directly is named by its pidfd and
    by its own unreaped process: it is reaped only after its group was
    killed, and never signalled by number after that, so a finished job's
    old pid, reused by an unrelated process, is never killed.
    """

    id: str
    command: str
    # Started directly (unconfined), or by the branch's supervisor.
    popen: subprocess.Popen[bytes] | RemoteProcess
    output: _Output
    started: float
    tmpdir: Path | None = None
    ended: float | None = None
    killed: bool = False
    pidfd: int = -1
    # The supervisor that started it. A confined job lives in its sandbox,
    # whose network is the job's; an unconfined one shares the host's.
    supervisor: Supervisor | None = None
    lock: threading.Lock = attrs.Factory(threading.Lock)

    @property
    def pgid(self) -> int:
        return self.popen.pid

    @property
    def reaped(self) -> bool:
        """Whether the job's own process is reaped: its number may name another process now."""
        return self.popen.returncode is not None

    def poll(self) -> int | None:
        with self.lock:
            if isinstance(self.popen, RemoteProcess):
                code = self.popen.poll()
                if code is not None and self.ended is None:
                    # The supervisor killed what the command left (its pids
                    # are its namespace's) before it reported the exit.
                    self.popen.close()
            else:
                code = self._poll_local()
            if code is not None and self.ended is None:
                self.ended = _now()
                if self.tmpdir is not None:
                    shutil.rmtree(self.tmpdir, ignore_errors=True)
            return code

    def _poll_local(self) -> int | None:
        assert isinstance(self.popen, subprocess.Popen)
        if self.popen.returncode is not None:
            return self.popen.returncode
        if not _has_exited(self.popen.pid):
            return None
        # Exited but unreaped: its zombie keeps the group's number, so what
        # the command left in its group dies now, by that number (as for a
        # foreground call); then it is reaped.
        _kill_group(self.pgid)
        code = self.popen.wait()
        self._close_pidfd()
        return code

    def signal_kill(self) -> None:
        """SIGKILL the job's group, only while its process is unreaped (the number is still its)."""
        with self.lock:
            if self.reaped or isinstance(self.popen, RemoteProcess):
                return
            _kill_group(self.pgid)
            if self.pidfd >= 0:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    def _close_pidfd(self) -> None:
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1

    @property
    def running(self) -> bool:
        return self.poll() is None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (zombies do not count)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return False
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                data = stat.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False


def _has_exited(pid: int) -> bool:
    """Whether our child `pid` has exited, without reaping it (``WNOWAIT``)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True  # reaped elsewhere: nothing of ours is left to wait for
    return info is not None and info.si_pid == pid


def _wait_exit(pid: int, timeout: float) -> None:
    """Wait until our child `pid` has exited, without reaping it (bounded)."""
    deadline = _now() + timeout
    delay = 0.001
    while not _has_exited(pid) and _now() < deadline:
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


@attrs.define(eq=False)
class BranchJobs:
    """The jobs and kept outputs of one branch (or of calls outside any branch)."""

    key: uuid.UUID | None
    jobs: dict[str, _Job] = attrs.Factory(dict)
    outputs: dict[str, _Output] = attrs.Factory(dict)
    dropped: dict[str, str] = attrs.Factory(dict)
    directory: Path | None = None
    closed: bool = False
    supervisors: dict[Isolation, Supervisor] = attrs.Factory(dict)
    # Replaced because their sandbox no longer hid every credential file;
    # closed with the branch.
    retired: list[Supervisor] = attrs.Factory(list)
    lock: threading.Lock = attrs.Factory(threading.Lock)
    # Calls of one branch run concurrently (act_many), in worker threads.
    outputs_lock: threading.RLock = attrs.Factory(threading.RLock)

    def supervisor(self, isolation: Isolation, root: Path) -> Supervisor:
        """The branch's supervisor for `isolation`, started on first use (blocking)."""
        with self.lock:
            running = self.supervisors.get(isolation)
            # A credential file appeared in an exposed tree. Under bwrap it
            # is hidden inside the running sandbox, from its jobs too
            # (`hide_appeared`). Where that cannot be (Landlock), later
            # commands get a sandbox that hides it, and what runs in the old
            # one (a job, a concurrent call) keeps running there, able to
            # read it, until it ends or the branch closes.
            if (
                running is not None
                and running.alive
                and running.stale()
                and not hide_appeared(running)
            ):
                self.retired.append(running)
                running = None
            if running is None or not running.alive:
                if running is not None:
                    # Dead: reaped now and forgotten, so nothing ever signals its number again.
                    running.close(grace=0)
                    _SUPERVISORS.discard(running)
                running = self.supervisors[isolation] = Supervisor.start(isolation, root)
                _SUPERVISORS.add(running)
            return running

    def set_aside(self, supervisor: Supervisor) -> None:
        """Start no more commands through `supervisor`; close it unless a job still runs there.

        A job under it keeps running until it ends or is killed; the
        supervisor is closed with this table then (or at exit, or when its
        socket to us closes).
        """
        with self.lock:
            for isolation, running in list(self.supervisors.items()):
                if running is supervisor:
                    del self.supervisors[isolation]
            if any(job.supervisor is supervisor and job.running for job in list(_LIVE)):
                self.retired.append(supervisor)
                return
        supervisor.close()
        _SUPERVISORS.discard(supervisor)

    def _dir(self) -> Path:
        if self.directory is None or not self.directory.is_dir():
            # Outside the workspace and private to this user: kept output is
            # the model's to read through `jobs`, not a file in the project.
            # Inside the folder every confined launch hides: another
            # branch's confined commands, same uid or not, cannot read it.
            self.directory = private_directory("output-")
        return self.directory

    def new_output(self, label: str, prefix: str = "out") -> tuple[_Output, int]:
        """A new kept-output file (created empty, owner-only) and its open descriptor."""
        ident = f"{prefix}-{secrets.token_hex(6)}"
        with self.outputs_lock:
            path = self._dir() / ident
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            output = _Output(ident, path, _now(), label, busy=prefix == "out")
            self.outputs[ident] = output
        return output, fd

    def release(self, ident: str) -> None:
        """A foreground call is done with kept output `ident`: it may be dropped from now on."""
        with self.outputs_lock:
            output = self.outputs.get(ident)
            if output is not None:
                output.busy = False

    def enforce_budget(self, budget: int | None = None) -> None:
        """Drop the oldest finished outputs until the kept bytes fit `budget`.

        `budget` defaults to `OUTPUT_BUDGET_BYTES` (read at call time).
        """
        budget = OUTPUT_BUDGET_BYTES if budget is None else budget
        with self.outputs_lock:
            outputs = sorted(self.outputs.items(), key=lambda item: item[1].created)
            sizes = {ident: output.size() for ident, output in outputs}
            total = sum(sizes.values())
            for ident, output in outputs:
                if total <= budget:
                    break
                if output.busy or (output.job is not None and output.job.running):
                    continue
                total -= sizes[ident]
                self._drop(ident, "dropped to keep this branch's output within its budget")

    def _drop(self, ident: str, why: str) -> None:
        with self.outputs_lock:
            output = self.outputs.pop(ident, None)
            if output is not None:
                output.path.unlink(missing_ok=True)
                self.dropped[ident] = why

    def start(
        self,
        command: str,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str] | None,
        isolation: Isolation | None,
        supervisor: Supervisor | None = None,
    ) -> _Job:
        """Start `argv` in the background (blocking: call it in a worker thread).

        A confined job starts under the branch's supervisor for `isolation`.
        An unconfined one starts under `supervisor` when one is given (the
        unconfined supervisor the caller's foreground commands use, whose
        commands each get a PID namespace of its own), else directly, in a
        PID namespace of its own where `isolation` wraps it (also when that
        supervisor turns out to be gone).

        Raises:
            JobLimit: the branch holds `MAX_JOBS` jobs already.
            LaunchError: the program could not be started.
        """
        self._forget_finished_over_limit()
        self.enforce_budget()
        if len(self.jobs) >= MAX_JOBS:
            raise JobLimit(
                f"This branch already holds {MAX_JOBS} jobs, the most it may. Kill jobs you "
                f"no longer need with jobs(action='kill', job_id=...) (a finished job's "
                f"output stays readable until then), then start this one again."
            )
        if isolation is not None and isolation.confined:
            # Before the supervisor starts: a missing program costs no sandbox.
            _check_program(argv[0], cwd, env)
            try:
                return self._start_supervised(
                    command, argv, cwd=cwd, env=env, supervisor=self.supervisor(isolation, cwd)
                )
            except SupervisorGone as exc:
                raise LaunchError(argv[0], f"the branch's supervisor is gone ({exc})") from None
        if supervisor is not None:
            # Under the supervisor, the job dies with it when this process
            # does, however it ends: the supervisor kills every command when
            # its socket to us closes, SIGKILL included, where no exit hook
            # runs. A job started directly would be left to init then.
            _check_program(argv[0], cwd, env)
            with contextlib.suppress(SupervisorGone):  # it did not start: directly, then
                return self._start_supervised(
                    command, argv, cwd=cwd, env=env, supervisor=supervisor
                )
        launch_argv, launch_env, tmpdir = list(argv), env, None
        pass_fds: tuple[int, ...] = ()
        if isolation is not None and isolation.wraps:
            # Unconfined, but in a PID namespace of its own where the kernel
            # allows one (as a foreground call): a ``setsid`` child or a
            # double-forked daemon dies with the job. Only while this process
            # lives, though: bwrap has no --die-with-parent here (see
            # `_bwrap_argv`), so the supervised start above is preferred.
            _check_program(argv[0], cwd, env)
            launch = isolation.launch(argv, cwd=cwd, env=env)
            launch_argv, launch_env, pass_fds = list(launch.argv), launch.env, launch.pass_fds
        output, fd = self.new_output(command, prefix="job")
        try:
            popen = subprocess.Popen(
                launch_argv,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                cwd=cwd,
                env=None if launch_env is None else dict(launch_env),
                pass_fds=pass_fds,
                start_new_session=True,
            )
        except (OSError, ValueError) as exc:
            self._drop(output.id, "the job did not start")
            self.dropped.pop(output.id, None)
            if tmpdir is not None:
                shutil.rmtree(tmpdir, ignore_errors=True)
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise LaunchError(argv[0], reason) from None
        finally:
            os.close(fd)
            for passed in pass_fds:
                os.close(passed)
        try:
            # Taken before anything reaps the child: it names this process only.
            pidfd = os.pidfd_open(popen.pid)
        except OSError:
            pidfd = -1  # no pidfd here: the unreaped child still holds its number
        job = _Job(output.id, command, popen, output, _now(), tmpdir, pidfd=pidfd)
        output.job = job
        self.jobs[job.id] = job
        _LIVE.add(job)
        return job

    def _start_supervised(
        self,
        command: str,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str] | None,
        supervisor: Supervisor,
    ) -> _Job:
        """Start `argv` (whose program the caller checked) as a job through `supervisor`.

        Raises:
            SupervisorGone: the supervisor did not start the command.
        """
        output, fd = self.new_output(command, prefix="job")
        try:
            sock = supervisor.submit(argv, cwd=cwd, env=env, stdout=fd, stderr=fd)
            process = RemoteProcess.first_report(sock)
        except SupervisorGone:
            self._drop(output.id, "the job did not start")
            self.dropped.pop(output.id, None)
            raise
        finally:
            os.close(fd)
        if process.namespace is not None:
            supervisor.command_namespaces = process.namespace
        job = _Job(output.id, command, process, output, _now(), supervisor=supervisor)
        output.job = job
        self.jobs[job.id] = job
        _LIVE.add(job)
        return job

    def _forget_finished_over_limit(self) -> None:
        """Past the limit, forget the oldest finished jobs (their output stays readable)."""
        finished = sorted(
            (job for job in self.jobs.values() if not job.running), key=lambda j: j.started
        )
        while len(self.jobs) >= MAX_JOBS and finished:
            job = finished.pop(0)
            del self.jobs[job.id]

    def kill(self, job: _Job) -> None:
        """Kill the job's whole group and reap it (blocking: call it in a worker thread)."""
        job.killed = job.killed or job.running
        if isinstance(job.popen, RemoteProcess):
            job.popen.kill()
            job.popen.wait(timeout=5)
            job.poll()
            _LIVE.discard(job)
            return
        job.signal_kill()
        if not job.reaped:
            # A process stuck in the kernel cannot die before its I/O
            # returns. Its exit is awaited unreaped, so the group's number
            # stays the job's while the rest of the group is killed.
            _wait_exit(job.pgid, 5)
            deadline = _now() + 3
            while not job.reaped and _group_alive(job.pgid) and _now() < deadline:
                job.signal_kill()
                time.sleep(0.005)
        job.poll()
        _LIVE.discard(job)

    def close(self) -> None:
        """Kill every job and remove every kept output (blocking)."""
        self.closed = True
        for job in list(self.jobs.values()):
            self.kill(job)
        self.jobs.clear()
        with self.lock:
            supervisors = [*self.supervisors.values(), *self.retired]
            self.supervisors, self.retired = {}, []
        for supervisor in supervisors:
            supervisor.close()
            _SUPERVISORS.discard(supervisor)
        self.outputs.clear()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


class JobLimit(Exception):
    """A branch holds `MAX_JOBS` jobs already."""


# Every job still running, and every supervisor, for the kill at interpreter exit.
_LIVE: set[_Job] = set()
_SUPERVISORS: set[Supervisor] = set()


@attrs.define(eq=False)
class JobRegistry:
    """The job tables of every branch, keyed by branch id."""

    tables: dict[uuid.UUID | None, BranchJobs] = attrs.Factory(dict)
    lock: threading.Lock = attrs.Factory(threading.Lock)

    def current(self) -> BranchJobs:
        """The table of the branch whose call is running (created on first use)."""
        running = current_call()
        key = running.branch_id if running is not None else None
        with self.lock:
            table = self.tables.get(key)
            if table is None:
                table = self.tables[key] = BranchJobs(key)
            return table

    def peek(self) -> BranchJobs | None:
        running = current_call()
        key = running.branch_id if running is not None else None
        return self.tables.get(key)

    async def close_branch(self, branch_id: uuid.UUID | None) -> None:
        """Kill the jobs of `branch_id` and remove its kept output."""
        with self.lock:
            table = self.tables.pop(branch_id, None)
        if table is not None:
            await anyio.to_thread.run_sync(table.close)


REGISTRY = JobRegistry()
"""The one registry the built-in ``bash`` and ``jobs`` tools share."""


def job_running(branch_id: uuid.UUID | None, job_id: str, registry: JobRegistry = REGISTRY) -> bool:
    """Whether job `job_id` of branch `branch_id` still runs (False: ended, killed or unknown).

    The coding toolkit asks it to close a job's checkpoint window when the
    job ends by itself. Polling reaps nothing a kill would still need: an
    exited job's group is killed and reaped by `_Job.poll` as for any caller.
    """
    table = registry.tables.get(branch_id)
    job = None if table is None else table.jobs.get(job_id)
    return job is not None and job.running


def _forget(branch_id: uuid.UUID) -> None:
    with REGISTRY.lock:
        table = REGISTRY.tables.pop(branch_id, None)
    if table is not None:
        table.close()


def _close_collected(branch_id: uuid.UUID) -> None:
    # A branch dropped without aclose(): its jobs and supervisors end now,
    # in a thread of their own. A garbage collection can run while this
    # very thread holds the registry's or a table's lock (it allocates
    # there), so taking them here could deadlock; the thread waits for them.
    try:
        threading.Thread(target=_forget, args=(branch_id,), daemon=True).start()
    except RuntimeError:  # interpreter shutdown: no new threads, and no lock is held
        _forget(branch_id)


on_branch_collected(_close_collected)


@at_exit
def _kill_all_at_exit() -> None:
    for job in list(_LIVE):
        job.signal_kill()  # never a reaped job's number
    for supervisor in list(_SUPERVISORS):
        # Its commands die with its sandbox's PID namespace; its group is
        # killed while its process is unreaped, then it is reaped.
        supervisor.close(grace=0)
    for table in list(REGISTRY.tables.values()):
        if table.directory is not None:
            shutil.rmtree(table.directory, ignore_errors=True)


def _sequence_length(lead: int) -> int:
    """Bytes of the UTF-8 sequence `lead` starts (1 for ASCII and for a byte no sequence starts)."""
    if lead >= 0xF0:
        return 4 if lead < 0xF8 else 1
    if lead >= 0xE0:
        return 3
    if lead >= 0xC0:
        return 2
    return 1


def read_output(
    path: Path, offset: int, limit: int, *, growing: bool = False
) -> tuple[str, int, int]:
    """Text of `path` from byte `offset`, at most `limit` bytes, on character boundaries.

    An `offset` inside a multi-byte character starts at that character's
    first byte; a page ends before a character it would cut (also at the
    end of a `growing` file, whose writer may not have written the rest),
    so a page never shows a replacement character for a split one and the
    offset returned is where the next page continues exactly.

    Returns:
        The text, the byte offset after it, and the file's size.
    """
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        offset = min(offset, size)
        back = min(3, offset)
        handle.seek(offset - back)
        data = handle.read(back + limit)
    start = back
    if start < len(data) and data[start] & 0xC0 == 0x80:
        # Inside a character: step back to its lead byte, if it has one.
        for lead_at in range(start - 1, -1, -1):
            byte = data[lead_at]
            if byte & 0xC0 != 0x80:
                if byte >= 0xC0 and lead_at + _sequence_length(byte) > start:
                    start = lead_at
                break
    begin = offset - back + start
    data = data[start : back + limit]
    end = begin + len(data)
    if end < size or growing:
        # Keep a character split by the page's end for the next page.
        for cut in range(1, min(4, len(data) + 1)):
            byte = data[-cut]
            if byte & 0xC0 == 0xC0:  # the last lead byte: is its sequence whole?
                if _sequence_length(byte) > cut:
                    data, end = data[:-cut], end - cut
                break
            if byte & 0xC0 != 0x80:
                break
    if not data and begin < size and end < size:
        # `limit` is shorter than the character at `begin`: show that one whole.
        data = _whole_character(path, begin)
        end = begin + len(data)
    text = codecs.getincrementaldecoder("utf-8")(errors="replace").decode(data, final=True)
    return text, end, size


def _whole_character(path: Path, at: int) -> bytes:
    """The character starting at `at`, or nothing while the file holds only part of it."""
    with open(path, "rb") as handle:
        handle.seek(at)
        lead = handle.read(1)
        if not lead:
            return b""
        need = _sequence_length(lead[0])
        data = lead + handle.read(need - 1)
        return data if len(data) == need else b""


class JobsRequest(ToolModel):
    """Arguments of one ``jobs`` call."""

    action: Literal["list", "output", "wait", "kill"] = Field(
        description=(
            "list: this branch's jobs; output: read a job's output (or a kept output by "
            "its output_id) from `offset`; wait: until the job prints text matching "
            "`until`, opens `port`, or ends, at most `timeout` ms; kill: end the job and "
            "every process it started."
        )
    )
    job_id: str | None = Field(
        default=None,
        max_length=64,
        description="The job_id bash returned (or an output_id, for action output). "
        "Required except for list.",
    )
    offset: int = Field(
        default=0,
        ge=0,
        le=MAX_OFFSET,
        description="output: the byte offset to read from (next_offset of the previous read).",
    )
    until: str | None = Field(
        default=None,
        max_length=1_000,
        description="wait: a regular expression (RE2 syntax: no backreferences or "
        "lookaround; ^ and $ match at line ends); the wait ends when the output matches it.",
    )
    port: int | None = Field(
        default=None,
        ge=1,
        le=65_535,
        description="wait: a TCP port on 127.0.0.1 in the job's own network (its confinement's, "
        "which later bash calls share); the wait ends when it accepts connections.",
    )
    timeout: int = Field(
        default=30_000,
        ge=1,
        le=MAX_WAIT_MS,
        description=f"wait: milliseconds to wait at most (at most {MAX_WAIT_MS:,}).",
    )


class JobInfo(ToolModel):
    """One job in a ``list`` answer."""

    job_id: str = Field(description="The job's id.")
    command: str = Field(description="The command it runs (cut to 200 characters).")
    running: bool = Field(description="Whether it still runs.")
    return_code: int | None = Field(description="Its exit code once done; null while running.")
    output_bytes: int = Field(description="Bytes of output so far.")
    seconds: float = Field(description="Seconds since it started (until it ended).")


class JobsResponse(ToolModel):
    """The outcome of one ``jobs`` call."""

    jobs: list[JobInfo] | None = Field(default=None, description="list: the branch's jobs.")
    job_id: str | None = Field(default=None, description="The job or output the answer is about.")
    output: str | None = Field(
        default=None,
        description="output: the text from `offset` (at most "
        f"{PAGE_BYTES:,} bytes); wait: the output's last {PAGE_BYTES // 10:,} bytes.",
    )
    next_offset: int | None = Field(
        default=None, description="output: the offset to read the rest from."
    )
    total_bytes: int | None = Field(default=None, description="Bytes of output kept so far.")
    running: bool | None = Field(default=None, description="Whether the job still runs.")
    return_code: int | None = Field(
        default=None, description="The job's exit code once done (negative: killed by a signal)."
    )
    matched: bool | None = Field(
        default=None, description="wait: whether the awaited text, port or end came."
    )
    error: str | None = Field(default=None, description="Why the action failed, and what to do.")


_DESCRIPTION = f"""\
Manage this conversation's background jobs (started with bash background=True)
and read kept output.
- list: every job, running or finished.
- output: a job's output from `offset` (at most {PAGE_BYTES:,} bytes a call; pass
  next_offset to go on). Also reads the full text of a bash output that was cut,
  by the output_id the bash answer gave.
- wait: until the output matches the regular expression `until`, the job opens
  TCP `port` on 127.0.0.1, or the job ends; at most `timeout` ms (default 30,000).
- kill: end the job and every process it started (its output stays readable).
Jobs belong to this conversation; at most {MAX_JOBS} at a time."""


def _unknown(ident: str, table: BranchJobs | None) -> str:
    if table is not None and ident in table.dropped:
        return f"{ident!r} is gone: {table.dropped[ident]}."
    return (
        f"There is no job or output {ident!r} in this conversation. jobs(action='list') shows "
        f"the jobs; ids come from bash answers."
    )


def _info(job: _Job) -> JobInfo:
    code = job.poll()
    end = job.ended if job.ended is not None else _now()
    return JobInfo(
        job_id=job.id,
        command=job.command if len(job.command) <= 200 else job.command[:199] + "…",
        running=code is None,
        return_code=code,
        output_bytes=job.output.size(),
        seconds=round(end - job.started, 3),
    )


def _host_port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


# Run inside the job's sandbox: exit 0 when 127.0.0.1:PORT accepts a connection.
_PROBE = (
    "import socket,sys\n"
    "try:\n socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=0.2).close()\n"
    "except OSError:\n sys.exit(1)\n"
)


async def _port_open(job: _Job, port: int) -> bool:
    """Whether the port accepts connections in the job's own network (never the host's for it).

    A job the branch's supervisor started lives in the sandbox's network
    namespace (its own under ``network="none"``): the probe runs there,
    through the same supervisor, so it sees the job's server and no
    listener that only the host has. An unconfined job shares the host's
    network, where the probe is made directly.
    """
    supervisor = job.supervisor
    if supervisor is None or not supervisor.isolation.confined:
        return await anyio.to_thread.run_sync(_host_port_open, port)
    if not supervisor.alive:
        return False
    try:
        result = await run_supervised(
            supervisor,
            [sys.executable, "-I", "-S", "-c", _PROBE, str(port)],
            cwd=supervisor.isolation.policy.writable[0],
            timeout=5,
            env={"PATH": os.defpath},
            max_bytes=1000,
        )
    except (LaunchError, SupervisorGone):
        return False
    return result.returncode == 0


class _Pattern:
    """An ``until`` pattern: RE2 (linear time), else Python's ``re`` in an abandonable worker."""

    def __init__(self, compiled: Any, linear: bool) -> None:
        self.compiled = compiled
        self.linear = linear

    def search(self, text: str) -> bool:
        return self.compiled.search(text) is not None


_REPEAT = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


def _compile_until(text: str) -> _Pattern | str:
    """The compiled `text`, or the error the model reads (never an exception)."""
    for match in _REPEAT.finditer(text):
        counts = [int(n) for n in match.groups() if n]
        if any(n > MAX_REPEAT for n in counts):
            return (
                f"until repeats {match.group(0)}: counts above {MAX_REPEAT} are refused; "
                f"match a shorter, distinctive part of the line instead."
            )
    try:
        import re2
    except ImportError:  # no wheel for this platform: the backtracking engine, bounded by time
        try:
            return _Pattern(re.compile(text, re.MULTILINE), linear=False)
        except (re.error, OverflowError, RecursionError) as exc:
            return f"until is not a valid regular expression: {exc}."
    options = re2.Options()
    options.log_errors = False
    options.max_mem = 8 << 20
    try:
        # Line semantics: `^` and `$` match at every line's start and end, as
        # a model waiting for "^Listening on .*$" means (RE2's `$` would
        # otherwise not even match before the output's final newline).
        return _Pattern(re2.compile(f"(?m){text}", options), linear=True)
    except re2.error as exc:
        reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc
        return (
            f"until is not a valid regular expression ({reason}); it uses RE2 syntax: no "
            f"backreferences or lookaround."
        )


async def _search(pattern: _Pattern, scanner: _Scanner) -> bool:
    """Read what is new and match the window, in a worker thread (never on the event loop).

    RE2 needs time linear in the 1 MB window. The fallback engine can take
    exponential time on a pattern like ``(a+)+$``: its worker is abandoned
    when the wait's deadline cancels it, so the call still returns on time
    and the loop stays free (the thread finishes in the background).
    """
    return await anyio.to_thread.run_sync(
        lambda: pattern.search(scanner.advance()), abandon_on_cancel=not pattern.linear
    )


@attrs.frozen
class _JobsHandler:
    registry: JobRegistry

    async def close_branch(self, branch_id: uuid.UUID | None) -> None:
        """Kill `branch_id`'s jobs and drop its kept output (`Branch.aclose` calls it)."""
        await self.registry.close_branch(branch_id)

    async def __call__(self, request: JobsRequest) -> JobsResponse:
        table = self.registry.peek()
        if request.action == "list":
            jobs = [] if table is None else [_info(job) for job in table.jobs.values()]
            return JobsResponse(jobs=jobs)
        if request.job_id is None:
            return JobsResponse(error=f"action {request.action!r} needs a job_id.")
        ident = request.job_id
        output = None if table is None else table.outputs.get(ident)
        job = None if table is None else table.jobs.get(ident)
        if request.action == "output":
            if output is None:
                return JobsResponse(job_id=ident, error=_unknown(ident, table))
            return await self._output(output, request.offset)
        if job is None:
            if output is not None and request.action in ("wait", "kill"):
                return JobsResponse(
                    job_id=ident,
                    error=f"{ident!r} is a kept output, not a job; read it with action 'output'.",
                )
            return JobsResponse(job_id=ident, error=_unknown(ident, table))
        assert table is not None
        if request.action == "kill":
            await anyio.to_thread.run_sync(table.kill, job)
            code = job.poll()
            return JobsResponse(
                job_id=ident, running=False, return_code=code, total_bytes=job.output.size()
            )
        return await self._wait(job, request)

    async def _output(self, output: _Output, offset: int) -> JobsResponse:
        try:
            growing = output.busy or (output.job is not None and output.job.running)
            text, end, size = await anyio.to_thread.run_sync(
                functools.partial(read_output, output.path, offset, PAGE_BYTES, growing=growing)
            )
        except OSError:
            return JobsResponse(job_id=output.id, error=f"{output.id!r} can no longer be read.")
        job = output.job
        code = job.poll() if job is not None else None
        response = JobsResponse(
            job_id=output.id,
            output=text,
            next_offset=end,
            total_bytes=size,
            running=job is not None and code is None,
            return_code=code,
        )
        if offset > size:
            response.error = f"offset {offset} is past the end ({size} bytes)."
        return response

    async def _wait(self, job: _Job, request: JobsRequest) -> JobsResponse:
        pattern: _Pattern | None = None
        if request.until is not None:
            compiled = _compile_until(request.until)
            if isinstance(compiled, str):
                return JobsResponse(job_id=job.id, error=compiled)
            pattern = compiled
        matched = False
        scanner = _Scanner(job.output.path)
        # A transport reporting progress learns how many lines the job printed.
        progress = current_progress()
        lines = _LineCount(job.output.path) if progress is not None else None
        delay = _POLL_START
        with anyio.move_on_after(request.timeout / 1000):
            while True:
                # Read what the job wrote before asking whether it ended, so
                # text printed just before the exit is still matched.
                ended = not job.running
                if progress is not None and lines is not None:
                    progress.set_lines(await anyio.to_thread.run_sync(lines.advance))
                if pattern is not None and await _search(pattern, scanner):
                    matched = True
                    break
                if request.port is not None and await _port_open(job, request.port):
                    matched = True
                    break
                if ended:
                    matched = pattern is None and request.port is None
                    break
                await anyio.sleep(delay)
                delay = min(delay * 2, _POLL_MAX)
        text = await anyio.to_thread.run_sync(_tail_text, job.output.path, PAGE_BYTES // 10)
        code = job.poll()
        response = JobsResponse(
            job_id=job.id,
            output=text,
            total_bytes=job.output.size(),
            running=code is None,
            return_code=code,
            matched=matched,
        )
        if not matched:
            what = "the job ended" if code is not None else f"{request.timeout} ms passed"
            response.error = (
                f"{what} before the awaited "
                f"{'text' if pattern is not None else 'port' if request.port else 'end'} came; "
                f"the output's tail is shown."
            )
        return response


_WINDOW_CHARS = 1_000_000


@attrs.define
class _Scanner:
    """Reads a growing output file incrementally; `until` is matched on its last 1 MB."""

    path: Path
    offset: int = 0
    window: str = ""
    decoder: codecs.IncrementalDecoder = attrs.Factory(
        lambda: codecs.getincrementaldecoder("utf-8")(errors="replace")
    )

    def advance(self) -> str:
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read(4 * _WINDOW_CHARS)
        self.offset += len(data)
        self.window = (self.window + self.decoder.decode(data))[-_WINDOW_CHARS:]
        return self.window


@attrs.define
class _LineCount:
    """Counts the lines of a growing output file, reading only what is new each time."""

    path: Path
    offset: int = 0
    lines: int = 0

    def advance(self) -> int:
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            while chunk := handle.read(1 << 20):
                self.offset += len(chunk)
                self.lines += chunk.count(b"\n")
        return self.lines


def _tail_text(path: Path, limit: int) -> str:
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        handle.seek(max(0, size - limit))
        return handle.read(limit).decode("utf-8", "replace")


def jobs_tool(*, registry: JobRegistry | None = None) -> Tool:
    """Build the ``jobs`` tool.

    Args:
        registry: where jobs are kept; default: the registry the built-in
            ``bash`` tool uses, so ``bash_tool()`` and ``jobs_tool()`` work
            together with no wiring. Jobs are always per branch.

    Returns:
        The ``jobs`` Tool (safe to share: each branch sees only its own jobs).
    """
    return Tool(
        name="jobs",
        description=_DESCRIPTION,
        request_model=JobsRequest,
        handler=_JobsHandler(REGISTRY if registry is None else registry),
        response_model=JobsResponse,
        # `kill` ends a job: destructive, and not idempotent.
        hints=ToolHints("Manage background jobs", destructive=True),
    )

"""Run one process: argv only, a deadline, a process-group kill and a capped drain.

Every tool that starts a program goes through `run_process`, the single seam
between lionfactory and the operating system's process table, so the rules
below hold for every tool and tests substitute one seam, not each tool.

Guarantees, in the order they matter to an agent:

* **No shell.** The command is an argv list; nothing is parsed or expanded.
* **No process outlives its call.** The child starts in a new session (so its
  process id is also its process-group id). When the call ends, for whatever
  reason (the child exited, the deadline passed, the caller was cancelled),
  every process still in that group is killed with ``SIGKILL`` and
  `run_process` waits until the group is gone. Killing leftovers after a
  normal exit is deliberate: a background process left running by a tool call
  is invisible to the model and to the user. ``SIGTERM`` first was rejected:
  a child may ignore it, and a grace period only delays the same outcome.
* **Bounded memory, no pipe deadlock.** stdout and stderr are drained
  concurrently to the end; each keeps at most ``max_bytes`` and discards the
  rest while still reading, so a child writing gigabytes neither blocks on a
  full pipe nor fills our memory.
* **Confinement is applied here.** With an `Isolation` (chosen once, at
  factory time, see `lionfactory._os.isolation`), the argv is wrapped in the
  mechanism (bwrap or the Landlock exec helper) and the child gets its private
  temporary directory, removed when the call ends. Nobody else builds a
  sandbox command line.
* **Launch failures are distinguishable.** A binary that is missing, not
  executable or not a valid program, or a working directory that does not
  exist, raises `LaunchError` instead of returning a result.

The runner uses anyio only (a task group, `move_on_after`, a pidfd waited
for like any descriptor), so it runs on trio and on asyncio with no thread
per call; the child is started on the loop (`_Child` says why).
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import functools
import json
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import anyio
import anyio.abc
import anyio.lowlevel
import anyio.to_thread
import attrs

from lionfactory._os.isolation import Isolation
from lionfactory.errors import ToolFailure

__all__ = ["DEFAULT_MAX_BYTES", "LaunchError", "ProcessResult", "run_process"]

DEFAULT_MAX_BYTES = 100_000
"""Bytes kept per stream: enough for a test run's summary, small enough for a prompt."""

# How long to wait for a killed group to disappear. Members reparented to init
# stay zombies until init reaps them, which some container inits do only
# every second or so; the bound keeps a slow init from hanging the call.
_GROUP_GONE_GRACE = 3.0
# How long to wait for our own SIGKILLed child to be reaped before giving up
# (a process stuck in uninterruptible sleep cannot die until its I/O returns).
_REAP_GRACE = 5.0


class LaunchError(ToolFailure):
    """The process could not be started; `message` says why in words a model can use.

    Attributes:
        program: the program that was to run (``argv[0]``).
        reason: the operating system's explanation.
        message: the whole explanation.
    """

    def __init__(self, program: str, reason: str) -> None:
        self.program = program
        self.reason = reason
        super().__init__(f"Could not start {program!r}: {reason}.")


@attrs.frozen
class ProcessResult:
    """What a finished (or killed) process left behind.

    Attributes:
        argv: the argv that ran.
        returncode: the exit status; negative for a signal (``-9`` after a
            kill); ``None`` only if the child could not be reaped in time.
        stdout: the kept stdout, decoded as UTF-8 with replacement.
        stderr: the kept stderr, decoded likewise.
        stdout_bytes: how many bytes the child wrote to stdout in total.
        stderr_bytes: how many bytes it wrote to stderr in total.
        stdout_truncated: stdout was longer than the cap.
        stderr_truncated: stderr was longer than the cap.
        timed_out: the deadline passed and the group was killed.
        pid: the child's process id.
        pgid: its process-group id (equal to `pid`: the child leads a new session).
        duration: seconds from launch to the end of the call.
    """

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    pid: int
    pgid: int
    duration: float

    @property
    def truncated(self) -> bool:
        """Whether either stream was cut."""
        return self.stdout_truncated or self.stderr_truncated


@attrs.define(eq=False)
class _Capture:
    """Keeps the first `limit` bytes of a stream and counts the rest."""

    limit: int
    # Opens a file for the whole stream, called once the stream outgrows
    # `limit`: the head kept so far is written first, then every later byte.
    spill: Callable[[], BinaryIO] | None = None
    chunks: list[bytes] = attrs.Factory(list)
    kept: int = 0
    total: int = 0
    spilled: BinaryIO | None = None
    # Sees every chunk as it arrives (a progress count), whatever is kept.
    on_output: Callable[[bytes], None] | None = None

    def feed(self, data: bytes) -> None:
        if self.on_output is not None:
            self.on_output(data)
        self.total += len(data)
        room = self.limit - self.kept
        if room > 0:
            piece = data[:room]
            self.chunks.append(piece)
            self.kept += len(piece)
        if self.spill is not None and self.total > self.limit:
            if self.spilled is None:
                self.spilled = self.spill()
                self.spilled.write(b"".join(self.chunks))
                data = data[room:] if room > 0 else data
            self.spilled.write(data)

    def close(self) -> None:
        if self.spilled is not None:
            self.spilled.close()

    @property
    def truncated(self) -> bool:
        return self.total > self.kept

    def text(self, name: str, *, announce: bool) -> str:
        if not self.total:
            return ""  # most commands leave a stream empty: no decoder for it
        # A cut can split a multi-byte character; a non-final decode drops the
        # partial tail instead of ending the text with a replacement character.
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = decoder.decode(b"".join(self.chunks), final=not self.truncated)
        if self.truncated and announce:
            text += f"\n[{name} truncated: showing the first {self.kept:,} of {self.total:,} bytes]"
        return text


def captured_result(
    argv: tuple[str, ...],
    returncode: int | None,
    streams: tuple[_Capture, _Capture],
    ended: tuple[bool, int, float],
    announce: bool,
) -> ProcessResult:
    """The `ProcessResult` of a finished call from its captured stdout and stderr.

    One construction for both ways a command runs (directly, or through a
    supervisor). `ended` is (timed out, the pid, when the call started); the
    process leads its own group, so the pid is its group too. `announce`
    appends the truncation line to a cut stream's text.
    """
    out, err = streams
    timed_out, pid, started = ended
    return ProcessResult(
        argv=argv,
        returncode=returncode,
        stdout=out.text("stdout", announce=announce),
        stderr=err.text("stderr", announce=announce),
        stdout_bytes=out.total,
        stderr_bytes=err.total,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        timed_out=timed_out,
        pid=pid,
        pgid=pid,
        duration=time.monotonic() - started,
    )


# A chatty writer wakes the event loop once per write: ripgrep writes each
# matching file's lines separately, over a thousand writes for one search,
# and each wake-up costs more than the read. After a short read, the reader
# waits a little so that the pipe gathers more: a 2,000-file search was 15 ms
# slower to read than `subprocess.run` read it, and is now no slower.
#
# When the reader knows when the process exits, the wait ends there, so no
# output is read late: pausing starts at the first read, and while reads stay
# short each pause doubles, up to 8 ms (a writer that prints a line a
# millisecond, as ripgrep does on a small tree, woke the loop once a line
# even with 1 ms pauses, and on a two-CPU machine the wake-ups' CPU slowed the
# search itself). A full read ends the doubling: a fast writer fills the
# 64 KiB pipe within the first millisecond and is read at once. Otherwise
# (the supervisor's streams) the first reads are taken at once, so a short
# output is not delayed, and the pauses stay at a millisecond.
_PROMPT_READS = 16
_SHORT_READ = 16_384
_SETTLE_SECONDS = 0.001
_LONGEST_SETTLE_SECONDS = 0.008


@attrs.define
class ReadPace:
    """When a drain loop should pause before its next read (see `_PROMPT_READS`).

    Attributes:
        exited: set when the writer has exited, if the reader knows; a pause
            ends there (everything left is read at once).
        reads: reads so far.
        settle: the next pause, in seconds.
    """

    exited: anyio.Event | None = None
    reads: int = 0
    settle: float = _SETTLE_SECONDS

    async def after(self, size: int) -> bool:
        """Call after each read of `size` bytes; returns whether it paused."""
        self.reads += 1
        if size >= _SHORT_READ:
            self.settle = _SETTLE_SECONDS
            return False
        if self.exited is not None:
            if self.exited.is_set():
                return False
            with anyio.move_on_after(self.settle):
                await self.exited.wait()
            self.settle = min(self.settle * 2, _LONGEST_SETTLE_SECONDS)
            return True
        if self.reads > _PROMPT_READS:
            await anyio.sleep(_SETTLE_SECONDS)
            return True
        return False


async def drain_fd(fd: int, capture: _Capture, exited: anyio.Event | None = None) -> None:
    """Read the non-blocking pipe `fd` into `capture` until end of file.

    Straight from the descriptor, not through anyio's stream wrapper: each
    of its receives takes two trips through the scheduler even when the
    bytes are there, and closing it two more, which a ``true`` pays on both
    of its pipes. `exited` is the writer's exit, for `ReadPace`. A read the
    pace did not pause after ends with a checkpoint, so a writer that never
    lets the pipe run dry cannot starve the loop (or a deadline).
    """
    pace = ReadPace(exited)
    while True:
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            await anyio.wait_readable(fd)
            continue
        if not data:
            return
        capture.feed(data)
        if not await pace.after(len(data)):
            await anyio.lowlevel.checkpoint()


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the group; return whether any member was there to receive it."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        # A member changed its credentials (setuid); it is out of our reach.
        return True
    return True


def _has_live_member(pgid: int) -> bool:
    """Whether a process of the group is still running (zombies do not count).

    A zombie runs nothing; it only waits for its parent to collect it. Under
    bwrap the sandbox's first process exits right after the command and is
    left to init, which some container inits reap only every second or so:
    waiting for that would add a second to every isolated call. Reads the
    ``/proc`` entries of processes newer than the group; without ``/proc``
    every member counts as live.
    """
    try:
        names = os.listdir("/proc")
    except OSError:
        return True
    for name in names:
        # Members were forked after the leader, whose pid is the group's id,
        # so (pid numbers only wrapping after millions) only newer pids are
        # read. A member missed after a wrap has been sent SIGKILL already;
        # only the wait for it would be skipped.
        if not name.isdigit() or int(name) < pgid:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                data = stat.read()
        except OSError:
            continue  # gone meanwhile
        # Fields after the command name (which may hold spaces and parentheses).
        fields = data[data.rindex(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


async def _wait_group_gone(pgid: int, *, zombies_count: bool = True) -> None:
    """Poll until the group is gone (or, unless `zombies_count`, runs nothing).

    Bounded by `_GROUP_GONE_GRACE`.
    """
    # A sandbox's first process is usually mid-exit when its leader is reaped:
    # it becomes a zombie within a fraction of a millisecond.
    delay = 0.001 if zombies_count else 0.0002
    with anyio.move_on_after(_GROUP_GONE_GRACE):
        while _signal_group(pgid, 0) and (zombies_count or _has_live_member(pgid)):
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.05)


def _reported_pid(fd: int) -> int | None:
    """The ``child-pid`` bwrap wrote in its info file, or None when it wrote none.

    The sandboxed program may have written there too; a pid it names is
    only waited for if it is in the call's own process group (and killed).
    """
    try:
        data = os.pread(fd, 4096, 0)
        pid = json.loads(data)["child-pid"]
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return pid if isinstance(pid, int) and pid > 1 else None


async def _wait_process_gone(pid: int, pgid: int) -> None:
    """Wait until the sandbox's first process `pid` has exited (bounded).

    When a PID namespace's first process has exited, the kernel has killed
    and reaped everything else in the namespace, so this is all that
    `_wait_group_gone` would wait for, with one descriptor instead of a
    scan of every ``/proc`` entry (1.4 ms of a 7 ms ``bash true``).
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # reaped already
    except OSError:
        await _wait_group_gone(pgid, zombies_count=False)
        return
    try:
        if pidfd_exited(pidfd):
            # Gone already (usually: the group kill reached it while our
            # pipes drained). Had the number been reused, the process meant
            # would be gone too.
            return
        # The number might have been reused since (by the time it was read):
        # only a member of the call's group is the process meant.
        if _live_group_of(pid) not in (None, pgid):
            return
        with anyio.move_on_after(_GROUP_GONE_GRACE):
            await anyio.wait_readable(pidfd)
    finally:
        os.close(pidfd)


def pidfd_exited(pidfd: int) -> bool:
    """Whether the process of `pidfd` has exited, without waiting (a pidfd polls readable then)."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(0))


def _live_group_of(pid: int) -> int | None:
    """The process group of a running `pid` (None when it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    if len(fields) < 3 or fields[0] == b"Z":
        return None
    return int(fields[2])


def _check_program(program: str, cwd: Path, env: Mapping[str, str] | None) -> None:
    """Fail like exec would for a program a wrapper could not start.

    Under a mechanism the program is exec'd by the wrapper, whose failure would
    be an exit status; checking first keeps "no such program" a `LaunchError`.
    """
    if not cwd.is_dir():
        raise LaunchError(program, f"No such file or directory ({cwd})")
    if os.sep in program:
        path = program if os.path.isabs(program) else str(cwd / program)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise LaunchError(program, f"No such executable file ({path})")
    else:
        search = (os.environ if env is None else env).get("PATH", os.defpath)
        found = shutil.which(program, path=search)
        if found is None:
            raise LaunchError(program, f"not found on PATH; the PATH it searched: {search}")
        path = found
    _check_format(program, path)


# What execve(2) itself runs: ELF binaries and "#!" scripts. The wrappers
# exec with execvp, which hands anything else to /bin/sh; a direct exec
# (and so an unwrapped call) fails instead, and so must a wrapped one.
_EXEC_MAGIC = (b"\x7fELF", b"#!")


def _check_format(program: str, path: str) -> None:
    try:
        with open(path, "rb") as file:
            head = file.read(4)
    except OSError:
        return  # unreadable but executable: let exec decide
    if not head.startswith(_EXEC_MAGIC) and not _binfmt_misc():
        raise LaunchError(program, f"Exec format error ({path})")


@functools.cache
def _binfmt_misc() -> bool:
    """Whether the kernel has extra executable formats registered (then exec decides)."""
    try:
        entries = os.listdir("/proc/sys/fs/binfmt_misc")
    except OSError:
        return False
    return any(name not in ("register", "status") for name in entries)


# What each wrapper prints (and how it exits) when it cannot exec the program.
_EXEC_FAILED = (
    (1, "bwrap: execvp "),
    (127, "lionfactory confinement: cannot execute "),
)


def _not_started(result: ProcessResult, env: Mapping[str, str] | None) -> LaunchError | None:
    """The wrapper's own exec failure as a `LaunchError`, or None when the program ran.

    The host-side check passed, so the program exists outside; inside, a
    mount or rule hid it (or what it needs to start).
    """
    if result.stdout_bytes:
        return None
    first = result.stderr.splitlines()[0] if result.stderr else ""
    for code, prefix in _EXEC_FAILED:
        if result.returncode == code and first.startswith(prefix):
            return not_started_inside(result.argv[0], first[len(prefix) :].strip(), env)
    return None


def not_started_inside(program: str, detail: str, env: Mapping[str, str] | None) -> LaunchError:
    """The `LaunchError` of a program the host finds but the confinement cannot start.

    One wording for every way a confined command starts (the process seam's
    wrappers and the branch supervisor): the host-side check passed, so a
    mount or rule inside hid the program (or what it needs to start).
    """
    search = (os.environ if env is None else env).get("PATH", os.defpath)
    return LaunchError(
        program,
        f"not found on PATH inside the confinement ({detail}); the PATH it searched: "
        f"{search}. Expose its directory with the factory's exposed_paths option",
    )


def _launch_reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc)
        if exc.filename is not None:
            reason = f"{reason} ({os.fsdecode(exc.filename)})"
        return reason
    return str(exc) or type(exc).__name__


def _remove(tmpdir: Path | None) -> None:
    if tmpdir is not None:
        shutil.rmtree(tmpdir, ignore_errors=True)


class _Child:
    """A child started with `subprocess.Popen` on the event loop, its exit awaited on a pidfd.

    trio starts a child in a worker thread, because its ``Popen`` waits for
    the child's ``exec``; the thread's round trip cost more than that wait:
    about 0.4 ms of CPU and 0.3 ms of wall time a process (a ``true``: 0.2
    ms of CPU and 0.7 ms of wall time here, 0.7 and 1.0 ms through
    `anyio.open_process`), paid by every search, check and command. With
    ``vfork`` (CPython uses it here: no ``preexec_fn``, no user or group
    change) the loop waits only until the child has exec'd, as asyncio's
    own subprocesses always do. The exit is a pidfd turning readable,
    which both anyio backends wait for like any descriptor.
    """

    def __init__(self, popen: subprocess.Popen[bytes], pidfd: int) -> None:
        self._popen = popen
        self._pidfd = pidfd

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    async def wait(self) -> int:
        """Wait for the child to exit and reap it; its exit status."""
        while (code := self._popen.poll()) is None:
            await anyio.wait_readable(self._pidfd)
        return code

    async def exited(self) -> None:
        """Wait until the child has exited, leaving it unreaped (its number stays reserved)."""
        if self._popen.returncode is None:
            await anyio.wait_readable(self._pidfd)

    async def aclose(self) -> None:
        """Wait for the child to exit, as `anyio.abc.Process.aclose` does (no pipes are ours)."""
        await self.wait()

    def close(self) -> None:
        """Close the pidfd (once; no task waits on it by then)."""
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1


async def _start(argv: list[str], **options: Any) -> _Child | anyio.abc.Process:
    """Start `argv` (`subprocess.Popen` options); through anyio where there is no pidfd."""
    if not _PIDFD:
        return await anyio.open_process(argv, **options)
    popen = subprocess.Popen(argv, **options)  # noqa: ASYNC220 (on the loop, see _Child)
    try:
        pidfd = os.pidfd_open(popen.pid)
    except OSError:
        # No pidfd (a kernel before 5.3, or a seccomp filter refusing it):
        # the child runs; wait for it in a worker thread instead.
        return _Waited(popen)
    return _Child(popen, pidfd)


class _Waited(_Child):
    """A started child without a pidfd: its exit is waited for in a worker thread."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        super().__init__(popen, -1)

    async def wait(self) -> int:
        return await anyio.to_thread.run_sync(self._popen.wait, abandon_on_cancel=True)

    async def exited(self) -> None:
        if self._popen.returncode is None:
            await anyio.to_thread.run_sync(_wait_unreaped, self._popen.pid, abandon_on_cancel=True)


def _wait_unreaped(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)


async def _exit_of(process: _Child | anyio.abc.Process) -> None:
    """Wait for `process` to exit; unreaped where it can be (a pidfd, or ``WNOWAIT``)."""
    if isinstance(process, _Child):
        await process.exited()
    else:
        await process.wait()  # anyio's own process: it reaps (no pidfd on this kernel)


_PIDFD = hasattr(os, "pidfd_open")

_PR_SET_PDEATHSIG = 1


@functools.cache
def _prctl() -> Any:
    return ctypes.CDLL(None, use_errno=True).prctl


def _dies_with(parent: int) -> Callable[[], None]:
    """A ``preexec_fn`` giving the child SIGKILL when `parent` (this process) dies."""
    prctl = _prctl()  # looked up before the fork: the child only calls it

    def set_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            # We died between the fork and the prctl: the signal never comes.
            os._exit(128 + signal.SIGKILL)

    return set_signal


@contextlib.contextmanager
def child_pipes() -> Iterator[tuple[tuple[int, int], tuple[int, int]]]:
    """New stdout and stderr pipes for a process being started: their read and write ends.

    Our own pipes (close-on-exec here): the write ends go to the process
    being started in the block and are closed on leaving it, whose copies
    the process (or the one they were sent to) holds by then; the read ends
    are then the caller's, non-blocking (see `drain_fd`), or closed when the
    block raised.
    """
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        yield (out_r, err_r), (out_w, err_w)
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    os.set_blocking(out_r, False)
    os.set_blocking(err_r, False)


async def run_process(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    announce_truncation: bool = True,
    isolation: Isolation | None = None,
    spill: tuple[Callable[[], BinaryIO], Callable[[], BinaryIO]] | None = None,
    on_output: Callable[[bytes], None] | None = None,
    die_with_parent: bool = False,
) -> ProcessResult:
    """Run `argv` to completion or until `timeout`, then make sure its whole group is gone.

    Where the child is started on the event loop's thread (Linux with
    pidfds), a program run in a PID namespace (bwrap, the exec helper) is
    killed when this process dies, even by SIGKILL, when no ``finally``
    runs: the wrapper gets the parent-death signal, which costs nothing.

    Args:
        argv: the program and its arguments; never interpreted by a shell.
        cwd: the working directory of the child.
        timeout: seconds before the group is killed and `timed_out` is set.
        env: the child's complete environment; ``None`` inherits ours, filtered
            by the isolation's `EnvPolicy` when it has one.
        max_bytes: bytes kept per stream; the rest is read and discarded.
        announce_truncation: append a ``[stdout truncated: ...]`` line to a
            cut stream's text (callers that parse the output turn it off and
            read the ``*_truncated`` flags instead).
        isolation: the confinement to run under; ``None`` or mechanism
            ``"none"`` runs the program directly.
        spill: for stdout and stderr, a function opening a file that receives
            the whole stream once it outgrows `max_bytes` (called at most
            once, only then; the runner writes and closes it), so nothing a
            long output holds is lost.
        on_output: called with every chunk of either stream as it arrives
            (a progress count), on the event loop; it must be quick.
        die_with_parent: also kill a program started directly (no PID
            namespace: `isolation` None, or no way to make one here) when
            this process dies. That costs a ``fork`` in place of ``vfork``,
            a few milliseconds in a large process, so only a program that
            can run for minutes asks (the checkpoint store's git). Without
            pidfds the child is started in a worker thread, which retires
            while idle and would take the signal with it: nothing is set.

    Returns:
        The `ProcessResult`. A timeout is a result (``timed_out=True``), not an error.

    Raises:
        LaunchError: the process could not be started.
        ValueError: `argv` is empty or `max_bytes` is negative.
    """
    args = tuple(os.fspath(arg) for arg in argv)
    if not args:
        raise ValueError("argv must name a program, got an empty sequence")
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes!r}")
    started = time.monotonic()
    if env is None and isolation is not None:
        # Only what is inherited is filtered; an explicit environment is
        # the caller's whole, deliberate choice.
        filtered = isolation.environment(None)
        env = None if filtered is None else filtered.variables
    launch_argv, launch_env, tmpdir = list(args), env, None
    pass_fds: tuple[int, ...] = ()
    graceful = False
    first_process: int | None = None
    wrapped = isolation is not None and isolation.wraps
    if isolation is not None and wrapped:
        if any("\x00" in arg for arg in args):
            raise LaunchError(args[0], "embedded null byte")
        _check_program(args[0], Path(cwd), env)
        launch = isolation.launch(
            args, cwd=Path(cwd), env=env, report_first_process=True, die_with_parent=_PIDFD
        )
        launch_argv, launch_env, tmpdir = list(launch.argv), launch.env, launch.tmpdir
        pass_fds, graceful, first_process = launch.pass_fds, launch.graceful, launch.first_process
        die_with_parent = die_with_parent and not launch.dies_with_parent
    # A direct child sets the signal itself, between fork and exec.
    dying = {"preexec_fn": _dies_with(os.getpid())} if die_with_parent and _PIDFD else {}
    try:
        with child_pipes() as ((out_r, err_r), (out_w, err_w)):
            process = await _start(
                launch_argv,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                cwd=Path(cwd),
                env=launch_env,
                start_new_session=True,
                pass_fds=pass_fds,
                **dying,
            )
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        # ValueError: an argument with a NUL byte never reaches exec().
        _remove(tmpdir)
        if first_process is not None:
            os.close(first_process)
        raise LaunchError(args[0], _launch_reason(exc)) from None
    finally:
        for fd in pass_fds:
            os.close(fd)
    # start_new_session makes the child a session and group leader.
    pgid = process.pid
    out = _Capture(max_bytes, spill[0] if spill else None, on_output=on_output)
    err = _Capture(max_bytes, spill[1] if spill else None, on_output=on_output)
    try:
        exited = anyio.Event()
        with anyio.move_on_after(timeout) as deadline:
            async with anyio.create_task_group() as group:
                group.start_soon(drain_fd, out_r, out, exited)
                group.start_soon(drain_fd, err_r, err, exited)
                await _exit_of(process)
                exited.set()
                # The leader is done; whatever it left running in its group
                # would keep our pipes open (and outlive the call). Kill it so
                # the drains reach end-of-file now, not at the deadline. The
                # leader is not reaped yet: its zombie keeps the group's
                # number, so the kill reaches this group and no other.
                _signal_group(pgid, signal.SIGKILL)
                await process.wait()
    finally:
        # Runs on success, timeout and cancellation alike; shielded so that a
        # cancelled caller still leaves no process and no open pipe behind.
        with anyio.CancelScope(shield=True):
            if graceful and process.returncode is None:
                # A subreaper wrapper (no namespaces here) kills what it
                # adopted on SIGTERM; the group kill would kill it first.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
                with anyio.move_on_after(_REAP_GRACE):
                    await _exit_of(process)
            if process.returncode is None:
                # Unreaped, the leader holds the group's number: kill by it.
                alive = _signal_group(pgid, signal.SIGKILL)
            else:
                # Reaped after its group was killed: only ask whether members
                # are still dying (signal 0), never signal the number again.
                alive = _signal_group(pgid, 0)
            if process.returncode is None:
                # Reaped already, there is nothing to close: the pipes are
                # ours, and the wait took one more trip through the scheduler.
                with anyio.move_on_after(_REAP_GRACE):
                    await process.aclose()
            if isinstance(process, _Child):
                process.close()
            os.close(out_r)
            os.close(err_r)
            first = _reported_pid(first_process) if first_process is not None else None
            if first_process is not None:
                os.close(first_process)
            if alive and first is not None:
                await _wait_process_gone(first, pgid)
            elif alive:
                # Under a mechanism, every call leaves the sandbox's first
                # process as a zombie for init; waiting for init to reap it
                # guarantees nothing more (it runs nothing, and its namespace
                # is empty once it has exited).
                await _wait_group_gone(pgid, zombies_count=not wrapped)
            if tmpdir is not None:
                await anyio.to_thread.run_sync(_remove, tmpdir)
            out.close()
            err.close()
    ended = (deadline.cancelled_caught, process.pid, started)
    result = captured_result(args, process.returncode, (out, err), ended, announce_truncation)
    failure = _not_started(result, env) if wrapped and not result.timed_out else None
    if failure is not None:
        raise failure
    return result

"""One long-lived confined environment per branch: its commands start inside it, on request.

Without it every confined command gets a sandbox of its own: a background
server lives in a network namespace and a ``/tmp`` no later command can
reach, so ``network="none"`` would make background servers useless. With it,
the first confined command of a branch starts the *supervisor*
(`lionfactory._os.supervisor_main`) under the branch's `Isolation`, built by
the same policy-to-argv translation every confined process uses
(`Isolation.launch`), and every later command of that branch (foreground or
background) is started by the supervisor inside that one sandbox. They share
its network namespace (so its loopback, and nothing beyond it under
``network="none"``), its private ``/tmp`` and its PID namespace; they are
confined exactly as a command started on its own would be.

Each command's stdout and stderr are pipes (or a job's output file) whose
write ends are handed to the supervisor with the request, so output never
passes through the supervisor. A command runs in a session of its own and,
where the kernel allows (a user namespace for an unprivileged PID namespace),
in a PID namespace of its own inside the sandbox, made ready before the
command is asked for: when it ends, is killed or its
caller gives up, its process group is killed and its namespace with it, so a
child that started a session of its own dies too, exactly as when every
command had a sandbox of its own. (For uid 0 the kernel refuses to map root
into that user namespace without CAP_SETFCAP, so root's commands see
themselves as the overflow uid 65534 while the kernel still acts for root.)
This is the one place besides `lionfactory._os.process.run_process` that starts
programs. Closing the supervisor's socket (branch close, interpreter exit, a
dead parent) kills every command and ends the sandbox with its namespaces.

The unconfined default (``"none"``) uses a supervisor too, started in a bare
PID namespace (`Isolation.launch` for ``"none"``: bwrap binding ``/`` as it
is, or the exec helper's namespace) with the same empty environment: its
commands keep the caller's rights and get a PID namespace each, prepared
ahead and, once its runner has emptied it, reused for the next command
(``--reuse-namespaces``), so a standalone call costs a message and a
``posix_spawn`` instead of a ``bwrap`` start. If the supervisor itself is
killed, its outer namespace's init dies and takes every command with it.
Background jobs of the unconfined tools start there too (`Supervisor.submit`,
each in a namespace of its own, which its runner empties when the job
ends): so they die with the host process when it is killed with SIGKILL,
which a job started directly under bwrap (no parent-death signal, see
`lionfactory._os.isolation`) would outlive.
There the host does not go through the supervisor for each command: the
supervisor lends it a prepared namespace's first process (the *runner*,
with a pidfd of it), the host sends the runner the command and reads its
answer and output itself, and keeps the emptied namespace for the next call
(`Supervisor.lend`, `run_supervised`). A call is then one message to the
runner, a ``posix_spawn`` there and one answer; a timeout or cancellation
kills the runner, which as its namespace's init takes every process of the
namespace with it.
"""

from __future__ import annotations

import array
import contextlib
import functools
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import anyio
import anyio.lowlevel
import attrs

from lionfactory._os.isolation import HiddenFile, Isolation, hidden_now
from lionfactory._os.process import (
    LaunchError,
    ProcessResult,
    ReadPace,
    _Capture,
    _check_program,
    captured_result,
    child_pipes,
    drain_fd,
    not_started_inside,
    pidfd_exited,
)

__all__ = ["RemoteProcess", "Supervisor", "run_supervised"]

MAIN = Path(__file__).with_name("supervisor_main.py")


@functools.cache
def _main_source() -> bytes:
    return MAIN.read_bytes()


def _source_fd() -> int:
    """A fresh descriptor holding the supervisor's source, run as ``/proc/self/fd/N``.

    Not its path: inside bwrap the private /tmp covers a checkout under /tmp
    (as CI may clone), and the package's files are not among what the
    sandbox shows. Not ``python -c SOURCE`` either: the 20 KB of source then
    sits on the command line of bwrap and the supervisor, flooding ``ps``.
    """
    fd = os.memfd_create("lionfactory-supervisor", 0)
    os.write(fd, _main_source())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# The supervisor's own environment: nothing of the host's. Its commands get
# the environment each request names (the isolation's policy applied), so
# neither bwrap, its init, the supervisor nor its forks hold a variable a
# command could read from ``/proc/PID/environ``. A fixed, harmless PATH and
# locale keep what the wrappers run (bwrap's ``env``, Python) predictable.
_SUPERVISOR_ENV = {"PATH": os.defpath, "LC_ALL": "C.UTF-8"}


_TMP_VARS = ("TMPDIR", "TMP", "TEMP")
# How long a killed command may take to be reported gone.
_EXIT_GRACE = 5.0
# After the command ends, how long its pipes may stay open (held by a
# process that left the group) before the drains stop.
_DRAIN_GRACE = 1.0


# A lent runner's answer for a command that started: its wait status and
# pid as two native ints (``ANSWER`` in the supervisor's script, which the
# package never imports). Read with ``struct``, not a JSON parser: every
# call has one. An answer with an exec error is JSON, and never this size.
_ANSWER = struct.Struct("=ii")

# Emptied namespaces the host keeps for the next calls: one serves every
# sequential call. More are lent only while calls overlap, and handed back
# to the supervisor when they are done (it keeps a few for the next burst),
# so the host holds the same two descriptors whatever ran before.
_IDLE_RUNNERS = 1
# How long the supervisor may take to lend a namespace (its first one waits
# for the supervisor's own start).
_LEND_TIMEOUT = 30.0


class SupervisorGone(Exception):
    """The supervisor is not running any more (it is restarted on the next call)."""


@attrs.define(eq=False)
class _Runner:
    """A prepared namespace's first process, lent to the host by an unconfined supervisor.

    The host sends it each command (one message with the command's stdout
    and stderr) and reads its answer; the supervisor is not on that path.
    `pidfd` names the runner: as its namespace's init, killing it ends every
    process of the namespace, and its pidfd turns readable only once they
    are all gone.
    """

    channel: socket.socket
    pidfd: int
    # Its pid in the supervisor's namespace: how the supervisor knows it when it comes back.
    ident: int
    # What a call waits on (`_run_on`): the channel, and the command's pipes
    # while it runs. One per runner: a new one per call would cost its
    # making, its registrations and the event loop's own, every call.
    poller: select.epoll = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.poller = select.epoll(3)
        self.poller.register(self.channel, select.EPOLLIN)

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)

    async def exited(self) -> None:
        if not pidfd_exited(self.pidfd):
            await anyio.wait_readable(self.pidfd)

    def close(self) -> None:
        """Close the channel (an idle runner then exits) and the pidfd, once."""
        self.channel.close()
        self.poller.close()
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1


@attrs.define(eq=False)
class Supervisor:
    """The host's handle on one supervisor: its process and control socket."""

    isolation: Isolation
    popen: subprocess.Popen[bytes]
    control: socket.socket
    overlay: dict[str, str]
    tmpdir: Path | None
    # The credential files hidden inside exposed toolchain trees when the
    # sandbox was made: its mounts (bwrap) and rules (Landlock) are fixed
    # then, so one that appears later needs a new sandbox (`stale`).
    hidden: frozenset[HiddenFile] = frozenset()
    # The supervisor's pidfd. The process is reaped only in `close`, after
    # its group was killed: until then its zombie keeps its number, so the
    # group kill can only reach the sandbox's own processes.
    pidfd: int = -1
    lock: threading.Lock = attrs.Factory(threading.Lock)
    # Whether the last command it started had a PID namespace of its own
    # (None: none started yet). False where the kernel refused one inside
    # the supervisor: its commands then share the supervisor's namespace.
    command_namespaces: bool | None = None
    # Runners lent by an unconfined supervisor, idle between calls (`lend`).
    runners: list[_Runner] = attrs.Factory(list)
    # The environment the last request named (as compared) and its JSON:
    # most calls name the same one, and encoding it is most of a request.
    sent_env: tuple[Mapping[Any, Any], bytes] | None = None
    # The last request (argv, cwd, its environment's JSON as above, the
    # message): an agent runs the same command again and again.
    sent_request: tuple[tuple[str, ...], Path, bytes, bytes] | None = None

    @classmethod
    def start(
        cls, isolation: Isolation, root: Path, *, command_namespaces: bool = True
    ) -> Supervisor:
        """Start a supervisor under `isolation` (blocking: call it in a worker thread).

        `command_namespaces` False makes it run every command without a PID
        namespace of its own, as where the kernel refuses one (tests use it
        to exercise that path on a machine that allows them).
        """
        # Unconfined ("none"), nothing is hidden: there is no set to compare.
        hidden = hidden_now(isolation.policy) if isolation.confined else frozenset()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        source = _source_fd()
        script = [sys.executable, "-I", "-S", f"/proc/self/fd/{source}", str(child.fileno())]
        if not command_namespaces:
            script.append("--no-namespaces")
        if not isolation.confined:
            # Unconfined, a command's namespace only keeps what it starts from
            # outliving it: one its runner emptied serves the next command as
            # well as a new one, and saves the two forks a new one costs.
            # Confined commands each get a new one (pids from 2, nothing shared).
            script.append("--reuse-namespaces")
        try:
            launch = isolation.launch(script, cwd=root, env=_SUPERVISOR_ENV)
        except BaseException:
            parent.close()
            child.close()
            os.close(source)
            raise
        try:
            popen = subprocess.Popen(
                list(launch.argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=root,
                env=dict(launch.env or _SUPERVISOR_ENV),
                # The wrapper's own descriptors too (bwrap's seccomp program).
                pass_fds=(child.fileno(), source, *launch.pass_fds),
                start_new_session=True,
            )
            # Taken before anything can reap it, so it names this process
            # for as long as we hold it, whatever number the kernel reuses.
            pidfd = os.pidfd_open(popen.pid)
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
            os.close(source)
            for fd in launch.pass_fds:
                os.close(fd)
        overlay = {k: v for k, v in (launch.env or {}).items() if k in _TMP_VARS}
        return cls(isolation, popen, parent, overlay, launch.tmpdir, hidden, pidfd)

    @property
    def alive(self) -> bool:
        """Whether the supervisor still runs (asked of its pidfd: never reaps it)."""
        return self.pidfd >= 0 and not pidfd_exited(self.pidfd)

    def stale(self) -> bool:
        """Whether a credential file appeared in an exposed tree since the sandbox was made."""
        if not self.isolation.confined:
            return False  # unconfined, it hides nothing: never stale
        return not hidden_now(self.isolation.policy) <= self.hidden

    def submit(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str] | None,
        stdout: int,
        stderr: int,
    ) -> socket.socket:
        """Ask for `argv` to start; returns the command's report socket (blocking, short).

        Raises:
            SupervisorGone: the supervisor has exited.
        """
        payload = self.request(argv, cwd=cwd, env=env)
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fds = array.array("i", [theirs.fileno(), stdout, stderr])
        try:
            with self.lock:
                self.control.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        except OSError as exc:
            mine.close()
            raise SupervisorGone(str(exc)) from None
        finally:
            theirs.close()
        return mine

    def request(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None) -> bytes:
        """The message that starts `argv` (for the supervisor or a lent runner)."""
        if env is None:
            # What a command inherits passes the isolation's environment
            # policy, as at the process seam; an explicit env is the caller's.
            filtered = self.isolation.environment(None)
            env = os.environ if filtered is None else filtered.variables
        encoded = self._env_json(env)
        last = self.sent_request
        if last is not None and last[2] is encoded and last[0] == argv and last[1] == cwd:
            return last[3]  # the last request again (a loop of one command, say)
        head = json.dumps({"argv": list(argv), "cwd": str(cwd)}).encode()
        payload = b"".join((head[:-1], b', "env": ', encoded, b"}"))
        self.sent_request = (tuple(argv), cwd, encoded, payload)
        return payload

    def _env_json(self, env: Mapping[str, str]) -> bytes:
        """`env` with the overlay, as JSON: the last one's again when `env` did not change."""
        probe: Mapping[Any, Any] = env
        if env is os.environ:
            # Compared as the bytes it holds: comparing (or copying) the
            # mapping itself decodes every variable.
            data = getattr(os.environ, "_data", None)
            if isinstance(data, dict):
                probe = data
        sent = self.sent_env
        if sent is not None and sent[0] == probe:
            return sent[1]
        encoded = json.dumps({**env, **self.overlay}).encode()
        self.sent_env = (dict(probe), encoded)
        return encoded

    def idle_runner(self) -> _Runner | None:
        """A lent runner no call is using, or None."""
        with self.lock:
            return self.runners.pop() if self.runners else None

    def give_back(self, runner: _Runner) -> None:
        """Keep `runner` (its namespace emptied) for a later call, or let it end."""
        with self.lock:
            if self.pidfd >= 0 and len(self.runners) < _IDLE_RUNNERS:
                self.runners.append(runner)
                return
            with contextlib.suppress(OSError):  # gone: the runner ends with it
                fds = array.array("i", [runner.channel.fileno()])
                self.control.sendmsg(
                    [json.dumps({"return": runner.ident}).encode()],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)],
                )
        runner.close()  # our copies; the supervisor holds its own now

    async def lend(self) -> _Runner | None:
        """Ask the supervisor for a ready namespace's runner; None where it has none to lend.

        None means the kernel refused the supervisor a PID namespace per
        command (`command_namespaces` turns False): the caller runs the
        command through the supervisor as before.

        Raises:
            SupervisorGone: the supervisor has exited or did not answer.
        """
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fds = array.array("i", [theirs.fileno()])
        try:
            with self.lock:
                self.control.sendmsg(
                    [b'{"lend": true}'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)]
                )
        except OSError as exc:
            mine.close()
            raise SupervisorGone(str(exc)) from None
        finally:
            theirs.close()
        mine.setblocking(False)
        try:
            with anyio.move_on_after(_LEND_TIMEOUT):
                while True:
                    try:
                        data, received, _flags, _addr = socket.recv_fds(
                            mine, 256, 2, socket.MSG_CMSG_CLOEXEC
                        )
                    except (BlockingIOError, InterruptedError):
                        await anyio.wait_readable(mine)
                        continue
                    except OSError:
                        data, received = b"", []
                    break
        finally:
            mine.close()
        if not data:
            for fd in received:
                os.close(fd)
            raise SupervisorGone("the supervisor did not lend a namespace")
        word = _message(data)
        if word.get("namespace") is not True or len(received) != 2:
            for fd in received:
                os.close(fd)
            self.command_namespaces = False
            return None
        self.command_namespaces = True
        channel = socket.socket(fileno=received[0])
        channel.setblocking(False)
        ident = word.get("runner")
        return _Runner(channel, received[1], ident if isinstance(ident, int) else 0)

    def close(self, *, grace: float = _EXIT_GRACE) -> None:
        """Kill every command and end the sandbox (blocking; safe to call twice).

        The supervisor is given `grace` seconds to end its commands on its
        own, then its whole group (bwrap's init with it, and so the
        sandbox's PID namespace) is killed while its unreaped process still
        holds the group's number, and only then reaped: a pid the kernel
        handed out again is never signalled.
        """
        self.control.close()
        with self.lock:
            pidfd, self.pidfd = self.pidfd, -1
            runners, self.runners = self.runners, []
        for runner in runners:
            runner.close()  # their namespaces end with the supervisor's below
        if pidfd < 0:
            return
        try:
            if grace > 0:
                poller = select.poll()
                poller.register(pidfd, select.POLLIN)
                poller.poll(int(grace * 1000))
            with contextlib.suppress(OSError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            self.popen.wait()
        finally:
            os.close(pidfd)
        if self.tmpdir is not None:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


def _message(data: bytes) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@attrs.define(eq=False)
class RemoteProcess:
    """A command the supervisor started, seen through its report socket (for jobs)."""

    sock: socket.socket
    pid: int
    returncode: int | None = None
    # Whether it has a PID namespace of its own (None: the report did not say).
    namespace: bool | None = None

    @classmethod
    def first_report(cls, sock: socket.socket) -> RemoteProcess:
        """Wait for the start report (blocking).

        Raises:
            LaunchError: the command could not be executed.
            SupervisorGone: the supervisor died before answering.
        """
        sock.settimeout(30)
        try:
            data = sock.recv(65536)
        except OSError as exc:
            sock.close()
            raise SupervisorGone(str(exc)) from None
        report = _message(data)
        if "pid" not in report:
            sock.close()
            raise SupervisorGone("no start report")
        namespace = report.get("namespace")
        process = cls(
            sock, int(report["pid"]), namespace=namespace if isinstance(namespace, bool) else None
        )
        sock.setblocking(False)
        return process

    def _read(self) -> None:
        while self.returncode is None:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                # The supervisor is gone, and the sandbox with it.
                self.returncode = -signal.SIGKILL
                return
            report = _message(data)
            if "exec_error" in report:
                self.exec_error = str(report["exec_error"])
            if "exit" in report:
                self.returncode = int(report["exit"])

    exec_error: str | None = None

    def poll(self) -> int | None:
        self._read()
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.send(b'{"kill": true}')

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        return self.returncode

    def close(self) -> None:
        self.sock.close()


async def _next_report(sock: socket.socket) -> dict[str, Any] | None:
    """The next report on `sock`, or None when the supervisor closed it."""
    while True:
        try:
            data = sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            await anyio.wait_readable(sock)
            continue
        except OSError:
            return None
        return _message(data) if data else None


async def _drain(fd: int, capture: _Capture, done: anyio.Event) -> None:
    try:
        await drain_fd(fd, capture)
    finally:
        done.set()


async def run_supervised(
    supervisor: Supervisor,
    argv: Sequence[str],
    *,
    cwd: Path,
    timeout: float,
    env: Mapping[str, str] | None,
    max_bytes: int,
    spill: tuple[Callable[[], BinaryIO], Callable[[], BinaryIO]] | None = None,
    on_output: Callable[[bytes], None] | None = None,
) -> ProcessResult:
    """Run `argv` through `supervisor` like `run_process` runs it directly.

    `on_output` sees every chunk of either stream as it arrives, as for `run_process`.

    Raises:
        LaunchError: the program could not be started.
        SupervisorGone: the supervisor is not running (start a new one).
    """
    args = tuple(argv)
    if any("\x00" in arg for arg in args):
        raise LaunchError(args[0], "embedded null byte")
    started = time.monotonic()
    if not supervisor.isolation.confined:
        for _attempt in range(2):
            runner = supervisor.idle_runner() or await supervisor.lend()
            if runner is None:
                break  # no namespace per command here: through the supervisor, as before
            payload = supervisor.request(args, cwd=cwd, env=env)
            handed = _hand(runner, payload)
            if handed is None:
                runner.close()  # it died while idle (killed, out of memory): another one
                continue
            try:
                return await _run_on(
                    supervisor,
                    runner,
                    args,
                    handed,
                    timeout=timeout,
                    captures=(
                        _Capture(max_bytes, spill[0] if spill else None, on_output=on_output),
                        _Capture(max_bytes, spill[1] if spill else None, on_output=on_output),
                    ),
                    started=started,
                )
            except LaunchError:
                # The program did not start: the host-side check (skipped
                # before, it costs a PATH walk every call) words it the way
                # every tool does, when it finds the reason.
                _check_program(args[0], cwd, env)
                raise
        else:
            raise SupervisorGone("no namespace the supervisor lent could start the command")
    _check_program(args[0], cwd, env)
    with child_pipes() as ((out_r, err_r), (out_w, err_w)):
        sock = supervisor.submit(args, cwd=cwd, env=env, stdout=out_w, stderr=err_w)
    sock.setblocking(False)
    out = _Capture(max_bytes, spill[0] if spill else None, on_output=on_output)
    err = _Capture(max_bytes, spill[1] if spill else None, on_output=on_output)
    pid = 0
    code: int | None = None
    exec_error: str | None = None
    gone = False
    try:
        with anyio.move_on_after(timeout) as deadline:
            drained = (anyio.Event(), anyio.Event())
            async with anyio.create_task_group() as group:
                group.start_soon(_drain, out_r, out, drained[0])
                group.start_soon(_drain, err_r, err, drained[1])
                while code is None:
                    report = await _next_report(sock)
                    if report is None:
                        gone = True
                        break
                    pid = int(report.get("pid", pid))
                    if "namespace" in report:
                        supervisor.command_namespaces = bool(report["namespace"])
                    exec_error = report.get("exec_error", exec_error)
                    if "exit" in report:
                        code = int(report["exit"])
                with anyio.move_on_after(_DRAIN_GRACE):
                    # The group is dead; a process that left it may still
                    # hold a pipe. Give the drains a moment, not forever.
                    for event in drained:
                        await event.wait()
                group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if code is None and not gone:
                with contextlib.suppress(OSError):
                    sock.send(b'{"kill": true}')
                with anyio.move_on_after(_EXIT_GRACE):
                    while code is None:
                        report = await _next_report(sock)
                        if report is None:
                            break
                        code = int(report["exit"]) if "exit" in report else code
            sock.close()
            os.close(out_r)
            os.close(err_r)
            out.close()
            err.close()
    if exec_error is not None:
        if not supervisor.isolation.confined:
            # Nothing hides a program from an unconfined command: exec said why.
            raise LaunchError(args[0], exec_error)
        raise not_started_inside(args[0], exec_error, env)
    if gone and code is None and not deadline.cancelled_caught:
        raise SupervisorGone("the supervisor closed the command's socket")
    return captured_result(args, code, (out, err), (deadline.cancelled_caught, pid, started), False)


def _hand(runner: _Runner, payload: bytes) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """Send `runner` the command with new stdout and stderr pipes; their read and write ends.

    The write ends stay ours until the runner answers (`_run_on`), so the
    pipes cannot end before the answer is there: a quiet command wakes us
    once, for its answer, not once more for each pipe's end just before it.
    None: the runner is gone (its end of the channel is closed).
    """
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        fds = array.array("i", [out_w, err_w])
        runner.channel.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    except OSError:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        return None
    os.set_blocking(out_r, False)
    os.set_blocking(err_r, False)
    return (out_r, err_r), (out_w, err_w)


def _runner_word(channel: socket.socket) -> dict[str, Any] | None:
    """The runner's answer; ``{}`` when it died before giving one, None when none is there yet."""
    try:
        data = channel.recv(65536)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return {}
    if len(data) == _ANSWER.size:
        status, pid = _ANSWER.unpack(data)
        return {"status": status, "pid": pid}
    word = _message(data) if data else {}
    return word if isinstance(word.get("status"), int) else {}


class _Streams:
    """The command's stdout and stderr pipes and their captures, read as they turn readable."""

    def __init__(self, poller: select.epoll, pipes: tuple[int, int], captures: Any) -> None:
        self.poller = poller
        self.open: dict[int, _Capture] = dict(zip(pipes, captures, strict=True))

    def read(self, fd: int) -> int:
        """Read what `fd` holds now into its capture; the bytes read (0 at its end)."""
        try:
            data = os.read(fd, 65536)
        except (BlockingIOError, InterruptedError):
            return 0
        if not data:
            self.poller.unregister(fd)
            del self.open[fd]
            return 0
        self.open[fd].feed(data)
        return len(data)

    def read_all_now(self) -> None:
        """Read everything the pipes hold (their writers are gone)."""
        for fd in list(self.open):
            while fd in self.open and self.read(fd):
                pass


async def _run_on(
    supervisor: Supervisor,
    runner: _Runner,
    args: tuple[str, ...],
    handed: tuple[tuple[int, int], tuple[int, int]],
    *,
    timeout: float,
    captures: tuple[_Capture, _Capture],
    started: float,
) -> ProcessResult:
    """Wait for the command `runner` was handed, reading its output; then its result.

    The runner's ``epoll`` descriptor holds both pipes and its channel, so
    the loop waits for one descriptor: a ``true`` costs one wake-up, for
    the runner's answer (the pipes cannot end before it: we hold their
    write ends until then, and the runner answers once its namespace is
    empty) instead of a task per stream and a scheduler trip for each.
    """
    pipes, ends = handed
    held = list(ends)

    def let_go() -> None:
        while held:
            os.close(held.pop())

    poller = runner.poller
    streams = _Streams(poller, pipes, captures)
    channel = runner.channel.fileno()
    word: dict[str, Any] | None = None
    try:
        for fd in pipes:
            poller.register(fd, select.EPOLLIN)
        pace: ReadPace | None = None
        with anyio.move_on_after(timeout) as deadline:
            while word is None:
                events = poller.poll(0)
                if not events:
                    await anyio.wait_readable(poller.fileno())
                    continue
                read = 0
                for fd, _mask in events:
                    if fd != channel:
                        read += streams.read(fd)
                    else:
                        word = _runner_word(runner.channel)
                if word is None and read:
                    pace = pace or ReadPace()
                    if not await pace.after(read):
                        # A writer that never lets its pipe run dry must not
                        # starve the loop (or the deadline).
                        await anyio.lowlevel.checkpoint()
            let_go()
            streams.read_all_now()
            if streams.open:
                # Nothing of the namespace holds a pipe any more; a process
                # outside it that was handed one may: a moment, not forever.
                poller.modify(channel, 0)  # its runner waits for its next command
                try:
                    with anyio.move_on_after(_DRAIN_GRACE):
                        while streams.open:
                            await anyio.wait_readable(poller.fileno())
                            streams.read_all_now()
                finally:
                    poller.modify(channel, select.EPOLLIN)
    finally:
        let_go()
        if word is None:
            with anyio.CancelScope(shield=True):
                # Timed out or cancelled: the namespace's init dies, and
                # with it every process of the namespace.
                runner.kill()
                with anyio.move_on_after(_EXIT_GRACE):
                    await runner.exited()
                streams.read_all_now()
        try:
            for fd in list(streams.open):
                with contextlib.suppress(OSError):  # the poller stays with the runner
                    poller.unregister(fd)
            for fd in pipes:
                os.close(fd)
            for capture in captures:
                capture.close()
        finally:
            if word:
                supervisor.give_back(runner)  # emptied: as good as a new one
            else:
                runner.close()
    if word and "exec_error" in word:
        # Nothing hides a program from an unconfined command: exec said why.
        raise LaunchError(args[0], str(word["exec_error"]))
    code = os.waitstatus_to_exitcode(word["status"]) if word else -signal.SIGKILL
    pid = int(word.get("pid", 0)) if word else 0
    ended = (deadline.cancelled_caught, pid, started)
    return captured_result(args, code, captures, ended, False)

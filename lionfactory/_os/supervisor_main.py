"""The supervisor: one long-lived process inside a branch's sandbox that starts its commands.

Run as a script inside the confinement (``python -I -S supervisor_main.py FD``),
never imported by the package. ``FD`` is one end of a ``SOCK_SEQPACKET``
socket pair whose other end the parent keeps. Every message on it is a
request to start a command: JSON ``{"argv", "cwd", "env"}`` with three file
descriptors attached (``SCM_RIGHTS``): a per-command socket, and the
command's stdout and stderr. On the per-command socket the supervisor answers
``{"pid": N}`` once the command is forked, ``{"exec_error": "..."}`` if it
could not be executed, and ``{"exit": STATUS}`` when it ended (negative: a
signal); the parent may send ``{"kill": true}`` there, and closing it kills
the command too. Each command leads a new session, and when it ends (or is
killed) its whole process group is killed with it, as for a call without the
supervisor. When the parent's end closes, every command is killed and the
supervisor exits, which ends the sandbox.

Why: the commands of one branch then share the sandbox's network namespace
and ``/tmp``, so a server started in the background answers a later call
even with no network beyond the branch's own loopback; and starting a
command costs a fork and an exec instead of a new sandbox.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time

_MAX_MESSAGE = 1 << 20


def _receive(sock: socket.socket) -> tuple[bytes, list[int]]:
    fds = array.array("i")
    data, ancillary, _flags, _addr = sock.recvmsg(_MAX_MESSAGE, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return data, list(fds)


def _send(sock: socket.socket, message: dict[str, object]) -> None:
    with contextlib.suppress(OSError):  # the parent gave up on this command
        sock.send(json.dumps(message).encode())


def _kill_group(pgid: int) -> None:
    # The leader too, by pid: a kill that comes before it called setsid()
    # would find no group yet.
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(pgid, signal.SIGKILL)


_CLONE_NEWUSER, _CLONE_NEWPID = 0x10000000, 0x20000000
_PR_SET_PDEATHSIG = 1
_STATUS = struct.Struct("i")


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded once; forked commands inherit it


def _libc() -> ctypes.CDLL:
    return _LIBC


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _enter_pid_namespace() -> bool:
    """Make this process's next child the first of a new PID namespace; False if refused.

    Without capabilities (the sandbox dropped them) a PID namespace needs a
    user namespace; ourselves are mapped to ourselves where the kernel lets
    us (not for uid 0, which needs CAP_SETFCAP: root's commands then see
    themselves as the overflow uid, while the kernel still acts as root).
    """
    libc = _libc()
    if libc.unshare(_CLONE_NEWPID) == 0:
        return True
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWPID) != 0:
        return False
    for name, text in (
        ("uid_map", f"{uid} {uid} 1"),
        ("setgroups", "deny"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        with contextlib.suppress(OSError):
            _write(f"/proc/self/{name}", text)
    # A new user namespace hands its creator every capability (within it):
    # empty the bounding set again, so the command still execs with none.
    _drop_capabilities()
    return True


_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_EINVAL = 22


def _drop_capabilities() -> None:
    """Empty the bounding and ambient sets (past the kernel's last capability: EINVAL)."""
    libc = _libc()
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == _EINVAL:
            break


def _close_all_but(keep: set[int]) -> None:
    low = 3
    for fd in sorted(keep):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, 65536)


def _reason(exc: BaseException) -> str:
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    if isinstance(exc, OSError) and exc.filename is not None:
        reason = f"{reason} ({os.fsdecode(exc.filename)})"
    return reason


def _exec(request: dict[str, object], report: socket.socket) -> None:
    argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
    env = {str(k): str(v) for k, v in request["env"].items()}  # type: ignore[attr-defined]
    try:
        os.set_inheritable(report.fileno(), False)
        for number in _RESET_SIGNALS:
            signal.signal(number, signal.SIG_DFL)
        os.chdir(str(request["cwd"]))
        os.execvpe(argv[0], argv, env)
    except BaseException as exc:
        _send(report, {"exec_error": _reason(exc)})
    os._exit(127)


# What Python ignores at start-up and an ignored disposition would carry
# through exec: a command gets them at their defaults, as from a shell.
_RESET_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name)
)


def _candidates(program: str, env: dict[str, str]) -> list[str]:
    """Where execvpe(3) would look for `program`, in order (``os._execvpe``'s rules)."""
    if os.path.dirname(program):
        return [program]
    path = env.get("PATH", os.defpath)
    return [os.path.join(directory, program) for directory in path.split(os.pathsep)]


def _spawn(request: dict[str, object], report: socket.socket) -> int | None:
    """Start the command with ``posix_spawn`` (a vfork and an exec); None when it cannot run.

    What a fork of this interpreter would cost is most of a command's start:
    a forked Python process copies its page tables and then faults on every
    page either side writes (reference counts), about half a millisecond,
    and ``os.execvpe`` imports `warnings` in the child first. ``posix_spawn``
    shares the memory until the exec. The program is looked up on the
    request's ``PATH`` exactly as ``os.execvpe`` would (a name that is not
    there is skipped, any other failure is kept and reported if nothing
    later starts); the exec failure of the last candidate is the report.
    """
    try:
        argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
        env = {str(k): str(v) for k, v in request["env"].items()}  # type: ignore[attr-defined]
        os.set_inheritable(report.fileno(), False)
        os.chdir(str(request["cwd"]))
        saved: OSError | None = None
        last: OSError | None = None
        for path in _candidates(argv[0], env):
            try:
                os.stat(path)
                return os.posix_spawn(path, argv, env, setsigdef=_RESET_SIGNALS, setsigmask=())
            except (FileNotFoundError, NotADirectoryError) as exc:
                last = exc
            except OSError as exc:
                last = exc
                saved = saved or exc
        error = saved or last
        raise error if error is not None else FileNotFoundError(2, "No such file", argv[0])
    except BaseException as exc:
        _send(report, {"exec_error": _reason(exc)})
        return None


def _start(
    request: dict[str, object], stdout: int, stderr: int, report: socket.socket, status: int
) -> int:
    """Fork the command's leader; returns its pid (in our namespace).

    The leader starts a new session and, where the kernel allows, a PID
    namespace of the command's own, whose first process runs the command
    and waits for it: when the command ends, that first process exits and
    the kernel kills everything left in its namespace, a process that
    started a session of its own included. So no process of a command
    outlives it, while every command shares the sandbox's network and
    ``/tmp``. The command's wait status goes to `status`.
    """
    pid = os.fork()
    if pid:
        return pid
    # The leader: nothing of the supervisor's own may leak into the command.
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        _close_all_but({report.fileno(), status})
        own = _enter_pid_namespace()
    except BaseException:
        os._exit(126)
    if not own:
        os.close(status)
        _exec(request, report)
    first = os.fork()
    if first:
        # Still the leader: leave when the namespace's first process does.
        os.close(status)
        os.waitpid(first, 0)
        os._exit(0)
    # The namespace's first process: it dies with the leader (a kill of the
    # group reaches both), and it reaps whatever the command orphans.
    _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    command = _spawn(request, report)
    report.close()
    if command is None:
        os.write(status, _STATUS.pack(127 << 8))  # as an exec failure in a forked child
        os._exit(0)
    while True:
        try:
            done, code = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if done == command:
            os.write(status, _STATUS.pack(code))
            os._exit(0)


def main(control_fd: int) -> None:
    control = socket.socket(fileno=control_fd)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, "control")
    selector.register(wake_read, selectors.EVENT_READ, "wake")
    running: dict[int, socket.socket] = {}  # pid -> its report socket
    by_socket: dict[int, int] = {}  # report socket fd -> pid

    reaped: list[tuple[int, int]] = []

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            reaped.append((pid, status))

    statuses: dict[int, int] = {}  # pid -> the read end of its status pipe

    def command_status(pid: int, status: int) -> int:
        """The command's own wait status when its namespace reported one, else the leader's."""
        fd = statuses.pop(pid, None)
        if fd is None:
            return status
        try:
            data = os.read(fd, _STATUS.size)
        except OSError:
            data = b""
        os.close(fd)
        return _STATUS.unpack(data)[0] if len(data) == _STATUS.size else status

    def finish(pid: int, status: int) -> None:
        report = running.get(pid)
        if report is None:
            return  # an orphan of some command, reaped as the namespace's init
        status = command_status(pid, status)
        # What the command left running ends with it, and the exit is
        # reported only once the group is gone, so "done" means no process.
        _kill_group(pid)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                os.killpg(pid, 0)
            except OSError:
                break
            reap()  # members reparented to us (we may be the namespace's init)
            time.sleep(0.001)
        running.pop(pid, None)
        if report is None:
            return
        by_socket.pop(report.fileno(), None)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        _send(report, {"exit": code})
        with contextlib.suppress(KeyError, ValueError):  # gone when the parent closed it
            selector.unregister(report)
        report.close()

    while True:
        for key, _events in selector.select():
            if key.data == "wake":
                os.read(wake_read, 4096)
                reap()
                while reaped:
                    finish(*reaped.pop(0))
            elif key.data == "control":
                try:
                    data, fds = _receive(control)
                except OSError:
                    data, fds = b"", []
                if not data:
                    for pid in list(running):
                        _kill_group(pid)
                    return
                if len(fds) != 3:
                    for fd in fds:
                        os.close(fd)
                    continue
                report = socket.socket(fileno=fds[0])
                try:
                    status_read, status_write = os.pipe()
                    os.set_blocking(status_read, False)
                    try:
                        pid = _start(json.loads(data), fds[1], fds[2], report, status_write)
                    finally:
                        os.close(status_write)
                    statuses[pid] = status_read
                except (ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
                    _send(report, {"exec_error": f"bad request: {exc}"})
                    report.close()
                    pid = 0
                finally:
                    os.close(fds[1])
                    os.close(fds[2])
                if pid:
                    running[pid] = report
                    by_socket[report.fileno()] = pid
                    selector.register(report, selectors.EVENT_READ, "report")
                    _send(report, {"pid": pid})
            else:
                fileobj = key.fileobj
                assert isinstance(fileobj, socket.socket)
                report = fileobj
                try:
                    message = report.recv(4096)
                except OSError:
                    message = b""
                if not message:
                    selector.unregister(report)  # closed: nothing more to read
                pid = by_socket.get(report.fileno(), 0)
                if pid:
                    # A kill request, or the parent closed its end: either
                    # way the command and its group end now.
                    _kill_group(pid)


if __name__ == "__main__":
    main(int(sys.argv[1]))

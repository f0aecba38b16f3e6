"""The supervisor: one long-lived process inside a branch's sandbox that starts its commands.

Run as a script inside the confinement (``python -I -S _supervisor_main.py FD``),
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
import json
import os
import selectors
import signal
import socket
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


def _start(request: dict[str, object], stdout: int, stderr: int, report: socket.socket) -> int:
    argv = [str(a) for a in request["argv"]]  # type: ignore[attr-defined]
    env = {str(k): str(v) for k, v in request["env"].items()}  # type: ignore[attr-defined]
    cwd = str(request["cwd"])
    pid = os.fork()
    if pid == 0:  # the command
        try:
            os.setsid()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(stdout, 1)
            os.dup2(stderr, 2)
            os.closerange(3, report.fileno())
            os.closerange(report.fileno() + 1, 65536)
            os.set_inheritable(report.fileno(), False)
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        except BaseException as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            if isinstance(exc, OSError) and exc.filename is not None:
                reason = f"{reason} ({os.fsdecode(exc.filename)})"
            _send(report, {"exec_error": reason})
        os._exit(127)
    return pid


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

    def finish(pid: int, status: int) -> None:
        report = running.get(pid)
        if report is None:
            return  # an orphan of some command, reaped as the namespace's init
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
                    pid = _start(json.loads(data), fds[1], fds[2], report)
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

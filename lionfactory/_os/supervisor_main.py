"""The supervisor: one long-lived process inside a branch's sandbox that starts its commands.

Run as a script inside the confinement (``python -I -S supervisor_main.py FD``),
never imported by the package. ``FD`` is one end of a ``SOCK_SEQPACKET``
socket pair whose other end the parent keeps. Every message on it is a
request to start a command: JSON ``{"argv", "cwd", "env"}`` with three file
descriptors attached (``SCM_RIGHTS``): a per-command socket, and the
command's stdout and stderr. On the per-command socket the supervisor answers
``{"pid": N, "namespace": BOOL}`` once the command is handed to its namespace
(``N`` is the id of the command's process group; ``namespace`` false when the
kernel refused the command a PID namespace of its own), ``{"exec_error": "..."}`` if it could not
be executed, and ``{"exit": STATUS}`` when it ended (negative: a signal);
the parent may send ``{"kill": true}`` there, and closing it kills the
command too. Each command runs in a new session, and when it ends (or is
killed) its whole process group is killed with it, as for a call without the
supervisor. When the parent's end closes, every command is killed and the
supervisor exits, which ends the sandbox.

Why: the commands of one branch then share the sandbox's network namespace
and ``/tmp``, so a server started in the background answers a later call
even with no network beyond the branch's own loopback; and starting a
command costs a message and a ``posix_spawn`` instead of a new sandbox.

How a command starts. Where the kernel allows it, every command gets a PID
namespace of its own (see `_prepare`), made *before* its request comes: a
*leader* (forked from the supervisor) starts a session and the namespace,
forks the namespace's first process, the *runner*, and exits. The runner
waits for its one request, starts the command with ``posix_spawn``, reaps
what the command orphans, and tells the supervisor the command's status
just before it exits; when it exits, the kernel kills everything left in
its namespace. The supervisor is the runner's parent (a subreaper), so it
reaps the runner and knows then that nothing of the command is left. A
fork of this interpreter and its exit cost about half a millisecond (page
tables, then copy-on-write faults on every page either side writes): the
two a command needs (leader, runner) happen while the previous command
runs, and the command itself is a vfork-and-exec, so the time from request
to exit is one message, one ``posix_spawn`` and one process exit.

With ``--reuse-namespaces`` (the unconfined default's supervisor, where a
namespace only keeps a command's processes from outliving it) a runner does
not exit after its command: as its namespace's init it kills and reaps
everything left in it, reports, and waits for the next request. An emptied
namespace is as good as a new one for that purpose, and a machine busy
enough that the forks cannot be hidden behind the previous command (each
costs more than the command on a loaded two-CPU machine) then pays none.

Lending (reuse only). A request carrying one descriptor, a reply socket,
asks for a ready runner: the answer ``{"namespace": true, "runner": PID}``
carries the runner's channel and a pidfd of it, and from then on the parent
sends that runner its commands and reads its answers itself (the wait
status and pid of the command packed as `ANSWER`, or ``{"status":
WAIT_STATUS, "exec_error": "..."}`` when it could not start), so
a command costs one message each way and no hop through the supervisor;
killing the runner (its namespace's init) ends everything in its namespace.
The answer is ``{"namespace": false}`` without descriptors where none can be
had. The supervisor stays the runner's parent: it kills the runner's group
when the runner ends and when the parent goes. A runner the parent does not
need any more comes back with ``{"return": PID}`` and its channel, and waits
idle here for the next lend.
"""

from __future__ import annotations

import _json
import array
import contextlib
import ctypes
import os
import selectors
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable

_MAX_MESSAGE = 1 << 20
# Room for the three descriptors a request carries (``SCM_RIGHTS``).
_FDS_SPACE = socket.CMSG_SPACE(3 * array.array("i").itemsize)


# A started command's answer: its wait status and pid, as two native ints.
# Every call has one, and the caller reads it with ``struct`` instead of a
# JSON parser (JSON stays for the rare answer that carries an exec error,
# which is never this size: it holds at least ``{"status": N, "exec_error"``).
ANSWER = struct.Struct("=ii")


def _unencodable(value: object) -> object:
    raise TypeError(f"not JSON: {value!r}")


class _Decoding:
    """What ``_json.make_scanner`` reads off its context: the defaults of ``json.loads``."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # NaN, Infinity, -Infinity


# JSON through the C half of `json` only: the package `json` imports `re`
# (and `re` its compiler), which a supervisor pays for on every first call;
# its messages are small objects of strings, numbers and booleans.
_ENCODE = _json.make_encoder(
    None, _unencodable, _json.encode_basestring_ascii, None, ": ", ", ", False, False, True
)
# typeshed types the context as a scanner; any object with its attributes serves.
_SCAN = _json.make_scanner(_Decoding())  # type: ignore[arg-type]


def _dumps(message: dict[str, object]) -> bytes:
    return "".join(_ENCODE(message, 0)).encode()


def _loads(data: bytes | memoryview) -> object:
    """``json.loads(data)``; the package `json` is imported only to word an error.

    The C scanner words its errors through ``json.decoder`` (a SystemError
    when that is not imported): a document it does not read whole goes to
    ``json.loads``, which reads it the same way or raises its ValueError.
    """
    text = str(data, "utf-8")
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, ValueError, SystemError):
        end = -1
    if end != len(text):
        import json  # here: only a broken message needs it

        return json.loads(text)
    return value


def _fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return list(fds)


def _send(sock: socket.socket, message: dict[str, object]) -> None:
    with contextlib.suppress(OSError):  # the parent gave up on this command
        sock.send(_dumps(message))


# Leaders forked and not reaped yet: only these may be signalled by number
# (an unreaped process, a zombie too, keeps its number from reuse).
_UNREAPED: set[int] = set()


def _kill_group(pgid: int) -> None:
    """Kill group `pgid`; callers hold an unreaped member of it (see `main`'s ``reap``).

    A group's number cannot be handed out again while any process, a zombie
    included, still has it as its group; so a kill sent while one of its
    members is unreaped reaches that group and no other. The leader is also
    killed by pid (a kill that comes before it called ``setsid()`` finds no
    group yet), but only while it is unreaped.
    """
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)
    if pgid in _UNREAPED:
        with contextlib.suppress(OSError):
            os.kill(pgid, signal.SIGKILL)


_CLONE_NEWUSER, _CLONE_NEWPID = 0x10000000, 0x20000000


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded once; forked commands inherit it


def _libc() -> ctypes.CDLL:
    return _LIBC


def _write_only(path: str, _flags: int) -> int:
    return os.open(path, os.O_WRONLY)  # no O_CREAT, no O_TRUNC: a /proc file as it is


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
        # Unbuffered: one write(2), as these files require.
        with (
            contextlib.suppress(OSError),
            open(f"/proc/self/{name}", "wb", 0, opener=_write_only) as file,
        ):
            file.write(text.encode())
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


# What Python ignores at start-up and an ignored disposition would carry
# through exec: a command gets them at their defaults, as from a shell.
_PYTHON_IGNORES = tuple(
    getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, name)
)
# The signals ``posix_spawn`` sets to their defaults in the child: those
# two, and every one not ignored when this script started (an ignored one
# stays ignored, as through a shell or ``subprocess``). The C library
# resets each signal in the child anyway, before the exec (it shares our
# memory, so no handler of ours may run there): one it is told to set costs
# one ``sigaction``, any other a query and then a set, and the parent waits
# for all of them. Named, the 64 cost half of the 128 calls.
# Plain numbers: ``posix_spawn`` converts each one on every call.
_RESET_SIGNALS = tuple(
    int(sig)
    for sig in sorted(signal.valid_signals())
    if sig not in (signal.SIGKILL, signal.SIGSTOP)
    and (sig in _PYTHON_IGNORES or signal.getsignal(sig) is not signal.SIG_IGN)
)


def _candidates(program: str, env: dict[str, str]) -> list[str]:
    """Where execvpe(3) would look for `program`, in order (``os._execvpe``'s rules)."""
    if os.path.dirname(program):
        return [program]
    path = env.get("PATH", os.defpath)
    return [os.path.join(directory, program) for directory in path.split(os.pathsep)]


def _runner(channel: socket.socket, reusable: bool) -> None:
    """The namespace's first process: run commands, report each one's status.

    Waits for a request on `channel` (with the command's stdout and
    stderr), starts the command, reaps every process the command orphans
    (they are reparented to the first process of their namespace), and
    sends its wait status and pid (`ANSWER`; ``{"status": WAIT_STATUS,
    "exec_error": "..."}`` when it could not start). An end of file
    instead of a request means the supervisor is gone. Without a namespace
    of its own (not `reusable`) it exits after the one command. As a
    namespace's init it empties the namespace first (`_empty_namespace`)
    and then waits for the next request: the namespace is as good as new,
    and the next command costs no fork at all.
    """
    # One buffer for every request: ``recvmsg`` would allocate (and map) a
    # megabyte for each.
    buffer = bytearray(_MAX_MESSAGE)
    while True:
        _run_one(channel, reusable, buffer)
        if not reusable:
            os._exit(0)


def _empty_namespace() -> None:
    """Kill and reap every other process of this PID namespace (we are its init).

    ``kill(-1)`` from a namespace's init reaches every process of the
    namespace but itself, and a process with SIGKILL pending cannot fork,
    so none is made meanwhile; orphans come to us, so when nothing is left
    to reap, nothing is left at all. For the same reason a runner with no
    child at all has nothing to kill, and skips ``kill(-1)``: the kernel
    serves it by walking every process of the machine.
    """
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return
    with contextlib.suppress(OSError):
        os.kill(-1, signal.SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


# The last request a runner read, and what it parsed it into (read, never
# changed): an agent runs one command again and again, and its request is
# mostly the environment, which parsing turns into a new dictionary each time.
_PARSED: dict[bytes, dict[str, object]] = {}


def _run_one(channel: socket.socket, reusable: bool, buffer: bytearray) -> None:
    try:
        size, ancillary, _flags, _addr = channel.recvmsg_into(
            [buffer], _FDS_SPACE, socket.MSG_CMSG_CLOEXEC
        )
    except OSError:
        os._exit(1)
    streams = _fds(ancillary)
    if not size or len(streams) != 2:
        os._exit(1)
    message: dict[str, object] | bytes
    data = bytes(memoryview(buffer)[:size])
    try:
        request = _PARSED.get(data)  # the last request again: parsed then
        if request is None:
            parsed = _loads(data)
            if not isinstance(parsed, dict):
                raise TypeError("not an object")
            _PARSED.clear()
            request = _PARSED[data] = parsed
    except (ValueError, TypeError) as exc:
        command: int | str = f"bad request: {exc}"
    else:
        command = _spawn(request, streams)
    # Only the command holds its streams now: they end when nothing of it
    # is left (or, where the caller holds them too, when it says so).
    for fd in streams:
        os.close(fd)
    if isinstance(command, str):
        message = {"status": 127 << 8, "exec_error": command}  # as an exec failure
    else:
        while True:
            try:
                done, code = os.waitpid(-1, 0)
            except ChildProcessError:
                os._exit(1)
            if done == command:
                message = ANSWER.pack(code, command)
                break
    if reusable:
        _empty_namespace()
    try:
        channel.send(message if isinstance(message, bytes) else _dumps(message))
    except OSError:
        os._exit(0)  # the supervisor gave up on us


def _spawn(request: dict[str, object], streams: list[int]) -> int | str:
    """Start the command with ``posix_spawn`` (a vfork and an exec); the reason when it cannot.

    A fork of this interpreter would cost about half a millisecond (its
    page tables, then copy-on-write faults on every page either side
    writes), and ``os.execvpe`` imports `warnings` in the child first;
    ``posix_spawn`` shares the memory until the exec. The program is looked
    up on the request's ``PATH`` as ``os.execvpe`` would, by the C library
    in the child (``posix_spawnp``, with that ``PATH`` made ours first): a
    ``stat`` and a Python exception for every directory that lacks the
    program cost the runner, on the critical path of every call, about as
    much as the ``posix_spawn`` itself. Only when that fails does the walk
    run here (`_walk`), which starts what ``os.execvpe`` would start and
    otherwise names the candidate whose failure is the answer. The runner's
    working directory is the command's. The command's stdout and stderr
    are `streams`, set up in the child only.
    """
    argv, env, cwd = request.get("argv"), request.get("env"), request.get("cwd")
    if not (isinstance(argv, list) and isinstance(env, dict) and isinstance(cwd, str)):
        return "bad request: argv, env and cwd must be a list, an object and a string"
    # Passed on as parsed: ``posix_spawn`` refuses an argument or variable
    # that is not a string itself (a TypeError, reported below).
    try:
        if not argv:
            raise ValueError("empty argv")
        os.chdir(cwd)
        outputs = [(os.POSIX_SPAWN_DUP2, streams[0], 1), (os.POSIX_SPAWN_DUP2, streams[1], 2)]
        program = argv[0]
        if isinstance(program, str) and "/" not in program:
            _search_path(env.get("PATH"))
            try:
                return _start(os.posix_spawnp, program, argv, env, outputs)
            except OSError:
                pass  # worded (or started after all) by the walk below
        return _walk(argv, env, outputs)
    except BaseException as exc:
        return _reason(exc)


# The ``PATH`` ``posix_spawnp`` searches: this process's own (its child
# shares our memory until the exec), set to each request's. Most requests
# name the one the last did, which costs a comparison.
_SEARCHED: list[object] = [os.environ.get("PATH")]


def _search_path(path: object) -> None:
    if path == _SEARCHED[0]:
        return
    if isinstance(path, str):
        os.environ["PATH"] = path
    else:
        # No PATH (or not a string): the C library's default, which is
        # ``os.defpath``, what ``os.execvpe`` falls back to.
        os.environ.pop("PATH", None)
    _SEARCHED[0] = path


def _start(
    spawn: Callable[..., int],
    path: str,
    argv: list[str],
    env: dict[str, str],
    outputs: list[tuple[int, int, int]],
) -> int:
    """`spawn` (``posix_spawn`` or ``posix_spawnp``) of `path`, signals reset, streams set."""
    return spawn(path, argv, env, file_actions=outputs, setsigdef=_RESET_SIGNALS, setsigmask=())


def _walk(argv: list[str], env: dict[str, str], outputs: list[tuple[int, int, int]]) -> int:
    """``os.execvpe``'s lookup: a name that is not there is skipped, any other failure kept.

    Raises:
        OSError: nothing started; the kept failure (or the last one), naming its path.
    """
    program = argv[0]
    if not isinstance(program, str):
        raise TypeError("argv must hold strings")
    saved: OSError | None = None
    last: OSError | None = None
    for path in _candidates(program, env):
        try:
            os.stat(path)
            return _start(os.posix_spawn, path, argv, env, outputs)
        except (FileNotFoundError, NotADirectoryError) as exc:
            last = exc
        except OSError as exc:
            last = exc
            saved = saved or exc
    error = saved or last
    raise error if error is not None else FileNotFoundError(2, "No such file", program)


class _Spare:
    """A namespace made ready before its command: its leader, and a channel to its runner."""

    __slots__ = ("channel", "leader", "runner")

    def __init__(self, leader: int, channel: socket.socket) -> None:
        self.leader = leader  # the session and process group of the command
        self.channel = channel
        self.runner = 0  # known once the leader said (`ready`)

    def ready(self) -> bool:
        """Wait for the leader's word (it forks the runner at once); False if it failed."""
        if self.runner:
            return True
        self.channel.settimeout(_READY_TIMEOUT)
        try:
            data = self.channel.recv(64)
        except OSError:
            data = b""
        self.channel.setblocking(False)
        if len(data) != _PID.size:
            return False
        self.runner = _PID.unpack(data)[0]
        if self.runner > 0:
            _UNREAPED.add(self.runner)
        return self.runner > 0

    def discard(self) -> None:
        # Its group's number is ours only while the leader or the runner is unreaped.
        if self.leader in _UNREAPED or self.runner in _UNREAPED:
            _kill_group(self.leader)
        self.channel.close()


_PID = struct.Struct("i")
# Emptied namespaces kept for the next commands (more run at once only
# when commands overlap; a few cover a burst of concurrent calls).
_IDLE = 4
_READY_TIMEOUT = 30.0
_PR_SET_CHILD_SUBREAPER = 36


def _prepare(namespaces: bool, reuse: bool = False) -> _Spare:
    """Fork the leader of the next command's session and namespace (see the module's docstring).

    The leader starts a new session and, when `namespaces` and the kernel
    allow it, a PID namespace whose first process (the runner) it forks
    before exiting; it sends the runner's pid. Without a namespace the
    leader is the runner itself: the group kill then ends what the command
    leaves, except a process that started a session of its own.
    """
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid:
        _UNREAPED.add(pid)
        theirs.close()
        return _Spare(pid, mine)
    # The leader: nothing of the supervisor's own may leak into the command.
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        mine.close()
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        _close_all_but({theirs.fileno()})
        own = namespaces and _enter_pid_namespace()
        runner = os.fork() if own else 0
        if runner:
            theirs.send(_PID.pack(runner))
            os._exit(0)
        if not own:
            theirs.send(_PID.pack(os.getpid()))
    except BaseException:
        os._exit(126)
    _runner(theirs, bool(own) and reuse)
    os._exit(1)  # not reached


class _Command:
    """A command the supervisor handed to a runner."""

    __slots__ = ("channel", "group", "report", "spare")

    def __init__(self, spare: _Spare, report: socket.socket) -> None:
        self.spare = spare  # the runner's namespace: reused when the command is done
        self.group = spare.leader
        self.report = report
        self.channel = spare.channel


def read_answer(data: bytes) -> object:
    """A runner's answer as ``{"status", "pid"}`` (`ANSWER`'s two numbers), or as sent (JSON)."""
    if len(data) == ANSWER.size:
        status, pid = ANSWER.unpack(data)
        return {"status": status, "pid": pid}
    return _loads(data)


def _word(channel: socket.socket) -> dict[str, object] | None:
    """The runner's report on `channel`, or None when it has sent none (or died)."""
    try:
        data = channel.recv(65536)
        message = read_answer(data) if data else None
    except (OSError, ValueError):
        return None
    if not isinstance(message, dict) or not isinstance(message.get("status"), int):
        return None
    return message


def _outcome(message: dict[str, object] | None, wait_status: int) -> tuple[int, str | None]:
    """The command's exit code and exec error, from its runner's word or the runner's own end."""
    if message is None:
        message = {"status": wait_status}  # the runner was killed before it could tell
    status = message["status"]
    assert isinstance(status, int)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    error = message.get("exec_error")
    return code, None if error is None else str(error)


def main(control_fd: int, *, namespaces: bool = True, reuse: bool = False) -> None:
    control = socket.socket(fileno=control_fd)
    # Runners whose leader has exited are reparented to us, not to the
    # sandbox's init, so we reap them and learn that their command is over.
    _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, "control")
    selector.register(wake_read, selectors.EVENT_READ, "wake")
    running: dict[int, _Command] = {}  # runner pid -> its command
    by_socket: dict[int, int] = {}  # report socket fd -> the command's group
    # `namespaces` turns False when a leader could not make one (and is
    # False from the start with --no-namespaces).
    spare: _Spare | None = _prepare(namespaces, reuse)
    # Namespaces whose command is done and that were emptied by their
    # runner: the next commands' (the newest first), at no fork's cost.
    idle: list[_Spare] = []
    by_channel: dict[int, int] = {}  # a running command's channel fd -> its runner pid
    buffer = bytearray(_MAX_MESSAGE)

    reaped: list[tuple[int, int]] = []
    # Runners lent to the parent (`lend`): runner pid -> its leader (its group).
    lent: dict[int, int] = {}

    def reap() -> None:
        """Reap every exited child; a runner's group is killed first, while it is a zombie."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == 0:
                return
            pid = info.si_pid
            command = running.get(pid)
            if command is not None:
                # Still unreaped, the runner keeps its group's number: what
                # the command left in the group dies now, by that number.
                _kill_group(command.group)
            elif pid in lent:
                # Its namespace died with it; what is left in its group dies now.
                _kill_group(lent.pop(pid))
            elif spare is not None and pid == spare.runner:
                _kill_group(spare.leader)
            else:
                for waiting in idle:
                    if waiting.runner == pid:
                        idle.remove(waiting)
                        _kill_group(waiting.leader)
                        waiting.channel.close()
                        break
            try:
                _done, status = os.waitpid(pid, 0)
            except ChildProcessError:
                continue
            _UNREAPED.discard(pid)
            reaped.append((pid, status))

    def finish(pid: int, status: int) -> None:
        command = running.pop(pid, None)
        if command is None:
            return  # a leader, or an orphan of some command (we are a subreaper)
        code, error = _outcome(_word(command.channel), status)
        # What the command left running was killed in `reap` (before its
        # runner was reaped), and the exit is reported only once the group
        # is gone, so "done" means no process. Only signal 0 from here on:
        # a group whose last member is gone may have a new owner.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            try:
                os.killpg(command.group, 0)
            except OSError:
                break
            reap()  # members reparented to us
            time.sleep(0.001)
        forget(command)
        command.channel.close()
        tell(command, code, error)

    def done(pid: int) -> None:
        """The runner `pid` said its command is over, and its namespace is empty again."""
        command = running.get(pid)
        if command is None:
            return
        message = _word(command.channel)
        if message is None:
            return  # it died instead: its end is reaped (`finish`)
        del running[pid]
        forget(command)
        code, error = _outcome(message, 0)
        if len(idle) < _IDLE:
            idle.append(command.spare)
        else:
            command.spare.discard()
        tell(command, code, error)

    def forget(command: _Command) -> None:
        by_channel.pop(command.channel.fileno(), None)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(command.channel)
        by_socket.pop(command.report.fileno(), None)

    def tell(command: _Command, code: int, error: str | None) -> None:
        report = command.report
        if error is not None:
            _send(report, {"exec_error": error})
        _send(report, {"exit": code})
        with contextlib.suppress(KeyError, ValueError):  # gone when the parent closed it
            selector.unregister(report)
        report.close()

    def hand_over(data: bytes, outputs: array.array[int]) -> _Spare | None:
        """Give the request to a ready runner: an idle one's, the spare's, else a fresh one's."""
        nonlocal spare, namespaces
        for _attempt in range(2 + len(idle)):
            if idle:
                chosen = idle.pop()
            else:
                chosen = spare if spare is not None else _prepare(namespaces, reuse)
                spare = None
            if chosen.ready():
                if chosen.runner == chosen.leader:
                    namespaces = False  # the kernel refused: leaders run commands themselves
                try:
                    chosen.channel.sendmsg(
                        [data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, outputs)]
                    )
                except OSError:
                    pass  # the runner is gone (killed, out of memory): try a fresh one
                else:
                    return chosen
            chosen.discard()
        return None

    def lend(reply_fd: int) -> None:
        """Hand a ready namespace's runner to the parent, who then talks to it directly.

        Only with reuse (a lent runner serves command after command): the
        reply carries the runner's channel and a pidfd of it, so the parent
        starts each command with one message to the runner and kills the
        whole namespace by killing its init. The supervisor keeps the
        runner as its child (a subreaper) and kills its group when it ends
        or when the parent goes. Where no namespace can be had the reply
        says ``{"namespace": false}`` and carries no descriptor.
        """
        nonlocal spare, namespaces
        reply = socket.socket(fileno=reply_fd)
        try:
            chosen: _Spare | None = None
            for _attempt in range(2 + len(idle)):
                if not (namespaces and reuse):
                    break
                if idle:
                    chosen = idle.pop()
                else:
                    chosen = spare if spare is not None else _prepare(namespaces, reuse)
                    spare = None
                if chosen.ready() and chosen.runner != chosen.leader:
                    break
                if chosen.runner and chosen.runner == chosen.leader:
                    namespaces = False  # the kernel refused one: nothing to lend
                chosen.discard()
                chosen = None
            if chosen is None:
                _send(reply, {"namespace": False})
                return
            try:
                pidfd = os.pidfd_open(chosen.runner)
            except OSError:
                chosen.discard()
                _send(reply, {"namespace": False})
                return
            try:
                fds = array.array("i", [chosen.channel.fileno(), pidfd])
                with contextlib.suppress(OSError):  # the parent gave up: the runner ends
                    word = _dumps({"namespace": True, "runner": chosen.runner})
                    reply.sendmsg([word], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            finally:
                os.close(pidfd)
                chosen.channel.close()
            lent[chosen.runner] = chosen.leader
            if spare is None and not idle:
                spare = _prepare(namespaces, reuse)
        finally:
            reply.close()

    def take_back(data: bytes, fd: int) -> None:
        """A lent runner the parent has no use for now: kept idle here, for a later lend."""
        channel = socket.socket(fileno=fd)
        try:
            request = _loads(data)
            runner = int(request["return"]) if isinstance(request, dict) else 0
        except (ValueError, TypeError, KeyError):
            runner = 0
        leader = lent.pop(runner, 0)
        if not leader:
            channel.close()  # not one of ours (or it died meanwhile)
            return
        back = _Spare(leader, channel)
        back.runner = runner
        if len(idle) < _IDLE:
            idle.append(back)
        else:
            back.discard()

    def start(data: bytes, fds: list[int]) -> None:
        nonlocal spare
        report = socket.socket(fileno=fds[0])
        try:
            chosen = hand_over(data, array.array("i", fds[1:]))
        finally:
            os.close(fds[1])
            os.close(fds[2])
        if chosen is None:
            _send(report, {"exec_error": "the supervisor could not prepare the command's session"})
            _send(report, {"exit": 127})
            report.close()
            return
        command = running[chosen.runner] = _Command(chosen, report)
        by_socket[report.fileno()] = chosen.leader
        selector.register(report, selectors.EVENT_READ, "report")
        own = chosen.runner != chosen.leader
        if own and reuse:
            # Its runner says when the command is done, and stays for the next one.
            by_channel[chosen.channel.fileno()] = chosen.runner
            selector.register(chosen.channel, selectors.EVENT_READ, "channel")
        _send(report, {"pid": chosen.leader, "namespace": own})
        if spare is None and not idle:
            # The next command's namespace, made while this one runs.
            spare = _prepare(namespaces, reuse)
        del command

    while True:
        for key, _events in selector.select():
            if key.data == "wake":
                os.read(wake_read, 4096)
                reap()
                while reaped:
                    finish(*reaped.pop(0))
            elif key.data == "channel":
                fileobj = key.fileobj
                assert isinstance(fileobj, socket.socket)
                runner = by_channel.get(fileobj.fileno(), 0)
                if runner:
                    done(runner)
                else:
                    with contextlib.suppress(KeyError, ValueError):
                        selector.unregister(fileobj)
            elif key.data == "control":
                try:
                    size, ancillary, _flags, _addr = control.recvmsg_into([buffer], _FDS_SPACE)
                    fds = _fds(ancillary)
                except OSError:
                    size, fds = 0, []
                if not size:
                    for command in running.values():
                        _kill_group(command.group)
                    for group in lent.values():
                        _kill_group(group)
                    if spare is not None:
                        spare.discard()
                    for waiting in idle:
                        waiting.discard()
                    return
                if len(fds) == 1:
                    if buffer.startswith(b'{"return"'):
                        take_back(bytes(buffer[:size]), fds[0])
                    else:
                        lend(fds[0])
                    continue
                if len(fds) != 3:
                    for fd in fds:
                        os.close(fd)
                    continue
                start(bytes(buffer[:size]), fds)
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
                group = by_socket.get(report.fileno(), 0)
                if group:
                    # A kill request, or the parent closed its end: either
                    # way the command and its group end now.
                    _kill_group(group)


if __name__ == "__main__":
    main(
        int(sys.argv[1]),
        namespaces="--no-namespaces" not in sys.argv[2:],
        reuse="--reuse-namespaces" in sys.argv[2:],
    )

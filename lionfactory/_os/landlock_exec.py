"""Confine this process with Landlock (and namespaces when it can), then exec a program.

Run as a script, never imported by the package at call time:

    python -I -S landlock_exec.py [-r PATH]... [-d PATH]... [-w PATH]... [-x PATH]...
        [-n none|loopback|full] [-p] [-D PID] -- PROGRAM ARG...

or ``--probe-namespaces`` (exit 0 when namespaces can be entered here).

``-r`` a read-only root (``/`` usually), ``-d`` a path to hide inside a
read-only root, ``-x`` a path to re-expose read-only inside a hidden one, ``-w``
a writable root, ``-n`` the network mode, ``-p`` a private PID namespace,
``-P`` only the PID namespace (no Landlock, no capability drop: the
unconfined ``"none"`` mechanism, which still must leave no process behind),
``-N`` never enter namespaces (what happens where the kernel refuses them;
tests use it to exercise the subreaper on a machine that allows them),
``-D PID`` die with the parent, whose process id is PID (SIGKILL when the
thread that started the helper exits; at once when that has happened
already): the init dies with the helper, so with a namespace nothing
outlives the caller, even one killed by SIGKILL. As a subreaper only the
program dies with the helper; what it started itself is reparented.

Process tree with ``-p`` (or ``-P``) where namespaces can be entered::

    helper (host PID namespace, leads the call's process group)
      `- init (PID 1 of the new namespace, unconfined, only reaps)
           `- the program (confined)

The program is never PID 1: PID 1 could clear its own parent-death signal
and ``setsid()`` out of the call's process group, and the namespace lives as
long as its PID 1 does. The init stays in the process group (nothing inside
can move it), dies with the group kill or with the helper (parent-death
signal), and the kernel then kills everything left in the namespace.

Where namespaces cannot be entered the helper becomes a child subreaper:
everything the program leaves, ``setsid()`` or not, is reparented to the
helper, which kills it when the program exits or the helper is asked to stop
(``SIGTERM``/``SIGINT``/``SIGHUP``).

With ``-n none`` a seccomp filter also refuses ``socket(AF_UNIX, ...)`` and
``io_uring_setup`` (``EPERM``): Landlock does not govern ``connect()`` to a
Unix socket's path, so a host service listening on one (a Docker, SSH or GPG
agent socket) would otherwise stay reachable. ``socketpair()`` is unaffected
(event loops use it internally).

Why a script run with ``-I -S``: Landlock confines the calling thread and what
it execs, so it must run in the child between fork and exec. The standard
library's ``subprocess`` only offers ``preexec_fn`` for that, which is unsafe
in a threaded parent and not reachable through anyio; a helper that applies
the rules and then execs the program costs one interpreter start (no site
import, stdlib only: ctypes and os) and nothing after. A C helper would be
faster but is a compiled extension to ship.

Landlock rules only *add* access beneath a directory; nothing can be taken
away below a granted one. A hidden path is therefore carved out by granting
read access to each of its siblings (listed now), recursively up to the
read-only root: entries created later beside a hidden path stay unreadable.
The folders on the way get listing only, where that lists nothing hidden
(see `_read_rules`).

Exit status 126 means the confinement could not be applied (the message is on
stderr); 127 that the program could not be executed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

# Syscall numbers are the same in the generic table (arm64, riscv) and x86-64.
_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446
_CREATE_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2
_PR_SET_NO_NEW_PRIVS, _PR_SET_PDEATHSIG, _PR_CAPBSET_DROP = 38, 1, 24
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
_PR_SET_CHILD_SUBREAPER, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 36, 22, 2

_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_TRUNCATE, _IOCTL_DEV = 1 << 14, 1 << 15
_READ = _EXECUTE | _READ_FILE | _READ_DIR
# Rights that make sense on a file (the kernel refuses directory rights on one).
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV
# Every filesystem right of each ABI version (index = version).
_FS_BY_ABI = [0, (1 << 13) - 1, (1 << 14) - 1, (1 << 15) - 1, (1 << 15) - 1] + [(1 << 16) - 1] * 8
_NET_BIND, _NET_CONNECT = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1
# Character devices a program legitimately writes to; block devices stay read-only.
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
_DEVICE_DIRS = ("/dev/pts", "/dev/fd")


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (
        ("allowed_access", ctypes.c_uint64),
        ("parent_fd", ctypes.c_int32),
    )


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _fail(message: str) -> None:
    os.write(2, f"lionfactory confinement: {message}\n".encode(errors="replace"))
    os._exit(126)


def _syscall(number: int, *args: object) -> int:
    result = int(_libc.syscall(number, *args))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is absent or disabled."""
    try:
        return _syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_VERSION))
    except OSError:
        return 0


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _read_rules(
    root: str, hidden: list[str], folders: list[str] | None = None
) -> list[tuple[str, int]]:
    """`root` minus the hidden paths, as (path, access) rules: siblings of hidden paths readable.

    A folder that holds a hidden path gets listing only (``READ_DIR``) when no
    hidden directory lies anywhere beneath it, so ``ls``, git and type
    checkers see a hidden file's name (as under bwrap, whose ``/dev/null``
    over it keeps the name) while its bytes stay unreadable: ``READ_DIR``
    never opens a file. Where a hidden directory lies beneath, the folder
    gets no rule at all: Landlock rules are inherited by everything below,
    so ``READ_DIR`` on the folder would list inside the hidden directory too
    (its file names leak), and no rule can take that back. A hidden path
    that does not exist now counts as a file: bwrap does not hide it at all.
    `folders`, the hidden paths that are directories, is found once, at the top.
    """
    if folders is None:
        folders = [h for h in hidden if os.path.isdir(h)]
    if any(_under(root, h) for h in hidden):
        return []
    if not any(_under(h, root) for h in hidden):
        return [(root, _READ)]
    out: list[tuple[str, int]] = []
    if not any(_under(h, root) for h in folders):
        out.append((root, _READ_DIR))
    try:
        entries = os.scandir(root)
    except OSError:
        return out
    with entries:
        for entry in entries:
            # A symlink gets no rule: what it names is reached through its target's own rule.
            if not entry.is_symlink():
                out.extend(_read_rules(entry.path, hidden, folders))
    return out


def _add_path(ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path that does not exist needs no rule
    try:
        if not os.path.isdir(path):
            access &= _FILE_RIGHTS
        attr = _PathBeneath(access, fd)
        _syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(attr), 0)
    finally:
        os.close(fd)


def _loopback_up() -> bool:
    """Bring up ``lo`` in a fresh network namespace (it starts down); False if refused."""
    import fcntl
    import socket
    import struct

    iff_up, iff_loopback, iff_running, siocsifflags = 0x1, 0x8, 0x40, 0x8914
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            request = struct.pack("16sH14s", b"lo", iff_up | iff_loopback | iff_running, b"")
            fcntl.ioctl(sock, siocsifflags, request)
    except OSError:
        return False
    return True


def _restrict(
    abi: int,
    reads: list[str],
    hidden: list[str],
    exposed: list[str],
    writes: list[str],
    net: str,
    *,
    own_netns: bool = False,
) -> None:
    all_fs = _FS_BY_ABI[min(abi, len(_FS_BY_ABI) - 1)]
    # In a network namespace of its own (nothing but its loopback) the
    # process needs no TCP rules: its loopback is the branch's to use.
    tcp_rules = net == "none" and not own_netns
    handled_net = _NET_BIND | _NET_CONNECT if abi >= 4 and tcp_rules else 0
    scoped = 0
    if abi >= 6:
        scoped = _SCOPE_SIGNAL | (_SCOPE_ABSTRACT_UNIX if net == "none" else 0)
    attr = _RulesetAttr(all_fs, handled_net, scoped)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), 0)
    for root in reads:
        for path, access in _read_rules(root, hidden):
            _add_path(ruleset, path, access)
    for path in exposed:
        # A credential file inside an exposed toolchain prefix stays hidden.
        inside = [h for h in hidden if h != path and _under(h, path)]
        for sub, access in _read_rules(path, inside):
            _add_path(ruleset, sub, access)
    device = _READ_FILE | _WRITE_FILE | (_TRUNCATE if abi >= 3 else 0)
    device |= _IOCTL_DEV if abi >= 5 else 0
    for path in _DEVICES:
        _add_path(ruleset, path, device)
    for path in _DEVICE_DIRS:
        _add_path(ruleset, path, device | _READ_DIR)
    for path in writes:
        _add_path(ruleset, path, all_fs)
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    _syscall(_SYS_RESTRICT, ruleset, 0)
    os.close(ruleset)


# Classic BPF over struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}.
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_RET_K = 0x20, 0x15, 0x06
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _AF_UNIX = 1, 1
_OFF_NR, _OFF_ARCH, _OFF_ARG0 = 0, 4, 16
# Per architecture the kernel may run a syscall in: (audit arch, socket nrs,
# io_uring_setup nrs, nrs refused outright). x86-64 also runs x32 calls (the
# same numbers with bit 30 set) and i386 calls, whose socketcall() multiplexer
# hides the address family behind a pointer, so it is refused whole.
_X32 = 0x40000000
_ARCHES = {
    "x86_64": (
        (0xC000003E, (41, 41 | _X32), (425, 425 | _X32), ()),
        (0x40000003, (359,), (425,), (102,)),
    ),
    "aarch64": (
        (0xC00000B7, (198,), (425,), ()),
        (0x40000028, (281,), (425,), ()),
    ),
}


def unix_socket_filter(machine: str | None = None) -> bytes | None:
    """A seccomp program refusing AF_UNIX sockets and io_uring, or None off x86-64/arm64.

    Returns the raw ``struct sock_filter`` array: what bwrap's ``--seccomp``
    reads from a descriptor and what ``prctl(PR_SET_SECCOMP)`` takes.
    A filter cannot read ``connect()``'s address (a pointer), so the socket
    is refused where it is created: ``socket()``'s first argument is the
    family. io_uring can create and connect sockets without those syscalls.
    An architecture the filter does not know is refused outright: a 32-bit
    program on a 64-bit kernel cannot slip past it.
    """
    arches = _ARCHES.get(machine or os.uname().machine)
    if arches is None:
        return None
    program: list[tuple[int, int, int, int]] = []
    deny = (_BPF_RET_K, 0, 0, _RET_ERRNO | _EPERM)
    allow = (_BPF_RET_K, 0, 0, _RET_ALLOW)
    for arch, sockets, urings, refused in arches:
        body: list[tuple[int, int, int, int]] = [(_BPF_LD_W_ABS, 0, 0, _OFF_NR)]
        # Each test jumps to the matching return block below.
        checks = [(nr, "deny") for nr in (*urings, *refused)] + [(nr, "sock") for nr in sockets]
        tail: list[tuple[int, int, int, int]] = [
            allow,
            deny,
            (_BPF_LD_W_ABS, 0, 0, _OFF_ARG0),
            (_BPF_JEQ_K, 0, 1, _AF_UNIX),
            deny,
            allow,
        ]
        for index, (nr, target) in enumerate(checks):
            left = len(checks) - index - 1  # instructions after this check
            offset = left + (1 if target == "deny" else 2)
            body.append((_BPF_JEQ_K, offset, 0, nr))
        body += tail
        program.append((_BPF_LD_W_ABS, 0, 0, _OFF_ARCH))
        program.append((_BPF_JEQ_K, 0, len(body), arch))
        program += body
    program.append(deny)  # an architecture not listed
    return b"".join(
        code.to_bytes(2, "little")
        + jt.to_bytes(1, "little")
        + jf.to_bytes(1, "little")
        + k.to_bytes(4, "little")
        for code, jt, jf, k in program
    )


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def _deny_unix_sockets() -> None:
    """Install `unix_socket_filter` on this thread (needs no_new_privs set)."""
    program = unix_socket_filter()
    if program is None:
        _fail(f"no seccomp filter for {os.uname().machine}: Unix sockets cannot be refused")
        return
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def _drop_capabilities() -> None:
    """Empty the bounding set, so that the program execs with no capability.

    Landlock confines files and sockets whatever the uid, but a root process
    keeps its capabilities, and CAP_SYS_PTRACE alone would let it read (or
    take over) processes outside the sandbox. Without CAP_SETPCAP (not root)
    there is nothing to drop and the kernel says EPERM, which is fine.
    """
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break  # EINVAL: past the last capability this kernel knows


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _namespaces(pid: bool, net: bool) -> bool:
    """Enter new PID (and network) namespaces; False when the kernel refuses."""
    flags = (_CLONE_NEWPID if pid else 0) | (_CLONE_NEWNET if net else 0)
    if not flags:
        return False
    uid, gid = os.geteuid(), os.getegid()
    if uid != 0:
        flags |= _CLONE_NEWUSER
    if _libc.unshare(flags) != 0:
        return False
    if uid != 0:
        # Map ourselves to ourselves so file ownership looks the same inside.
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    return True


def _leave_like(status: int) -> None:
    """Exit with `status`, re-raising the signal that ended the program."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


def _wait_for(child: int) -> int:
    """Reap every child until `child` has exited; return its wait status."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(126)
        except InterruptedError:
            continue
        if pid == child:
            return status


def _supervise(init: int, report: int) -> None:
    """Wait for the namespace's init and leave with the program's status it reports."""
    status = _wait_for(init)
    data = os.read(report, 4)
    _leave_like(int.from_bytes(data, "little") if len(data) == 4 else status)


def _init(child: int, report: int) -> None:
    """PID 1 of the namespace: reap orphans until the program exits, then end the namespace.

    A signal cannot end PID 1 from inside its own namespace, so the
    program's wait status goes to the helper through a pipe instead.
    """
    status = _wait_for(child)
    os.write(report, status.to_bytes(4, "little"))
    os._exit(0)


def _children() -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/children") as listing:
                out += [int(pid) for pid in listing.read().split()]
        except OSError:
            continue
    return out


def _kill_descendants() -> None:
    """As a subreaper: kill and reap every descendant until none is left.

    An orphan is reparented to us, so every remaining descendant becomes a
    child in the end; a kill of each child (its own children follow it up).
    """
    while True:
        children = _children()
        if not children:
            try:
                while os.waitpid(-1, os.WNOHANG)[0] > 0:
                    pass
            except ChildProcessError:
                return
            continue
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for _pid in children:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                return


def _reap_as_subreaper(child: int) -> None:
    """Without namespaces: wait for the program, then kill whatever it left, and leave."""

    def stop(_sig: int, _frame: object) -> None:
        _kill_descendants()
        os._exit(128 + _sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    status = _wait_for(child)
    _kill_descendants()
    _leave_like(status)


def _which(program: str) -> str:
    if "/" in program:
        return program
    for folder in os.get_exec_path():
        candidate = os.path.join(folder, program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return program


def main(args: list[str]) -> None:
    """Parse the options, confine, exec; never returns."""
    if args == ["--probe-namespaces"]:
        # Exit status 0 when a PID and network namespace can be entered here.
        os._exit(0 if _namespaces(True, True) else 1)
    reads: list[str] = []
    hidden: list[str] = []
    exposed: list[str] = []
    writes: list[str] = []
    net, pid, only_pid, no_namespaces = "full", False, False, False
    dies_with_parent = False
    lists = {"-r": reads, "-d": hidden, "-x": exposed, "-w": writes}
    options = iter(args)
    argv: list[str] = []
    for flag in options:
        if flag == "--":
            argv = list(options)
            break
        if flag == "-N":
            no_namespaces = True
        elif flag in ("-p", "-P"):
            pid, only_pid = True, only_pid or flag == "-P"
        elif flag not in lists and flag not in ("-n", "-D"):
            _fail(f"unknown option {flag}")
        elif (value := next(options, None)) is None:
            _fail(f"option {flag} needs a value")
        elif flag == "-n":
            net = value
        elif flag == "-D":
            if not value.isdigit():
                _fail(f"option -D needs a process id, got {value!r}")
            _die_with(int(value))
            dies_with_parent = True
        else:
            lists[flag].append(value)
    if not argv:
        _fail("no program given")
    # /dev is never read wholesale: a block device (readable by root) holds
    # every hidden file's bytes. The character devices programs need are
    # granted one by one below.
    hidden.append("/dev")
    abi = 0 if only_pid else abi_version()
    if abi < 1 and not only_pid:
        _fail("Landlock is not available in this kernel")
    own_netns = False
    if pid:
        if not no_namespaces and _namespaces(True, net == "none" and not only_pid):
            # A private network namespace with its loopback up: the branch's
            # own processes reach each other there, the host's listeners not.
            own_netns = net == "none" and not only_pid and _loopback_up()
            reader, writer = os.pipe()
            init = os.fork()
            if init:
                os.close(writer)
                _supervise(init, reader)
            os.close(reader)
            # PID 1 of the new namespace. It dies with the helper (or with the
            # group kill, being in the group), and its death ends the namespace.
            # (Killed between the fork and this line, the helper took the
            # group kill, which reaches this process too.)
            _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            program_pid = os.fork()
            if program_pid:
                _init(program_pid, writer)
            os.close(writer)
        else:
            # No namespaces: everything the program leaves is reparented to us.
            if _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
                _fail("neither a PID namespace nor a child subreaper is available")
            helper = os.getpid()
            program_pid = os.fork()
            if program_pid:
                _reap_as_subreaper(program_pid)
            if dies_with_parent:
                # Killed by SIGKILL, the helper kills nothing it adopted; the
                # program at least dies with it.
                _die_with(helper)
    if only_pid:
        _exec(argv[0], argv)
    # Found before the rules apply: the lookup lazily imports modules that
    # may live in a hidden directory.
    program = _which(argv[0])
    _drop_capabilities()
    try:
        _restrict(abi, reads, hidden, exposed, writes, net, own_netns=own_netns)
        if net == "none":
            _deny_unix_sockets()
    except OSError as exc:
        _fail(f"could not apply Landlock rules: {exc}")
    _exec(program, argv)


def _die_with(parent: int) -> None:
    """SIGKILL this process when `parent` (its parent when started) is gone."""
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        # The parent died before the signal was set, which then never comes.
        os._exit(128 + signal.SIGKILL)


def _exec(program: str, argv: list[str]) -> None:
    # Python ignores these at start-up, and an ignored signal stays ignored
    # across exec: the program gets them at their defaults, as from a shell
    # (a pipeline's writer dies when its reader is gone).
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    try:
        os.execvp(program, argv)
    except OSError as exc:
        os.write(2, f"lionfactory confinement: cannot execute {argv[0]!r}: {exc}\n".encode())
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])

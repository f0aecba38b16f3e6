"""Confine this process with Landlock (and namespaces when it can), then exec a program.

Run as a script, never imported by the package at call time:

    python -I -S _landlock_exec.py [-r PATH]... [-d PATH]... [-w PATH]... [-x PATH]...
        [-n none|loopback|full] [-p] -- PROGRAM ARG...

or ``--probe-namespaces`` (exit 0 when namespaces can be entered here).

``-r`` a read-only root (``/`` usually), ``-d`` a path to hide inside a
read-only root, ``-x`` a path to re-expose read-only inside a hidden one, ``-w``
a writable root, ``-n`` the network mode, ``-p`` a private PID namespace.

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

Exit status 126 means the confinement could not be applied (the message is on
stderr); 127 that the program could not be executed.
"""

from __future__ import annotations

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
    os.write(2, f"lionfactory sandbox: {message}\n".encode(errors="replace"))
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


def _read_roots(root: str, hidden: list[str]) -> list[str]:
    """`root` minus the hidden paths, as a list of readable subtrees (siblings of hidden)."""
    if any(_under(root, h) for h in hidden):
        return []
    if not any(_under(h, root) for h in hidden):
        return [root]
    out: list[str] = []
    try:
        entries = os.scandir(root)
    except OSError:
        return out
    with entries:
        for entry in entries:
            # A symlink gets no rule: what it names is reached through its target's own rule.
            if not entry.is_symlink():
                out.extend(_read_roots(entry.path, hidden))
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
        for path in _read_roots(root, hidden):
            _add_path(ruleset, path, _READ)
    for path in exposed:
        _add_path(ruleset, path, _READ)
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


def _supervise(child: int) -> None:
    """Wait for the namespace's first process and leave with its status."""
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            os._exit(126)
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)


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
    net, pid = "full", False
    index = 0
    while index < len(args):
        flag = args[index]
        if flag == "--":
            index += 1
            break
        if flag == "-p":
            pid = True
            index += 1
            continue
        if index + 1 >= len(args):
            _fail(f"option {flag} needs a value")
        value = args[index + 1]
        if flag == "-r":
            reads.append(value)
        elif flag == "-d":
            hidden.append(value)
        elif flag == "-x":
            exposed.append(value)
        elif flag == "-w":
            writes.append(value)
        elif flag == "-n":
            net = value
        else:
            _fail(f"unknown option {flag}")
        index += 2
    argv = args[index:]
    if not argv:
        _fail("no program given")
    # /dev is never read wholesale: a block device (readable by root) holds
    # every hidden file's bytes. The character devices programs need are
    # granted one by one below.
    hidden.append("/dev")
    abi = abi_version()
    if abi < 1:
        _fail("Landlock is not available in this kernel")
    own_netns = False
    if _namespaces(pid, net == "none"):
        own_netns = net == "none" and _loopback_up()
        child = os.fork()
        if child:
            _supervise(child)
        # The first process of the new PID namespace: when it exits, the kernel
        # kills everything else in the namespace, setsid() or not.
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # Found before the rules apply: the lookup lazily imports modules that
    # may live in a hidden directory.
    program = _which(argv[0])
    _drop_capabilities()
    try:
        _restrict(abi, reads, hidden, exposed, writes, net, own_netns=own_netns)
    except OSError as exc:
        _fail(f"could not apply Landlock rules: {exc}")
    try:
        os.execv(program, argv)
    except OSError as exc:
        os.write(2, f"lionfactory sandbox: cannot execute {argv[0]!r}: {exc}\n".encode())
        os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])

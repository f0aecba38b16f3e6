"""Hide a credential file that appeared after a bwrap confinement was made, inside that confinement.

A branch's supervisor confinement lives as long as its jobs. Its mounts are
fixed when it starts, so a credential written later into an exposed
toolchain (``cargo login`` writing ``~/.cargo/credentials.toml``) would be
readable by a background job that is already running there. Under bwrap the
host can still change that confinement's mounts: the confinement's user namespace
is owned by the host user, so a host process that enters it holds every
capability there, and may enter the confinement's mount namespace and mount
over the new file (``/dev/null``, read-only) or folder (an empty read-only
tmpfs). Every process of the confinement (the supervisor and all its commands
share its mount namespace) loses the path at once; the branch keeps its
one confinement, so later commands still reach the job's loopback and ``/tmp``.

What cannot be undone: a file the job opened, or read, before the mount
stays open or read. The mount happens when the branch's next command (or
``jobs`` call) checks the hidden set, not the instant the file appears.

Landlock cannot do this: a Landlock domain is fixed for the processes
already restricted by it (only a process itself can narrow its own, and
never its running children's), so under Landlock a running job keeps what
its confinement could read, and only later commands get a confinement that hides
the new file.

The part that enters the namespaces must be a process of its own: a
multithreaded process may not join a user namespace, so this module is
also a small script (`main`), run with the interpreter's ``-I -S``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lionfactory._os.supervisor import Supervisor

__all__ = ["hide_appeared"]

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_NS_GET_USERNS = 0xB701  # _IO(0xb7, 0x1)
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND = 32, 4096
# How long the mounting helper may take (it starts a bare interpreter).
_HELPER_TIMEOUT = 10.0


def hide_appeared(supervisor: Supervisor) -> bool:
    """Hide, inside `supervisor`'s running confinement, the credential files that appeared since.

    Blocking (it runs a helper process): call it in a worker thread, as the
    supervisor is started.

    Returns:
        True when the confinement hides every credential file of its policy now
        (the supervisor's ``hidden`` set is updated); False when it cannot
        (not bwrap, the confinement's process is gone, the kernel refused), and
        the caller must give later commands a new confinement instead.
    """
    # Imported here: run as a script, this module has no package around it.
    from lionfactory._os.isolation import hidden_now

    if supervisor.isolation.mechanism != "bwrap" or not supervisor.alive:
        return False
    appeared = hidden_now(supervisor.isolation.policy) - supervisor.hidden
    if not appeared:
        return True
    inner = _confined_pid(supervisor.popen.pid)
    if inner is None:
        return False
    # New paths, and paths whose file was replaced (which dropped the mount).
    specs = [("d:" if path.is_dir() else "f:") + str(path) for path, _ in sorted(appeared)]
    argv = [sys.executable, "-I", "-S", __file__, str(inner), str(supervisor.popen.pid), *specs]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={},
            timeout=_HELPER_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    if done.returncode != 0:
        return False
    supervisor.hidden = supervisor.hidden | appeared
    return True


def _confined_pid(bwrap: int) -> int | None:
    """The process bwrap confined first: its only child, in the confinement's namespaces."""
    try:
        with open(f"/proc/{bwrap}/task/{bwrap}/children", encoding="ascii") as handle:
            children = handle.read().split()
    except OSError:
        return None
    return int(children[0]) if len(children) == 1 else None


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    return int(text.rsplit(b")", 1)[1].split()[1])


def main(argv: list[str]) -> int:
    """Enter the confinement of process ``argv[1]`` (a child of ``argv[2]``) and hide ``argv[3:]``.

    Each of ``argv[3:]`` is ``f:PATH`` (a file: ``/dev/null`` bound over it,
    read-only) or ``d:PATH`` (a folder: an empty read-only tmpfs). A path
    that does not exist inside (under the confinement's private ``/tmp``) has
    nothing to hide. Exit status 0 when every path is hidden.
    """
    pid, parent = int(argv[1]), int(argv[2])
    mnt = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    # Opened first, checked then: the descriptor names the namespace of
    # bwrap's child, not of a process that took a freed number since.
    if _parent_of(pid) != parent:
        return 3
    # The user namespace that owns the mount namespace (NS_GET_USERNS): an
    # unprivileged bwrap makes its mounts inside its user namespace, a
    # privileged one (run by root) before it unshares one, so the mounts
    # are then root's in the host's and nothing is to be entered.
    try:
        owner = fcntl.ioctl(mnt, _NS_GET_USERNS)
    except OSError:
        return 4
    libc = ctypes.CDLL(None, use_errno=True)
    foreign = os.fstat(owner).st_ino != os.stat("/proc/self/ns/user").st_ino
    if foreign and libc.setns(owner, _CLONE_NEWUSER) != 0:
        return 4
    if libc.setns(mnt, _CLONE_NEWNS) != 0:
        return 5
    status = 0
    for spec in argv[3:]:
        kind, path = spec[:1], os.fsencode(spec[2:])
        if kind == "d":
            flags = _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
            done = libc.mount(b"tmpfs", path, b"tmpfs", flags, b"size=4k,mode=0555")
        else:
            done = libc.mount(b"/dev/null", path, None, _MS_BIND, None)
            if done == 0:
                flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY
                done = libc.mount(None, path, None, flags, None)
        if done != 0 and ctypes.get_errno() != errno.ENOENT:
            status = 6
    return status


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main(sys.argv))
    sys.exit(1)

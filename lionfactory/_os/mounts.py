"""Which mounts hold a local filesystem: the check before a read on the event loop.

A read of a small file costs less than the worker-thread round trip it
would take (a third of a served 20 KB read), so the reader does it on the
event loop when nothing in it can wait: the lookup is in the kernel's cache
(``RESOLVE_CACHED``), every page is in the page cache (``RWF_NOWAIT``), and
the file lies on a local filesystem. The last one is this module: opening a
file on NFS, SMB, 9p or FUSE asks a server or a daemon, and may wait for
as long as it likes, before a single byte is read.

The filesystem of a mount is read from ``/proc/self/mountinfo``, once, and
again only after the mount table changed: the file polls with ``POLLPRI``
after any mount or unmount in the namespace, so a mount id that an unmount
freed and a new mount took over is never judged by the old table. Nothing
here waits for I/O (procfs is generated in memory), so it may run on the
event loop.
"""

from __future__ import annotations

import os
import select
import threading

__all__ = ["LOCAL_FILESYSTEMS", "is_local_mount", "mount_id"]

LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "bcachefs"})
"""Disk filesystems, whose open and cached reads never wait on another machine or process.

Deliberately short. ``overlay`` is left out: opening through it opens the
file on a lower layer, which may itself be a network filesystem. tmpfs
answers ``RWF_NOWAIT`` with EOPNOTSUPP (its pages may be in swap), so it
would never pass the read anyway. Anything not listed is read in a worker
thread, as every file was before.
"""

_MOUNTINFO = "/proc/self/mountinfo"


class _MountTable:
    """Each mount's filesystem type, read again whenever the mount table changed.

    The table's text is kept and only the lines asked about are parsed: a
    host running many containers has thousands of mounts, and their churn
    would otherwise have the whole table parsed on the event loop again
    after each change.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._poller: select.poll | None = None
        self._text = b""
        self._types: dict[int, str | None] = {}

    def filesystem(self, mount: int) -> str | None:
        """The filesystem type of mount id `mount`, or None when it is unknown."""
        with self._lock:
            if self._poller is None or self._poller.poll(0):
                # First use, or a mount or unmount since the last read (the
                # poll reports each change once, and only to this open file).
                self._text = self._read()
                self._types = {}
            if mount not in self._types:
                self._types[mount] = _filesystem_of(self._text, mount)
            return self._types[mount]

    def _read(self) -> bytes:
        if self._fd is None:
            self._fd = os.open(_MOUNTINFO, os.O_RDONLY | os.O_CLOEXEC)
            self._poller = select.poll()
            self._poller.register(self._fd, select.POLLPRI)
        chunks = []
        offset = 0
        while chunk := os.pread(self._fd, 65536, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"\n" + b"".join(chunks)

    def forget(self) -> None:
        """Drop the table and its descriptor (in a forked child: the parent's poll state)."""
        if self._fd is not None:
            os.close(self._fd)
        self._lock = threading.Lock()
        self._fd, self._poller, self._text, self._types = None, None, b"", {}


def _filesystem_of(text: bytes, mount: int) -> str | None:
    """The filesystem type on the line of mount id `mount` in `text` (after a newline)."""
    # "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw": the
    # optional fields end at " - ", and the filesystem type follows.
    start = text.find(b"\n%d " % mount)
    if start < 0:
        return None
    end = text.find(b"\n", start + 1)
    line = text[start + 1 : end if end >= 0 else len(text)]
    _, dash, tail = line.partition(b" - ")
    return tail.split(b" ", 1)[0].decode("utf-8", "replace") if dash and tail else None


_TABLE = _MountTable()
# A forked child shares the parent's open file, and with it the state the
# poll reports changes against: each process keeps its own.
os.register_at_fork(after_in_child=_TABLE.forget)


def mount_id(fd: int) -> int | None:
    """The id of the mount `fd` lies on (``mnt_id`` in ``/proc/self/fdinfo``), or None."""
    try:
        # os.open and one read, not open(): a buffered file object cost
        # three times the read, on every read the reader does on the loop.
        # ``mnt_id`` is among the first lines (pos, flags, mnt_id, ino).
        info = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            text = os.read(info, 4096)
        finally:
            os.close(info)
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(b":")
        if key == b"mnt_id":
            return int(value) if value.strip().isdigit() else None
    return None


def is_local_mount(mount: int | None) -> bool:
    """Whether mount id `mount` holds one of the `LOCAL_FILESYSTEMS`."""
    if mount is None:
        return False
    try:
        return _TABLE.filesystem(mount) in LOCAL_FILESYSTEMS
    except OSError:  # no procfs: nothing is known to be local
        return False

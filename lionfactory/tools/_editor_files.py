"""Safe file replacement for the editor: descriptors, locks, change checks, metadata.

Every operation here works relative to a descriptor of the target's parent
directory (``dir_fd=``), never by path, so a directory swapped for a symlink
mid-write cannot send the write elsewhere.

* `directory_lock` serialises writers of one directory: a thread lock within
  the process and ``flock`` on the directory across processes, so two
  lionfactory processes editing one file cannot lose each other's updates.
  A directory lock, not a lock file beside the target, because a lock file
  would litter the user's tree (and show in ``git status``).
* `commit` replaces a file so that a reader sees the old or the new content,
  never a mix: a temporary file in the same directory, fsync, a check that
  the file is still the one that was read (`FileChanged` otherwise), then
  ``rename``. The temporary file gets the original's mode, owner and group
  (when the process may set them) and extended attributes (ACLs included).
  A file with more than one hard link is written in place instead, as
  editors do, so its twins keep seeing it; that write is not atomic for
  readers, and space is reserved first so a full disk fails before a byte
  changes.
* Temporary files are named ``.lionfactory-tmp-<12 hex digits>``. One left
  by a killed process is removed by the next write to that directory: every
  live temporary file belongs to a writer holding the directory lock, so
  whatever the lock holder finds is stale.

The steps of a replacement are a `WriteSteps` record so tests can inject a
failure at each one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterator

import attrs

from lionfactory._os.beneath import open_child

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: the in-process lock only
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_STEPS",
    "TEMP_PREFIX",
    "FileChanged",
    "LateChange",
    "Original",
    "WriteSteps",
    "commit",
    "directory_lock",
    "remove_stale_temps",
]

TEMP_PREFIX = ".lionfactory-tmp-"
_TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + r"[0-9a-f]{12}")
_COMPARE_CHUNK = 1 << 16
# A same-size overwrite within one tick of the filesystem clock leaves size
# and mtime as they were; only content tells. Files modified this recently
# (and small enough to compare cheaply) are compared byte for byte.
_RECENT_NS = 2_000_000_000
_COMPARE_MAX_BYTES = 8 * 1024 * 1024
_ATTEMPTS = 3


class FileChanged(Exception):
    """The file changed (or appeared) between the read and the replacement; nothing was written."""


class LateChange(Exception):
    """Another program changed the old file just as it was replaced, other than by appending.

    The new content is in place; that program's change went to the replaced
    file and could not be carried over.
    """


def _open_temp(dir_fd: int, name: str) -> tuple[int, str]:
    del name  # the temporary name does not embed it: it must fit any name length
    temp = f"{TEMP_PREFIX}{secrets.token_hex(6)}"
    fd = open_child(dir_fd, temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    return fd, temp


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _replace(dir_fd: int, temp: str, name: str) -> None:
    os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


@attrs.frozen
class WriteSteps:
    """The steps of `commit`; tests replace one to inject a failure."""

    open_temp: Callable[[int, str], tuple[int, str]] = _open_temp
    write: Callable[[int, bytes], None] = _write_all
    fsync: Callable[[int], None] = os.fsync
    replace: Callable[[int, str, str], None] = _replace


DEFAULT_STEPS = WriteSteps()


@attrs.frozen
class WrittenFile:
    """A file a change wrote, as the editor knows it (for a diagnostics hook's ``settle_written``).

    Attributes:
        data: the bytes written.
        st: the file's ``fstat`` just after the write.
        old: the bytes the change replaced, when it read them (an edit);
            None when it did not (a whole-file write, a new file).
        old_st: their ``fstat`` when read (None with `old`).
    """

    data: bytes = attrs.field(repr=False)
    st: os.stat_result
    old: bytes | None = attrs.field(default=None, repr=False)
    old_st: os.stat_result | None = None


@attrs.frozen
class Original:
    """The file as it was read: an open descriptor, its stat, and what was read.

    Attributes:
        fd: a read-only descriptor of the file (the caller closes it).
        st: its ``fstat`` when it was read.
        data: the bytes read, or None when the caller did not read them (a
            whole-file write); used to tell a same-size overwrite apart.
    """

    fd: int
    st: os.stat_result
    data: bytes | None = attrs.field(default=None, repr=False)


class _DirectoryLocks:
    """One thread lock per directory (by device and inode), alive while in use.

    ``flock`` alone would serialise threads too (each call opens its own
    descriptor), but not every filesystem supports it; the thread lock keeps
    one process correct everywhere.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[tuple[int, int], tuple[threading.Lock, list[int]]] = {}

    @contextlib.contextmanager
    def hold(self, key: tuple[int, int]) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.setdefault(key, (threading.Lock(), [0]))
            users[0] += 1
        try:
            with lock:
                yield
        finally:
            with self._guard:
                users[0] -= 1
                if not users[0]:
                    del self._locks[key]


_LOCKS = _DirectoryLocks()


@contextlib.contextmanager
def directory_lock(dir_fd: int) -> Iterator[None]:
    """Hold the write lock of one directory, within this process and across processes.

    Blocking: call it from a worker thread. A filesystem without ``flock``
    (some network mounts) gets the in-process lock only.
    """
    st = os.fstat(dir_fd)
    with _LOCKS.hold((st.st_dev, st.st_ino)):
        locked = False
        if fcntl is not None:
            try:
                fcntl.flock(dir_fd, fcntl.LOCK_EX)
                locked = True
            except OSError:
                pass
        try:
            yield
        finally:
            if locked:
                fcntl.flock(dir_fd, fcntl.LOCK_UN)


def remove_stale_temps(dir_fd: int) -> None:
    """Remove temporary files a killed writer left in this directory.

    Call it holding `directory_lock`: every live temporary file belongs to
    the lock's holder, so any other one is stale.
    """
    with os.scandir(dir_fd) as scan:
        stale = [
            entry.name
            for entry in scan
            if _TEMP_NAME.fullmatch(entry.name) and entry.is_file(follow_symlinks=False)
        ]
    for name in stale:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)


def _has_prefix(fd: int, data: bytes) -> bool:
    """Whether the open file starts with `data` (compared in chunks, without copies)."""
    view = memoryview(data)
    for start in range(0, len(data), _COMPARE_CHUNK):
        expected = view[start : start + _COMPARE_CHUNK]
        if os.pread(fd, len(expected), start) != expected:
            return False
    return True


def _same_content(fd: int, data: bytes) -> bool:
    return _has_prefix(fd, data) and os.pread(fd, 1, len(data)) == b""


def _unchanged(dir_fd: int, name: str, original: Original) -> bool:
    """Whether `name` is still the file `original` read, with the same content.

    A file that only grew, its first bytes still exactly what was read,
    counts as unchanged when the read bytes are known: something appended to
    it (a log line, a ``>>``), and `commit` carries the appended tail over to
    the new file instead of redoing the edit. Under a steady appender a redo
    would never win.
    """
    try:
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    before, data = original.st, original.data
    if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
        return False
    if now.st_size != before.st_size or now.st_mtime_ns != before.st_mtime_ns:
        return data is not None and now.st_size > len(data) and _has_prefix(original.fd, data)
    recent = time.time_ns() - now.st_mtime_ns < _RECENT_NS
    if data is not None and recent and len(data) <= _COMPARE_MAX_BYTES:
        return _same_content(original.fd, data)
    return True


def _absent(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return True
    return False


def _copy_metadata(original: Original, fd: int) -> None:
    """Give the new file the original's owner, group, extended attributes and mode."""
    st = original.st
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (st.st_uid, st.st_gid):
        # Root may give the file back to its owner; anyone may keep a group
        # they belong to. Neither is an error when refused: the content matters more.
        try:
            os.fchown(fd, st.st_uid, st.st_gid)
        except PermissionError:
            with contextlib.suppress(PermissionError):
                os.fchown(fd, -1, st.st_gid)
    if hasattr(os, "listxattr"):
        with contextlib.suppress(OSError):
            for attr in os.listxattr(original.fd):
                # security.* and trusted.* may need privileges, and some
                # filesystems take no xattrs at all: copy what can be copied.
                with contextlib.suppress(OSError):
                    os.setxattr(fd, attr, os.getxattr(original.fd, attr))
    # Last: fchown clears set-user-ID and set-group-ID bits.
    os.fchmod(fd, stat.S_IMODE(st.st_mode))


def commit(
    dir_fd: int,
    name: str,
    data: bytes,
    *,
    original: Original | None,
    steps: WriteSteps = DEFAULT_STEPS,
    in_place: bool = True,
) -> os.stat_result:
    """Put `data` at `name` in the directory `dir_fd`, if the file is still as read.

    Hold `directory_lock` around the read and this call.

    Args:
        dir_fd: the parent directory's descriptor.
        name: the file's name in it.
        data: the complete new content.
        original: the file as read, or None when it did not exist (then it
            must still not exist).
        steps: the operations, replaceable for fault-injection tests.
        in_place: a file with other hard links is written in place, so that
            its other names see the edit; False replaces this name only (a
            rewind: the other names may be outside the workspace, a package
            cache's files linked into a virtual environment, say).

    Returns:
        The stat of the written file (for evidence).

    Raises:
        FileChanged: the file is no longer the one read; nothing was written.
        LateChange: the file changed just as it was replaced (see
            `_carry_late_appends`); the new content is in place.
        OSError: a step failed; the original is untouched and no temporary
            file is left behind.
    """
    if in_place and original is not None and original.st.st_nlink > 1:
        return _write_in_place(dir_fd, name, data, original, steps)
    fd, temp = steps.open_temp(dir_fd, name)
    try:
        try:
            if original is not None:
                _copy_metadata(original, fd)
            steps.write(fd, data)
            steps.fsync(fd)
            written = os.fstat(fd)
        finally:
            os.close(fd)
        if not (_absent(dir_fd, name) if original is None else _unchanged(dir_fd, name, original)):
            raise FileChanged(name)
        steps.replace(dir_fd, temp, name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    if original is not None and original.data is not None:
        _carry_late_appends(dir_fd, name, original)
    # Make the rename itself durable; some filesystems cannot fsync a directory.
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)
    return written


def _carry_late_appends(dir_fd: int, name: str, original: Original) -> None:
    """Copy to the new file what was appended to the old one after the change check.

    A program that opened the file before the rename and writes just after
    the check writes into the replaced inode; for an appender (a log, a
    ``>>``) those bytes are its tail beyond what was read, and appending them
    to the new file loses nothing. The old inode is still open here, so it
    can be read after the rename.

    Raises:
        LateChange: the old file changed other than by appending.
    """
    data = original.data
    assert data is not None
    carried = len(data)
    for _ in range(_ATTEMPTS):
        late = os.fstat(original.fd)
        if late.st_size == carried:
            if (
                carried > len(data)
                or late.st_mtime_ns == original.st.st_mtime_ns
                or _same_content(original.fd, data)
            ):
                return
            raise LateChange(name)
        if late.st_size < carried or not _has_prefix(original.fd, data):
            raise LateChange(name)
        tail = os.pread(original.fd, late.st_size - carried, carried)
        fd = open_child(dir_fd, name, os.O_WRONLY | os.O_APPEND)
        try:
            _write_all(fd, tail)
            os.fsync(fd)
        finally:
            os.close(fd)
        carried += len(tail)


def _write_in_place(
    dir_fd: int, name: str, data: bytes, original: Original, steps: WriteSteps
) -> os.stat_result:
    """Overwrite a hard-linked file's content in place (its twins see the change)."""
    fd = open_child(dir_fd, name, os.O_WRONLY)
    try:
        if os.fstat(fd).st_ino != original.st.st_ino or not _unchanged(dir_fd, name, original):
            raise FileChanged(name)
        if len(data) > original.st.st_size and hasattr(os, "posix_fallocate"):
            try:
                os.posix_fallocate(fd, 0, len(data))
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise  # ENOSPC: refused before anything changed
        try:
            steps.write(fd, data)
            os.ftruncate(fd, len(data))
            steps.fsync(fd)
        except OSError:
            if original.data is not None:
                # Put back what was there; the caller reports the failure.
                with contextlib.suppress(OSError):
                    os.pwrite(fd, original.data, 0)
                    os.ftruncate(fd, len(original.data))
            raise
        return os.fstat(fd)
    finally:
        os.close(fd)

"""Atomic file replacement and per-path locks for the file-writing tools.

`atomic_write` replaces a file so that a reader sees the old or the new
content, never a mix, and a failure at any step leaves the original
byte-identical and no temporary file behind. Its steps are a `WriteSteps`
record so tests can inject a failure at each one. `path_lock` serialises the
read-modify-write cycles on one path within the process.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs

from lionfactory._workspace import open_nofollow

__all__ = ["DEFAULT_STEPS", "WriteSteps", "atomic_write", "path_lock"]


def _open_temp(path: Path) -> tuple[int, Path]:
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    return open_nofollow(temp, flags, 0o666), temp


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@attrs.frozen
class WriteSteps:
    """The steps of `atomic_write`; tests replace one to inject a failure."""

    open_temp: Callable[[Path], tuple[int, Path]] = _open_temp
    write: Callable[[int, bytes], None] = _write_all
    fsync: Callable[[int], None] = os.fsync
    replace: Callable[[Path, Path], None] = os.replace


DEFAULT_STEPS = WriteSteps()


def atomic_write(
    path: Path, data: bytes, *, mode: int | None, steps: WriteSteps = DEFAULT_STEPS
) -> None:
    """Replace `path` with `data` so readers see the old or the new file, never a mix.

    The temporary file lives in the target's directory (``os.replace`` is
    atomic only within one filesystem) and is created with ``O_EXCL`` and
    ``O_NOFOLLOW``. On any failure it is removed and the target is untouched.

    Args:
        path: the target.
        data: the complete new content.
        mode: permission bits to keep (an existing file's), or None for a new
            file (0o666 less the umask, as the kernel applies it).
        steps: the operations, replaceable for fault-injection tests.
    """
    fd, temp = steps.open_temp(path)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            steps.write(fd, data)
            steps.fsync(fd)
        finally:
            os.close(fd)
        steps.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    # Make the rename itself durable; some filesystems cannot fsync a directory.
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class _PathLocks:
    """One lock per resolved path, alive while someone holds or waits for it.

    Module-wide on purpose: two editors (a standalone one and a toolkit's)
    editing one file in one process must not lose each other's updates.
    A thread lock, not an anyio one, because the work runs in worker
    threads and tools may be called from different event loops.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, list[int]]] = {}

    @contextlib.contextmanager
    def hold(self, key: str) -> Iterator[None]:
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


_LOCKS = _PathLocks()


def path_lock(path: Path) -> contextlib.AbstractContextManager[None]:
    """Hold the process-wide lock of one resolved path (blocking)."""
    return _LOCKS.hold(str(path))

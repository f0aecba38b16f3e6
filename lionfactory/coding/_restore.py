"""Writing a checkpoint's files back: confined, checked, journalled.

Every operation goes through the editor's write path
(`lionfactory.tools._editor_files`): directories are opened from the root one
component at a time without following a link (``openat2`` with
``RESOLVE_NO_SYMLINKS`` where the kernel has it), under the editor's
directory lock, and a file is replaced by a temporary file renamed over it
only if it is still the content the rewind checked. So a directory swapped
for a link to outside mid-restore fails that path (nothing is written
outside), and a file someone changed after the check is left alone and
reported as a conflict. Nothing here runs git in the workspace.

Each operation is idempotent and names what it expects to find (`Op.expect`)
and what it leaves (`Op.target`): the journal a rewind writes before its
first change is the list of operations, so a rewind killed halfway is
completed by running the list again (a path already at its target is
skipped; one at neither is a conflict).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from lionfactory._os.beneath import DIRECTORY_FLAGS, open_beneath, open_child
from lionfactory._os.regular import is_regular
from lionfactory.coding._snapshots import EXECUTABLE, SYMLINK, Entry, blob_id, valid_path
from lionfactory.tools._editor_files import (
    TEMP_PREFIX,
    FileChanged,
    Original,
    commit,
    directory_lock,
)

__all__ = ["Op", "OpOutcome", "apply_op", "current_entry", "read_journal", "write_journal"]


@attrs.frozen
class Op:
    """Bring one path from `expect` to `target` (None: absent).

    Attributes:
        path: workspace-relative POSIX path.
        expect: what the rewind found there when it checked.
        target: what it leaves there.
    """

    path: str
    expect: Entry | None
    target: Entry | None

    def to_data(self) -> list[Any]:
        """JSON-ready form for the journal."""
        return [self.path, _entry_data(self.expect), _entry_data(self.target)]

    @classmethod
    def from_data(cls, data: Any) -> Op:
        """Read `to_data` output (ValueError when malformed)."""
        path, expect, target = data
        if not isinstance(path, str) or not valid_path(path):
            raise ValueError(f"bad journal path {path!r:.80}")
        return cls(path, _entry_from(expect), _entry_from(target))


def _entry_data(entry: Entry | None) -> list[str] | None:
    return None if entry is None else [entry.mode, entry.oid]


def _entry_from(data: Any) -> Entry | None:
    if data is None:
        return None
    mode, oid = data
    if not isinstance(mode, str) or not isinstance(oid, str) or len(oid) != 40:
        raise ValueError(f"bad journal entry {data!r:.80}")
    return Entry(mode, oid)


OpOutcome = str
"""``"done"`` (changed), ``"already"`` (at its target), ``"conflict"``, ``"refused"``, or
``"nospace"`` (the disk is full: the path is left as it was)."""


def _parent(root_fd: int, parts: tuple[str, ...], *, create: bool) -> int | None:
    """A descriptor of ``root/parts`` (created when asked), never through a link."""
    current = os.dup(root_fd)
    try:
        for part in parts:
            try:
                step = open_child(current, part, DIRECTORY_FLAGS)
            except FileNotFoundError:
                if not create:
                    os.close(current)
                    return None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=current)
                step = open_child(current, part, DIRECTORY_FLAGS)
            os.close(current)
            current = step
    except BaseException:
        os.close(current)
        raise
    return current


def current_entry(root_fd: int, path: str) -> Entry | bool | None:
    """What is at `path` now: an entry, None (absent), or False (a directory, unreadable)."""
    parts = tuple(path.split("/"))
    try:
        dir_fd = (
            open_beneath(root_fd, parts[:-1], DIRECTORY_FLAGS) if parts[:-1] else os.dup(root_fd)
        )
    except FileNotFoundError:
        return None
    except OSError:
        return False
    try:
        return _entry_in(dir_fd, parts[-1])[0]
    finally:
        os.close(dir_fd)


def _entry_in(dir_fd: int, name: str) -> tuple[Entry | bool | None, Original | None]:
    """The entry of `name` in `dir_fd` and, for a regular file, an `Original` to commit over."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None, None
    if stat.S_ISLNK(st.st_mode):
        return Entry(SYMLINK, blob_id(os.fsencode(os.readlink(name, dir_fd=dir_fd)))), None
    if not is_regular(st):
        return False, None
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        data = b"".join(chunks)
        fst = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    mode = EXECUTABLE if fst.st_mode & stat.S_IXUSR else "100644"
    return Entry(mode, blob_id(data)), Original(fd=fd, st=fst, data=data)


def apply_op(root_fd: int, op: Op, blobs: Mapping[str, bytes]) -> OpOutcome:
    """Carry out one operation if the path is still as expected (blocking: run in a thread).

    Args:
        root_fd: the workspace root's descriptor.
        op: the operation.
        blobs: the content of every target blob, by id (verified).
    """
    if not valid_path(op.path):
        return "refused"
    parts = tuple(op.path.split("/"))
    try:
        dir_fd = _parent(root_fd, parts[:-1], create=op.target is not None)
    except OSError as exc:
        if exc.errno in _FULL:
            return "nospace"
        # A link or a file where a directory should be: nothing is written there.
        return "refused" if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV) else "conflict"
    if dir_fd is None:
        return "already" if op.target is None else "conflict"
    name = parts[-1]
    try:
        with directory_lock(dir_fd):
            found, original = _entry_in(dir_fd, name)
            try:
                if found == op.target:
                    return "already"
                if found != op.expect:
                    return "conflict"
                _change(dir_fd, name, op, original, blobs)
                return "done"
            finally:
                if original is not None:
                    os.close(original.fd)
    except FileChanged:
        return "conflict"
    except OSError as exc:
        # The editor's write path removes its temporary file: the path is as it was.
        if exc.errno in _FULL:
            return "nospace"
        if exc.errno == errno.ENOENT and op.target is None:
            return "already"  # removed by someone else since the check
        if exc.errno in _RACED:
            # Changed since the check (a folder or a link where the file was):
            # nothing was written there, and it is someone else's change.
            return "conflict"
        raise
    finally:
        os.close(dir_fd)


_FULL = (errno.ENOSPC, errno.EDQUOT)
_RACED = (errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST, errno.ELOOP)


def _change(
    dir_fd: int, name: str, op: Op, original: Original | None, blobs: Mapping[str, bytes]
) -> None:
    target = op.target
    if target is None:
        os.unlink(name, dir_fd=dir_fd)
        return
    data = blobs[target.oid]
    if target.mode == SYMLINK:
        temp = f"{TEMP_PREFIX}{os.urandom(6).hex()}"
        os.symlink(os.fsdecode(data), temp, dir_fd=dir_fd)
        try:
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise
        return
    if original is None and op.expect is not None:
        # A link becomes a file: the link goes first (commit replaces files only).
        os.unlink(name, dir_fd=dir_fd)
    # Never through a hard link: its other names may be outside the workspace
    # or protected (a rewind replaces this name only).
    commit(dir_fd, name, data, original=original, in_place=False)
    fd = open_child(dir_fd, name, os.O_RDONLY)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if target.mode == EXECUTABLE:
            # Execute for whoever may read, as git checks out an executable.
            mode |= (mode & 0o444) >> 2
        else:
            mode &= ~0o111
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def remove_empty_dirs(root_fd: int, folders: list[str]) -> list[str]:
    """Remove each folder (deepest first) if it is empty; return the ones removed."""
    removed = []
    for folder in sorted(set(folders), key=lambda f: (-f.count("/"), f)):
        if not valid_path(folder):
            continue
        parts = tuple(folder.split("/"))
        try:
            parent = _parent(root_fd, parts[:-1], create=False)
        except OSError:
            continue
        if parent is None:
            continue
        try:
            os.rmdir(parts[-1], dir_fd=parent)
            removed.append(folder)
        except OSError:
            pass
        finally:
            os.close(parent)
    return removed


def make_dirs(root_fd: int, folders: list[str]) -> list[str]:
    """Create each missing folder beneath the root; return the ones created."""
    made = []
    for folder in sorted(set(folders)):
        if not valid_path(folder):
            continue
        parts = tuple(folder.split("/"))
        if _opens(root_fd, parts, create=False) is not False:
            continue  # there already, or not reachable without a link
        if _opens(root_fd, parts, create=True) is True:
            made.append(folder)
    return made


def _opens(root_fd: int, parts: tuple[str, ...], *, create: bool) -> bool | None:
    """Whether ``root/parts`` opens as a directory (False: absent; None: refused)."""
    try:
        fd = _parent(root_fd, parts, create=create)
    except OSError:
        return None
    if fd is None:
        return False
    os.close(fd)
    return True


def write_journal(path: Path, data: Mapping[str, Any]) -> None:
    """Write the journal atomically and durably before the first change."""
    temp = path.with_name(path.name + ".tmp")
    with open(temp, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def read_journal(path: Path, check: Callable[[Any], Any]) -> Any | None:
    """The journal at `path` read through `check`, or None (absent or unreadable: removed)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return check(raw)
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError):
        with contextlib.suppress(OSError):
            path.unlink()
        return None

"""Opening and reading a regular file: the one check every file-reading tool makes.

A path the model names may be a directory, a FIFO (opening is fine, reading
would block forever), a device, or a file far larger than the tool can use.
Every tool that reads a file asks the same three questions of the descriptor
it opened, in the same order, and refuses with the same words; only the next
step differs (the reader suggests ``list_dir``, code navigation ``search``),
so a caller adds that sentence and nothing else.

* `regular_stat`: the ``fstat`` of an open descriptor, refused when it is not
  a regular file (for a caller that opened it its own way);
* `open_regular`: a workspace file opened for streaming, optionally refused
  when its size is over a cap; the descriptor is closed on refusal;
* `read_capped`: at most a cap of bytes from a stream, reading one byte
  more so that a file that grew since its ``fstat`` is refused, not cut;
* `read_regular`: the two together, for a caller that wants the bytes;
* `refusal`: the answer for whatever those raised (the workspace's refusal,
  a missing or unreadable file, a `FileRefused`), in the one wording of
  each, ending in the caller's next step.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, BinaryIO, Literal

from lionfactory.errors import ToolFailure

if TYPE_CHECKING:
    from lionfactory._os.workspace import Location

__all__ = [
    "FileRefused",
    "is_directory",
    "is_regular",
    "open_regular",
    "read_capped",
    "read_regular",
    "refusal",
    "regular_stat",
    "too_large",
]

Refusal = Literal["directory", "not_regular", "too_large"]


class FileRefused(Exception):
    """A path that is not a regular file, or one too large to read.

    Attributes:
        kind: ``"directory"``, ``"not_regular"`` (a FIFO, socket or device),
            or ``"too_large"``.
        message: what is wrong, in the one wording every tool uses, without
            a next step (the caller adds its own).
    """

    def __init__(self, kind: Refusal, message: str) -> None:
        super().__init__(message)
        self.kind: Refusal = kind
        self.message = message


def is_regular(st: os.stat_result) -> bool:
    """Whether `st` (an ``lstat`` or ``fstat``) is of a regular file.

    For code that sorts directory entries rather than refusing a read (the
    checkpoint store's walk and restore), so that what counts as a file is
    decided here too.
    """
    return stat.S_ISREG(st.st_mode)


def is_directory(st: os.stat_result) -> bool:
    """Whether `st` is of a directory (what `is_regular` is for, on the other side of it)."""
    return stat.S_ISDIR(st.st_mode)


def regular_stat(fd: int, shown: str) -> os.stat_result:
    """The ``fstat`` of `fd`, which must be a regular file (`fd` stays open either way).

    Raises:
        FileRefused: `fd` is a directory or not a regular file.
        OSError: ``fstat`` failed.
    """
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode):
        return st
    if stat.S_ISDIR(st.st_mode):
        raise FileRefused("directory", f"{shown!r} is a directory")
    raise FileRefused("not_regular", f"{shown!r} is not a regular file")


def too_large(shown: str, limit: int) -> FileRefused:
    """The refusal of a file over `limit` bytes."""
    return FileRefused("too_large", f"{shown!r} is larger than {limit:,} bytes")


def open_regular(
    loc: Location, *, max_bytes: int | None = None, follow: bool = True
) -> tuple[BinaryIO, os.stat_result]:
    """The regular file at `loc`, open for reading, and its ``fstat``.

    The caller closes the stream (``with stream:``); on a refusal it is
    already closed. A size cap here judges the ``fstat``; read with
    `read_capped` to catch a file that grows after it.

    Args:
        loc: the workspace location.
        max_bytes: refuse a file larger than this; None for no cap.
        follow: follow a final symbolic link (inside the workspace only).

    Raises:
        PathRefused: the workspace refuses the path (`Location.open_read`).
        OSError: the file cannot be opened.
        FileRefused: a directory, a non-regular file, or over `max_bytes`.
    """
    fd = loc.open_read(follow=follow)
    try:
        st = regular_stat(fd, loc.shown)
        if max_bytes is not None and st.st_size > max_bytes:
            raise too_large(loc.shown, max_bytes)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb"), st


def read_capped(stream: BinaryIO, shown: str, max_bytes: int) -> bytes:
    """All of `stream`, which must hold at most `max_bytes` bytes.

    One byte more than the cap is read, so a file that grew since it was
    measured is refused rather than silently cut.

    Raises:
        FileRefused: more than `max_bytes` bytes.
        OSError: the read failed.
    """
    # To the size the file has now and a byte more, not to the cap: a read
    # of the cap allocates all of it first (a 5 MB cap took half the time
    # of reading a 600-line file). A file that grew since is read on.
    size = os.fstat(stream.fileno()).st_size
    data = stream.read(min(size, max_bytes) + 1)
    if size < len(data) <= max_bytes:
        data += stream.read(max_bytes + 1 - len(data))
    if len(data) > max_bytes:
        raise too_large(shown, max_bytes)
    return data


def read_regular(
    loc: Location, max_bytes: int, *, follow: bool = True
) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file at `loc` (at most `max_bytes`), and its ``fstat``.

    Raises:
        PathRefused: the workspace refuses the path.
        OSError: the file cannot be opened or read.
        FileRefused: a directory, a non-regular file, or over `max_bytes`.
    """
    stream, st = open_regular(loc, max_bytes=max_bytes, follow=follow)
    with stream:
        return read_capped(stream, loc.shown, max_bytes), st


def refusal(
    exc: ToolFailure | OSError | FileRefused,
    shown: str,
    next_step: str,
    *,
    missing: str | None = None,
    directory: str | None = None,
    too_large: str | None = None,
) -> str:
    """The answer to a failed open or read of `shown`: what is wrong, then what to do.

    Each failure has one wording, so every tool says it the same way; the
    caller gives only its next step, and where one failure wants another
    (a directory: list it; a file too large: another tool), that one too.
    Each step is a clause that follows a semicolon, with its full stop.

    Args:
        exc: what `open_regular`, `read_regular` or `read_capped` raised,
            or the workspace's `PathRefused` (answered as it is: it already
            says what to do instead).
        shown: the path as the model gave it.
        next_step: what to do, after any failure without a step of its own.
        missing: the step after a file that does not exist.
        directory: the step after a directory.
        too_large: the step after a file over the cap.
    """
    if isinstance(exc, ToolFailure):
        return exc.message
    if isinstance(exc, FileRefused):
        step = {"directory": directory, "too_large": too_large}.get(exc.kind)
        return f"{exc.message}; {step or next_step}"
    if isinstance(exc, FileNotFoundError):
        return f"File not found: {shown!r}; {missing or next_step}"
    return f"Cannot read {shown!r} ({(exc.strerror or str(exc)).lower()}); {next_step}"

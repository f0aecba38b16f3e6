"""Open a path below a directory descriptor, never leaving it.

This is the kernel half of the workspace seam. A path the model gives is
checked once (lexically, for protected names) and then opened **relative to a
descriptor of the workspace root**, so a directory swapped for a symlink
between the check and the open cannot redirect it: there is no second
resolution of the name for an attacker to race.

Two mechanisms, chosen once per process:

* ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` (Linux 5.6+), called
  through ctypes because Python has no binding for it. The kernel refuses any
  symlink in any component and any step out of the starting directory, in one
  atomic lookup.
* Elsewhere (an older kernel, a seccomp filter that blocks the syscall, not
  Linux): a walk that opens one component at a time with
  ``O_NOFOLLOW | O_DIRECTORY`` relative to the previous component's
  descriptor. Each step is atomic, so the walk is just as safe; it costs one
  ``open`` per component.

Both fail with ``ELOOP`` on a symlink and ``ENOTDIR`` when a middle component
is not a directory, so callers see the same errors whichever runs.

`open_following` is the reading variant: it follows links while they stay
below the root (``openat2(RESOLVE_BENEATH)`` alone, or a walk that reads each
link relative to the descriptors it holds; an absolute target that names a
path below the root is followed from the root's descriptor, as a relative
one is) and reports the resolved components, so the caller can judge the
real path, not only the spelled one.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import stat
import sys
import threading
from collections.abc import Iterator
from typing import Literal, Protocol

from lionfactory._os import mounts as _mounts

__all__ = [
    "DIRECTORY_FLAGS",
    "Strategy",
    "current_strategy",
    "forced_strategy",
    "MAX_LINKS",
    "make_parents",
    "open_beneath",
    "open_following",
    "open_child",
    "read_cached",
    "release_created",
]

Strategy = Literal["openat2", "walk"]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)

DIRECTORY_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
"""Flags of a directory descriptor the walk (and `os.scandir`, `flock`) can use."""

# openat2(2): struct open_how and the RESOLVE_* bits from <linux/openat2.h>.
_RESOLVE_NO_XDEV = 0x01
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_RESOLVE_CACHED = 0x20  # Linux 5.12+; EAGAIN when a step is not in the lookup cache
_O_PATH = getattr(os, "O_PATH", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 0)
_AT_FDCWD = -100
# A cached lookup also fails with EAGAIN when a mount or a rename anywhere
# on the system disturbed it (the kernel would leave its lock-free walk;
# every sandbox bwrap sets up makes dozens of mounts). One that is simply
# not cached fails again at once, so a few tries cost microseconds, and
# under a storm of mounts one try lost about one read in a thousand.
_CACHED_TRIES = 4
# openat2 came after the syscall tables were unified: 437 on every
# architecture this list names (alpha and ia64 differ; they use the walk).
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437, "riscv64": 437, "ppc64le": 437}


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


class _Openat2(Protocol):
    def __call__(
        self, dir_fd: int, path: str, flags: int, mode: int, resolve: int, *, tries: int = ...
    ) -> int: ...


def _load_openat2() -> _Openat2 | None:
    """A callable for the ``openat2`` syscall, or None when this system lacks it."""
    number = _SYS_OPENAT2.get(platform.machine().lower())
    if not sys.platform.startswith("linux") or number is None:
        return None
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    syscall.restype = ctypes.c_long

    def openat2(
        dir_fd: int, path: str, flags: int, mode: int, resolve: int, *, tries: int = 8
    ) -> int:
        how = _OpenHow(
            flags=flags,
            mode=mode if flags & os.O_CREAT else 0,  # the kernel refuses a stray mode
            resolve=resolve,
        )
        encoded = os.fsencode(path)
        # EAGAIN: a concurrent rename disturbed a "beneath" lookup; the
        # kernel asks for a retry. A few retries, then report it.
        for _ in range(tries):
            fd = int(
                syscall(
                    ctypes.c_long(number),
                    ctypes.c_int(dir_fd),
                    ctypes.c_char_p(encoded),
                    ctypes.byref(how),
                    ctypes.c_size_t(ctypes.sizeof(how)),
                )
            )
            if fd >= 0:
                return fd
            code = ctypes.get_errno()
            if code not in (errno.EAGAIN, errno.EINTR):
                raise OSError(code, os.strerror(code), path)
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)

    # Probe once: a seccomp filter (some container runtimes) answers ENOSYS
    # or EPERM, and then the walk is the only way.
    try:
        root = os.open("/", DIRECTORY_FLAGS)
    except OSError:
        return None
    try:
        os.close(openat2(root, ".", DIRECTORY_FLAGS, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS))
    except OSError:
        return None
    finally:
        os.close(root)
    return openat2


_OPENAT2 = _load_openat2()
_forced: list[Strategy] = []


def current_strategy() -> Strategy:
    """The mechanism in use: ``"openat2"`` when the kernel has it, else ``"walk"``."""
    if _forced:
        return _forced[-1]
    return "openat2" if _OPENAT2 is not None else "walk"


@contextlib.contextmanager
def forced_strategy(strategy: Strategy) -> Iterator[None]:
    """Use one mechanism while the block runs (tests exercise both).

    Raises:
        ValueError: ``"openat2"`` was asked for and this kernel lacks it.
    """
    if strategy == "openat2" and _OPENAT2 is None:
        raise ValueError("openat2 is not available on this system")
    _forced.append(strategy)
    try:
        yield
    finally:
        _forced.pop()


def open_child(dir_fd: int, name: str, flags: int, mode: int = 0o666) -> int:
    """Open one name in a directory descriptor, refusing a symlink (``ELOOP``).

    ``O_DIRECTORY | O_NOFOLLOW`` on a symlink fails with ``ENOTDIR``; that
    case is reported as ``ELOOP`` too, the error ``openat2`` gives, so the
    model hears "symbolic link" whichever mechanism ran. (The lstat only
    chooses the message; the refusal itself came from the atomic open.)
    """
    try:
        return os.open(name, flags | _O_NOFOLLOW | _O_CLOEXEC, mode, dir_fd=dir_fd)
    except NotADirectoryError:
        try:
            link = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            link = False
        if link:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name) from None
        raise


def open_beneath(root_fd: int, parts: tuple[str, ...], flags: int, mode: int = 0o666) -> int:
    """Open ``root/parts`` without leaving `root_fd` and without following a link.

    Args:
        root_fd: a directory descriptor the lookup starts at (and stays under).
        parts: plain components: no ``..``, ``.``, empty name or slash.
        flags: `os.open` flags for the final component.
        mode: the permission bits when `flags` creates the file.

    Raises:
        OSError: ``ELOOP`` when any component is a symlink, ``ENOTDIR`` when
            a middle one is not a directory, or whatever ``open`` reports.
    """
    if not parts:
        return os.open(".", flags | _O_CLOEXEC, mode, dir_fd=root_fd)
    if _OPENAT2 is not None and current_strategy() == "openat2":
        resolve = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS
        return _OPENAT2(root_fd, "/".join(parts), flags | _O_CLOEXEC, mode, resolve)
    current = root_fd
    try:
        for part in parts[:-1]:
            step = open_child(current, part, DIRECTORY_FLAGS)
            if current != root_fd:
                os.close(current)
            current = step
        return open_child(current, parts[-1], flags, mode)
    finally:
        if current != root_fd:
            os.close(current)


def read_cached(
    root: str, parts: tuple[str, ...], most: int, *, head_over: int | None = None, head: int = 0
) -> tuple[os.stat_result, bytes | bytearray] | None:
    """The whole regular file ``root/parts``, read without waiting for any I/O, or None.

    With `head_over`, a file larger than `head_over` bytes gives its first
    `head` bytes instead (the caller tells a head from the whole file by
    the fstat's size): a window at the top of a huge file needs no more.
    The head is a buffer the calling thread reuses for its next head read
    (fresh pages cost more than the read): use it, or copy it, before then.

    For reading on an event loop. Every step is one that cannot wait: the
    root and the file are looked up with ``RESOLVE_CACHED`` (the kernel
    fails instead of revalidating or reading a directory), the file must lie
    on the root's own mount (``RESOLVE_NO_XDEV``) and that mount must hold a
    local filesystem (`lionfactory._os.mounts`: a network filesystem's open
    may wait on its server), and the data is read with ``RWF_NOWAIT`` (it
    fails instead of reading from the disk). A link anywhere below the root,
    a real name other than the spelled one, a file that is not regular or
    is larger than `most` bytes, or any error gives None: the caller then
    opens the path the ordinary way in a worker thread, where every refusal
    and error is reported as usual.
    """
    if _OPENAT2 is None or current_strategy() != "openat2" or not parts or not _RWF_NOWAIT:
        return None
    root_fd = fd = -1
    try:
        root_fd = _OPENAT2(
            _AT_FDCWD,
            root,
            _O_PATH | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC,
            0,
            _RESOLVE_CACHED,
            tries=_CACHED_TRIES,
        )
        if not _mounts.is_local_mount(_mounts.mount_id(root_fd)):
            return None
        fd = _OPENAT2(
            root_fd,
            "/".join(parts),
            os.O_RDONLY | _O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC,
            0,
            _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_XDEV | _RESOLVE_CACHED,
            tries=_CACHED_TRIES,
        )
        info = os.fstat(fd)
        headed = head_over is not None and info.st_size > head_over
        if not stat.S_ISREG(info.st_mode) or (info.st_size > most and not headed):
            return None
        # The name the file really has, as `open_following` checks it: on a
        # case-folding directory a spelling can open a file named otherwise.
        if _resolved_below(root_fd, fd) != parts:
            return None
        data = _read_head_nowait(fd, head) if headed else _read_nowait(fd, info.st_size, most)
    except OSError:
        return None
    finally:
        for held in (fd, root_fd):
            if held >= 0:
                os.close(held)
    return None if data is None else (info, data)


_PAGE = 4096
"""The probe for the end of a file after a short read."""


def _read_nowait(fd: int, size: int, most: int) -> bytes | None:
    """All of `fd` from the page cache, or None when a page is not there or it passes `most`.

    EAGAIN (nothing cached at an offset) and EOPNOTSUPP (no ``RWF_NOWAIT``
    on this filesystem) are raised as `OSError`.
    """
    chunks: list[bytearray] = []
    total = 0
    # One byte more than `size` at first: a file that grew since its fstat
    # is read on, and refused once it passes `most`.
    want = size + 1
    while True:
        buffer = bytearray(want)
        count = os.preadv(fd, [buffer], total, _RWF_NOWAIT)
        if count == 0:
            return b"".join(chunks)
        total += count
        if total > most:
            return None
        del buffer[count:]
        chunks.append(buffer)
        short = count < want
        want = most + 1 - total
        if short:
            # Most likely the end of the file: make sure with one page
            # instead of zeroing a buffer up to `most` (236 KiB after a
            # 20 KB file, a third of the read's own time).
            want = min(want, _PAGE)


class _HeadBuffers(threading.local):
    """One buffer a thread reads heads into, kept from one read to the next."""

    def __init__(self) -> None:
        self.buffer = bytearray()


_HEAD_BUFFERS = _HeadBuffers()

# The kernel copies cached pages out with ``rep movsb``, which on some CPUs
# (AMD Zen among them) runs at a sixth of its speed when the destination
# starts a few bytes past a page boundary: where glibc puts every large
# allocation (16 bytes past its mapping's start). A 320 KiB head took
# 125 us there and 20 us from a start aligned to this many bytes.
_ALIGN = 64


def _address(buffer: bytearray) -> int:
    view = (ctypes.c_char * 1).from_buffer(buffer)
    try:
        return ctypes.addressof(view)
    finally:
        del view  # the export ends here, so the buffer can be resized again


def _head_buffer(size: int) -> bytearray:
    """This thread's head buffer of `size` bytes, its start aligned to `_ALIGN`."""
    buffer = _HEAD_BUFFERS.buffer
    if len(buffer) != size:
        buffer = bytearray(size + _ALIGN)
        # Deleting from the front moves a bytearray's start without a copy.
        del buffer[: -_address(buffer) % _ALIGN]
        del buffer[size:]
        _HEAD_BUFFERS.buffer = buffer
    return buffer


def _read_head_nowait(fd: int, size: int) -> bytearray:
    """The first `size` bytes of `fd` (fewer at its end) from the page cache.

    A buffer this thread reuses, not a new one: a fresh few hundred KiB
    land in fresh pages of memory, and faulting them in cost ten times the
    read itself (and as much again on the next call, once the allocator
    had given them back). The caller uses it before this thread's next
    head read. A short read (a file that shrank) gives a copy instead.
    EAGAIN (a page not cached) and EOPNOTSUPP are raised as `OSError`.
    """
    buffer = _head_buffer(size)
    total = 0
    with memoryview(buffer) as view:
        while total < size:
            count = os.preadv(fd, [view[total:]], total, _RWF_NOWAIT)
            if count == 0:
                break
            total += count
    return buffer if total == size else buffer[:total]


MAX_LINKS = 40
"""Most links one lookup follows before it is refused as a loop (the kernel's bound)."""


def open_following(root_fd: int, parts: tuple[str, ...], flags: int) -> tuple[int, tuple[str, ...]]:
    """Open ``root/parts`` following links, but only while they stay under `root_fd`.

    ``openat2(RESOLVE_BENEATH)`` without ``RESOLVE_NO_SYMLINKS`` lets the
    kernel follow each link and refuse (``EXDEV``) the first step that would
    leave the root: an absolute target, a ``..`` above it. The walk does the
    same by hand: each component is opened with ``O_NOFOLLOW`` relative to a
    held descriptor; a link is read (``readlinkat``) and its target's
    components are pushed in front of the rest; ``..`` goes back to the
    descriptor already held for the parent, never to a name, so a directory
    moved out of the root mid-walk cannot lead outside.

    Only for opening what exists (reads, listings): `flags` must not create.

    Returns:
        The descriptor and the resolved components below the root (the real
        path, for the caller's protected-name checks).

    Raises:
        OSError: ``EXDEV`` when a link leads outside the root, ``ELOOP`` after
            `MAX_LINKS` links (a loop), or whatever ``open`` reports.
    """
    if flags & os.O_CREAT:
        raise ValueError("open_following only opens existing files")
    flags &= ~_O_NOFOLLOW  # DIRECTORY_FLAGS carries it; here the final link is followed too
    if _OPENAT2 is not None and current_strategy() == "openat2" and parts:
        try:
            fd = _OPENAT2(root_fd, "/".join(parts), flags | _O_CLOEXEC, 0, _RESOLVE_BENEATH)
        except OSError as exc:
            # The kernel refuses every absolute target; one that names a path
            # below the root is followed by the walk, like a relative one.
            if exc.errno != errno.EXDEV:
                raise
            return _walk_following(root_fd, parts, flags)
        try:
            return fd, _resolved_below(root_fd, fd)
        except BaseException:
            os.close(fd)
            raise
    return _walk_following(root_fd, parts, flags)


def _root_path(root_fd: int) -> str | None:
    """The real path of the root descriptor (``/proc``), or None where it cannot be known."""
    try:
        return os.readlink(f"/proc/self/fd/{root_fd}")
    except OSError:
        return None


def _below(target: str, root: str) -> list[str] | None:
    """The components of the absolute, normalised `target` below `root`, or None outside it."""
    if target == root:
        return []
    prefix = root.rstrip("/") + "/"
    if not target.startswith(prefix):
        return None
    return target[len(prefix) :].split("/")


def _resolved_below(root_fd: int, fd: int) -> tuple[str, ...]:
    """The components of `fd`'s real path below `root_fd`'s, from ``/proc/self/fd``."""
    root = os.readlink(f"/proc/self/fd/{root_fd}")
    real = os.readlink(f"/proc/self/fd/{fd}")
    if real == root:
        return ()
    prefix = root.rstrip("/") + "/"
    if not real.startswith(prefix):
        # Moved out of the root after the open, or deleted ("... (deleted)").
        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), real)
    return tuple(real[len(prefix) :].split("/"))


def _walk_following(
    root_fd: int, parts: tuple[str, ...], flags: int
) -> tuple[int, tuple[str, ...]]:
    held: list[tuple[int, str]] = []  # (descriptor, name) of each directory below the root
    pending = list(reversed(parts))  # a stack: the next component is last
    links = 0
    try:
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if not held:
                    raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), "/".join(parts))
                os.close(held.pop()[0])
                continue
            current = held[-1][0] if held else root_fd
            final = not any(p not in ("", ".") for p in pending)
            step_flags = flags if final else DIRECTORY_FLAGS
            try:
                fd = os.open(part, step_flags | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=current)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                try:
                    target = os.readlink(part, dir_fd=current)
                except OSError:
                    raise exc from None  # not a link: a plain ENOTDIR
                links += 1
                if links > MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), "/".join(parts)) from None
                if target.startswith("/"):
                    # An absolute target below the root (``ln -s "$PWD/real" alias``)
                    # is followed from the root's descriptor, never by its name,
                    # so it is as confined as a relative one; any other is refused.
                    root = _root_path(root_fd)
                    below = None if root is None else _below(os.path.normpath(target), root)
                    if below is None:
                        raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), target) from None
                    for held_fd, _ in held:
                        os.close(held_fd)
                    held.clear()
                    pending.extend(reversed(below))
                    continue
                pending.extend(reversed(target.split("/")))
                continue
            if final:  # the last real name (only "." or "" may follow it)
                return fd, (*(name for _, name in held), part)
            held.append((fd, part))
        # The lookup ended on a directory reached by "..", "." or a link to one.
        current = held[-1][0] if held else root_fd
        fd = os.open(".", flags | _O_CLOEXEC, dir_fd=current)
        return fd, tuple(name for _, name in held)
    finally:
        for fd, _ in held:
            os.close(fd)


def make_parents(root_fd: int, parts: tuple[str, ...]) -> tuple[int, list[tuple[int, str]]]:
    """Open (creating what is missing) the directory ``root/parts``, one component at a time.

    Returns:
        The directory's descriptor, and for each directory this call created,
        a descriptor of its parent and its name (open descriptors the caller
        closes), so a failed write can remove exactly what it created.

    Raises:
        OSError: as `open_beneath`; a symlink anywhere is ``ELOOP``.
    """
    current = os.dup(root_fd)
    created: list[tuple[int, str]] = []
    try:
        for part in parts:
            try:
                os.mkdir(part, 0o777, dir_fd=current)
            except FileExistsError:
                made = False
            else:
                created.append((current, part))
                made = True
            step = open_child(current, part, DIRECTORY_FLAGS)
            if not made:
                os.close(current)
            current = step
    except BaseException:
        if not created or created[-1][0] != current:
            os.close(current)
        release_created(created, remove=True)
        raise
    return current, created


def release_created(created: list[tuple[int, str]], *, remove: bool) -> None:
    """Close the parent descriptors `make_parents` returned; first remove the directories.

    Removal is ``rmdir`` of each created name, newest first, so it only ever
    removes a directory that is still empty.
    """
    for parent, name in reversed(created):
        if remove:
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=parent)
        os.close(parent)
    created.clear()

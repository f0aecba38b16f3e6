"""reader: small cached files read on the event loop, everything else in a worker thread.

Whether a read used a worker thread is seen from outside: the run's only
worker-thread token is held by the test, so a read that needs a thread
waits for it, and one done on the event loop does not.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lionfactory import Branch
from lionfactory._os import beneath, mounts
from lionfactory._os.workspace import Workspace
from lionfactory.coding import coding_toolkit
from lionfactory.tools import reader as reader_module
from lionfactory.tools import reader_tool


@contextlib.asynccontextmanager
async def threads_held() -> AsyncIterator[Callable[[], None]]:
    """Hold the run's only worker-thread token; yields the function that gives it back."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    before = limiter.total_tokens
    limiter.total_tokens = 1
    holder = object()
    await limiter.acquire_on_behalf_of(holder)
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            released = True
            limiter.release_on_behalf_of(holder)

    try:
        yield release
    finally:
        release()
        limiter.total_tokens = before


async def needs_a_thread(call: Callable[[], Awaitable[Any]]) -> tuple[bool, Any]:
    """Run `call` with the worker threads held: (whether it waited for one, its result)."""
    result: list[Any] = []
    async with threads_held() as release, trio.open_nursery() as nursery:

        async def run() -> None:
            result.append(await call())

        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        waited = not result
        release()
    return waited, result[0]


def write_cached(path: Path, data: str | bytes) -> None:
    """Write `data`, then read it: its pages in the page cache, its lookup in the dentry cache."""
    if isinstance(data, str):
        path.write_text(data)
    else:
        path.write_bytes(data)
    path.read_bytes()


async def test_a_small_cached_file_is_read_on_the_event_loop(workspace: Path) -> None:
    write_cached(workspace / "notes.txt", "alpha\nbeta\n")
    reader = reader_tool(workspace_root=workspace)
    waited, result = await needs_a_thread(lambda: reader(action="read", path="notes.txt"))
    assert not waited
    assert result["content"] == "1\talpha\n2\tbeta"
    assert result["total_lines"] == 2


async def test_a_read_on_the_event_loop_still_proves_the_read_before_an_edit(
    workspace: Path,
) -> None:
    write_cached(workspace / "app.py", "x = 1\n")
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=workspace, tools=["reader", "editor"])
    edit = {"action": "edit", "file_path": "app.py", "old_string": "x = 1", "new_string": "x = 2"}
    unread = await branch.act("editor", edit)
    assert unread.failed and "read" in (unread.error or str(unread.payload))
    waited, read = await needs_a_thread(
        lambda: branch.act("reader", {"action": "read", "path": "app.py"})
    )
    assert not waited and not read.failed
    edited = await branch.act("editor", edit)
    assert not edited.failed, edited.payload
    assert (workspace / "app.py").read_text() == "x = 2\n"


async def test_a_cancelled_read_on_the_event_loop_ends_at_its_checkpoint(workspace: Path) -> None:
    write_cached(workspace / "a.txt", "a\n")
    reader = reader_tool(workspace_root=workspace)
    with trio.CancelScope() as scope:
        scope.cancel()
        await reader(action="read", path="a.txt")
        pytest.fail("the read returned inside a cancelled scope")
    assert scope.cancelled_caught


def _drop_from_page_cache(path: Path) -> bool:
    """Evict `path`'s pages; whether none is left (util-linux ``fincore`` counts them).

    Not checked with a no-wait read: one that fails has the kernel start
    reading the file ahead, so the pages would be back at once.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return _cached_pages(path) == 0


def _cached_pages(path: Path) -> int | None:
    """How many of `path`'s pages are in the page cache (util-linux ``fincore``), or None."""
    try:
        done = subprocess.run(
            ["fincore", "--raw", "--noheadings", "--output", "PAGES", str(path)],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    count = done.stdout.strip()
    return int(count) if count.isdigit() else None


async def test_a_file_not_in_the_page_cache_is_read_in_a_worker_thread(workspace: Path) -> None:
    """A no-wait read of pages not in the cache fails, and the reader goes to a thread.

    Not on every try: a no-wait read that misses still starts the kernel's
    readahead, and when the disk answers before the kernel looks at the
    page again the read returns the data without having waited (seen here
    in 11 of 200 tries on a virtio disk). So each try drops the pages and
    reads; every answer must be right, and the thread must have been taken
    at least once in ten tries (all ten filled at once: odds near 1e-13).
    """
    path = workspace / "cold.txt"
    path.write_text("".join(f"line {i}\n" for i in range(2000)))
    reader = reader_tool(workspace_root=workspace)
    threaded = 0
    for _ in range(10):
        if not _drop_from_page_cache(path):
            pytest.skip("the pages could not be dropped here (tmpfs keeps them), or no fincore")
        waited, result = await needs_a_thread(lambda: reader(action="read", path="cold.txt"))
        assert result["success"] and result["total_lines"] == 2000
        threaded += waited
    assert threaded


@pytest.mark.parametrize("case", ["large", "link", "fifo", "directory", "key", "missing"])
async def test_what_the_loop_may_not_read_goes_to_the_thread_and_answers_as_before(
    workspace: Path, case: str
) -> None:
    target = "target.txt"
    if case == "large":
        write_cached(workspace / target, (b"x" * 99 + b"\n") * 3000)  # 300 KB, over the cap
    elif case == "link":
        write_cached(workspace / "real.txt", "through a link\n")
        (workspace / target).symlink_to("real.txt")
    elif case == "fifo":
        os.mkfifo(workspace / target)
    elif case == "directory":
        (workspace / target).mkdir()
    elif case == "key":
        write_cached(workspace / target, "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n")
    reader = reader_tool(workspace_root=workspace)
    waited, result = await needs_a_thread(lambda: reader(action="read", path=target))
    assert waited
    expected = {
        "large": "1\t" + "x" * 99,
        "link": "1\tthrough a link",
        "fifo": "not a regular file",
        "directory": "is a directory",
        "key": "private key",
        "missing": "File not found",
    }[case]
    text = result["content"] if result["success"] else result["error"]
    assert expected in (text or ""), result


async def test_the_walk_strategy_never_reads_on_the_loop(workspace: Path) -> None:
    write_cached(workspace / "a.txt", "a\n")
    reader = reader_tool(workspace_root=workspace)
    with beneath.forced_strategy("walk"):
        waited, result = await needs_a_thread(lambda: reader(action="read", path="a.txt"))
    assert waited and result["content"] == "1\ta"


_LINES = st.lists(
    st.one_of(
        st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=30).map(
            str.encode
        ),
        st.binary(max_size=12),  # invalid UTF-8, NULs, stray CRs
        st.just(b"z" * 2100),  # longer than a row may be: cut
    ),
    max_size=40,
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=_LINES,
    ending=st.sampled_from([b"\n", b"\r\n"]),
    final=st.booleans(),
    offset=st.integers(0, 45),
    limit=st.integers(1, 50),
    evidence=st.booleans(),
)
def test_the_loop_and_the_thread_give_the_same_answer(
    tmp_path: Path,
    lines: list[bytes],
    ending: bytes,
    final: bool,
    offset: int,
    limit: int,
    evidence: bool,
) -> None:
    data = ending.join(lines) + (ending if final and lines else b"")
    path = tmp_path / "f.txt"
    write_cached(path, data)
    loc = Workspace.at(tmp_path).locate("f.txt")
    on_loop = reader_module._read_cached(loc, offset, limit, evidence)
    assert on_loop is not None, "a small cached file on this machine's disk is read on the loop"
    in_thread = reader_module._read_file(loc, offset, limit, evidence)
    assert on_loop[0] == in_thread[0]
    assert on_loop[1] == in_thread[1]


def _mount(*argv: str) -> None:
    done = subprocess.run(["mount", *argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")


def _umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


async def test_only_local_filesystems_are_read_on_the_loop_and_mounts_are_followed(
    tmp_path: Path,
) -> None:
    source, root = tmp_path / "source", tmp_path / "mounted"
    source.mkdir()
    root.mkdir()
    write_cached(source / "a.txt", "on a bind mount\n")
    # A mount made after the table was first read (earlier reads did): the
    # table is read again because the mount table polls changed.
    _mount("--bind", str(source), str(root))
    try:
        waited, result = await needs_a_thread(
            lambda: reader_tool(workspace_root=root)(action="read", path="a.txt")
        )
        assert not waited and result["content"] == "1\ton a bind mount"
    finally:
        _umount(root)
    # The same directory now holds a filesystem the loop may not read,
    # whatever id the new mount was given (an unmount frees its id).
    _mount("-t", "proc", "proc", str(root))
    try:
        fd = os.open(root, os.O_PATH)
        try:
            assert mounts.is_local_mount(mounts.mount_id(fd)) is False
        finally:
            os.close(fd)
        waited, result = await needs_a_thread(
            lambda: reader_tool(workspace_root=root)(action="read", path="version")
        )
        assert waited
        assert result["success"] and "Linux" in result["content"]
    finally:
        _umount(root)


def test_the_mount_table_names_this_machines_filesystems() -> None:
    fd = os.open("/proc/self", os.O_PATH)
    try:
        assert mounts.is_local_mount(mounts.mount_id(fd)) is False  # procfs
    finally:
        os.close(fd)
    assert mounts.is_local_mount(None) is False
    assert mounts.mount_id(10**6) is None  # no such descriptor


def test_a_file_whose_real_name_differs_from_the_spelled_one_is_read_in_the_thread(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a case-folding directory (ext4 +F) "Notes.txt" opens "notes.txt";
    # this kernel's ext4 has no case folding, so the kernel's report of the
    # real path is what is replaced here. The thread path judges that name.
    write_cached(workspace / "notes.txt", "n\n")
    real = beneath._resolved_below
    monkeypatch.setattr(
        beneath, "_resolved_below", lambda root_fd, fd: (*real(root_fd, fd)[:-1], "NOTES.txt")
    )
    assert Workspace.at(workspace).locate("notes.txt").read_cached(1 << 20) is None
    monkeypatch.undo()
    assert Workspace.at(workspace).locate("notes.txt").read_cached(1 << 20) is not None


def test_a_mount_line_is_found_by_its_whole_id() -> None:
    text = (
        b"\n27 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        b"2 27 0:5 / /a\\040-\\040b rw master:3 - nfs4 server:/x rw\n"
        b"270 27 0:6 / /c rw - fuse.sshfs host: rw"
    )
    assert mounts._filesystem_of(text, 27) == "ext4"
    assert mounts._filesystem_of(text, 2) == "nfs4"  # not the "27" line, escaped " - " kept
    assert mounts._filesystem_of(text, 270) == "fuse.sshfs"  # the last line has no newline
    assert mounts._filesystem_of(text, 7) is None


def test_a_read_without_waiting_reads_on_past_a_stale_size_and_stops_past_its_cap(
    workspace: Path,
) -> None:
    """The size from `fstat` is a hint: the read goes to the end of the file, or gives up."""
    path = workspace / "grown.txt"
    data = os.urandom(50_000)
    write_cached(path, data)
    fd = os.open(path, os.O_RDONLY)
    try:
        for stale in (0, 100, 4095, 4096, 4097, 49_999, 50_000):
            assert beneath._read_nowait(fd, stale, 1 << 20) == data
        assert beneath._read_nowait(fd, 50_000, 50_000) == data
        assert beneath._read_nowait(fd, 100, 49_999) is None
        assert beneath._read_nowait(fd, 50_000, 49_999) is None
    finally:
        os.close(fd)
    (workspace / "empty.txt").write_bytes(b"")
    fd = os.open(workspace / "empty.txt", os.O_RDONLY)
    try:
        assert beneath._read_nowait(fd, 0, 10) == b""
    finally:
        os.close(fd)


def test_a_file_cached_only_in_part_is_never_read_as_a_shorter_file(workspace: Path) -> None:
    """A short read of the cached first pages is not the end: the next page is asked for.

    4 MiB, the second half evicted (a small file's pages may sit in one
    large folio, which cannot be evicted in part). The failed no-wait read
    starts the kernel's read-ahead, so the pages may be back in time for
    the next one: the read then gives the whole file, never its first half.
    """
    path = workspace / "half.bin"
    data = os.urandom(4 << 20)
    write_cached(path, data)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 2 << 20, 0, os.POSIX_FADV_DONTNEED)
        pages = _cached_pages(path)
        if pages is None or not 0 < pages < len(data) // 4096:
            pytest.skip(f"fincore counts {pages} cached pages: no partial cache to test")
        try:
            read = beneath._read_nowait(fd, len(data), 8 << 20)
        except OSError:
            return
        assert read == data
    finally:
        os.close(fd)


# The head of a file too large to count: a window at its top is read from the
# cached head on the loop, and answers as the thread does; whatever needs more
# than the head (an offset, long lines) is read in the thread.
_BIG = reader_module._HEAD_OVER + 1


def _big_file(path: Path, line: bytes) -> None:
    repeat = -(-_BIG // len(line))
    write_cached(path, line * repeat)


@pytest.mark.parametrize("evidence", [False, True])
@pytest.mark.parametrize("limit", [1, 50, 2000, 100_000])
def test_a_window_at_the_top_of_a_huge_file_is_read_from_its_cached_head(
    tmp_path: Path, evidence: bool, limit: int
) -> None:
    _big_file(tmp_path / "big.log", b"x" * 99 + b"\n")
    loc = Workspace.at(tmp_path).locate("big.log")
    on_loop = reader_module._read_cached(loc, 0, limit, evidence)
    assert on_loop is not None, "the top of a cached huge file is answered on the loop"
    in_thread = reader_module._read_file(loc, 0, limit, evidence)
    assert on_loop == in_thread
    response = on_loop[0]
    assert response.success and response.next_offset is not None
    assert response.total_lines is None  # never counted to the end: the answer the thread gives


@pytest.mark.parametrize(
    "line",
    [
        b"z" * 50_000 + b"\n",  # cut lines: the window goes past the head
        b"y" * 3 + b"\r\n",  # short lines: 2,000 of them fit, as in the thread
        "é".encode() * 40 + b"\n",
    ],
)
def test_a_window_past_the_head_is_read_in_the_thread_with_the_same_answer(
    tmp_path: Path, line: bytes
) -> None:
    _big_file(tmp_path / "big.log", line)
    loc = Workspace.at(tmp_path).locate("big.log")
    on_loop = reader_module._read_cached(loc, 0, 2000, False)
    in_thread = reader_module._read_file(loc, 0, 2000, False)
    if on_loop is not None:
        assert on_loop == in_thread
    else:
        assert len(line) > 1000, "only a window of long lines needs more than the head"
    assert in_thread[0].success


def test_an_offset_into_a_huge_file_or_a_middling_file_is_read_in_the_thread(
    tmp_path: Path,
) -> None:
    _big_file(tmp_path / "big.log", b"line\n")
    write_cached(tmp_path / "mid.log", b"m\n" * (reader_module._CACHED_READ_BYTES // 2 + 1))
    workspace = Workspace.at(tmp_path)
    assert reader_module._read_cached(workspace.locate("big.log"), 1, 10, False) is None
    # Counted to its end (and hashed), a middling file needs all of its bytes.
    assert reader_module._read_cached(workspace.locate("mid.log"), 0, 10, False) is None


async def test_the_reader_answers_the_top_of_a_huge_file_without_a_thread(
    tmp_path: Path,
) -> None:
    _big_file(tmp_path / "big.log", b"0123456789\n")
    waited, result = await needs_a_thread(
        lambda: reader_tool(workspace_root=tmp_path)(action="read", path="big.log", limit=3)
    )
    assert not waited
    assert result["content"] == "1\t0123456789\n2\t0123456789\n3\t0123456789"
    assert result["next_offset"] == 3

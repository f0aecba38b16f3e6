"""The ``reader`` tool: read text files, list directories, open documents.

`reader_tool()` builds a Tool with three actions:

* ``read`` streams a window of a UTF-8 text file as numbered rows;
* ``list_dir`` lists the files under a directory;
* ``open`` converts a PDF, PPTX, DOCX or HTML document (local, or remote
  over https from allow-listed hosts) to Markdown with docling and shows it
  through the same numbered window.

Every path goes through the workspace (`lionfactory._os.workspace`), so nothing
outside the root (a link is followed only while it stays inside) and no protected
name is ever read or listed.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, cast

import anyio.lowlevel
import anyio.to_thread
from pydantic import Field

from lionfactory._evidence import (
    MAX_HASHED_BYTES,
    FileEvidence,
    evidence_wanted,
    record_evidence,
)
from lionfactory._os.binaries import BinaryFinder
from lionfactory._os.global_excludes import project_view
from lionfactory._os.project import ProjectView
from lionfactory._os.regular import FileRefused, open_regular, refusal
from lionfactory._os.workspace import Location, PathRefused, Workspace
from lionfactory._tool import Tool, ToolHints
from lionfactory.tools import _reader_documents, _reader_images
from lionfactory.tools._models import ToolModel
from lionfactory.tools._reader_window import (
    COUNT_BUDGET,
    DEFAULT_LIMIT,
    FULL_COUNT_BYTES,
    MAX_OUTPUT_BYTES,
    Window,
    read_window,
)
from lionfactory.tools._targets import PathTargets

if TYPE_CHECKING:
    import httpx

__all__ = ["ReaderRequest", "ReaderResponse", "reader_tool"]

MAX_LIST_ROWS = 1000
"""Rows of one ``list_dir`` answer; the total is reported when more match."""

_BINARY_SNIFF = 8192
_BINARY_DOCUMENTS = frozenset({".pdf", ".docx", ".pptx"})


class ReaderRequest(ToolModel):
    """Arguments of one ``reader`` call."""

    action: Literal["read", "open", "list_dir"] = Field(
        description=(
            "'read' shows a text file as numbered lines; 'list_dir' lists the files in a "
            "directory; 'open' converts a PDF, PPTX, DOCX or HTML document (a workspace path, "
            "or an https URL on an allowed host) to Markdown and shows it as numbered lines."
        )
    )
    path: str = Field(
        description=(
            "A path relative to the workspace root (or absolute inside it); for 'open' also "
            "an https:// URL. Use '.' for the workspace root."
        )
    )
    offset: int | None = Field(
        default=None,
        description=(
            "read/open: how many lines to skip before the first row shown (0 = start of file). "
            "To continue a cut answer, pass the `next_offset` it returned."
        ),
    )
    limit: int | None = Field(
        default=None,
        ge=1,
        description=f"read/open: the most rows to show, at least 1 (default {DEFAULT_LIMIT}).",
    )
    recursive: bool | None = Field(
        default=None,
        description="list_dir: also list files in subdirectories (default false).",
    )
    file_types: list[str] | None = Field(
        default=None,
        description="list_dir: only files with these extensions, e.g. ['py', '.md'].",
    )
    include_ignored: bool | None = Field(
        default=None,
        description=(
            "list_dir: also list paths that .gitignore, .ignore or git's exclude files "
            "ignore (virtualenvs, node_modules, build output). Default false."
        ),
    )


class ReaderResponse(ToolModel):
    """The result of one ``reader`` call."""

    success: bool = Field(description="Whether the action worked; if not, read `error`.")
    content: str | None = Field(
        default=None,
        description=(
            "read/open: rows '<line number>\\t<text>'; list_dir: one path per line, relative "
            "to the workspace root (directories end with '/')."
        ),
    )
    error: str | None = Field(default=None, description="What went wrong and what to do instead.")
    truncated: bool = Field(
        default=False,
        description="Whether something was left out: more lines, cut long lines, more files.",
    )
    next_offset: int | None = Field(
        default=None,
        description="read/open: pass this as `offset` to see the lines after this window.",
    )
    total_lines: int | None = Field(
        default=None,
        description=(
            "read/open: the number of lines in the whole text; null for a file over 8 MiB "
            "whose end is more than 256 KiB past this window (it is then not counted)."
        ),
    )
    total: int | None = Field(
        default=None, description="list_dir: how many entries matched, including those cut."
    )
    notice: str | None = Field(
        default=None,
        description="Notes about the answer: what was cut, replaced characters, where to go on.",
    )
    content_hash: str | None = Field(
        default=None,
        description=(
            "read of a file, when the call records read evidence: the SHA-256 (hex) of the "
            "file's bytes (the whole file is read for it even when a window is shown; null "
            "over 8 MiB). Pass it as the editor's expected_hash."
        ),
    )


def _failure(message: str) -> ReaderResponse:
    return ReaderResponse(success=False, error=message)


def _window_response(
    window: Window, offset: int, what: str, content_hash: str | None = None
) -> ReaderResponse:
    notes: list[str] = []
    if window.past_end:
        notes.append(
            f"offset {offset} is past the end of the {what} ({window.total_lines} lines); "
            f"use a smaller offset."
        )
    elif window.total_lines == 0:
        notes.append(f"The {what} is empty.")
    if window.cut_lines:
        notes.append(f"{window.cut_lines} long line(s) were cut (see the markers).")
    if window.replaced:
        notes.append(
            "The text is not valid UTF-8; undecodable bytes are shown as U+FFFD. "
            "Use bash (e.g. `file`, `iconv`) to inspect the encoding."
        )
    if window.next_offset is not None:
        reason = f" (output limit {MAX_OUTPUT_BYTES // 1024} KiB)" if window.output_capped else ""
        # Past COUNT_BUDGET bytes after the window the lines are not counted:
        # counting a huge file would cost far more than the window itself.
        of = "" if window.total_lines is None else f" of {window.total_lines}"
        more = " (the file goes on; its lines were not all counted)" if not of else ""
        notes.append(
            f"Showing lines {offset + 1}-{window.next_offset}{of}{reason}{more}; "
            f"call again with offset={window.next_offset} to continue."
        )
    return ReaderResponse(
        success=True,
        content=window.content,
        truncated=window.truncated,
        next_offset=window.next_offset,
        total_lines=window.total_lines,
        notice=" ".join(notes) or None,
        content_hash=content_hash,
    )


def _read_file(
    loc: Location, offset: int, limit: int, want_evidence: bool
) -> tuple[ReaderResponse, FileEvidence | None]:
    """Read a window of a workspace file (blocking: in a worker thread)."""
    shown = loc.shown
    try:
        stream, st = open_regular(loc)
    except (PathRefused, FileRefused) as exc:
        step = "use action 'list_dir' to see it."
        return _failure(refusal(exc, shown, "the reader reads files.", directory=step)), None
    except OSError as exc:
        return _failure(_open_error(exc, shown)), None
    with stream:
        return _read_stream(loc, stream, st, offset, limit, want_evidence)


# Files up to this size are read on the event loop when nothing can wait
# (`_read_cached`): the window's own output cap, so a read there never
# costs more than the rows it shows and the hash of what it read.
_CACHED_READ_BYTES = MAX_OUTPUT_BYTES

# Of a file too large to be counted to its end (and to be hashed), a window
# at its top needs only the lines it shows: at most MAX_OUTPUT_BYTES of rows,
# which hold a little more than their lines. The quarter more leaves room
# for the chunks the window reader asks for; a window that needs more (long
# lines cut, CRs) finds the end of the head and is read again in a thread.
_HEAD_OVER = max(FULL_COUNT_BYTES, MAX_HASHED_BYTES)
_CACHED_HEAD_BYTES = MAX_OUTPUT_BYTES + MAX_OUTPUT_BYTES // 4


class _PastHead(Exception):
    """A window read past the cached head of a larger file."""


class _Head:
    """The head of a larger file as a stream: short reads, then `_PastHead` at its end.

    A short read is not the end of a stream for the window reader (only an
    empty one is), so the head reads as the file would as long as the
    window stays inside it; a read at the head's end raises instead of
    looking like the end of the file. The chunks are sliced from the head
    as the file's own reads would return them; a read of the whole head
    gives the head itself (a copy of it cost as much in page faults as
    building the rows). The window reader only reads what it is given.
    """

    def __init__(self, data: bytes | bytearray) -> None:
        self._data = data
        self._pos = 0

    def read(self, size: int = -1, /) -> bytes | bytearray:
        data, pos = self._data, self._pos
        if pos >= len(data):
            raise _PastHead
        end = len(data) if size < 0 else min(pos + size, len(data))
        self._pos = end
        if pos == 0 and end == len(data):
            return data
        with memoryview(data) as view:
            return bytes(view[pos:end])

    def seek(self, offset: int, whence: int = 0, /) -> int:
        if whence != 0:
            raise io.UnsupportedOperation("the head seeks from its start only")
        self._pos = offset
        return offset

    def tell(self) -> int:
        return self._pos


def _read_cached(
    loc: Location, offset: int, limit: int, want_evidence: bool
) -> tuple[ReaderResponse, FileEvidence | None] | None:
    """`_read_file` without blocking, for the event loop; None when it might have to wait.

    A worker thread's round trip cost a third of a served read of a 20 KB
    file, more than the read itself. A small regular file whose lookup and
    pages are all cached, on a local filesystem, is read whole without any
    call that can wait (`Location.read_cached`); anything else (a link, an
    uncached page, NFS or FUSE, a refusal, an error) goes to `_read_file`
    in a worker thread, which gives every answer the ordinary way.

    A window at the top of a file over `_HEAD_OVER` bytes (never counted to
    its end nor hashed, so its answer depends on its top lines and its size
    alone) is read from the file's cached head the same way: the thread's
    round trip and opening the file again were two thirds of its time.
    """
    found = loc.read_cached(
        _CACHED_READ_BYTES,
        head_over=_HEAD_OVER if offset == 0 else None,
        head=_CACHED_HEAD_BYTES,
    )
    if found is None:
        return None
    st, data = found
    if len(data) >= st.st_size:
        return _read_stream(loc, io.BytesIO(data), st, offset, limit, want_evidence, len(data))
    try:
        # The window reader uses read, seek and tell only, which _Head has.
        head = cast(BinaryIO, _Head(data))
        return _read_stream(loc, head, st, offset, limit, want_evidence, len(data))
    except _PastHead:
        return None


def _read_stream(
    loc: Location,
    stream: BinaryIO,
    st: os.stat_result,
    offset: int,
    limit: int,
    want_evidence: bool,
    in_memory: int | None = None,
) -> tuple[ReaderResponse, FileEvidence | None]:
    """The window of an open regular file (`st` is its fstat), and its evidence.

    `in_memory`: the length of a `stream` held in memory, read in one piece.
    """
    if b"\x00" in stream.read(_BINARY_SNIFF):
        return _failure(
            f"{loc.shown!r} looks binary (it contains NUL bytes); the reader shows text only. "
            f"Use bash (e.g. `file` or `xxd | head`) to inspect it, or action 'open' for "
            f"PDF/PPTX/DOCX documents."
        ), None
    stream.seek(0)
    digest = hashlib.sha256() if want_evidence and st.st_size <= MAX_HASHED_BYTES else None
    budget = COUNT_BUDGET if st.st_size > FULL_COUNT_BYTES else None
    window = read_window(
        stream,
        offset=offset,
        limit=limit,
        hasher=digest,
        count_budget=budget,
        size=st.st_size,
        first_read=in_memory,
    )
    evidence = None
    if want_evidence:
        whole = offset == 0 and window.next_offset is None and window.cut_lines == 0
        evidence = FileEvidence.of(loc.path, st, digest, whole_file=whole)
    # The hash goes in as the response is made (a copy of a response holding
    # the whole window, made only to add it, cost more than building it).
    digest_hex = None if evidence is None else evidence.sha256
    return _window_response(window, offset, "file", digest_hex), evidence


def _open_error(exc: OSError, shown: str) -> str:
    if exc.errno == errno.ENOENT:
        return (
            f"File not found: {shown!r}. Use action 'list_dir' (or the search tool) "
            f"to find the right path."
        )
    if exc.errno == errno.ELOOP:
        return (
            f"{shown!r} passes through a symbolic link loop, or a link the reader cannot "
            f"follow; links are followed only while they stay inside the workspace. "
            f"Use the target's real path."
        )
    if exc.errno == errno.EACCES:
        return f"Permission denied reading {shown!r}; choose another file."
    reason = (exc.strerror or str(exc)).lower()
    return f"Cannot open {shown!r} ({reason}); check the path."


def _normalise_types(file_types: Iterable[str]) -> tuple[str, ...]:
    return tuple(
        "." + kind.strip().lstrip(".").casefold() for kind in file_types if kind.strip(". ")
    )


def list_entries(
    workspace: Workspace,
    loc: Location,
    recursive: bool,
    types: tuple[str, ...],
    view: ProjectView | None = None,
) -> list[str]:
    """The rows of one ``list_dir`` answer, unsorted: the one place listing entries are chosen.

    Files (filtered by extension when `types` is given), plus, in a flat
    listing without a filter, subdirectories marked with a trailing slash:
    a flat listing that hid them would leave the model blind to most of a
    tree. Hidden and protected names are already left out by the workspace;
    `view` (the project's ignore rules, the same matcher search uses) prunes
    ignored files and whole ignored directories, so a recursive listing of a
    checkout is not a listing of its ``.venv``.

    Raises:
        PathRefused: the directory is (or passes through) a symlink.
        OSError: the directory cannot be opened.
    """
    rows: list[str] = []
    show_dirs = not recursive and not types
    skip = None if view is None else view.skips
    for relative, is_dir in workspace.entries(loc, recursive=recursive, skip=skip):
        if is_dir:
            if show_dirs:
                rows.append(relative + "/")
        elif not types or relative.rpartition("/")[2].casefold().endswith(types):
            rows.append(relative)
    return rows


def _list_dir(
    workspace: Workspace,
    loc: Location,
    recursive: bool,
    types: tuple[str, ...],
    view: ProjectView,
) -> ReaderResponse:
    shown = loc.shown
    try:
        entries = list_entries(workspace, loc, recursive, types, view)
    except PathRefused as exc:
        return _failure(exc.message)
    except FileNotFoundError:
        return _failure(
            f"Directory not found: {shown!r}. Use action 'list_dir' on a parent directory "
            f"(e.g. '.') to see what exists."
        )
    except NotADirectoryError:
        return _failure(f"{shown!r} is a file, not a directory; use action 'read' to see it.")
    except OSError as exc:
        return _failure(f"Cannot list {shown!r} ({(exc.strerror or str(exc)).lower()}).")
    entries.sort()
    total = len(entries)
    notes = []
    if total > MAX_LIST_ROWS:
        notes.append(
            f"Showing the first {MAX_LIST_ROWS} of {total} entries; list a subdirectory "
            f"or filter with file_types to see the rest."
        )
    elif total == 0:
        notes.append("No matching files.")
    if view.skipped:
        notes.append(
            f"{view.skipped} ignored path(s) (.gitignore, .ignore, git excludes) were left "
            f"out; set include_ignored=true to list them."
        )
    return ReaderResponse(
        success=True,
        content="\n".join(entries[:MAX_LIST_ROWS]),
        truncated=total > MAX_LIST_ROWS,
        total=total,
        notice=" ".join(notes) or None,
    )


class _ReaderHandler:
    """The ``reader`` handler: one workspace, one document opener."""

    def __init__(
        self,
        workspace: Workspace,
        opener: _reader_documents.DocumentOpener,
        *,
        images: bool = False,
    ) -> None:
        self.workspace = workspace
        self.opener = opener
        self.images = images

    def __repr__(self) -> str:
        return f"<reader handler root={str(self.workspace.root)!r}>"

    async def __call__(self, request: ReaderRequest) -> ReaderResponse:
        offset = max(request.offset or 0, 0)
        limit = request.limit if request.limit and request.limit > 0 else DEFAULT_LIMIT
        if _reader_documents.looks_like_url(request.path):
            if request.action == "open":
                return await self._open(request.path, offset, limit)
            return _failure(
                f"{request.path!r} is a URL; only action 'open' fetches URLs (https, allowed "
                f"hosts). For workspace files give a path."
            )
        try:
            loc = self.workspace.locate(request.path)
        except PathRefused as exc:
            return _failure(exc.message)
        if request.action == "read":
            if self.images and _reader_images.is_image(loc):
                ok, text = await anyio.to_thread.run_sync(_reader_images.read_image, loc)
                return ReaderResponse(success=True, content=text) if ok else _failure(text)
            suffix = loc.path.suffix
            if suffix.casefold() in _BINARY_DOCUMENTS:
                return _failure(
                    f"{request.path!r} is a {suffix} document; use action 'open' to read "
                    f"it as Markdown."
                )
            context = evidence_wanted()
            want = context is not None
            done = _read_cached(loc, offset, limit, want)
            if done is None:
                done = await anyio.to_thread.run_sync(_read_file, loc, offset, limit, want)
            else:
                # Still a checkpoint, as the worker thread's round trip was:
                # a cancelled call ends here instead of returning.
                await anyio.lowlevel.checkpoint()
            response, evidence = done
            record_evidence(context, evidence)
            return response
        if request.action == "list_dir":
            types = _normalise_types(request.file_types or ())
            view = await project_view(
                self.workspace, BinaryFinder(), include_ignored=bool(request.include_ignored)
            )
            return await anyio.to_thread.run_sync(
                _list_dir, self.workspace, loc, bool(request.recursive), types, view
            )
        return await self._open(loc, offset, limit)

    async def _open(self, target: str | Location, offset: int, limit: int) -> ReaderResponse:
        try:
            markdown = await self.opener.open(target)
        except _reader_documents.DocumentError as exc:
            return _failure(exc.message)
        window = await anyio.to_thread.run_sync(_window_of_text, markdown, offset, limit)
        return _window_response(window, offset, "document")


def _window_of_text(markdown: bytes, offset: int, limit: int) -> Window:
    return read_window(io.BytesIO(markdown), offset=offset, limit=limit)


_DESCRIPTION = f"""\
Read files, list directories and open documents inside the workspace.

Actions:
- read: show a UTF-8 text file as rows '<line number>\\t<text>' (line numbers start at 1;
  the number and the tab are not part of the file). At most `limit` rows (default
  {DEFAULT_LIMIT}) from `offset`; lines over 2,000 characters are cut with a marker and one
  answer holds at most {MAX_OUTPUT_BYTES // 1024} KiB. When `next_offset` is set, call again
  with offset=next_offset to continue. Binary files are refused (use bash for those).
- list_dir: list the files under `path` (set recursive=true for subdirectories, file_types
  to filter by extension). Paths are relative to the workspace root; at most
  {MAX_LIST_ROWS} rows, with the total when more match. Paths ignored by .gitignore,
  .ignore or git's exclude files are left out unless include_ignored=true.
- open: convert a .pdf, .pptx, .docx, .html or .htm document (a workspace path, or an
  https:// URL on an allowed host) to Markdown and show it like 'read'.

Paths are relative to the workspace root. Paths outside it, symbolic links that lead
outside it (links inside are followed), and secret files (.env, .netrc, private keys, ...)
are refused.
"""


def _description(allowed_hosts: frozenset[str]) -> str:
    if not allowed_hosts:
        remote = "Remote URLs are disabled for this reader: open only workspace paths."
    else:
        remote = f"'open' fetches https URLs only from: {', '.join(sorted(allowed_hosts))}."
    return _DESCRIPTION + remote + "\n"


def reader_tool(
    *,
    workspace_root: str | os.PathLike[str] | None = None,
    allowed_hosts: Iterable[str] = (),
    images: bool = False,
    cache_ttl: float = 300.0,
    protected_names: Iterable[str] | None = None,
    pdf_pipeline: Literal["auto", "standard", "native"] = "auto",
    transport: httpx.AsyncBaseTransport | None = None,
    resolver: Callable[[str], list[str]] | None = None,
    clock: Callable[[], float] | None = None,
    _load_docling: Callable[[], Any] | None = None,
) -> Tool:
    """Build the ``reader`` tool.

    Args:
        workspace_root: the directory every path is resolved in; the current
            directory when None. Resolved once, now.
        allowed_hosts: host names ``open`` may fetch https URLs from. Empty
            (the default) refuses every URL. Names only, matched exactly
            (case-insensitive); no wildcards, ports or IP addresses.
        images: answer a ``read`` of a .png, .jpg, .jpeg, .gif or .webp file
            (up to 5 MiB) with a base64 data URL in ``content`` instead of
            refusing it as binary; such a read records no read-before-edit
            evidence. Off by default: a text-only model cannot use one.
        cache_ttl: seconds a converted document stays cached (keyed by
            resolved path, mtime and size); 0 disables the cache.
        protected_names: fnmatch patterns of names never read or listed;
            the workspace defaults (``.env``, ``.env.*``, private keys, ...)
            when None.
        pdf_pipeline: ``"standard"`` uses docling's layout-model PDF pipeline
            (its models must be available locally), ``"native"`` the
            model-free `NativePdfPipeline`, ``"auto"`` the standard one when
            its models are present locally and the native one otherwise.
        transport: the httpx transport remote ``open`` sends requests
            through (a seam for tests: ``httpx.MockTransport``); httpx's own
            when None.
        resolver: ``resolver(host) -> list of IP address strings``, the DNS
            seam for remote ``open``; ``socket.getaddrinfo`` when None. Every
            address must be public; the request goes to the checked address.
        clock: a monotonic clock in seconds for cache expiry (a seam for
            tests); `time.monotonic` when None.
        _load_docling: private test seam replacing the lazy docling import.

    Returns:
        The ``reader`` Tool (safe to share: it is bound to no branch).

    Raises:
        ValueError: a bad option value (the message shows it).
        TypeError: an option of the wrong type.
    """
    if not isinstance(images, bool):
        raise TypeError(f"images must be a bool, got {images!r}")
    if isinstance(cache_ttl, bool) or not isinstance(cache_ttl, (int, float)):
        raise TypeError(f"cache_ttl must be a number of seconds, got {cache_ttl!r}")
    if not cache_ttl >= 0:
        raise ValueError(f"cache_ttl must be >= 0 seconds, got {cache_ttl!r}")
    if pdf_pipeline not in ("auto", "standard", "native"):
        raise ValueError(
            f"pdf_pipeline must be 'auto', 'standard' or 'native', got {pdf_pipeline!r}"
        )
    if resolver is not None and not callable(resolver):
        raise TypeError(f"resolver must be callable, got {resolver!r}")
    if clock is not None and not callable(clock):
        raise TypeError(f"clock must be callable, got {clock!r}")
    workspace = Workspace.at(workspace_root, protected=protected_names)
    opener = _reader_documents.DocumentOpener.build(
        allowed_hosts=allowed_hosts,
        cache_ttl=float(cache_ttl),
        pdf_pipeline=pdf_pipeline,
        transport=transport,
        resolver=resolver,
        clock=clock,
        load_docling=_load_docling,
    )
    return Tool(
        name="reader",
        description=_description(opener.fetcher.allowed_hosts)
        + (_reader_images.IMAGES_DESCRIPTION if images else ""),
        request_model=ReaderRequest,
        handler=_ReaderHandler(workspace, opener, images=images),
        response_model=ReaderResponse,
        targets=PathTargets(workspace, "path"),
        # A reader allowed to fetch from some hosts reaches outside the workspace.
        hints=ToolHints.reading("Read files", open_world=bool(opener.fetcher.allowed_hosts)),
    )

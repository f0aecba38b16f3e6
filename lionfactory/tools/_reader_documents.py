"""Document conversion for the reader's ``open`` action: docling, a cache, remote fetch.

docling is imported lazily, on the first ``open``, so importing
`lionfactory.tools` stays cheap and works without the ``documents`` extra.
Conversion runs in a worker thread. The document's bytes are read through one
``O_NOFOLLOW`` descriptor and handed to docling as a `DocumentStream`, so
docling never opens a path a symlink could have been swapped into.

PDFs: docling's standard PDF pipeline needs layout models from a model hub,
which cannot be fetched offline (and needs torch). ``pdf_pipeline="auto"``
uses it only when its models are already on this machine, and otherwise
docling's model-free `NativePdfPipeline` (text cells, no layout analysis).

Conversion has a deadline (`CONVERSION_SECONDS`) and returns at once when the
call is cancelled. docling cannot be interrupted inside a thread, so the
worker thread is abandoned, not killed: it runs on until docling returns and
its result is dropped, and the next conversion gets a fresh converter instead
of waiting for it. That costs a CPU until the abandoned conversion ends (and
interpreter exit waits for it, up to the deadline, since finalising under
docling's native code aborts the process); a
worker process that could be killed was rejected for now because every
process would import docling again (seconds, and hundreds of MiB). The known
pathological input, HTML nested thousands of levels deep (docling recurses
per level and took minutes before failing), is refused before conversion:
deeper than `MAX_HTML_DEPTH` open elements.

The cache is per factory call: converted Markdown keyed by the resolved path,
mtime and size (remote documents by URL and content hash), expiring after the
factory's ``cache_ttl`` by an injectable clock, bounded in entries and bytes.
"""

from __future__ import annotations

import atexit
import collections
import hashlib
import importlib.util
import io
import os
import re
import threading
import time
import types
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio.to_thread
import attrs

from lionfactory._os.regular import FileRefused, open_regular, read_capped, refusal
from lionfactory._os.workspace import Location, PathRefused
from lionfactory.errors import ToolFailure
from lionfactory.tools import _reader_remote

if TYPE_CHECKING:
    import httpx

__all__ = [
    "INSTALL_HINT",
    "MAX_DOCUMENT_BYTES",
    "SUPPORTED_SUFFIXES",
    "DocumentError",
    "DocumentOpener",
    "looks_like_url",
]

SUPPORTED_SUFFIXES = frozenset({".pdf", ".pptx", ".docx", ".html", ".htm"})
MAX_DOCUMENT_BYTES = 50 * 1024 * 1024
INSTALL_HINT = "pip install 'lionfactory[documents]'"

CONVERSION_SECONDS = 120.0
"""Longest one conversion may take before it is abandoned and the call answers."""

MAX_HTML_DEPTH = 256
"""Deepest element nesting an HTML document may have.

Browsers' tree builders stop nesting around 512 levels; real pages stay well
under 100. docling converts recursively: 2,000 nested ``<div>`` took 15 s and
then failed, 10,000 took a minute and a half.
"""

# Elements that never hold children, so they open no level.
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta"}
    | {"param", "source", "track", "wbr", "!doctype"}
)
# A tag's attributes stop at the next < as well as at >, so a stray < never
# makes the scan look ahead to the end of the document (which would be
# quadratic on "<a<a<a...").
_TAG = re.compile(rb"<(/?)([A-Za-z!][A-Za-z0-9:-]*)[^<>]*>")

CACHE_MAX_ENTRIES = 32
CACHE_MAX_BYTES = 64 * 1024 * 1024

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
# The default layout model of the standard PDF pipeline (docling 2.142).
_LAYOUT_REPO = "docling-project/docling-layout-heron"

PdfPipeline = Literal["auto", "standard", "native"]


class DocumentError(ToolFailure):
    """A document cannot be opened; `message` tells the model what to do."""


def looks_like_url(target: str) -> bool:
    """Whether `target` is a URL (any scheme) rather than a workspace path."""
    return bool(_URL.match(target.strip()))


def import_docling() -> types.SimpleNamespace:
    """Import the parts of docling the converter uses (raises ImportError if absent)."""
    from docling.datamodel.base_models import ConversionStatus, DocumentStream, InputFormat
    from docling.datamodel.pipeline_options import NativePdfPipelineOptions, PdfPipelineOptions
    from docling.document_converter import (
        DocumentConverter,
        NativePdfFormatOption,
        PdfFormatOption,
    )

    return types.SimpleNamespace(
        ConversionStatus=ConversionStatus,
        DocumentConverter=DocumentConverter,
        DocumentStream=DocumentStream,
        InputFormat=InputFormat,
        NativePdfFormatOption=NativePdfFormatOption,
        NativePdfPipelineOptions=NativePdfPipelineOptions,
        PdfFormatOption=PdfFormatOption,
        PdfPipelineOptions=PdfPipelineOptions,
    )


def standard_pdf_models_available() -> bool:
    """Whether docling's standard PDF pipeline could run here without a download.

    It needs torch and the layout model's weights, either under docling's
    artifacts folder (``DOCLING_ARTIFACTS_PATH``) or in the model hub's local
    cache. `find_spec` looks for the packages without importing them
    (importing torch takes seconds). OCR and table models are not checked:
    a machine that has the layout model normally has docling's full set.
    """
    if importlib.util.find_spec("torch") is None:
        return False
    artifacts = os.environ.get("DOCLING_ARTIFACTS_PATH")
    if artifacts and (Path(artifacts) / _LAYOUT_REPO.replace("/", "--")).is_dir():
        return True
    if importlib.util.find_spec("huggingface_hub") is None:
        return False
    from huggingface_hub import try_to_load_from_cache  # type: ignore[import-not-found]

    return isinstance(try_to_load_from_cache(_LAYOUT_REPO, "config.json"), str)


def html_depth_problem(data: bytes, shown: str) -> str | None:
    """Why an HTML document is too deeply nested to convert, or None.

    One linear pass over the tags, counting open elements (void and
    self-closed ones open nothing; a closing tag closes one level, which
    over-counts for markup that leaves elements open and under-counts
    nothing that matters). Comments and scripts are not parsed apart: a tag
    inside them only makes the estimate deeper, never shallower.
    """
    depth = deepest = 0
    for match in _TAG.finditer(data):
        closing, name = match.groups()
        self_closing = match.group().endswith(b"/>")
        if closing:
            depth = max(0, depth - 1)
        elif not self_closing and name.decode("ascii", "replace").casefold() not in _VOID:
            depth += 1
            deepest = max(deepest, depth)
            if deepest > MAX_HTML_DEPTH:
                return (
                    f"{shown!r} nests HTML elements more than {MAX_HTML_DEPTH} levels deep; "
                    f"'open' refuses such documents (converting them takes minutes and "
                    f"fails). Read it as text with action 'read', or search it with grep."
                )
    return None


class _Abandoned:
    """Conversions left running by a cancelled or timed-out call.

    At interpreter exit they are still inside docling's native code, and
    finalising the interpreter under them aborts the process (SIGABRT). The
    first abandonment registers an exit hook that waits for them, at most
    `CONVERSION_SECONDS`.
    """

    def __init__(self) -> None:
        self._done = threading.Condition()
        self._running = 0
        self._hooked = False

    def started(self) -> None:
        with self._done:
            self._running += 1

    def finished(self) -> None:
        with self._done:
            self._running -= 1
            self._done.notify_all()

    def abandoned(self) -> None:
        with self._done:
            if not self._hooked:
                self._hooked = True
                atexit.register(self.wait)

    def wait(self) -> None:
        with self._done:
            self._done.wait_for(lambda: self._running <= 0, timeout=CONVERSION_SECONDS)


_IN_FLIGHT = _Abandoned()


@attrs.define(eq=False)
class _Converter:
    """One docling `DocumentConverter`, built on first use and reused."""

    load: Callable[[], Any]
    pdf_pipeline: PdfPipeline
    _docling: Any = None
    _converter: Any = None
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def _build(self) -> None:
        try:
            docling = self.load()
        except ImportError as exc:
            raise DocumentError(
                f"Opening documents needs docling, which is not installed ({exc}). "
                f"Install it with: {INSTALL_HINT}"
            ) from None
        pipeline = self.pdf_pipeline
        if pipeline == "auto":
            pipeline = "standard" if standard_pdf_models_available() else "native"
        if pipeline == "native":
            pdf_option = docling.NativePdfFormatOption(
                pipeline_options=docling.NativePdfPipelineOptions(
                    generate_page_images=False, generate_picture_images=False
                )
            )
        else:
            pdf_option = docling.PdfFormatOption(pipeline_options=docling.PdfPipelineOptions())
        self._converter = docling.DocumentConverter(
            format_options={docling.InputFormat.PDF: pdf_option}
        )
        self._docling = docling

    def abandon(self) -> None:
        """Forget the converter a still-running (abandoned) conversion is using.

        The abandoned thread keeps its converter and its lock; the next
        conversion builds a fresh converter behind a fresh lock instead of
        waiting for it.
        """
        self._converter = None
        self._lock = threading.Lock()
        _IN_FLIGHT.abandoned()

    def convert(self, name: str, data: bytes, shown: str) -> bytes:
        """Convert one document to Markdown (blocking; call in a worker thread)."""
        _IN_FLIGHT.started()
        try:
            return self._convert(name, data, shown)
        finally:
            _IN_FLIGHT.finished()

    def _convert(self, name: str, data: bytes, shown: str) -> bytes:
        # One conversion at a time per converter: docling's pipelines are not
        # documented as thread-safe, and two cores gain nothing from racing.
        lock = self._lock
        with lock:
            if self._converter is None:
                self._build()
            docling, converter = self._docling, self._converter
            source = docling.DocumentStream(name=name, stream=io.BytesIO(data))
            try:
                result = converter.convert(source, raises_on_error=False)
            except Exception as exc:  # docling's reasons come as many exception types
                raise DocumentError(
                    f"Could not convert {shown!r}: {_reason(exc)}. Check that the file is a "
                    f"valid {Path(name).suffix or 'document'}, or inspect it with bash."
                ) from None
        if result.status not in (
            docling.ConversionStatus.SUCCESS,
            docling.ConversionStatus.PARTIAL_SUCCESS,
        ):
            errors = "; ".join(str(err.error_message) for err in result.errors) or str(
                result.status
            )
            raise DocumentError(
                f"Could not convert {shown!r}: {errors}. Check that the file is a valid "
                f"{Path(name).suffix or 'document'}, or inspect it with bash."
            )
        markdown: str = result.document.export_to_markdown()
        return markdown.encode("utf-8")


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 500 else text[:500] + "…"


@attrs.define(eq=False)
class _Cache:
    """Converted Markdown per key, expiring after `ttl` seconds of `clock`.

    One entry per document identity (a path or a URL): a newer version
    replaces the older one instead of waiting for it to expire.
    """

    ttl: float
    clock: Callable[[], float]
    max_entries: int = CACHE_MAX_ENTRIES
    max_bytes: int = CACHE_MAX_BYTES
    _entries: collections.OrderedDict[str, tuple[Hashable, float, bytes]] = attrs.field(
        factory=collections.OrderedDict
    )
    _bytes: int = 0
    # Worker threads look entries up while the event loop stores them.
    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    def get(self, identity: str, version: Hashable) -> bytes | None:
        """The cached Markdown of this version of `identity`, or None."""
        with self._lock:
            return self._get(identity, version)

    def put(self, identity: str, version: Hashable, data: bytes) -> None:
        """Store `data` for this version of `identity` (no-op when the cache is off)."""
        with self._lock:
            self._put(identity, version, data)

    def _get(self, identity: str, version: Hashable) -> bytes | None:
        entry = self._entries.get(identity)
        if entry is None:
            return None
        stored_version, expires, data = entry
        if stored_version != version or self.clock() >= expires:
            self._drop(identity)
            return None
        self._entries.move_to_end(identity)
        return data

    def _put(self, identity: str, version: Hashable, data: bytes) -> None:
        if self.ttl <= 0 or len(data) > self.max_bytes:
            return
        self._drop(identity)
        self._entries[identity] = (version, self.clock() + self.ttl, data)
        self._bytes += len(data)
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, identity: str) -> None:
        entry = self._entries.pop(identity, None)
        if entry is not None:
            self._bytes -= len(entry[2])


def _read_local(loc: Location, cache: _Cache) -> tuple[Hashable, bytes, bool]:
    """Read a local document: (version, bytes, whether the bytes are cached Markdown).

    The cache is consulted between fstat and read, on the same descriptor, so
    a cached conversion skips reading up to 50 MiB again.
    """
    path, shown = loc.path, loc.shown
    if path.suffix.casefold() not in SUPPORTED_SUFFIXES:
        kinds = ", ".join(sorted(SUPPORTED_SUFFIXES))
        raise DocumentError(
            f"{shown!r} is not a document 'open' converts ({kinds}); use action 'read' "
            f"for text files."
        )
    try:
        stream, st = open_regular(loc, max_bytes=MAX_DOCUMENT_BYTES)
        with stream:
            version = (st.st_mtime_ns, st.st_size)
            cached = cache.get(str(path), version)
            if cached is not None:
                return version, cached, True
            data = read_capped(stream, shown, MAX_DOCUMENT_BYTES)
    except (PathRefused, OSError, FileRefused) as exc:
        answer = refusal(
            exc,
            shown,
            "give a document's path.",
            missing="use action 'list_dir' to find the right path.",
            too_large=_TOO_LARGE_STEP,
        )
        raise DocumentError(answer) from None
    return version, data, False


_TOO_LARGE_STEP = (
    f"'open' converts documents up to {MAX_DOCUMENT_BYTES // (1024 * 1024)} MiB. Split it, "
    f"or extract text with bash."
)


@attrs.define(eq=False)
class DocumentOpener:
    """Opens local and remote documents as Markdown bytes, with a cache."""

    converter: _Converter
    cache: _Cache
    fetcher: _reader_remote.Fetcher
    deadline: float = CONVERSION_SECONDS

    @classmethod
    def build(
        cls,
        *,
        allowed_hosts: Iterable[str],
        cache_ttl: float,
        pdf_pipeline: PdfPipeline,
        transport: httpx.AsyncBaseTransport | None,
        resolver: Callable[[str], list[str]] | None,
        clock: Callable[[], float] | None,
        load_docling: Callable[[], Any] | None,
    ) -> DocumentOpener:
        """Validate the options and build the opener (no I/O)."""
        return cls(
            converter=_Converter(load=load_docling or import_docling, pdf_pipeline=pdf_pipeline),
            cache=_Cache(ttl=cache_ttl, clock=clock or time.monotonic),
            fetcher=_reader_remote.Fetcher.build(
                allowed_hosts=allowed_hosts, transport=transport, resolver=resolver
            ),
            deadline=CONVERSION_SECONDS,
        )

    async def open(self, target: str | Location) -> bytes:
        """Return the Markdown of a workspace location or an https URL.

        Raises:
            DocumentError: with a message for the model.
        """
        if isinstance(target, str):
            try:
                name, data = await self.fetcher.fetch(target)
            except _reader_remote.FetchRefused as exc:
                raise DocumentError(exc.message) from None
            identity = target
            version: Hashable = hashlib.sha256(data).hexdigest()
            shown = target
            cached = self.cache.get(identity, version)
            if cached is not None:
                return cached
        else:
            shown = target.shown
            version, data, is_cached = await anyio.to_thread.run_sync(
                _read_local, target, self.cache
            )
            if is_cached:
                return data
            name, identity = target.name, str(target.path)
        if Path(name).suffix.casefold() in (".html", ".htm"):
            # A linear pass, but up to 50 MiB of it: off the event loop.
            problem = await anyio.to_thread.run_sync(html_depth_problem, data, shown)
            if problem is not None:
                raise DocumentError(problem)
        markdown = await self._convert(name, data, shown)
        self.cache.put(identity, version, markdown)
        return markdown

    async def _convert(self, name: str, data: bytes, shown: str) -> bytes:
        """Convert in a worker thread that is abandoned on cancellation or at the deadline."""
        finished = False
        try:
            with anyio.move_on_after(self.deadline):
                markdown = await anyio.to_thread.run_sync(
                    self.converter.convert, name, data, shown, abandon_on_cancel=True
                )
                finished = True
        finally:
            if not finished:
                self.converter.abandon()
        if not finished:
            raise DocumentError(
                f"Converting {shown!r} took longer than {self.deadline:.0f} s and was "
                f"abandoned. The document may be malformed or very large; read it as text "
                f"with action 'read', or extract parts of it with bash."
            )
        return markdown

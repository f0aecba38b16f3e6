"""reader open: real docling conversion of generated documents, the cache, failures."""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import time
import types
from pathlib import Path

import pytest
import trio

from lionfactory.tools import _reader_documents
from lionfactory.tools.reader import reader_tool

docx = pytest.importorskip("docx")
pptx = pytest.importorskip("pptx")
fpdf = pytest.importorskip("fpdf")
pytest.importorskip("docling")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingDocling:
    """The real docling, with a count of conversions and the options used."""

    def __init__(self) -> None:
        self.conversions = 0
        self.format_options: dict = {}

    def __call__(self) -> types.SimpleNamespace:
        real = _reader_documents.import_docling()
        spy = self

        class DocumentConverter(real.DocumentConverter):
            def __init__(self, *args, **kwargs):
                spy.format_options = kwargs.get("format_options", {})
                super().__init__(*args, **kwargs)

            def convert(self, *args, **kwargs):
                spy.conversions += 1
                return super().convert(*args, **kwargs)

        return types.SimpleNamespace(**{**vars(real), "DocumentConverter": DocumentConverter})


@pytest.fixture
def docling() -> CountingDocling:
    return CountingDocling()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def reader(workspace: Path, docling: CountingDocling, clock: Clock):
    return reader_tool(workspace_root=workspace, clock=clock, _load_docling=docling)


def make_docx(path: Path) -> None:
    document = docx.Document()
    document.add_heading("Quarterly Report", level=1)
    document.add_paragraph("Revenue grew by twelve percent.")
    document.save(path)


def make_pptx(path: Path) -> None:
    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "Roadmap Slide"
    slide.placeholders[1].text = "Ship the reader"
    presentation.save(path)


def make_html(path: Path) -> None:
    path.write_text("<html><body><h1>Hello Page</h1><p>A paragraph of text.</p></body></html>")


def make_pdf(path: Path) -> None:
    pdf = fpdf.FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=14)
    pdf.cell(text="Invoice number 4711")
    pdf.output(str(path))


DOCUMENTS = [
    ("report.docx", make_docx, ["Quarterly Report", "Revenue grew by twelve percent."]),
    ("slides.pptx", make_pptx, ["Roadmap Slide", "Ship the reader"]),
    ("page.html", make_html, ["# Hello Page", "A paragraph of text."]),
    ("page.htm", make_html, ["Hello Page"]),
    ("invoice.pdf", make_pdf, ["Invoice number 4711"]),
]


@pytest.mark.parametrize(("name", "make", "expected"), DOCUMENTS)
async def test_open_converts_documents_with_docling(reader, workspace, name, make, expected):
    make(workspace / name)
    result = await reader(action="open", path=name)
    assert result["success"] is True, result["error"]
    for text in expected:
        assert text in result["content"]
    assert result["content"].startswith("1\t")


async def test_open_uses_the_numbered_window(reader, workspace: Path):
    make_docx(workspace / "r.docx")
    result = await reader(action="open", path="r.docx", offset=2, limit=1)
    assert result["content"] == "3\tRevenue grew by twelve percent."
    assert result["total_lines"] == 3
    assert result["next_offset"] is None


async def test_the_second_open_is_served_from_the_cache(reader, docling, workspace: Path):
    make_docx(workspace / "r.docx")
    first = await reader(action="open", path="r.docx")
    second = await reader(action="open", path="r.docx", offset=1)
    assert docling.conversions == 1
    assert second["content"] == "\n".join(first["content"].split("\n")[1:])


async def test_touching_the_file_converts_it_again(reader, docling, workspace: Path):
    target = workspace / "r.docx"
    make_docx(target)
    await reader(action="open", path="r.docx")
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    await reader(action="open", path="r.docx")
    assert docling.conversions == 2


async def test_an_expired_entry_is_converted_again(workspace, docling, clock):
    tool = reader_tool(workspace_root=workspace, cache_ttl=5, clock=clock, _load_docling=docling)
    make_html(workspace / "p.html")
    await tool(action="open", path="p.html")
    clock.now += 4.9
    await tool(action="open", path="p.html")
    assert docling.conversions == 1
    clock.now += 0.2
    await tool(action="open", path="p.html")
    assert docling.conversions == 2


async def test_cache_ttl_zero_disables_the_cache(workspace, docling, clock):
    tool = reader_tool(workspace_root=workspace, cache_ttl=0, clock=clock, _load_docling=docling)
    make_html(workspace / "p.html")
    await tool(action="open", path="p.html")
    await tool(action="open", path="p.html")
    assert docling.conversions == 2


async def test_each_factory_call_has_its_own_cache(workspace, docling, clock):
    make_html(workspace / "p.html")
    for _ in range(2):
        tool = reader_tool(workspace_root=workspace, clock=clock, _load_docling=docling)
        await tool(action="open", path="p.html")
    assert docling.conversions == 2


def test_the_cache_is_bounded_in_entries(clock):
    cache = _reader_documents._Cache(ttl=60, clock=clock, max_entries=2, max_bytes=1000)
    for name in "abc":
        cache.put(name, 1, b"x")
    assert cache.get("a", 1) is None
    assert cache.get("b", 1) == b"x"
    assert cache.get("c", 1) == b"x"


def test_the_cache_is_bounded_in_bytes(clock):
    cache = _reader_documents._Cache(ttl=60, clock=clock, max_entries=10, max_bytes=10)
    cache.put("a", 1, b"123456")
    cache.put("b", 1, b"123456")
    cache.put("huge", 1, b"x" * 11)
    assert cache.get("a", 1) is None
    assert cache.get("b", 1) == b"123456"
    assert cache.get("huge", 1) is None


async def test_missing_docling_gives_the_install_command(workspace: Path):
    def absent():
        raise ImportError("No module named 'docling'")

    tool = reader_tool(workspace_root=workspace, _load_docling=absent)
    make_html(workspace / "p.html")
    result = await tool(action="open", path="p.html")
    assert result["success"] is False
    assert "pip install 'lionfactory[documents]'" in result["error"]


async def test_a_corrupt_document_gives_doclings_reason(reader, workspace: Path):
    (workspace / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip archive")
    result = await reader(action="open", path="broken.docx")
    assert result["success"] is False
    assert "Could not convert 'broken.docx'" in result["error"]
    assert "could not load document" in result["error"]
    assert "inspect it with bash" in result["error"]


async def test_a_corrupt_pdf_gives_doclings_reason(reader, workspace: Path):
    (workspace / "broken.pdf").write_bytes(b"%PDF-1.4 truncated nonsense")
    result = await reader(action="open", path="broken.pdf")
    assert result["success"] is False
    assert "Could not convert 'broken.pdf'" in result["error"]


async def test_an_unsupported_type_points_to_read(reader, workspace: Path):
    (workspace / "notes.txt").write_text("x")
    result = await reader(action="open", path="notes.txt")
    assert result["success"] is False
    assert "use action 'read'" in result["error"]


async def test_a_document_over_50_mib_is_refused(reader, docling, workspace: Path):
    with (workspace / "huge.pdf").open("wb") as handle:
        handle.truncate(50 * 1024 * 1024 + 1)
    result = await reader(action="open", path="huge.pdf")
    assert result["success"] is False
    assert "up to 50 MiB" in result["error"]
    assert docling.conversions == 0


async def test_a_missing_document_is_refused_with_advice(reader):
    result = await reader(action="open", path="nope.pdf")
    assert result["success"] is False
    assert "list_dir" in result["error"]


async def test_a_symlinked_document_opens_inside_the_workspace_and_is_refused_outside(
    reader, workspace: Path, tmp_path: Path
):
    """A link is followed like any other read: only while its target stays inside the root."""
    make_html(workspace / "p.html")
    (workspace / "alias.html").symlink_to(workspace / "p.html")
    inside = await reader(action="open", path="alias.html")
    assert inside["success"] is True, inside
    outside = tmp_path / "outside"
    outside.mkdir()
    make_html(outside / "secret.html")
    (workspace / "away.html").symlink_to(outside / "secret.html")
    result = await reader(action="open", path="away.html")
    assert result["success"] is False
    assert "symbolic link that leads outside the workspace" in result["error"]


async def test_a_protected_document_is_refused(reader, workspace: Path):
    result = await reader(action="open", path=".env.d/page.html")
    assert result["success"] is False
    assert "protected" in result["error"]


async def test_pdfs_convert_without_torch(reader, workspace: Path):
    assert importlib.util.find_spec("torch") is None
    make_pdf(workspace / "invoice.pdf")
    result = await reader(action="open", path="invoice.pdf")
    assert result["success"] is True
    assert "torch" not in sys.modules


async def test_auto_uses_the_native_pdf_pipeline_without_local_models(reader, docling, workspace):
    assert _reader_documents.standard_pdf_models_available() is False
    make_pdf(workspace / "invoice.pdf")
    await reader(action="open", path="invoice.pdf")
    option = next(iter(docling.format_options.values()))
    assert type(option).__name__ == "NativePdfFormatOption"
    assert option.pipeline_options.generate_page_images is False
    assert option.pipeline_options.generate_picture_images is False


async def test_the_standard_pdf_pipeline_can_be_forced(workspace, docling):
    tool = reader_tool(workspace_root=workspace, pdf_pipeline="standard", _load_docling=docling)
    make_html(workspace / "p.html")  # builds the converter without running a PDF
    await tool(action="open", path="p.html")
    option = next(iter(docling.format_options.values()))
    assert type(option).__name__ == "PdfFormatOption"


# -- hostile documents: nesting, deadline, cancellation ------------------------------


class BlockingDocling:
    """A docling whose conversion blocks until released (or ten seconds pass)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.conversions = 0
        self.returned = 0

    def __call__(self) -> types.SimpleNamespace:
        real = _reader_documents.import_docling()
        spy = self

        class DocumentConverter:
            def __init__(self, *args, **kwargs):
                pass

            def convert(self, *args, **kwargs):
                spy.conversions += 1
                spy.started.set()
                spy.release.wait(10)
                spy.returned += 1
                raise RuntimeError("released")

        return types.SimpleNamespace(**{**vars(real), "DocumentConverter": DocumentConverter})


@pytest.mark.parametrize("depth", [_reader_documents.MAX_HTML_DEPTH + 1, 2_000, 10_000])
async def test_deeply_nested_html_is_refused_before_conversion(
    workspace: Path, docling: CountingDocling, clock: Clock, depth: int
):
    (workspace / "deep.html").write_text("<html><body>" + "<div>" * depth + "x")
    reader = reader_tool(workspace_root=workspace, clock=clock, _load_docling=docling)

    result = await reader(action="open", path="deep.html")

    assert result["success"] is False
    assert f"more than {_reader_documents.MAX_HTML_DEPTH} levels" in result["error"]
    assert docling.conversions == 0


async def test_html_within_the_nesting_limit_converts(workspace: Path, reader):
    inner = "<div>" * 100 + "<p>Deep but fine</p>" + "</div>" * 100
    (workspace / "ok.html").write_text(f"<html><body><br/><img src=x>{inner}</body></html>")

    result = await reader(action="open", path="ok.html")

    assert result["success"] is True, result
    assert "Deep but fine" in result["content"]


def test_the_nesting_scan_is_linear():
    """Four times the markup costs about four times the work (a stray `<` never rescans)."""

    def work(data: bytes) -> float:
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            _reader_documents.html_depth_problem(data, "x")
            best = min(best, time.process_time() - start)
        return best

    for unit in (b"<a", b"<p>x</p>", b"<br/>"):
        small, large = work(unit * 50_000), work(unit * 200_000)
        assert large / max(small, 1e-6) < 9, (unit, small, large)


async def test_a_cancelled_open_returns_at_once(workspace: Path, clock: Clock):
    (workspace / "page.html").write_text("<html><body><p>x</p></body></html>")
    blocking = BlockingDocling()
    reader = reader_tool(workspace_root=workspace, clock=clock, _load_docling=blocking)
    try:
        async with trio.open_nursery() as nursery:

            async def open_it() -> None:
                await reader(action="open", path="page.html")

            nursery.start_soon(open_it)
            await trio.to_thread.run_sync(blocking.started.wait, 10)
            nursery.cancel_scope.cancel()
        # Back here while the conversion is still blocked: nobody waited for it.
        assert blocking.returned == 0
        assert blocking.conversions == 1
    finally:
        blocking.release.set()


async def test_a_conversion_past_the_deadline_is_abandoned_and_the_next_one_runs(
    workspace: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
):
    (workspace / "page.html").write_text("<html><body><p>x</p></body></html>")
    # Imported now, so the worker reaches the conversion well within the deadline.
    _reader_documents.import_docling()
    monkeypatch.setattr(_reader_documents, "CONVERSION_SECONDS", 1.0)
    blocking = BlockingDocling()
    reader = reader_tool(workspace_root=workspace, clock=clock, _load_docling=blocking)
    try:
        first = await reader(action="open", path="page.html")

        assert first["success"] is False
        assert "took longer than" in first["error"] and "abandoned" in first["error"]
        # The abandoned thread still holds the first converter; a second open
        # gets a fresh one instead of queueing behind it.
        second = await reader(action="open", path="page.html")
        assert second["success"] is False and "abandoned" in second["error"]
        assert blocking.conversions == 2
        assert blocking.returned == 0
    finally:
        blocking.release.set()

"""Target 7: the reader's document cache.

Writes a DOCX with python-docx, then through one ``reader`` tool:

* opens a different document first, so docling's import is not charged to
  the conversion measured next (that cold figure is shown for information);
* opens the DOCX (a conversion), then opens it again unchanged (a cache hit;
  target: under 1% of the conversion). The conversion figure compared is the
  shorter of that first open and the best of a few opens through a reader
  whose cache is off, so one slow first conversion cannot flatter the ratio;
* rewrites the DOCX with other text and opens it again: it must be converted
  again (the new text shows), not served from the cache;
* cancels an open halfway through a conversion: the call returns at once
  (the worker thread is abandoned and finishes on its own, which is the
  cost: a CPU busy for the rest of that conversion).
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from _common import Row, Size, abest_of, check_row, info_row, ratio_row, sizes

from lionfactory import Tool
from lionfactory.tools import reader_tool

BENCH = "documents"

SIZES: dict[Size, dict[str, Any]] = {
    "tiny": {"sections": 10, "repeat": 3, "conversions": 1},
    "full": {"sections": 300, "repeat": 20, "conversions": 3},
}


def write_docx(path: Path, sections: int, word: str) -> None:
    import docx  # python-docx, a dev dependency: only this benchmark needs it

    document = docx.Document()
    for i in range(sections):
        document.add_heading(f"Section {i} {word}", level=2)
        document.add_paragraph(f"{word} paragraph {i}. " + "Lorem ipsum dolor sit amet. " * 8)
        if i % 20 == 0:
            table = document.add_table(rows=3, cols=3)
            for r, row in enumerate(table.rows):
                for c, cell in enumerate(row.cells):
                    cell.text = f"{word} {r}.{c}"
    document.save(str(path))


def run(size: Size) -> list[Row]:
    params = sizes(size, SIZES)
    sections, repeat = params["sections"], params["repeat"]
    conversions = params["conversions"]
    with tempfile.TemporaryDirectory(prefix="lf-bench-documents-") as tmp:
        root = Path(tmp)
        write_docx(root / "warm.docx", 2, "warm")
        write_docx(root / "report.docx", sections, "alpha")
        reader = reader_tool(workspace_root=root)
        uncached = reader_tool(workspace_root=root, cache_ttl=0)

        async def open_doc(name: str, through: Tool = reader) -> dict[str, Any]:
            result = await through(action="open", path=name, limit=100_000)
            if not result["success"]:
                raise RuntimeError(f"open {name} failed: {result['error']}")
            return result

        async def timed(name: str) -> tuple[float, dict[str, Any]]:
            start = time.perf_counter()
            result = await open_doc(name)
            return time.perf_counter() - start, result

        async def measure() -> dict[str, Any]:
            cold, _ = await timed("warm.docx")
            first, before = await timed("report.docx")
            cached = await abest_of(lambda: open_doc("report.docx"), repeat)
            convert = await abest_of(lambda: open_doc("report.docx", uncached), conversions)
            # A different size as well as a newer mtime: the cache key changes
            # even on a filesystem with coarse timestamps.
            write_docx(root / "report.docx", sections + 1, "beta")
            again, after = await timed("report.docx")
            # Cancel halfway through a conversion; time how long the call
            # takes to return after the cancellation.
            half = min(first, convert) / 2
            start = time.perf_counter()
            with trio.move_on_after(half):
                await open_doc("report.docx", uncached)
            cancelled = max(0.0, time.perf_counter() - start - half)
            return {
                "cancelled": cancelled,
                "cold": cold,
                "first": first,
                "convert": min(first, convert),
                "cached": cached,
                "again": again,
                "before": before["content"],
                "after": after["content"],
            }

        got = trio.run(measure)
    converted_again = "beta" in got["after"] and "alpha" not in got["after"]
    return [
        info_row(BENCH, "first open ever (imports docling)", got["cold"], "s"),
        info_row(BENCH, f"first open: convert DOCX ({sections} sections)", got["first"], "s"),
        ratio_row(
            BENCH, "open unchanged DOCX again (cached)", got["cached"], got["convert"], "s", 0.01
        ),
        info_row(BENCH, "open changed DOCX", got["again"], "s", baseline=got["convert"]),
        info_row(
            BENCH,
            "cancelled mid-conversion: returns after",
            got["cancelled"],
            "s",
            baseline=got["convert"],
        ),
        check_row(
            BENCH,
            "changed DOCX converted again",
            converted_again and "alpha" in got["before"] and math.isfinite(got["again"]),
            "new text",
        ),
    ]

"""Target 8: the editor on a big file.

Writes a 50 MB text file with one unique marker in the middle and compares an
``editor`` edit of that marker with a plain read-replace-write in Python
(read the bytes, decode, ``str.replace``, encode, write; target: at most
1.5x). For information it also times the plain edit made atomic the same way
the editor makes it (temporary file, fsync, ``os.replace``), the cost of
durability rather than of the tool. In a fresh child process it measures the
edit's peak memory (target: at most 3x the file size) and checks that the
write stayed atomic: the file was replaced by a new inode and no temporary
file was left behind. Last, for information, it measures an edit whose
``old_string`` is not in the file: the error path, which looks for near
matches to explain the failure to the model.

Then robustness on real files (the corpus of ``tests/tools/editor_corpus.py``:
hunks of installed projects' sources, perturbed as models perturb edits):
per class, the share applied, refused and misapplied (targets: recoverable
classes >= 95 % applied, must-refuse classes 100 % refused, 0 misapplied
everywhere), and the median time of one edit through the tool against a
plain read / ``str.replace`` / write of the same file in the same run.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from _common import MIB, Row, Size, abest_of, check_row, child_memory, interleaved, ratio_row, sizes

from lionfactory.tools import editor_tool

BENCH = "editor"
MARKER = "THE_ONE_UNIQUE_MARKER = 1"
REPLACEMENT = "THE_ONE_UNIQUE_MARKER = 2"
ABSENT = "this text is not in the file"
LINE = "    value = compute(value, factor=3)  # an ordinary line of code, nothing special here\n"

SIZES: dict[Size, dict[str, Any]] = {
    "tiny": {"bytes": 1 * MIB, "repeat": 2, "files": 15},
    "full": {"bytes": 50 * MIB, "repeat": 5, "files": 80},
}


def write_file(path: Path, size: int) -> None:
    half = LINE * (size // 2 // len(LINE))
    path.write_text(half + MARKER + "\n" + half, encoding="utf-8")


def plain_edit(path: Path, old: str, new: str) -> None:
    text = path.read_bytes().decode("utf-8")
    path.write_bytes(text.replace(old, new, 1).encode("utf-8"))


def plain_atomic_edit(path: Path, old: str, new: str) -> None:
    data = path.read_bytes().decode("utf-8").replace(old, new, 1).encode("utf-8")
    temp = path.with_name(path.name + ".tmp")
    with temp.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, path)


def editor_edit(root: str, name: str, old: str = MARKER) -> Any:
    """Child setup: an editor and the operation replacing `old` in `name`."""
    editor = editor_tool(workspace_root=root)
    arguments = {"action": "edit", "file_path": name, "old_string": old, "new_string": REPLACEMENT}

    def op() -> dict[str, Any]:
        before = os.stat(Path(root) / name).st_ino
        result = trio.run(editor.invoke, arguments)
        return {
            "success": result["success"],
            "new_inode": os.stat(Path(root) / name).st_ino != before,
        }

    return op


def _corpus() -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import editor_corpus  # the test suite's corpus, found through the path above

    return editor_corpus


def robustness(files: int) -> list[Row]:
    """Apply/refuse/misapply rates per class and the median time per edit, on real files."""
    corpus = _corpus()
    cases = corpus.build(limit=files)
    counts: dict[str, dict[str, int]] = {k: {} for k in corpus.CLASSES}
    tool_times: list[float] = []
    plain_times: list[float] = []
    with tempfile.TemporaryDirectory(prefix="lf-bench-editor-corpus-") as tmp:
        root = Path(tmp)
        editor = editor_tool(workspace_root=root)
        path = root / "case.py"
        for case in cases:
            path.write_bytes(case.before)
            start = time.perf_counter()
            result = trio.run(
                editor.invoke,
                {
                    "action": "edit",
                    "file_path": "case.py",
                    "old_string": case.old,
                    "new_string": case.new,
                },
            )
            tool_times.append(time.perf_counter() - start)
            verdict = corpus.judge(case, result["success"], path.read_bytes())
            counts[case.kind][verdict] = counts[case.kind].get(verdict, 0) + 1
            if case.kind == "exact":
                path.write_bytes(case.before)
                start = time.perf_counter()
                plain_edit(path, case.old, case.new)
                plain_times.append(time.perf_counter() - start)
    rows: list[Row] = []
    for kind in corpus.CLASSES:
        seen = counts[kind]
        total = sum(seen.values()) or 1
        applied = 100 * seen.get("applied", 0) / total
        refused = 100 * seen.get("refused", 0) / total
        wrong = seen.get("misapplied", 0)
        if kind in corpus.RECOVERABLE:
            rows.append(
                Row(
                    BENCH,
                    f"{kind} ({total} edits): applied",
                    applied,
                    None,
                    "%",
                    ">= 95 %",
                    applied >= 95,
                )
            )
        else:
            rows.append(
                Row(
                    BENCH,
                    f"{kind} ({total} edits): refused",
                    refused,
                    None,
                    "%",
                    "= 100 %",
                    refused == 100,
                )
            )
        rows.append(Row(BENCH, f"{kind}: misapplied", wrong, None, "edits", "= 0", wrong == 0))
    rows.append(
        Row(
            BENCH,
            f"median edit on a real file ({len(tool_times)} edits)",
            statistics.median(tool_times),
            statistics.median(plain_times),
            "s",
        )
    )
    return rows


def run(size: Size) -> list[Row]:
    params = sizes(size, SIZES)
    repeat = params["repeat"]
    with tempfile.TemporaryDirectory(prefix="lf-bench-editor-") as tmp:
        root = Path(tmp)
        path = root / "big.py"
        write_file(path, params["bytes"])
        file_size = path.stat().st_size
        editor = editor_tool(workspace_root=root)
        flip = [MARKER, REPLACEMENT]

        def plain() -> None:
            plain_edit(path, flip[0], flip[1])
            flip.reverse()

        def atomic() -> None:
            plain_atomic_edit(path, flip[0], flip[1])
            flip.reverse()

        async def through_tool() -> None:
            result = await editor(
                action="edit", file_path="big.py", old_string=flip[0], new_string=flip[1]
            )
            if not result["success"]:
                raise RuntimeError(f"edit failed: {result['error']}")
            flip.reverse()

        async def not_found() -> None:
            result = await editor(
                action="edit", file_path="big.py", old_string=ABSENT, new_string=REPLACEMENT
            )
            if result["success"]:
                raise RuntimeError("an edit of absent text succeeded")

        best = trio.run(
            lambda: interleaved({"plain": plain, "atomic": atomic, "tool": through_tool}, repeat)
        )
        base, atomic_time, tool_time = best["plain"], best["atomic"], best["tool"]
        failed_time = trio.run(lambda: abest_of(not_found, 1))
        if flip[0] != MARKER:  # leave the marker in place for the child
            plain()
        measured = child_memory("bench_editor", "editor_edit", root=tmp, name="big.py")
        missing = child_memory("bench_editor", "editor_edit", root=tmp, name="big.py", old=ABSENT)
        leftovers = [p.name for p in root.iterdir() if p.name != "big.py"]
        content_ok = REPLACEMENT in path.read_text(encoding="utf-8")
    mib = file_size / MIB
    peak = max(measured["traced_peak"], measured["rss_growth"])
    return [
        *robustness(params["files"]),
        ratio_row(BENCH, f"edit in a {mib:.0f} MiB file", tool_time, base, "s", 1.5),
        Row(BENCH, "plain edit made atomic (fsync + replace)", atomic_time, base, "s"),
        ratio_row(
            BENCH,
            "edit: traced peak vs file size",
            measured["traced_peak"] / MIB,
            file_size / MIB,
            "MiB",
            3,
        ),
        ratio_row(
            BENCH,
            "edit: RSS growth vs file size",
            measured["rss_growth"] / MIB,
            file_size / MIB,
            "MiB",
            3,
        ),
        Row(BENCH, "failed edit (old_string absent): time", failed_time, base, "s"),
        Row(
            BENCH,
            "failed edit: traced peak vs file size",
            missing["traced_peak"] / MIB,
            file_size / MIB,
            "MiB",
        ),
        check_row(
            BENCH,
            "write atomic (new inode, no temp file left)",
            measured["result"]["success"]
            and measured["result"]["new_inode"]
            and not leftovers
            and content_ok
            and peak > 0,
            "atomic",
        ),
    ]

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
"""

from __future__ import annotations

import os
import tempfile
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
    "tiny": {"bytes": 1 * MIB, "repeat": 2},
    "full": {"bytes": 50 * MIB, "repeat": 5},
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

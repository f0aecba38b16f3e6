"""Target 4: the ``search`` tool's grep over a large tree.

Generates a tree of 20,000 small text files (200 directories of 100 files;
one file in ten holds a match) and compares ``search(action="grep")`` with
the same ``grep -rnIE`` invocation run directly with ``subprocess.run``
(target: at most 1.2x). For information it also runs grep directly with the
exclusion flags the tool adds (``.git`` and the protected names), which
separates grep's own cost of those flags from the tool's Python work.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import trio
from _common import Row, Size, check_row, info_row, interleaved, ratio_row, sizes

from lionfactory._workspace import Workspace
from lionfactory.tools import search_tool

BENCH = "search"
PATTERN = "needle_[0-9]+"

SIZES: dict[Size, dict[str, Any]] = {
    "tiny": {"dirs": 10, "files_per_dir": 20, "repeat": 2},
    "full": {"dirs": 200, "files_per_dir": 100, "repeat": 5},
}


def make_tree(root: Path, dirs: int, files_per_dir: int) -> int:
    """Write the tree; return how many lines match `PATTERN`."""
    filler = "".join(f"line {i}: nothing to see here, just ordinary text\n" for i in range(40))
    matches = 0
    for d in range(dirs):
        folder = root / f"pkg{d:03d}"
        folder.mkdir()
        for f in range(files_per_dir):
            text = filler
            if f % 10 == 0:
                text += f"found needle_{d * files_per_dir + f} here\n"
                matches += 1
            (folder / f"module{f:03d}.py").write_text(text)
    return matches


def run(size: Size) -> list[Row]:
    params = sizes(size, SIZES)
    repeat = params["repeat"]
    grep = shutil.which("grep") or "grep"
    with tempfile.TemporaryDirectory(prefix="lf-bench-search-") as tmp:
        root = Path(tmp)
        expected = make_tree(root, params["dirs"], params["files_per_dir"])
        files = params["dirs"] * params["files_per_dir"]
        search = search_tool(workspace_root=root)
        exclusions = ["--exclude-dir=.git"]
        for pattern in sorted(Workspace.at(root).protected):
            exclusions += [f"--exclude={pattern}", f"--exclude-dir={pattern}"]
        plain_argv = [grep, "-rnIE", "-e", PATTERN, "."]
        tool_argv = [grep, "-rnHIE", "-Z", "--color=never", *exclusions, "-e", PATTERN, "--", "."]

        def direct(argv: list[str]) -> int:
            done = subprocess.run(argv, cwd=root, capture_output=True, check=False)
            return done.stdout.count(b"\n")

        async def through_tool() -> dict[str, Any]:
            return await search(action="grep", pattern=PATTERN, path=".", max_results=1000)

        async def measure() -> tuple[dict[str, float], dict[str, Any]]:
            result = await through_tool()  # also warms the page cache and dentries
            best = await interleaved(
                {
                    "plain": lambda: direct(plain_argv),
                    "exclusions": lambda: direct(tool_argv),
                    "tool": through_tool,
                },
                repeat,
            )
            return best, result

        found = direct(plain_argv)
        best, result = trio.run(measure)
        base, with_exclusions, tool_time = best["plain"], best["exclusions"], best["tool"]
    return [
        ratio_row(BENCH, f"grep over {files:,} files", tool_time, base, "s", 1.2),
        info_row(
            BENCH, "grep with the tool's exclusion flags", with_exclusions, "s", baseline=base
        ),
        check_row(
            BENCH,
            f"tool and grep find all {expected:,} matches",
            found == expected and result["total"] == expected,
            "equal",
        ),
    ]

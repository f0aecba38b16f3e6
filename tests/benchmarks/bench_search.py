"""Target 4: the ``search`` tool over a checkout that holds a virtualenv.

Generates a git repository of 20,000 small project files (200 directories of
100; one file in ten holds a match) plus an ignored ``.venv`` of 30,000 files
that match too, the way a checkout looks after ``python -m venv .venv``.

* grep: ``search(action="grep")`` on ripgrep against raw ``rg -n`` on the
  same tree, and on a plain 5,000-file tree with 50 matches (no ignored
  folder: what a call costs over the search itself); target: at most 1.2x
  (both skip the ignored ``.venv``). Also against raw ``grep -rn`` (target:
  faster; grep reads the ``.venv`` too). The builtin engine (rg hidden) is
  shown against raw ``grep -rn`` for information.
* find (``pattern="*.py"``) and a recursive ``list_dir`` against raw
  ``rg --files --hidden`` (the same walk the tool asks of ripgrep): what
  listing the project costs.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import trio
from _common import Row, Size, check_row, info_row, interleaved, ratio_row, sizes

from lionfactory._os.binaries import BinaryFinder
from lionfactory.tools import reader_tool, search_tool

BENCH = "search"
PATTERN = "needle_[0-9]+"

SIZES: dict[Size, dict[str, Any]] = {
    "tiny": {"dirs": 10, "files_per_dir": 20, "venv_files": 300, "small_dirs": 5, "repeat": 2},
    "full": {
        "dirs": 200,
        "files_per_dir": 100,
        "venv_files": 30_000,
        "small_dirs": 50,
        "repeat": 7,
    },
}


def make_tree(root: Path, dirs: int, files_per_dir: int, venv_files: int, every: int = 10) -> int:
    """Write the checkout; return how many project lines match `PATTERN`.

    One file in `every` holds a match.
    """
    filler = "".join(f"line {i}: nothing to see here, just ordinary text\n" for i in range(40))
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / ".gitignore").write_text(".venv/\n__pycache__/\n")
    matches = 0
    for d in range(dirs):
        folder = root / f"pkg{d:03d}"
        folder.mkdir()
        for f in range(files_per_dir):
            text = filler
            if f % every == 0:
                text += f"found needle_{d * files_per_dir + f} here\n"
                matches += 1
            (folder / f"module{f:03d}.py").write_text(text)
    site = root / ".venv" / "lib" / "site-packages"
    for index in range(venv_files):
        folder = site / f"dist{index // 100:03d}"
        if index % 100 == 0:
            folder.mkdir(parents=True)
        (folder / f"mod{index % 100:03d}.py").write_text(filler + f"needle_{index}\n")
    return matches


def direct(argv: list[str], root: Path) -> int:
    done = subprocess.run(argv, cwd=root, capture_output=True, check=False)
    return done.stdout.count(b"\n")


def run(size: Size) -> list[Row]:
    params = sizes(size, SIZES)
    repeat = params["repeat"]
    rg = BinaryFinder().find("rg") or "rg"
    grep = shutil.which("grep") or "grep"
    with (
        tempfile.TemporaryDirectory(prefix="lf-bench-search-") as tmp,
        tempfile.TemporaryDirectory(prefix="lf-bench-search-small-") as small_tmp,
    ):
        root, small_root = Path(tmp), Path(small_tmp)
        expected = make_tree(root, params["dirs"], params["files_per_dir"], params["venv_files"])
        small_expected = make_tree(small_root, params["small_dirs"], 100, 0, every=100)
        small_search = search_tool(workspace_root=small_root)
        project_files = params["dirs"] * params["files_per_dir"]
        search = search_tool(workspace_root=root)
        builtin = search_tool(workspace_root=root, _binaries=BinaryFinder(hidden={"rg"}))
        reader = reader_tool(workspace_root=root)
        raw_rg = [rg, "-n", "-e", PATTERN, "."]
        raw_grep = [grep, "-rnE", "-e", PATTERN, "."]
        raw_files = [rg, "--files", "--hidden", "--glob=!.git"]

        async def tool_grep() -> dict[str, Any]:
            return await search(action="grep", pattern=PATTERN, max_results=1000)

        async def small_grep() -> dict[str, Any]:
            return await small_search(action="grep", pattern=PATTERN, max_results=1000)

        async def builtin_grep() -> dict[str, Any]:
            return await builtin(action="grep", pattern=PATTERN, max_results=1000)

        async def tool_find() -> dict[str, Any]:
            return await search(action="find", pattern="*.py", max_results=1000)

        async def tool_list() -> dict[str, Any]:
            return await reader(action="list_dir", path=".", recursive=True)

        async def measure() -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
            # One call each first: warms the page cache and checks the answers.
            answers = {
                "grep": await tool_grep(),
                "small": await small_grep(),
                "builtin": await builtin_grep(),
                "find": await tool_find(),
                "list": await tool_list(),
            }
            best = await interleaved(
                {
                    "rg": lambda: direct(raw_rg, root),
                    "tool": tool_grep,
                    "small_rg": lambda: direct(raw_rg, small_root),
                    "small": small_grep,
                    "grep": lambda: direct(raw_grep, root),
                    "builtin": builtin_grep,
                    "files": lambda: direct(raw_files, root),
                    "find": tool_find,
                    "list": tool_list,
                },
                repeat,
            )
            return best, answers

        rg_found = direct(raw_rg, root)
        listed = direct(raw_files, root)
        best, answers = trio.run(measure)
    venv = params["venv_files"]
    tree = f"{project_files:,} files + {venv:,} ignored"
    small_files = params["small_dirs"] * 100
    return [
        ratio_row(BENCH, f"grep over {tree}, vs raw rg -n", best["tool"], best["rg"], "s", 1.2),
        ratio_row(
            BENCH,
            f"grep over {small_files:,} files, {small_expected} matches, vs raw rg -n",
            best["small"],
            best["small_rg"],
            "s",
            1.2,
        ),
        ratio_row(
            BENCH, f"grep over {tree}, vs raw grep -rn", best["tool"], best["grep"], "s", 1.0
        ),
        info_row(
            BENCH,
            "grep, builtin engine (no rg), vs raw grep -rn",
            best["builtin"],
            "s",
            baseline=best["grep"],
        ),
        info_row(BENCH, "find *.py, vs raw rg --files", best["find"], "s", baseline=best["files"]),
        info_row(
            BENCH,
            "list_dir recursive, vs raw rg --files",
            best["list"],
            "s",
            baseline=best["files"],
        ),
        check_row(
            BENCH,
            f"both engines and raw rg find all {expected:,} project matches, none in .venv",
            rg_found == expected
            and answers["grep"]["total"] == expected
            and answers["builtin"]["total"] == expected
            and ".venv" not in answers["grep"]["content"]
            and answers["small"]["total"] == small_expected,
            "equal",
        ),
        check_row(
            BENCH,
            f"find and list_dir see the {listed:,} project files rg lists",
            answers["find"]["total"] == listed - 1  # .gitignore is not *.py
            and answers["list"]["total"] == listed,
            "equal",
        ),
    ]

"""The repository's visible top level is exactly what the project card lists.

Hidden entries (``.ci/``, ``.gitignore``) are tooling and may come and go; a
visible file or folder beyond the list is drift (benchmarks live under
``tests/benchmarks/`` for this reason).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CARD = {"pyproject.toml", "lionfactory", "tests", "examples", "CHANGELOG.md", "README.md"}


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the git checkout")
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_tracked_top_level_entries_are_the_cards_list() -> None:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    top = {path.split("/", 1)[0] for path in listed}
    assert {name for name in top if not name.startswith(".")} == CARD


def test_benchmarks_live_under_tests_and_are_not_collected_as_tests() -> None:
    bench = ROOT / "tests" / "benchmarks"
    assert (bench / "run.py").is_file()
    assert not list(bench.glob("test_*.py"))
    assert list(bench.glob("bench_*.py"))

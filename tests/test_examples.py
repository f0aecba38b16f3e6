"""Every example script runs to completion in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("script", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.name)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    proc = run_example(script, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_quickstart_shows_the_clone_acting_on_itself(tmp_path: Path) -> None:
    proc = run_example(EXAMPLES / "quickstart.py", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "source todos: ['TODO: summarise notes.txt']" in proc.stdout
    assert "clone todos: ['TODO: summarise notes.txt', 'TODO: only on the clone']" in proc.stdout


def test_coding_session_fixes_the_bug_inside_a_sandbox(tmp_path: Path) -> None:
    proc = run_example(EXAMPLES / "coding_session.py", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "editor: refused: Refused: 'stats.py' has not been read" in proc.stdout
    assert "bash: exit 0: ['1 passed" in proc.stdout
    assert "main now has: return sum(values) / len(values)" in proc.stdout
    assert "log: ['Fix mean(): divide by len(values)', 'Add mean() with a bug']" in proc.stdout

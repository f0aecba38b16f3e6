"""Every example script runs to completion in a fresh interpreter."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lionfactory import Message

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(
    script: Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
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


def without_pytest(tmp_path: Path) -> dict[str, str]:
    """An environment in which ``import pytest`` fails, as on a plain ``[all]`` install."""
    shadow = tmp_path / "no-pytest"
    shadow.mkdir()
    (shadow / "pytest.py").write_text("raise ModuleNotFoundError(\"No module named 'pytest'\")\n")
    return {**os.environ, "PYTHONPATH": str(shadow)}


def test_coding_session_fixes_the_bug_inside_a_sandbox_without_pytest(tmp_path: Path) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    proc = run_example(EXAMPLES / "coding_session.py", work, env=without_pytest(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "editor: refused: Refused: 'stats.py' has not been read" in proc.stdout
    assert "bash: exit 0: Ran 1 test in" in proc.stdout
    assert "answer: Fixed mean(): it divided by len(values) - 1. The tests pass" in proc.stdout
    assert "main now has: return sum(values) / len(values)" in proc.stdout
    assert "log: ['Fix mean(): divide by len(values)', 'Add mean() with a bug']" in proc.stdout


def test_coding_session_reports_failing_tests_and_does_not_merge() -> None:
    """The example's model decides from the real test result, never from a script."""
    spec = importlib.util.spec_from_file_location("coding_session", EXAMPLES / "coding_session.py")
    assert spec is not None and spec.loader is not None
    session = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(session)
    ok = '{"success": true}'
    failed = json.dumps({"return_code": 1, "stdout": "", "stderr": "Ran 1 test\n\nFAILED"})
    history = [Message(role="tool", content=ok)] * (len(session.STEPS) - 1)
    history.append(Message(role="tool", content=failed))
    step = session.engineer(history, [])
    assert step.name == "sandbox" and step.arguments == {"action": "discard"}
    answer = session.engineer([*history, Message(role="tool", content=ok)], [])
    assert answer == "Not merged: the tests exited with 1. Ran 1 test / FAILED"

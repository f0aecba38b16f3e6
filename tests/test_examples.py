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


# `test_*.py` examples are pytest files for users to copy: pytest runs them.
SCRIPTS = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("test_"))
PYTEST_FILES = sorted(EXAMPLES.glob("test_*.py"))
# Scripts that a test below runs and checks line by line; running them once
# more only for their exit status took a quarter of this file's time.
CHECKED = {"quickstart.py", "coding_session.py", "first_agent.py"}


def test_every_example_runs_and_the_checked_ones_exist(tmp_path: Path) -> None:
    assert {p.name for p in SCRIPTS} >= CHECKED
    for script in SCRIPTS:
        if script.name not in CHECKED:
            proc = run_example(script, tmp_path)
            assert proc.returncode == 0, f"{script.name}: {proc.stdout}{proc.stderr}"


@pytest.mark.parametrize("example", PYTEST_FILES, ids=lambda p: p.name)
def test_example_test_file_passes_under_pytest_as_a_user_would_run_it(
    example: Path, tmp_path: Path
) -> None:
    """Copied into an empty directory (no conftest, no configuration), it passes.

    Under a plain pytest: the plugins this project's development environment
    installs are not the user's, and loading them (langsmith's imports most
    of langchain's client) took 25 of the test's 30 seconds.
    """
    copy = tmp_path / example.name
    copy.write_text(example.read_text())
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", copy.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        # Its temporary folders go in this test's: in the shared root it
        # removed the oldest runs' folders (pytest keeps three), seconds of
        # deleting other runs' trees.
        env={
            **os.environ,
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "PYTEST_DEBUG_TEMPROOT": str(tmp_path),
        },
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout and "failed" not in proc.stdout


def test_the_pinned_tools_example_exists_and_pins_a_clone() -> None:
    text = (EXAMPLES / "test_pinned_tools.py").read_text()
    assert "assert_manifest(" in text
    assert "clone.manifest() == reviewer.manifest()" in text


def test_quickstart_shows_the_clone_acting_on_itself(tmp_path: Path) -> None:
    proc = run_example(EXAMPLES / "quickstart.py", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "source todos: ['TODO: summarise notes.txt']" in proc.stdout
    assert "clone todos: ['TODO: summarise notes.txt', 'TODO: only on the clone']" in proc.stdout


def test_coding_session_runs_pytest_in_the_sandbox_and_merges_the_fix(tmp_path: Path) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    proc = run_example(EXAMPLES / "coding_session.py", work)
    assert proc.returncode == 0, proc.stderr
    assert "editor: refused: Refused: 'stats.py' has not been read" in proc.stdout
    assert "bash: exit 0: " in proc.stdout and " / 1 passed in " in proc.stdout
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
    failed = json.dumps({"return_code": 1, "stdout": "F\n1 failed in 0.01s\n", "stderr": ""})
    history = [Message(role="tool", content=ok)] * (len(session.STEPS) - 1)
    history.append(Message(role="tool", content=failed))
    step = session.engineer(history, [])
    assert step.name == "sandbox" and step.arguments == {"action": "discard"}
    answer = session.engineer([*history, Message(role="tool", content=ok)], [])
    assert answer == "Not merged: the tests exited with 1. F / 1 failed in 0.01s"


def test_first_agent_reacts_pauses_for_approval_and_resumes_after_a_reload(tmp_path: Path) -> None:
    proc = run_example(EXAMPLES / "first_agent.py", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "blind edit failed: True - Refused: 'NOTES.md' has not been read in this conversation",
        "waiting for approval: editor stats.py - edits to code are reviewed",
        "restored, still pending: ['editor']",
        "answer: Fixed mean(): it divided by len(values) - 1. The check passes: all good",
        "stats.py now: return sum(values) / len(values)",
        "tools called: ['bash', 'reader', 'editor', 'bash']",
        "push refused: True - Tool 'bash' denied the call: pushing is for people"
        " (rule bash 'git push*' -> deny); do something else",
    ]


def test_first_agent_model_reports_a_check_that_still_fails() -> None:
    """The guide's model decides from the real check result, never from a script."""
    spec = importlib.util.spec_from_file_location("first_agent", EXAMPLES / "first_agent.py")
    assert spec is not None and spec.loader is not None
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    passing = json.dumps({"return_code": 0, "stdout": "all good\n", "stderr": ""})
    assert agent.engineer([Message(role="tool", content=passing)], []) == (
        "Nothing to fix: the check passes."
    )
    failing = json.dumps({"return_code": 1, "stdout": "", "stderr": "AssertionError: 3.0"})
    read = json.dumps({"success": True, "content": "1\treturn 0\n"})
    history = [Message(role="tool", content=failing), Message(role="tool", content=read)]
    assert agent.engineer(history, []) == "I could not find the bug."
    refused = json.dumps({"success": False, "error": "Refused: not read"})
    read_ok = json.dumps({"success": True, "content": "3\treturn sum(values) / (len(values) - 1)"})
    history = [Message(role="tool", content=c) for c in (failing, read_ok, refused)]
    assert agent.engineer(history, []) == "The edit was not made: Refused: not read"
    again = json.dumps({"return_code": 1, "stdout": "", "stderr": "AssertionError"})
    edited = json.dumps({"success": True})
    history = [Message(role="tool", content=c) for c in (failing, read_ok, edited, again)]
    assert agent.engineer(history, []).startswith(
        "Fixed mean(): it divided by len(values) - 1. The check still fails"
    )

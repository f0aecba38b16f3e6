"""`lionfactory call --mode/--rules`: a held call is asked about on a terminal, refused without one.

The command runs as a real subprocess; "a terminal" is a real pseudo-terminal
(`pty`), the answer typed into it.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

RULES = [{"tool": "bash", "match": "touch *", "decision": "ask", "reason": "creates a file"}]


def command(workspace: Path, *extra: str) -> list[str]:
    rules = workspace.parent / "rules.json"
    rules.write_text(json.dumps(RULES))
    return [
        sys.executable,
        "-m",
        "lionfactory",
        "call",
        "bash",
        "command=touch made",
        "--workspace",
        str(workspace),
        "--rules",
        str(rules),
        *extra,
    ]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def on_a_terminal(argv: list[str], answer: bytes) -> tuple[int, str]:
    """Run `argv` with a pseudo-terminal as stdin/stdout/stderr; type `answer` at the prompt."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        argv, stdin=follower, stdout=follower, stderr=follower, env=env(), close_fds=True
    )
    os.close(follower)
    seen = b""
    answered = False
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the follower side closed: the process is gone
                break
            if not chunk:
                break
            seen += chunk
            if not answered and b"Run it? [y/N]" in seen:
                os.write(leader, answer)
                answered = True
        elif process.poll() is not None:
            break
    os.close(leader)
    return process.wait(timeout=120), seen.decode(errors="replace")


def test_without_a_terminal_the_held_call_is_refused(workspace: Path) -> None:
    done = subprocess.run(
        command(workspace),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
    )
    assert done.returncode == 1
    assert "nobody can approve it here" in done.stderr and "creates a file" in done.stderr
    assert not (workspace / "made").exists()


def test_on_a_terminal_yes_runs_the_call(workspace: Path) -> None:
    status, shown = on_a_terminal(command(workspace), b"y\n")
    assert "creates a file" in shown and "touch made" in shown
    assert status == 0, shown
    assert (workspace / "made").exists()


def test_on_a_terminal_no_refuses_the_call(workspace: Path) -> None:
    status, shown = on_a_terminal(command(workspace), b"n\n")
    assert status == 1 and "not run" in shown
    assert not (workspace / "made").exists()


def test_a_rules_file_with_a_contradictory_rule_is_a_usage_error(workspace: Path) -> None:
    bad = workspace.parent / "bad.json"
    bad.write_text(json.dumps([{"tool": "bash", "match": "git push *", "examples": ["git push"]}]))
    done = subprocess.run(
        [sys.executable, "-m", "lionfactory", "call", "bash", "command=true", "--rules", str(bad)],
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
        cwd=workspace,
    )
    assert done.returncode == 2 and "does not match its example" in done.stderr


def test_read_only_mode_refuses_bash(workspace: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lionfactory",
            "call",
            "bash",
            "command=touch x",
            "--mode",
            "read_only",
        ],
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
        cwd=workspace,
    )
    assert done.returncode == 1 and "read_only mode" in done.stderr
    assert "bash runs commands" in done.stderr
    assert not (workspace / "x").exists()

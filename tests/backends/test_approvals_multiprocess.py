"""Approvals across processes: a held call saved in SQLite, the process killed, resumed elsewhere.

Each process is ``tests/backends/_approval_worker.py`` run as a script; the
held tool appends a line to a marks file every time it really runs, so the
file counts executions across all the processes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from lionfactory import register_factory
from lionfactory.backends import SqliteBranchStore
from lionfactory.errors import ConflictError
from lionfactory.testing import ScriptedModel

WORKER = Path(__file__).with_name("_approval_worker.py")
sys.path.insert(0, str(WORKER.parent))
from _approval_worker import marker_tools  # noqa: E402

pytestmark = pytest.mark.slow


async def worker(*args: str, killed: bool = False) -> dict[str, Any]:
    done = await anyio.run_process(
        [sys.executable, str(WORKER), *args],
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    expected = -signal.SIGKILL if killed else 0
    assert done.returncode == expected, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    return json.loads(lines[-1]) if lines else {}


def marks(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_a_call_held_in_a_killed_process_runs_once_when_resumed_elsewhere(
    tmp_path: Path,
) -> None:
    db, marks_file = str(tmp_path / "branches.db"), tmp_path / "marks.txt"
    started = await worker("start", db, str(marks_file), killed=True)
    assert len(started["pending"]) == 1 and marks(marks_file) == []

    resumed = await worker("resume", db, started["branch"])
    assert resumed == {"text": "all marked"}
    assert marks(marks_file) == ["once"]

    again = await worker("resume", db, started["branch"])
    assert again["error"] == "ConfigurationError" and "nothing to resume" in again["message"]
    assert marks(marks_file) == ["once"]


async def test_a_process_killed_while_the_approved_call_runs_never_runs_it_twice(
    tmp_path: Path,
) -> None:
    db, marks_file = str(tmp_path / "branches.db"), tmp_path / "marks.txt"
    started = await worker("start", db, str(marks_file), "crash", killed=True)
    # This process approves and starts the call, which kills the process mid-call.
    await worker("resume", db, started["branch"], killed=True)
    assert marks(marks_file) == ["once"]
    # The save taken before the call ran says it had started: it is not run again.
    settled = await worker("settle", db, started["branch"])
    assert settled == {"settled": ["ApprovalInterrupted"], "pending": 0}
    assert marks(marks_file) == ["once"]


async def test_two_copies_loaded_from_one_save_cannot_both_run_the_call(tmp_path: Path) -> None:
    db, marks_file = str(tmp_path / "branches.db"), tmp_path / "marks.txt"
    started = await worker("start", db, str(marks_file), killed=True)
    resources = {"chat_model": ScriptedModel(["done"])}
    register_factory(marker_tools)  # this process trusts the worker's factory too
    async with SqliteBranchStore(db) as first, SqliteBranchStore(db) as second:
        a = await first.load(started["branch"], resources=resources)
        b = await second.load(started["branch"], resources=resources)
        for branch in (a, b):
            branch.approve(branch.pending_calls[0].id)
        assert await a.resume(store=first) == "done"
        with pytest.raises(ConflictError):
            await b.resume(store=second)
        # The loser ran nothing and still holds its record unstarted.
        assert b.pending_calls[0].status == "waiting"
    assert marks(marks_file) == ["once"]
    assert marker_tools  # the factory the saved branch names

"""An active sandbox survives a save in SQLite and a load in another process.

The first process creates a sandbox through the coding toolkit (default
isolation) and writes a file in it; a second process loads the branch from
the same `SqliteBranchStore`, and its tools must still work in the worktree.
A worktree that is gone by then is reported, and cleaned up, on the next
``sandbox`` call.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import git as shared_git

pytestmark = pytest.mark.slow

WORKER = r"""
import json, sys
import anyio
from lionfactory import Branch
from lionfactory.backends import SqliteBranchStore
from lionfactory.coding import coding_toolkit

TOOLS = ["reader", "editor", "bash", "sandbox"]

async def main(mode, db, repo, branch_id, *calls):
    said = {}
    async with SqliteBranchStore(db) as store:
        if mode == "start":
            branch = Branch("You code.")
            branch.register(coding_toolkit, workspace_root=repo, tools=TOOLS)
        else:
            branch = await store.load(branch_id)
        for i, call in enumerate(calls):
            tool, arguments = json.loads(call)
            action = await branch.act(tool, arguments)
            said[str(i)] = {"result": action.result, "error": action.error}
        await store.save(branch)
    said["branch"] = str(branch.id)
    print(json.dumps(said))

anyio.run(main, *sys.argv[1:], backend="trio")
"""


def git(repo: Path, *args: str) -> str:
    env = {"PATH": os.environ["PATH"], "HOME": str(repo.parent), "GIT_CONFIG_NOSYSTEM": "1"}
    env |= {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return shared_git(repo, *args, env=env)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "work")
    (root / "app.py").write_text("x = 1\n", encoding="utf-8")
    git(root, "add", ".")
    git(root, "commit", "-qm", "init")
    return root


def run(mode: str, db: Path, repo: Path, branch_id: str, *calls: Any) -> dict[str, Any]:
    encoded = [json.dumps(call) for call in calls]
    done = subprocess.run(
        [sys.executable, "-c", WORKER, mode, str(db), str(repo), branch_id, *encoded],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(repo.parent)},
    )
    assert done.returncode == 0, done.stderr
    said: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return said


CREATE = ("sandbox", {"action": "create"})
PWD = ("bash", {"command": "pwd"})
DIFF = ("sandbox", {"action": "diff"})


def start(tmp_path: Path, repo: Path) -> tuple[Path, dict[str, Any]]:
    db = tmp_path / "branches.db"
    made = run("start", db, repo, "-", CREATE, ("bash", {"command": "echo new > new.txt"}))
    assert made["0"]["error"] is None, made
    assert made["0"]["result"]["active"] is True
    return db, made


def test_a_loaded_branch_works_in_its_sandbox_and_can_discard_it(
    tmp_path: Path, repo: Path
) -> None:
    db, made = start(tmp_path, repo)
    worktree = Path(made["0"]["result"]["worktree"])
    sandbox_branch = made["0"]["result"]["branch"]
    assert (worktree / "new.txt").exists() and not (repo / "new.txt").exists()

    loaded = run("load", db, repo, made["branch"], PWD, DIFF, ("reader", READ_NEW))
    assert loaded["0"]["result"]["stdout"].strip() == str(worktree)
    assert loaded["1"]["error"] is None and "new.txt" in loaded["1"]["result"]["files"]
    assert loaded["2"]["error"] is None and "new" in json.dumps(loaded["2"]["result"])

    ended = run("load", db, repo, made["branch"], ("sandbox", {"action": "discard"}), PWD)
    assert ended["0"]["error"] is None, ended
    assert ended["1"]["result"]["stdout"].strip() == str(repo)
    assert not worktree.exists()
    assert sandbox_branch not in git(repo, "branch", "--list")
    # Discarded: the next load has nothing to re-attach.
    again = run("load", db, repo, made["branch"], PWD, DIFF)
    assert again["0"]["result"]["stdout"].strip() == str(repo)
    assert "No sandbox is active" in again["1"]["result"]["error"]


READ_NEW = {"action": "read", "path": "new.txt"}


@pytest.mark.parametrize("committed", [False, True])
def test_a_sandbox_whose_worktree_is_gone_is_reported_and_cleaned_up(
    tmp_path: Path, repo: Path, committed: bool
) -> None:
    db, made = start(tmp_path, repo)
    worktree = Path(made["0"]["result"]["worktree"])
    sandbox_branch = made["0"]["result"]["branch"]
    if committed:
        more = run("load", db, repo, made["branch"], ("sandbox", COMMIT))
        assert more["0"]["error"] is None, more
    shutil.rmtree(worktree.parent)  # a reboot clearing the temporary directory

    loaded = run("load", db, repo, made["branch"], PWD, DIFF, PWD)
    # Not re-attached: bash works at home, and the sandbox says why.
    assert loaded["0"]["result"]["stdout"].strip() == str(repo)
    error = loaded["1"]["result"]["error"]
    assert "is gone" in error and str(worktree) in error, error
    assert "Your tools work in the workspace" in error
    assert str(worktree) not in git(repo, "worktree", "list")
    branches = git(repo, "branch", "--list")
    if committed:
        assert sandbox_branch in branches and sandbox_branch in error
    else:
        assert sandbox_branch not in branches
    # Said once; then there is simply no sandbox, and a new one can be made.
    after = run("load", db, repo, made["branch"], DIFF, CREATE)
    assert "No sandbox is active" in after["0"]["result"]["error"]
    assert after["1"]["error"] is None and after["1"]["result"]["active"] is True


COMMIT = {"action": "commit", "message": "add new.txt"}


def test_a_tampered_record_is_ignored_and_nothing_it_names_is_removed(
    tmp_path: Path, repo: Path
) -> None:
    db, made = start(tmp_path, repo)
    victim = tmp_path / "lionfactory-sandbox-victim"
    (victim / "repo").mkdir(parents=True)
    (victim / "keep.txt").write_text("mine\n", encoding="utf-8")
    # Another program rewrites the store: the record now names a directory of
    # the user's that looks like a sandbox's.
    with sqlite3.connect(db) as connection:
        (blob,) = connection.execute("SELECT data FROM branches").fetchone()
        envelope, _, record = bytes(blob).partition(b"\n")
        data = json.loads(envelope)
        data["tool_state"]["sandbox"]["scratch"] = str(victim)
        data["tool_state"]["sandbox"]["root"] = str(victim / "repo")
        tampered = json.dumps(data).encode() + b"\n" + record
        connection.execute("UPDATE branches SET data = ?", (tampered,))
    loaded = run("load", db, repo, made["branch"], PWD, DIFF)
    assert loaded["0"]["result"]["stdout"].strip() == str(repo)
    assert "not re-attached" in loaded["1"]["result"]["error"]
    assert (victim / "keep.txt").read_text(encoding="utf-8") == "mine\n"

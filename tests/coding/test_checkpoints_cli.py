"""``lionfactory checkpoints``: list and rewind a stored MCP session's checkpoints, for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from lionfactory import Branch
from lionfactory.backends import SqliteBranchStore
from lionfactory.coding import coding_toolkit
from lionfactory.mcp._stored_sessions import TRANSPORT_KEY, session_branch_id


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lionfactory", "checkpoints", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ),
    )


async def stored_session(db: Path, workspace: Path, name: str) -> Branch:
    """A stdio session as `mcp serve --store` keeps it: its id, its transport mark."""
    template = Branch("served")
    template.register(coding_toolkit, workspace_root=workspace, notify=False)
    data = template.to_dict()
    data["id"] = str(session_branch_id(name, "stdio"))
    data["metadata"] = {TRANSPORT_KEY: "stdio"}
    branch = Branch.from_dict(data)
    await branch.act("editor", {"action": "write", "file_path": "a.txt", "content": "a\n"})
    await branch.act("bash", {"command": "echo b > b.txt"})
    async with SqliteBranchStore(str(db)) as store:
        await store.save(branch)
    await branch.aclose()
    return branch


async def test_list_and_a_dry_run_then_an_applied_rewind_of_a_stored_session(
    tmp_path: Path, workspace: Path
) -> None:
    db = tmp_path / "sessions.db"
    branch = await stored_session(db, workspace, "work")
    url = f"sqlite:///{db}"
    listed = cli("list", "--store", url, "--session", "work", "--json")
    assert listed.returncode == 0, listed.stderr
    rows: list[dict[str, Any]] = json.loads(listed.stdout)
    assert [r["id"] for r in rows] == [c.id for c in branch.checkpoints]
    assert [r["tool"] for r in rows] == ["editor", "bash"]
    first = rows[0]["id"]
    text = cli("list", "--store", url, "--session", "work")
    assert first in text.stdout and "editor" in text.stdout

    dry = cli("rewind", first, "--store", url, "--session", "work")
    assert dry.returncode == 0, dry.stderr
    assert "dry run" in dry.stdout and "--apply" in dry.stdout
    assert (workspace / "a.txt").exists() and (workspace / "b.txt").exists()

    done = cli("rewind", first, "--store", url, "--session", "work", "--scope", "code", "--apply")
    assert done.returncode == 0, done.stderr
    assert not (workspace / "a.txt").exists() and not (workspace / "b.txt").exists()
    # Saved back: the session now lists the undo checkpoint, and the undo works.
    after = json.loads(cli("list", "--store", url, "--session", "work", "--json").stdout)
    undo = after[-1]
    assert undo["tool"] == "rewind"
    undone = cli("rewind", undo["id"], "--store", url, "--session", "work", "--apply", "--json")
    assert undone.returncode == 0, undone.stderr
    assert set(json.loads(undone.stdout)["restored"]) == {"a.txt", "b.txt"}
    assert (workspace / "b.txt").read_text() == "b\n"


async def test_unknown_sessions_and_checkpoints_are_clear_errors(
    tmp_path: Path, workspace: Path
) -> None:
    db = tmp_path / "sessions.db"
    await stored_session(db, workspace, "work")
    url = f"sqlite:///{db}"
    missing = cli("list", "--store", url, "--session", "other")
    assert missing.returncode == 1 and "no stdio session 'other'" in missing.stderr
    wrong = cli("rewind", "ckpt_nope", "--store", url, "--session", "work")
    assert wrong.returncode == 1 and "ckpt_nope" in wrong.stderr
    unnamed = cli("list", "--store", url)
    assert unnamed.returncode == 2 and "--session" in unnamed.stderr


async def test_a_file_name_holding_a_terminal_escape_is_printed_escaped(
    tmp_path: Path, workspace: Path
) -> None:
    """A confined command names the files; the text report never sends their control bytes."""
    db = tmp_path / "sessions.db"
    template = Branch("served")
    template.register(coding_toolkit, workspace_root=workspace, notify=False)
    data = template.to_dict()
    data["id"] = str(session_branch_id("esc", "stdio"))
    data["metadata"] = {TRANSPORT_KEY: "stdio"}
    branch = Branch.from_dict(data)
    done = await branch.act("bash", {"command": "touch \"$(printf 'x\\033]0;owned\\007')\""})
    assert done.error is None, done.error
    assert any("\x1b" in path for c in branch.checkpoints for path in c.files_changed)
    async with SqliteBranchStore(str(db)) as store:
        await store.save(branch)
    await branch.aclose()
    url = f"sqlite:///{db}"
    text = cli("list", "--store", url, "--session", "esc")
    assert text.returncode == 0, text.stderr
    assert "\x1b" not in text.stdout and "\x07" not in text.stdout
    assert "x\\x1b]0;owned\\x07" in text.stdout
    first = branch.checkpoints[0].id
    dry = cli("rewind", first, "--store", url, "--session", "esc")
    assert dry.returncode == 0, dry.stderr
    assert "\x1b" not in dry.stdout and "x\\x1b]0;owned\\x07" in dry.stdout

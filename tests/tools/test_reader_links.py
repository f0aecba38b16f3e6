"""A link whose absolute target lies inside the workspace is followed like a relative one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from lionfactory import Branch
from lionfactory._os import beneath
from lionfactory.coding import coding_toolkit
from lionfactory.tools import reader_tool

STRATEGIES = ["walk"] + (["openat2"] if beneath._OPENAT2 is not None else [])


@pytest.fixture(params=STRATEGIES)
def strategy(request: pytest.FixtureRequest) -> Iterator[str]:
    with beneath.forced_strategy(request.param):
        yield request.param


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "real_dir").mkdir(parents=True)
    (root / "real_dir" / "notes.txt").write_text("inside\n", encoding="utf-8")
    (root / ".env").write_text("KEY=secret\n", encoding="utf-8")
    (tmp_path / "outside.txt").write_text("outside\n", encoding="utf-8")
    # As `ln -s "$PWD/real_dir" alias` makes them: absolute targets.
    os.symlink(root / "real_dir", root / "alias")
    os.symlink(root / "real_dir" / "notes.txt", root / "note_link.txt")
    os.symlink(tmp_path / "outside.txt", root / "escape.txt")
    os.symlink(root / ".env", root / "env_link")
    os.symlink(root / "real_dir" / ".." / "..", root / "up")
    return root


async def test_an_absolute_link_inside_is_read_and_listed(workspace: Path, strategy: str) -> None:
    reader = reader_tool(workspace_root=workspace)
    through_dir = await reader(action="read", path="alias/notes.txt")
    assert "inside" in through_dir["content"], through_dir
    direct = await reader(action="read", path="note_link.txt")
    assert "inside" in direct["content"], direct
    listed = await reader(action="list_dir", path="alias")
    assert "notes.txt" in str(listed), listed


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("escape.txt", "leads outside the workspace"),
        ("up/outside.txt", "leads outside the workspace"),
        ("env_link", "protected"),
    ],
)
async def test_an_absolute_link_stays_confined(
    workspace: Path, strategy: str, path: str, said: str
) -> None:
    reader = reader_tool(workspace_root=workspace)
    result = await reader(action="read", path=path)
    assert "outside\\n" not in str(result) and "KEY=secret" not in str(result)
    assert said in str(result), result


async def test_the_toolkit_reads_through_it_and_counts_the_evidence(workspace: Path) -> None:
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=workspace, tools=["reader", "editor"])
    read = await branch.act("reader", {"action": "read", "path": "alias/notes.txt"})
    assert read.outcome == "done", read.payload

"""The read-before-edit guard on the editor's newer actions and on carried content hashes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lionfactory import Branch
from lionfactory.coding import coding_toolkit
from lionfactory.coding._guard import requiring_hash


def kit_branch(workspace: Path) -> Branch:
    branch = Branch("You write code.")
    branch.register(coding_toolkit, workspace_root=workspace)
    return branch


async def act(branch: Branch, tool: str, arguments: dict) -> dict:
    result = await branch.act(tool, arguments)
    assert result.ok, result.error
    return result.result


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


UNREAD = {
    "multi_edit": {"edits": [{"old_string": "x = 1", "new_string": "x = 2"}]},
    "insert": {"insert_line": 1, "new_string": "y = 2"},
}


@pytest.mark.parametrize("action", sorted(UNREAD))
async def test_new_actions_on_an_unread_file_are_refused(workspace: Path, action):
    (workspace / "a.py").write_text("x = 1\n")
    branch = kit_branch(workspace)
    refused = await act(branch, "editor", {"action": action, "file_path": "a.py", **UNREAD[action]})
    assert refused["success"] is False and "Read the file first" in refused["error"]
    assert (workspace / "a.py").read_text() == "x = 1\n"
    await act(branch, "reader", {"action": "read", "path": "a.py"})
    done = await act(branch, "editor", {"action": action, "file_path": "a.py", **UNREAD[action]})
    assert done["success"] is True


async def test_a_patch_needs_evidence_for_every_updated_or_deleted_file(workspace: Path):
    (workspace / "a.py").write_text("a = 1\n")
    (workspace / "b.py").write_text("b = 1\n")
    patch = (
        "*** Begin Patch\n*** Update File: a.py\n@@\n-a = 1\n+a = 2\n*** Delete File: b.py\n"
        "*** Add File: c.py\n+c = 1\n*** End Patch\n"
    )
    branch = kit_branch(workspace)
    await act(branch, "reader", {"action": "read", "path": "a.py"})
    refused = await act(branch, "editor", {"action": "apply_patch", "patch": patch})
    assert refused["success"] is False
    assert "'b.py' has not been read" in refused["error"]
    assert "no file was changed" in refused["error"]
    assert not (workspace / "c.py").exists()
    await act(branch, "reader", {"action": "read", "path": "b.py"})
    done = await act(branch, "editor", {"action": "apply_patch", "patch": patch})
    assert done["success"] is True, done
    # The patch's evidence covers the files it wrote: an edit of the added file goes through.
    edit = {"action": "edit", "file_path": "c.py", "old_string": "c = 1", "new_string": "c = 3"}
    assert (await act(branch, "editor", edit))["success"] is True


async def test_a_patch_that_only_adds_needs_no_read(workspace: Path):
    branch = kit_branch(workspace)
    patch = "*** Begin Patch\n*** Add File: new.py\n+x = 1\n*** End Patch\n"
    assert (await act(branch, "editor", {"action": "apply_patch", "patch": patch}))["success"]


async def test_a_read_returns_the_content_hash_and_a_matching_hash_proves_the_read(
    workspace: Path,
):
    (workspace / "a.py").write_text("x = 1\n")
    reader_branch = kit_branch(workspace)
    read = await act(reader_branch, "reader", {"action": "read", "path": "a.py"})
    assert read["content_hash"] == sha(b"x = 1\n")
    # Another branch (another connection) never read it, but carries the hash.
    other = kit_branch(workspace)
    edit = {
        "action": "edit",
        "file_path": "a.py",
        "old_string": "x = 1",
        "new_string": "x = 2",
        "expected_hash": read["content_hash"],
    }
    done = await act(other, "editor", edit)
    assert done["success"] is True, done
    assert done["content_hash"] == sha(b"x = 2\n")


async def test_a_stale_hash_is_refused_even_with_branch_evidence(workspace: Path):
    (workspace / "a.py").write_text("x = 1\n")
    branch = kit_branch(workspace)
    await act(branch, "reader", {"action": "read", "path": "a.py"})
    edit = {
        "action": "edit",
        "file_path": "a.py",
        "old_string": "x = 1",
        "new_string": "x = 2",
        "expected_hash": sha(b"something else"),
    }
    refused = await act(branch, "editor", edit)
    assert refused["success"] is False and "Read the file again" in refused["error"]
    assert (workspace / "a.py").read_text() == "x = 1\n"


async def test_requiring_hash_ignores_branch_evidence(workspace: Path):
    (workspace / "a.py").write_text("x = 1\n")
    branch = kit_branch(workspace)
    read = await act(branch, "reader", {"action": "read", "path": "a.py"})
    edit = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    with requiring_hash():
        refused = await act(branch, "editor", edit)
        assert refused["success"] is False and "must carry expected_hash" in refused["error"]
        done = await act(branch, "editor", {**edit, "expected_hash": read["content_hash"]})
        assert done["success"] is True
        # A new file needs no hash; a patch cannot carry one for an existing file.
        created = await act(
            branch, "editor", {"action": "write", "file_path": "n.py", "content": "n = 1\n"}
        )
        assert created["success"] is True
        patch = "*** Begin Patch\n*** Update File: a.py\n@@\n-x = 2\n+x = 3\n*** End Patch\n"
        refused = await act(branch, "editor", {"action": "apply_patch", "patch": patch})
        assert refused["success"] is False and "cannot carry expected_hash" in refused["error"]
    assert (workspace / "a.py").read_text() == "x = 2\n"

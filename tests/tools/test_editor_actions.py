"""editor actions beyond write/edit: multi_edit, insert, apply_patch, expected_hash."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import attrs
import pytest

from lionfactory._call import CallContext, call_context
from lionfactory._evidence import FileEvidence
from lionfactory.errors import ToolInputError
from lionfactory.tools import _editor_files
from lionfactory.tools.editor import editor_tool


@pytest.fixture
def editor(workspace: Path):
    return editor_tool(workspace_root=workspace)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- multi_edit -----------------------------------------------------------------


async def test_multi_edit_applies_in_order_each_seeing_the_previous(editor, workspace: Path):
    (workspace / "a.py").write_text("a = 1\nb = 2\n")
    result = await editor(
        action="multi_edit",
        file_path="a.py",
        edits=[
            {"old_string": "a = 1", "new_string": "a = 10"},
            {"old_string": "a = 10\nb", "new_string": "a = 10\nc"},
        ],
    )
    assert result["success"] is True, result
    assert result["matched"] == "exact"
    assert (workspace / "a.py").read_text() == "a = 10\nc = 2\n"


async def test_a_failing_multi_edit_names_the_edit_and_leaves_the_file(editor, workspace: Path):
    path = workspace / "a.py"
    path.write_bytes(b"a = 1\r\nb = 2\r\n")
    before_stat = path.stat()
    result = await editor(
        action="multi_edit",
        file_path="a.py",
        edits=[
            {"old_string": "a = 1", "new_string": "a = 10"},
            {"old_string": "zzz", "new_string": "y"},
        ],
    )
    assert result["success"] is False
    assert "edit 1 (counting from 0) of 2 failed" in result["error"]
    assert path.read_bytes() == b"a = 1\r\nb = 2\r\n"
    assert path.stat().st_ino == before_stat.st_ino  # not even rewritten


async def test_multi_edit_reports_which_edits_matched_loosely(editor, workspace: Path):
    (workspace / "a.py").write_text("def f():\n\treturn 1\n")
    result = await editor(
        action="multi_edit",
        file_path="a.py",
        edits=[{"old_string": "def f():\n    return 1", "new_string": "def f():\n    return 2"}],
    )
    assert result["success"] is True
    assert result["matched"] == "tabs"
    assert "edit 0: tabs" in result["content"]
    assert (workspace / "a.py").read_text() == "def f():\n\treturn 2\n"


async def test_multi_edit_needs_edits(editor, workspace: Path):
    (workspace / "a.py").write_text("a\n")
    result = await editor(action="multi_edit", file_path="a.py", edits=[])
    assert result["success"] is False and "needs `edits`" in result["error"]


# --- insert ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [(0, b"new\na\nb\n"), (1, b"a\nnew\nb\n"), (2, b"a\nb\nnew\n")],
)
async def test_insert_puts_whole_lines_after_the_given_line(editor, workspace, line, expected):
    (workspace / "a.txt").write_bytes(b"a\nb\n")
    result = await editor(action="insert", file_path="a.txt", insert_line=line, new_string="new")
    assert result["success"] is True, result
    assert (workspace / "a.txt").read_bytes() == expected


async def test_insert_at_the_end_of_a_file_without_final_newline(editor, workspace: Path):
    (workspace / "a.txt").write_bytes(b"a\r\nb")
    result = await editor(action="insert", file_path="a.txt", insert_line=2, new_string="c\nd")
    assert result["success"] is True
    assert (workspace / "a.txt").read_bytes() == b"a\r\nb\r\nc\r\nd\r\n"
    assert result["content"].rstrip().endswith("4\td")


async def test_insert_past_the_end_is_refused(editor, workspace: Path):
    (workspace / "a.txt").write_bytes(b"a\n")
    result = await editor(action="insert", file_path="a.txt", insert_line=5, new_string="x")
    assert result["success"] is False and "has 1 lines; use 0 to 1" in result["error"]
    assert (workspace / "a.txt").read_bytes() == b"a\n"


# --- edit snippet at the end (26.10) ----------------------------------------------


@pytest.mark.parametrize("final", [b"\n", b""])
async def test_an_edit_of_the_last_line_numbers_only_real_lines(editor, workspace, final):
    (workspace / "a.txt").write_bytes(b"one\ntwo\nthree" + final)
    result = await editor(
        action="edit", file_path="a.txt", old_string="three" + final.decode(), new_string="3\n"
    )
    assert result["success"] is True
    rows = result["content"].split("\n", 1)[1].split("\n")
    assert rows[-1] == "3\t3"


# --- expected_hash --------------------------------------------------------------


async def test_a_matching_expected_hash_lets_the_edit_through(editor, workspace: Path):
    (workspace / "a.txt").write_bytes(b"a\n")
    result = await editor(
        action="edit", file_path="a.txt", old_string="a", new_string="b", expected_hash=sha(b"a\n")
    )
    assert result["success"] is True
    assert result["content_hash"] == sha(b"b\n")


@pytest.mark.parametrize("action", ["edit", "multi_edit", "insert", "write"])
async def test_a_stale_expected_hash_is_refused_for_every_action(editor, workspace, action):
    (workspace / "a.txt").write_bytes(b"a\n")
    arguments = {
        "edit": {"old_string": "a", "new_string": "b"},
        "multi_edit": {"edits": [{"old_string": "a", "new_string": "b"}]},
        "insert": {"insert_line": 0, "new_string": "b"},
        "write": {"content": "b\n"},
    }[action]
    result = await editor(
        action=action, file_path="a.txt", expected_hash=sha(b"other"), **arguments
    )
    assert result["success"] is False
    assert "Read the file again" in result["error"]
    assert (workspace / "a.txt").read_bytes() == b"a\n"


async def test_an_invalid_expected_hash_is_a_validation_error(editor, workspace: Path):
    (workspace / "a.txt").write_bytes(b"a\n")
    with pytest.raises(ToolInputError, match="expected_hash"):
        await editor(
            action="edit", file_path="a.txt", old_string="a", new_string="b", expected_hash="abc"
        )
    assert (workspace / "a.txt").read_bytes() == b"a\n"


# --- apply_patch ----------------------------------------------------------------

CODEX = """\
*** Begin Patch
*** Add File: pkg/new.py
+x = 1
+y = 2
*** Update File: pkg/mod.py
@@ def g():
-    return 1
+    return 2
*** Delete File: old.txt
*** Update File: pkg/name.py
*** Move to: pkg/renamed.py
@@
-a = 1
+a = 2
*** End Patch
"""


@pytest.fixture
def tree(workspace: Path) -> Path:
    (workspace / "pkg").mkdir()
    (workspace / "pkg" / "mod.py").write_text(
        "def f():\n    return 1\n\n\ndef g():\n    return 1\n"
    )
    (workspace / "pkg" / "name.py").write_text("a = 1\n")
    (workspace / "old.txt").write_text("bye\n")
    return workspace


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


async def test_a_codex_patch_adds_updates_deletes_and_moves(editor, tree: Path):
    result = await editor(action="apply_patch", patch=CODEX)
    assert result["success"] is True, result
    assert snapshot(tree) == {
        "pkg/mod.py": b"def f():\n    return 1\n\n\ndef g():\n    return 2\n",
        "pkg/new.py": b"x = 1\ny = 2\n",
        "pkg/renamed.py": b"a = 2\n",
    }


async def test_a_patch_records_evidence_of_every_file_it_wrote(editor, tree: Path):
    with call_context(CallContext(call_id="c", tool="editor", wants_evidence=True)) as ctx:
        result = await editor(action="apply_patch", patch=CODEX)
    assert result["success"] is True
    paths = {Path(e.path).name for e in FileEvidence.all_from_metadata(ctx.metadata)}
    assert paths == {"new.py", "mod.py", "renamed.py"}
    # Each written file's hash is in the answer, for callers that carry hashes.
    added = sha(b"x = 1\ny = 2\n")
    assert f"added 'pkg/new.py' (content_hash {added})" in result["content"]


async def test_a_patch_whose_last_hunk_fails_changes_no_file(editor, tree: Path):
    before = snapshot(tree)
    patch = CODEX.replace("-a = 1\n+a = 2", "-a = 7\n+a = 2")
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is False
    assert "hunk 1 of 'pkg/name.py' cannot be placed" in result["error"]
    assert snapshot(tree) == before


async def test_a_write_failing_midway_rolls_every_file_back(workspace: Path, tree: Path):
    calls = {"n": 0}

    def fail_second(fd: int, data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        _editor_files.WriteSteps().write(fd, data)

    editor = editor_tool(
        workspace_root=workspace,
        _write_steps=attrs.evolve(_editor_files.WriteSteps(), write=fail_second),
    )
    before = snapshot(tree)
    result = await editor(action="apply_patch", patch=CODEX)
    assert result["success"] is False
    assert "Every file was put back" in result["error"]
    assert snapshot(tree) == before
    assert not [p for p in tree.rglob("*") if p.name.startswith(_editor_files.TEMP_PREFIX)]


async def test_an_ambiguous_hunk_is_refused_not_applied_at_the_first_place(editor, tree: Path):
    patch = (
        "*** Begin Patch\n*** Update File: pkg/mod.py\n@@\n-    return 1\n+    return 3\n"
        "*** End Patch\n"
    )
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is False
    assert "occur 2 times (lines 2, 6)" in result["error"]


async def test_a_unified_diff_uses_line_numbers_to_break_ties(editor, tree: Path):
    patch = "--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -6,1 +6,1 @@\n-    return 1\n+    return 3\n"
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is True, result
    assert (tree / "pkg" / "mod.py").read_text().endswith("def g():\n    return 3\n")
    assert (tree / "pkg" / "mod.py").read_text().startswith("def f():\n    return 1\n")


async def test_a_tab_indented_file_takes_a_space_indented_patch(editor, workspace: Path):
    (workspace / "t.py").write_text("def f():\n\tif x:\n\t\treturn 1\n")
    patch = (
        "*** Begin Patch\n*** Update File: t.py\n@@\n def f():\n     if x:\n-        return 1\n"
        "+        return 2\n*** End Patch\n"
    )
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is True, result
    assert result["matched"] == "tabs"
    assert (workspace / "t.py").read_text() == "def f():\n\tif x:\n\t\treturn 2\n"


@pytest.mark.parametrize(
    ("path", "reason"),
    [("../escape.py", "outside"), (".env", ""), (".git/config", ".git")],
)
async def test_patch_paths_go_through_the_workspace_seam(editor, workspace, path, reason):
    (workspace / ".git").mkdir()
    patch = f"*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch\n"
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is False
    assert reason in result["error"]
    assert not (workspace / ".env").exists() and not (workspace / ".git" / "config").exists()


async def test_a_patch_through_a_symlink_is_refused(editor, workspace: Path, tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "t.py").write_text("a\n")
    os.symlink(outside, workspace / "link")
    patch = "*** Begin Patch\n*** Update File: link/t.py\n@@\n-a\n+b\n*** End Patch\n"
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is False
    assert (outside / "t.py").read_text() == "a\n"


async def test_adding_an_existing_file_is_refused(editor, tree: Path):
    patch = "*** Begin Patch\n*** Add File: old.txt\n+x\n*** End Patch\n"
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is False and "already exists" in result["error"]
    assert (tree / "old.txt").read_text() == "bye\n"


@pytest.mark.parametrize(
    "patch",
    [
        "no patch here",
        "*** Begin Patch\n*** Update File: a\n@@\n-x\n",  # no End Patch
        "*** Begin Patch\n*** Frobnicate: a\n*** End Patch\n",
        "--- a/x\n+++ b/x\n@@ -1,3 +1,1 @@\n-a\n",  # counts do not add up
    ],
)
async def test_malformed_patches_are_refused_with_advice(editor, workspace, patch):
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is False
    assert result["error"].startswith("The patch was not applied")


async def test_a_git_rename_diff_moves_the_file(editor, tree: Path):
    patch = (
        "diff --git a/pkg/name.py b/pkg/other.py\nsimilarity index 100%\n"
        "rename from pkg/name.py\nrename to pkg/other.py\n"
    )
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is True, result
    assert not (tree / "pkg" / "name.py").exists()
    assert (tree / "pkg" / "other.py").read_text() == "a = 1\n"


async def test_no_newline_at_end_of_file_is_honoured(editor, workspace: Path):
    (workspace / "a.txt").write_text("a\nb\n")
    patch = "--- a/a.txt\n+++ b/a.txt\n@@ -2 +2 @@\n-b\n+c\n\\ No newline at end of file\n"
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is True, result
    assert (workspace / "a.txt").read_bytes() == b"a\nc"


def test_mcp_schemas_carry_the_new_actions_and_fields(editor):
    from lionfactory.mcp._hints import hints_for, output_schema

    schema = output_schema(editor)
    assert schema is not None and {"matched", "content_hash"} <= set(schema["properties"])
    actions = editor.request_model.model_json_schema()["properties"]["action"]["enum"]
    assert set(actions) == {"write", "edit", "multi_edit", "insert", "apply_patch"}
    hints = hints_for(editor)
    assert hints is not None and hints.destructive and not hints.read_only


async def test_a_file_changed_by_another_program_mid_patch_is_kept_and_nothing_applied(
    workspace: Path, tree: Path
):
    # Between the first write and the second, another program rewrites the
    # second file: its change survives and the first file is put back.
    calls = {"n": 0}

    def meddle(fd: int, data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            (tree / "pkg" / "mod.py").write_text("changed by someone else\n")
        _editor_files.WriteSteps().write(fd, data)

    editor = editor_tool(
        workspace_root=workspace,
        _write_steps=attrs.evolve(_editor_files.WriteSteps(), write=meddle),
    )
    patch = (
        "*** Begin Patch\n*** Add File: a_new.py\n+x = 1\n*** Update File: pkg/mod.py\n@@\n"
        "-def f():\n+def f2():\n*** End Patch\n"
    )
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is False
    assert "changed while the patch was being applied" in result["error"]
    assert (tree / "pkg" / "mod.py").read_text() == "changed by someone else\n"
    assert not (tree / "a_new.py").exists()


async def test_a_no_prefix_unified_diff_keeps_a_path_starting_with_a(editor, workspace: Path):
    (workspace / "a").mkdir()
    (workspace / "a" / "x.txt").write_text("1\n")
    patch = "--- a/x.txt\n+++ a/x.txt\n@@ -1 +1 @@\n-1\n+2\n"
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is True, result
    assert (workspace / "a" / "x.txt").read_text() == "2\n"


async def test_nested_anchors_narrow_where_a_codex_hunk_goes(editor, workspace: Path):
    (workspace / "c.py").write_text(
        "class A:\n    def f(self):\n        return 1\n\n"
        "class B:\n    def f(self):\n        return 1\n"
    )
    patch = (
        "*** Begin Patch\n*** Update File: c.py\n@@ class B:\n@@     def f(self):\n"
        "-        return 1\n+        return 2\n*** End Patch\n"
    )
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is True, result
    assert (
        (workspace / "c.py").read_text().endswith("class B:\n    def f(self):\n        return 2\n")
    )
    assert "class A:\n    def f(self):\n        return 1\n" in (workspace / "c.py").read_text()


async def test_end_of_file_places_the_hunk_at_the_end(editor, workspace: Path):
    (workspace / "e.txt").write_text("x\ny\nx\n")
    patch = "*** Begin Patch\n*** Update File: e.txt\n@@\n-x\n+z\n*** End of File\n*** End Patch\n"
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is True, result
    assert (workspace / "e.txt").read_text() == "x\ny\nz\n"

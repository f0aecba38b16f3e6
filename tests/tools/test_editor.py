"""editor: write, edit, byte-exact line endings, atomic replace, per-path locks."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import attrs
import pytest

from lionfactory._call import CallContext, call_context
from lionfactory.tools import _editor_files
from lionfactory.tools.editor import EditorRequest, EditorResponse, editor_tool
from lionfactory.tools.reader import reader_tool


@pytest.fixture
def editor(workspace: Path):
    return editor_tool(workspace_root=workspace)


def leftovers(directory: Path) -> list[str]:
    return sorted(
        p.name for p in directory.iterdir() if p.name.startswith(_editor_files.TEMP_PREFIX)
    )


# --- write ----------------------------------------------------------------------


async def test_write_creates_a_file_and_its_parents(editor, workspace: Path):
    result = await editor(action="write", file_path="pkg/sub/mod.py", content="x = 1\n")
    assert result["success"] is True
    assert (workspace / "pkg" / "sub" / "mod.py").read_bytes() == b"x = 1\n"
    assert "Created 'pkg/sub/mod.py'" in result["content"]


async def test_write_replaces_content_exactly(editor, workspace: Path):
    (workspace / "a.txt").write_bytes(b"old\r\n")
    result = await editor(action="write", file_path="a.txt", content="new\r\nno final newline")
    assert result["success"] is True
    assert (workspace / "a.txt").read_bytes() == b"new\r\nno final newline"


async def test_write_keeps_an_existing_files_mode(editor, workspace: Path):
    target = workspace / "run.sh"
    target.write_text("#!/bin/sh\n")
    target.chmod(0o751)
    await editor(action="write", file_path="run.sh", content="#!/bin/sh\necho hi\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o751


async def test_write_requires_content(editor):
    result = await editor(action="write", file_path="a.txt")
    assert result["success"] is False
    assert "needs `content`" in result["error"]


async def test_write_to_a_directory_is_refused(editor, workspace: Path):
    (workspace / "d").mkdir()
    result = await editor(action="write", file_path="d", content="x")
    assert result["success"] is False
    assert "is a directory; give a file path" in result["error"]


async def test_write_under_a_file_is_refused(editor, workspace: Path):
    (workspace / "f").write_text("")
    result = await editor(action="write", file_path="f/x.txt", content="x")
    assert result["success"] is False
    assert "a parent path is a file" in result["error"]


async def test_write_over_a_symlink_is_refused_and_the_target_kept(editor, workspace: Path):
    (workspace / "real.txt").write_text("keep")
    (workspace / "link.txt").symlink_to(workspace / "real.txt")
    result = await editor(action="write", file_path="link.txt", content="x")
    assert result["success"] is False
    assert "symbolic link" in result["error"]
    assert (workspace / "real.txt").read_text() == "keep"


async def test_write_through_a_link_inside_is_refused_and_the_link_kept(editor, workspace: Path):
    (workspace / "real_docs").mkdir()
    (workspace / "real_docs" / "a.md").write_text("keep")
    (workspace / "docs").symlink_to("real_docs")
    (workspace / "alias.md").symlink_to("real_docs/a.md")
    for path in ("docs/a.md", "docs/new.md", "alias.md"):
        result = await editor(action="write", file_path=path, content="x")
        assert result["success"] is False, path
        assert "symbolic link" in result["error"]
    assert (workspace / "real_docs" / "a.md").read_text() == "keep"
    assert (workspace / "alias.md").is_symlink()
    assert sorted(p.name for p in (workspace / "real_docs").iterdir()) == ["a.md"]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("../escape.txt", "outside the workspace"),
        ("/tmp/elsewhere.txt", "outside the workspace"),
        ("~/x", "outside the workspace"),
        ("x\x00y", "NUL byte"),
        (".env", "protected"),
        ("app/.env.production", "protected"),
        (".ssh/id_ed25519", "protected"),
    ],
)
async def test_writes_outside_or_to_protected_names_are_refused(editor, workspace, path, expected):
    result = await editor(action="write", file_path=path, content="x")
    assert result["success"] is False
    assert expected in result["error"]
    assert list(workspace.iterdir()) == []


async def test_protected_names_are_a_factory_option(workspace: Path):
    tool = editor_tool(workspace_root=workspace, protected_names=["*.lock"])
    refused = await tool(action="write", file_path="poetry.lock", content="x")
    allowed = await tool(action="write", file_path=".env", content="A=1\n")
    assert refused["success"] is False
    assert allowed["success"] is True


# --- edit -----------------------------------------------------------------------


async def test_edit_replaces_one_occurrence(editor, workspace: Path):
    (workspace / "a.py").write_text("def f():\n    return 1\n")
    result = await editor(
        action="edit", file_path="a.py", old_string="return 1", new_string="return 2"
    )
    assert result["success"] is True
    assert (workspace / "a.py").read_text() == "def f():\n    return 2\n"


async def test_empty_new_string_deletes(editor, workspace: Path):
    (workspace / "a.txt").write_text("keep DROP keep\n")
    await editor(action="edit", file_path="a.txt", old_string=" DROP", new_string="")
    assert (workspace / "a.txt").read_text() == "keep keep\n"


@pytest.mark.parametrize("old", [None, ""])
async def test_edit_needs_a_non_empty_old_string(editor, workspace: Path, old):
    (workspace / "a.txt").write_text("x\n")
    result = await editor(action="edit", file_path="a.txt", old_string=old, new_string="y")
    assert result["success"] is False
    assert "non-empty `old_string`" in result["error"]
    assert "use action 'write'" in result["error"]


async def test_edit_needs_a_new_string(editor, workspace: Path):
    (workspace / "a.txt").write_text("x\n")
    result = await editor(action="edit", file_path="a.txt", old_string="x")
    assert result["success"] is False
    assert "use '' to delete" in result["error"]


async def test_identical_strings_are_refused(editor, workspace: Path):
    (workspace / "a.txt").write_text("x\n")
    result = await editor(action="edit", file_path="a.txt", old_string="x", new_string="x")
    assert result["success"] is False
    assert "nothing to change" in result["error"]


async def test_editing_a_missing_file_points_to_write(editor):
    result = await editor(action="edit", file_path="new.txt", old_string="a", new_string="b")
    assert result["success"] is False
    assert "File not found" in result["error"]
    assert "use action 'write'" in result["error"]


async def test_zero_matches_says_to_read_again(editor, workspace: Path):
    (workspace / "a.txt").write_text("alpha\n")
    result = await editor(action="edit", file_path="a.txt", old_string="omega", new_string="x")
    assert result["success"] is False
    assert "not found" in result["error"]
    assert "Read the file again" in result["error"]


async def test_zero_matches_detects_line_number_prefixes(editor, workspace: Path):
    (workspace / "a.py").write_text("a = 1\nb = 2\n")
    result = await editor(
        action="edit", file_path="a.py", old_string="1\ta = 1\n2\tb = 2", new_string="c = 3"
    )
    assert result["success"] is False
    assert "line-number prefixes" in result["error"]
    assert "without them it matches" in result["error"]
    assert (workspace / "a.py").read_text() == "a = 1\nb = 2\n"


async def test_a_uniformly_shifted_old_string_is_applied_re_indented(editor, workspace: Path):
    (workspace / "a.py").write_text("class A:\n    def f(self):\n        pass\n")
    result = await editor(
        action="edit",
        file_path="a.py",
        old_string="def f(self):\n    pass",
        new_string="def g(self):\n    pass",
    )
    assert result["success"] is True
    assert result["matched"] == "indent"
    assert (workspace / "a.py").read_text() == "class A:\n    def g(self):\n        pass\n"


async def test_several_matches_fail_without_replace_all(editor, workspace: Path):
    (workspace / "a.txt").write_text("x\ny\nx\n")
    result = await editor(action="edit", file_path="a.txt", old_string="x", new_string="z")
    assert result["success"] is False
    assert "occurs 2 times" in result["error"]
    assert "lines 1, 3" in result["error"]
    assert "replace_all=true" in result["error"]
    assert (workspace / "a.txt").read_text() == "x\ny\nx\n"


async def test_replace_all_replaces_every_match(editor, workspace: Path):
    (workspace / "a.txt").write_text("x\ny\nx\n")
    result = await editor(
        action="edit", file_path="a.txt", old_string="x", new_string="z", replace_all=True
    )
    assert result["success"] is True
    assert "2 occurrences" in result["content"]
    assert (workspace / "a.txt").read_text() == "z\ny\nz\n"


async def test_snippet_is_centred_on_the_edit_site(editor, workspace: Path):
    lines = [f"line {i}" for i in range(1, 101)]
    lines[79] = "TARGET"
    (workspace / "a.txt").write_text("\n".join(lines) + "\n")
    result = await editor(action="edit", file_path="a.txt", old_string="TARGET", new_string="HIT")
    rows = result["content"].split("\n")[1:]
    assert rows == [f"{n}\tline {n}" for n in range(77, 80)] + ["80\tHIT"] + [
        f"{n}\tline {n}" for n in range(81, 84)
    ]


async def test_crlf_survives_an_edit_written_with_lf(editor, workspace: Path):
    (workspace / "a.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    result = await editor(
        action="edit", file_path="a.txt", old_string="one\ntwo", new_string="1\n2"
    )
    assert result["success"] is True
    assert (workspace / "a.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


async def test_mixed_endings_bom_and_missing_final_newline_survive(editor, workspace: Path):
    original = b"\xef\xbb\xbfa\r\nb\nc\rd"
    (workspace / "a.txt").write_bytes(original)
    await editor(action="edit", file_path="a.txt", old_string="b", new_string="B")
    assert (workspace / "a.txt").read_bytes() == original.replace(b"b", b"B")


async def test_non_utf8_file_is_refused_untouched(editor, workspace: Path):
    original = "café\n".encode("latin-1")
    (workspace / "a.txt").write_bytes(original)
    result = await editor(action="edit", file_path="a.txt", old_string="caf", new_string="x")
    assert result["success"] is False
    assert "not valid UTF-8" in result["error"]
    assert "Use bash" in result["error"]
    assert (workspace / "a.txt").read_bytes() == original


async def test_edit_keeps_the_files_mode(editor, workspace: Path):
    target = workspace / "a.sh"
    target.write_text("echo a\n")
    target.chmod(0o700)
    await editor(action="edit", file_path="a.sh", old_string="a", new_string="b")
    assert stat.S_IMODE(target.stat().st_mode) == 0o700


async def test_editing_a_directory_is_refused(editor, workspace: Path):
    (workspace / "d").mkdir()
    result = await editor(action="edit", file_path="d", old_string="a", new_string="b")
    assert result["success"] is False
    assert "is a directory" in result["error"]


# --- concurrency ------------------------------------------------------------------


async def test_concurrent_edits_of_distinct_markers_all_land(editor, workspace: Path):
    (workspace / "a.txt").write_text("".join(f"<m{i}>\n" for i in range(50)))
    results = []

    async def edit(i: int) -> None:
        results.append(
            await editor(
                action="edit", file_path="a.txt", old_string=f"<m{i}>", new_string=f"done{i}"
            )
        )

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(edit, i)
    assert all(r["success"] for r in results)
    assert (workspace / "a.txt").read_text() == "".join(f"done{i}\n" for i in range(50))


async def test_concurrent_edits_of_one_marker_succeed_exactly_once(editor, workspace: Path):
    (workspace / "a.txt").write_text("<marker>\n")
    results = []

    async def edit(i: int) -> None:
        results.append(
            await editor(
                action="edit", file_path="a.txt", old_string="<marker>", new_string=f"w{i}"
            )
        )

    async with anyio.create_task_group() as tg:
        for i in range(50):
            tg.start_soon(edit, i)
    assert sum(r["success"] for r in results) == 1
    assert (workspace / "a.txt").read_text().startswith("w")


# --- atomicity --------------------------------------------------------------------


class Boom(OSError):
    def __init__(self) -> None:
        super().__init__(errno.EIO, "injected failure")


def fail(*_args: object) -> None:
    raise Boom()


@contextmanager
def opened(target: Path) -> Iterator[tuple[int, _editor_files.Original]]:
    """The target's directory descriptor and the target as read."""
    dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
    fd = os.open(target, os.O_RDONLY)
    try:
        yield dir_fd, _editor_files.Original(fd=fd, st=os.fstat(fd), data=target.read_bytes())
    finally:
        os.close(fd)
        os.close(dir_fd)


@pytest.mark.parametrize("step", ["open_temp", "write", "fsync", "replace"])
def test_a_failed_step_leaves_the_original_and_no_temp_file(workspace: Path, step: str):
    target = workspace / "a.txt"
    target.write_bytes(b"original\r\n")
    steps = attrs.evolve(_editor_files.WriteSteps(), **{step: fail})
    with opened(target) as (dir_fd, original), pytest.raises(Boom):
        _editor_files.commit(dir_fd, "a.txt", b"new", original=original, steps=steps)
    assert target.read_bytes() == b"original\r\n"
    assert leftovers(workspace) == []


def test_commit_replaces_keeps_the_mode_and_leaves_no_temp_file(workspace: Path):
    target = workspace / "a.txt"
    target.write_bytes(b"old")
    target.chmod(0o600)
    with opened(target) as (dir_fd, original):
        _editor_files.commit(dir_fd, "a.txt", b"new", original=original)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert leftovers(workspace) == []


async def test_failure_between_write_and_replace_is_a_typed_error(workspace: Path):
    original = b"line one\nline two\n"
    (workspace / "a.txt").write_bytes(original)
    tool = editor_tool(
        workspace_root=workspace, _write_steps=attrs.evolve(_editor_files.WriteSteps(), fsync=fail)
    )
    result = await tool(action="edit", file_path="a.txt", old_string="one", new_string="1")
    assert result["success"] is False
    assert "injected failure" in result["error"]
    assert "left unchanged" in result["error"]
    assert (workspace / "a.txt").read_bytes() == original
    assert leftovers(workspace) == []


# --- evidence -------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"action": "write", "file_path": "a.txt", "content": "fresh\n"},
        {"action": "edit", "file_path": "a.txt", "old_string": "old", "new_string": "fresh"},
    ],
)
async def test_success_records_file_evidence(editor, workspace: Path, arguments):
    target = workspace / "a.txt"
    target.write_text("old\n")
    with call_context(CallContext(call_id="c1", tool="editor", wants_evidence=True)) as ctx:
        result = await editor(**arguments)
    st = target.stat()
    assert ctx.metadata["file_evidence"] == {
        "path": str(target),
        "mtime_ns": st.st_mtime_ns,
        "size": st.st_size,
        "sha256": hashlib.sha256(b"fresh\n").hexdigest(),
        "whole_file": True,
    }
    assert "sha256" not in str(result)


async def test_reader_and_editor_evidence_have_the_same_shape(editor, workspace: Path):
    (workspace / "a.txt").write_text("x\n")
    reader = reader_tool(workspace_root=workspace)
    with call_context(CallContext(call_id="r", tool="reader", wants_evidence=True)) as read_ctx:
        await reader(action="read", path="a.txt")
    with call_context(CallContext(call_id="w", tool="editor", wants_evidence=True)) as write_ctx:
        await editor(action="write", file_path="a.txt", content="x\n")
    assert read_ctx.metadata["file_evidence"].keys() == write_ctx.metadata["file_evidence"].keys()
    assert (
        read_ctx.metadata["file_evidence"]["sha256"]
        == (write_ctx.metadata["file_evidence"]["sha256"])
    )


async def test_failure_records_no_evidence(editor):
    with call_context(CallContext(call_id="c1", tool="editor", wants_evidence=True)) as ctx:
        await editor(action="edit", file_path="none.txt", old_string="a", new_string="b")
    assert ctx.metadata == {}


async def test_without_a_call_context_nothing_extra_happens(editor, workspace: Path):
    result = await editor(action="write", file_path="a.txt", content="x")
    assert set(result) == {"success", "content", "error", "matched", "content_hash", "diagnostics"}
    assert result["content_hash"] is None  # nothing asked for evidence: nothing hashed


# --- the tool -------------------------------------------------------------------


def test_every_schema_field_has_a_description():
    for model in (EditorRequest, EditorResponse):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"


def test_tool_is_named_editor_and_bound_to_no_branch(editor):
    assert editor.name == "editor"
    assert editor.bound_to is None


def test_missing_root_fails_at_once(tmp_path: Path):
    with pytest.raises(ValueError, match="got"):
        editor_tool(workspace_root=tmp_path / "missing")


def test_umask_applies_to_new_files(editor, workspace: Path):
    old = os.umask(0o027)
    try:
        editor.run_sync(action="write", file_path="n.txt", content="x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((workspace / "n.txt").stat().st_mode) == 0o640


async def test_an_explicit_crlf_to_lf_edit_is_taken_literally(tmp_path):
    (tmp_path / "w.txt").write_bytes(b"a\r\nb\r\n")
    editor = editor_tool(workspace_root=tmp_path)
    result = await editor(action="edit", file_path="w.txt", old_string="a\r\n", new_string="a\n")
    assert result["success"] is True
    assert (tmp_path / "w.txt").read_bytes() == b"a\nb\r\n"


# --- metadata ---------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner needs root")
async def test_an_edit_keeps_the_owner_and_group(workspace: Path):
    target = workspace / "a.txt"
    target.write_text("one\n")
    os.chown(target, 12345, 23456)
    tool = editor_tool(workspace_root=workspace)
    result = await tool(action="edit", file_path="a.txt", old_string="one", new_string="two")
    assert result["success"], result
    st = target.stat()
    assert (st.st_uid, st.st_gid) == (12345, 23456)


async def test_an_edit_keeps_extended_attributes(workspace: Path):
    target = workspace / "a.txt"
    target.write_text("one\n")
    try:
        os.setxattr(target, "user.origin", b"downloaded")
    except OSError as exc:
        pytest.skip(f"this filesystem takes no user xattrs ({exc.strerror})")
    tool = editor_tool(workspace_root=workspace)
    result = await tool(action="edit", file_path="a.txt", old_string="one", new_string="two")
    assert result["success"], result
    assert os.getxattr(target, "user.origin") == b"downloaded"


async def test_a_hard_linked_file_is_edited_in_place_and_its_twin_follows(workspace: Path):
    target = workspace / "a.txt"
    target.write_text("one\n")
    twin = workspace / "twin.txt"
    os.link(target, twin)
    inode = target.stat().st_ino
    tool = editor_tool(workspace_root=workspace)
    result = await tool(action="edit", file_path="a.txt", old_string="one", new_string="three")
    assert result["success"], result
    assert target.stat().st_ino == inode
    assert twin.read_text() == "three\n"
    result = await tool(action="write", file_path="twin.txt", content="x\n")
    assert result["success"], result
    assert target.read_text() == "x\n"
    assert leftovers(workspace) == []


async def test_a_failed_write_removes_the_directories_it_created(workspace: Path):
    (workspace / "kept").mkdir()
    tool = editor_tool(
        workspace_root=workspace, _write_steps=attrs.evolve(_editor_files.WriteSteps(), write=fail)
    )
    result = await tool(action="write", file_path="kept/a/b/c/new.txt", content="x")
    assert result["success"] is False
    assert sorted(p.name for p in workspace.rglob("*")) == ["kept"]


async def test_no_evidence_is_computed_unless_the_call_asks_for_it(editor, workspace: Path):
    """Only a guard needs evidence (and its hash of the file): a plain call context gets none."""
    (workspace / "a.txt").write_text("old\n")
    reader = reader_tool(workspace_root=workspace)
    with call_context(CallContext(call_id="r", tool="reader")) as read_ctx:
        assert (await reader(action="read", path="a.txt"))["success"]
    with call_context(CallContext(call_id="w", tool="editor")) as write_ctx:
        assert (await editor(action="write", file_path="a.txt", content="new\n"))["success"]
    assert read_ctx.metadata == {} and write_ctx.metadata == {}

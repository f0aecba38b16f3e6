"""apply_patch is all or nothing, and its rollback never clobbers someone else's write.

Every target is checked before the first write (a link inside the workspace
among them); a failure after the first write rolls back only the files that
still hold what the patch wrote, removes the directories it made, and names
the file in a typed error.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio.from_thread
import attrs

from lionfactory import Branch
from lionfactory.tools import _editor_files, editor_tool


def patch(*body: str) -> str:
    return "\n".join(["*** Begin Patch", *body, "*** End Patch"]) + "\n"


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def tree(root: Path) -> Path:
    (root / "one").mkdir()
    (root / "two").mkdir()
    (root / "one" / "a.txt").write_text("a\n")
    (root / "two" / "b.txt").write_text("b\n")
    (root / "real").mkdir()
    (root / "link").symlink_to("real")
    return root


def steps_failing_at(n: int, before: Callable[[], None] = lambda: None) -> _editor_files.WriteSteps:
    """Write steps whose `n`-th write first runs `before`, then fails with ENOSPC."""
    calls = {"n": 0}

    def write(fd: int, data: bytes) -> None:
        calls["n"] += 1
        if calls["n"] == n:
            before()
            raise OSError(errno.ENOSPC, "No space left on device")
        _editor_files.WriteSteps().write(fd, data)

    return attrs.evolve(_editor_files.WriteSteps(), write=write)


async def test_a_later_target_through_a_link_refuses_the_patch_before_any_write(
    tmp_path: Path,
) -> None:
    root = tree(tmp_path)
    before = snapshot(root)
    editor = editor_tool(workspace_root=root)
    for later in (
        ["*** Add File: link/new.txt", "+new"],
        ["*** Update File: two/b.txt", "*** Move to: link/moved.txt", "@@", "-b", "+B"],
    ):
        result = await editor(
            action="apply_patch",
            patch=patch("*** Update File: one/a.txt", "@@", "-a", "+A", *later),
        )
        assert result["success"] is False
        assert "link/" in result["error"] and "unexpectedly" not in result["error"]
        assert snapshot(root) == before
        assert list((root / "real").iterdir()) == []


async def test_a_directory_swapped_for_a_link_mid_patch_rolls_back_and_names_the_file(
    tmp_path: Path,
) -> None:
    root = tree(tmp_path)
    (root / "sub").mkdir()
    before = snapshot(root)

    def swap(fd: int, data: bytes) -> None:
        _editor_files.WriteSteps().write(fd, data)
        if data == b"A\n":  # the first file is written: now the later parent turns into a link
            (root / "sub").rename(root / "sub_real")
            (root / "sub").symlink_to("sub_real")

    editor = editor_tool(
        workspace_root=root,
        _write_steps=attrs.evolve(_editor_files.WriteSteps(), write=swap),
    )
    branch = Branch()
    branch.register(editor)
    result = await branch.act(
        "editor",
        {
            "action": "apply_patch",
            "patch": patch(
                "*** Update File: one/a.txt", "@@", "-a", "+A", "*** Add File: sub/n", "+n"
            ),
        },
    )
    assert result.outcome == "failed" and result.result is not None
    assert result.result["success"] is False
    error = result.result["error"]
    assert "'sub/n'" in error and "Every file was put back" in error, error
    assert "unexpectedly" not in error
    assert (root / "one" / "a.txt").read_text() == "a\n"
    assert not (root / "sub_real" / "n").exists()
    assert {k: v for k, v in snapshot(root).items() if not k.startswith("sub")} == before


async def test_a_rollback_removes_the_empty_directories_the_patch_made(tmp_path: Path) -> None:
    root = tree(tmp_path)
    before = snapshot(root)
    editor = editor_tool(workspace_root=root, _write_steps=steps_failing_at(2))
    result = await editor(
        action="apply_patch",
        patch=patch(
            "*** Add File: new/deep/x.txt", "+x", "*** Update File: two/b.txt", "@@", "-b", "+B"
        ),
    )
    assert result["success"] is False and "'two/b.txt'" in result["error"]
    assert "Every file was put back" in result["error"]
    assert not (root / "new").exists()
    assert snapshot(root) == before


async def test_a_rollback_keeps_what_a_second_branch_wrote_in_between(tmp_path: Path) -> None:
    root = tree(tmp_path)
    other = Branch()
    other.register(editor_tool(workspace_root=root))

    def second_branch_edits() -> None:
        # The patch has written one/a.txt and is writing two/b.txt: another
        # branch's editor changes one/a.txt now, through the event loop.
        done = anyio.from_thread.run(
            other.act,
            "editor",
            {"action": "edit", "file_path": "one/a.txt", "old_string": "A", "new_string": "theirs"},
        )
        assert done.result is not None and done.result["success"] is True, done

    editor = editor_tool(workspace_root=root, _write_steps=steps_failing_at(2, second_branch_edits))
    result = await editor(
        action="apply_patch",
        patch=patch(
            "*** Update File: one/a.txt",
            "@@",
            "-a",
            "+A",
            "*** Update File: two/b.txt",
            "@@",
            "-b",
            "+B",
        ),
    )
    assert result["success"] is False
    assert "'one/a.txt' was changed by someone else after the patch wrote it" in result["error"]
    assert (root / "one" / "a.txt").read_text() == "theirs\n"
    assert (root / "two" / "b.txt").read_text() == "b\n"


async def test_a_rollback_keeps_what_a_second_process_wrote_in_between(tmp_path: Path) -> None:
    root = tree(tmp_path)
    script = (
        "import sys\n"
        "from lionfactory.tools import editor_tool\n"
        "editor = editor_tool(workspace_root=sys.argv[1])\n"
        "out = editor.run_sync(\n"
        "    action='write', file_path='new.txt', content='from another process\\n'\n"
        ")\n"
        "assert out['success'], out\n"
    )

    def second_process_writes() -> None:
        subprocess.run(
            [sys.executable, "-c", script, str(root)],
            check=True,
            env={**os.environ},
            timeout=120,
        )

    editor = editor_tool(
        workspace_root=root, _write_steps=steps_failing_at(2, second_process_writes)
    )
    result = await editor(
        action="apply_patch",
        patch=patch(
            "*** Add File: new.txt", "+ours", "*** Update File: two/b.txt", "@@", "-b", "+B"
        ),
    )
    assert result["success"] is False
    assert "'new.txt' was changed by someone else" in result["error"], result["error"]
    assert (root / "new.txt").read_text() == "from another process\n"
    assert (root / "two" / "b.txt").read_text() == "b\n"

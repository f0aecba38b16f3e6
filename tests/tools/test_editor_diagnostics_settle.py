"""The editor's diagnostics hook: ``prepare`` and ``settle`` run in the editor's worker thread."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from lionfactory.tools.editor import editor_tool


class Hook:
    """A diagnostics hook that records where and with what its methods were called."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.settled: list[tuple[str, str]] = []
        self.loop_thread: int | None = None

    async def before(self, paths: Any) -> dict[str, Any]:
        self.loop_thread = threading.get_ident()
        return {"paths": list(paths)}

    def settle(self, token: dict[str, Any]) -> None:
        path = token["paths"][0]
        assert threading.get_ident() != self.loop_thread, "not on the event loop"
        self.settled.append((path.name, path.read_text()))
        if self.fail:
            raise RuntimeError("a broken hook")

    async def after(self, token: dict[str, Any]) -> dict[str, Any]:
        return {"settled": len(self.settled)}


async def test_settle_reads_the_changed_file_in_the_worker_thread(workspace: Path):
    (workspace / "a.py").write_text("x = 1\n")
    hook = Hook()
    editor = editor_tool(workspace_root=workspace, diagnostics=hook)
    result = await editor(action="edit", file_path="a.py", old_string="x = 1", new_string="x = 2")
    assert result["success"], result
    assert hook.settled == [("a.py", "x = 2\n")]
    assert result["diagnostics"] == {"settled": 1}


async def test_settle_runs_for_a_write_and_a_patch(workspace: Path):
    hook = Hook()
    editor = editor_tool(workspace_root=workspace, diagnostics=hook)
    result = await editor(action="write", file_path="b.py", content="y = 1\n")
    assert result["success"], result
    patch = "*** Begin Patch\n*** Update File: b.py\n@@\n-y = 1\n+y = 2\n*** End Patch\n"
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"], result
    assert hook.settled == [("b.py", "y = 1\n"), ("b.py", "y = 2\n")]


async def test_settle_does_not_run_when_the_change_failed(workspace: Path):
    (workspace / "a.py").write_text("x = 1\n")
    hook = Hook()
    editor = editor_tool(workspace_root=workspace, diagnostics=hook)
    result = await editor(action="edit", file_path="a.py", old_string="nope", new_string="x")
    assert not result["success"]
    assert hook.settled == []


async def test_a_failing_settle_does_not_fail_the_change(workspace: Path):
    (workspace / "a.py").write_text("x = 1\n")
    hook = Hook(fail=True)
    editor = editor_tool(workspace_root=workspace, diagnostics=hook)
    result = await editor(action="edit", file_path="a.py", old_string="x = 1", new_string="x = 3")
    assert result["success"], result
    assert (workspace / "a.py").read_text() == "x = 3\n"
    assert result["diagnostics"] == {"settled": 1}


class PreparingHook(Hook):
    """A hook that also reads the file before the change, in `prepare`."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__(fail)
        self.prepared: list[tuple[str, str]] = []

    def prepare(self, token: dict[str, Any]) -> None:
        path = token["paths"][0]
        assert threading.get_ident() != self.loop_thread, "not on the event loop"
        self.prepared.append((path.name, path.read_text() if path.exists() else ""))
        if self.fail:
            raise RuntimeError("a broken hook")


@pytest.mark.parametrize("fail", [False, True])
async def test_prepare_reads_the_old_file_in_the_worker_thread(workspace: Path, fail: bool):
    hook = PreparingHook(fail)
    editor = editor_tool(workspace_root=workspace, diagnostics=hook)
    patch = "*** Begin Patch\n*** Update File: b.py\n@@\n-y = 1\n+y = 2\n*** End Patch\n"
    changes = [
        {"action": "write", "file_path": "b.py", "content": "y = 1\n"},
        {"action": "apply_patch", "patch": patch},
        {"action": "edit", "file_path": "b.py", "old_string": "y = 2", "new_string": "y = 3"},
        {"action": "edit", "file_path": "b.py", "old_string": "nope", "new_string": "x"},
    ]
    results = [await editor(**change) for change in changes]
    # A failing prepare stops no change; a change that fails is prepared for too.
    assert [r["success"] for r in results] == [True, True, True, False]
    assert (workspace / "b.py").read_text() == "y = 3\n"
    old = ["", "y = 1\n", "y = 2\n", "y = 3\n"]
    assert hook.prepared == [("b.py", text) for text in old]
    assert [text for _, text in hook.settled] == old[1:]


class WrittenHook(Hook):
    """A hook that takes the written files from the editor (`settle_written`)."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[dict[Path, Any]] = []
        self.prepared = 0

    def prepare(self, token: dict[str, Any]) -> None:
        self.prepared += 1

    def settle_written(self, token: dict[str, Any], written: dict[Path, Any]) -> None:
        assert threading.get_ident() != self.loop_thread, "not on the event loop"
        self.written.append(dict(written))


async def test_settle_written_gets_the_bytes_and_stat_the_editor_wrote(workspace: Path):
    hook = WrittenHook()
    editor = editor_tool(workspace_root=workspace, diagnostics=hook)
    path = (workspace / "b.py").resolve()
    changes = [
        ({"action": "write", "file_path": "b.py", "content": "y = 1\n"}, None, b"y = 1\n"),
        (
            {"action": "edit", "file_path": "b.py", "old_string": "1", "new_string": "2"},
            b"y = 1\n",
            b"y = 2\n",
        ),
    ]
    for change, old, text in changes:
        before = path.stat() if old is not None else None
        assert (await editor(**change))["success"]
        ((where, known),) = hook.written[-1].items()
        now = path.stat()
        assert (where, known.data, known.old) == (path, text, old)
        st = known.st
        assert (st.st_ino, st.st_size, st.st_mtime_ns) == (now.st_ino, now.st_size, now.st_mtime_ns)
        if before is not None:
            assert (known.old_st.st_ino, known.old_st.st_size) == (before.st_ino, before.st_size)
    # The write was prepared for (it does not read the file it replaces); the edit was not.
    assert hook.prepared == 1
    patch = "*** Begin Patch\n*** Update File: b.py\n@@\n-y = 2\n+y = 3\n*** End Patch\n"
    assert (await editor(action="apply_patch", patch=patch))["success"]
    # A patch reports nothing (the hook reads its files itself); `settle` is not called.
    assert (hook.written[-1], hook.prepared) == ({}, 2)
    assert hook.settled == []

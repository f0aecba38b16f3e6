"""editor_tool(check=...): a policy called on the Location the editor resolved itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from lionfactory._os.workspace import Location
from lionfactory.tools.editor import EditorRequest, editor_tool


class Recorder:
    """A check that records what it saw and refuses the paths it is told to."""

    def __init__(self, refuse: set[str] | None = None) -> None:
        self.refuse = refuse or set()
        self.seen: list[tuple[Location, str]] = []

    def __call__(self, loc: Location, request: EditorRequest) -> str | None:
        self.seen.append((loc, request.action))
        if loc.shown in self.refuse:
            return f"Refused by policy: {loc.shown}. Ask the user."
        return None


async def test_a_refusing_check_stops_an_edit_and_changes_nothing(workspace: Path):
    (workspace / "a.py").write_text("x = 1\n")
    check = Recorder(refuse={"a.py"})
    editor = editor_tool(workspace_root=workspace, check=check)
    result = await editor(action="edit", file_path="a.py", old_string="x = 1", new_string="x = 2")
    assert (result["success"], result["error"]) == (False, "Refused by policy: a.py. Ask the user.")
    assert (workspace / "a.py").read_text() == "x = 1\n"
    [(loc, action)] = check.seen
    assert action == "edit"
    assert loc.path == workspace / "a.py"


async def test_an_approving_check_lets_a_write_go_ahead(workspace: Path):
    check = Recorder()
    editor = editor_tool(workspace_root=workspace, check=check)
    result = await editor(action="write", file_path="new.py", content="y = 1\n")
    assert result["success"] is True
    assert (workspace / "new.py").read_text() == "y = 1\n"
    assert [loc.shown for loc, _ in check.seen] == ["new.py"]


async def test_a_refused_path_never_reaches_the_check(workspace: Path):
    check = Recorder()
    editor = editor_tool(workspace_root=workspace, check=check)
    result = await editor(action="write", file_path="../outside.py", content="z\n")
    assert result["success"] is False
    assert check.seen == []


async def test_apply_patch_checks_every_file_it_changes_and_none_it_adds(workspace: Path):
    (workspace / "a.py").write_text("a = 1\n")
    (workspace / "b.py").write_text("b = 1\n")
    (workspace / "gone.py").write_text("g = 1\n")
    patch = (
        "*** Begin Patch\n"
        "*** Update File: a.py\n@@\n-a = 1\n+a = 2\n"
        "*** Add File: c.py\n+c = 1\n"
        "*** Update File: b.py\n*** Move to: moved.py\n@@\n-b = 1\n+b = 2\n"
        "*** Delete File: gone.py\n"
        "*** End Patch\n"
    )
    check = Recorder()
    editor = editor_tool(workspace_root=workspace, check=check)
    result = await editor(action="apply_patch", patch=patch)
    assert result["success"] is True, result
    assert [loc.shown for loc, _ in check.seen] == ["a.py", "b.py", "gone.py"]
    assert {action for _, action in check.seen} == {"apply_patch"}


async def test_a_patch_refused_for_one_file_changes_no_file(workspace: Path):
    (workspace / "a.py").write_text("a = 1\n")
    (workspace / "b.py").write_text("b = 1\n")
    patch = (
        "*** Begin Patch\n"
        "*** Update File: a.py\n@@\n-a = 1\n+a = 2\n"
        "*** Add File: c.py\n+c = 1\n"
        "*** Update File: b.py\n@@\n-b = 1\n+b = 2\n"
        "*** End Patch\n"
    )
    editor = editor_tool(workspace_root=workspace, check=Recorder(refuse={"b.py"}))
    result = await editor(action="apply_patch", patch=patch)
    assert (result["success"], result["error"]) == (False, "Refused by policy: b.py. Ask the user.")
    assert (workspace / "a.py").read_text() == "a = 1\n"
    assert (workspace / "b.py").read_text() == "b = 1\n"
    assert not (workspace / "c.py").exists()


def test_check_must_be_callable(workspace: Path):
    with pytest.raises(TypeError, match="check must be callable"):
        editor_tool(workspace_root=workspace, check="no")  # type: ignore[arg-type]

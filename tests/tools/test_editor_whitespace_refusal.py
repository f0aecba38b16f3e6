"""A loose match refused because the edit would not parse shows the file's line and what differs."""

from __future__ import annotations

from pathlib import Path

import pytest

from lionfactory import Branch
from lionfactory.coding import coding_toolkit

SOURCE = "def f(x):\n\tif x:\n\t\treturn 1\n\treturn 2\n"


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        ("    if x:\n        return 1", "    if x:\n    return 1", 2),
        ("\t\treturn 1\n    return 2", "\t\treturn 1\n  return 3", 4),
    ],
)
async def test_the_refusal_shows_the_line_and_tab_against_spaces(
    tmp_path: Path, old: str, new: str, line: int
) -> None:
    (tmp_path / "m.py").write_text(SOURCE, encoding="utf-8")
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=tmp_path, tools=["reader", "editor"])
    await branch.act("reader", {"action": "read", "path": "m.py"})
    edit = {"action": "edit", "file_path": "m.py", "old_string": old, "new_string": new}
    action = await branch.act("editor", edit)
    assert action.outcome == "failed", action.payload
    error = action.result["error"] if action.result else ""
    assert "tabs against spaces" in error
    assert f"Line {line} of the file is '→" in error
    assert "the file indents it with 1 tab, old_string with 4 spaces" in error
    assert (tmp_path / "m.py").read_text(encoding="utf-8") == SOURCE

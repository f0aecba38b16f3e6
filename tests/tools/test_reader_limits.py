"""Reader windows: a negative or zero limit is refused, never read as "the whole file"."""

from __future__ import annotations

from pathlib import Path

import pytest

from lionfactory import Branch
from lionfactory.tools import reader_tool


@pytest.mark.parametrize(("field", "value"), [("limit", -5), ("limit", 0)])
async def test_a_bad_window_is_a_validation_error_naming_the_field(
    tmp_path: Path, field: str, value: int
) -> None:
    (tmp_path / "x.txt").write_text("".join(f"line {i}\n" for i in range(50)), encoding="utf-8")
    branch = Branch()
    branch.register(reader_tool, workspace_root=str(tmp_path))
    action = await branch.act("reader", {"action": "read", "path": "x.txt", field: value})
    assert action.error_type == "ToolInputError", action
    assert field in str(action.error)
    assert "line 49" not in str(action.result)

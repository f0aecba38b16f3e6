"""Arguments handed over as JSON text (as some frameworks pass them) are parsed for every route."""

from __future__ import annotations

from pathlib import Path

import pytest

from lionfactory import Branch
from lionfactory.errors import ToolInputError
from lionfactory.integrations._calls import tool_source
from lionfactory.tools import reader_tool


@pytest.fixture
def branch(tmp_path: Path) -> Branch:
    (tmp_path / "x.txt").write_text("hello\n", encoding="utf-8")
    made = Branch()
    made.register(reader_tool, workspace_root=str(tmp_path))
    return made


async def test_a_json_object_string_is_the_arguments(branch: Branch) -> None:
    action = await branch.act("reader", '{"action": "read", "path": "x.txt"}')
    assert action.error is None, action.error
    assert "hello" in str(action.result)
    (call,) = branch.messages[-2].tool_calls
    assert call.arguments == {"action": "read", "path": "x.txt"}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('["read", "x.txt"]', "must be a JSON object"),
        ("action=read", "not JSON"),
        ('"x.txt"', "must be a JSON object"),
    ],
)
async def test_a_string_that_is_not_a_json_object_is_a_clear_input_error(
    branch: Branch, text: str, said: str
) -> None:
    logged = len(branch.messages)
    with pytest.raises(ToolInputError, match=said):
        await branch.act("reader", text)
    assert len(branch.messages) == logged  # nothing logged for a call that never was


async def test_an_adapters_fixed_list_parses_the_string_too(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("hello\n", encoding="utf-8")
    source = tool_source(reader_tool(workspace_root=str(tmp_path)))
    action = await source.call("reader", '{"action": "read", "path": "x.txt"}')
    assert action.error is None and "hello" in str(action.result)
    with pytest.raises(ToolInputError, match="JSON object"):
        await source.call("reader", "[1]")

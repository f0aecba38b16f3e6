"""``code_nav`` on ty and the editor's diagnostics, served over MCP (the official SDK client)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from lionfactory.tools._code_intel import ty_command

pytestmark = pytest.mark.skipif(ty_command() is None, reason="ty is not installed")


async def test_cross_file_definition_and_edit_diagnostics_over_stdio(
    git_workspace: Path, stdio_server: Callable[..., StdioServerParameters]
) -> None:
    (git_workspace / "util.py").write_text("def helper(x: int) -> int:\n    return x\n")
    (git_workspace / "app.py").write_text("from util import helper\n\nhelper(1)\n")
    async with Client(stdio_server()) as client:
        found = await client.call_tool(
            "code_nav", {"action": "find_definition", "path": "app.py", "symbol": "helper"}
        )
        read = await client.call_tool("reader", {"action": "read", "path": "app.py"})
        edit = await client.call_tool(
            "editor",
            {
                "action": "edit",
                "file_path": "app.py",
                "old_string": "helper(1)",
                "new_string": "helper('one')",
            },
        )
    assert not found.is_error
    assert found.structured_content["engine"] == "ty"
    assert found.structured_content["rows"] == ["util.py:1: def helper(x: int) -> int:"]
    assert not read.is_error
    assert not edit.is_error
    introduced = edit.structured_content["diagnostics"]["introduced"]
    assert [(d["line"], d["code"]) for d in introduced] == [(3, "invalid-argument-type")]

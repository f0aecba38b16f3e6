"""Model input quoted back in an error is cut: a 10 MB name never returns whole.

Every answer below is the tool message a branch logs for a call whose tool
name, path, URL, recipient or argument is ten million characters long. The
message must name the problem in a few kilobytes at most, never repeat the
input whole (which would cost the model that much context again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lionfactory import Branch, Exchange
from lionfactory.tools import (
    bash_tool,
    code_nav_tool,
    editor_tool,
    messenger_tool,
    reader_tool,
)

HUGE = "a" * 10_000_000
LIMIT = 5_000


def branch_with(workspace: Path) -> Branch:
    branch = Branch()
    branch.register(reader_tool(workspace_root=workspace, allowed_hosts=["docs.example.com"]))
    branch.register(editor_tool(workspace_root=workspace))
    branch.register(bash_tool(workspace_root=workspace))
    branch.register(code_nav_tool(workspace_root=workspace))
    branch.register(messenger_tool, exchange=Exchange(), roster={}, sender_name="me")
    return branch


CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "unknown tool name": (HUGE, {}),
    "reader path": ("reader", {"action": "read", "path": HUGE}),
    "reader url": ("reader", {"action": "open", "path": "https://docs.example.com/" + HUGE}),
    "editor path": ("editor", {"action": "write", "path": HUGE, "content": "x"}),
    "bash cwd": ("bash", {"command": "true", "cwd": HUGE}),
    "bash command": ("bash", {"command": "echo " + HUGE}),
    "code_nav path": ("code_nav", {"action": "outline", "path": HUGE}),
    "messenger recipient": ("messenger", {"action": "send", "to": HUGE, "content": "hi"}),
    "wrong type": ("bash", {"command": "true", "timeout": HUGE}),
    "unknown argument": ("bash", {"command": "true", HUGE: 1}),
}


@pytest.mark.parametrize("name", CALLS, ids=list(CALLS))
async def test_an_error_quoting_model_input_stays_short(tmp_path: Path, name: str) -> None:
    tool, arguments = CALLS[name]
    branch = branch_with(tmp_path)

    result = await branch.act(tool, arguments)

    content = branch.messages.active[-1].content
    assert result.error is not None or '"success": false' in content or '"error": "' in content
    assert len(content) < LIMIT, content[:300]

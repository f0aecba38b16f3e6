"""What every framework adapter is tested with: one editing task, every built-in's arguments.

The task: read ``notes.txt`` with ``reader``, then edit it with the coding
toolkit's guarded ``editor``, first with an invalid argument (the framework
must hand lionfactory's error back so the model corrects the call), then
correctly. Each framework's test drives its own agent loop with its own
offline test model through `STEPS` and checks the outcome with `check_task`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from lionfactory import Branch, Exchange, Tool
from lionfactory.coding import ALL_CODING_TOOLS, coding_toolkit
from lionfactory.testing import ScriptedModel
from lionfactory.tools import messenger_tool

READ = ("reader", {"action": "read", "path": "notes.txt"})
BAD_EDIT = (
    "editor",
    {
        "action": "edit",
        "file_path": "notes.txt",
        "old_string": "hello",
        "new_string": "goodbye",
        "colour": "blue",
    },
)
EDIT = (
    "editor",
    {"action": "edit", "file_path": "notes.txt", "old_string": "hello", "new_string": "goodbye"},
)
STEPS = (READ, BAD_EDIT, EDIT)
FINAL = "Changed hello to goodbye."
BAD_EDIT_ERROR = "colour: Extra inputs are not permitted"


@attrs.define
class Task:
    workspace: Path
    branch: Branch


def make_task(tmp_path: Path) -> Task:
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello world\n")
    branch = Branch("You edit files.")
    branch.register(coding_toolkit, workspace_root=workspace, tools=["reader", "editor"])
    return Task(workspace, branch)


def recorded_calls(branch: Branch) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(tool, arguments, what the tool message says) for every call on the branch."""
    calls = {}
    for message in branch.messages.active:
        for call in message.tool_calls:
            calls[call.id] = (call.name, call.arguments)
    return [
        (*calls[m.call_id], json.loads(m.content))
        for m in branch.messages.active
        if m.role == "tool" and m.call_id in calls
    ]


def check_task(task: Task) -> None:
    """The edit landed and the branch recorded all three calls with their outcomes."""
    assert (task.workspace / "notes.txt").read_text() == "goodbye world\n"
    calls = recorded_calls(task.branch)
    assert [(name, args) for name, args, _ in calls] == list(STEPS)
    read, bad, good = (said for _, _, said in calls)
    assert read["success"] is True
    assert bad["error_type"] == "ToolInputError"
    assert BAD_EDIT_ERROR in bad["error"]
    assert good["success"] is True


# -- every built-in, for schema fidelity --------------------------------------------------

EXAMPLES: dict[str, list[dict[str, Any]]] = {
    "reader": [
        {"action": "read", "path": "notes.txt", "offset": 0, "limit": 10},
        {"action": "list_dir", "path": ".", "recursive": True, "file_types": ["py", "md"]},
        {"action": "open", "path": "doc.pdf", "offset": None},
    ],
    "editor": [
        {"action": "write", "file_path": "a.txt", "content": "line\r\nünïcödé\n"},
        {
            "action": "edit",
            "file_path": "a.txt",
            "old_string": "a",
            "new_string": "",
            "replace_all": True,
        },
    ],
    "bash": [{"command": "ls -la | head -n 3", "timeout": 5, "cwd": "src"}, {"command": "pwd"}],
    "search": [
        {
            "action": "grep",
            "pattern": "def \\w+\\(",
            "path": ".",
            "include": "*.py",
            "max_results": 5,
        },
        {"action": "find", "pattern": "*.md"},
    ],
    "jobs": [
        {"action": "list"},
        {"action": "wait", "job_id": "j1", "until": "ready", "timeout": 5},
    ],
    "code_check": [{}, {"paths": ["a.py", "b"], "max_diagnostics": 3}],
    "code_nav": [{"action": "find_definition", "path": "a.py", "symbol": "main"}],
    "ast_search": [{"pattern": "print($X)", "path": ".", "lang": "python", "max_results": 2}],
    "context": [{"action": "evict", "start": 2, "end": 4}, {"action": "status"}],
    "sandbox": [{"action": "commit", "message": "wip"}, {"action": "diff"}],
    "checkpoint": [
        {"action": "list"},
        {"action": "diff", "from_id": "c1", "to_id": "current", "offset": 4},
        {"action": "rewind", "to": "c1", "scope": "code", "dry_run": False},
    ],
    "subagent": [{"instruction": "list files", "permissions": "read_only", "max_turns": 3}],
    "messenger": [
        {"action": "send", "to": ["peer"], "content": "hi"},
        {"action": "receive", "timeout": 0.5, "sender": "peer"},
    ],
}


def every_builtin(tmp_path: Path) -> Branch:
    """A branch holding every built-in (the toolkit's versions of the workspace tools)."""
    workspace = tmp_path / "all"
    workspace.mkdir()
    branch = Branch("sys", chat_model=ScriptedModel([]))
    branch.register(coding_toolkit, workspace_root=workspace, tools=list(ALL_CODING_TOOLS))
    exchange, peer = Exchange(), Branch()
    exchange.register(peer.id)
    branch.register(messenger_tool, exchange=exchange, roster={"peer": peer.id}, sender_name="me")
    assert set(branch.tools) == set(EXAMPLES)
    return branch


@attrs.define
class Recorder:
    """Stands in for a tool's handler: keeps the validated request it was given."""

    requests: list[Any] = attrs.field(factory=list)

    async def __call__(self, request: Any) -> dict[str, Any]:
        self.requests.append(request)
        return {"success": True}


def recording_copy(tool: Tool) -> tuple[Tool, Recorder]:
    """The same name, description and request model, with a handler that records the request."""
    recorder = Recorder()
    copy = attrs.evolve(tool, handler=recorder, pre=(), post=(), on_error=(), bound_to=None)
    return copy, recorder

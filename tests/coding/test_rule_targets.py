"""Path rules judge the paths a tool resolves (its stated targets), never the text as typed.

Every spelling of a path that the workspace resolves to ``src/a.py``, every
file of a patch and both ends of a move meet the rules, through the toolkit
(`Branch.act`), a standalone tool with a `RuleHook`, and the MCP server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lionfactory import Branch
from lionfactory.coding import Rule, coding_toolkit
from lionfactory.coding.rules import RuleHook
from lionfactory.tools import editor_tool, reader_tool

ORIGINAL = "a = 1\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text(ORIGINAL)
    (root / "poetry.lock").write_text("lock\n")
    (root / "docs.txt").write_text("docs\n")
    return root


def spellings(root: Path) -> list[str]:
    return [
        f"../{root.name}/src/a.py",
        f"{root}//src/a.py",
        f"{root}/../{root.name}/src/a.py",
        "./src/../src/a.py",
        "src//a.py",
    ]


SRC_DENIED = [
    Rule("reader", "src/*", "deny", reason="src is off limits"),
    Rule("editor", "src/*", "deny", reason="src is off limits"),
]


def toolkit(root: Path, rules: list[Rule]) -> Branch:
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=root, tools=["reader", "editor"], rules=rules)
    return branch


async def test_every_spelling_of_a_denied_path_is_denied_for_reader_and_editor(
    project: Path,
) -> None:
    branch = toolkit(project, SRC_DENIED)
    for path in spellings(project):
        read = await branch.act("reader", {"action": "read", "path": path})
        assert read.error_type == "ToolDenied", (path, read.payload)
        write = await branch.act(
            "editor", {"action": "write", "file_path": path, "content": "x = 2\n"}
        )
        assert write.error_type == "ToolDenied", (path, write.payload)
        assert "src is off limits" in str(write.error)
    assert (project / "src" / "a.py").read_text() == ORIGINAL
    # A path outside the rule's glob still reads.
    assert (await branch.act("reader", {"action": "read", "path": "docs.txt"})).outcome == "done"


async def test_a_standalone_tool_with_a_rule_hook_judges_its_resolved_paths(
    project: Path,
) -> None:
    hook = RuleHook(tuple(SRC_DENIED))
    reader = reader_tool(workspace_root=project).with_hooks(pre=[hook])
    editor = editor_tool(workspace_root=project).with_hooks(pre=[hook])
    branch = Branch()
    branch.register(reader)
    branch.register(editor)
    for path in spellings(project):
        read = await branch.act("reader", {"action": "read", "path": path})
        write = await branch.act("editor", {"action": "write", "file_path": path, "content": "x"})
        assert read.error_type == write.error_type == "ToolDenied", path
    assert (project / "src" / "a.py").read_text() == ORIGINAL


def patch(*body: str) -> dict[str, str]:
    text = "\n".join(["*** Begin Patch", *body, "*** End Patch"])
    return {"action": "apply_patch", "patch": text}


async def test_an_ask_rule_on_lock_files_holds_a_patch_that_touches_one(project: Path) -> None:
    branch = toolkit(project, [Rule("editor", "*.lock", "ask", reason="lock files")])
    await branch.act("reader", {"action": "read", "path": "poetry.lock"})
    held = await branch.act(
        "editor", patch("*** Update File: poetry.lock", "@@", "-lock", "+changed")
    )
    assert held.outcome == "pending" and held.pending is not None
    assert held.pending.reason == "lock files"
    assert (project / "poetry.lock").read_text() == "lock\n"


async def test_a_patch_adding_a_file_under_a_denied_glob_is_denied(project: Path) -> None:
    branch = toolkit(project, SRC_DENIED)
    added = await branch.act(
        "editor", patch("*** Add File: docs2.txt", "+ok", "*** Add File: src/new.py", "+x = 1")
    )
    assert added.error_type == "ToolDenied"
    assert not (project / "docs2.txt").exists() and not (project / "src" / "new.py").exists()


async def test_a_move_into_a_denied_directory_is_denied(project: Path) -> None:
    branch = toolkit(project, [Rule("editor", "src/*", "deny", reason="src is off limits")])
    await branch.act("reader", {"action": "read", "path": "docs.txt"})
    moved = await branch.act(
        "editor", patch("*** Update File: docs.txt", "*** Move to: src/x", "@@", "-docs", "+d")
    )
    assert moved.error_type == "ToolDenied", moved.payload
    assert (project / "docs.txt").exists() and not (project / "src" / "x").exists()
    # The source end of a move counts too.
    await branch.act("reader", {"action": "read", "path": "src/a.py"})
    out = await branch.act(
        "editor", patch("*** Update File: src/a.py", "*** Move to: b.py", "@@", "-a = 1", "+a = 2")
    )
    assert out.error_type == "ToolDenied" and (project / "src" / "a.py").read_text() == ORIGINAL


async def test_a_rule_without_a_workspace_tool_still_folds_from_the_root(project: Path) -> None:
    """A hook called outside a tool's pipeline reads the argument, folded as the root would."""
    rule = Rule("editor", "src/*", "deny")
    for path in spellings(project):
        assert rule.matches("editor", {"file_path": path}, project), path


async def test_the_mcp_server_applies_path_rules_to_resolved_paths(project: Path) -> None:
    from mcp import Client

    from lionfactory.mcp import create_mcp_server

    server = create_mcp_server(
        [
            (
                coding_toolkit,
                {
                    "workspace_root": project,
                    "tools": ["reader", "editor"],
                    "rules": [*SRC_DENIED, Rule("editor", "*.lock", "deny", reason="lock")],
                },
            )
        ]
    )
    async with Client(server) as client:
        read = await client.call_tool("reader", {"action": "read", "path": spellings(project)[0]})
        write = await client.call_tool(
            "editor",
            {"action": "write", "file_path": spellings(project)[1], "content": "x = 2\n"},
        )
        locked = await client.call_tool(
            "editor", patch("*** Update File: poetry.lock", "@@", "-lock", "+changed")
        )
        fine = await client.call_tool("reader", {"action": "read", "path": "docs.txt"})
    assert read.is_error and write.is_error and locked.is_error
    assert not fine.is_error
    assert (project / "src" / "a.py").read_text() == ORIGINAL
    assert (project / "poetry.lock").read_text() == "lock\n"


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("code_nav", lambda path: {"action": "outline", "path": path}),
        ("code_check", lambda path: {"paths": ["docs.txt", path]}),
        ("search", lambda path: {"action": "grep", "pattern": "a", "path": path}),
        ("ast_search", lambda path: {"pattern": "a", "path": path}),
    ],
)
async def test_the_other_file_tools_state_their_resolved_paths_too(
    project: Path, tool: str, arguments: Any
) -> None:
    branch = Branch()
    branch.register(
        coding_toolkit,
        workspace_root=project,
        tools=[tool],
        rules=[Rule(tool, "src/*", "deny", reason="src is off limits")],
    )
    (registered,) = [t for t in branch.tools.values() if t.name == tool]
    for path in spellings(project):
        assert registered.targets_of(arguments(path)) is not None
        assert "src/a.py" in (registered.targets_of(arguments(path)) or ()), path
        result = await branch.act(tool, arguments(path))
        assert result.error_type == "ToolDenied", (tool, path, result.payload)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with ``src/a.py`` committed; no user git configuration, no /tmp litter."""
    import subprocess
    import tempfile

    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text(ORIGINAL)
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "config", "user.name", "t"],
        ["git", "config", "user.email", "t@example.com"],
        ["git", "add", "-A"],
        ["git", "commit", "-qm", "init"],
    ):
        subprocess.run(argv, cwd=root, check=True, capture_output=True, timeout=60)
    return root


async def test_in_a_sandbox_the_rules_judge_paths_the_worktree_resolves(repo: Path) -> None:
    """The toolkit's tools ask the active root's tool: an absolute worktree path is ``src/a.py``."""
    root = repo
    branch = Branch()
    branch.register(
        coding_toolkit,
        workspace_root=root,
        tools=["reader", "editor", "sandbox"],
        rules=SRC_DENIED,
        isolation="none",
    )
    made = await branch.act("sandbox", {"action": "create"})
    assert made.result is not None and made.result["success"], made.payload
    worktree = Path(made.result["worktree"])
    for path in (f"{worktree}//src/a.py", f"../{worktree.name}/src/a.py", "src/../src/a.py"):
        write = await branch.act(
            "editor", {"action": "write", "file_path": path, "content": "x = 2\n"}
        )
        assert write.error_type == "ToolDenied", (path, write.payload)
    assert (worktree / "src" / "a.py").read_text() == ORIGINAL
    fine = await branch.act("editor", {"action": "write", "file_path": "b.py", "content": "b\n"})
    assert fine.result is not None and fine.result["success"], fine.payload
    assert (worktree / "b.py").exists() and not (root / "b.py").exists()

"""A scripted coding session, end to end, in a temporary git repository.

The model (a `ScriptedModel`, so this runs offline) fixes a bug the careful
way: it reads the code, tries to edit it, checks it with ruff, runs the tests
with bash, and does all of that inside a git sandbox that it merges only
once the tests pass. Run it with ``python examples/coding_session.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from lionfactory import Branch
from lionfactory.coding import coding_toolkit, deny_destructive_commands
from lionfactory.testing import ScriptedModel, tool_call

BUGGY = '''def mean(values):
    """The arithmetic mean of a non-empty list."""
    return sum(values) / (len(values) - 1)
'''

TESTS = """from stats import mean


def test_mean():
    assert mean([1, 2, 3]) == 2
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def make_repo(root: Path) -> None:
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Example")
    git(root, "config", "user.email", "example@example.invalid")
    (root / "stats.py").write_text(BUGGY)
    (root / "test_stats.py").write_text(TESTS)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "Add mean() with a bug")


SCRIPT = [
    tool_call("sandbox", action="create"),
    # An edit before any read is refused by the read-before-edit guard ...
    tool_call(
        "editor",
        action="edit",
        file_path="stats.py",
        old_string="(len(values) - 1)",
        new_string="len(values)",
    ),
    # ... so the model reads first, then edits.
    tool_call("reader", action="read", path="stats.py"),
    tool_call(
        "editor",
        action="edit",
        file_path="stats.py",
        old_string="(len(values) - 1)",
        new_string="len(values)",
    ),
    tool_call("code_check", paths=["stats.py"]),
    tool_call("bash", command=f"{sys.executable} -m pytest -q -p no:cacheprovider test_stats.py"),
    tool_call("sandbox", action="diff"),
    tool_call("sandbox", action="commit", message="Fix mean(): divide by len(values)"),
    tool_call("sandbox", action="merge"),
    "Fixed mean(): it divided by len(values) - 1. Tests pass; the fix is merged into main.",
]


def summarise(result: dict) -> str:
    if "success" in result:
        return "ok" if result["success"] else f"refused: {result.get('error', '')[:70]}"
    if "return_code" in result:
        return f"exit {result['return_code']}: {result['stdout'].strip().splitlines()[-1:]}"
    return str(result.get("status"))


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        make_repo(repo)
        branch = Branch("You are a careful software engineer.", chat_model=ScriptedModel(SCRIPT))
        branch.register(
            coding_toolkit,
            workspace_root=repo,
            tools=["reader", "editor", "bash", "code_check", "context", "sandbox"],
            hooks={"bash": {"pre": [deny_destructive_commands]}},
        )
        answer = await branch.run("mean([1, 2, 3]) should be 2. Fix it.")
        for message in branch.messages:
            if message.role == "tool":
                print(f"{message.tool:>10}: {summarise(json.loads(message.content))}")
        print("answer:", answer)
        print("main now has:", (repo / "stats.py").read_text().splitlines()[2].strip())
        print("log:", git(repo, "log", "--format=%s").splitlines())
        assert "len(values)\n" in (repo / "stats.py").read_text()


if __name__ == "__main__":
    trio.run(main)

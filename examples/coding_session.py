"""A scripted coding session, end to end, in a temporary git repository.

The model (a `FunctionModel`, so this runs offline) fixes a bug the careful
way: it reads the code, tries to edit it, checks it with ruff, runs the tests
with bash, and does all of that inside a git sandbox. What it does after the
tests depends on what they really did: it merges only when they pass, and
otherwise discards the sandbox and says why. Run it with
``python examples/coding_session.py``.

The tests run with ``python -m pytest`` through the toolkit's ``bash``, under
its default confinement (bwrap or Landlock where the machine has one): the
interpreter and its environment stay visible read-only even when they live
under a hidden home (a pyenv or a virtual environment), so the confined
command finds the pytest the same command finds outside. Install it with
``pip install pytest`` beside ``lionfactory[all]``; without it the session
reports what really happened (``No module named pytest``) and merges nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from lionfactory import Branch, Message
from lionfactory.coding import coding_toolkit, deny_destructive_commands
from lionfactory.testing import FunctionModel, tool_call

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


FIX = {
    "action": "edit",
    "file_path": "stats.py",
    "old_string": "(len(values) - 1)",
    "new_string": "len(values)",
}

STEPS = [
    tool_call("sandbox", action="create"),
    # An edit before any read is refused by the read-before-edit guard ...
    tool_call("editor", **FIX),
    # ... so the model reads first, then edits.
    tool_call("reader", action="read", path="stats.py"),
    tool_call("editor", **FIX),
    tool_call("code_check", paths=["stats.py"]),
    # The interpreter running this example; the sandbox shows it (and its
    # site-packages) read-only even under a hidden home.
    tool_call("bash", command=f"{sys.executable} -m pytest -q -p no:cacheprovider test_stats.py"),
]


def engineer(messages: list[Message], tools: object) -> object:
    """The model: the fixed steps, then a decision based on the real test run."""
    results = [json.loads(m.content) for m in messages if m.role == "tool"]
    if len(results) < len(STEPS):
        return STEPS[len(results)]
    tests = results[len(STEPS) - 1]
    passed = tests.get("return_code") == 0
    after = results[len(STEPS) :]
    plan = (
        [
            tool_call("sandbox", action="commit", message="Fix mean(): divide by len(values)"),
            tool_call("sandbox", action="merge"),
        ]
        if passed
        else [tool_call("sandbox", action="discard")]
    )
    if len(after) < len(plan):
        return plan[len(after)]
    if passed and after[-1]["success"]:
        return "Fixed mean(): it divided by len(values) - 1. The tests pass; merged into main."
    return f"Not merged: the tests exited with {tests.get('return_code')}. {last_lines(tests)}"


def last_lines(result: dict) -> str:
    """The last two lines a command printed (on stdout or stderr)."""
    lines = [line for line in (result["stdout"] + result["stderr"]).splitlines() if line.strip()]
    return " / ".join(lines[-2:])


def summarise(result: dict) -> str:
    if "return_code" in result:
        return f"exit {result['return_code']}: {last_lines(result)}"
    if "success" in result:
        return "ok" if result["success"] else f"refused: {(result.get('error') or '')[:70]}"
    return str(result.get("status"))


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        make_repo(repo)
        branch = Branch("You are a careful software engineer.", chat_model=FunctionModel(engineer))
        branch.register(
            coding_toolkit,
            workspace_root=repo,
            tools=["reader", "editor", "bash", "code_check", "context", "sandbox"],
            hooks={"bash": {"security": [deny_destructive_commands]}},
            # A sandbox merges into main, master or release* only with consent;
            # this throwaway repository is ours to merge into.
            allow_merge_into_protected=True,
        )
        answer = await branch.run("mean([1, 2, 3]) should be 2. Fix it.")
        for message in branch.messages:
            if message.role == "tool":
                print(f"{message.tool:>10}: {summarise(json.loads(message.content))}")
        print("answer:", answer)
        print("main now has:", (repo / "stats.py").read_text().splitlines()[2].strip())
        print("log:", git(repo, "log", "--format=%s").splitlines())


if __name__ == "__main__":
    trio.run(main)

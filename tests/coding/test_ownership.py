"""Closing a branch closes what it owns, children first: sub-agents, jobs, sandboxes, supervisors.

Real coding toolkits, real git, real confinement: three sub-agents each
create a sandbox and start a background job, and afterwards neither
``/proc`` nor the sandbox directory holds anything of theirs.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import eventually, mechanism_params, processes_tagged

from lionfactory import Branch
from lionfactory.coding import ALL_CODING_TOOLS, coding_toolkit
from lionfactory.coding.subagent import SubagentResponse
from lionfactory.testing import ScriptedModel, tool_call
from lionfactory.tools.jobs import REGISTRY

PY = shlex.quote(sys.executable)


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory sandboxes are made in, so the test can count them."""
    place = tmp_path / "scratch"
    place.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(place))
    return place


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "commit.gpgsign", "false"]):
        subprocess.run(["git", *args], cwd=root, check=True)
    (root / "app.py").write_text("print('hello')\n")
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "initial"], cwd=root, check=True)
    return root


def descendants() -> list[int]:
    """Live processes descended from this one (zombies excluded)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                data = stat.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        if fields[0] not in (b"Z", b"X"):
            parents[int(name)] = int(fields[1])
    mine = {os.getpid()}
    changed = True
    while changed:
        changed = False
        for pid, parent in parents.items():
            if parent in mine and pid not in mine:
                mine.add(pid)
                changed = True
    mine.discard(os.getpid())
    return sorted(mine)


def sandboxes(scratch: Path) -> list[str]:
    return sorted(p.name for p in scratch.iterdir() if p.name.startswith("lionfactory-sandbox-"))


def worktrees(repo: Path) -> list[str]:
    done = subprocess.run(
        ["git", "worktree", "list", "--porcelain"], cwd=repo, capture_output=True, text=True
    )
    return [line for line in done.stdout.splitlines() if line.startswith("worktree ")]


def show(repo: Path, what: str) -> str:
    return subprocess.run(
        ["git", "show", what], cwd=repo, capture_output=True, text=True, check=False
    ).stdout


def script_for(tags: list[str]) -> list[Any]:
    """Each sub-agent: create a sandbox, start a tagged background job, answer."""
    replies: list[Any] = []
    for tag in tags:
        sleeper = f"{PY} -c 'import time; time.sleep(600)' {tag}"
        replies += [
            tool_call("sandbox", action="create"),
            tool_call("bash", command=sleeper, background=True),
            "started",
        ]
    return replies


@pytest.mark.parametrize("mechanism", [pytest.param("none"), *mechanism_params()])
async def test_closing_a_parent_leaves_nothing_of_its_three_subagents(
    mechanism: str, repo: Path, scratch: Path
) -> None:
    tags = [f"lf-own-{uuid.uuid4().hex}" for _ in range(3)]
    model = ScriptedModel(script_for(tags))
    parent = Branch("You are the lead.", name="lead", chat_model=model)
    parent.register(
        coding_toolkit,
        workspace_root=repo,
        notify=False,
        isolation=mechanism,
        tools=list(ALL_CODING_TOOLS),
    )
    before = set(descendants())
    # Other tests' branches may still hold tables until they are collected:
    # only the tables made during this test count.
    tables_before = set(REGISTRY.tables)
    # The parent's own work: a job and its supervisor, closed with it.
    own = await parent.act("bash", {"command": f"sleep 600 # {tags[0]}-parent", "background": True})
    assert own.ok and own.result["job_id"], own
    for _ in tags:
        result = await parent.act(
            "subagent", {"instruction": "start the server", "permissions": "allow_all"}
        )
        assert result.ok, result.error
        response = SubagentResponse.model_validate(result.result)
        assert response.tool_errors == [], response
        assert response.tool_calls == 2
    # Each sub-agent's call is over: its job, supervisor and sandbox are gone already.
    for tag in tags:
        await eventually(lambda tag=tag: not processes_tagged(tag), 30)
    assert sandboxes(scratch) == []
    assert len(worktrees(repo)) == 1
    assert set(REGISTRY.tables) - tables_before <= {parent.id, None}
    await parent.aclose()
    await eventually(lambda: not processes_tagged(f"{tags[0]}-parent"), 30)
    await eventually(lambda: set(descendants()) <= before, 30)
    assert parent.id not in REGISTRY.tables
    assert sandboxes(scratch) == []


async def test_closing_a_branch_with_an_active_sandbox_keeps_its_commits(
    repo: Path, scratch: Path
) -> None:
    branch = Branch()
    branch.register(
        coding_toolkit,
        workspace_root=repo,
        notify=False,
        isolation="none",
        tools=["sandbox", "bash", "editor", "reader"],
    )
    created = await branch.act("sandbox", {"action": "create"})
    assert created.ok and created.result["success"], created
    name = created.result["branch"]
    worktree = Path(created.result["worktree"])
    (worktree / "new.txt").write_text("work\n")
    committed = await branch.act("sandbox", {"action": "commit", "message": "work"})
    assert committed.ok and committed.result["success"], committed
    await branch.aclose()
    assert not worktree.exists()
    assert sandboxes(scratch) == []
    assert len(worktrees(repo)) == 1
    assert show(repo, f"{name}:new.txt") == "work\n"


@pytest.mark.parametrize("mechanism", [pytest.param("none"), *mechanism_params()])
async def test_a_sessionless_call_leaves_no_job_supervisor_or_sandbox(
    mechanism: str, repo: Path, scratch: Path
) -> None:
    """Each sessionless MCP call runs on a branch of its own, closed when the call ends."""
    from lionfactory.mcp._stateless import StatelessCalls

    def new_branch() -> Branch:
        branch = Branch(name="mcp-call")
        branch.register(
            coding_toolkit,
            workspace_root=repo,
            notify=False,
            isolation=mechanism,
            tools=["bash", "sandbox"],
        )
        return branch

    calls = StatelessCalls(new_branch)
    before = set(descendants())
    tables_before = set(REGISTRY.tables)
    tag = f"lf-own-{uuid.uuid4().hex}"
    started = await calls.act(
        "bash", {"command": f"{PY} -c 'import time; time.sleep(600)' {tag}", "background": True}
    )
    assert started.ok and started.result["job_id"], started
    created = await calls.act("sandbox", {"action": "create"})
    assert created.ok and created.result["success"], created
    await eventually(lambda: not processes_tagged(tag), 30)
    await eventually(lambda: set(descendants()) <= before, 30)
    assert sandboxes(scratch) == []
    assert len(worktrees(repo)) == 1
    assert set(REGISTRY.tables) - tables_before <= {None}


@pytest.mark.parametrize("mechanism", [pytest.param("none"), *mechanism_params()])
async def test_a_branch_dropped_without_closing_leaves_no_job_when_collected(
    mechanism: str, repo: Path
) -> None:
    """An owner that drops a branch (an evicted server session) still leaves nothing running."""
    import gc

    branch = Branch()
    branch.register(
        coding_toolkit, workspace_root=repo, notify=False, isolation=mechanism, tools=["bash"]
    )
    tag = f"lf-own-{uuid.uuid4().hex}"
    started = await branch.act(
        "bash", {"command": f"{PY} -c 'import time; time.sleep(600)' {tag}", "background": True}
    )
    assert started.ok and started.result["job_id"], started
    await eventually(lambda: bool(processes_tagged(tag)), 30)
    key = branch.id
    del branch, started
    gc.collect()
    await eventually(lambda: not processes_tagged(tag), 30)
    assert key not in REGISTRY.tables

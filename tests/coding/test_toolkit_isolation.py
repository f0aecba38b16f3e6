"""The coding toolkit under kernel isolation: default, inheritance, work in the sandbox worktree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import mechanism_params

from lionfactory import Branch, Tool
from lionfactory._os.isolation import Isolation, mechanism_problem, workspace_isolation
from lionfactory.coding import coding_toolkit
from lionfactory.errors import ConfigurationError
from lionfactory.tools import EnvPolicy
from lionfactory.tools.bash import bash_tool

MECHANISMS = mechanism_params()
PY = sys.executable


pytestmark = pytest.mark.usefixtures("hermetic_git_identity")


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


def kit(repo: Path, isolation: str | Isolation, **kwargs: Any) -> dict[str, Tool]:
    tools = coding_toolkit(
        Branch(), workspace_root=repo, isolation=isolation, notify=False, **kwargs
    )
    return {tool.name: tool for tool in tools}


def _auto_choice() -> str:
    for name in ("bwrap", "landlock"):
        if mechanism_problem(name) is None:
            return name
    return "none"


async def test_the_toolkit_isolates_by_default_and_says_how(repo: Path) -> None:
    tools = {t.name: t for t in coding_toolkit(Branch(), workspace_root=repo, notify=False)}
    expected = _auto_choice()
    result = await tools["bash"](command="true")
    assert result["isolation"] == expected
    for name in ("bash", "search", "code_check", "ast_search"):
        assert f"isolation: {expected}" in tools[name].description


def test_the_standalone_bash_is_unconfined_by_default(repo: Path) -> None:
    tool = bash_tool(workspace_root=repo)
    assert tool.run_sync(command="true")["isolation"] == "none"
    assert "isolation:" not in tool.description


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_pytest_ruff_and_git_work_inside_the_workspace(repo: Path, mechanism: str) -> None:
    (repo / "test_app.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    (repo / "bad.py").write_text("import os\n")
    tools = kit(repo, mechanism)
    pytest_run = await tools["bash"](command=f"{PY} -m pytest -q -p no:cacheprovider test_app.py")
    assert pytest_run["return_code"] == 0, pytest_run
    assert "1 passed" in pytest_run["stdout"]
    checked = await tools["code_check"](paths=["bad.py"])
    assert checked["status"] == "diagnostics", checked
    status = await tools["bash"](command="git status --porcelain")
    assert status["return_code"] == 0, status
    assert "bad.py" in status["stdout"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_git_commit_works_in_the_sandbox_worktree_and_merges_back(
    repo: Path, mechanism: str
) -> None:
    tools = kit(
        repo, mechanism, tools=["bash", "editor", "sandbox"], allow_merge_into_protected=True
    )
    created = await tools["sandbox"](action="create")
    assert created["success"], created
    worktree = Path(created["worktree"])
    wrote = await tools["bash"](command="sh -c 'echo \"x = 1\" > new.py'")
    assert wrote["return_code"] == 0, wrote
    assert (worktree / "new.py").is_file()
    for command in ("git add new.py", "git commit -qm 'from bash'", "git status --porcelain"):
        done = await tools["bash"](command=command)
        assert done["return_code"] == 0, (command, done)
    # The main checkout's hooks stay out of reach from the sandbox.
    planted = await tools["bash"](command=f"touch {repo}/.git/hooks/pre-commit")
    assert planted["return_code"] != 0
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()
    merged = await tools["sandbox"](action="merge")
    assert merged["success"], merged
    assert (repo / "new.py").read_text() == "x = 1\n"


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_the_sandbox_commit_action_works_under_isolation(repo: Path, mechanism: str) -> None:
    tools = kit(repo, mechanism, tools=["bash", "sandbox"])
    assert (await tools["sandbox"](action="create"))["success"]
    await tools["bash"](command="sh -c 'echo y > other.py'")
    committed = await tools["sandbox"](action="commit", message="sandbox commit")
    assert committed["success"], committed
    assert committed["files"] == ["other.py"]
    discarded = await tools["sandbox"](action="discard")
    assert discarded["success"], discarded


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_child_toolkit_inherits_and_cannot_widen(repo: Path, mechanism: str) -> None:
    parent = kit(repo, mechanism, tools=["bash", "subagent"])
    inherited = parent["subagent"].handler.factory_kwargs["isolation"]  # type: ignore[attr-defined]
    assert isinstance(inherited, Isolation) and inherited.mechanism == mechanism
    (repo / "sub").mkdir()
    child = kit(repo / "sub", inherited, tools=["bash"])
    assert child["bash"].run_sync(command="true")["isolation"] == mechanism
    with pytest.raises(ConfigurationError, match="narrowed"):
        kit(repo.parent, inherited, tools=["bash"])


def test_an_unavailable_explicit_mechanism_fails_at_factory_time(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lionfactory._os import mechanisms as _mechanisms

    monkeypatch.setattr(_mechanisms, "bwrap_binary", lambda: "/nonexistent/bwrap")
    with pytest.raises(ConfigurationError, match="isolation='bwrap' cannot work here"):
        bash_tool(workspace_root=repo, isolation="bwrap")
    auto = bash_tool(workspace_root=repo, isolation="auto")
    assert "auto chose" in auto.description or "No isolation available" in auto.description


@pytest.mark.parametrize("mechanism", [*MECHANISMS, "none"])
async def test_the_sandboxs_git_runs_no_repository_hook_confined_or_not(
    repo: Path, tmp_path: Path, mechanism: str
) -> None:
    """Hooks are off for every git call of the sandbox; confinement is the second wall."""
    canary = tmp_path / "canary.txt"
    canary.write_text("original\n")
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\necho ran > hook-ran\necho hooked >> {canary}\nexit 0\n")
    hook.chmod(0o755)
    tools = kit(repo, mechanism, tools=["sandbox"])
    created = await tools["sandbox"](action="create")
    assert created["success"], created
    assert not (Path(created["worktree"]) / "hook-ran").exists()
    assert canary.read_text() == "original\n"
    assert (await tools["sandbox"](action="discard"))["success"]


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_a_venv_with_pip_installs_inside_the_workspace(repo: Path, mechanism: str) -> None:
    """``python -m venv`` runs ensurepip: an offline ``pip install`` into the workspace."""
    tools = kit(repo, mechanism, tools=["bash"])
    made = await tools["bash"](command=f"{PY} -m venv venv", timeout=240_000)
    assert made["return_code"] == 0, made
    pip = await tools["bash"](command="venv/bin/python -m pip --version")
    assert pip["return_code"] == 0, pip
    assert str(repo / "venv") in pip["stdout"]


@pytest.mark.parametrize("mechanism", ["none", *MECHANISMS])
def test_the_toolkit_keeps_api_keys_out_of_commands_by_default(
    repo: Path, mechanism: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-toolkit-secret-4d1")
    monkeypatch.setenv("LF_TEST_UNRELATED", "plain")
    bash = kit(repo, mechanism)["bash"]
    listing = bash.run_sync(command=f'{PY} -c "import os; print(sorted(os.environ))"')
    assert "OPENAI_API_KEY" not in listing["stdout"]
    assert "LF_TEST_UNRELATED" not in listing["stdout"]  # core only
    assert "'PATH'" in listing["stdout"] and "'HOME'" in listing["stdout"]
    failed = bash.run_sync(command=f"{PY} -c \"import os; os.environ['OPENAI_API_KEY']\"")
    assert "withheld OPENAI_API_KEY" in failed["notice"]
    assert "sk-toolkit-secret-4d1" not in str(failed)


def test_the_toolkit_takes_an_environment_policy(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-toolkit-secret-4d1")
    policy = EnvPolicy(
        inherit="core",
        include_only=["PATH", "OPENAI_API_KEY"],
        set={"OPENAI_API_KEY": "given-on-purpose"},
    )
    bash = kit(repo, "none", env_policy=policy)["bash"]
    listing = bash.run_sync(command=f'{PY} -c "import os; print(dict(os.environ))"')
    assert "given-on-purpose" in listing["stdout"]
    assert "'HOME'" not in listing["stdout"]


def test_an_inherited_isolation_keeps_its_environment_policy(repo: Path) -> None:
    # What a sub-agent's toolkit receives: the parent's resolved isolation,
    # whose policy the child's default must not replace.
    policy = EnvPolicy(inherit="none", set={"PATH": "/usr/bin:/bin", "ONLY": "1"})
    inherited = workspace_isolation("none", repo, env_policy=policy)
    bash = kit(repo, inherited)["bash"]
    listing = bash.run_sync(command=f'{PY} -c "import os; print(sorted(os.environ))"')
    assert (
        listing["stdout"].strip() == "['LC_CTYPE', 'ONLY', 'PATH']"
        or listing["stdout"].strip() == "['ONLY', 'PATH']"
    ), listing


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_the_toolkits_bash_runs_scripts_and_jobs_per_branch(
    repo: Path, mechanism: str
) -> None:
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=repo, isolation=mechanism)
    assert "jobs" in branch.tools
    piped = await branch.act("bash", {"command": "cat app.py | wc -l && echo ok"})
    assert piped.ok and piped.result is not None
    assert piped.result["stdout"].split() == ["1", "ok"]
    started = await branch.act(
        "bash",
        {
            "command": f"{PY} -c \"print('up', flush=True); import time; time.sleep(600)\"",
            "background": True,
        },
    )
    assert started.ok and started.result is not None
    job = started.result["job_id"]
    waited = await branch.act("jobs", {"action": "wait", "job_id": job, "until": "up"})
    assert waited.result is not None and waited.result["matched"] is True
    clone = branch.clone()
    listed = await clone.act("jobs", {"action": "list"})
    assert listed.result is not None and listed.result["jobs"] == []
    await clone.aclose()
    async with branch:
        pass
    after = await branch.act("jobs", {"action": "list"})
    assert after.result is not None and after.result["jobs"] == []


def test_the_toolkits_bash_waits_120_seconds_by_default(repo: Path) -> None:
    (bash,) = [t for t in coding_toolkit(Branch(), workspace_root=repo) if t.name == "bash"]
    assert "default 120,000" in bash.description
    assert "default 30,000" in bash_tool(workspace_root=repo).description

"""A repository whose configuration names programs: the sandbox's git runs none of them.

The agent can write ``.git/config`` and ``.gitattributes`` like any other file,
so every program git would start from configuration (fsmonitor, hooks,
filters, merge and diff drivers, pagers, credential helpers) is a way to run
code without the bash tool. Each hostile setting below would create a canary
file; the whole sandbox lifecycle runs and the canary never appears.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _test_helpers import git as shared_git

from lionfactory import Branch
from lionfactory.coding.sandbox import SandboxResponse, sandbox_tool


def git(repo: Path, *args: str) -> str:
    """The test's own git: with every hostile setting switched off by hand."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env |= {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    safe = ["core.hooksPath=/dev/null", "core.fsmonitor=false", "core.pager=cat"]
    safe += ["filter.evil.clean=", "filter.evil.smudge=", "filter.evil.process="]
    safe += ["filter.evil.required=false"]
    options = [item for setting in safe for item in ("-c", setting)]
    return shared_git(repo, *options, *args, env=env).strip()


pytestmark = pytest.mark.usefixtures("hermetic_git")


def hostile_settings(canary: Path) -> dict[str, str]:
    touch = f"touch {canary}/$(date +%s%N)"
    return {
        "core.fsmonitor": touch,
        "core.hooksPath": str(canary.parent / "hooks"),
        "core.pager": touch,
        "pager.diff": touch,
        "diff.external": touch,
        "credential.helper": f"!{touch}",
        "filter.evil.clean": touch,
        "filter.evil.smudge": touch,
        "filter.evil.process": touch,
        "filter.evil.required": "true",
        "merge.evil.driver": touch,
        "diff.evil.textconv": touch,
        "diff.evil.command": touch,
    }


@pytest.fixture
def hostile_repo(tmp_path: Path) -> tuple[Path, Path]:
    """A repository set up cleanly, then given a configuration that runs programs."""
    canary = tmp_path / "canary"
    canary.mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "-b", "main")
    git(repo, "config", "user.name", "Test User")
    git(repo, "config", "user.email", "test@example.com")
    (repo / "app.py").write_text("print('hello')\n")
    (repo / ".gitattributes").write_text("* filter=evil merge=evil diff=evil\n")
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "initial")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("pre-commit", "post-checkout", "post-merge", "pre-merge-commit", "commit-msg"):
        hook = hooks / name
        hook.write_text(f"#!/bin/sh\ntouch {canary}/{name}\n")
        hook.chmod(0o755)
        (repo / ".git" / "hooks" / name).write_text(hook.read_text())
        (repo / ".git" / "hooks" / name).chmod(0o755)
    for key, value in hostile_settings(canary).items():
        git(repo, "config", key, value)
    return repo, canary


async def call(tool: object, action: str, **arguments: object) -> SandboxResponse:
    return SandboxResponse.model_validate(await tool(action=action, **arguments))  # type: ignore[operator]


async def test_the_sandbox_lifecycle_runs_no_program_the_repository_configures(
    hostile_repo: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, canary = hostile_repo
    # Variables that inject configuration or programs from the environment too.
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", f"touch {canary}/env-config")
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", f"touch {canary}/env-diff")
    monkeypatch.setenv("GIT_PAGER", f"touch {canary}/env-pager")
    tool = sandbox_tool(Branch(), workspace_root=repo, allow_merge_into_protected=True)

    created = await call(tool, "create")
    assert created.success and created.worktree, created.error
    worktree = Path(created.worktree)
    (worktree / "app.py").write_text("print('changed')\n")
    (worktree / "new.py").write_text("NEW = 1\n")
    diff = await call(tool, "diff")
    assert diff.success, diff.error
    assert "changed" in diff.content
    committed = await call(tool, "commit", message="change")
    assert committed.success, committed.error
    (repo / "other.txt").write_text("base moved on\n")
    git(repo, "add", "other.txt")
    git(repo, "commit", "--quiet", "-m", "base")
    merged = await call(tool, "merge")
    assert merged.success, merged.error
    second = await call(tool, "create")
    assert second.success, second.error
    discarded = await call(tool, "discard")
    assert discarded.success, discarded.error

    assert sorted(p.name for p in canary.iterdir()) == []
    assert "print('changed')" in (repo / "app.py").read_text()


async def test_the_commit_author_still_comes_from_the_users_configuration(
    hostile_repo: tuple[Path, Path],
) -> None:
    repo, _ = hostile_repo
    tool = sandbox_tool(Branch(), workspace_root=repo, allow_merge_into_protected=True)
    created = await call(tool, "create")
    assert created.success and created.worktree, created.error
    worktree = Path(created.worktree)
    (worktree / "app.py").write_text("print('changed')\n")

    committed = await call(tool, "commit", message="change")

    assert committed.success, committed.error
    author = git(worktree, "log", "-1", "--format=%an <%ae>")
    assert author == "Test User <test@example.com>"


async def test_a_driver_whose_name_holds_an_equals_sign_is_blanked_too(tmp_path: Path) -> None:
    # git splits `-c key=value` at the first '=', so `-c filter.a=b.clean=`
    # would set `filter.a`; the blanking must reach the driver named `a=b`.
    from lionfactory.coding._git import Git

    canary = tmp_path / "canary"
    canary.mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "--quiet", "-b", "main")
    for kind in ("clean", "smudge", "process"):
        git(repo, "config", f"filter.a=b.{kind}", f"touch {canary}/{kind}")
    git(repo, "config", "filter.a=b.required", "true")
    git(repo, "config", "diff.c=d.textconv", f"touch {canary}/textconv")
    (repo / ".gitattributes").write_text("*.txt filter=a=b diff=c=d\n")
    (repo / "x.txt").write_text("content\n")

    added = await Git().run(["add", "-A"], cwd=repo)
    shown = await Git().run(["diff", "--cached"], cwd=repo)
    # Even with textconv asked for after the hardening's --no-textconv, the
    # blanked command runs nothing (git reports it cannot run "").
    await Git().run(["diff", "--cached", "--textconv"], cwd=repo)

    assert added.returncode == 0, added.stderr
    assert shown.returncode == 0, shown.stderr
    assert "+content" in shown.stdout
    assert list(canary.iterdir()) == []

"""git through bash inside a sandbox worktree: commits have an author, the base branch is named.

Run under bwrap and Landlock with a repository under ``/tmp`` (as CI has it),
where a private ``/tmp`` or a hidden home would otherwise hide the main
repository's refs and the user's identity from the confined git.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from _test_helpers import act, git, mechanism_params, sandbox_branch

from lionfactory import Branch
from lionfactory.coding._git import FALLBACK_IDENTITY


@pytest.fixture(autouse=True)
def no_identity(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A machine with no git identity anywhere (a fresh container); returns the global config."""
    for who in ("AUTHOR", "COMMITTER"):
        for what in ("NAME", "EMAIL"):
            monkeypatch.delenv(f"GIT_{who}_{what}", raising=False)
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("EMAIL", "")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return config


@pytest.fixture(params=mechanism_params())
def kit(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Branch, Path]:
    return sandbox_branch(tmp_path, request.param, {"app.txt": "hello\n"})


async def test_git_commit_in_the_worktree_uses_the_documented_default_author(
    kit: tuple[Branch, Path],
) -> None:
    branch, repo = kit
    created = await act(branch, "sandbox", action="create")
    assert created["success"], created["error"]

    committed = await act(branch, "bash", command="git commit --allow-empty -qm agent-commit")

    assert committed["return_code"] == 0, committed
    author = git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>", created["branch"]).strip()
    name, email = FALLBACK_IDENTITY
    assert author == f"{name} <{email}>|{name} <{email}>"
    assert FALLBACK_IDENTITY == ("lionfactory agent", "agent@localhost")


async def test_git_commit_in_the_worktree_uses_the_users_global_identity(
    kit: tuple[Branch, Path], no_identity: Path
) -> None:
    branch, repo = kit
    # The global configuration lives where the confined git cannot read it.
    no_identity.write_text("[user]\n\tname = Ada User\n\temail = ada@example.com\n")
    created = await act(branch, "sandbox", action="create")
    assert created["success"], created["error"]

    committed = await act(branch, "bash", command="git commit --allow-empty -qm agent-commit")

    assert committed["return_code"] == 0, committed
    author = git(repo, "log", "-1", "--format=%an <%ae>", created["branch"])
    assert author == "Ada User <ada@example.com>\n"


async def test_git_checkout_of_the_base_branch_says_it_is_checked_out_in_the_workspace(
    kit: tuple[Branch, Path],
) -> None:
    branch, _ = kit
    created = await act(branch, "sandbox", action="create")
    assert created["success"], created["error"]
    assert "git checkout main" in created["content"]

    checkout = await act(branch, "bash", command="git checkout main")

    assert checkout["return_code"] != 0
    assert "already checked out" in checkout["stderr"], checkout
    assert "pathspec" not in checkout["stderr"]

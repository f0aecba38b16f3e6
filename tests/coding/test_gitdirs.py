"""Where a worktree's git metadata lives: read from files, believed only in git's own layout."""

from __future__ import annotations

from pathlib import Path

import pytest
from _test_helpers import git

from lionfactory.coding._gitdirs import git_dirs, worktree_writable


@pytest.fixture
def worktree(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.name=a", "-c", "user.email=b", "commit", "-q", "--allow-empty", "-m", "i")
    tree = tmp_path / "tree"
    git(repo, "worktree", "add", "-q", "-b", "lionfactory/x", str(tree))
    return repo, tree


def test_a_linked_worktree_yields_its_admin_folder_and_common_dir(
    worktree: tuple[Path, Path],
) -> None:
    repo, tree = worktree
    found = git_dirs(tree)
    assert found is not None
    admin, common = found
    assert common == (repo / ".git").resolve()
    assert admin.parent == common / "worktrees"
    assert admin in worktree_writable(tree)


def test_a_rewritten_git_file_yields_nothing_to_make_writable(
    worktree: tuple[Path, Path], tmp_path: Path
) -> None:
    _, tree = worktree
    # A planted admin folder whose commondir names another repository.
    other = tmp_path / "other" / ".git"
    (other / "objects").mkdir(parents=True)
    fake = tree / "fake"
    fake.mkdir()
    (fake / "commondir").write_text(str(other))
    (tree / ".git").write_text(f"gitdir: {fake}\n")

    assert git_dirs(tree) is None
    assert worktree_writable(tree) == ()


def test_a_rewritten_commondir_yields_nothing_to_make_writable(
    worktree: tuple[Path, Path], tmp_path: Path
) -> None:
    _, tree = worktree
    found = git_dirs(tree)
    assert found is not None
    other = tmp_path / "other" / ".git"
    (other / "objects").mkdir(parents=True)
    (found[0] / "commondir").write_text(str(other))

    assert worktree_writable(tree) == ()

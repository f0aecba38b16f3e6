"""The isolations a toolkit derives from its own, each by name in `_os/isolation.py`.

Pure data: the policies are built directly (no mechanism has to exist here),
and what each derivation may write and read is checked field by field.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lionfactory._os.environment import EnvPolicy
from lionfactory._os.isolation import (
    Isolation,
    Policy,
    child_isolation,
    git_admin_isolation,
    server_isolation,
    within,
    workspace_isolation,
    worktree_isolation,
)
from lionfactory.errors import ConfigurationError


def confined(root: Path) -> Isolation:
    policy = Policy(writable=(root,), hidden=(root.parent / "home",), exposed=(root / "venv",))
    return Isolation("bwrap", policy, requested="bwrap", binary="/bin/true")


def test_within_is_the_folder_itself_or_below_it(tmp_path: Path) -> None:
    assert within(tmp_path, tmp_path) and within(tmp_path / "a" / "b", tmp_path)
    assert not within(tmp_path.parent, tmp_path)
    assert not within(Path(f"{tmp_path}-sibling"), tmp_path)


def test_worktree_isolation_writes_the_worktree_and_its_git_metadata_only(tmp_path: Path) -> None:
    home, tree = tmp_path / "repo", tmp_path / "tree"
    git, common = tmp_path / "repo/.git/worktrees/t", tmp_path / "repo/.git"
    moved = worktree_isolation(confined(home), tree, git_writable=(git,), readable=(common,))
    assert moved is not None
    assert moved.policy.writable == (tree,) and moved.policy.git_writable == (git,)
    assert moved.policy.exposed == (home / "venv", common)
    assert moved.mechanism == "bwrap" and moved.policy.network == "none"


def test_derivations_leave_none_and_unconfined_isolations_as_they_are(tmp_path: Path) -> None:
    unconfined = Isolation("none", Policy(writable=(tmp_path,)))
    assert worktree_isolation(None, tmp_path, git_writable=()) is None
    assert worktree_isolation(unconfined, tmp_path / "t", git_writable=()) is unconfined
    assert git_admin_isolation(unconfined, (tmp_path / "t",)) is unconfined
    assert server_isolation(unconfined, tmp_path, Path("/usr/bin/ty")) is unconfined


def test_git_admin_isolation_writes_exactly_its_roots_with_git_unprotected(tmp_path: Path) -> None:
    roots = (tmp_path / "repo", tmp_path / "scratch")
    admin = git_admin_isolation(confined(tmp_path / "repo"), roots)
    assert admin is not None
    assert admin.policy.writable == roots and admin.policy.git_writable == ()
    assert admin.policy.protect_git is False


def test_server_isolation_writes_nothing_and_reads_the_workspace_and_its_program(
    tmp_path: Path,
) -> None:
    base = Isolation("bwrap", Policy(writable=(tmp_path,), network="full"), binary="/bin/true")
    server = server_isolation(base, tmp_path, Path("/opt/ty/bin/ty"))
    assert server.policy.writable == () and server.policy.network == "none"
    assert server.policy.private_tmp is True
    assert server.policy.exposed == (tmp_path, Path("/opt/ty/bin"))


def test_child_isolation_narrows_to_the_child_workspace_and_never_widens(tmp_path: Path) -> None:
    parent = confined(tmp_path)
    child = child_isolation(parent, tmp_path / "sub")
    assert child.policy.writable == (tmp_path / "sub",)
    assert child.policy.hidden == parent.policy.hidden
    with pytest.raises(ConfigurationError, match="can only be narrowed"):
        child_isolation(parent, tmp_path.parent)


def test_an_env_policy_given_with_an_inherited_isolation_replaces_its_own(tmp_path: Path) -> None:
    parent = confined(tmp_path)
    core = EnvPolicy(inherit="core")
    assert workspace_isolation(parent, tmp_path) is parent
    assert workspace_isolation(parent, tmp_path, env_policy=core).env_policy == core
    with pytest.raises(TypeError, match="env_policy must be an EnvPolicy"):
        workspace_isolation(parent, tmp_path, env_policy="core")  # type: ignore[arg-type]

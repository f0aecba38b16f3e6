"""Which directory a toolkit's tools work in right now: the workspace, or a sandbox.

One `ActiveWorkspace` is made per `coding_toolkit()` call and shared by every
tool that call builds. The sandbox moves it (``create`` to the worktree,
``merge``/``discard`` back home), and each tool reads it when it is *called*,
never when it is built, so a tool cannot be left behind in the old place: the
file tools, the guard and the sub-agent (whose child branch gets the current
directory as its workspace root) all see the same answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import attrs

from lionfactory._os.isolation import Isolation, worktree_isolation
from lionfactory._os.workspace import Workspace
from lionfactory.coding._git import Git
from lionfactory.coding._gitdirs import git_dirs, worktree_writable

__all__ = ["ActiveWorkspace"]


@attrs.define(eq=False)
class ActiveWorkspace:
    """The workspace the tools of one toolkit use now.

    Attributes:
        home: the workspace the toolkit was built for.
        current: `home`, or the sandbox worktree's counterpart of it while a
            sandbox is active. It keeps `home`'s protected names.
        home_isolation: the toolkit's process confinement at home, or None
            when the toolkit confines nothing.
        isolation: the confinement for `current`: at home `home_isolation`;
            in a sandbox the same mechanism writing the worktree (and the git
            metadata a commit there writes) instead of the workspace. A
            sub-agent inherits this one, so it can narrow it but never reach
            back to the home checkout.
        git_env: in a sandbox, the committer identity (``GIT_AUTHOR_*``,
            ``GIT_COMMITTER_*``) its ``bash`` gets, so ``git commit`` works
            there on a machine with no identity configured; empty at home.
    """

    home: Workspace
    current: Workspace = attrs.field()
    home_isolation: Isolation | None = None
    isolation: Isolation | None = attrs.field()
    git_env: dict[str, str] = attrs.field(factory=dict)

    @current.default
    def _start_home(self) -> Workspace:
        return self.home

    @isolation.default
    def _start_isolation(self) -> Isolation | None:
        return self.home_isolation

    @property
    def in_sandbox(self) -> bool:
        """Whether the tools work in a sandbox worktree rather than at home."""
        return self.current is not self.home

    def switch(self, root: Path | None) -> None:
        """Move to a sandbox directory, or home with None."""
        if root is None:
            self.current, self.isolation, self.git_env = self.home, self.home_isolation, {}
            return
        self.current = Workspace.at(root, protected=self.home.protected)
        self.isolation = _in_worktree(self.home_isolation, self.current.root)

    def resume(self, root: Path, identity: Mapping[str, str]) -> None:
        """The sandbox's ``on_restore``: back into a worktree re-attached on load."""
        self.switch(root)
        self.git_env = dict(identity)

    async def enter(self, root: Path | None) -> None:
        """The sandbox's ``on_switch``: `switch`, then learn the sandbox's committer identity."""
        self.switch(root)
        if root is not None:
            self.git_env = await Git().identity_env(self.home.root)


def _in_worktree(isolation: Isolation | None, root: Path) -> Isolation | None:
    """`isolation` writing the sandbox worktree `root` instead of the workspace."""
    if isolation is None or not isolation.confined:
        return isolation  # nothing to shift: the git directories need no lookup
    found = git_dirs(root)
    common = () if found is None or found[0] == found[1] else (found[1],)
    return worktree_isolation(
        isolation, root, git_writable=worktree_writable(root), readable=common
    )

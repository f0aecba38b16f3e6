"""Which directory a toolkit's tools work in right now: the workspace, or a sandbox.

One `ActiveWorkspace` is made per `coding_toolkit()` call and shared by every
tool that call builds. The sandbox moves it (``create`` to the worktree,
``merge``/``discard`` back home), and each tool reads it when it is *called*,
never when it is built, so a tool cannot be left behind in the old place: the
file tools, the guard and the sub-agent (whose child branch gets the current
directory as its workspace root) all see the same answer.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from lionfactory._workspace import Workspace

__all__ = ["ActiveWorkspace"]


@attrs.define(eq=False)
class ActiveWorkspace:
    """The workspace the tools of one toolkit use now.

    Attributes:
        home: the workspace the toolkit was built for.
        current: `home`, or the sandbox worktree's counterpart of it while a
            sandbox is active. It keeps `home`'s protected names.
    """

    home: Workspace
    current: Workspace = attrs.field()

    @current.default
    def _start_home(self) -> Workspace:
        return self.home

    @property
    def in_sandbox(self) -> bool:
        """Whether the tools work in a sandbox worktree rather than at home."""
        return self.current is not self.home

    def switch(self, root: Path | None) -> None:
        """Move to a sandbox directory, or home with None (the sandbox's ``on_switch``)."""
        self.current = (
            self.home if root is None else Workspace.at(root, protected=self.home.protected)
        )

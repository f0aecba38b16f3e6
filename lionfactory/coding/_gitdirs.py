"""Where a checkout's git metadata lives, read from files (no git process).

A confined process that runs git in a sandbox worktree needs a few folders of
the main repository's ``.git`` writable (the worktree's own admin folder, the
object store, the sandbox branch's refs), and nothing else of it. This module
finds them by reading the ``.git`` file of a linked worktree (``gitdir: ...``)
and its ``commondir`` file, so the answer is available synchronously when the
toolkit switches into a sandbox: right after the sandbox created the
worktree, before any command ran in it. The layout is verified (the admin
folder sits in ``<common>/worktrees/`` and its ``gitdir`` file points back),
so a file laid out any other way yields nothing to make writable.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

__all__ = ["git_dirs", "worktree_writable"]


def _top(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def git_dirs(start: Path) -> tuple[Path, Path] | None:
    """``(git dir, common dir)`` of the checkout containing `start`, or None outside one."""
    top = _top(start)
    if top is None:
        return None
    dot_git = top / ".git"
    if dot_git.is_dir():
        return dot_git, dot_git
    try:
        line = dot_git.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not line.startswith("gitdir:"):
        return None
    gitdir = (top / line.removeprefix("gitdir:").strip()).resolve()
    common = gitdir
    with contextlib.suppress(OSError, UnicodeDecodeError):
        common = (gitdir / (gitdir / "commondir").read_text(encoding="utf-8").strip()).resolve()
    if common != gitdir and not _is_admin_of(gitdir, common, dot_git):
        # Not how git lays out a linked worktree: a planted file, not an answer.
        return None
    return gitdir, common


def _is_admin_of(gitdir: Path, common: Path, dot_git: Path) -> bool:
    """Whether `gitdir` is `common`'s admin folder for the worktree whose ``.git`` is `dot_git`."""
    try:
        back = (gitdir / "gitdir").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return False
    return gitdir.parent == common / "worktrees" and Path(back).resolve() == dot_git.resolve()


def worktree_writable(worktree: Path, branch_namespace: str = "lionfactory") -> tuple[Path, ...]:
    """The git folders ``git add``/``commit`` in a linked worktree writes to.

    The worktree's admin folder (index, HEAD, its reflog), the shared object
    store, and the refs and reflogs of the sandbox branches' namespace. The
    main checkout's HEAD, index, config and hooks stay out of reach.
    """
    found = git_dirs(worktree)
    if found is None:
        return ()
    gitdir, common = found
    if gitdir == common:
        return ()
    candidates = (
        gitdir,
        common / "objects",
        common / "refs" / "heads" / branch_namespace,
        common / "logs" / "refs" / "heads" / branch_namespace,
    )
    return tuple(path for path in candidates if path.is_dir())

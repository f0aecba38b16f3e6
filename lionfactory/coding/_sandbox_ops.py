"""The git work behind the ``sandbox`` tool, one function per action.

Functions return a typed outcome, or a string that is the model-facing error
of an expected refusal; a git call that fails unexpectedly raises `GitError`,
which the handler reports the same way.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio.to_thread
import attrs

from lionfactory.coding._git import HOOK_TIMEOUT, Git, GitError

__all__ = [
    "MAX_DIFF_CHARS",
    "MERGED_ALREADY",
    "Diff",
    "MergeDone",
    "MergeRefused",
    "Plan",
    "Session",
    "cleanup",
    "commit",
    "diff",
    "merge",
    "plan",
]

MAX_DIFF_CHARS = 50_000
"""Characters of diff text in one answer; `files` still lists every path."""

MERGED_ALREADY = (
    "The sandbox was already merged; only its cleanup is left. Call action='discard' to finish it."
)


@attrs.define(eq=False)
class Session:
    """One active sandbox.

    Attributes:
        repo: the workspace repository's top level.
        prefix: the workspace directory relative to `repo` (``""`` or ``"sub/"``).
        scratch: the temporary directory holding the worktree and scratch files.
        root: the worktree (the sandbox's counterpart of `repo`).
        branch: the sandbox branch.
        base_branch: the branch the sandbox came from and merges into.
        base_commit: the commit it started from.
        merged: merged already; only cleanup is left.
    """

    repo: Path
    prefix: str
    scratch: Path
    root: Path
    branch: str
    base_branch: str
    base_commit: str
    merged: bool = False

    @property
    def workspace(self) -> Path:
        """The sandbox's counterpart of the workspace directory."""
        return self.root / self.prefix if self.prefix else self.root


@attrs.frozen
class Plan:
    """What ``create`` found out about the workspace repository."""

    repo: Path
    prefix: str
    base_branch: str
    base_commit: str
    notice: str | None


@attrs.frozen
class Diff:
    """The changes of a sandbox since its base commit."""

    text: str
    files: list[str]
    truncated: bool
    notice: str | None


@attrs.frozen
class MergeRefused:
    """Why ``merge`` did not merge (`files`: the conflicting paths, if any)."""

    error: str
    files: list[str] = attrs.Factory(list)


@attrs.frozen
class MergeDone:
    """A merge that happened: the base branch's new head and how it got there."""

    head: str
    how: str
    files: list[str]


# Paths as they are (UTF-8), not C-quoted octal escapes.
_QUIET_PATHS = ("-c", "core.quotePath=false")


def _paths(output: str) -> list[str]:
    return [path for path in output.split("\0") if path]


async def plan(git: Git, root: Path) -> Plan | str:
    """Check that a sandbox can start from the repository around `root`."""
    top = await git.run(["rev-parse", "--show-toplevel"], cwd=root)
    if top.returncode != 0 or not top.stdout.strip():
        return (
            f"The workspace {root} is not inside a git repository, and the sandbox is a git "
            f"worktree. Work without a sandbox, or ask the user to create a repository "
            f"(git init, then a first commit)."
        )
    repo = Path(top.stdout.strip())
    prefix = (await git.check(["rev-parse", "--show-prefix"], cwd=root, what="locate")).strip()
    base_branch = await git.current_branch(root)
    if base_branch is None:
        return (
            "The workspace has a detached HEAD (no branch checked out), so a sandbox would "
            "have nothing to merge into. Ask the user to check out a branch first."
        )
    head = await git.run(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], cwd=root)
    if head.returncode != 0:
        return (
            f"The branch {base_branch!r} has no commits yet; the sandbox starts from the last "
            f"commit. Commit once (or ask the user to), then create the sandbox."
        )
    dirty = await git.status(repo)
    notice = None
    if dirty:
        notice = (
            f"The workspace has {len(dirty)} uncommitted change(s); the sandbox starts from "
            f"the last commit and does not contain them."
        )
    return Plan(repo, prefix, base_branch, head.stdout.strip(), notice)


async def diff(git: Git, session: Session) -> Diff:
    """Everything the sandbox changed since its base commit, via a scratch index."""
    index = session.scratch / "diff-index"
    real = (
        await git.check(
            ["rev-parse", "--path-format=absolute", "--git-path", "index"],
            cwd=session.root,
            what="find the sandbox's index",
        )
    ).strip()

    def seed() -> bool:
        index.unlink(missing_ok=True)
        if Path(real).is_file():
            # A copy keeps the stat cache, so `add -A` hashes only what changed.
            shutil.copyfile(real, index)
            return True
        return False

    scratch = git.with_env(GIT_INDEX_FILE=str(index))
    try:
        if not await anyio.to_thread.run_sync(seed):
            await scratch.check(["read-tree", "HEAD"], cwd=session.root, what="prepare the diff")
        await scratch.check(["add", "-A"], cwd=session.root, what="collect the changes")
        names = await scratch.check(
            [*_QUIET_PATHS, "diff", "--cached", "--name-only", "-z", session.base_commit],
            cwd=session.root,
            what="list the changed files",
        )
        patch = await scratch.run(
            [*_QUIET_PATHS, "diff", "--cached", "--no-color", "--no-ext-diff", session.base_commit],
            cwd=session.root,
            max_bytes=MAX_DIFF_CHARS * 4,
        )
    finally:
        await anyio.to_thread.run_sync(lambda: index.unlink(missing_ok=True))
    if patch.returncode != 0 or patch.timed_out:
        raise GitError(f"Could not compute the diff: {patch.stderr.strip() or 'git failed'}.")
    files = _paths(names)
    text = patch.stdout
    truncated = patch.stdout_truncated or len(text) > MAX_DIFF_CHARS
    notice = None
    if truncated:
        text = text[:MAX_DIFF_CHARS]
        notice = (
            f"The diff is {patch.stdout_bytes:,} bytes; showing the first {MAX_DIFF_CHARS:,} "
            f"characters. All {len(files)} changed paths are in `files`; read files for the rest."
        )
        text += f"\n[diff truncated: {notice}]"
    return Diff(text, files, truncated, notice)


async def commit(git: Git, session: Session, message: str) -> tuple[str, list[str]] | str:
    """Commit every change in the worktree; return (sha, paths) or a refusal."""
    await git.check(["add", "-A"], cwd=session.root, what="stage the changes")
    staged = await git.check(
        [*_QUIET_PATHS, "diff", "--cached", "--name-only", "-z"],
        cwd=session.root,
        what="list the staged changes",
    )
    files = _paths(staged)
    if not files:
        return "Nothing to commit: the sandbox has no changes since its last commit."
    identity = await git.identity_options(session.root)
    await git.check(
        [*identity, "commit", "--quiet", "-m", message],
        cwd=session.root,
        what="commit",
        timeout=HOOK_TIMEOUT,
    )
    sha = await git.check(["rev-parse", "HEAD"], cwd=session.root, what="read the new commit")
    return sha.strip(), files


async def merge(git: Git, session: Session, message: str | None) -> MergeDone | MergeRefused:
    """Merge the sandbox branch into its base branch in the workspace repository."""
    refused = await _merge_refusal(git, session)
    if refused is not None:
        return refused
    repo = session.repo
    before = (await git.check(["rev-parse", "HEAD"], cwd=repo, what="read HEAD")).strip()
    text = message.strip() if message and message.strip() else None
    identity = await git.identity_options(repo)
    result = await git.run(
        [*identity, "merge", "--no-edit", "-m", text or f"Merge {session.branch}", session.branch],
        cwd=repo,
        timeout=HOOK_TIMEOUT,
    )
    if result.returncode != 0 or result.timed_out:
        return await _undo_merge(git, session, result.stderr.strip() or result.stdout.strip())
    head = (await git.check(["rev-parse", "HEAD"], cwd=repo, what="read the new HEAD")).strip()
    tip = (await git.check(["rev-parse", session.branch], cwd=repo, what="read")).strip()
    files = _paths(
        await git.check(
            [*_QUIET_PATHS, "diff", "--name-only", "-z", before, head],
            cwd=repo,
            what="list the merged files",
        )
    )
    return MergeDone(head, "fast-forward" if head == tip else "merge commit", files)


async def _merge_refusal(git: Git, session: Session) -> MergeRefused | None:
    """Why a merge cannot start now (what to do about it), or None when it can."""
    repo = session.repo
    current = await git.current_branch(repo)
    if current is None:
        return MergeRefused(
            f"The workspace has a detached HEAD, so there is no branch to merge into. Ask the "
            f"user to check out {session.base_branch!r}, then merge again; or discard."
        )
    if current != session.base_branch:
        return MergeRefused(
            f"The base branch changed: the workspace is on {current!r}, but the sandbox was "
            f"created from {session.base_branch!r}. Ask the user to check out "
            f"{session.base_branch!r}, then merge again; or discard the sandbox."
        )
    pending = await git.status(session.root)
    if pending:
        return MergeRefused(
            f"The sandbox has {len(pending)} uncommitted change(s). Commit them "
            f"(action='commit', message=...) or discard the sandbox, then merge.",
            [entry[3:] for entry in pending],
        )
    ahead = await git.check(
        ["rev-list", "--count", f"{session.base_branch}..{session.branch}"],
        cwd=repo,
        what="count the sandbox's commits",
    )
    if ahead.strip() == "0":
        return MergeRefused(
            f"Nothing to merge: the sandbox has no commits that {session.base_branch!r} lacks. "
            f"Commit your changes first, or discard the sandbox."
        )
    local = [entry for entry in await git.status(repo) if not entry.startswith("??")]
    if local:
        return MergeRefused(
            f"The workspace has uncommitted changes to {len(local)} tracked file(s); merging "
            f"over them could not be undone cleanly on a conflict. Ask the user to commit or "
            f"stash them, then merge again.",
            [entry[3:] for entry in local],
        )
    return None


async def _undo_merge(git: Git, session: Session, output: str) -> MergeRefused:
    repo = session.repo
    conflicts = _paths(
        (await git.run(["diff", "--name-only", "--diff-filter=U", "-z"], cwd=repo)).stdout
    )
    if await git.succeeds(["rev-parse", "--verify", "--quiet", "MERGE_HEAD"], cwd=repo):
        aborted = await git.run(["merge", "--abort"], cwd=repo)
        if aborted.returncode != 0:
            return MergeRefused(
                f"The merge failed ({output[-1500:]}) and `git merge --abort` failed too "
                f"({aborted.stderr.strip()}). The workspace is mid-merge: tell the user.",
                conflicts,
            )
    what = "conflicts in " + ", ".join(conflicts) if conflicts else output[-1500:]
    return MergeRefused(
        f"The merge failed ({what}); it was undone and the workspace is as it was. The "
        f"sandbox is still active: resolve the conflict there (update it so it merges "
        f"cleanly with {session.base_branch!r}, commit) and merge again, or discard it.",
        conflicts,
    )


async def cleanup(git: Git, session: Session, *, raising: bool = True) -> None:
    """Remove the worktree, the branch and the scratch directory, skipping what is gone.

    Raises:
        GitError: a step failed (when `raising`); the steps done stay done.
    """
    try:
        listing = await git.check(
            ["worktree", "list", "--porcelain"], cwd=session.repo, what="list the worktrees"
        )
        if f"worktree {session.root}" in listing.splitlines():
            await git.check(
                ["worktree", "remove", "--force", "--force", str(session.root)],
                cwd=session.repo,
                what="remove the sandbox worktree",
            )
        ref = f"refs/heads/{session.branch}"
        if await git.succeeds(["rev-parse", "--verify", "--quiet", ref], cwd=session.repo):
            await git.check(
                ["branch", "-D", session.branch],
                cwd=session.repo,
                what="delete the sandbox branch",
            )
    except GitError:
        if raising:
            raise
    await anyio.to_thread.run_sync(lambda: shutil.rmtree(session.scratch, ignore_errors=True))

"""The git work behind the ``sandbox`` tool, one function per action.

Functions return a typed outcome, or a string that is the model-facing error
of an expected refusal; a git call that fails unexpectedly raises `GitError`,
which the handler reports the same way.

Everything a command running in the worktree can write is untrusted here: the
worktree's ``.git`` file, its admin folder (``HEAD``, ``index``,
``commondir``, ``gitdir``, ``config.worktree``) and the sandbox branch's ref.
So no git call discovers its repository: calls on the workspace run pinned to
the git directories `plan` recorded, and calls on the worktree run with the
main repository's common directory as ``GIT_DIR``, the worktree as work tree
and a scratch index, so git reads none of the admin folder. The admin folder's
index is read only as a seed (opened without following links, regular files
only) and replaced atomically after a commit; the branch is named in full
(``refs/heads/...``), never reached through ``HEAD``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import anyio.to_thread
import attrs

from lionfactory._os.isolation import within
from lionfactory._os.regular import FileRefused, regular_stat
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
    "record_worktree",
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
        git_dir: the workspace repository's git directory, recorded by `plan`.
        common_dir: its common directory (the same, unless the workspace is a
            linked worktree itself), recorded by `plan`.
        scratch: the temporary directory holding the worktree and scratch files.
        root: the worktree (the sandbox's counterpart of `repo`).
        branch: the sandbox branch.
        base_branch: the branch the sandbox came from and merges into.
        base_commit: the commit it started from.
        admin_dir: the worktree's admin folder (``<common_dir>/worktrees/<name>``),
            recorded by `record_worktree` right after git created it.
        merged: merged already; only cleanup is left.
    """

    repo: Path
    prefix: str
    git_dir: Path
    common_dir: Path
    scratch: Path
    root: Path
    branch: str
    base_branch: str
    base_commit: str
    admin_dir: Path | None = None
    merged: bool = False

    @property
    def workspace(self) -> Path:
        """The sandbox's counterpart of the workspace directory."""
        return self.root / self.prefix if self.prefix else self.root

    @property
    def ref(self) -> str:
        """The sandbox branch's full ref name."""
        return f"refs/heads/{self.branch}"

    def home(self, git: Git) -> Git:
        """`git` pinned to the workspace repository."""
        return git.at(self.git_dir, self.repo, self.common_dir)

    def tree(self, git: Git, index: Path) -> Git:
        """`git` on the worktree's files, reading none of its admin folder.

        ``GIT_DIR`` is the common directory (objects, refs, the main
        repository's own config), the index a scratch file: git never reads the
        ``HEAD``, ``index``, ``commondir`` or ``config.worktree`` a command in
        the worktree could have rewritten.
        """
        return git.at(self.common_dir, self.root).with_env(GIT_INDEX_FILE=str(index))


@attrs.frozen
class Plan:
    """What ``create`` found out about the workspace repository."""

    repo: Path
    prefix: str
    git_dir: Path
    common_dir: Path
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
    """Check that a sandbox can start from the repository around `root`; record its git dirs."""
    top = await git.run(["rev-parse", "--show-toplevel"], cwd=root)
    if top.returncode != 0 or not top.stdout.strip():
        return (
            f"The workspace {root} is not inside a git repository, and the sandbox is a git "
            f"worktree. Work without a sandbox, or ask the user to create a repository "
            f"(git init, then a first commit)."
        )
    repo = Path(await anyio.to_thread.run_sync(os.path.realpath, top.stdout.strip()))
    located = await git.check(
        ["rev-parse", "--path-format=absolute", "--absolute-git-dir", "--git-common-dir"],
        cwd=root,
        what="locate the repository's git directory",
    )
    lines = located.splitlines()
    if len(lines) != 2:
        raise GitError(f"Could not locate the repository's git directory (git said {located!r}).")
    git_dir, common_dir = [
        Path(await anyio.to_thread.run_sync(os.path.realpath, line)) for line in lines
    ]
    for folder in (git_dir, common_dir):
        # A git directory inside the work tree (other than its own .git) is
        # one a command in the checkout could have made, through a .git file.
        if within(folder, repo) and folder != repo / ".git":
            return (
                f"The repository's git directory {folder} lies inside the checkout {repo}, "
                f"where a command could have put it (through a .git file), so the sandbox "
                f"will not use it. Ask the user to check {repo / '.git'}."
            )
    home = git.at(git_dir, repo, common_dir)
    prefix = (await home.check(["rev-parse", "--show-prefix"], cwd=root, what="locate")).strip()
    base_branch = await home.current_branch(root)
    if base_branch is None:
        return (
            "The workspace has a detached HEAD (no branch checked out), so a sandbox would "
            "have nothing to merge into. Ask the user to check out a branch first."
        )
    head = await home.run(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], cwd=root)
    if head.returncode != 0:
        return (
            f"The branch {base_branch!r} has no commits yet; the sandbox starts from the last "
            f"commit. Commit once (or ask the user to), then create the sandbox."
        )
    dirty = await home.status(repo)
    notice = None
    if dirty:
        notice = (
            f"The workspace has {len(dirty)} uncommitted change(s); the sandbox starts from "
            f"the last commit and does not contain them."
        )
    return Plan(repo, prefix, git_dir, common_dir, base_branch, head.stdout.strip(), notice)


async def record_worktree(git: Git, session: Session) -> None:
    """Record and verify the admin folder git just made for the worktree.

    Read once, right after ``git worktree add`` and before any command runs
    in the worktree; never again afterwards.

    Raises:
        GitError: the admin folder is not where a linked worktree's belongs.
    """
    found = await git.check(
        ["rev-parse", "--absolute-git-dir"], cwd=session.root, what="locate the sandbox's git data"
    )
    admin = Path(found.strip())
    expected = (session.common_dir / "worktrees").resolve()

    def verify() -> bool:
        try:
            back = (admin / "gitdir").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return False
        return (
            admin.parent.resolve() == expected
            and not admin.is_symlink()
            and os.path.realpath(back) == str(session.root / ".git")
        )

    if not await anyio.to_thread.run_sync(verify):
        raise GitError(
            f"The sandbox worktree's git data is not where git keeps a worktree's ({admin}); "
            f"the sandbox was removed. Ask the user to check the repository."
        )
    session.admin_dir = admin


def _seed_index(source: Path | None, target: Path) -> bool:
    """Copy the worktree's index into `target` (for its stat cache); False if there is none.

    The source sits in a folder commands in the worktree can write: it is
    opened without following links and copied only when it is a regular file.
    """
    target.unlink(missing_ok=True)
    if source is None:
        return False
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as src:
        try:
            regular_stat(src.fileno(), str(source))
        except FileRefused:
            return False
        with target.open("xb") as out:
            shutil.copyfileobj(src, out)
    return True


def _install_index(index: Path, admin: Path) -> None:
    """Put `index` in place of the worktree's index: a new file renamed over it."""
    fd, temporary = tempfile.mkstemp(prefix="index.lionfactory-", dir=admin)
    try:
        with os.fdopen(fd, "wb") as out, index.open("rb") as src:
            shutil.copyfileobj(src, out)
        os.replace(temporary, admin / "index")
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@contextlib.asynccontextmanager
async def _staged(git: Git, session: Session, name: str) -> AsyncIterator[Git]:
    """A git on the worktree whose scratch index `name` holds every change (``add -A``).

    The index file is removed when the block ends, however it ends.
    """
    index = session.scratch / name
    try:
        source = session.admin_dir / "index" if session.admin_dir is not None else None
        scratch = session.tree(git, index)
        if not await anyio.to_thread.run_sync(_seed_index, source, index):
            await scratch.check(
                ["read-tree", session.ref], cwd=session.root, what="prepare the index"
            )
        await scratch.check(["add", "-A"], cwd=session.root, what="collect the changes")
        yield scratch
    finally:
        await _drop(index)


async def _changed(scratch: Git, session: Session, since: str, what: str) -> list[str]:
    """The paths whose content in the scratch index differs from commit `since`."""
    out = await scratch.check(
        [*_QUIET_PATHS, "diff", "--cached", "--name-only", "-z", since],
        cwd=session.root,
        what=what,
    )
    return _paths(out)


async def _drop(path: Path) -> None:
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(lambda: path.unlink(missing_ok=True))


async def diff(git: Git, session: Session) -> Diff:
    """Everything the sandbox changed since its base commit, via a scratch index."""
    async with _staged(git, session, "diff-index") as scratch:
        files = await _changed(scratch, session, session.base_commit, "list the changed files")
        patch = await scratch.run(
            [*_QUIET_PATHS, "diff", "--cached", "--no-color", "--no-ext-diff", session.base_commit],
            cwd=session.root,
            max_bytes=MAX_DIFF_CHARS * 4,
        )
    if patch.returncode != 0 or patch.timed_out:
        raise GitError(f"Could not compute the diff: {patch.stderr.strip() or 'git failed'}.")
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


async def _tip(git: Git, session: Session) -> str:
    """The sandbox branch's commit (a command in the worktree may have moved it: it is data)."""
    out = await session.home(git).check(
        ["rev-parse", "--verify", "--quiet", f"{session.ref}^{{commit}}"],
        cwd=session.repo,
        what="read the sandbox branch",
    )
    return out.strip()


async def _pending(git: Git, session: Session) -> list[str]:
    """Paths whose worktree content differs from the sandbox branch's last commit."""
    async with _staged(git, session, "status-index") as scratch:
        return await _changed(scratch, session, session.ref, "list the uncommitted changes")


async def commit(git: Git, session: Session, message: str) -> tuple[str, list[str]] | str:
    """Commit every change in the worktree onto the sandbox branch: (sha, paths) or a refusal.

    Built from plumbing (``write-tree``, ``commit-tree``, ``update-ref`` with
    the old value), so the commit lands on the sandbox branch whatever the
    worktree's ``HEAD`` says, and a branch moved meanwhile fails the update.
    """
    index = session.scratch / "commit-index"
    async with _staged(git, session, index.name) as scratch:
        tip = await _tip(git, session)
        files = await _changed(scratch, session, tip, "list the staged changes")
        if not files:
            return "Nothing to commit: the sandbox has no changes since its last commit."
        tree = await scratch.check(["write-tree"], cwd=session.root, what="record the tree")
        home = session.home(git)
        identity = await home.identity_options(session.repo)
        sha = (
            await home.check(
                [*identity, "commit-tree", tree.strip(), "-p", tip, "-m", message],
                cwd=session.repo,
                what="commit",
            )
        ).strip()
        await home.check(
            [
                "update-ref",
                "-m",
                f"sandbox commit: {message.splitlines()[0][:200]}",
                session.ref,
                sha,
                tip,
            ],
            cwd=session.repo,
            what="move the sandbox branch to the new commit",
        )
        if session.admin_dir is not None:
            # The worktree's own index now matches the commit, so `git status`
            # through bash shows nothing left to commit.
            await anyio.to_thread.run_sync(_install_index, index, session.admin_dir)
    return sha, files


async def merge(git: Git, session: Session, message: str | None) -> MergeDone | MergeRefused:
    """Merge the sandbox branch into its base branch in the workspace repository."""
    refused = await _merge_refusal(git, session)
    if refused is not None:
        return refused
    repo = session.repo
    home = session.home(git)
    before = (await home.check(["rev-parse", "HEAD"], cwd=repo, what="read HEAD")).strip()
    text = message.strip() if message and message.strip() else None
    identity = await home.identity_options(repo)
    tip = await _tip(git, session)
    result = await home.run(
        [*identity, "merge", "--no-edit", "-m", text or f"Merge {session.branch}", tip],
        cwd=repo,
        timeout=HOOK_TIMEOUT,
    )
    if result.returncode != 0 or result.timed_out:
        return await _undo_merge(git, session, result.stderr.strip() or result.stdout.strip())
    head = (await home.check(["rev-parse", "HEAD"], cwd=repo, what="read the new HEAD")).strip()
    files = _paths(
        await home.check(
            [*_QUIET_PATHS, "diff", "--name-only", "-z", before, head],
            cwd=repo,
            what="list the merged files",
        )
    )
    return MergeDone(head, "fast-forward" if head == tip else "merge commit", files)


async def _merge_refusal(git: Git, session: Session) -> MergeRefused | None:
    """Why a merge cannot start now (what to do about it), or None when it can."""
    repo = session.repo
    home = session.home(git)
    current = await home.current_branch(repo)
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
    pending = await _pending(git, session)
    if pending:
        return MergeRefused(
            f"The sandbox has {len(pending)} uncommitted change(s). Commit them "
            f"(action='commit', message=...) or discard the sandbox, then merge.",
            pending,
        )
    ahead = await home.check(
        ["rev-list", "--count", f"refs/heads/{session.base_branch}..{session.ref}"],
        cwd=repo,
        what="count the sandbox's commits",
    )
    if ahead.strip() == "0":
        return MergeRefused(
            f"Nothing to merge: the sandbox has no commits that {session.base_branch!r} lacks. "
            f"Commit your changes first, or discard the sandbox."
        )
    local = [entry for entry in await home.status(repo) if not entry.startswith("??")]
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
    home = session.home(git)
    conflicts = _paths(
        (await home.run(["diff", "--name-only", "--diff-filter=U", "-z"], cwd=repo)).stdout
    )
    if await home.succeeds(["rev-parse", "--verify", "--quiet", "MERGE_HEAD"], cwd=repo):
        aborted = await home.run(["merge", "--abort"], cwd=repo)
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


def _remove_tree(path: Path | None) -> None:
    # rmtree never follows a link, and refuses a link in place of `path`.
    if path is not None and (path.exists() or path.is_symlink()):
        shutil.rmtree(path)


def _admin_of(session: Session) -> Path | None:
    """The admin folder to remove: the recorded one, or (creation cut short) the one git made.

    Before `record_worktree` ran, nothing has run in the worktree yet; the
    folder named after it is removed only when its ``gitdir`` points back.
    """
    if session.admin_dir is not None:
        return session.admin_dir
    candidate = session.common_dir / "worktrees" / session.root.name
    try:
        back = (candidate / "gitdir").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return candidate if os.path.realpath(back) == str(session.root / ".git") else None


def remove_files(session: Session) -> None:
    """Remove the worktree, its admin folder and the scratch directory now (blocking, no git).

    What interpreter exit can still do: the sandbox branch (and any commit
    on it) stays in the repository.
    """
    for path in (session.root, _admin_of(session)):
        with contextlib.suppress(OSError):
            _remove_tree(path)
    shutil.rmtree(session.scratch, ignore_errors=True)


async def cleanup(
    git: Git, session: Session, *, raising: bool = True, keep_commits: bool = False
) -> None:
    """Remove the worktree, its admin folder, the branch and the scratch directory.

    The worktree and its admin folder are removed by path (both recorded at
    creation), not by ``git worktree remove``, which would find the worktree
    through the admin folder's files. Steps already done are skipped. With
    `keep_commits` (a branch closed with its sandbox still active), a
    sandbox branch holding commits beyond its base stays, so committed work
    is never lost; uncommitted changes go with the worktree.

    Raises:
        GitError: a step failed (when `raising`); the steps done stay done.
    """
    home = session.home(git)
    try:
        try:
            await anyio.to_thread.run_sync(_remove_tree, session.root)
            await anyio.to_thread.run_sync(_remove_tree, _admin_of(session))
        except OSError as exc:
            raise GitError(f"Could not remove the sandbox worktree ({exc}).") from None
        if keep_commits:
            ahead = await home.run(
                ["rev-list", "--count", f"{session.base_commit}..{session.ref}"],
                cwd=session.repo,
            )
            if ahead.returncode == 0 and ahead.stdout.strip() not in ("", "0"):
                await anyio.to_thread.run_sync(
                    lambda: shutil.rmtree(session.scratch, ignore_errors=True)
                )
                return
        if await home.succeeds(["rev-parse", "--verify", "--quiet", session.ref], cwd=session.repo):
            await home.check(
                ["branch", "-D", session.branch],
                cwd=session.repo,
                what="delete the sandbox branch",
            )
    except GitError:
        if raising:
            raise
    await anyio.to_thread.run_sync(lambda: shutil.rmtree(session.scratch, ignore_errors=True))

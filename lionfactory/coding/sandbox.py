"""The ``sandbox`` tool: try changes on a git worktree, then merge or discard them.

``create`` checks out the workspace repository's HEAD into a new worktree on a
new branch (``lionfactory/sandbox-<id>``), in a temporary directory outside the
workspace, and calls ``on_switch(path)`` so the coding toolkit points its file,
shell and search tools at the worktree. ``diff`` shows what the sandbox changed
since it was created (committed or not, untracked files included), ``commit``
records the changes on the sandbox branch, ``merge`` merges that branch into
the base branch in the workspace and removes the sandbox, ``discard`` removes
it unmerged. Both call ``on_switch(None)`` to send the tools home.

Decisions:

* **One sandbox per branch.** The tool is bound to the branch it was built
  for: registered as a factory, a clone gets a fresh tool and slot; a built
  tool registered statically on another branch, or cloned, is refused, so two
  branches never share one slot without knowing it.
* **The user's index is never touched.** ``diff`` stages into a scratch index
  (``GIT_INDEX_FILE``) in the sandbox's temporary directory, so untracked
  files appear as new files without ``git add -N`` anywhere.
* **Protected branches need consent.** A merge into ``main``, ``master`` or
  ``release*`` is refused unless the factory was called with
  ``allow_merge_into_protected=True``: landing an agent's commits on a branch
  people release from is the user's decision. ``create`` warns up front, and
  the refusal leaves the sandbox (and its branch) in place for the user to
  review and merge.
* **Merge refuses rather than guesses**: a detached HEAD in the workspace, a
  different branch checked out than the one the sandbox came from, uncommitted
  changes in the sandbox (commit or discard them), uncommitted changes to
  tracked files in the workspace (a conflicted merge could not be undone
  cleanly around them). A conflicting merge is aborted and the sandbox stays.
* **Cleanup is idempotent.** Each step (remove the worktree and its admin
  folder, delete the branch, delete the temporary directory) is skipped when
  already done, and the slot is cleared only when all succeeded, so a failed
  ``discard`` can be called again.
* **Identity.** Commits use the user's ``user.name``/``user.email`` (the
  repository's or the global configuration); when there is none,
  ``lionfactory agent <agent@localhost>`` is passed with ``-c`` for that call
  only. The toolkit gives the worktree's ``bash`` the same identity as
  ``GIT_AUTHOR_*``/``GIT_COMMITTER_*`` variables.
* **Nothing a command in the worktree writes steers git.** The worktree's
  ``.git`` file, its admin folder (``HEAD``, ``index``, ``commondir``) and the
  sandbox branch are writable from inside the sandbox, so every git call is
  pinned to directories recorded at ``create`` (see `_sandbox_ops`), and no
  program named by configuration or attributes runs (see `_git`).
* **Confined git.** Under the toolkit's isolation, git (which runs no hooks at
  all) may write only the repository (its ``.git`` included), the
  repository's git folders and the sandbox's scratch directory, with the
  toolkit's network and hidden paths.
* The sandbox starts from the last commit: uncommitted changes in the
  workspace are not in it (``create`` says so in its ``notice``).
* **An active sandbox survives a save and a load.** Its directories and
  branch are kept in `Branch.tool_state`; the factory called again on load
  re-attaches the worktree (``on_restore`` points the toolkit's tools at it),
  so the conversation's "your tools now work in ..." stays true. The record
  comes from a store, so it is checked against the repository before it is
  believed: the branch name is a sandbox's, the worktree is registered in
  the workspace repository's own git directory. A sandbox whose worktree is
  gone (a reboot cleared the temporary directory) is not re-attached: the
  next ``sandbox`` call says so, git's record of the worktree is pruned, and
  its branch is deleted only when it holds no commit of its own (else the
  answer names it, so the work can be recovered).
"""

from __future__ import annotations

import fnmatch
import inspect
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
import attrs
from pydantic import Field

from lionfactory._branch import Branch
from lionfactory._os.isolation import Isolation, git_admin_isolation, within
from lionfactory._os.workspace import Workspace
from lionfactory._tool import Tool, ToolHints
from lionfactory.coding import _sandbox_ops as ops
from lionfactory.coding._git import HOOK_TIMEOUT, Git, GitError, Runner
from lionfactory.coding._sandbox_ops import MAX_DIFF_CHARS, Session
from lionfactory.tools._models import ToolModel

__all__ = ["PROTECTED_BRANCHES", "SandboxRequest", "SandboxResponse", "sandbox_tool"]

PROTECTED_BRANCHES: tuple[str, ...] = ("main", "master", "release*")
"""Branch patterns (fnmatch, case-sensitive like git) a merge needs consent for."""

OnSwitch = Callable[[Path | None], "Awaitable[None] | None"]
OnRestore = Callable[[Path, Mapping[str, str]], None]

STATE_KEY = "sandbox"
"""The key of an active sandbox's record in `Branch.tool_state`."""
_BRANCH_NAME = re.compile(r"lionfactory/sandbox-[0-9a-f]{8}")
_SCRATCH_PREFIX = "lionfactory-sandbox-"
_RECORD_KEYS: tuple[str, ...] = ("repo", "prefix", "git_dir", "common_dir", "scratch", "root")
_RECORD_KEYS += ("branch", "base_branch", "base_commit")
_IDENTITY_KEYS = frozenset(
    {"GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"}
)

_DESCRIPTION = f"""\
Work on a private copy of the repository (a git worktree on a new branch), then
merge it into the current branch or throw it away.

Actions:
- create: start a sandbox from the last commit of the current branch. While it
  is active, reader, editor, bash, search, code_check, code_nav and ast_search
  work inside the sandbox, not in the workspace, and so does a subagent you
  start. Uncommitted workspace changes are not copied. Only one sandbox can be
  active.
- diff: show every change since create (committed or not, new files included).
  Long diffs are cut at {MAX_DIFF_CHARS:,} characters; `files` lists all paths.
- commit: commit all changes in the sandbox. Needs `message`.
- merge: merge the sandbox's commits into the branch it came from, then remove
  the sandbox. Commit first; refused if the workspace is on another branch or
  has a detached HEAD. Optional `message` for the merge commit. On a conflict
  the merge is undone and the sandbox stays active.
- discard: remove the sandbox and its branch without merging. If it fails,
  call it again.

Inside the sandbox, git (through bash) works on the sandbox branch, and commits
get the user's identity (or "lionfactory agent <agent@localhost>"). The base
branch stays checked out in the workspace, so checking it out in the sandbox
fails: commit on the sandbox branch and use merge."""


class SandboxRequest(ToolModel):
    """Arguments of one ``sandbox`` call."""

    action: Literal["create", "diff", "commit", "merge", "discard"] = Field(
        description=(
            "create: start a sandbox; diff: show its changes; commit: commit them "
            "(needs message); merge: merge into the base branch and end the sandbox; "
            "discard: end the sandbox without merging."
        )
    )
    message: str | None = Field(
        default=None,
        description=(
            "commit: the commit message (required). merge: the merge commit's message "
            "(optional; unused for a fast-forward)."
        ),
    )


class SandboxResponse(ToolModel):
    """The outcome of one ``sandbox`` call."""

    success: bool = Field(description="Whether the action was carried out.")
    action: str = Field(description="The action that was asked for.")
    content: str = Field(
        default="", description="What happened, in words; for diff, the unified diff."
    )
    error: str | None = Field(
        default=None, description="Why the action failed, and what to do next."
    )
    active: bool = Field(default=False, description="Whether a sandbox is active after this call.")
    branch: str | None = Field(default=None, description="The sandbox's git branch.")
    worktree: str | None = Field(
        default=None,
        description="The sandbox directory the tools work in while it is active.",
    )
    base_branch: str | None = Field(
        default=None, description="The branch the sandbox was created from and merges into."
    )
    base_commit: str | None = Field(
        default=None, description="The commit the sandbox started from."
    )
    commit: str | None = Field(
        default=None,
        description="commit: the new commit; merge: the base branch's new head.",
    )
    files: list[str] = Field(
        default_factory=list,
        description=(
            "diff: every changed path; commit: the committed paths; merge: the merged "
            "paths, or the conflicting ones when it failed."
        ),
    )
    truncated: bool = Field(default=False, description="Whether the diff was cut.")
    notice: str | None = Field(
        default=None, description="Something worth knowing that is not an error."
    )


_PROTECTED_RULE = f"""

Merging into a protected branch ({", ".join(PROTECTED_BRANCHES)}) is refused here: on
such a branch, commit and leave the sandbox for the user to merge."""


def _is_protected(branch: str) -> bool:
    return any(fnmatch.fnmatchcase(branch, pattern) for pattern in PROTECTED_BRANCHES)


def _state(session: Session | None) -> dict[str, object]:
    if session is None:
        return {"active": False}
    return {
        "active": True,
        "branch": session.branch,
        "worktree": str(session.workspace),
        "base_branch": session.base_branch,
        "base_commit": session.base_commit,
    }


def _to_record(session: Session, identity: Mapping[str, str]) -> dict[str, Any]:
    """The JSON-ready record of an active sandbox, kept in `Branch.tool_state`."""
    return {
        "repo": str(session.repo),
        "prefix": session.prefix,
        "git_dir": str(session.git_dir),
        "common_dir": str(session.common_dir),
        "scratch": str(session.scratch),
        "root": str(session.root),
        "branch": session.branch,
        "base_branch": session.base_branch,
        "base_commit": session.base_commit,
        "admin_dir": None if session.admin_dir is None else str(session.admin_dir),
        "merged": session.merged,
        "identity": dict(identity),
    }


@attrs.frozen
class _Lost:
    """A recorded sandbox that could not be re-attached on load: why, and what is left of it."""

    reason: str
    session: Session | None = None


def _registered_admin(common_dir: Path, root: Path) -> Path | None:
    """The admin folder in `common_dir` whose ``gitdir`` names `root`'s ``.git``, or None."""
    worktrees = common_dir / "worktrees"
    try:
        entries = list(os.scandir(worktrees))
    except OSError:
        return None
    for entry in entries:
        if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            back = Path(entry.path, "gitdir").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            continue
        if os.path.realpath(back) == str(root / ".git"):
            return Path(entry.path)
    return None


def _recall(record: object, workspace: Workspace) -> tuple[Session, dict[str, str]] | _Lost:
    """The sandbox a saved branch recorded, checked against the repository (blocking).

    The record comes from a store: every path in it must fit the workspace's
    repository before it is used, and nothing it names is ever removed
    unless it is what a sandbox of this workspace made.
    """
    unusable = _Lost(
        "The saved branch's sandbox record is not one this toolkit wrote; it was ignored."
    )
    if not isinstance(record, Mapping):
        return unusable
    try:
        text = {key: record[key] for key in _RECORD_KEYS}
        if not all(isinstance(value, str) for value in text.values()):
            return unusable
        identity = record.get("identity") or {}
        if not isinstance(identity, Mapping) or not all(
            key in _IDENTITY_KEYS and isinstance(value, str) for key, value in identity.items()
        ):
            return unusable
        session = Session(
            repo=Path(text["repo"]),
            prefix=text["prefix"],
            git_dir=Path(text["git_dir"]),
            common_dir=Path(text["common_dir"]),
            scratch=Path(text["scratch"]),
            root=Path(text["root"]),
            branch=text["branch"],
            base_branch=text["base_branch"],
            base_commit=text["base_commit"],
            merged=record.get("merged") is True,
        )
    except KeyError:
        return unusable
    home = workspace.root
    fits = (
        _BRANCH_NAME.fullmatch(session.branch) is not None
        and re.fullmatch(r"[0-9a-f]{40,64}", session.base_commit) is not None
        and all(p.is_absolute() for p in (session.repo, session.scratch, session.root))
        and session.scratch.name.startswith(_SCRATCH_PREFIX)
        and session.root.parent == session.scratch
        and within(home, session.repo)
        and session.prefix == ("" if home == session.repo else f"{home.relative_to(session.repo)}/")
        and not session.scratch.is_relative_to(session.repo)
        and session.git_dir.is_dir()
        and session.common_dir.is_dir()
    )
    if not fits:
        return unusable
    if not session.root.is_dir():
        return _Lost(
            f"The sandbox {session.branch!r} that was active when this conversation was saved "
            f"is gone: its worktree {session.root} no longer exists (a temporary directory "
            f"cleared by a restart, say).",
            session,
        )
    admin = _registered_admin(session.common_dir, session.root)
    if admin is None:
        return _Lost(
            f"The sandbox {session.branch!r} that was active when this conversation was saved "
            f"is no longer a worktree of the repository ({session.root} is not registered in "
            f"{session.common_dir}); it was not re-attached.",
        )
    session.admin_dir = admin
    return session, dict(identity)


@attrs.define(eq=False)
class _Sandbox:
    """The handler: one sandbox slot and the actions on it."""

    workspace: Workspace
    on_switch: OnSwitch | None = attrs.field(repr=False)
    git_plain: Git = attrs.field(repr=False)
    isolation: Isolation | None = None
    session: Session | None = None
    allow_protected: bool = False
    busy: bool = False
    state: dict[str, Any] = attrs.field(factory=dict, repr=False)
    identity: dict[str, str] = attrs.field(factory=dict, repr=False)
    lost: _Lost | None = None

    def _remember(self) -> None:
        """Keep the active sandbox in the branch's saved state (or drop it, when none is)."""
        if self.session is None:
            self.state.pop(STATE_KEY, None)
        else:
            self.state[STATE_KEY] = _to_record(self.session, self.identity)

    async def _forget_lost(self) -> str:
        """Clean up after a sandbox lost on load; the words that tell the model."""
        lost, self.lost = self.lost, None
        assert lost is not None
        said = [lost.reason, "Your tools work in the workspace."]
        session = lost.session
        if session is not None:
            home = session.home(self._git_for(None))
            # Git's own clean-up of worktrees whose directory is gone.
            await home.succeeds(["worktree", "prune"], cwd=session.repo)
            await anyio.to_thread.run_sync(
                lambda: shutil.rmtree(session.scratch, ignore_errors=True)
            )
            found = await home.run(
                ["rev-parse", "--verify", "--quiet", session.ref], cwd=session.repo
            )
            if found.returncode != 0:
                pass  # the branch went with it
            elif found.stdout.strip() == session.base_commit:
                await home.succeeds(["branch", "-D", session.branch], cwd=session.repo)
                said.append("Its branch held no commits of its own and was deleted.")
            else:
                said.append(
                    f"Its branch {session.branch!r} keeps its commits: tell the user, who can "
                    f"merge or delete it (git merge {session.branch})."
                )
        return " ".join(said)

    def _git_for(self, session: Session | None) -> Git:
        """Git confined to what this sandbox's git work writes (see the module docstring)."""
        isolation = self.isolation
        if isolation is None or not isolation.confined:
            return self.git_plain
        writable: tuple[Path, ...] = (self.workspace.root,)
        if session is not None:
            writable = (session.repo, session.scratch, session.git_dir, session.common_dir)
        return self.git_plain.with_isolation(git_admin_isolation(isolation, writable))

    @property
    def git(self) -> Git:
        """Git for the active sandbox (or for the workspace when none is active)."""
        return self._git_for(self.session)

    async def close_branch(self, branch_id: uuid.UUID | None) -> None:
        """The branch is closing: remove its active sandbox (commits on its branch are kept).

        One handler serves one branch (each registration builds its own), so
        `branch_id` needs no lookup.
        """
        session = self.session
        if session is None:
            return
        self.session = None
        with anyio.CancelScope(shield=True):
            await ops.cleanup(self._git_for(session), session, raising=False, keep_commits=True)
            await self._switch(None)

    async def __call__(self, request: SandboxRequest) -> SandboxResponse:
        # A flag, not an anyio.Lock: a lock binds to the first event loop that
        # uses it, and tools may be called from trio and from asyncio.
        if self.busy:
            return self._fail(
                request.action,
                "Another sandbox action is still running; wait for it and try again.",
            )
        self.busy = True
        try:
            if self.lost is not None and request.action != "create":
                said = await self._forget_lost()
                return self._fail(
                    request.action, f"{said} Create a new sandbox with action='create'."
                )
            if self.lost is not None:
                said = await self._forget_lost()
                created = await self._create(request)
                notice = " ".join(n for n in (said, created.notice) if n)
                return created.model_copy(update={"notice": notice})
            if request.action != "create" and self.session is None:
                return self._fail(
                    request.action,
                    "No sandbox is active. Create one first with action='create'.",
                )
            action: Callable[[SandboxRequest], Awaitable[SandboxResponse]]
            action = getattr(self, f"_{request.action}")
            return await action(request)
        except GitError as exc:
            return self._fail(request.action, exc.message)
        finally:
            self.busy = False

    def _fail(self, action: str, error: str, **fields: object) -> SandboxResponse:
        return SandboxResponse.model_validate(
            {**_state(self.session), "success": False, "action": action, "error": error, **fields}
        )

    def _ok(self, action: str, content: str, **fields: object) -> SandboxResponse:
        return SandboxResponse.model_validate(
            {**_state(self.session), "success": True, "action": action, "content": content} | fields
        )

    async def _switch(self, path: Path | None) -> None:
        if self.on_switch is not None:
            out = self.on_switch(path)
            if inspect.isawaitable(out):
                await out

    async def _create(self, request: SandboxRequest) -> SandboxResponse:
        if self.session is not None:
            return self._fail(
                "create",
                f"A sandbox is already active (branch {self.session.branch!r}). Merge or "
                f"discard it before creating another.",
            )
        root = self.workspace.root
        plan = await ops.plan(self._git_for(None), root)
        if isinstance(plan, str):
            return self._fail("create", plan)
        scratch = Path(
            await anyio.to_thread.run_sync(
                lambda: os.path.realpath(tempfile.mkdtemp(prefix=_SCRATCH_PREFIX))
            )
        )
        label = re.sub(r"[^A-Za-z0-9._-]", "_", plan.repo.name) or "repo"
        session = Session(
            repo=plan.repo,
            prefix=plan.prefix,
            git_dir=plan.git_dir,
            common_dir=plan.common_dir,
            scratch=scratch,
            root=scratch / label,
            branch=f"lionfactory/sandbox-{uuid.uuid4().hex[:8]}",
            base_branch=plan.base_branch,
            base_commit=plan.base_commit,
        )
        git = self._git_for(session)
        try:
            add = ["worktree", "add", "--quiet", "-b", session.branch, str(session.root)]
            await session.home(git).check(
                [*add, session.base_commit],
                cwd=session.repo,
                what="create the sandbox worktree",
                timeout=HOOK_TIMEOUT,  # checks out every file
            )
            await ops.record_worktree(git, session)
            await anyio.to_thread.run_sync(
                lambda: session.workspace.mkdir(parents=True, exist_ok=True)
            )
            identity = await self.git_plain.identity_env(root)
            await self._switch(session.workspace)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await ops.cleanup(git, session, raising=False)
            raise
        self.session, self.identity = session, identity
        self._remember()
        return self._ok(
            "create",
            f"Created sandbox branch {session.branch!r} from {session.base_branch!r} at "
            f"{session.base_commit[:12]}. Your file, shell and search tools now work in "
            f"{session.workspace}. When done: commit, then merge (or discard). git there "
            f"works on {session.branch!r}; {session.base_branch!r} stays checked out in the "
            f"workspace, so `git checkout {session.base_branch}` in the sandbox fails (already "
            f"checked out): commit on the sandbox branch and merge with action='merge'.",
            notice=" ".join(
                n for n in (plan.notice, self._protected_notice(session.base_branch)) if n
            )
            or None,
        )

    def _merge_refused(self, base: str) -> bool:
        return not self.allow_protected and _is_protected(base)

    def _protected_notice(self, base: str) -> str | None:
        if not self._merge_refused(base):
            return None
        return (
            f"{base!r} is a protected branch: merge will be refused, so your commits stay on "
            f"the sandbox branch for the user to review and merge."
        )

    async def _diff(self, request: SandboxRequest) -> SandboxResponse:
        assert self.session is not None
        diff = await ops.diff(self.git, self.session)
        content = diff.text or f"No changes since {self.session.base_commit[:12]}."
        return self._ok(
            "diff", content, files=diff.files, truncated=diff.truncated, notice=diff.notice
        )

    async def _commit(self, request: SandboxRequest) -> SandboxResponse:
        session = self.session
        assert session is not None
        message = (request.message or "").strip()
        if not message:
            return self._fail(
                "commit",
                "commit needs a message: call again with message='<what changed and why>'.",
            )
        if session.merged:
            return self._fail("commit", ops.MERGED_ALREADY)
        outcome = await ops.commit(self.git, session, message)
        if isinstance(outcome, str):
            return self._fail("commit", outcome)
        sha, files = outcome
        return self._ok(
            "commit",
            f"Committed {sha[:12]} on {session.branch!r} ({len(files)} file(s)): {message}",
            commit=sha,
            files=files,
        )

    async def _merge(self, request: SandboxRequest) -> SandboxResponse:
        session = self.session
        assert session is not None
        if session.merged:
            return self._fail("merge", ops.MERGED_ALREADY)
        if self._merge_refused(session.base_branch):
            return self._fail(
                "merge",
                f"Merging into {session.base_branch!r} is not allowed: it is a protected branch "
                f"({', '.join(PROTECTED_BRANCHES)}) and this sandbox was not given permission to "
                f"merge into one. Commit your work (action='commit') and leave the sandbox "
                f"active; do not discard it, which would delete the branch. Tell the user that "
                f"your changes are on branch {session.branch!r}, ready for them to review and "
                f"merge (git merge {session.branch}).",
            )
        outcome = await ops.merge(self.git, session, request.message)
        if isinstance(outcome, ops.MergeRefused):
            return self._fail("merge", outcome.error, files=outcome.files)
        session.merged = True
        self._remember()
        await self._switch(None)
        notice = None
        try:
            await ops.cleanup(self.git, session)
        except GitError as exc:
            notice = (
                f"The merge succeeded, but removing the sandbox failed ({exc.message}). "
                f"Call sandbox with action='discard' to finish cleaning up."
            )
        else:
            self.session = None
            self._remember()
        return self._ok(
            "merge",
            f"Merged {session.branch!r} into {session.base_branch!r} "
            f"({outcome.how}); {session.base_branch!r} is now at {outcome.head[:12]}. "
            f"Your tools work in the workspace again.",
            commit=outcome.head,
            files=outcome.files,
            notice=notice,
            branch=session.branch,
            base_branch=session.base_branch,
            base_commit=session.base_commit,
        )

    async def _discard(self, request: SandboxRequest) -> SandboxResponse:
        session = self.session
        assert session is not None
        try:
            await ops.cleanup(self.git, session)
        except GitError as exc:
            return self._fail(
                "discard",
                f"{exc.message} The sandbox is still recorded; call discard again to retry.",
            )
        self.session = None
        self._remember()
        await self._switch(None)
        return self._ok(
            "discard",
            f"Discarded sandbox {session.branch!r}; nothing was merged. Your tools work in "
            f"the workspace again.",
            branch=session.branch,
            base_branch=session.base_branch,
            base_commit=session.base_commit,
        )


# No cleanup at interpreter exit: an active sandbox is recorded with its
# branch (`Branch.tool_state`), so a branch saved to a store re-attaches its
# worktree when it is loaded in a later process, and removing the files at
# exit would throw away the agent's uncommitted work in it. Closing the branch
# (`aclose()`, the end of a sub-agent's call or of a sessionless MCP call)
# removes the worktree and keeps the sandbox branch's commits.


def sandbox_tool(
    branch: Branch,
    *,
    workspace_root: str | os.PathLike[str] | None = None,
    on_switch: OnSwitch | None = None,
    runner: Runner | None = None,
    allow_merge_into_protected: bool = False,
    isolation: Isolation | None = None,
    on_restore: OnRestore | None = None,
) -> Tool:
    """Build the ``sandbox`` tool for `branch`, with its own, empty sandbox slot.

    Args:
        branch: the branch the slot belongs to; the tool is bound to it, so
            register this factory (not a built tool) to give clones their own.
        workspace_root: a directory inside the git repository the sandbox
            copies; the current directory when None. Resolved once, now.
        on_switch: called (sync or async) with the sandbox's counterpart of
            the workspace directory after a successful ``create``, and with
            None after a successful ``merge`` or ``discard``.
        runner: runs git; `lionfactory._os.process.run_process` when None. A
            seam for tests (same signature).
        allow_merge_into_protected: let ``merge`` land on a branch matching
            `PROTECTED_BRANCHES` (``main``, ``master``, ``release*``). Off by
            default: the model is told to leave the sandbox branch for the
            user to merge.
        isolation: the toolkit's confinement, applied to every git call
            (widened to the repository and the scratch directory); None runs
            git unconfined.
        on_restore: called now, with the worktree directory and the
            committer identity its ``bash`` had, when `branch` was loaded with
            an active sandbox whose worktree is still there (it is re-attached);
            the toolkit points its tools at it. A sandbox whose worktree is
            gone is not re-attached, and the next call says so.

    Returns:
        The ``sandbox`` Tool, bound to `branch`.

    Raises:
        ValueError: the workspace root is not a directory.
        TypeError: `branch` is not a Branch, `allow_merge_into_protected` not a
            bool, or a hook (`on_switch`, `runner`, `on_restore`) not callable.
    """
    if not isinstance(branch, Branch):
        raise TypeError(f"branch must be a Branch, got {branch!r}")
    if not isinstance(allow_merge_into_protected, bool):
        raise TypeError(
            f"allow_merge_into_protected must be a bool, got {allow_merge_into_protected!r}"
        )
    for name, hook in (("on_switch", on_switch), ("runner", runner), ("on_restore", on_restore)):
        if hook is not None and not callable(hook):
            raise TypeError(f"{name} must be callable or None, got {hook!r}")
    workspace = Workspace.at(workspace_root)
    git = Git() if runner is None else Git(runner=runner)
    handler = _Sandbox(
        workspace,
        on_switch,
        git,
        isolation,
        allow_protected=allow_merge_into_protected,
        state=branch.tool_state,
    )
    record = branch.tool_state.get(STATE_KEY)
    if record is not None:
        # A branch saved with an active sandbox (a load calls this factory
        # again): a few stats and one directory listing, no git call.
        recalled = _recall(record, workspace)
        if isinstance(recalled, _Lost):
            handler.lost = recalled
            branch.tool_state.pop(STATE_KEY, None)
        else:
            handler.session, handler.identity = recalled
            if on_restore is not None:
                on_restore(recalled[0].workspace, recalled[1])
    return Tool(
        name="sandbox",
        request_model=SandboxRequest,
        description=_DESCRIPTION + ("" if allow_merge_into_protected else _PROTECTED_RULE),
        handler=handler,
        bound_to=branch.id,
        response_model=SandboxResponse,
        hints=ToolHints("Work in a git sandbox", destructive=True),
    )

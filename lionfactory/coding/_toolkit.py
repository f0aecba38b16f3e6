"""`coding_toolkit()`: the standalone tools, composed with one branch's policy.

There is one implementation of every operation, so a fix to a standalone tool
reaches the toolkit too and the two cannot drift apart. The toolkit calls the
standalone factories (`reader_tool`, `editor_tool`, ...) with the options
that carry its policy, and composes the tools they return:

* the read-before-edit guard, as the editor's ``check`` (`_guard`), which
  the editor calls on the path it resolved itself;
* images as data URLs, as the reader's ``images=True``;
* evidence bookkeeping for calls made outside `Branch.act`;
* retargeting to a sandbox worktree while one is active: every tool, the
  sub-agent included, asks the toolkit's one `ActiveWorkspace` at call time;
* one process isolation, resolved here once (default ``"auto"``) and handed
  to every tool that starts a program, to the sandbox's git and to
  subagents, which can only narrow it;
* user hooks, in tiers (security, then the tool's own, then ``"*"``), and
  the nudge post hook;
* checkpoints (`_checkpointing`): the workspace recorded before each call
  that can change files, so `Branch.rewind` can put it back.

The request models, defaults, keys and error texts are the standalone tools'
own, because the standalone handler does the work. Everything stateful lives
in one `_Toolkit` object made per factory call, so two branches built from
the same arguments share nothing, and a clone (which calls the factory again)
starts clean and derives its evidence from its own copied view.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from lionfactory._call import CallContext, call_context, current_call
from lionfactory._catalogue import (
    ALL_CODING_TOOLS,
    DEFAULT_CODING_TOOLS,
    RUNS_PROGRAMS,
    WORKSPACE_TOOLS,
    workspace_factory,
)
from lionfactory._checkpoints import CheckpointEntry
from lionfactory._evidence import FileEvidence, asking_for_evidence
from lionfactory._os.environment import EnvPolicy
from lionfactory._os.isolation import Isolation, child_isolation, workspace_isolation
from lionfactory._os.workspace import Workspace
from lionfactory._tool import Tool, run_pre_hooks
from lionfactory.coding._active import ActiveWorkspace
from lionfactory.coding._checkpointing import CallPlan, Checkpointer, plan_call
from lionfactory.coding._guard import EvidenceCheck, EvidenceStore
from lionfactory.coding._nudges import NudgeHook, NudgeRule, default_nudge_rules
from lionfactory.coding._snapshots import SnapshotError, refuse_root
from lionfactory.coding.rules import Rule, RuleHook, hinted_rules, rule_set
from lionfactory.errors import ToolDenied
from lionfactory.tools._code_intel import CodeIntel, build_code_intel, while_checking
from lionfactory.tools.jobs import job_running, jobs_tool

if TYPE_CHECKING:
    from lionfactory._branch import Branch

__all__ = ["ALL_CODING_TOOLS", "DEFAULT_CODING_TOOLS", "coding_toolkit"]

# `ALL_CODING_TOOLS` (every tool the toolkit can build, in the order it
# returns them) and `DEFAULT_CODING_TOOLS` (built when ``tools`` is omitted)
# are the catalogue's ``coding`` column. ``jobs`` is in neither: it comes
# with ``bash`` (right after it) whenever bash is built.


TOOLKIT_BASH_TIMEOUT_MS = 120_000
"""The toolkit's bash timeout for a call that names none (as Claude Code's)."""


def _workspace_tool(
    name: str,
    root: Path | Workspace,
    isolation: Isolation,
    check: EvidenceCheck,
    git_env: Mapping[str, str] | None = None,
    intel: CodeIntel | None = None,
    max_output_bytes: int | None = None,
) -> Tool:
    """Workspace tool `name` for `root`: one that follows an active sandbox into its worktree.

    `check`: the read-before-edit guard, handed to the editor.
    `git_env`: in a sandbox, the committer identity bash adds to the
    environment (variables the user set themselves win).
    `intel`: the type checker's servers for `root` (None: the engine is
    off), shared by code_nav and the editor's diagnostics after edits.
    """
    options: dict[str, Any] = {"isolation": isolation} if name in RUNS_PROGRAMS else {}
    if name == "bash" and git_env:
        options["env"] = {**git_env, **os.environ}
    if name == "bash":
        # A test suite often runs longer than the standalone 30 s.
        options["default_timeout"] = TOOLKIT_BASH_TIMEOUT_MS
        if max_output_bytes is not None:
            options["max_output_bytes"] = max_output_bytes
    if name == "reader":
        # The toolkit's reader fetches nothing remote: an agent editing code has
        # no business reaching the network through its file reader.
        options["allowed_hosts"] = ()
        # Screenshots and plots the code made, as data URLs for a multimodal model.
        options["images"] = True
    if name == "editor":
        options["check"] = check
        if intel is not None:
            options["diagnostics"] = intel.editing()
    if name == "code_nav":
        options["engine"] = "auto" if intel is not None else "ast"
        options["code_intel"] = intel
    return workspace_factory(name)(workspace_root=root, **options)


_HOOK_KINDS = ("security", "pre", "post", "on_error")

Hooks = Mapping[str, Mapping[str, Callable[..., Any] | Sequence[Callable[..., Any]]]]

_EDITOR_RULE = (
    "\n\nIn this toolkit, `edit`, `multi_edit`, `insert`, a `write` over an existing file and "
    "an `apply_patch` that updates or deletes files need this conversation to have read each "
    "file's current content first (a `write` over an existing file needs a read of the whole "
    "file); passing the read's `content_hash` as `expected_hash` proves it too. A read that "
    "was evicted or compacted out of the context no longer counts."
)


def _normalise_hooks(hooks: Hooks | None) -> dict[str, dict[str, tuple[Callable[..., Any], ...]]]:
    if hooks is None:
        return {}
    if not isinstance(hooks, Mapping):
        raise TypeError(f"hooks must map tool names to hook kinds, got {hooks!r}")
    out: dict[str, dict[str, tuple[Callable[..., Any], ...]]] = {}
    for name, kinds in hooks.items():
        if name != "*" and name not in ALL_CODING_TOOLS and name != "jobs":
            raise ValueError(
                f"hooks key must be '*' or one of {', '.join(ALL_CODING_TOOLS)}; got {name!r}"
            )
        if not isinstance(kinds, Mapping):
            raise TypeError(
                f"hooks[{name!r}] must map 'pre'/'post'/'on_error' to hooks, got {kinds!r}"
            )
        entry: dict[str, tuple[Callable[..., Any], ...]] = {}
        for kind, value in kinds.items():
            if kind not in _HOOK_KINDS:
                raise ValueError(
                    f"hook kind must be 'security', 'pre', 'post' or 'on_error'; got {kind!r}"
                )
            funcs = (value,) if callable(value) else tuple(value)
            for func in funcs:
                if not callable(func):
                    raise TypeError(f"hooks[{name!r}][{kind!r}] holds a non-callable: {func!r}")
            entry[kind] = funcs
        out[name] = entry
    return out


@attrs.define(eq=False)
class _Toolkit:
    """The per-branch state of one `coding_toolkit()` call."""

    branch: Branch
    where: ActiveWorkspace
    home: dict[str, Tool]
    isolation: Isolation
    check: EvidenceCheck
    max_output_bytes: int | None = None
    # The standalone tools built for the sandbox directory last asked about.
    away: tuple[Workspace, dict[str, Tool]] | None = None
    # Whether code_nav and the editor use a type checker ("auto") or not ("ast").
    code_engine: str = "ast"
    # The type checker of each root the tools have worked in (home, sandboxes).
    intels: dict[Path, CodeIntel] = attrs.field(factory=dict)
    server_command: tuple[str, ...] | None = None

    def intel_for(self, workspace: Workspace) -> CodeIntel | None:
        """The type checker's servers for `workspace`, made on first use; None when off."""
        if self.code_engine == "ast":
            return None
        intel = self.intels.get(workspace.root)
        if intel is None:
            isolation = self.where.isolation if self.where.in_sandbox else None
            intel = build_code_intel(
                workspace, isolation=isolation or self.isolation, command=self.server_command
            )
            if intel is None:
                return None
            self.intels[workspace.root] = intel
        return intel

    def warm(self, name: str, request: Any) -> None:
        """Start the type checker early: at the first call that concerns a Python file.

        The server then indexes the workspace while the model reads, so the
        first edit's diagnostics need not wait for the start. Not at toolkit
        build time: a factory does no I/O, and a toolkit that is only listed,
        cloned or served never needs a 50 MB server.
        """
        if name not in ("reader", "editor", "code_nav"):
            return
        path = getattr(request, "file_path", None) or getattr(request, "path", None)
        patch = getattr(request, "patch", None)
        if not (isinstance(path, str) and path.endswith(".py")) and not patch:
            return
        intel = self.intels.get(self.active.root)
        if intel is not None:
            with contextlib.suppress(Exception):
                intel.warm()

    async def late_diagnostics(self) -> dict[str, Any] | None:
        """The diagnostics of an earlier edit that arrived after it returned, once."""
        intel = self.intels.get(self.active.root)
        return await intel.late_report() if intel is not None else None

    async def close_branch(self, branch_id: Any) -> None:
        """End the type checker's servers of `branch_id`, in every root, and its first snapshot."""
        for intel in self.intels.values():
            await intel.close_branch(branch_id)
        if self.checkpointer is not None:
            await self.checkpointer.close_branch(branch_id)

    checkpointer: Checkpointer | None = None

    @property
    def active(self) -> Workspace:
        """The workspace the tools work in now."""
        return self.where.current

    @property
    def tools(self) -> dict[str, Tool]:
        """The standalone tools for the active workspace (built once per sandbox)."""
        current = self.where.current
        if not self.where.in_sandbox:
            return self.home
        if self.away is None or self.away[0] is not current:
            isolation = self.where.isolation or self.isolation
            self.away = (
                current,
                {
                    name: _workspace_tool(
                        name,
                        current.root,
                        isolation,
                        self.check,
                        self.where.git_env,
                        self.intel_for(current),
                        self.max_output_bytes,
                    )
                    for name in self.home
                },
            )
        return self.away[1]

    @property
    def store(self) -> EvidenceStore:
        """Evidence of calls made outside `Branch.act` (the guard's own store)."""
        return self.check.store

    async def call(self, name: str, request: Any) -> Any:
        """Run the current standalone handler for `name`, checkpointed when it can change files."""
        handler = self.tools[name].handler
        return await self.checkpointed(name, request, lambda: self._call(handler, name, request))

    async def checkpointed(self, name: str, request: Any, run: Callable[[], Awaitable[Any]]) -> Any:
        """Run `run()` between the checkpoint before the call and the record of its changes.

        A checkpoint that cannot be taken (a full disk, say) refuses the
        call: it would change files no rewind could put back.
        """
        if self.checkpointer is not None:
            await self._close_ended_jobs()
        plan = None if self.checkpointer is None else plan_call(name, request, self.active)
        if plan is None or self.checkpointer is None:
            return await self._then_close_jobs(name, run)
        # A sandbox merge changes the home checkout, wherever the tools work now.
        workspace = self.where.home if name == "sandbox" else self.active
        try:
            entry = await self.checkpointer.before(workspace, name, plan.paths)
        except SnapshotError as exc:
            raise ToolDenied(
                f"No checkpoint could be taken before this call, so it did not run: {exc.message}",
                name,
            ) from None
        record = _RecordAfter(self.checkpointer, workspace, entry, plan)
        result: Any = None
        try:
            if plan.paths is None or plan.job_started or plan.job_ended:
                result = await run()
            else:
                # An edit's record can be taken while the type checker checks
                # the edit: its files are written by then, and the checker
                # runs in a process of its own (see `_RecordAfter`).
                with while_checking(record.early):
                    result = await run()
            return result
        finally:
            # Recorded even when the call failed or was cancelled: it may have
            # changed files before it stopped.
            with anyio.CancelScope(shield=True):
                await record(result)

    async def _then_close_jobs(self, name: str, run: Callable[[], Awaitable[Any]]) -> Any:
        """Run a call that takes no checkpoint; after a ``jobs`` call, close ended jobs' windows."""
        result = await run()
        if name == "jobs" and self.checkpointer is not None:
            await self._close_ended_jobs()
        return result

    async def _close_ended_jobs(self) -> None:
        """A job that ended by itself gets its end checkpoint (best effort: never fails a call)."""
        assert self.checkpointer is not None
        with contextlib.suppress(SnapshotError):
            await self.checkpointer.close_ended_jobs()

    async def _call(self, handler: Callable[[Any], Awaitable[Any]], name: str, request: Any) -> Any:
        """Run `handler`, asking it for file evidence.

        Under `Branch.act` the evidence lands on the tool message (and leaves
        with it); outside, in a call context of its own, it goes to `store`.
        """
        running = current_call()
        if running is not None:
            self.warm(name, request)
            with asking_for_evidence(running):
                return await handler(request)
        local = CallContext(call_id="", tool=name, branch_id=self.branch.id)
        with call_context(local), asking_for_evidence(local):
            self.warm(name, request)
            response = await handler(request)
        for evidence in FileEvidence.all_from_metadata(local.metadata):
            self.store.record(evidence)
        return response

    def evidence_paths(self) -> list[str]:
        """Paths with evidence in the active view or the local store (for nudges)."""
        paths = {
            evidence.path
            for m in self.branch.messages
            if m.role == "tool"
            for evidence in FileEvidence.all_from_metadata(m.metadata)
        }
        return sorted(paths | set(self.store.by_path))


@attrs.frozen
class _SecurityRecheck:
    """The security hooks once more, on the arguments the other pre hooks produced.

    Security hooks run first so that no user hook (a logger, a ``"*"`` hook
    with side effects) sees a call the policy refuses. A later pre hook may
    rewrite the arguments, though, so the policy also judges the final ones;
    without this a rewrite could smuggle ``rm -rf`` past a check it passed.
    """

    hooks: tuple[Callable[..., Any], ...]

    async def __call__(self, tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await run_pre_hooks(self.hooks, tool_name, arguments, kind="security")


def _tool_hooks(
    hook_map: Mapping[str, Mapping[str, tuple[Callable[..., Any], ...]]], name: str
) -> dict[str, list[Callable[..., Any]]]:
    """The hooks of tool `name`, in tier order: security, the tool's own, then ``"*"``."""
    tiers = {
        kind: [f for key in (name, "*") for f in hook_map.get(key, {}).get(kind, ())]
        for kind in _HOOK_KINDS
    }
    security = tiers.pop("security")
    if security and tiers["pre"]:
        tiers["pre"].append(_SecurityRecheck(tuple(security)))
    tiers["pre"][:0] = security
    return tiers


_AFTER_TIMEOUT = 120.0
"""Seconds the snapshot after a call may take (it runs shielded from cancellation)."""


@attrs.define(eq=False)
class _RecordAfter:
    """The record after one checkpointed call, taken once: early, or as the call ends.

    `early` takes it during the editor's wait for the diagnostics of its
    change (`while_checking`), when the change is done and only the type
    checker still works: the record, about 0.4 ms of hashing and
    bookkeeping, then costs the call nothing. A call that never gets there
    (no Python file, no server, a failed change) and a call the first
    snapshot is still being taken for (it starts as the record is made, and
    its git processes would take the cores the type checker needs) is
    recorded as it ends, as before. Either way the record is complete
    before the call returns.
    """

    checkpointer: Checkpointer
    workspace: Workspace
    entry: CheckpointEntry
    plan: CallPlan
    done: bool = False

    async def early(self) -> None:
        """Take the record now, unless the first snapshot of the workspace is still pending.

        Shielded, as the record at the end is: a call cancelled meanwhile
        would otherwise leave it half taken, to be taken again from the start.
        """
        if not self.checkpointer.first_snapshot_pending(self.workspace):
            with anyio.CancelScope(shield=True):
                await self(None)

    async def __call__(self, result: Any) -> None:
        """Take the record (`Checkpointer.after`), unless it was taken already."""
        if self.done:
            return
        plan = self.plan
        with anyio.move_on_after(_AFTER_TIMEOUT), contextlib.suppress(SnapshotError):
            started = getattr(result, "job_id", None) if plan.job_started else None
            await self.checkpointer.after(
                self.workspace,
                self.entry,
                job_started=plan.job_started,
                job_ended=plan.job_ended,
                job_id=started if isinstance(started, str) else plan.job_id,
            )
            self.done = True


@attrs.frozen
class _Checkpointed:
    """A tool handler (jobs, sandbox) run between the toolkit's checkpoints."""

    kit: _Toolkit
    name: str
    handler: Callable[[Any], Awaitable[Any]]

    async def __call__(self, request: Any) -> Any:
        return await self.kit.checkpointed(self.name, request, lambda: self.handler(request))

    async def close_branch(self, branch_id: Any) -> None:
        """The wrapped handler's own (Branch.aclose asks the handler), if it has one."""
        closer = getattr(self.handler, "close_branch", None)
        if closer is not None:
            await closer(branch_id)


@attrs.frozen
class _Delegate:
    """A toolkit handler that runs the standalone handler of the active root."""

    kit: _Toolkit
    name: str

    async def __call__(self, request: Any) -> Any:
        return await self.kit.call(self.name, request)

    async def close_branch(self, branch_id: Any) -> None:
        """End what the toolkit holds for `branch_id` (its type checker's servers)."""
        await self.kit.close_branch(branch_id)


@attrs.frozen
class _LateDiagnostics:
    """A post hook: diagnostics an earlier edit waited for in vain ride on the next result."""

    kit: _Toolkit

    async def __call__(
        self, tool: str, arguments: dict[str, Any], result: Any
    ) -> dict[str, Any] | None:
        if not isinstance(result, dict) or not self.kit.intels:
            return None
        late = await self.kit.late_diagnostics()
        if late is None:
            return None
        return {**result, "late_diagnostics": late}


@attrs.frozen
class _DelegateTargets:
    """A toolkit tool's targets: those the standalone tool of the active root states."""

    kit: _Toolkit
    name: str

    def __call__(self, request: Any) -> tuple[str, ...]:
        targets = self.kit.tools[self.name].targets
        return () if targets is None else tuple(targets(request))


def coding_toolkit(
    branch: Branch,
    *,
    workspace_root: str | Path | None = None,
    tools: Sequence[str] | None = None,
    hooks: Hooks | None = None,
    notify: bool = True,
    notify_threshold: float = 0.7,
    notify_max_tokens: int = 200_000,
    nudge_rules: Sequence[NudgeRule] | None = None,
    allow_merge_into_protected: bool = False,
    keep_default_nudges: bool = False,
    isolation: str | Isolation = "auto",
    network: str = "none",
    rules: Sequence[Rule | Mapping[str, Any]] | None = None,
    mode: str | None = None,
    env_policy: EnvPolicy | None = None,
    exposed_paths: Sequence[str | os.PathLike[str]] = (),
    code_engine: str = "auto",
    _code_server: Sequence[str] | None = None,
    max_output_bytes: int | None = None,
    checkpoints: bool = True,
) -> list[Tool]:
    """Build the coding tools for one branch: standalone tools plus branch policy.

    Args:
        branch: the branch the tools serve (its active view holds the
            read-before-edit evidence; nudges read its token estimate).
        workspace_root: the workspace (default: the current directory,
            resolved now).
        tools: which tools to build, any of `ALL_CODING_TOOLS`; default
            `DEFAULT_CODING_TOOLS`. They come back in `ALL_CODING_TOOLS` order.
        hooks: ``{tool name or "*": {"security"|"pre"|"post"|"on_error": hook
            or [hooks]}}``. Order: ``security`` hooks (pre hooks for policy:
            the tool's own, then ``"*"``'s) always run first; then ``pre``
            hooks, the tool's own before ``"*"``'s; then, if there were any,
            the security hooks once more on the arguments those produced.
            ``post`` and ``on_error`` hooks run the tool's own before
            ``"*"``'s, and the nudge post hook last.
        notify: add nudges (a ``system`` field) to results.
        notify_threshold: context usage (a fraction of `notify_max_tokens`)
            at which the context nudge speaks.
        notify_max_tokens: the token budget the context nudge measures against.
        nudge_rules: the rules to run (default: `default_nudge_rules()`,
            fresh for this call). They replace the defaults unless
            `keep_default_nudges` is set.
        keep_default_nudges: run `nudge_rules` after the default rules
            instead of in their place.
        allow_merge_into_protected: let the sandbox merge into ``main``,
            ``master`` or ``release*`` (refused by default; the model is told
            to leave its branch for the user).
        isolation: how bash, the helper programs of search, code_check and
            ast_search, and the sandbox's git are confined: ``"auto"`` (the
            strongest available mechanism, named in the tool descriptions),
            ``"bwrap"``, ``"landlock"``, ``"none"``, or a parent's resolved
            isolation (subagents pass theirs; it can only be narrowed).
        network: the network of confined processes: ``"none"``,
            ``"loopback"`` or ``"full"`` (ignored for an inherited isolation).
        rules: `Rule` objects (or their dicts): allow, ask or deny calls by
            tool and by a glob on each bash command or on the path. The
            strictest matching rule decides; ``ask`` holds the call for a
            person (`Branch.run` raises `ApprovalPending`). Each rule's
            examples are checked now. They run as the first security hook.
        mode: a permission preset expanded to rules before `rules`:
            ``"read_only"`` (editor, bash, sandbox and a real checkpoint
            rewind denied), ``"ask_edits"`` (the same asked),
            ``"accept_edits"`` (edits and rewinds run; bash and sandbox
            asked), or
            ``"auto"`` / None (nothing asked but what `rules` say).
        env_policy: which environment variables the programs the tools start
            get (bash, search, code_check, ast_search); default
            ``EnvPolicy(inherit="core")``: the core names (PATH, HOME, the
            locale, the Python environment's), never one that looks like a
            secret (ignored for an inherited isolation, whose policy holds).
        exposed_paths: paths inside the hidden home that confined commands may
            read besides the toolchain derived from ``PATH`` and the running
            interpreter (ignored for an inherited isolation).
        code_engine: ``"auto"``: when ty is installed, code_nav answers with
            it (cross-file definitions, references, hover, diagnostics) and
            editor results on Python files carry the errors the change
            introduced and resolved; ``"ast"``: neither (code_nav reads
            syntax only, no server is started).
        _code_server: private test seam: the language server's argv in place
            of ``ty server``.
        max_output_bytes: bytes of each stream one ``bash`` answer shows (the
            rest is kept whole for ``jobs``); None: bash's default, 30,000.
        checkpoints: record the workspace before each call that can change
            files (editor changes, bash unless its parse shows it only reads,
            background jobs and their kill, a sandbox merge) in a private
            store under the state directory (``$LIONFACTORY_STATE_DIR``, else
            ``$XDG_STATE_HOME/lionfactory``), so `Branch.rewind` can put files
            and conversation back. Refused for a workspace that is the home
            directory or ``/``.

    Returns:
        The tools, each bound to `branch`.

    Raises:
        ValueError: an unknown tool or hook name, an out-of-range setting, an
            unknown mode, or a rule whose examples contradict it.
        TypeError: a malformed `hooks` mapping.
        ConfigurationError: an explicit isolation mechanism cannot work here,
            or an inherited one would be widened.
    """
    # The options exactly as given, before any is normalised: what sub-agents get.
    given = dict(locals())
    names = _selected_tools(tools)
    _check_options(
        notify_threshold,
        notify_max_tokens,
        allow_merge_into_protected=allow_merge_into_protected,
        keep_default_nudges=keep_default_nudges,
        checkpoints=checkpoints,
    )
    hook_map = _normalise_hooks(hooks)
    if code_engine not in ("auto", "ast"):
        raise ValueError(f"code_engine must be 'auto' or 'ast', got {code_engine!r}")
    workspace = Workspace.at(workspace_root)
    given_rules = rule_set(mode, rules)
    confinement = _toolkit_isolation(
        isolation, workspace.root, network, env_policy, tuple(exposed_paths)
    )
    check = EvidenceCheck(branch, EvidenceStore())
    where = ActiveWorkspace(workspace, home_isolation=confinement)
    kit = _Toolkit(
        branch=branch,
        where=where,
        home={},
        isolation=confinement,
        check=check,
        code_engine=code_engine if {"code_nav", "editor"} & set(names) else "ast",
        server_command=tuple(_code_server) if _code_server is not None else None,
        max_output_bytes=max_output_bytes,
    )
    intel = kit.intel_for(workspace)
    kit.home.update(
        {
            name: _workspace_tool(
                name,
                workspace,
                confinement,
                check,
                intel=intel,
                max_output_bytes=max_output_bytes,
            )
            for name in names
            if name in WORKSPACE_TOOLS
        }
    )
    if checkpoints:
        refused = refuse_root(workspace.root)
        if refused is not None:
            raise ValueError(
                f"checkpoints are refused for {refused} ({workspace.root}): a snapshot would "
                f"copy everything under it; use a project directory, or checkpoints=False"
            )
        kit.checkpointer = Checkpointer(
            branch,
            confinement,
            forget_evidence=kit.store.by_path.clear,
            job_running=functools.partial(job_running, branch.id),
        )
        branch.checkpoint_log.rewinder = kit.checkpointer

    built = _wrapped_workspace_tools(kit)
    if "bash" in names:
        # Background jobs and kept output come with bash: its answers name
        # job and output ids only `jobs` can read. Jobs are per branch.
        built["jobs"] = _with_checkpoints(kit, "jobs", jobs_tool())
        names = _with_jobs(names)
    if "context" in names:
        # Imported here: a toolkit without it (``mcp serve``'s) skips its models.
        from lionfactory.tools.context import context_tool

        built["context"] = context_tool(branch)
    if "sandbox" in names:
        from lionfactory.coding.sandbox import sandbox_tool

        built["sandbox"] = _with_checkpoints(
            kit,
            "sandbox",
            sandbox_tool(
                branch,
                workspace_root=workspace.root,
                on_switch=where.enter,
                allow_merge_into_protected=allow_merge_into_protected,
                isolation=confinement,
                on_restore=where.resume,
            ),
        )
    if "checkpoint" in names:
        if kit.checkpointer is None:
            raise ValueError("the checkpoint tool needs checkpoints=True")
        from lionfactory.coding.checkpoint import checkpoint_tool

        built["checkpoint"] = checkpoint_tool(branch)
    if "subagent" in names:
        from lionfactory.coding.subagent import subagent_tool

        built["subagent"] = subagent_tool(
            branch,
            factory=coding_toolkit,
            # Every option but the ones a sub-agent decides for itself; the
            # child obeys the same hooks, rules and mode: a sub-agent must not
            # be a way around an ask or a denial.
            factory_kwargs={
                **{name: given[name] for name in SUBAGENT_OPTIONS},
                "isolation": confinement,
            },
            workspace=where,
            parent_tools=names,
        )

    nudge = (
        NudgeHook(
            branch=branch,
            # Shallow copies: a stateful rule object passed in kwargs is replayed
            # on every clone, and its state must not cross branches.
            rules=(
                *(default_nudge_rules() if nudge_rules is None or keep_default_nudges else ()),
                *(r if inspect.isroutine(r) else copy.copy(r) for r in nudge_rules or ()),
            ),
            max_tokens=notify_max_tokens,
            threshold=notify_threshold,
            files_with_evidence=kit.evidence_paths,
        )
        if notify
        else None
    )
    # The mode's rules by the tools' own hints, now that every tool is built.
    every_rule = (*given_rules, *hinted_rules(mode, built.values()))
    hook_map = _with_rules(hook_map, every_rule, workspace.root)
    late = _LateDiagnostics(kit) if kit.intels else None
    return [_with_policy(built[name], name, hook_map, nudge, branch, late) for name in names]


NOT_FOR_SUBAGENTS: Mapping[str, str] = {
    "workspace_root": "the subagent tool passes the child's own cwd",
    "tools": "the subagent's permission set chooses the child's tools",
    "network": "the child inherits the parent's resolved isolation, whose network holds",
    "env_policy": "the child inherits the parent's resolved isolation, whose policy holds",
    "exposed_paths": "the child inherits the parent's resolved isolation, whose paths hold",
}
"""The `coding_toolkit` options a sub-agent does not inherit as given, and why."""

SUBAGENT_OPTIONS: tuple[str, ...] = tuple(
    p.name
    for p in inspect.signature(coding_toolkit).parameters.values()
    if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in NOT_FOR_SUBAGENTS
)
"""The `coding_toolkit` options passed on to sub-agents: every other keyword option.

Derived from the signature, so a new toolkit option reaches sub-agents
unless it is named in `NOT_FOR_SUBAGENTS` with its reason. ``isolation`` is
passed as the parent's resolved one (the child can only narrow it).
"""


def _with_rules(
    hook_map: dict[str, dict[str, tuple[Callable[..., Any], ...]]],
    rules: tuple[Rule, ...],
    root: Path,
) -> dict[str, dict[str, tuple[Callable[..., Any], ...]]]:
    """`hook_map` with the rule set as the first ``"*"`` security hook (if there are rules)."""
    if not rules:
        return hook_map
    out = {name: dict(kinds) for name, kinds in hook_map.items()}
    every = out.setdefault("*", {})
    every["security"] = (RuleHook(rules, root), *every.get("security", ()))
    return out


def _with_checkpoints(kit: _Toolkit, name: str, tool: Tool) -> Tool:
    """`tool` with its handler run between checkpoints (when the toolkit takes them)."""
    if kit.checkpointer is None:
        return tool
    return attrs.evolve(tool, handler=_Checkpointed(kit, name, tool.handler))


def _with_jobs(names: tuple[str, ...]) -> tuple[str, ...]:
    """`names` with ``jobs`` right after ``bash``."""
    at = names.index("bash") + 1
    return (*names[:at], "jobs", *names[at:])


def _selected_tools(tools: Sequence[str] | None) -> tuple[str, ...]:
    """The tools to build, in `ALL_CODING_TOOLS` order.

    Raises:
        TypeError: `tools` is a string (a list of names was meant).
        ValueError: an unknown name (the message lists the valid ones).
    """
    if isinstance(tools, str):
        raise TypeError(f"tools must be a list of names, got the string {tools!r}")
    selected = DEFAULT_CODING_TOOLS if tools is None else tuple(tools)
    unknown = [name for name in selected if name not in ALL_CODING_TOOLS]
    if unknown:
        raise ValueError(
            f"unknown coding tool(s) {unknown}; valid names: {', '.join(ALL_CODING_TOOLS)}"
        )
    return tuple(name for name in ALL_CODING_TOOLS if name in selected)


def _check_options(
    notify_threshold: float,
    notify_max_tokens: int,
    **flags: bool,
) -> None:
    """Refuse out-of-range nudge settings and flags that are not bools, at once."""
    if not 0 < notify_threshold <= 1:
        raise ValueError(f"notify_threshold must be in (0, 1], got {notify_threshold!r}")
    if not isinstance(notify_max_tokens, int) or notify_max_tokens < 1:
        raise ValueError(f"notify_max_tokens must be a positive int, got {notify_max_tokens!r}")
    for flag, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{flag} must be a bool, got {value!r}")


def _wrapped_workspace_tools(kit: _Toolkit) -> dict[str, Tool]:
    """The workspace tools with the toolkit's handler: the one of the active root."""
    built: dict[str, Tool] = {}
    for name, tool in kit.home.items():
        description = tool.description + (_EDITOR_RULE if name == "editor" else "")
        built[name] = attrs.evolve(
            tool,
            handler=_Delegate(kit, name),
            description=description,
            targets=None if tool.targets is None else _DelegateTargets(kit, name),
        )
    return built


def _with_policy(
    tool: Tool,
    name: str,
    hook_map: Mapping[str, Mapping[str, tuple[Callable[..., Any], ...]]],
    nudge: NudgeHook | None,
    branch: Branch,
    late: _LateDiagnostics | None = None,
) -> Tool:
    """`tool` with the user's hooks in their tiers, the nudge last, bound to `branch`."""
    extra = _tool_hooks(hook_map, name)
    if late is not None:
        extra["post"].append(late)
    if nudge is not None:
        extra["post"].append(nudge)
    tool = tool.with_hooks(pre=extra["pre"], post=extra["post"], on_error=extra["on_error"])
    return attrs.evolve(tool, bound_to=branch.id)


# Core names only, never a secret-looking one: an agent's commands have no
# use for the API keys of the process that runs the agent.
DEFAULT_ENV_POLICY = EnvPolicy(inherit="core")


def _toolkit_isolation(
    isolation: str | Isolation,
    root: Path,
    network: str,
    env_policy: EnvPolicy | None,
    exposed: tuple[str | os.PathLike[str], ...],
) -> Isolation:
    if isinstance(isolation, Isolation):
        return child_isolation(isolation, root)  # inherited from a parent toolkit
    return workspace_isolation(
        isolation,
        root,
        network=network,
        exposed=exposed,
        env_policy=DEFAULT_ENV_POLICY if env_policy is None else env_policy,
    )


# Report the public import path in manifests and saved branches (as trio does
# for its public API): `lionfactory.coding:coding_toolkit`.
coding_toolkit.__module__ = "lionfactory.coding"

"""The ``subagent`` tool: hand a self-contained task to a child branch and get its answer.

The handler builds a fresh child `Branch` with the parent's chat model, gives
it the coding tools the requested permission set allows (by registering the
toolkit factory itself with a narrowed ``tools`` list), runs
``child.run(instruction)`` and returns only the child's final answer. The
child's messages never enter the parent's log; the parent sees one tool result.

Permission sets (the child never gets ``subagent``, so it cannot recurse):

* ``read_only``: reader, search, code_check, code_nav, ast_search, context;
* ``safe``: those plus editor and bash, with `deny_destructive_commands` as
  a bash ``security`` hook: it runs before every other hook the toolkit was
  given, and again on the arguments they produced;
* ``allow_all``: every coding tool except subagent (sandbox included);
* ``deny_all``: no tools; the child can only answer from the instruction.

A child never gets more than its parent: its tools are the permission set's
tools *that the parent has itself* (`subagent_tool`'s ``parent_tools``; the
toolkit passes its own list), so a parent built with ``tools=["reader",
"subagent"]`` starts an ``allow_all`` child with ``reader`` alone. Isolation
(mechanism, network, hidden paths), hooks, the protected-branch setting and
the workspace come from the parent too: the child's confinement is the
parent's current one, which it can only narrow, and its workspace is a
directory inside the parent's.

Decisions:

* ``max_turns`` outside 1-50 is **clamped**, not rejected (a schema bound would
  turn a harmless 100 into a failed call); the response says so in ``notice``.
* ``cwd`` is resolved inside the parent's *active* workspace (the sandbox
  worktree while the parent has a sandbox) when the call runs, and becomes
  the child's workspace root, so the child works where the parent works and
  cannot reach above it: a child started in a sandbox never touches the home
  checkout, and a ``discard`` drops its edits with the rest.
* The answer is cut to 5,000 characters, with ``[truncated: N more
  characters]`` appended: the parent's context pays for every sub-agent
  answer, so one long report must not crowd out the parent's own work.
* A child that spends every turn without a final answer, or whose model or
  tools raise, gives ``success=False``; the error says what happened.
* A step the child's hooks or rules ask about comes back to the parent: the
  ``subagent`` call itself is held (`StepsHeld`), its reason naming each held
  step (tool, arguments, why). Approving that call approves exactly those
  steps of that child, nothing it does afterwards: the child resumes, and a
  later step that asks holds the parent's call again. Denying it ends the
  child. The paused child lives in this process; a parent reloaded
  elsewhere runs a fresh child, whose steps ask again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
import attrs
from pydantic import Field, field_validator

from lionfactory._approvals import PendingCall
from lionfactory._branch import Branch
from lionfactory._call import current_call
from lionfactory._catalogue import ALL_CODING_TOOLS
from lionfactory._echo import shorten
from lionfactory._messages import Message
from lionfactory._os.workspace import PathRefused, Workspace
from lionfactory._tool import Tool, ToolHints
from lionfactory.coding._active import ActiveWorkspace
from lionfactory.coding.policies import deny_destructive_commands
from lionfactory.errors import ApprovalPending, StepsHeld, TurnLimitReached
from lionfactory.tools._models import ToolModel

__all__ = ["SubagentRequest", "SubagentResponse", "subagent_tool"]

Permissions = Literal["read_only", "safe", "allow_all", "deny_all"]

MAX_RESPONSE_CHARS = 5_000
"""Characters of the child's answer the parent sees."""

MAX_TOOL_ERRORS = 10
"""Tool errors of the child reported to the parent; each is cut to 300 characters."""

DEFAULT_MAX_TURNS = 20
MIN_TURNS, MAX_TURNS = 1, 50

_READ_ONLY = ("reader", "search", "code_check", "code_nav", "ast_search", "context")
PERMITTED_TOOLS: Mapping[str, tuple[str, ...]] = {
    "read_only": _READ_ONLY,
    "safe": (*_READ_ONLY, "editor", "bash"),
    "allow_all": (*_READ_ONLY, "editor", "bash", "sandbox", "checkpoint"),
    "deny_all": (),
}
"""The coding tools each permission set gives the child."""

_SYSTEM = """\
You are a sub-agent. Another agent gave you one task; do it with the tools you
have, then reply with your final answer and no tool call. That reply is all the
other agent will see of your work, so make it complete and self-contained, and
keep it under {limit:,} characters. Your workspace is {cwd}. Permissions:
{permissions} (tools: {tools})."""

_DESCRIPTION = f"""\
Delegate a self-contained task to a sub-agent (a fresh conversation with the
same model) and get back only its final answer. Use it for work that would
otherwise fill your context: exploring a code base, answering a question about
many files, trying something in isolation.

The sub-agent sees nothing of this conversation: put everything it needs in
`instruction`. `permissions` decides its tools:
- read_only (default): reader, search, code_check, code_nav, ast_search, context
- safe: read_only plus editor and bash (destructive commands such as rm -rf,
  git reset --hard, git push --force, sudo are refused)
- allow_all: every coding tool except subagent
- deny_all: no tools; it answers from the instruction alone
`max_turns` (default {DEFAULT_MAX_TURNS}) is clamped to {MIN_TURNS}-{MAX_TURNS}.
`cwd` (a directory in the workspace) becomes the sub-agent's workspace root;
while a sandbox is active, the sub-agent works in the sandbox.
The answer is cut to {MAX_RESPONSE_CHARS:,} characters."""


class SubagentRequest(ToolModel):
    """Arguments of one ``subagent`` call."""

    instruction: str = Field(
        description=(
            "The complete task for the sub-agent, with all the context it needs: it sees "
            "nothing else of this conversation. Say what to return."
        )
    )
    permissions: Permissions = Field(
        default="read_only",
        description=(
            "read_only: read/search/check tools only; safe: plus editor and bash (no "
            "destructive commands); allow_all: every coding tool but subagent; deny_all: none."
        ),
    )
    max_turns: int = Field(
        default=DEFAULT_MAX_TURNS,
        description=(
            f"The most model replies the sub-agent may use (default {DEFAULT_MAX_TURNS}); "
            f"clamped to {MIN_TURNS}-{MAX_TURNS}."
        ),
    )
    cwd: str | None = Field(
        default=None,
        description=(
            "A directory inside the workspace (inside the sandbox while one is active) that "
            "becomes the sub-agent's workspace root (default: the workspace root)."
        ),
    )

    @field_validator("instruction")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("instruction is empty; describe the task for the sub-agent")
        return value


class SubagentResponse(ToolModel):
    """The outcome of one ``subagent`` call."""

    success: bool = Field(description="Whether the sub-agent finished with a final answer.")
    response: str = Field(
        default="",
        description=f"The sub-agent's final answer (at most {MAX_RESPONSE_CHARS:,} characters).",
    )
    error: str | None = Field(
        default=None, description="Why the sub-agent did not finish, and what to do next."
    )
    turns: int = Field(default=0, description="Model replies the sub-agent used.")
    tool_calls: int = Field(default=0, description="Tool calls the sub-agent made.")
    truncated: bool = Field(default=False, description="Whether `response` was cut.")
    tool_errors: list[str] = Field(
        default_factory=list,
        description=(
            f"Errors the sub-agent's tool calls met (refusals, unknown tools, failures), "
            f"oldest first, at most {MAX_TOOL_ERRORS}."
        ),
    )
    permissions: Permissions = Field(
        default="read_only", description="The permission set the sub-agent ran with."
    )
    tools: list[str] = Field(default_factory=list, description="The tools the sub-agent was given.")
    max_turns: int = Field(default=DEFAULT_MAX_TURNS, description="The turn budget after clamping.")
    notice: str | None = Field(
        default=None, description="Something worth knowing that is not an error."
    )


def _clamp(max_turns: int) -> tuple[int, str | None]:
    clamped = min(max(max_turns, MIN_TURNS), MAX_TURNS)
    if clamped == max_turns:
        return clamped, None
    return clamped, (
        f"max_turns {max_turns} is outside {MIN_TURNS}-{MAX_TURNS}; it was clamped to {clamped}."
    )


def _cut(text: str) -> tuple[str, bool]:
    if len(text) <= MAX_RESPONSE_CHARS:
        return text, False
    rest = len(text) - MAX_RESPONSE_CHARS
    return f"{text[:MAX_RESPONSE_CHARS]}\n[truncated: {rest:,} more characters]", True


def _tool_errors(messages: Sequence[Message]) -> list[str]:
    """The errors the child's tool messages carried, as ``"tool: error"`` lines."""
    errors = []
    for message in messages:
        if message.role != "tool":
            continue
        try:
            payload = json.loads(message.content)
        except ValueError:
            continue
        error = payload.get("error") if isinstance(payload, dict) else None
        if error:
            text = f"{message.tool}: {error}"
            errors.append(text if len(text) <= 300 else text[:300] + "...")
    return errors[:MAX_TOOL_ERRORS]


def _with_policy(hooks: Any) -> dict[str, Any]:
    """`hooks` plus `deny_destructive_commands` as the last bash *security* hook.

    The security tier runs before any other hook, so no user hook sees a
    refused command, and again after the pre hooks, so a rewrite cannot slip
    past it.
    """
    merged: dict[str, Any] = {name: dict(kinds) for name, kinds in dict(hooks or {}).items()}
    bash = merged.setdefault("bash", {})
    security = bash.get("security", ())
    bash["security"] = (
        *((security,) if callable(security) else tuple(security)),
        deny_destructive_commands,
    )
    return merged


def _steps(calls: Sequence[PendingCall]) -> str:
    """The held steps of a child, as the person deciding the parent's call reads them."""
    return "; ".join(
        f"{c.tool} {shorten(json.dumps(c.arguments, ensure_ascii=False), 500)} ({c.reason})"
        for c in calls
    )


@attrs.frozen
class _Paused:
    """A child stopped at steps that need approval, and what its call reports."""

    child: Branch
    steps: tuple[PendingCall, ...]
    report: Mapping[str, Any]
    max_turns: int


def _reads_only(branch: Branch, name: str) -> bool:
    tool = branch.tools.get(name)
    return tool is not None and tool.hints is not None and tool.hints.read_only


@attrs.frozen
class _Subagent:
    """The handler: builds, runs and reports one child branch per call."""

    branch: Branch = attrs.field(repr=False)
    factory: Callable[..., Any] = attrs.field(repr=False)
    factory_kwargs: Mapping[str, Any] = attrs.field(repr=False)
    where: ActiveWorkspace
    parent_tools: frozenset[str] | None = None
    # Children paused at held steps, by the parent's call id: the parent's
    # call is held meanwhile, and its approval resumes exactly this child.
    paused: dict[str, _Paused] = attrs.field(factory=dict, repr=False, eq=False)

    def _tools(self, permissions: str) -> tuple[list[str], str | None]:
        """The permission set's tools that the parent has, and a notice naming the others."""
        wanted = PERMITTED_TOOLS[permissions]
        if self.parent_tools is None:
            return list(wanted), None
        if wanted:
            # A coding tool of the parent's that says it only reads joins every
            # set that can read: the tiers follow what each tool says of itself.
            reading = [
                name
                for name in ALL_CODING_TOOLS
                if name in self.parent_tools
                and name not in wanted
                and _reads_only(self.branch, name)
            ]
            wanted = (*wanted, *reading)
        tools = [name for name in wanted if name in self.parent_tools]
        withheld = [name for name in wanted if name not in self.parent_tools]
        if not withheld:
            return tools, None
        return tools, (
            f"The sub-agent got only tools you have yourself; {permissions} would also "
            f"include {', '.join(withheld)}, which you were not given."
        )

    async def __call__(self, request: SubagentRequest) -> SubagentResponse:
        context = current_call()
        call_id = context.call_id if context is not None else None
        await self._forget_settled(call_id)
        paused = self.paused.pop(call_id, None) if call_id is not None else None
        if paused is not None:
            if context is not None and context.approved:
                # The person approved the parent's call as it named these
                # steps: exactly they are approved, on exactly this child.
                for step in paused.steps:
                    paused.child.approve(step.id)
                return await self._finish(
                    paused.child,
                    paused.child.resume(max_turns=paused.max_turns),
                    paused.report,
                    paused.max_turns,
                    call_id,
                )
            await paused.child.aclose()
        max_turns, clamped = _clamp(request.max_turns)
        tools, narrowed = self._tools(request.permissions)
        notice = " ".join(n for n in (clamped, narrowed) if n) or None
        report: dict[str, Any] = {
            "permissions": request.permissions,
            "tools": tools,
            "max_turns": max_turns,
            "notice": notice,
        }
        chat_model = self.branch.chat_model
        if chat_model is None:
            return SubagentResponse(
                success=False,
                error="This branch has no chat model, so it cannot run a sub-agent. "
                "Do the task yourself.",
                **report,
            )
        try:
            cwd = await anyio.to_thread.run_sync(self.where.current.directory, request.cwd)
        except PathRefused as exc:
            return SubagentResponse(success=False, error=f"cwd refused: {exc.message}", **report)
        child = self._child(request, cwd, tools, chat_model)
        return await self._finish(
            child, child.run(request.instruction, max_turns=max_turns), report, max_turns, call_id
        )

    async def _forget_settled(self, current: str | None) -> None:
        """Close paused children whose parent call is no longer held (denied, or gone)."""
        if not self.paused:
            return
        held = {p.id for p in self.branch.pending_calls}
        for call_id in [c for c in self.paused if c != current and c not in held]:
            await self.paused.pop(call_id).child.aclose()

    async def _finish(
        self,
        child: Branch,
        loop: Awaitable[str],
        report: Mapping[str, Any],
        max_turns: int,
        call_id: str | None,
    ) -> SubagentResponse:
        """Run the child's loop (`loop`, a coroutine) and report it; hold its held steps."""
        try:
            answer, error = await self._run(loop, max_turns)
        except ApprovalPending as paused:
            steps = tuple(child.pending_calls)
            if call_id is None:
                # Called outside a branch: there is no call to hold.
                await _close(child)
                return SubagentResponse(
                    success=False,
                    error=(
                        f"The sub-agent stopped at steps that need a person's approval "
                        f"({_steps(paused.calls)}). Make those calls yourself, where they "
                        f"can be approved."
                    ),
                    **report,
                )
            self.paused[call_id] = _Paused(child, steps, dict(report), max_turns)
            raise StepsHeld(
                f"the sub-agent asks to run: {_steps(steps)}. Approving this call approves "
                f"exactly these steps of the sub-agent"
            ) from None
        except BaseException:
            await _close(child)
            raise
        # What the child's tools hold (a type checker's server, background
        # jobs) ends with the task; a finished child branch is not reused.
        await _close(child)
        replies = [m for m in child.messages.record if m.role == "assistant"]
        response, truncated = _cut(answer)
        return SubagentResponse(
            success=error is None,
            response=response,
            error=error,
            turns=len(replies),
            tool_calls=sum(len(m.tool_calls) for m in replies),
            truncated=truncated,
            tool_errors=_tool_errors(child.messages.record),
            **report,
        )

    def _child(
        self, request: SubagentRequest, cwd: Path, tools: list[str], chat_model: Any
    ) -> Branch:
        """The child branch: its own system prompt, the permitted tools rooted at `cwd`."""
        child = Branch(
            system=_SYSTEM.format(
                limit=MAX_RESPONSE_CHARS,
                cwd=cwd,
                permissions=request.permissions,
                tools=", ".join(tools) or "none",
            ),
            name=f"{self.branch.name or 'branch'}-subagent",
            chat_model=chat_model,
        )
        if tools:
            kwargs = {**self.factory_kwargs, "tools": tools, "workspace_root": cwd}
            if self.where.isolation is not None:
                # The parent's confinement where it works now (in a sandbox:
                # the worktree), which the child can only narrow.
                kwargs["isolation"] = self.where.isolation
            if request.permissions == "safe":
                kwargs["hooks"] = _with_policy(kwargs.get("hooks"))
            child.register(self.factory, **kwargs)
        return child

    @staticmethod
    async def _run(loop: Awaitable[str], max_turns: int) -> tuple[str, str | None]:
        """Run the child's loop: its answer, and an error when it failed or ran out of turns.

        Raises:
            ApprovalPending: the child holds steps for a person's decision.
        """
        try:
            answer = await loop
        except TurnLimitReached as exc:
            return exc.text, (
                f"The sub-agent used all {max_turns} turns without a final answer; `response` "
                f"holds its last text. Give it a narrower task or more turns (at most "
                f"{MAX_TURNS})."
            )
        except ApprovalPending:
            raise
        except Exception as exc:
            return "", (
                f"The sub-agent failed: {type(exc).__name__}: {exc}. Retry with a clearer "
                f"instruction, or do the task yourself."
            )
        return answer, None


def subagent_tool(
    branch: Branch,
    *,
    factory: Callable[..., Any],
    factory_kwargs: Mapping[str, Any] | None = None,
    workspace_root: str | os.PathLike[str] | None = None,
    workspace: ActiveWorkspace | None = None,
    parent_tools: Sequence[str] | None = None,
) -> Tool:
    """Build the ``subagent`` tool for `branch`.

    Args:
        branch: the parent branch; its chat model (read at call time) runs the child.
        factory: the tool factory registered on the child, called as
            ``factory(branch=child, **factory_kwargs, tools=[...],
            workspace_root=cwd[, hooks=...])`` (the coding toolkit).
        factory_kwargs: further keyword arguments for `factory`; ``tools``
            and ``workspace_root`` are always overridden, ``hooks`` is
            extended for ``safe``.
        workspace_root: the directory ``cwd`` must stay inside; the current
            directory when None. Resolved once, now.
        workspace: instead of `workspace_root`, a toolkit's active workspace,
            read at each call: the child starts where the parent's tools
            work then (a sandbox worktree while one is active).
        parent_tools: the names of the tools the parent itself has; the
            child gets only those of its permission set that are among them.
            None (a standalone use with no parent toolkit) leaves the
            permission sets as they are.

    Returns:
        The ``subagent`` Tool, bound to `branch`.

    Raises:
        TypeError: `factory` is not callable, `factory_kwargs` is not a
            mapping, or `parent_tools` is not a sequence of names.
        ValueError: the workspace root is not a directory, or both
            `workspace_root` and `workspace` were given.
    """
    if not callable(factory):
        raise TypeError(f"factory must be callable, got {factory!r}")
    if factory_kwargs is not None and not isinstance(factory_kwargs, Mapping):
        raise TypeError(f"factory_kwargs must be a mapping or None, got {factory_kwargs!r}")
    if workspace is not None and workspace_root is not None:
        raise ValueError(
            f"give workspace_root or workspace, not both; got {workspace_root!r} and {workspace!r}"
        )
    if workspace is not None and not isinstance(workspace, ActiveWorkspace):
        raise TypeError(f"workspace must be an ActiveWorkspace or None, got {workspace!r}")
    parents: frozenset[str] | None = None
    description = _DESCRIPTION
    if parent_tools is not None:
        if isinstance(parent_tools, str) or not all(isinstance(t, str) for t in parent_tools):
            raise TypeError(f"parent_tools must be a sequence of tool names, got {parent_tools!r}")
        parents = frozenset(parent_tools)
        mine = [name for name in PERMITTED_TOOLS["allow_all"] if name in parents]
        description += (
            f"\nThe sub-agent only ever gets tools you have yourself: {', '.join(mine) or 'none'}."
        )
    where = workspace or ActiveWorkspace(Workspace.at(workspace_root))
    return Tool(
        name="subagent",
        description=description,
        request_model=SubagentRequest,
        handler=_Subagent(branch, factory, dict(factory_kwargs or {}), where, parents),
        bound_to=branch.id,
        response_model=SubagentResponse,
        # A sub-agent calls a model and whatever tools it is given.
        hints=ToolHints("Delegate to a subagent", destructive=True, open_world=True),
    )


async def _close(child: Branch) -> None:
    """Close a finished child branch, even while the parent call is being cancelled."""
    with anyio.CancelScope(shield=True):
        await child.aclose()

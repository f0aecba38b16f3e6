"""What every framework adapter shares: which tools it offers and how one call runs.

A framework asks two questions of an adapter: which tools are there, and
what did this call produce. Both are answered here once, so the four
adapters differ only in the foreign shapes they build.
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from lionfactory._acting import ActionResult, answer_result, arguments_object, execute_call
from lionfactory._approvals import PendingCall
from lionfactory._branch import Branch
from lionfactory._messages import Message, ToolCall
from lionfactory._tool import Tool
from lionfactory.errors import ApprovalRequired, ToolInputError

__all__ = [
    "Source",
    "ToolSource",
    "is_input_error",
    "missing_extra",
    "model_view",
    "recorded_answer",
    "tool_source",
]

Source = Branch | Tool | Sequence[Tool]
"""What an adapter is built from: a branch (live), one tool, or a list of tools."""


def missing_extra(adapter: str, needs: str, extra: str) -> ImportError:
    """What an adapter raises when its framework is missing: what it needs, and the extra."""
    return ImportError(
        f"{adapter} needs {needs}; install it with `pip install 'lionfactory[{extra}]'`"
    )


@attrs.frozen
class ToolSource:
    """The tools an adapter offers, and where their calls are recorded.

    Attributes:
        branch: the branch whose tools are offered and on which every call is
            recorded, or None for a fixed list.
        fixed: the fixed list's tools by name (empty for a branch).
        owner: the branch id a fixed list's calls run under (no branch
            records them, so they get an id of their own).
    """

    branch: Branch | None
    fixed: Mapping[str, Tool]
    owner: uuid.UUID = attrs.field(factory=uuid.uuid4)
    fixed_pending: dict[str, PendingCall] = attrs.field(factory=dict, repr=False)
    """Held calls of a fixed list (a branch holds its own), by call id."""

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools offered right now (a branch's are looked up at every call)."""
        return self.branch.tools if self.branch is not None else self.fixed

    async def call(
        self, name: str, arguments: Mapping[str, Any] | str, *, call_id: str | None = None
    ) -> ActionResult:
        """Run one call; through a branch it is recorded there as `Branch.act` records it.

        Raises:
            ToolInputError: `arguments` is a string that is not a JSON object.
        """
        if self.branch is not None:
            return await self.branch.act(name, arguments, call_id=call_id)
        call = ToolCall(name=name, arguments=arguments_object(name, arguments))
        if call_id:
            call = call.model_copy(update={"id": call_id})
        action = await execute_call(self.owner, self.fixed, call)
        if action.pending is not None:
            self.fixed_pending[action.pending.id] = action.pending
        return action

    def held(
        self,
        call_id: str,
        name: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> PendingCall | None:
        """The held call of this id (on the branch, or of the fixed list), or None.

        A host that repeats one id for two calls gets them held under ids of
        their own (the branch makes held ids unique, `_sent_as` maps back);
        given the call's `name` and `arguments`, the one that matches them is
        found, never the other call that shares its id.
        """
        if self.branch is None:
            found = self.fixed_pending.get(call_id)
            return found if found is not None and _same(found, name, arguments) else None
        sent = _sent_as(self.branch)
        for pending in self.branch.pending_calls:
            if call_id in (pending.id, sent.get(pending.id)) and _same(pending, name, arguments):
                return pending
        return None

    def decide(
        self,
        call_id: str,
        *,
        approve: bool,
        arguments: Mapping[str, Any] | None = None,
        reason: str = "a person denied the call",
    ) -> None:
        """Approve or deny a held call (as `Branch.approve` / `Branch.deny`)."""
        if self.branch is not None:
            if approve:
                self.branch.approve(call_id, arguments=arguments)
            else:
                self.branch.deny(call_id, reason)
            return
        held = self.fixed_pending[call_id]
        self.fixed_pending[call_id] = attrs.evolve(
            held,
            decision="approved" if approve else "denied",
            approved_arguments=None if arguments is None else dict(arguments),
            denial_reason="" if approve else reason,
        )

    async def carry_out(self, call_id: str) -> ActionResult:
        """Carry out the decision on a held call once; an undecided one stays held."""
        held = self.held(call_id)
        if held is None:
            raise KeyError(f"no held call {call_id!r}")
        if not held.decided:
            return _still_held(held)
        if self.branch is not None:
            (result,) = await self.branch.settle(only=[call_id])
            return result
        del self.fixed_pending[call_id]
        if held.decision == "denied":
            return answer_result(held, "denied")
        call = ToolCall(name=held.tool, arguments=held.run_arguments)
        call = call.model_copy(update={"id": held.id})
        action = await execute_call(self.owner, self.fixed, call, approved=True)
        if action.pending is not None:
            self.fixed_pending[action.pending.id] = action.pending
        return action

    def holds(self, call_id: str) -> bool:
        """Whether the branch holds a call of this id for a person's decision."""
        return self.branch is not None and self.held(call_id) is not None

    async def asks(self, name: str, arguments: Mapping[str, Any]) -> str | None:
        """Whether a hook of tool `name` would ask a person about this call: its reason.

        For hosts that decide *before* running a call whether it needs
        approval (the Agents SDK's ``needs_approval``). Only the pre hooks
        run, on a copy of the arguments, and nothing is recorded: they run
        again when the call itself runs. A hook that refuses or fails here
        says nothing; the real call reports it.
        """
        tool = self.tools.get(name)
        if tool is None:
            return None
        args = dict(arguments)
        for hook in tool.pre:
            try:
                out = hook(name, dict(args))
                if inspect.isawaitable(out):
                    out = await out
            except ApprovalRequired as exc:
                return exc.reason
            except Exception:
                return None
            if isinstance(out, Mapping):
                args = dict(out)
        return None

    async def call_approved(
        self,
        name: str,
        arguments: Mapping[str, Any],
        *,
        call_id: str,
    ) -> ActionResult:
        """Run a call the host's person approved, exactly once.

        Through a branch: the call the branch holds under `call_id` is
        approved (with `arguments` as edited arguments when they differ from
        the held ones) and settled; a call already settled is not run again,
        its recorded result comes back; a call the branch never held (the
        host asked on its own) runs as an approved call and is recorded.
        For a fixed list the call runs as approved.
        """
        branch = self.branch
        if branch is None:
            call = ToolCall(name=name, arguments=dict(arguments)).model_copy(update={"id": call_id})
            return await execute_call(self.owner, self.fixed, call, approved=True)
        held = self.held(call_id, name)
        if held is not None:
            edited = dict(arguments) if dict(arguments) != held.arguments else None
            branch.approve(held.id, arguments=edited)
            (result,) = await branch.settle(only=[held.id])
            return result
        recorded = _recorded(branch, call_id)
        if recorded is not None:
            return recorded
        return await branch._act(name, arguments, call_id, approved=True)


def _same(pending: PendingCall, name: str | None, arguments: Mapping[str, Any] | None) -> bool:
    """Whether `pending` is the call named (any call when neither is given)."""
    if name is not None and pending.tool != name:
        return False
    return arguments is None or pending.arguments == dict(arguments)


def _sent_as(branch: Branch) -> dict[str, str]:
    """``{held id: id the host sent}`` for the calls whose ids the branch made unique."""
    sent: dict[str, str] = {}
    for message in branch.messages.record:
        renamed = message.metadata.get("provider_call_ids") if message.role == "assistant" else None
        if isinstance(renamed, dict):
            sent.update(renamed)
    return sent


def _still_held(held: PendingCall) -> ActionResult:
    return answer_result(held, "held")


def recorded_answer(
    source: ToolSource, call_id: str, name: str, arguments: Mapping[str, Any]
) -> ActionResult | None:
    """The branch's recorded answer to this very call (same id, tool and arguments), if any.

    For hosts that run a call again after an interruption (LangGraph runs
    the whole node again on resume): the call is answered from the record
    instead of running twice. The tool and arguments must match too, so a
    model that reuses ids for different calls is not answered from the past.
    """
    branch = source.branch
    if branch is None:
        return None
    asked = dict(arguments)
    for message in branch.messages.record:
        if message.role == "assistant" and any(
            c.id == call_id and c.name == name and dict(c.arguments) == asked
            for c in message.tool_calls
        ):
            return _recorded(branch, call_id)
    return None


def _recorded(branch: Branch, call_id: str) -> ActionResult | None:
    """The result the branch recorded for `call_id`, rebuilt from its tool message."""
    for message in reversed(branch.messages.record):
        if message.role == "tool" and message.call_id == call_id:
            return _from_message(message, branch.tools.get(message.tool or ""))
    return None


def _from_message(message: Message, tool: Tool | None = None) -> ActionResult:
    try:
        payload = json.loads(message.content)
    except ValueError:
        payload = {"result": message.content}
    payload = payload if isinstance(payload, dict) else {"result": payload}
    error = payload.get("error") if "error_type" in payload else None
    return ActionResult(
        call_id=message.call_id or "",
        tool=message.tool or "",
        arguments={},
        result=None if error is not None else payload,
        error=error if isinstance(error, str) or error is None else str(error),
        error_type=payload.get("error_type") if error is not None else None,
        message=message,
        payload=payload,
        # The same answer the call gave when it ran: the tool's own judgement.
        failed=error is not None or (tool.reports_failure(payload) if tool else False),
    )


def tool_source(source: Source) -> ToolSource:
    """Check what an adapter was given and wrap it.

    Raises:
        TypeError: `source` is not a Branch, a Tool or a list of Tools.
        ValueError: two tools share a name, or a tool is bound to a branch
            (its calls must run through that branch: pass the branch).
    """
    if isinstance(source, Branch):
        return ToolSource(branch=source, fixed={})
    tools = [source] if isinstance(source, Tool) else source
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise TypeError(f"expected a Branch, a Tool or a list of Tools, got {source!r:.200}")
    fixed: dict[str, Tool] = {}
    for tool in tools:
        if not isinstance(tool, Tool):
            raise TypeError(f"expected a Branch, a Tool or a list of Tools, got {tool!r:.200}")
        if tool.bound_to is not None:
            # Its policy (the read-before-edit guard, nudges) reads the branch's
            # messages; run outside that branch, every call would miss them.
            raise ValueError(
                f"tool {tool.name!r} is bound to branch {tool.bound_to}; "
                f"pass that Branch to the adapter instead of its tools"
            )
        if tool.name in fixed:
            raise ValueError(f"two tools are named {tool.name!r}; tool names must be unique")
        fixed[tool.name] = tool
    return ToolSource(branch=None, fixed=fixed)


def model_view(action: ActionResult) -> dict[str, Any]:
    """What the model reads about a call: the tool's response, or the error payload.

    The error payload (``error``, ``error_type``, ``errors`` for invalid
    input) is the one `Branch.act` recorded on the tool message, so a
    framework's model reads exactly what lionfactory's own loop would show it.
    """
    return action.payload


def is_input_error(action: ActionResult) -> bool:
    """Whether the call failed on its arguments (the model can correct and retry)."""
    return isinstance(action.exception, ToolInputError)

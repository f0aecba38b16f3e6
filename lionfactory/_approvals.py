"""Calls held for a person's decision: the `PendingCall` record and the approved-call flag.

A pre or security hook that raises `ApprovalRequired` turns its call into a
`PendingCall` on the branch. The record is plain data (JSON-ready through
`to_dict`/`from_dict`) because it must outlive the process that asked: a
branch saved while a call waits is loaded elsewhere, decided and resumed.

An approval is bound to one call: `approving` names the branch, the call
id, the tool and the arguments as approved, and `approval_for` answers yes
only inside the pipeline of that very call. The tool's handler runs with no
approval at all (`Tool.invoke` clears it), so whatever the call does next (a
sub-agent's loop, a nested tool call, a task it starts) asks again.

The model reads one answer about a held call, whichever route settled it:
`answer_payload` builds it (held, denied, interrupted, must approve) and
`answer_message` encodes it, so the branch, the framework adapters and the
MCP server say the same thing the same way.

Its `status` is what makes an approved call run exactly once. It is set to
``"executing"`` (and, with a store, saved) *before* the call runs, and the
record is removed, with the call's tool message appended, when it is done.
A record found ``"executing"`` after a reload therefore belongs to a process
that stopped while the call ran: it is never run again, the model is told
its effects are unknown.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import attrs

from lionfactory._call import current_call
from lionfactory._messages import Message

__all__ = [
    "Answer",
    "Approval",
    "Decision",
    "PendingCall",
    "Status",
    "answer_message",
    "answer_payload",
    "approval_for",
    "approving",
    "give_approval",
    "hook_name",
    "withdraw_approval",
    "without_approval",
]

Decision = Literal["undecided", "approved", "denied"]
Status = Literal["waiting", "executing"]

_DECISIONS = ("undecided", "approved", "denied")
_STATUSES = ("waiting", "executing")


def _json_object(_instance: Any, attribute: Any, value: Any) -> None:
    if value is None and attribute.name == "approved_arguments":
        return
    if not isinstance(value, dict):
        raise TypeError(f"{attribute.name} must be a dict, got {value!r:.200}")
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{attribute.name} must be JSON-ready: {exc}") from None


@attrs.frozen
class PendingCall:
    """One tool call waiting for (or carrying) a person's decision.

    Attributes:
        id: the tool call's id (the model's, or the framework's).
        tool: the tool's name.
        arguments: the arguments as the model sent them.
        reason: why the hook asked.
        hook: the name of the hook that asked.
        decision: ``"undecided"``, ``"approved"`` or ``"denied"``.
        approved_arguments: the arguments a person edited when approving,
            or None to run `arguments`.
        denial_reason: what the model is told when the call was denied.
        status: ``"waiting"``, or ``"executing"`` once the approved call
            has started (see the module docstring).
    """

    id: str = attrs.field(validator=attrs.validators.instance_of(str))
    tool: str = attrs.field(validator=attrs.validators.instance_of(str))
    arguments: dict[str, Any] = attrs.field(validator=_json_object)
    reason: str = attrs.field(validator=attrs.validators.instance_of(str))
    hook: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    decision: Decision = attrs.field(
        default="undecided", validator=attrs.validators.in_(_DECISIONS)
    )
    approved_arguments: dict[str, Any] | None = attrs.field(default=None, validator=_json_object)
    denial_reason: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    status: Status = attrs.field(default="waiting", validator=attrs.validators.in_(_STATUSES))

    @property
    def decided(self) -> bool:
        """Whether a person approved or denied the call."""
        return self.decision != "undecided"

    @property
    def run_arguments(self) -> dict[str, Any]:
        """The arguments an approved call runs with: the edited ones, else the model's."""
        return dict(self.arguments if self.approved_arguments is None else self.approved_arguments)

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data."""
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PendingCall:
        """A record saved by `to_dict`.

        Raises:
            TypeError, ValueError: the data is not such a record.
        """
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"a saved pending call has unknown fields {unknown}")
        return cls(**dict(data))


@attrs.frozen
class Approval:
    """A person's approval of exactly one call.

    Attributes:
        branch_id: the branch the call runs on (None outside a branch, as
            on the command line).
        call_id: the call's id ("" outside a branch).
        tool: the tool's name.
        arguments: the arguments as approved (the edited ones, if edited).
    """

    branch_id: uuid.UUID | None
    call_id: str
    tool: str
    arguments: dict[str, Any]


_approval: contextvars.ContextVar[Approval | None] = contextvars.ContextVar(
    "lionfactory_approval", default=None
)


def approval_for(tool: str, arguments: Mapping[str, Any]) -> bool:
    """Whether a person approved this very call: this tool, these arguments, this call.

    Inside a branch's call the current `CallContext` must carry the approved
    branch and call id; outside one (the command line) the approval must
    have been given outside one too. Anything else, a nested call or a
    sub-agent's step among them, is not approved.
    """
    approval = _approval.get()
    if approval is None or approval.tool != tool or approval.arguments != dict(arguments):
        return False
    context = current_call()
    if context is None:
        return approval.branch_id is None and approval.call_id == ""
    return (
        context.branch_id == approval.branch_id
        and context.call_id == approval.call_id
        and context.tool == tool
    )


# `approving` as two calls, for `execute_call`, which enters the approval
# and the call context in one ``try`` (an unapproved call enters no scope).
give_approval: Callable[[Approval], contextvars.Token[Approval | None]] = _approval.set
"""Give `approval`; `withdraw_approval` with the token takes it back."""
withdraw_approval: Callable[[contextvars.Token[Approval | None]], None] = _approval.reset
"""Take back the approval `give_approval` gave (its token)."""


@contextlib.contextmanager
def approving(approval: Approval) -> Iterator[None]:
    """Run the block with `approval` given: the named call's asks are taken as answered."""
    token = _approval.set(approval)
    try:
        yield
    finally:
        _approval.reset(token)


@contextlib.contextmanager
def without_approval() -> Iterator[None]:
    """Run the block with no approval: what an approved call does next asks again.

    Tasks and threads started inside copy the context they start in, so a
    sub-agent's loop, a nested tool call or a background job of an approved
    call never sees the approval.
    """
    token = _approval.set(None)
    try:
        yield
    finally:
        _approval.reset(token)


Answer = Literal["held", "denied", "interrupted", "must_approve", "must_approve_unkept"]
"""What a held call's answer says: held (waiting), denied, interrupted (a
process stopped while it ran), or that a person must approve it (the server
keeps it, or, with no session to keep it in, does not)."""

INTERRUPTED = (
    "This approved call was started, but the process running it stopped before it "
    "finished, so whether it had any effect is unknown. It is not run again "
    "automatically: check its effects (read the file, list the directory, run git status) "
    "before calling it again."
)


def answer_payload(pending: PendingCall, kind: Answer) -> dict[str, Any]:
    """The payload the model reads about a held call that did not run (or may not have).

    Args:
        pending: the held call.
        kind: which answer (see `Answer`).

    Returns:
        ``{"status": "awaiting_approval", ...}`` for a held call (the model
        must not repeat it), else an error payload ``{error, error_type}``
        (``ToolDenied``, ``ApprovalInterrupted`` or ``ApprovalPending``,
        the last with the ``call_id``).
    """
    if kind == "held":
        return {
            "status": "awaiting_approval",
            "call_id": pending.id,
            "reason": pending.reason,
            "message": (
                f"This call of {pending.tool!r} did not run: it needs a person's approval "
                f"({pending.reason}). It is held as pending call {pending.id!r}; do not "
                f"repeat it. Continue with other work or wait for the decision."
            ),
        }
    if kind == "denied":
        return {
            "error": f"A person denied this call: {pending.denial_reason}",
            "error_type": "ToolDenied",
        }
    if kind == "interrupted":
        return {"error": INTERRUPTED, "error_type": "ApprovalInterrupted"}
    if kind == "must_approve":
        kept = f"The server keeps it pending for this session as call {pending.id!r}. "
    elif kind == "must_approve_unkept":
        kept = (
            "This request has no session, so nothing was kept: ask the user to approve "
            "it, or use a session whose client can ask the user. "
        )
    else:
        raise ValueError(f"unknown answer kind {kind!r}")
    text = (
        f"A person must approve this call of {pending.tool!r} before it runs "
        f"({pending.reason}); it was not run. {kept}Do not repeat it: tell the user what "
        f"you want to do and why, and continue with other work."
    )
    return {"error": text, "error_type": "ApprovalPending", "call_id": pending.id}


def answer_message(
    pending: PendingCall, payload: Mapping[str, Any], metadata: Mapping[str, Any] | None = None
) -> Message:
    """The tool message carrying `payload` as a held call's answer (one encoding everywhere)."""
    return Message(
        role="tool",
        content=json.dumps(dict(payload), ensure_ascii=False, default=str),
        call_id=pending.id,
        tool=pending.tool,
        metadata=dict(metadata or {}),
    )


def hook_name(hook: Any) -> str:
    """A readable name for a hook: its qualified name, or its class's for an object."""
    name = getattr(hook, "__qualname__", None)
    if not isinstance(name, str):
        name = type(hook).__qualname__
    module = getattr(hook, "__module__", None) or type(hook).__module__
    return f"{module}:{name}" if isinstance(module, str) else name

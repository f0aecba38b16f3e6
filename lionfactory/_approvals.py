"""Calls held for a person's decision: the `PendingCall` record and the approved-call flag.

A pre or security hook that raises `ApprovalRequired` turns its call into a
`PendingCall` on the branch. The record is plain data (JSON-ready through
`to_dict`/`from_dict`) because it must outlive the process that asked: a
branch saved while a call waits is loaded elsewhere, decided and resumed.

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
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import attrs

__all__ = ["Decision", "PendingCall", "Status", "approved_call", "hook_name", "running_approved"]

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


_approved: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "lionfactory_approved_call", default=False
)


def approved_call() -> bool:
    """Whether the call running now was approved by a person (its asks are answered)."""
    return _approved.get()


@contextlib.contextmanager
def running_approved() -> Iterator[None]:
    """Run the block as an approved call: hooks that ask are taken as answered."""
    token = _approved.set(True)
    try:
        yield
    finally:
        _approved.reset(token)


def hook_name(hook: Any) -> str:
    """A readable name for a hook: its qualified name, or its class's for an object."""
    name = getattr(hook, "__qualname__", None)
    if not isinstance(name, str):
        name = type(hook).__qualname__
    module = getattr(hook, "__module__", None) or type(hook).__module__
    return f"{module}:{name}" if isinstance(module, str) else name

"""The context of one tool call, reachable from inside the tool.

`Branch.act` runs each call inside a `CallContext`. A tool reads it with
`current_call()` to learn which branch called it and to leave facts in
`metadata` that the model must not see (the coding toolkit's file evidence,
for one). A contextvar, not a global: concurrent calls in one task group each
see their own context, and a call outside `Branch.act` sees `None`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import attrs

__all__ = ["CallContext", "call_context", "current_call"]


@attrs.define(eq=False)
class CallContext:
    """What a tool may know about the call it is serving.

    Attributes:
        call_id: the id of the tool call (as the model sent it).
        tool: the name of the tool being called.
        branch_id: the id of the branch running the call.
        metadata: private facts the tool records; `Branch.act` stores them on
            the tool message, where the model never sees them.
        wants_evidence: whether the caller (the coding toolkit's guard) asked
            file tools to record what they saw (`lionfactory._evidence`); they
            compute nothing for it otherwise.
    """

    call_id: str
    tool: str
    branch_id: UUID | None = None
    metadata: dict[str, Any] = attrs.field(factory=dict)
    wants_evidence: bool = False


_current: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar(
    "lionfactory_current_call", default=None
)


def current_call() -> CallContext | None:
    """Return the context of the tool call running now, or `None` outside `Branch.act`."""
    return _current.get()


@contextlib.contextmanager
def call_context(context: CallContext) -> Iterator[CallContext]:
    """Make `context` the current call for the duration of the block."""
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)

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
from collections.abc import Callable, Iterator
from typing import Any
from uuid import UUID

import attrs

__all__ = [
    "CallContext",
    "Progress",
    "branch_collected",
    "call_context",
    "current_call",
    "current_progress",
    "enter_call",
    "leave_call",
    "on_branch_collected",
    "reporting_progress",
]


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
        approved: whether a person approved this call (a handler that holds
            steps of its own, the sub-agent, carries them out on approval).
    """

    call_id: str
    tool: str
    branch_id: UUID | None = None
    metadata: dict[str, Any] = attrs.field(factory=dict)
    wants_evidence: bool = False
    approved: bool = False


_current: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar(
    "lionfactory_current_call", default=None
)


def current_call() -> CallContext | None:
    """Return the context of the tool call running now, or `None` outside `Branch.act`."""
    return _current.get()


# `call_context` as two calls, for the one caller that runs every call
# (`execute_call`): the contextvar's own methods, so entering and leaving
# the call costs no Python frame (its scope object cost four).
enter_call: Callable[[CallContext], contextvars.Token[CallContext | None]] = _current.set
"""Make `context` the current call; `leave_call` with the token ends it."""
leave_call: Callable[[contextvars.Token[CallContext | None]], None] = _current.reset
"""End the call `enter_call` began (its token)."""


def call_context(context: CallContext) -> _CallScope:
    """Make `context` the current call for the duration of the block (``with``)."""
    return _CallScope(context)


class _CallScope:
    """The ``with`` block of `call_context`.

    A class rather than a `contextlib.contextmanager` generator: every
    `Branch.act` enters one, and the generator's machinery cost more than
    the tool call it wraps.
    """

    __slots__ = ("_context", "_token")

    def __init__(self, context: CallContext) -> None:
        self._context = context

    def __enter__(self) -> CallContext:
        self._token = _current.set(self._context)
        return self._context

    def __exit__(self, *exc_info: object) -> None:
        _current.reset(self._token)


@attrs.define(eq=False)
class Progress:
    """How far a running call has come, for a transport that reports progress.

    A transport (the MCP server) installs one with `reporting_progress`
    around a call and reads it while the call runs; a tool that has a
    measure of its own progress updates it (bash counts the lines its
    command printed, ``jobs`` ``wait`` the lines of the awaited job). Nothing
    here knows a transport, and a tool finds None when no one reports.

    Attributes:
        lines: lines of output so far (newlines seen).
        counted: whether a tool counted anything (0 lines counted is news;
            no tool counting is none).
    """

    lines: int = 0
    counted: bool = False

    def count_output(self, data: bytes) -> None:
        """Add the lines of a chunk of output (its newlines)."""
        self.lines += data.count(b"\n")
        self.counted = True

    def set_lines(self, lines: int) -> None:
        """Say how many lines of output there are so far (a total, not a step)."""
        self.lines = lines
        self.counted = True

    def message(self) -> str | None:
        """The progress in words, or None when no tool counted anything."""
        if not self.counted:
            return None
        return f"{self.lines} line{'' if self.lines == 1 else 's'} of output so far"


_progress: contextvars.ContextVar[Progress | None] = contextvars.ContextVar(
    "lionfactory_progress", default=None
)


def current_progress() -> Progress | None:
    """The progress a transport reports for the call running now, or None."""
    return _progress.get()


@contextlib.contextmanager
def reporting_progress(progress: Progress) -> Iterator[Progress]:
    """Make `progress` the one tools update for the duration of the block.

    Set before the call starts, it reaches the tool through the tasks and
    worker threads the call runs in (each copies the context it starts in).
    """
    token = _progress.set(progress)
    try:
        yield progress
    finally:
        _progress.reset(token)


# Called with a branch's id when the branch is garbage collected (or the
# interpreter exits) while a tool still keeps something for it: a branch an
# owner dropped without `aclose()` (an evicted server session, a script that
# forgot) still leaves no process running. Hooks must be quick, synchronous
# and must not raise; `aclose()` remains the way to close a branch on time.
_COLLECTED: list[Callable[[UUID], None]] = []


def on_branch_collected(hook: Callable[[UUID], None]) -> None:
    """Have `hook(branch_id)` called when a branch is collected without being closed."""
    if hook not in _COLLECTED:
        _COLLECTED.append(hook)


def branch_collected(branch_id: UUID) -> None:
    """Run every `on_branch_collected` hook for `branch_id` (a branch's finalizer calls it)."""
    for hook in list(_COLLECTED):
        with contextlib.suppress(Exception):  # a finalizer must never raise
            hook(branch_id)

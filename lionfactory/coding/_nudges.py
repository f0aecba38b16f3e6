"""Nudges: short system notes added to a tool result when a pattern calls for one.

A nudge rule is a callable ``rule(snapshot) -> str | None``. After every
toolkit call the nudge post hook builds a `NudgeSnapshot` and asks each rule;
the texts that come back are joined into a ``system`` field of the result.
A rule that raises is logged and skipped: a nudge never breaks a result.

Each `coding_toolkit()` call builds fresh rules and a fresh call history, so
nothing accumulates across branches (rebinding a toolkit to a new branch must
not stack a second set of hooks on the first).

Writing a rule::

    def remind_tests(snapshot: NudgeSnapshot) -> str | None:
        if snapshot.tool == "editor" and snapshot.succeeded:
            return "Run the tests after this change."
        return None

    coding_toolkit(branch, nudge_rules=[*default_nudge_rules(), remind_tests])

Stateful rules are fine; give each toolkit its own instance (pass a factory's
result, not a shared object, if the rule must not see other branches' calls).
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from lionfactory._tool import reports_failure

if TYPE_CHECKING:
    from lionfactory._branch import Branch

__all__ = [
    "BashFailureStreak",
    "CallRecord",
    "ContextUsage",
    "EditsWithoutCheck",
    "NudgeRule",
    "NudgeSnapshot",
    "default_nudge_rules",
]

logger = logging.getLogger("lionfactory.nudges")

_HISTORY = 50


@attrs.frozen
class CallRecord:
    """One toolkit call, as the nudges remember it."""

    tool: str
    action: str | None
    succeeded: bool


@attrs.frozen
class NudgeSnapshot:
    """What a nudge rule sees after one call.

    Attributes:
        tool: the tool just called.
        arguments: its arguments.
        result: its result (do not modify).
        succeeded: whether the result reports success (`Tool.reports_failure`).
        estimated_tokens: the estimated tokens of the branch's active view.
        max_tokens: the toolkit's ``notify_max_tokens``.
        threshold: the toolkit's ``notify_threshold`` (a fraction).
        recent_calls: this toolkit's recent calls, oldest first, this one last.
        files_with_evidence: paths this toolkit may edit without a new read
            (computed on first use: it scans the active view).
        tools: the names of the tools the branch has, or None when not known
            (a snapshot made by hand). A rule that advises a tool checks it
            is there (`has_tool`): the branch of an MCP session has no
            ``context`` tool, for instance.
    """

    tool: str
    arguments: dict[str, Any]
    result: dict[str, Any]
    succeeded: bool
    estimated_tokens: int
    max_tokens: int
    threshold: float
    recent_calls: tuple[CallRecord, ...]
    evidence: Callable[[], Sequence[str]] = attrs.field(repr=False, alias="evidence")
    tools: frozenset[str] | None = None

    def has_tool(self, name: str) -> bool:
        """Whether the branch has tool `name` (True when the tools are not known)."""
        return self.tools is None or name in self.tools

    @functools.cached_property
    def files_with_evidence(self) -> tuple[str, ...]:
        """Paths this toolkit may edit without a new read."""
        return tuple(self.evidence())

    @property
    def usage(self) -> float:
        """The estimated share of the token budget the active view uses."""
        return self.estimated_tokens / self.max_tokens


NudgeRule = Callable[[NudgeSnapshot], "str | None"]


@attrs.define(eq=False)
class ContextUsage:
    """Nudge when the context uses `threshold` of the budget or more.

    It speaks when usage first reaches the threshold, then again only after
    usage grew by `step` more, or after it dropped below and came back, so it
    informs without repeating itself on every call. Its advice is the
    ``context`` tool, so a branch without one hears nothing: there, another
    party owns the conversation (an MCP client keeps its own, and the served
    session's view is not what its model sees).
    """

    step: float = 0.05
    _last: float | None = None

    def __call__(self, snapshot: NudgeSnapshot) -> str | None:
        if not snapshot.has_tool("context"):
            return None
        usage = snapshot.usage
        if usage < snapshot.threshold:
            self._last = None
            return None
        if self._last is not None and usage < self._last + self.step:
            return None
        self._last = usage
        return (
            f"Context usage is about {usage:.0%} of {snapshot.max_tokens:,} tokens "
            f"({snapshot.estimated_tokens:,} estimated). Free space with the context tool: "
            f"compact old tool calls (action='compact') or evict results you no longer need "
            f"(action='evict_action_results')."
        )


@attrs.define(eq=False)
class BashFailureStreak:
    """Nudge after `limit` failed bash calls in a row."""

    limit: int = 3

    def __call__(self, snapshot: NudgeSnapshot) -> str | None:
        if snapshot.tool != "bash" or snapshot.succeeded:
            return None
        streak = 0
        for call in reversed(snapshot.recent_calls):
            if call.tool != "bash":
                continue
            if call.succeeded:
                break
            streak += 1
        if streak and streak % self.limit == 0:
            return (
                f"{streak} bash commands failed in a row. Stop and read their stderr; check the "
                f"working directory (cwd), the program's arguments, and that one command per "
                f"call is used (no pipes or &&)."
            )
        return None


@attrs.define(eq=False)
class EditsWithoutCheck:
    """Nudge after `limit` successful edits or writes with no code_check since.

    Silent on a branch without ``code_check``: the advice is to run it.
    """

    limit: int = 3

    def __call__(self, snapshot: NudgeSnapshot) -> str | None:
        if snapshot.tool != "editor" or not snapshot.succeeded:
            return None
        if not snapshot.has_tool("code_check"):
            return None
        edits = 0
        for call in reversed(snapshot.recent_calls):
            if call.tool == "code_check":
                break
            if call.tool == "editor" and call.succeeded:
                edits += 1
        if edits and edits % self.limit == 0:
            return (
                f"{edits} edits since the last code_check. Run code_check on the files you "
                f"changed before going further."
            )
        return None


def default_nudge_rules() -> list[NudgeRule]:
    """Fresh instances of the default rules (context usage, bash failures, unchecked edits)."""
    return [ContextUsage(), BashFailureStreak(), EditsWithoutCheck()]


@attrs.define(eq=False)
class NudgeHook:
    """The post hook that runs the rules and adds a ``system`` field to dict results."""

    branch: Branch
    rules: tuple[NudgeRule, ...]
    max_tokens: int
    threshold: float
    files_with_evidence: Callable[[], Sequence[str]]
    history: deque[CallRecord] = attrs.field(factory=lambda: deque(maxlen=_HISTORY))

    def __call__(
        self, tool: str, arguments: dict[str, Any], result: dict[str, Any]
    ) -> dict[str, Any] | None:
        own = self.branch.tools.get(tool)
        ok = not (own.reports_failure(result) if own is not None else reports_failure(result))
        action = arguments.get("action") if isinstance(arguments, dict) else None
        self.history.append(CallRecord(tool, action if isinstance(action, str) else None, ok))
        if not isinstance(result, dict) or not self.rules:
            return None
        try:
            snapshot = NudgeSnapshot(
                tool=tool,
                arguments=dict(arguments),
                result=result,
                succeeded=ok,
                estimated_tokens=self.branch.messages.estimate_tokens(),
                max_tokens=self.max_tokens,
                threshold=self.threshold,
                recent_calls=tuple(self.history),
                evidence=self.files_with_evidence,
                tools=frozenset(self.branch.tools),
            )
        except Exception:
            logger.warning("could not build the nudge snapshot", exc_info=True)
            return None
        notes = []
        for rule in self.rules:
            try:
                note = rule(snapshot)
            except Exception:
                logger.warning("nudge rule %r failed", rule, exc_info=True)
                continue
            if note:
                notes.append(str(note))
        if not notes:
            return None
        return {**result, "system": "\n".join(notes)}

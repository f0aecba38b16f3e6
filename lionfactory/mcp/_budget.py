"""Bounding what a served session's branch holds.

A served session's branch records every call, and its record is append-only:
a client that reads a 250 kB file 200 times would make the server hold 50 MB
of results it never looks at again (the MCP client keeps its own
conversation), and 100,000 small calls would hold 100,000 messages. What the
branch needs from an old call is its metadata: the coding toolkit's
read-before-edit guard looks for file evidence there, on tool messages of the
active view.

What a session holds is counted in characters: each message's text and
tool-call arguments, plus `MESSAGE_OVERHEAD` for what every message costs
whatever its text (id, role, time stamp, metadata). Counting text alone let
800 reads of a 150-character file hold 18 times a 5,000-character budget:
small results were never shrunk, and the stubs themselves added up.

When a call leaves a session over its budget, it is compacted down to half
the budget (hysteresis: the next compaction is at least half a budget of new
calls away, so its cost is amortised over them, rather than paid on every
call once the budget is reached). Compaction works oldest first, in two
steps:

1. **Stub** tool results and tool-call arguments: the same message ids,
   roles, metadata (evidence included) and place in the active view, with
   the text replaced by a short note. The guard sees exactly the evidence it
   saw before.
2. **Drop** old calls when stubs alone cannot get there: their assistant and
   tool messages leave the log. A tool message that carries the newest
   evidence of its kind (whole file or part) for its path is kept, with its
   call, so the guard still finds it; older evidence for the same path is
   superseded by it. Only when the kept evidence alone exceeds the target is
   the oldest evidence dropped too: the guard then asks the model to read
   that file again, which is the safe direction. Messages that are not tool
   traffic (a template's system prompt, what a user wrote) are never touched,
   and neither is a call still in flight.

So after every call a session holds at most its budget (at most half of it
right after a compaction), whatever the sizes of the calls, unless the
messages that are never touched exceed it alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs

from lionfactory import Branch
from lionfactory._evidence import FileEvidence
from lionfactory._messages import Message, MessageLog

__all__ = [
    "COMPACTED_KEY",
    "DEFAULT_MEMORY_BUDGET",
    "MESSAGE_OVERHEAD",
    "SessionMemory",
    "SessionStatus",
    "compact",
    "held_chars",
]

DEFAULT_MEMORY_BUDGET = 4_000_000
"""Characters a served session keeps before compacting old calls."""

COMPACTED_KEY = "mcp_compacted_chars"
"""Metadata key on a stub: how many characters of text and arguments the original held."""

MESSAGE_OVERHEAD = 100
"""Characters counted for every message whatever its text: id, role, time stamp, metadata."""


@attrs.frozen
class SessionStatus:
    """What one served session holds.

    Attributes:
        messages: messages in the branch's record.
        held_chars: characters held: message text, tool-call arguments,
            metadata and `MESSAGE_OVERHEAD` per message.
        budget: the session's budget in characters, or None for no limit.
        compacted_messages: messages whose text was replaced by a stub.
        dropped_messages: old messages removed from the log.
        compactions: how many times the session was compacted.
        peak_chars: the most the session held after any call.
    """

    messages: int
    held_chars: int
    budget: int | None
    compacted_messages: int
    compactions: int
    dropped_messages: int = 0
    peak_chars: int = 0


# A stub of a message without metadata holds only its compacted size there:
# ``{"mcp_compacted_chars": 123}``, counted without encoding it.
_LONE_COMPACTED_CHARS = len(json.dumps({COMPACTED_KEY: 0})) - 1


def _metadata_chars(message: Message) -> int:
    if not message.metadata:
        return 0
    if len(message.metadata) == 1 and type(message.metadata.get(COMPACTED_KEY)) is int:
        return _LONE_COMPACTED_CHARS + len(str(message.metadata[COMPACTED_KEY]))
    try:
        return len(json.dumps(message.metadata, ensure_ascii=False, default=str))
    except (ValueError, TypeError, RecursionError):  # not JSON-ready: count its repr
        return len(repr(message.metadata))


def _text_chars(message: Message) -> int:
    size = len(message.content)
    for call in message.tool_calls:
        # A stub's calls have no arguments: "{}" needs no encoder.
        size += (
            len(json.dumps(call.arguments, ensure_ascii=False, default=str))
            if call.arguments
            else 2
        )
    return size


def _chars(message: Message) -> int:
    return MESSAGE_OVERHEAD + _text_chars(message) + _metadata_chars(message)


def held_chars(messages: Sequence[Message]) -> int:
    """Characters the messages hold (see the module docstring for what counts)."""
    return sum(_chars(message) for message in messages)


def _stub(message: Message, size: int | None = None) -> Message:
    """The stub of `message`; `size` is its `_text_chars` when the caller knows it."""
    size = _text_chars(message) if size is None else size
    if message.role == "tool":
        update: dict[str, object] = {"content": f"[compacted by the MCP server: {size:,} chars]"}
    else:
        calls = tuple(
            call.model_copy(update={"arguments": {}}) if call.arguments else call
            for call in message.tool_calls
        )
        update = {"content": "", "tool_calls": calls}
    return message.model_copy(
        update={**update, "metadata": {**message.metadata, COMPACTED_KEY: size}}
    )


def _tool_traffic(message: Message) -> bool:
    """Whether compaction may touch `message`: a tool result or a call-only assistant message."""
    return message.role == "tool" or (message.role == "assistant" and bool(message.tool_calls))


@attrs.frozen
class Compaction:
    """What one `compact` did.

    Attributes:
        stubbed: messages whose text was replaced by a stub.
        dropped: messages removed from the log.
        held: characters the branch holds after it.
    """

    stubbed: int
    dropped: int
    held: int
    sizes: list[int] = attrs.field(factory=list, eq=False, repr=False)
    """The size of each record entry of the compacted log, in record order."""


def compact(branch: Branch, budget: int, sizes: Sequence[int] | None = None) -> Compaction:
    """Compact `branch` until it holds at most ``budget // 2`` (see the module docstring).

    The log is rebuilt with the stubs in place of the originals (same ids,
    order, view and summaries) when stubbing is enough; when calls must be
    dropped, it is rebuilt from the kept messages of the active view.

    Args:
        branch: the branch whose log is compacted.
        budget: the session's budget in characters.
        sizes: `_chars` of every record entry, when the caller counted them
            already (`SessionMemory` does, call by call); counted here otherwise.
    """
    target = budget // 2
    record, _, active, _ = branch.messages.state()
    # Counting every message again (a JSON dump of each one's metadata) made
    # each compaction cost the whole session's length: in a long session,
    # about a third of the server's time. Record entries never change in
    # place, so the sizes counted when they arrived still hold.
    sizes = (
        [_chars(m) for m in record] if sizes is None or len(sizes) != len(record) else list(sizes)
    )
    held = sum(sizes)
    stubs: dict[int, Message] = {}
    for index, message in enumerate(record):
        if held <= target:
            break
        if not _tool_traffic(message) or COMPACTED_KEY in message.metadata:
            continue
        # Without metadata a message's size is the overhead and its text:
        # its text's size needs no second encoding of its arguments.
        known = None if message.metadata else sizes[index] - MESSAGE_OVERHEAD
        stub = _stub(message, known)
        stub_size = _chars(stub)
        if stub_size >= sizes[index]:
            continue  # already as small as a stub: only dropping it helps
        record[index] = stubs[index] = stub
        held += stub_size - sizes[index]
        sizes[index] = stub_size
    # The new log keeps the token estimates of the entries left as they were
    # (estimating every message again made each compaction cost the session's
    # length once more).
    log = branch.messages.with_replaced(stubs) if stubs else branch.messages
    if held <= target:
        if stubs:
            branch.messages = log
        return Compaction(len(stubs), 0, held, sizes)
    kept, held = _drop_oldest(record, sizes, active, target)
    branch.messages = log.kept(kept)
    return Compaction(len(stubs), len(record) - len(kept), held, [sizes[i] for i in kept])


def _drop_oldest(
    record: list[Message], sizes: list[int], active: list[int], target: int
) -> tuple[list[int], int]:
    """The record indices of the active view without its oldest tool traffic, down to `target`.

    Messages outside the active view (already compacted away by a summary)
    go first: the guard never looks at them.
    """
    view = active  # record indices in view order
    held = sum(sizes[i] for i in view)
    answered = {m.call_id for i in view if (m := record[i]).role == "tool"}
    # The newest evidence of each kind for each path: kept while anything else can go.
    newest: dict[tuple[str, bool], int] = {}
    for i in view:
        message = record[i]
        evidence = FileEvidence.from_metadata(message.metadata) if message.role == "tool" else None
        if evidence is not None:
            newest[(evidence.path, evidence.whole_file)] = i
    carriers = set(newest.values())
    carrier_calls = {record[i].call_id for i in carriers}
    dropped: set[int] = set()

    def droppable(i: int, keep_evidence: bool) -> bool:
        message = record[i]
        if not _tool_traffic(message):
            return False
        if message.role == "assistant":
            ids = {call.id for call in message.tool_calls}
            if not ids <= answered:
                return False  # a call still running: its result is yet to come
            return not (keep_evidence and ids & carrier_calls)
        return not (keep_evidence and i in carriers)

    for keep_evidence in (True, False):
        for i in view:
            if held <= target:
                break
            if i not in dropped and droppable(i, keep_evidence):
                dropped.add(i)
                held -= sizes[i]
    return [i for i in view if i not in dropped], held


@attrs.define(eq=False)
class SessionMemory:
    """The running count of what one session's branch holds, and its compactions.

    Each call counts only the messages it added (`MessageLog.record_since`),
    so counting costs the call's own size, not the session's.
    """

    held: int = 0
    compacted: int = 0
    dropped: int = 0
    compactions: int = 0
    peak: int = 0
    # The log counted so far and the size of each of its record entries: a
    # log replaced behind our back (a branch loaded from a store) is counted again.
    _log: MessageLog | None = None
    _sizes: list[int] = attrs.field(factory=list)

    def reset(self) -> None:
        """Count the branch again from scratch at the next call (it was replaced)."""
        self._log = None

    def after_call(self, branch: Branch, budget: int | None) -> None:
        """Count what the last calls added; compact when over `budget`."""
        messages = branch.messages
        if messages is not self._log or messages.total < len(self._sizes):
            self._log, self._sizes, self.held = messages, [], 0
        added = [_chars(message) for message in messages.record_since(len(self._sizes))]
        self._sizes += added
        self.held += sum(added)
        if budget is not None and self.held > budget:
            done = compact(branch, budget, self._sizes)
            self.held = done.held
            self.compacted += done.stubbed
            self.dropped += done.dropped
            self.compactions += 1
            self._log, self._sizes = branch.messages, done.sizes
            if branch.messages.total != len(self._sizes):  # never expected: count afresh
                self._sizes = [_chars(message) for message in branch.messages.record_since(0)]
                self.held = sum(self._sizes)
        self.peak = max(self.peak, self.held)

    def status(self, branch: Branch, budget: int | None) -> SessionStatus:
        """The figures of this session."""
        return SessionStatus(
            messages=branch.messages.total,
            held_chars=self.held,
            budget=budget,
            compacted_messages=self.compacted,
            compactions=self.compactions,
            dropped_messages=self.dropped,
            peak_chars=self.peak,
        )

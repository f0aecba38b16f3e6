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

A compaction costs what it changes, not the session's length: in a long
session the log is thousands of stubs, and walking all of them at every
compaction (every ~90 calls of 20 kB) was a tenth of the server's time. The
session's memory remembers, from one compaction to the next, where stubbing
stopped (everything before it is a stub or cannot shrink), which calls are
answered and which message carries the newest evidence of each path; the
oldest calls are dropped from the front of the log. A log whose view was
evicted or summarised is compacted by looking at its whole view, as before.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence

import attrs

from lionfactory import Branch
from lionfactory._acting import encode_json
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


# `encode_json` writes what json.dumps(..., ensure_ascii=False, default=str)
# writes, without building an encoder per call.
def _metadata_chars(message: Message) -> int:
    if not message.metadata:
        return 0
    if len(message.metadata) == 1 and type(message.metadata.get(COMPACTED_KEY)) is int:
        return _LONE_COMPACTED_CHARS + len(str(message.metadata[COMPACTED_KEY]))
    try:
        return len(encode_json(message.metadata))
    except (ValueError, TypeError, RecursionError):  # not JSON-ready: count its repr
        return len(repr(message.metadata))


def _text_chars(message: Message) -> int:
    size = len(message.content)
    for call in message.tool_calls:
        # A stub's calls have no arguments: "{}" needs no encoder.
        size += len(encode_json(call.arguments)) if call.arguments else 2
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
            already; counted here otherwise.
    """
    log = branch.messages
    # Counting every message again (a JSON dump of each one's metadata) made
    # each compaction cost the whole session's length. Record entries never
    # change in place, so the sizes counted when they arrived still hold.
    counted = (
        [_chars(m) for m in log.record_since(0)]
        if sizes is None or len(sizes) != log.total
        else list(sizes)
    )
    return _Known(log, counted, sum(counted)).compact(branch, budget)


@attrs.define(eq=False)
class _Traffic:
    """What dropping asks of the tool messages of a log, kept up to date as they come and go.

    Attributes:
        answered: call ids of the tool messages, each with how many answer it.
        newest: for each kind of evidence (path, whole file), the id and call
            id of the tool message with the newest one.
        carriers: the ids of the messages in `newest`.
        carrier_calls: the call ids of the messages in `newest`, with how many.
    """

    answered: Counter[str | None] = attrs.field(factory=Counter)
    newest: dict[tuple[str, bool], tuple[str, str | None]] = attrs.field(factory=dict)
    carriers: set[str] = attrs.field(factory=set)
    carrier_calls: Counter[str | None] = attrs.field(factory=Counter)

    def add(self, message: Message) -> None:
        """Count a message that comes after every message counted so far."""
        if message.role != "tool":
            return
        self.answered[message.call_id] += 1
        evidence = FileEvidence.from_metadata(message.metadata)
        if evidence is None:
            return
        kind = (evidence.path, evidence.whole_file)
        superseded = self.newest.get(kind)
        if superseded is not None:
            self._forget_carrier(*superseded)
        self.newest[kind] = (message.id, message.call_id)
        self.carriers.add(message.id)
        self.carrier_calls[message.call_id] += 1

    def remove(self, message: Message) -> None:
        """Forget a message that left the log.

        A carrier leaves only once every other tool message left (see
        `_drop`), so no older evidence of its kind is left to take its place.
        """
        if message.role != "tool":
            return
        _uncount(self.answered, message.call_id)
        if message.id in self.carriers:
            evidence = FileEvidence.from_metadata(message.metadata)
            assert evidence is not None  # it was a carrier for its evidence
            del self.newest[(evidence.path, evidence.whole_file)]
            self._forget_carrier(message.id, message.call_id)

    def _forget_carrier(self, message_id: str, call_id: str | None) -> None:
        self.carriers.discard(message_id)
        _uncount(self.carrier_calls, call_id)


def _uncount(counter: Counter[str | None], key: str | None) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]  # membership means "at least one"


@attrs.define(eq=False)
class _Known:
    """What one log's compactions know of it, kept between them so each costs what it changes.

    In a long session most of the log is stubs already; walking all of it
    again at every compaction (to find the first message left to stub, the
    answered calls, the newest evidence of each path) cost the session's
    length, every ~90 calls: about a tenth of the server's time after a few
    thousand calls.

    Attributes:
        log: the log this describes (a log replaced behind our back is not it).
        sizes: `_chars` of every record entry, in record order.
        held: their sum.
        unstubbed: no record entry before this index can be stubbed: each is
            a stub, not tool traffic, or no larger than its stub. Entries
            never change in place, and a log rebuilt by dropping was first
            walked to its end, so this only moves forward.
        traffic: `_Traffic` of the record entries before `counted`.
        counted: how many record entries `traffic` has seen.
    """

    log: MessageLog
    sizes: list[int]
    held: int
    unstubbed: int = 0
    traffic: _Traffic = attrs.field(factory=_Traffic)
    counted: int = 0

    def count_new(self) -> None:
        """Count the record entries appended since the last count."""
        added = [_chars(message) for message in self.log.record_since(len(self.sizes))]
        self.sizes += added
        self.held += sum(added)

    def compact(self, branch: Branch, budget: int) -> Compaction:
        """`compact` of `branch`, whose log is `log`; this then describes its new log."""
        target = budget // 2
        log, sizes, held = self.log, self.sizes, self.held
        stubs: dict[int, Message] = {}
        start, self.unstubbed = self.unstubbed, log.total
        for index, message in enumerate(log.record_since(start), start=start):
            if held <= target:
                self.unstubbed = index  # not looked at: the next compaction starts here
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
            stubs[index] = stub
            held += stub_size - sizes[index]
            sizes[index] = stub_size
        # The new log keeps the token estimates of the entries left as they
        # were (estimating every message again cost the session's length).
        if stubs:
            log = log.with_replaced(stubs)
        if held <= target:
            branch.messages = self.log = log
            self.held = held
            return Compaction(len(stubs), 0, held, sizes)
        # Stubbing walked the whole record without reaching the target.
        if log.in_append_order():
            # The view is the record: what `traffic` knows of the record is
            # what dropping asks of the view, and the dropped leave it.
            for message in log.record_since(self.counted):
                self.traffic.add(message)
            dropped, held = _drop(log, range(len(log)), sizes, held, target, self.traffic)
            for i in dropped:
                self.traffic.remove(log[i])
            kept = log.without(dropped)
            # Only the entries up to the last dropped one move: the rest is a slice.
            cut = max(dropped, default=-1) + 1
            sizes = [sizes[i] for i in range(cut) if i not in dropped] + sizes[cut:]
            self.counted = kept.total
        else:  # evicted or summarised messages: look at the view afresh
            record, _, view, _ = log.state()
            traffic = _Traffic()
            for i in view:
                traffic.add(record[i])
            in_view = sum(sizes[i] for i in view)
            dropped, held = _drop(record, view, sizes, in_view, target, traffic)
            indices = [i for i in view if i not in dropped]
            kept = log.kept(indices)
            sizes = [sizes[i] for i in indices]
            # What `traffic` knew was of the old record: the new one is counted afresh.
            self.traffic, self.counted = _Traffic(), 0
        self.unstubbed = kept.total
        branch.messages = self.log = kept
        self.sizes, self.held = sizes, held
        return Compaction(len(stubs), log.total - kept.total, held, sizes)


def _drop(
    record: Sequence[Message] | MessageLog,
    view: Sequence[int],
    sizes: list[int],
    held: int,
    target: int,
    traffic: _Traffic,
) -> tuple[set[int], int]:
    """The record indices to drop, oldest first in `view` order, to get `held` down to `target`.

    `record` is indexed by record index (a log in append order by its view
    indices, which are record indices), `held` is what the view holds and
    `traffic` what its tool messages
    answer and carry. Each pass stops once the target is reached, so in a
    long session it visits the dropped messages and the few kept before
    them, not the whole view. A first pass keeps the newest evidence of
    each kind for each path (with its call) and calls still running; only
    when that pass went through the whole view does a second one drop the
    evidence too.
    """
    answered, carriers, carrier_calls = traffic.answered, traffic.carriers, traffic.carrier_calls
    dropped: set[int] = set()

    def droppable(i: int, keep_evidence: bool) -> bool:
        message = record[i]
        if not _tool_traffic(message):
            return False
        if message.role == "assistant":
            ids = [call.id for call in message.tool_calls]
            if not all(call_id in answered for call_id in ids):
                return False  # a call still running: its result is yet to come
            return not (keep_evidence and any(call_id in carrier_calls for call_id in ids))
        return not (keep_evidence and message.id in carriers)

    for keep_evidence in (True, False):
        for i in view:
            if held <= target:
                break
            if i not in dropped and droppable(i, keep_evidence):
                dropped.add(i)
                held -= sizes[i]
    return dropped, held


@attrs.define(eq=False)
class SessionMemory:
    """The running count of what one session's branch holds, and its compactions.

    Each call counts only the messages it added (`MessageLog.record_since`),
    so counting costs the call's own size, not the session's; what one
    compaction learnt of the log (`_Known`) serves the next.
    """

    held: int = 0
    compacted: int = 0
    dropped: int = 0
    compactions: int = 0
    peak: int = 0
    # What is known of the log counted so far: a log replaced behind our
    # back (a branch loaded from a store) is counted again.
    _known: _Known | None = None

    def reset(self) -> None:
        """Count the branch again from scratch at the next call (it was replaced)."""
        self._known = None

    def after_call(self, branch: Branch, budget: int | None) -> None:
        """Count what the last calls added; compact when over `budget`."""
        messages = branch.messages
        known = self._known
        if known is None or messages is not known.log or messages.total < len(known.sizes):
            known = self._known = _Known(messages, [], 0)
        known.count_new()
        self.held = known.held
        if budget is not None and self.held > budget:
            done = known.compact(branch, budget)
            self.held = done.held
            self.compacted += done.stubbed
            self.dropped += done.dropped
            self.compactions += 1
            if branch.messages.total != len(known.sizes):  # never expected: count afresh
                self._known = _Known(branch.messages, [], 0)
                self._known.count_new()
                self.held = self._known.held
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

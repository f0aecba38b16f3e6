"""Bounding what a served session's branch holds.

A served session's branch records every call, and its record is append-only:
a client that reads a 250 kB file 200 times would make the server hold 50 MB
of results it never looks at again (the MCP client keeps its own
conversation). What the branch needs from an old call is its metadata: the
coding toolkit's read-before-edit guard looks for file evidence there, on
tool messages of the active view.

So when a session holds more text than its budget, its oldest tool results
and tool-call arguments are replaced by short stubs: the same message ids,
the same roles, the same metadata (evidence included) and the same place in
the active view, with the bulky text gone. The guard sees exactly the
evidence it saw before. Compaction goes down to half the budget, so it runs
once per half-budget of new text, not after every call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs

from lionfactory import Branch
from lionfactory._messages import Message, MessageLog

__all__ = ["COMPACTED_KEY", "DEFAULT_MEMORY_BUDGET", "SessionStatus", "compact", "held_chars"]

DEFAULT_MEMORY_BUDGET = 4_000_000
"""Characters of message text a served session keeps before compacting old results."""

COMPACTED_KEY = "mcp_compacted_chars"
"""Metadata key on a stub: how many characters the original held."""

_SMALL = 200
"""Messages and arguments at most this long are kept as they are."""


@attrs.frozen
class SessionStatus:
    """What one served session holds.

    Attributes:
        messages: messages in the branch's record.
        held_chars: characters of message text and tool-call arguments held.
        budget: the session's budget in characters, or None for no limit.
        compacted_messages: messages whose text was replaced by a stub.
        compactions: how many times the session was compacted.
    """

    messages: int
    held_chars: int
    budget: int | None
    compacted_messages: int
    compactions: int


def _chars(message: Message) -> int:
    size = len(message.content)
    for call in message.tool_calls:
        size += len(json.dumps(call.arguments, ensure_ascii=False, default=str))
    return size


def held_chars(messages: Sequence[Message]) -> int:
    """Characters of text and arguments the messages hold."""
    return sum(_chars(message) for message in messages)


def _stub(message: Message, size: int) -> Message:
    if message.role == "tool":
        note = f"[result compacted by the MCP server to bound its memory: {size:,} characters]"
        update: dict[str, object] = {"content": note}
    else:
        calls = tuple(
            call.model_copy(update={"arguments": {}}) if call.arguments else call
            for call in message.tool_calls
        )
        update = {"content": "", "tool_calls": calls}
    return message.model_copy(
        update={**update, "metadata": {**message.metadata, COMPACTED_KEY: size}}
    )


def compact(branch: Branch, budget: int) -> tuple[int, int]:
    """Stub the oldest bulky tool messages and calls until the branch holds at most ``budget / 2``.

    The log is rebuilt with the stubs in place of the originals (same ids,
    order, view and summaries), so evidence and the active view are
    unchanged. Only tool messages and assistant messages that carry tool
    calls are stubbed: what the user or the model wrote stays.

    Returns:
        The number of messages stubbed and the characters the branch holds after.
    """
    record, keys, active, summaries = branch.messages.state()
    sizes = [_chars(message) for message in record]
    held = sum(sizes)
    target = budget // 2
    stubbed = 0
    for index, message in enumerate(record):
        if held <= target:
            break
        bulky = sizes[index] > _SMALL and COMPACTED_KEY not in message.metadata
        if not bulky or not (message.role == "tool" or message.tool_calls):
            continue
        stub = _stub(message, sizes[index])
        record[index] = stub
        held += _chars(stub) - sizes[index]
        stubbed += 1
    if stubbed:
        branch.messages = MessageLog.from_state(record, keys, active, summaries)
    return stubbed, held

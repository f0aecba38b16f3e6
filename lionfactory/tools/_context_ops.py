"""The pieces of the ``context`` tool that reason about views: private.

Kept apart from `lionfactory.tools.context` so the tool module reads as
request, response, handler and factory.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence

from lionfactory._branch import Branch
from lionfactory._call import current_call
from lionfactory._messages import ChatModel, Message, ModelReply
from lionfactory.errors import ToolFailure

__all__ = [
    "AUTO_SOURCE_CHARS",
    "DEFAULT_KEEP_LAST",
    "PREVIEW_CHARS",
    "ContextFailure",
    "clamp",
    "close_groups",
    "first_turn_error",
    "one_message_unless",
    "preview",
    "split_view",
    "summarise",
    "tool_groups",
]

PREVIEW_CHARS = 120
"""The longest preview ``get_messages`` shows: enough to recognise a message, cheap enough
to list a long conversation."""

DEFAULT_KEEP_LAST = 5
"""Tool results ``evict_action_results`` keeps by default: the latest few are usually the
ones the next step builds on."""

AUTO_SOURCE_CHARS = 6000
"""The most characters of source text an ``auto`` summary is asked to condense."""

_SUMMARY_SYSTEM = (
    "You condense part of a conversation between a user, an AI assistant and its tools. "
    "Write a short, factual summary that keeps what later turns need: decisions, results, "
    "file names, numbers, errors and open questions. Answer with the summary only."
)


class ContextFailure(ToolFailure):
    """An expected failure the handler turns into ``success=False`` (never escapes)."""


def split_view(branch: Branch) -> tuple[list[Message], list[Message]]:
    """The active view as the model saw it, and the pending turn after it.

    Inside `Branch.act`/`run` for this branch, the assistant message carrying
    the current call is already in the view; the model made the call without
    seeing it, so indices stop before it. Outside (a direct call), the whole
    view is visible and nothing is pending.
    """
    active = branch.messages.active
    context = current_call()
    if context is None or context.branch_id != branch.id:
        return active, []
    for pos in range(len(active) - 1, -1, -1):
        message = active[pos]
        if message.role == "assistant" and any(c.id == context.call_id for c in message.tool_calls):
            return active[:pos], active[pos:]
    return active, []


def clamp(start: int | None, end: int | None, length: int, *, floor: int) -> tuple[int, int]:
    """Clamp ``[start:end)`` into ``[floor, length]``; negative counts as 0, not from the end.

    A model writing ``start=-3`` more likely mistyped than meant Python's
    from-the-end indexing, and a wrapped index would evict the wrong messages;
    so no index ever wraps.
    """
    lo = floor if start is None else min(max(start, 0, floor), length)
    hi = length if end is None else min(max(end, 0), length)
    return lo, max(hi, floor)


def one_message_unless(end: int | None, lo: int, hi: int) -> int:
    """The end of an evict or restore range: `hi` if `end` was given, else one message.

    A model that names only ``start`` most likely means that message; reading
    it as "everything from there on" once hid ten messages at a stroke. One
    message is also the smaller mistake when the model meant more.
    """
    return hi if end is not None else min(lo + 1, hi)


def tool_groups(messages: Sequence[Message]) -> dict[str, str]:
    """Map each tool-call message and tool result to its group key.

    A group is an assistant message with tool calls plus the results that
    answer them; its key is the assistant message's id. A result answers the
    latest earlier call with its call id (models do reuse ids across turns).
    A result whose call is absent forms a group of its own.
    """
    groups: dict[str, str] = {}
    caller: dict[str, str] = {}
    for message in messages:
        if message.role == "assistant" and message.tool_calls:
            groups[message.id] = message.id
            for call in message.tool_calls:
                caller[call.id] = message.id
        elif message.role == "tool":
            owner = caller.get(message.call_id or "")
            groups[message.id] = owner if owner is not None else message.id
    return groups


def close_groups(ids: Collection[str], messages: Sequence[Message]) -> set[str]:
    """`ids` plus every message of `messages` in a tool group that one of them belongs to."""
    groups = tool_groups(messages)
    touched = {groups[i] for i in ids if i in groups}
    closed = set(ids)
    closed.update(m.id for m in messages if groups.get(m.id) in touched)
    return closed


def _first_turn(messages: Sequence[Message]) -> Message | None:
    return next((m for m in messages if m.role != "system"), None)


def first_turn_error(
    visible: Sequence[Message],
    pending: Sequence[Message],
    removed: Collection[str],
    *,
    summary: Message | None = None,
) -> str | None:
    """Why removing `removed` (and inserting `summary`) would break the opening user turn.

    Providers want the turn after the system message to be the user's. A
    change that *causes* an assistant turn to come first is refused; a view
    that already started with one is left to the caller.
    """
    before = _first_turn([*visible, *pending])
    after_messages: list[Message] = []
    placed = False
    for message in visible:
        if message.id not in removed:
            after_messages.append(message)
        elif summary is not None and not placed:
            # replace() puts the summary where the first replaced message was.
            after_messages.append(summary)
            placed = True
    after = _first_turn([*after_messages, *pending])
    if after is None or after.role != "assistant" or (before and before.role == "assistant"):
        return None
    what = "the summary" if after is summary else "an assistant message"
    return (
        f"Refused: this would leave {what} as the first message after the system message, and "
        f"the conversation must open with a user turn. Keep the first user message: start the "
        f"range after it (call get_messages to find it)."
    )


def preview(message: Message) -> str:
    """A one-line preview of a message, at most `PREVIEW_CHARS` characters."""
    text = " ".join(message.content.split())
    if message.tool_calls:
        calls = ", ".join(c.name for c in message.tool_calls)
        text = f"[calls {calls}] {text}".rstrip()
    if len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 1] + "…"
    return text


def _source_text(messages: Sequence[Message]) -> str:
    parts = []
    for message in messages:
        if message.role == "tool":
            parts.append(f"tool result ({message.tool}): {message.content}")
            continue
        if message.content:
            parts.append(f"{message.role}: {message.content}")
        for call in message.tool_calls:
            arguments = json.dumps(call.arguments, ensure_ascii=False, default=str)
            parts.append(f"{message.role} called {call.name}({arguments})")
    return "\n".join(parts)


async def summarise(messages: Sequence[Message], model: ChatModel | None) -> tuple[str, str | None]:
    """Ask `model` for a summary of `messages`; return it and a notice (or None).

    Raises:
        ContextFailure: no model, the model raised, or it answered no text;
            the message tells the model to write the summary itself.
    """
    yourself = "Write the summary yourself and call compact again with `summary` (and auto=false)."
    if model is None:
        raise ContextFailure(
            f"auto=true needs a chat model, and neither the context tool nor the branch has "
            f"one. {yourself}"
        )
    source = _source_text(messages)
    notice = None
    if len(source) > AUTO_SOURCE_CHARS:
        notice = (
            f"The summary was written from the first {AUTO_SOURCE_CHARS:,} of "
            f"{len(source):,} characters of the compacted messages."
        )
        source = source[:AUTO_SOURCE_CHARS] + "\n[... cut]"
    prompt = [
        Message(role="system", content=_SUMMARY_SYSTEM),
        Message(role="user", content=f"Summarise these messages:\n\n{source}"),
    ]
    try:
        reply = await model(prompt, [])
    except Exception as exc:
        raise ContextFailure(
            f"The summary could not be written: the chat model raised "
            f"{type(exc).__name__}: {str(exc)[:300]}. {yourself}"
        ) from None
    text = reply.text.strip() if isinstance(reply, ModelReply) else ""
    if not text:
        raise ContextFailure(f"The chat model returned an empty summary. {yourself}")
    return text, notice

"""The ``context`` tool: let the model inspect and trim its own context.

`context_tool(branch)` builds a Tool bound to one branch. It works on
``branch.messages`` directly, the full record and the active view of
`MessageLog`, with no side-channel in branch metadata. Its actions:

* ``status``: counts (active, pending, evicted, total, by role) and the
  estimated tokens of the active view;
* ``get_messages``: numbered previews (at most 120 characters) of the active
  view, or of the whole record with ``scope="all"``;
* ``evict``, ``evict_action_results``: take messages out of the active view
  (the record keeps them);
* ``restore``: put record messages back, each at its chronological place;
* ``compact``: replace messages of the view with one assistant summary,
  written by the model or, with ``auto=True``, by a chat model.

Decisions worth knowing:

* **The view is the view the model saw.** Through `Branch.act` or
  `Branch.run` the assistant message carrying the current call is already in
  the log (its tool message is appended after the handler returns). View
  indices therefore count the active messages *before* that assistant
  message; the message itself and the results of its earlier calls are the
  "pending" turn, listed by ``status`` and never evicted or compacted while
  the call runs. A direct ``await tool(...)`` has no pending turn.
* **Tool calls and results move together.** Providers reject a tool result
  without its call and a call without all its results, so an assistant
  message with tool calls and its tool results form a group: evicting,
  compacting or restoring any member applies to the whole group, and the
  answer says how many extra messages that took.
* **No assistant turn first.** An eviction or compaction that would leave an
  assistant message as the first message after the system message is refused
  (providers require the conversation to start with a user turn).
* ``evict`` and ``restore`` without ``end`` act on one message, ``start``
  (a model naming one index means that message; "everything from there on"
  would be the costlier misreading). ``get_messages`` and ``compact``
  without ``end`` run to the end of the view.
* Ranges are clamped: a negative index counts as 0, an index past the end as
  the end. ``get_messages`` and ``restore`` answer an empty range with an
  empty success; ``evict`` and ``compact`` fail on it. Index 0 (the system
  message) is never evicted or compacted.
"""

from __future__ import annotations

from lionfactory._branch import Branch
from lionfactory._messages import ChatModel
from lionfactory._tool import Tool, ToolHints
from lionfactory.tools._context_handler import _ContextHandler
from lionfactory.tools._context_models import ContextMessage, ContextRequest, ContextResponse
from lionfactory.tools._context_ops import DEFAULT_KEEP_LAST, PREVIEW_CHARS

__all__ = ["ContextMessage", "ContextRequest", "ContextResponse", "context_tool"]

_DESCRIPTION = f"""\
Inspect and trim your own conversation context (the messages you are shown).

The record keeps every message; the view is the part you see. Evicting and compacting change
only the view, restore brings messages back, so nothing is ever lost.

Actions:
- status: how many messages are in the view (active_count), in the current turn
  (pending_count: this call and the other calls of your last message), evicted, and in total;
  counts by role; estimated tokens.
- get_messages: numbered previews (at most {PREVIEW_CHARS} characters) of view messages
  [start:end). scope='all' lists the whole record instead, with record indices and each
  message marked active or evicted (use those indices for restore).
- evict: take view messages [start:end) out of the view; without `end`, only message `start`.
  Index 0, the system message, stays.
- evict_action_results: take old tool results out of the view, keeping the last `keep_last`
  (default {DEFAULT_KEEP_LAST}; 0 keeps none).
- restore: bring record messages [start:end) back, each at its original place;
  without `end`, only message `start`.
- compact: replace view messages [start:end) with one summary message. mode='tool_io'
  (default) replaces only tool calls and results, mode='all' every message. Write the summary
  in `summary`, or set auto=true to have one written.

Rules:
- View indices count the messages as you saw them when you made this call; your current
  tool call and the results of this turn are not counted and cannot be evicted.
- A tool call and its results move together: evicting, compacting or restoring one of them
  moves the whole group.
- Ranges are clamped: negative indices count as 0, indices past the end as the end.
- The conversation must start with a user turn: an eviction or compaction that would put an
  assistant message first is refused.
"""


def context_tool(branch: Branch, *, chat_model: ChatModel | None = None) -> Tool:
    """Build the ``context`` tool for `branch`.

    Register it through its factory (``branch.register(context_tool)``) so a
    clone gets its own: the tool is bound to this branch and its handler
    reads ``branch.messages`` at call time.

    Args:
        branch: the branch whose messages the tool inspects and trims.
        chat_model: the model that writes ``auto`` summaries; the branch's
            `chat_model` (looked up at call time) when None. Shared on clone.

    Returns:
        The ``context`` Tool, ``bound_to=branch.id``.

    Raises:
        TypeError: `branch` is not a Branch, or `chat_model` is not callable.
    """
    if not isinstance(branch, Branch):
        raise TypeError(f"context_tool needs a Branch, got {branch!r}")
    if chat_model is not None and not callable(chat_model):
        raise TypeError(f"chat_model must be a chat model (async callable), got {chat_model!r}")
    return Tool(
        name="context",
        description=_DESCRIPTION,
        request_model=ContextRequest,
        handler=_ContextHandler(branch, chat_model),
        bound_to=branch.id,
        response_model=ContextResponse,
        hints=ToolHints("Manage the conversation context"),
    )

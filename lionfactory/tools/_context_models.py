"""The ``context`` tool's request and response models: the text the model reads.

Kept apart from the factory (`lionfactory.tools.context`) and the handler
(`lionfactory.tools._context_handler`) so that both import them and neither
imports the other.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from lionfactory.tools._context_ops import AUTO_SOURCE_CHARS, DEFAULT_KEEP_LAST, PREVIEW_CHARS
from lionfactory.tools._models import ToolModel

__all__ = ["ContextAction", "ContextMessage", "ContextRequest", "ContextResponse"]

ContextAction = Literal[
    "status", "get_messages", "evict", "evict_action_results", "restore", "compact"
]


class ContextRequest(ToolModel):
    """Arguments of one ``context`` call."""

    action: ContextAction = Field(
        description=(
            "'status': counts and estimated tokens; 'get_messages': numbered previews; "
            "'evict': hide view messages [start:end); 'evict_action_results': hide old tool "
            "results, keeping the last `keep_last`; 'restore': bring back record messages "
            "[start:end); 'compact': replace view messages [start:end) with one summary."
        )
    )
    start: int | None = Field(
        default=None,
        description=(
            "First index of the range (inclusive). View indices for get_messages (scope "
            "'active'), evict and compact; record indices for restore and get_messages with "
            "scope 'all'. Negative counts as 0. Default: the start (1 for evict/compact)."
        ),
    )
    end: int | None = Field(
        default=None,
        description=(
            "End of the range (exclusive); past the end counts as the end. Default: for "
            "evict and restore, start + 1 (the one message at start); for get_messages and "
            "compact, the end."
        ),
    )
    keep_last: int | None = Field(
        default=None,
        description=(
            f"evict_action_results: how many of the most recent tool results to keep "
            f"(default {DEFAULT_KEEP_LAST}; 0 or less keeps none)."
        ),
    )
    summary: str | None = Field(
        default=None,
        description="compact: the summary that replaces the messages (required unless auto=true).",
    )
    mode: Literal["tool_io", "all"] = Field(
        default="tool_io",
        description=(
            "compact: 'tool_io' replaces only tool calls and tool results in the range; 'all' "
            "replaces every message in the range."
        ),
    )
    scope: Literal["active", "all"] = Field(
        default="active",
        description=(
            "get_messages: 'active' lists the view the model sees; 'all' lists the whole "
            "record, marking each message active or evicted (indices are record indices)."
        ),
    )
    auto: bool = Field(
        default=False,
        description=(
            f"compact: let a chat model write the summary (it reads at most "
            f"{AUTO_SOURCE_CHARS:,} characters of the messages). Do not pass `summary` too."
        ),
    )


class ContextMessage(ToolModel):
    """One message in a ``get_messages`` listing."""

    index: int = Field(description="View index (scope 'active') or record index (scope 'all').")
    role: Literal["system", "user", "assistant", "tool"] = Field(description="The role.")
    active: bool = Field(description="Whether the message is in the active view.")
    view_index: int | None = Field(
        default=None,
        description="The message's view index, or null when evicted or part of the pending turn.",
    )
    tool: str | None = Field(default=None, description="For a tool result, the tool's name.")
    tokens: int = Field(description="Estimated tokens of the message.")
    preview: str = Field(
        description=f"The start of the content, at most {PREVIEW_CHARS} characters."
    )


class ContextResponse(ToolModel):
    """The result of one ``context`` call."""

    success: bool = Field(description="Whether the action worked; if not, read `error`.")
    action: ContextAction = Field(description="The action this answers.")
    error: str | None = Field(default=None, description="What went wrong and what to do instead.")
    notice: str | None = Field(
        default=None, description="Notes: extra messages moved with their group, cut sources."
    )
    active_count: int | None = Field(
        default=None, description="Messages in the view, not counting the pending turn."
    )
    pending_count: int | None = Field(
        default=None,
        description="status: messages of the current turn (this call and its siblings).",
    )
    total_count: int | None = Field(default=None, description="status: messages in the record.")
    evicted_count: int | None = Field(
        default=None, description="status: record messages not in the active view."
    )
    role_counts: dict[str, int] | None = Field(
        default=None, description="status: view messages by role."
    )
    estimated_tokens: int | None = Field(
        default=None, description="Estimated tokens of the active view, pending turn included."
    )
    messages: list[ContextMessage] | None = Field(
        default=None, description="get_messages: the listing, in order."
    )
    evicted: int | None = Field(
        default=None, description="evict / evict_action_results: messages taken out now."
    )
    restored: int | None = Field(default=None, description="restore: messages put back now.")
    compacted: int | None = Field(
        default=None, description="compact: how many messages the summary replaced."
    )
    summary_index: int | None = Field(
        default=None, description="compact: the view index of the summary message."
    )

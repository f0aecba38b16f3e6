"""The chat model protocol the agent loop talks to.

Any object with ``async def __call__(messages, tools) -> ModelReply`` is a
chat model: a provider adapter, or the offline `ScriptedModel` and
`FunctionModel` of `lionfactory.testing`. The loop passes `Tool` objects, not
schemas, so an adapter exports them in its provider's style
(``tool.schema("openai")``, ``"anthropic"``, ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from lionfactory._messages import Message, ToolCall

if TYPE_CHECKING:
    from lionfactory._tool import Tool

__all__ = ["ChatModel", "ModelReply"]


def _text(value: str | None) -> str:
    # OpenAI-style adapters see ``content: null`` on a tool-call turn and pass
    # it on; the conversation record holds text, so "no text" is "".
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"ModelReply text must be a str or None, got {value!r:.200}")
    return value


def _tool_calls(value: Iterable[ToolCall] | None) -> tuple[ToolCall, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes, ToolCall)) or not isinstance(value, Iterable):
        raise TypeError(f"tool_calls must be a sequence of ToolCall objects, got {value!r:.200}")
    calls = tuple(value)
    for call in calls:
        if not isinstance(call, ToolCall):
            raise TypeError(f"tool_calls must hold ToolCall objects, got {call!r}")
    return calls


@attrs.frozen
class ModelReply:
    """What a chat model answered: text, tool calls, or both.

    Both fields are checked here, at construction, so a malformed reply
    fails in the adapter that built it with a plain `TypeError` instead of
    deep inside the agent loop.

    Attributes:
        text: the assistant's text ("" when it only calls tools; None is
            accepted and stored as "").
        tool_calls: the calls it wants run, in order (None is stored as ()).
    """

    text: str = attrs.field(default="", converter=_text)
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_tool_calls)


@runtime_checkable
class ChatModel(Protocol):
    """A chat model: the active messages and the tools in, a `ModelReply` out."""

    async def __call__(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelReply:
        """Answer the conversation `messages`, optionally calling some of `tools`."""
        ...

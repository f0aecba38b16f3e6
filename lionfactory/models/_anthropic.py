"""`AnthropicMessages`: a chat model over Anthropic's Messages API (in `lionfactory.models`).

The conversation maps onto the Messages API's shapes: the system message
becomes the top-level ``system`` field, tool calls become ``tool_use``
blocks of an assistant turn, tool messages become ``tool_result`` blocks of
the following user turn, and consecutive turns of one role are merged into
one, because the API wants the roles to alternate.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from lionfactory._messages import Message, ModelReply, ToolCall
from lionfactory.errors import ConfigurationError
from lionfactory.models._http import (
    HttpChatModel,
    common_fields,
    new_client,
    tool_call,
)

if TYPE_CHECKING:
    import httpx

    from lionfactory._tool import Tool

__all__ = ["AnthropicMessages"]

API_VERSION = "2026-10-21"
"""The ``anthropic-version`` the request and reply shapes were checked against
(the one the official SDK 2.14 sends)."""

_RESERVED_PARAMS = frozenset({"model", "messages", "tools", "system", "max_tokens", "stream"})
# The image types the Messages API accepts in a base64 image block.
_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_DATA_URL = re.compile(r"data:(image/[a-z+.-]+);base64,([A-Za-z0-9+/=]*)\Z")
# A reply cut at one of these limits may end inside a tool_use block.
_CUT_OFF = frozenset({"max_tokens", "model_context_window_exceeded"})


@attrs.define(eq=False, init=False, repr=False)
class AnthropicMessages(HttpChatModel):
    """A `ChatModel` over Anthropic's Messages API (``<base_url>/v1/messages``).

    Each call posts the active messages (the system message as ``system``)
    and the tools' ``anthropic``-style schemas, and returns the reply's text
    blocks joined and its ``tool_use`` blocks as tool calls. An image the
    coding toolkit's reader returned (a ``data:image/...;base64,`` URL) goes
    back to the model as an image block inside its ``tool_result``, not as
    base64 text.

    ``stop_reason``: ``end_turn``, ``tool_use`` and ``stop_sequence`` are
    ordinary ends. When a reply was cut off (``max_tokens``,
    ``model_context_window_exceeded``) while its last block was a tool call,
    that call's arguments may be incomplete: it reaches the branch marked
    malformed, so the model is told to call again instead of a half-formed
    call running. A ``refusal`` returns whatever text came with it.

    Retries, timeouts and connections behave as `OpenAICompatible`'s do:
    429, 408 and 5xx (529 "overloaded" included), lost connections and
    timeouts are retried up to `max_retries` times with exponential backoff
    (or the server's Retry-After), capped at 30 s a wait; each attempt gets
    `timeout` seconds; ``async with model:`` shares one HTTP client.

    Args:
        model: the model name, for example ``"claude-sonnet-4-5"``.
        api_key: sent as ``Authorization: Bearer <api_key>``; by default the ``ANTHROPIC_API_KEY``
            environment variable, read now.
        base_url: the API root, without ``/v1``.
        max_tokens: the most tokens one reply may have (the API requires it).
        transport: an ``httpx.AsyncBaseTransport`` to send requests through.
        timeout: seconds one attempt may take.
        max_retries: how many times a retryable failure is retried.
        backoff: the first retry's delay in seconds; it doubles each retry.
        headers: extra HTTP headers for every request (``anthropic-beta``, ...).
        params: extra request fields (``temperature``, ``tool_choice``,
            ``stop_sequences``, ``thinking``, ...).
        api_version: the ``anthropic-version`` header.

    Raises:
        ConfigurationError: no `api_key` and no ``ANTHROPIC_API_KEY``.
        ValueError: a malformed `base_url` or `model`, a `max_tokens` below
            1, a non-positive `timeout`, a negative `max_retries` or
            `backoff`, or `params` that set a field the adapter sends itself.
        TypeError: a `transport` that is not an ``httpx.AsyncBaseTransport``.
    """

    model: str
    base_url: str
    max_tokens: int
    timeout: float
    max_retries: int
    backoff: float
    headers: Mapping[str, str]
    params: Mapping[str, Any]
    api_version: str
    _api_key: str
    _transport: httpx.AsyncBaseTransport | None
    _client: httpx.AsyncClient | None

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = "https://api.anthropic.com",
        max_tokens: int = 4096,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 600.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
        api_version: str = API_VERSION,
    ) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        fields = common_fields(
            base_url=base_url,
            model=model,
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            headers=headers,
            params=params,
            transport=transport,
            reserved=_RESERVED_PARAMS,
        )
        if api_key is None:
            api_key = os.environ.get("ANTHROPIC_API_KEY")
        if not isinstance(api_key, str) or not api_key:
            raise ConfigurationError(
                "AnthropicMessages needs an API key: pass api_key=... "
                "or set the ANTHROPIC_API_KEY environment variable"
            )
        self.__attrs_init__(
            max_tokens=max_tokens, api_version=api_version, api_key=api_key, **fields
        )

    @property
    def url(self) -> str:
        """The endpoint every request goes to."""
        return f"{self.base_url}/v1/messages"

    def request_body(self, messages: Sequence[Message], tools: Sequence[Tool]) -> dict[str, Any]:
        """The JSON body a call with `messages` and `tools` posts (no request is made)."""
        system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": _turns(messages),
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [tool.schema("anthropic") for tool in tools]
        body.update(self.params)
        return body

    # -- internals -----------------------------------------------------------

    def _new_client(self) -> httpx.AsyncClient:
        headers = {
            "Accept": "application/json",
            # As the official SDK (2.14) sends it; the API also takes x-api-key.
            "Authorization": f"Bearer {self._api_key}",
            "anthropic-version": self.api_version,
        }
        headers.update(self.headers)
        return new_client(headers, self._transport)

    def _parse(self, data: Any) -> ModelReply:
        content = data.get("content") if isinstance(data, dict) else None
        if not isinstance(content, list):
            raise self._unreadable(data, "a content list")
        blocks = [b for b in content if isinstance(b, dict)]
        text = "".join(
            b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)
        )
        calls = [_parse_call(b) for b in blocks if b.get("type") == "tool_use"]
        if calls and data.get("stop_reason") in _CUT_OFF and blocks[-1].get("type") == "tool_use":
            calls[-1] = calls[-1].model_copy(
                update={
                    "arguments": {},
                    "arguments_error": (
                        f"your reply was cut off ({data['stop_reason']}) before this call's "
                        f"arguments were complete"
                    ),
                }
            )
        return ModelReply(text=text, tool_calls=tuple(calls))


# Documented, imported and pickled as lionfactory.models.AnthropicMessages.
AnthropicMessages.__module__ = "lionfactory.models"


def _parse_call(block: dict[str, Any]) -> ToolCall:
    arguments = block.get("input")
    if isinstance(arguments, dict):
        return tool_call(block.get("name"), block.get("id"), arguments, None)
    problem = f"expected a JSON object as input, got {type(arguments).__name__}"
    return tool_call(block.get("name"), block.get("id"), {}, problem)


def _turns(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as alternating user/assistant turns of content blocks."""
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue  # the API refuses empty turns and empty text blocks
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, blocks))
    return [{"role": role, "content": _content(blocks)} for role, blocks in turns]


def _content(blocks: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A lone text block as a plain string (the API's short form), otherwise the blocks."""
    if len(blocks) == 1 and blocks[0]["type"] == "text":
        text: str = blocks[0]["text"]
        return text
    return blocks


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [_tool_result(message)]
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        )
    return blocks


def _tool_result(message: Message) -> dict[str, Any]:
    """A tool message as a ``tool_result`` block; an image result as an image block."""
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.call_id or ""}
    try:
        payload = json.loads(message.content)
    except ValueError:
        payload = None
    if isinstance(payload, dict) and "error_type" in payload:
        # The call did not run (invalid arguments, a denial, an unknown tool,
        # a crash): is_error tells the model so in the API's own terms.
        block["content"] = message.content
        block["is_error"] = True
        return block
    shown = payload.get("content") if isinstance(payload, dict) else None
    image = _DATA_URL.match(shown) if isinstance(shown, str) else None
    if isinstance(payload, dict) and image and image.group(1) in _IMAGE_TYPES:
        media_type, data = image.groups()
        rest = dict(payload, content=f"[{media_type} image, shown above]")
        block["content"] = [
            {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}},
            {"type": "text", "text": json.dumps(rest, ensure_ascii=False)},
        ]
        return block
    block["content"] = message.content
    return block

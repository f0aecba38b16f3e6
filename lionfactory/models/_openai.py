"""`OpenAICompatible`: a chat model over the OpenAI Chat Completions API (re-exported by `models`).

OpenAI and the common local servers (llama.cpp's ``llama-server`` and
llama-cpp-python's server, vLLM, Ollama, LM Studio) all serve it at
``<base_url>/chat/completions``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from lionfactory._echo import echo
from lionfactory._messages import Message, ModelReply, ToolCall
from lionfactory.models._http import (
    HttpChatModel,
    common_fields,
    new_client,
    tool_call,
)

if TYPE_CHECKING:
    import httpx

    from lionfactory._tool import Tool

__all__ = ["OpenAICompatible"]
"""The one argument a tool call carries when the model's arguments were not a JSON object.

Its value says what was wrong and quotes what the model sent. Every request
model in lionfactory forbids unknown fields, so validation rejects the call
and the model reads, in the tool message, that its JSON was malformed."""

_RESERVED_PARAMS = frozenset({"model", "messages", "tools", "stream"})


@attrs.define(eq=False, init=False, repr=False)
class OpenAICompatible(HttpChatModel):
    """A `ChatModel` over an OpenAI-compatible Chat Completions endpoint.

    Each call posts the active messages and the tools' ``openai``-style
    schemas to ``<base_url>/chat/completions`` and returns the first
    choice's text and tool calls. Tool-call arguments arrive as JSON text; a
    call whose text is not a JSON object still reaches the branch, with
    `ToolCall.arguments_error` set, so the model is told its JSON was broken
    (a `ToolInputError` tool message) instead of the loop crashing.

    Rate limits (429), 408 and 5xx answers, lost connections and timeouts are
    retried up to `max_retries` times, after ``backoff * 2**n`` seconds (or
    the server's Retry-After), each wait capped at 30 seconds. Other 4xx
    answers raise at once.

    Connections: used as is, the adapter opens an HTTP client for each call
    and closes it afterwards, so it is safe to share between event loops (a
    notebook's asyncio loop, successive ``trio.run`` calls). Inside
    ``async with model:`` one client and its connection pool serve every
    call until the block ends; that client belongs to the event loop that
    entered the block. A `transport` you pass stays yours: the adapter never
    closes it.

    Args:
        base_url: the API root including its version, for example
            ``"http://127.0.0.1:8080/v1"`` or ``"https://api.openai.com/v1"``.
        model: the model name the server expects.
        api_key: sent as ``Authorization: Bearer <api_key>``; local servers
            usually need none.
        transport: an ``httpx.AsyncBaseTransport`` to send requests through
            (a proxy, a test double); by default httpx's own.
        timeout: seconds one attempt may take, from sending the request to
            the end of the response.
        max_retries: how many times a retryable failure is retried.
        backoff: the first retry's delay in seconds; it doubles each retry.
        headers: extra HTTP headers for every request.
        params: extra request fields for every request (``temperature``,
            ``max_tokens``, ``tool_choice``, ...).

    Raises:
        ValueError: a malformed `base_url` or `model`, a non-positive
            `timeout`, a negative `max_retries` or `backoff`, or `params`
            that set ``model``, ``messages``, ``tools`` or ``stream``.
        TypeError: a `transport` that is not an ``httpx.AsyncBaseTransport``.
    """

    _shown = ("base_url", "model")

    base_url: str
    model: str
    timeout: float
    max_retries: int
    backoff: float
    headers: Mapping[str, str]
    params: Mapping[str, Any]
    _api_key: str | None
    _transport: httpx.AsyncBaseTransport | None
    _client: httpx.AsyncClient | None

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = 600.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        if api_key is not None and not isinstance(api_key, str):
            raise TypeError(f"api_key must be a string or None, got {type(api_key).__name__}")
        self.__attrs_init__(
            api_key=api_key,
            **common_fields(
                base_url=base_url,
                model=model,
                timeout=timeout,
                max_retries=max_retries,
                backoff=backoff,
                headers=headers,
                params=params,
                transport=transport,
                reserved=_RESERVED_PARAMS,
            ),
        )

    @property
    def url(self) -> str:
        """The endpoint every request goes to."""
        return f"{self.base_url}/chat/completions"

    def request_body(self, messages: Sequence[Message], tools: Sequence[Tool]) -> dict[str, Any]:
        """The JSON body a call with `messages` and `tools` posts (no request is made)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [_to_openai(m) for m in messages],
            **self.params,
        }
        if tools:
            # Some servers reject an empty list; no key means "no tools".
            body["tools"] = [tool.schema("openai") for tool in tools]
        return body

    # -- internals -----------------------------------------------------------

    def _new_client(self) -> httpx.AsyncClient:
        headers = {"Accept": "application/json"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        headers.update(self.headers)
        return new_client(headers, self._transport)

    def _parse(self, data: Any) -> ModelReply:
        choices = data.get("choices") if isinstance(data, dict) else None
        first = choices[0] if isinstance(choices, list) and choices else None
        message = first.get("message") if isinstance(first, dict) else None
        if not isinstance(message, dict):
            raise self._unreadable(data, "choices[0].message")
        calls = message.get("tool_calls")
        calls = calls if isinstance(calls, list) else []
        return ModelReply(
            text=_text(message.get("content")),
            tool_calls=tuple(_parse_call(c) for c in calls if isinstance(c, dict)),
        )


# Documented, imported and pickled as lionfactory.models.OpenAICompatible.
OpenAICompatible.__module__ = "lionfactory.models"


def _to_openai(message: Message) -> dict[str, Any]:
    """One `Message` in Chat Completions form."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.call_id or "", "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            # A string, never null: llama-cpp-python's server rejects null
            # content (HTTP 500) and omitting the key fails there too, while
            # "" is accepted by it and by the OpenAI API alike.
            "content": message.content,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        # Always valid JSON, even for a malformed call: servers
                        # that render a chat template parse these arguments.
                        "arguments": json.dumps(call.arguments, ensure_ascii=False, default=str),
                    },
                }
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.content}


def _text(content: Any) -> str:
    """The reply text: a string, None, or (some servers) a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def _parse_call(raw: dict[str, Any]) -> ToolCall:
    function = raw.get("function")
    function = function if isinstance(function, dict) else {}
    arguments, problem = _parse_arguments(function.get("arguments"))
    return tool_call(function.get("name"), raw.get("id"), arguments, problem)


def _parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """The arguments as a dict, or ``({}, problem)`` when they are not a JSON object."""
    if isinstance(raw, dict):  # a few servers send the object itself
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None  # "" is how some servers spell "no arguments"
    if not isinstance(raw, str):
        problem = f"expected a JSON object, got {type(raw).__name__}"
        shown = echo(raw, 500)
    else:
        shown = raw
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as exc:
            # json's messages quote with ' ("Expecting ',' delimiter"); the
            # tool's error text shows values with repr(), which would escape
            # every one of them, so they become ".
            problem = f"{exc.msg} at line {exc.lineno} column {exc.colno}".replace("'", '"')
        except RecursionError:
            # json's decoder recurses once per level: thousands of nested
            # brackets exhaust the stack; the model is told, the loop goes on.
            problem = "the JSON nests too deep"
        except ValueError as exc:
            # An integer literal past Python's digit limit for int().
            problem = f"a value could not be read ({str(exc)[:120]})"
        else:
            if isinstance(parsed, dict):
                return parsed, None
            problem = f"expected a JSON object, got a JSON {type(parsed).__name__}"
    return {}, f"{problem}; you sent: {shown[:500]}"

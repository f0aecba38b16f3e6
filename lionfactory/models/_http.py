"""What every HTTP chat model adapter shares: its errors, its client, its retry loop.

`OpenAICompatible` and `AnthropicMessages` differ in the request they build
and the reply they parse; how a request is sent (one anyio deadline per
attempt, which statuses are retried, how long to wait) is decided here once.

Importing this module imports httpx (the ``models`` extra).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Self

import anyio

try:
    import httpx
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "lionfactory.models needs httpx; install it with `pip install 'lionfactory[models]'`"
    ) from exc

from lionfactory._messages import ToolCall
from lionfactory.errors import LionfactoryError

if TYPE_CHECKING:
    from lionfactory._messages import Message, ModelReply
    from lionfactory._tool import Tool

__all__ = [
    "BODY_EXCERPT",
    "ClientOwner",
    "HttpChatModel",
    "ModelError",
    "ModelTimeoutError",
    "check_positive",
    "check_retries",
    "common_fields",
    "close_client",
    "new_client",
    "post_json",
    "tool_call",
]

# Retried: rate limits, request timeouts and server errors (Anthropic's 529
# "overloaded" among them), which a later attempt may not meet. Any other 4xx
# is the request's fault and is final.
_RETRY_STATUSES = frozenset({408, 429})
# A server's Retry-After is honoured up to this many seconds, and so is the
# exponential backoff: a retry loop must stay bounded whatever a server says.
_MAX_DELAY = 30.0
BODY_EXCERPT = 1000
"""How much of an error response's body a `ModelError` keeps."""


class ModelError(LionfactoryError):
    """A chat model request failed: an HTTP error status, no connection, or an unusable reply.

    Attributes:
        status: the HTTP status of the last response, or None when none arrived.
        body: the start of that response's body (at most 1,000 characters).
        attempts: how many requests were made before giving up.
    """

    def __init__(
        self, message: str, *, status: int | None = None, body: str = "", attempts: int = 1
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.attempts = attempts


class ModelTimeoutError(ModelError, TimeoutError):
    """The chat model did not answer within the timeout, on every attempt."""


# Both errors are documented and raised as lionfactory.models' own.
ModelError.__module__ = ModelTimeoutError.__module__ = "lionfactory.models"


def check_positive(name: str, value: Any) -> float:
    """`value` as a float, or ValueError when it is not a positive number of seconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


def check_retries(max_retries: Any, backoff: Any, transport: Any) -> None:
    """Refuse a negative `max_retries` or `backoff`, or a `transport` httpx cannot use."""
    if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
        raise TypeError(f"transport must be an httpx.AsyncBaseTransport, got {transport!r}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
    if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or backoff < 0:
        raise ValueError(f"backoff must be a number of seconds >= 0, got {backoff!r}")


def new_client(
    headers: Mapping[str, str], transport: httpx.AsyncBaseTransport | None
) -> httpx.AsyncClient:
    """An HTTP client sending `headers`, through `transport` when one is given."""
    # httpx's own timeouts are off: one anyio deadline per attempt covers
    # connecting, waiting and reading, whereas httpx's read timeout restarts
    # on every chunk and a trickling server would never time out.
    return httpx.AsyncClient(headers=dict(headers), transport=transport, timeout=None)


async def close_client(
    client: httpx.AsyncClient, transport: httpx.AsyncBaseTransport | None
) -> None:
    """Close a client from `new_client`, leaving a caller's `transport` open."""
    if transport is not None:
        # Closing the client would close the caller's transport, and a
        # client on a given transport holds nothing else to release.
        return
    # Shielded so a cancelled call still releases its sockets.
    with anyio.CancelScope(shield=True):
        await client.aclose()


async def post_json(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    *,
    timeout: float,
    max_retries: int,
    backoff: float,
    decode: Callable[[httpx.Response, int], Any],
) -> Any:
    """POST `body` as JSON and return ``decode(response, attempts)`` of the first success.

    Rate limits (429), 408 and 5xx answers, lost connections and timeouts
    are retried up to `max_retries` times, after ``backoff * 2**n`` seconds
    (or the server's Retry-After), each wait capped at 30 seconds. Other 4xx
    answers raise at once.

    Raises:
        ModelError: an error status (after retries when retryable), or no
            connection after retries.
        ModelTimeoutError: every attempt outlasted `timeout`.
    """
    attempts = 0
    while True:
        attempts += 1
        wait_at_least: float | None = None
        failure: ModelError
        try:
            with anyio.fail_after(timeout):
                response = await client.post(url, json=body)
        except TimeoutError:
            failure = ModelTimeoutError(
                f"the chat model at {url} did not answer within {timeout:g} s "
                f"({attempts} attempt(s))",
                attempts=attempts,
            )
        except httpx.TransportError as exc:
            failure = ModelError(
                f"could not talk to the chat model at {url} "
                f"({attempts} attempt(s)): {type(exc).__name__}: {exc}",
                attempts=attempts,
            )
        else:
            if response.is_success:
                return decode(response, attempts)
            status = response.status_code
            excerpt = response.text[:BODY_EXCERPT]
            retryable = status in _RETRY_STATUSES or status >= 500
            failure = ModelError(
                f"the chat model at {url} answered HTTP {status} "
                f"({attempts} attempt(s){'' if retryable else ', not retried'}): "
                f"{excerpt[:300]}",
                status=status,
                body=excerpt,
                attempts=attempts,
            )
            if not retryable:
                raise failure
            wait_at_least = _retry_after(response)
        if attempts > max_retries:
            raise failure
        delay = backoff * 2 ** (attempts - 1)
        if wait_at_least is not None:
            delay = max(delay, wait_at_least)
        await anyio.sleep(min(delay, _MAX_DELAY))


def _retry_after(response: httpx.Response) -> float | None:
    """The server's Retry-After in seconds, when it gives a number (dates are ignored)."""
    value = response.headers.get("Retry-After")
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None


class ClientOwner:
    """``async with adapter:``: one HTTP client for every call until the block ends.

    Shared by the model adapters (attrs classes holding `_client` and
    `_transport`, and building their client in `_new_client`); outside a
    block each call opens and closes a client of its own.
    """

    # No slots of its own: the adapters are slotted attrs classes that hold
    # `_client` and `_transport`, so this mixin must add no __dict__ either.
    __slots__ = ()

    _client: httpx.AsyncClient | None
    _transport: httpx.AsyncBaseTransport | None

    def _new_client(self) -> httpx.AsyncClient:
        raise NotImplementedError  # pragma: no cover - every adapter defines it

    async def __aenter__(self) -> Self:
        """Open one HTTP client for every call until the block ends (connection reuse)."""
        if self._client is not None:
            raise RuntimeError(f"{self!r} is already open; enter it once at a time")
        self._client = self._new_client()  # type: ignore[misc]  # a subclass slot
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Close the client opened by `__aenter__`."""
        client, self._client = self._client, None  # type: ignore[misc]  # a subclass slot
        if client is not None:
            await close_client(client, self._transport)


def common_fields(
    *,
    base_url: Any,
    model: Any,
    timeout: Any,
    max_retries: Any,
    backoff: Any,
    headers: Mapping[str, str] | None,
    params: Mapping[str, Any] | None,
    transport: Any,
    reserved: frozenset[str],
) -> dict[str, Any]:
    """Check the options every adapter takes; the attrs fields they become.

    Raises:
        ValueError: a malformed `base_url` or `model`, a non-positive `timeout`,
            a negative `max_retries` or `backoff`, or `params` naming a
            `reserved` request field.
        TypeError: a `transport` that is not an ``httpx.AsyncBaseTransport``.
    """
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
    if not isinstance(model, str) or not model.strip():
        raise ValueError(f"model must be a non-empty model name, got {model!r}")
    check_retries(max_retries, backoff, transport)
    named = sorted(reserved.intersection(params or {}))
    if named:
        raise ValueError(f"params cannot set {named}; the adapter sends those itself")
    return {
        "base_url": base_url.rstrip("/"),
        "model": model,
        "timeout": check_positive("timeout", timeout),
        "max_retries": max_retries,
        "backoff": float(backoff),
        "headers": dict(headers or {}),
        "params": dict(params or {}),
        "transport": transport,
        "client": None,
    }


class HttpChatModel(ClientOwner):
    """The per-call half every HTTP chat model adapter shares.

    A subclass (a slotted attrs class holding `timeout`, `max_retries`,
    `backoff`, `_client` and `_transport`) says what differs: its `url`, the
    body it posts (`request_body`), its client's headers (`_new_client`) and
    how it reads a reply (`_parse`). Sending the body (the open client of an
    ``async with`` block, or one client for this call alone), retrying and
    decoding JSON are the same for every API, so they live here once.
    """

    __slots__ = ()

    timeout: float
    max_retries: int
    backoff: float
    _shown: ClassVar[tuple[str, ...]] = ("model", "base_url")
    """The fields the repr shows, in order."""

    def __repr__(self) -> str:
        # The api_key stays out: reprs end up in logs and tracebacks.
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._shown)
        return f"{type(self).__name__}({shown})"

    @property
    def url(self) -> str:
        """The endpoint every request goes to."""
        raise NotImplementedError  # pragma: no cover - every adapter defines it

    def request_body(self, messages: Sequence[Message], tools: Sequence[Tool]) -> dict[str, Any]:
        """The JSON body a call with `messages` and `tools` posts (no request is made)."""
        raise NotImplementedError  # pragma: no cover - every adapter defines it

    def _parse(self, data: Any) -> ModelReply:
        raise NotImplementedError  # pragma: no cover - every adapter defines it

    def _unreadable(self, data: Any, lacking: str) -> ModelError:
        """The error for a 200 answer without `lacking` (its start is kept to show what came)."""
        text = json.dumps(data, default=str)
        return ModelError(
            f"the chat model at {self.url} answered without {lacking}: {text[:300]}",
            status=200,
            body=text[:BODY_EXCERPT],
        )

    async def __call__(self, messages: Sequence[Message], tools: Sequence[Tool]) -> ModelReply:
        """Ask the model: post the conversation and the tools, return its reply.

        Raises:
            ModelError: an HTTP error status (after retries for 408, 429 and
                5xx), no connection after retries, or a reply of the wrong shape.
            ModelTimeoutError: every attempt outlasted `timeout`.
        """
        body = self.request_body(messages, tools)
        if self._client is not None:
            data = await self._post(self._client, body)
        else:
            client = self._new_client()
            try:
                data = await self._post(client, body)
            finally:
                await close_client(client, self._transport)
        return self._parse(data)

    async def _post(self, client: httpx.AsyncClient, body: dict[str, Any]) -> Any:
        return await post_json(
            client,
            self.url,
            body,
            timeout=self.timeout,
            max_retries=self.max_retries,
            backoff=self.backoff,
            decode=self._decode,
        )

    def _decode(self, response: httpx.Response, attempts: int) -> Any:
        try:
            return response.json()
        except (ValueError, RecursionError):  # RecursionError: a body nested thousands deep
            raise ModelError(
                f"the chat model at {self.url} answered HTTP {response.status_code} "
                f"with a body that is not JSON: {response.text[:300]!r}",
                status=response.status_code,
                body=response.text[:BODY_EXCERPT],
                attempts=attempts,
            ) from None


def tool_call(name: Any, call_id: Any, arguments: dict[str, Any], problem: str | None) -> ToolCall:
    """A tool call as an API spelled it, whatever it left out.

    A call without a name still reaches the branch, which tells the model
    that no tool of that name exists; a missing id gets a fresh one.
    `problem` says why the arguments were not a JSON object (then ``{}``).
    """
    extra = {"id": call_id} if isinstance(call_id, str) and call_id else {}
    return ToolCall(
        name=name if isinstance(name, str) else "",
        arguments=arguments,
        arguments_error=problem,
        **extra,
    )

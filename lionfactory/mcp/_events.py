"""The SSE event store of the Streamable HTTP server: what makes its streams resumable.

With an event store, the SDK's transport opens every SSE stream with a
*priming* event (an event id and empty data) and a ``retry`` field, and
stores each event it sends, so a client whose connection dropped reconnects
after that many milliseconds with ``Last-Event-ID`` and gets what it missed
instead of losing a tool result. The specification says servers SHOULD do
this (the official conformance suite warns when they do not).

The store is in memory and bounded, in events and in bytes: the oldest events
go first, so a client that reconnects after very long gets what is left (the
SDK then answers as for an unknown id). Event ids are random 128-bit tokens,
not counters: a replay hands over another stream's messages to whoever
presents an id of it, so an id must be as unguessable as the session id it
belongs with. Each event is kept as the JSON the SDK sends (dumped once, here:
`send_stored_json` makes the transport send that text instead of dumping the
message a second time), and its length is what the byte bound counts.
Behind a load balancer a reconnection that lands on another
server finds nothing to replay; the call's result is not lost by that (the
stored session, if any, still records it), only the stream's missed events.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict, deque
from typing import Any

from mcp.server.streamable_http import (
    EventCallback,
    EventMessage,
    EventStore,
    StreamableHTTPServerTransport,
)
from mcp_types import jsonrpc_message_adapter
from sse_starlette.event import ServerSentEvent

__all__ = [
    "RETRY_MILLISECONDS",
    "BoundedEventStore",
    "prime_every_stream",
    "send_stored_json",
    "sse_frame",
]

RETRY_MILLISECONDS = 1000
"""The ``retry`` the server suggests to clients: reconnect after one second."""


class BoundedEventStore(EventStore):
    """An in-memory `EventStore` holding at most `max_events` events and `max_bytes` of them.

    Args:
        max_events: events kept, all streams together.
        max_bytes: characters of the events' JSON kept, all streams together.
    """

    def __init__(self, *, max_events: int = 10_000, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.held_bytes = 0
        # event id -> (stream id, the message's JSON or None for a priming event, size)
        self._events: OrderedDict[str, tuple[str, str | None, int]] = OrderedDict()
        self._streams: dict[str, deque[str]] = {}

    @property
    def held_events(self) -> int:
        """How many events are kept (no ``__len__``: the SDK tests the store for truth)."""
        return len(self._events)

    async def store_event(self, stream_id: str, message: Any) -> str:
        """Keep one event of `stream_id` (None is a priming event) and return its new id."""
        event_id = secrets.token_hex(16)
        # Dumped as the SDK dumps a message for the wire, so the same text can
        # be sent (`send_stored_json`): a 45 KB tool result was dumped twice,
        # once to send it and once only to count its size here.
        data = (
            None if message is None else message.model_dump_json(by_alias=True, exclude_unset=True)
        )
        size = 0 if data is None else len(data)
        self._events[event_id] = (stream_id, data, size)
        self._streams.setdefault(stream_id, deque()).append(event_id)
        self.held_bytes += size
        while self._events and (
            len(self._events) > self.max_events or self.held_bytes > self.max_bytes
        ):
            self._forget_oldest()
        return event_id

    def json_of(self, event_id: str) -> str | None:
        """The JSON kept for event `event_id`; None for a priming or forgotten event."""
        entry = self._events.get(event_id)
        return None if entry is None else entry[1]

    def _forget_oldest(self) -> None:
        _, (stream_id, _, size) = self._events.popitem(last=False)
        self.held_bytes -= size
        stream = self._streams[stream_id]
        stream.popleft()  # the oldest event overall is its stream's oldest
        if not stream:
            del self._streams[stream_id]

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        """Send the events of `last_event_id`'s stream that followed it; None for an unknown id."""
        entry = self._events.get(last_event_id)
        if entry is None:
            return None
        stream_id = entry[0]
        following = list(self._streams.get(stream_id, ()))
        start = following.index(last_event_id) + 1
        for event_id in following[start:]:
            found = self._events.get(event_id)
            if found is not None and found[1] is not None:
                # Parsed back only for a replay (rare): the transport sends
                # the kept text, and holding the message too would hold each
                # result twice.
                message = jsonrpc_message_adapter.validate_json(found[1], by_name=False)
                await send_callback(EventMessage(message, event_id))
        return stream_id


_PRIMED_SINCE = "2025-11-25"
_STREAMABLE_SINCE = "2025-03-26"


def prime_every_stream() -> None:
    """Send the priming event on every Streamable HTTP stream, whatever version a request names.

    The SDK primes a stream only when the request's ``MCP-Protocol-Version``
    header is 2025-11-25 or later, to spare clients too old to skip an event
    with empty data. But a client may name an older version on one request
    of a session it opened at 2025-11-25 (the conformance suite does), and
    every client of the Streamable HTTP era (2025-03-26 on) that lionfactory
    was tested with (the Python SDK, the TypeScript SDK 1.32, the MCP
    Inspector) skips it. So the priming decision treats those versions as
    2025-11-25. Applied by `serve_mcp` to the HTTP server process it runs
    (the SDK's transport class is patched once, for that process); an
    application serving `create_mcp_server` itself decides for itself.
    """
    original = StreamableHTTPServerTransport._mint_priming_event
    if getattr(original, "_lionfactory_primes", False):
        return

    async def mint(self: Any, stream_id: str, protocol_version: str) -> Any:
        if _STREAMABLE_SINCE <= protocol_version < _PRIMED_SINCE:
            protocol_version = _PRIMED_SINCE
        return await original(self, stream_id, protocol_version)

    mint._lionfactory_primes = True  # type: ignore[attr-defined]
    StreamableHTTPServerTransport._mint_priming_event = mint  # type: ignore[method-assign]


def sse_frame(data: str, event_id: str) -> bytes | None:
    """The bytes sse_starlette writes for a ``message`` event of `data` with id `event_id`.

    What ``ServerSentEvent(data, event="message", id=event_id).encode()``
    makes with the response's default separator (the SDK's transport never
    sets another): the id, event and data lines, then a blank line. That
    encoding splits the data into lines with a regular expression, which
    scans every character of a 45 KB reply in Python's ``re`` (0.3-0.5 ms
    of server CPU a read on this 2-core machine, more than `Branch.act`'s
    records), and copies it three times. A message's JSON has no line
    break (JSON escapes them inside strings), so it is one data line; None
    for data or an id with a line break, which the caller encodes as before.
    """
    if "\n" in data or "\r" in data or "\n" in event_id or "\r" in event_id:
        return None
    sep = ServerSentEvent.DEFAULT_SEPARATOR
    head = f"id: {event_id}{sep}event: message{sep}data: ".encode()
    return b"".join((head, data.encode("utf-8"), (sep + sep).encode()))


def send_stored_json() -> None:
    """Make the transport send the JSON a `BoundedEventStore` kept of an event, already framed.

    The SDK stores each event and then dumps its message for the SSE wire;
    the store dumps it too (to keep and count it), so each reply was dumped
    twice, 0.1 ms for a 45 KB read. The store dumps with the SDK's own
    options, so the text sent is the same; and it goes out as the bytes of
    its SSE event (`sse_frame`, which sse_starlette passes through as
    they are), the same bytes sse_starlette's own encoding made. An event
    the store no longer holds, or a transport with another store, is dumped
    and encoded as before. Applied by `serve_mcp` to the HTTP server
    process it runs, like `prime_every_stream`.
    """
    original = StreamableHTTPServerTransport._create_event_data
    if getattr(original, "_lionfactory_stored", False):
        return

    def create(self: Any, event_message: EventMessage) -> Any:
        store = self._event_store
        event_id = event_message.event_id
        if isinstance(store, BoundedEventStore) and event_id:
            data = store.json_of(event_id)
            if data is not None:
                frame = sse_frame(data, event_id)
                if frame is not None:
                    return frame
                return {"event": "message", "data": data, "id": event_id}
        return original(self, event_message)

    create._lionfactory_stored = True  # type: ignore[attr-defined]
    StreamableHTTPServerTransport._create_event_data = create  # type: ignore[method-assign]

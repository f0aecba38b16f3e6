"""The HTTP server's SSE event store: bounded, replaying one stream, ids that cannot be guessed."""

from __future__ import annotations

from typing import Any

from mcp import types
from mcp.server.streamable_http import EventMessage
from sse_starlette.event import ServerSentEvent, ensure_bytes

from lionfactory.mcp._events import BoundedEventStore, sse_frame


def note(i: int, size: int = 10) -> Any:
    return types.JSONRPCNotification(
        jsonrpc="2.0", method="notifications/message", params={"n": i, "pad": "x" * size}
    )


async def replayed(store: BoundedEventStore, after: str) -> list[EventMessage]:
    sent: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        sent.append(event)

    await store.replay_events_after(after, send)
    return sent


async def test_a_replay_sends_what_followed_on_that_stream_only() -> None:
    store = BoundedEventStore()
    priming = await store.store_event("a", None)
    first = await store.store_event("a", note(1))
    await store.store_event("b", note(2))
    third = await store.store_event("a", note(3))
    assert [e.event_id for e in await replayed(store, priming)] == [first, third]
    assert [e.event_id for e in await replayed(store, first)] == [third]
    assert await store.replay_events_after("unknown", lambda e: None) is None  # type: ignore[arg-type,return-value]


async def test_event_ids_are_random_128_bit_tokens() -> None:
    store = BoundedEventStore()
    ids = {await store.store_event("a", note(i)) for i in range(100)}
    assert len(ids) == 100 and all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


async def test_the_oldest_events_go_past_the_count_or_byte_bound() -> None:
    store = BoundedEventStore(max_events=5, max_bytes=10**9)
    ids = [await store.store_event("a", note(i)) for i in range(8)]
    assert store.held_events == 5
    assert await store.replay_events_after(ids[0], lambda e: None) is None  # type: ignore[arg-type,return-value]
    by_bytes = BoundedEventStore(max_bytes=5_000)
    for i in range(20):
        await by_bytes.store_event(f"s{i % 3}", note(i, size=1_000))
    assert by_bytes.held_bytes <= 5_000 and by_bytes.held_events < 20


def test_an_empty_store_is_still_a_store() -> None:
    """The SDK asks ``if not event_store``: an empty store must not look absent."""
    assert BoundedEventStore()


async def test_an_event_is_kept_as_the_json_the_sdk_sends() -> None:
    """The store's text is the SDK's own dump, and a replay hands back the same message."""
    store = BoundedEventStore()
    message = note(1, size=100)
    event_id = await store.store_event("a", message)
    sent = message.model_dump_json(by_alias=True, exclude_unset=True)
    assert store.json_of(event_id) == sent and store.held_bytes == len(sent)
    priming = await store.store_event("a", None)
    assert store.json_of(priming) is None and store.json_of("unknown") is None
    again = await store.store_event("a", note(2))
    (replay,) = await replayed(store, priming)
    assert replay.event_id == again
    assert replay.message.model_dump_json(by_alias=True, exclude_unset=True) == store.json_of(again)


async def test_the_transport_sends_the_kept_json_without_dumping_again() -> None:
    from mcp.server.streamable_http import StreamableHTTPServerTransport

    from lionfactory.mcp._events import send_stored_json

    send_stored_json()
    send_stored_json()  # applied once, however often asked
    store = BoundedEventStore()
    transport = StreamableHTTPServerTransport(None, event_store=store)
    message = note(1)
    event_id = await store.store_event("a", message)
    # Already framed, and framed as sse_starlette frames the SDK's event.
    sdk_event = {"event": "message", "data": store.json_of(event_id), "id": event_id}
    sent = transport._create_event_data(EventMessage(message, event_id))
    assert sent == ensure_bytes(sdk_event, ServerSentEvent.DEFAULT_SEPARATOR)
    assert ensure_bytes(sent, ServerSentEvent.DEFAULT_SEPARATOR) == sent  # passed through as is
    # An event the store no longer holds is dumped as the SDK dumps it.
    other = note(2)
    assert transport._create_event_data(EventMessage(other, "gone"))["data"] == (
        other.model_dump_json(by_alias=True, exclude_unset=True)
    )


def test_a_frame_is_the_bytes_sse_starlette_makes_of_the_event() -> None:
    sep = ServerSentEvent.DEFAULT_SEPARATOR
    for data in ('{"text":"caf\u00e9 \\n \u2028 \U0001f600"}', "", '{"a":1}' * 5_000):
        expected = ensure_bytes({"event": "message", "data": data, "id": "e1"}, sep)
        assert sse_frame(data, "e1") == expected
    # A line break would make several data lines: left to sse_starlette's encoding.
    assert sse_frame("one\ntwo", "e1") is None and sse_frame("one\rtwo", "e1") is None
    assert sse_frame("{}", "e\n1") is None

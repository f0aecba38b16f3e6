from __future__ import annotations

import random
import threading
import uuid

import anyio
import pytest
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from lionfactory import Branch, Exchange
from lionfactory.errors import LionfactoryError, UnknownOwnerError


def owners(n: int) -> list[uuid.UUID]:
    return [uuid.uuid4() for _ in range(n)]


def exchange_of(*ids: uuid.UUID) -> Exchange:
    exchange = Exchange()
    for owner in ids:
        exchange.register(owner)
    return exchange


def test_send_delivers_to_the_recipient_inbox_at_once():
    a, b = owners(2)
    exchange = exchange_of(a, b)
    message = exchange.send(a, b, "hello", "team")
    assert exchange.peek(b) == [message]
    assert (message.role, message.sender, message.recipient, message.channel) == (
        "user",
        str(a),
        str(b),
        "team",
    )
    assert exchange.peek(a) == []


def test_receive_consumes_and_peek_does_not():
    a, b = owners(2)
    exchange = exchange_of(a, b)
    exchange.send(a, b, "one")
    assert len(exchange.peek(b)) == 1
    assert [m.content for m in exchange.receive(b)] == ["one"]
    assert exchange.receive(b) == []


def test_receive_with_sender_takes_only_that_senders_messages_and_keeps_the_rest_in_order():
    a, b, c = owners(3)
    exchange = exchange_of(a, b, c)
    for text, sender in [("a1", a), ("c1", c), ("a2", a), ("c2", c)]:
        exchange.send(sender, b, text)
    assert [m.content for m in exchange.peek(b, sender=c)] == ["c1", "c2"]
    assert [m.content for m in exchange.receive(b, sender=a)] == ["a1", "a2"]
    assert [m.content for m in exchange.receive(b)] == ["c1", "c2"]


def test_broadcast_reaches_every_registered_owner_except_the_sender():
    a, b, c = owners(3)
    exchange = exchange_of(a, b, c)
    message = exchange.send(a, None, "all hands")
    assert message.recipient is None
    assert exchange.peek(b) == [message]
    assert exchange.peek(c) == [message]
    assert exchange.peek(a) == []


def test_unknown_recipient_is_an_error_and_nothing_is_delivered():
    a, b = owners(2)
    exchange = exchange_of(a, b)
    stranger = uuid.uuid4()
    with pytest.raises(UnknownOwnerError) as info:
        exchange.send(a, stranger, "anyone there?")
    assert isinstance(info.value, LionfactoryError)
    assert isinstance(info.value, LookupError)
    assert str(stranger) in str(info.value)
    assert info.value.owner == stranger
    assert exchange.peek(b) == []


def test_unknown_sender_is_an_error():
    (b,) = owners(1)
    exchange = exchange_of(b)
    with pytest.raises(UnknownOwnerError, match="sender"):
        exchange.send(uuid.uuid4(), b, "hi")


def test_owners_must_be_uuids():
    exchange = Exchange()
    with pytest.raises(TypeError, match="uuid"):
        exchange.register("alice")  # type: ignore[arg-type]


def test_register_twice_keeps_the_inbox():
    a, b = owners(2)
    exchange = exchange_of(a, b)
    exchange.send(a, b, "kept")
    exchange.register(b)
    assert [m.content for m in exchange.peek(b)] == ["kept"]
    assert exchange.owners == (a, b)
    assert b in exchange


def test_unregister_returns_pending_mail_and_forgets_the_owner():
    a, b = owners(2)
    exchange = exchange_of(a, b)
    exchange.send(a, b, "left over")
    assert [m.content for m in exchange.unregister(b)] == ["left over"]
    assert b not in exchange
    with pytest.raises(UnknownOwnerError):
        exchange.receive(b)


def test_exchange_holds_no_branch_objects():
    alice, bob = Branch("a"), Branch("b")
    exchange = exchange_of(alice.id, bob.id)
    exchange.send(alice.id, bob.id, "hi")
    seen = [exchange._inboxes, exchange._waiters, *exchange._inboxes.values()]
    flat = [x for box in seen for x in (box.values() if isinstance(box, dict) else box)]
    assert not any(isinstance(x, Branch) for x in [*flat, *exchange._inboxes])


async def test_wait_returns_at_once_when_mail_is_waiting():
    a, b = owners(2)
    exchange = exchange_of(a, b)
    exchange.send(a, b, "already here")
    with anyio.fail_after(1):
        assert await exchange.wait(b, timeout=10) is True


async def test_wait_wakes_on_delivery_without_polling():
    a, b = owners(2)
    exchange = exchange_of(a, b)
    woke: list[bool] = []

    async def waiter() -> None:
        woke.append(await exchange.wait(b))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        assert woke == []  # asleep, not spinning
        exchange.send(a, b, "wake up")
    assert woke == [True]


async def test_wait_times_out_with_false(autojump_clock):
    a, b = owners(2)
    exchange = exchange_of(a, b)
    assert await exchange.wait(b, timeout=5) is False
    assert exchange._waiters == {}  # no event outlives the wait


async def test_wait_with_sender_ignores_mail_from_others(autojump_clock):
    a, b, c = owners(3)
    exchange = exchange_of(a, b, c)
    result: list[bool] = []

    async def waiter() -> None:
        result.append(await exchange.wait(b, timeout=60, sender=c))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        exchange.send(a, b, "not the one")
        await trio.testing.wait_all_tasks_blocked()
        assert result == []
        exchange.send(c, b, "the one")
    assert result == [True]


async def test_wait_rejects_a_negative_timeout():
    (a,) = owners(1)
    exchange = exchange_of(a)
    with pytest.raises(ValueError, match="-1"):
        await exchange.wait(a, timeout=-1)


async def test_unregister_wakes_waiters_with_false():
    a, b = owners(2)
    exchange = exchange_of(a, b)
    result: list[bool] = []

    async def waiter() -> None:
        result.append(await exchange.wait(b))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.testing.wait_all_tasks_blocked()
        exchange.unregister(b)
    assert result == [False]


async def test_ten_owners_exchange_a_thousand_messages_concurrently_exactly_once_in_order():
    ids = owners(10)
    exchange = exchange_of(*ids)
    per_sender = 100
    received: dict[uuid.UUID, list[tuple[str, int]]] = {o: [] for o in ids}
    expected: dict[uuid.UUID, list[tuple[str, int]]] = {o: [] for o in ids}
    rng = random.Random(7)
    plan = {
        sender: [rng.choice([o for o in ids if o != sender]) for _ in range(per_sender)]
        for sender in ids
    }
    for sender, targets in plan.items():
        for i, target in enumerate(targets):
            expected[target].append((str(sender), i))

    async def send_all(sender: uuid.UUID) -> None:
        for i, target in enumerate(plan[sender]):
            exchange.send(sender, target, f"{i}")
            await anyio.lowlevel.checkpoint()  # let the others interleave

    async def receive_all(owner: uuid.UUID) -> None:
        want = len(expected[owner])
        while len(received[owner]) < want:
            await exchange.wait(owner)
            for message in exchange.receive(owner):
                received[owner].append((message.sender or "", int(message.content)))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            for owner in ids:
                group.start_soon(receive_all, owner)
            for sender in ids:
                group.start_soon(send_all, sender)
    total = sum(len(v) for v in received.values())
    assert total == 10 * per_sender
    for owner in ids:
        # Exactly once: the same multiset as planned.
        assert sorted(received[owner]) == sorted(expected[owner])
        # Per-sender order: each sender's indices arrive increasing.
        for sender in ids:
            indices = [i for s, i in received[owner] if s == str(sender)]
            assert indices == sorted(indices)
        assert exchange.peek(owner) == []


def test_wait_works_under_asyncio_across_separate_event_loops():
    import asyncio

    a, b = owners(2)
    exchange = exchange_of(a, b)

    async def wait_then_deliver() -> bool:
        async def deliver() -> None:
            await asyncio.sleep(0)
            exchange.send(a, b, "hi")

        task = asyncio.ensure_future(deliver())
        woke = await exchange.wait(b, timeout=5)
        await task
        return woke

    assert asyncio.run(exchange.wait(b, timeout=0.01)) is False  # timed out in loop 1
    assert asyncio.run(wait_then_deliver()) is True  # a fresh event in loop 2
    assert [m.content for m in exchange.receive(b)] == ["hi"]


@settings(max_examples=15, deadline=None)
@given(threads=st.integers(1, 4), taken_first=st.integers(0, 40), pending=st.integers(0, 10))
def test_unregister_loses_no_send_racing_it_from_threads(threads, taken_first, pending):
    """Every successful send from another thread is received before or returned by unregister."""
    exchange = Exchange()
    recipient, *senders = owners(threads + 1)
    for owner in [recipient, *senders]:
        exchange.register(owner)
    sent: list[list[str]] = [[] for _ in senders]
    started = threading.Barrier(threads + 1)

    def send_until_refused(me: uuid.UUID, out: list[str]) -> None:
        started.wait()
        while True:
            try:
                exchange.send(me, recipient, f"{me}:{len(out)}")
            except UnknownOwnerError:
                return
            out.append(f"{me}:{len(out)}")

    workers = [
        threading.Thread(target=send_until_refused, args=(s, out))
        for s, out in zip(senders, sent, strict=True)
    ]
    for worker in workers:
        worker.start()
    started.wait()
    while exchange.count(recipient) < taken_first + pending + 1:
        pass  # the senders are running; wait for enough mail to take some first
    got = [m.content for m in exchange.receive(recipient, limit=taken_first)] if taken_first else []
    if pending:
        exchange.receive(recipient, ack=False, limit=pending)
    left = exchange.unregister(recipient)
    for worker in workers:
        worker.join()
    delivered = got + [m.content for m in left]
    assert len(delivered) == len(set(delivered))
    assert set(delivered) == {c for out in sent for c in out}

"""The exchange contract, held by the in-memory `Exchange` and by `RedisExchange` (real server)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import anyio
import pytest

from lionfactory import Branch, Exchange
from lionfactory.backends import BaseExchange, RedisExchange
from lionfactory.errors import UnknownOwnerError
from lionfactory.tools import messenger_tool


@pytest.fixture(params=["memory", "redis"])
def exchange(request: pytest.FixtureRequest) -> Iterator[BaseExchange]:
    if request.param == "memory":
        yield Exchange()
        return
    url = request.getfixturevalue("redis_url")
    made = RedisExchange(url, namespace=request.getfixturevalue("redis_namespace"))
    try:
        yield made
    finally:
        made.close()


def registered(exchange: BaseExchange, n: int) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in range(n)]
    for owner in ids:
        exchange.register(owner)
    return ids


def contents(messages: list) -> list[str]:
    return [m.content for m in messages]


def test_send_delivers_at_once_and_receive_consumes(exchange: BaseExchange) -> None:
    a, b = registered(exchange, 2)
    sent = exchange.send(a, b, "hello", "team", metadata={"sender_name": "a"})
    [peeked] = exchange.peek(b)
    assert peeked == sent
    assert (peeked.sender, peeked.recipient, peeked.channel) == (str(a), str(b), "team")
    assert exchange.peek(a) == []
    assert exchange.receive(b) == [sent]
    assert exchange.receive(b) == []


def test_per_sender_order_and_the_sender_filter(exchange: BaseExchange) -> None:
    a, b, c = registered(exchange, 3)
    for text, sender in [("a1", a), ("c1", c), ("a2", a), ("c2", c), ("a3", a)]:
        exchange.send(sender, b, text)
    assert contents(exchange.peek(b, sender=c)) == ["c1", "c2"]
    assert contents(exchange.receive(b, sender=a)) == ["a1", "a2", "a3"]
    assert contents(exchange.receive(b)) == ["c1", "c2"]


def test_broadcast_reaches_every_owner_but_the_sender(exchange: BaseExchange) -> None:
    a, b, c = registered(exchange, 3)
    message = exchange.send(a, None, "all hands")
    assert exchange.receive(b) == [message]
    assert exchange.receive(c) == [message]
    assert exchange.receive(a) == []
    assert message.recipient is None


def test_unknown_owners_are_refused_and_nothing_is_sent(exchange: BaseExchange) -> None:
    a, b = registered(exchange, 2)
    stranger = uuid.uuid4()
    with pytest.raises(UnknownOwnerError):
        exchange.send(a, stranger, "x")
    with pytest.raises(UnknownOwnerError):
        exchange.send(stranger, b, "x")
    with pytest.raises(UnknownOwnerError):
        exchange.receive(stranger)
    with pytest.raises(UnknownOwnerError):
        exchange.peek(stranger)
    with pytest.raises(TypeError, match="content must be a string"):
        exchange.send(a, b, 3)  # type: ignore[arg-type]
    assert exchange.peek(b) == []


def test_unacknowledged_messages_come_back_first_until_acked(exchange: BaseExchange) -> None:
    a, b = registered(exchange, 2)
    exchange.send(a, b, "one")
    exchange.send(a, b, "two")
    first = exchange.receive(b, ack=False)
    exchange.send(a, b, "three")
    assert contents(exchange.receive(b, ack=False)) == ["one", "two", "three"]
    assert contents(exchange.peek(b)) == ["one", "two", "three"]
    exchange.ack(b, [m.id for m in first])
    assert contents(exchange.peek(b)) == ["three"]
    assert contents(exchange.receive(b)) == ["three"]
    assert exchange.peek(b) == []


def test_owners_in_registration_order_and_unregister_returns_what_is_left(
    exchange: BaseExchange,
) -> None:
    a, b, c = registered(exchange, 3)
    exchange.register(a)  # twice is harmless
    assert exchange.owners == (a, b, c)
    assert b in exchange and uuid.uuid4() not in exchange
    exchange.send(a, b, "pending")
    exchange.receive(b, ack=False)
    exchange.send(c, b, "new")
    assert contents(exchange.unregister(b)) == ["pending", "new"]
    assert b not in exchange
    with pytest.raises(UnknownOwnerError):
        exchange.send(a, b, "late")


async def test_wait_wakes_when_mail_arrives_and_times_out_otherwise(
    exchange: BaseExchange,
) -> None:
    a, b, c = registered(exchange, 3)
    assert await exchange.wait(b, 0.05) is False
    woke: list[bool] = []

    async def waiter() -> None:
        woke.append(await exchange.wait(b, 30, sender=c))

    async with anyio.create_task_group() as tg:
        tg.start_soon(waiter)
        await exchange.asend(a, b, "not from c")
        await exchange.asend(c, b, "from c")
    assert woke == [True]
    assert contents(await exchange.areceive(b)) == ["not from c", "from c"]


async def test_a_cancelled_wait_returns_promptly(exchange: BaseExchange) -> None:
    (a,) = registered(exchange, 1)
    with anyio.fail_after(5):
        with anyio.move_on_after(0.1):
            await exchange.wait(a, None)


def test_the_async_methods_work_under_asyncio(exchange: BaseExchange) -> None:
    a, b = registered(exchange, 2)

    async def main() -> list[str]:
        await exchange.asend(a, b, "via asyncio")
        assert await exchange.wait(b, 5)
        taken = await exchange.areceive(b, ack=False)
        await exchange.aack(b, [m.id for m in taken])
        assert await exchange.apeek(b) == []
        return contents(taken)

    assert asyncio.run(main()) == ["via asyncio"]


@pytest.mark.parametrize(
    ("restored_from", "shown"),
    [("after", ["second"]), ("before", ["first", "second"])],
)
async def test_a_restarted_messenger_gets_what_its_branch_never_recorded_once(
    exchange: BaseExchange, restored_from: str, shown: list[str]
) -> None:
    """The process holding bob dies after a receive; a successor restores bob's branch.

    Restored as saved after the receive, "first" is in its record and is not
    shown again; restored from before it, the branch never saw "first", so at
    least once means it gets it. Either way nothing shows twice.
    """
    alice, bob = Branch(name="alice"), Branch(name="bob")
    roster = {"alice": alice.id, "bob": bob.id}
    alice.register(messenger_tool, exchange=exchange, roster=roster, sender_name="alice")
    bob.register(messenger_tool, exchange=exchange, roster=roster, sender_name="bob")
    await alice.act("messenger", {"action": "send", "to": "bob", "content": "first"})
    saved = {"before": bob.to_dict()}
    got = await bob.act("messenger", {"action": "receive"})
    assert [m["content"] for m in got.result["messages"]] == ["first"]
    saved["after"] = bob.to_dict()
    await alice.act("messenger", {"action": "send", "to": "bob", "content": "second"})

    successor = Branch.from_dict(saved[restored_from], resources={"exchange": exchange})
    again = await successor.act("messenger", {"action": "receive"})
    assert [m["content"] for m in again.result["messages"]] == shown
    assert (await successor.act("messenger", {"action": "receive"})).result["messages"] == []
    assert exchange.peek(bob.id) == []


async def test_capped_receives_drain_a_large_inbox_without_an_empty_answer(
    exchange: BaseExchange,
) -> None:
    """300 waiting, 50 per receive: every receive brings the next 50 until none is left."""
    alice, bob = Branch(name="alice"), Branch(name="bob")
    roster = {"alice": alice.id, "bob": bob.id}
    alice.register(messenger_tool, exchange=exchange, roster=roster, sender_name="alice")
    bob.register(messenger_tool, exchange=exchange, roster=roster, sender_name="bob")
    for i in range(300):
        exchange.send(alice.id, bob.id, f"m{i}")
    seen: list[str] = []
    remaining = []
    for _ in range(6):
        got = (await bob.act("messenger", {"action": "receive"})).result
        assert got["messages"], f"an empty receive after {len(seen)} while {got['remaining']} wait"
        seen += [m["content"] for m in got["messages"]]
        remaining.append(got["remaining"])
    assert seen == [f"m{i}" for i in range(300)]
    assert remaining == [250, 200, 150, 100, 50, 0]
    last = (await bob.act("messenger", {"action": "receive"})).result
    assert (last["messages"], last["remaining"]) == ([], 0)
    assert exchange.count(bob.id) == 0


def test_peek_and_count_honour_limit_and_pending(exchange: BaseExchange) -> None:
    a, b = registered(exchange, 2)
    for i in range(10):
        exchange.send(a, b, f"m{i}")
    exchange.receive(b, ack=False, limit=3)
    assert contents(exchange.peek(b, limit=5)) == ["m0", "m1", "m2", "m3", "m4"]
    assert exchange.count(b) == 10
    assert exchange.count(b, sender=b) == 0
    assert contents(exchange.receive(b, limit=4)) == ["m0", "m1", "m2", "m3"]
    assert exchange.count(b) == 6
    with pytest.raises(ValueError, match="limit"):
        exchange.peek(b, limit=0)
    with pytest.raises(UnknownOwnerError):
        exchange.count(uuid.uuid4())


@pytest.fixture
def redis_exchange(redis_url: str, redis_namespace: str) -> Iterator[RedisExchange]:
    made = RedisExchange(redis_url, namespace=redis_namespace)
    try:
        yield made
    finally:
        made.close()


def plant_entries(exchange: RedisExchange, owner: uuid.UUID) -> None:
    """What another client of the server could XADD to an inbox."""
    inbox = f"{exchange.namespace}:inbox:{owner}"
    exchange._client.xadd(inbox, {"id": "x1", "m": "{not json"})
    exchange._client.xadd(inbox, {"other": "field"})
    exchange._client.xadd(inbox, {"id": "x3", "m": '{"role": "nobody"}'})


def test_malformed_stream_entries_go_to_the_dead_letters_and_mail_flows(
    redis_exchange: RedisExchange,
) -> None:
    a, b = registered(redis_exchange, 2)
    for i in range(3):
        redis_exchange.send(a, b, f"good{i}")
    plant_entries(redis_exchange, b)
    for i in range(3, 6):
        redis_exchange.send(a, b, f"good{i}")
    assert contents(redis_exchange.receive(b)) == [f"good{i}" for i in range(6)]
    assert redis_exchange.take_rejected(b) == 3
    assert redis_exchange.take_rejected(b) == 0  # reported once
    dead = redis_exchange._client.xrange(f"{redis_exchange.namespace}:deadletter:{b}")
    assert [fields[b"m"] for _, fields in dead] == [b"{not json", b"", b'{"role": "nobody"}']
    assert all(fields[b"reason"] for _, fields in dead)
    redis_exchange.send(a, b, "later")
    assert contents(redis_exchange.receive(b)) == ["later"]  # the inbox keeps flowing


@pytest.mark.parametrize("how", ["peek", "capped", "unacked", "unregister"])
def test_every_read_path_survives_a_malformed_entry(
    redis_exchange: RedisExchange, how: str
) -> None:
    a, b = registered(redis_exchange, 2)
    redis_exchange.send(a, b, "before")
    plant_entries(redis_exchange, b)
    redis_exchange.send(a, b, "after")
    if how == "peek":
        got = redis_exchange.peek(b)
    elif how == "capped":
        got = redis_exchange.receive(b, limit=2) + redis_exchange.receive(b, limit=2)
    elif how == "unacked":
        got = redis_exchange.receive(b, ack=False)
        redis_exchange.ack(b, [m.id for m in got])
    else:
        got = redis_exchange.unregister(b)
    assert contents(got) == ["before", "after"]
    assert redis_exchange.take_rejected(b) == 3
    if how != "unregister":
        assert redis_exchange.count(b) == (2 if how == "peek" else 0)


async def test_the_messenger_reports_set_aside_entries_once(redis_exchange: RedisExchange) -> None:
    alice, bob = Branch(name="alice"), Branch(name="bob")
    roster = {"alice": alice.id, "bob": bob.id}
    alice.register(messenger_tool, exchange=redis_exchange, roster=roster, sender_name="alice")
    bob.register(messenger_tool, exchange=redis_exchange, roster=roster, sender_name="bob")
    for i in range(6):
        await alice.act("messenger", {"action": "send", "to": "bob", "content": f"m{i}"})
        if i == 2:
            plant_entries(redis_exchange, bob.id)
    got = (await bob.act("messenger", {"action": "receive"})).result
    assert [m["content"] for m in got["messages"]] == [f"m{i}" for i in range(6)]
    assert got["rejected"] == 3 and "set aside" in got["content"]
    await alice.act("messenger", {"action": "send", "to": "bob", "content": "m6"})
    again = (await bob.act("messenger", {"action": "receive"})).result
    assert [m["content"] for m in again["messages"]] == ["m6"]
    assert again["rejected"] == 0

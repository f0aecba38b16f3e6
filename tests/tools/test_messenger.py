from __future__ import annotations

import json
import random
import uuid

import anyio
import pytest
import trio.testing

from lionfactory import Branch, Exchange
from lionfactory.errors import ToolInputError
from lionfactory.testing import ScriptedModel, assert_no_foreign_bindings, tool_call
from lionfactory.tools import MessengerEvent, messenger_tool
from lionfactory.tools.messenger import MAX_RECEIVE_CHARS, MAX_RECEIVE_MESSAGES

# -- helpers --------------------------------------------------------------------


def team(*names: str, exchange: Exchange | None = None, **options) -> dict[str, Branch]:
    """Branches with messengers named after themselves, sharing one exchange and roster."""
    exchange = exchange or Exchange()
    branches = {name: Branch(f"You are {name}.", name=name) for name in names}
    roster = {name: branch.id for name, branch in branches.items()}
    for name, branch in branches.items():
        branch.register(
            messenger_tool, exchange=exchange, roster=roster, sender_name=name, **options
        )
    return branches


async def call(branch: Branch, **arguments):
    return await branch.tools["messenger"](**arguments)


def exchange_of(branch: Branch) -> Exchange:
    return branch.provenance("messenger").kwargs["exchange"]


# -- factory ---------------------------------------------------------------------


def test_factory_registers_the_branch_and_binds_the_tool():
    exchange = Exchange()
    branch = Branch()
    tool = messenger_tool(branch, exchange=exchange, roster={})
    assert branch.id in exchange
    assert tool.name == "messenger"
    assert tool.bound_to == branch.id


def test_factory_refuses_a_display_name_the_roster_gives_to_another_branch():
    other = uuid.uuid4()
    with pytest.raises(ValueError, match="'alice' already names branch"):
        messenger_tool(Branch(), exchange=Exchange(), roster={"alice": other}, sender_name="alice")


def test_factory_refuses_a_default_display_name_taken_in_the_roster():
    branch = Branch()
    taken = str(branch.id)[:8]
    with pytest.raises(ValueError, match=taken):
        messenger_tool(branch, exchange=Exchange(), roster={taken: uuid.uuid4()})


def test_factory_refuses_roster_names_equal_but_for_case():
    roster = {"Bob": uuid.uuid4(), "bob": uuid.uuid4()}
    with pytest.raises(ValueError, match="'Bob' and 'bob'"):
        messenger_tool(Branch(), exchange=Exchange(), roster=roster)


def test_factory_accepts_the_branch_itself_in_the_roster():
    branch = Branch()
    messenger_tool(branch, exchange=Exchange(), roster={"me": branch.id}, sender_name="me")


@pytest.mark.parametrize(
    ("options", "error", "shown"),
    [
        ({"exchange": "ex"}, TypeError, "'ex'"),
        ({"roster": ["bob"]}, TypeError, "['bob']"),
        ({"roster": {"bob": "not-a-uuid"}}, ValueError, "'not-a-uuid'"),
        ({"roster": {"": uuid.UUID(int=1)}}, ValueError, "''"),
        ({"channel": " "}, ValueError, "' '"),
        ({"sender_name": ""}, ValueError, "''"),
        ({"on_event": {"party": print}}, ValueError, "party"),
        ({"on_event": 3}, TypeError, "3"),
    ],
)
def test_factory_rejects_bad_options_showing_the_value(options, error, shown):
    arguments = {"exchange": Exchange(), "roster": {}, **options}
    with pytest.raises(error) as info:
        messenger_tool(Branch(), **arguments)
    assert shown in str(info.value)


# -- send and receive --------------------------------------------------------------


async def test_send_delivers_to_the_named_teammate():
    t = team("alice", "bob")
    out = await call(t["alice"], action="send", to="bob", content="tests pass")
    assert out["success"] is True
    assert out["results"] == [
        {
            "name": "bob",
            "delivered": True,
            "message_id": out["results"][0]["message_id"],
            "error": None,
        }
    ]
    [message] = exchange_of(t["bob"]).peek(t["bob"].id)
    assert (message.sender, message.recipient, message.channel) == (
        str(t["alice"].id),
        str(t["bob"].id),
        "team",
    )


async def test_send_reports_each_target_and_still_delivers_to_known_ones():
    t = team("alice", "bob", "carol")
    out = await call(t["alice"], action="send", to=["bob", "dave", "Carol", "alice"], content="hi")
    assert out["success"] is False
    by_name = {r["name"]: r for r in out["results"]}
    assert by_name["bob"]["delivered"] is True
    assert by_name["Carol"]["delivered"] is True  # names match case-insensitively
    assert by_name["dave"]["delivered"] is False
    assert "unknown name 'dave'" in by_name["dave"]["error"]
    assert "bob" in by_name["dave"]["error"]  # lists the known names
    assert "is you" in by_name["alice"]["error"]
    assert "do not send it to them again" in out["error"]
    assert len(exchange_of(t["bob"]).peek(t["carol"].id)) == 1


async def test_send_to_a_teammate_not_on_the_exchange_is_a_failure_not_a_silent_drop():
    exchange = Exchange()
    alice = Branch()
    alice.register(messenger_tool, exchange=exchange, roster={"bob": uuid.uuid4()})
    out = await call(alice, action="send", to="bob", content="hello?")
    assert out["success"] is False
    assert "not on the exchange" in out["results"][0]["error"]


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [({"to": "bob"}, "content"), ({"content": "x"}, "to"), ({"to": [" "], "content": "x"}, "to")],
)
async def test_send_without_to_or_content_is_a_typed_failure(arguments, needle):
    t = team("alice", "bob")
    out = await call(t["alice"], action="send", **arguments)
    assert out["success"] is False
    assert needle in out["error"]


async def test_receive_takes_messages_oldest_first_with_roster_names():
    t = team("alice", "bob", "carol")
    await call(t["alice"], action="send", to="carol", content="one")
    await call(t["bob"], action="send", to="carol", content="two")
    out = await call(t["carol"], action="receive")
    assert [(m["sender"], m["content"]) for m in out["messages"]] == [
        ("alice", "one"),
        ("bob", "two"),
    ]
    assert out["messages"][0]["sender_id"] == str(t["alice"].id)
    assert "From alice (team): one" in out["content"]
    again = await call(t["carol"], action="receive")
    assert again["messages"] == []
    assert again["content"] == "No messages are waiting."


async def test_receive_with_sender_keeps_the_others_waiting():
    t = team("alice", "bob", "carol")
    await call(t["alice"], action="send", to="carol", content="from alice")
    await call(t["bob"], action="send", to="carol", content="from bob")
    out = await call(t["carol"], action="receive", sender="bob")
    assert [m["content"] for m in out["messages"]] == ["from bob"]
    rest = await call(t["carol"], action="receive")
    assert [m["content"] for m in rest["messages"]] == ["from alice"]


async def test_receive_with_an_unknown_sender_is_a_typed_failure():
    t = team("alice", "bob")
    out = await call(t["bob"], action="receive", sender="zed")
    assert out["success"] is False
    assert "unknown name 'zed'" in out["error"]


async def test_receive_with_timeout_wakes_when_a_message_arrives(autojump_clock):
    t = team("alice", "bob")
    got: list[dict] = []

    async def bob_waits() -> None:
        got.append(await call(t["bob"], action="receive", timeout=60))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(bob_waits)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        await call(t["alice"], action="send", to="bob", content="here you go")
    assert [m["content"] for m in got[0]["messages"]] == ["here you go"]


async def test_receive_with_timeout_gives_up_empty(autojump_clock):
    t = team("alice", "bob")
    out = await call(t["bob"], action="receive", timeout=5)
    assert out["success"] is True
    assert out["messages"] == []


async def test_receive_timeout_above_the_maximum_fails_validation():
    t = team("alice", "bob")
    with pytest.raises(ToolInputError, match="timeout"):
        await call(t["bob"], action="receive", timeout=301)


async def test_a_sender_outside_the_roster_shows_its_own_display_name():
    exchange = Exchange()
    bob = Branch()
    bob.register(messenger_tool, exchange=exchange, roster={})
    stranger = Branch()
    stranger.register(messenger_tool, exchange=exchange, roster={"bob": bob.id})
    await call(stranger, action="send", to="bob", content="hi")
    out = await call(bob, action="receive")
    assert out["messages"][0]["sender"] == str(stranger.id)[:8]


# -- wakeup, help, done, finished ---------------------------------------------------


async def test_wakeup_refuses_more_than_one_name():
    t = team("alice", "bob", "carol")
    out = await call(t["alice"], action="wakeup", to=["bob", "carol"])
    assert out["success"] is False
    assert "exactly one name" in out["error"]
    assert exchange_of(t["bob"]).peek(t["bob"].id) == []


async def test_wakeup_sends_a_marked_message_and_fires_the_event():
    events: list[MessengerEvent] = []
    t = team("alice", "bob", on_event=events.append)
    out = await call(t["alice"], action="wakeup", to=["bob"], content="review please")
    assert out["success"] is True
    [message] = exchange_of(t["bob"]).peek(t["bob"].id)
    assert message.content == "[WAKEUP] review please"
    assert [(e.kind, e.to, e.sender_name) for e in events] == [("wakeup", ("bob",), "alice")]
    assert events[0].messages == (message,)


async def test_help_fires_an_async_callback_with_the_urgency_and_sends_to_named_teammates():
    events: list[MessengerEvent] = []

    async def record(event: MessengerEvent) -> None:
        await anyio.lowlevel.checkpoint()
        events.append(event)

    t = team("alice", "bob", on_event={"help": record})
    out = await call(t["alice"], action="help", urgency="blocked", to="bob", content="stuck")
    assert out["success"] is True
    assert [(e.kind, e.urgency, e.content) for e in events] == [("help", "blocked", "stuck")]
    assert exchange_of(t["bob"]).peek(t["bob"].id)[0].content == "[HELP:blocked] stuck"


async def test_help_with_an_unknown_urgency_fails_validation():
    t = team("alice", "bob")
    with pytest.raises(ToolInputError, match="urgency"):
        await call(t["alice"], action="help", urgency="panic", content="x")


async def test_help_with_no_one_listening_is_a_typed_failure():
    t = team("alice", "bob")
    out = await call(t["alice"], action="help", content="anyone?")
    assert out["success"] is False
    assert "to" in out["error"]


@pytest.mark.parametrize("kind", ["done", "finished"])
async def test_done_and_finished_fire_their_events(kind):
    events: list[MessengerEvent] = []
    t = team("alice", "bob", on_event=events.append)
    out = await call(t["alice"], action=kind, content="all green")
    assert out["success"] is True
    assert [(e.kind, e.content, e.branch_id) for e in events] == [
        (kind, "all green", t["alice"].id)
    ]


async def test_a_failing_callback_is_reported_not_swallowed():
    def explode(event: MessengerEvent) -> None:
        raise RuntimeError("pager offline")

    t = team("alice", "bob", on_event=explode)
    out = await call(t["alice"], action="wakeup", to="bob")
    assert out["success"] is False
    assert "RuntimeError: pager offline" in out["error"]
    assert "Do not repeat" in out["error"]
    assert len(exchange_of(t["bob"]).peek(t["bob"].id)) == 1  # the wakeup went out


# -- recording in the log ------------------------------------------------------------


async def test_through_act_messages_are_recorded_on_the_tool_message_only():
    t = team("alice", "bob")
    await call(t["alice"], action="send", to="bob", content="ping")
    bob = t["bob"]
    before = bob.messages.total
    result = await bob.act("messenger", {"action": "receive"})
    assert bob.messages.total == before + 2  # the call and its result, nothing between
    assert [m.role for m in bob.messages.active[-2:]] == ["assistant", "tool"]
    record = result.message.metadata["messenger"]
    assert [m["content"] for m in record["received"]] == ["ping"]
    assert json.loads(result.message.content)["messages"][0]["content"] == "ping"


async def test_through_act_sent_messages_are_recorded_on_the_tool_message():
    t = team("alice", "bob")
    result = await t["alice"].act("messenger", {"action": "send", "to": "bob", "content": "x"})
    [sent] = result.message.metadata["messenger"]["sent"]
    assert sent["recipient"] == str(t["bob"].id)


async def test_direct_calls_append_sent_and_received_messages_to_the_log():
    t = team("alice", "bob")
    await call(t["alice"], action="send", to="bob", content="ping")
    sent = t["alice"].messages[-1]
    assert (sent.role, sent.recipient, sent.channel) == ("assistant", str(t["bob"].id), "team")
    assert "ping" in sent.content
    await call(t["bob"], action="receive")
    got = t["bob"].messages[-1]
    assert (got.role, got.sender, got.channel) == ("user", str(t["alice"].id), "team")
    assert got.content == "[from alice on team] ping"


async def test_run_lets_models_talk_to_each_other():
    t = team("alice", "bob")
    t["alice"].chat_model = ScriptedModel(
        [tool_call("messenger", action="send", to="bob", content="deploy at 5"), "sent"]
    )
    bob_model = ScriptedModel([tool_call("messenger", action="receive"), "ok"])
    t["bob"].chat_model = bob_model
    assert await t["alice"].run("tell bob") == "sent"
    assert await t["bob"].run("check mail") == "ok"
    seen = json.loads(bob_model.calls[1].messages[-1].content)
    assert seen["messages"][0]["content"] == "deploy at 5"
    assert seen["messages"][0]["sender"] == "alice"


# -- clone ------------------------------------------------------------------------------


async def test_a_cloned_messenger_sends_as_the_clone():
    t = team("alice", "bob")
    alice = t["alice"]
    clone = alice.clone()
    exchange = exchange_of(alice)
    assert clone.id in exchange
    await call(clone, action="send", to="bob", content="from the clone")
    [message] = exchange.receive(t["bob"].id)
    assert message.sender == str(clone.id)
    assert message.metadata["sender_name"] == "alice"  # it continues alice's role
    assert clone.tools["messenger"].bound_to == clone.id
    assert_no_foreign_bindings(clone)
    assert_no_foreign_bindings(alice)


async def test_the_clone_has_its_own_inbox_and_the_source_keeps_its_mail():
    t = team("alice", "bob")
    clone = t["alice"].clone()
    await call(t["bob"], action="send", to="alice", content="for the source")
    assert (await call(clone, action="receive"))["messages"] == []
    mine = await call(t["alice"], action="receive")
    assert [m["content"] for m in mine["messages"]] == ["for the source"]


async def test_in_the_clones_roster_the_source_name_means_the_clone():
    t = team("alice", "bob")
    clone = t["alice"].clone()
    out = await call(clone, action="send", to="alice", content="hello me")
    assert "is you" in out["results"][0]["error"]
    grandchild = clone.clone()  # lineage survives more than one generation
    assert_no_foreign_bindings(grandchild)
    assert (await call(grandchild, action="send", to="alice", content="x"))["success"] is False


async def test_the_source_still_sends_as_itself_after_cloning():
    t = team("alice", "bob")
    t["alice"].clone()
    await call(t["alice"], action="send", to="bob", content="still me")
    [message] = exchange_of(t["bob"]).receive(t["bob"].id)
    assert message.sender == str(t["alice"].id)


# -- concurrency ---------------------------------------------------------------------------


async def test_ten_messengers_exchange_a_thousand_messages_exactly_once_in_order():
    names = [f"agent{i}" for i in range(10)]
    t = team(*names)
    rng = random.Random(11)
    plan = {n: [rng.choice([m for m in names if m != n]) for _ in range(100)] for n in names}
    expected = {
        n: sorted((s, i) for s in names for i, r in enumerate(plan[s]) if r == n) for n in names
    }
    received: dict[str, list[tuple[str, int]]] = {n: [] for n in names}

    async def send_all(name: str) -> None:
        for i, target in enumerate(plan[name]):
            out = await call(t[name], action="send", to=target, content=str(i))
            assert out["success"] is True
            await anyio.lowlevel.checkpoint()  # let the other senders interleave

    async def receive_all(name: str) -> None:
        while len(received[name]) < len(expected[name]):
            out = await call(t[name], action="receive", timeout=30)
            received[name].extend((m["sender"], int(m["content"])) for m in out["messages"])

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            for name in names:
                group.start_soon(receive_all, name)
            async with anyio.create_task_group() as senders:
                for name in names:
                    senders.start_soon(send_all, name)
    assert sum(len(v) for v in received.values()) == 1000
    for name in names:
        assert sorted(received[name]) == expected[name]  # exactly once
        for sender in names:
            order = [i for s, i in received[name] if s == sender]
            assert order == sorted(order)  # per-sender order


# -- receive is capped ------------------------------------------------------------


async def test_a_flood_is_received_in_capped_batches_and_nothing_is_lost():
    """1,000 messages from a teammate never come back as one huge tool message."""
    branches = team("alice", "bob")
    for i in range(1_000):
        await call(branches["alice"], action="send", to="bob", content=f"message {i:04d} " * 10)

    seen: list[str] = []
    batches = 0
    while True:
        result = await call(branches["bob"], action="receive")
        batches += 1
        assert len(result["messages"]) <= MAX_RECEIVE_MESSAGES
        assert sum(len(m["content"]) for m in result["messages"]) <= MAX_RECEIVE_CHARS
        assert len(json.dumps(result)) < 3 * MAX_RECEIVE_CHARS
        seen += [m["content"].split()[1] for m in result["messages"]]
        assert result["remaining"] == 1_000 - len(seen)
        if not result["remaining"]:
            break
        assert "call receive again" in result["content"]

    assert seen == [f"{i:04d}" for i in range(1_000)]
    assert batches >= 1_000 // MAX_RECEIVE_MESSAGES


async def test_long_messages_are_capped_by_characters():
    branches = team("alice", "bob")
    for _ in range(5):
        await call(branches["alice"], action="send", to="bob", content="x" * 8_000)

    first = await call(branches["bob"], action="receive")

    assert len(first["messages"]) == MAX_RECEIVE_CHARS // 8_000
    assert first["remaining"] == 5 - len(first["messages"])


async def test_one_message_over_the_budget_is_cut_not_held_back():
    branches = team("alice", "bob")
    await call(branches["alice"], action="send", to="bob", content="y" * (MAX_RECEIVE_CHARS * 3))

    result = await call(branches["bob"], action="receive")

    (message,) = result["messages"]
    assert len(message["content"]) < MAX_RECEIVE_CHARS + 100
    assert "more characters" in message["content"]
    assert result["remaining"] == 0


async def test_a_sender_filtered_receive_leaves_other_senders_queued_in_order():
    branches = team("alice", "bob", "carol")
    await call(branches["carol"], action="send", to="bob", content="from carol 1")
    for i in range(60):
        await call(branches["alice"], action="send", to="bob", content=f"from alice {i}")
    await call(branches["carol"], action="send", to="bob", content="from carol 2")

    first = await call(branches["bob"], action="receive", sender="alice")
    assert first["remaining"] == 60 - len(first["messages"])
    carol = await call(branches["bob"], action="receive", sender="carol")
    assert [m["content"] for m in carol["messages"]] == ["from carol 1", "from carol 2"]


def test_exchange_receive_takes_at_most_limit_and_keeps_the_rest_in_order():
    exchange = Exchange()
    me, other = uuid.uuid4(), uuid.uuid4()
    exchange.register(me)
    exchange.register(other)
    for i in range(5):
        exchange.send(other, me, f"m{i}")

    assert [m.content for m in exchange.receive(me, limit=2)] == ["m0", "m1"]
    assert [m.content for m in exchange.receive(me)] == ["m2", "m3", "m4"]
    with pytest.raises(ValueError, match="limit"):
        exchange.receive(me, limit=0)

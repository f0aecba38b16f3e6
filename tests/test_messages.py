from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from _test_helpers import ids_passed_to
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from lionfactory import Message, MessageLog, ToolCall, _messages, estimate_tokens


def log_with(n: int, system: str | None = "sys") -> tuple[MessageLog, list[Message]]:
    log = MessageLog()
    if system is not None:
        log.set_system(system)
    msgs = [log.append(Message(role="user", content=f"m{i}")) for i in range(n)]
    return log, msgs


def contents(log: MessageLog) -> list[str]:
    return [m.content for m in log]


def test_messages_are_immutable():
    msg = Message(role="user", content="x")
    with pytest.raises(ValidationError):
        msg.content = "y"  # type: ignore[misc]


def test_second_system_message_is_refused_and_set_system_replaces_in_place():
    log, _ = log_with(2)
    with pytest.raises(ValueError, match="set_system"):
        log.append(Message(role="system", content="again"))
    log.set_system("new")
    assert contents(log) == ["new", "m0", "m1"]
    assert [m.role for m in log].count("system") == 1
    assert log.total == 4  # the old system message stays in the record


def test_evict_never_removes_the_system_message():
    log, _ = log_with(3)
    evicted = log.evict(0, 2)
    assert [m.content for m in evicted] == ["m0"]
    assert contents(log) == ["sys", "m1", "m2"]


def test_evict_and_restore_keep_chronological_order():
    log, msgs = log_with(5)
    log.evict(1, 3)
    log.evict(2, 3)
    assert contents(log) == ["sys", "m2", "m4"]
    assert not log.is_active(msgs[0].id)
    restored = log.restore(0, None)
    assert [m.content for m in restored] == ["m0", "m1", "m3"]
    assert contents(log) == ["sys", "m0", "m1", "m2", "m3", "m4"]


def test_replace_puts_summary_in_place_and_restore_retires_it():
    log, msgs = log_with(4)
    summary = log.replace([msgs[1].id, msgs[2].id], Message(role="assistant", content="S"))
    assert contents(log) == ["sys", "m0", "S", "m3"]
    assert log.total == 6
    log.restore()
    assert contents(log) == ["sys", "m0", "m1", "m2", "m3"]
    assert not log.is_active(summary.id)
    assert log.get(summary.id) is summary


def test_replace_refuses_the_system_message_and_inactive_ids():
    log, msgs = log_with(2)
    with pytest.raises(ValueError, match="system"):
        log.replace([log[0].id], Message(role="assistant", content="S"))
    log.evict(1, 2)
    with pytest.raises(ValueError, match="not in the active view"):
        log.replace([msgs[0].id], Message(role="assistant", content="S"))


def test_messages_appended_after_compaction_come_after_the_summary():
    log, msgs = log_with(3)
    log.replace([msgs[0].id, msgs[1].id], Message(role="assistant", content="S"))
    log.append(Message(role="user", content="late"))
    assert contents(log) == ["sys", "S", "m2", "late"]


def test_copy_shares_messages_but_not_the_view():
    log, _ = log_with(3)
    other = log.copy()
    other.evict(1, 2)
    assert contents(log) == ["sys", "m0", "m1", "m2"]
    assert contents(other) == ["sys", "m1", "m2"]
    assert all(a is b for a, b in zip(log.record, other.record, strict=True))


def test_estimate_tokens_is_deterministic_and_counts_tool_calls():
    plain = [Message(role="user", content="x" * 40)]
    with_call = [
        Message(role="assistant", tool_calls=(ToolCall(name="read", arguments={"p": "x" * 40}),))
    ]
    assert estimate_tokens(plain) == estimate_tokens(plain) == 14
    assert estimate_tokens(with_call) > 10
    log, _ = log_with(2)
    assert log.estimate_tokens() == estimate_tokens(log.active)


def test_log_without_system_message_can_evict_index_zero():
    log, _ = log_with(2, system=None)
    log.evict(0, 1)
    assert contents(log) == ["m1"]


def test_duplicate_message_id_is_refused():
    log, msgs = log_with(1)
    with pytest.raises(ValueError, match="already in the log"):
        log.append(msgs[0])


def test_a_summary_of_a_summary_takes_the_earliest_place():
    log, msgs = log_with(5)
    first = log.replace([msgs[0].id, msgs[1].id], Message(role="assistant", content="S1"))
    log.replace([first.id, msgs[2].id], Message(role="assistant", content="S2"))
    assert contents(log) == ["sys", "S2", "m3", "m4"]
    log.restore()
    assert contents(log) == ["sys", "m0", "m1", "m2", "m3", "m4"]


def test_record_since_returns_the_tail_of_the_record_including_evicted_messages() -> None:
    log = MessageLog([Message(role="user", content=str(i)) for i in range(5)])
    log.evict(3, 4)
    assert [m.content for m in log.record_since(2)] == ["2", "3", "4"]
    assert log.record_since(5) == []


def test_a_copy_and_its_source_share_until_either_changes() -> None:
    """Copy-on-write: every change on either side leaves the other as it was."""
    log = MessageLog([Message(role="system", content="s")])
    for i in range(6):
        log.append(Message(role="user", content=f"m{i}"))
    copy = log.copy()
    second = log.copy()
    before = [m.id for m in log]
    copy.append(Message(role="user", content="only in the copy"))
    copy.evict(1, 3)
    assert [m.id for m in log] == before and [m.id for m in second] == before
    log.replace([log[1].id, log[2].id], Message(role="assistant", content="summary"))
    log.set_system("new system")
    assert [m.id for m in second] == before
    assert copy.total == 8 and log.total == 9 and second.total == 7
    second.restore()
    assert [m.content for m in second][1:] == [f"m{i}" for i in range(6)]
    assert len(second) == 7


def _stub_of(message: Message, text: str) -> Message:
    calls = tuple(call.model_copy(update={"arguments": {}}) for call in message.tool_calls)
    return message.model_copy(update={"content": text, "tool_calls": calls})


def _varied_log() -> MessageLog:
    """A log with a system message, tool traffic, an eviction and a summary."""
    log, _ = log_with(0)
    for i in range(6):
        call = ToolCall(name="reader", arguments={"path": f"f{i}.txt", "pad": "x" * 40 * i})
        log.append(Message(role="assistant", tool_calls=(call,)))
        log.append(Message(role="tool", call_id=call.id, tool="reader", content="r" * 90 * i))
    log.evict(3, 5)
    view = [m.id for m in log][5:8]
    log.replace(view, Message(role="assistant", content="summary of three"))
    return log


def _same_log(a: MessageLog, b: MessageLog) -> None:
    assert a.state() == b.state()
    assert a.estimate_tokens() == b.estimate_tokens() == estimate_tokens(list(a))
    # The per-message estimates agree too: restoring everything sums them all.
    a.restore()
    b.restore()
    assert a.estimate_tokens() == b.estimate_tokens() == estimate_tokens(list(a))


@pytest.mark.parametrize("chosen", [(), (1,), (2, 3), (0, 4, 9), tuple(range(1, 14))])
def test_with_replaced_is_the_log_rebuilt_from_its_state(chosen: tuple[int, ...]) -> None:
    log = _varied_log()
    record, keys, active, summaries = log.state()
    entries = {i: _stub_of(record[i], f"stub {i}") for i in chosen}
    expected = MessageLog.from_state(
        [entries.get(i, m) for i, m in enumerate(record)], keys, active, summaries
    )
    before = log.state()
    replaced = log.with_replaced(entries)
    assert log.state() == before  # the source log is unchanged
    _same_log(replaced, expected)


def test_with_replaced_refuses_another_id_or_an_index_outside_the_record() -> None:
    log = _varied_log()
    with pytest.raises(ValueError, match="keeps the id"):
        log.with_replaced({2: Message(role="tool", content="impostor")})
    with pytest.raises(ValueError, match="outside the log"):
        log.with_replaced({log.total: Message(role="tool", content="x")})


def test_with_replaced_estimates_only_the_replaced_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lionfactory import _messages

    log = _varied_log()
    estimated = ids_passed_to(monkeypatch, _messages, "_message_tokens")
    record = log.record
    log.with_replaced({2: _stub_of(record[2], "stub")})
    assert estimated == [record[2].id]


@pytest.mark.parametrize("chosen", [[], [0], [0, 2, 1], [12, 3, 0, 7], list(range(14))])
def test_kept_is_the_log_of_those_entries_appended_in_order(chosen: list[int]) -> None:
    log = _varied_log()
    record = log.record
    _same_log(log.kept(chosen), MessageLog([record[i] for i in chosen]))


def test_kept_refuses_what_append_refuses_and_indices_outside_the_record() -> None:
    log = _varied_log()
    with pytest.raises(ValueError, match="already in the log"):
        log.kept([1, 1])
    with pytest.raises(IndexError):
        log.kept([-1])
    with pytest.raises(IndexError):
        log.kept([log.total])


def _in_append_order(log: MessageLog) -> bool:
    """`in_append_order` by its definition, the long way."""
    state = log.state()
    return state[2] == list(range(log.total)) and state == MessageLog(log.record).state()


def test_a_log_of_appends_is_in_append_order_and_stops_being_so_when_its_view_changes() -> None:
    log, msgs = log_with(3)  # the system message first, then appends
    assert log.in_append_order() and _in_append_order(log)
    evicted = log.copy()
    evicted.evict(1, 2)
    summarised = log.copy()
    summarised.replace([msgs[0].id], Message(role="assistant", content="S"))
    late_system, _ = log_with(2, system=None)
    late_system.set_system("late")  # pinned before the messages appended earlier
    for changed in (evicted, summarised, late_system):
        assert not changed.in_append_order()
        assert not _in_append_order(changed)
    assert log.in_append_order()  # the copies' changes are theirs alone


def test_a_log_rebuilt_from_its_state_knows_whether_it_is_in_append_order() -> None:
    plain, _ = log_with(4)
    assert MessageLog.from_state(*plain.state()).in_append_order()
    assert not MessageLog.from_state(*_varied_log().state()).in_append_order()
    record, keys, active, summaries = plain.state()
    # Keys that sort the view the other way round: not what appending gives.
    shuffled = MessageLog.from_state(record, [keys[0], *reversed(keys[1:])], active, summaries)
    assert not shuffled.in_append_order()


_FOUR = {
    "system": MessageLog(
        [
            Message(role="system", content="s"),
            *(Message(role="user", content=f"m{i}") for i in range(3)),
        ]
    ),
    "plain": MessageLog([Message(role="user", content=f"m{i}") for i in range(4)]),
}
_LATE_SYSTEM = Message(role="system", content="late")


def _state_variants(kind: str) -> dict[str, tuple[Any, Any, Any, Any]]:
    """States of a four-message log, with a system message first or not (`kind`).

    As JSON gives them (keys as lists), and spoilt in the ways a store's
    writer could spoil them. Fresh containers each call, the same messages.
    """
    record, keys, active, summaries = _FOUR[kind].state()
    lists = [list(k) for k in keys]
    n = len(record)
    other_first = [0] if kind == "system" else [-1, 0]
    return {
        "state": (record, keys, active, summaries),
        "lists": (record, lists, active, {}),
        "float index": (record, lists, [*active[:-1], float(n - 1)], {}),
        "bool index": (record, lists, [0, True, *active[2:]], {}),
        "float key": (record, [*lists[:-1], [float(n - 1)]], active, {}),
        "float first key": (record, [[float(x) for x in lists[0]], *lists[1:]], active, {}),
        "dict key": (record, [*lists[:-1], {n - 1: 0}], active, {}),
        "str key": (record, [*lists[:-1], str(n - 1)], active, {}),
        "int key": (record, [*lists[:-1], n - 1], active, {}),
        "empty key": (record, [*lists[:-1], []], active, {}),
        "two indices in a key": (record, [*lists[:-2], [n - 2, n - 1], []], active, {}),
        "iterator key": (record, [*lists[:-1], iter([n - 1])], active, {}),
        "other first key": (record, [other_first, *lists[1:]], active, {}),
        "view short": (record, lists, active[:-1], {}),
        "view reversed": (record, lists, active[::-1], {}),
        "view as a tuple": (record, lists, tuple(active), {}),
        "a summary": (record, lists, active, {n - 1: (0,)}),
        "summaries as a list": (record, lists, active, []),
        "duplicate ids": ([record[0]] * n, lists, active, {}),
        "a late system message": (
            [*record[:-1], _LATE_SYSTEM],
            lists,
            active,
            {},
        ),
        "keys as a tuple": (record, tuple(lists), active, {}),
    }


def _rebuilt(state: tuple[Any, Any, Any, Any]) -> object:
    """Everything `from_state` makes of `state`: the log's every slot, or the error."""
    try:
        log = MessageLog.from_state(*state)
    except Exception as exc:
        return type(exc), str(exc)
    return [(name, repr(getattr(log, name))) for name in MessageLog.__slots__]


@pytest.mark.parametrize("kind", ["system", "plain"])
@pytest.mark.parametrize("variant", list(_state_variants("plain")))
def test_from_state_in_append_order_takes_a_short_cut_to_the_same_log_or_error(
    kind: str, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = _rebuilt(_state_variants(kind)[variant])
    # The general path alone: the short cut's check finding nothing to cut short.
    monkeypatch.setattr(_messages, "_appended_first_key", lambda *parts: None)
    assert fast == _rebuilt(_state_variants(kind)[variant])


def _apply(log: MessageLog, op: tuple[str, int, int]) -> MessageLog:
    """One change of `op`'s kind to `log` (a new log for the kinds that make one)."""
    kind, a, b = op
    record = log.record
    if kind == "append":
        role = ("user", "assistant", "tool", "system")[a % 4]
        with contextlib.suppress(ValueError):  # a second system message
            log.append(Message(role=role, content="c" * b))
    elif kind == "set_system":
        log.set_system(f"system {a}")
    elif kind == "evict":
        log.evict(a, a + b)
    elif kind == "evict_ids" and record:
        log.evict_ids([record[a % len(record)].id])
    elif kind == "restore":
        log.restore(a, a + b)
    elif kind == "replace" and len(log):
        ids = [m.id for m in log][a % len(log) :][: b + 1]
        if log.system is None or log.system.id not in ids:
            log.replace(ids, Message(role="assistant", content="summary"))
    elif kind == "with_replaced" and record:
        i = a % len(record)
        role = record[i].role if b % 2 else ("user", "assistant", "tool", "system")[b % 4]
        return log.with_replaced({i: record[i].model_copy(update={"role": role, "content": "s"})})
    elif kind == "from_state":
        return MessageLog.from_state(*log.state())
    elif kind == "copy":
        return log.copy()
    elif kind == "without":
        return log.without(range(a, a + b))
    return log


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "append",
                "append",
                "append",
                "set_system",
                "evict",
                "evict_ids",
                "restore",
                "replace",
                "with_replaced",
                "from_state",
                "copy",
                "without",
            ]
        ),
        st.integers(0, 12),
        st.integers(0, 4),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, dropped=st.sets(st.integers(-1, 30), max_size=8))
def test_without_is_kept_of_the_rest_of_the_view_and_append_order_is_never_claimed_wrongly(
    ops: list[tuple[str, int, int]], dropped: set[int]
) -> None:
    log = MessageLog()
    for op in ops:
        log = _apply(log, op)
        if log.in_append_order():
            assert _in_append_order(log)
        record, _, view, _ = log.state()
        try:
            expected = log.kept([i for i in view if i not in dropped])
        except ValueError:  # a view kept cannot append (two system messages in view)
            continue
        got = log.without(dropped)
        assert got.state() == expected.state()
        assert got.in_append_order() == expected.in_append_order()
        assert got.estimate_tokens() == expected.estimate_tokens() == estimate_tokens(list(got))
        for index, message in enumerate(got.record):
            assert got.get(message.id) is message and got.record_index(message.id) == index
            assert got.is_active(message.id)
        assert all(got.get(record[i].id) is None for i in dropped if 0 <= i < len(record))
        # The new log goes on like one built by appending.
        got.append(Message(role="user", content="next"))
        expected.append(Message(role="user", content="next"))
        assert [m.content for m in got] == [m.content for m in expected]


def test_non_ascii_arguments_count_like_the_same_text_as_content():
    """Arguments are counted as sent (UTF-8 JSON), not with each "é" escaped to six characters."""
    accented = Message(
        role="assistant", tool_calls=(ToolCall(name="w", arguments={"t": "é" * 400}),)
    )
    plain = Message(role="assistant", tool_calls=(ToolCall(name="w", arguments={"t": "e" * 400}),))
    content = Message(role="user", content="é" * 400)
    assert estimate_tokens([accented]) == estimate_tokens([plain])
    # The call's name and the JSON around the text add a few characters, no more.
    assert (
        estimate_tokens([content]) <= estimate_tokens([accented]) <= estimate_tokens([content]) + 4
    )


# -- the records Branch.act builds without validating them again ---------------


def _stored(model: Message | ToolCall) -> tuple[object, ...]:
    """Everything pydantic keeps on an instance, ids and times left out."""
    values = {k: v for k, v in model.__dict__.items() if k not in ("id", "created_at")}
    return (
        type(model),
        list(values.items()),
        list(model.__dict__),
        model.model_fields_set,
        model.__pydantic_extra__,
        model.__pydantic_private__,
    )


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"x": 1, "flag": True, "ratio": 0.5, "none": None, "text": "ascii"},
        {"path": "caf\u00e9", "nested": {"a": [1, 2, {"b": "c"}]}},
        {"big": 1 << 70},
        {"lone": "\ud800"},
        {"deep": _nested(150)},
        {1: "not a str key"},
    ],
)
def test_new_tool_call_is_the_call_validation_builds(arguments: dict[object, object]) -> None:
    from lionfactory._messages import new_tool_call

    try:
        expected = ToolCall(name="noop", arguments=dict(arguments))
    except ValidationError:
        with pytest.raises(ValidationError):
            new_tool_call("noop", dict(arguments))  # type: ignore[arg-type]
        return
    built = new_tool_call("noop", dict(arguments))  # type: ignore[arg-type]
    assert _stored(built) == _stored(expected)
    assert built.model_dump(exclude={"id"}) == expected.model_dump(exclude={"id"})
    assert built.id.startswith("call_") and len(built.id) == len(expected.id)


def test_new_tool_call_keeps_a_hosts_id_as_given_and_shortens_a_long_name() -> None:
    from lionfactory._messages import new_tool_call

    name = "n" * 2_000
    built = new_tool_call(name, {"x": 1}, "host-1")
    expected = ToolCall(name=name, arguments={"x": 1}).model_copy(update={"id": "host-1"})
    assert built == expected
    assert built.model_fields_set == expected.model_fields_set


def test_call_and_tool_messages_are_the_messages_validation_builds() -> None:
    from lionfactory._messages import call_message, new_tool_call, tool_message

    call = new_tool_call("noop", {"x": 1})
    built = call_message((call,), {"provider_call_ids": {"a-2": "a"}})
    expected = Message(
        role="assistant", tool_calls=(call,), metadata={"provider_call_ids": {"a-2": "a"}}
    )
    assert _stored(built) == _stored(expected)
    assert built.model_dump(exclude={"id", "created_at"}) == expected.model_dump(
        exclude={"id", "created_at"}
    )
    for content in ('{"result": 1}', "lone \ud800 surrogate"):
        reply = tool_message(call, content, {"evidence": [1]})
        validated = Message(
            role="tool", content=content, call_id=call.id, tool="noop", metadata={"evidence": [1]}
        )
        assert _stored(reply) == _stored(validated)
        assert reply.created_at.tzinfo is not None


def test_tool_message_refuses_what_validation_refuses() -> None:
    """A metadata key or a host's call id that is not a string fails as validation fails."""
    from lionfactory._messages import new_tool_call, tool_message

    with pytest.raises(ValidationError):
        tool_message(new_tool_call("noop", {}), "{}", {1: "x"})  # type: ignore[dict-item]
    with pytest.raises(ValidationError):
        tool_message(new_tool_call("noop", {}, 123), "{}", {})  # type: ignore[arg-type]


def test_a_copy_of_an_assembled_record_leaves_the_shared_fields_set_alone() -> None:
    from lionfactory._messages import call_message, new_tool_call

    # Records are assembled with ``object.__new__``: what the models' own would be.
    assert ToolCall.__new__ is object.__new__
    assert Message.__new__ is object.__new__

    first = call_message((new_tool_call("noop", {}),), {})
    second = call_message((new_tool_call("noop", {}),), {})
    changed = first.model_copy(update={"content": "edited"})
    assert "content" in changed.model_fields_set
    assert "content" not in first.model_fields_set
    assert "content" not in second.model_fields_set


def test_drawn_ids_are_version_4_uuids() -> None:
    import uuid

    from lionfactory._messages import _new_id

    ids = [_new_id() for _ in range(500)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(hex=text)
        assert (parsed.version, parsed.variant, parsed.hex) == (4, uuid.RFC_4122, text)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, asks=st.sets(st.integers(0, 25), max_size=10))
def test_the_estimate_asked_at_any_point_is_the_estimate_of_the_view(
    ops: list[tuple[str, int, int]], asks: set[int]
) -> None:
    """Estimates are made when asked; asked between any changes, the total is the view's."""
    log = MessageLog()
    others: list[MessageLog] = []
    for step, op in enumerate(ops):
        before = log
        log = _apply(log, op)
        if log is not before:
            others.append(before)  # a copy's source goes on sharing the token list
        if step in asks:
            assert log.estimate_tokens() == estimate_tokens(list(log))
        record, keys, _, _ = log.state()
        assert len(keys) == len(record)
    assert log.estimate_tokens() == estimate_tokens(list(log))
    for other in others:
        assert other.estimate_tokens() == estimate_tokens(list(other))


def test_appends_and_rebuilds_estimate_nothing_until_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lionfactory import _messages

    estimated = ids_passed_to(monkeypatch, _messages, "_message_tokens")
    log, _ = log_with(3)
    rebuilt = MessageLog.from_state(*log.state())
    assert estimated == []
    assert rebuilt.estimate_tokens() == log.estimate_tokens()
    assert len(estimated) == 2 * len(log.record)
    assert log.estimate_tokens() == estimate_tokens(list(log))
    log.append(Message(role="user", content="one more"))
    estimated.clear()
    log.estimate_tokens()
    assert estimated == [log[-1].id]  # only what came since


def test_a_log_of_appends_states_each_entry_s_key() -> None:
    log, _ = log_with(3)
    log.append(Message(role="user", content="late"))
    _, keys, _, _ = log.state()
    assert keys == [(-1, 0), (1,), (2,), (3,), (4,)]
    plain, _ = log_with(3, system=None)
    plain.set_system("late system")
    assert plain.state()[1] == [(0,), (1,), (2,), (-1, 3)]
    assert [m.content for m in plain] == ["late system", "m0", "m1", "m2"]


def _as_json(messages: list[Message]) -> bytes:
    from pydantic import TypeAdapter

    return TypeAdapter(list[Message]).dump_json(messages)


def _varied_messages() -> list[Message]:
    """Messages of every role, with fields left at their defaults and fields set, text not ASCII."""
    return [
        Message(role="system", content="sys"),
        Message(role="user", content="", sender="a", recipient="b", channel="c"),
        Message(
            role="assistant",
            tool_calls=(
                ToolCall(name="t", arguments={"x": [1, {"y": None}]}),
                ToolCall(name="u", arguments_error="bad"),
            ),
            metadata={"k": {"n": None}},
        ),
        Message(role="tool", content='{"ok": true}', call_id="c1", tool="t"),
        Message(role="user", content="héllo ✓ \u2028"),
    ]


def test_messages_from_json_are_the_messages_validation_builds() -> None:
    from pydantic import TypeAdapter

    from lionfactory._messages import messages_from_json

    messages = _varied_messages()
    data = _as_json(messages)
    got = messages_from_json(data)
    expected = TypeAdapter(list[Message]).validate_json(data)
    assert got == expected == messages
    for mine, theirs in zip(got, expected, strict=True):
        assert type(mine) is Message
        assert list(mine.__dict__) == list(theirs.__dict__)
        assert mine.__pydantic_fields_set__ == theirs.__pydantic_fields_set__
        assert mine.model_dump_json() == theirs.model_dump_json()


def test_messages_from_json_fill_what_a_hand_written_record_leaves_out() -> None:
    from lionfactory._messages import messages_from_json

    [message] = messages_from_json(b'[{"role": "user", "content": "hi"}]')
    assert message.content == "hi" and message.id and message.metadata == {}
    assert message.__pydantic_fields_set__ == {"role", "content"}


_REFUSED_WHOLE = [
    b'[{"role": "user", "content": "a\\ud800"}]',  # a lone surrogate
    b'[{"role": "user", "content": "x", "extra": 1}]',
    b'[{"role": "robot", "content": "x"}]',
    b'[{"role": "user", "content": 5}]',
    b'[{"role": "user", "tool_calls": [{"name": "t", "oops": 1}]}]',
    b'{"role": "user"}',
    b"[1]",
    b"not json",
]
"""Arrays `TypeAdapter(list[Message])` refuses, as a record written whole."""

_REFUSED_COMPACT = [
    b'[{"id": "x", "role": "user", "created_at": "2026-01-01T00:00:00Z", "tool": 5}]',
    b'[{"id": "x", "role": "robot", "created_at": "2026-01-01T00:00:00Z"}]',
    b'[{"id": "x", "role": "user", "created_at": "then"}]',
    b'[{"id": "x", "role": "user", "created_at": "2026-01-01T00:00:00Z", "oops": 1}]',
    b'[{"id": "x", "created_at": "2026-01-01T00:00:00Z"}]',
    b'[{"role": "user", "content": "a\\ud800"}]',
]
"""Arrays it refuses, as a compact record (`messages_to_compact_json`'s form)."""


@pytest.mark.parametrize(
    ("data", "compact"),
    [*((data, False) for data in _REFUSED_WHOLE), *((data, True) for data in _REFUSED_COMPACT)],
)
def test_messages_from_json_refuse_what_validation_refuses(data: bytes, compact: bool) -> None:
    from pydantic import TypeAdapter

    from lionfactory._messages import messages_from_json

    with pytest.raises(ValidationError):
        TypeAdapter(list[Message]).validate_json(data)
    with pytest.raises(ValidationError):
        messages_from_json(data, defaults_left_out=compact)


def test_compact_json_leaves_out_defaults_and_reads_back_the_same_messages() -> None:
    from lionfactory import _messages
    from lionfactory._messages import messages_from_json, messages_to_compact_json

    messages = _varied_messages()
    messages_to_compact_json(messages)
    ids_before = len(_messages._IDS)
    data = messages_to_compact_json(messages)
    # No default factory ran to compare with (a fresh id or clock read per message).
    assert len(_messages._IDS) == ids_before
    written = json.loads(data)
    assert list(written[0]) == ["id", "role", "content", "created_at"]
    assert list(written[1]) == ["id", "role", "sender", "recipient", "channel", "created_at"]
    assert [list(call) for call in written[2]["tool_calls"]] == [
        ["id", "name", "arguments", "arguments_error"]
    ] * 2
    assert written[2]["metadata"] == {"k": {"n": None}}
    got = messages_from_json(data, defaults_left_out=True)
    assert got == messages
    whole = messages_from_json(_as_json(messages))
    for mine, theirs in zip(got, whole, strict=True):
        assert list(mine.__dict__) == list(theirs.__dict__)
        assert mine.__pydantic_fields_set__ == theirs.__pydantic_fields_set__
        assert mine.model_dump_json() == theirs.model_dump_json()
        for call, other in zip(mine.tool_calls, theirs.tool_calls, strict=True):
            assert call.__pydantic_fields_set__ == other.__pydantic_fields_set__
    assert got[0].metadata == {} and got[0].metadata is not got[1].metadata


@pytest.mark.parametrize(
    "data",
    [
        b'[{"role": "user", "content": "hi", "created_at": "2026-01-01T00:00:00Z"}]',
        b'[{"id": "x", "content": "hi", "created_at": "2026-01-01T00:00:00Z"}]',
        b'[{"id": "x", "role": "user", "content": "hi"}]',
    ],
)
def test_compact_json_needs_what_the_compact_writer_always_writes(data: bytes) -> None:
    from lionfactory._messages import messages_from_json

    # Whole JSON (a hand-written record) may leave them out: id and time get defaults.
    if b'"role"' in data:
        [message] = messages_from_json(data)
        assert message.content == "hi" and message.id
    with pytest.raises(ValidationError, match="Field required"):
        messages_from_json(data, defaults_left_out=True)

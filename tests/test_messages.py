from __future__ import annotations

import pytest
from pydantic import ValidationError

from lionfactory import Message, MessageLog, ToolCall, estimate_tokens


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

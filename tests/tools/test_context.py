from __future__ import annotations

import json

import pytest

from lionfactory import Branch, Message, ToolCall
from lionfactory.errors import ToolInputError
from lionfactory.testing import (
    FunctionModel,
    ScriptedModel,
    assert_no_foreign_bindings,
    tool_call,
)
from lionfactory.tools import context_tool

# -- helpers ------------------------------------------------------------------


def user(text: str) -> Message:
    return Message(role="user", content=text)


def assistant(text: str) -> Message:
    return Message(role="assistant", content=text)


def add_tool_round(branch: Branch, name: str = "reader", n_calls: int = 1, text: str = "out"):
    """Append an assistant message with `n_calls` calls and their results."""
    calls = tuple(ToolCall(name=name, arguments={"i": i}) for i in range(n_calls))
    branch.messages.append(Message(role="assistant", tool_calls=calls))
    for call in calls:
        branch.messages.append(
            Message(role="tool", content=f"{text} {call.arguments}", call_id=call.id, tool=name)
        )


def bare() -> Branch:
    branch = Branch("You are a test.")
    branch.register(context_tool)
    return branch


def conversation() -> Branch:
    """sys, user, assistant, [call, result] x3, user, assistant: 11 messages."""
    branch = bare()
    branch.messages.append(user("first question"))
    branch.messages.append(assistant("first answer"))
    for i in range(3):
        add_tool_round(branch, text=f"result {i}")
    branch.messages.append(user("second question"))
    branch.messages.append(assistant("second answer"))
    return branch


def ids(messages) -> list[str]:
    return [m.id for m in messages]


def assert_pairs_valid(branch: Branch) -> None:
    """Every tool result follows its call; every call has all its results (providers' rule)."""
    view = branch.messages.active
    open_calls: set[str] = set()
    for message in view:
        if message.role == "tool":
            assert message.call_id in open_calls, f"orphan tool result {message.content!r}"
            open_calls.discard(message.call_id)
            continue
        assert not open_calls, f"calls without results before {message.role}: {open_calls}"
        open_calls = {c.id for c in message.tool_calls}
    # The last assistant call may be the pending one of a running act: allowed.


async def context(branch: Branch, **arguments):
    return await branch.tools["context"](**arguments)


# -- factory --------------------------------------------------------------------


def test_the_tool_is_bound_to_its_branch():
    branch = Branch("s")
    tool = context_tool(branch)
    assert tool.name == "context"
    assert tool.bound_to == branch.id


def test_factory_rejects_a_non_branch():
    with pytest.raises(TypeError, match="'nope'"):
        context_tool("nope")  # type: ignore[arg-type]


def test_factory_rejects_a_non_callable_chat_model():
    with pytest.raises(TypeError, match="42"):
        context_tool(Branch(), chat_model=42)  # type: ignore[arg-type]


async def test_mode_typo_fails_validation_instead_of_choosing_a_branch():
    branch = conversation()
    with pytest.raises(ToolInputError, match="mode"):
        await context(branch, action="compact", summary="s", mode="tools")


async def test_scope_typo_fails_validation():
    branch = conversation()
    with pytest.raises(ToolInputError, match="scope"):
        await context(branch, action="get_messages", scope="everything")


# -- status and get_messages --------------------------------------------------------


async def test_status_counts_active_total_evicted_roles_and_tokens():
    branch = conversation()
    branch.messages.evict(1, 2)
    out = await context(branch, action="status")
    assert out["success"] is True
    assert out["active_count"] == 10
    assert out["total_count"] == 11
    assert out["evicted_count"] == 1
    assert out["pending_count"] == 0
    assert out["role_counts"] == {"system": 1, "assistant": 5, "tool": 3, "user": 1}
    assert out["estimated_tokens"] == branch.messages.estimate_tokens()


async def test_status_through_act_does_not_count_the_pending_call():
    branch = conversation()
    result = await branch.act("context", {"action": "status"})
    assert result.result is not None
    assert result.result["active_count"] == 11  # the view the model saw
    assert result.result["pending_count"] == 1  # the assistant message carrying this call


async def test_get_messages_lists_the_active_view_with_short_previews():
    branch = conversation()
    branch.messages.append(user("word " * 100 + "\n\n  spaced"))
    out = await context(branch, action="get_messages")
    entries = out["messages"]
    assert [e["index"] for e in entries] == list(range(12))
    assert all(len(e["preview"]) <= 120 for e in entries)
    assert entries[-1]["preview"].endswith("…")
    assert "\n" not in entries[-1]["preview"]
    assert entries[3]["preview"].startswith("[calls reader]")
    assert entries[4]["tool"] == "reader"


async def test_get_messages_scope_all_marks_active_and_evicted_with_record_indices():
    branch = conversation()
    branch.messages.evict(1, 3)
    out = await context(branch, action="get_messages", scope="all")
    entries = out["messages"]
    assert len(entries) == 11
    assert [e["active"] for e in entries[:4]] == [True, False, False, True]
    assert entries[1]["view_index"] is None
    assert entries[3]["view_index"] == 1


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (-5, 2, [0, 1]),  # negative start counts as 0, never from the end
        (8, 10_000, [8, 9, 10]),  # huge end clamps to the end
        (10_000, None, []),  # huge start: empty success
        (4, 4, []),  # empty range
        (6, 2, []),  # start >= end
        (None, -3, []),  # negative end counts as 0
    ],
)
async def test_get_messages_clamps_ranges(start, end, expected):
    branch = conversation()
    out = await context(branch, action="get_messages", start=start, end=end)
    assert out["success"] is True
    assert [e["index"] for e in out["messages"]] == expected


# -- evict -----------------------------------------------------------------------------


async def test_evict_removes_the_span_from_the_view_only():
    branch = conversation()
    before = ids(branch.messages.active)
    out = await context(branch, action="evict", start=9, end=11)
    assert out["success"] is True
    assert out["evicted"] == 2
    assert ids(branch.messages.active) == before[:9]
    assert len(branch.messages.record) == 11


async def test_evict_without_end_takes_only_the_message_at_start():
    branch = conversation()
    before = ids(branch.messages.active)
    out = await context(branch, action="evict", start=9)
    assert out["evicted"] == 1
    assert ids(branch.messages.active) == before[:9] + before[10:]


async def test_evict_without_end_still_moves_a_whole_tool_group():
    branch = conversation()
    out = await context(branch, action="evict", start=3)  # one call: its result goes too
    assert out["evicted"] == 2
    assert out["notice"].startswith("1 more message(s) moved along")
    assert_pairs_valid(branch)


async def test_evict_end_default_is_described_to_the_model():
    schema = bare().tools["context"].schema("openai")
    end = schema["function"]["parameters"]["properties"]["end"]["description"]
    assert "start + 1" in end
    assert schema["function"]["description"].count("without `end`, only message `start`") == 2


def two_users() -> Branch:
    branch = bare()
    for text in ("one", "two", "three"):
        branch.messages.append(user(text))
    return branch


async def test_evict_never_takes_the_system_message():
    branch = two_users()
    out = await context(branch, action="evict", start=0, end=2)
    assert out["evicted"] == 1
    assert branch.messages[0].role == "system"


async def test_evict_with_a_negative_start_starts_after_the_system_message():
    branch = two_users()
    out = await context(branch, action="evict", start=-4, end=2)
    assert out["evicted"] == 1
    assert [m.content for m in branch.messages] == ["You are a test.", "two", "three"]


async def test_evict_with_a_huge_end_evicts_to_the_end():
    branch = conversation()
    out = await context(branch, action="evict", start=10, end=10_000)
    assert out["evicted"] == 1
    assert len(branch.messages) == 10


@pytest.mark.parametrize(("start", "end"), [(5, 5), (7, 3), (10_000, None), (0, 1), (None, 0)])
async def test_evict_of_an_empty_range_is_a_typed_failure(start, end):
    branch = conversation()
    out = await context(branch, action="evict", start=start, end=end)
    assert out["success"] is False
    assert "Nothing to evict" in out["error"]
    assert len(branch.messages) == 11


async def test_evicting_a_tool_result_also_evicts_its_call():
    branch = conversation()
    view = branch.messages.active
    assert view[4].role == "tool"
    out = await context(branch, action="evict", start=4, end=5)
    assert out["evicted"] == 2
    assert "1 more message" in out["notice"]
    assert view[3].id not in ids(branch.messages.active)
    assert_pairs_valid(branch)


async def test_evicting_a_call_also_evicts_all_its_results():
    branch = bare()
    branch.messages.append(user("go"))
    add_tool_round(branch, n_calls=3)
    out = await context(branch, action="evict", start=2, end=3)
    assert out["evicted"] == 4
    assert [m.role for m in branch.messages] == ["system", "user"]


async def test_evict_refuses_to_leave_an_assistant_turn_first():
    branch = conversation()
    out = await context(branch, action="evict", start=1, end=2)  # the first user message
    assert out["success"] is False
    assert "user turn" in out["error"]
    assert len(branch.messages) == 11


# -- evict_action_results --------------------------------------------------------------


async def test_evict_action_results_keeps_the_last_five_by_default():
    branch = bare()
    branch.messages.append(user("go"))
    for i in range(8):
        add_tool_round(branch, text=f"r{i}")
    out = await context(branch, action="evict_action_results")
    assert out["evicted"] == 6  # three rounds of call + result
    results = [m.content for m in branch.messages if m.role == "tool"]
    assert [r.split()[0] for r in results] == ["r3", "r4", "r5", "r6", "r7"]
    assert_pairs_valid(branch)


@pytest.mark.parametrize("keep_last", [0, -3])
async def test_evict_action_results_with_zero_or_negative_keeps_none(keep_last):
    branch = conversation()
    out = await context(branch, action="evict_action_results", keep_last=keep_last)
    assert out["evicted"] == 6
    assert [m.role for m in branch.messages] == ["system", "user", "assistant", "user", "assistant"]


async def test_evict_action_results_keeps_a_multi_call_message_whole():
    branch = bare()
    branch.messages.append(user("go"))
    add_tool_round(branch, n_calls=1, text="old")
    add_tool_round(branch, n_calls=3, text="new")
    out = await context(branch, action="evict_action_results", keep_last=1)
    # The last result belongs to a three-call message: all three stay with their call.
    assert out["evicted"] == 2
    assert [m.content.split()[0] for m in branch.messages if m.role == "tool"] == ["new"] * 3
    assert_pairs_valid(branch)


async def test_evict_action_results_with_more_to_keep_than_exist_evicts_nothing():
    branch = conversation()
    out = await context(branch, action="evict_action_results", keep_last=50)
    assert out == {**out, "success": True, "evicted": 0}


# -- restore ----------------------------------------------------------------------


async def test_restore_reinserts_messages_in_chronological_order():
    branch = conversation()
    original = ids(branch.messages.active)
    branch.messages.evict(1, 3)
    branch.messages.evict(4, 6)
    out = await context(branch, action="restore", start=0, end=100)
    assert out["success"] is True
    assert out["restored"] == 4
    assert ids(branch.messages.active) == original


async def test_restore_brings_back_a_tool_result_with_its_call():
    branch = conversation()
    original = ids(branch.messages.active)
    await context(branch, action="evict", start=3, end=5)
    out = await context(branch, action="restore", start=4, end=5)  # only the result's index
    assert out["restored"] == 2
    assert ids(branch.messages.active) == original


async def test_restore_without_end_brings_back_only_the_record_message_at_start():
    branch = conversation()
    original = ids(branch.messages.active)
    branch.messages.evict(9, 11)
    out = await context(branch, action="restore", start=9)
    assert out["restored"] == 1
    assert ids(branch.messages.active) == original[:10]


async def test_compact_without_end_still_runs_to_the_end_of_the_view():
    branch = conversation()
    out = await context(branch, action="compact", start=2, mode="all", summary="s")
    assert out["compacted"] == 9
    assert [m.role for m in branch.messages] == ["system", "user", "assistant"]


@pytest.mark.parametrize(("start", "end"), [(-3, 2), (50, None), (3, 3), (6, 2)])
async def test_restore_of_an_empty_or_clamped_range_succeeds(start, end):
    branch = conversation()
    branch.messages.evict(3, 5)
    out = await context(branch, action="restore", start=start, end=end)
    assert out["success"] is True
    assert out["restored"] == 0
    assert len(branch.messages) == 9


# -- compact ---------------------------------------------------------------------------


async def test_compact_tool_io_replaces_only_tool_calls_and_results():
    branch = conversation()
    record_before = list(branch.messages.record)
    out = await context(branch, action="compact", start=2, end=9, summary="read three files")
    assert out["success"] is True
    assert out["compacted"] == 6
    view = branch.messages.active
    assert [m.role for m in view] == [
        "system",
        "user",
        "assistant",
        "assistant",
        "user",
        "assistant",
    ]
    summary = view[out["summary_index"]]
    assert summary.role == "assistant"
    assert "read three files" in summary.content
    assert summary.metadata["summary_of"] == ids(record_before[3:9])
    assert branch.messages.record[:11] == tuple(record_before)  # the record keeps everything


async def test_compact_all_replaces_every_message_in_the_range():
    branch = conversation()
    out = await context(branch, action="compact", start=2, end=9, mode="all", summary="s")
    assert out["compacted"] == 7
    assert [m.role for m in branch.messages] == ["system", "user", "assistant", "user", "assistant"]


async def test_compact_then_restore_round_trips_the_active_view():
    branch = conversation()
    original = ids(branch.messages.active)
    await context(branch, action="compact", start=2, end=9, mode="all", summary="s")
    out = await context(branch, action="restore", start=0, end=100)
    assert out["success"] is True
    assert ids(branch.messages.active) == original
    assert len(branch.messages.record) == 12  # the summary stays in the record


async def test_compact_extends_a_range_that_cuts_a_tool_group():
    branch = conversation()
    out = await context(branch, action="compact", start=2, end=4, mode="all", summary="s")
    assert out["compacted"] == 3  # the answer, the call, and the result after the range
    assert_pairs_valid(branch)


async def test_compact_refuses_to_put_the_summary_first():
    branch = conversation()
    out = await context(branch, action="compact", start=1, end=5, mode="all", summary="s")
    assert out["success"] is False
    assert "user turn" in out["error"]
    assert len(branch.messages) == 11


@pytest.mark.parametrize(("start", "end"), [(4, 4), (8, 3), (10_000, None), (None, 1)])
async def test_compact_of_an_empty_range_is_a_typed_failure(start, end):
    branch = conversation()
    out = await context(branch, action="compact", start=start, end=end, summary="s")
    assert out["success"] is False
    assert "Nothing to compact" in out["error"]


async def test_compact_tool_io_without_tool_messages_in_range_fails():
    branch = conversation()
    out = await context(branch, action="compact", start=1, end=3, summary="s")
    assert out["success"] is False
    assert "mode='all'" in out["error"]


async def test_compact_without_summary_fails_and_says_what_to_pass():
    branch = conversation()
    out = await context(branch, action="compact", start=2)
    assert out["success"] is False
    assert "summary" in out["error"]
    assert len(branch.messages) == 11


async def test_compact_with_summary_and_auto_fails():
    branch = conversation()
    out = await context(branch, action="compact", start=2, summary="s", auto=True)
    assert out["success"] is False
    assert "either" in out["error"]


# -- auto -------------------------------------------------------------------------


async def test_auto_asks_the_factory_chat_model_for_a_summary():
    seen: list[list[Message]] = []

    def summarise(messages, tools):
        seen.append(messages)
        assert tools == []
        return "  The assistant read three files.  "

    branch = Branch("s", chat_model=ScriptedModel([]))  # must not be used
    branch.register(context_tool, chat_model=FunctionModel(summarise))
    branch.messages.append(user("q"))
    add_tool_round(branch, text="x" * 5000)
    add_tool_round(branch, text="y" * 5000)
    out = await context(branch, action="compact", start=2, auto=True)
    assert out["success"] is True
    assert branch.messages[2].content.endswith("The assistant read three files.")
    prompt = seen[0][-1].content
    assert len(prompt) < 6200
    assert "first 6,000" in out["notice"]


async def test_auto_falls_back_to_the_branch_chat_model():
    branch = conversation()
    branch.chat_model = FunctionModel(lambda messages, tools: "from the branch model")
    out = await context(branch, action="compact", start=3, end=9, auto=True)
    assert out["success"] is True
    assert "from the branch model" in branch.messages[3].content


async def test_auto_with_a_failing_model_is_a_typed_failure_that_leaves_the_view():
    def broken(messages, tools):
        raise ConnectionError("provider down")

    branch = conversation()
    branch.chat_model = FunctionModel(broken)
    before = ids(branch.messages.active)
    out = await context(branch, action="compact", start=3, end=9, auto=True)
    assert out["success"] is False
    assert "ConnectionError: provider down" in out["error"]
    assert "yourself" in out["error"]
    assert ids(branch.messages.active) == before


async def test_auto_with_an_empty_answer_is_a_typed_failure():
    branch = conversation()
    branch.chat_model = FunctionModel(lambda messages, tools: "   ")
    out = await context(branch, action="compact", start=3, end=9, auto=True)
    assert out["success"] is False
    assert "empty summary" in out["error"]
    assert "yourself" in out["error"]


async def test_auto_without_any_chat_model_is_a_typed_failure():
    branch = conversation()
    out = await context(branch, action="compact", start=3, end=9, auto=True)
    assert out["success"] is False
    assert "chat model" in out["error"]


# -- through act and run ------------------------------------------------------------


async def test_through_act_indices_refer_to_the_view_the_model_saw():
    branch = conversation()
    result = await branch.act("context", {"action": "get_messages"})
    assert result.result is not None
    listed = result.result["messages"]
    assert len(listed) == 11  # not the assistant message carrying this call
    assert listed[-1]["preview"] == "second answer"


async def test_through_act_evicting_everything_keeps_the_pending_call_and_its_result():
    branch = conversation()
    branch.messages.evict(1, 2)  # so an assistant turn already comes first
    result = await branch.act("context", {"action": "evict", "start": 1, "end": 100})
    assert result.result is not None
    assert result.result["success"] is True
    assert result.result["evicted"] == 9
    assert [m.role for m in branch.messages] == ["system", "assistant", "tool"]
    assert branch.messages[2].call_id == result.call_id
    assert_pairs_valid(branch)


async def test_through_act_compacting_to_the_end_leaves_the_current_call_alone():
    branch = conversation()
    result = await branch.act("context", {"action": "compact", "start": 2, "summary": "s"})
    assert result.result is not None
    assert result.result["compacted"] == 6
    assert_pairs_valid(branch)
    assert branch.messages[-1].call_id == result.call_id


async def test_run_lets_the_model_trim_its_context():
    model = ScriptedModel(
        [
            tool_call("context", action="evict_action_results", keep_last=0),
            tool_call("context", action="status"),
            "done",
        ]
    )
    branch = conversation()
    branch.chat_model = model
    assert await branch.run("tidy up") == "done"
    status = json.loads(model.calls[2].messages[-1].content)
    # 11 - 6 evicted + the user instruction + the evicting call and its result.
    assert status["active_count"] == 8
    assert status["pending_count"] == 1
    assert_pairs_valid(branch)


# -- clone ---------------------------------------------------------------------------


async def test_clone_gets_its_own_context_tool_and_views_stay_independent():
    source = conversation()
    clone = source.clone()
    source_view = ids(source.messages.active)
    out = await clone.tools["context"](action="evict", start=3, end=9)
    assert out["evicted"] == 6
    assert ids(source.messages.active) == source_view
    out = await clone.tools["context"](action="compact", start=2, end=4, mode="all", summary="x")
    assert out["success"] is True
    assert ids(source.messages.active) == source_view
    assert_no_foreign_bindings(clone)
    assert_no_foreign_bindings(source)


async def test_source_context_tool_does_not_touch_the_clone():
    source = conversation()
    clone = source.clone()
    clone_view = ids(clone.messages.active)
    await source.tools["context"](action="evict_action_results", keep_last=0)
    out = await source.tools["context"](action="compact", start=2, end=4, mode="all", summary="y")
    assert out["success"] is True
    assert ids(clone.messages.active) == clone_view
    assert clone.tools["context"].bound_to == clone.id
    assert source.tools["context"].bound_to == source.id

"""A served session's memory is bounded: old results are compacted, evidence is kept."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters

from lionfactory import Branch, function_tool
from lionfactory.coding import coding_toolkit
from lionfactory.mcp import SessionBranches, serve_mcp
from lionfactory.mcp._budget import COMPACTED_KEY, MESSAGE_OVERHEAD, held_chars

LINE = "y" * 99 + "\n"


def toolkit_maker(root: Path) -> Callable[[], Branch]:
    def make() -> Branch:
        branch = Branch(name="mcp-session")
        branch.register(coding_toolkit, workspace_root=root, tools=["reader", "editor"])
        return branch

    return make


@pytest.fixture
def big_files(tmp_path: Path) -> Path:
    (tmp_path / "keep.txt").write_text("alpha\nbeta\n" + "filler\n" * 100, encoding="utf-8")
    (tmp_path / "big.txt").write_text(LINE * 500, encoding="utf-8")  # 50 kB
    return tmp_path


async def test_a_session_holds_at_most_its_budget_and_keeps_its_evidence(big_files: Path) -> None:
    sessions = SessionBranches(toolkit_maker(big_files), memory_budget=300_000)
    with sessions.use("s") as branch:
        first = await branch.act("reader", {"action": "read", "path": "keep.txt"})
    assert first.ok
    for _ in range(30):  # 30 x ~55 kB of results: five times the budget
        with sessions.use("s") as branch:
            assert (await branch.act("reader", {"action": "read", "path": "big.txt"})).ok
    status = sessions.status("s")
    assert status is not None
    assert status.held_chars <= 300_000
    assert status.compacted_messages > 0 and status.compactions >= 1
    assert status.messages == 62
    with sessions.use("s") as branch:
        # The read of keep.txt was compacted, yet its evidence still allows the edit.
        stub = branch.messages.get(first.message.id)
        assert stub is not None and branch.messages.is_active(stub.id)
        assert stub.metadata == {
            **first.message.metadata,
            COMPACTED_KEY: len(first.message.content),
        }
        assert first.message.metadata, "the read recorded no evidence"
        edit = await branch.act(
            "editor",
            {"action": "edit", "file_path": "keep.txt", "old_string": "beta", "new_string": "B"},
        )
    assert edit.result is not None and edit.result["success"], edit.result
    assert (big_files / "keep.txt").read_text(encoding="utf-8").startswith("alpha\nB\n")


async def test_compaction_stubs_big_results_and_keeps_the_view(big_files: Path) -> None:
    sessions = SessionBranches(toolkit_maker(big_files), memory_budget=150_000)
    for _ in range(6):
        with sessions.use("s") as branch:
            await branch.act("reader", {"action": "read", "path": "big.txt"})
    with sessions.use("s") as branch:
        record = branch.messages.record
        active = branch.messages.active
    stubbed = [m for m in record if COMPACTED_KEY in m.metadata]
    assert stubbed, "nothing was compacted"
    assert all(len(m.content) < 200 for m in stubbed)
    assert [m.id for m in active] == [m.id for m in record]  # the view is unchanged
    assert "compacted by the MCP server" in next(m for m in stubbed if m.role == "tool").content


async def test_no_budget_keeps_everything(big_files: Path) -> None:
    sessions = SessionBranches(toolkit_maker(big_files), memory_budget=None)
    for _ in range(6):
        with sessions.use("s") as branch:
            await branch.act("reader", {"action": "read", "path": "big.txt"})
    status = sessions.status("s")
    assert status is not None and status.compacted_messages == 0
    assert status.held_chars > 6 * 50_000
    assert sessions.status("unknown") is None


def test_a_budget_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="session_memory_budget must be a positive number"):
        serve_mcp([toolkit_maker(Path())], session_memory_budget=0)


async def test_the_stdio_server_compacts_and_still_allows_the_edit(big_files: Path) -> None:
    command = ["-m", "lionfactory", "mcp", "serve", "--workspace", str(big_files)]
    parameters = StdioServerParameters(
        command=sys.executable, args=[*command, "--session-memory", "100000"]
    )
    async with Client(parameters, mode="legacy") as client:
        assert not (
            await client.call_tool("reader", {"action": "read", "path": "keep.txt"})
        ).is_error
        for _ in range(6):
            assert not (
                await client.call_tool("reader", {"action": "read", "path": "big.txt"})
            ).is_error
        edit = await client.call_tool(
            "editor",
            {"action": "edit", "file_path": "keep.txt", "old_string": "beta", "new_string": "B"},
        )
    assert not edit.is_error, edit.content


def test_the_cli_refuses_a_session_memory_below_one(
    big_files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lionfactory._cli import main

    argv = ["mcp", "serve", "--workspace", str(big_files), "--session-memory", "0"]
    assert main(argv) == 2
    assert "--session-memory must be at least 1, got 0" in capsys.readouterr().err


def test_create_mcp_server_refuses_a_budget_below_one() -> None:
    from lionfactory.mcp import create_mcp_server

    with pytest.raises(ValueError, match="session_memory_budget must be a positive number"):
        create_mcp_server([toolkit_maker(Path())], session_memory_budget=0)


async def test_800_small_reads_stay_within_one_and_a_half_budgets_after_every_call(
    tmp_path: Path,
) -> None:
    """Small results (never stubbed before) and the stubs themselves count, and are bounded."""
    (tmp_path / "small.txt").write_text("s" * 149 + "\n", encoding="utf-8")
    sessions = SessionBranches(toolkit_maker(tmp_path), memory_budget=5000)
    highest = first_call = 0
    for _ in range(800):
        with sessions.use("s") as branch:
            assert (await branch.act("reader", {"action": "read", "path": "small.txt"})).ok
        status = sessions.status("s")
        assert status is not None
        first_call = first_call or status.held_chars
        highest = max(highest, status.held_chars)
        with sessions.use("s") as branch:
            assert held_chars(branch.messages.record) == status.held_chars  # the count is true
    assert highest <= 5000 * 1.5
    assert status.peak_chars == highest
    assert status.dropped_messages > 1000
    assert status.messages < 5000 // MESSAGE_OVERHEAD
    # Amortised: each compaction frees about half a budget (2,500), so there
    # is one per 2,500 characters of new calls, not one per call (763 before).
    assert status.compactions <= 800 * first_call // 2000
    with sessions.use("s") as branch:
        edit = await branch.act(
            "editor",
            {"action": "edit", "file_path": "small.txt", "old_string": "s\n", "new_string": "t\n"},
        )
    assert edit.result is not None and edit.result["success"], edit.result


async def test_one_huge_result_is_compacted_at_once(big_files: Path) -> None:
    sessions = SessionBranches(toolkit_maker(big_files), memory_budget=5000)
    with sessions.use("s") as branch:
        assert (await branch.act("reader", {"action": "read", "path": "big.txt"})).ok
    status = sessions.status("s")
    assert status is not None and status.held_chars <= 2500 and status.compactions == 1


async def test_the_evidence_of_files_read_long_ago_survives_dropping(tmp_path: Path) -> None:
    for i in range(20):
        (tmp_path / f"f{i}.txt").write_text(f"file {i}\n", encoding="utf-8")
    (tmp_path / "other.txt").write_text("o" * 500 + "\n", encoding="utf-8")
    sessions = SessionBranches(toolkit_maker(tmp_path), memory_budget=60_000)
    for i in range(20):
        with sessions.use("s") as branch:
            assert (await branch.act("reader", {"action": "read", "path": f"f{i}.txt"})).ok
    for _ in range(400):
        with sessions.use("s") as branch:
            assert (await branch.act("reader", {"action": "read", "path": "other.txt"})).ok
    status = sessions.status("s")
    assert status is not None and status.dropped_messages > 0 and status.held_chars <= 60_000
    for i in range(20):
        with sessions.use("s") as branch:
            edit = await branch.act(
                "editor",
                {
                    "action": "edit",
                    "file_path": f"f{i}.txt",
                    "old_string": "file",
                    "new_string": "F",
                },
            )
        assert edit.result is not None and edit.result["success"], (i, edit.result)


async def test_evidence_beyond_the_budget_goes_oldest_first_and_the_edit_asks_for_a_read(
    tmp_path: Path,
) -> None:
    for i in range(40):
        (tmp_path / f"f{i}.txt").write_text(f"file {i}\n", encoding="utf-8")
    sessions = SessionBranches(toolkit_maker(tmp_path), memory_budget=8000)
    for i in range(40):
        with sessions.use("s") as branch:
            assert (await branch.act("reader", {"action": "read", "path": f"f{i}.txt"})).ok
    status = sessions.status("s")
    assert status is not None and status.held_chars <= 8000
    edit = {"action": "edit", "file_path": "f0.txt", "old_string": "file", "new_string": "F"}
    with sessions.use("s") as branch:
        refused = await branch.act("editor", edit)
        recent = await branch.act("editor", {**edit, "file_path": "f39.txt"})
    assert refused.result is not None and not refused.result["success"]
    assert "Read the file first" in refused.result["error"]
    assert recent.result is not None and recent.result["success"], recent.result


async def test_a_call_in_flight_keeps_its_call_while_others_compact(tmp_path: Path) -> None:
    """Compaction runs after every call, also while another call of the session is running."""
    release = anyio.Event()

    async def wait_for_release() -> dict[str, str]:
        """Wait until the test says so."""
        await release.wait()
        return {"done": "yes"}

    def make() -> Branch:
        branch = Branch(name="mcp-session")
        branch.register(lambda: function_tool(wait_for_release))
        branch.register(lambda: function_tool(lambda text: {"echo": text}, name="echo"))
        return branch

    sessions = SessionBranches(make, memory_budget=3000)
    outcome: list[Any] = []

    async def slow() -> None:
        with sessions.use("s") as branch:
            outcome.append(await branch.act("wait_for_release", {}))

    async with anyio.create_task_group() as group:
        group.start_soon(slow)
        await anyio.wait_all_tasks_blocked()
        for _ in range(100):
            with sessions.use("s") as branch:
                assert (await branch.act("echo", {"text": "e" * 300})).ok
        status = sessions.status("s")
        assert status is not None and status.compactions > 3 and status.held_chars <= 3000
        release.set()
    assert outcome[0].ok
    with sessions.use("s") as branch:
        messages = branch.messages.record
    call = next(m for m in messages if m.tool_calls and m.tool_calls[0].name == "wait_for_release")
    answer = next(m for m in messages if m.call_id == call.tool_calls[0].id)
    assert messages.index(call) < messages.index(answer)


async def test_a_compaction_counts_no_message_again_and_its_count_stays_exact(
    big_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lionfactory.mcp import _budget

    counted: list[str] = []
    original = _budget._chars

    def counting(message: Any) -> int:
        counted.append(message.id)
        return original(message)

    monkeypatch.setattr(_budget, "_chars", counting)
    sessions = SessionBranches(toolkit_maker(big_files), memory_budget=60_000)
    for _ in range(80):  # ~50 kB each: a compaction per call, stubbing, then dropping
        with sessions.use("s") as branch:
            assert (await branch.act("reader", {"action": "read", "path": "big.txt"})).ok
    status = sessions.status("s")
    assert status is not None and status.compactions >= 5 and status.dropped_messages > 0
    with sessions.use("s") as branch:
        record = branch.messages.record
    # The running count is the log's true size, though compactions reused the sizes.
    assert status.held_chars == original_held(record, original)
    # Every message was counted when it arrived and each stub when it was made: a
    # compaction never walked the whole session again.
    assert len(counted) <= 2 * 80 + 2 * 80


def original_held(record: Any, chars: Callable[[Any], int]) -> int:
    return sum(chars(message) for message in record)


async def test_a_compaction_estimates_no_message_again_and_the_estimate_stays_exact(
    big_files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lionfactory import _messages
    from lionfactory._messages import estimate_tokens

    estimated: list[str] = []
    original = _messages._message_tokens

    def counting(message: Any) -> int:
        estimated.append(message.id)
        return original(message)

    monkeypatch.setattr(_messages, "_message_tokens", counting)
    sessions = SessionBranches(toolkit_maker(big_files), memory_budget=60_000)
    for _ in range(80):  # a compaction per call, stubbing, then dropping
        with sessions.use("s") as branch:
            assert (await branch.act("reader", {"action": "read", "path": "big.txt"})).ok
            # The log's running estimate is what estimating its view afresh gives.
            monkeypatch.setattr(_messages, "_message_tokens", original)
            assert branch.messages.estimate_tokens() == estimate_tokens(list(branch.messages))
            monkeypatch.setattr(_messages, "_message_tokens", counting)
    status = sessions.status("s")
    assert status is not None and status.compactions >= 5 and status.dropped_messages > 0
    # Each message was estimated when it arrived and each stub when it was
    # made: rebuilding the log after a compaction estimated nothing again.
    assert len(estimated) <= 2 * 80 + 2 * 80


def _encoded_chars(message: Any) -> int:
    """What a message holds, counted with the encoder alone (no shortcut)."""
    import json

    size = MESSAGE_OVERHEAD + len(message.content)
    for call in message.tool_calls:
        size += len(json.dumps(call.arguments, ensure_ascii=False, default=str))
    if message.metadata:
        try:
            size += len(json.dumps(message.metadata, ensure_ascii=False, default=str))
        except (ValueError, TypeError, RecursionError):
            size += len(repr(message.metadata))
    return size


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@given(
    arguments=st.lists(st.dictionaries(st.text(max_size=6), JSONISH, max_size=3), max_size=3),
    metadata=st.dictionaries(st.text(max_size=8), JSONISH, max_size=3)
    | st.builds(lambda n: {COMPACTED_KEY: n}, st.integers())
    | st.builds(lambda b: {COMPACTED_KEY: b}, st.booleans()),
    content=st.text(max_size=20),
)
def test_a_message_and_its_stub_are_counted_as_the_encoder_counts_them(
    arguments: list[dict[str, Any]], metadata: dict[str, Any], content: str
) -> None:
    from lionfactory._messages import Message, ToolCall
    from lionfactory.mcp._budget import _chars, _stub

    calls = tuple(ToolCall(name="t", arguments=a) for a in arguments)
    role = "assistant" if calls else "tool"
    message = Message(role=role, content=content, tool_calls=calls, metadata=metadata)
    assert _chars(message) == _encoded_chars(message)
    if COMPACTED_KEY in metadata:
        return  # compaction never stubs a stub
    known = _chars(message) - MESSAGE_OVERHEAD if not metadata else None
    stub = _stub(message, known)
    assert stub == _stub(message)  # the size the caller knew is the size counted here
    assert _chars(stub) == _encoded_chars(stub)

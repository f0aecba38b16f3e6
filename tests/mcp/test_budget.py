"""A served session's memory is bounded: old results are compacted, evidence is kept."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from _test_helpers import ids_passed_to
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters

from lionfactory import Branch, function_tool
from lionfactory._evidence import EVIDENCE_KEY, FileEvidence
from lionfactory._messages import Message, MessageLog, ToolCall
from lionfactory.coding import coding_toolkit
from lionfactory.mcp import SessionBranches, serve_mcp
from lionfactory.mcp._budget import (
    COMPACTED_KEY,
    MESSAGE_OVERHEAD,
    Compaction,
    SessionMemory,
    _chars,
    _stub,
    _tool_traffic,
    compact,
    held_chars,
)

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

    original = _budget._chars
    counted = ids_passed_to(monkeypatch, _budget, "_chars")
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


# -- The incremental compaction gives what compacting afresh gave -------------
#
# `SessionMemory` keeps what one compaction learnt of the log for the next
# (where stubbing stopped, the answered calls, the newest evidence of each
# path), so that a compaction costs what it changes. Below is the algorithm
# it replaced, copied verbatim but for the names (it walked the whole log at
# every compaction); the tests hold the new one to it, call after call.


def reference_compact(
    branch: Branch, budget: int, sizes: Sequence[int] | None = None
) -> Compaction:
    """Compact `branch` until it holds at most ``budget // 2`` (see the module docstring).

    The log is rebuilt with the stubs in place of the originals (same ids,
    order, view and summaries) when stubbing is enough; when calls must be
    dropped, it is rebuilt from the kept messages of the active view.

    Args:
        branch: the branch whose log is compacted.
        budget: the session's budget in characters.
        sizes: `_chars` of every record entry, when the caller counted them
            already (`SessionMemory` does, call by call); counted here otherwise.
    """
    target = budget // 2
    record, _, active, _ = branch.messages.state()
    # Counting every message again (a JSON dump of each one's metadata) made
    # each compaction cost the whole session's length: in a long session,
    # about a third of the server's time. Record entries never change in
    # place, so the sizes counted when they arrived still hold.
    sizes = (
        [_chars(m) for m in record] if sizes is None or len(sizes) != len(record) else list(sizes)
    )
    held = sum(sizes)
    stubs: dict[int, Message] = {}
    for index, message in enumerate(record):
        if held <= target:
            break
        if not _tool_traffic(message) or COMPACTED_KEY in message.metadata:
            continue
        # Without metadata a message's size is the overhead and its text:
        # its text's size needs no second encoding of its arguments.
        known = None if message.metadata else sizes[index] - MESSAGE_OVERHEAD
        stub = _stub(message, known)
        stub_size = _chars(stub)
        if stub_size >= sizes[index]:
            continue  # already as small as a stub: only dropping it helps
        record[index] = stubs[index] = stub
        held += stub_size - sizes[index]
        sizes[index] = stub_size
    # The new log keeps the token estimates of the entries left as they were
    # (estimating every message again made each compaction cost the session's
    # length once more).
    log = branch.messages.with_replaced(stubs) if stubs else branch.messages
    if held <= target:
        if stubs:
            branch.messages = log
        return Compaction(len(stubs), 0, held, sizes)
    kept, held = reference_drop_oldest(record, sizes, active, target)
    branch.messages = log.kept(kept)
    return Compaction(len(stubs), len(record) - len(kept), held, [sizes[i] for i in kept])


def reference_drop_oldest(
    record: list[Message], sizes: list[int], active: list[int], target: int
) -> tuple[list[int], int]:
    """The record indices of the active view without its oldest tool traffic, down to `target`.

    Messages outside the active view (already compacted away by a summary)
    go first: the guard never looks at them.
    """
    view = active  # record indices in view order
    held = sum(sizes[i] for i in view)
    answered = {m.call_id for i in view if (m := record[i]).role == "tool"}
    # The newest evidence of each kind for each path: kept while anything else can go.
    newest: dict[tuple[str, bool], int] = {}
    for i in view:
        message = record[i]
        evidence = FileEvidence.from_metadata(message.metadata) if message.role == "tool" else None
        if evidence is not None:
            newest[(evidence.path, evidence.whole_file)] = i
    carriers = set(newest.values())
    carrier_calls = {record[i].call_id for i in carriers}
    dropped: set[int] = set()

    def droppable(i: int, keep_evidence: bool) -> bool:
        message = record[i]
        if not _tool_traffic(message):
            return False
        if message.role == "assistant":
            ids = {call.id for call in message.tool_calls}
            if not ids <= answered:
                return False  # a call still running: its result is yet to come
            return not (keep_evidence and ids & carrier_calls)
        return not (keep_evidence and i in carriers)

    for keep_evidence in (True, False):
        for i in view:
            if held <= target:
                break
            if i not in dropped and droppable(i, keep_evidence):
                dropped.add(i)
                held -= sizes[i]
    return [i for i in view if i not in dropped], held


@attrs.define(eq=False)
class ReferenceMemory:
    """The running count of what one session's branch holds, and its compactions.

    Each call counts only the messages it added (`MessageLog.record_since`),
    so counting costs the call's own size, not the session's.
    """

    held: int = 0
    compacted: int = 0
    dropped: int = 0
    compactions: int = 0
    peak: int = 0
    # The log counted so far and the size of each of its record entries: a
    # log replaced behind our back (a branch loaded from a store) is counted again.
    _log: MessageLog | None = None
    _sizes: list[int] = attrs.field(factory=list)

    def reset(self) -> None:
        """Count the branch again from scratch at the next call (it was replaced)."""
        self._log = None

    def after_call(self, branch: Branch, budget: int | None) -> None:
        """Count what the last calls added; compact when over `budget`."""
        messages = branch.messages
        if messages is not self._log or messages.total < len(self._sizes):
            self._log, self._sizes, self.held = messages, [], 0
        added = [_chars(message) for message in messages.record_since(len(self._sizes))]
        self._sizes += added
        self.held += sum(added)
        if budget is not None and self.held > budget:
            done = reference_compact(branch, budget, self._sizes)
            self.held = done.held
            self.compacted += done.stubbed
            self.dropped += done.dropped
            self.compactions += 1
            self._log, self._sizes = branch.messages, done.sizes
            if branch.messages.total != len(self._sizes):  # never expected: count afresh
                self._sizes = [_chars(message) for message in branch.messages.record_since(0)]
                self.held = sum(self._sizes)
        self.peak = max(self.peak, self.held)

    def figures(self) -> tuple[int, int, int, int, int]:
        return (self.held, self.compacted, self.dropped, self.compactions, self.peak)


def figures(memory: SessionMemory) -> tuple[int, int, int, int, int]:
    return (memory.held, memory.compacted, memory.dropped, memory.compactions, memory.peak)


def assert_same(branch: Branch, memory: SessionMemory, ref: Branch, ref_memory: Any) -> None:
    assert branch.messages.state() == ref.messages.state()
    assert branch.messages.estimate_tokens() == ref.messages.estimate_tokens()
    assert figures(memory) == ref_memory.figures()
    assert memory.held == held_chars(branch.messages.record)


PATHS = ["/w/a.py", "/w/b.txt", "/w/c/d.md", "/w/e"]


def evidence(path: str, whole_file: bool, size: int) -> dict[str, Any]:
    """Metadata as the coding toolkit's reader and editor write it on a tool message."""
    return {
        EVIDENCE_KEY: {
            "path": path,
            "mtime_ns": 1_796_150_184_696_192_310 + size,
            "size": size,
            "sha256": f"{size:064x}",
            "whole_file": whole_file,
        }
    }


def call_and_result(tool: str, content: str, metadata: dict[str, Any]) -> list[Message]:
    # Arguments of every size: a stub of a call with small ones is no smaller.
    call = ToolCall(name=tool, arguments={"path": "x" * (len(content) * 7 % 601)})
    return [
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", call_id=call.id, tool=tool, content=content, metadata=metadata),
    ]


READ = st.tuples(st.just("read"), st.sampled_from(PATHS), st.booleans(), st.integers(0, 2500))
STEP = st.one_of(
    READ,
    READ,
    READ,
    st.tuples(st.just("edit"), st.sampled_from(PATHS), st.booleans(), st.integers(0, 300)),
    st.tuples(st.just("bash"), st.integers(0, 1500)),
    st.tuples(st.just("start"), st.integers(1, 3), st.integers(0, 400)),
    st.tuples(st.just("finish"), st.integers(0, 3), st.sampled_from(PATHS)),
    st.tuples(st.just("odd"), st.integers(0, 4), st.integers(0, 300)),
    st.tuples(st.just("view"), st.integers(0, 5), st.integers(0, 40), st.integers(1, 6)),
    st.tuples(st.just("replaced"), st.integers(0, 2)),
)


def apply_step(
    step: tuple[Any, ...], branches: list[Branch], memories: list[Any], running: list[ToolCall]
) -> None:
    """Do `step` to every branch alike (the same messages), as a served session would."""
    kind = step[0]
    new: list[Message] = []
    if kind == "read":
        _, path, whole, size = step
        new = call_and_result("reader", "r" * size, evidence(path, whole, size))
    elif kind == "edit":  # a successful edit leaves whole-file evidence; a failed one none
        _, path, ok, size = step
        new = call_and_result("editor", "e" * size, evidence(path, True, size) if ok else {})
    elif kind == "bash":
        new = call_and_result("bash", "b" * step[1], {})
    elif kind == "start":  # calls whose results have not arrived (one message, several calls)
        calls = tuple(
            ToolCall(name="bash", arguments={"command": "c" * step[2]}) for _ in range(step[1])
        )
        running.extend(calls)
        new = [Message(role="assistant", tool_calls=calls)]
    elif kind == "finish" and running:
        call = running.pop(step[1] % len(running))
        new = [
            Message(
                role="tool",
                call_id=call.id,
                tool="reader",
                content="f" * 200,
                metadata=evidence(step[2], False, 200),
            )
        ]
    elif kind == "odd":
        variant, size = step[1], step[2]
        if variant == 0:
            new = [Message(role="user", content="u" * size)]
        elif variant == 1:  # a result answering a call the log never had
            new = [Message(role="tool", call_id="call_unknown", content="o" * size)]
        elif variant == 2:  # evidence of another shape: no evidence at all
            new = call_and_result("reader", "m" * size, {EVIDENCE_KEY: {"path": "/w/a.py"}})
        elif variant == 3:  # a stub already (a log loaded from a store)
            new = call_and_result("reader", "", {COMPACTED_KEY: size})
        elif branches[0].messages.system is None:  # a system prompt pinned before the calls
            new = [Message(role="system", content="s" * size)]
    elif kind == "view":  # the view changed: evicted, restored or summarised
        _, how, at, span = step
        summary = Message(role="assistant", content="summary " * span)
        for branch in branches:
            log = branch.messages
            if how == 0:
                log.evict(at, at + span)
            elif how == 1:
                log.restore(at, at + span)
            elif how == 2 and len(log) > 1:
                ids = [m.id for m in log][1:][at % (len(log) - 1) :][:span]
                log.replace(ids, summary)
            elif how == 3:
                log.restore()
    elif kind == "replaced":  # behind the memory's back: a store load, with or without reset
        for branch, memory in zip(branches, memories, strict=True):
            if step[1] == 2:
                branch.messages = branch.messages.copy()
            else:
                branch.messages = MessageLog.from_state(*branch.messages.state())
                if step[1] == 1:
                    memory.reset()
    for branch in branches:
        for message in new:
            branch.messages.append(message)


@settings(max_examples=400, deadline=None)
@given(
    steps=st.lists(STEP, min_size=20, max_size=120),
    budget=st.integers(300, 4000),
    system=st.booleans(),
)
def test_the_memory_compacts_as_compacting_the_whole_log_afresh_did(
    steps: list[tuple[Any, ...]], budget: int, system: bool
) -> None:
    branch, ref = Branch(name="new"), Branch(name="reference")
    if system:
        prompt = Message(role="system", content="You are served over MCP.")
        for b in (branch, ref):
            b.messages.append(prompt)
    memory, ref_memory = SessionMemory(), ReferenceMemory()
    running: list[ToolCall] = []
    for step in steps:
        apply_step(step, [branch, ref], [memory, ref_memory], running)
        memory.after_call(branch, budget)
        ref_memory.after_call(ref, budget)
        assert_same(branch, memory, ref, ref_memory)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(STEP, max_size=40), budget=st.integers(300, 8000))
def test_compact_alone_compacts_as_before(steps: list[tuple[Any, ...]], budget: int) -> None:
    """`compact` without a memory (no sizes, nothing known) is the reference too."""
    branch, ref = Branch(name="new"), Branch(name="reference")
    running: list[ToolCall] = []
    for step in steps:
        apply_step(step, [branch, ref], [SessionMemory(), ReferenceMemory()], running)
    done, expected = compact(branch, budget), reference_compact(ref, budget)
    assert (done.stubbed, done.dropped, done.held) == (
        expected.stubbed,
        expected.dropped,
        expected.held,
    )
    assert done.sizes == expected.sizes
    assert branch.messages.state() == ref.messages.state()


async def test_a_real_session_compacts_as_compacting_the_whole_log_afresh_did(
    tmp_path: Path,
) -> None:
    """The coding toolkit's own reads, edits and bash calls, mirrored into a reference branch."""
    for name in ("a.txt", "b.txt", "c.txt"):
        (tmp_path / name).write_text(f"{name}\n" + "line\n" * 150, encoding="utf-8")
    branch = Branch(name="mcp-session")
    branch.register(coding_toolkit, workspace_root=tmp_path, tools=["reader", "editor", "bash"])
    ref, memory, ref_memory = Branch(name="reference"), SessionMemory(), ReferenceMemory()
    calls: list[tuple[str, dict[str, Any]]] = []
    for i in range(60):
        name = ("a.txt", "b.txt", "c.txt")[i % 3]
        calls.append(("reader", {"action": "read", "path": name}))
        calls.append(("reader", {"action": "read", "path": name, "offset": 3, "limit": 5}))
        if i % 4 == 0:
            edit = {
                "action": "edit",
                "file_path": name,
                "old_string": f"{name}\n",
                "new_string": f"{name}\n",
            }
            calls.append(("editor", edit))
        if i % 7 == 0:
            calls.append(("bash", {"command": f"echo {i}"}))
    outcomes = []
    for tool, arguments in calls:
        before = branch.messages.total
        result = await branch.act(tool, arguments)
        outcomes.append(result.ok)
        for message in branch.messages.record_since(before):
            ref.messages.append(message)
        memory.after_call(branch, 6000)
        ref_memory.after_call(ref, 6000)
        assert_same(branch, memory, ref, ref_memory)
    assert all(outcomes) and memory.dropped > 0 and memory.compactions > 10
    assert any(FileEvidence.from_metadata(m.metadata) for m in branch.messages)

"""A served session's memory is bounded: old results are compacted, evidence is kept."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from lionfactory import Branch
from lionfactory.coding import coding_toolkit
from lionfactory.mcp import SessionBranches, serve_mcp
from lionfactory.mcp._budget import COMPACTED_KEY

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

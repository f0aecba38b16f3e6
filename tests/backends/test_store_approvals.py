"""Every `BranchStore` keeps held calls, their decisions and the rules that asked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lionfactory import Branch
from lionfactory.backends import BranchStore, RedisBranchStore, SqliteBranchStore
from lionfactory.coding import Rule, coding_toolkit
from lionfactory.errors import ConflictError

ASK = Rule("bash", "touch *", "ask", reason="creates a file", examples=["touch x"])


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BranchStore]:
    made: BranchStore
    if request.param == "sqlite":
        made = SqliteBranchStore(tmp_path / "branches.db")
    else:
        url = request.getfixturevalue("redis_url")
        made = RedisBranchStore(url, namespace=request.getfixturevalue("redis_namespace"))
    async with made:
        yield made


async def test_a_held_call_and_its_decision_survive_a_save_and_run_once(
    store: BranchStore, workspace: Path
) -> None:
    branch = Branch("You write code.")
    branch.register(coding_toolkit, workspace_root=workspace, tools=["bash"], rules=[ASK])
    held = await branch.act("bash", {"command": "touch made"}, call_id="c1")
    assert held.outcome == "pending"
    edited = {"command": "sh -c 'echo ran >> count.txt'"}
    branch.approve("c1", arguments=edited)
    await store.save(branch)

    loaded = await store.load(branch.id)
    (pending,) = loaded.pending_calls
    assert pending.decision == "approved" and pending.run_arguments == edited
    (result,) = await loaded.settle(store=store)
    assert result.outcome == "done", result.payload
    assert (workspace / "count.txt").read_text() == "ran\n"
    assert not (workspace / "made").exists()

    # The copy saved before the call ran cannot run it again: its save conflicts.
    with pytest.raises(ConflictError):
        await branch.settle(store=store)
    assert (workspace / "count.txt").read_text() == "ran\n"
    again = await store.load(branch.id)
    assert again.pending_calls == ()
    # The rule came back with the branch and still asks.
    assert (await again.act("bash", {"command": "touch other"})).outcome == "pending"

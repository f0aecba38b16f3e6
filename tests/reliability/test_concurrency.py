"""Concurrent edits through `Branch.act_many`: serialised per path, nothing lost, one winner.

Edits of one path are serialised by a process-wide per-path lock, so
concurrent edits behave as if they ran one after another in some order:
every edit of a distinct marker lands, and of several edits of the same
marker exactly one succeeds while the others get a typed failure.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
import trio
from hypothesis import given
from hypothesis import strategies as st

from lionfactory import Branch
from lionfactory._acting import ActionResult
from lionfactory.tools.editor import editor_tool
from lionfactory.tools.reader import reader_tool


def edit(marker: str, value: str) -> tuple[str, dict[str, Any]]:
    return (
        "editor",
        {"action": "edit", "file_path": "shared.txt", "old_string": marker, "new_string": value},
    )


def editing_branch(workspace: Path) -> Branch:
    branch = Branch("You edit files.")
    branch.register(editor_tool, workspace_root=workspace)
    return branch


def succeeded(result: ActionResult) -> bool:
    # ok: the pipeline answered (no exception); success: the edit happened.
    assert result.ok, result.error
    assert result.result is not None
    return bool(result.result["success"])


async def test_50_concurrent_edits_of_distinct_markers_all_land(workspace: Path):
    (workspace / "shared.txt").write_text("".join(f"<m{i}>\n" for i in range(50)))
    branch = editing_branch(workspace)
    results = await branch.act_many([edit(f"<m{i}>", f"done {i}") for i in range(50)])
    assert all(succeeded(r) for r in results)
    assert (workspace / "shared.txt").read_text() == "".join(f"done {i}\n" for i in range(50))


async def test_50_concurrent_edits_of_one_marker_succeed_exactly_once(workspace: Path):
    (workspace / "shared.txt").write_text("before\n<marker>\nafter\n")
    branch = editing_branch(workspace)
    results = await branch.act_many([edit("<marker>", f"winner {i}") for i in range(50)])
    winners = [i for i, r in enumerate(results) if succeeded(r)]
    assert len(winners) == 1
    for result in results:
        if not succeeded(result):
            assert result.result is not None
            assert "old_string was not found" in result.result["error"]
    assert (workspace / "shared.txt").read_text() == f"before\nwinner {winners[0]}\nafter\n"


async def test_act_many_logs_one_result_per_call_in_call_order(workspace: Path):
    (workspace / "shared.txt").write_text("".join(f"<m{i}>\n" for i in range(50)))
    branch = editing_branch(workspace)
    before = len(branch.messages)
    results = await branch.act_many([edit(f"<m{i % 10}>", f"v{i}") for i in range(50)])
    logged = branch.messages.active[before:]
    assert [m.role for m in logged] == ["assistant"] + ["tool"] * 50
    assert [c.id for c in logged[0].tool_calls] == [m.call_id for m in logged[1:]]
    assert [r.call_id for r in results] == [m.call_id for m in logged[1:]]


@st.composite
def edit_plans(draw: st.DrawFn) -> tuple[int, list[int], list[bool]]:
    """How many markers, which marker each call edits, and whether it runs on the clone."""
    markers = draw(st.integers(1, 10))
    targets = draw(st.lists(st.integers(0, markers - 1), min_size=2, max_size=40))
    on_clone = draw(st.lists(st.booleans(), min_size=len(targets), max_size=len(targets)))
    return markers, targets, on_clone


async def run_plan(workspace: Path, targets: list[int], on_clone: list[bool]) -> list[bool]:
    branch = editing_branch(workspace)
    clone = branch.clone()
    calls: dict[bool, list[tuple[int, tuple[str, dict[str, Any]]]]] = {False: [], True: []}
    for i, (target, cloned) in enumerate(zip(targets, on_clone, strict=True)):
        calls[cloned].append((i, edit(f"<m{target}>", f"[v{i}]")))
    outcome: list[bool] = [False] * len(targets)

    async def act(on: Branch, batch: list[tuple[int, tuple[str, dict[str, Any]]]]) -> None:
        results = await on.act_many([call for _, call in batch])
        for (i, _), result in zip(batch, results, strict=True):
            outcome[i] = succeeded(result)

    async with anyio.create_task_group() as group:
        group.start_soon(act, branch, calls[False])
        group.start_soon(act, clone, calls[True])
    return outcome


@given(edit_plans())
def test_concurrent_edits_from_a_branch_and_its_clone_serialise(
    plan: tuple[int, list[int], list[bool]],
) -> None:
    """The branch's and the clone's editors share the per-path lock.

    Per marker exactly one edit wins, and the file is the original with each
    winner applied.
    """
    markers, targets, on_clone = plan
    with tempfile.TemporaryDirectory(prefix="lf-concurrency-") as base:
        workspace = Path(base)
        lines = [f"<m{k}>" for k in range(markers)]
        (workspace / "shared.txt").write_text("\n".join(lines) + "\n")
        outcome = trio.run(run_plan, workspace, targets, on_clone)
        for k in set(targets):
            winners = [i for i, t in enumerate(targets) if t == k and outcome[i]]
            assert len(winners) == 1, (k, winners)
            lines[k] = f"[v{winners[0]}]"
        assert (workspace / "shared.txt").read_text() == "\n".join(lines) + "\n"


async def test_readers_never_see_a_half_written_file(workspace: Path):
    """50 whole-file writes race 50 reads: each read shows one complete version."""
    versions = ["".join(f"{tag}{n:04d}{'.' * 900}\n" for n in range(120)) for tag in "AB"]
    (workspace / "shared.txt").write_text(versions[0])
    editor, reader = editor_tool(workspace_root=workspace), reader_tool(workspace_root=workspace)
    shown = [
        "\n".join(f"{n + 1}\t{line}" for n, line in enumerate(v.splitlines())) for v in versions
    ]
    reads: list[str] = []

    async def write(i: int) -> None:
        answer = await editor(action="write", file_path="shared.txt", content=versions[i % 2])
        assert answer["success"], answer

    async def read() -> None:
        answer = await reader(action="read", path="shared.txt", limit=500)
        assert answer["success"], answer
        reads.append(answer["content"])

    async with anyio.create_task_group() as group:
        for i in range(50):
            group.start_soon(write, i)
            group.start_soon(read)
    assert len(reads) == 50
    assert all(content in shown for content in reads)

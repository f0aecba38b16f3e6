from __future__ import annotations

import logging

from lionfactory import Branch
from lionfactory.coding import (
    BashFailureStreak,
    ContextUsage,
    EditsWithoutCheck,
    coding_toolkit,
)
from lionfactory.testing import ScriptedModel, tool_call


async def test_context_nudge_appears_once_usage_crosses_the_threshold_and_not_before(workspace):
    # 100 lines of 100 characters: each read result is ~2,800 tokens.
    (workspace / "big.txt").write_text((("x" * 99) + "\n") * 100)
    reads = [tool_call("reader", action="read", path="big.txt") for _ in range(6)]
    model = ScriptedModel([*reads, "done"])
    branch = Branch("sys", chat_model=model)
    branch.register(
        coding_toolkit, workspace_root=workspace, notify_max_tokens=10_000, notify_threshold=0.5
    )
    await branch.run("read it many times")
    results = [m for m in branch.messages if m.role == "tool"]
    nudged = ["Context usage is about" in m.content for m in results]
    # The hook runs before its own result joins the view: the 3rd read sees
    # two results (~5,600 tokens) above the 5,000-token threshold.
    assert nudged[:2] == [False, False]
    assert nudged[2] is True
    assert "compact" in results[2].content


async def test_notify_false_disables_nudges(workspace):
    (workspace / "big.txt").write_text("word " * 2000)
    branch = Branch("sys")
    branch.register(coding_toolkit, workspace_root=workspace, notify=False, notify_max_tokens=10)
    result = await branch.act("reader", {"action": "read", "path": "big.txt"})
    assert "system" not in result.result


async def test_three_failed_bash_calls_in_a_row_are_nudged(workspace):
    branch = Branch("sys")
    branch.register(coding_toolkit, workspace_root=workspace)
    results = [await branch.act("bash", {"command": "false"}) for _ in range(3)]
    assert ["system" in r.result for r in results] == [False, False, True]
    assert "3 bash commands failed" in results[2].result["system"]
    ok = await branch.act("bash", {"command": "true"})
    assert "system" not in ok.result


async def test_edits_without_code_check_are_nudged(workspace):
    branch = Branch("sys")
    branch.register(coding_toolkit, workspace_root=workspace)
    results = []
    for i in range(3):
        write = {"action": "write", "file_path": f"m{i}.py", "content": "x = 1\n"}
        results.append(await branch.act("editor", write))
    assert "code_check" in results[2].result["system"]
    assert all("system" not in r.result for r in results[:2])
    await branch.act("code_check", {"paths": []})
    again = await branch.act("editor", {"action": "write", "file_path": "m9.py", "content": "y\n"})
    assert "system" not in again.result


async def test_a_failing_rule_logs_and_leaves_the_result_untouched(workspace, caplog):
    def broken(snapshot):
        raise RuntimeError("rule bug")

    def speaks(snapshot):
        return f"saw {snapshot.tool}"

    branch = Branch("sys")
    branch.register(coding_toolkit, workspace_root=workspace, nudge_rules=[broken, speaks])
    with caplog.at_level(logging.WARNING, logger="lionfactory.nudges"):
        result = await branch.act("bash", {"command": "true"})
    assert result.result["system"] == "saw bash"
    assert result.result["return_code"] == 0
    assert "rule bug" in caplog.text


async def test_custom_rules_see_the_snapshot(workspace):
    (workspace / "a.py").write_text("x = 1\n")
    seen = []

    def spy(snapshot):
        seen.append(snapshot)

    branch = Branch("sys")
    branch.register(
        coding_toolkit,
        workspace_root=workspace,
        nudge_rules=[spy],
        notify_max_tokens=1234,
        notify_threshold=0.25,
    )
    await branch.act("reader", {"action": "read", "path": "a.py"})
    await branch.act("bash", {"command": "false"})
    snap = seen[-1]
    assert (snap.max_tokens, snap.threshold) == (1234, 0.25)
    assert [c.tool for c in snap.recent_calls] == ["reader", "bash"]
    assert snap.recent_calls[-1].succeeded is False
    # Taken before the bash tool message was appended: below the final figure.
    assert 0 < snap.estimated_tokens < branch.messages.estimate_tokens()
    assert snap.files_with_evidence == (str(workspace.resolve() / "a.py"),)


def test_rule_state_does_not_cross_clones(workspace):
    shared = ContextUsage()
    branch = Branch("sys")
    branch.register(coding_toolkit, workspace_root=workspace, nudge_rules=[shared])
    clone = branch.clone()
    rules_a = branch.tools["bash"].post[-1].rules
    rules_b = clone.tools["bash"].post[-1].rules
    assert rules_a[0] is not rules_b[0]
    assert rules_a[0] is not shared


def test_default_rule_types():
    assert BashFailureStreak().limit == 3
    assert EditsWithoutCheck().limit == 3


async def test_the_context_nudge_stays_silent_without_the_context_tool(workspace):
    # Its advice is to call the context tool; a branch without one (an MCP
    # session's) cannot follow it.
    (workspace / "big.txt").write_text((("x" * 99) + "\n") * 100)
    branch = Branch("sys")
    branch.register(
        coding_toolkit,
        workspace_root=workspace,
        tools=["reader", "editor"],
        notify_max_tokens=10_000,
        notify_threshold=0.5,
    )
    results = [await branch.act("reader", {"action": "read", "path": "big.txt"}) for _ in range(6)]
    assert all(r.ok and "system" not in r.result for r in results)


async def test_the_unchecked_edits_nudge_stays_silent_without_code_check(workspace):
    branch = Branch("sys")
    branch.register(coding_toolkit, workspace_root=workspace, tools=["reader", "editor"])
    for i in range(6):
        write = {"action": "write", "file_path": f"m{i}.py", "content": "x = 1\n"}
        result = await branch.act("editor", write)
        assert result.ok and "system" not in result.result


async def test_rules_see_the_tools_the_branch_has(workspace):
    seen = []
    branch = Branch("sys")
    branch.register(
        coding_toolkit,
        workspace_root=workspace,
        tools=["reader", "bash"],
        nudge_rules=[seen.append],
    )
    await branch.act("bash", {"command": "true"})
    assert seen[-1].tools == frozenset({"reader", "bash", "jobs"})

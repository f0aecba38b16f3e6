"""An approval names one call: a sub-agent's own held steps come back to the parent.

Real coding toolkit, real bash, the real sub-agent loop; only the model is
scripted (`ScriptedModel`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lionfactory import Branch
from lionfactory.coding import Rule, coding_toolkit
from lionfactory.errors import ApprovalPending
from lionfactory.testing import ScriptedModel, tool_call

PUSH = Rule("bash", "touch pushed*", "ask", reason="creates a pushed marker")


class Switch:
    """The parent's replies for the parent, the child's for the sub-agent's branch."""

    def __init__(self, parent: ScriptedModel, child: ScriptedModel) -> None:
        self.parent, self.child = parent, child

    async def __call__(self, messages: Any, tools: Any) -> Any:
        names = {t.name for t in tools}
        return await (self.parent if "subagent" in names else self.child)(messages, tools)


def parent(workspace: Path, child_steps: list[Any], *, rules: list[Rule]) -> Branch:
    model = ScriptedModel(
        [tool_call("subagent", instruction="make the markers", permissions="safe"), "done"]
    )
    branch = Branch("You write code.", chat_model=Switch(model, ScriptedModel(child_steps)))
    branch.register(
        coding_toolkit, workspace_root=workspace, tools=["bash", "subagent"], rules=rules
    )
    return branch


async def test_a_childs_held_step_holds_the_parents_subagent_call(workspace: Path) -> None:
    branch = parent(workspace, [tool_call("bash", command="touch pushed"), "ok"], rules=[PUSH])
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("delegate")
    (held,) = paused.value.calls
    assert held.tool == "subagent" and branch.pending_calls == (held,)
    assert '"touch pushed"' in held.reason and "creates a pushed marker" in held.reason
    assert not (workspace / "pushed").exists()


async def test_approving_the_subagent_call_approves_only_the_steps_it_named(
    workspace: Path,
) -> None:
    steps = [
        tool_call("bash", command="touch pushed1"),
        tool_call("bash", command="touch pushed2"),
        "made both",
    ]
    branch = parent(workspace, steps, rules=[PUSH])
    with pytest.raises(ApprovalPending) as first:
        await branch.run("delegate")
    branch.approve(first.value.calls[0].id)
    # The child's next step asks again: the approval named the first alone.
    with pytest.raises(ApprovalPending) as second:
        await branch.resume()
    assert (workspace / "pushed1").exists() and not (workspace / "pushed2").exists()
    (again,) = second.value.calls
    assert again.id == first.value.calls[0].id and '"touch pushed2"' in again.reason
    branch.approve(again.id)
    assert await branch.resume() == "done"
    assert (workspace / "pushed2").exists()
    (answer,) = [m for m in branch.messages if m.role == "tool"]
    report = json.loads(answer.content)
    assert report["success"] is True and report["response"] == "made both"


async def test_an_ask_rule_on_subagent_approved_does_not_approve_the_childs_steps(
    workspace: Path,
) -> None:
    """The attack: approving the ``subagent`` call used to approve everything the child did."""
    rules = [Rule("subagent", None, "ask", reason="delegation"), PUSH]
    branch = parent(workspace, [tool_call("bash", command="touch pushed"), "ok"], rules=rules)
    with pytest.raises(ApprovalPending) as asked:
        await branch.run("delegate")
    (held,) = asked.value.calls
    assert held.reason == "delegation"
    branch.approve(held.id)
    with pytest.raises(ApprovalPending) as child_asks:
        await branch.resume()
    assert not (workspace / "pushed").exists()
    assert '"touch pushed"' in child_asks.value.calls[0].reason


async def test_denying_the_subagent_call_ends_the_child_unrun(workspace: Path) -> None:
    branch = parent(workspace, [tool_call("bash", command="touch pushed"), "ok"], rules=[PUSH])
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("delegate")
    branch.deny(paused.value.calls[0].id, "no markers today")
    assert await branch.resume() == "done"
    assert not (workspace / "pushed").exists()
    (answer,) = [m for m in branch.messages if m.role == "tool"]
    assert json.loads(answer.content) == {
        "error": "A person denied this call: no markers today",
        "error_type": "ToolDenied",
    }


async def test_a_subagent_called_outside_a_branch_reports_the_held_step(workspace: Path) -> None:
    """With no call to hold (a direct tool call), the step is reported, never run."""
    branch = parent(workspace, [tool_call("bash", command="touch pushed"), "ok"], rules=[PUSH])
    result = await branch.tools["subagent"](instruction="make it", permissions="safe")
    assert result["success"] is False and "touch pushed" in result["error"]
    assert not (workspace / "pushed").exists()

"""`coding_toolkit(rules=..., mode=...)`: rules held, asked, denied and saved with the branch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lionfactory import Branch
from lionfactory.coding import Rule, coding_toolkit
from lionfactory.errors import ApprovalPending
from lionfactory.testing import ScriptedModel, tool_call

PUSH = Rule("bash", "touch pushed*", "ask", reason="creates the pushed marker")


def kit(workspace: Path, model: ScriptedModel | None = None, **kwargs: object) -> Branch:
    branch = Branch("You write code.", chat_model=model)
    branch.register(coding_toolkit, workspace_root=workspace, **kwargs)
    return branch


def seen(branch: Branch, call_id: str) -> dict[str, object]:
    (message,) = [m for m in branch.messages if m.role == "tool" and m.call_id == call_id]
    return json.loads(message.content)


async def test_an_ask_rule_holds_a_real_bash_command_until_approved(workspace: Path) -> None:
    model = ScriptedModel([tool_call("bash", command="touch pushed"), "done"])
    branch = kit(workspace, model, tools=["bash"], rules=[PUSH])
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("push")
    (call,) = paused.value.calls
    assert call.reason == "creates the pushed marker" and call.hook.startswith("rule bash")
    assert not (workspace / "pushed").exists()
    branch.approve(call.id)
    assert await branch.resume() == "done"
    assert (workspace / "pushed").exists()
    assert seen(branch, call.id)["return_code"] == 0


async def test_commands_no_rule_matches_run_at_once(workspace: Path) -> None:
    branch = kit(workspace, tools=["bash"], rules=[PUSH])
    result = await branch.act("bash", {"command": "touch other"})
    assert result.outcome == "done" and (workspace / "other").exists()


async def test_a_deny_rule_refuses_and_the_model_reads_the_reason(workspace: Path) -> None:
    rules = [Rule("editor", "*.lock", "deny", reason="lock files are generated")]
    branch = kit(workspace, tools=["editor"], rules=rules)
    result = await branch.act(
        "editor", {"action": "write", "file_path": "poetry.lock", "content": "x"}
    )
    assert result.error_type == "ToolDenied" and "lock files are generated" in str(result.error)
    assert not (workspace / "poetry.lock").exists()


async def test_approved_edited_arguments_meet_the_deny_rules_again(workspace: Path) -> None:
    rules = [PUSH, Rule("bash", "rm *", "deny", reason="no deleting")]
    (workspace / "keep.txt").write_text("keep")
    branch = kit(workspace, tools=["bash"], rules=rules)
    await branch.act("bash", {"command": "touch pushed"}, call_id="c1")
    branch.approve("c1", arguments={"command": "rm keep.txt"})
    (result,) = await branch.settle()
    assert result.error_type == "ToolDenied" and (workspace / "keep.txt").exists()


async def test_read_only_mode_denies_edits_and_commands_but_reads(workspace: Path) -> None:
    (workspace / "a.txt").write_text("hello\n")
    branch = kit(workspace, tools=["reader", "editor", "bash"], mode="read_only")
    assert (await branch.act("reader", {"action": "read", "path": "a.txt"})).outcome == "done"
    edit = await branch.act("editor", {"action": "write", "file_path": "b.txt", "content": "x"})
    bash = await branch.act("bash", {"command": "touch c"})
    assert edit.error_type == bash.error_type == "ToolDenied"
    assert not (workspace / "b.txt").exists() and not (workspace / "c").exists()


async def test_ask_edits_mode_holds_edits_and_accept_edits_runs_them(workspace: Path) -> None:
    write = {"action": "write", "file_path": "b.txt", "content": "x"}
    asking = kit(workspace, tools=["editor", "bash"], mode="ask_edits")
    assert (await asking.act("editor", write)).outcome == "pending"
    accepting = kit(workspace, tools=["editor", "bash"], mode="accept_edits")
    assert (await accepting.act("editor", write)).outcome == "done"
    assert (await accepting.act("bash", {"command": "true"})).outcome == "pending"


def test_a_contradictory_rule_fails_when_the_toolkit_is_built(workspace: Path) -> None:
    with pytest.raises(ValueError, match="does not match its example"):
        kit(workspace, rules=[{"tool": "bash", "match": "git push *", "examples": ["git push"]}])
    with pytest.raises(ValueError, match="mode must be one of"):
        kit(workspace, mode="everything")
    with pytest.raises(TypeError, match="list of Rule"):
        kit(workspace, rules="bash")


async def test_rules_persist_with_the_branch(workspace: Path) -> None:
    branch = kit(workspace, tools=["bash"], rules=[PUSH], mode="accept_edits")
    data = json.loads(branch.to_json())
    (registration,) = data["registrations"]
    assert registration["kwargs"]["rules"][0]["data"]["match"] == "touch pushed*"
    restored = Branch.from_dict(data)
    result = await restored.act("bash", {"command": "touch pushed"})
    assert result.outcome == "pending" and result.pending is not None
    assert result.pending.reason == "creates the pushed marker"


async def test_a_subagent_obeys_the_parents_rules(workspace: Path) -> None:
    model = ScriptedModel(
        [
            tool_call("subagent", instruction="make the marker", permissions="safe"),
            "the subagent could not",
        ]
    )
    child_model = ScriptedModel([tool_call("bash", command="touch pushed"), "did it"])
    branch = Branch("You write code.", chat_model=model)
    branch.register(
        coding_toolkit,
        workspace_root=workspace,
        tools=["bash", "subagent"],
        rules=[PUSH],
    )
    # The child talks to the parent's chat model: one switch serves both.
    branch.chat_model = _Switch(model, child_model)
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("delegate")
    assert not (workspace / "pushed").exists()
    (held,) = paused.value.calls
    assert held.tool == "subagent" and "creates the pushed marker" in held.reason


class _Switch:
    """The parent's replies for the parent, the child's for the sub-agent's branch."""

    def __init__(self, parent: ScriptedModel, child: ScriptedModel) -> None:
        self.parent, self.child = parent, child

    async def __call__(self, messages, tools):  # type: ignore[no-untyped-def]
        names = {t.name for t in tools}
        return await (self.parent if "subagent" in names else self.child)(messages, tools)


def test_a_saved_record_naming_a_class_that_is_not_a_data_record_is_refused(
    workspace: Path,
) -> None:
    from lionfactory.errors import ConfigurationError

    branch = kit(workspace, tools=["bash"], rules=[PUSH])
    data = json.loads(branch.to_json())
    # Branch has a from_dict classmethod too, but is not a data record.
    data["registrations"][0]["kwargs"]["rules"][0]["$record"] = "lionfactory:Branch"
    with pytest.raises(ConfigurationError, match="lionfactory:Branch"):
        Branch.from_dict(data)


def test_a_saved_rule_whose_examples_no_longer_match_is_refused_on_load(
    workspace: Path,
) -> None:
    from lionfactory.errors import ConfigurationError

    branch = kit(workspace, tools=["bash"], rules=[PUSH])
    data = json.loads(branch.to_json())
    data["registrations"][0]["kwargs"]["rules"][0]["data"]["examples"] = ["ls"]
    with pytest.raises(ConfigurationError):
        Branch.from_dict(data)

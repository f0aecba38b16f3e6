from __future__ import annotations

import json
import uuid

import pytest

from lionfactory import Branch, Message, function_tool
from lionfactory._exchange import Exchange
from lionfactory.coding import coding_toolkit
from lionfactory.errors import ConfigurationError
from lionfactory.testing import ScriptedModel, assert_no_foreign_bindings
from lionfactory.tools import (
    ast_search_tool,
    bash_tool,
    code_check_tool,
    code_nav_tool,
    context_tool,
    editor_tool,
    messenger_tool,
    reader_tool,
    search_tool,
)


def add(a: int, b: int = 1) -> int:
    """Add two integers."""
    return a + b


def roundtrip(branch: Branch, **resources) -> Branch:
    text = branch.to_json()
    restored = Branch.from_json(text, resources=resources)
    assert restored.to_json() == text
    return restored


@pytest.mark.parametrize(
    ("factory", "kwargs"),
    [
        (reader_tool, {"cache_ttl": 5.0, "allowed_hosts": ("docs.example.org",)}),
        (editor_tool, {}),
        (bash_tool, {"env": {"LANG": "C"}}),
        (search_tool, {}),
        (code_check_tool, {}),
        (code_nav_tool, {}),
        (ast_search_tool, {}),
        (context_tool, {}),
        (coding_toolkit, {"tools": ["reader", "editor", "context"], "notify_max_tokens": 5000}),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
async def test_every_builtin_round_trips(workspace, factory, kwargs):
    branch = Branch("sys", name="saved")
    if factory is not context_tool:
        kwargs = {"workspace_root": workspace, **kwargs}
    branch.register(factory, **kwargs)
    restored = roundtrip(branch)
    assert restored.id == branch.id
    assert restored.manifest() == branch.manifest()
    assert restored.provenance(next(iter(restored.tools))).kwargs == dict(kwargs)
    assert all(t.bound_to in (None, restored.id) for t in restored.tools.values())
    assert_no_foreign_bindings(restored)


async def test_messages_view_and_summaries_survive(workspace):
    branch = Branch("sys", name="n")
    branch.metadata["project"] = "demo"
    msgs = [branch.messages.append(Message(role="user", content=f"m{i}")) for i in range(6)]
    branch.messages.evict(1, 2)
    branch.messages.replace([msgs[3].id, msgs[4].id], Message(role="assistant", content="S"))
    restored = roundtrip(branch)
    assert [m.content for m in restored.messages] == ["sys", "m1", "m2", "S", "m5"]
    assert restored.metadata == {"project": "demo"}
    restored.messages.restore()
    assert [m.content for m in restored.messages] == ["sys", "m0", "m1", "m2", "m3", "m4", "m5"]


async def test_restored_toolkit_derives_evidence_from_the_restored_view(workspace):
    (workspace / "a.py").write_text("x = 1\n")
    (workspace / "b.py").write_text("y = 1\n")
    branch = Branch("sys")
    branch.register(coding_toolkit, workspace_root=workspace)
    await branch.act("reader", {"action": "read", "path": "a.py"})
    restored = roundtrip(branch)
    edit_a = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    edit_b = {"action": "edit", "file_path": "b.py", "old_string": "y = 1", "new_string": "y = 2"}
    assert (await restored.act("editor", edit_a)).result["success"] is True
    assert (await restored.act("editor", edit_b)).result["success"] is False


async def test_live_objects_are_resources_and_missing_ones_are_listed(workspace):
    exchange = Exchange()
    a_id = uuid.uuid4()
    branch = Branch("sys", chat_model=ScriptedModel(["hi"]))
    branch.register(messenger_tool, exchange=exchange, roster={"peer": a_id}, sender_name="me")
    tool = function_tool(add)
    branch.register(tool)
    data = json.loads(branch.to_json())
    kwargs = data["registrations"][0]["kwargs"]
    assert kwargs["exchange"] == {"$resource": "exchange"}
    assert kwargs["roster"] == {"peer": {"$uuid": str(a_id)}}
    with pytest.raises(ConfigurationError) as info:
        Branch.from_dict(data)
    assert "'exchange'" in str(info.value)
    assert "'tool:add'" in str(info.value)
    model = ScriptedModel(["restored"])
    restored = Branch.from_dict(
        data, resources={"exchange": exchange, "tool:add": tool, "chat_model": model}
    )
    assert restored.chat_model is model
    assert restored.tools["add"] is tool
    assert list(restored.tools) == ["messenger", "add"]
    assert await restored.run("hello") == "restored"


def test_unimportable_factories_are_reported(workspace):
    def local_factory():
        return function_tool(add)

    branch = Branch()
    branch.register(local_factory)
    with pytest.raises(ConfigurationError, match="cannot be imported"):
        Branch.from_json(branch.to_json())


def test_metadata_must_be_json_ready():
    branch = Branch(metadata={"obj": object()})
    with pytest.raises(ConfigurationError, match="JSON-ready"):
        branch.to_dict()


def test_json_is_stable_and_sorted():
    branch = Branch("sys", name="n")
    text = branch.to_json()
    assert text == branch.to_json()
    assert json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) == text


async def test_module_level_hooks_are_stored_by_import_path(workspace):
    from lionfactory.coding import deny_destructive_commands

    branch = Branch("sys")
    branch.register(
        coding_toolkit,
        workspace_root=workspace,
        tools=["bash"],
        hooks={"bash": {"pre": [deny_destructive_commands]}},
    )
    data = json.loads(branch.to_json())
    hooks = data["registrations"][0]["kwargs"]["hooks"]
    assert hooks == {
        "bash": {"pre": [{"$callable": "lionfactory.coding.policies:deny_destructive_commands"}]}
    }
    restored = roundtrip(branch)
    denied = await restored.act("bash", {"command": "rm -rf x"})
    assert denied.error_type == "ToolDenied"


def test_local_functions_are_resources(workspace):
    def local_hook(name, args):
        return None

    branch = Branch()
    branch.register(
        coding_toolkit, workspace_root=workspace, tools=["bash"], hooks={"*": {"pre": [local_hook]}}
    )
    data = json.loads(branch.to_json())
    assert data["registrations"][0]["kwargs"]["hooks"] == {"*": {"pre": [{"$resource": "hooks"}]}}

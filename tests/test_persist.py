from __future__ import annotations

import json
import sys
import uuid

import pytest

from lionfactory import Branch, Message, function_tool, register_factory
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


def test_unregistered_factories_are_reported(workspace):
    def local_factory():
        return function_tool(add)

    branch = Branch()
    branch.register(local_factory)
    with pytest.raises(ConfigurationError, match="is not a registered factory"):
        Branch.from_json(branch.to_json())


def saved_with_factory(factory: str, kwargs: dict) -> dict:
    """A saved branch as another program could have written it."""
    data = Branch("sys").to_dict()
    data["registrations"] = [
        {"kind": "factory", "factory": factory, "kwargs": kwargs, "tools": ["x"]}
    ]
    return data


def test_a_stored_os_system_factory_is_never_called(tmp_path):
    marker = tmp_path / "pwned"
    data = saved_with_factory("os:system", {"command": f"touch {marker}"})
    with pytest.raises(ConfigurationError) as info:
        Branch.from_dict(data)
    assert "'os:system'" in str(info.value)
    assert not marker.exists()


@pytest.fixture
def planted_module(tmp_path, monkeypatch):
    """A module on sys.path whose import leaves a marker file: importing runs code."""
    name = f"lf_planted_{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "imported"
    (tmp_path / f"{name}.py").write_text(
        f"open({str(marker)!r}, 'w').close()\ndef factory(**kwargs):\n    return []\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return name, marker


def test_an_unregistered_factory_module_is_not_imported(planted_module):
    name, marker = planted_module
    with pytest.raises(ConfigurationError, match=f"{name}:factory"):
        Branch.from_dict(saved_with_factory(f"{name}:factory", {}))
    assert not marker.exists()
    assert name not in sys.modules


def test_a_stored_callable_argument_must_be_registered_too(planted_module, workspace):
    name, marker = planted_module
    data = saved_with_factory(
        "lionfactory.tools:bash_tool",
        {"workspace_root": str(workspace), "pre": [{"$callable": f"{name}:factory"}]},
    )
    data["registrations"][0]["tools"] = ["bash"]
    with pytest.raises(ConfigurationError, match=f"callable '{name}:factory'"):
        Branch.from_dict(data)
    assert not marker.exists()
    with pytest.raises(ConfigurationError, match="'os:system'"):
        Branch.from_dict(
            saved_with_factory("lionfactory.tools:bash_tool", {"pre": {"$callable": "os:system"}})
        )


@pytest.mark.parametrize(
    "entry",
    [
        "not a dict",
        {"kind": "factory", "factory": 7, "kwargs": {}, "tools": []},
        {"kind": "factory", "factory": "lionfactory.tools:reader_tool", "tools": []},
        {"kind": "what", "tools": []},
        {"kind": "static", "tools": [1]},
    ],
)
def test_malformed_registrations_are_configuration_errors(entry):
    data = Branch().to_dict()
    data["registrations"] = [entry]
    with pytest.raises(ConfigurationError, match="malformed"):
        Branch.from_dict(data)


def test_a_malformed_tagged_argument_is_a_configuration_error():
    data = saved_with_factory("lionfactory.tools:context_tool", {"chat_model": {"$uuid": "x"}})
    with pytest.raises(ConfigurationError, match="not a UUID"):
        Branch.from_dict(data)


def notes_factory(branch: Branch, *, prefix: str = "") -> object:
    """A module-level factory, registered explicitly below."""
    return function_tool(add, name=f"{prefix}add")


def test_a_registered_factory_round_trips():
    register_factory(notes_factory)
    branch = Branch()
    branch.register(notes_factory, prefix="p_")
    restored = roundtrip(branch)
    assert list(restored.tools) == ["p_add"]
    assert restored.provenance("p_add").source is notes_factory


def custom_hook(tool_name: str, arguments: dict) -> None:
    """A module-level policy hook (denies nothing)."""


def test_a_registered_hook_is_stored_by_its_name(workspace):
    register_factory(custom_hook, name="tests.hooks:custom_hook")
    branch = Branch()
    hooks = {"bash": {"pre": [custom_hook]}}
    branch.register(coding_toolkit, workspace_root=workspace, tools=["bash"], hooks=hooks)
    data = json.loads(branch.to_json())
    assert data["registrations"][0]["kwargs"]["hooks"] == {
        "bash": {"pre": [{"$callable": "tests.hooks:custom_hook"}]}
    }
    restored = roundtrip(branch)
    assert restored.provenance("bash").kwargs["hooks"] == hooks


def test_an_unregistered_module_level_hook_is_a_resource(workspace):
    def unregistered(tool_name, arguments):
        return None

    unregistered.__qualname__ = "unregistered_hook"  # looks importable, is not registered
    branch = Branch()
    hooks = {"bash": {"pre": [unregistered]}}
    branch.register(coding_toolkit, workspace_root=workspace, tools=["bash"], hooks=hooks)
    data = json.loads(branch.to_json())
    # The whole argument is the resource: `resources={"hooks": hooks}` gives it back.
    assert data["registrations"][0]["kwargs"]["hooks"] == {"$resource": "hooks"}


@register_factory
def decorated_factory(branch: Branch) -> object:
    """Registered by its decorator."""
    return function_tool(add, name="decorated")


def test_register_factory_works_as_a_decorator():
    branch = Branch()
    branch.register(decorated_factory)
    assert list(roundtrip(branch).tools) == ["decorated"]


@pytest.mark.parametrize(
    ("factory", "name", "match"),
    [
        (lambda: [], None, "no stable import path"),
        (notes_factory, "lionfactory.tools:reader_tool", "built-in"),
        (add, "bad name", "module:qualname"),
        ("not callable", None, None),
    ],
)
def test_register_factory_refuses_what_loading_could_not_name(factory, name, match):
    with pytest.raises((TypeError, ValueError), match=match):
        register_factory(factory, name=name)


def test_one_name_means_one_callable():
    register_factory(notes_factory, name="tests.names:taken")
    with pytest.raises(ValueError, match="another callable"):
        register_factory(add, name="tests.names:taken")


def test_the_old_spelling_of_a_builtin_still_loads(workspace):
    data = saved_with_factory(
        "lionfactory.tools.reader:reader_tool", {"workspace_root": {"$path": str(workspace)}}
    )
    data["registrations"][0]["tools"] = ["reader"]
    restored = Branch.from_dict(data)
    assert restored.provenance("reader").source is reader_tool
    assert restored.to_dict()["registrations"][0]["factory"] == "lionfactory.tools:reader_tool"


def test_an_entry_point_factory_is_imported_only_when_named(tmp_path, monkeypatch):
    package = f"lf_declared_{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "imported"
    (tmp_path / f"{package}.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "from lionfactory import function_tool\n"
        "def declared_tool(branch=None):\n"
        "    return function_tool(lambda: 1, name='declared')\n"
    )
    info = tmp_path / f"{package}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[lionfactory.factories]\ndeclared = {package}:declared_tool\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigurationError):
        Branch.from_dict(saved_with_factory("other:thing", {}))
    assert not marker.exists()  # another name: the declared module stays unimported
    data = saved_with_factory(f"{package}:declared_tool", {})
    data["registrations"][0]["tools"] = ["declared"]
    restored = Branch.from_dict(data)
    assert list(restored.tools) == ["declared"]
    assert marker.exists()


def test_metadata_must_be_json_ready():
    branch = Branch(metadata={"obj": object()})
    with pytest.raises(ConfigurationError, match="JSON-ready"):
        branch.to_dict()


def test_json_is_stable_and_sorted():
    branch = Branch("sys", name="n")
    text = branch.to_json()
    assert text == branch.to_json()
    assert json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) == text


async def test_builtin_hooks_are_stored_by_their_public_name(workspace):
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
        "bash": {"pre": [{"$callable": "lionfactory.coding:deny_destructive_commands"}]}
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
    assert data["registrations"][0]["kwargs"]["hooks"] == {"$resource": "hooks"}


async def test_the_old_spelling_of_a_builtin_hook_still_loads(workspace):
    from lionfactory.coding import deny_destructive_commands

    old = {"$callable": "lionfactory.coding.policies:deny_destructive_commands"}
    data = saved_with_factory(
        "lionfactory.coding._toolkit:coding_toolkit",
        {
            "workspace_root": {"$path": str(workspace)},
            "tools": ["bash"],
            "hooks": {"bash": {"pre": [old]}},
        },
    )
    data["registrations"][0]["tools"] = ["bash"]
    restored = Branch.from_dict(data)
    assert restored.provenance("bash").kwargs["hooks"] == {
        "bash": {"pre": [deny_destructive_commands]}
    }
    assert (await restored.act("bash", {"command": "rm -rf x"})).error_type == "ToolDenied"

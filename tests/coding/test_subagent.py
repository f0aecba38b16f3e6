"""The subagent tool: permissions narrow the child's tools, the parent sees only the result."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import mechanism_params

from lionfactory import Branch, Tool, function_tool
from lionfactory.coding import ALL_CODING_TOOLS
from lionfactory.coding.policies import deny_destructive_commands
from lionfactory.coding.subagent import SubagentRequest, SubagentResponse, subagent_tool
from lionfactory.testing import FunctionModel, ScriptedModel, assert_no_foreign_bindings, tool_call

ALL_TOOLS = ALL_CODING_TOOLS
READ_ONLY = ["reader", "search", "code_check", "code_nav", "ast_search", "context"]


class FakeToolkit:
    """Stands in for `coding_toolkit`: the same signature shape, simple tools, a call log."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(
        self,
        branch: Branch,
        *,
        workspace_root: str | Path | None = None,
        tools: Sequence[str] | None = None,
        hooks: dict[str, Any] | None = None,
        notify: bool = True,
    ) -> list[Tool]:
        assert workspace_root is not None
        root = Path(workspace_root)
        self.calls.append(
            {"branch": branch, "root": root, "tools": tools, "hooks": hooks, "notify": notify}
        )
        built = [self._tool(name, root) for name in (tools or ALL_TOOLS[:8])]
        for key, kinds in (hooks or {}).items():
            for kind in ("security", "pre"):
                pre = kinds.get(kind, ())
                pre = (pre,) if callable(pre) else tuple(pre)
                built = [t.with_hooks(pre=pre) if key in ("*", t.name) else t for t in built]
        return built

    @staticmethod
    def _tool(name: str, root: Path) -> Tool:
        if name == "reader":

            def reader(path: str) -> dict[str, Any]:
                return {"success": True, "content": (root / path).read_text()}

            return function_tool(reader)
        if name == "editor":

            def editor(path: str, content: str) -> dict[str, Any]:
                (root / path).write_text(content)
                return {"success": True}

            return function_tool(editor)
        if name == "bash":

            def bash(command: str) -> dict[str, Any]:
                return {"ran": command}

            return function_tool(bash)

        def other() -> dict[str, Any]:
            return {"tool": name}

        return function_tool(other, name=name)


@pytest.fixture
def toolkit() -> FakeToolkit:
    return FakeToolkit()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "notes.txt").write_text("the answer is 42\n")
    (root / "docs" / "guide.md").write_text("# Guide\n")
    return root


def parent_with(model: Any, toolkit: FakeToolkit, workspace: Path, **factory_kwargs: Any) -> Branch:
    parent = Branch("You are the lead.", name="lead", chat_model=model)
    parent.register(
        subagent_tool(
            parent, factory=toolkit, factory_kwargs=factory_kwargs, workspace_root=workspace
        )
    )
    return parent


async def delegate(parent: Branch, **arguments: Any) -> SubagentResponse:
    result = await parent.act("subagent", arguments)
    assert result.ok, result.error
    return SubagentResponse.model_validate(result.result)


async def test_the_child_reads_a_file_and_the_parent_gets_only_its_answer(
    toolkit: FakeToolkit, workspace: Path
) -> None:
    model = ScriptedModel([tool_call("reader", path="notes.txt"), "The file says 42."])
    parent = parent_with(model, toolkit, workspace)

    response = await delegate(parent, instruction="What does notes.txt say?")

    assert response.success
    assert response.response == "The file says 42."
    assert (response.turns, response.tool_calls) == (2, 1)
    assert response.permissions == "read_only" and response.tools == READ_ONLY
    assert [call.tool_names for call in model.calls] == [READ_ONLY, READ_ONLY]
    assert "the answer is 42" in model.calls[1].messages[-1].content
    # The parent's log: its system prompt, the call, the result. Nothing of the child.
    assert [m.role for m in parent.messages.record] == ["system", "assistant", "tool"]


async def test_the_child_is_a_fresh_branch_with_the_parents_model(
    toolkit: FakeToolkit, workspace: Path
) -> None:
    model = ScriptedModel(["done"])
    parent = parent_with(model, toolkit, workspace)
    await parent.act("subagent", {"instruction": "say done", "permissions": "safe"})

    child = toolkit.calls[0]["branch"]
    assert child is not parent
    assert child.name == "lead-subagent"
    assert child.chat_model is model
    shown = model.calls[0].messages
    assert [m.role for m in shown] == ["system", "user"]
    assert "sub-agent" in (shown[0].content or "")
    assert shown[1].content == "say done"


async def test_a_read_only_child_cannot_edit(toolkit: FakeToolkit, workspace: Path) -> None:
    model = ScriptedModel(
        [tool_call("editor", path="new.txt", content="hi"), "I was not allowed to edit."]
    )
    parent = parent_with(model, toolkit, workspace)

    response = await delegate(parent, instruction="Create new.txt", permissions="read_only")

    refusal = json.loads(model.calls[1].messages[-1].content)
    assert refusal["error_type"] == "UnknownToolError"
    assert "Unknown tool 'editor'" in refusal["error"]
    assert not (workspace / "new.txt").exists()
    assert response.success and response.tool_calls == 1
    assert len(response.tool_errors) == 1
    assert response.tool_errors[0].startswith("editor: Unknown tool 'editor'")


async def test_a_safe_child_edits_but_destructive_bash_is_denied(
    toolkit: FakeToolkit, workspace: Path
) -> None:
    model = ScriptedModel(
        [
            [
                tool_call("editor", path="new.txt", content="hi"),
                tool_call("bash", command="rm -rf docs"),
            ],
            "Edited; the cleanup was refused.",
        ]
    )
    parent = parent_with(model, toolkit, workspace)

    response = await delegate(parent, instruction="Edit and clean up", permissions="safe")

    assert response.tools == [*READ_ONLY, "editor", "bash"]
    assert (workspace / "new.txt").read_text() == "hi"
    denial = json.loads(model.calls[1].messages[-1].content)
    assert denial["error_type"] == "ToolDenied"
    assert response.tool_errors and "rm -rf docs" in response.tool_errors[0]


async def test_safe_adds_the_policy_as_a_bash_security_hook(
    toolkit: FakeToolkit, workspace: Path
) -> None:
    def audit(tool_name: str, arguments: dict[str, Any]) -> None:
        return None

    hooks = {"bash": {"pre": audit, "security": audit}, "*": {"post": []}}
    parent = parent_with(ScriptedModel(["ok"]), toolkit, workspace, hooks=hooks)
    await delegate(parent, instruction="x", permissions="safe")

    given = toolkit.calls[0]["hooks"]
    assert given["bash"] == {"pre": audit, "security": (audit, deny_destructive_commands)}
    assert given["*"] == {"post": []}
    # the caller's mapping is intact
    assert hooks == {"bash": {"pre": audit, "security": audit}, "*": {"post": []}}


@pytest.mark.parametrize("permissions", ["read_only", "allow_all"])
async def test_only_safe_adds_the_policy(
    toolkit: FakeToolkit, workspace: Path, permissions: str
) -> None:
    parent = parent_with(ScriptedModel(["ok"]), toolkit, workspace)
    await delegate(parent, instruction="x", permissions=permissions)
    assert toolkit.calls[0]["hooks"] is None


async def test_allow_all_gives_every_tool_but_subagent(
    toolkit: FakeToolkit, workspace: Path
) -> None:
    model = ScriptedModel(["ok"])
    parent = parent_with(model, toolkit, workspace)
    response = await delegate(parent, instruction="x", permissions="allow_all")
    assert sorted(model.calls[0].tool_names) == sorted(ALL_TOOLS[:-1])
    assert sorted(response.tools) == sorted(ALL_TOOLS[:-1])


async def test_a_deny_all_child_has_no_tools(toolkit: FakeToolkit, workspace: Path) -> None:
    model = ScriptedModel(["I answer from the instruction alone."])
    parent = parent_with(model, toolkit, workspace)
    response = await delegate(parent, instruction="x", permissions="deny_all")
    assert response.success and response.tools == []
    assert model.calls[0].tool_names == []
    assert toolkit.calls == []


async def test_the_answer_is_cut_at_5000_characters(toolkit: FakeToolkit, workspace: Path) -> None:
    parent = parent_with(ScriptedModel(["x" * 6_500]), toolkit, workspace)
    response = await delegate(parent, instruction="write a lot")
    assert response.truncated
    assert response.response == "x" * 5_000 + "\n[truncated: 1,500 more characters]"


async def test_an_answer_of_exactly_5000_characters_is_whole(
    toolkit: FakeToolkit, workspace: Path
) -> None:
    parent = parent_with(ScriptedModel(["y" * 5_000]), toolkit, workspace)
    response = await delegate(parent, instruction="write")
    assert not response.truncated and response.response == "y" * 5_000


def always_reads(messages: Any, tools: Any) -> Any:
    return tool_call("reader", path="notes.txt")


@pytest.mark.parametrize(("asked", "used"), [(0, 1), (-3, 1), (99, 50), (7, 7)])
async def test_max_turns_is_clamped_to_1_to_50(
    toolkit: FakeToolkit, workspace: Path, asked: int, used: int
) -> None:
    model = FunctionModel(always_reads)
    parent = parent_with(model, toolkit, workspace)

    response = await delegate(parent, instruction="loop", max_turns=asked)

    assert response.max_turns == used
    assert response.turns == used == len(model.calls)
    assert (response.notice is None) == (asked == used)
    assert not response.success
    assert response.error is not None and f"all {used} turns" in response.error


async def test_cwd_becomes_the_childs_workspace_root(toolkit: FakeToolkit, workspace: Path) -> None:
    model = ScriptedModel([tool_call("reader", path="guide.md"), "It is a guide."])
    parent = parent_with(model, toolkit, workspace)
    response = await delegate(parent, instruction="read guide.md", cwd="docs")
    assert response.success
    assert toolkit.calls[0]["root"] == workspace / "docs"
    assert "# Guide" in model.calls[1].messages[-1].content


@pytest.mark.parametrize("cwd", ["..", "/", "../elsewhere", "notes.txt", "missing"])
async def test_a_cwd_outside_the_workspace_or_not_a_directory_is_refused(
    toolkit: FakeToolkit, workspace: Path, cwd: str
) -> None:
    model = ScriptedModel([])
    parent = parent_with(model, toolkit, workspace)
    response = await delegate(parent, instruction="x", cwd=cwd)
    assert not response.success
    assert response.error is not None and response.error.startswith("cwd refused:")
    assert model.calls == [] and toolkit.calls == []


async def test_factory_kwargs_pass_through_but_tools_and_root_are_overridden(
    toolkit: FakeToolkit, workspace: Path
) -> None:
    parent = parent_with(
        ScriptedModel(["ok"]), toolkit, workspace, notify=False, tools=["bash"], workspace_root="/"
    )
    await delegate(parent, instruction="x")
    call = toolkit.calls[0]
    assert call["notify"] is False
    assert call["tools"] == READ_ONLY
    assert call["root"] == workspace


async def test_a_failing_child_is_reported_not_raised(
    toolkit: FakeToolkit, workspace: Path
) -> None:
    model = ScriptedModel([tool_call("reader", path="notes.txt")])  # runs out after one reply
    parent = parent_with(model, toolkit, workspace)
    response = await delegate(parent, instruction="x")
    assert not response.success
    assert response.error is not None and "ScriptExhaustedError" in response.error
    assert (response.turns, response.tool_calls) == (1, 1)


async def test_a_parent_without_a_chat_model_gets_a_typed_failure(
    toolkit: FakeToolkit, workspace: Path
) -> None:
    parent = parent_with(None, toolkit, workspace)
    response = await delegate(parent, instruction="x")
    assert not response.success
    assert response.error is not None and "no chat model" in response.error


@pytest.mark.parametrize("instruction", ["", "   \n"])
async def test_a_blank_instruction_is_an_input_error(
    toolkit: FakeToolkit, workspace: Path, instruction: str
) -> None:
    parent = parent_with(ScriptedModel([]), toolkit, workspace)
    result = await parent.act("subagent", {"instruction": instruction})
    assert result.error_type == "ToolInputError"
    assert result.error is not None and "instruction is empty" in result.error


def test_unknown_permissions_are_rejected() -> None:
    with pytest.raises(ValueError, match="permissions"):
        SubagentRequest.model_validate({"instruction": "x", "permissions": "root"})


async def test_the_tool_is_bound_and_rebuilt_for_a_clone(
    toolkit: FakeToolkit, workspace: Path
) -> None:
    def kit(branch: Branch) -> Tool:
        return subagent_tool(branch, factory=toolkit, workspace_root=workspace)

    model = ScriptedModel(["from the clone"])
    parent = Branch(name="lead", chat_model=model)
    parent.register(kit)
    clone = parent.clone()

    assert parent.tools["subagent"].bound_to == parent.id
    assert clone.tools["subagent"].bound_to == clone.id
    assert_no_foreign_bindings(clone)
    result = await clone.act("subagent", {"instruction": "x"})
    assert result.result is not None and result.result["response"] == "from the clone"
    assert len(parent.messages.record) == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"factory": 3}, "factory must be callable"),
        ({"factory_kwargs": [1]}, "factory_kwargs"),
        ({"parent_tools": "reader"}, "parent_tools"),
        ({"parent_tools": ["reader", 3]}, "parent_tools"),
    ],
)
def test_factory_misuse_fails_at_once(
    toolkit: FakeToolkit, workspace: Path, kwargs: dict[str, Any], match: str
) -> None:
    options: dict[str, Any] = {"factory": toolkit, **kwargs}
    with pytest.raises(TypeError, match=match):
        subagent_tool(Branch(), workspace_root=workspace, **options)


# -- a child never gets more than its parent (the real coding toolkit) ---------


async def test_parent_tools_narrow_every_permission_set(
    toolkit: FakeToolkit, workspace: Path
) -> None:
    model = ScriptedModel(["done", "done"])
    parent = Branch("You are the lead.", name="lead", chat_model=model)
    parent.register(
        subagent_tool(
            parent,
            factory=toolkit,
            workspace_root=workspace,
            parent_tools=["reader", "editor", "subagent"],
        )
    )

    safe = await delegate(parent, instruction="x", permissions="safe")
    read_only = await delegate(parent, instruction="x", permissions="read_only")

    assert safe.tools == ["reader", "editor"]
    assert read_only.tools == ["reader"]
    assert [call["tools"] for call in toolkit.calls] == [["reader", "editor"], ["reader"]]
    assert safe.notice is not None and "bash" in safe.notice


def _kit_parent(model: Any, workspace: Path, **kwargs: Any) -> Branch:
    from lionfactory.coding import coding_toolkit

    parent = Branch("You are the lead.", name="lead", chat_model=model)
    parent.register(coding_toolkit, workspace_root=workspace, notify=False, **kwargs)
    return parent


async def test_a_child_gets_only_tools_its_parent_has(workspace: Path, tmp_path: Path) -> None:
    canary = tmp_path / "ran"
    model = ScriptedModel([tool_call("bash", command=f"touch {canary}"), "done"])
    parent = _kit_parent(model, workspace, tools=["reader", "subagent"], isolation="none")

    response = await delegate(parent, instruction="run something", permissions="allow_all")

    assert response.tools == ["reader"]
    assert [call.tool_names for call in model.calls] == [["reader"], ["reader"]]
    assert response.tool_errors and response.tool_errors[0].startswith("bash:")
    assert response.notice is not None and "bash" in response.notice
    assert "sandbox" in response.notice and "editor" in response.notice
    assert not canary.exists()


async def test_the_subagent_description_names_the_parents_tools(workspace: Path) -> None:
    parent = _kit_parent(ScriptedModel([]), workspace, tools=["reader", "subagent"])
    assert "only ever gets tools you have yourself: reader." in parent.tools["subagent"].description


@pytest.fixture
def listener() -> Any:
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


@pytest.mark.parametrize("mechanism", mechanism_params())
async def test_tools_isolation_network_hooks_and_workspace_all_narrow_together(
    workspace: Path, tmp_path: Path, mechanism: str, listener: int
) -> None:
    import shlex
    import sys

    outside = tmp_path / "outside.txt"
    outside.write_text("original\n")
    seen: list[str] = []

    def record(tool_name: str, arguments: dict[str, Any]) -> None:
        seen.append(arguments["command"])

    targets = (str(outside), str(workspace / "notes.txt"))
    probe = (
        "import socket, pathlib\n"
        f"for target in {targets!r}:\n"
        "    try:\n"
        "        pathlib.Path(target).write_text('child was here')\n"
        "    except OSError:\n"
        "        pass\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {listener}), timeout=5)\n"
        "    print('connected')\n"
        "except OSError:\n"
        "    print('no network')\n"
    )
    command = f"{sys.executable} -c {shlex.quote(probe)}"
    model = ScriptedModel([tool_call("bash", command=command), "done"])
    parent = _kit_parent(
        model,
        workspace,
        tools=["reader", "bash", "subagent"],
        isolation=mechanism,
        network="none",
        hooks={"bash": {"pre": record}},
    )

    response = await delegate(parent, instruction="probe", permissions="allow_all", cwd="docs")

    assert response.success, response.error
    assert response.tools == ["reader", "bash"]
    assert seen == [command]  # the parent's hook ran on the child's call
    result = json.loads(model.calls[1].messages[-1].content)
    assert result["isolation"] == mechanism, result
    # Outside the parent's workspace, and in the parent's workspace above the
    # child's cwd: neither changes on the host (bwrap may let the write land
    # in its private /tmp, Landlock refuses it). No network either.
    assert "no network" in result["stdout"], result
    assert outside.read_text() == "original\n"
    assert (workspace / "notes.txt").read_text() == "the answer is 42\n"

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import attrs
import pytest
from _test_helpers import git as _git

from lionfactory import Branch
from lionfactory.coding import (
    ALL_CODING_TOOLS,
    DEFAULT_CODING_TOOLS,
    coding_toolkit,
    deny_destructive_commands,
)
from lionfactory.errors import ToolDenied
from lionfactory.testing import assert_no_foreign_bindings
from lionfactory.tools.ast_search import ast_search_tool
from lionfactory.tools.bash import bash_tool
from lionfactory.tools.code_check import code_check_tool
from lionfactory.tools.code_nav import code_nav_tool
from lionfactory.tools.editor import editor_tool
from lionfactory.tools.jobs import jobs_tool
from lionfactory.tools.reader import reader_tool
from lionfactory.tools.search import search_tool


def kit_branch(workspace: Path, **kwargs) -> Branch:
    branch = Branch("You write code.")
    branch.register(coding_toolkit, workspace_root=workspace, **kwargs)
    return branch


def test_default_tools_and_order(workspace):
    branch = kit_branch(workspace)
    with_jobs = ["jobs" if n == "search" else n for n in DEFAULT_CODING_TOOLS]
    with_jobs.insert(with_jobs.index("jobs") + 1, "search")
    # `jobs` comes with bash, right after it.
    assert list(branch.tools) == with_jobs
    assert all(t.bound_to == branch.id for t in branch.tools.values())
    everything = kit_branch(workspace, tools=list(reversed(ALL_CODING_TOOLS)), update=False)
    assert [n for n in everything.tools if n != "jobs"] == list(ALL_CODING_TOOLS)
    no_bash = kit_branch(workspace, tools=["reader"], update=False)
    assert list(no_bash.tools) == ["reader"]


def test_unknown_tool_names_are_refused_with_the_valid_ones(workspace):
    with pytest.raises(ValueError, match=r"\['nope'\].*reader, editor"):
        coding_toolkit(Branch(), workspace_root=workspace, tools=["reader", "nope"])
    with pytest.raises(TypeError):
        coding_toolkit(Branch(), workspace_root=workspace, tools="reader")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"notify_threshold": 0},
        {"notify_threshold": 1.5},
        {"notify_max_tokens": 0},
        {"hooks": {"bogus": {"pre": []}}},
        {"hooks": {"bash": {"before": []}}},
    ],
)
def test_bad_settings_fail_at_factory_time(workspace, kwargs):
    with pytest.raises(ValueError, match="got"):
        coding_toolkit(Branch(), workspace_root=workspace, **kwargs)


# -- one implementation: the toolkit answers exactly like the standalone tools


def _standalone(workspace: Path) -> dict:
    # The toolkit's default isolation is "auto"; the standalone tools ask for the same.
    return {
        "reader": reader_tool(workspace_root=workspace),
        "editor": editor_tool(workspace_root=workspace),
        # The toolkit's bash differs only in its default timeout (a test suite's).
        "bash": bash_tool(workspace_root=workspace, isolation="auto", default_timeout=120_000),
        "jobs": jobs_tool(),
        "search": search_tool(workspace_root=workspace, isolation="auto"),
        "code_check": code_check_tool(workspace_root=workspace, isolation="auto"),
        "code_nav": code_nav_tool(workspace_root=workspace),
        "ast_search": ast_search_tool(workspace_root=workspace, isolation="auto"),
    }


PARITY_CASES = [
    ("reader", {"action": "read", "path": "mod.py"}),
    ("reader", {"action": "read", "path": "mod.py", "offset": 1, "limit": 1}),
    ("reader", {"action": "read", "path": "missing.py"}),
    ("reader", {"action": "read", "path": "."}),
    ("reader", {"action": "read", "path": "../outside"}),
    ("reader", {"action": "read", "path": ".env"}),
    ("reader", {"action": "list_dir", "path": ".", "recursive": True}),
    ("editor", {"action": "edit", "file_path": "missing.py", "old_string": "a", "new_string": "b"}),
    ("editor", {"action": "write", "file_path": "../escape.py", "content": "x"}),
    ("editor", {"action": "write", "file_path": "new_{n}.py", "content": "x = 1\n"}),
    ("bash", {"command": "echo hello"}),
    ("bash", {"command": "echo a && echo b"}),
    ("bash", {"command": "ls", "cwd": "../"}),
    ("bash", {"command": "false"}),
    ("search", {"action": "grep", "pattern": "import"}),
    ("search", {"action": "find", "pattern": "*.py"}),
    ("search", {"action": "grep", "pattern": "x", "path": "/etc"}),
    ("code_check", {"paths": []}),
    ("code_check", {"paths": ["mod.py"], "max_diagnostics": 1}),
    ("code_nav", {"action": "outline", "path": "mod.py"}),
    ("code_nav", {"action": "find_references", "path": "mod.py", "symbol": "os"}),
    ("code_nav", {"action": "outline", "path": "missing.py"}),
    ("ast_search", {"pattern": "print($A)"}),
    ("ast_search", {"pattern": "print($A)", "path": "../"}),
]


@pytest.mark.parametrize(("name", "arguments"), PARITY_CASES, ids=lambda v: str(v)[:40])
async def test_toolkit_answers_exactly_like_the_standalone_tool(workspace, name, arguments):
    (workspace / "mod.py").write_text("import os\nimport sys\n\nprint(sys.argv)\n")
    (workspace / ".env").write_text("SECRET=1\n")
    standalone = _standalone(workspace)[name]
    toolkit = {t.name: t for t in coding_toolkit(Branch(), workspace_root=workspace, notify=False)}
    first = {k: (v.format(n=1) if isinstance(v, str) else v) for k, v in arguments.items()}
    second = {k: (v.format(n=2) if isinstance(v, str) else v) for k, v in arguments.items()}
    expected = await standalone(**first)
    actual = await toolkit[name](**second)
    # The toolkit asks for read evidence, so its reads and writes carry the
    # file's content_hash; the standalone tool computes none.
    if actual.get("content_hash") is not None:
        assert expected.get("content_hash") is None
        actual = {**actual, "content_hash": None}
    # The toolkit's editor reports the type checker's findings on Python files
    # (when ty is installed); the standalone editor is built without them.
    if name == "editor" and actual.get("diagnostics") is not None:
        assert expected.get("diagnostics") is None
        assert actual["diagnostics"]["introduced"] == []
        actual = {**actual, "diagnostics": None}
    # Only the file name placeholder differs between the two calls.
    assert json.loads(json.dumps(actual).replace("new_2", "new_1")) == expected


async def test_toolkit_schemas_are_the_standalone_schemas(workspace):
    standalone = _standalone(workspace)
    for tool in coding_toolkit(Branch(), workspace_root=workspace):
        if tool.name in standalone:
            mine = tool.schema()["function"]
            theirs = standalone[tool.name].schema()["function"]
            assert mine["parameters"] == theirs["parameters"]
            assert mine["description"].startswith(theirs["description"])


# -- the read-before-edit guard, through Branch.act


def _ok(result) -> dict:
    assert result.ok, result.error
    return result.result


async def test_unread_edit_is_refused_and_read_then_edit_works(workspace):
    (workspace / "a.py").write_text("x = 1\n")
    branch = kit_branch(workspace)
    edit = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    refused = _ok(await branch.act("editor", edit))
    assert refused["success"] is False
    assert "Read the file first" in refused["error"]
    assert (workspace / "a.py").read_text() == "x = 1\n"
    _ok(await branch.act("reader", {"action": "read", "path": "a.py"}))
    assert _ok(await branch.act("editor", edit))["success"] is True
    assert (workspace / "a.py").read_text() == "x = 2\n"
    # The edit's own evidence allows the next edit without another read.
    edit2 = {"action": "edit", "file_path": "a.py", "old_string": "x = 2", "new_string": "x = 3"}
    assert _ok(await branch.act("editor", edit2))["success"] is True


async def test_external_change_forces_a_reread_but_touch_does_not(workspace):
    target = workspace / "a.py"
    target.write_text("x = 1\n")
    branch = kit_branch(workspace)
    await branch.act("reader", {"action": "read", "path": "a.py"})
    # Touch: new mtime, same bytes -> the hash keeps the evidence valid.
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    edit = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    assert _ok(await branch.act("editor", edit))["success"] is True
    # Changed content of the same size, outside the conversation.
    target.write_text("y = 2\n")
    edit = {"action": "edit", "file_path": "a.py", "old_string": "y = 2", "new_string": "y = 3"}
    refused = _ok(await branch.act("editor", edit))
    assert refused["success"] is False
    assert "changed since it was last read" in refused["error"]
    assert "Read it again" in refused["error"]
    await branch.act("reader", {"action": "read", "path": "a.py"})
    assert _ok(await branch.act("editor", edit))["success"] is True


def _evict_tool_messages(branch: Branch, tool: str) -> None:
    ids = [m.id for m in branch.messages if m.role == "tool" and m.tool == tool]
    branch.messages.evict_ids(ids)


async def test_evicting_the_read_withdraws_the_evidence(workspace):
    (workspace / "a.py").write_text("x = 1\n")
    branch = kit_branch(workspace)
    await branch.act("reader", {"action": "read", "path": "a.py"})
    _evict_tool_messages(branch, "reader")
    edit = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    assert _ok(await branch.act("editor", edit))["success"] is False


async def test_evicting_read_and_edit_results_withdraws_mutation_evidence(workspace):
    (workspace / "a.py").write_text("x = 1\n")
    branch = kit_branch(workspace)
    await branch.act("reader", {"action": "read", "path": "a.py"})
    edit = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    assert _ok(await branch.act("editor", edit))["success"] is True
    _evict_tool_messages(branch, "reader")
    _evict_tool_messages(branch, "editor")
    edit2 = {"action": "edit", "file_path": "a.py", "old_string": "x = 2", "new_string": "x = 3"}
    assert _ok(await branch.act("editor", edit2))["success"] is False


async def test_compacting_the_read_away_withdraws_the_evidence(workspace):
    (workspace / "a.py").write_text("x = 1\n")
    branch = kit_branch(workspace)
    branch.messages.append(branch.messages[0].model_copy(update={"role": "user", "id": "u1"}))
    await branch.act("reader", {"action": "read", "path": "a.py"})
    compacted = _ok(await branch.act("context", {"action": "compact", "summary": "read a.py"}))
    assert compacted["success"] is True, compacted
    edit = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    assert _ok(await branch.act("editor", edit))["success"] is False


async def test_a_clone_edits_what_its_view_shows_and_its_evictions_stay_its_own(workspace):
    (workspace / "a.py").write_text("x = 1\n")
    (workspace / "b.py").write_text("y = 1\n")
    source = kit_branch(workspace)
    await source.act("reader", {"action": "read", "path": "a.py"})
    await source.act("reader", {"action": "read", "path": "b.py"})
    clone = source.clone()
    assert_no_foreign_bindings(clone)
    assert_no_foreign_bindings(source)
    edit_a = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    assert _ok(await clone.act("editor", edit_a))["success"] is True
    # The clone forgets its read of b.py; the source still remembers its own.
    ids = [m.id for m in clone.messages if m.role == "tool" and "b.py" in json.dumps(m.metadata)]
    clone.messages.evict_ids(ids)
    edit_b = {"action": "edit", "file_path": "b.py", "old_string": "y = 1", "new_string": "y = 2"}
    assert _ok(await clone.act("editor", edit_b))["success"] is False
    assert _ok(await source.act("editor", edit_b))["success"] is True


async def test_partial_read_allows_edit_but_not_overwrite(workspace):
    (workspace / "a.py").write_text("".join(f"v{i} = {i}\n" for i in range(10)))
    branch = kit_branch(workspace)
    await branch.act("reader", {"action": "read", "path": "a.py", "offset": 2, "limit": 2})
    write = {"action": "write", "file_path": "a.py", "content": "new\n"}
    refused = _ok(await branch.act("editor", write))
    assert refused["success"] is False
    assert "whole file" in refused["error"]
    edit = {"action": "edit", "file_path": "a.py", "old_string": "v3 = 3", "new_string": "v3 = 33"}
    assert _ok(await branch.act("editor", edit))["success"] is True
    await branch.act("reader", {"action": "read", "path": "a.py"})
    assert _ok(await branch.act("editor", write))["success"] is True


async def test_a_new_file_needs_no_evidence(workspace):
    branch = kit_branch(workspace)
    write = {"action": "write", "file_path": "pkg/new.py", "content": "x = 1\n"}
    assert _ok(await branch.act("editor", write))["success"] is True
    assert (workspace / "pkg" / "new.py").read_text() == "x = 1\n"


async def test_calls_outside_act_keep_evidence_in_the_toolkit(workspace):
    (workspace / "a.py").write_text("x = 1\n")
    tools = {t.name: t for t in coding_toolkit(Branch(), workspace_root=workspace)}
    edit = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    assert (await tools["editor"](**edit))["success"] is False
    await tools["reader"](action="read", path="a.py")
    assert (await tools["editor"](**edit))["success"] is True


async def test_two_branches_from_the_same_arguments_share_nothing(workspace):
    (workspace / "a.py").write_text("x = 1\n")
    a, b = kit_branch(workspace), kit_branch(workspace)
    assert_no_foreign_bindings(a)
    assert_no_foreign_bindings(b)
    await a.act("reader", {"action": "read", "path": "a.py"})
    edit = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    assert _ok(await b.act("editor", edit))["success"] is False
    assert _ok(await a.act("editor", edit))["success"] is True


async def test_reader_returns_images_as_data_urls_without_evidence(workspace):
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
    )
    (workspace / "dot.png").write_bytes(png)
    branch = kit_branch(workspace)
    result = _ok(await branch.act("reader", {"action": "read", "path": "dot.png"}))
    assert result["success"] is True
    assert result["content"] == "data:image/png;base64," + base64.b64encode(png).decode()
    assert "file_evidence" not in branch.messages[-1].metadata
    standalone = await reader_tool(workspace_root=workspace)(action="read", path="dot.png")
    assert standalone["success"] is False  # binary: only the toolkit shows images
    (workspace / "big.png").write_bytes(b"\x89PNG" + b"\0" * (6 * 1024 * 1024))
    big = _ok(await branch.act("reader", {"action": "read", "path": "big.png"}))
    assert big["success"] is False
    assert "bytes" in big["error"]


# -- hooks


async def test_a_denying_pre_hook_blocks_rm_rf_with_a_readable_error(workspace):
    (workspace / "x").mkdir()
    branch = kit_branch(workspace, hooks={"bash": {"pre": [deny_destructive_commands]}})
    result = await branch.act("bash", {"command": "rm -rf x"})
    assert result.error_type == "ToolDenied"
    assert "rm" in result.error
    assert (workspace / "x").is_dir()
    assert json.loads(branch.messages[-1].content)["error_type"] == "ToolDenied"


async def test_star_hooks_run_after_a_tools_own_and_all_kinds_attach(workspace):
    order = []

    def star(name, args):
        order.append(("*", name))

    def own(name, args):
        order.append(("own", name))

    def post(name, args, result):
        return {**result, "post_saw": name}

    def on_error(name, args, exc):
        return {"recovered": f"{type(exc).__name__}: {exc}"}

    hooks = {"*": {"pre": [star], "on_error": on_error}, "bash": {"pre": own, "post": [post]}}
    tools = {t.name: t for t in coding_toolkit(Branch(), workspace_root=workspace, hooks=hooks)}
    result = await tools["bash"](command="true")
    assert order == [("own", "bash"), ("*", "bash")]
    assert result["post_saw"] == "bash"
    # Simulate an unexpected crash inside the standalone handler the toolkit
    # delegates to: the on_error hook must see it.
    kit = tools["bash"].handler.kit

    async def crash(request):
        raise RuntimeError("standalone handler crashed")

    kit.tools["bash"] = attrs.evolve(kit.tools["bash"], handler=crash)
    assert await tools["bash"](command="true") == {
        "recovered": "RuntimeError: standalone handler crashed"
    }


async def test_hook_tiers_run_security_then_the_tools_own_then_star(workspace):
    order = []

    def hook(label):
        def record(name, args):
            order.append(label)

        return record

    hooks = {
        "*": {"pre": hook("star"), "security": hook("star-security")},
        "bash": {"pre": [hook("own")], "security": hook("security")},
    }
    tools = {t.name: t for t in coding_toolkit(Branch(), workspace_root=workspace, hooks=hooks)}
    await tools["bash"](command="true")
    # security first, then the tool's own, then "*"; then security again on the final arguments
    assert order == ["security", "star-security", "own", "star", "security", "star-security"]
    order.clear()
    await tools["reader"](action="list_dir", path=".")
    assert order == ["star-security", "star", "star-security"]


async def test_a_star_pre_hook_never_sees_a_call_the_security_tier_refuses(workspace):
    (workspace / "x").mkdir()
    seen = []
    hooks = {
        "*": {"pre": lambda name, args: seen.append(args["command"])},
        "bash": {"security": deny_destructive_commands},
    }
    branch = kit_branch(workspace, hooks=hooks)
    result = await branch.act("bash", {"command": "rm -rf x"})
    assert result.error_type == "ToolDenied"
    assert seen == []
    assert (workspace / "x").is_dir()


async def test_the_security_tier_judges_arguments_a_pre_hook_rewrote(workspace):
    (workspace / "x").mkdir()

    def rewrite(name, args):
        return {**args, "command": "rm -rf x"}

    branch = kit_branch(
        workspace, hooks={"bash": {"security": [deny_destructive_commands], "pre": rewrite}}
    )
    result = await branch.act("bash", {"command": "ls"})
    assert result.error_type == "ToolDenied"
    assert (workspace / "x").is_dir()


async def test_nudge_rules_extend_the_defaults_when_asked(workspace):
    def custom(snapshot):
        return "custom rule spoke" if snapshot.tool == "bash" else None

    extended = kit_branch(workspace, nudge_rules=[custom], keep_default_nudges=True)
    replaced = kit_branch(workspace, nudge_rules=[custom])
    for branch in (extended, replaced):
        for _ in range(3):
            last = _ok(await branch.act("bash", {"command": "false"}))
    assert "custom rule spoke" in last["system"]
    assert "3 bash commands failed in a row" not in last["system"]
    extended_last = json.loads(extended.messages[-1].content)
    assert "custom rule spoke" in extended_last["system"]
    assert "3 bash commands failed in a row" in extended_last["system"]
    with pytest.raises(TypeError, match="keep_default_nudges must be a bool"):
        coding_toolkit(Branch(), workspace_root=workspace, keep_default_nudges="yes")


async def test_pre_hook_denial_raised_directly(workspace):
    tools = {
        t.name: t
        for t in coding_toolkit(
            Branch(), workspace_root=workspace, hooks={"*": {"pre": [deny_destructive_commands]}}
        )
    }
    with pytest.raises(ToolDenied):
        await tools["bash"](command="sudo ls")
    assert (await tools["reader"](action="list_dir", path="."))["success"] is True


# -- sandbox wiring: the file tools follow the active worktree


async def test_toolkit_tools_work_inside_an_active_sandbox_and_come_home(workspace):
    _git(workspace, "init", "-q", "-b", "main")
    _git(workspace, "config", "user.name", "T")
    _git(workspace, "config", "user.email", "t@example.invalid")
    (workspace / "a.py").write_text("x = 1\n")
    _git(workspace, "add", "-A")
    _git(workspace, "commit", "-q", "-m", "init")
    branch = kit_branch(
        workspace, tools=["reader", "editor", "bash", "sandbox"], allow_merge_into_protected=True
    )
    created = _ok(await branch.act("sandbox", {"action": "create"}))
    assert created["success"] is True, created
    worktree = Path(created["worktree"])
    await branch.act("reader", {"action": "read", "path": "a.py"})
    edit = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    assert _ok(await branch.act("editor", edit))["success"] is True
    assert (worktree / "a.py").read_text() == "x = 2\n"
    assert (workspace / "a.py").read_text() == "x = 1\n"
    pwd = _ok(await branch.act("bash", {"command": "pwd"}))
    assert Path(pwd["stdout"].strip()).resolve() == worktree.resolve()
    await branch.act("sandbox", {"action": "commit", "message": "x is 2"})
    merged = _ok(await branch.act("sandbox", {"action": "merge"}))
    assert merged["success"] is True, merged
    assert (workspace / "a.py").read_text() == "x = 2\n"
    home = _ok(await branch.act("bash", {"command": "pwd"}))
    assert Path(home["stdout"].strip()).resolve() == workspace.resolve()
    # Evidence from the worktree does not carry over to the workspace copy.
    edit2 = {"action": "edit", "file_path": "a.py", "old_string": "x = 2", "new_string": "x = 3"}
    assert _ok(await branch.act("editor", edit2))["success"] is False


async def test_the_toolkit_sandbox_refuses_to_merge_into_main_unless_allowed(workspace):
    _repo(workspace)
    branch = kit_branch(workspace, tools=["editor", "sandbox"])
    _ok(await branch.act("sandbox", {"action": "create"}))
    write = {"action": "write", "file_path": "b.py", "content": "y = 1\n"}
    assert _ok(await branch.act("editor", write))["success"] is True
    _ok(await branch.act("sandbox", {"action": "commit", "message": "add b"}))
    refused = _ok(await branch.act("sandbox", {"action": "merge"}))
    assert refused["success"] is False and "protected branch" in refused["error"]
    assert not (workspace / "b.py").exists()
    _ok(await branch.act("sandbox", {"action": "discard"}))


async def test_each_clone_gets_its_own_sandbox_slot(workspace):
    _git(workspace, "init", "-q", "-b", "main")
    _git(workspace, "config", "user.name", "T")
    _git(workspace, "config", "user.email", "t@example.invalid")
    (workspace / "a.py").write_text("x = 1\n")
    _git(workspace, "add", "-A")
    _git(workspace, "commit", "-q", "-m", "init")
    branch = kit_branch(workspace, tools=["reader", "sandbox"])
    assert _ok(await branch.act("sandbox", {"action": "create"}))["success"] is True
    clone = branch.clone()
    assert_no_foreign_bindings(clone)
    # The clone has no sandbox: its reader works in the workspace, and it may create its own.
    second = _ok(await clone.act("sandbox", {"action": "create"}))
    assert second["success"] is True, second
    for b in (branch, clone):
        assert _ok(await b.act("sandbox", {"action": "discard"}))["success"] is True


def _repo(workspace: Path) -> None:
    _git(workspace, "init", "-q", "-b", "main")
    _git(workspace, "config", "user.name", "T")
    _git(workspace, "config", "user.email", "t@example.invalid")
    (workspace / "a.py").write_text("x = 1\n")
    _git(workspace, "add", "-A")
    _git(workspace, "commit", "-q", "-m", "init")


async def test_a_subagent_started_in_a_sandbox_edits_the_sandbox_and_discard_drops_it(workspace):
    from lionfactory.testing import ScriptedModel, tool_call

    _repo(workspace)
    edit = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    model = ScriptedModel(
        [
            tool_call("sandbox", action="create"),
            tool_call("subagent", instruction="Set x to 2 in a.py.", permissions="safe"),
            # the child
            tool_call("reader", action="read", path="a.py"),
            tool_call("editor", **edit),
            tool_call("bash", command="pwd"),
            "x is 2 now.",
            # the parent again
            tool_call("sandbox", action="diff"),
            tool_call("sandbox", action="discard"),
            "Tried it and threw it away.",
        ]
    )
    parent = Branch("You delegate.", chat_model=model)
    # A child gets only tools its parent has: the parent holds what the child uses.
    parent.register(
        coding_toolkit,
        workspace_root=workspace,
        tools=["reader", "editor", "bash", "sandbox", "subagent"],
    )
    assert await parent.run("Try setting x to 2, then throw it away.") == (
        "Tried it and threw it away."
    )
    results = [json.loads(m.content) for m in parent.messages if m.role == "tool"]
    created, delegated, diff, discarded = results
    assert delegated["success"] is True, delegated
    assert delegated["tool_errors"] == []
    child_pwd = json.loads(model.calls[5].messages[-1].content)["stdout"].strip()
    assert Path(child_pwd).resolve() == Path(created["worktree"]).resolve()
    assert diff["files"] == ["a.py"]
    assert discarded["success"] is True
    assert (workspace / "a.py").read_text() == "x = 1\n"
    assert _git(workspace, "status", "--porcelain") == ""


async def test_a_subagent_in_a_sandbox_cannot_reach_the_home_checkout(workspace):
    _repo(workspace)
    parent = Branch("You delegate.", chat_model=ScriptedModelNeverCalled())
    parent.register(coding_toolkit, workspace_root=workspace, tools=["sandbox", "subagent"])
    assert _ok(await parent.act("sandbox", {"action": "create"}))["success"] is True
    for cwd in (str(workspace), "..", str(workspace / "a.py")):
        out = _ok(await parent.act("subagent", {"instruction": "edit", "cwd": cwd}))
        assert out["success"] is False
        assert out["error"].startswith("cwd refused"), out
    assert _ok(await parent.act("sandbox", {"action": "discard"}))["success"] is True


class ScriptedModelNeverCalled:
    """A chat model for tests in which the child must never start."""

    async def __call__(self, messages, tools):
        raise AssertionError("the sub-agent started although its cwd was refused")


# -- subagent with the real toolkit


async def test_subagent_reads_with_the_real_toolkit_and_only_its_answer_reaches_the_parent(
    workspace,
):
    from lionfactory.testing import ScriptedModel, tool_call

    (workspace / "notes.md").write_text("The answer is 42.\n")
    model = ScriptedModel(
        [
            # parent: delegate
            tool_call("subagent", instruction="What is the answer in notes.md?"),
            # child: read, try to edit (not permitted for read_only), answer
            tool_call("reader", action="read", path="notes.md"),
            tool_call("editor", action="write", file_path="notes.md", content="hacked"),
            "The notes say 42.",
            # parent: final answer
            "42",
        ]
    )
    parent = Branch("You delegate.", chat_model=model)
    parent.register(
        coding_toolkit, workspace_root=workspace, tools=["reader", "search", "subagent"]
    )
    assert await parent.run("Find the answer.") == "42"
    child_turn = model.calls[1]
    # read_only, narrowed to the parent's own tools.
    assert child_turn.tool_names == ["reader", "search"]
    result = json.loads(next(m for m in parent.messages if m.tool == "subagent").content)
    assert result["success"] is True
    assert result["response"] == "The notes say 42."
    assert result["tool_calls"] == 2
    assert any("editor" in e for e in result["tool_errors"])
    assert (workspace / "notes.md").read_text() == "The answer is 42.\n"
    # The parent's log holds the delegation and its result, not the child's messages.
    assert [m.role for m in parent.messages] == ["system", "user", "assistant", "tool", "assistant"]


async def test_evidence_of_a_big_file_has_no_hash_so_a_touch_asks_for_a_new_read(workspace):
    from lionfactory._evidence import MAX_HASHED_BYTES

    big = workspace / "big.txt"
    big.write_bytes(b"first line\n" + (b"z" * 99 + b"\n") * (MAX_HASHED_BYTES // 100 + 10))
    branch = kit_branch(workspace)
    await branch.act("reader", {"action": "read", "path": "big.txt", "limit": 5})
    assert branch.messages[-1].metadata["file_evidence"]["sha256"] is None
    edit = {"action": "edit", "file_path": "big.txt", "old_string": "first", "new_string": "1st"}
    assert _ok(await branch.act("editor", edit))["success"] is True
    st = big.stat()
    os.utime(big, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    edit2 = {"action": "edit", "file_path": "big.txt", "old_string": "1st", "new_string": "one"}
    refused = _ok(await branch.act("editor", edit2))
    assert refused["success"] is False
    assert "changed since it was last read" in refused["error"]


def test_a_toolkits_tools_share_the_workspace_it_resolved(tmp_path: Path) -> None:
    """The root is resolved once per toolkit, not once per tool (every clone builds them again)."""
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=tmp_path)
    kit = branch.tools["reader"].handler.kit
    assert {id(tool.handler.workspace) for tool in kit.home.values()} == {id(kit.where.home)}
    clone = branch.clone()
    assert clone.tools["reader"].handler.kit.where.home is not kit.where.home

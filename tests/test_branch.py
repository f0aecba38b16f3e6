from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ConfigDict, Field

from lionfactory import Branch, Message, ModelReply, Tool, ToolCall, function_tool
from lionfactory.errors import (
    CloneError,
    ConfigurationError,
    FactoryError,
    RegistrationError,
    ToolDenied,
)
from lionfactory.testing import (
    FunctionModel,
    ScriptedModel,
    assert_manifest,
    assert_no_foreign_bindings,
    tool_call,
)


class NoteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="The note.")


def notes_tool(branch: Branch, *, prefix: str = "note") -> Tool:
    """A branch-bound factory: its tool writes into the branch it was built for."""

    async def handler(request: NoteRequest) -> dict:
        branch.messages.append(Message(role="user", content=f"{prefix}: {request.text}"))
        return {"branch": str(branch.id)}

    return Tool(
        name="notes",
        description="Leave a note.",
        request_model=NoteRequest,
        handler=handler,
        bound_to=branch.id,
    )


def add(a: int, b: int = 1) -> int:
    """Add two integers."""
    return a + b


def notes_in(branch: Branch) -> list[str]:
    return [m.content for m in branch.messages.record if m.content.startswith("note")]


async def test_cloned_factory_tool_mutates_only_the_clone():
    a = Branch("sys", name="alpha")
    a.register(notes_tool, prefix="note")
    b = a.clone()
    result = await b.act("notes", {"text": "from b"})
    assert result.result == {"branch": str(b.id)}
    assert notes_in(b) == ["note: from b"]
    assert notes_in(a) == []
    await a.act("notes", {"text": "from a"})
    assert notes_in(a) == ["note: from a"]
    assert notes_in(b) == ["note: from b"]
    assert_no_foreign_bindings(b)
    assert_no_foreign_bindings(a)
    assert b.provenance("notes").kwargs == {"prefix": "note"}


def test_static_tool_bound_to_the_source_refuses_to_clone():
    a = Branch()
    bound = notes_tool(a)
    a.register(bound)
    with pytest.raises(CloneError, match=r"'notes'.*register its factory"):
        a.clone()


def test_static_tool_bound_to_another_branch_refuses_to_register():
    a, b = Branch(), Branch()
    with pytest.raises(RegistrationError, match="register its factory"):
        b.register(notes_tool(a))
    assert dict(b.tools) == {}


def test_factory_ignoring_its_branch_is_refused():
    other = Branch()
    with pytest.raises(RegistrationError, match="bound to another branch"):
        Branch().register(lambda branch: notes_tool(other))


def test_clone_keeps_name_view_and_one_system_message():
    a = Branch("be brief", name="alpha")
    for i in range(5):
        a.messages.append(Message(role="user", content=f"m{i}"))
    a.messages.evict(2, 4)
    b = a.clone()
    assert b.name == "alpha"
    assert b.id != a.id
    assert [m.content for m in b.messages] == [m.content for m in a.messages]
    assert [m.role for m in b.messages.record].count("system") == 1
    assert b.messages.total == a.messages.total
    assert a.clone(name="beta").name == "beta"


def test_clone_of_10000_messages_copies_no_message_objects():
    a = Branch("sys")
    for i in range(10_000):
        a.messages.append(Message(role="user", content=str(i)))
    b = a.clone()
    assert len(b.messages.record) == 10_001
    assert all(x is y for x, y in zip(a.messages.record, b.messages.record, strict=True))
    b.messages.evict(1, 100)
    assert len(a.messages) == 10_001


def test_clone_reuses_static_tools_and_keeps_order():
    a = Branch()
    static = function_tool(add)
    a.register(notes_tool)
    a.register(static)
    b = a.clone()
    assert list(b.tools) == ["notes", "add"]
    assert b.tools["add"] is static
    assert b.tools["notes"] is not a.tools["notes"]
    assert b.tools["notes"].bound_to == b.id


def test_duplicate_registration_is_refused_and_changes_nothing():
    a = Branch()
    a.register(function_tool(add))
    before = (dict(a.tools), a.registrations)
    with pytest.raises(RegistrationError, match="update=True"):
        a.register([function_tool(add, name="other"), function_tool(add)])
    assert (dict(a.tools), a.registrations) == before


def test_update_replaces_and_clone_replays_the_replacement():
    a = Branch()
    a.register(notes_tool, prefix="first")
    a.register(notes_tool, update=True, prefix="second")
    assert list(a.tools) == ["notes"]
    assert a.provenance("notes").kwargs == {"prefix": "second"}
    assert len(a.registrations) == 1
    b = a.clone()
    assert b.provenance("notes").kwargs == {"prefix": "second"}


def test_registration_names_its_factory_and_none_for_static_tools():
    a = Branch()
    a.register(notes_tool, prefix="p")
    a.register(function_tool(add))
    by_kind = {r.tool_names: r for r in a.registrations}
    assert by_kind[("notes",)].factory is notes_tool
    assert by_kind[("add",)].factory is None
    assert a.provenance("notes").factory is notes_tool


def test_unregistered_tools_do_not_come_back_on_clone():
    def pair() -> list[Tool]:
        return [function_tool(add, name="one"), function_tool(add, name="two")]

    a = Branch()
    a.register(pair)
    a.unregister("one")
    assert list(a.clone().tools) == ["two"]


def test_factory_returning_a_non_tool_raises_factory_error():
    with pytest.raises(FactoryError, match="must return a Tool"):
        Branch().register(lambda: "not a tool")


def test_register_rejects_other_sources_and_misused_kwargs():
    branch = Branch()
    with pytest.raises(RegistrationError):
        branch.register(42)  # type: ignore[arg-type]
    with pytest.raises(RegistrationError):
        branch.register([])
    with pytest.raises(TypeError, match="keyword arguments are for factories"):
        branch.register(function_tool(add), prefix="x")
    with pytest.raises(TypeError, match="branch passes itself"):
        branch.register(notes_tool, branch=Branch())


def test_duplicate_names_within_one_factory_are_refused():
    with pytest.raises(RegistrationError, match="duplicate"):
        Branch().register(lambda: [function_tool(add), function_tool(add)])


def test_manifest_is_json_ready_and_comparable_across_clones():
    a = Branch()
    a.register(notes_tool, prefix="x")
    a.register(function_tool(add))
    manifest = a.manifest()
    json.dumps(manifest)
    assert manifest[0]["factory"] == f"{__name__}:notes_tool"
    assert manifest[0]["kwargs"] == {"prefix": "x"}
    assert manifest[0]["bound_to"] == "branch"
    assert manifest[1]["factory"] is None
    assert a.clone().manifest() == manifest
    assert_manifest(a, ["notes", "add"])
    assert_manifest(
        a,
        [
            {"name": "notes", "factory": f"{__name__}:notes_tool", "bound_to": "branch"},
            {"name": "add", "factory": None, "bound_to": None},
        ],
    )


def test_assert_manifest_shows_a_diff():
    a = Branch()
    a.register(function_tool(add))
    with pytest.raises(AssertionError, match=r"(?s)-  \"sub\".*\+  \"add\""):
        assert_manifest(a, ["sub"])


def test_schemas_in_registration_order():
    a = Branch()
    a.register(function_tool(add))
    a.register(notes_tool)
    assert [s["name"] for s in a.schemas("anthropic")] == ["add", "notes"]


async def test_act_logs_the_call_and_the_result():
    a = Branch("sys")
    a.register(function_tool(add))
    result = await a.act("add", {"a": 2})
    assert result.ok and result.result == {"result": 3}
    call_msg, tool_msg = a.messages.active[-2:]
    assert call_msg.role == "assistant" and call_msg.tool_calls[0].name == "add"
    assert tool_msg.role == "tool" and tool_msg.call_id == call_msg.tool_calls[0].id
    assert json.loads(tool_msg.content) == {"result": 3}


async def test_act_turns_every_model_error_into_an_error_message():
    def deny(name, args):
        raise ToolDenied("not today")

    async def boom(request):
        raise RuntimeError("kaput")

    a = Branch()
    a.register(function_tool(add))
    a.register(function_tool(add, name="guarded").with_hooks(pre=[deny]))
    a.register(Tool(name="boom", description="d", request_model=NoteRequest, handler=boom))
    cases = {
        "missing": ({}, "UnknownToolError", "Unknown tool 'missing'"),
        "add": ({"a": "x"}, "ToolInputError", "Invalid arguments"),
        "guarded": ({"a": 1}, "ToolDenied", "not today"),
        "boom": ({"text": "t"}, "RuntimeError", "kaput"),
    }
    for name, (args, error_type, text) in cases.items():
        result = await a.act(name, args)
        assert not result.ok
        assert result.error_type == error_type
        assert text in result.error
        payload = json.loads(a.messages.active[-1].content)
        assert payload["error_type"] == error_type
        assert text in payload["error"]
        assert result.payload == payload  # the same data, no re-parsing needed


async def test_action_result_carries_what_the_model_read():
    a = Branch()
    a.register(function_tool(add))
    ok = await a.act("add", {"a": 2})
    assert ok.payload == ok.result == json.loads(a.messages.active[-1].content)
    bad = await a.act("add", {"a": "x"})
    assert bad.payload["error_type"] == "ToolInputError"
    assert bad.payload["errors"][0]["loc"] == ["a"]


async def test_act_many_runs_concurrently_and_logs_in_call_order():
    import anyio

    arrived = 0
    both = anyio.Event()

    async def rendezvous(text: str) -> str:
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both.set()
        with anyio.fail_after(5):
            await both.wait()  # deadlocks unless both calls run at the same time
        return text

    a = Branch()
    a.register(function_tool(rendezvous))
    results = await a.act_many([("rendezvous", {"text": "x"}), ("rendezvous", {"text": "y"})])
    assert [r.result for r in results] == [{"result": "x"}, {"result": "y"}]
    msgs = a.messages.active
    assert len(msgs[0].tool_calls) == 2
    assert [m.call_id for m in msgs[1:]] == [c.id for c in msgs[0].tool_calls]


async def test_run_loops_until_the_model_answers_and_the_model_sees_errors():
    model = ScriptedModel([tool_call("add", a="oops"), tool_call("add", a=2, b=3), "it is 5"])
    a = Branch("sys", chat_model=model)
    a.register(function_tool(add))
    assert await a.run("add 2 and 3") == "it is 5"
    assert model.remaining == 0
    second_turn = model.calls[1].messages
    assert "Invalid arguments" in second_turn[-1].content
    assert model.calls[0].tool_names == ["add"]
    assert [m.role for m in a.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]


async def test_run_accepts_a_reply_with_null_text_as_openai_style_adapters_build_it():
    """An adapter passing on ``content: null`` of a tool-call turn must not crash the loop."""
    replies = iter(
        [
            ModelReply(text=None, tool_calls=[ToolCall(name="add", arguments={"a": 2})]),
            ModelReply(text="3", tool_calls=None),
        ]
    )
    a = Branch(chat_model=FunctionModel(lambda messages, tools: next(replies)))
    a.register(function_tool(add))
    assert await a.run("add") == "3"
    assert [(m.role, m.content) for m in a.messages][:2] == [("user", "add"), ("assistant", "")]


def test_model_reply_refuses_a_malformed_shape_at_construction_with_a_type_error():
    assert ModelReply(text=None).text == ""
    with pytest.raises(TypeError, match="text must be a str or None"):
        ModelReply(text=[{"type": "text", "text": "hi"}])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ToolCall"):
        ModelReply(tool_calls=[{"name": "add"}])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="sequence of ToolCall"):
        ModelReply(tool_calls=ToolCall(name="add"))  # type: ignore[arg-type]


async def test_run_stops_at_the_turn_budget():
    model = FunctionModel(lambda messages, tools: tool_call("add", a=1))
    a = Branch(chat_model=model)
    a.register(function_tool(add))
    await a.run("loop forever", max_turns=3)
    assert len(model.calls) == 3


async def test_run_needs_a_chat_model_and_a_positive_budget():
    with pytest.raises(ConfigurationError):
        await Branch().run("hi")
    with pytest.raises(ValueError, match="max_turns"):
        await Branch(chat_model=ScriptedModel([])).run("hi", max_turns=0)


async def test_scripted_model_fails_loudly_when_exhausted():
    from lionfactory.errors import ScriptExhaustedError

    with pytest.raises(ScriptExhaustedError, match="has 0 replies"):
        await Branch(chat_model=ScriptedModel([])).run("hi")


async def test_current_call_is_set_inside_act_and_metadata_lands_on_the_tool_message():
    from lionfactory import current_call

    async def spy() -> str:
        ctx = current_call()
        assert ctx is not None
        ctx.metadata["secret"] = "evidence"
        return ctx.tool

    a = Branch()
    a.register(function_tool(spy))
    result = await a.act("spy")
    assert result.result == {"result": "spy"}
    assert result.message.metadata == {"secret": "evidence"}
    assert "evidence" not in result.message.content
    assert current_call() is None


async def test_current_call_is_none_outside_act():
    from lionfactory import current_call

    def probe() -> bool:
        return current_call() is None

    assert await function_tool(probe)() == {"result": True}


def test_foreign_binding_detector_finds_a_closure_over_another_branch():
    from lionfactory.testing import find_foreign_bindings

    a, b = Branch(), Branch()
    a.register(notes_tool)
    sneaky = notes_tool(a)
    # Forge a tool that claims to be unbound but closes over branch a.
    import attrs

    b.register(attrs.evolve(sneaky, bound_to=None))
    found = find_foreign_bindings(b)
    assert found and "closure branch" in found[0]
    with pytest.raises(AssertionError, match="reach other branches"):
        assert_no_foreign_bindings(b)


async def test_a_call_with_unparseable_arguments_is_answered_with_an_input_error():
    from lionfactory import ToolCall

    ran = []

    def record(a: int = 0) -> int:
        ran.append(a)
        return a

    model = ScriptedModel(
        [ToolCall(name="record", arguments={}, arguments_error="Expecting value"), "ok"]
    )
    branch = Branch(chat_model=model)
    branch.register(function_tool(record))
    await branch.run("go")
    assert ran == []
    payload = json.loads(model.calls[1].messages[-1].content)
    assert payload["error_type"] == "ToolInputError"
    assert "were not valid JSON: Expecting value" in payload["error"]


def test_manifests_record_the_public_path_of_builtins(workspace):
    from lionfactory.coding import coding_toolkit
    from lionfactory.tools import editor_tool, reader_tool

    branch = Branch()
    branch.register(reader_tool, workspace_root=workspace)
    branch.register(editor_tool, workspace_root=workspace)
    other = Branch()
    other.register(coding_toolkit, workspace_root=workspace, tools=["reader"])
    factories = [entry["factory"] for entry in branch.manifest() + other.manifest()]
    assert factories == [
        "lionfactory.tools:reader_tool",
        "lionfactory.tools:editor_tool",
        "lionfactory.coding:coding_toolkit",
    ]

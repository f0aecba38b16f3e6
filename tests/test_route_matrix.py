"""Every gate holds on every route: the route matrix.

A gate is what stops or lets through one call: a rule (allow, ask, deny), an
approval, a protected name, read-before-edit evidence. A route is how a call
reaches a tool: `Branch.act`, `Branch.run()`, a sub-agent, MCP over stdio,
an MCP HTTP session, a sessionless MCP request (the official client's
``2026-07-28`` mode and its default ``auto``), each framework adapter in its
framework's own loop, and a branch resumed from a `SqliteBranchStore` in a
second process. Each test drives one gate through one route with real parts
(real bash, real files, real server processes, the official MCP client) and
checks the effect on disk plus the text the model reads.

One HTTP server process serves the whole module; every test works on files
of its own, so tests never see each other's effects.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

import lionfactory
from lionfactory import Branch
from lionfactory.backends import SqliteBranchStore
from lionfactory.coding import Rule, coding_toolkit
from lionfactory.errors import ApprovalPending
from lionfactory.testing import ScriptedModel, tool_call

# The framework adapters' scripted models live beside their own tests.
sys.path.insert(0, str(Path(__file__).parent / "integrations"))

SOURCE_ROOT = str(Path(lionfactory.__file__).resolve().parents[1])

RULES = [
    Rule("editor", "locked/*", "deny", reason="locked files stay as they are"),
    Rule("bash", "touch asked-*", "ask", reason="asked markers need a person"),
    Rule("bash", "touch allowed-*", "allow"),
]
TOOLS = ["reader", "editor", "bash", "subagent"]

SERVER = """\
import sys
from lionfactory import Branch
from lionfactory.coding import Rule, coding_toolkit
from lionfactory.mcp import serve_mcp

transport, workspace = sys.argv[1], sys.argv[2]
rules = [Rule.from_dict(r) for r in {rules}]
serve_mcp(
    [(coding_toolkit, {{"workspace_root": workspace, "tools": {tools}, "rules": rules}})],
    transport=transport,
    port=0,
    on_ready=lambda url: print("serving", url, file=sys.stderr, flush=True),
)
"""


def server_script(directory: Path) -> Path:
    script = directory / "serve_matrix.py"
    script.write_text(
        SERVER.format(
            rules=json.dumps([r.to_dict() for r in RULES]),
            tools=json.dumps(["reader", "editor", "bash"]),
        )
    )
    return script


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("matrix") / "ws"
    (root / "locked").mkdir(parents=True)
    return root


@pytest.fixture(scope="module")
def http_url(workspace: Path) -> Iterator[str]:
    """One ``serve_mcp(transport="http")`` process for the module."""
    script = server_script(workspace.parent)
    env = {**os.environ, "PYTHONPATH": SOURCE_ROOT}
    process = subprocess.Popen(
        [sys.executable, str(script), "http", str(workspace)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline().decode()
        assert line.startswith("serving http://127.0.0.1:"), line
        yield line.split()[1]
    finally:
        process.terminate()
        process.wait(timeout=20)
        if process.stderr is not None:
            process.stderr.close()


# -- the gates -----------------------------------------------------------------


class Gate:
    """One gate: the call that meets it, and what must be true afterwards."""

    def __init__(self, name: str, tool: str, make: Callable[[Path, str], dict[str, Any]]) -> None:
        self.name, self.tool, self.make = name, tool, make


def _deny(root: Path, tag: str) -> dict[str, Any]:
    return {"action": "write", "file_path": f"locked/{tag}.txt", "content": "x"}


def _ask(root: Path, tag: str) -> dict[str, Any]:
    return {"command": f"touch asked-{tag}"}


def _allow(root: Path, tag: str) -> dict[str, Any]:
    return {"command": f"touch allowed-{tag}"}


def _protected(root: Path, tag: str) -> dict[str, Any]:
    return {"action": "write", "file_path": f"{tag}/.env", "content": "TOKEN=stolen"}


def _evidence(root: Path, tag: str) -> dict[str, Any]:
    (root / f"seed-{tag}.txt").write_text("alpha\n")
    return {
        "action": "edit",
        "file_path": f"seed-{tag}.txt",
        "old_string": "alpha",
        "new_string": "ALPHA",
    }


GATES = {
    "rule-deny": Gate("rule-deny", "editor", _deny),
    "rule-ask": Gate("rule-ask", "bash", _ask),
    "rule-allow": Gate("rule-allow", "bash", _allow),
    "protected-name": Gate("protected-name", "editor", _protected),
    "read-evidence": Gate("read-evidence", "editor", _evidence),
}


def check(gate: str, root: Path, tag: str, said: str) -> None:
    """The effect on disk, and what the model read, for `gate` after one call."""
    if gate == "rule-deny":
        assert not (root / "locked" / f"{tag}.txt").exists()
        assert "locked files stay as they are" in said, said
    elif gate == "rule-ask":
        assert not (root / f"asked-{tag}").exists()
        assert "approv" in said.lower(), said
    elif gate == "rule-allow":
        assert (root / f"allowed-{tag}").exists(), said
    elif gate == "protected-name":
        assert not (root / tag / ".env").exists()
        assert "protected" in said, said
    elif gate == "read-evidence":
        assert (root / f"seed-{tag}.txt").read_text() == "alpha\n"
        assert "has not been read" in said, said
    else:  # pragma: no cover - a gate without a check
        raise AssertionError(gate)


# -- the routes ------------------------------------------------------------------


def toolkit_branch(root: Path, model: Any = None) -> Branch:
    branch = Branch("You write code.", chat_model=model)
    branch.register(coding_toolkit, workspace_root=root, tools=TOOLS, rules=RULES)
    return branch


def tool_texts(branch: Branch) -> str:
    return "\n".join(m.content for m in branch.messages if m.role == "tool")


async def via_act(root: Path, tool: str, args: dict[str, Any], url: str) -> str:
    result = await toolkit_branch(root).act(tool, args)
    return result.message.content


async def via_run(root: Path, tool: str, args: dict[str, Any], url: str) -> str:
    branch = toolkit_branch(root, ScriptedModel([tool_call(tool, **args), "done"]))
    try:
        await branch.run("go")
    except ApprovalPending as paused:
        return str(paused)
    return tool_texts(branch)


class Switch:
    """The parent's replies for the parent, the child's for the sub-agent's branch."""

    def __init__(self, parent: ScriptedModel, child: ScriptedModel) -> None:
        self.parent, self.child = parent, child

    async def __call__(self, messages: Any, tools: Any) -> Any:
        names = {t.name for t in tools}
        return await (self.parent if "subagent" in names else self.child)(messages, tools)


async def via_subagent(root: Path, tool: str, args: dict[str, Any], url: str) -> str:
    parent = ScriptedModel([tool_call("subagent", instruction="do it", permissions="safe"), "done"])
    child = ScriptedModel([tool_call(tool, **args), "child done"])
    branch = toolkit_branch(root, Switch(parent, child))
    try:
        await branch.run("delegate")
    except ApprovalPending as paused:
        return str(paused)
    return tool_texts(branch)


def mcp_text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def via_stdio(mode: str) -> Callable[..., Awaitable[str]]:
    async def call(root: Path, tool: str, args: dict[str, Any], url: str) -> str:
        from mcp import Client, StdioServerParameters

        script = server_script(root.parent)
        server = StdioServerParameters(
            command=sys.executable,
            args=[str(script), "stdio", str(root)],
            env={"PYTHONPATH": SOURCE_ROOT},
        )
        async with Client(server, mode=mode) as client:
            return mcp_text(await client.call_tool(tool, args))

    return call


def via_http(mode: str) -> Callable[..., Awaitable[str]]:
    async def call(root: Path, tool: str, args: dict[str, Any], url: str) -> str:
        from mcp import Client

        async with Client(url, mode=mode) as client:
            return mcp_text(await client.call_tool(tool, args))

    return call


async def in_thread(work: Callable[[], str]) -> str:
    # The frameworks run on asyncio (`asyncio.run`); this suite runs on trio.
    return await anyio.to_thread.run_sync(work)


async def via_pydantic_ai(root: Path, tool: str, args: dict[str, Any], url: str) -> str:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ToolReturnPart
    from pydantic_ai.tools import DeferredToolRequests
    from test_pydantic_ai import scripted

    from lionfactory.integrations.pydantic_ai import pydantic_ai_toolset

    branch = toolkit_branch(root)
    seen: list[Any] = []
    agent = Agent(
        scripted(((tool, args),), "done", seen),
        toolsets=[pydantic_ai_toolset(branch)],
        output_type=[str, DeferredToolRequests],
    )

    def work() -> str:
        result = asyncio.run(agent.run("go"))
        returned = [
            json.dumps(p.content, default=str)
            for message, _ in seen
            for p in getattr(message, "parts", ())
            if isinstance(p, ToolReturnPart)
        ]
        return "\n".join([*returned, repr(result.output)])

    return await in_thread(work)


async def via_openai_agents(root: Path, tool: str, args: dict[str, Any], url: str) -> str:
    from agents import Agent, RunConfig, Runner
    from test_openai_agents import ScriptedAgentsModel

    from lionfactory.integrations.openai_agents import openai_agents_tools

    branch = toolkit_branch(root)
    model = ScriptedAgentsModel(((tool, args),), "done")
    agent = Agent(name="coder", model=model, tools=openai_agents_tools(branch))

    def work() -> str:
        config = RunConfig(tracing_disabled=True)
        result = asyncio.run(Runner.run(agent, "go", run_config=config))
        asked = [f"interrupted for approval: {getattr(i, 'name', i)}" for i in result.interruptions]
        return "\n".join([tool_texts(branch), *asked, str(result.final_output)])

    return await in_thread(work)


async def via_langchain(root: Path, tool: str, args: dict[str, Any], url: str) -> str:
    from test_langchain import run, scripted, tool_message

    from lionfactory.integrations.langchain import langchain_tools

    branch = toolkit_branch(root)
    model = scripted([(tool, args)], "done")

    def work() -> str:
        run(model, langchain_tools(branch))
        return str(tool_message(model, 1).content)

    return await in_thread(work)


async def via_lionagi(root: Path, tool: str, args: dict[str, Any], url: str) -> str:
    from test_lionagi import react

    from lionfactory.integrations.lionagi import lionagi_tools

    branch = toolkit_branch(root)

    def work() -> str:
        cwd = os.getcwd()
        os.chdir(root.parent)  # lionagi writes its log into the working directory
        try:
            _, outputs = react(lionagi_tools(branch), ((tool, args),), "done")
        finally:
            os.chdir(cwd)
        return json.dumps(outputs, default=str)

    return await in_thread(work)


RELOAD_AND_ACT = """\
import json, sys, trio
from lionfactory.backends import SqliteBranchStore

async def main():
    store = SqliteBranchStore(sys.argv[1])
    branch = await store.load(sys.argv[2])
    result = await branch.act(sys.argv[3], json.loads(sys.argv[4]))
    await store.save(branch)
    print(result.message.content)

trio.run(main)
"""


async def second_process(*argv: str) -> str:
    done = await anyio.run_process(
        [sys.executable, "-c", *argv],
        env={**os.environ, "PYTHONPATH": SOURCE_ROOT},
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def via_reload(root: Path, tool: str, args: dict[str, Any], url: str) -> str:
    store = SqliteBranchStore(root.parent / f"reload-{uuid.uuid4().hex[:8]}.db")
    branch = toolkit_branch(root)
    await store.save(branch)
    await store.aclose()
    return await second_process(
        RELOAD_AND_ACT, str(store.path), str(branch.id), tool, json.dumps(args)
    )


ROUTES: dict[str, Callable[..., Awaitable[str]]] = {
    "act": via_act,
    "run": via_run,
    "subagent": via_subagent,
    "mcp-stdio": via_stdio("legacy"),
    "mcp-stdio-auto": via_stdio("auto"),
    "mcp-http-session": via_http("legacy"),
    "mcp-sessionless": via_http("2026-07-28"),
    "mcp-http-auto": via_http("auto"),
    "pydantic-ai": via_pydantic_ai,
    "openai-agents": via_openai_agents,
    "langchain": via_langchain,
    "lionagi": via_lionagi,
    "reload": via_reload,
}


@pytest.mark.filterwarnings(r"ignore:Async generator 'http(x|core)2\.:ResourceWarning")
@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("gate", list(GATES))
async def test_the_gate_holds_on_the_route(
    gate: str, route: str, workspace: Path, http_url: str
) -> None:
    tag = f"{route}-{uuid.uuid4().hex[:6]}"
    found = GATES[gate]
    said = await ROUTES[route](workspace, found.tool, found.make(workspace, tag), http_url)
    check(gate, workspace, tag, said)


# -- approval: it runs exactly the approved call, once --------------------------

APPROVE_IN_SECOND_PROCESS = """\
import sys, trio
from lionfactory.backends import SqliteBranchStore

async def main():
    store = SqliteBranchStore(sys.argv[1])
    branch = await store.load(sys.argv[2])
    for call in branch.pending_calls:
        branch.approve(call.id)
    settled = await branch.settle(store=store)
    print(len(settled), len(branch.pending_calls))

trio.run(main)
"""


async def approve_by_act(root: Path, tag: str, url: str) -> None:
    branch = toolkit_branch(root)
    held = await branch.act("bash", {"command": f"touch asked-{tag}"})
    assert held.pending is not None and not (root / f"asked-{tag}").exists()
    branch.approve(held.pending.id)
    (done,) = await branch.settle()
    assert done.ok and await branch.settle() == []


async def approve_by_run(root: Path, tag: str, url: str) -> None:
    model = ScriptedModel([tool_call("bash", command=f"touch asked-{tag}"), "done"])
    branch = toolkit_branch(root, model)
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("go")
    assert not (root / f"asked-{tag}").exists()
    branch.approve(paused.value.calls[0].id)
    assert await branch.resume() == "done"


async def approve_by_subagent(root: Path, tag: str, url: str) -> None:
    parent = ScriptedModel([tool_call("subagent", instruction="do it", permissions="safe"), "done"])
    child = ScriptedModel(
        [
            tool_call("bash", command=f"touch asked-{tag}"),
            # Not approved: the approval named the step above alone.
            tool_call("bash", command=f"touch asked-{tag}-later"),
            "child done",
        ]
    )
    branch = toolkit_branch(root, Switch(parent, child))
    with pytest.raises(ApprovalPending) as paused:
        await branch.run("delegate")
    branch.approve(paused.value.calls[0].id)
    with pytest.raises(ApprovalPending):
        await branch.resume()
    assert not (root / f"asked-{tag}-later").exists()


async def approve_by_elicitation(root: Path, tag: str, url: str) -> None:
    from mcp import Client, types

    async def accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approve": True})

    async with Client(url, mode="legacy", elicitation_callback=accept) as client:
        result = await client.call_tool("bash", {"command": f"touch asked-{tag}"})
    assert not result.is_error, mcp_text(result)


async def approve_after_reload(root: Path, tag: str, url: str) -> None:
    path = root.parent / f"approve-{uuid.uuid4().hex[:8]}.db"
    store = SqliteBranchStore(path)
    branch = toolkit_branch(root)
    held = await branch.act("bash", {"command": f"touch asked-{tag}"})
    assert held.pending is not None
    await store.save(branch)
    await store.aclose()
    first = await second_process(APPROVE_IN_SECOND_PROCESS, str(path), str(branch.id))
    assert first.split() == ["1", "0"]
    (root / f"asked-{tag}").unlink()
    # A third process finds nothing left to run: the call ran exactly once.
    again = await second_process(APPROVE_IN_SECOND_PROCESS, str(path), str(branch.id))
    assert again.split() == ["0", "0"]
    (root / f"asked-{tag}").touch()


async def approve_by_pydantic_ai(root: Path, tag: str, url: str) -> None:
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
    from test_pydantic_ai import scripted

    from lionfactory.integrations.pydantic_ai import pydantic_ai_toolset

    branch = toolkit_branch(root)
    step = ("bash", {"command": f"touch asked-{tag}"})
    agent = Agent(
        scripted((step,), "done", []),
        toolsets=[pydantic_ai_toolset(branch)],
        output_type=[str, DeferredToolRequests],
    )

    def work() -> str:
        first = asyncio.run(agent.run("go"))
        assert isinstance(first.output, DeferredToolRequests)
        assert not (root / f"asked-{tag}").exists()
        (asked,) = first.output.approvals
        decided = DeferredToolResults(approvals={asked.tool_call_id: True})
        history = first.all_messages()
        asyncio.run(agent.run(message_history=history, deferred_tool_results=decided))
        return "ok"

    await in_thread(work)
    assert branch.pending_calls == ()


async def approve_by_openai_agents(root: Path, tag: str, url: str) -> None:
    from agents import Agent, RunConfig, Runner
    from test_openai_agents import ScriptedAgentsModel

    from lionfactory.integrations.openai_agents import openai_agents_tools

    branch = toolkit_branch(root)
    model = ScriptedAgentsModel((("bash", {"command": f"touch asked-{tag}"}),), "done")
    agent = Agent(name="coder", model=model, tools=openai_agents_tools(branch))
    config = RunConfig(tracing_disabled=True)

    async def both() -> None:
        first = await Runner.run(agent, "go", run_config=config)
        assert first.interruptions and not (root / f"asked-{tag}").exists()
        state = first.to_state()
        for item in first.interruptions:
            state.approve(item)
        await Runner.run(agent, state, run_config=config)

    await in_thread(lambda: asyncio.run(both()) or "ok")
    assert branch.pending_calls == ()


APPROVALS: dict[str, Callable[[Path, str, str], Awaitable[None]]] = {
    "act": approve_by_act,
    "run": approve_by_run,
    "subagent": approve_by_subagent,
    "mcp-http-session": approve_by_elicitation,
    "pydantic-ai": approve_by_pydantic_ai,
    "openai-agents": approve_by_openai_agents,
    "reload": approve_after_reload,
}


@pytest.mark.filterwarnings(r"ignore:Async generator 'http(x|core)2\.:ResourceWarning")
@pytest.mark.parametrize("route", list(APPROVALS))
async def test_an_approval_runs_the_approved_call_once(
    route: str, workspace: Path, http_url: str
) -> None:
    tag = f"approved-{route}-{uuid.uuid4().hex[:6]}"
    await APPROVALS[route](workspace, tag, http_url)
    assert (workspace / f"asked-{tag}").exists()


@pytest.mark.filterwarnings(r"ignore:Async generator 'http(x|core)2\.:ResourceWarning")
@pytest.mark.parametrize("mode", ["2026-07-28", "auto"])
async def test_a_sessionless_call_that_needs_approval_holds_nothing(
    mode: str, workspace: Path, http_url: str
) -> None:
    """No session keeps it, so the model is told so, and no later request can approve it."""
    from mcp import Client, types

    async def accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"approve": True})

    tag = uuid.uuid4().hex[:6]
    async with Client(http_url, mode=mode, elicitation_callback=accept) as client:
        result = await client.call_tool("bash", {"command": f"touch asked-{tag}"})
    said = mcp_text(result)
    assert result.is_error and "A person must approve" in said
    assert "nothing was kept" in said and "keeps it pending" not in said
    assert not (workspace / f"asked-{tag}").exists()


async def test_stdio_keeps_a_call_that_needs_approval_pending(workspace: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    said = await via_stdio("auto")(workspace, "bash", {"command": f"touch asked-{tag}"}, "")
    assert "keeps it pending for this session" in said
    assert not (workspace / f"asked-{tag}").exists()

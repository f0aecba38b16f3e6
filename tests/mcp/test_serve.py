"""``lionfactory mcp serve`` and `serve_mcp`: one branch per MCP session."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
from _test_helpers import serving
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from lionfactory import Branch, Tool, function_tool
from lionfactory._cli import main
from lionfactory.coding import coding_toolkit
from lionfactory.errors import CloneError
from lionfactory.mcp import SessionBranches, create_mcp_server, serve_mcp
from lionfactory.testing import ScriptedModel

# The SDK's Streamable HTTP client (httpx2) lets its SSE async generators be
# garbage collected unfinished; trio reports each one with a ResourceWarning.
# Upstream behaviour, not ours: ignored by exact message, for the HTTP tests only.
HTTPX2_GENERATORS = pytest.mark.filterwarnings(
    r"ignore:Async generator 'http(x|core)2\.:ResourceWarning"
)

NOTES = "alpha\nbeta\n"
READ = {"action": "read", "path": "notes.txt"}
EDIT = {"action": "edit", "file_path": "notes.txt", "old_string": "beta", "new_string": "BETA"}
# The seven workspace tools; jobs comes with bash.
CODING = ["reader", "editor", "bash", "jobs", "search", "code_check", "code_nav", "ast_search"]


def text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


async def test_stdio_server_lists_the_coding_tools_with_their_schemas(
    stdio_server: Callable[..., StdioServerParameters],
) -> None:
    async with Client(stdio_server()) as client:
        listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == CODING
    built = coding_toolkit(Branch(), tools=[n for n in CODING if n != "jobs"])
    expected = {t.name: t.schema("mcp") for t in built}
    for tool in listed:
        assert tool.input_schema == expected[tool.name]["inputSchema"]
        assert tool.description == expected[tool.name]["description"]


async def test_stdio_read_then_edit_succeeds(
    git_workspace: Path, stdio_server: Callable[..., StdioServerParameters]
) -> None:
    async with Client(stdio_server()) as client:
        read = await client.call_tool("reader", READ)
        edit = await client.call_tool("editor", EDIT)
    assert not read.is_error
    assert read.structured_content["content"] == "1\talpha\n2\tbeta"
    assert json.loads(text(read)) == read.structured_content
    assert not edit.is_error, text(edit)
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == "alpha\nBETA\n"


async def test_stdio_edit_without_a_read_is_refused(
    git_workspace: Path, stdio_server: Callable[..., StdioServerParameters]
) -> None:
    async with Client(stdio_server()) as client:
        edit = await client.call_tool("editor", EDIT)
    assert edit.is_error
    assert edit.structured_content["success"] is False
    assert "has not been read in this conversation" in edit.structured_content["error"]
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == NOTES


async def test_two_concurrent_stdio_sessions_do_not_share_evidence(
    stdio_server: Callable[..., StdioServerParameters],
) -> None:
    async with Client(stdio_server()) as a, Client(stdio_server()) as b:
        assert not (await a.call_tool("reader", READ)).is_error
        refused = await b.call_tool("editor", EDIT)
        allowed = await a.call_tool("editor", EDIT)
    assert refused.is_error
    assert "has not been read" in refused.structured_content["error"]
    assert not allowed.is_error


@HTTPX2_GENERATORS
async def test_two_concurrent_http_sessions_on_one_server_do_not_share_evidence(
    http_url: str,
) -> None:
    async with Client(http_url, mode="legacy") as a, Client(http_url, mode="legacy") as b:
        results: dict[str, Any] = {}

        async def session_a() -> None:
            results["a_read"] = await a.call_tool("reader", READ)
            results["a_edit"] = await a.call_tool("editor", EDIT)

        async def session_b() -> None:
            results["b_edit"] = await b.call_tool("editor", EDIT)
            results["b_read"] = await b.call_tool("reader", READ)

        async with anyio.create_task_group() as group:
            group.start_soon(session_a)
            group.start_soon(session_b)
        # B's first edit ran before B read anything: whatever A did meanwhile,
        # the refusal proves A's evidence is not B's.
        assert results["b_edit"].is_error
        assert "has not been read" in results["b_edit"].structured_content["error"]
        assert not results["a_edit"].is_error, text(results["a_edit"])
        # After its own read B holds evidence, but of the file A has changed
        # since, or of the current file; either way its session is its own.
        assert not results["b_read"].is_error
        assert a.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS


@HTTPX2_GENERATORS
async def test_http_sessions_keep_evidence_across_calls(http_url: str) -> None:
    async with Client(http_url, mode="legacy") as client:
        assert not (await client.call_tool("reader", READ)).is_error
        edit = await client.call_tool("editor", EDIT)
    assert not edit.is_error, text(edit)


async def test_invalid_arguments_come_back_as_an_error_result(
    stdio_server: Callable[..., StdioServerParameters],
) -> None:
    async with Client(stdio_server()) as client:
        result = await client.call_tool("reader", {"action": "reed", "path": "notes.txt"})
    assert result.is_error
    assert text(result).startswith("Invalid arguments for tool 'reader':")
    # No structured content: {error, error_type, errors} would not match the
    # reader's output schema; the details travel in _meta.
    assert result.structured_content is None
    details = result.meta["lionfactory/error"]
    assert details["error_type"] == "ToolInputError"
    assert details["errors"][0]["loc"] == ["action"]


async def test_a_typed_failure_sets_is_error(
    stdio_server: Callable[..., StdioServerParameters],
) -> None:
    async with Client(stdio_server()) as client:
        failed = await client.call_tool("bash", {"command": "false"})
        passed = await client.call_tool("bash", {"command": "true"})
    assert failed.is_error
    assert failed.structured_content["return_code"] == 1
    assert not passed.is_error


async def test_an_unknown_tool_is_a_protocol_error(
    stdio_server: Callable[..., StdioServerParameters],
) -> None:
    async with Client(stdio_server()) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("nope", {})
    assert caught.value.code == INVALID_PARAMS
    assert "Unknown tool 'nope'" in caught.value.message


async def test_tools_option_narrows_the_toolkit(
    stdio_server: Callable[..., StdioServerParameters],
) -> None:
    params = stdio_server("--tools", "reader,editor,context")
    async with Client(params) as client:
        names = [t.name for t in (await client.list_tools()).tools]
    assert names == ["reader", "editor", "context"]


async def test_standalone_serves_the_builtins_without_the_guard(
    stdio_server: Callable[..., StdioServerParameters],
) -> None:
    params = stdio_server("--toolkit", "standalone", "--tools", "editor")
    async with Client(params) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["editor"]
        edit = await client.call_tool("editor", EDIT)
    assert not edit.is_error


@pytest.mark.parametrize("allowed", [False, True])
async def test_served_sandbox_merges_into_the_checked_out_branch_only_when_allowed(
    git_workspace: Path, stdio_server: Callable[..., StdioServerParameters], allowed: bool
) -> None:
    options = ["--tools", "editor,sandbox"] + (["--allow-merge-into-protected"] if allowed else [])
    write = {"action": "write", "file_path": "new.txt", "content": "new\n"}
    async with Client(stdio_server(*options)) as client:
        assert not (await client.call_tool("sandbox", {"action": "create"})).is_error
        assert not (await client.call_tool("editor", write)).is_error
        commit = {"action": "commit", "message": "add new.txt"}
        assert not (await client.call_tool("sandbox", commit)).is_error
        merged = await client.call_tool("sandbox", {"action": "merge"})
        if not allowed:
            await client.call_tool("sandbox", {"action": "discard"})
    assert merged.is_error is not allowed
    assert (git_workspace / "new.txt").exists() is allowed
    if not allowed:
        assert "is a protected branch" in merged.structured_content["error"]


def test_an_unknown_tool_name_exits_2(
    git_workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["mcp", "serve", "--workspace", str(git_workspace), "--tools", "reader,nope"])
    assert code == 2
    assert "unknown coding tool(s) ['nope']" in capsys.readouterr().err


class ChatCompletions(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible endpoint: every request gets one final answer."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append(body)  # type: ignore[attr-defined]
        message = {"role": "assistant", "content": "The sub-agent says hi."}
        data = json.dumps({"choices": [{"message": message, "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def chat_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), ChatCompletions)
    server.requests = []  # type: ignore[attr-defined]
    with serving(server):
        yield server


def test_serving_subagent_without_a_model_is_refused_at_start(
    git_workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["mcp", "serve", "--workspace", str(git_workspace), "--tools", "reader,subagent"])
    assert code == 2
    err = capsys.readouterr().err
    assert "subagent tool runs a second conversation with a chat model" in err
    assert "--model-url URL --model NAME" in err


@pytest.mark.parametrize(
    "options",
    [["--model", "m"], ["--model-url", "http://127.0.0.1:1/v1"], ["--model-api-key-env", "X"]],
)
def test_model_options_come_together(
    git_workspace: Path, capsys: pytest.CaptureFixture[str], options: list[str]
) -> None:
    assert main(["mcp", "serve", "--workspace", str(git_workspace), *options]) == 2
    assert "--model" in capsys.readouterr().err


async def test_subagent_served_with_a_configured_model_runs_the_child(
    stdio_server: Callable[..., StdioServerParameters], chat_server: ThreadingHTTPServer
) -> None:
    url = f"http://127.0.0.1:{chat_server.server_address[1]}/v1"
    params = stdio_server("--tools", "reader,subagent", "--model-url", url, "--model", "fake-7b")
    async with Client(params) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["reader", "subagent"]
        result = await client.call_tool("subagent", {"instruction": "Say hi."})
    assert not result.is_error, text(result)
    assert result.structured_content["response"] == "The sub-agent says hi."
    (request,) = chat_server.requests  # type: ignore[attr-defined]
    assert request["model"] == "fake-7b"
    assert request["messages"][-1] == {"role": "user", "content": "Say hi."}


def test_create_mcp_server_refuses_a_subagent_without_a_chat_model(tmp_path: Path) -> None:
    tools = {"workspace_root": tmp_path, "tools": ["reader", "subagent"]}
    with pytest.raises(ValueError, match="subagent tool needs a chat model"):
        create_mcp_server([(coding_toolkit, tools)])
    template = Branch(chat_model=ScriptedModel([]))
    template.register(coding_toolkit, **tools)
    create_mcp_server(template)


# -- the library API, in process ---------------------------------------------


def counter_factory() -> Tool:
    """A factory whose tool keeps state per call of the factory (per branch)."""
    state = {"n": 0}

    def bump() -> int:
        """Count calls made in this session."""
        state["n"] += 1
        return state["n"]

    return function_tool(bump)


async def test_a_users_factory_gets_fresh_state_per_session() -> None:
    server = create_mcp_server([counter_factory])
    async with Client(server) as a, Client(server) as b:
        assert (await a.call_tool("bump", {})).structured_content == {"result": 1}
        assert (await a.call_tool("bump", {})).structured_content == {"result": 2}
        assert (await b.call_tool("bump", {})).structured_content == {"result": 1}


async def test_a_template_branch_is_cloned_per_session() -> None:
    template = Branch("system prompt")
    template.register(counter_factory)
    server = create_mcp_server(template, name="mine")
    async with Client(server) as client:
        assert client.server_info is not None
        assert client.server_info.name == "mine"
        assert (await client.call_tool("bump", {})).structured_content == {"result": 1}
    async with Client(server) as client:
        assert (await client.call_tool("bump", {})).structured_content == {"result": 1}


def test_a_template_with_a_bound_static_tool_fails_at_creation() -> None:
    template = Branch()
    bound = attrs.evolve(function_tool(lambda: 1, name="one"), bound_to=template.id)
    template.register(bound)
    with pytest.raises(CloneError, match="register its factory instead"):
        create_mcp_server(template)


def test_a_broken_source_fails_at_once() -> None:
    with pytest.raises(TypeError, match="each entry must be a factory"):
        create_mcp_server([42])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="nothing to serve"):
        create_mcp_server([])


def test_serve_refuses_a_non_loopback_host() -> None:
    with pytest.raises(ValueError, match="host must be a loopback address"):
        serve_mcp([counter_factory], transport="http", host="0.0.0.0")


def test_serve_refuses_an_unknown_transport() -> None:
    with pytest.raises(ValueError, match="transport must be 'stdio' or 'http', got 'sse'"):
        serve_mcp([counter_factory], transport="sse")  # type: ignore[arg-type]


async def test_idle_sessions_are_dropped_after_the_timeout() -> None:
    now = [0.0]
    sessions = SessionBranches(Branch, idle_timeout=10.0, clock=lambda: now[0])
    with sessions.use("a") as first:
        pass
    now[0] = 5.0
    await sessions.admit("a")
    with sessions.use("a") as again:
        assert again is first
    now[0] = 16.0
    await sessions.admit("b")
    with sessions.use("b"):
        assert "a" not in sessions
    with sessions.use("a") as fresh:
        assert fresh is not first


async def test_a_session_with_a_call_in_flight_is_not_dropped() -> None:
    now = [0.0]
    sessions = SessionBranches(Branch, idle_timeout=1.0, clock=lambda: now[0])
    with sessions.use("busy"):
        now[0] = 100.0
        await sessions.admit("other")
        with sessions.use("other"):
            assert "busy" in sessions
    assert len(sessions) == 2


class Closing(Branch):
    closed: list[str] = []  # noqa: RUF012 - shared on purpose: the test reads it

    async def aclose(self) -> None:
        Closing.closed.append(self.name or "")
        await super().aclose()


async def test_past_max_sessions_the_least_recently_used_idle_session_is_closed() -> None:
    now = [0.0]
    made = iter(["a", "b", "c", "d"])
    Closing.closed = []
    sessions = SessionBranches(
        lambda: Closing(name=next(made)), max_sessions=2, clock=lambda: now[0]
    )
    for key in ("a", "b"):
        now[0] += 1
        await sessions.admit(key)
        with sessions.use(key):
            pass
    now[0] += 1
    await sessions.admit("a")
    with sessions.use("a"):  # "a" is now the most recently used
        pass
    now[0] += 1
    await sessions.admit("c")
    with sessions.use("c"):
        pass
    assert Closing.closed == ["b"] and "b" not in sessions and len(sessions) == 2


async def test_a_session_running_a_call_is_never_evicted_for_a_new_one() -> None:
    Closing.closed = []
    sessions = SessionBranches(lambda: Closing(name="x"), max_sessions=1)
    with sessions.use("busy"):
        await sessions.admit("new")
        with sessions.use("new"):
            assert "busy" in sessions
    assert Closing.closed == []


def test_max_sessions_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_sessions must be a positive number"):
        SessionBranches(Branch, max_sessions=0)
    with pytest.raises(ValueError, match="max_sessions must be a positive number"):
        serve_mcp([counter_factory], transport="http", max_sessions=-1)


def test_serve_refuses_a_malformed_allowed_origin() -> None:
    with pytest.raises(ValueError, match="scheme://host"):
        serve_mcp([counter_factory], transport="http", allowed_origins=["localhost:3000"])


def test_the_cli_refuses_a_non_loopback_host(
    git_workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["mcp", "serve", "--workspace", str(git_workspace), "--transport", "http"]
    assert main([*argv, "--host", "0.0.0.0"]) == 2
    assert "host must be a loopback address" in capsys.readouterr().err


def test_the_cli_reports_a_port_in_use(
    git_workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        argv = ["mcp", "serve", "--workspace", str(git_workspace), "--transport", "http"]
        assert main([*argv, "--port", port]) == 1
    assert "cannot serve" in capsys.readouterr().err


# 2,000 rows of 100 characters: one read is about 50,000 estimated tokens, so
# the fourth read of a session crosses the toolkit's default nudge threshold
# (0.7 of 200,000 tokens).
BIG_ROWS = ("y" * 99 + "\n") * 2000


async def _nudges_after_reads(params: StdioServerParameters, reads: int) -> list[str]:
    notes = []
    async with Client(params) as client:
        for _ in range(reads):
            result = await client.call_tool("reader", {"action": "read", "path": "big.txt"})
            assert not result.is_error, text(result)
            notes.append(str(result.structured_content.get("system", "")))
            assert json.loads(text(result)).get("system") == result.structured_content.get("system")
    return notes


async def test_a_served_session_without_the_context_tool_is_not_told_to_use_it(
    git_workspace: Path, stdio_server: Callable[..., StdioServerParameters]
) -> None:
    # mcp serve leaves context out (the client owns the conversation): a note
    # telling the model to call a tool it does not have would mislead it.
    (git_workspace / "big.txt").write_text(BIG_ROWS, encoding="utf-8")
    notes = await _nudges_after_reads(stdio_server(), 6)
    assert notes == [""] * 6


async def test_a_served_session_with_the_context_tool_is_told_to_use_it(
    git_workspace: Path, stdio_server: Callable[..., StdioServerParameters]
) -> None:
    (git_workspace / "big.txt").write_text(BIG_ROWS, encoding="utf-8")
    notes = await _nudges_after_reads(stdio_server("--tools", "reader,context"), 6)
    assert notes[:3] == ["", "", ""]
    assert "Context usage is about" in notes[3] and "context tool" in notes[3]


async def test_a_served_session_lists_and_rewinds_its_checkpoints(
    git_workspace: Path, stdio_server: Callable[..., StdioServerParameters]
) -> None:
    params = stdio_server("--tools", "reader,editor,checkpoint")
    async with Client(params) as client:
        await client.call_tool("reader", READ)
        assert not (await client.call_tool("editor", EDIT)).is_error
        listed = (await client.call_tool("checkpoint", {"action": "list"})).structured_content
        [entry] = listed["checkpoints"]
        assert (entry["tool"], entry["files_changed"]) == ("editor", ["notes.txt"])
        rewound = await client.call_tool(
            "checkpoint", {"action": "rewind", "to": entry["id"], "dry_run": False}
        )
    assert not rewound.is_error, text(rewound)
    assert rewound.structured_content["report"]["restored"] == ["notes.txt"]
    assert (git_workspace / "notes.txt").read_text(encoding="utf-8") == NOTES

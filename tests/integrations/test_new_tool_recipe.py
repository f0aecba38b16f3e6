"""The recipe of `lionfactory.tools`: one new module is served by every surface, unchanged.

`_example_tool.word_count_tool` is written the way the recipe says (one
module: request model, response model, handler, factory with hints). Nothing
else in the package names it, yet a Branch, the MCP server (through the
official SDK client) and each framework adapter, driven by that framework's
own loop and offline test model, list it with its metadata and run it. Then
a copy of the package gets the module, its export and its catalogue row and
nothing else, and the tool restores from a saved branch, is listed and
called by the command line, served over stdio, HTTP and with ``--store``,
and built by the coding toolkit when named.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from _example_tool import WordCountResponse, word_count_tool
from mcp import Client, StdioServerParameters
from pydantic_ai import Agent
from pydantic_ai.messages import ToolReturnPart
from test_langchain import run as langchain_run
from test_langchain import scripted as langchain_scripted
from test_langchain import tool_message
from test_lionagi import react
from test_openai_agents import ScriptedAgentsModel, tool_output
from test_openai_agents import run as agents_run
from test_pydantic_ai import scripted as pydantic_scripted

from lionfactory import Branch
from lionfactory.integrations.langchain import langchain_tools
from lionfactory.integrations.lionagi import lionagi_tools
from lionfactory.integrations.openai_agents import openai_agents_tools
from lionfactory.integrations.pydantic_ai import pydantic_ai_toolset
from lionfactory.mcp import create_mcp_server

CALL = ("word_count", {"path": "notes.txt"})


@pytest.fixture(autouse=True)
def _in_a_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The tool's default root is the current directory (lionagi writes its
    # log there too).
    (tmp_path / "notes.txt").write_text("one two  three\n", encoding="utf-8")
    (tmp_path / "one.txt").write_text("x", encoding="utf-8")
    monkeypatch.chdir(tmp_path)


def a_branch() -> Branch:
    branch = Branch("You count words.")
    branch.register(word_count_tool)
    return branch


def test_the_tool_carries_its_own_metadata():
    tool = word_count_tool()
    assert tool.response_model is WordCountResponse
    assert tool.hints is not None and tool.hints.title == "Count words"
    assert tool.hints.read_only is True


async def test_a_branch_acts_with_it_and_a_clone_rebuilds_it():
    branch = a_branch()
    result = await branch.act(*CALL)
    assert result.ok
    assert result.result == {"success": True, "words": 3, "error": None}
    clone = branch.clone()
    assert "word_count" in clone.tools
    assert (await clone.act("word_count", {"path": "one.txt"})).result["words"] == 1


async def test_mcp_lists_its_title_annotations_and_output_schema_and_calls_it():
    server = create_mcp_server([word_count_tool])
    async with Client(server) as client:
        [listed] = (await client.list_tools()).tools
        called = await client.call_tool(*CALL)
        refused = await client.call_tool("word_count", {"path": "one.txt", "colour": "blue"})
    assert listed.name == "word_count"
    assert listed.title == "Count words"
    assert listed.annotations is not None
    assert listed.annotations.read_only_hint is True
    assert listed.annotations.destructive_hint is False
    assert listed.output_schema is not None
    assert set(listed.output_schema["properties"]) == {"success", "words", "error"}
    assert not called.is_error
    assert called.structured_content == {"success": True, "words": 3, "error": None}
    assert refused.is_error


def test_pydantic_ai_runs_it_in_its_own_agent_loop():
    seen: list[Any] = []
    agent = Agent(
        pydantic_scripted((CALL,), "three", seen), toolsets=[pydantic_ai_toolset(a_branch())]
    )
    assert asyncio.run(agent.run("count")).output == "three"
    assert "word_count" in seen[0][1]
    returned = [p.content for p in seen[1][0].parts if isinstance(p, ToolReturnPart)]
    assert returned == [{"success": True, "words": 3, "error": None}]


def test_openai_agents_runs_it_in_its_runner():
    model = ScriptedAgentsModel((CALL,), "three")
    assert agents_run(model, openai_agents_tools(a_branch())) == "three"
    assert model.tools[0] == ["word_count"]
    assert tool_output(model, 1, "oa0")["words"] == 3


def test_langchain_runs_it_in_a_tool_calling_loop():
    model = langchain_scripted([CALL], "three")
    assert langchain_run(model, langchain_tools(a_branch())) == "three"
    assert [t["function"]["name"] for t in model.exported] == ["word_count"]
    assert tool_message(model, 1).artifact["words"] == 3


def test_lionagi_runs_it_in_react():
    answer, outputs = react(lionagi_tools(a_branch()), (CALL,), "three")
    assert answer == "three"
    assert outputs[0]["words"] == 3


# --- The three package places: a copy of the package with the module, its
# export and its catalogue row added, and nothing else, served by every route.

PACKAGE = Path(__file__).resolve().parents[2] / "lionfactory"
ROW = '    _tool("word_count", needs=_WORKSPACE, coding="opt-in", path_argument="path"),\n'


def _insert_after(text: str, anchor: str, added: str) -> str:
    assert anchor in text, anchor
    return text.replace(anchor, anchor + added, 1)


@pytest.fixture(scope="module")
def recipe_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of `lionfactory` with ``word_count`` added in exactly three places."""
    top = tmp_path_factory.mktemp("recipe")
    copy = top / "lionfactory"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    # 1. The module.
    shutil.copy(Path(__file__).with_name("_example_tool.py"), copy / "tools" / "word_count.py")
    # 2. The export.
    init = copy / "tools" / "__init__.py"
    text = _insert_after(
        init.read_text(),
        "_EXPORTS: dict[str, str] = {\n",
        '    "word_count_tool": "lionfactory.tools.word_count",\n',
    )
    init.write_text(_insert_after(text, "__all__ = [\n", '    "word_count_tool",\n'))
    # 3. The catalogue row.
    catalogue = copy / "_catalogue.py"
    table_end = ')\n"""Every built-in tool, in the order every listing uses."""'
    text = catalogue.read_text()
    assert table_end in text
    catalogue.write_text(text.replace(table_end, ROW + table_end, 1))
    return top


def _env(top: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(top)}


DRIVER = """
import asyncio, json, sys
from lionfactory import Branch
from lionfactory.coding import ALL_CODING_TOOLS, DEFAULT_CODING_TOOLS, coding_toolkit
from lionfactory.testing import ScriptedModel
from lionfactory.tools import word_count_tool

assert word_count_tool.__module__ == "lionfactory.tools.word_count"
assert "word_count" in ALL_CODING_TOOLS and "word_count" not in DEFAULT_CODING_TOOLS

async def count(branch):
    return (await branch.act("word_count", {"path": "notes.txt"})).result["words"]

async def main():
    out = {}
    branch = Branch()
    branch.register(word_count_tool, workspace_root=".")
    out["act"] = await count(branch)
    out["clone"] = await count(branch.clone())
    saved = json.loads(json.dumps(branch.to_dict()))
    out["restored"] = await count(Branch.from_dict(saved))
    kit = Branch()
    kit.register(coding_toolkit, workspace_root=".", tools=["reader", "word_count"])
    out["toolkit"] = list(kit.tools)
    out["toolkit_act"] = await count(kit)
    out["default_toolkit"] = "word_count" in coding_toolkit(Branch(), workspace_root=".")
    read_only = Branch()
    read_only.register(coding_toolkit, workspace_root=".", tools=["word_count"], mode="read_only")
    out["read_only"] = await count(read_only)
    restored = Branch.from_dict(json.loads(json.dumps(kit.to_dict())))
    out["toolkit_restored"] = await count(restored)
    # A sub-agent's read_only tier takes the new tool by its read-only hints.
    lead = Branch(chat_model=ScriptedModel(["done"]))
    lead.register(coding_toolkit, workspace_root=".", tools=["reader", "word_count", "subagent"])
    asked = await lead.act("subagent", {"instruction": "count", "permissions": "read_only"})
    out["subagent_tools"] = asked.result["tools"]
    print(json.dumps(out))

asyncio.run(main())
"""


def test_three_package_places_reach_branch_clone_save_load_and_the_toolkit(
    recipe_package: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", DRIVER],
        cwd=tmp_path,
        env=_env(recipe_package),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "act": 3,
        "clone": 3,
        "restored": 3,
        "toolkit": ["reader", "word_count"],  # the catalogue's order
        "toolkit_act": 3,
        "default_toolkit": False,
        "read_only": 3,
        "toolkit_restored": 3,
        "subagent_tools": ["reader", "word_count"],
    }


def _cli(top: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lionfactory", *args],
        cwd=cwd,
        env=_env(top),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_three_package_places_reach_the_command_line(recipe_package: Path, tmp_path: Path) -> None:
    listed = _cli(recipe_package, tmp_path, "tools")
    assert listed.returncode == 0, listed.stderr
    assert any(
        line.startswith("word_count  Count the words") for line in listed.stdout.splitlines()
    )
    called = _cli(recipe_package, tmp_path, "call", "word_count", "path=notes.txt", "--json")
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["words"] == 3


def _serve(top: Path, root: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "lionfactory", "mcp", "serve", "--workspace", str(root),
        "--tools", "word_count", *extra,
    ]  # fmt: skip


async def _count_over(client: Client) -> tuple[list[str], Any]:
    names = [tool.name for tool in (await client.list_tools()).tools]
    called = await client.call_tool(*CALL)
    return names, called.structured_content


@pytest.mark.parametrize("toolkit", ["standalone", "coding"])
async def test_three_package_places_reach_mcp_over_stdio_and_a_store(
    recipe_package: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, toolkit: str
) -> None:
    # The store lives outside the served workspace, where the served tools cannot write it.
    store = f"sqlite:///{tmp_path_factory.mktemp('store') / 'sessions.db'}"
    command = _serve(
        recipe_package, tmp_path, "--toolkit", toolkit, "--store", store, "--session", "s"
    )
    server = StdioServerParameters(command=command[0], args=command[1:], env=_env(recipe_package))
    for _ in range(2):  # the second server restores the stored session's branch
        async with Client(server, mode="legacy") as client:
            names, content = await _count_over(client)
        assert names == ["word_count"]
        assert content == {"success": True, "words": 3, "error": None}


# The SDK's Streamable HTTP client (httpx2) lets its SSE async generators be
# garbage collected unfinished; trio reports each one with a ResourceWarning.
@pytest.mark.filterwarnings(r"ignore:Async generator 'http(x|core)2\.:ResourceWarning")
async def test_three_package_places_reach_mcp_over_http(
    recipe_package: Path, tmp_path: Path
) -> None:
    command = _serve(
        recipe_package, tmp_path, "--toolkit", "standalone", "--transport", "http", "--port", "0"
    )
    async with await anyio.open_process(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=_env(recipe_package)
    ) as process:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(60):
            while b"\n" not in seen:
                seen += await process.stderr.receive()
        url = seen.decode().splitlines()[0].rsplit(" ", 1)[1]
        try:
            async with Client(url, mode="legacy") as client:
                names, content = await _count_over(client)
        finally:
            process.terminate()
            with anyio.fail_after(10):
                await process.wait()
    assert names == ["word_count"]
    assert content == {"success": True, "words": 3, "error": None}

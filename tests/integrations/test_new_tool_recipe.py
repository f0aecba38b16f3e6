"""The recipe of `lionfactory.tools`: one new module is served by every surface, unchanged.

`_example_tool.word_count_tool` is written the way the recipe says (one
module: request model, response model, handler, factory with hints). Nothing
else in the package names it, yet a Branch, the MCP server (through the
official SDK client) and each framework adapter, driven by that framework's
own loop and offline test model, list it with its metadata and run it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from _example_tool import WordCountResponse, word_count_tool
from mcp import Client
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

CALL = ("word_count", {"text": "one two  three"})


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
    assert (await clone.act("word_count", {"text": "x"})).result["words"] == 1


async def test_mcp_lists_its_title_annotations_and_output_schema_and_calls_it():
    server = create_mcp_server([word_count_tool])
    async with Client(server) as client:
        [listed] = (await client.list_tools()).tools
        called = await client.call_tool(*CALL)
        refused = await client.call_tool("word_count", {"text": "x", "colour": "blue"})
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


@pytest.fixture
def _in_tmp(tmp_path, monkeypatch):
    # lionagi writes its log into the working directory.
    monkeypatch.chdir(tmp_path)


@pytest.mark.usefixtures("_in_tmp")
def test_lionagi_runs_it_in_react():
    answer, outputs = react(lionagi_tools(a_branch()), (CALL,), "three")
    assert answer == "three"
    assert outputs[0]["words"] == 3

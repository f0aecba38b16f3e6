"""Sessionless MCP calls return the output they kept with the result, and keep nothing after.

A 2026-07-28 call over HTTP runs on a branch closed when the call ends, so an
``output_id`` in its answer could never be read back: the kept text comes
embedded in the result instead (`lionfactory.mcp._stateless.StatelessCall`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import eventually, processes_tagged
from mcp import Client, StdioServerParameters, types

from lionfactory import Branch
from lionfactory._os.isolation import private_base
from lionfactory.coding import coding_toolkit
from lionfactory.mcp import _stateless
from lionfactory.mcp._stateless import OUTPUT_SCHEME, StatelessCalls
from lionfactory.tools.jobs import REGISTRY

HTTPX2_GENERATORS = pytest.mark.filterwarnings(
    r"ignore:Async generator 'http(x|core)2\.:ResourceWarning"  # see test_serve.py
)
LINES = 30_000  # `seq 30000` prints 168,894 bytes: past bash's 30,000-byte cap
EXPECTED = "".join(f"{n}\n" for n in range(1, LINES + 1))


def embedded(result: Any) -> list[types.TextResourceContents]:
    return [b.resource for b in result.content if isinstance(b, types.EmbeddedResource)]


def files_holding(tag: str) -> list[Path]:
    """Files under the private base (kept output, job output) whose text holds `tag`."""
    found = []
    for folder, _dirs, names in os.walk(private_base()):
        for name in names:
            path = Path(folder, name)
            try:
                if tag.encode() in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


@HTTPX2_GENERATORS
async def test_the_default_http_client_gets_a_cut_stream_whole_as_an_embedded_resource(
    http_url: str,
) -> None:
    async with Client(http_url) as client:  # the SDK's default mode: 2026-07-28, sessionless
        result = await client.call_tool("bash", {"command": f"seq {LINES}"})
        assert client.protocol_version == "2026-07-28"
    assert not result.is_error
    (resource,) = embedded(result)
    whole = resource.text == EXPECTED  # (a bool: no 170 KB diff on failure)
    assert whole, len(resource.text)
    assert str(resource.uri).startswith(f"{OUTPUT_SCHEME}:///")
    data = result.structured_content
    assert data["output_id"] is None
    # The answer shows head and tail as before, and says where the rest went.
    assert data["stdout"].startswith("1\n2\n") and data["stdout"].endswith(f"{LINES}\n")
    assert f"embedded in this result as {resource.uri}" in data["stdout"]
    assert "jobs(action='output'" not in data["stdout"]
    assert f"({len(EXPECTED):,} bytes) is embedded in this result" in data["notice"]


@HTTPX2_GENERATORS
async def test_a_sessionless_background_job_over_http_leaves_no_process(http_url: str) -> None:
    tag = f"lf-sessionless-{uuid.uuid4().hex}"
    async with Client(http_url) as client:
        result = await client.call_tool(
            "bash", {"command": f"echo {tag} up; sleep 600; echo {tag}", "background": True}
        )
    assert "the job ended with the call" in result.structured_content["notice"]
    assert len(embedded(result)) == 1
    await eventually(lambda: not processes_tagged(tag), 30)


@HTTPX2_GENERATORS
async def test_a_short_sessionless_answer_embeds_nothing(http_url: str) -> None:
    async with Client(http_url) as client:
        result = await client.call_tool("bash", {"command": "echo hi"})
    assert embedded(result) == []
    assert result.structured_content["stdout"] == "hi\n"


async def test_a_stdio_client_pages_kept_output_by_its_id(
    stdio_server: Callable[..., StdioServerParameters],
) -> None:
    """Over stdio the connection keeps its branch in every era, so the id stays readable."""
    async with Client(stdio_server()) as client:
        result = await client.call_tool("bash", {"command": f"seq {LINES}"})
        ident = result.structured_content["output_id"]
        assert ident and embedded(result) == []
        read, offset = "", 0
        while offset < len(EXPECTED):
            page = await client.call_tool(
                "jobs", {"action": "output", "job_id": ident, "offset": offset}
            )
            read += page.structured_content["output"]
            offset = page.structured_content["next_offset"]
    whole = read == EXPECTED  # (a bool: no 170 KB diff on failure)
    assert whole, len(read)


def _calls(root: Path) -> StatelessCalls:
    def new_branch() -> Branch:
        branch = Branch(name="sessionless")
        branch.register(coding_toolkit, workspace_root=root, notify=False, tools=["bash"])
        return branch

    return StatelessCalls(new_branch)


async def test_kept_output_past_the_bound_is_cut_and_the_loss_stated(
    git_workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_stateless, "SESSIONLESS_OUTPUT_BYTES", 50_000)
    tag = f"lf-sessionless-{uuid.uuid4().hex}"
    tables = set(REGISTRY.tables)
    call = await _calls(git_workspace).call(
        "bash", {"command": f"echo {tag}; seq {LINES}; echo {tag} >&2; seq {LINES} >&2"}
    )
    result = call.result("2026-07-28")
    texts = [block["resource"]["text"] for block in result["content"][1:]]
    whole = f"{tag}\n{EXPECTED}"
    # Both streams together get the bound: stdout first, stderr the rest.
    first_is_the_head = texts[0] == whole[:50_000]  # (a bool: no 50 KB diff on failure)
    assert first_is_the_head and texts[1] == ""
    notice = call.action.result["notice"]
    assert f"The first 50,000 of the {len(whole.encode()):,} bytes" in notice
    assert "are lost (a sessionless call returns at most 50,000)" in notice
    assert call.action.result["stderr_output_id"] is None
    # Nothing of the call's kept output is left on disk, and its table is gone.
    assert files_holding(tag) == []
    assert set(REGISTRY.tables) - tables <= {None}


async def test_a_sessionless_job_comes_back_with_its_output_and_leaves_nothing(
    git_workspace: Path,
) -> None:
    tag = f"lf-sessionless-{uuid.uuid4().hex}"
    script = f"echo {tag} started; sleep 600; echo done"
    call = await _calls(git_workspace).call("bash", {"command": script, "background": True})
    (block,) = call.result("2026-07-28")["content"][1:]
    assert block["resource"]["text"].startswith(f"{tag} started") or block["resource"]["text"] == ""
    assert (
        "the job ended with the call (a sessionless call keeps no job)"
        in (call.action.result["notice"])
    )
    await eventually(lambda: not processes_tagged(tag), 30)
    assert files_holding(tag) == []

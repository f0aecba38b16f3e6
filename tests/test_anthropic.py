"""`AnthropicMessages` against a recording server on loopback, checked against the official SDK.

Request bodies: the same conversation is sent once by the adapter and once
by the ``anthropic`` SDK (built from its own request types) to a loopback
server that records both; the bodies must be equal. Replies: recorded
Messages API response shapes, each first parsed by the SDK (so the shapes
are real), then by the adapter.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import struct
import zlib
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import attrs
import pytest
from _test_helpers import serving
from anthropic.types import (
    AssistantMessageParam,
    Base64ImageSourceParam,
    ImageBlockParam,
    MessageParam,
    TextBlockParam,
    ToolParam,
    ToolResultBlockParam,
    ToolUseBlockParam,
    UserMessageParam,
)

from lionfactory import Branch, Message, ModelReply, ToolCall, function_tool
from lionfactory.coding import coding_toolkit
from lionfactory.errors import ConfigurationError
from lionfactory.models import AnthropicMessages, ModelError
from lionfactory.testing import ScriptedModel

# -- the recording server --------------------------------------------------------------


@attrs.frozen
class Seen:
    path: str
    headers: dict[str, str]
    body: Any
    client_port: int


class Recorder:
    """Records every request and answers from `replies` (599 once they run out)."""

    def __init__(self) -> None:
        self.replies: deque[tuple[int, Any]] = deque()
        self.seen: list[Seen] = []
        self.url = ""

    def play(self, *replies: Any, status: int = 200) -> None:
        self.replies.extend((status, r) for r in replies)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        recorder = self.server.recorder
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        recorder.seen.append(Seen(self.path, headers, json.loads(raw), self.client_address[1]))
        status, body = recorder.replies.popleft() if recorder.replies else (599, {})
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    recorder: Recorder


@pytest.fixture
def server() -> Iterator[Recorder]:
    recorder = Recorder()
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.recorder = recorder
    with serving(httpd) as url:
        recorder.url = url
        yield recorder


def adapter(server: Recorder, **options: Any) -> AnthropicMessages:
    options.setdefault("backoff", 0.01)
    return AnthropicMessages(
        "claude-test", api_key="sk-ant-test", base_url=server.url, max_tokens=1024, **options
    )


def sdk_client(server: Recorder) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="sk-ant-test", base_url=server.url, max_retries=0)


# -- recorded reply shapes (Messages API responses) ---------------------------------------


def reply(*content: dict[str, Any], stop_reason: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "output_tokens": 12},
    }


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


SHAPES = {
    "text": (reply(text("Hello."), text(" Bye.")), ModelReply(text="Hello. Bye.")),
    "tool_use": (
        reply(
            text("Reading it."),
            tool_use("toolu_01A", "reader", {"action": "read", "path": "a.txt"}),
            tool_use("toolu_01B", "noop", {}),
            stop_reason="tool_use",
        ),
        ModelReply(
            text="Reading it.",
            tool_calls=(
                ToolCall(
                    id="toolu_01A", name="reader", arguments={"action": "read", "path": "a.txt"}
                ),
                ToolCall(id="toolu_01B", name="noop", arguments={}),
            ),
        ),
    ),
    "thinking": (
        reply({"type": "thinking", "thinking": "hmm", "signature": "sig"}, text("42")),
        ModelReply(text="42"),
    ),
    "refusal": (reply(stop_reason="refusal"), ModelReply(text="")),
    "stop_sequence": (
        {**reply(text("Up to ")), "stop_reason": "stop_sequence", "stop_sequence": "END"},
        ModelReply(text="Up to "),
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_recorded_reply_shapes_parse_in_the_sdk_and_in_the_adapter(server, shape):
    body, expected = SHAPES[shape]
    server.play(body, body)

    async def both() -> tuple[Any, ModelReply]:
        async with sdk_client(server) as client:
            sdk = await client.messages.create(
                model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
        ours = await adapter(server)([Message(role="user", content="hi")], [])
        return sdk, ours

    sdk, ours = asyncio.run(both())
    assert sdk.stop_reason == body["stop_reason"]
    assert ours == expected


async def test_a_call_cut_off_at_max_tokens_reaches_the_branch_as_malformed(server):
    body = reply(
        text("Writing."),
        tool_use("toolu_cut", "editor", {"action": "write"}),
        stop_reason="max_tokens",
    )
    server.play(body)
    got = await adapter(server)([Message(role="user", content="go")], [])
    (call,) = got.tool_calls
    assert call.id == "toolu_cut"
    assert call.arguments == {}
    assert "cut off (max_tokens)" in (call.arguments_error or "")


async def test_a_reply_without_content_raises(server):
    server.play({"type": "message", "role": "assistant"})
    with pytest.raises(ModelError, match="without a content list"):
        await adapter(server)([Message(role="user", content="go")], [])


# -- request bodies, compared with the SDK's -------------------------------------------------


def tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


async def conversation(tmp_path: Path) -> tuple[Branch, list[Message]]:
    """A real conversation: the toolkit reader returns an image and a text file; a bad edit."""
    (tmp_path / "logo.png").write_bytes(tiny_png())
    (tmp_path / "notes.txt").write_text("hello\n")
    script = ScriptedModel(
        [
            ModelReply(
                text="Reading both.",
                tool_calls=(
                    ToolCall(
                        id="c1", name="reader", arguments={"action": "read", "path": "logo.png"}
                    ),
                    ToolCall(
                        id="c2", name="reader", arguments={"action": "read", "path": "notes.txt"}
                    ),
                ),
            ),
            ModelReply(tool_calls=(ToolCall(id="c3", name="editor", arguments=BAD_EDIT),)),
            "",
        ]
    )
    branch = Branch("Be brief.", chat_model=script)
    branch.register(coding_toolkit, workspace_root=tmp_path, tools=["reader", "editor"])
    await branch.run("Look at logo.png and notes.txt.")
    return branch, [*branch.messages.active, Message(role="user", content="Thanks.")]


BAD_EDIT = {"action": "edit", "file_path": "notes.txt", "colour": "blue"}


def test_request_body_equals_the_sdks_for_the_same_conversation(server, tmp_path):
    # Both run under asyncio: the SDK's async client needs it.
    branch, messages = asyncio.run(conversation(tmp_path))
    server.play(reply(text("ok")), reply(text("ok")))
    asyncio.run(adapter(server)(messages, list(branch.tools.values())))

    image, notes, bad = (m for m in messages if m.role == "tool")
    shown = json.loads(image.content)
    assert shown["content"].startswith("data:image/png;base64,")
    rest = dict(shown, content="[image/png image, shown above]")
    tools = [
        ToolParam(
            name=t.name,
            description=t.description,
            input_schema=t.schema("anthropic")["input_schema"],
        )
        for t in branch.tools.values()
    ]
    expected: list[MessageParam] = [
        UserMessageParam(role="user", content="Look at logo.png and notes.txt."),
        AssistantMessageParam(
            role="assistant",
            content=[
                TextBlockParam(type="text", text="Reading both."),
                ToolUseBlockParam(
                    type="tool_use",
                    id="c1",
                    name="reader",
                    input={"action": "read", "path": "logo.png"},
                ),
                ToolUseBlockParam(
                    type="tool_use",
                    id="c2",
                    name="reader",
                    input={"action": "read", "path": "notes.txt"},
                ),
            ],
        ),
        UserMessageParam(
            role="user",
            content=[
                ToolResultBlockParam(
                    type="tool_result",
                    tool_use_id="c1",
                    content=[
                        ImageBlockParam(
                            type="image",
                            source=Base64ImageSourceParam(
                                type="base64",
                                media_type="image/png",
                                data=base64.b64encode(tiny_png()).decode(),
                            ),
                        ),
                        TextBlockParam(type="text", text=json.dumps(rest, ensure_ascii=False)),
                    ],
                ),
                ToolResultBlockParam(type="tool_result", tool_use_id="c2", content=notes.content),
            ],
        ),
        AssistantMessageParam(
            role="assistant",
            content=[ToolUseBlockParam(type="tool_use", id="c3", name="editor", input=BAD_EDIT)],
        ),
        UserMessageParam(
            role="user",
            content=[
                ToolResultBlockParam(
                    type="tool_result", tool_use_id="c3", content=bad.content, is_error=True
                ),
                TextBlockParam(type="text", text="Thanks."),
            ],
        ),
    ]

    async def sdk_request() -> None:
        async with sdk_client(server) as client:
            await client.messages.create(
                model="claude-test",
                max_tokens=1024,
                system="Be brief.",
                messages=expected,
                tools=tools,
            )

    asyncio.run(sdk_request())
    ours, sdk = server.seen
    assert ours.path == sdk.path == "/v1/messages"
    assert ours.body == sdk.body
    for header in ("authorization", "anthropic-version", "content-type", "accept"):
        assert ours.headers.get(header) == sdk.headers.get(header), header


# -- the agent loop, under trio and asyncio ---------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def round_trip(server: Recorder) -> str:
    server.play(
        reply(tool_use("toolu_1", "add", {"a": 2, "b": 3}), stop_reason="tool_use"),
        reply(text("It is 5.")),
    )
    branch = Branch("You add numbers.", chat_model=adapter(server))
    branch.register(function_tool(add))
    return await branch.run("What is 2 + 3?")


def expected_second_request() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "What is 2 + 3?"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 3}}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"result": 5}'}
            ],
        },
    ]


async def test_tool_round_trip_through_branch_run_under_trio(server):
    assert await round_trip(server) == "It is 5."
    first, second = (seen.body for seen in server.seen)
    assert first["system"] == "You add numbers."
    assert first["tools"] == [function_tool(add).schema("anthropic")]
    assert second["messages"] == expected_second_request()


def test_tool_round_trip_through_branch_run_under_asyncio(server):
    assert asyncio.run(round_trip(server)) == "It is 5."
    assert server.seen[1].body["messages"] == expected_second_request()


# -- transport: retries, keys, misuse --------------------------------------------------------


async def test_overloaded_529_is_retried_then_succeeds(server):
    server.play({"type": "error", "error": {"type": "overloaded_error"}}, status=529)
    server.play(reply(text("ok")))
    got = await adapter(server)([Message(role="user", content="hi")], [])
    assert got.text == "ok"
    assert len(server.seen) == 2


async def test_a_400_is_raised_at_once_with_the_body(server):
    server.play({"type": "error", "error": {"message": "messages: bad"}}, status=400)
    with pytest.raises(ModelError, match="HTTP 400") as caught:
        await adapter(server)([Message(role="user", content="hi")], [])
    assert caught.value.status == 400
    assert "messages: bad" in caught.value.body
    assert len(server.seen) == 1


async def test_the_api_key_comes_from_the_environment_by_default(server, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    server.play(reply(text("ok")))
    await AnthropicMessages("claude-test", base_url=server.url)(
        [Message(role="user", content="hi")], []
    )
    assert server.seen[0].headers["authorization"] == "Bearer sk-ant-env"
    assert server.seen[0].body["max_tokens"] == 4096


def test_no_api_key_anywhere_is_a_configuration_error(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        AnthropicMessages("claude-test")


def test_repr_hides_the_api_key():
    assert "sk-ant-secret" not in repr(AnthropicMessages("m", api_key="sk-ant-secret"))


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        ({"max_tokens": 0}, "max_tokens must be an integer >= 1, got 0"),
        ({"params": {"system": "x"}}, "params cannot set ['system']"),
        ({"base_url": "api.anthropic.com"}, "base_url must be an http"),
        ({"timeout": 0}, "timeout must be a positive number"),
    ],
)
def test_misuse_fails_at_construction(options, shown):
    with pytest.raises(ValueError, match=re.escape(shown)):
        AnthropicMessages("m", api_key="k", **options)


def test_params_reach_the_request_body():
    model = AnthropicMessages(
        "m", api_key="k", params={"temperature": 0.0, "tool_choice": {"type": "any"}}
    )
    body = model.request_body([Message(role="user", content="hi")], [])
    assert body == {
        "model": "m",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.0,
        "tool_choice": {"type": "any"},
    }


async def test_calls_inside_async_with_share_one_connection(server):
    server.play(reply(text("a")), reply(text("b")), reply(text("c")), reply(text("d")))
    model = adapter(server)
    async with model:
        await model([Message(role="user", content="1")], [])
        await model([Message(role="user", content="2")], [])
    await model([Message(role="user", content="3")], [])
    await model([Message(role="user", content="4")], [])
    ports = [seen.client_port for seen in server.seen]
    assert ports[0] == ports[1]
    assert len({ports[1], ports[2], ports[3]}) == 3

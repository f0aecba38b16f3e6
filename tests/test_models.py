"""`OpenAICompatible` against a real HTTP server on loopback that plays scripted completions.

The server runs in a thread of the test process (`ThreadingHTTPServer`), so
the same server serves the trio tests and the asyncio one. It records every
request and answers from a script; a "hang" entry holds the response until
the test ends, which is how the timeout tests get a server slower than the
adapter without sleeping.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs
import httpx
import pytest
import trio
from _test_helpers import serving

from lionfactory import Branch, ChatModel, Message, ModelReply, ToolCall, function_tool
from lionfactory.errors import LionfactoryError
from lionfactory.models import (
    ModelError,
    ModelTimeoutError,
    OpenAICompatible,
)

# -- the scripted server -------------------------------------------------------


@attrs.frozen
class Reply:
    status: int = 200
    body: Any = None  # a dict is sent as JSON, bytes as they are
    headers: tuple[tuple[str, str], ...] = ()
    hang: bool = False


@attrs.frozen
class Seen:
    path: str
    headers: dict[str, str]
    body: Any
    client_port: int


def completion(text: str | None = None, *calls: tuple[str, str, str]) -> Reply:
    """A chat completion: text and tool calls given as (id, name, arguments JSON text)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ]
    return Reply(body={"id": "cmpl-1", "object": "chat.completion", "choices": [
        {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
    ]})  # fmt: skip


class ScriptedServer:
    """Plays `script` in order; answers 599 once it runs out (a test bug, loudly)."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.seen: list[Seen] = []
        self.release = threading.Event()
        self.url = ""

    def play(self, *replies: Reply) -> None:
        self.script.extend(replies)

    def next_reply(self) -> Reply:
        return self.script.popleft() if self.script else Reply(599, {"error": "script exhausted"})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so connection reuse is observable
    server: _Server

    def do_POST(self) -> None:
        script = self.server.script
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        script.seen.append(
            Seen(self.path, dict(self.headers.items()), json.loads(raw), self.client_address[1])
        )
        reply = script.next_reply()
        if reply.hang:
            script.release.wait(30)
            self.close_connection = True
            return
        payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for key, value in reply.headers:
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    script: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is what some tests are about.
        pass


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    script = ScriptedServer()
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.script = script
    with serving(httpd) as url:
        script.url = f"{url}/v1"
        yield script
        script.release.set()  # a handler held by a hanging reply lets the server shut down


HI = [Message(role="user", content="hi")]


def model_for(server: ScriptedServer, **options: Any) -> OpenAICompatible:
    options.setdefault("backoff", 0.01)
    return OpenAICompatible(server.url, "test-model", **options)


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


# -- replies -----------------------------------------------------------------------


async def test_plain_text_reply(server):
    server.play(completion("Hello there."))
    reply = await model_for(server)(HI, [])
    assert reply == ModelReply(text="Hello there.")
    assert server.seen[0].path == "/v1/chat/completions"


async def test_tool_calls_come_back_with_parsed_arguments(server):
    server.play(completion(None, ("c1", "add", '{"a": 1, "b": 2}'), ("c2", "noop", "")))
    reply = await model_for(server)([Message(role="user", content="go")], [])
    assert reply.text == ""
    assert reply.tool_calls == (
        ToolCall(id="c1", name="add", arguments={"a": 1, "b": 2}),
        ToolCall(id="c2", name="noop", arguments={}),
    )


async def test_content_parts_are_joined_into_text(server):
    body = {"choices": [{"message": {"role": "assistant", "content": [
        {"type": "text", "text": "Hello, "}, {"type": "text", "text": "world."}
    ]}}]}  # fmt: skip
    server.play(Reply(body=body))
    reply = await model_for(server)(HI, [])
    assert reply.text == "Hello, world."


async def test_adapter_is_a_chat_model():
    assert isinstance(OpenAICompatible("http://127.0.0.1:1/v1", "m"), ChatModel)


# -- the request ---------------------------------------------------------------------


async def test_request_maps_messages_and_sends_openai_tool_schemas(server):
    server.play(completion("ok"))
    tool = function_tool(add)
    call = ToolCall(id="call_1", name="add", arguments={"a": 1, "b": 2})
    messages = [
        Message(role="system", content="be brief"),
        Message(role="user", content="add 1 and 2"),
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", content='{"result": 3}', call_id="call_1", tool="add"),
        Message(role="assistant", content="3"),
    ]
    await model_for(server, params={"temperature": 0.0})(messages, [tool])
    body = server.seen[0].body
    assert body["model"] == "test-model"
    assert body["temperature"] == 0.0
    assert body["tools"] == [tool.schema("openai")]
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "add 1 and 2"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"result": 3}'},
        {"role": "assistant", "content": "3"},
    ]


async def test_tool_call_turn_sends_string_content_never_null(server):
    # llama-cpp-python's server answers 500 to "content": null and to a missing
    # "content" on the assistant turn that carried tool calls; "" works there
    # and on the OpenAI API.
    server.play(completion("ok"))
    call = ToolCall(id="c1", name="add", arguments={"a": 1, "b": 2})
    said = ToolCall(id="c2", name="add", arguments={"a": 3, "b": 4})
    messages = [
        Message(role="user", content="add"),
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", content='{"result": 3}', call_id="c1", tool="add"),
        Message(role="assistant", content="Adding again.", tool_calls=(said,)),
        Message(role="tool", content='{"result": 7}', call_id="c2", tool="add"),
    ]
    await model_for(server)(messages, [function_tool(add)])
    sent = [m for m in server.seen[0].body["messages"] if m["role"] == "assistant"]
    assert [m["content"] for m in sent] == ["", "Adding again."]


async def test_no_tools_means_no_tools_key(server):
    server.play(completion("ok"))
    await model_for(server)(HI, [])
    assert "tools" not in server.seen[0].body


async def test_api_key_and_extra_headers_are_sent(server):
    server.play(completion("ok"))
    model = model_for(server, api_key="sk-test", headers={"X-Team": "lion"})
    await model(HI, [])
    headers = {k.lower(): v for k, v in server.seen[0].headers.items()}
    assert headers["authorization"] == "Bearer sk-test"
    assert headers["x-team"] == "lion"


def test_repr_hides_the_api_key():
    model = OpenAICompatible("http://127.0.0.1:1/v1", "m", api_key="sk-secret")
    assert "sk-secret" not in repr(model)


# -- the agent loop --------------------------------------------------------------------


async def test_tool_call_round_trip_through_branch_run(server):
    server.play(completion(None, ("call_9", "add", '{"a": 2, "b": 3}')), completion("It is 5."))
    branch = Branch("You add numbers.", chat_model=model_for(server))
    branch.register(function_tool(add))
    answer = await branch.run("What is 2 + 3?")
    assert answer == "It is 5."
    second = server.seen[1].body["messages"]
    assert second[-2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_9",
                "type": "function",
                "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
            }
        ],
    }
    assert second[-1] == {"role": "tool", "tool_call_id": "call_9", "content": '{"result": 5}'}


async def test_malformed_tool_call_json_becomes_an_error_the_model_sees(server):
    ran: list[tuple[int, int]] = []

    def careful_add(a: int, b: int) -> int:
        """Add two integers."""
        ran.append((a, b))
        return a + b

    server.play(
        completion(None, ("call_bad", "careful_add", '{"a": 2 "b": 3}')),
        completion("Sorry, I will fix my JSON."),
    )
    branch = Branch(chat_model=model_for(server))
    branch.register(function_tool(careful_add))
    answer = await branch.run("2 + 3?")
    assert answer == "Sorry, I will fix my JSON."
    assert ran == []
    tool_message = server.seen[1].body["messages"][-1]
    assert tool_message["tool_call_id"] == "call_bad"
    error = json.loads(tool_message["content"])
    assert error["error_type"] == "ToolInputError"
    assert "were not valid JSON" in error["error"]
    assert 'Expecting "," delimiter at line 1 column 9' in error["error"]
    assert '{"a": 2 "b": 3}' in error["error"]


async def test_tool_call_arguments_that_are_not_an_object_are_malformed(server):
    server.play(completion(None, ("c", "add", "[2, 3]")))
    reply = await model_for(server)([Message(role="user", content="go")], [])
    assert reply.tool_calls[0].arguments == {}
    problem = reply.tool_calls[0].arguments_error
    assert problem == "expected a JSON object, got a JSON list; you sent: [2, 3]"


# -- retries, errors, timeouts ---------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_retryable_status_is_retried_then_succeeds(server, status):
    server.play(Reply(status, {"error": "busy"}), completion("recovered"))
    reply = await model_for(server)(HI, [])
    assert reply.text == "recovered"
    assert len(server.seen) == 2


async def test_persistent_500_gives_up_after_max_retries_plus_one_attempts(server):
    server.play(*[Reply(500, {"error": "down"})] * 5)
    with pytest.raises(ModelError) as caught:
        await model_for(server, max_retries=2)(HI, [])
    assert (caught.value.status, caught.value.attempts) == (500, 3)
    assert len(server.seen) == 3
    assert '"down"' in caught.value.body


async def test_backoff_doubles_between_attempts(server):
    server.play(*[Reply(500, {"error": "down"})] * 3)
    start = trio.current_time()
    with pytest.raises(ModelError):
        await model_for(server, max_retries=2, backoff=0.05)(HI, [])
    assert trio.current_time() - start >= 0.05 + 0.1


async def test_retry_after_header_sets_the_wait(server):
    server.play(Reply(429, {"error": "slow down"}, headers=(("Retry-After", "0.2"),)))
    server.play(completion("ok"))
    start = trio.current_time()
    await model_for(server, backoff=0)([Message(role="user", content="x")], [])
    assert trio.current_time() - start >= 0.2


async def test_client_error_is_raised_at_once_with_the_body(server):
    server.play(Reply(400, {"error": {"message": "unknown model 'test-model'"}}), completion("x"))
    with pytest.raises(ModelError, match="HTTP 400") as caught:
        await model_for(server)(HI, [])
    assert caught.value.status == 400
    assert "unknown model" in str(caught.value)
    assert isinstance(caught.value, LionfactoryError)
    assert len(server.seen) == 1


async def test_timeout_raises_a_typed_error_after_retries(server):
    server.play(Reply(hang=True), Reply(hang=True))
    model = model_for(server, timeout=0.2, max_retries=1)
    with pytest.raises(ModelTimeoutError, match=r"did not answer within 0\.2 s") as caught:
        await model(HI, [])
    assert caught.value.attempts == 2
    assert isinstance(caught.value, TimeoutError)


async def test_slow_first_attempt_is_retried(server):
    server.play(Reply(hang=True), completion("second time lucky"))
    # A second generous enough for a loaded machine: the replies are served in
    # arrival order, and the retry must not arrive before the first attempt.
    reply = await model_for(server, timeout=1.0)(HI, [])
    assert reply.text == "second time lucky"


async def test_refused_connection_raises_after_retries():
    with socket.socket() as probe:  # a port nobody listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = OpenAICompatible(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff=0.01)
    with pytest.raises(ModelError, match="could not talk to the chat model") as caught:
        await model(HI, [])
    assert (caught.value.status, caught.value.attempts) == (None, 2)


async def test_reply_that_is_not_json_raises(server):
    server.play(Reply(body=b"<html>proxy error</html>"))
    with pytest.raises(ModelError, match="not JSON"):
        await model_for(server)(HI, [])


async def test_reply_without_choices_raises(server):
    server.play(Reply(body={"error": "model is loading"}))
    with pytest.raises(ModelError, match="without choices"):
        await model_for(server)(HI, [])


# -- client lifetime and the transport seam --------------------------------------------


async def test_calls_inside_async_with_share_one_connection(server):
    server.play(completion("one"), completion("two"))
    async with model_for(server) as model:
        await model([Message(role="user", content="1")], [])
        await model([Message(role="user", content="2")], [])
    assert server.seen[0].client_port == server.seen[1].client_port


async def test_calls_outside_async_with_open_a_client_each(server):
    server.play(completion("one"), completion("two"))
    model = model_for(server)
    await model([Message(role="user", content="1")], [])
    await model([Message(role="user", content="2")], [])
    assert server.seen[0].client_port != server.seen[1].client_port


async def test_entering_twice_is_refused(server):
    model = model_for(server)
    async with model:
        with pytest.raises(RuntimeError, match="already open"):
            await model.__aenter__()


class RecordingTransport(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, json=completion("via transport").body)

    async def aclose(self) -> None:
        self.closed = True


async def test_given_transport_carries_the_requests_and_stays_open():
    transport = RecordingTransport()
    model = OpenAICompatible("https://models.invalid/v1", "m", transport=transport)
    reply = await model(HI, [])
    async with model:
        await model([Message(role="user", content="again")], [])
    assert reply.text == "via transport"
    assert [str(r.url) for r in transport.requests] == [
        "https://models.invalid/v1/chat/completions"
    ] * 2
    assert not transport.closed


# -- asyncio, imports, misuse ----------------------------------------------------------


def test_round_trip_under_asyncio(server):
    server.play(completion(None, ("call_1", "add", '{"a": 4, "b": 4}')), completion("8"))

    async def main() -> str:
        async with model_for(server) as model:
            branch = Branch(chat_model=model)
            branch.register(function_tool(add))
            return await branch.run("4 + 4?")

    assert asyncio.run(main()) == "8"
    assert server.seen[1].body["messages"][-1]["content"] == '{"result": 8}'


def test_importing_lionfactory_does_not_import_httpx():
    code = (
        "import sys, lionfactory, lionfactory.tools, lionfactory.testing\n"
        "assert 'httpx' not in sys.modules, 'httpx was imported'\n"
        "import lionfactory.models\n"
        "assert 'httpx' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("arguments", "options", "shown"),
    [
        (("127.0.0.1:8080/v1", "m"), {}, "'127.0.0.1:8080/v1'"),
        (("http://h/v1", " "), {}, "' '"),
        (("http://h/v1", "m"), {"timeout": 0}, "0"),
        (("http://h/v1", "m"), {"max_retries": -1}, "-1"),
        (("http://h/v1", "m"), {"backoff": -0.5}, "-0.5"),
        (("http://h/v1", "m"), {"params": {"stream": True}}, "['stream']"),
    ],
)
def test_misuse_fails_at_construction(arguments, options, shown):
    with pytest.raises(ValueError, match=re.escape(shown)):
        OpenAICompatible(*arguments, **options)


def test_transport_must_be_an_httpx_transport():
    with pytest.raises(TypeError, match=r"httpx\.AsyncBaseTransport"):
        OpenAICompatible("http://h/v1", "m", transport=object())  # type: ignore[arg-type]

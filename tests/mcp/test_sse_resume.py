"""A client that loses its HTTP stream mid-call reconnects with Last-Event-ID and gets the result.

Raw HTTP against a real ``lionfactory mcp serve --transport http``: the call's
POST stream is dropped right after its priming event, while the command still
runs; a GET with the session id and that event id delivers the result.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, aclosing
from pathlib import Path
from typing import Any

import httpx
import pytest

# Leaving a stream mid-way (the point of this test) leaves httpcore's
# response generators to the collector.
pytestmark = pytest.mark.filterwarnings(r"ignore:Async generator 'http(x|core)\.:ResourceWarning")

VERSION = "2025-11-25"


async def events(response: httpx.Response) -> AsyncIterator[dict[str, str]]:
    """The SSE events of `response`, each as its fields."""
    event: dict[str, str] = {}
    async for line in response.aiter_lines():
        if not line:
            if event:
                yield event
            event = {}
            continue
        name, _, value = line.partition(":")
        event[name] = event.get(name, "") + value.removeprefix(" ")


async def rpc(client: httpx.AsyncClient, url: str, headers: dict[str, str], body: Any) -> Any:
    reply = await client.post(url, json=body, headers=headers)
    assert reply.status_code in (200, 202), reply.text
    if reply.status_code == 202 or not reply.content:
        return None
    if reply.headers["content-type"].startswith("application/json"):
        return reply.json()
    for block in reply.text.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data:") and line[5:].strip():
                return json.loads(line[5:])
    return None


@pytest.mark.parametrize("dropped_after", [1, 2])
@pytest.mark.usefixtures("fast_progress")
async def test_a_dropped_call_stream_resumes_with_its_result(
    start_http: Callable[..., AbstractAsyncContextManager[str]],
    git_workspace: Path,
    dropped_after: int,
) -> None:
    """Dropped after the priming event, or after a progress notification too.

    The command runs until the test, resumed, lets it finish (a file it
    waits for), so the result can only come after the drop.
    """
    base = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with start_http() as url, httpx.AsyncClient(timeout=30) as client:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": VERSION,
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        first = await client.post(url, json=init, headers=base)
        session = first.headers["mcp-session-id"]
        headers = {**base, "mcp-session-id": session, "mcp-protocol-version": VERSION}
        await rpc(client, url, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/call",
            "params": {
                "name": "bash",
                "arguments": {"command": "until [ -e go ]; do sleep 0.02; done; echo resumed"},
                "_meta": {"progressToken": "p"},
            },
        }
        seen: list[dict[str, str]] = []
        async with client.stream("POST", url, json=call, headers=headers) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            async with aclosing(events(stream)) as received:
                async for event in received:
                    seen.append(event)
                    if len(seen) == dropped_after:
                        break  # the connection is lost mid-call
        assert "id" in seen[-1] and "retry" in seen[0], seen
        assert not any(
            '"id": 7' in e.get("data", "") or '"id":7' in e.get("data", "") for e in seen
        )
        resume = {
            "Accept": "text/event-stream",
            "mcp-session-id": session,
            "mcp-protocol-version": VERSION,
            "last-event-id": seen[-1]["id"],
        }
        result = None
        async with client.stream("GET", url, headers=resume) as again:
            assert again.status_code == 200
            (git_workspace / "go").touch()
            async with aclosing(events(again)) as received:
                async for event in received:
                    data = json.loads(event["data"]) if event.get("data") else {}
                    if data.get("id") == 7:
                        result = data["result"]
                        break
        assert result is not None
        assert not result["isError"], result
        assert "resumed" in json.dumps(result)

"""The workspace's files as MCP resources, through the official client over stdio and HTTP."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import make_git_workspace, serving_http
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from lionfactory.mcp._resources import WorkspaceResources

BINARY = bytes(range(256)) * 4

# The SDK's HTTP client leaves its response generators to the collector.
pytestmark = pytest.mark.filterwarnings(r"ignore:Async generator 'http(x|core)2\.:ResourceWarning")


@pytest.fixture
def project(git_workspace: Path) -> Path:
    """The git workspace with what a real project holds beside its sources."""
    return fill_project(git_workspace)


@pytest.fixture(scope="module")
def served_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`project` for the tests that only read it: one for the module and its servers."""
    return fill_project(make_git_workspace(tmp_path_factory.mktemp("served") / "repo"))


@pytest.fixture(scope="module")
def served_http_url(served_project: Path) -> Iterator[str]:
    """One HTTP server on `served_project` for the module (each test opens its own session)."""
    with serving_http(served_project) as url:
        yield url


def fill_project(root: Path) -> Path:
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('hi')\n", encoding="utf-8")
    (root / "src" / "data.bin").write_bytes(BINARY)
    (root / ".env").write_text("API_KEY=secret\n", encoding="utf-8")
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / ".venv" / "pyvenv.cfg").write_text("home = /usr\n", encoding="utf-8")
    (root / ".venv" / "lib" / "site.py").write_text("x = 1\n", encoding="utf-8")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_bytes(b"\x7fELF")
    (root / ".gitignore").write_text(".venv/\nbuild/\n", encoding="utf-8")
    (root / "deploy.txt").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nx\n", encoding="utf-8")
    os.symlink("notes.txt", root / "link.txt")
    return root


def serve_command(workspace: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "lionfactory", "mcp", "serve", "--workspace", str(workspace)]


@pytest.fixture
def stdio(project: Path) -> Callable[..., StdioServerParameters]:
    def parameters(*extra: str) -> StdioServerParameters:
        command = [*serve_command(project), *extra]
        return StdioServerParameters(command=command[0], args=command[1:])

    return parameters


async def all_names(client: Client) -> list[str]:
    names: list[str] = []
    cursor = None
    while True:
        page = await client.list_resources(cursor=cursor, cache_mode="bypass")
        names += [resource.name for resource in page.resources]
        cursor = page.next_cursor
        if cursor is None:
            return names


EXPECTED = [".gitignore", "deploy.txt", "notes.txt", "src/app.py", "src/data.bin"]


@pytest.fixture(params=["stdio", "http"])
async def client(request: pytest.FixtureRequest, served_project: Path) -> AsyncIterator[Client]:
    """A session on `served_project`: its own stdio server, or the module's HTTP server."""
    if request.param == "stdio":
        command = serve_command(served_project)
        server = StdioServerParameters(command=command[0], args=command[1:])
        async with Client(server, mode="legacy") as connected:
            yield connected
        return
    url = request.getfixturevalue("served_http_url")
    async with Client(url, mode="legacy") as connected:
        yield connected


async def test_the_listing_is_the_project_content_only(client: Client) -> None:
    """No .env, no .venv/ or build/ (ignored), no .git, no symlink."""
    names = await all_names(client)
    assert names == EXPECTED


async def test_a_text_file_reads_as_text_with_its_mime_type(
    client: Client, served_project: Path
) -> None:
    uri = (served_project / "src" / "app.py").as_uri()
    read = await client.read_resource(uri)
    (content,) = read.contents
    assert getattr(content, "text", None) == "print('hi')\n"
    assert content.mime_type == "text/x-python"
    assert str(content.uri) == uri


async def test_a_binary_file_reads_as_a_blob(client: Client, served_project: Path) -> None:
    read = await client.read_resource((served_project / "src" / "data.bin").as_uri())
    (content,) = read.contents
    assert base64.b64decode(getattr(content, "blob", "")) == BINARY
    assert content.mime_type == "application/octet-stream"


@pytest.mark.parametrize(
    ("relative", "reason"),
    [
        (".env", "protected"),
        (".git/config", "not a file resource"),
        ("link.txt", "symbolic link"),
        ("deploy.txt", "private key"),
        ("../outside.txt", "outside the workspace"),
        ("src", "is a directory"),
        ("missing.txt", "cannot read"),
    ],
)
async def test_what_the_seam_refuses_is_not_found(
    client: Client, served_project: Path, relative: str, reason: str
) -> None:
    uri = (served_project / relative).as_uri() if not relative.startswith("..") else None
    uri = uri or "file://" + str(served_project) + "/" + relative
    with pytest.raises(MCPError, match=reason) as raised:
        await client.read_resource(uri)
    assert raised.value.error.code == -32002


async def test_the_template_covers_any_path_of_the_workspace(
    client: Client, served_project: Path
) -> None:
    templates = await client.list_resource_templates()
    (template,) = templates.resource_templates
    assert template.uri_template == served_project.as_uri() + "/{+path}"
    # An ignored file is not listed, but may be read by its path.
    read = await client.read_resource((served_project / ".venv" / "lib" / "site.py").as_uri())
    assert getattr(read.contents[0], "text", None) == "x = 1\n"


async def test_the_server_declares_resources_and_no_resources_turns_them_off(
    stdio: Callable[..., StdioServerParameters],
) -> None:
    async with Client(stdio(), mode="legacy") as client:
        assert client.server_capabilities.resources is not None
    async with Client(stdio("--no-resources"), mode="legacy") as client:
        assert client.server_capabilities.resources is None
        with pytest.raises(MCPError):
            await client.list_resources()


async def test_pages_follow_each_other_even_when_files_change_between_them(
    project: Path,
) -> None:
    for i in range(30):
        (project / "src" / f"m{i:02}.py").write_text("\n", encoding="utf-8")
    served = WorkspaceResources.at(project, page_size=7)
    first = await served.list({})
    assert len(first["resources"]) == 7 and first["nextCursor"] == first["resources"][-1]["name"]
    (project / "src" / "m00.py").unlink()  # already listed: the next page does not shift
    (project / "aaa.txt").write_text("new\n", encoding="utf-8")  # before the cursor: not seen
    names = [r["name"] for r in first["resources"]]
    cursor = first["nextCursor"]
    while cursor is not None:
        page = await served.list({"cursor": cursor})
        names += [r["name"] for r in page["resources"]]
        cursor = page.get("nextCursor")
    expected = list(EXPECTED)
    expected += [f"src/m{i:02}.py" for i in range(30)]
    assert names == sorted(expected, key=lambda n: tuple(n.split("/")))


async def test_a_file_over_the_cap_is_refused_with_advice(project: Path) -> None:
    from lionfactory.mcp._resources import ResourceError

    served = WorkspaceResources.at(project, max_read_bytes=100)
    (project / "big.txt").write_text("x" * 101, encoding="utf-8")
    with pytest.raises(ResourceError, match="reader tool"):
        await served.read({"uri": (project / "big.txt").as_uri()})


async def test_over_stdio_a_subscribed_file_and_the_listing_report_their_changes(
    project: Path,
) -> None:
    """Raw JSON-RPC on a real server: ``resources/updated`` and ``resources/list_changed``."""
    command = serve_command(project)
    async with await anyio.open_process(command, stderr=subprocess.DEVNULL) as process:
        assert process.stdin is not None and process.stdout is not None
        buffer = b""

        async def send(message: dict[str, object]) -> None:
            assert process.stdin is not None
            await process.stdin.send(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

        async def receive() -> dict[str, Any]:
            nonlocal buffer
            assert process.stdout is not None
            while b"\n" not in buffer:
                buffer += await process.stdout.receive()
            line, buffer = buffer.split(b"\n", 1)
            reply: dict[str, Any] = json.loads(line)
            return reply

        with anyio.fail_after(60):
            await send(
                {"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
            )
            capabilities = (await receive())["result"]["capabilities"]["resources"]
            assert capabilities == {"subscribe": True, "listChanged": True}
            uri = (project / "notes.txt").as_uri()
            await send({"id": 2, "method": "resources/subscribe", "params": {"uri": uri}})
            assert (await receive()) == {"jsonrpc": "2.0", "id": 2, "result": {}}
            await send({"id": 5, "method": "resources/list", "params": {}})
            assert len((await receive())["result"]["resources"]) == len(EXPECTED)
            (project / "notes.txt").write_text("changed\n", encoding="utf-8")
            assert await receive() == {
                "jsonrpc": "2.0",
                "method": "notifications/resources/updated",
                "params": {"uri": uri},
            }
            (project / "src" / "new.py").write_text("\n", encoding="utf-8")
            note = await receive()
            assert note["method"] == "notifications/resources/list_changed"
            (project / ".venv" / "lib" / "ignored.py").write_text("\n", encoding="utf-8")
            await send({"id": 3, "method": "resources/unsubscribe", "params": {"uri": uri}})
            (project / "notes.txt").write_text("again\n", encoding="utf-8")
            await send({"id": 4, "method": "ping"})
            # Unsubscribed, and an ignored file is not a listing change: the
            # next message is the answer to the unsubscribe, then the ping's.
            assert (await receive())["id"] == 3
            assert (await receive())["id"] == 4
        process.kill()


async def test_a_watch_with_nothing_to_watch_starts_no_poll(
    project: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: object
) -> None:
    from lionfactory.mcp._resources import ResourceWatch

    polls: list[int] = []
    real_poll = ResourceWatch._poll

    def counted(self: ResourceWatch) -> tuple[list[str], bool]:
        polls.append(1)
        return real_poll(self)

    monkeypatch.setattr(ResourceWatch, "_poll", counted)
    watch = ResourceWatch(WorkspaceResources.at(project))
    assert await watch.changes() == ([], False)
    assert polls == []
    uri = (project / "src" / "app.py").as_uri()
    watch.subscribe({"uri": uri})
    (project / "src" / "app.py").write_text("changed\n", encoding="utf-8")
    assert await watch.changes() == ([uri], False)
    assert polls == [1]

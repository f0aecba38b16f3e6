"""``lionfactory mcp serve`` driven by the TypeScript SDK's client, over stdio and HTTP.

The TypeScript SDK checks every ``structuredContent`` against the tool's
advertised ``outputSchema``, error results included, and throws when they do
not match: the client of most desktop hosts and agent frameworks in Node.
The SDK is installed with npm (a pinned version) into a cache folder once;
without npm the tests skip, except under CI, where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import pytest
from _test_helpers import kept_folder

TS_SDK = "@modelcontextprotocol/sdk@1.32.2"
SCRIPT = Path(__file__).with_name("ts") / "client.mjs"
SOURCE_ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(scope="session")
def ts_client() -> Path:
    """A folder with the pinned TypeScript SDK installed and the driver script beside it."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        if os.environ.get("CI"):
            pytest.fail("node and npm are needed for the TypeScript SDK client tests under CI")
        pytest.skip("node/npm not found: the TypeScript SDK client tests need them")
    with kept_folder("npm-" + TS_SDK.replace("/", "+").replace("@", "")) as folder:
        marker = folder / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json"
        if not marker.exists():
            (folder / "package.json").write_text('{"private": true, "type": "module"}\n')
            subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--silent", TS_SDK],
                cwd=folder,
                check=True,
                timeout=600,
            )
        # The script must sit beside node_modules: ES modules resolve from their own folder.
        shutil.copyfile(SCRIPT, folder / "client.mjs")
    return folder


async def drive(folder: Path, *target: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": SOURCE_ROOT}
    with anyio.fail_after(120):
        done = await anyio.run_process(
            ["node", str(folder / "client.mjs"), *target], env=env, stderr=subprocess.PIPE
        )
    out: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return out


def check(seen: dict[str, Any]) -> None:
    assert "reader" in seen["tools"]
    assert seen["read"]["structured"]["content"] == "1\talpha\n2\tbeta"
    # Invalid arguments: the error text, not an exception about the output schema.
    assert "threw" not in seen["invalid"], seen["invalid"]
    assert seen["invalid"]["isError"] is True
    assert seen["invalid"]["text"].startswith("Invalid arguments for tool 'reader':")
    # Typed failures keep their structured response (it matches the schema).
    assert seen["refused"]["isError"] is True
    assert seen["refused"]["structured"]["success"] is False
    assert seen["failed"]["isError"] is True
    assert seen["failed"]["structured"]["return_code"] == 1


async def test_the_typescript_client_over_stdio(ts_client: Path, git_workspace: Path) -> None:
    command = [sys.executable, "-m", "lionfactory", "mcp", "serve"]
    seen = await drive(ts_client, "stdio", *command, "--workspace", str(git_workspace))
    check(seen)


@pytest.mark.filterwarnings(r"ignore:Async generator 'http(x|core)2\.:ResourceWarning")
async def test_the_typescript_client_over_http(
    ts_client: Path, start_http: Callable[..., AbstractAsyncContextManager[str]]
) -> None:
    async with start_http() as url:
        seen = await drive(ts_client, "http", url)
    check(seen)

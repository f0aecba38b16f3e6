"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``) vs ``mcp serve``.

The suite is installed with npm, pinned, into a cache directory of the test
run (pytest's cache, else a temporary directory), once. Without npm the test
is skipped with a message saying so, except in CI (``CI=true``), where a
missing npm is a failure: CI must run the suite.

Applicable scenarios are the ones about what every server does; the others
call test tools of the suite's reference server (``test_simple_text``,
``test_reconnection``, prompts) that a lionfactory server does not have.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _test_helpers import kept_folder

VERSION = "0.1.13"
PACKAGE = f"@modelcontextprotocol/conformance@{VERSION}"

APPLICABLE = (
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "server-sse-polling",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
)
NEEDS_THE_SUITES_TOOL = {"server-sse-disconnect-resume"}  # calls `test_reconnection`

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def conformance() -> Path:
    """The suite's command, installed into a folder kept across runs on first use."""
    npm = shutil.which("npm")
    if npm is None:
        message = f"npm is not installed: the MCP conformance suite ({PACKAGE}) needs it"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + "; CI must run it (install nodejs and npm)")
        pytest.skip(message)
    with kept_folder(f"mcp-conformance-{VERSION}") as prefix:
        command = prefix / "node_modules" / ".bin" / "conformance"
        package = prefix / "node_modules" / "@modelcontextprotocol" / "conformance"
        installed = package / "package.json"
        if not (installed.is_file() and json.loads(installed.read_text())["version"] == VERSION):
            subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), PACKAGE],
                check=True,
                capture_output=True,
                timeout=600,
            )
    return command


@pytest.fixture
async def server_url(git_workspace: Path) -> AsyncIterator[str]:
    command = [
        sys.executable,
        "-m",
        "lionfactory",
        "mcp",
        "serve",
        "--workspace",
        str(git_workspace),
    ]
    command += ["--transport", "http", "--port", "0"]
    async with await anyio.open_process(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    ) as process:
        assert process.stderr is not None
        seen = b""
        with anyio.fail_after(30):
            while b"\n" not in seen:
                seen += await process.stderr.receive()
        try:
            yield seen.decode().splitlines()[0].rsplit(" ", 1)[1]
        finally:
            process.terminate()
            with anyio.fail_after(10):
                await process.wait()


async def run_scenario(command: Path, url: str, scenario: str, out: Path) -> list[dict[str, Any]]:
    done = await anyio.run_process(
        [str(command), "server", "--url", url, "--scenario", scenario, "-o", str(out)],
        check=False,
    )
    (checks_file,) = out.glob(f"server-{scenario}-*/checks.json")
    checks: list[dict[str, Any]] = json.loads(checks_file.read_text())
    assert done.returncode == 0, (scenario, checks)
    return checks


@pytest.mark.parametrize("scenario", APPLICABLE)
async def test_the_scenario_passes_without_failures_or_warnings(
    conformance: Path, server_url: str, scenario: str, tmp_path: Path
) -> None:
    checks = await run_scenario(conformance, server_url, scenario, tmp_path)
    judged = [c for c in checks if c["status"] != "INFO" and c["id"] not in NEEDS_THE_SUITES_TOOL]
    assert judged, checks
    assert all(c["status"] == "SUCCESS" for c in judged), [
        (c["id"], c["status"], c.get("errorMessage")) for c in judged if c["status"] != "SUCCESS"
    ]


async def test_sse_streams_are_primed_with_an_event_id_and_a_retry_field(
    conformance: Path, server_url: str, tmp_path: Path
) -> None:
    checks = {
        c["id"]: c
        for c in await run_scenario(conformance, server_url, "server-sse-polling", tmp_path)
    }
    assert checks["server-sse-priming-event"]["status"] == "SUCCESS"
    assert checks["server-sse-retry-field"]["status"] == "SUCCESS"

"""No process a confined command can see holds a secret: the environment policy reaches them all.

Each test sets a secret-looking variable in the host's environment, starts
the branch's confined processes (bwrap or Landlock, with a PID namespace per
command or without, as where the kernel refuses one) and reads
``/proc/*/environ`` of every process visible from inside.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import mechanism_params

from lionfactory import Branch
from lionfactory._os.environment import EnvPolicy
from lionfactory._os.isolation import Isolation, workspace_isolation
from lionfactory._os.supervisor import Supervisor, run_supervised
from lionfactory.tools.bash import bash_tool
from lionfactory.tools.jobs import jobs_tool

SECRET_NAME = "OPENAI_API_KEY"
SECRET_VALUE = "sk-lionfactory-canary-9f3e"

# Reads every environ it can, reports which pids it could read and any
# holding the secret's name or value.
READER = """
import json, os
read, leaks = [], []
for name in os.listdir("/proc"):
    if not name.isdigit() or int(name) == os.getpid():
        continue
    try:
        data = open(f"/proc/{name}/environ", "rb").read()
    except OSError:
        continue
    read.append(int(name))
    if b"OPENAI_API_KEY" in data or b"sk-lionfactory-canary" in data:
        leaks.append(int(name))
print(json.dumps({"read": read, "leaks": leaks}))
"""


@pytest.fixture(autouse=True)
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET_NAME, SECRET_VALUE)


@pytest.fixture(params=mechanism_params())
def isolation(request: pytest.FixtureRequest, tmp_path: Path) -> Isolation:
    root = tmp_path / "ws"
    root.mkdir()
    return workspace_isolation(request.param, root, env_policy=EnvPolicy())


@pytest.fixture(params=[True, False], ids=["per-command-namespaces", "no-namespaces"])
def supervisor(request: pytest.FixtureRequest, isolation: Isolation) -> Iterator[Supervisor]:
    started = Supervisor.start(
        isolation, isolation.policy.writable[0], command_namespaces=request.param
    )
    try:
        yield started
    finally:
        started.close()


def sleeper_in_background(supervisor: Supervisor) -> Any:
    """Start a long command through the supervisor, so more processes are inside to read."""
    read, write = os.pipe()
    try:
        return supervisor.submit(
            [sys.executable, "-c", "import time; time.sleep(600)"],
            cwd=supervisor.isolation.policy.writable[0],
            env=None,
            stdout=write,
            stderr=write,
        )
    finally:
        os.close(read)
        os.close(write)


async def test_no_process_inside_the_supervisors_sandbox_holds_the_secret(
    supervisor: Supervisor,
) -> None:
    report = sleeper_in_background(supervisor)
    try:
        result = await run_supervised(
            supervisor,
            [sys.executable, "-c", READER],
            cwd=supervisor.isolation.policy.writable[0],
            timeout=60,
            env=None,
            max_bytes=100_000,
        )
    finally:
        report.close()
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    # Something besides the reader was read (in the flat case the supervisor,
    # bwrap's init, the prepared leader): the test sees what it is about.
    assert found["read"], found
    assert found["leaks"] == [], found


@pytest.mark.parametrize("mechanism", mechanism_params())
async def test_no_process_a_confined_bash_sees_holds_the_secret(
    mechanism: str, tmp_path: Path
) -> None:
    """The route users take: a branch's bash, a background job, then a reader."""
    branch = Branch()
    branch.register(bash_tool(workspace_root=tmp_path, isolation=mechanism, env_policy=EnvPolicy()))
    branch.register(jobs_tool())
    try:
        started = await branch.act(
            "bash",
            {
                "command": f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(600)'",
                "background": True,
            },
        )
        assert started.ok, started.error
        script = tmp_path / "reader.py"
        script.write_text(READER)
        result = await branch.act("bash", {"command": f"{shlex.quote(sys.executable)} {script}"})
        assert result.ok, result.error
        found = json.loads(result.result["stdout"])
        assert found["read"], found
        assert found["leaks"] == [], found
        env = await branch.act("bash", {"command": "env"})
        assert SECRET_NAME not in env.result["stdout"]
    finally:
        await branch.aclose()

"""Unconfined background jobs live in a PID namespace where the kernel allows one.

A ``setsid`` child or a double-forked daemon of a job dies with the job: on
``jobs kill``, on the branch's close, and when the job's own command ends.
"""

from __future__ import annotations

import shlex
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import eventually, processes_tagged

from lionfactory import Branch
from lionfactory._os.isolation import containment
from lionfactory.tools.bash import bash_tool
from lionfactory.tools.jobs import jobs_tool

PY = shlex.quote(sys.executable)

pytestmark = pytest.mark.skipif(
    containment() == "group", reason="no PID namespace for unconfined processes here"
)


def escaping_daemon(tag: str, *, then_exit: bool) -> str:
    """A job whose grandchild leaves the job's session (setsid) and sleeps."""
    script = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        os.execvp('sleep', ['sleep', '600', '{tag}'])\n"
        "    os._exit(0)\n"
        "print('up', flush=True)\n" + ("" if then_exit else "time.sleep(600)\n")
    )
    return f"{PY} -c {shlex.quote(script)}"


async def act(branch: Branch, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await branch.act(tool, arguments)
    assert result.ok, result.error
    return dict(result.result)


@pytest.mark.parametrize("how", ["kill", "aclose", "job-ends"])
async def test_a_daemon_that_left_the_session_dies_with_its_job(how: str, tmp_path: Path) -> None:
    branch = Branch()
    branch.register(bash_tool(workspace_root=tmp_path, isolation="none", shell=False))
    branch.register(jobs_tool())
    tag = f"lf-daemon-{uuid.uuid4().hex}"
    try:
        job = await act(
            branch,
            "bash",
            command=escaping_daemon(tag, then_exit=how == "job-ends"),
            background=True,
        )
        await act(branch, "jobs", action="wait", job_id=job["job_id"], until="^up$")
        if how == "job-ends":
            await act(branch, "jobs", action="wait", job_id=job["job_id"], timeout=30_000)
            await act(branch, "jobs", action="list")
        else:
            await eventually(lambda: bool(processes_tagged(tag)), 30)
            if how == "kill":
                await act(branch, "jobs", action="kill", job_id=job["job_id"])
            else:
                await branch.aclose()
        await eventually(lambda: not processes_tagged(tag), 30)
    finally:
        await branch.aclose()

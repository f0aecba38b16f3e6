"""Unconfined background jobs live in a PID namespace where the kernel allows one.

A ``setsid`` child or a double-forked daemon of a job dies with the job: on
``jobs kill``, on the branch's close, and when the job's own command ends.
The job starts under the unconfined supervisor of the owner's foreground
calls (so it dies with that supervisor when this process dies); where that
supervisor cannot serve it, directly in a bwrap PID namespace of its own.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import eventually, processes_tagged

from lionfactory import Branch
from lionfactory._os.isolation import containment, workspace_isolation
from lionfactory._os.supervisor import Supervisor
from lionfactory._tool import Tool
from lionfactory.tools.bash import bash_tool
from lionfactory.tools.jobs import REGISTRY, BranchJobs, jobs_tool

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
        # Under the supervisor of the branch's foreground calls (its own namespace there).
        assert _job(branch, job["job_id"]).supervisor is not None
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


def _job(branch: Branch | None, job_id: str) -> Any:
    """The job table's record of `job_id` (the branch's, else the calls' outside any branch)."""
    return REGISTRY.tables[None if branch is None else branch.id].jobs[job_id]


def _supervisor_of(tool: Tool, branch: Branch | None) -> Supervisor:
    """The unconfined supervisor the tool's foreground calls use: the branch's, else its own."""
    handler: Any = tool.handler
    table = handler.owned.table if branch is None else REGISTRY.tables[branch.id]
    supervisor: Supervisor = table.supervisors[handler.isolation]
    return supervisor


def _ancestors(pid: int) -> list[int]:
    """The parent chain of `pid` as the host sees it, up to init."""
    chain = []
    while pid > 1:
        status = Path(f"/proc/{pid}/status").read_text()
        pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        chain.append(pid)
    return chain


def sleeper(tag: str) -> str:
    return f"{PY} -c \"import time; print('up', flush=True); time.sleep(600)\" {tag}"


async def call(tool: Tool, branch: Branch | None, **arguments: Any) -> dict[str, Any]:
    """`tool`'s answer, on `branch` when given, else outside any branch."""
    if branch is None:
        return dict(await tool(**arguments))
    return await act(branch, tool.name, **arguments)


@pytest.mark.parametrize("on_branch", [True, False], ids=["branch", "no-branch"])
async def test_a_standalone_job_runs_under_the_supervisor_of_the_foreground_calls(
    on_branch: bool, tmp_path: Path
) -> None:
    """In a PID namespace of its own, a descendant of that supervisor; jobs works as ever."""
    branch = Branch() if on_branch else None
    bash, jobs = bash_tool(workspace_root=tmp_path), jobs_tool()
    if branch is not None:
        branch.register(bash)
        branch.register(jobs)
        bash, jobs = branch.tools["bash"], branch.tools["jobs"]
    tag = f"lf-job-{uuid.uuid4().hex}"
    try:
        started = await call(bash, branch, command=sleeper(tag), background=True)
        job_id = started["job_id"]
        waited = await call(jobs, branch, action="wait", job_id=job_id, until="^up$")
        assert waited["matched"] is True and waited["running"] is True, waited
        supervisor = _supervisor_of(bash, branch)
        assert _job(branch, job_id).supervisor is supervisor
        (pid,) = processes_tagged(tag)
        assert os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
        # Its own namespace, inside the supervisor's (bwrap's): not the supervisor's either.
        assert os.readlink(f"/proc/{pid}/ns/pid") != os.readlink(
            f"/proc/{supervisor.popen.pid}/ns/pid"
        )
        assert supervisor.popen.pid in _ancestors(pid)
        # A foreground call of the same owner still runs through that supervisor.
        again = await call(bash, branch, command="echo again")
        assert again["stdout"] == "again\n" and _supervisor_of(bash, branch) is supervisor
        read = await call(jobs, branch, action="output", job_id=job_id)
        assert read["output"] == "up\n" and read["running"] is True, read
        killed = await call(jobs, branch, action="kill", job_id=job_id)
        assert killed["running"] is False and killed["return_code"] == -9, killed
        assert processes_tagged(tag) == []
        ended = await call(bash, branch, command=f"{PY} -c 'raise SystemExit(3)'", background=True)
        done = await call(jobs, branch, action="wait", job_id=ended["job_id"], timeout=60_000)
        assert done["matched"] is True and done["return_code"] == 3, done
    finally:
        if branch is not None:
            await branch.aclose()
        for pid in processes_tagged(tag):
            os.kill(pid, 9)


async def test_on_timeout_background_goes_on_under_the_supervisor(tmp_path: Path) -> None:
    branch = Branch()
    branch.register(bash_tool(workspace_root=tmp_path))
    branch.register(jobs_tool())
    tag = f"lf-late-{uuid.uuid4().hex}"
    try:
        moved = await act(
            branch, "bash", command=sleeper(tag), timeout=300, on_timeout="background"
        )
        assert moved["timed_out"] is True and moved["job_id"], moved
        supervisor = _supervisor_of(branch.tools["bash"], branch)
        assert _job(branch, moved["job_id"]).supervisor is supervisor
        await act(branch, "jobs", action="wait", job_id=moved["job_id"], until="^up$")
        await act(branch, "jobs", action="kill", job_id=moved["job_id"])
        assert processes_tagged(tag) == []
        # One that ends in time is a plain answer, and no job is kept.
        quick = await act(branch, "bash", command="echo quick", on_timeout="background")
        assert quick["stdout"] == "quick\n" and quick["return_code"] == 0, quick
        assert quick["job_id"] is None
        assert [job["job_id"] for job in (await act(branch, "jobs", action="list"))["jobs"]] == [
            moved["job_id"]
        ]
    finally:
        await branch.aclose()


@pytest.mark.parametrize("refused", ["not-prepared", "no-namespaces"])
async def test_where_the_supervisor_cannot_serve_a_job_starts_directly(
    refused: str, tmp_path: Path
) -> None:
    """The fallback: the job's own PID namespace (bwrap's), as before; its daemon dies with it."""
    tool = bash_tool(workspace_root=tmp_path, isolation="none", shell=False)
    handler: Any = tool.handler
    if refused == "not-prepared":
        handler.owned.prepared = False
    else:
        # What a kernel refusing namespaces inside the supervisor's looks like to it.
        handler.owned.table.supervisors[handler.isolation] = Supervisor.start(
            handler.isolation, tmp_path, command_namespaces=False
        )
    jobs = jobs_tool()
    tag = f"lf-direct-{uuid.uuid4().hex}"
    try:
        job = await tool(command=escaping_daemon(tag, then_exit=False), background=True)
        await jobs(action="wait", job_id=job["job_id"], until="^up$")
        record = _job(None, job["job_id"])
        assert record.supervisor is None and isinstance(record.popen, subprocess.Popen)
        assert handler.owned.prepared is False
        # The refused supervisor is not kept for later calls.
        assert handler.owned.table.supervisors.get(handler.isolation) is None
        await eventually(lambda: bool(processes_tagged(tag)), 30)
        killed = await jobs(action="kill", job_id=job["job_id"])
        assert killed["running"] is False
        await eventually(lambda: not processes_tagged(tag), 30)
    finally:
        for pid in processes_tagged(tag):
            os.kill(pid, 9)
        handler.owned.table.close()


def test_a_job_whose_supervisor_is_gone_starts_directly(tmp_path: Path) -> None:
    """The supervisor closed before the job's request reached it: the job runs all the same."""
    isolation = workspace_isolation("none", tmp_path)
    gone = Supervisor.start(isolation, tmp_path)
    gone.close()
    table = BranchJobs(None)
    tag = f"lf-gone-{uuid.uuid4().hex}"
    try:
        job = table.start(
            "a sleeper",
            [sys.executable, "-c", "import time; time.sleep(600)", tag],
            cwd=tmp_path,
            env=None,
            isolation=isolation,
            supervisor=gone,
        )
        assert job.supervisor is None and isinstance(job.popen, subprocess.Popen)
        # Polled: while bwrap execs the command, no argv of the job's shows the tag.
        deadline = time.monotonic() + 30
        while not processes_tagged(tag) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert job.running and processes_tagged(tag)
        table.kill(job)
        assert not job.running and processes_tagged(tag) == []
    finally:
        table.close()

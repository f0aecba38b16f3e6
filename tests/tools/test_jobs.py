"""The jobs tool: background commands started by bash, read, awaited and killed per branch."""

from __future__ import annotations

import os
import shlex
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from _test_helpers import eventually, processes_tagged

from lionfactory import Branch
from lionfactory._os.isolation import mechanism_problem
from lionfactory.tools import jobs as jobs_module
from lionfactory.tools.bash import HEAD_BYTES, bash_tool
from lionfactory.tools.jobs import MAX_JOBS, jobs_tool

PY = shlex.quote(sys.executable)
SLEEPER = f"{PY} -c \"import time; print('up', flush=True); time.sleep(600)\""


def mechanisms() -> list[Any]:
    params = [pytest.param("none")]
    for name in ("bwrap", "landlock"):
        problem = mechanism_problem(name)
        skip = pytest.mark.skipif(problem is not None, reason=f"{name}: {problem}")
        params.append(pytest.param(name, marks=skip))
    return params


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def make_branch(workspace: Path, **options: Any) -> Branch:
    branch = Branch()
    branch.register(bash_tool(workspace_root=workspace, **options))
    branch.register(jobs_tool())
    return branch


async def act(branch: Branch, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await branch.act(tool, arguments)
    assert result.ok, result.error
    return dict(result.result)


def tagged_sleeper() -> tuple[str, str]:
    """A sleeper command carrying a unique tag in its argv, and the tag."""
    tag = f"lf-tag-{uuid.uuid4().hex}"
    return f"{SLEEPER} {tag}", tag


async def test_background_answers_at_once_with_a_job_id(workspace: Path) -> None:
    branch = make_branch(workspace)
    with trio.fail_after(30):
        started = await act(branch, "bash", command=SLEEPER, background=True)
    assert started["job_id"].startswith("job-") and started["return_code"] is None
    waited = await act(branch, "jobs", action="wait", job_id=started["job_id"], until="^up$")
    assert waited["matched"] is True and waited["running"] is True
    await branch.aclose()


async def test_a_started_job_is_not_a_failed_call_and_a_failed_start_is(workspace: Path) -> None:
    branch = make_branch(workspace)
    started = await branch.act("bash", {"command": SLEEPER, "background": True})
    # It did what was asked; MCP's isError and the CLI's exit status follow `outcome`.
    assert started.outcome == "done", started.result
    never = await branch.act("bash", {"command": "no-such-program-x", "background": True})
    assert never.outcome == "failed", never.result
    moved = await branch.act(
        "bash", {"command": SLEEPER, "timeout": 300, "on_timeout": "background"}
    )
    assert moved.result["job_id"] and moved.outcome == "done", moved.result
    await branch.aclose()


async def test_output_and_return_code_once_done(workspace: Path) -> None:
    branch = make_branch(workspace)
    started = await act(
        branch, "bash", command=f"{PY} -c \"print('out'); raise SystemExit(3)\"", background=True
    )
    job = started["job_id"]
    done = await act(branch, "jobs", action="wait", job_id=job, timeout=60_000)
    assert done["matched"] is True and done["return_code"] == 3
    read = await act(branch, "jobs", action="output", job_id=job)
    assert read["output"] == "out\n" and read["next_offset"] == 4 and read["running"] is False
    listed = await act(branch, "jobs", action="list")
    assert [j["job_id"] for j in listed["jobs"]] == [job]
    assert listed["jobs"][0]["return_code"] == 3
    await branch.aclose()


@pytest.mark.parametrize("mechanism", mechanisms())
async def test_kill_leaves_no_process(workspace: Path, mechanism: str) -> None:
    branch = make_branch(workspace, isolation=mechanism)
    sleeper, tag = tagged_sleeper()
    # Under a shell the job starts a second process of its own; kill ends both.
    command = f"{sleeper} & {sleeper}" if mechanism != "none" else sleeper
    started = await act(branch, "bash", command=command, background=True)
    job = started["job_id"]
    await act(branch, "jobs", action="wait", job_id=job, until="up")
    assert processes_tagged(tag)
    killed = await act(branch, "jobs", action="kill", job_id=job)
    assert killed["running"] is False
    assert processes_tagged(tag) == []
    await branch.aclose()


@pytest.mark.parametrize("mechanism", mechanisms())
async def test_aclose_kills_every_job_and_removes_kept_output(
    workspace: Path, mechanism: str
) -> None:
    branch = make_branch(workspace, isolation=mechanism)
    sleeper, tag = tagged_sleeper()
    for _ in range(3):
        started = await act(branch, "bash", command=sleeper, background=True)
        await act(branch, "jobs", action="wait", job_id=started["job_id"], until="up")
    assert len(processes_tagged(tag)) >= 3
    directory = jobs_module.REGISTRY.tables[branch.id].directory
    assert directory is not None and directory.is_dir()
    async with branch:
        pass  # `async with` closes like aclose()
    assert processes_tagged(tag) == []
    assert not directory.exists()
    if mechanism != "none":
        # The branch's sandbox (its supervisor) is gone too.
        assert not jobs_module.REGISTRY.tables.get(branch.id)
    assert (await act(branch, "jobs", action="list"))["jobs"] == []


async def test_a_clone_has_none_of_its_sources_jobs(workspace: Path) -> None:
    branch = make_branch(workspace)
    started = await act(branch, "bash", command=SLEEPER, background=True)
    clone = branch.clone()
    assert (await act(clone, "jobs", action="list"))["jobs"] == []
    refused = await act(clone, "jobs", action="kill", job_id=started["job_id"])
    assert "no job" in refused["error"]
    assert (await act(branch, "jobs", action="list"))["jobs"][0]["running"] is True
    await clone.aclose()
    assert (await act(branch, "jobs", action="list"))["jobs"][0]["running"] is True
    await branch.aclose()


async def test_the_job_limit_is_refused_clearly(workspace: Path) -> None:
    branch = make_branch(workspace)
    for _ in range(MAX_JOBS):
        assert (await act(branch, "bash", command=SLEEPER, background=True))["job_id"]
    refused = await act(branch, "bash", command=SLEEPER, background=True)
    assert refused["job_id"] is None
    assert f"already holds {MAX_JOBS} jobs" in refused["error"] and "kill" in refused["error"]
    await branch.aclose()


async def test_finished_jobs_make_room_past_the_limit(workspace: Path) -> None:
    branch = make_branch(workspace)
    for _ in range(MAX_JOBS):
        job = (await act(branch, "bash", command="true", background=True))["job_id"]
        await act(branch, "jobs", action="wait", job_id=job)
    assert (await act(branch, "bash", command="true", background=True))["job_id"]
    await branch.aclose()


async def test_wait_for_a_port_on_loopback(workspace: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    branch = make_branch(workspace)
    server = f"{PY} -m http.server {port} --bind 127.0.0.1"
    started = await act(branch, "bash", command=server, background=True)
    waited = await act(
        branch, "jobs", action="wait", job_id=started["job_id"], port=port, timeout=60_000
    )
    assert waited["matched"] is True
    fetch = f"{PY} -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/').status)\""
    assert (await act(branch, "bash", command=fetch))["stdout"] == "200\n"
    await branch.aclose()


FETCH = (
    "import sys, urllib.request as u\n"
    "try:\n"
    "    print(u.urlopen(f'http://127.0.0.1:{sys.argv[1]}/', timeout=10).status)\n"
    "except OSError as exc:\n"
    "    print('unreachable', type(exc).__name__)\n"
)


@pytest.mark.parametrize("mechanism", [m for m in mechanisms() if m.values[0] != "none"])
async def test_a_background_server_answers_a_later_call_with_no_network(
    workspace: Path, mechanism: str
) -> None:
    """The branch's commands share one sandbox: its loopback, and nothing of the host's."""
    (workspace / "fetch.py").write_text(FETCH)
    with socket.socket() as host_listener, socket.socket() as probe:
        host_listener.bind(("127.0.0.1", 0))
        host_listener.listen()
        host_port = host_listener.getsockname()[1]
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        branch = make_branch(workspace, isolation=mechanism, network="none")
        started = await act(
            branch, "bash", command=f"{PY} -m http.server {port} --bind 127.0.0.1", background=True
        )
        waited = await act(
            branch,
            "jobs",
            action="wait",
            job_id=started["job_id"],
            until="Serving HTTP",
            timeout=60_000,
        )
        assert waited["matched"] is True, waited
        reached = await act(branch, "bash", command=f"{PY} fetch.py {port}")
        assert reached["stdout"] == "200\n", reached
        blocked = await act(branch, "bash", command=f"{PY} fetch.py {host_port}")
        assert blocked["stdout"].startswith("unreachable"), blocked
        await branch.aclose()


@pytest.mark.parametrize("mechanism", [m for m in mechanisms() if m.values[0] != "none"])
async def test_later_calls_share_the_branchs_private_tmp(workspace: Path, mechanism: str) -> None:
    branch = make_branch(workspace, isolation=mechanism)
    tmp = "${TMPDIR:-/tmp}"
    await act(branch, "bash", command=f"echo kept > {tmp}/note")
    assert (await act(branch, "bash", command=f"cat {tmp}/note"))["stdout"] == "kept\n"
    other = make_branch(workspace, isolation=mechanism)
    assert (await act(other, "bash", command=f"cat {tmp}/note"))["return_code"] != 0
    await branch.aclose()
    await other.aclose()


@pytest.mark.parametrize("mechanism", [m for m in mechanisms() if m.values[0] != "none"])
async def test_a_background_server_answers_a_later_call_under_loopback(
    workspace: Path, mechanism: str
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    branch = make_branch(workspace, isolation=mechanism, network="loopback")
    started = await act(
        branch, "bash", command=f"{PY} -m http.server {port} --bind 127.0.0.1", background=True
    )
    waited = await act(
        branch, "jobs", action="wait", job_id=started["job_id"], port=port, timeout=60_000
    )
    assert waited["matched"] is True, waited
    fetch = (
        f'{PY} -c "import urllib.request as u; '
        f"print(u.urlopen('http://127.0.0.1:{port}/').status)\""
    )
    answer = await act(branch, "bash", command=fetch)
    assert answer["stdout"] == "200\n", answer
    await branch.aclose()


async def test_wait_times_out_with_the_tail(workspace: Path) -> None:
    branch = make_branch(workspace)
    started = await act(branch, "bash", command=SLEEPER, background=True)
    waited = await act(
        branch, "jobs", action="wait", job_id=started["job_id"], until="never", timeout=300
    )
    assert waited["matched"] is False and "300 ms passed" in waited["error"]
    await branch.aclose()


async def test_wait_for_text_that_never_comes_ends_with_the_job(workspace: Path) -> None:
    branch = make_branch(workspace)
    started = await act(branch, "bash", command="echo bye", background=True)
    waited = await act(
        branch, "jobs", action="wait", job_id=started["job_id"], until="hello", timeout=60_000
    )
    assert waited["matched"] is False and "the job ended" in waited["error"]
    assert waited["output"] == "bye\n"
    await branch.aclose()


async def test_a_bad_regular_expression_is_a_typed_error(workspace: Path) -> None:
    branch = make_branch(workspace)
    started = await act(branch, "bash", command="true", background=True)
    waited = await act(branch, "jobs", action="wait", job_id=started["job_id"], until="(")
    assert "regular expression" in waited["error"]
    await branch.aclose()


async def test_another_branchs_ids_are_unknown(workspace: Path) -> None:
    first, second = make_branch(workspace), make_branch(workspace)
    started = await act(first, "bash", command=SLEEPER, background=True)
    for action in ("output", "wait", "kill"):
        refused = await act(second, "jobs", action=action, job_id=started["job_id"])
        assert "no job or output" in refused["error"]
    await first.aclose()


async def test_a_job_needs_an_id(workspace: Path) -> None:
    branch = make_branch(workspace)
    assert "needs a job_id" in (await act(branch, "jobs", action="output"))["error"]


async def test_a_job_that_cannot_start_is_a_typed_error(workspace: Path) -> None:
    branch = make_branch(workspace)
    refused = await act(branch, "bash", command="no-such-program-xyz", background=True)
    assert refused["job_id"] is None and "Could not start" in refused["error"]
    assert (await act(branch, "jobs", action="list"))["jobs"] == []


async def test_the_oldest_kept_output_is_dropped_past_the_budget(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs_module, "OUTPUT_BUDGET_BYTES", 250_000)
    branch = make_branch(workspace)
    big = f"{PY} -c \"print('x' * 150_000)\""
    first = (await act(branch, "bash", command=big))["output_id"]
    second = (await act(branch, "bash", command=big))["output_id"]
    gone = await act(branch, "jobs", action="output", job_id=first)
    assert "dropped" in gone["error"] and "budget" in gone["error"]
    kept = await act(branch, "jobs", action="output", job_id=second)
    assert kept["error"] is None and kept["total_bytes"] == 150_001
    await branch.aclose()


def test_kept_output_is_private(workspace: Path) -> None:
    table = jobs_module.BranchJobs(None)
    output, fd = table.new_output("x")
    os.close(fd)
    assert output.path.stat().st_mode & 0o777 == 0o600
    assert output.path.parent.stat().st_mode & 0o777 == 0o700
    assert not output.path.is_relative_to(workspace)
    table.close()


@pytest.mark.parametrize("mechanism", [m for m in mechanisms() if m.values[0] != "none"])
async def test_a_confined_timeout_kills_the_command_and_its_children(
    workspace: Path, mechanism: str
) -> None:
    branch = make_branch(workspace, isolation=mechanism)
    sleeper, tag = tagged_sleeper()
    result = await act(branch, "bash", command=f"{sleeper} & {sleeper}", timeout=1_000)
    assert result["timed_out"] is True and "killed" in result["error"]
    assert processes_tagged(tag) == []
    # The branch's sandbox survives a timeout: the next call runs in it.
    assert (await act(branch, "bash", command="echo next"))["stdout"] == "next\n"
    await branch.aclose()


@pytest.mark.parametrize("mechanism", [m for m in mechanisms() if m.values[0] != "none"])
async def test_a_cancelled_confined_call_leaves_no_process(workspace: Path, mechanism: str) -> None:
    branch = make_branch(workspace, isolation=mechanism)
    await act(branch, "bash", command="true")  # the sandbox is up
    sleeper, tag = tagged_sleeper()
    with trio.move_on_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(branch.act, "bash", {"command": sleeper, "timeout": 120_000})
            await eventually(lambda: bool(processes_tagged(tag)), 60)
            nursery.cancel_scope.cancel()
    await eventually(lambda: not processes_tagged(tag), 10)
    await branch.aclose()


@pytest.mark.parametrize("mechanism", [m for m in mechanisms() if m.values[0] != "none"])
async def test_concurrent_confined_calls_run_in_parallel(workspace: Path, mechanism: str) -> None:
    branch = make_branch(workspace, isolation=mechanism)
    await act(branch, "bash", command="true")
    start = trio.current_time()
    results = await branch.act_many([("bash", {"command": "sleep 1; echo ok"})] * 4)
    elapsed = trio.current_time() - start
    assert all(r.ok and r.result["stdout"] == "ok\n" for r in results)  # type: ignore[index]
    assert elapsed < 3.5
    await branch.aclose()


@pytest.mark.parametrize("mechanism", [m for m in mechanisms() if m.values[0] != "none"])
async def test_a_dead_supervisor_is_replaced_on_the_next_call(
    workspace: Path, mechanism: str
) -> None:
    branch = make_branch(workspace, isolation=mechanism)
    await act(branch, "bash", command="true")
    (supervisor,) = jobs_module.REGISTRY.tables[branch.id].supervisors.values()
    os.killpg(supervisor.popen.pid, 9)
    supervisor.popen.wait()
    assert (await act(branch, "bash", command="echo again"))["stdout"] == "again\n"
    await branch.aclose()


async def test_concurrent_cut_outputs_are_never_dropped_while_their_calls_run(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A budget smaller than what runs at once drops only outputs whose calls are done."""
    monkeypatch.setattr(jobs_module, "OUTPUT_BUDGET_BYTES", 300_000)
    branch = make_branch(workspace)
    big = f"{PY} -c \"print('y' * 250_000)\""
    results = await branch.act_many([("bash", {"command": big})] * 8)
    for result in results:
        assert result.ok and result.result is not None, result.error
        head, marker, tail = result.result["stdout"].split("\n", 2)
        assert head == "y" * HEAD_BYTES and tail == "y" * (HEAD_BYTES - 1) + "\n"
        assert result.result["output_id"] in marker
    table = jobs_module.REGISTRY.tables[branch.id]
    assert not any(output.busy for output in table.outputs.values())
    assert sum(output.size() for output in table.outputs.values()) <= 300_000
    await branch.aclose()

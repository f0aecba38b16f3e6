"""The standalone ``bash_tool()`` (default isolation "none") on its prepared PID namespace.

Unconfined commands start through a supervisor that prepares each command's
PID namespace ahead; whoever owns the tool owns that supervisor: the branch
(its job table) on a branch, the tool itself outside any branch. Real
processes throughout: leavers are found on the host by a marker in their
argv, the supervisor's processes by walking its process tree in ``/proc``.
"""

from __future__ import annotations

import gc
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from _test_helpers import eventually, processes_tagged
from test_confined_environ import READER as CONFINED_READER
from test_confined_environ import SECRET_NAME, SECRET_VALUE
from test_pid_reuse import SCENARIO, _namespace_problem

from lionfactory import Branch
from lionfactory._os.environment import EnvPolicy
from lionfactory._os.isolation import containment
from lionfactory._os.process import pidfd_exited
from lionfactory._os.supervisor import Supervisor
from lionfactory._tool import Tool
from lionfactory.tools.bash import bash_tool
from lionfactory.tools.jobs import REGISTRY

PY = sys.executable

pytestmark = pytest.mark.skipif(
    containment() == "group", reason="no namespaces here: 'none' keeps only the group kill"
)

# Each leaves a process running (marked by its last argument) when the command's own process
# exits: a child that started its own session, a double-forked daemon, ``setsid -f``.
LEAVERS = {
    "setsid": f"{PY} -c 'import os, time\nif os.fork() == 0:\n    os.setsid()\n"
    f"    time.sleep(300)' {{marker}}",
    "double-fork": f"{PY} -c 'import os, time\nif os.fork() == 0:\n    if os.fork() == 0:\n"
    f"        os.setsid()\n        time.sleep(300)\n    os._exit(0)\nos.wait()' {{marker}}",
    "setsid-f": f"setsid -f {PY} -c 'import time; time.sleep(300)' {{marker}}",
}


def _supervisor(tool: Tool, branch: Branch | None = None) -> Supervisor:
    """The supervisor the tool's last call ran through: the branch's, else the tool's own."""
    handler: Any = tool.handler
    table = handler.owned.table if branch is None else REGISTRY.tables[branch.id]
    supervisor: Supervisor = table.supervisors[handler.isolation]
    return supervisor


def _tree(pid: int) -> set[int]:
    """`pid` and every live descendant of it (zombies are gone for this purpose)."""
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        try:
            stat = Path(f"/proc/{current}/stat").read_bytes()
            if stat[stat.rindex(b")") + 2 :].split()[0] == b"Z":
                continue
            tasks = os.listdir(f"/proc/{current}/task")
        except (OSError, ValueError):
            continue
        found.add(current)
        for task in tasks:
            try:
                todo += [
                    int(c)
                    for c in Path(f"/proc/{current}/task/{task}/children").read_text().split()
                ]
            except OSError:
                continue
    return found


def _alive(pids: set[int]) -> set[int]:
    left = set()
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2 :].split()[0] not in (b"Z", b"X"):
            left.add(pid)
    return left


def _gone_soon(pids: set[int]) -> bool:
    """Whether `pids` are all gone within a few seconds (polled: no event reports it)."""
    deadline = time.monotonic() + 10
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not _alive(pids)


async def _leaves_nothing(attack: str) -> None:
    marker = f"leaver-{uuid.uuid4().hex}"
    tool = bash_tool()
    try:
        result = await tool(command=attack.format(marker=marker), timeout=30_000)
        assert result["return_code"] == 0 and result["error"] is None, result
        # The call went through the tool's supervisor, whose prepared namespace ended
        # with the command's process: nothing of it is left when the answer comes.
        assert _supervisor(tool).command_namespaces is True
        assert processes_tagged(marker) == []
    finally:
        for pid in processes_tagged(marker):
            os.kill(pid, 9)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
@pytest.mark.parametrize("attack", LEAVERS.values(), ids=LEAVERS.keys())
def test_nothing_a_standalone_call_starts_outlives_it(attack: str, backend: str) -> None:
    anyio.run(_leaves_nothing, attack, backend=backend)


async def test_a_timed_out_call_leaves_nothing_under_the_prepared_namespace() -> None:
    marker = f"leaver-{uuid.uuid4().hex}"
    script = (
        "import subprocess, sys, time; "
        "subprocess.Popen(['setsid', '-f', sys.executable, '-c', 'import time; time.sleep(300)', "
        "sys.argv[1]]); time.sleep(300)"
    )
    tool = bash_tool()
    try:
        result = await tool(command=f'{PY} -c "{script}" {marker}', timeout=1_500)
        assert result["timed_out"] is True, result
        assert processes_tagged(marker) == []
    finally:
        for pid in processes_tagged(marker):
            os.kill(pid, 9)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_closing_the_branch_ends_its_prepared_namespace(backend: str) -> None:
    async def main() -> None:
        branch = Branch()
        branch.register(bash_tool())
        done = await branch.act("bash", {"command": "true"})
        assert done.ok and done.result["return_code"] == 0, done
        supervisor = _supervisor(branch.tools["bash"], branch)
        assert supervisor is not _supervisor_or_none(branch.tools["bash"])
        processes = _tree(supervisor.popen.pid)
        # bwrap, its init, the supervisor, and the next command's namespace made ahead
        # (its leader may have exited already; its runner waits).
        assert len(processes) >= 4, processes
        await branch.aclose()
        # Killed by the close; the kernel may take a moment to tear the namespace down.
        assert _gone_soon(processes)

    anyio.run(main, backend=backend)


def _supervisor_or_none(tool: Tool) -> Supervisor | None:
    handler: Any = tool.handler
    found: Supervisor | None = handler.owned.table.supervisors.get(handler.isolation)
    return found


async def test_dropping_the_tool_ends_its_prepared_namespace() -> None:
    tool = bash_tool()
    assert (await tool(command="true"))["return_code"] == 0
    processes = _tree(_supervisor(tool).popen.pid)
    assert len(processes) >= 4, processes
    del tool
    gc.collect()
    assert _gone_soon(processes)


async def test_a_clone_has_a_supervisor_of_its_own() -> None:
    branch = Branch()
    branch.register(bash_tool)
    clone = branch.clone()
    try:
        for owner in (branch, clone):
            assert (await owner.act("bash", {"command": "true"})).ok
        first = _supervisor(branch.tools["bash"], branch)
        second = _supervisor(clone.tools["bash"], clone)
        assert first is not second and first.popen.pid != second.popen.pid
    finally:
        await branch.aclose()
        await clone.aclose()


async def test_a_dead_supervisor_is_replaced() -> None:
    tool = bash_tool()
    assert (await tool(command="true"))["return_code"] == 0
    first = _supervisor(tool)
    os.killpg(first.popen.pid, 9)
    await eventually(lambda: not first.alive, 10)
    result = await tool(command="echo again")
    assert result["stdout"] == "again\n", result
    second = _supervisor(tool)
    assert second is not first and second.alive
    # The dead one was reaped when it was replaced: its number is free, never ours to signal.
    assert first.pidfd == -1 and first.popen.returncode is not None


# The replaced supervisor's number, handed to an unrelated victim, is never signalled:
# not when the next call replaces it, not when the tool is dropped, not at exit.
STANDALONE = (
    SCENARIO.split("if scenario in")[0]
    + r"""
import gc
from lionfactory.tools.bash import bash_tool

tool = bash_tool(workspace_root=root)
assert tool.run_sync(command="true")["return_code"] == 0
handler = tool.handler
first = handler.owned.table.supervisors[handler.isolation]
os.killpg(first.popen.pid, 9)
deadline = time.monotonic() + 30
while first.alive and time.monotonic() < deadline:
    time.sleep(0.005)
assert not first.alive
# The next call replaces it (and reaps it: its number is free from then on).
assert tool.run_sync(command="true")["return_code"] == 0
second = handler.owned.table.supervisors[handler.isolation]
assert second is not first and second.alive
victim = victim_at(first.popen.pid, {second.popen.pid})
assert tool.run_sync(command="true")["return_code"] == 0
del tool, handler, second
gc.collect()
jobs._kill_all_at_exit()
time.sleep(0.2)
print("ALIVE" if victim.poll() is None else f"KILLED {victim.returncode}")
victim.kill()
victim.wait()
"""
)


@pytest.mark.skipif((problem := _namespace_problem()) is not None, reason=str(problem))
def test_a_replaced_supervisors_reused_pid_is_never_killed(tmp_path: Path) -> None:
    script = tmp_path / "scenario.py"
    script.write_text(STANDALONE)
    root = tmp_path / "ws"
    root.mkdir()
    argv = ["unshare", "--pid", "--fork", "--mount-proc", PY, str(script), str(root), "-"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "ALIVE", output


# The reader of the confined tests, skipping itself by its /proc entry: its own pid is its
# namespace's, not that of the /proc it reads (a command inherits the caller's environment
# by design when no policy filters it).
READER = CONFINED_READER.replace("int(name) == os.getpid()", "name == os.readlink('/proc/self')")


@pytest.mark.parametrize("policy", [None, EnvPolicy()], ids=["inherited", "env-policy"])
async def test_no_process_of_the_prepared_namespace_holds_a_secret(
    policy: EnvPolicy | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor, bwrap's init and the namespace made ahead hold none of the host's."""
    monkeypatch.setenv(SECRET_NAME, SECRET_VALUE)
    script = tmp_path / "reader.py"
    script.write_text(READER)
    tool = bash_tool(workspace_root=tmp_path, env_policy=policy)
    result = await tool(command=f"{shlex.quote(PY)} {shlex.quote(str(script))}")
    assert result["return_code"] == 0, result
    found = json.loads(result["stdout"])
    supervisor = _supervisor(tool)
    # It saw the supervisor's processes (bwrap's init, the supervisor, the next namespace).
    assert len(found["read"]) >= 3, found
    assert found["leaks"] == [], found
    # The command itself gets what the policy lets through: all of it without one.
    env = await tool(command="env")
    assert (SECRET_NAME in env["stdout"]) is (policy is None)
    assert supervisor.command_namespaces is True


def test_without_namespaces_the_description_and_every_answer_say_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the kernel refuses namespaces (simulated: it cannot be made so here)."""
    from lionfactory._os import isolation
    from lionfactory.tools import bash

    for module in (isolation, bash):
        monkeypatch.setattr(module, "containment", lambda: "group")
    tool = bash_tool()
    assert "No PID namespace is available here" in tool.description
    result = tool.run_sync(command="true")
    assert result["return_code"] == 0, result
    assert "can outlive the call" in result["notice"]
    # As before: no supervisor, the process-group kill only.
    assert _supervisor_or_none(tool) is None
    refused = tool.run_sync(command="a|b")
    assert refused["return_code"] is None and "No PID namespace" not in (refused["notice"] or "")


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_concurrent_calls_each_get_a_namespace_and_the_emptied_ones_serve_later_calls(
    backend: str,
) -> None:
    async def main() -> None:
        branch = Branch()
        branch.register(bash_tool())
        sleeper = f"{PY} -c 'import sys, time; time.sleep(0.2); print(sys.argv[1])'"
        try:
            calls = [("bash", {"command": f"{sleeper} {n}"}) for n in range(6)]
            results = await branch.act_many(calls)
            assert [r.result["stdout"] for r in results] == [f"{n}\n" for n in range(6)]
            supervisor = _supervisor(branch.tools["bash"], branch)
            for n in range(3):
                again = await branch.act("bash", {"command": f"echo {n}"})
                assert again.result["stdout"] == f"{n}\n", again
            assert _supervisor(branch.tools["bash"], branch) is supervisor
        finally:
            await branch.aclose()

    anyio.run(main, backend=backend)


async def test_a_killed_idle_namespace_is_replaced_by_the_next_call() -> None:
    """The host keeps the emptied namespace between calls; one that died is not reused."""
    tool = bash_tool()
    assert (await tool(command="true"))["return_code"] == 0
    supervisor = _supervisor(tool)
    (runner,) = supervisor.runners
    signal.pidfd_send_signal(runner.pidfd, signal.SIGKILL)
    await eventually(lambda: pidfd_exited(runner.pidfd), 10)
    result = await tool(command="echo again")
    assert result["stdout"] == "again\n", result
    # Its descriptors are closed, and a new namespace serves the calls now.
    assert runner.pidfd == -1 and runner.channel.fileno() == -1
    assert len(supervisor.runners) == 1 and supervisor.runners[0] is not runner

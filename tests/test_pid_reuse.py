"""A process that is gone is never signalled by its old number, even once the number is reused.

Each scenario runs in a private PID namespace (``unshare --pid --fork
--mount-proc``) where the test steers ``ns_last_pid`` so that an unrelated
*victim* process, leading a session and group of its own, gets exactly the
number a finished job or a dead supervisor had. Then every route that ends
processes runs (``jobs kill``, the branch's close, the kill at interpreter
exit, a supervisor replaced after it died): the victim must still be running.

"direct" and "contained" start their job with no supervisor, as `bash` does
where its unconfined supervisor cannot serve a job (no namespaces inside it):
the only route where a job's own process is our child, named by its number.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lionfactory._os.isolation import mechanism_problem

SCENARIO = r"""
import os, subprocess, sys, time
from pathlib import Path

from lionfactory._os.isolation import workspace_isolation
from lionfactory.tools import jobs

root, scenario = Path(sys.argv[1]), sys.argv[2]
table = jobs.BranchJobs(None)


def reap_orphans(ours):
    # This script is the namespace's PID 1, so what a sandbox orphans comes
    # to it: reap those as a system's init would, never a child of ours.
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid in ours:
            return
        os.waitpid(info.si_pid, 0)


def numbers():
    return {name for name in os.listdir("/proc") if name.isdigit()}


def quiet(seconds=0.3, limit=20):
    # Wait until no process of this namespace starts or ends for `seconds`: a
    # new supervisor prepares the next command's namespace as it starts (a
    # few forks), and a fork then, between the steering and the victim's
    # fork, takes the steered number.
    deadline = time.monotonic() + limit
    last, since = numbers(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.02)
        now = numbers()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= seconds:
            return


def victim_at(number, ours, replace=None):
    # Other processes of this namespace may take numbers at any moment (an
    # unconfined job's supervisor prepares the next command's namespace
    # after each command), so a steered fork can land past `number`: then
    # the number is steered to again once it is free, until the deadline.
    # A live process of ours that took the number holds it for as long as it
    # runs (a supervisor's prepared namespace does): `replace` ends it and
    # returns the numbers of what replaced it.
    deadline = time.monotonic() + 30
    held_since = None
    while time.monotonic() < deadline:
        quiet()
        reap_orphans(ours)
        if os.path.exists(f"/proc/{number}"):
            held_since = held_since or time.monotonic()
            if replace is not None and time.monotonic() - held_since > 1:
                print(f"HELD {number}: replacing")
                ours, held_since = replace(), None
            time.sleep(0.01)
            continue
        held_since = None
        with open("/proc/sys/kernel/ns_last_pid", "w") as knob:
            knob.write(str(number - 1))
        victim = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
        )
        if victim.pid == number:
            return victim
        print(f"MISSED {victim.pid} != {number}")
        victim.kill()
        victim.wait()
    sys.exit(3)


def killed(supervisor):
    # The supervisor's sandbox dies (out of memory, say): its whole group.
    os.killpg(supervisor.popen.pid, 9)
    deadline = time.monotonic() + 30
    while supervisor.alive and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not supervisor.alive


if scenario in ("direct", "contained"):
    isolation = workspace_isolation("none", root) if scenario == "contained" else None
    job = table.start("true", ["true"], cwd=root, env=None, isolation=isolation)
    deadline = time.monotonic() + 30
    while job.running and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not job.running
    victim = victim_at(job.pgid, {job.pgid})
    table.kill(job)
else:
    isolation = workspace_isolation(scenario, root)
    first = table.supervisor(isolation, root)
    killed(first)
    second = table.supervisor(isolation, root)
    assert second is not first and second.alive
    replacing = [second]

    def replace():
        # One of the replacement's processes took the number as it started:
        # it dies too, and is replaced in turn (the route under test again).
        killed(replacing[-1])
        replacing.append(table.supervisor(isolation, root))
        assert replacing[-1].alive
        return {replacing[-1].popen.pid}

    victim = victim_at(first.popen.pid, {second.popen.pid}, replace)
jobs._kill_all_at_exit()
table.close()
time.sleep(0.2)
print("ALIVE" if victim.poll() is None else f"KILLED {victim.returncode}")
victim.kill()
victim.wait()
"""


def _namespace_problem() -> str | None:
    if os.geteuid() != 0:
        return "steering ns_last_pid needs root in the PID namespace's owner"
    if shutil.which("unshare") is None:
        return "no unshare binary"
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False
    )
    return None if done.returncode == 0 else f"unshare --pid failed: {done.stderr!r}"


def _scenarios() -> list[object]:
    out: list[object] = [pytest.param("direct"), pytest.param("contained")]
    for name in ("bwrap", "landlock"):
        problem = mechanism_problem(name)
        out.append(
            pytest.param(
                name, marks=pytest.mark.skipif(problem is not None, reason=f"{name}: {problem}")
            )
        )
    return out


pytestmark = pytest.mark.skipif((problem := _namespace_problem()) is not None, reason=str(problem))


@pytest.mark.parametrize("scenario", _scenarios())
def test_a_reused_pid_is_never_killed(scenario: str, tmp_path: Path) -> None:
    """direct/contained: a finished job's pid; bwrap/landlock: a dead, replaced supervisor's."""
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO)
    root = tmp_path / "ws"
    root.mkdir()
    argv = [sys.executable, str(script), str(root), scenario]
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "ALIVE", done.stdout + done.stderr

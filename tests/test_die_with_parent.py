"""A program `run_process` started dies with our process, even when SIGKILL leaves no hook to run.

A first checkpoint snapshot's git can run for minutes; when the server that
started it was killed, it went on for init to reap. Each route a program is
launched by is tried: a real process runs `run_process` and is killed with
SIGKILL while its program runs, and the program must be gone. The last two
routes are the controls: where nothing asks for the parent-death signal,
the program outlives its parent, so the check can fail.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _test_helpers import processes_in

from lionfactory._os.isolation import containment, landlock_namespaces, mechanism_problem

PROGRAM = """
import sys
from pathlib import Path

import trio

from lionfactory._os import isolation, process
from lionfactory._os.process import run_process

cwd, route = Path(sys.argv[1]), sys.argv[2]
iso = None
if route.startswith("contained"):
    iso = isolation.workspace_isolation("none", cwd)
    if route == "contained, helper":
        isolation.containment = lambda: "helper"
elif route.startswith("landlock"):
    iso = isolation.workspace_isolation("landlock", cwd)
    if route == "landlock, subreaper":
        # -N: the helper enters no namespace, as where the kernel refuses them.
        plain = isolation._landlock_argv
        isolation._landlock_argv = lambda policy: [*plain(policy)[:4], "-N", *plain(policy)[4:]]
elif route.startswith("bwrap"):
    iso = isolation.workspace_isolation("bwrap", cwd)
if route.endswith("no pidfd"):
    process._PIDFD = False  # the child is started in a worker thread
# A background child besides the program, where a PID namespace ends both.
script = sys.argv[3]
trio.run(lambda: run_process(
    ["sh", "-c", script], cwd=cwd, timeout=120, isolation=iso,
    die_with_parent=route.startswith("direct, asked"),
))
"""

BOTH = "sleep 60.25 & exec sleep 60.5"
ONE = "exec sleep 60.5"  # run directly, only the program itself gets the signal

ROUTES = {
    # route: (the script, whether the program ends with its parent)
    "contained, bwrap": (BOTH, True),
    "contained, helper": (BOTH, True),
    "bwrap": (BOTH, True),
    "landlock": (BOTH, True),
    "landlock, subreaper": (ONE, True),
    "direct, asked": (ONE, True),
    "direct, not asked": (ONE, False),
    "bwrap, no pidfd": (BOTH, False),
}


def _needs(route: str) -> str | None:
    """Why `route` cannot run here, or None."""
    if "bwrap" in route and containment() != "bwrap":
        return "bwrap cannot make namespaces here"
    if route.startswith("landlock") and mechanism_problem("landlock") is not None:
        return "no Landlock here"
    if route == "landlock" and not landlock_namespaces():
        return "the exec helper cannot make namespaces here"
    return None


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "work"
    folder.mkdir()
    yield folder
    for pid in processes_in(folder):  # a control's survivors, or a failed run's
        # One killed first can take others along (a sandbox's init its namespace).
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _sleeps(folder: Path) -> int:
    count = 0
    for pid in processes_in(folder):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                count += file.read().startswith(b"sleep\0")
        except OSError:
            continue
    return count


def _eventually(check: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.01)  # polled: nothing reports another process's start or end
    return False


@pytest.mark.parametrize("route", list(ROUTES))
def test_the_program_dies_with_a_killed_parent(place: Path, route: str) -> None:
    why = _needs(route)
    if why is not None:
        pytest.skip(why)
    script, ends = ROUTES[route]
    parent = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, str(place), route, script],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    try:
        assert _eventually(lambda: _sleeps(place) == script.count("sleep"), 30), route
    finally:
        parent.kill()
        parent.wait()
    if ends:
        assert _eventually(lambda: not processes_in(place), 10), (route, processes_in(place))
    else:
        # Survival cannot be observed but by waiting: the other routes' chains
        # of parent-death signals end their programs within milliseconds.
        assert not _eventually(lambda: not processes_in(place), 2), route

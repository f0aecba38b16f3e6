"""The Landlock exec helper run directly: its subreaper where namespaces are refused, its filter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from _test_helpers import processes_tagged

from lionfactory._os.landlock_exec import unix_socket_filter
from lionfactory._os.mechanisms import HELPER, landlock_abi

PY = sys.executable
LEAVE = (
    "import os, sys, time\n"
    "for _ in range(5):\n"
    "    if os.fork() == 0:\n"
    "        os.setsid(); time.sleep(300); os._exit(0)\n"
    "print('LEFT', flush=True)\n"
    "if sys.argv[1] == 'hang': time.sleep(300)\n"
)


def _gone(marker: str) -> bool:
    for _ in range(100):
        if not processes_tagged(marker):
            return True
        time.sleep(0.05)
    return False


def _helper(mode: str, marker: str, *flags: str) -> list[str]:
    return [PY, "-I", "-S", str(HELPER), *flags, "-N", "--", PY, "-c", LEAVE, mode, marker]


@pytest.fixture
def marker() -> Iterator[str]:
    token = f"lf-reaper-{uuid.uuid4().hex}"
    yield token
    for pid in processes_tagged(token):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("flags", [("-P",), ("-r", "/", "-n", "full", "-p")], ids=["none", "ll"])
def test_without_namespaces_the_subreaper_kills_what_the_program_left(
    marker: str, flags: tuple[str, ...]
) -> None:
    if "-r" in flags and landlock_abi() < 1:
        pytest.skip("no Landlock")
    done = subprocess.run(_helper("exit", marker, *flags), capture_output=True, timeout=60)
    assert done.stdout == b"LEFT\n", done
    assert _gone(marker)


def test_without_namespaces_sigterm_makes_the_subreaper_kill_everything(marker: str) -> None:
    with subprocess.Popen(_helper("hang", marker, "-P"), stdout=subprocess.PIPE) as child:
        assert child.stdout is not None
        assert child.stdout.readline() == b"LEFT\n"
        assert len(processes_tagged(marker)) >= 6
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)
    assert _gone(marker)


def test_the_helper_keeps_the_programs_exit_status_and_signal() -> None:
    base = [PY, "-I", "-S", str(HELPER), "-P", "--", PY, "-c"]
    assert subprocess.run([*base, "raise SystemExit(7)"], timeout=60).returncode == 7
    killed = subprocess.run([*base, "import os; os.kill(os.getpid(), 9)"], timeout=60)
    assert killed.returncode == -9


def test_the_filter_is_whole_instructions_and_ends_in_a_refusal() -> None:
    program = unix_socket_filter("x86_64")
    assert program is not None and len(program) % 8 == 0
    assert program[-8:] == (0x06).to_bytes(2, "little") + b"\0\0" + (0x00050001).to_bytes(
        4, "little"
    )
    assert unix_socket_filter("sparc64") is None


@pytest.mark.parametrize("flags", [("-P",), ("-P", "-N")])
def test_the_program_gets_sigpipe_and_sigxfsz_at_their_defaults(flags: tuple[str, ...]) -> None:
    done = subprocess.run(
        [PY, "-I", "-S", str(HELPER), *flags, "--", "cat", "/proc/self/status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("SigIgn:")]
    ignored = int(line.split()[1], 16)
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        assert not ignored & (1 << (number - 1)), signal.Signals(number).name

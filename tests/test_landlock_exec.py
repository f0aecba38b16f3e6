"""The Landlock exec helper run directly: its subreaper where namespaces are refused, its filter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

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


def _confined(*flags: str, command: list[str]) -> subprocess.CompletedProcess[str]:
    argv = [PY, "-I", "-S", str(HELPER), "-r", "/", *flags, "-n", "full", "-p", "--", *command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.fixture
def hiding(tmp_path: Path) -> Path:
    """A folder holding a protected file, a listed file and a subfolder."""
    if landlock_abi() < 1:
        pytest.skip("no Landlock")
    folder = tmp_path / "f"
    (folder / "sub").mkdir(parents=True)
    (folder / ".env").write_text("TOKEN=s3cret\n")
    (folder / "a.txt").write_text("a\n")
    (folder / "sub" / "b.txt").write_text("b\n")
    return folder


def test_a_folder_holding_a_hidden_file_is_listed_and_the_file_stays_unreadable(
    hiding: Path,
) -> None:
    flags = ("-d", str(hiding / ".env"))
    listed = _confined(*flags, command=["ls", "-a", str(hiding)])
    assert listed.stdout.split() == [".", "..", ".env", "a.txt", "sub"], listed
    read = _confined(*flags, command=["cat", str(hiding / ".env")])
    assert read.returncode != 0 and "s3cret" not in read.stdout, read
    assert _confined(*flags, command=["cat", str(hiding / "a.txt")]).stdout == "a\n"
    # Listing only: nothing beside the hidden file becomes writable.
    made = _confined(*flags, command=["touch", str(hiding / "new")])
    assert made.returncode != 0 and not (hiding / "new").exists()


def test_no_folder_above_a_hidden_directory_lists_the_names_inside_it(hiding: Path) -> None:
    (hiding / "sub" / "keys").mkdir()
    (hiding / "sub" / "keys" / "id_secret_name").write_text("k\n")
    flags = ("-d", str(hiding / ".env"), "-d", str(hiding / "sub" / "keys"))
    # Listing is inherited beneath a folder, so no folder above the hidden
    # directory may be listable: each would list inside it too.
    for folder in (hiding / "sub" / "keys", hiding / "sub", hiding):
        listed = _confined(*flags, command=["ls", "-a", str(folder)])
        assert listed.returncode != 0 and "id_secret_name" not in listed.stdout, listed
    found = _confined(*flags, command=["find", str(hiding)])
    assert "id_secret_name" not in found.stdout, found
    assert _confined(*flags, command=["cat", str(hiding / "sub" / "b.txt")]).stdout == "b\n"


def test_a_hidden_file_in_an_exposed_tree_leaves_the_tree_listed(hiding: Path) -> None:
    # The checkpoint snapshot's case: the workspace shown read-only inside a
    # hidden parent, its protected file hidden again.
    flags = ("-d", str(hiding.parent), "-x", str(hiding), "-d", str(hiding / ".env"))
    listed = _confined(*flags, command=["ls", "-a", str(hiding)])
    assert listed.stdout.split() == [".", "..", ".env", "a.txt", "sub"], listed
    read = _confined(*flags, command=["cat", str(hiding / ".env")])
    assert read.returncode != 0 and "s3cret" not in read.stdout, read
    above = _confined(*flags, command=["ls", str(hiding.parent)])
    assert above.returncode != 0, above

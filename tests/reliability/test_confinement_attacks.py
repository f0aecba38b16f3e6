"""Kernel confinement of ``bash``: real attacks, real processes, for every available mechanism.

Each attack tries to change files beside the workspace (the canary), read a
secret in a fake home directory that the policy hides, reach a loopback
listener, or leave a process running. Confined, every canary stays
byte-identical. The same attacks run unconfined (``isolation="none"``) first
prove that each one really would have done damage: the tests run as root in
CI, and root can write anywhere without a sandbox.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from _test_helpers import mechanism_params

from lionfactory._os.isolation import (
    Isolation,
    Policy,
    containment,
    landlock_namespaces,
    mechanism_problem,
)
from lionfactory._tool import Tool
from lionfactory.tools.bash import bash_tool

PY = sys.executable
SECRET = "HOME_SECRET_51d2"


MECHANISMS = mechanism_params()


def _needs_pid_namespace(mechanism: str) -> None:
    if mechanism == "landlock" and not landlock_namespaces():
        pytest.skip("no user namespaces: Landlock alone cannot end a setsid() child")


class Scene:
    """A workspace, a canary directory beside it and a fake home with a secret."""

    def __init__(self, base: Path) -> None:
        self.ws = base / "ws"
        self.outside = base / "outside"
        self.home = base / "home"
        for folder in (self.ws, self.outside, self.home / ".ssh"):
            folder.mkdir(parents=True)
        self.canary = self.outside / "canary.txt"
        self.canary.write_bytes(b"canary \x00\xff original\n")
        (self.home / ".ssh" / "id_ed25519").write_text(SECRET)
        (self.home / "secret.txt").write_text(SECRET)
        (self.ws / "data.txt").write_text("workspace data\n")
        (self.ws / "out_link").symlink_to(self.canary)
        (self.ws / "out_dir").symlink_to(self.outside)
        (self.ws / "home_link").symlink_to(self.home / "secret.txt")
        hooks = self.ws / "hooks"
        hooks.mkdir()
        hook = hooks / "pre-commit"
        hook.write_text(f"#!/bin/sh\necho hooked >> {self.canary}\nexit 0\n")
        hook.chmod(0o755)
        git = ["git", "-c", "init.defaultBranch=main"]
        subprocess.run([*git, "init", "-q", str(self.ws)], check=True)

    def snapshot(self) -> dict[str, bytes]:
        return {
            str(path.relative_to(self.outside)): path.read_bytes() if path.is_file() else b"<dir>"
            for path in sorted(self.outside.rglob("*"))
        }

    def tool(self, isolation: str, network: str = "none") -> Tool:
        # "raw": nothing at all, not even the PID namespace "none" keeps, to
        # show what each attack does to a process the library did not contain.
        chosen: str | Isolation = isolation
        if isolation == "raw":
            chosen = Isolation("none", Policy(writable=[self.ws], pid_namespace=False))
        return bash_tool(
            workspace_root=self.ws,
            isolation=chosen,
            network=network,
            hidden_paths=[self.home],
            env={
                **os.environ,
                "HOME": str(self.home),
                "GIT_AUTHOR_NAME": "t",
                "GIT_AUTHOR_EMAIL": "t@example.invalid",
                "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@example.invalid",
            },
        )


@pytest.fixture
def scene(tmp_path: Path) -> Scene:
    return Scene(tmp_path)


# name -> command template ({canary}, {outside}, {py} filled in); each writes,
# truncates, creates or removes something beside the workspace.
WRITE_ATTACKS = {
    "python": "{py} -c \"open('{canary}', 'a').write('x')\"",
    "sh_started_by_a_program": "env sh -c 'echo x >> {canary}'",
    "cp_over": "cp data.txt {canary}",
    "cp_new_file": "cp data.txt {outside}/new.txt",
    "tee": "tee {canary}",
    "rm": "rm -f {canary}",
    "find_exec": "find . -maxdepth 0 -exec sh -c 'echo x >> {canary}' ';'",
    "git_hooks_path": "git -c core.hooksPath=hooks commit -q --allow-empty -m attack",
    "planted_symlink_file": "sh -c 'echo x >> out_link'",
    "planted_symlink_dir": "touch out_dir/planted.txt",
    "hard_link": "sh -c 'ln {canary} hard; echo x >> hard'",
    "proc_self_root": "sh -c 'echo x >> /proc/self/root{canary}'",
    "mkdir_outside": "mkdir {outside}/made",
    "python_rename": "{py} -c \"import os; os.rename('{canary}', 'data2.txt')\"",
}


def _command(template: str, scene: Scene) -> str:
    return template.format(canary=scene.canary, outside=scene.outside, py=PY)


@pytest.mark.parametrize("attack", WRITE_ATTACKS.values(), ids=WRITE_ATTACKS.keys())
def test_each_write_attack_does_damage_without_isolation(scene: Scene, attack: str) -> None:
    before = scene.snapshot()
    result = scene.tool("none").run_sync(command=_command(attack, scene))
    assert result["isolation"] == "none"
    assert scene.snapshot() != before, result


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("attack", WRITE_ATTACKS.values(), ids=WRITE_ATTACKS.keys())
def test_write_attack_leaves_the_canary_byte_identical(
    scene: Scene, mechanism: str, attack: str
) -> None:
    before = scene.snapshot()
    result = scene.tool(mechanism).run_sync(command=_command(attack, scene))
    assert result["isolation"] == mechanism
    assert scene.snapshot() == before, result


READ_ATTACKS = {
    "cat": "cat {home}/secret.txt",
    "ssh_key": "cat {home}/.ssh/id_ed25519",
    "python": "{py} -c \"print(open('{home}/secret.txt').read())\"",
    "planted_symlink": "cat home_link",
    "proc_self_root": "cat /proc/self/root{home}/secret.txt",
    "grep_recursive": "grep -r HOME_SECRET {home}",
}


@pytest.mark.parametrize("attack", READ_ATTACKS.values(), ids=READ_ATTACKS.keys())
def test_each_read_attack_finds_the_secret_without_isolation(scene: Scene, attack: str) -> None:
    result = scene.tool("none").run_sync(command=attack.format(home=scene.home, py=PY))
    assert SECRET in result["stdout"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("attack", READ_ATTACKS.values(), ids=READ_ATTACKS.keys())
def test_secret_in_the_hidden_home_is_unreadable(scene: Scene, mechanism: str, attack: str) -> None:
    result = scene.tool(mechanism).run_sync(command=attack.format(home=scene.home, py=PY))
    assert SECRET not in result["stdout"] + result["stderr"]
    assert result["return_code"] != 0


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0), backlog=8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


CONNECT = (
    "{py} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 5); "
    "print('CONNECTED')\""
)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_loopback_listener_is_unreachable_with_network_none(
    scene: Scene, mechanism: str, listener: int
) -> None:
    result = scene.tool(mechanism, "none").run_sync(command=CONNECT.format(py=PY, port=listener))
    assert "CONNECTED" not in result["stdout"]
    assert result["return_code"] != 0


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_loopback_listener_is_reachable_with_network_loopback(
    scene: Scene, mechanism: str, listener: int
) -> None:
    result = scene.tool(mechanism, "loopback").run_sync(
        command=CONNECT.format(py=PY, port=listener)
    )
    assert result["stdout"].strip() == "CONNECTED", result


# The child forks a grandchild that leaves the session (setsid), lets go of
# the output pipes (so an unconfined call is not held until its timeout) and sleeps,
# prints the grandchild's pid as the host sees it (first NSpid entry when
# /proc is the host's), and exits. It exits only once the grandchild has left
# the session (a byte on a pipe says so): exiting at once let the call end,
# and its process group be killed, before the grandchild's setsid() on a
# loaded machine, so the grandchild died with the group and the unconfined
# control found no survivor.
SURVIVOR = (
    '{py} -c "import os, sys, time\n'
    "r, w = os.pipe()\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.setsid(); n = os.open(os.devnull, os.O_RDWR); os.dup2(n, 1); os.dup2(n, 2)\n"
    "    os.write(w, b'x'); os.close(w); os.close(r)\n"
    "    time.sleep(300); os._exit(0)\n"
    "os.close(w); os.read(r, 1)\n"
    'print(pid)" {marker}'
)


def _tagged(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_setsid_child_survives_without_any_containment(scene: Scene) -> None:
    marker = f"survivor-{uuid.uuid4().hex}"
    result = scene.tool("raw").run_sync(command=SURVIVOR.format(py=PY, marker=marker))
    try:
        reported = int(result["stdout"].strip())
        assert _alive(reported)
        assert _tagged(marker) == [reported]
    finally:
        for pid in _tagged(marker):
            os.kill(pid, 9)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_setsid_child_is_gone_when_the_call_returns(scene: Scene, mechanism: str) -> None:
    _needs_pid_namespace(mechanism)
    marker = f"survivor-{uuid.uuid4().hex}"
    result = scene.tool(mechanism).run_sync(command=SURVIVOR.format(py=PY, marker=marker))
    try:
        # The pid the child reports is its namespace's; the marker finds it on the host.
        assert int(result["stdout"].strip()) > 0, result
        assert _tagged(marker) == []
    finally:
        for pid in _tagged(marker):
            os.kill(pid, 9)


@pytest.fixture
def secret_process() -> Iterator[int]:
    """A process outside the sandbox whose environment holds a secret."""
    child = subprocess.Popen(
        [PY, "-c", "import time; time.sleep(120)"],
        env={**os.environ, "LIONFACTORY_TEST_TOKEN": SECRET},
    )
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()


def test_another_processs_environment_is_readable_without_isolation(
    scene: Scene, secret_process: int
) -> None:
    result = scene.tool("raw").run_sync(command=f"cat /proc/{secret_process}/environ")
    assert SECRET in result["stdout"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_another_processs_environment_is_unreadable(
    scene: Scene, mechanism: str, secret_process: int
) -> None:
    result = scene.tool(mechanism).run_sync(command=f"cat /proc/{secret_process}/environ")
    assert SECRET not in result["stdout"]
    assert result["return_code"] != 0


@pytest.fixture
def bystander() -> Iterator[subprocess.Popen[bytes]]:
    """A process outside the sandbox that a command might try to kill."""
    child = subprocess.Popen([PY, "-c", "import time; time.sleep(120)"])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def test_a_process_outside_can_be_killed_without_isolation(
    scene: Scene, bystander: subprocess.Popen[bytes]
) -> None:
    scene.tool("raw").run_sync(command=f"kill -9 {bystander.pid}")
    assert bystander.wait(timeout=10) == -9


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_process_outside_cannot_be_signalled(
    scene: Scene, mechanism: str, bystander: subprocess.Popen[bytes]
) -> None:
    result = scene.tool(mechanism).run_sync(command=f"kill -9 {bystander.pid}")
    assert result["return_code"] != 0
    assert bystander.poll() is None


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_timed_out_command_leaves_no_setsid_child(scene: Scene, mechanism: str) -> None:
    _needs_pid_namespace(mechanism)
    marker = f"survivor-{uuid.uuid4().hex}"
    hang = SURVIVOR.replace("print(pid)", "print(pid, flush=True); time.sleep(300)")
    result = scene.tool(mechanism).run_sync(command=hang.format(py=PY, marker=marker), timeout=1500)
    try:
        assert result["timed_out"], result
        assert _tagged(marker) == []
    finally:
        for pid in _tagged(marker):
            os.kill(pid, 9)


def _block_device() -> str | None:
    for entry in sorted(Path("/dev").iterdir()):
        try:
            if stat.S_ISBLK(entry.stat().st_mode) and os.access(entry, os.R_OK):
                with entry.open("rb") as device:
                    device.read(1)
                return str(entry)
        except OSError:
            continue
    return None


BLOCK_DEVICE = _block_device()


@pytest.mark.skipif(BLOCK_DEVICE is None, reason="no readable block device here")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_raw_block_device_is_unreadable(scene: Scene, mechanism: str) -> None:
    # Whoever reads the disk reads every hidden file; root may, unconfined.
    unconfined = scene.tool("none").run_sync(command=f"head -c 16 {BLOCK_DEVICE}")
    assert unconfined["return_code"] == 0
    result = scene.tool(mechanism).run_sync(command=f"head -c 16 {BLOCK_DEVICE}")
    assert result["return_code"] != 0, result


# --- Kernel and host settings (root included) -------------------------------

SYSCTL = Path("/proc/sys/kernel/printk_ratelimit_burst")
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="the attack needs root")


@pytest.fixture
def sysctl_value() -> Iterator[str]:
    """The harmless setting's value before the test; restored if a test ever changed it."""
    if not SYSCTL.exists():
        pytest.skip(f"no {SYSCTL} here")
    before = SYSCTL.read_text()
    try:
        yield before
    finally:
        if SYSCTL.read_text() != before:
            SYSCTL.write_text(before)


def _sysctl_attack() -> str:
    new = int(SYSCTL.read_text()) + 1
    return f"{PY} -c \"open('{SYSCTL}', 'w').write('{new}')\""


@AS_ROOT
def test_root_changes_a_kernel_setting_without_containment(scene: Scene, sysctl_value: str) -> None:
    scene.tool("raw").run_sync(command=_sysctl_attack())
    assert SYSCTL.read_text() != sysctl_value


@AS_ROOT
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_root_cannot_change_a_kernel_setting(
    scene: Scene, mechanism: str, sysctl_value: str
) -> None:
    result = scene.tool(mechanism).run_sync(command=_sysctl_attack())
    assert SYSCTL.read_text() == sysctl_value
    assert result["return_code"] != 0, result


# Host interfaces opened for writing (never written: opening changes nothing).
HOST_INTERFACES = [
    path
    for path in (
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/kernel/modprobe",
        "/proc/sys/vm/drop_caches",
        "/proc/sysrq-trigger",
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "/sys/power/state",
    )
    if os.path.exists(path)
]
OPEN_FOR_WRITE = "{py} -c \"import os; os.close(os.open('{path}', os.O_WRONLY)); print('OPENED')\""


@AS_ROOT
@pytest.mark.parametrize("path", HOST_INTERFACES)
def test_root_may_open_host_interfaces_for_writing_without_containment(
    scene: Scene, path: str
) -> None:
    result = scene.tool("raw").run_sync(command=OPEN_FOR_WRITE.format(py=PY, path=path))
    assert "OPENED" in result["stdout"], result


@AS_ROOT
@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("path", HOST_INTERFACES)
def test_host_interfaces_are_not_writable(scene: Scene, mechanism: str, path: str) -> None:
    result = scene.tool(mechanism).run_sync(command=OPEN_FOR_WRITE.format(py=PY, path=path))
    assert "OPENED" not in result["stdout"], result
    assert result["return_code"] != 0


@AS_ROOT
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_root_cannot_rename_the_host(scene: Scene, mechanism: str) -> None:
    before = socket.gethostname()
    try:
        result = scene.tool(mechanism).run_sync(
            command=f"{PY} -c \"import socket; socket.sethostname('lf-attack')\""
        )
        assert socket.gethostname() == before
        assert result["return_code"] != 0
    finally:
        if socket.gethostname() != before:
            socket.sethostname(before)


@AS_ROOT
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_root_runs_without_capabilities(scene: Scene, mechanism: str) -> None:
    result = scene.tool(mechanism).run_sync(
        command="grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status"
    )
    values = {line.split()[0]: int(line.split()[1], 16) for line in result["stdout"].splitlines()}
    assert set(values) == {"CapEff:", "CapPrm:", "CapBnd:"}
    assert not any(values.values()), result


@AS_ROOT
@pytest.mark.skipif(mechanism_problem("bwrap") is not None, reason="no bwrap")
def test_root_is_an_unprivileged_uid_inside_bwrap(scene: Scene) -> None:
    result = scene.tool("bwrap").run_sync(command="id -u")
    assert result["return_code"] == 0, result
    assert int(result["stdout"]) != 0
    # Files it writes in the workspace are still the caller's (root's) outside.
    scene.tool("bwrap").run_sync(command="touch made.txt")
    assert (scene.ws / "made.txt").stat().st_uid == 0


# --- Host Unix sockets with network="none" ----------------------------------


class Listeners:
    """Unix-socket services outside the workspace: a runtime dir, an abstract name, an agent."""

    def __init__(self, scene: Scene, run_dir: Path) -> None:
        self.sockets: list[socket.socket] = []
        user = run_dir / "user" / "0"
        user.mkdir(parents=True)
        gnupg = scene.home / ".gnupg"
        gnupg.mkdir()
        self.addresses = {
            "runtime_dir": str(user / "bus"),
            "docker_like": str(run_dir / "docker.sock"),
            "hidden_gnupg": str(gnupg / "S.gpg-agent"),
            "abstract": f"@lionfactory-test-{uuid.uuid4().hex}",
        }
        for address in self.addresses.values():
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind("\0" + address[1:] if address.startswith("@") else address)
            server.listen(8)  # connect() completes from the backlog, no accept needed
            self.sockets.append(server)

    def close(self) -> None:
        for server in self.sockets:
            server.close()


@pytest.fixture
def listeners(scene: Scene) -> Iterator[Listeners]:
    # Outside /tmp (bwrap's private /tmp would hide it anyway) and outside
    # the home: where real services put their sockets.
    base = Path("/run") if os.access("/run", os.W_OK) else Path("/var/tmp")
    run_dir = base / f"lionfactory-test-{uuid.uuid4().hex}"
    run_dir.mkdir()
    found = Listeners(scene, run_dir)
    try:
        yield found
    finally:
        found.close()
        subprocess.run(["rm", "-rf", str(run_dir)], check=False)


UNIX_CONNECT = (
    '{py} -c "import socket, sys\n'
    "a = sys.argv[1]\n"
    "a = chr(0) + a[1:] if a.startswith(chr(64)) else a\n"
    "s = socket.socket(socket.AF_UNIX); s.connect(a); print('CONNECTED')\" {address}"
)
SOCKET_KINDS = ("runtime_dir", "docker_like", "hidden_gnupg", "abstract")


@pytest.mark.parametrize("kind", SOCKET_KINDS)
def test_each_host_unix_socket_is_reachable_without_containment(
    scene: Scene, listeners: Listeners, kind: str
) -> None:
    command = UNIX_CONNECT.format(py=PY, address=listeners.addresses[kind])
    result = scene.tool("raw").run_sync(command=command)
    assert result["stdout"].strip() == "CONNECTED", result


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("kind", SOCKET_KINDS)
def test_host_unix_sockets_are_unreachable_with_network_none(
    scene: Scene, listeners: Listeners, mechanism: str, kind: str
) -> None:
    command = UNIX_CONNECT.format(py=PY, address=listeners.addresses[kind])
    result = scene.tool(mechanism, "none").run_sync(command=command)
    assert "CONNECTED" not in result["stdout"], result
    assert result["return_code"] != 0


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_host_unix_socket_is_reachable_with_network_full(
    scene: Scene, listeners: Listeners, mechanism: str
) -> None:
    command = UNIX_CONNECT.format(py=PY, address=listeners.addresses["docker_like"])
    result = scene.tool(mechanism, "full").run_sync(command=command)
    assert result["stdout"].strip() == "CONNECTED", result


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_socketpair_still_works_with_network_none(scene: Scene, mechanism: str) -> None:
    # Event loops (asyncio, trio) wake themselves through a socketpair.
    command = f"{PY} -c \"import asyncio; asyncio.run(asyncio.sleep(0)); print('LOOP')\""
    result = scene.tool(mechanism, "none").run_sync(command=command)
    assert result["stdout"].strip() == "LOOP", result


# --- No process outlives its call, with or without a mechanism --------------

CONTAINED = [pytest.param("none"), *MECHANISMS]

# The command itself clears its parent-death signal and leaves the process
# group, then hangs; the call times out.
ESCAPER = (
    '{py} -c "import ctypes, os, time\n'
    "ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)\n"
    "try:\n"
    "    os.setsid()\n"
    "except OSError:\n"
    "    pass\n"
    "n = os.open(os.devnull, os.O_RDWR); os.dup2(n, 1); os.dup2(n, 2)\n"
    'time.sleep(300)" {marker}'
)
# Fifty children, each leaving the session and letting go of the pipes.
FIFTY = (
    '{py} -c "import os, time\n'
    "for _ in range(50):\n"
    "    if os.fork() == 0:\n"
    "        os.setsid(); n = os.open(os.devnull, os.O_RDWR); os.dup2(n, 1); os.dup2(n, 2)\n"
    "        time.sleep(300); os._exit(0)\n"
    "print('started')\" {marker}"
)
SLEEPER = "{py} -c 'import time; time.sleep(300)' {marker}"
LEAVERS = {
    "fork_setsid": SURVIVOR,
    "fifty_setsid_children": FIFTY,
    # The pause lets the forked child reach setsid() before the call ends; the
    # sleeper lets go of the pipes like the others (an unconfined call would
    # otherwise be held until its timeout).
    "setsid_f": f'sh -c "setsid -f {SLEEPER} >/dev/null 2>&1; sleep 1"',
    "tmux_detached": "tmux -L {marker} new-session -d " + SLEEPER,
}
# A contained call must end although a leaver still holds its output pipes:
# the sandbox's end closes them.
HOLDING_PIPES = {"setsid_f_holding_pipes": f'sh -c "setsid -f {SLEEPER}; sleep 1"'}


def _kill_tagged(marker: str) -> None:
    for pid in _tagged(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


def _wait_until_gone(marker: str) -> list[int]:
    """Leftovers after the call; a killed process may take a moment to leave /proc."""
    for _ in range(100):
        left = [pid for pid in _tagged(marker) if _alive(pid) and not _zombie(pid)]
        if not left:
            return []
        time.sleep(0.05)
    return left


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.parametrize("attack", LEAVERS.values(), ids=LEAVERS.keys())
def test_each_leaver_survives_without_any_containment(scene: Scene, attack: str) -> None:
    if attack.startswith("tmux") and shutil.which("tmux") is None:
        pytest.skip("no tmux")
    marker = f"leaver-{uuid.uuid4().hex}"
    try:
        scene.tool("raw").run_sync(command=attack.format(py=PY, marker=marker), timeout=30_000)
        assert _tagged(marker) != []
    finally:
        _kill_tagged(marker)


@pytest.mark.parametrize("mechanism", CONTAINED)
@pytest.mark.parametrize(
    "attack", [*LEAVERS.values(), *HOLDING_PIPES.values()], ids=[*LEAVERS, *HOLDING_PIPES]
)
def test_no_leaver_outlives_its_call(scene: Scene, mechanism: str, attack: str) -> None:
    if attack.startswith("tmux") and shutil.which("tmux") is None:
        pytest.skip("no tmux")
    if mechanism == "none" and containment() == "group":
        pytest.skip("no namespaces: only the process-group kill contains 'none'")
    marker = f"leaver-{uuid.uuid4().hex}"
    try:
        result = scene.tool(mechanism, "full").run_sync(
            command=attack.format(py=PY, marker=marker), timeout=30_000
        )
        assert result["error"] is None, result
        assert _wait_until_gone(marker) == []
    finally:
        _kill_tagged(marker)


@pytest.mark.parametrize("mechanism", CONTAINED)
def test_a_command_clearing_its_death_signal_and_leaving_the_group_is_gone(
    scene: Scene, mechanism: str
) -> None:
    if mechanism == "none" and containment() == "group":
        pytest.skip("no namespaces: only the process-group kill contains 'none'")
    marker = f"escaper-{uuid.uuid4().hex}"
    try:
        result = scene.tool(mechanism).run_sync(
            command=ESCAPER.format(py=PY, marker=marker), timeout=1500
        )
        assert result["timed_out"], result
        assert _wait_until_gone(marker) == []
    finally:
        _kill_tagged(marker)


# io_uring creates and connects sockets without the socket()/connect() calls
# a seccomp filter sees; x86-64 and arm64 both number io_uring_setup 425.
IO_URING = (
    '{py} -c "import ctypes, os\n'
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "fd = libc.syscall(425, 4, ctypes.create_string_buffer(120))\n"
    "print('RING' if fd >= 0 else os.strerror(ctypes.get_errno()))\""
)


@pytest.mark.skipif(
    Path("/proc/sys/kernel/io_uring_disabled").exists()
    and Path("/proc/sys/kernel/io_uring_disabled").read_text().strip() != "0",
    reason="io_uring is disabled on this kernel",
)
def test_io_uring_is_available_without_containment(scene: Scene) -> None:
    assert scene.tool("raw").run_sync(command=IO_URING.format(py=PY))["stdout"].strip() == "RING"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_io_uring_is_refused_with_network_none(scene: Scene, mechanism: str) -> None:
    result = scene.tool(mechanism, "none").run_sync(command=IO_URING.format(py=PY))
    assert result["stdout"].strip() == "Operation not permitted", result

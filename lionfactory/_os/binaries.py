"""Find and run helper programs: the running environment's scripts folder first, then PATH.

Tools that drive a binary (ruff, ast-grep, grep, find) look it up through a
`BinaryFinder`, the seam tests replace to point at a fake or missing program.
The environment comes first because the ``code`` extra installs ruff and
ast-grep next to the interpreter (``.venv/bin``), and a virtual environment
that was not activated does not put that folder on PATH; a system-wide copy
of another version is then only a fallback.

Lookups happen at call time, never in a factory (factories do no I/O).
`run_helper` runs one and is the single place that turns a launch failure, a
timeout or an unexpected exit status into an error.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import attrs

from lionfactory._os.isolation import Isolation
from lionfactory._os.process import LaunchError, ProcessResult, run_process

__all__ = [
    "BinaryFinder",
    "HelperFailure",
    "environment_dirs",
    "finder_or_default",
    "run_helper",
]


def environment_dirs() -> tuple[Path, ...]:
    """The folders the running Python environment installs scripts into.

    ``sysconfig``'s scripts path, then the folder of `sys.executable` (they
    differ for some layouts, such as a venv created by a Python whose prefix
    has another scheme). The executable is not resolved: in a virtual
    environment it is a symlink whose *own* folder is the one we want.
    """
    # Derived once per interpreter layout: sysconfig expands its scheme on
    # every call (0.4 ms), and each helper tool of every toolkit asked.
    return _environment_dirs(sys.prefix, sys.exec_prefix, sys.executable)


@functools.lru_cache(maxsize=4)
def _environment_dirs(prefix: str, exec_prefix: str, executable: str) -> tuple[Path, ...]:
    del prefix, exec_prefix  # the cache key: sysconfig reads them itself
    dirs: list[Path] = []
    scripts = sysconfig.get_path("scripts")
    if scripts:
        dirs.append(Path(scripts))
    if executable:
        dirs.append(Path(executable).parent)
    return tuple(dict.fromkeys(dirs))


def _paths(dirs: Iterable[str | os.PathLike[str]]) -> tuple[Path, ...]:
    return tuple(Path(d) for d in dirs)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


@attrs.frozen
class BinaryFinder:
    """Where to look for a program.

    Attributes:
        env_dirs: folders searched first (default: `environment_dirs()`).
        path: a PATH-style string searched next; ``None`` reads the
            ``PATH`` environment variable at lookup time.
        hidden: program names never found, wherever they are installed
            (a test runs the fallback of a tool whose preferred helper is
            installed, e.g. search without ``rg``).
    """

    env_dirs: tuple[Path, ...] = attrs.field(factory=environment_dirs, converter=_paths)
    path: str | None = None
    hidden: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)

    def _search_dirs(self) -> list[Path]:
        path = os.environ.get("PATH", os.defpath) if self.path is None else self.path
        dirs = [*self.env_dirs, *(Path(d) for d in path.split(os.pathsep) if d)]
        return list(dict.fromkeys(dirs))

    def _executables(self, name: str) -> Iterator[str]:
        """The executables called `name`, in lookup order (a folder listed twice, twice)."""
        if name in self.hidden:
            return
        for directory in self._search_dirs():
            candidate = directory / name
            if _is_executable(candidate):
                yield str(candidate)

    def candidates(self, name: str) -> list[str]:
        """Every executable called `name`, in lookup order, without duplicates."""
        return list(dict.fromkeys(self._executables(name)))

    def find(self, name: str) -> str | None:
        """The first executable called `name`, or None (the first of `candidates`).

        It stops at the first hit: checking every folder of ``PATH`` for the
        ``rg`` a search found in its first folder was a tenth of a small
        search's own time.
        """
        return next(self._executables(name), None)


def finder_or_default(finder: object) -> BinaryFinder:
    """A factory's ``_binaries`` option: a `BinaryFinder`, or the default one for None.

    Raises:
        TypeError: anything else.
    """
    if finder is None:
        return BinaryFinder()
    if not isinstance(finder, BinaryFinder):
        raise TypeError(f"_binaries must be a BinaryFinder or None, got {finder!r}")
    return finder


@attrs.frozen
class HelperFailure:
    """Why a helper program gave no usable report, in a sentence a model can act on."""

    message: str


def _exit_failed(result: ProcessResult) -> bool:
    """Grep's convention, which ruff, ast-grep and ripgrep share: 0 found, 1 found nothing."""
    return result.returncode not in (0, 1)


async def run_helper(
    argv: list[str],
    *,
    program: str,
    cwd: Path,
    timeout: float,
    max_bytes: int,
    isolation: Isolation | None,
    smaller: str,
    failed: Callable[[ProcessResult], bool] = _exit_failed,
    stderr: Callable[[str], str] = lambda text: text.strip()[:500],
) -> ProcessResult | HelperFailure:
    """Run one helper program and tell a usable report from every way it can fail.

    The one place the helper-binary tools (search, code_check, ast_search)
    decide that a launch failure, a timeout or an unexpected exit status is
    an error: none of them is ever reported as an empty success.

    Args:
        argv: the program (as found by a `BinaryFinder`) and its arguments.
        program: its name in messages (``"ruff"``).
        cwd: where it runs (the workspace root).
        timeout: seconds before it is killed.
        max_bytes: the cap on the output kept.
        isolation: the tool's confinement, or None.
        smaller: what to try after a timeout (``"check fewer paths"``).
        failed: whether a finished run failed (default: exit status not 0 or 1).
        stderr: how much of its error output a message may quote.

    Returns:
        The finished run, or the `HelperFailure` to answer with.
    """
    try:
        result = await run_process(
            argv,
            cwd=cwd,
            timeout=timeout,
            max_bytes=max_bytes,
            announce_truncation=False,
            isolation=isolation,
        )
    except LaunchError as exc:
        return HelperFailure(exc.message)
    if result.timed_out:
        return HelperFailure(f"{program} did not finish within {timeout:.0f} s; {smaller}.")
    if failed(result):
        detail = stderr(result.stderr) or "no message"
        return HelperFailure(f"{program} failed (exit {result.returncode}): {detail}")
    return result

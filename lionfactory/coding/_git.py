"""Run git for the sandbox: argv only, through the process runner, never prompting.

Every git call of the coding toolkit goes through `Git.run`, which goes
through `lionfactory._process.run_process` (or the runner a test injects).
The environment is the caller's, minus the variables that would point git at
another repository or index (``GIT_DIR``, ``GIT_INDEX_FILE``, ... are set
inside git hooks, for example), plus ``GIT_TERMINAL_PROMPT=0`` so a git that
wants credentials fails at once instead of waiting for input that never comes.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from lionfactory._isolation import Isolation
from lionfactory._process import LaunchError, ProcessResult, run_process
from lionfactory.errors import LionfactoryError

__all__ = ["FALLBACK_IDENTITY", "Git", "GitError", "Runner"]

Runner = Callable[..., Awaitable[ProcessResult]]
"""``runner(argv, *, cwd, timeout, env, max_bytes, announce_truncation)``: `run_process`'s shape."""

FALLBACK_IDENTITY = ("lionfactory sandbox", "sandbox@lionfactory.invalid")
"""Author of sandbox commits in a repository with no ``user.name``/``user.email``."""

# Variables that redirect git to another repository, work tree or index.
_REDIRECTING = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_NAMESPACE",
        "GIT_PREFIX",
    }
)
DEFAULT_TIMEOUT = 60.0
"""Seconds for one git call; commits and merges run hooks and get `HOOK_TIMEOUT`."""
HOOK_TIMEOUT = 300.0


class GitError(LionfactoryError):
    """A git call failed; `message` is a sentence a model can act on."""

    def __init__(self, message: str, result: ProcessResult | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.result = result

    def __str__(self) -> str:
        return self.message


def _describe(result: ProcessResult) -> str:
    if result.timed_out:
        return "it timed out and was killed"
    output = (result.stderr.strip() or result.stdout.strip())[-2000:]
    return (
        f"exit code {result.returncode}: {output}" if output else f"exit code {result.returncode}"
    )


@attrs.frozen
class Git:
    """How the sandbox runs git: the runner seam and the environment.

    Attributes:
        runner: `run_process`, or a test's stand-in with the same signature.
        env: extra variables (``GIT_INDEX_FILE`` for a scratch index, ...).
        isolation: the confinement git (and the hooks it runs) starts under;
            None runs it directly (and keeps the runner's signature minimal).
    """

    runner: Runner = run_process
    env: Mapping[str, str] = attrs.field(factory=dict)
    isolation: Isolation | None = None

    def with_env(self, **extra: str) -> Git:
        """The same runner with more environment variables."""
        return attrs.evolve(self, env={**self.env, **extra})

    def with_isolation(self, isolation: Isolation | None) -> Git:
        """The same runner and environment under another confinement."""
        return attrs.evolve(self, isolation=isolation)

    def _environment(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if k not in _REDIRECTING}
        return {**base, "GIT_TERMINAL_PROMPT": "0", **self.env}

    async def run(
        self,
        args: Sequence[str],
        *,
        cwd: Path,
        timeout: float = DEFAULT_TIMEOUT,
        max_bytes: int = 1_000_000,
    ) -> ProcessResult:
        """Run ``git <args>`` in `cwd` and return the result, whatever its exit code.

        Raises:
            GitError: git could not be started.
        """
        confined = {} if self.isolation is None else {"isolation": self.isolation}
        try:
            return await self.runner(
                ["git", *args],
                cwd=cwd,
                timeout=timeout,
                env=self._environment(),
                max_bytes=max_bytes,
                announce_truncation=False,
                **confined,
            )
        except LaunchError as exc:
            raise GitError(f"{exc.message} The sandbox needs git on PATH.") from None

    async def check(self, args: Sequence[str], *, cwd: Path, what: str, **kwargs: Any) -> str:
        """Run git and return its stdout; a non-zero exit raises `GitError` naming `what`."""
        result = await self.run(args, cwd=cwd, **kwargs)
        if result.returncode != 0 or result.timed_out:
            raise GitError(
                f"Could not {what} (`git {' '.join(args)}`: {_describe(result)}).", result
            )
        return result.stdout

    async def succeeds(self, args: Sequence[str], *, cwd: Path) -> bool:
        """Whether ``git <args>`` exits 0 (for queries such as ``rev-parse --verify``)."""
        result = await self.run(args, cwd=cwd)
        return result.returncode == 0 and not result.timed_out

    async def current_branch(self, cwd: Path) -> str | None:
        """The checked-out branch's short name, or None for a detached HEAD."""
        result = await self.run(["symbolic-ref", "--quiet", "--short", "HEAD"], cwd=cwd)
        if result.returncode != 0:
            return None
        return result.stdout.strip() or None

    async def identity_options(self, cwd: Path) -> list[str]:
        """``-c user.name=... -c user.email=...`` when the repository configures no author."""
        options = []
        for key, fallback in zip(("user.name", "user.email"), FALLBACK_IDENTITY, strict=True):
            if not await self.succeeds(["config", "--get", key], cwd=cwd):
                options += ["-c", f"{key}={fallback}"]
        return options

    async def status(self, cwd: Path) -> list[str]:
        """``git status --porcelain`` entries (untracked files included), one per path."""
        # --no-optional-locks: a status must not rewrite the user's index.
        out = await self.check(
            ["--no-optional-locks", "status", "--porcelain=v1", "-z", "--untracked-files=all"],
            cwd=cwd,
            what="read the status",
        )
        entries, parts = [], out.split("\0")
        index = 0
        while index < len(parts):
            entry = parts[index]
            if entry:
                entries.append(entry)
                # A rename or copy is followed by its source path.
                if entry[:1] in ("R", "C"):
                    index += 1
            index += 1
        return entries

"""Run git for the sandbox: argv only, through the process runner, hardened, never prompting.

Every git call of the coding toolkit goes through `Git.run`, which goes
through `lionfactory._os.process.run_process` (or the runner a test injects).

A repository's own configuration is input the agent can write (``.git/config``
is a file like any other), and git runs programs named there: an
``core.fsmonitor`` command on every status, hooks on commit and checkout,
clean/smudge filters on add and checkout, merge drivers, diff and textconv
commands, pagers, credential helpers, ssh commands. So every call runs with a
configuration that no repository can override:

* ``-c`` options (command-line scope beats every file) turning off the
  fsmonitor, hooks (``core.hooksPath=/dev/null``), the pager, credential
  helpers, ask-pass programs, automatic gc/maintenance, submodule recursion and
  every transport protocol (the sandbox never fetches);
* for each filter, merge driver or diff driver the repository defines, a
  command-scope setting that blanks its command (merge drivers become
  ``false``, so a merge needing one conflicts instead of running it); ``diff``
  also gets ``--no-ext-diff --no-textconv``. These travel as
  ``GIT_CONFIG_KEY_<n>``/``GIT_CONFIG_VALUE_<n>`` pairs, not ``-c key=value``:
  git splits ``-c`` at the first ``=``, so ``-c filter.a=b.clean=`` would set
  ``filter.a`` and leave the driver named ``a=b`` running. A listing of
  drivers too large to read whole is refused, never cut short;
* an environment without the user's ``GIT_*`` variables (they can inject
  configuration, pagers, editors or another ``GIT_EXEC_PATH``), with
  ``GIT_CONFIG_NOSYSTEM=1`` and ``GIT_CONFIG_GLOBAL=/dev/null`` so neither the
  system's nor the user's configuration runs anything either, and
  ``GIT_TERMINAL_PROMPT=0`` so a git that wants credentials fails at once.

Which repository git works on is never discovered from the work tree: a
``.git`` file or an admin folder's ``commondir`` is writable by whatever runs
in the checkout, so the sandbox passes ``GIT_DIR``, ``GIT_COMMON_DIR`` and
``GIT_WORK_TREE`` recorded when it was created (see `Git.at`).

Only the author identity is still read from the user's configuration (reading
configuration runs nothing) and passed explicitly. The cost: filters such as
Git LFS do not run in the sandbox, so such files are committed as they are in
the worktree.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from lionfactory._os.isolation import Isolation
from lionfactory._os.process import LaunchError, ProcessResult, run_process
from lionfactory.errors import ToolFailure

__all__ = ["FALLBACK_IDENTITY", "Git", "GitError", "Runner"]

Runner = Callable[..., Awaitable[ProcessResult]]
"""``runner(argv, *, cwd, timeout, env, max_bytes, announce_truncation)``: `run_process`'s shape."""

FALLBACK_IDENTITY = ("lionfactory agent", "agent@localhost")
"""Author of sandbox commits when the user has no ``user.name``/``user.email`` configured."""

MAX_DRIVER_LISTING = 1_000_000
"""Bytes of configured driver names the hardening reads; a longer listing is refused."""

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
# Identity and timestamps are the only GIT_* variables passed through: they
# configure nothing that runs.
_KEPT_GIT_VARIABLES = frozenset(
    {
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_AUTHOR_DATE",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_COMMITTER_DATE",
    }
)
# Variables outside the GIT_ prefix through which git would run a program.
_RUNNING_VARIABLES = frozenset({"SSH_ASKPASS", "PAGER", "EDITOR", "VISUAL"})

HARDENING: tuple[str, ...] = (
    "--no-pager",
    *(
        item
        for setting in (
            "core.fsmonitor=false",
            "core.hooksPath=/dev/null",
            "core.pager=cat",
            "core.askPass=",
            "core.sshCommand=false",
            "core.editor=true",
            "sequence.editor=true",
            "credential.helper=",
            "diff.external=",
            "protocol.allow=never",
            "submodule.recurse=false",
            "gc.auto=0",
            "maintenance.auto=false",
            "commit.gpgSign=false",
            "tag.gpgSign=false",
            "log.showSignature=false",
            "merge.stat=false",
        )
        for item in ("-c", setting)
    ),
)
"""Options before every git subcommand; no repository configuration can undo them."""

_HARDENED_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "GIT_EDITOR": "true",
    "GIT_PROTOCOL_FROM_USER": "0",
}

# Keys through which a repository names a program git runs on file content.
_DRIVER_KEYS = r"^(filter|merge|diff)\..+\.(clean|smudge|process|required|driver|textconv|command)$"
_BLANKED = {
    "clean": "",
    "smudge": "",
    "process": "",
    "required": "false",
    "driver": "false",
    "textconv": "",
    "command": "",
}
# Subcommands that never read file content, so never run a filter or driver:
# they skip the extra `git config` call that lists the repository's drivers.
_CONTENT_FREE = frozenset(
    {"rev-parse", "config", "symbolic-ref", "rev-list", "branch", "update-ref", "commit-tree"}
)
_DIFFING = frozenset({"diff", "show", "log"})

DEFAULT_TIMEOUT = 60.0
"""Seconds for one git call; commits and merges run hooks and get `HOOK_TIMEOUT`."""
HOOK_TIMEOUT = 300.0


class GitError(ToolFailure):
    """A git call failed; `message` is a sentence a model can act on."""

    def __init__(self, message: str, result: ProcessResult | None = None) -> None:
        super().__init__(message)
        self.result = result


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
        isolation: the confinement git starts under (hooks never run: see HARDENING);
            None runs it directly (and keeps the runner's signature minimal).
        own_config: the repository is one only the library writes (the
            checkpoint store, pinned with `at`), so no driver listing is read
            before content commands: its configuration names none, and git
            reads no other (``GIT_CONFIG_GLOBAL``/``NOSYSTEM``).
        die_with_parent: git is killed when this process dies, even where
            it runs outside any PID namespace (`run_process`'s option), for
            a command that can run for minutes (a first snapshot).
    """

    runner: Runner = run_process
    env: Mapping[str, str] = attrs.field(factory=dict)
    isolation: Isolation | None = None
    own_config: bool = False
    die_with_parent: bool = False

    def with_env(self, **extra: str) -> Git:
        """The same runner with more environment variables."""
        return attrs.evolve(self, env={**self.env, **extra})

    def with_isolation(self, isolation: Isolation | None) -> Git:
        """The same runner and environment under another confinement."""
        return attrs.evolve(self, isolation=isolation)

    def _environment(self) -> dict[str, str]:
        base = {
            k: v
            for k, v in os.environ.items()
            if (not k.startswith("GIT_") or k in _KEPT_GIT_VARIABLES)
            and k not in _RUNNING_VARIABLES
        }
        return {**base, **_HARDENED_ENV, **self.env}

    async def _launch(
        self,
        argv: list[str],
        *,
        cwd: Path,
        timeout: float,
        max_bytes: int,
        extra_env: Mapping[str, str] | None = None,
    ) -> ProcessResult:
        # Confined only when the toolkit chose a mechanism: a test's fake runner
        # need not know the keyword (nor die_with_parent's).
        confined: dict[str, Any] = {} if self.isolation is None else {"isolation": self.isolation}
        if self.die_with_parent:
            confined["die_with_parent"] = True
        try:
            return await self.runner(
                argv,
                cwd=cwd,
                timeout=timeout,
                env={**self._environment(), **(extra_env or {})},
                max_bytes=max_bytes,
                announce_truncation=False,
                **confined,
            )
        except LaunchError as exc:
            raise GitError(f"{exc.message} The sandbox needs git on PATH.") from None

    def at(self, git_dir: Path, work_tree: Path, common_dir: Path | None = None) -> Git:
        """The same runner pinned to one repository: nothing is discovered from the work tree.

        Args:
            git_dir: the repository's git directory (``GIT_DIR``).
            work_tree: its work tree (``GIT_WORK_TREE``).
            common_dir: the shared git directory (``GIT_COMMON_DIR``); `git_dir`
                when None, so no ``commondir`` file is ever read.
        """
        return self.with_env(
            GIT_DIR=str(git_dir),
            GIT_WORK_TREE=str(work_tree),
            GIT_COMMON_DIR=str(common_dir or git_dir),
        )

    async def _driver_overrides(self, cwd: Path) -> dict[str, str]:
        """Command-scope settings blanking every filter, merge and diff driver the repository names.

        Raises:
            GitError: the configuration cannot be read, or names more drivers
                than `MAX_DRIVER_LISTING` bytes hold: git would run the ones
                past the cut, so nothing runs at all.
        """
        result = await self._launch(
            ["git", *HARDENING, "config", "--name-only", "-z", "--get-regexp", _DRIVER_KEYS],
            cwd=cwd,
            timeout=DEFAULT_TIMEOUT,
            max_bytes=MAX_DRIVER_LISTING,
        )
        if result.stdout_truncated or result.timed_out:
            raise GitError(
                f"The repository's configuration names more filter, merge and diff driver "
                f"settings than the sandbox can check (over {MAX_DRIVER_LISTING:,} bytes of "
                f"names), so it runs no git command on it. Ask the user to remove them "
                f"(git config --get-regexp '^(filter|merge|diff)\\.')."
            )
        # 1: no driver configured. Anything else: git could not read the configuration.
        if result.returncode not in (0, 1):
            raise GitError(
                f"Could not read the repository's configuration to disable its drivers "
                f"({_describe(result)}). Ask the user to check the repository's config file."
            )
        env: dict[str, str] = {}
        names = [name for name in dict.fromkeys(result.stdout.split("\0")) if name]
        for count, name in enumerate(names):
            blank = _BLANKED.get(name.rsplit(".", 1)[-1].lower())
            if blank is None:
                raise GitError(
                    f"The repository's configuration lists a driver setting the sandbox does "
                    f"not recognise ({name[:200]!r}), so it runs no git command on it. Ask the "
                    f"user to check the repository's config file."
                )
            env[f"GIT_CONFIG_KEY_{count}"] = name
            env[f"GIT_CONFIG_VALUE_{count}"] = blank
        if env:
            env["GIT_CONFIG_COUNT"] = str(len(names))
        return env

    async def run(
        self,
        args: Sequence[str],
        *,
        cwd: Path,
        timeout: float = DEFAULT_TIMEOUT,
        max_bytes: int = 1_000_000,
    ) -> ProcessResult:
        """Run ``git <hardening> <args>`` in `cwd` and return the result, whatever its exit code.

        Raises:
            GitError: git could not be started.
        """
        args = list(args)
        position = _subcommand_index(args)
        subcommand = args[position] if position < len(args) else ""
        blanked: dict[str, str] = {}
        if subcommand not in _CONTENT_FREE and not self.own_config:
            blanked = await self._driver_overrides(cwd)
        if subcommand in _DIFFING:
            args[position + 1 : position + 1] = ["--no-ext-diff", "--no-textconv"]
        return await self._launch(
            ["git", *HARDENING, *args],
            cwd=cwd,
            timeout=timeout,
            max_bytes=max_bytes,
            extra_env=blanked,
        )

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

    async def identity_env(self, cwd: Path) -> dict[str, str]:
        """``GIT_AUTHOR_*``/``GIT_COMMITTER_*`` for commands in a sandbox worktree.

        The same identity as `identity_options` (the user's, else
        `FALLBACK_IDENTITY`), as variables: a confined ``git commit`` cannot
        see the user's global configuration (the home directory is hidden),
        and a machine without one (CI, a container) has none to see.
        """
        options = await self.identity_options(cwd)
        name = options[1].partition("=")[2]
        email = options[3].partition("=")[2]
        return {
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
        }

    async def identity_options(self, cwd: Path) -> list[str]:
        """``-c user.name=... -c user.email=...``: the user's configured author, or the fallback.

        The identity is read with the user's global and system configuration
        (every other call runs without them) and the configuration of the
        repository this runner is pinned to (`at`); reading configuration runs
        no program, and a sandbox commit should carry the user's name.
        """
        options = []
        env = {k: v for k, v in os.environ.items() if k not in _REDIRECTING}
        for key, fallback in zip(("user.name", "user.email"), FALLBACK_IDENTITY, strict=True):
            try:
                found = await self.runner(
                    ["git", *HARDENING, "config", "--get", key],
                    cwd=cwd,
                    timeout=DEFAULT_TIMEOUT,
                    env={**env, "GIT_TERMINAL_PROMPT": "0", **self.env},
                    max_bytes=10_000,
                    announce_truncation=False,
                )
            except LaunchError as exc:
                raise GitError(f"{exc.message} The sandbox needs git on PATH.") from None
            value = found.stdout.strip() if found.returncode == 0 else ""
            options += ["-c", f"{key}={value or fallback}"]
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


def _subcommand_index(args: Sequence[str]) -> int:
    """Where the subcommand is in `args`, past global options such as ``-c key=value``."""
    index = 0
    while index < len(args) and args[index].startswith("-"):
        index += 2 if args[index] in ("-c", "-C") else 1
    return index

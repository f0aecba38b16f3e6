r"""The ``bash`` tool: run one command, without a shell, inside the workspace.

Despite its name (kept from ADR-0013 so models and prompts recognise it) the
tool never starts a shell. The command is split like `shlex.split` and the
resulting argv runs through `lionfactory._process.run_process`: a new process
group, killed with everything it started when the call ends.

Decisions (DESIGN §9):

* **Operators.** Unquoted ``;``, ``&&``, ``||``, ``|``, ``&``, ``<``, ``>``,
  backticks, ``$(`` and newlines are refused before anything starts: without a
  shell they would reach the program as arguments and silently do something
  else. Quoted (or backslash-escaped) they pass through literally, so
  ``grep 'a|b' f`` and ``find . -exec ls {} \;`` work. Backticks and ``$(``
  inside *double* quotes would be substitutions in a real shell; here they are
  plain text, which is safe because no shell ever sees them.
* **No expansion.** Globs (``*.py``), variables (``$HOME``) and ``~`` reach
  the program verbatim. The tool description says so.
* **Timeout.** Milliseconds. Omitted is 30,000; below 1 is a validation
  error; above 300,000 is clamped to 300,000 and the response's ``notice``
  says so. A timed-out command is killed with its whole process group.
* **Working directory.** ``cwd`` is resolved inside the workspace (default:
  the root); a path outside it is refused before anything starts.
* **Environment.** The factory's ``env`` mapping, when given, is the child's
  base environment; otherwise the child inherits the environment of the
  Python process at the time of the call (the standalone default: all of
  it). An ``env_policy`` (`EnvPolicy`, the coding toolkit's default keeps
  only the core names and drops secret-looking ones) filters that base; a
  failing command whose output points at a withheld variable gets a
  ``notice`` naming it (never its value).
* **Refusals explained.** A confined command that fails with a network or
  read-only-filesystem error gets a one-line ``notice`` naming the setting
  that would allow it (``network=``, the writable roots).
* **stdin** is empty (``/dev/null``): nothing can wait for input.
* **Isolation.** ``isolation`` (default ``"none"``, so scripts keep today's
  behaviour) confines every command in the kernel: writes only inside the
  workspace and a private temp dir, hidden home directory, network per
  ``network``, no process outliving the call. The mechanism is chosen once,
  by the factory, and named in the description and in every response.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import anyio.to_thread
import attrs
from pydantic import BaseModel, ConfigDict, Field

from lionfactory._environment import EnvPolicy
from lionfactory._isolation import Isolation, workspace_isolation
from lionfactory._process import DEFAULT_MAX_BYTES, LaunchError, run_process
from lionfactory._tool import Tool, ToolHints
from lionfactory._workspace import PathRefused, Workspace
from lionfactory.tools._bash_shellsplit import split, unquoted_operator

__all__ = ["BashRequest", "BashResponse", "bash_tool"]

DEFAULT_TIMEOUT_MS = 30_000
"""Timeout of a call that names none."""

MAX_TIMEOUT_MS = 300_000
"""Longest timeout a call may have; longer requests are clamped to it."""

MAX_COMMAND_CHARS = 32_768
"""Longest command a call may send.

Linux refuses any single argument longer than 131,072 bytes
(``MAX_ARG_STRLEN``); 32,768 characters stay under that even when every
character takes four bytes in UTF-8, so no command the kernel would run is
refused for its length. Content longer than that belongs in a file written
with the editor, not in a command line; and the cap bounds the work of
checking a command (splitting, operator scan, policy hooks) before it runs.
"""

# Commands longer than this are split in a worker thread, so even the
# longest allowed command does not hold up the event loop; shorter ones
# split in microseconds and skip the thread round trip.
_INLINE_SPLIT_CHARS = 4_096

_DESCRIPTION = f"""\
Run one command (a program and its arguments) in the workspace and return its
stdout, stderr and exit code.

There is no shell. The command is split like a shell would split words (quotes
group words, backslash escapes a character), then the program runs directly:
- One command per call. Unquoted ; && || | & < > ` $( and newlines are refused.
  Run a second command in a second call. Instead of `cd dir && cmd`, pass
  cwd="dir". Instead of a pipe or redirect, use the program's own options
  (e.g. `grep -c` rather than `grep | wc -l`).
- Quoted text is passed literally: grep 'a|b' file.txt works.
- Nothing is expanded: no globs (*.py), no $VARIABLES, no ~. Pass real names.
- stdin is empty; interactive programs get end-of-file at once.

timeout is in milliseconds (default {DEFAULT_TIMEOUT_MS:,}, at most {MAX_TIMEOUT_MS:,};
larger values are clamped). On timeout the command and every process it started
are killed and timed_out is true. stdout and stderr each keep at most
{DEFAULT_MAX_BYTES:,} bytes; a cut stream ends with a line saying so.
cwd is a directory inside the workspace (default: the workspace root).
error is set when the command did not run or timed out; return_code is null when
it did not run."""


class BashRequest(BaseModel):
    """Arguments of one ``bash`` call."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(
        max_length=MAX_COMMAND_CHARS,
        description=(
            'One command: a program and its arguments, e.g. "pytest -x tests/test_app.py". '
            "No shell operators (; && || | & < > ` $( newline) unless quoted. At most "
            f"{MAX_COMMAND_CHARS:,} characters; write longer content to a file first."
        ),
    )
    timeout: int | None = Field(
        default=None,
        ge=1,
        description=(
            f"Timeout in milliseconds; default {DEFAULT_TIMEOUT_MS}, values above "
            f"{MAX_TIMEOUT_MS} are clamped to {MAX_TIMEOUT_MS}."
        ),
    )
    cwd: str | None = Field(
        default=None,
        description=(
            "Working directory, relative to the workspace root (or absolute inside it); "
            "default: the workspace root. Use this instead of `cd dir && ...`."
        ),
    )


class BashResponse(BaseModel):
    """The outcome of one ``bash`` call."""

    model_config = ConfigDict(extra="forbid")

    stdout: str = Field(default="", description="What the command wrote to stdout (capped).")
    stderr: str = Field(default="", description="What the command wrote to stderr (capped).")
    return_code: int | None = Field(
        default=None,
        description=(
            "The exit code (0 usually means success; negative means killed by a signal); "
            "null when the command did not run."
        ),
    )
    timed_out: bool = Field(
        default=False,
        description="True when the timeout passed and the command was killed.",
    )
    error: str | None = Field(
        default=None,
        description="Why the command did not run or did not finish, and what to do instead.",
    )
    notice: str | None = Field(
        default=None,
        description="Something the caller should know about how the command ran: a clamped "
        "timeout, a sandbox setting or withheld environment variable (named, never shown) "
        "that explains a failure.",
    )
    isolation: str = Field(
        default="none",
        description="What confined the command: bwrap, landlock, or none (full user rights).",
    )

    @classmethod
    def reports_failure(cls, data: Mapping[str, Any]) -> bool:
        """A command failed when it exited non-zero, never ran, timed out or was refused."""
        return data.get("return_code") != 0 or bool(data.get("timed_out") or data.get("error"))


def _operator_message(operator: str) -> str:
    shown = "newline" if operator == "\n" else repr(operator)
    return (
        f"The command contains an unquoted {shown}, a shell operator. This tool runs a "
        f"single program without a shell: run one command per call, pass cwd instead "
        f"of `cd dir && ...`, and use the program's own options instead of pipes or "
        f"redirects. If you meant the character literally, quote it."
    )


def _split_command(command: str) -> list[str]:
    """Split a command into argv, refusing unquoted operators.

    Returns:
        Exactly ``shlex.split(command)`` (computed in linear time).

    Raises:
        ValueError: with a message for the model (empty, malformed, an
            operator, a NUL byte).
    """
    if "\x00" in command:
        raise ValueError("The command contains a NUL byte; remove it.")
    try:
        argv = split(command)
    except ValueError as exc:
        raise ValueError(
            f"The command cannot be split into words ({exc}); check that every quote "
            f"is closed and no trailing backslash is left."
        ) from None
    operator = unquoted_operator(command)
    if operator is not None:
        raise ValueError(_operator_message(operator))
    if not argv:
        raise ValueError('The command is empty; give a program to run, e.g. "ls -la".')
    return argv


@attrs.frozen
class _BashHandler:
    workspace: Workspace
    env: Mapping[str, str] | None = attrs.field(repr=False)
    isolation: Isolation | None = None

    async def __call__(self, request: BashRequest) -> BashResponse:
        response = await self._run(request)
        if self.isolation is not None:
            response.isolation = self.isolation.mechanism
            if self.isolation.notice:
                # "auto" fell back to a weaker mechanism: the model should know.
                notes = (response.notice, self.isolation.notice)
                response.notice = " ".join(note for note in notes if note)
        return response

    def _environment(self) -> tuple[Mapping[str, str] | None, tuple[str, ...]]:
        filtered = None if self.isolation is None else self.isolation.environment(self.env)
        if filtered is None:
            return self.env, ()
        return filtered.variables, filtered.withheld

    async def _run(self, request: BashRequest) -> BashResponse:
        try:
            if len(request.command) > _INLINE_SPLIT_CHARS:
                argv = await anyio.to_thread.run_sync(_split_command, request.command)
            else:
                argv = _split_command(request.command)
        except ValueError as exc:
            return BashResponse(error=str(exc))
        notice = None
        timeout_ms = DEFAULT_TIMEOUT_MS if request.timeout is None else request.timeout
        if timeout_ms > MAX_TIMEOUT_MS:
            notice = (
                f"timeout {timeout_ms} ms exceeds the maximum; it was clamped to "
                f"{MAX_TIMEOUT_MS} ms."
            )
            timeout_ms = MAX_TIMEOUT_MS
        if request.cwd is None:
            # The root was resolved and checked at factory time; skipping the
            # worker-thread round trip saves ~0.1 ms a call (a fifth of a
            # `true`). A root removed since then fails the launch instead,
            # which is reported below as a LaunchError.
            cwd = self.workspace.root
        else:
            try:
                cwd = await anyio.to_thread.run_sync(self.workspace.directory, request.cwd)
            except PathRefused as exc:
                return BashResponse(error=f"cwd refused: {exc.message}", notice=notice)
        env, withheld = self._environment()
        try:
            result = await run_process(
                argv,
                cwd=cwd,
                timeout=timeout_ms / 1000,
                env=env,
                isolation=self.isolation,
            )
        except LaunchError as exc:
            return BashResponse(
                error=f"{exc.message} Check the program name (it is looked up on PATH).",
                notice=notice,
            )
        error = None
        if result.timed_out:
            error = (
                f"The command did not finish within {timeout_ms} ms and was killed with "
                f"every process it started. Use a larger timeout (at most {MAX_TIMEOUT_MS}) "
                f"or a smaller task."
            )
        if result.returncode != 0 and not result.timed_out:
            output = f"{result.stdout}\n{result.stderr}"
            hints = (
                notice,
                _refusal_notice(output, self.isolation),
                _withheld_notice(output, withheld),
            )
            notice = " ".join(hint for hint in hints if hint) or None
        return BashResponse(
            stdout=result.stdout,
            stderr=result.stderr,
            return_code=result.returncode,
            timed_out=result.timed_out,
            error=error,
            notice=notice,
        )


# What programs print when the sandbox's network namespace (or Landlock's
# TCP rule, or the Unix-socket filter) refused them.
_NETWORK_ERRORS = re.compile(
    r"Network is unreachable|Temporary failure in name resolution|Name or service not known"
    r"|Could not resolve host|getaddrinfo|EAI_AGAIN|ENOTFOUND|ENETUNREACH|No route to host"
    r"|Failed to establish a new connection|Could not connect to|unable to access '(?:https?|git)"
    r"|Connection refused|socket\.gaierror",
    re.IGNORECASE,
)
# What a write outside the writable roots shows: bwrap's read-only bind says
# EROFS, Landlock says EACCES.
_READ_ONLY_ERRORS = re.compile(r"Read-only file system|EROFS", re.IGNORECASE)
_DENIED_ERRORS = re.compile(r"Permission denied|EACCES|Operation not permitted", re.IGNORECASE)
# What a program says when a variable it needs is not set.
_MISSING_VARIABLE = re.compile(
    r"KeyError|not set|is unset|is not defined|missing|environment variable|required",
    re.IGNORECASE,
)
_MAX_NAMED = 12


def _refusal_notice(output: str, isolation: Isolation | None) -> str | None:
    """One line naming the setting that allows what the sandbox refused, or None."""
    if isolation is None or not isolation.confined:
        return None
    network = isolation.policy.network
    # Landlock refuses a TCP connect() with EACCES, not a network error.
    landlock_refused = (
        isolation.mechanism == "landlock"
        and _DENIED_ERRORS.search(output) is not None
        and re.search(r"connect|socket", output) is not None
    )
    if network != "full" and (_NETWORK_ERRORS.search(output) or landlock_refused):
        return (
            f"The sandbox runs commands with network={network!r}, which looks like what "
            f"stopped this one. Only the tool's owner can allow more (the factory's "
            f"network='loopback' for local services, 'full' for the internet)."
        )
    denied = _READ_ONLY_ERRORS.search(output) or (
        isolation.mechanism == "landlock" and _DENIED_ERRORS.search(output)
    )
    if denied:
        roots = ", ".join(str(root) for root in isolation.policy.writable)
        return (
            f"The sandbox lets commands write only inside its writable roots ({roots}) and "
            f"$TMPDIR; a write elsewhere is refused. Write inside the workspace, or ask the "
            f"tool's owner for another writable root."
        )
    return None


def _withheld_notice(output: str, withheld: tuple[str, ...]) -> str | None:
    """Which withheld variables a failing command may have missed (names only), or None."""
    if not withheld:
        return None
    named = [name for name in withheld if name in output]
    if not named and _MISSING_VARIABLE.search(output):
        named = list(withheld)
    if not named:
        return None
    shown = ", ".join(named[:_MAX_NAMED]) + (" ..." if len(named) > _MAX_NAMED else "")
    return (
        f"The environment policy withheld {shown} from this command (names only). If it "
        f"needs one, the tool's owner can pass it with the factory's env_policy "
        f"(set, include_only or ignore_default_excludes)."
    )


def _check_env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    if env is None:
        return None
    if not isinstance(env, Mapping):
        raise TypeError(f"env must be a mapping of str to str or None, got {env!r}")
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"env must map str to str, got {key!r}: {value!r}")
        if not key or "=" in key or "\x00" in key or "\x00" in value:
            raise ValueError(f"env has an invalid entry, got {key!r}: {value!r}")
    return dict(env)


def bash_tool(
    *,
    workspace_root: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    protected_names: Iterable[str] | None = None,
    isolation: str | Isolation = "none",
    network: str = "none",
    hidden_paths: Iterable[str | os.PathLike[str]] | None = None,
    exposed_paths: Iterable[str | os.PathLike[str]] = (),
    env_policy: EnvPolicy | None = None,
) -> Tool:
    """Build the ``bash`` tool.

    Args:
        workspace_root: the directory commands run in and ``cwd`` must stay
            inside; the current directory when None. Resolved once, now.
        env: the child's complete environment (copied now); when None the
            child inherits ``os.environ`` as it is at the time of each call.
        protected_names: fnmatch patterns of names ``cwd`` may not pass
            through; the workspace defaults when None.
        isolation: ``"none"`` (no confinement), ``"auto"`` (the strongest
            mechanism available, named in the description), ``"bwrap"`` or
            ``"landlock"`` (that one, or `ConfigurationError`), or the
            `Isolation` a toolkit resolved (used as it is; the workspace must
            lie inside its writable roots).
        network: under isolation, ``"none"``, ``"loopback"`` or ``"full"``.
        hidden_paths: under isolation, paths commands may not read; default:
            the home directory, its key folders and ``/root``.
        exposed_paths: under isolation, paths inside hidden ones that stay
            readable, beyond the toolchain derived from ``PATH`` and the
            running interpreter (every ``PATH`` directory with its prefix,
            what its links lead to, pyenv's root, the virtual environment).
        env_policy: which variables of the base environment (`env`, else
            ``os.environ`` at each call) a command gets; None: all of them,
            as before. Overrides the policy of an `Isolation` handed in.

    Returns:
        The ``bash`` Tool (safe to share: it is bound to no branch).

    Raises:
        ConfigurationError: the requested mechanism cannot work here.
        ValueError: the workspace root is not a directory, or `env` has an
            invalid entry.
        TypeError: an option of the wrong type.
    """
    workspace = Workspace.at(workspace_root, protected=protected_names)
    checked_env = _check_env(env)
    confinement = workspace_isolation(
        isolation,
        workspace.root,
        network=network,
        hidden=hidden_paths,
        exposed=exposed_paths,
        environ=checked_env,
    )
    if env_policy is not None:
        if not isinstance(env_policy, EnvPolicy):
            raise TypeError(f"env_policy must be an EnvPolicy or None, got {env_policy!r}")
        confinement = attrs.evolve(confinement, env_policy=env_policy)
    return Tool(
        name="bash",
        description=confinement.annotate(_DESCRIPTION),
        request_model=BashRequest,
        handler=_BashHandler(workspace, checked_env, confinement),
        response_model=BashResponse,
        hints=ToolHints("Run a shell command", destructive=True, open_world=True),
    )

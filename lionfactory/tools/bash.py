r"""The ``bash`` tool: run a command in the workspace, as a script where the kernel confines it.

Two modes, chosen once by the factory:

* **Shell mode** (the default under kernel isolation, ``bwrap`` or
  ``landlock``, or with ``shell=True``): the command is a shell script run
  with ``bash -c`` (``/bin/sh -c`` when bash is missing) *inside* the
  confinement, so pipes, ``&&``, redirects, ``$(...)``, globs, ``VAR=x cmd``
  and ``cd`` work as a user expects. This is safe to allow there because the
  boundary is the kernel's: whatever the script computes, its processes
  write only inside the workspace and a private temp dir, cannot read the
  home directory, and get the network the policy grants.
* **Argv mode** (the default without kernel isolation): no shell. The
  command is split like `shlex.split` and runs as one program; leading
  ``NAME=value`` words set variables for it, as a shell would. Without a
  kernel boundary the only check on a command is the word filter of the
  policy hooks, which a script defeats (``x=rm; $x -rf d``), so operators
  are refused and the refusal names ``shell=True``.

Both run through `lionfactory._os.process.run_process` (foreground) or the
``jobs`` table (``background=True``, ``on_timeout="background"``): a new
process group, killed with everything it started when the call (or job) ends.

Decisions (argv mode, where no kernel mechanism is the boundary):

* **Operators.** Unquoted ``;``, ``&&``, ``||``, ``|``, ``&``, ``<``, ``>``,
  backticks, ``$(`` and newlines are refused before anything starts: without a
  shell they would reach the program as arguments and silently do something
  else. Quoted (or backslash-escaped) they pass through literally, so
  ``grep 'a|b' f`` and ``find . -exec ls {} \;`` work. Backticks and ``$(``
  inside *double* quotes would be substitutions in a real shell; here they are
  plain text, which is safe because no shell ever sees them.
* **No expansion.** Globs (``*.py``), variables (``$HOME``) and ``~`` reach
  the program verbatim. The tool description says so.
* **Timeout.** Milliseconds. Omitted is the factory's default (30,000; the
  coding toolkit's bash uses 120,000, a test suite's length); below 1 is a validation
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
  that would allow it (``network=``, the writable roots; the read-only
  ``.git`` and the sandbox tool's ``commit`` for a refused git write).
* **The project's Python.** A confined command finds the workspace's own
  virtual environment first on PATH (the one ``VIRTUAL_ENV`` names inside
  the workspace, else ``.venv``, else ``venv``), never the agent's runtime;
  a command that fails on a missing package or an install is told which
  interpreter ran and how to choose another.
* **stdin** is empty (``/dev/null``): nothing can wait for input.
* **Output is never lost.** A stream longer than the message cap is kept
  whole in the branch's private output directory; the answer shows its head
  and tail and an ``output_id`` that ``jobs(action="output")`` pages through.
* **Isolation.** ``isolation`` (default ``"none"``, so scripts keep today's
  behaviour) confines every command in the kernel: writes only inside the
  workspace and a private temp dir, hidden home directory, network per
  ``network``, no process outliving the call. The mechanism is chosen once,
  by the factory, and named in the description and in every response.
* **Nothing outlives a call, unconfined too.** Under ``"none"`` each command
  still runs in a PID namespace of its own, so a child that starts its own
  session (``setsid``, a double fork, ``setsid -f``) dies when the command's
  own process ends. The namespace is prepared ahead by a supervisor (the one
  the toolkit's confinement uses), which lends the tool that namespace's
  first process: a call is one message to it, a ``posix_spawn`` there and
  one answer, and the emptied namespace serves the next call. The
  supervisor (and every namespace it made) belongs to the
  branch (closed with it) or, outside any branch, to the tool (closed when
  the tool is dropped). Where the kernel refuses unprivileged namespaces,
  only the command's process group is killed; the description and every
  answer then say that a process leaving the group can outlive the call.
* **Background jobs start under the same supervisor** (``background=True``
  and ``on_timeout="background"`` alike), each in a namespace of its own,
  so a job ends with the supervisor's owner: on ``jobs kill``, the branch's
  close (outside a branch, the tool's drop), at exit, and when this process
  dies of SIGKILL (the supervisor kills its commands when its socket to us
  closes; bwrap alone has no parent-death kill here). Where the supervisor
  cannot give commands a namespace of their own, a job starts directly in
  one as before, and dies with this process only through its exit hooks.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import uuid
import weakref
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO, Literal

import anyio
import anyio.to_thread
import attrs
from pydantic import BaseModel, ConfigDict, Field

from lionfactory._call import current_call, current_progress
from lionfactory._os.environment import EnvPolicy, checked_variables
from lionfactory._os.isolation import Isolation, containment, workspace_isolation
from lionfactory._os.process import DEFAULT_MAX_BYTES, LaunchError, ProcessResult, run_process
from lionfactory._os.supervisor import Supervisor, SupervisorGone, run_supervised
from lionfactory._os.workspace import PathRefused, Workspace
from lionfactory._shell.parse import MAX_COMMAND_CHARS
from lionfactory._tool import Tool, ToolHints
from lionfactory.tools._bash_python import interpreter_notice, with_project_python
from lionfactory.tools._bash_shellsplit import leading_assignments, split, unquoted_operator
from lionfactory.tools.jobs import REGISTRY, BranchJobs, JobLimit, JobRegistry, read_output

__all__ = ["BashRequest", "BashResponse", "bash_tool"]

DEFAULT_TIMEOUT_MS = 30_000
"""Timeout of a call that names none."""

MAX_TIMEOUT_MS = 300_000
"""Longest timeout a call may have; longer requests are clamped to it."""

DEFAULT_OUTPUT_BYTES = 30_000
"""Bytes of each stream one answer shows by default; the rest is kept whole.

Measured on typical commands: a failing pytest run's report is under 1 KB, a
three-commit ``git log -p`` 22 KB, ``pip list`` 5 KB, ``ruff check --select
ALL`` on a 900-line module 31 KB; ``ls -la /usr/bin`` (76 KB) is a listing a
model pages through rather than reads. 30 KB keeps all but such listings
whole, and caps one call near 60 KB of context (both streams), down from 200 KB.
"""

HEAD_BYTES = DEFAULT_OUTPUT_BYTES // 2
"""Bytes of a cut stream's beginning the default answer shows (its end gets the same)."""

# Commands longer than this are split in a worker thread, so even the
# longest allowed command does not hold up the event loop; shorter ones
# split in microseconds and skip the thread round trip.
_INLINE_SPLIT_CHARS = 4_096

_ARGV_DESCRIPTION = """\
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
- NAME=value words before the program set variables for that program only.
- stdin is empty; interactive programs get end-of-file at once.
"""

_SHELL_DESCRIPTION = """\
Run a shell script in the workspace with {shell} -c and return its stdout, stderr
and exit code. The shell language works: pipes, && || ;, redirects, $(...), globs,
VAR=value cmd, cd. Each call starts a fresh shell: variables and cd do not carry
over to the next call (use cwd, or chain with &&). stdin is empty.
"""

_COMMON = """
timeout is in milliseconds (default {default:,}, at most {maximum:,}; larger values
are clamped). On timeout timed_out is true and the command and every process it
started are killed, unless on_timeout="background": then it goes on as a background
job and the answer carries its job_id.
background=true starts the command as a background job and answers at once with a
job_id: read its output, wait for it, or kill it with the jobs tool. Use it for
servers and watchers; a later call reaches a background server on 127.0.0.1 when
the network setting allows loopback.
stdout and stderr each show at most {cap:,} bytes. A longer stream is kept whole:
the answer shows its beginning and end, and output_id (stdout) or stderr_output_id
names the full text, which jobs(action="output", job_id=<id>, offset=...) pages
through.
cwd is a directory inside the workspace (default: the workspace root).
error is set when the command did not run or timed out; return_code is null when
it did not run."""


def _description(shell: str | None, default_timeout: int, cap: int) -> str:
    head = _ARGV_DESCRIPTION if shell is None else _SHELL_DESCRIPTION.format(shell=shell)
    return head + _COMMON.format(default=default_timeout, maximum=MAX_TIMEOUT_MS, cap=cap)


class BashRequest(BaseModel):
    """Arguments of one ``bash`` call."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    command: str = Field(
        max_length=MAX_COMMAND_CHARS,
        description=(
            'The command, e.g. "pytest -x tests/test_app.py". Whether shell operators '
            "(; && || | & < > ` $( newline) work depends on the tool's mode, which its "
            f"description states. At most {MAX_COMMAND_CHARS:,} characters; write longer "
            "content to a file first."
        ),
    )
    timeout: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Timeout in MILLISECONDS (5000 = 5 seconds); default: the tool's (its "
            "description says), values "
            f"above {MAX_TIMEOUT_MS} are clamped to {MAX_TIMEOUT_MS}."
        ),
    )
    cwd: str | None = Field(
        default=None,
        description=(
            "Working directory, relative to the workspace root (or absolute inside it); "
            "default: the workspace root."
        ),
    )
    background: bool = Field(
        default=False,
        description="Start the command as a background job and answer at once with its "
        "job_id (read, wait for and kill it with the jobs tool).",
    )
    on_timeout: Literal["kill", "background"] = Field(
        default="kill",
        description='What happens when the timeout passes: "kill" the command, or let it '
        'go on as a "background" job (the answer then carries its job_id).',
    )


class BashResponse(BaseModel):
    """The outcome of one ``bash`` call."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    stdout: str = Field(default="", description="What the command wrote to stdout (capped).")
    stderr: str = Field(default="", description="What the command wrote to stderr (capped).")
    return_code: int | None = Field(
        default=None,
        description=(
            "The exit code (0 usually means success; negative means killed by a signal); "
            "null when the command did not run or still runs as a job."
        ),
    )
    timed_out: bool = Field(
        default=False,
        description="True when the timeout passed (the command was killed, or went on as a "
        "job when job_id is set).",
    )
    job_id: str | None = Field(
        default=None,
        description="The background job running the command; use it with the jobs tool.",
    )
    output_id: str | None = Field(
        default=None,
        description="Set when stdout was cut: the id of its full text, for "
        "jobs(action='output', job_id=<output_id>, offset=...).",
    )
    stderr_output_id: str | None = Field(
        default=None,
        description="Set when stderr was cut: the id of its full text (as output_id).",
    )
    error: str | None = Field(
        default=None,
        description="Why the command did not run or did not finish, and what to do instead.",
    )
    notice: str | None = Field(
        default=None,
        description="Something the caller should know about how the command ran: a clamped "
        "timeout, a confinement setting or withheld environment variable (named, never shown) "
        "that explains a failure.",
    )
    isolation: str = Field(
        default="none",
        description="What confined the command: bwrap, landlock, or none (full user rights).",
    )

    @classmethod
    def reports_failure(cls, data: Mapping[str, Any]) -> bool:
        """A command failed when it exited non-zero, never ran, timed out or was refused.

        One that runs on as a background job (``job_id``, no exit code yet,
        also after on_timeout="background") has not failed: it did what was
        asked, and how it ends is the job's to say.
        """
        if data.get("error"):
            return True
        if data.get("return_code") is None and data.get("job_id") is not None:
            return False  # started, or moved there by on_timeout="background"
        return data.get("return_code") != 0 or bool(data.get("timed_out"))


def _operator_message(operator: str) -> str:
    shown = "newline" if operator == "\n" else repr(operator)
    return (
        f"The command contains an unquoted {shown}, a shell operator. This tool runs a "
        f"single program without a shell (there is no kernel isolation here, so scripts "
        f"are not run; the tool's owner can allow them with bash_tool(shell=True) or an "
        f"isolation setting; on the command line, `lionfactory call --shell bash ...` or "
        f"`lionfactory call --isolation auto bash ...`): run one command per call, pass "
        f"cwd instead of `cd dir && ...`, and use the program's own options instead of "
        f"pipes or redirects. If you meant the character literally, quote it."
    )


def _split_command(command: str) -> tuple[list[str], dict[str, str]]:
    """Split a command into argv and its leading ``NAME=value`` assignments.

    Returns:
        ``shlex.split(command)`` without the leading assignments (computed in
        linear time), and those assignments as a mapping.

    Raises:
        ValueError: with a message for the model (empty, malformed, an
            operator, a NUL byte, assignments only).
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
    count = leading_assignments(command)
    assignments = dict(word.split("=", 1) for word in argv[:count])
    argv = argv[count:]
    if not argv:
        raise ValueError(
            "The command only sets variables; nothing runs, and variables do not carry over "
            "to the next call. Put the program after them: NAME=value program args."
        )
    return argv, assignments


@functools.lru_cache(maxsize=64)
def _split_short(command: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """`_split_command` of a short command, kept for the next call of the same command.

    An agent runs the same few commands again and again (a test, a build, a
    ``git status``), and splitting one costs about as much as a twentieth
    of a ``true`` run. Immutable, so no caller can change what the next one
    gets; a command that does not split raises each time (nothing is kept).
    """
    argv, assignments = _split_command(command)
    return tuple(argv), tuple(assignments.items())


# A script made only of these characters has no shell syntax beyond words,
# quotes and spaces: no expansion ($ ` ~ globs), no escape, comment,
# operator, group or newline. Quoted text in it means the same to shlex and
# to the shell (double quotes without $ ` \ are literal), so it can run as
# argv directly, which saves the shell's own start-up.
_PLAIN_SCRIPT = re.compile(r"[A-Za-z0-9_./=:,+@%' \"-]*")
# Words a shell gives a meaning of its own (builtins, keywords): a command
# starting with one of them still runs in the shell.
_SHELL_WORDS = frozenset(
    {"cd", "export", "set", "unset", "source", ".", "exit", "exec", "alias", "unalias"}
    | {"eval", "read", "shift", "trap", "ulimit", "umask", "wait", "command", "builtin"}
    | {"type", "hash", "times", "return", "break", "continue", "readonly", "local"}
    | {"declare", "typeset", "let", "echo", "printf", "test", "[", "[[", "pwd", "kill"}
    | {"if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case"}
    | {"esac", "function", "time", "select", "coproc", "getopts", "jobs", "fg", "bg"}
    | {"disown", "suspend", "logout", "history", "fc", "enable", "help", "mapfile"}
    | {"readarray", "shopt", "caller", "compgen", "complete", "dirs", "popd", "pushd"}
)


def _plain_argv(command: str) -> tuple[list[str], dict[str, str]] | None:
    """The argv a plain script runs, when it needs no shell at all; else None."""
    if not _PLAIN_SCRIPT.fullmatch(command):
        return None
    try:
        words = split(command)
    except ValueError:
        return None  # an unclosed quote: let the shell report it
    count = leading_assignments(command)
    argv = words[count:]
    if not argv or argv[0] in _SHELL_WORDS:
        return None
    return argv, dict(word.split("=", 1) for word in words[:count])


def _check_script(command: str) -> None:
    if "\x00" in command:
        raise ValueError("The command contains a NUL byte; remove it.")
    if not command.strip():
        raise ValueError('The command is empty; give a command to run, e.g. "ls -la".')


@attrs.frozen
class _Prepared:
    argv: list[str]
    env: Mapping[str, str] | None
    cwd: Path
    timeout_ms: int
    notice: str | None
    withheld: tuple[str, ...] = ()
    python_env: Path | None = None


def _spiller(
    table: BranchJobs, label: str, ids: dict[str, str], stream: str
) -> Callable[[], BinaryIO]:
    def open_spill() -> BinaryIO:
        output, fd = table.new_output(f"{stream} of: {label}")
        ids[stream] = output.id
        return os.fdopen(fd, "wb")

    return open_spill


def _head_and_tail(path: Path, name: str, ident: str, half: int = HEAD_BYTES) -> str:
    head, _, size = read_output(path, 0, half)
    start = max(half, size - half)
    tail, _, _ = read_output(path, start, half) if start < size else ("", 0, 0)
    omitted = start - len(head.encode("utf-8", "surrogatepass"))
    marker = (
        f"\n[{name} cut: {size:,} bytes in all; {max(omitted, 0):,} bytes omitted here. The "
        f"full text is kept: jobs(action='output', job_id='{ident}', offset=0) reads it]\n"
    )
    return head + marker + tail


_NO_PID_NAMESPACE = (
    "No PID namespace is available here (the kernel refuses unprivileged user namespaces), "
    "so when a call ends only its process group is killed: a process that started a "
    "session of its own (setsid, a daemon) can outlive the call."
)
"""Said in the description and in every answer where "none" cannot have a PID namespace."""


def _uncontained(isolation: Isolation | None) -> bool:
    """Whether unconfined commands should have a PID namespace here but cannot."""
    return (
        isolation is not None
        and not isolation.confined
        and isolation.policy.pid_namespace
        and containment() == "group"
    )


@attrs.define(eq=False)
class _ToolOwned:
    """What a ``bash`` tool owns itself: the supervisor of its calls made outside any branch.

    Unconfined commands start through a supervisor too (the toolkit's,
    `lionfactory._os.supervisor`), which prepares each command's PID
    namespace while the previous command runs, so a call costs a message and
    a ``posix_spawn`` instead of a new ``bwrap``. On a branch, the branch's
    job table owns that supervisor and closes it with the branch. Outside
    any branch nothing else would: this table does, and the tool's finalizer
    closes it when the tool is dropped (or the interpreter exits), which
    ends the prepared namespace and everything in it.
    """

    table: BranchJobs = attrs.Factory(lambda: BranchJobs(None))
    # False once commands could not be given a prepared PID namespace here
    # (the supervisor did not start, or the kernel refused namespaces inside
    # it): from then on each call runs as before, in a namespace of its own.
    prepared: bool = True


@attrs.frozen
class _BashHandler:
    workspace: Workspace
    env: Mapping[str, str] | None = attrs.field(repr=False)
    isolation: Isolation | None = None
    shell: str | None = None
    default_timeout: int = DEFAULT_TIMEOUT_MS
    registry: JobRegistry = REGISTRY
    max_bytes: int = DEFAULT_OUTPUT_BYTES
    # Not an argument: every factory call (a clone's too) owns a new one.
    owned: _ToolOwned = attrs.field(factory=_ToolOwned, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        # Bound to the table, not to the handler, so it cannot keep the tool alive.
        weakref.finalize(self, self.owned.table.close)

    async def close_branch(self, branch_id: uuid.UUID | None) -> None:
        """Kill `branch_id`'s jobs and drop its kept output (`Branch.aclose` calls it)."""
        await self.registry.close_branch(branch_id)

    async def __call__(self, request: BashRequest) -> BashResponse:
        response = await self._run(request)
        if self.isolation is not None:
            response.isolation = self.isolation.mechanism
            started = response.return_code is not None or response.job_id is not None
            # "auto" fell back to a weaker mechanism, or "none" has no PID
            # namespace here: the model should know.
            notes = (
                response.notice,
                self.isolation.notice,
                _NO_PID_NAMESPACE if started and _uncontained(self.isolation) else None,
            )
            response.notice = " ".join(note for note in notes if note) or None
        return response

    def _environment(self) -> tuple[Mapping[str, str] | None, tuple[str, ...]]:
        filtered = None if self.isolation is None else self.isolation.environment(self.env)
        if filtered is None:
            return self.env, ()
        return filtered.variables, filtered.withheld

    async def _prepare(self, request: BashRequest) -> _Prepared | BashResponse:
        command = request.command
        assignments: dict[str, str] = {}
        try:
            if self.shell is not None:
                _check_script(command)
                plain = _plain_argv(command)
                if plain is None:
                    argv = [self.shell, "-c", command]
                else:
                    argv, assignments = plain
            elif len(command) > _INLINE_SPLIT_CHARS:
                argv, assignments = await anyio.to_thread.run_sync(_split_command, command)
            else:
                words, pairs = _split_short(command)
                argv, assignments = list(words), dict(pairs)
        except ValueError as exc:
            return BashResponse(error=str(exc))
        notice = None
        timeout_ms = self.default_timeout if request.timeout is None else request.timeout
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
        if assignments:
            # As a shell does: the assignments join the environment of this
            # one command (over the configured or inherited environment).
            env = {**(os.environ if env is None else env), **assignments}
        python_env = None
        if self.isolation is not None and self.isolation.confined:
            # The project's python and pip, not the agent's (see _bash_python).
            env, python_env = with_project_python(
                self.workspace.root, os.environ if env is None else env
            )
        return _Prepared(argv, env, cwd, timeout_ms, notice, withheld, python_env)

    async def _run(self, request: BashRequest) -> BashResponse:
        prepared = await self._prepare(request)
        if isinstance(prepared, BashResponse):
            return prepared
        if request.background or request.on_timeout == "background":
            return await self._as_job(request, prepared)
        table = self.registry.current()
        ids: dict[str, str] = {}
        spill = (
            _spiller(table, request.command, ids, "stdout"),
            _spiller(table, request.command, ids, "stderr"),
        )
        try:
            try:
                result = await self._foreground(table, prepared, spill)
            except LaunchError as exc:
                return BashResponse(error=self._launch_message(exc), notice=prepared.notice)
            except (SupervisorGone, OSError) as exc:
                return BashResponse(
                    error=f"The supervisor that starts this conversation's commands could not "
                    f"be used ({exc}); the command may not have run. Send it again: a new one "
                    f"starts.",
                    notice=prepared.notice,
                )
            stdout, stderr = result.stdout, result.stderr
            if ids:
                stdout, stderr = await anyio.to_thread.run_sync(
                    self._kept_texts, table, ids, stdout, stderr
                )
            error = None
            if result.timed_out:
                error = (
                    f"The command did not finish within {prepared.timeout_ms} ms and was killed "
                    f"with every process it started. Use a larger timeout (at most "
                    f"{MAX_TIMEOUT_MS}), on_timeout='background' to let it go on as a job, or a "
                    f"smaller task."
                )
                if prepared.timeout_ms < _SECONDS_LIKE_MS:
                    error += (
                        f" The timeout is in milliseconds: {prepared.timeout_ms} ms is "
                        f"{prepared.timeout_ms / 1000:g} s; for {prepared.timeout_ms} seconds "
                        f"pass timeout={prepared.timeout_ms * 1000}."
                    )
            notice = prepared.notice
            if result.returncode != 0 and not result.timed_out:
                # What the confinement or the environment policy kept from the
                # command, when its output suggests that is why it failed.
                output = f"{result.stdout}\n{result.stderr}"
                notice = _join(
                    notice,
                    _refusal_notice(output, self.isolation),
                    _withheld_notice(output, prepared.withheld),
                    interpreter_notice(
                        prepared.argv,
                        output,
                        os.environ if prepared.env is None else prepared.env,
                        prepared.python_env,
                    ),
                )
            return BashResponse(
                stdout=stdout,
                stderr=stderr,
                return_code=result.returncode,
                timed_out=result.timed_out,
                output_id=ids.get("stdout"),
                stderr_output_id=ids.get("stderr"),
                error=error,
                notice=notice,
            )
        finally:
            # A call that failed or was cancelled leaves its kept output
            # droppable; one that finished released it above already.
            for ident in ids.values():
                table.release(ident)

    async def _foreground(
        self, table: BranchJobs, prepared: _Prepared, spill: tuple[Any, Any]
    ) -> ProcessResult:
        # A transport reporting progress learns how many lines came so far.
        progress = current_progress()
        on_output = None if progress is None else progress.count_output
        if self.isolation is None or not self.isolation.confined:
            supervisor = await self._unconfined_supervisor(table)
            if supervisor is None:
                return await run_process(
                    prepared.argv,
                    cwd=prepared.cwd,
                    timeout=prepared.timeout_ms / 1000,
                    env=prepared.env,
                    announce_truncation=False,
                    spill=spill,
                    # Unconfined ("none") still runs in a PID namespace where one
                    # can be had: no process outlives the call.
                    isolation=self.isolation,
                    on_output=on_output,
                )
        else:
            # Under kernel isolation every command of the branch runs in the
            # branch's one confinement, so it reaches the branch's background
            # jobs (loopback, /tmp) and nothing else.
            supervisor = await self._supervisor(table, self.isolation)
        result = await run_supervised(
            supervisor,
            prepared.argv,
            cwd=prepared.cwd,
            timeout=prepared.timeout_ms / 1000,
            env=prepared.env,
            # Unconfined commands keep what `run_process` keeps by default,
            # as they did before they ran through a supervisor.
            max_bytes=self.max_bytes if supervisor.isolation.confined else DEFAULT_MAX_BYTES,
            spill=spill,
            on_output=on_output,
        )
        if supervisor.command_namespaces is False and not supervisor.isolation.confined:
            # The kernel refused this command a namespace of its own inside
            # the supervisor's: what it left there dies with that namespace
            # now (once no job runs there any more), and later calls each
            # get a namespace of their own again.
            self.owned.prepared = False
            await anyio.to_thread.run_sync(self._owner(table).set_aside, supervisor)
        return result

    async def _supervisor(self, owner: BranchJobs, isolation: Isolation) -> Supervisor:
        """`owner`'s supervisor for `isolation`: the running one, else a new one."""
        running = owner.supervisors.get(isolation)
        if running is not None and running.alive and not running.stale():
            return running  # the common case: no worker-thread round trip
        return await anyio.to_thread.run_sync(owner.supervisor, isolation, self.workspace.root)

    async def _unconfined_supervisor(self, table: BranchJobs) -> Supervisor | None:
        """The supervisor preparing unconfined commands' PID namespaces; None: run as before.

        Owned by the branch (its job table) on a branch, by the tool itself
        outside any branch (`_ToolOwned`). None where no namespace can be had
        (the process-group kill is all there is) or the supervisor cannot run.
        """
        isolation = self.isolation
        if isolation is None or not self.owned.prepared or not isolation.wraps:
            return None
        try:
            return await self._supervisor(self._owner(table), isolation)
        except OSError:
            self.owned.prepared = False  # e.g. no memfd: a namespace per call, as before
            return None

    def _owner(self, table: BranchJobs) -> BranchJobs:
        """Who owns the unconfined supervisor: the branch's `table`, else the tool itself."""
        call = current_call()
        return table if call is not None and call.branch_id is not None else self.owned.table

    async def _job_supervisor(self, table: BranchJobs) -> Supervisor | None:
        """The supervisor an unconfined job starts under; None: directly, as before.

        The one the foreground calls use (`_unconfined_supervisor`), so a job
        dies with it when this process dies, even of SIGKILL. Only where it
        gives each command a PID namespace of its own: a job without one
        would share the supervisor's with every later command, and a
        ``setsid`` child of it would outlive ``jobs kill``. A supervisor
        that has not started a command yet is asked for a namespace first
        (the one it lends serves the next foreground call).
        """
        if self.isolation is not None and self.isolation.confined:
            return None  # the branch's confinement: `BranchJobs.start` picks it
        supervisor = await self._unconfined_supervisor(table)
        if supervisor is None:
            return None
        if supervisor.command_namespaces is None:
            try:
                runner = await supervisor.lend()
            except SupervisorGone:
                return None
            if runner is not None:
                supervisor.give_back(runner)
        if supervisor.command_namespaces is False:
            self.owned.prepared = False
            await anyio.to_thread.run_sync(self._owner(table).set_aside, supervisor)
            return None
        return supervisor

    def _kept_texts(
        self, table: BranchJobs, ids: dict[str, str], stdout: str, stderr: str
    ) -> tuple[str, str]:
        texts = {"stdout": stdout, "stderr": stderr}
        for stream, ident in ids.items():
            output = table.outputs.get(ident)
            if output is not None:  # busy while this call runs: never dropped before this
                texts[stream] = _head_and_tail(output.path, stream, ident, self.max_bytes // 2)
            table.release(ident)
        table.enforce_budget()
        return texts["stdout"], texts["stderr"]

    def _launch_message(self, exc: LaunchError) -> str:
        return f"{exc.message} Check the program name (it is looked up on PATH)."

    async def _as_job(self, request: BashRequest, prepared: _Prepared) -> BashResponse:
        table = self.registry.current()
        supervisor = await self._job_supervisor(table)
        try:
            job = await anyio.to_thread.run_sync(
                lambda: table.start(
                    request.command,
                    prepared.argv,
                    cwd=prepared.cwd,
                    env=prepared.env,
                    isolation=self.isolation,
                    supervisor=supervisor,
                )
            )
        except JobLimit as exc:
            return BashResponse(error=str(exc), notice=prepared.notice)
        except LaunchError as exc:
            return BashResponse(error=self._launch_message(exc), notice=prepared.notice)
        if request.background:
            return BashResponse(
                job_id=job.id,
                notice=_join(
                    prepared.notice,
                    "Started in the background; stdout and stderr go, interleaved, to the "
                    f"job's output: jobs(action='output', job_id='{job.id}') reads it, "
                    "action 'wait' waits for it, 'kill' ends it.",
                ),
            )
        # on_timeout="background": wait for the job like a foreground call.
        delay = 0.001
        with anyio.move_on_after(prepared.timeout_ms / 1000):
            while job.running:
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.05)
        path = job.output.path
        size = job.output.size()
        if size > self.max_bytes:
            text = await anyio.to_thread.run_sync(
                _head_and_tail, path, "output", job.id, self.max_bytes // 2
            )
        else:
            text = (await anyio.to_thread.run_sync(read_output, path, 0, size))[0]
        if job.running:
            return BashResponse(
                stdout=text,
                timed_out=True,
                job_id=job.id,
                notice=_join(
                    prepared.notice,
                    f"The command did not finish within {prepared.timeout_ms} ms and goes on "
                    f"as background job {job.id} (on_timeout='background'); stdout and stderr "
                    "are interleaved in its output. Use the jobs tool to wait for, read or "
                    "kill it.",
                ),
            )
        code = job.poll()
        # It finished in time: it was a foreground call after all; forget the
        # job (its output stays readable by id when it was cut).
        await anyio.to_thread.run_sync(table.kill, job)
        table.jobs.pop(job.id, None)
        cut = size > self.max_bytes
        if not cut:
            table.outputs.pop(job.id, None)
            path.unlink(missing_ok=True)
        return BashResponse(
            stdout=text,
            return_code=code,
            output_id=job.id if cut else None,
            notice=_join(
                prepared.notice, "stdout and stderr are interleaved in stdout (on_timeout)."
            ),
        )


def _join(*notes: str | None) -> str | None:
    return " ".join(note for note in notes if note) or None


# What programs print when the confinement's network namespace (or Landlock's
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


# Below this an answer could not show a traceback's head and tail; above it
# one call would fill a context window.
_MIN_OUTPUT_BYTES = 1_000
_MAX_OUTPUT_BYTES = 1_000_000

# A timeout under this many milliseconds was most likely meant in seconds.
_SECONDS_LIKE_MS = 100


def _refusal_notice(output: str, isolation: Isolation | None) -> str | None:
    """One line naming the setting that allows what the confinement refused, or None."""
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
            f"The confinement runs commands with network={network!r}, which looks like what "
            f"stopped this one. Only the tool's owner can allow more (the factory's "
            f"network='loopback' for local services, 'full' for the internet)."
        )
    denied = _READ_ONLY_ERRORS.search(output) or (
        isolation.mechanism == "landlock" and _DENIED_ERRORS.search(output)
    )
    if denied and _in_protected_git(output, isolation):
        return (
            "The confinement keeps the workspace's .git read-only (bwrap binds it so, with "
            "protect_git), which is what refused this command: git cannot commit, switch "
            "branches or move refs there, though writing the workspace's files works. To "
            "commit, use the sandbox tool (action='create', work, then action='commit' and "
            "action='merge'), or ask the tool's owner to commit."
        )
    if denied:
        roots = ", ".join(str(root) for root in isolation.policy.writable)
        return (
            f"The confinement lets commands write only inside its writable roots ({roots}) and "
            f"$TMPDIR; a write elsewhere is refused. Write inside the workspace, or ask the "
            f"tool's owner for another writable root."
        )
    return None


def _in_protected_git(output: str, isolation: Isolation) -> bool:
    """Whether a refused write names a path in a ``.git`` the policy keeps read-only."""
    policy = isolation.policy
    if isolation.mechanism != "bwrap" or not policy.protect_git:
        return False
    for root in policy.writable:
        git = re.escape(str(root / ".git"))
        if re.search(rf"{git}(?:/|'|\"|:|\s|$)", output):
            return True
    # git names the lock relative to the work tree when run there.
    return re.search(r"(?:^|[\s'\"])\.git/[\w./-]*\.lock", output) is not None


# Set by the shell itself in every command, so never what a program missed:
# ``_`` (the last argument), the directory and the nesting level.
_SHELL_VARIABLES = frozenset({"_", "PWD", "OLDPWD", "SHLVL"})


def _names_in(output: str, name: str) -> bool:
    # As a whole word: ``_`` or ``HOME`` inside another identifier is not a mention.
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", output) is not None


def _withheld_notice(output: str, withheld: tuple[str, ...]) -> str | None:
    """Which withheld variables a failing command may have missed (names only), or None."""
    withheld = tuple(name for name in withheld if name not in _SHELL_VARIABLES)
    if not withheld:
        return None
    named = [name for name in withheld if _names_in(output, name)]
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
    return None if env is None else checked_variables(env, "env")


def _shell_binary() -> str:
    """The shell: bash when installed (what models write for), else ``/bin/sh``."""
    found = shutil.which("bash")
    return os.path.realpath(found) if found else "/bin/sh"


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
    shell: bool | None = None,
    default_timeout: int = DEFAULT_TIMEOUT_MS,
    registry: JobRegistry | None = None,
    max_output_bytes: int = DEFAULT_OUTPUT_BYTES,
) -> Tool:
    """Build the ``bash`` tool.

    Args:
        workspace_root: the directory commands run in and ``cwd`` must stay
            inside; the current directory when None. Resolved once, now.
        env: the child's complete environment (copied now); when None the
            child inherits ``os.environ`` as it is at the time of each call.
        protected_names: fnmatch patterns of names ``cwd`` may not pass
            through; the workspace defaults when None.
        isolation: ``"none"`` (no confinement; each command still runs in a
            PID namespace of its own, prepared ahead, so nothing it starts
            outlives the call; where the kernel refuses namespaces only the
            command's process group is killed, so a process that starts a
            session of its own can outlive the call, and the description and
            every answer say so), ``"auto"`` (the strongest
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
        shell: run commands as shell scripts (``bash -c``). Default: yes
            exactly when a kernel mechanism confines them (then the kernel,
            not a word filter, is the boundary); ``True`` allows scripts
            without confinement too (the caller accepts that a script can do
            whatever the user can), ``False`` refuses operators always.
        default_timeout: milliseconds of a call that names no timeout (1 to
            `MAX_TIMEOUT_MS`).
        registry: where background jobs and kept output live; default: the
            one the ``jobs`` tool reads. Jobs are per branch either way.
        max_output_bytes: bytes of each stream (stdout, stderr) one answer
            shows, at least 1,000 and at most 1,000,000 (`DEFAULT_OUTPUT_BYTES`,
            30,000, by default); a longer stream shows its beginning and end,
            and is kept whole for ``jobs(action="output")``.

    Returns:
        The ``bash`` Tool (safe to share: jobs and kept output are per branch).

    Raises:
        ConfigurationError: the requested mechanism cannot work here.
        ValueError: the workspace root is not a directory, `env` has an
            invalid entry, or `default_timeout` is out of range.
        TypeError: an option of the wrong type.
    """
    if shell is not None and not isinstance(shell, bool):
        raise TypeError(f"shell must be a bool or None, got {shell!r}")
    if isinstance(default_timeout, bool) or not isinstance(default_timeout, int):
        raise TypeError(f"default_timeout must be an int of milliseconds, got {default_timeout!r}")
    if not 1 <= default_timeout <= MAX_TIMEOUT_MS:
        raise ValueError(
            f"default_timeout must be between 1 and {MAX_TIMEOUT_MS} ms, got {default_timeout}"
        )
    if isinstance(max_output_bytes, bool) or not isinstance(max_output_bytes, int):
        raise TypeError(f"max_output_bytes must be an int, got {max_output_bytes!r}")
    if not _MIN_OUTPUT_BYTES <= max_output_bytes <= _MAX_OUTPUT_BYTES:
        raise ValueError(
            f"max_output_bytes must be between {_MIN_OUTPUT_BYTES:,} and "
            f"{_MAX_OUTPUT_BYTES:,}, got {max_output_bytes!r}"
        )
    workspace = Workspace.at(workspace_root, protected=protected_names)
    checked_env = _check_env(env)
    confinement = workspace_isolation(
        isolation,
        workspace.root,
        network=network,
        hidden=hidden_paths,
        exposed=exposed_paths,
        environ=checked_env,
        env_policy=env_policy,
    )
    use_shell = confinement.confined if shell is None else shell
    program = _shell_binary() if use_shell else None
    description = confinement.annotate(
        _description(
            None if program is None else os.path.basename(program),
            default_timeout,
            max_output_bytes,
        )
    )
    if _uncontained(confinement):
        description = f"{description}\n\n{_NO_PID_NAMESPACE}"
    return Tool(
        name="bash",
        description=description,
        request_model=BashRequest,
        handler=_BashHandler(
            workspace,
            checked_env,
            confinement,
            program,
            default_timeout,
            REGISTRY if registry is None else registry,
            max_output_bytes,
        ),
        response_model=BashResponse,
        hints=ToolHints("Run a shell command", destructive=True, open_world=True),
    )

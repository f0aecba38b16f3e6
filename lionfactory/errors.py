"""The exception tree of lionfactory.

Two families, kept apart on purpose. Developer misuse raises at once, at
factory or registration time, and subclasses the builtin exception a Python
programmer would expect. Problems the *model* caused are raised by the call
pipeline and turned into a tool message by `Branch.act`, so a bad tool call
never crashes an agent loop::

    LionfactoryError
    ├── RegistrationError (ValueError)   a tool cannot be registered on a branch
    ├── FactoryError (TypeError)         a factory returned something that is not a Tool
    ├── CloneError (ValueError)          a registration cannot be rebuilt for a clone
    ├── ConfigurationError (ValueError)  a branch lacks what an operation needs
    ├── ApprovalRequired                 a hook asks a person before the call runs
    │   └── StepsHeld                    a handler asks about new steps of its own call
    ├── ApprovalPending                  Branch.run() paused on calls awaiting a decision
    ├── TurnLimitReached                 Branch.run() used max_turns, the model still calling
    ├── UnknownOwnerError (LookupError)  an Exchange call named an unregistered owner
    ├── ConflictError                    a branch store holds a newer save than the one loaded
    ├── UnknownBranchError (LookupError) a branch store has no branch of that id
    ├── CheckpointNotFound (LookupError) Branch.rewind named no checkpoint of the branch
    ├── ScriptExhaustedError (AssertionError)
    │                                    a ScriptedModel ran out of replies (testing)
    ├── ModelError                       a chat model request failed (lionfactory.models)
    │   └── ModelTimeoutError (TimeoutError)
    ├── McpConnectionError (ConnectionError)
    │                                    an MCP server could not be started, initialized
    │                                    or reached for a call (lionfactory.mcp)
    ├── ToolError                        model-facing: Branch.act reports it to the model
    │   ├── ToolInputError (ValueError)  the arguments failed validation
    │   ├── ToolDenied                   a pre hook refused the call
    │   └── UnknownToolError (LookupError)  no tool of that name on the branch
    └── ToolFailure                      inside one tool: answered as its typed response
        ├── PathRefused                  a path outside the workspace, a link, a secret
        ├── LaunchError                  a program could not be started
        ├── GitError                     a git call of the sandbox failed
        ├── DocumentError                a document cannot be opened (reader)
        ├── FetchRefused                 a URL was refused or not fetched (reader)
        ├── ContextFailure               a context action cannot be done
        ├── _NavFailure                  a code_nav lookup has no answer
        └── _Failure                     a messenger action cannot be done

The `ToolFailure` family never leaves a tool: deep code raises one to stop
early with a sentence for the model, and the tool's handler catches it at its
one boundary and returns it as a typed response (``success=False`` or an
error ``status``). They live beside the code that raises them (the seams,
the tool modules); the two with a leading underscore are private to their
tool. Other expected operational failures (a missing file, a timed-out
command, an absent binary) are not exceptions at all: the tools return them
as typed responses directly.

The approval family is neither misuse nor a model's mistake. A pre or
security hook raises `ApprovalRequired` to *ask*: the call is held as a
`PendingCall` on the branch instead of running or being refused.
`Branch.run()` raises `ApprovalPending` once the other calls of the reply
have run; the caller decides (`Branch.approve` / `Branch.deny`) and calls
`Branch.resume()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from lionfactory._echo import echo

if TYPE_CHECKING:
    from lionfactory._approvals import PendingCall

__all__ = [
    "ApprovalPending",
    "ApprovalRequired",
    "CheckpointNotFound",
    "CloneError",
    "ConfigurationError",
    "ConflictError",
    "FactoryError",
    "LionfactoryError",
    "McpConnectionError",
    "RegistrationError",
    "ScriptExhaustedError",
    "StepsHeld",
    "ToolDenied",
    "ToolError",
    "ToolFailure",
    "ToolInputError",
    "TurnLimitReached",
    "UnknownBranchError",
    "UnknownOwnerError",
    "UnknownToolError",
]


class LionfactoryError(Exception):
    """Root of every exception lionfactory raises on purpose."""


class RegistrationError(LionfactoryError, ValueError):
    """A tool or factory cannot be registered on a branch."""


class FactoryError(LionfactoryError, TypeError):
    """A factory returned something other than a `Tool` or a list of Tools."""


class CloneError(LionfactoryError, ValueError):
    """A registration cannot be rebuilt for a clone without sharing state."""


class ConfigurationError(LionfactoryError, ValueError):
    """A branch lacks something an operation needs (for example a chat model)."""


class ApprovalRequired(LionfactoryError):
    """A hook asks a person to approve the call before it runs.

    Raise it from a pre (or security) hook with only a reason:
    ``raise ApprovalRequired("pushes to the shared remote")``. Run by a
    branch, the call is then neither run nor refused: it is held as a
    `PendingCall` (see `Branch.pending_calls`) until `Branch.approve` or
    `Branch.deny` decides it. When the approved call runs, the hooks run
    again on the approved arguments; an ask is then taken as answered, a
    denial still refuses. The pipeline fills in `tool`, `hook` and
    `arguments`; a call made outside a branch (``await tool(...)``) sees
    the exception itself.

    Attributes:
        reason: what the person is asked about, in words.
        tool: the tool's name.
        hook: the name of the hook that asked.
        arguments: the arguments the hook was shown.
    """

    def __init__(self, reason: str, *, tool: str = "", hook: str = "") -> None:
        if not isinstance(reason, str):
            raise TypeError(f"ApprovalRequired takes a reason string, got {reason!r:.200}")
        super().__init__(reason)
        self.reason = reason
        self.tool = tool
        self.hook = hook
        self.arguments: dict[str, Any] = {}

    def __str__(self) -> str:
        if self.tool:
            return f"Tool {self.tool!r} needs a person's approval: {self.reason}"
        return self.reason


class StepsHeld(ApprovalRequired):
    """A handler asks about new steps of its own call (a sub-agent's held steps).

    A hook's ask inside an approved call is answered by the approval; this
    ask is not, because the steps it names are new: the approved call is
    held again, naming them, and runs on only when they are approved.
    """


class ApprovalPending(LionfactoryError):
    """`Branch.run()` (or `resume()`) paused: these calls wait for a person's decision.

    The other calls of the same reply have run; nothing more is sent to the
    model until every pending call is decided::

        try:
            text = await branch.run("tidy the repository")
        except ApprovalPending as paused:
            for call in paused.calls:
                branch.approve(call.id)  # or branch.deny(call.id, "not now")
            text = await branch.resume()

    Attributes:
        calls: the undecided `PendingCall` records, in call order.
    """

    def __init__(self, calls: Sequence[PendingCall]) -> None:
        self.calls: tuple[PendingCall, ...] = tuple(calls)
        listed = "; ".join(f"{c.id} {c.tool}: {c.reason}" for c in self.calls[:10])
        more = f" (and {len(self.calls) - 10} more)" if len(self.calls) > 10 else ""
        super().__init__(
            f"{len(self.calls)} tool call(s) await a person's decision: {listed}{more}. "
            f"Call branch.approve(id) or branch.deny(id, reason) for each, then "
            f"await branch.resume()"
        )


class TurnLimitReached(LionfactoryError):
    """`Branch.run()` used all of `max_turns` replies and the model was still calling tools.

    Every call of the last reply has run and is recorded; the model has not
    seen their results. Call `run()` again (a new instruction) or raise
    `max_turns` if the task needs more steps.

    Attributes:
        turns: the replies the model gave (`max_turns`).
        text: the text of the model's last reply (often empty).
    """

    def __init__(self, turns: int, text: str) -> None:
        super().__init__(
            f"the model was still calling tools after {turns} turn(s) (max_turns={turns}); "
            f"its results are recorded but the model has not answered yet; call run() again "
            f"or pass a larger max_turns"
        )
        self.turns = turns
        self.text = text


class UnknownOwnerError(LionfactoryError, LookupError):
    """An exchange call named an owner that is not registered.

    A message to an unknown recipient is an error, never silently dropped.

    Attributes:
        owner: the unknown id.
    """

    def __init__(self, owner: UUID, role: str) -> None:
        super().__init__(
            f"{role} {owner} is not registered on this exchange; call exchange.register(id) first"
        )
        self.owner = owner


class McpConnectionError(LionfactoryError, ConnectionError):
    """An MCP server could not be started, initialized, or reached for a call.

    One error for every way a connection fails (a program that is missing or
    exits at once, a silent server, a refused port, a dropped connection),
    instead of the nested exception groups of the task groups underneath.
    The underlying exception is the ``__cause__``.

    Attributes:
        server: the server's name, or the command or URL it was started with.
        phase: ``"start"`` (launching the program), ``"initialize"`` (the
            handshake and the tool list) or ``"call"`` (a tool call).
        reason: what went wrong, in words.
    """

    def __init__(self, server: str, phase: str, reason: str) -> None:
        super().__init__(f"MCP server {server!r} failed during {phase}: {reason}")
        self.server = server
        self.phase = phase
        self.reason = reason


class ConflictError(LionfactoryError):
    """Saving would overwrite a version of the branch that this writer never loaded.

    Another writer (a process, a server replica) saved the branch after this
    one loaded it; saving anyway would drop that writer's messages. Load the
    branch again, redo the work on the fresh copy, and save that.

    Attributes:
        branch_id: the branch.
        expected: the version this writer loaded or last saved (0: none).
        found: the version the store holds (0: none).
    """

    def __init__(self, branch_id: UUID, expected: int, found: int) -> None:
        had = f"version {expected}" if expected else "no saved version"
        holds = f"version {found}" if found else "no version (it was deleted)"
        super().__init__(
            f"branch {branch_id} was saved by another writer: this copy has {had}, the store "
            f"holds {holds}; load it again and redo the change on the fresh copy"
        )
        self.branch_id = branch_id
        self.expected = expected
        self.found = found


class CheckpointNotFound(LionfactoryError, LookupError):
    """`Branch.rewind` named an id that is none of the branch's checkpoints.

    Attributes:
        checkpoint_id: the id asked for.
    """

    def __init__(self, checkpoint_id: str, known: int) -> None:
        super().__init__(
            f"no checkpoint {checkpoint_id!r} on this branch ({known} checkpoint(s); "
            f"branch.checkpoints lists them)"
        )
        self.checkpoint_id = checkpoint_id


class UnknownBranchError(LionfactoryError, LookupError):
    """A branch store has no branch of that id.

    Attributes:
        branch_id: the id asked for.
    """

    def __init__(self, branch_id: UUID) -> None:
        super().__init__(f"no saved branch {branch_id} in this store; list() shows what it holds")
        self.branch_id = branch_id


class ScriptExhaustedError(LionfactoryError, AssertionError):
    """A `ScriptedModel` was asked for more replies than its script holds."""


class ToolFailure(LionfactoryError):
    """An expected failure inside one tool, answered as that tool's typed response.

    Raised and caught within a tool (or the seams it uses) so that deep code
    can stop early with a sentence for the model; the handler returns
    `message` as ``success=False`` or an error ``status``. It never reaches
    `Branch.act`.

    Attributes:
        message: what the model reads, saying what to do next.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ToolError(LionfactoryError):
    """Base of the errors a model caused; `Branch.act` shows them to the model."""

    def __init__(self, tool: str, message: str) -> None:
        super().__init__(message)
        self.tool = tool
        self.message = message

    def __str__(self) -> str:
        return self.message


class ToolInputError(ToolError, ValueError):
    """The arguments of a tool call failed validation.

    Attributes:
        errors: pydantic's error list, trimmed to what a model can act on
            (`loc`, `msg`, `type`, and a short `input`).
    """

    def __init__(self, tool: str, message: str, errors: Sequence[dict[str, Any]] = ()) -> None:
        super().__init__(tool, message)
        self.errors: list[dict[str, Any]] = list(errors)


class ToolDenied(ToolError):
    """A pre hook refused the call.

    Hooks raise it with only a reason: ``raise ToolDenied("no sudo here")``;
    the pipeline fills in the tool name.
    """

    def __init__(self, reason: str, tool: str = "") -> None:
        super().__init__(tool, reason)
        self.reason = reason

    def __str__(self) -> str:
        if self.tool:
            return f"Tool {self.tool!r} denied the call: {self.reason}"
        return self.reason


class UnknownToolError(ToolError, LookupError):
    """The model asked for a tool that is not registered on the branch."""

    def __init__(self, tool: str, available: Sequence[str]) -> None:
        names = ", ".join(available) or "none"
        super().__init__(
            tool, f"Unknown tool {echo(tool)}. Call one of the registered tools: {names}."
        )
        self.available = tuple(available)

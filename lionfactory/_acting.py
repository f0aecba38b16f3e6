"""Running one tool call for a branch: the boundary where errors become tool messages.

`execute_call` is the only place that turns a model-facing error into the
payload a model reads (`error_payload`); `ActionResult` carries that payload
as data, so the command line and the MCP server present it without parsing
the tool message back.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any, Literal

import attrs

from lionfactory._approvals import (
    Answer,
    Approval,
    PendingCall,
    answer_message,
    answer_payload,
    give_approval,
    withdraw_approval,
)
from lionfactory._call import CallContext, enter_call, leave_call
from lionfactory._echo import echo, shorten
from lionfactory._messages import (
    Message,
    ToolCall,
    encode_json,
    encode_json_string,
    tool_message,
)
from lionfactory._tool import Tool, reports_failure
from lionfactory.errors import (
    ApprovalRequired,
    StepsHeld,
    ToolError,
    ToolInputError,
    UnknownToolError,
)

__all__ = [
    "ActionResult",
    "Outcome",
    "answer_result",
    "arguments_object",
    "encode_json",
    "encode_json_string",
    "error_payload",
    "execute_call",
    "pending_payload",
]

Outcome = Literal["done", "failed", "error", "pending"]
"""How one call ended: see `ActionResult.outcome`."""

logger = logging.getLogger("lionfactory")


def arguments_object(tool: str, arguments: object) -> dict[str, Any]:
    """A call's arguments as a dict: a mapping, None (no arguments), or a JSON object string.

    Some frameworks hand the model's arguments over as the JSON text it
    wrote; that text is parsed here, once, for every route.

    Raises:
        ToolInputError: `arguments` is a string that is not a JSON object,
            or neither a mapping nor a string.
    """
    if type(arguments) is dict:  # the common case, without the ABC check below
        return dict(arguments)
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if isinstance(arguments, (str, bytes, bytearray)):
        try:
            parsed = json.loads(arguments)
        except ValueError as exc:
            raise ToolInputError(
                tool,
                f"{tool}: the arguments are a string that is not JSON ({exc}); pass an "
                f'object of named arguments, e.g. {{"action": "read"}}.',
            ) from None
        if isinstance(parsed, dict):
            return parsed
        raise ToolInputError(
            tool,
            f"{tool}: the arguments must be a JSON object of named arguments, got "
            f"{type(parsed).__name__} {str(arguments)[:80]!r}.",
        )
    raise ToolInputError(
        tool,
        f"{tool}: the arguments must be a mapping of named arguments or a JSON object "
        f"string, got {type(arguments).__name__}.",
    )


def error_payload(error: str, exception: BaseException) -> dict[str, Any]:
    """The JSON-ready payload a model reads when a call did not produce a response.

    ``error`` is the text, ``error_type`` the exception's class name, and for
    invalid input ``errors`` holds pydantic's validation errors, so a model
    (or an MCP client) can correct the call field by field.
    """
    payload: dict[str, Any] = {"error": error, "error_type": type(exception).__name__}
    if isinstance(exception, ToolInputError):
        payload["errors"] = exception.errors
    return payload


# Not slotted: a frozen slotted attrs class sets each of its eleven fields
# through ``object.__setattr__``, while a dict class writes them into its
# ``__dict__`` directly, half the cost, and every `Branch.act` builds one. The
# fields, immutability, equality and hash are the same.
@attrs.frozen(slots=False)
class ActionResult:
    """The outcome of one tool call run by a branch.

    Attributes:
        call_id: the tool call's id.
        tool: the tool's name.
        arguments: the arguments as the model sent them.
        result: the tool's JSON-ready response, or None on error.
        error: the error text the model saw, or None.
        error_type: the error's class name (``ToolInputError``, ...), or None.
        message: the tool message appended to the log.
        exception: the exception behind `error`, for developers.
        payload: what the model read: `result`, or the `error_payload`; for
            a pending call, what a host that cannot pause shows the model
            (`pending_payload`).
        pending: the `PendingCall` when a hook asked a person to approve
            the call: it did not run, and `message` is *not* in the log
            (the call's tool message comes when it is decided).
        failed: whether the call failed: an error, or a response that
            reports a typed failure (`Tool.reports_failure`); a pending call
            has not failed.
    """

    call_id: str
    tool: str
    arguments: dict[str, Any]
    result: dict[str, Any] | None
    error: str | None
    error_type: str | None
    message: Message
    exception: BaseException | None = attrs.field(default=None, repr=False)
    payload: dict[str, Any] = attrs.field(factory=dict, repr=False)
    pending: PendingCall | None = None
    failed: bool = False

    @property
    def ok(self) -> bool:
        """Whether the pipeline returned a response (it may still report a typed failure).

        False for a pending call too: it has no response yet.
        """
        return self.error is None and self.pending is None

    @property
    def outcome(self) -> Outcome:
        """How the call ended; ``outcome in ("failed", "error")`` is exactly `failed`.

        * ``"done"``: the tool did what was asked.
        * ``"failed"``: the tool answered with a typed failure (a missing
          file, a refused merge: its response says ``success: false`` or an
          ``error``); the model reads that response.
        * ``"error"``: the call never produced a response (invalid arguments,
          a denial, an unknown tool, an exception); the model reads an error.
        * ``"pending"``: a person must approve it first; it did not run.
        """
        if self.pending is not None:
            return "pending"
        if self.error is not None:
            return "error"
        return "failed" if self.failed else "done"


def pending_payload(pending: PendingCall) -> dict[str, Any]:
    """What the model reads about a held call where the host cannot pause the loop.

    `Branch.run()` never shows it (it pauses instead); a framework adapter
    whose host has no approval flow returns it as the call's result, so the
    model knows the call did not run and why, and does not simply repeat it.
    """
    return answer_payload(pending, "held")


def answer_result(
    pending: PendingCall,
    kind: Answer,
    *,
    metadata: Mapping[str, Any] | None = None,
    exception: BaseException | None = None,
) -> ActionResult:
    """The outcome of a held call answered without running it, the same on every route.

    A ``"held"`` answer keeps `pending` on the result (the call still
    waits); the others are errors the model reads (``error``,
    ``error_type``), and a must-approve answer keeps `pending` too when the
    server keeps the call.
    """
    payload = answer_payload(pending, kind)
    message = answer_message(pending, payload, metadata)
    error = payload.get("error")
    still_held = kind in ("held", "must_approve")
    return _ended(
        pending,
        message,
        payload,
        error,
        exception=exception,
        pending=pending if still_held else None,
        failed=error is not None,
    )


def _ended(
    call: ToolCall | PendingCall,
    message: Message,
    payload: dict[str, Any],
    error: str | None,
    *,
    result: dict[str, Any] | None = None,
    exception: BaseException | None = None,
    pending: PendingCall | None = None,
    failed: bool,
) -> ActionResult:
    """The `ActionResult` of `call`; an error's type is the one its payload names."""
    # The class's own ``__init__``, called with the new instance: calling
    # the class with keywords goes through ``type.__call__``, which packs
    # them in a dict for ``__init__`` to unpack again (a third of the cost).
    action = _new(ActionResult)
    _init_result(
        action,
        call_id=call.id,
        # PendingCall's plain class check: ToolCall's (a pydantic model) goes through ABCMeta.
        tool=call.tool if isinstance(call, PendingCall) else call.name,
        arguments=dict(call.arguments),
        result=result,
        error=error,
        error_type=None if error is None else payload.get("error_type"),
        message=message,
        exception=exception,
        payload=payload,
        pending=pending,
        failed=failed,
    )
    return action


_new = object.__new__
_init_result = ActionResult.__init__
_init_context = CallContext.__init__


async def execute_call(
    branch_id: uuid.UUID, tools: Mapping[str, Tool], call: ToolCall, *, approved: bool = False
) -> ActionResult:
    """Run one tool call inside a `CallContext` and build its tool message.

    Model-facing errors (`ToolInputError`, `ToolDenied`, `UnknownToolError`,
    arguments that were not valid JSON) and unexpected exceptions become an
    error payload the model reads; only cancellation propagates.

    Args:
        branch_id: the branch the call runs for.
        tools: the tools by name.
        call: the call.
        approved: a person approved this very call (its id, tool and
            arguments): its hooks' asks are answered. The approval covers
            this call alone, never what its handler then does.
    """
    name = call.name  # read once: a model's attribute reads are slow ones
    context = _new(CallContext)  # as `_ended` builds its result: no keywords dict
    _init_context(context, call_id=call.id, tool=name, branch_id=branch_id, approved=approved)
    tool = tools.get(name)
    result: dict[str, Any] | None = None
    exception: BaseException | None = None
    if tool is None or call.arguments_error is not None:
        exception = _refused(tools, call)
    else:
        # The call runs here rather than in a coroutine of its own, its
        # approval and context entered as `approving` and `call_context`
        # would, without their scope objects: every `Branch.act` runs this.
        approval = (
            give_approval(Approval(branch_id, call.id, call.name, dict(call.arguments)))
            if approved
            else None
        )
        token = enter_call(context)
        try:
            result = await tool.invoke(call.arguments)
        except (ToolError, ApprovalRequired) as exc:
            exception = exc
        except Exception as exc:
            exception = _unexpected(call, exc)
        finally:
            leave_call(token)
            if approval is not None:
                withdraw_approval(approval)
    if isinstance(exception, ApprovalRequired):
        if not approved or isinstance(exception, StepsHeld):
            return _held(call, exception, context)
        # An ask from inside an approved call's handler: asking again would
        # hold the same call forever, so the model is told instead.
        exception = _Explained(
            f"Tool {echo(call.name)} asked for approval again after it was approved "
            f"({shorten(exception.reason, 300)}); it did not finish. Tell the user.",
            exception,
        )
    content = ""
    if exception is None:
        try:
            content = encode_json(result)
        except (ValueError, RecursionError, TypeError) as exc:
            # A result nested too deep, holding a circular reference or an
            # integer too long to print: the model is told, the loop goes on.
            exception = _Explained(
                f"Tool {echo(call.name)} returned a result that cannot be encoded as JSON "
                f"({type(exc).__name__}: {shorten(str(exc), 300)}). Try different arguments.",
                exc,
            )
            result = None
    if exception is None:
        error = None
        payload = result if result is not None else {}
    else:
        error = str(exception)
        cause = exception.cause if isinstance(exception, _Explained) else exception
        payload = error_payload(error, cause)
        content = json.dumps(payload, ensure_ascii=False, default=str)
        exception = cause
    message = _tool_message(call, content, context)
    # The tool judging the response is the one registered now, as it always
    # was (a handler may have replaced its own tool).
    judge = tools.get(name)
    return _ended(
        call,
        message,
        payload,
        error,
        result=result,
        exception=exception,
        failed=error is not None
        or (reports_failure(result) if judge is None else judge.reports_failure(result)),
    )


def _tool_message(call: ToolCall, content: str, context: CallContext) -> Message:
    """The tool message answering `call`, with the facts its tool left in `context`."""
    return tool_message(call, content, dict(context.metadata))


def _held(call: ToolCall, asked: ApprovalRequired, context: CallContext) -> ActionResult:
    """The outcome of a call a hook asked about: a `PendingCall`, nothing run."""
    pending = PendingCall(
        id=call.id,
        tool=call.name,
        arguments=_json_ready(call.arguments),
        reason=asked.reason,
        hook=asked.hook,
    )
    return answer_result(pending, "held", metadata=context.metadata, exception=asked)


def _json_ready(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as JSON data (a pending call is saved with the branch)."""
    loaded = json.loads(json.dumps(dict(arguments), ensure_ascii=False, default=str))
    return loaded if isinstance(loaded, dict) else {}


class _Explained(Exception):
    """An unexpected exception and the text the model reads about it instead of its own.

    A tool that raised, or a result JSON cannot encode: the payload names the
    original exception's type (`cause`), the text tells the model what to do.
    """

    def __init__(self, message: str, cause: BaseException) -> None:
        super().__init__(message)
        self.cause = cause


def _refused(tools: Mapping[str, Tool], call: ToolCall) -> ToolInputError | UnknownToolError:
    """Why `call` cannot run: its arguments were not JSON, or no tool has its name."""
    if call.arguments_error is not None:
        return ToolInputError(
            call.name,
            f"The arguments of your call to {echo(call.name)} were not valid JSON: "
            f"{call.arguments_error}. Call the tool again with its arguments as one "
            f"JSON object.",
            [{"loc": [], "msg": call.arguments_error, "type": "json_invalid", "input": ""}],
        )
    return UnknownToolError(call.name, list(tools))


def _unexpected(call: ToolCall, exc: Exception) -> _Explained:
    """What the model reads about a tool that raised an unexpected exception (logged here)."""
    logger.warning("tool %r raised", call.name, exc_info=True)
    return _Explained(
        f"Tool {echo(call.name)} failed unexpectedly: {type(exc).__name__}: "
        f"{shorten(str(exc), 2_000)}. Try different arguments or another approach.",
        exc,
    )

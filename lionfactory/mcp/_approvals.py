"""A held call over MCP: ask the person through the client, or say that one must approve.

`ask_person` is the one step the server runs after a call: a call that a
hook asked about (`ApprovalRequired`, a coding `Rule` with ``"ask"``) is
held on the session's branch. When the client declared the ``elicitation``
capability the server asks through ``elicitation/create`` (a form with
``approve`` and an optional ``reason``) and carries the answer out once;
otherwise, or when the person dismisses the question, the call comes back
as an error result saying that a person must approve it, and the branch of
that session keeps the pending call (a saved session keeps it too).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from lionfactory._acting import ActionResult, answer_result
from lionfactory._branch import Branch
from lionfactory._echo import shorten

__all__ = ["APPROVAL_SCHEMA", "Elicit", "ask_person", "client_elicitation"]

Elicit = Callable[[str, dict[str, Any]], Awaitable[tuple[str, Mapping[str, Any] | None]]]
"""``elicit(message, requested_schema) -> (action, content)``: the client's answer.

`action` is ``"accept"``, ``"decline"`` or ``"cancel"``, `content` the form
data when accepted (the SDK's ``ServerSession.elicit_form`` result, unpacked)."""

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Approve",
            "description": "Run this tool call now.",
        },
        "reason": {
            "type": "string",
            "title": "Reason",
            "description": "If you do not approve: why (the agent reads it).",
        },
    },
    "required": ["approve"],
}


async def ask_person(branch: Branch, action: ActionResult, elicit: Elicit | None) -> ActionResult:
    """Carry out a person's decision on a held call, asking through the client if it can.

    Args:
        branch: the session's branch (it holds the call).
        action: what `Branch.act` returned; returned unchanged unless pending.
        elicit: the client's elicitation, or None when the client did not
            declare the ``elicitation`` capability.

    Returns:
        The call's result once approved and run, the denial, or (no
        elicitation, dismissed, or the client failed to answer) an error
        result saying a person must approve; the call then stays pending.
    """
    held = action.pending
    if held is None:
        return action
    if elicit is not None:
        arguments = shorten(json.dumps(held.arguments, ensure_ascii=False), 2_000)
        question = (
            f"The agent wants to call {held.tool!r} with {arguments}. It needs your approval: "
            f"{held.reason}. Approve it?"
        )
        try:
            answer, content = await elicit(question, APPROVAL_SCHEMA)
        except Exception:  # the client could not ask: the call stays pending
            answer, content = "cancel", None
        if answer == "accept" and content is not None and content.get("approve") is True:
            branch.approve(held.id)
            (result,) = await branch.settle(only=[held.id])
            return result
        if answer in ("accept", "decline"):
            given = content.get("reason") if content is not None else None
            reason = given if isinstance(given, str) and given.strip() else "the user declined"
            branch.deny(held.id, reason)
            (result,) = await branch.settle(only=[held.id])
            return result
    return _must_approve(action)


def _must_approve(action: ActionResult) -> ActionResult:
    held = action.pending
    assert held is not None
    return answer_result(
        held, "must_approve", metadata=action.message.metadata, exception=action.exception
    )


def client_elicitation(ctx: Any) -> Elicit | None:
    """The `Elicit` of a ``tools/call`` request context, or None if the client cannot be asked.

    `ctx` is the SDK's request context (``ctx.session``, ``ctx.request_id``).
    The client must have declared the ``elicitation`` capability; the
    question is sent as a form ``elicitation/create`` related to the call.
    """
    import mcp_types as types

    session = getattr(ctx, "session", None)
    if session is None:
        return None
    wanted = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    try:
        if not session.check_client_capability(wanted):
            return None
    except Exception:
        return None

    async def elicit(message: str, schema: dict[str, Any]) -> tuple[str, Mapping[str, Any] | None]:
        answer = await session.elicit_form(
            message, schema, related_request_id=getattr(ctx, "request_id", None)
        )
        return answer.action, answer.content

    return elicit

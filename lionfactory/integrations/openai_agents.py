"""lionfactory's tools as ``FunctionTool``s for the OpenAI Agents SDK.

    from agents import Agent
    from lionfactory.integrations.openai_agents import openai_agents_tools

    agent = Agent(name="coder", tools=openai_agents_tools(branch))

Install with ``pip install 'lionfactory[openai-agents]'``.

Approvals use the SDK's own: each tool's ``needs_approval`` asks the
lionfactory hooks (a coding `Rule` with ``"ask"``, a hook raising
`ApprovalRequired`) whether they would ask about the call; if so the call is
held on the branch and the run ends with it in ``result.interruptions``.
``state = result.to_state()``, ``state.approve(item)`` and
``Runner.run(agent, state)`` run the lionfactory call exactly once::

    result = await Runner.run(agent, "deploy")
    while result.interruptions:
        state = result.to_state()
        for item in result.interruptions:
            state.approve(item)  # or state.reject(item)
        result = await Runner.run(agent, state)

A rejection is answered by the SDK and never reaches the tool; call
``branch.deny(call_id, reason)`` too if the branch is kept. Only tools with
pre hooks are given a ``needs_approval`` policy (no other tool can ask);
for those the SDK itself asks a person about a call whose arguments are
not JSON, before any policy runs.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

from lionfactory.integrations._calls import missing_extra

try:
    from agents import FunctionTool, RunContextWrapper
    from agents.exceptions import UserError
    from agents.strict_schema import ensure_strict_json_schema
    from agents.tool_context import ToolContext
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise missing_extra(__name__, "the OpenAI Agents SDK", "openai-agents") from exc

from lionfactory._acting import pending_payload
from lionfactory._tool import Tool
from lionfactory.integrations._calls import Source, ToolSource, model_view, tool_source

__all__ = ["openai_agents_tools", "strict_schema"]


def openai_agents_tools(source: Source, *, strict: bool | None = None) -> list[FunctionTool]:
    """One Agents SDK ``FunctionTool`` per tool of `source`, with our JSON schema.

    Every call runs as `Branch.act` runs it (through a `Branch` it is
    recorded there, under the SDK's call id) and its outcome comes back to
    the model as JSON text: the tool's response, or the error payload
    (``error``, ``error_type``, and ``errors`` for invalid arguments), so
    the model reads what went wrong and calls again. Arguments that are not
    JSON at all are answered the same way without running anything.

    Strict mode (constrained decoding on OpenAI) requires every argument to
    be required. Most built-ins have optional arguments with defaults that
    strict mode would force the model to spell out, so by default a tool is
    strict exactly when `strict_schema` finds its schema already strict
    (no optional argument anywhere); the others are sent non-strict.

    The list is a snapshot of `source`'s tools: a tool registered on the
    branch later needs a new call (the SDK takes a list, not a live view).

    Args:
        source: a `Branch`, a `Tool`, or a list of Tools (not bound to a
            branch: their calls are recorded nowhere).
        strict: None decides per tool as above; False turns strict mode off
            for every tool; True requires it and raises for a tool whose
            schema cannot be strict without changing its meaning.

    Raises:
        TypeError: `source` is not a Branch, a Tool or a list of Tools.
        ValueError: a tool of the list is bound to a branch, two share a
            name, or ``strict=True`` for a schema with optional arguments.
    """
    tools = tool_source(source)
    return [_function_tool(tools, tool, strict) for tool in tools.tools.values()]


def strict_schema(tool: Tool) -> dict[str, Any] | None:
    """`tool`'s parameters in the SDK's strict form, or None when strict mode would change them.

    Strict mode lists every property as required; a schema with an optional
    property (one that has a default) would make the model send it every
    time, so it is not strict-compatible and None comes back.
    """
    schema = tool.schema("openai")["function"]["parameters"]
    try:
        converted = ensure_strict_json_schema(copy.deepcopy(schema))
    except UserError:
        return None
    return converted if _required(converted) == _required(schema) else None


def _function_tool(source: ToolSource, tool: Tool, strict: bool | None) -> FunctionTool:
    schema = tool.schema("openai")["function"]
    strict_form = strict_schema(tool) if strict is not False else None
    if strict and strict_form is None:
        raise ValueError(
            f"tool {tool.name!r} cannot be strict: its schema has optional arguments "
            f"that strict mode would make required; pass strict=None or False"
        )
    name = tool.name

    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        parsed = _json_object(arguments)
        if isinstance(parsed, str):
            return json.dumps(
                {
                    "error": f"The arguments of your call to {name!r} were not valid JSON: "
                    f"{parsed}. Call the tool again with its arguments as one JSON object.",
                    "error_type": "ToolInputError",
                }
            )
        call_id = context.tool_call_id
        if call_id in asked or source.holds(call_id):
            # needs_approval said yes (in this process, or the branch held
            # the call before a restart) and the SDK invokes the tool anyway:
            # a person approved it (a rejection never reaches the tool).
            asked.discard(call_id)
            action = await source.call_approved(name, parsed, call_id=call_id)
        else:
            action = await source.call(name, parsed, call_id=call_id)
        if action.pending is not None:
            # A hook asked only now (the arguments changed after the check):
            # the model is told the call is held rather than that it ran.
            return json.dumps(pending_payload(action.pending), ensure_ascii=False)
        return json.dumps(model_view(action), ensure_ascii=False, default=str)

    asked: set[str] = set()

    async def needs_approval(
        context: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str
    ) -> bool:
        if call_id in asked:
            return True
        if await source.asks(name, arguments) is None:
            return False
        # Held on the branch now (recorded as pending, nothing runs), so the
        # branch's pending_calls and a saved branch show what waits.
        await source.call(name, arguments, call_id=call_id)
        asked.add(call_id)
        return True

    return FunctionTool(
        name=name,
        description=schema["description"],
        params_json_schema=strict_form if strict_form is not None else schema["parameters"],
        on_invoke_tool=invoke,
        strict_json_schema=strict_form is not None,
        # Only a tool with pre hooks can ask. The SDK asks a person about any
        # call whose arguments are not JSON before a policy function runs, so
        # a tool no hook guards keeps answering those with the error to read.
        needs_approval=needs_approval if tool.pre else False,
    )


def _json_object(text: str) -> dict[str, Any] | str:
    """The arguments as a dict, or what is wrong with them ("" means no arguments)."""
    if not text.strip():
        return {}
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    return parsed if isinstance(parsed, dict) else "expected a JSON object"


def _required(schema: Any) -> list[tuple[str, frozenset[str]]]:
    """Every object schema's required names, by where it sits (to compare two schemas)."""
    return sorted(_walk_required(schema, ""))


def _walk_required(node: Any, path: str) -> Iterator[tuple[str, frozenset[str]]]:
    if isinstance(node, dict):
        if "properties" in node:
            yield path, frozenset(node.get("required", ()))
        for key, value in node.items():
            yield from _walk_required(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk_required(value, f"{path}/{index}")

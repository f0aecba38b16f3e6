"""lionfactory's tools for a lionagi ``Branch``.

    from lionfactory.integrations.lionagi import lionagi_tools

    lion_branch.register_tools(lionagi_tools(branch))

Install with ``pip install 'lionfactory[lionagi]'``. lionagi users can adopt
lionfactory's factories one at a time: each adapted tool is an ordinary
lionagi ``Tool`` next to their own.
"""

from __future__ import annotations

import contextvars
from typing import Any

from lionfactory.integrations._calls import missing_extra

try:
    from lionagi.protocols.action.tool import Tool as LionagiTool
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise missing_extra(__name__, "lionagi", "lionagi") from exc

from lionfactory._tool import Tool
from lionfactory.integrations._calls import Source, ToolSource, model_view, tool_source

__all__ = ["lionagi_tools"]


# lionagi (0.36) does not hand a call id to the tool's callable; it names each
# call in the TOOL_PRE signal of the branch's hook bus, emitted in the same task
# right before the call. The handler leaves the id here for the callable.
_lionagi_call: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "lionfactory_lionagi_call", default=None
)


def _note_call(*, tool_name: str = "", call_id: str = "", **_: Any) -> None:
    _lionagi_call.set((tool_name, call_id) if call_id else None)


def lionagi_tools(source: Source, *, lion_branch: Any = None) -> list[LionagiTool]:
    """One lionagi ``Tool`` per tool of `source`, with lionfactory's JSON schema.

    lionagi runs the tool with the model's arguments as keyword arguments;
    lionfactory validates them, and every call runs as `Branch.act` runs it
    (recorded on the lionfactory branch, which keeps the read-before-edit
    evidence). The action's output is the tool's response, or the error
    payload (``error``, ``error_type``, ``errors``) the model reads to
    correct its call: nothing raises into lionagi's action machinery.

    The list is a snapshot of `source`'s tools: a tool registered on the
    branch later needs a new call.

    Call ids: lionagi does not pass its call id to a tool, it announces it on
    the lionagi branch's hook bus. Pass that branch as `lion_branch` and each
    call is recorded on the lionfactory branch under lionagi's id (the
    ``call_id`` of its tool hooks); a lionagi branch without a hook bus gets
    one. Without it the calls get ids of their own.

    Args:
        source: a lionfactory `Branch`, a `Tool`, or a list of Tools (not
            bound to a branch: their calls are recorded nowhere).
        lion_branch: the lionagi ``Branch`` that will run the tools, to
            record lionagi's call ids.

    Raises:
        TypeError: `source` is not a Branch, a Tool or a list of Tools.
        ValueError: a tool of the list is bound to a branch, or two share a name.
    """
    tools = tool_source(source)
    if lion_branch is not None:
        _follow_call_ids(lion_branch)
    return [_lionagi_tool(tools, tool) for tool in tools.tools.values()]


def _follow_call_ids(lion_branch: Any) -> None:
    """Listen to `lion_branch`'s TOOL_PRE signal for the id of each call (once per bus)."""
    from lionagi.hooks.bus import HookBus, HookPoint

    bus = getattr(lion_branch, "_hooks", None)
    if bus is None:
        bus = HookBus()
        lion_branch.attach_hook_bus(bus)
    if _note_call not in bus.handlers_for(HookPoint.TOOL_PRE):
        bus.on(HookPoint.TOOL_PRE, _note_call)


def _lionagi_tool(source: ToolSource, tool: Tool) -> LionagiTool:
    name = tool.name

    # The parameter must be spelled **kwargs: lionagi requires every other
    # parameter without a default among the model's arguments.
    async def invoke(**kwargs: Any) -> dict[str, Any]:
        noted = _lionagi_call.get()
        call_id = noted[1] if noted is not None and noted[0] == name else None
        _lionagi_call.set(None)
        return model_view(await source.call(name, kwargs, call_id=call_id))

    # lionagi names a tool after its callable and checks that it has a name.
    invoke.__name__ = invoke.__qualname__ = name
    return LionagiTool(func_callable=invoke, tool_schema=tool.schema("openai"))

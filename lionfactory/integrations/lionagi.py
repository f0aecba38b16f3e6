"""lionfactory's tools for a lionagi ``Branch``.

    from lionfactory.integrations.lionagi import lionagi_tools

    lion_branch.register_tools(lionagi_tools(branch))

Install with ``pip install 'lionfactory[lionagi]'``. lionagi users can adopt
lionfactory's factories one at a time: each adapted tool is an ordinary
lionagi ``Tool`` next to their own.
"""

from __future__ import annotations

from typing import Any

try:
    from lionagi.protocols.action.tool import Tool as LionagiTool
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "lionfactory.integrations.lionagi needs lionagi; "
        "install it with `pip install 'lionfactory[lionagi]'`"
    ) from exc

from lionfactory._tool import Tool
from lionfactory.integrations._calls import Source, ToolSource, model_view, tool_source

__all__ = ["lionagi_tools"]


def lionagi_tools(source: Source) -> list[LionagiTool]:
    """One lionagi ``Tool`` per tool of `source`, with lionfactory's JSON schema.

    lionagi runs the tool with the model's arguments as keyword arguments;
    lionfactory validates them, and every call runs as `Branch.act` runs it
    (recorded on the lionfactory branch, which keeps the read-before-edit
    evidence). The action's output is the tool's response, or the error
    payload (``error``, ``error_type``, ``errors``) the model reads to
    correct its call: nothing raises into lionagi's action machinery.

    The list is a snapshot of `source`'s tools: a tool registered on the
    branch later needs a new call.

    Args:
        source: a lionfactory `Branch`, a `Tool`, or a list of Tools (not
            bound to a branch: their calls are recorded nowhere).

    Raises:
        TypeError: `source` is not a Branch, a Tool or a list of Tools.
        ValueError: a tool of the list is bound to a branch, or two share a name.
    """
    tools = tool_source(source)
    return [_lionagi_tool(tools, tool) for tool in tools.tools.values()]


def _lionagi_tool(source: ToolSource, tool: Tool) -> LionagiTool:
    name = tool.name

    # The parameter must be spelled **kwargs: lionagi requires every other
    # parameter without a default among the model's arguments.
    async def invoke(**kwargs: Any) -> dict[str, Any]:
        return model_view(await source.call(name, kwargs))

    # lionagi names a tool after its callable and checks that it has a name.
    invoke.__name__ = invoke.__qualname__ = name
    return LionagiTool(func_callable=invoke, tool_schema=tool.schema("openai"))

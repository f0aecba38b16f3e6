"""lionfactory's tools as LangChain ``StructuredTool``s (async), for LangChain and LangGraph.

    from lionfactory.integrations.langchain import langchain_tools

    tools = langchain_tools(branch)
    model = chat_model.bind_tools(tools)

Install with ``pip install 'lionfactory[langchain]'`` (``langchain-core`` only).
"""

from __future__ import annotations

import json
from typing import Any

try:
    from langchain_core.tools import StructuredTool
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "lionfactory.integrations.langchain needs langchain-core; "
        "install it with `pip install 'lionfactory[langchain]'`"
    ) from exc

from lionfactory._tool import Tool
from lionfactory.integrations._calls import Source, ToolSource, model_view, tool_source

__all__ = ["langchain_tools"]


def langchain_tools(source: Source) -> list[StructuredTool]:
    """One async ``StructuredTool`` per tool of `source`, with our JSON schema.

    The tools' ``args_schema`` is lionfactory's JSON schema as a dict, so
    LangChain passes the model's arguments through unvalidated and
    lionfactory's own pipeline checks them: an invalid call is recorded on
    the branch and answered with the error the model reads (``error``,
    ``error_type``, ``errors``), as the ToolMessage's content. Every call
    runs as `Branch.act` runs it. The ToolMessage's content is that JSON
    text; its ``artifact`` is the same result as a dict, for code that
    inspects it.

    The tools are async only (``ainvoke``; ``invoke`` raises): calls run on
    the caller's event loop, which is where the branch's other calls run.
    The list is a snapshot of `source`'s tools: a tool registered on the
    branch later needs a new call.

    Args:
        source: a `Branch`, a `Tool`, or a list of Tools (not bound to a
            branch: their calls are recorded nowhere).

    Raises:
        TypeError: `source` is not a Branch, a Tool or a list of Tools.
        ValueError: a tool of the list is bound to a branch, or two share a name.
    """
    tools = tool_source(source)
    return [_structured_tool(tools, tool) for tool in tools.tools.values()]


def _structured_tool(source: ToolSource, tool: Tool) -> StructuredTool:
    schema = tool.schema("openai")["function"]
    name = tool.name

    async def invoke(**arguments: Any) -> tuple[str, dict[str, Any]]:
        action = await source.call(name, arguments)
        seen = model_view(action)
        return json.dumps(seen, ensure_ascii=False, default=str), seen

    return StructuredTool(
        name=name,
        description=schema["description"],
        args_schema=schema["parameters"],
        coroutine=invoke,
        response_format="content_and_artifact",
    )

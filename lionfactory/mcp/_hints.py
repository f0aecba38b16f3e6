"""What MCP clients are told about a tool beyond its inputs: title, annotations, output schema.

MCP clients use ``annotations`` to decide what to ask the user before a call
(a read-only tool may run unattended, a destructive one may not) and
``outputSchema`` to check ``structuredContent``. Both are translations of
what the tool says about itself (`Tool.hints`, `Tool.response_model`, set by
the factory that built it): this module keeps no table of built-ins, so a
user's tool that happens to be called ``bash`` gets no hints it did not ask
for, a toolkit's wrapped tool keeps the hints of the tool it wraps, and a new
tool describes itself in its own module.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from pydantic import BaseModel

from lionfactory._tool import Tool, ToolHints

__all__ = ["hints_for", "mcp_annotations", "output_schema"]


def mcp_annotations(hints: ToolHints) -> dict[str, Any]:
    """The MCP ``annotations`` object of `hints`."""
    return {
        "title": hints.title,
        "readOnlyHint": hints.read_only,
        "destructiveHint": hints.destructive,
        "idempotentHint": hints.idempotent,
        "openWorldHint": hints.open_world,
    }


def hints_for(tool: Tool) -> ToolHints | None:
    """The hints `tool` states about itself, or None."""
    return tool.hints


def output_schema(tool: Tool) -> dict[str, Any] | None:
    """The JSON schema of the tool's response, open to extra keys; None without a response model.

    The schema's own ``additionalProperties: false`` is dropped at the top
    level: the coding toolkit's nudges add a ``system`` key to a response,
    and a client that validates ``structuredContent`` must accept it.

    A union of bare types, which pydantic writes as ``anyOf`` (``{"anyOf":
    [{"type": "string"}, {"type": "null"}]}`` for an optional field), is
    written as the equivalent type list (``{"type": ["string", "null"]}``):
    the official Python client validates every result against this schema,
    and the reader's nine optional fields took it about 150 us a call as
    ``anyOf``, half that as type lists. Unions with anything more than a
    type in a branch stay as pydantic wrote them. The input schema keeps
    pydantic's ``anyOf``, which the model providers' function calling
    accepts more widely than type lists.
    """
    if tool.response_model is None:
        return None
    return copy.deepcopy(_open_schema(tool.response_model))


@functools.lru_cache(maxsize=128)
def _open_schema(model: type[BaseModel]) -> dict[str, Any]:
    schema: dict[str, Any] = _type_lists(model.model_json_schema(mode="serialization"))
    schema.pop("additionalProperties", None)
    return schema


def _type_lists(node: Any) -> Any:
    """`node` with every ``anyOf`` of bare types (``{"type": name}`` only) as a type list."""
    if isinstance(node, list):
        return [_type_lists(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _type_lists(value) for key, value in node.items()}
    branches = node.get("anyOf")
    if (
        "type" not in node
        and isinstance(branches, list)
        and len(branches) > 1
        and all(
            isinstance(b, dict) and b.keys() == {"type"} and isinstance(b["type"], str)
            for b in branches
        )
    ):
        types = [b["type"] for b in branches]
        if len(set(types)) == len(types):
            del node["anyOf"]
            node["type"] = types
    return node

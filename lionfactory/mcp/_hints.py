"""What MCP clients are told about each built-in: a title, behaviour hints, the output schema.

MCP clients use ``annotations`` to decide what to ask the user before a call
(a read-only tool may run unattended, a destructive one may not) and
``outputSchema`` to check ``structuredContent``. The hints are properties of
the operations a built-in offers, so they are kept here in one table, keyed
by the built-in's request model: a user's tool that happens to be called
``bash`` gets no hints it did not ask for, and a toolkit's wrapped tool (same
request model) gets the same hints as the standalone one.

Where a built-in has actions of different kinds, its hints describe the
strongest one (the editor's ``write`` overwrites, so the editor is
destructive). ``openWorldHint`` is true where a call can reach beyond the
workspace: ``bash`` runs arbitrary commands and ``subagent`` calls a model.
The reader fetches remote documents only from hosts its factory allows, so
it is a closed-world tool unless it was given some (`hints_for` says so).
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import attrs
from pydantic import BaseModel

from lionfactory._tool import Tool

__all__ = ["BUILTIN_HINTS", "ToolHints", "hints_for", "output_schema"]


@attrs.frozen
class ToolHints:
    """The MCP description of one built-in beyond its input schema.

    Attributes:
        title: a short human-readable name (clients show it in menus).
        response: the name of the response model in the request model's
            module (its JSON schema is the tool's ``outputSchema``).
        read_only: the tool never changes its environment.
        destructive: a call may overwrite or delete (meaningful when not read-only).
        idempotent: repeating a call with the same arguments has no further effect.
        open_world: a call may reach things outside the workspace.
    """

    title: str
    response: str
    read_only: bool
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = False

    def annotations(self) -> dict[str, Any]:
        """The MCP ``annotations`` object."""
        return {
            "title": self.title,
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        }


_READ = {"read_only": True, "idempotent": True}

BUILTIN_HINTS: dict[str, ToolHints] = {
    "lionfactory.tools.reader.ReaderRequest": ToolHints("Read files", "ReaderResponse", **_READ),
    "lionfactory.tools.editor.EditorRequest": ToolHints(
        "Edit files", "EditorResponse", read_only=False, destructive=True
    ),
    "lionfactory.tools.bash.BashRequest": ToolHints(
        "Run a shell command", "BashResponse", read_only=False, destructive=True, open_world=True
    ),
    # `kill` ends a job: destructive, and not idempotent.
    "lionfactory.tools.jobs.JobsRequest": ToolHints(
        "Manage background jobs", "JobsResponse", read_only=False, destructive=True
    ),
    "lionfactory.tools._search_models.SearchRequest": ToolHints(
        "Search the workspace", "SearchResponse", **_READ
    ),
    "lionfactory.tools.code_check.CodeCheckRequest": ToolHints(
        "Check code with ruff", "CodeCheckResponse", **_READ
    ),
    "lionfactory.tools.code_nav.NavRequest": ToolHints(
        "Navigate Python code", "NavResponse", **_READ
    ),
    "lionfactory.tools.ast_search.AstSearchRequest": ToolHints(
        "Search code by syntax", "AstSearchResponse", **_READ
    ),
    "lionfactory.tools._context_models.ContextRequest": ToolHints(
        "Manage the conversation context", "ContextResponse", read_only=False
    ),
    "lionfactory.tools._messenger_models.MessengerRequest": ToolHints(
        "Message teammates", "MessengerResponse", read_only=False
    ),
    "lionfactory.coding.sandbox.SandboxRequest": ToolHints(
        "Work in a git sandbox", "SandboxResponse", read_only=False, destructive=True
    ),
    "lionfactory.coding.subagent.SubagentRequest": ToolHints(
        "Delegate to a subagent",
        "SubagentResponse",
        read_only=False,
        destructive=True,
        open_world=True,
    ),
}
"""Hints of each built-in, by the import path of its request model."""


_READER = "lionfactory.tools.reader.ReaderRequest"


def _key(tool: Tool) -> str:
    model = tool.request_model
    return f"{model.__module__}.{model.__qualname__}"


def hints_for(tool: Tool) -> ToolHints | None:
    """The hints of a built-in tool, or None for any other tool."""
    hints = BUILTIN_HINTS.get(_key(tool))
    if (
        hints is not None
        and _key(tool) == _READER
        and "Remote URLs are disabled" not in tool.description
    ):
        # A reader allowed to fetch from some hosts reaches outside the workspace.
        return attrs.evolve(hints, open_world=True)
    return hints


def output_schema(tool: Tool) -> dict[str, Any] | None:
    """The JSON schema of a built-in's response, open to extra keys; None for other tools.

    The schema's own ``additionalProperties: false`` is dropped at the top
    level: the coding toolkit's nudges add a ``system`` key to a response,
    and a client that validates ``structuredContent`` must accept it.
    """
    hints = BUILTIN_HINTS.get(_key(tool))
    module = sys.modules.get(tool.request_model.__module__)
    model = getattr(module, hints.response, None) if hints is not None else None
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    schema = copy.deepcopy(model.model_json_schema(mode="serialization"))
    schema.pop("additionalProperties", None)
    return schema

"""The built-in tools that need only a workspace: their names, and how to build one.

The one registry the command line (``lionfactory tools``, ``call``, ``mcp
serve --toolkit standalone``), the coding toolkit and so the MCP server read.
Each tool lives in ``lionfactory.tools.<name>`` and its factory is
``<name>_tool``; a factory is imported only when asked for, so listing the
names (or building one tool) does not import every tool module. That is also
why this module sits outside ``lionfactory.tools``: importing anything in
that package first runs its ``__init__``, which imports them all.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from lionfactory._tool import Tool

__all__ = ["RUNS_PROGRAMS", "WORKSPACE_TOOLS", "workspace_factory"]

WORKSPACE_TOOLS: tuple[str, ...] = (
    "reader",
    "editor",
    "bash",
    "search",
    "code_check",
    "code_nav",
    "ast_search",
)
"""The built-ins a workspace is all the context of, in the order every listing uses."""

RUNS_PROGRAMS: frozenset[str] = frozenset({"bash", "search", "code_check", "ast_search"})
"""The workspace tools that start programs, and so take ``isolation=``."""


def workspace_factory(name: str) -> Callable[..., Tool]:
    """The factory of workspace tool `name` (``reader`` -> `reader_tool`).

    Raises:
        KeyError: `name` is not one of `WORKSPACE_TOOLS`.
    """
    if name not in WORKSPACE_TOOLS:
        raise KeyError(name)
    module = importlib.import_module(f"lionfactory.tools.{name}")
    return cast("Callable[..., Tool]", getattr(module, f"{name}_tool"))

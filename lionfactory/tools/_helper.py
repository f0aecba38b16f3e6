"""What the tools that drive a helper program (search, code_check, ast_search) share.

The factory body (workspace, binary finder, confinement) and the few phrases
their responses have in common, so the three tools word a count, a missing
program and the matches the ignore rules left out the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from lionfactory._os.binaries import BinaryFinder, finder_or_default
from lionfactory._os.environment import EnvPolicy
from lionfactory._os.isolation import Isolation, workspace_isolation
from lionfactory._os.workspace import Workspace
from lionfactory._tool import Tool, ToolHints
from lionfactory.tools._targets import PathTargets

__all__ = ["HelperReport", "count", "helper_tool", "left_out_ignored", "not_installed"]


class HelperReport:
    """What the helper tools' responses share: the one rule of what counts as a failure.

    A mixin for their pydantic response models (it adds no field, so each
    model's schema is its own): their ``status`` says ``unavailable`` when
    the program is missing and ``error`` when it could not run.
    """

    @classmethod
    def reports_failure(cls, data: Mapping[str, Any]) -> bool:
        """A check failed when it could not run (``unavailable``) or broke (``error``)."""
        return data.get("status") in ("error", "unavailable")


def helper_tool(
    *,
    name: str,
    description: str,
    request_model: type[BaseModel],
    handler: Callable[[Workspace, BinaryFinder, Isolation], Any],
    workspace_root: str | os.PathLike[str] | None,
    protected_names: Iterable[str] | None,
    isolation: str | Isolation,
    binaries: object,
    response_model: type[BaseModel],
    hints: ToolHints,
    env_policy: EnvPolicy | None = None,
    path_field: str = "path",
) -> Tool:
    """The factory body the helper-binary tools share: workspace, finder, confinement.

    Raises:
        ValueError: the workspace root is not a directory.
        TypeError: an option of the wrong type.
        ConfigurationError: the requested isolation cannot work here.
    """
    finder = finder_or_default(binaries)
    workspace = Workspace.at(workspace_root, protected=protected_names)
    confinement = workspace_isolation(isolation, workspace.root, env_policy=env_policy)
    return Tool(
        name=name,
        description=confinement.annotate(description),
        request_model=request_model,
        handler=handler(workspace, finder, confinement),
        response_model=response_model,
        hints=hints,
        targets=PathTargets(workspace, path_field),
    )


def count(number: int, one: str, many: str | None = None) -> str:
    """``"1 match"``, ``"3 matches"``: `many` defaults to `one` plus ``s``."""
    return f"{number} {one if number == 1 else (many or one + 's')}"


def left_out_ignored(number: int, one: str, many: str | None = None) -> str:
    """The sentence that says how many results the project's ignore rules left out ("" for 0)."""
    if not number:
        return ""
    return (
        f" Left out {count(number, one, many)} in files ignored by .gitignore/.ignore; "
        f"set include_ignored=true to see them."
    )


def not_installed(program: str, package: str) -> str:
    """What to say when `program` cannot be found: the extra that installs it, or `package`."""
    return (
        f"{program} is not installed; install it with pip install 'lionfactory[code]' "
        f"(or pip install {package})."
    )

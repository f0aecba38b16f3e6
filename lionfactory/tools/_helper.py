"""What the tools that drive a helper program (search, code_check, ast_search) share.

What sets one tool apart (`HelperSpec`), the factory body that builds it
from that and the factory's options (workspace, binary finder, confinement),
and the few phrases their responses have in common, so the three tools word a
count, a missing program and the matches the ignore rules left out the same way.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from typing import Any, get_type_hints

import attrs

from lionfactory._os.binaries import finder_or_default
from lionfactory._os.environment import EnvPolicy
from lionfactory._os.isolation import Isolation, workspace_isolation
from lionfactory._os.workspace import Workspace
from lionfactory._tool import Tool, ToolHints
from lionfactory.tools._targets import PathTargets

__all__ = [
    "HelperReport",
    "HelperSpec",
    "count",
    "helper_tool",
    "left_out_ignored",
    "not_installed",
]


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


@attrs.frozen
class HelperSpec:
    """What sets one helper tool apart; its factory's options do the rest (`helper_tool`).

    The request and response models are the ones the handler's ``__call__``
    takes and returns: named once, they cannot differ from what the handler
    reads and answers.

    Attributes:
        name: the tool's name.
        title: the tool's title; every helper tool only reads (`ToolHints.reading`).
        description: the text the model reads (the confinement adds its note).
        handler: the handler class, built as ``handler(workspace, finder,
            confinement)``; its ``async __call__(self, request: Request) ->
            Response`` names the models.
        path_field: the request field that names the paths a call reads.
    """

    name: str
    title: str
    description: str
    handler: type[Any]
    path_field: str = "path"


def helper_tool(
    spec: HelperSpec,
    workspace_root: str | os.PathLike[str] | None,
    protected_names: Iterable[str] | None,
    isolation: str | Isolation,
    env_policy: EnvPolicy | None,
    binaries: object,
) -> Tool:
    """The factory body the helper-binary tools share: workspace, finder, confinement.

    The options after `spec` are the factory's own, in the order of its
    signature (which the three factories share).

    Raises:
        ValueError: the workspace root is not a directory.
        TypeError: an option of the wrong type.
        ConfigurationError: the requested isolation cannot work here.
    """
    finder = finder_or_default(binaries)
    workspace = Workspace.at(workspace_root, protected=protected_names)
    confinement = workspace_isolation(isolation, workspace.root, env_policy=env_policy)
    models = _models(spec)
    return Tool(
        name=spec.name,
        description=confinement.annotate(spec.description),
        request_model=models["request"],
        handler=spec.handler(workspace, finder, confinement),
        response_model=models["return"],
        hints=ToolHints.reading(spec.title),
        targets=PathTargets(workspace, spec.path_field),
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


@functools.cache
def _models(spec: HelperSpec) -> dict[str, Any]:
    # Once per tool: a clone rebuilds every tool, and resolving the handler's
    # annotations (strings, under postponed evaluation) is the slow part.
    return get_type_hints(spec.handler.__call__)

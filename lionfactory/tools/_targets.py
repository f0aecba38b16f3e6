"""What a file tool's call touches, as the tool itself resolves it (`Tool.targets`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from lionfactory._os.workspace import PathRefused, Workspace

__all__ = ["PathTargets", "resolved"]


@attrs.frozen
class PathTargets:
    """A file tool's targets (`Tool.targets`): the path field of its request, as resolved.

    Each path (a string field, or a list of them; ``None`` is the root) as
    the tool's workspace resolves it, in one root-relative POSIX form
    (``src/a.py`` however it was spelled); a path the tool would refuse
    (outside the root, protected, a remote address) is left out, since the
    call never touches it.
    """

    workspace: Workspace
    field: str | tuple[str, ...]
    """The request field naming the path, or several (a call may name its
    paths in either, like ``code_nav``'s ``path`` and ``paths``)."""

    def __call__(self, request: Any) -> tuple[str, ...]:
        fields = (self.field,) if isinstance(self.field, str) else self.field
        values = [getattr(request, name, None) for name in fields]
        paths: list[str] = []
        for value in values:
            if value is not None:
                paths.extend([value] if isinstance(value, str) else value)
        return resolved(self.workspace, paths or ["."])


def resolved(workspace: Workspace, paths: Iterable[str]) -> tuple[str, ...]:
    """`paths` as `workspace` resolves them, each once, in order; refused ones left out."""
    found: list[str] = []
    for path in paths:
        try:
            found.append(workspace.locate(path).relative)
        except PathRefused:
            continue
    return tuple(dict.fromkeys(found))

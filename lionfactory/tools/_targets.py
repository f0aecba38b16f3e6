"""What a file tool's call touches, as the tool itself resolves it (`Tool.targets`)."""

from __future__ import annotations

from typing import Any

import attrs

from lionfactory._os.workspace import PathRefused, Workspace

__all__ = ["PathTargets"]


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
    field: str

    def __call__(self, request: Any) -> tuple[str, ...]:
        value = getattr(request, self.field, None)
        paths = ["."] if value is None else [value] if isinstance(value, str) else list(value)
        found: list[str] = []
        for path in paths:
            try:
                found.append(self.workspace.locate(path).relative)
            except PathRefused:
                continue
        return tuple(dict.fromkeys(found))

"""Registration records: where a branch's tools came from.

`Registration` is the provenance `Branch.clone()` and persistence replay. The
helpers here turn factories and their arguments into comparable, JSON-ready
summaries for `manifest()`.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from lionfactory._tool import Tool
from lionfactory.errors import FactoryError

__all__ = ["Registration", "factory_path"]


def factory_path(factory: Callable[..., Any]) -> str:
    """The import path of a factory, ``module:qualname`` (partials unwrapped)."""
    target = factory
    while hasattr(target, "func"):  # functools.partial and friends
        target = target.func
    module = getattr(target, "__module__", None) or "?"
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}:{qualname}"


def _read_only(kwargs: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(kwargs))


# eq=False: each registration is one event, compared by identity; two
# registrations of the same factory with the same arguments are still two.
@attrs.frozen(eq=False)
class Registration:
    """The provenance of one `Branch.register` call.

    Attributes:
        source: the factory, or the tuple of static Tools.
        kwargs: the keyword arguments the factory was called with (without
            ``branch``), read-only.
        tool_names: the names the source produced, in order.
    """

    source: Callable[..., Any] | tuple[Tool, ...]
    kwargs: Mapping[str, Any] = attrs.field(converter=_read_only)
    tool_names: tuple[str, ...]

    @property
    def is_factory(self) -> bool:
        """Whether the tools came from a factory (and are rebuilt on clone)."""
        return not isinstance(self.source, tuple)

    @property
    def factory(self) -> Callable[..., Any] | None:
        """The factory that built the tools, or None for a static registration.

        `source` holds either kind; provenance readers that only care about
        factories ask this instead of telling the two apart themselves.
        """
        return None if isinstance(self.source, tuple) else self.source

    @property
    def factory_path(self) -> str | None:
        """``module:qualname`` of the factory, or None for static tools."""
        return None if self.factory is None else factory_path(self.factory)


def accepts_branch(factory: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    param = parameters.get("branch")
    return param is not None and param.kind is not inspect.Parameter.POSITIONAL_ONLY


def as_tools(produced: Any, factory: Callable[..., Any]) -> list[Tool]:
    if isinstance(produced, Tool):
        return [produced]
    if isinstance(produced, (list, tuple)) and all(isinstance(t, Tool) for t in produced):
        return list(produced)
    raise FactoryError(
        f"factory {factory_path(factory)} must return a Tool or a list of Tools, "
        f"got {type(produced).__name__}: {produced!r:.200}"
    )


def summarise(value: Any, depth: int = 0) -> Any:
    """A JSON-ready, comparable summary of a factory argument."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if depth < 3 and isinstance(value, (list, tuple, frozenset, set)):
        items = [summarise(v, depth + 1) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if depth < 3 and isinstance(value, Mapping):
        return {str(k): summarise(v, depth + 1) for k, v in value.items()}
    if callable(value) and hasattr(value, "__qualname__"):
        return f"<{factory_path(value)}>"
    return f"<{type(value).__name__}>"


def schema_hash(tool: Tool) -> str:
    text = json.dumps(tool.schema("openai"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]

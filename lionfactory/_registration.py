"""Registration records: where a branch's tools came from, and what loading may call.

`Registration` is the provenance `Branch.clone()` and persistence replay. The
helpers here turn factories and their arguments into comparable, JSON-ready
summaries for `manifest()`.

`FACTORIES` is the one registry of what loading a saved branch may call: the
built-in factories (and the built-in policy hooks), what the application
registers with `register_factory`, and what installed distributions declare
in the ``lionfactory.factories`` entry-point group. A saved branch is data
another program may have written (a shared SQLite file, a Redis anyone on
the network reaches), so its factory names are looked up here and never
imported: importing a module runs its code, and a name such as
``os:system`` would otherwise be called with the stored arguments.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import attrs

from lionfactory._catalogue import CATALOGUE
from lionfactory._tool import Tool
from lionfactory.errors import ConfigurationError, FactoryError

__all__ = [
    "ENTRY_POINT_GROUP",
    "FACTORIES",
    "Registration",
    "factory_path",
    "foreign_tool",
    "register_factory",
]

F = TypeVar("F", bound=Callable[..., Any])

ENTRY_POINT_GROUP = "lionfactory.factories"
"""The entry-point group an installed distribution declares its factories in."""

# The built-ins, by the public import path users write (and manifests and
# saved branches record), and the module that defines each: a name the
# library itself spells in a string is imported only when asked for, so the
# registry costs nothing at import time and sits on the lowest floor. Every
# tool of the catalogue restores; the rest are the built-ins that build
# several tools, or that saved arguments name.
_BUILTINS: dict[str, str] = {
    **{row.factory: row.module for row in CATALOGUE},
    "lionfactory.coding:coding_toolkit": "lionfactory.coding._toolkit",
    "lionfactory.coding:deny_destructive_commands": "lionfactory.coding.policies",
    # A data record (rules persist with the branch), rebuilt by its from_dict.
    "lionfactory.coding:Rule": "lionfactory.coding.rules",
    "lionfactory.mcp:mcp_tools": "lionfactory.mcp._client",
}
# The defining module's spelling of each built-in (what earlier versions
# recorded, ``lionfactory.tools.reader:reader_tool``): accepted when loading.
_ALIASES: dict[str, str] = {
    f"{module}:{public.partition(':')[2]}": public
    for public, module in _BUILTINS.items()
    if module != public.partition(":")[0]
}


def factory_path(factory: Callable[..., Any]) -> str:
    """The import path of a factory, ``module:qualname`` (partials unwrapped)."""
    target = factory
    while hasattr(target, "func"):  # functools.partial and friends
        target = target.func
    module = getattr(target, "__module__", None) or "?"
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    return f"{module}:{qualname}"


def _plain_name(name: str) -> bool:
    module, _, qualname = name.partition(":")
    return bool(module and qualname) and "<" not in name and not any(c.isspace() for c in name)


class FactoryRegistry:
    """What loading a saved branch may call, by the name the branch records.

    Thread-safe: applications register at start-up, loads happen from any
    thread (the stores load in worker threads).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_name: dict[str, Callable[..., Any]] = {}
        # id(callable) -> (callable, name); the callable is held so its id
        # cannot be reused by another object.
        self._names: dict[int, tuple[Callable[..., Any], str]] = {}

    def register(self, factory: F, *, name: str | None = None) -> F:
        """Allow saved branches to name `factory` (see `register_factory`)."""
        if not callable(factory):
            raise TypeError(f"register_factory needs a callable, got {factory!r:.200}")
        if name is None:
            name = factory_path(factory)
            if not _plain_name(name):
                raise ValueError(
                    f"{name} has no stable import path (a local function, lambda or "
                    f"partial); pass name='package.module:name' to register it"
                )
        elif not isinstance(name, str) or not _plain_name(name):
            raise ValueError(f"a factory name is 'module:qualname' without spaces, got {name!r}")
        name = _ALIASES.get(name, name)
        if name in _BUILTINS and self._builtin(name) is not factory:
            raise ValueError(f"{name} names a built-in factory; register yours under another name")
        with self._lock:
            held = self._by_name.get(name)
            if held is not None and held is not factory:
                raise ValueError(
                    f"another callable is registered as {name} ({held!r:.100}); names are "
                    f"what saved branches record, so one name means one callable"
                )
            self._by_name[name] = factory
            self._names.setdefault(id(factory), (factory, name))
        return factory

    def name_of(self, value: Any) -> str | None:
        """The name `value` is registered under, or None when loading could not call it."""
        held = self._names.get(id(value))
        if held is not None and held[0] is value:
            return held[1]
        if not callable(value):
            return None
        path = factory_path(value)
        public = _ALIASES.get(path, path)
        if public in _BUILTINS:
            try:
                found = self._builtin(public)
            except ImportError:
                return None
            if found is value:
                return public
        return None

    def public_path(self, factory: Callable[..., Any]) -> str:
        """The name manifests and saved branches record for `factory`.

        The registered (or built-in public) name when there is one, else the
        import path ``module:qualname``.
        """
        return self.name_of(factory) or factory_path(factory)

    def resolve(self, name: Any, *, what: str = "factory") -> Callable[..., Any]:
        """The callable registered as `name`, imported only if it is a built-in or declared.

        Raises:
            ConfigurationError: nothing is registered as `name`; nothing is
                imported for it (importing a module runs its code).
        """
        if not isinstance(name, str):
            raise ConfigurationError(f"a {what} name must be a string, got {name!r:.200}")
        public = _ALIASES.get(name, name)
        found = self._by_name.get(public)
        if found is not None:
            return found
        if public in _BUILTINS:
            try:
                return self._builtin(public)
            except ImportError as exc:
                raise ConfigurationError(
                    f"built-in {what} {public} cannot be loaded here ({exc}); install the "
                    f"extra it needs"
                ) from None
        declared = self._declared(name)
        if declared is not None:
            return declared
        raise ConfigurationError(
            f"{what} {name[:200]!r} is not a registered factory, so it was neither imported nor "
            f"called: loading calls only the built-ins and what the application registers "
            f"(lionfactory.register_factory(fn) before loading, or the {ENTRY_POINT_GROUP!r} "
            f"entry-point group of an installed package). Register it if you trust whoever "
            f"wrote this data."
        )

    def _builtin(self, public: str) -> Callable[..., Any]:
        found = self._by_name.get(public)
        if found is not None:
            return found
        attr = public.partition(":")[2]
        target: Callable[..., Any] = getattr(importlib.import_module(_BUILTINS[public]), attr)
        with self._lock:
            self._by_name[public] = target
            self._names.setdefault(id(target), (target, public))
        return target

    def _declared(self, name: str) -> Callable[..., Any] | None:
        """The entry point declared under `name` (or pointing at it), loaded; None if none.

        Only that entry point's module is imported; the others are read as
        metadata. (``importlib.metadata`` is imported here, on a miss, because
        importing it costs more than the rest of this module.)
        """
        import importlib.metadata

        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            value = entry.value.replace(" ", "")
            if name not in (entry.name, value):
                continue
            try:
                loaded = entry.load()
            except Exception as exc:  # its module's code: any error it raises
                raise ConfigurationError(
                    f"the {ENTRY_POINT_GROUP!r} entry point {entry.name!r} = {entry.value!r} "
                    f"failed to load: {type(exc).__name__}: {str(exc)[:200]}"
                ) from exc
            if not callable(loaded):
                raise ConfigurationError(
                    f"the {ENTRY_POINT_GROUP!r} entry point {entry.name!r} = {entry.value!r} "
                    f"is not callable"
                )
            for alias in dict.fromkeys((value, entry.name)):
                if _plain_name(alias):
                    try:
                        self.register(loaded, name=alias)
                    except ValueError as exc:
                        raise ConfigurationError(
                            f"the {ENTRY_POINT_GROUP!r} entry point {entry.name!r} cannot be "
                            f"used: {exc}"
                        ) from None
            with self._lock:
                self._by_name[name] = loaded
            return loaded  # type: ignore[no-any-return]
        return None


FACTORIES = FactoryRegistry()
"""The one registry of what loading a saved branch may call."""


def register_factory(factory: F, /, *, name: str | None = None) -> F:
    """Allow saved branches to name `factory`: loading calls it again with the saved arguments.

    Loading a branch (`Branch.from_dict`, a `BranchStore`, ``mcp serve
    --store``) calls only registered callables: the built-in factories and
    policy hooks, what an application registers here, and what installed
    packages declare in the ``lionfactory.factories`` entry-point group.
    Register your own factories, and the module-level callables you pass to
    them (a policy hook), before loading. Usable as a decorator.

    Args:
        factory: the factory (or hook) to allow.
        name: the name saved branches record; its import path
            ``module:qualname`` when None.

    Returns:
        `factory`, unchanged.

    Raises:
        TypeError: `factory` is not callable.
        ValueError: a local function or lambda without `name`, a name a
            built-in or another callable already has, or a malformed name.
    """
    return FACTORIES.register(factory, name=name)


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
        """The factory's recorded name, or None for static tools.

        Its public import path for a built-in (``lionfactory.tools:reader_tool``,
        the one users write), its registered name for a registered factory,
        else ``module:qualname``.
        """
        return None if self.factory is None else FACTORIES.public_path(self.factory)

    def still_owned(self, owner_of: Callable[[str], Registration | None]) -> list[str]:
        """The names this registration still provides, in order.

        A later ``update=`` registration may have taken some of its names;
        `owner_of` answers which registration provides a name now (a
        branch's ``provenance_or_none``). Clone, save and restore all keep
        exactly these.
        """
        return [name for name in self.tool_names if owner_of(name) is self]


def foreign_tool(tools: Iterable[Tool], branch_id: object) -> Tool | None:
    """The first of `tools` bound to a branch other than `branch_id`, or None.

    The bound-to rule of every registration: a tool bound to a branch acts
    on that branch's conversation, so no other branch may hold it. With
    ``branch_id=None`` any bound tool is foreign (a static tool replayed on a
    clone cannot be rebuilt for it).
    """
    for tool in tools:
        if tool.bound_to is not None and tool.bound_to != branch_id:
            return tool
    return None


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
        return f"<{FACTORIES.public_path(value)}>"
    return f"<{type(value).__name__}>"


def schema_hash(tool: Tool) -> str:
    text = json.dumps(tool.schema("openai"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]

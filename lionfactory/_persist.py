"""Branches that survive a restart: `Branch.to_dict()` / `Branch.from_dict()`.

What is stored, as JSON-ready data with a format tag:

* the branch's id, name and metadata;
* the message log: every message of the record, each record entry's
  chronological sort key, the active view and the compaction summaries' spans,
  so a restored view is exactly the saved one (evidence on tool messages
  included: the restored coding toolkit derives its read evidence from it);
* the registrations, in order: a factory's import path (``module:qualname``)
  and its keyword arguments, and for static tools their names;
* the calls held for a person's decision (`PendingCall` records, with their
  decisions and whether an approved one had started), so a branch saved
  while a call waits is decided and resumed by another process, and a call
  that had started when its process stopped is never run twice.

Module-level functions and classes among the arguments (a policy hook such
as `deny_destructive_commands`) are stored by import path and imported again.
Records that are data (an attrs instance whose importable class says so
with ``_saved_as_data = True`` and has ``to_dict`` and a ``from_dict``
classmethod, such as the coding toolkit's `Rule`) are stored as that data
and rebuilt with ``from_dict``, which checks them again; a save naming any
other class there is refused, so saved data cannot make loading call an
arbitrary importable ``from_dict``.
Other values that are not data (an `Exchange`, a chat model, a static
`Tool`) are stored *by name* and must be handed back through ``resources``
when loading:

* a factory keyword argument is the resource named like the argument
  (``"exchange"``); when two registrations pass different objects under one
  name, the later ones are ``"exchange-2"``, ``"exchange-3"``...;
* a static tool is the resource ``"tool:<name>"``;
* the branch's chat model is the optional resource ``"chat_model"``.

Loading calls the factories again, exactly like `clone()`, so every
per-branch state is rebuilt for the restored branch. A factory that cannot be
imported, or a missing resource, raises `ConfigurationError` listing
everything that is needed.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import attrs

from lionfactory._approvals import PendingCall
from lionfactory._messages import Message, MessageLog
from lionfactory._registration import Registration, factory_path
from lionfactory._tool import Tool
from lionfactory.errors import ConfigurationError

if TYPE_CHECKING:
    from lionfactory._branch import Branch

__all__ = ["FORMAT", "branch_from_dict", "branch_to_dict"]

FORMAT = "lionfactory.branch/1"


class _Encoder:
    """Encodes factory kwargs, naming every live object it meets."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()

    def name_for(self, base: str, obj: Any) -> str:
        if id(obj) in self.names:
            return self.names[id(obj)]
        name, n = base, 1
        while name in self.taken:
            n += 1
            name = f"{base}-{n}"
        self.taken.add(name)
        self.names[id(obj)] = name
        return name

    def encode(self, key: str, value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, PurePath):
            return {"$path": os.fspath(value)}
        if isinstance(value, uuid.UUID):
            return {"$uuid": str(value)}
        if isinstance(value, tuple):
            return {"$tuple": [self.encode(key, v) for v in value]}
        if isinstance(value, list):
            return [self.encode(key, v) for v in value]
        if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
            if any(k.startswith("$") for k in value):
                return {"$resource": self.name_for(key, value)}
            return {k: self.encode(key, v) for k, v in value.items()}
        record = _data_record(value)
        if record is not None:
            return record
        path = _importable(value)
        if path is not None:
            return {"$callable": path}
        return {"$resource": self.name_for(key, value)}


def _data_record(value: Any) -> dict[str, Any] | None:
    """``{"$record": class path, "data": ...}`` for a data record (see the module docstring)."""
    cls = type(value)
    if getattr(cls, "_saved_as_data", False) is not True:
        return None
    if not (attrs.has(cls) and callable(getattr(value, "to_dict", None))):
        return None
    if not callable(getattr(cls, "from_dict", None)):
        return None
    path = _importable(cls)
    if path is None:
        return None
    data = value.to_dict()
    try:
        json.dumps(data)
    except (TypeError, ValueError):
        return None
    return {"$record": path, "data": data}


def _importable(value: Any) -> str | None:
    """The import path of a module-level function or class, if it round-trips."""
    if not (inspect.isfunction(value) or inspect.isclass(value)):
        return None
    path = factory_path(value)
    try:
        return path if _import(path) is value else None
    except (ImportError, AttributeError):
        return None


def _decode(value: Any, resources: Mapping[str, Any], missing: set[str]) -> Any:
    if isinstance(value, list):
        return [_decode(v, resources, missing) for v in value]
    if isinstance(value, dict):
        if "$path" in value:
            return Path(value["$path"])
        if "$uuid" in value:
            return uuid.UUID(value["$uuid"])
        if "$tuple" in value:
            return tuple(_decode(v, resources, missing) for v in value["$tuple"])
        if "$callable" in value:
            try:
                return _import(value["$callable"])
            except (ImportError, AttributeError):
                missing.add(value["$callable"])
                return None
        if "$record" in value:
            try:
                cls = _import(value["$record"])
                # Only what _data_record writes: an attrs class with from_dict,
                # never an arbitrary importable callable named by the save.
                if not (inspect.isclass(cls) and getattr(cls, "_saved_as_data", False) is True):
                    raise TypeError(f"{value['$record']} is not a data record class")
                return cls.from_dict(value["data"])  # type: ignore[attr-defined]
            except (ImportError, AttributeError, TypeError, ValueError):
                missing.add(value["$record"])
                return None
        if "$resource" in value:
            name = value["$resource"]
            if name not in resources:
                missing.add(name)
                return None
            return resources[name]
        return {k: _decode(v, resources, missing) for k, v in value.items()}
    return value


def _import(path: str) -> Callable[..., Any]:
    module_name, _, qualname = path.partition(":")
    if not qualname or "<locals>" in qualname or "<lambda>" in qualname:
        raise ImportError(f"{path} is not importable (a local function or lambda)")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise ImportError(f"{path} is not callable")
    return target  # type: ignore[no-any-return]


def branch_to_dict(branch: Branch, *, dump_messages: bool = True) -> dict[str, Any]:
    """The JSON-ready state of `branch` (see the module docstring).

    With ``dump_messages=False`` the record holds the `Message` objects
    themselves, for a caller that serialises them in one go (pydantic's
    ``TypeAdapter.dump_json`` is several times faster than dumping each
    message to a dict and those dicts to JSON); `branch_from_dict` accepts
    either form.
    """
    log = branch.messages
    encoder = _Encoder()
    registrations = []
    for registration in branch.registrations:
        owned = [n for n in registration.tool_names if branch.provenance_or_none(n) is registration]
        if registration.is_factory:
            registrations.append(
                {
                    "kind": "factory",
                    "factory": registration.factory_path,
                    "kwargs": {k: encoder.encode(k, v) for k, v in registration.kwargs.items()},
                    "tools": owned,
                }
            )
        else:
            registrations.append({"kind": "static", "tools": owned})
    try:
        json.dumps(branch.metadata)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"branch.metadata must be JSON-ready to be saved: {exc}") from exc
    record, keys, active, summaries = log.state()
    return {
        "format": FORMAT,
        "id": str(branch.id),
        "name": branch.name,
        "metadata": dict(branch.metadata),
        "messages": {
            "record": [m.model_dump(mode="json") for m in record] if dump_messages else record,
            "keys": [list(k) for k in keys],
            "active": active,
            "summaries": {str(k): list(v) for k, v in summaries.items()},
        },
        "registrations": registrations,
        "tool_order": list(branch.tools),
        "pending": _pending_to_data(branch),
    }


def _pending_to_data(branch: Branch) -> list[dict[str, Any]]:
    return [pending.to_dict() for pending in branch.pending_calls]


def _pending_from_data(data: Any) -> dict[str, PendingCall]:
    """The held calls of a save (none for saves made before approvals existed).

    Raises:
        ConfigurationError: the entries are not pending-call records.
    """
    if data is None:
        return {}
    if not isinstance(data, list):
        raise ConfigurationError(f"a saved branch's 'pending' must be a list, got {data!r:.200}")
    held: dict[str, PendingCall] = {}
    for entry in data:
        try:
            if not isinstance(entry, Mapping):
                raise TypeError(f"expected an object, got {entry!r:.200}")
            pending = PendingCall.from_dict(entry)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"a saved pending call is malformed: {exc}") from None
        held[pending.id] = pending
    return held


def branch_from_dict(
    cls: type[Branch], data: Mapping[str, Any], resources: Mapping[str, Any] | None = None
) -> Branch:
    """Rebuild a branch saved by `branch_to_dict`, calling its factories again."""
    if data.get("format") != FORMAT:
        raise ConfigurationError(f"not a saved branch of format {FORMAT!r}: {data.get('format')!r}")
    resources = dict(resources or {})
    missing: set[str] = set()
    problems: list[str] = []
    plan: list[tuple[Callable[..., Any] | None, dict[str, Any], list[str]]] = []
    for entry in data["registrations"]:
        names = list(entry["tools"])
        if entry["kind"] == "static":
            for name in names:
                if f"tool:{name}" not in resources:
                    missing.add(f"tool:{name}")
            plan.append((None, {}, names))
            continue
        kwargs = {k: _decode(v, resources, missing) for k, v in entry["kwargs"].items()}
        try:
            factory: Callable[..., Any] | None = _import(entry["factory"])
        except (ImportError, AttributeError) as exc:
            problems.append(f"factory {entry['factory']} cannot be imported ({exc})")
            continue
        plan.append((factory, kwargs, names))
    if missing or problems:
        needed = [f"resource {name!r}" for name in sorted(missing)] + problems
        raise ConfigurationError(
            "cannot restore the branch; supply or fix:\n" + "\n".join(f"- {n}" for n in needed)
        )
    messages = data["messages"]
    log = MessageLog.from_state(
        [m if isinstance(m, Message) else Message.model_validate(m) for m in messages["record"]],
        [tuple(k) for k in messages["keys"]],
        list(messages["active"]),
        {int(k): tuple(v) for k, v in messages["summaries"].items()},
    )
    branch = cls(name=data.get("name"), chat_model=resources.get("chat_model"))
    branch.id = uuid.UUID(data["id"])
    branch.metadata = dict(data.get("metadata") or {})
    branch.messages = log
    for maybe_factory, kwargs, names in plan:
        source: Callable[..., Any] | tuple[Tool, ...] = (
            maybe_factory
            if maybe_factory is not None
            else tuple(resources[f"tool:{name}"] for name in names)
        )
        registration = Registration(source=source, kwargs=kwargs, tool_names=tuple(names))
        branch._replay(registration, names)  # the same replay as clone()
    order = [n for n in data.get("tool_order", []) if n in branch.tools]
    branch.reorder(order)
    branch._pending = _pending_from_data(data.get("pending"))
    return branch

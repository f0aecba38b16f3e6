"""Branches that survive a restart: `Branch.to_dict()` / `Branch.from_dict()`.

What is stored, as JSON-ready data with a format tag:

* the branch's id, name and metadata, and the state its tools keep with it
  (`Branch.tool_state`: an active sandbox's worktree);
* the message log: every message of the record, each record entry's
  chronological sort key, the active view and the compaction summaries' spans,
  so a restored view is exactly the saved one (evidence on tool messages
  included: the restored coding toolkit derives its read evidence from it);
* the registrations, in order: a factory's registered name (the public
  import path of a built-in, ``lionfactory.tools:reader_tool``) and its
  keyword arguments, and for static tools their names;

* the calls held for a person's decision (`PendingCall` records, with their
  decisions and whether an approved one had started), so a branch saved
  while a call waits is decided and resumed by another process, and a call
  that had started when its process stopped is never run twice.

Trust: loading calls only *registered* callables (`lionfactory.register_factory`,
the built-ins, the ``lionfactory.factories`` entry points), looked up by the
name the data records; it never imports a module the data names, because
importing runs code and a saved branch may come from a store other programs
write. An unknown name is a `ConfigurationError` naming it.

Registered callables among the arguments (a policy hook such as
`deny_destructive_commands`) are stored by name and looked up the same way.
Records that are data (a registered attrs class that says so with
``_saved_as_data = True`` and has ``to_dict`` and a ``from_dict`` classmethod,
such as the coding toolkit's `Rule`) are stored as that data under the
class's registered name and rebuilt with ``from_dict``, which checks them
again; a record naming any other class is refused.
Other values that are not data (an `Exchange`, a chat model, a static
`Tool`, an unregistered hook) are stored *by name* and must be handed back
through ``resources`` when loading:

* a factory keyword argument is the resource named like the argument
  (``"exchange"``); when two registrations pass different objects under one
  name, the later ones are ``"exchange-2"``, ``"exchange-3"``...; an argument
  that holds such a value inside a mapping or a list (an unregistered hook in
  ``hooks={"bash": {"security": [ask]}}``) is one resource as a whole, so
  ``resources={"hooks": hooks}`` hands back exactly what was passed; a
  resource the factory refuses on load is a `ConfigurationError` naming it;
* a static tool is the resource ``"tool:<name>"``;
* the branch's chat model is the optional resource ``"chat_model"``.

Loading calls the factories again, exactly like `clone()`, so every
per-branch state is rebuilt for the restored branch. A factory that is not
registered, a missing resource or malformed data raises `ConfigurationError`
listing everything that is needed.
"""

from __future__ import annotations

import inspect
import json
import os
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import attrs

from lionfactory._approvals import PendingCall
from lionfactory._checkpoints import CheckpointLog
from lionfactory._messages import Message, MessageLog
from lionfactory._registration import FACTORIES, Registration
from lionfactory._tool import Tool
from lionfactory.errors import ConfigurationError

if TYPE_CHECKING:
    from lionfactory._branch import Branch

__all__ = ["FORMAT", "branch_from_dict", "branch_to_dict"]

FORMAT = "lionfactory.branch/1"


class _LiveInside(Exception):
    """A live object nested in a container: the whole argument becomes one resource."""


class _Encoder:
    """Encodes factory kwargs, naming every live object it meets."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()

    def argument(self, key: str, value: Any) -> Any:
        """Encode one factory argument: as data, or as one resource named like the argument.

        A live object nested in a mapping or a list (an unregistered hook in
        ``hooks={"bash": {"security": [ask]}}``) makes the whole argument the
        resource, so what is handed back under the argument's name (the
        ``hooks`` mapping itself) is what goes back in its place.
        """
        try:
            return self.encode(key, value, nested=False)
        except _LiveInside:
            return {"$resource": self.name_for(key, value)}

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

    def encode(self, key: str, value: Any, *, nested: bool = True) -> Any:
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
                if nested:
                    raise _LiveInside
                return {"$resource": self.name_for(key, value)}
            return {k: self.encode(key, v) for k, v in value.items()}
        record = _data_record(value)
        if record is not None:
            return record
        name = FACTORIES.name_of(value)
        if name is not None:
            return {"$callable": name}
        if nested:
            raise _LiveInside
        return {"$resource": self.name_for(key, value)}


def _data_record(value: Any) -> dict[str, Any] | None:
    """``{"$record": registered class name, "data": ...}`` for a data record, else None."""
    cls = type(value)
    if getattr(cls, "_saved_as_data", False) is not True:
        return None
    if not (attrs.has(cls) and callable(getattr(value, "to_dict", None))):
        return None
    if not callable(getattr(cls, "from_dict", None)):
        return None
    name = FACTORIES.name_of(cls)
    if name is None:
        return None
    data = value.to_dict()
    try:
        json.dumps(data)
    except (TypeError, ValueError):
        return None
    return {"$record": name, "data": data}


class _Decoder:
    """Decodes stored factory kwargs; collects what is missing instead of stopping at it."""

    def __init__(self, resources: Mapping[str, Any]) -> None:
        self.resources = resources
        self.missing: set[str] = set()
        self.problems: list[str] = []
        self.used: list[str] = []

    def decode(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            [(tag, inner)] = value.items()
            if tag == "$path" and isinstance(inner, str):
                return Path(inner)
            if tag == "$uuid" and isinstance(inner, str):
                try:
                    return uuid.UUID(inner)
                except ValueError:
                    self.problems.append(f"{inner[:80]!r} is not a UUID")
                    return None
            if tag == "$tuple" and isinstance(inner, list):
                return tuple(self.decode(v) for v in inner)
            if tag == "$callable":
                try:
                    return FACTORIES.resolve(inner, what="callable")
                except ConfigurationError as exc:
                    self.problems.append(str(exc))
                    return None
            if tag == "$resource" and isinstance(inner, str):
                if inner not in self.resources:
                    self.missing.add(inner)
                    return None
                self.used.append(inner)
                return self.resources[inner]
        if set(value) == {"$record", "data"}:
            return self._record(value["$record"], value["data"])
        if any(isinstance(k, str) and k.startswith("$") for k in value):
            # The encoder writes tags alone and stores tagged-looking
            # mappings as resources, so this was not written by it.
            self.problems.append(f"malformed stored value {str(value)[:120]}")
            return None
        return {k: self.decode(v) for k, v in value.items()}

    def _record(self, name: Any, data: Any) -> Any:
        try:
            cls = FACTORIES.resolve(name, what="record")
        except ConfigurationError as exc:
            self.problems.append(str(exc))
            return None
        # Only what _data_record writes: a registered class that says it is a
        # data record, never an arbitrary registered callable the save names.
        if not (inspect.isclass(cls) and getattr(cls, "_saved_as_data", False) is True):
            self.problems.append(f"{str(name)[:200]} is not a data record class")
            return None
        try:
            return cls.from_dict(data)  # type: ignore[attr-defined]
        except (TypeError, ValueError) as exc:
            self.problems.append(f"a saved {str(name)[:200]} is malformed: {exc}")
            return None


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
        owned = registration.still_owned(branch.provenance_or_none)
        if registration.is_factory:
            registrations.append(
                {
                    "kind": "factory",
                    "factory": registration.factory_path,
                    "kwargs": {k: encoder.argument(k, v) for k, v in registration.kwargs.items()},
                    "tools": owned,
                }
            )
        else:
            registrations.append({"kind": "static", "tools": owned})
    try:
        json.dumps(branch.metadata)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"branch.metadata must be JSON-ready to be saved: {exc}") from exc
    try:
        json.dumps(branch.tool_state)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"branch.tool_state must be JSON-ready to be saved: {exc}"
        ) from exc
    record, keys, active, summaries = log.state()
    return {
        "format": FORMAT,
        "id": str(branch.id),
        "name": branch.name,
        "metadata": dict(branch.metadata),
        "tool_state": dict(branch.tool_state),
        "messages": {
            "record": [m.model_dump(mode="json") for m in record] if dump_messages else record,
            "keys": [list(k) for k in keys],
            "active": active,
            "summaries": {str(k): list(v) for k, v in summaries.items()},
        },
        "registrations": registrations,
        "tool_order": list(branch.tools),
        "pending": _pending_to_data(branch),
        "checkpoints": branch.checkpoint_log.to_data(),
    }


def _registrations(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The stored registrations, each checked for shape before anything is resolved.

    Raises:
        ConfigurationError: an entry that `branch_to_dict` cannot have written.
    """
    entries = data.get("registrations")
    if not isinstance(entries, list):
        raise ConfigurationError("a saved branch's 'registrations' must be a list")
    checked = []
    for i, entry in enumerate(entries):
        ok = (
            isinstance(entry, dict)
            and entry.get("kind") in ("factory", "static")
            and isinstance(entry.get("tools"), list)
            and all(isinstance(n, str) for n in entry["tools"])
            and (
                entry["kind"] == "static"
                or (isinstance(entry.get("factory"), str) and isinstance(entry.get("kwargs"), dict))
            )
        )
        if not ok:
            raise ConfigurationError(f"saved registration {i} is malformed: {str(entry)[:200]}")
        checked.append(entry)
    return checked


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
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, Mapping) else type(data).__name__
        raise ConfigurationError(f"not a saved branch of format {FORMAT!r}: {found!r:.200}")
    resources = dict(resources or {})
    decoder = _Decoder(resources)
    plan: list[tuple[Callable[..., Any] | None, dict[str, Any], list[str], list[str]]] = []
    for entry in _registrations(data):
        names = entry["tools"]
        if entry["kind"] == "static":
            for name in names:
                if f"tool:{name}" not in resources:
                    decoder.missing.add(f"tool:{name}")
            plan.append((None, {}, names, []))
            continue
        # The factory first: an unregistered one stops the load before any
        # stored argument is looked at further.
        try:
            factory: Callable[..., Any] = FACTORIES.resolve(entry["factory"])
        except ConfigurationError as exc:
            decoder.problems.append(str(exc))
            continue
        decoder.used = []
        kwargs = {k: decoder.decode(v) for k, v in entry["kwargs"].items()}
        plan.append((factory, kwargs, names, decoder.used))
    if decoder.missing or decoder.problems:
        needed = [f"resource {name!r}" for name in sorted(decoder.missing)] + decoder.problems
        raise ConfigurationError(
            "cannot restore the branch; supply or fix:\n" + "\n".join(f"- {n}" for n in needed)
        )
    messages = data["messages"]
    # The keys and the view as stored: `from_state` makes each key a tuple and
    # sorts the view itself (a tuple per key here too was a second pass over
    # every message of a long branch).
    log = MessageLog.from_state(
        [m if isinstance(m, Message) else Message.model_validate(m) for m in messages["record"]],
        list(messages["keys"]),
        list(messages["active"]),
        {int(k): tuple(v) for k, v in messages["summaries"].items()},
    )
    branch = cls(name=data.get("name"), chat_model=resources.get("chat_model"))
    branch.id = uuid.UUID(data["id"])
    branch.metadata = dict(data.get("metadata") or {})
    # Before the factories run: a tool reads its state when it is built.
    tool_state = data.get("tool_state") or {}
    if not isinstance(tool_state, dict):
        raise ConfigurationError(
            f"a saved branch's 'tool_state' must be an object: {tool_state!r:.200}"
        )
    branch.tool_state = dict(tool_state)
    branch.messages = log
    # Before the replay: a toolkit rebuilt for the branch finds its checkpoints.
    branch._checkpoints = CheckpointLog.from_data(data.get("checkpoints"))
    for maybe_factory, kwargs, names, supplied in plan:
        source: Callable[..., Any] | tuple[Tool, ...] = (
            maybe_factory
            if maybe_factory is not None
            else tuple(resources[f"tool:{name}"] for name in names)
        )
        registration = Registration(source=source, kwargs=kwargs, tool_names=tuple(names))
        try:
            branch._replay(registration, names)  # the same replay as clone()
        except (TypeError, ValueError) as exc:
            if not supplied:
                raise
            # Most likely a resource handed back that is not what was saved
            # under its name: say which, rather than only what the factory saw.
            named = ", ".join(repr(name) for name in dict.fromkeys(supplied))
            raise ConfigurationError(
                f"cannot restore the branch: {registration.factory_path} refused the "
                f"resource(s) {named} it was given back ({type(exc).__name__}: {exc}). Supply "
                f"under each name the very object the branch was registered with (the whole "
                f"argument of that name, e.g. the whole hooks mapping)."
            ) from exc
    order = [n for n in data.get("tool_order", []) if n in branch.tools]
    branch.reorder(order)
    branch._pending = _pending_from_data(data.get("pending"))
    return branch

"""`BranchStore`: save and load branches by id, with optimistic concurrency.

A store keeps, per branch id, the latest saved state (`Branch.to_dict`, as
JSON: see `encode`) and a version number that every save increments. Loading restores the
branch with `Branch.from_dict`, so its factories are called again exactly as
for `clone()`; live objects among their arguments (an exchange, a chat
model) come back through ``resources``.

Optimistic concurrency: the store remembers, per `Branch` object, the
version it loaded or last saved. A save whose remembered version is no
longer the stored one raises `ConflictError` instead of overwriting another
writer's messages; a branch the store has never seen may only be saved if
its id is not stored yet. The check and the write are one transaction (a
SQLite write transaction, a Redis script), so two writers racing from the
same version cannot both win. Versions are remembered by the store object
(weakly: they go with the branch), so load and save a branch through the
same store object. Versions never restart for an id: a delete keeps the
last one (see `BranchStore.delete`).

Trust: a store is shared with every program that can write it, so loading
treats its rows as untrusted data. A row is restored only through the factory
registry (`lionfactory.register_factory`): it can name registered factories
and choose their arguments, never run other code. Rows that are not saved
branches raise `ConfigurationError` for that branch alone.
"""

from __future__ import annotations

import abc
import contextlib
import gc
import json
import threading
import uuid
import weakref
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

from lionfactory._branch import Branch
from lionfactory._messages import messages_from_json, messages_to_compact_json
from lionfactory._persist import branch_to_dict
from lionfactory.errors import ConfigurationError

__all__ = ["BranchStore", "StoredBranch"]


@attrs.frozen
class StoredBranch:
    """One entry of `BranchStore.list()`.

    Attributes:
        id: the branch id.
        name: the branch name (None if it had none).
        version: how many times it was saved.
        saved_at: when the last save happened (UTC).
    """

    id: uuid.UUID
    name: str | None
    version: int
    saved_at: datetime


_PAUSE_LOCK = threading.Lock()
_pauses = 0
_resume_collector = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a stored branch's objects are built.

    A load of 10,000 messages makes some 60,000 objects, all of which
    survive; every few hundred of them start a collection, and the older
    generations' collections traverse every object the process holds: in a
    busy process they were 40% of the load. A load makes no garbage cycles
    (JSON has none), and reference counting still frees whatever is
    dropped, so nothing is lost by pausing. Re-entrant and thread-safe: the
    collector is switched back on when the last pause ends, and only if it
    was on when the first began.
    """
    global _pauses, _resume_collector
    with _PAUSE_LOCK:
        if _pauses == 0:
            _resume_collector = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _PAUSE_LOCK:
            _pauses -= 1
            if _pauses == 0 and _resume_collector:
                gc.enable()


def branch_id_of(value: Any) -> uuid.UUID:
    """A branch id from a UUID or its string; anything else is a TypeError naming it."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise TypeError(f"branch_id must be a UUID (or its string), got {value!r:.200}")


_COMPACT = "defaults left out"
"""The envelope's mark of a record written by `messages_to_compact_json`."""


def encode(branch: Branch) -> bytes:
    """`branch.to_dict()` as stored: the JSON envelope, a newline, the record as JSON.

    The message record (nearly all of a long branch) is serialised by
    pydantic in one call rather than message by message, each message
    without the fields that hold their defaults (`messages_to_compact_json`:
    a third less to validate on load; the envelope marks it). The envelope
    is ordinary JSON without raw newlines, so the first newline splits the
    two.
    """
    data = branch_to_dict(branch, dump_messages=False)
    record = data["messages"].pop("record")
    data["messages"]["record_form"] = _COMPACT
    # ASCII escapes, so whatever `to_json` accepts is stored as it is: a lone
    # surrogate in the metadata is valid JSON (``\ud800``) but not UTF-8.
    envelope = json.dumps(data, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    return envelope + b"\n" + messages_to_compact_json(record)


def decode(blob: bytes) -> dict[str, Any]:
    """What `encode` stored, as `Branch.from_dict` takes it.

    A record without the envelope's mark is one written whole (by an
    earlier version, or by hand): its messages are validated as JSON gives
    them, a left-out field taking its default through `Message`.
    """
    envelope, _, record = blob.partition(b"\n")
    data: dict[str, Any] = json.loads(envelope)
    if not isinstance(data, dict) or not isinstance(data.get("messages"), dict):
        raise ValueError("no message record in the envelope")
    messages = data["messages"]
    compact = messages.pop("record_form", None) == _COMPACT
    messages["record"] = messages_from_json(record, defaults_left_out=compact)
    return data


def timestamp(seconds: float) -> datetime:
    """Seconds since the epoch as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, UTC)


class BranchStore(abc.ABC):
    """Branches saved by id: the contract of `SqliteBranchStore` and `RedisBranchStore`.

    Every method is a coroutine that keeps blocking I/O off the event loop,
    under trio and asyncio alike.
    """

    def __init__(self) -> None:
        self._versions: weakref.WeakKeyDictionary[Branch, int] = weakref.WeakKeyDictionary()

    async def save(self, branch: Branch) -> int:
        """Save `branch` as the newest version of its id and return that version.

        Raises:
            ConflictError: another writer saved the branch after this store
                object loaded (or last saved) it, or saved a branch of this
                id that this store object never loaded.
            ConfigurationError: the branch cannot be saved (metadata that is
                not JSON-ready, a name with a lone surrogate).
        """
        if not isinstance(branch, Branch):
            raise TypeError(f"save takes a Branch, got {branch!r:.200}")
        if branch.name is not None:
            try:
                branch.name.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ConfigurationError(
                    f"branch.name must be text a store can hold (UTF-8); {exc.reason} at "
                    f"position {exc.start} of {branch.name!r:.100}"
                ) from None
        expected = self._versions.get(branch, 0)
        version = await self._write(branch.id, branch.name, expected, encode(branch))
        self._versions[branch] = version
        return version

    async def load(
        self, branch_id: uuid.UUID | str, *, resources: Mapping[str, Any] | None = None
    ) -> Branch:
        """Restore the newest saved version of a branch, calling its factories again.

        Args:
            branch_id: the branch's id (a UUID or its string).
            resources: the live objects the branch's registrations need back,
                by name (see `Branch.from_dict`).

        Raises:
            UnknownBranchError: nothing is saved under that id.
            ConfigurationError: a resource is missing, a factory is not
                registered (the message lists what is needed), or the stored
                data is not a saved branch.
        """
        key = branch_id_of(branch_id)
        version, data = await self._read(key)
        with collector_paused():
            try:
                saved = decode(data)
            except (ValueError, TypeError, KeyError) as exc:  # JSON and pydantic errors among them
                raise ConfigurationError(
                    f"the stored branch {key} is not a saved branch ({type(exc).__name__}: "
                    f"{str(exc)[:200]}); whoever wrote it was not lionfactory"
                ) from None
            branch = Branch.from_dict(saved, resources=resources)
            # The stored keys and view (a list per message) die here, while the
            # collector is paused: alive when it resumes, they were a third of
            # the objects its first pass over the load's survivors traversed.
            del saved
        self._versions[branch] = version
        return branch

    async def version(self, branch_id: uuid.UUID | str) -> int:
        """The stored version of a branch: 0 when nothing is saved under that id."""
        return await self._version(branch_id_of(branch_id))

    def known_version(self, branch: Branch) -> int:
        """The version this store object loaded or last saved for `branch` (0: none)."""
        return self._versions.get(branch, 0)

    @abc.abstractmethod
    async def list(self) -> list[StoredBranch]:
        """Every stored branch, oldest save first."""

    async def delete(self, branch_id: uuid.UUID | str) -> bool:
        """Delete a branch's saved state; return whether there was one.

        The id keeps its last version (a tombstone without data, which
        `list`, `load` and `version` do not show): a branch saved under the
        id again continues the numbering, so a copy loaded before the delete
        meets a version it never saw and its save raises `ConflictError`
        instead of overwriting the new branch.
        """
        return await self._delete(branch_id_of(branch_id))

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Release the store's connections."""

    async def __aenter__(self) -> BranchStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- what a backend implements ---------------------------------------------

    @abc.abstractmethod
    async def _write(
        self, branch_id: uuid.UUID, name: str | None, expected: int, data: bytes
    ) -> int:
        """Store `data` as version ``expected + 1`` if `expected` is the stored version.

        Raises:
            ConflictError: the stored version is not `expected` (0: absent).
        """

    @abc.abstractmethod
    async def _read(self, branch_id: uuid.UUID) -> tuple[int, bytes]:
        """The stored version and data. Raises `UnknownBranchError`."""

    @abc.abstractmethod
    async def _version(self, branch_id: uuid.UUID) -> int:
        """The stored version, 0 if absent."""

    @abc.abstractmethod
    async def _delete(self, branch_id: uuid.UUID) -> bool:
        """Delete; whether something was there."""

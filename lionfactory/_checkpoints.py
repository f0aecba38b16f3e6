"""Checkpoints as branch data: the public records and the per-branch log.

A checkpoint is taken by a toolkit before a tool call that can change files
(`lionfactory.coding`); the branch only keeps the list and hands a rewind to
the component the toolkit registered (`CheckpointLog.rewinder`), so the
branch floor knows nothing of snapshots, git or files. The list travels with
the branch: it is saved and loaded with it and copied into a clone (whose
toolkit then adds checkpoints of its own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, Protocol

import attrs

from lionfactory.errors import ConfigurationError

__all__ = ["Checkpoint", "CheckpointLog", "RewindOptions", "RewindReport", "Rewinder", "Scope"]

Scope = Literal["code", "conversation", "both"]
SCOPES: tuple[str, ...] = ("code", "conversation", "both")


@attrs.frozen
class Checkpoint:
    """The workspace as it was just before one tool call.

    Attributes:
        id: the checkpoint's id (``ckpt_`` and 16 hex digits).
        message_index: index in ``branch.messages.record`` of the assistant
            message carrying the call it precedes (-1 when the call was made
            outside a conversation).
        tool: the tool whose call it precedes (``"rewind"`` for the
            checkpoint a rewind takes of the state it replaces).
        created_at: when it was taken (UTC).
        files_changed: workspace-relative POSIX paths the following call
            changed, filled in when the call ends.
    """

    id: str
    message_index: int
    tool: str
    created_at: datetime
    files_changed: tuple[str, ...] = ()


@attrs.frozen
class RewindReport:
    """What `Branch.rewind` did (or, for a dry run, would do).

    Attributes:
        restored: paths written back to their content at the checkpoint.
        deleted: paths created after the checkpoint, removed (files, links,
            and directories left empty).
        conflicts: paths changed by someone other than this branch's tools
            since the checkpoint; left untouched unless listed in ``force``.
        skipped: paths not tracked (over a size limit, a nested repository,
            a protected name, outside ``paths``), with nothing done to them.
        undo: the id of the checkpoint taken just before this rewind:
            ``rewind(report.undo)`` undoes it. Empty for a dry run.
    """

    restored: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    undo: str = ""


@attrs.frozen
class RewindOptions:
    """What a `Branch.rewind` call asks for, as its rewinder receives it.

    Attributes:
        scope: ``"code"``, ``"conversation"`` or ``"both"``.
        paths: restore only these workspace-relative paths (None: all).
        dry_run: change nothing; report what the call would do.
        force: conflicting paths to restore anyway.
    """

    scope: Scope = "both"
    paths: tuple[str, ...] | None = None
    dry_run: bool = False
    force: tuple[str, ...] = ()


class Rewinder(Protocol):
    """The component a toolkit registers to carry out rewinds of its branch."""

    async def rewind(
        self, branch: Any, entry: CheckpointEntry, options: RewindOptions
    ) -> RewindReport:
        """Rewind `branch` (a `Branch`: this floor cannot name the class) to `entry`."""
        ...


@attrs.frozen
class CheckpointEntry:
    """A checkpoint and what its store needs to restore it (JSON-ready data)."""

    checkpoint: Checkpoint
    data: Mapping[str, Any] = attrs.field(factory=dict)

    def to_data(self) -> dict[str, Any]:
        """The entry as JSON-ready data."""
        c = self.checkpoint
        return {
            "id": c.id,
            "message_index": c.message_index,
            "tool": c.tool,
            "created_at": c.created_at.isoformat(),
            "files_changed": list(c.files_changed),
            "data": dict(self.data),
        }

    @classmethod
    def from_data(cls, data: Any) -> CheckpointEntry:
        """Read an entry saved with `to_data`.

        Raises:
            ConfigurationError: the data is not such an entry.
        """
        try:
            checkpoint = Checkpoint(
                id=_text(data["id"]),
                message_index=_integer(data["message_index"]),
                tool=_text(data["tool"]),
                created_at=datetime.fromisoformat(_text(data["created_at"])),
                files_changed=tuple(_text(p) for p in data["files_changed"]),
            )
            extra = data.get("data") or {}
            if not isinstance(extra, Mapping):
                raise TypeError(f"data must be a mapping, got {extra!r:.100}")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigurationError(f"a saved checkpoint is malformed: {exc!r:.300}") from None
        return cls(checkpoint, dict(extra))


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r:.100}")
    return value


def _integer(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an int, got {value!r:.100}")
    return value


@attrs.define(eq=False)
class CheckpointLog:
    """A branch's checkpoints, oldest first, and the rewinder its toolkit registered.

    Attributes:
        entries: the checkpoints with their store data.
        rewinder: what carries out `Branch.rewind` (None until a toolkit with
            checkpoints is registered on the branch).
    """

    entries: list[CheckpointEntry] = attrs.field(factory=list)
    rewinder: Rewinder | None = None

    def add(self, entry: CheckpointEntry) -> None:
        """Append a new checkpoint."""
        self.entries.append(entry)

    def replace(self, entry: CheckpointEntry) -> None:
        """Put `entry` in the place of the entry with its id (a call ended, say)."""
        for index, old in enumerate(self.entries):
            if old.checkpoint.id == entry.checkpoint.id:
                self.entries[index] = entry
                return
        self.entries.append(entry)

    def find(self, checkpoint_id: str) -> CheckpointEntry | None:
        """The entry with this id, or None."""
        for entry in self.entries:
            if entry.checkpoint.id == checkpoint_id:
                return entry
        return None

    def drop(self, ids: Sequence[str]) -> None:
        """Forget the entries with these ids (pruned from the store)."""
        gone = set(ids)
        self.entries = [e for e in self.entries if e.checkpoint.id not in gone]

    def copy(self) -> CheckpointLog:
        """The same entries, for a clone (its toolkit registers its own rewinder)."""
        return CheckpointLog(entries=list(self.entries))

    def to_data(self) -> list[dict[str, Any]]:
        """The entries as JSON-ready data."""
        return [entry.to_data() for entry in self.entries]

    @classmethod
    def from_data(cls, data: Any) -> CheckpointLog:
        """Read a log saved with `to_data` (None or missing: an empty log).

        Raises:
            ConfigurationError: the data is not a list of entries.
        """
        if data is None:
            return cls()
        if not isinstance(data, list):
            raise ConfigurationError(
                f"a saved branch's 'checkpoints' must be a list, got {data!r:.200}"
            )
        return cls(entries=[CheckpointEntry.from_data(item) for item in data])

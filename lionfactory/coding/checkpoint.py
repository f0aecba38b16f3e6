"""The ``checkpoint`` tool: the model lists, compares and rewinds its branch's checkpoints.

Opt-in (``coding_toolkit(..., tools=[..., "checkpoint"])``): the toolkit
takes the checkpoints whether or not the model can see them; this tool lets
it look back (``list``, ``diff``) and undo its own steps (``rewind``, a dry
run unless told otherwise). A real rewind changes files, so the tool is
marked destructive, and a real rewind of files states what it writes
(`rewind_targets`), so the toolkit's rules and modes judge it as a writing
call: ``ask_edits`` asks for it, ``read_only`` denies it, while ``list``,
``diff`` and dry runs, which change nothing, are never asked about.
"""

from __future__ import annotations

import difflib
import posixpath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lionfactory._branch import Branch
from lionfactory._tool import Tool, ToolHints
from lionfactory.coding._snapshots import SYMLINK, Entry, SnapshotError, SnapshotStore, State
from lionfactory.errors import CheckpointNotFound

__all__ = ["CheckpointRequest", "CheckpointResponse", "checkpoint_tool"]

DIFF_PAGE_CHARS = 20_000
"""Characters of unified diff per page."""


class CheckpointRequest(BaseModel):
    """One action of the ``checkpoint`` tool."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["list", "diff", "rewind"] = Field(
        description=(
            "list: the checkpoints (id, tool, files changed), oldest first; diff: what "
            "changed between two checkpoints or a checkpoint and now; rewind: put the files "
            "(and/or the conversation) back to a checkpoint."
        )
    )
    from_id: str | None = Field(
        default=None, description="diff: the checkpoint to compare from (required)."
    )
    to_id: str = Field(
        default="current",
        description="diff: the checkpoint to compare to, or 'current' for the files now.",
    )
    offset: int = Field(
        default=0, ge=0, description="diff: where this page of the unified diff starts."
    )
    to: str | None = Field(default=None, description="rewind: the checkpoint id (required).")
    scope: Literal["code", "conversation", "both"] = Field(
        default="both",
        description="rewind: 'code' files only, 'conversation' messages only, or 'both'.",
    )
    paths: list[str] | None = Field(
        default=None,
        description=(
            "rewind: restore only these workspace-relative files or folders (default: all)."
        ),
    )
    dry_run: bool = Field(
        default=True,
        description=(
            "rewind: only report what would be restored, deleted or left as a conflict "
            "(the default); pass false to do it."
        ),
    )


class CheckpointResponse(BaseModel):
    """The outcome of one ``checkpoint`` call."""

    model_config = ConfigDict(extra="forbid")

    success: bool = Field(description="Whether the action was carried out.")
    error: str | None = Field(default=None, description="Why it failed, and what to do next.")
    checkpoints: list[dict[str, Any]] | None = Field(
        default=None,
        description=(
            "list: id, tool, created_at and files_changed of each, and `partial` (why its "
            "files cannot be rewound to) for a checkpoint taken without a full snapshot."
        ),
    )
    name_status: list[str] | None = Field(
        default=None, description="diff: one 'A|M|D|T<TAB>path' line per changed path."
    )
    diff: str | None = Field(default=None, description="diff: this page of the unified diff.")
    next_offset: int | None = Field(
        default=None, description="diff: pass as offset for the next page; None at the end."
    )
    report: dict[str, Any] | None = Field(
        default=None,
        description=(
            "rewind: restored, deleted, conflicts (changed by someone else: left alone), "
            "skipped, and undo (rewind to it to undo this rewind)."
        ),
    )


_DESCRIPTION = (
    "List, compare and rewind the checkpoints taken before each of your calls that changed "
    "files. `rewind` is a dry run unless dry_run is false; a real rewind leaves files someone "
    "else changed alone (reported as conflicts) and answers an `undo` id that reverses it."
)


class _Checkpoints:
    """The handler: reads and rewinds its branch's checkpoints."""

    def __init__(self, branch: Branch) -> None:
        self.branch = branch

    def __repr__(self) -> str:
        return f"_Checkpoints(branch={str(self.branch.id)[:8]})"

    async def __call__(self, request: CheckpointRequest) -> CheckpointResponse:
        try:
            if request.action == "list":
                return self._list()
            if request.action == "diff":
                return await self._diff(request)
            return await self._rewind(request)
        except CheckpointNotFound as exc:
            return CheckpointResponse(success=False, error=f"{exc} Call list to see the ids.")
        except SnapshotError as exc:
            return CheckpointResponse(success=False, error=exc.message)

    def _list(self) -> CheckpointResponse:
        return CheckpointResponse(
            success=True,
            checkpoints=[
                {
                    "id": c.id,
                    "tool": c.tool,
                    "created_at": c.created_at.isoformat(timespec="seconds"),
                    "files_changed": list(c.files_changed),
                    **({"partial": e.data["partial"]} if e.data.get("partial") else {}),
                }
                for e in self.branch.checkpoint_log.entries
                for c in (e.checkpoint,)
            ],
        )

    async def _rewind(self, request: CheckpointRequest) -> CheckpointResponse:
        if not request.to:
            return CheckpointResponse(
                success=False, error="rewind needs `to`: a checkpoint id from list."
            )
        report = await self.branch.rewind(
            request.to, scope=request.scope, paths=request.paths, dry_run=request.dry_run
        )
        return CheckpointResponse(
            success=True,
            report={
                "restored": list(report.restored),
                "deleted": list(report.deleted),
                "conflicts": list(report.conflicts),
                "skipped": list(report.skipped),
                "undo": report.undo,
                "dry_run": request.dry_run,
            },
        )

    async def _diff(self, request: CheckpointRequest) -> CheckpointResponse:
        from lionfactory._os.workspace import Workspace
        from lionfactory.coding._checkpointing import Checkpointer, wait_for_first_snapshot

        if not request.from_id:
            return CheckpointResponse(
                success=False, error="diff needs `from_id`: a checkpoint id from list."
            )
        log = self.branch.checkpoint_log
        start = log.find(request.from_id)
        if start is None:
            raise CheckpointNotFound(request.from_id, len(log.entries))
        rewinder = log.rewinder
        root = start.data.get("root")
        if not isinstance(rewinder, Checkpointer) or not isinstance(root, str):
            return CheckpointResponse(success=False, error="This checkpoint cannot be read here.")
        store = rewinder.store(Workspace.at(root))
        end = None if request.to_id == "current" else log.find(request.to_id)
        if request.to_id != "current" and end is None:
            raise CheckpointNotFound(request.to_id, len(log.entries))
        await wait_for_first_snapshot(store)
        async with store.lock:
            first = _known(store, start.checkpoint.id, start.data)
            if end is None:
                second = (await store.snapshot()).state
            else:
                second = _known(store, end.checkpoint.id, end.data)
        old, new = await store.manifest(first), await store.manifest(second)
        changed = sorted(
            p
            for p in old.keys() | new.keys()
            if old.get(p) != new.get(p) and not store.workspace.is_hidden(p)
        )
        lines = [f"{_status(old.get(p), new.get(p))}\t{p}" for p in changed]
        blobs = await store.read_blobs(
            e.oid for p in changed for e in (old.get(p), new.get(p)) if e is not None
        )
        text = "".join(_unified(p, old.get(p), new.get(p), blobs) for p in changed)
        page = text[request.offset : request.offset + DIFF_PAGE_CHARS]
        after = request.offset + len(page)
        return CheckpointResponse(
            success=True,
            name_status=lines,
            diff=page,
            next_offset=after if after < len(text) else None,
        )


def _known(store: SnapshotStore, checkpoint_id: str, data: Any) -> State:
    """The state before a checkpoint's call (`SnapshotError` for a partial checkpoint)."""
    state = store.resolved(State.from_data(data["before"]))
    if state is None:
        why = data.get("partial") or "its first snapshot is not done"
        raise SnapshotError(f"Checkpoint {checkpoint_id} is partial ({why}); compare another one.")
    return state


def _status(old: Entry | None, new: Entry | None) -> str:
    if old is None:
        return "A"
    if new is None:
        return "D"
    return "T" if (old.mode == SYMLINK) != (new.mode == SYMLINK) else "M"


def _text(entry: Entry | None, blobs: dict[str, bytes]) -> list[str] | None:
    if entry is None:
        return []
    data = blobs[entry.oid]
    if entry.mode == SYMLINK:
        return [f"-> {data.decode('utf-8', 'replace')}\n"]
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def _unified(path: str, old: Entry | None, new: Entry | None, blobs: dict[str, bytes]) -> str:
    before, after = _text(old, blobs), _text(new, blobs)
    if before is None or after is None:
        return f"Binary file {path} differs\n"
    out = "".join(
        difflib.unified_diff(
            before,
            after,
            fromfile="/dev/null" if old is None else f"a/{path}",
            tofile="/dev/null" if new is None else f"b/{path}",
        )
    )
    if old is not None and new is not None and old.mode != new.mode and not out:
        out = f"mode {old.mode} -> {new.mode}: {path}\n"
    return out if out.endswith("\n") or not out else out + "\n"


def rewind_targets(request: CheckpointRequest) -> tuple[str, ...]:
    """What a call writes (`Tool.targets`): the paths a real rewind of files restores.

    A ``list``, a ``diff``, a dry run and a conversation-only rewind change
    no file: no targets, so rules with a glob (the modes' rules for this
    tool) pass them. A real rewind names its ``paths``, or ``.`` (the whole
    workspace) without them, so it is judged, asked about or denied like any
    writing call.
    """
    if request.action != "rewind" or request.dry_run or request.scope == "conversation":
        return ()
    if not request.paths:
        return (".",)
    return tuple(posixpath.normpath(p.replace("\\", "/")).lstrip("/") or "." for p in request.paths)


def checkpoint_tool(branch: Branch) -> Tool:
    """Build the ``checkpoint`` tool for `branch` (bound to it).

    Raises:
        TypeError: `branch` is not a Branch.
    """
    if not isinstance(branch, Branch):
        raise TypeError(f"branch must be a Branch, got {branch!r}")
    return Tool(
        name="checkpoint",
        request_model=CheckpointRequest,
        description=_DESCRIPTION,
        handler=_Checkpoints(branch),
        bound_to=branch.id,
        response_model=CheckpointResponse,
        hints=ToolHints("Checkpoints and rewind", destructive=True),
        targets=rewind_targets,
    )

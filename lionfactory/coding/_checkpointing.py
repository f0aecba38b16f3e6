"""Checkpoints for one branch of a coding toolkit: take them around calls, rewind to them.

`Checkpointer` is the rewinder a toolkit registers on its branch's
`CheckpointLog`. Before a call that can change files it records the
workspace's state (`State`) and after the call the state the call left, so
that each checkpoint's entry holds ``before`` and ``after``:

* before an editor call only the paths the call names are hashed,
  in-process, over the last full snapshot (the touched paths are known);
* before any other call (bash, a job, a sandbox merge) a full snapshot is
  taken with the store's persistent index, which hashes only what changed.

A rewind is a three-way decision per path, between its entry at the target
checkpoint, in the branch's latest recorded state, and on disk now:

* a path that differs from the target and that only this branch's calls
  changed since (each gap between one call's ``after`` and the next call's
  ``before`` is someone else's doing, and so is any difference between the
  latest ``after`` and the disk) is restored;
* a path someone else changed in that time is a conflict, left untouched
  unless named in ``force``;
* a path never tracked (ignored, over a limit, protected, a nested
  repository) is never touched.

Before the first change a journal of the operations is written to the store;
the next rewind or checkpoint of any branch on the workspace runs a journal
it finds to the end, so a rewind killed halfway completes.
"""

from __future__ import annotations

import _thread
import contextlib
import itertools
import os
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from lionfactory._call import current_call
from lionfactory._checkpoints import Checkpoint, CheckpointEntry, RewindOptions, RewindReport
from lionfactory._os.at_exit import at_exit
from lionfactory._os.isolation import Isolation, secrets_walked
from lionfactory._os.workspace import Workspace
from lionfactory.coding._restore import (
    Op,
    apply_op,
    make_dirs,
    read_journal,
    remove_empty_dirs,
    write_journal,
)
from lionfactory.coding._snapshots import (
    GITLINK,
    Entry,
    FullSnapshot,
    Limits,
    Manifest,
    SnapshotError,
    SnapshotStore,
    State,
    UnlistedFolders,
    valid_path,
)

if TYPE_CHECKING:
    from lionfactory._branch import Branch

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: the in-process lock only
    fcntl = None  # type: ignore[assignment]

__all__ = ["Checkpointer"]

_JOURNAL = "rewind.json"


def _new_id() -> str:
    return "ckpt_" + secrets.token_hex(8)


def _message_index(branch: Branch) -> int:
    """The record index of the assistant message carrying the running call."""
    running = _carrier(branch)
    if running is not None:
        return branch.messages.record_index(running)
    return len(branch.messages.record) - 1


def _carrier(branch: Branch) -> str | None:
    """The id of the assistant message carrying the running call, or None outside one."""
    record = branch.messages.record
    running = current_call()
    if running is not None and running.call_id:
        for index in range(len(record) - 1, -1, -1):
            message = record[index]
            if message.role == "assistant" and any(
                call.id == running.call_id for call in message.tool_calls
            ):
                return message.id
    return None


def _settle_calls(log: Any, start: int, running: str | None) -> None:
    """Leave no tool call without its result, nor a result without its call, from `start` on.

    An active assistant message's calls get their recorded results back (an
    undo's view was saved before the rewind call's own result existed); one
    with a call never answered leaves the view with its results. A result
    whose call is not in the view leaves it. The running call's carrying
    message is left as it is: its result is still to come.
    """
    record = log.record[start:]
    results: dict[str, list[Any]] = {}
    for message in record:
        if message.role == "tool" and message.call_id:
            results.setdefault(message.call_id, []).append(message)
    # Calls made before `start` keep their results wherever these landed.
    calls_in_view = {
        call.id
        for message in log.record[:start]
        if message.role == "assistant" and log.is_active(message.id)
        for call in message.tool_calls
    }
    for message in record:
        if message.role != "assistant" or not message.tool_calls or message.id == running:
            continue
        if not log.is_active(message.id):
            continue
        ids = [call.id for call in message.tool_calls]
        if all(call_id in results for call_id in ids):
            for call_id in ids:
                for result in results[call_id]:
                    if not log.is_active(result.id):
                        at = log.record_index(result.id)
                        log.restore(at, at + 1)
            calls_in_view.update(ids)
        else:
            log.evict_ids([message.id, *(r.id for i in ids for r in results.get(i, ()))])
    if running is not None:
        carrier = log.get(running)
        if carrier is not None and log.is_active(running):
            calls_in_view.update(call.id for call in carrier.tool_calls)
    log.evict_ids(
        [
            m.id
            for m in record
            if m.role == "tool" and log.is_active(m.id) and m.call_id not in calls_in_view
        ]
    )


@attrs.define(eq=False)
class BaseSnapshot:
    """A workspace's first full snapshot, taken in a thread of its own.

    A thread with its own trio loop, not a task: a factory starts nothing
    and the call that needs the snapshot must not wait for it, so no task
    group of the caller can own it. The branches that wait for it own it
    (`owners`); the last one to close cancels it (its git processes are
    killed with the loop's cancel scope). While it runs it holds the store's
    lock; editor calls record their paths over it without the lock (they
    write loose objects only, never the index).

    Attributes:
        store: the workspace's store.
        finish_journal: runs a killed rewind's journal first (under the lock).
        id: names the snapshot in the states recorded over it (`State.base`).
        owners: ids of the branches waiting for it.
        overtaken: a command ran before it was done: it no longer completes
            the states recorded during it (the command may have written
            anything, before or after the snapshot read it).
        error: why it did not finish, if it did not.
    """

    store: SnapshotStore
    finish_journal: Callable[[SnapshotStore], Awaitable[None]]
    id: str = attrs.field(factory=lambda: secrets.token_hex(16))
    owners: set[Any] = attrs.field(factory=set)
    overtaken: bool = False
    error: str | None = None
    started_ns: int = attrs.field(factory=time.time_ns)
    snap: FullSnapshot | None = None
    # Each path an editor call touched while it ran, as it was before the first such call.
    first_seen: dict[str, Entry | None] = attrs.field(factory=dict)
    _done: threading.Event = attrs.field(factory=threading.Event)
    _started: bool = False
    _go: threading.Event = attrs.field(factory=threading.Event)
    _starting: threading.Lock = attrs.field(factory=threading.Lock)
    _token: Any = None
    _scope: Any = None
    _cancelled: bool = False

    @property
    def finished(self) -> bool:
        """Whether it is done (or failed, or was cancelled)."""
        return self._done.is_set()

    def start(self, *, after: float = 0.0) -> None:
        """Start the thread, once (later calls do nothing); its work begins `after` seconds later.

        An editor call starts it as it returns, with a short delay: the
        thread's first steps are Python (a trio loop, the store's layout),
        and sharing the interpreter lock with them would slow the rest of
        that call, which must not wait for the snapshot.
        """
        with self._starting:
            if self._started:
                return
            self._started = True
        # Not `threading.Thread.start`: it blocks until the new thread runs,
        # which on a loaded machine is the scheduler's delay (tens of ms)
        # charged to the call that only wanted the snapshot to begin.
        _thread.start_new_thread(self._run, (after,))

    def _run(self, after: float) -> None:
        import trio

        if after > 0:
            self._go.wait(after)
        try:
            trio.run(self._snapshot)
        except BaseException as exc:  # reported to whoever reads it; the thread must end
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self._done.set()

    async def _snapshot(self) -> None:
        import trio

        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as scope:
            self._scope = scope
            if self._cancelled:
                scope.cancel()
            async with _exclusive(self.store):
                await self.finish_journal(self.store)
                # What changed after the calls stopped waiting for it (a user's
                # edit, say) is not known to be the branch's: it is unsettled.
                snap = await self.store.snapshot(since_ns=self.started_ns)
            self.store.keep_ref(snap.state, touch=True)
            self.snap = snap
            if not self.overtaken:
                self.store.name_base(self.id, snap, dict(self.first_seen))
        if scope.cancelled_caught:
            self.error = "cancelled: every branch waiting for it was closed"

    async def wait(self, seconds: float) -> bool:
        """Wait at most `seconds` for it to finish (in a worker thread); whether it did."""
        self.start()
        self._go.set()  # someone waits: no more delay
        if not self._done.is_set() and seconds > 0:
            await anyio.to_thread.run_sync(self._done.wait, seconds, abandon_on_cancel=True)
        return self._done.is_set()

    async def cancel(self) -> None:
        """Cancel it and wait (bounded) for its thread to end."""
        if self._stop():
            await self.wait(30.0)

    def cancel_now(self, seconds: float) -> None:
        """Cancel it and block at most `seconds` until its thread has ended (at exit)."""
        if self._stop():
            self._go.set()  # a thread still in its start delay goes on, and stops at once
            self._done.wait(seconds)

    def _stop(self) -> bool:
        """Ask it to stop, without blocking (any thread); whether its thread was started."""
        import trio

        self._cancelled = True
        with self._starting:
            never = not self._started
            self._started = True  # and it never will
        if never:
            self.error = "cancelled: every branch waiting for it was closed"
            self._done.set()
            return False
        token, scope = self._token, self._scope
        if token is not None and scope is not None and not self.finished:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(scope.cancel)  # thread-safe, and it does not block
        return True


_BASES: dict[Path, BaseSnapshot] = {}
"""The first snapshot of each workspace root taken in the background, in this process."""


_EXIT_CANCEL_SECONDS = 5.0
"""Seconds the process's exit waits for a cancelled first snapshot's thread to end."""


@at_exit
def _cancel_first_snapshots() -> None:
    # Its thread dies with the process, and the git it runs, with the
    # sandbox around it, would go on for init to reap; cancelled, the git is
    # killed with its process group. The store keeps what was recorded, and
    # the next process takes the snapshot again.
    for base in list(_BASES.values()):
        if not base.finished:
            base.cancel_now(_EXIT_CANCEL_SECONDS)


_FIRST_SNAPSHOT_DELAY = 0.05
"""Seconds a first snapshot started by an editor call waits before its work (see `start`)."""

FIRST_SNAPSHOT_TIMEOUT = 600.0
"""Seconds a rewind or a diff waits for a first snapshot still being taken."""


async def wait_for_first_snapshot(store: SnapshotStore) -> None:
    """Wait until the workspace's first snapshot, if one is being taken, is done.

    A rewind and a diff need the states recorded over it to be complete.
    """
    base = _BASES.get(store.workspace.root)
    if base is not None and not base.finished:
        await base.wait(FIRST_SNAPSHOT_TIMEOUT)


@attrs.define(eq=False)
class Checkpointer:
    """The checkpoints of one branch of one toolkit (the branch's rewinder).

    Attributes:
        branch: the branch whose log holds the checkpoints.
        isolation: the toolkit's confinement, for the snapshot git.
        limits: what snapshots leave out and how much is kept.
        forget_evidence: drops read evidence kept outside the conversation
            (the toolkit's local store) on a conversation rewind.
    """

    branch: Branch
    isolation: Isolation | None
    limits: Limits = attrs.field(factory=Limits)
    forget_evidence: Callable[[], None] = lambda: None
    # Open (not yet ended) background jobs started by this branch, by root:
    # job id -> the id of the checkpoint before the call that started it.
    # What changes meanwhile is the job's doing, not someone else's.
    _jobs_open: dict[str, dict[str, str]] = attrs.field(factory=dict)
    # Whether a job of this branch is still running (the toolkit asks the job table).
    job_running: Callable[[str], bool] = lambda job_id: False

    def store(self, workspace: Workspace) -> SnapshotStore:
        """The store of `workspace` (raises `SnapshotError` for ``/`` or the home directory)."""
        return SnapshotStore.for_workspace(workspace, isolation=self.isolation, limits=self.limits)

    # -- around calls --------------------------------------------------------

    async def before(
        self, workspace: Workspace, tool: str, paths: Sequence[str] | None
    ) -> CheckpointEntry:
        """Take the checkpoint before a call: of `paths` only, or of everything (None).

        The first full snapshot of a workspace in this process, which on a
        large tree takes seconds, never runs inside the call that needs it:

        * it runs in the background (`BaseSnapshot`, a thread owned by the
          branches waiting for it and cancelled when the last one closes),
          started by the first call that needs it: at once for a command, as
          the call returns for an editor call;
        * an editor call (`paths` known) records those paths over the
          snapshot still being taken (`State.base`) and does not wait; once
          the snapshot is done its tree completes that state;
        * any other call waits for it at most `Limits.first_snapshot_wait`
          seconds. Past that it runs with a *partial* checkpoint (its entry's
          ``partial`` says why; a rewind to it is refused with that reason and
          what to do, its changes count as someone else's on a rewind past
          it), and the snapshot, overtaken by a command that may write
          anywhere, no longer completes the states recorded during it.

        Raises:
            SnapshotError: the snapshot failed (the call should not run blind).
        """
        store = self.store(workspace)
        root = str(workspace.root)
        extra: dict[str, Any] = {"root": root}
        if self._jobs_open.get(root):
            extra["job_open"] = True
        last = self._latest(store, root)
        base = _BASES.get(workspace.root)
        if base is not None and base.finished:
            base = None
        if base is None and last is None and store.last_tree is None:
            # An editor call records its paths over the snapshot and starts
            # it once its own work is done (`after`): the snapshot's thread,
            # busy with Python for a while, would slow the call it must not.
            base = self._start_base(store, now=paths is None)
        if base is not None:
            base.owners.add(self.branch.id)
            await self._finish_journal_now(store)
            if paths is not None and (last is None or last.tree is None) and not base.overtaken:
                found = store.snapshot_paths(paths)
                for path, found_entry in found.items():
                    base.first_seen.setdefault(path, found_entry)
                state = (last or State(None, base=base.id)).with_paths(found)
                return self._record(store, tool, state, extra, paths)
            waited = paths is None and await self._wait_base(base)
            if waited and base.snap is not None:
                # Just taken, while this call waited: it is the state before the call.
                snap = base.snap
                extra["skipped"] = list(snap.skipped)
                # Changed since it started, but not by the editor calls recorded over it.
                unsettled = [p for p in snap.unsettled if p not in base.first_seen]
                if unsettled:
                    extra["unsettled"] = unsettled
                return self._record(store, tool, snap.state, extra, paths)
            if paths is None and not waited:
                base.overtaken = True
                extra["partial"] = (
                    f"the first snapshot of this workspace was still being taken after "
                    f"{self.limits.first_snapshot_wait:g} s, so this call ran without one: "
                    f"what it changed cannot be rewound to (later checkpoints can)"
                )
                return self._record(store, tool, State(None), extra, paths)
            if paths is not None and base.overtaken:
                extra["partial"] = (
                    "taken while the first snapshot of this workspace was overtaken by a "
                    "command: only the files this call names are recorded"
                )
                return self._record(
                    store, tool, State(None).with_paths(store.snapshot_paths(paths)), extra, paths
                )
        async with _exclusive(store):
            await self._finish_journal(store)
            last = self._latest(store, root)
            if paths is not None and last is not None and last.tree is not None:
                state = last.with_paths(store.snapshot_paths(paths))
            else:
                try:
                    snap = await store.snapshot()
                except UnlistedFolders as exc:
                    # The call runs with a partial checkpoint (a rewind to it
                    # says why), never over a snapshot that missed folders.
                    extra["partial"] = exc.message
                    state = State(None)
                else:
                    state = snap.state
                    extra["skipped"] = list(snap.skipped)
                    if snap.unsettled:
                        extra["unsettled"] = list(snap.unsettled)
                if paths is not None:
                    state = state.with_paths(store.snapshot_paths(paths))
        entry = self._record(store, tool, state, extra, paths)
        if store.keep_ref(state, touch=paths is None) and _over(store):
            self._forget(await store.prune())
        return entry

    def _record(
        self,
        store: SnapshotStore,
        tool: str,
        state: State,
        extra: dict[str, Any],
        paths: Sequence[str] | None,
    ) -> CheckpointEntry:
        checkpoint = Checkpoint(
            id=_new_id(),
            message_index=_message_index(self.branch),
            tool=tool,
            created_at=datetime.now(UTC),
        )
        entry = CheckpointEntry(checkpoint, {**extra, "before": state.to_data(), "paths": paths})
        self.branch.checkpoint_log.add(entry)
        return entry

    async def _wait_base(self, base: BaseSnapshot) -> bool:
        """Wait for the first snapshot, `Limits.first_snapshot_wait` seconds of its own.

        The clock starts once confined programs can launch: the first launch
        of a process waits for the walk of the toolchain's trees for
        credentials (seconds on a loaded machine), and the snapshot's git and
        this call's command both wait for it alike, so that wait is neither
        the snapshot's slowness nor a delay this call would have avoided.
        """
        if self.isolation is not None and self.isolation.confined:
            await anyio.to_thread.run_sync(secrets_walked, self.isolation, abandon_on_cancel=True)
        return await base.wait(self.limits.first_snapshot_wait)

    def _start_base(self, store: SnapshotStore, *, now: bool) -> BaseSnapshot:
        # The module function, not a bound method: the process-wide table of first
        # snapshots must not keep the branch alive.
        base = BaseSnapshot(store, finish_journal)
        _BASES[store.workspace.root] = base
        base.owners.add(self.branch.id)
        if now:
            base.start()
        return base

    async def _finish_journal_now(self, store: SnapshotStore) -> None:
        """Before a call that does not wait for the first snapshot: a killed rewind's journal."""
        if (store.journal_dir / _JOURNAL).exists():
            async with _exclusive(store):
                await self._finish_journal(store)

    async def after(
        self,
        workspace: Workspace,
        entry: CheckpointEntry,
        *,
        job_started: bool = False,
        job_ended: bool = False,
        job_id: str | None = None,
    ) -> CheckpointEntry:
        """Record what the call left and fill in the checkpoint's `files_changed`.

        Args:
            workspace: the workspace the call worked in.
            entry: the checkpoint taken before the call.
            job_started: the call started background job `job_id` (its
                window opens: what changes until it ends is the branch's).
            job_ended: the call ended job `job_id` (a kill: its window closes).
            job_id: the job the call started or ended.
        """
        store = self.store(workspace)
        before = State.from_data(entry.data["before"])
        paths = entry.data.get("paths")
        data = dict(entry.data)
        root = str(workspace.root)
        base = _BASES.get(workspace.root)
        pending = base is not None and not base.finished
        if paths is not None and (pending or before.tree is None):
            # Over the snapshot still being taken: no lock, no git (it holds both).
            after = before.with_paths(store.snapshot_paths(paths))
            changed = sorted(
                p for p, e in after.overlay if dict(before.overlay).get(p, _MISSING) != e
            )
            if base is not None and pending:
                base.start(after=_FIRST_SNAPSHOT_DELAY)
        elif pending or store.resolved(before) is None:
            # A command that did not get its first snapshot: what it left is
            # known at the next full snapshot, not now.
            after, changed = State(None), []
        else:
            before = store.resolved(before) or before
            async with _exclusive(store):
                if paths is not None:
                    after = before.with_paths(store.snapshot_paths(paths))
                    changed = sorted(
                        p for p, e in after.overlay if dict(before.overlay).get(p, _MISSING) != e
                    )
                else:
                    try:
                        snap = await store.snapshot()
                    except UnlistedFolders:
                        # Not known (see `before`): the next full snapshot says.
                        after, changed = State(None), []
                    else:
                        after = snap.state
                        changed = sorted(await store.changed_between(before, after))
                        if snap.unsettled:
                            data["unsettled"] = sorted(
                                {*data.get("unsettled", ()), *snap.unsettled}
                            )
        opened = self._jobs_open.setdefault(root, {})
        if job_started and job_id is not None:
            opened[job_id] = entry.checkpoint.id
        if job_ended and job_id is not None:
            opened.pop(job_id, None)
        if opened:
            data["job_open"] = True
        else:
            data.pop("job_open", None)
        data["after"] = after.to_data()
        ended = CheckpointEntry(attrs.evolve(entry.checkpoint, files_changed=tuple(changed)), data)
        self.branch.checkpoint_log.replace(ended)
        if store.keep_ref(after, touch=paths is None) and _over(store):
            self._forget(await store.prune())
        return ended

    def first_snapshot_pending(self, workspace: Workspace) -> bool:
        """Whether the first full snapshot of `workspace` in this process is not done yet."""
        base = _BASES.get(workspace.root)
        return base is not None and not base.finished

    async def close_ended_jobs(self) -> None:
        """Close the window of every job of this branch that ended by itself since last asked.

        Its end checkpoint (tool ``"jobs"``) is taken now, when the end is
        observed (at the branch's next toolkit call, after a ``jobs`` call,
        before a rewind): from then on a change is someone else's again.
        Its `files_changed` are the paths the job changed after the call that
        started it returned. A job killed through ``jobs`` closes its window
        in that call instead.
        """
        for root, opened in list(self._jobs_open.items()):
            ended = [job for job in opened if not self.job_running(job)]
            if not ended:
                continue
            starts = [self.branch.checkpoint_log.find(opened.pop(job)) for job in ended]
            workspace = Workspace.at(root)
            entry = await self.before(workspace, "jobs", None)
            closed = await self.after(workspace, entry)
            store = self.store(workspace)
            changed: set[str] = set()
            end_state = self._state(store, closed.data["before"])
            for start in starts:
                began = None if start is None else self._state(store, start.data.get("after"))
                if began is not None and end_state is not None:
                    changed |= await store.changed_between(began, end_state)
            self.branch.checkpoint_log.replace(
                CheckpointEntry(
                    attrs.evolve(
                        closed.checkpoint,
                        files_changed=tuple(sorted({*closed.checkpoint.files_changed, *changed})),
                    ),
                    {**closed.data, "jobs_ended": ended},
                )
            )

    def _forget(self, trees: Sequence[str]) -> None:
        """Drop this branch's checkpoints whose target tree was pruned."""
        gone = set(trees)
        self.branch.checkpoint_log.drop(
            [
                e.checkpoint.id
                for e in self.branch.checkpoint_log.entries
                if (e.data.get("before") or {}).get("tree") in gone
            ]
        )

    def _latest(self, store: SnapshotStore, root: str) -> State | None:
        """The branch's latest recorded state of `root` (after its last call), if known.

        A state over the base snapshot still being taken counts as known (its
        tree is coming); one a command overtook (partial) does not.
        """
        base = _BASES.get(store.workspace.root)
        for entry in reversed(self.branch.checkpoint_log.entries):
            if entry.data.get("root") != root:
                continue
            try:
                state = State.from_data(entry.data.get("after") or entry.data["before"])
            except SnapshotError:
                continue
            if (
                state.tree is None
                and base is not None
                and base.id == state.base
                and not base.finished
                and not base.overtaken
            ):
                return state
            return store.resolved(state)
        return None

    # -- rewind --------------------------------------------------------------

    async def rewind(
        self, branch: Branch, entry: CheckpointEntry, options: RewindOptions
    ) -> RewindReport:
        """Rewind `branch` to `entry` (see the module docstring).

        Raises:
            SnapshotError: the store cannot be read or the workspace snapshot failed.
        """
        scope, paths, dry_run, force = options.scope, options.paths, options.dry_run, options.force
        await self.close_ended_jobs()
        root = entry.data.get("root")
        if scope == "conversation":
            if not dry_run:
                undo = self._conversation_undo(branch)
                self._rewind_conversation(branch, entry)
                return RewindReport(undo=undo.checkpoint.id)
            return RewindReport()
        if not isinstance(root, str):
            raise SnapshotError("The checkpoint names no workspace; it cannot be restored.")
        workspace = Workspace.at(root)
        store = self.store(workspace)
        await wait_for_first_snapshot(store)
        async with _exclusive(store):
            await self._finish_journal(store)
            report, ops, dirs_gone, dirs_made, now = await self._plan(
                store, entry, paths=paths, force=force
            )
            if dry_run:
                return report
            undo = await self._take_undo(store, branch, now)
            journal = store.journal_dir / _JOURNAL
            blobs = await store.read_blobs(op.target.oid for op in ops if op.target is not None)
            try:
                write_journal(
                    journal,
                    {
                        "ops": [op.to_data() for op in ops],
                        "dirs_gone": dirs_gone,
                        "dirs_made": dirs_made,
                    },
                )
            except OSError as exc:
                branch.checkpoint_log.drop([undo.checkpoint.id])
                with contextlib.suppress(OSError):
                    journal.with_name(journal.name + ".tmp").unlink()
                raise SnapshotError(
                    f"Nothing was rewound: the rewind's journal could not be written to the "
                    f"checkpoint store ({store.directory}: {exc.strerror}). Free space there "
                    f"and rewind again."
                ) from None
            outcomes, removed = await anyio.to_thread.run_sync(
                _run_ops, workspace, ops, blobs, dirs_gone, dirs_made
            )
            if "nospace" in outcomes.values():
                await self._roll_back(store, workspace, ops, outcomes)
                with contextlib.suppress(OSError):
                    journal.unlink()
                branch.checkpoint_log.drop([undo.checkpoint.id])
                stuck = sorted(p for p, o in outcomes.items() if o == "nospace")
                raise SnapshotError(
                    f"Nothing was rewound: the disk holding the workspace is full ({len(stuck)} "
                    f"file(s) could not be written, e.g. {stuck[0]}), so the files already "
                    f"put back were returned to how they were. Free space and rewind again."
                )
            with contextlib.suppress(OSError):
                journal.unlink()
            after = await store.snapshot(dirs=True)
        restored = tuple(
            op.path for op in ops if op.target is not None and outcomes[op.path] != "conflict"
        )
        deleted = tuple(
            op.path for op in ops if op.target is None and outcomes[op.path] != "conflict"
        )
        late = tuple(op.path for op in ops if outcomes[op.path] in ("conflict", "refused"))
        undo_state = after.state
        data = dict(undo.data)
        data["after"] = undo_state.to_data()
        store.keep_ref(undo_state, touch=True)
        changed = tuple(sorted({*restored, *deleted}))
        branch.checkpoint_log.replace(
            CheckpointEntry(attrs.evolve(undo.checkpoint, files_changed=changed), data)
        )
        if scope == "both":
            self._rewind_conversation(branch, entry)
        return RewindReport(
            restored=tuple(p for p in restored if p not in late),
            deleted=tuple(p for p in deleted if p not in late) + tuple(removed),
            conflicts=tuple(sorted({*report.conflicts, *late})),
            skipped=report.skipped,
            undo=undo.checkpoint.id,
        )

    async def _plan(
        self,
        store: SnapshotStore,
        entry: CheckpointEntry,
        *,
        paths: tuple[str, ...] | None,
        force: tuple[str, ...],
    ) -> tuple[RewindReport, list[Op], list[str], list[str], State]:
        root = str(store.workspace.root)
        snap = await store.snapshot(dirs=True)
        now_state = snap.state
        resolved = self._state(store, entry.data["before"])
        if resolved is None:
            why = entry.data.get("partial") or "its first snapshot never finished"
            raise SnapshotError(
                f"Checkpoint {entry.checkpoint.id} is partial ({why}), so the files cannot be "
                f"put back to it. Rewind to an earlier or a later checkpoint, or rewind only "
                f"the conversation (scope='conversation')."
            )
        target_state = resolved
        target = await store.manifest(target_state)
        now = await store.manifest(now_state)
        external = await self._external(store, entry, root, now_state)
        skipped: set[str] = {s.rsplit(": ", 1)[0] for s in snap.skipped}
        # What the snapshot left out (a file grown past the limits, say) is not
        # known as it is now: never compared, read or written, only reported.
        left_out = set(skipped)
        conflicts: list[str] = []
        ops: list[Op] = []
        forced = set(force)
        uncertain = self._uncertain(store, entry, root)
        for path in sorted(target.keys() | now.keys() | uncertain):
            want, have = target.get(path), now.get(path)
            if want == have and path not in uncertain:
                continue
            if paths is not None and not _selected(path, paths):
                continue
            if path in left_out:
                continue
            if not self._restorable(store.workspace, path, want, have):
                skipped.add(path)
                continue
            if (path in external and path not in forced) or want == have:
                # Equal but uncertain: what it held at the checkpoint is not known.
                conflicts.append(path)
                continue
            ops.append(Op(path, have, want))
        ops.sort(key=lambda op: (op.target is not None, -op.path.count("/"), op.path))
        wanted = _folders(target) | {f for d in target_state.dirs for f in (*_parents(d), d)}
        leaving = {f for op in ops if op.target is None for f in _parents(op.path)}
        leaving |= {f for d in now_state.dirs for f in (*_parents(d), d)}
        gone = sorted(f for f in leaving - wanted if _selected_any(f, paths))
        present = _folders(now) | set(now_state.dirs)
        made = sorted(d for d in target_state.dirs if d not in present and _selected_any(d, paths))
        leaving_paths = {op.path for op in ops if op.target is None}
        emptied = _emptied(store.workspace.root, gone, leaving_paths)
        report = RewindReport(
            restored=tuple(op.path for op in ops if op.target is not None),
            deleted=tuple(op.path for op in ops if op.target is None) + emptied,
            conflicts=tuple(conflicts),
            skipped=tuple(sorted(p for p in skipped if paths is None or _selected(p, paths))),
        )
        return report, ops, gone, made, now_state

    async def _roll_back(
        self, store: SnapshotStore, workspace: Workspace, ops: list[Op], outcomes: dict[str, str]
    ) -> None:
        """Undo the operations of a rewind that ran out of space (deletions first: they free it)."""
        back = [Op(op.path, op.target, op.expect) for op in ops if outcomes[op.path] == "done"]
        blobs = await store.read_blobs(op.target.oid for op in back if op.target is not None)
        await anyio.to_thread.run_sync(_run_ops, workspace, back, blobs, [], [])

    def _uncertain(self, store: SnapshotStore, entry: CheckpointEntry, root: str) -> set[str]:
        """Paths changed while the first snapshot ran, by no call recorded over it.

        Their content at a checkpoint recorded over that snapshot is not
        known (the snapshot read them later): a rewind reports them as
        conflicts and leaves them alone.
        """
        chain = [e for e in self.branch.checkpoint_log.entries if e.data.get("root") == root]
        ids = [e.checkpoint.id for e in chain]
        chain = chain[ids.index(entry.checkpoint.id) :] if entry.checkpoint.id in ids else [entry]
        ours: set[str] = set()
        bases: set[str] = set()
        for current in chain:
            for key in ("before", "after"):
                raw = current.data.get(key)
                if isinstance(raw, dict) and isinstance(raw.get("base"), str):
                    bases.add(raw["base"])
                    with contextlib.suppress(SnapshotError):
                        ours.update(p for p, _ in State.from_data(raw).overlay)
        return {p for base in bases for p in store.base_unsettled(base) if p not in ours}

    @staticmethod
    def _state(store: SnapshotStore, data: Any) -> State | None:
        """A recorded state with its tree known, or None (not recorded, or partial)."""
        if data is None:
            return None
        try:
            return store.resolved(State.from_data(data))
        except SnapshotError:
            return None

    def _restorable(
        self, workspace: Workspace, path: str, want: Entry | None, have: Entry | None
    ) -> bool:
        if not valid_path(path) or workspace.is_hidden(path):
            return False
        return not any(e is not None and e.mode == GITLINK for e in (want, have))

    async def _external(
        self, store: SnapshotStore, entry: CheckpointEntry, root: str, now: State
    ) -> set[str]:
        """Paths changed since `entry` by something other than this branch's calls."""
        chain = [e for e in self.branch.checkpoint_log.entries if e.data.get("root") == root]
        start = next(
            (i for i, e in enumerate(chain) if e.checkpoint.id == entry.checkpoint.id), None
        )
        if start is None:
            # A checkpoint of another branch (a clone's source): everything since is
            # someone else's doing as far as this branch knows.
            start = 0
            chain = [entry, *chain]
        external: set[str] = set()
        chain = chain[start:]
        for current in chain:
            # Changed while a snapshot was being taken (a job writing, say): the
            # recorded content may not be what the branch's call left.
            external.update(p for p in current.data.get("unsettled", ()) if isinstance(p, str))
        # Each call's before and after, in order, then now. Between a call's own
        # before and after the changes are its own; between one call's after and
        # the next call's before they are someone else's, unless a job of the
        # branch ran then. A state that is not known (a call that ran without its
        # first snapshot) joins its neighbours' spans, which then count as
        # someone else's: what is not known is never overwritten silently.
        marks: list[tuple[State | None, str, CheckpointEntry | None]] = []
        external |= self._uncertain(store, entry, root)
        for current in chain:
            marks.append((self._state(store, current.data.get("before")), "before", current))
            after_data = current.data.get("after")
            if after_data is None:
                # A call that never ended (killed): its changes are unknown, not
                # someone else's, so its span runs on to the next call.
                continue
            marks.append((self._state(store, after_data), "after", current))
        marks.append((now, "now", None))
        known = [(i, m) for i, m in enumerate(marks) if m[0] is not None]
        for (i, (a, kind_a, entry_a)), (j, (b, _, entry_b)) in itertools.pairwise(known):
            if a is None or b is None:  # never: `known` holds known states only
                continue
            adjacent = j == i + 1
            own = adjacent and kind_a == "before"
            job = (
                adjacent
                and kind_a == "after"
                and (
                    bool(entry_a is not None and entry_a.data.get("job_open"))
                    or bool(entry_b is not None and entry_b.data.get("job_open"))
                )
            )
            if not (own or job):
                external |= await store.changed_between(a, b)
        return external

    async def _take_undo(self, store: SnapshotStore, branch: Branch, now: State) -> CheckpointEntry:
        checkpoint = Checkpoint(
            id=_new_id(),
            message_index=_message_index(branch),
            tool="rewind",
            created_at=datetime.now(UTC),
        )
        store.keep_ref(now, touch=True)
        undo = CheckpointEntry(
            checkpoint,
            {
                "root": str(store.workspace.root),
                "before": now.to_data(),
                "paths": None,
                "view": [m.id for m in branch.messages.active],
            },
        )
        branch.checkpoint_log.add(undo)
        return undo

    def _conversation_undo(self, branch: Branch) -> CheckpointEntry:
        last = next((e for e in reversed(branch.checkpoint_log.entries) if "root" in e.data), None)
        data: dict[str, Any] = {"view": [m.id for m in branch.messages.active]}
        if last is not None:
            state = last.data.get("after") or last.data["before"]
            data.update(root=last.data["root"], before=state, after=state, paths=None)
        undo = CheckpointEntry(
            Checkpoint(
                id=_new_id(),
                message_index=_message_index(branch),
                tool="rewind",
                created_at=datetime.now(UTC),
            ),
            data,
        )
        branch.checkpoint_log.add(undo)
        return undo

    def _rewind_conversation(self, branch: Branch, entry: CheckpointEntry) -> None:
        """The view goes back to just before the turn that made the checkpoint's call.

        Inclusive of that turn: the assistant message carrying the call (and
        every call it carries, with their results) leaves the view too, since
        a view ending on a tool call without its result is refused by every
        provider, and keeping the call without its effects would tell the
        model it happened. A checkpoint taken outside a conversation (no
        carrying message) keeps the message it names. The running call's own
        carrying message stays, so its result lands after a call (a rewind
        from the ``checkpoint`` tool). An undo's saved view comes back with
        the results of the calls in it.
        """
        log = branch.messages
        record = log.record
        index = entry.checkpoint.message_index
        carrier = record[index] if 0 <= index < len(record) else None
        start = index if carrier is not None and carrier.tool_calls else index + 1
        start = max(start, 0)
        running = _carrier(branch)
        staying = {running} if running is not None else set()
        view = entry.data.get("view")
        if isinstance(view, list):
            staying |= {v for v in view if isinstance(v, str)}
            log.evict_ids([m.id for m in record[start:] if m.id not in staying])
            for message_id in staying:
                if log.get(message_id) is not None and not log.is_active(message_id):
                    at = log.record_index(message_id)
                    log.restore(at, at + 1)
        else:
            log.evict_ids([m.id for m in record[start:] if m.id not in staying])
        _settle_calls(log, start, running)
        self.forget_evidence()

    async def _finish_journal(self, store: SnapshotStore) -> None:
        """Run a journal a killed rewind left to the end (hold the store's lock)."""
        await finish_journal(store)

    async def close_branch(self, branch_id: Any) -> None:
        """Stop waiting for first snapshots; one nobody else waits for is cancelled.

        The store's files stay for later rewinds.
        """
        for base in list(_BASES.values()):
            if branch_id in base.owners:
                base.owners.discard(branch_id)
                if not base.owners and not base.finished:
                    await base.cancel()


_MISSING = object()


async def finish_journal(store: SnapshotStore) -> None:
    """Run a journal a killed rewind left to the end (hold the store's lock)."""
    store.ensure()
    journal = store.journal_dir / _JOURNAL
    found = read_journal(journal, _journal_parts)
    if found is None:
        return
    ops, gone, made = found
    blobs = await store.read_blobs(op.target.oid for op in ops if op.target is not None)
    await anyio.to_thread.run_sync(_run_ops, store.workspace, ops, blobs, gone, made)
    with contextlib.suppress(OSError):
        journal.unlink()


def _journal_parts(raw: Any) -> tuple[list[Op], list[str], list[str]]:
    ops = [Op.from_data(item) for item in raw["ops"]]
    gone = [f for f in raw["dirs_gone"] if isinstance(f, str) and valid_path(f)]
    made = [f for f in raw["dirs_made"] if isinstance(f, str) and valid_path(f)]
    return ops, gone, made


def _run_ops(
    workspace: Workspace,
    ops: list[Op],
    blobs: dict[str, bytes],
    gone: list[str],
    made: list[str],
) -> tuple[dict[str, str], list[str]]:
    """Deletions, then empty folders, then writes (a folder may become a file and back)."""
    outcomes: dict[str, str] = {}
    root_fd = workspace.open_root()
    try:
        for op in ops:
            if op.target is None:
                outcomes[op.path] = apply_op(root_fd, op, blobs)
        removed = remove_empty_dirs(root_fd, gone)
        for op in ops:
            if op.target is not None:
                outcomes[op.path] = apply_op(root_fd, op, blobs)
        make_dirs(root_fd, made)
    finally:
        os.close(root_fd)
    return outcomes, removed


def _emptied(root: Path, folders: list[str], leaving: set[str]) -> tuple[str, ...]:
    """The folders a rewind's deletions leave empty (deepest first), as it will remove them."""
    gone: set[str] = set()
    order = sorted(folders, key=lambda f: (-f.count("/"), f))
    for folder in order:
        try:
            names = os.listdir(root / folder)
        except OSError:
            continue
        if all(f"{folder}/{name}" in leaving or f"{folder}/{name}" in gone for name in names):
            gone.add(folder)
    return tuple(f for f in order if f in gone)


def _selected(path: str, paths: Iterable[str]) -> bool:
    return any(path == p.strip("/") or path.startswith(p.strip("/") + "/") for p in paths)


def _selected_any(path: str, paths: Iterable[str] | None) -> bool:
    return paths is None or _selected(path, paths)


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _folders(manifest: Manifest) -> set[str]:
    """Folders holding the manifest's paths."""
    return {folder for path in manifest for folder in _parents(path)}


def _over(store: SnapshotStore) -> bool:
    folder = store.git_dir / "refs" / "checkpoints"
    try:
        return sum(1 for _ in folder.iterdir()) > store.limits.keep
    except OSError:
        return False


@contextlib.asynccontextmanager
async def _exclusive(store: SnapshotStore) -> Any:
    """Hold the store: this process's lock, then ``flock`` across processes."""
    async with store.lock:
        store.ensure()
        fd = os.open(store.directory / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    # Another process holds it: wait in a thread, not in the event loop.
                    await anyio.to_thread.run_sync(fcntl.flock, fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


@attrs.frozen
class CallPlan:
    """How to checkpoint one call.

    Attributes:
        paths: the only paths the call can change (None: any, take a full snapshot).
        job_started: the call may leave a background job running.
        job_ended: the call ends (or may end) the branch's background job `job_id`.
        job_id: the job a kill names.
    """

    paths: tuple[str, ...] | None
    job_started: bool = False
    job_ended: bool = False
    job_id: str | None = None


_EDITING = frozenset({"write", "edit", "multi_edit", "insert", "apply_patch", "delete"})

# Programs that change no file whatever their arguments (output redirects aside).
_READING_PROGRAMS = frozenset(
    {"ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "rg", "pwd", "echo"}
    | {"printf", "true", "false", "stat", "file", "du", "df", "which", "type", "env"}
    | {"date", "whoami", "id", "uname", "tree", "diff", "cmp", "less", "more", "nl"}
    | {"realpath", "dirname", "basename", "readlink", "test", "[", "sha256sum", "md5sum"}
    | {"jq", "cut", "tr", "uniq", "column", "ps", "hostname", "seq", "od", "xxd", "hexdump"}
)
_READING_GIT = frozenset(
    {"status", "log", "diff", "show", "rev-parse", "ls-files", "blame", "grep", "shortlog"}
)
_FIND_WRITES = frozenset({"-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint"})


def bash_reads_only(command: str) -> bool:
    """Whether a bash command's parse shows it changes no file (conservative: unsure is False)."""
    from lionfactory._shell.parse import ShellSyntaxError, simple_commands

    try:
        commands = simple_commands(command)
    except (ShellSyntaxError, ValueError):
        return False
    if not commands:
        return False
    for simple in commands:
        if simple.dynamic or simple.assignments or simple.stdin:
            return False
        if any(target not in ("/dev/null", "&1", "&2", "1", "2") for target in simple.redirects):
            return False
        words = simple.words
        if not words:
            return False
        program = words[0].rsplit("/", 1)[-1]
        if program in _READING_PROGRAMS:
            continue
        if program == "git" and len(words) > 1 and words[1] in _READING_GIT:
            if any(w.startswith("--output") for w in words):
                return False
            continue
        if program == "sed" and not any(w.startswith(("-i", "--in-place")) for w in words[1:]):
            continue
        if program == "find" and not _FIND_WRITES.intersection(words):
            continue
        if program == "sort" and not any(w.startswith(("-o", "--output")) for w in words[1:]):
            continue
        return False
    return True


def plan_call(name: str, request: Any, workspace: Workspace) -> CallPlan | None:
    """The checkpoint a call needs, or None when it cannot change files."""
    if name == "editor":
        action = getattr(request, "action", None)
        if action not in _EDITING:
            return None
        if action == "apply_patch":
            return CallPlan(_patch_paths(getattr(request, "patch", None) or "", workspace))
        path = getattr(request, "file_path", None)
        return CallPlan(tuple(p for p in (_relative(path, workspace),) if p is not None))
    if name == "bash":
        background = bool(getattr(request, "background", False)) or (
            getattr(request, "on_timeout", "kill") == "background"
        )
        if not background and bash_reads_only(str(getattr(request, "command", ""))):
            return None
        return CallPlan(None, job_started=background)
    if name == "jobs":
        if getattr(request, "action", None) == "kill":
            job_id = getattr(request, "job_id", None)
            return CallPlan(
                None, job_ended=True, job_id=job_id if isinstance(job_id, str) else None
            )
        return None
    if name == "sandbox":
        return CallPlan(None) if getattr(request, "action", None) == "merge" else None
    return None


def _relative(path: Any, workspace: Workspace) -> str | None:
    if not isinstance(path, str) or not path:
        return None
    try:
        location = workspace.locate(path)
    except Exception:  # a refused path: the tool itself refuses it
        return None
    return "/".join(location.parts) or None


def _patch_paths(patch: str, workspace: Workspace) -> tuple[str, ...]:
    from lionfactory.tools._editor_patch import PatchError, parse_patch

    try:
        ops = parse_patch(patch)
    except (PatchError, ValueError):
        return ()
    found = []
    for op in ops:
        for path in (op.path, op.move_to):
            relative = _relative(path, workspace)
            if relative is not None:
                found.append(relative)
    return tuple(dict.fromkeys(found))

"""The checkpoint object store: a private bare git directory per workspace, outside it.

Snapshots of a workspace are git trees in a bare repository under the
library's state directory (`state_directory`), one per workspace root and
shared by every branch working there. Why git: its index is a persistent stat
cache, so a re-snapshot of an unchanged 10,000-file tree stats the files and
hashes none, and its object store deduplicates content across snapshots.
Cheaper still, a snapshot of a tree in which an inotify watch of every folder
saw nothing change since the previous snapshot began returns that one
(`lionfactory._os.change_watch` says when the watch can vouch for that).

Nothing git reads from the workspace is trusted, as for the sandbox's git
(`Git` with its hardening: no hooks, no fsmonitor, no pager; the user's and
the system's configuration unread):

* ``GIT_DIR`` is the store, so no configuration, hook or attribute file of
  the workspace's own repository is ever read; the store's config is written
  by this module only (``Git.own_config``);
* the store's ``info/attributes`` (the highest-precedence attribute source)
  unsets ``text``, ``eol``, ``filter``, ``ident`` and
  ``working-tree-encoding`` for every path, so whatever a ``.gitattributes``
  in the tree says, every file is stored byte for byte (no end-of-line
  conversion, no filter);
* the project's objects are an alternate (``objects/info/alternates``), so
  content the project already holds is not copied; since a confined process
  can write that directory, every blob read back for a restore is hashed
  again and refused unless it matches its id.

What is tracked is what the project's ignore rules keep (``.gitignore`` files
are data git reads, never programs). Never tracked: ``.git`` (git refuses the
name), nested repositories, protected names, a new file over
`Limits.max_file_bytes` and a new top-level directory with more than
`Limits.max_new_files` new files; each is reported in the snapshot's
``skipped``.

A first snapshot is seeded from the project's own index when the workspace is
a git checkout: its stat data and blob ids are valid for the same work tree
and its objects are reachable through the alternate, so only what differs
from the project's index is hashed.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import secrets
import stat
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs

from lionfactory._os.change_watch import change_watch
from lionfactory._os.isolation import Isolation, snapshot_isolation
from lionfactory._os.regular import is_directory, is_regular
from lionfactory._os.workspace import Workspace
from lionfactory.coding._git import Git, GitError
from lionfactory.coding._gitdirs import git_dirs
from lionfactory.errors import ToolFailure

__all__ = [
    "Entry",
    "Limits",
    "Manifest",
    "SnapshotError",
    "SnapshotStore",
    "State",
    "UnlistedFolders",
    "state_directory",
]

STATE_ENV = "LIONFACTORY_STATE_DIR"
"""Environment variable naming the library's state directory (checkpoint stores)."""

REGULAR, EXECUTABLE, SYMLINK, GITLINK = "100644", "100755", "120000", "160000"

_ATTRIBUTES = "* -text -eol -filter -ident -working-tree-encoding -diff -merge\n"
_CONFIG = (
    "[core]\n"
    "\trepositoryformatversion = 0\n"
    "\tbare = false\n"
    "\tautocrlf = false\n"
    "\tsafecrlf = false\n"
    "\tfilemode = true\n"
    "\tsymlinks = true\n"
    "\tignorecase = false\n"
    "\tprecomposeunicode = false\n"
    "\tbigFileThreshold = 16m\n"
    "\tlogAllRefUpdates = false\n"
    "[gc]\n"
    "\tauto = 0\n"
)


class SnapshotError(ToolFailure):
    """A snapshot or restore could not be done; `message` says why and what to do."""


class UnlistedFolders(SnapshotError):
    """git could not list some folders: a snapshot of the rest would say they are empty."""


def state_directory() -> Path:
    """The library's state directory: ``$LIONFACTORY_STATE_DIR``, else the XDG state home."""
    named = os.environ.get(STATE_ENV)
    if named:
        return Path(named).expanduser().resolve()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base).expanduser().resolve() / "lionfactory"


@attrs.frozen
class Limits:
    """What a snapshot leaves out, so a stray dataset cannot fill the disk.

    Attributes:
        max_file_bytes: a new file larger than this is not captured.
        max_changed_bytes: a tracked file that changed and is now larger than
            this is not captured either (its last captured content stands, and
            a rewind leaves it alone and reports it): a confined command can
            grow a file to terabytes with one ``truncate -s``, and hashing
            that would hold every call's snapshot for git's whole timeout.
        max_new_files: a new top-level directory holding more new files than
            this (a dependency cache, a build tree) is not captured.
        keep: checkpoints kept per workspace store; older ones are pruned.
        max_store_bytes: the store's size above which the oldest are pruned.
        first_snapshot_wait: seconds a call that needs a full snapshot (bash,
            a job, a merge) waits for the workspace's first snapshot, taken
            in the background, before it runs with a partial checkpoint;
            counted from when confined programs can launch (the first launch
            of a process waits for the toolchain's credential walk first).
    """

    max_file_bytes: int = 20 * 1024 * 1024
    max_changed_bytes: int = 1024**3
    max_new_files: int = 20_000
    keep: int = 500
    max_store_bytes: int = 2 * 1024**3
    first_snapshot_wait: float = 5.0


@attrs.frozen
class Entry:
    """One path of a snapshot: its git mode and blob id."""

    mode: str
    oid: str


Manifest = dict[str, Entry]


@attrs.frozen
class State:
    """The workspace at one moment: a full tree, and paths known since (an overlay).

    An editor call changes only the paths it names, so the state before and
    after it is the last full tree plus those paths, hashed in-process (no
    git process: the cost budget of an edit is two milliseconds).

    Attributes:
        tree: the last full snapshot's tree id (None: not known, see `base`).
        overlay: ``(path, entry or None)`` pairs over `tree`; None is absent.
        dirs: the empty folders (full snapshots taken for a rewind only).
        base: with no `tree`: the id of the first snapshot still being taken
            in the background when this state was recorded; its tree is the
            state's once it is done (`SnapshotStore.resolved`). With neither,
            only the overlay is known (a partial state).
    """

    tree: str | None
    overlay: tuple[tuple[str, Entry | None], ...] = ()
    dirs: tuple[str, ...] = ()
    base: str | None = None

    def with_paths(self, changes: Mapping[str, Entry | None]) -> State:
        """This state with `changes` laid over it."""
        merged = dict(self.overlay)
        merged.update(changes)
        return State(self.tree, tuple(sorted(merged.items())), self.dirs, self.base)

    def to_data(self) -> dict[str, Any]:
        """JSON-ready form."""
        data: dict[str, Any] = {
            "tree": self.tree,
            "overlay": [[p, None if e is None else [e.mode, e.oid]] for p, e in self.overlay],
            "dirs": list(self.dirs),
        }
        if self.base is not None:
            data["base"] = self.base
        return data

    @classmethod
    def from_data(cls, data: Any) -> State:
        """Read `to_data` output (raises `SnapshotError` when malformed)."""
        try:
            tree = data["tree"]
            if tree is not None and not _is_oid(tree):
                raise ValueError(f"bad tree id {tree!r:.60}")
            overlay: list[tuple[str, Entry | None]] = []
            for path, entry in data["overlay"]:
                if not isinstance(path, str):
                    raise ValueError(f"bad path {path!r:.60}")
                if entry is None:
                    overlay.append((path, None))
                    continue
                mode, oid = entry
                if mode not in (REGULAR, EXECUTABLE, SYMLINK) or not _is_oid(oid):
                    raise ValueError(f"bad entry {entry!r:.80}")
                overlay.append((path, Entry(mode, oid)))
            dirs = tuple(d for d in data.get("dirs", ()) if isinstance(d, str) and valid_path(d))
            base = data.get("base")
            if base is not None and not _is_base_id(base):
                raise ValueError(f"bad base id {base!r:.60}")
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotError(f"A saved checkpoint state is malformed ({exc}).") from None
        return cls(tree, tuple(overlay), dirs, base)


_HEX = "0123456789abcdef"


def _is_base_id(value: Any) -> bool:
    # `strip` leaves nothing exactly when every character is a hex digit, in C:
    # a generator over the characters cost microseconds per id, and each
    # checkpointed call reads a few saved states back.
    return isinstance(value, str) and len(value) == 32 and not value.strip(_HEX)


def _is_oid(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 40 and not value.strip(_HEX)


@attrs.frozen
class FullSnapshot:
    """What one full snapshot found.

    Attributes:
        tree: the tree id.
        dirs: the empty folders (git trees hold none).
        changed: paths that differ from the previous full snapshot.
        skipped: paths not captured, each with its reason (``path: reason``).
        unsettled: paths that changed while the snapshot was taken.
    """

    tree: str
    dirs: tuple[str, ...]
    changed: tuple[str, ...]
    skipped: tuple[str, ...]
    unsettled: tuple[str, ...]

    @property
    def state(self) -> State:
        """The snapshot as a `State`."""
        return State(self.tree, (), self.dirs)


def blob_id(data: bytes) -> str:
    """Git's id of a blob holding `data`."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


_STORES: dict[Path, SnapshotStore] = {}


def refuse_root(root: Path) -> str | None:
    """Why `root` cannot have checkpoints (the home directory or ``/``), or None."""
    if root == Path(root.anchor):
        return "the filesystem root"
    with contextlib.suppress(RuntimeError, KeyError):
        if root == Path.home().resolve():
            return "the home directory"
    return None


@attrs.define(eq=False)
class AnyLoopLock:
    """A lock that every event loop and thread of this process can hold in turn.

    One store serves a workspace's branches across the whole process, and a
    branch may be driven from trio and, in a framework's worker thread, from
    asyncio: an `anyio.Lock` belongs to the event loop that first waited on
    it and fails on any other. A contended acquire waits in a worker thread,
    never in the event loop.
    """

    _lock: threading.Lock = attrs.field(factory=threading.Lock)

    async def __aenter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            await anyio.to_thread.run_sync(self._lock.acquire)

    async def __aexit__(self, *exc_info: object) -> None:
        self._lock.release()


@attrs.define(eq=False)
class SnapshotStore:
    """One workspace's checkpoint store, shared by the branches of this process.

    Attributes:
        workspace: the workspace (its root and protected names).
        directory: the store's folder in the state directory.
        git: git pinned to the store, the work tree and the persistent index.
        limits: what snapshots leave out and how much is kept.
        lock: serialises this process's snapshots and restores of the
            workspace (git's ``index.lock`` serialises processes).
    """

    workspace: Workspace
    directory: Path
    git: Git
    limits: Limits
    lock: AnyLoopLock = attrs.field(factory=AnyLoopLock)
    _ready: bool = False
    _refresh: bool = False
    _manifests: dict[str, Manifest] = attrs.field(factory=dict)
    last_tree: str | None = None
    # The last full snapshot (without its changes) while the change watch
    # says the workspace is as that snapshot read it; None otherwise.
    _unchanged: FullSnapshot | None = None

    @classmethod
    def for_workspace(
        cls, workspace: Workspace, *, isolation: Isolation | None, limits: Limits | None = None
    ) -> SnapshotStore:
        """The store of `workspace` (one per root per process).

        Raises:
            SnapshotError: the root is the home directory or ``/``.
        """
        # A known store was checked when it was made (the check resolves the
        # home directory, a walk of its path, at every branch and clone).
        known = _STORES.get(workspace.root)
        if known is not None:
            return known
        refused = refuse_root(workspace.root)
        if refused is not None:
            raise SnapshotError(
                f"Checkpoints are refused for {refused} ({workspace.root}): a snapshot would "
                f"copy everything under it. Use a project directory as the workspace."
            )
        key = hashlib.sha256(os.fsencode(workspace.root)).hexdigest()[:24]
        directory = state_directory() / "checkpoints" / key
        git_dir = directory / "store.git"
        found = git_dirs(workspace.root)
        readable = (workspace.root, *(() if found is None else (found[1] / "objects",)))
        # A first snapshot's git can run for minutes: it must not outlive us
        # when we are killed (SIGKILL runs no exit hook to cancel it).
        git = Git(
            isolation=_store_isolation(isolation, directory, readable),
            own_config=True,
            die_with_parent=True,
        ).at(git_dir, workspace.root)
        git = git.with_env(GIT_INDEX_FILE=str(directory / "index"), GIT_LITERAL_PATHSPECS="1")
        store = cls(workspace=workspace, directory=directory, git=git, limits=limits or Limits())
        _STORES[workspace.root] = store
        return store

    @property
    def git_dir(self) -> Path:
        """The bare repository."""
        return self.directory / "store.git"

    # `git_dir`'s objects and checkpoint refs as text, joined once: every
    # editor call with checkpoints looks up two blobs and a ref there, and
    # `Path` joins at each cost more than the `stat` they lead to.
    @functools.cached_property
    def _objects_text(self) -> str:
        return os.fspath(self.git_dir / "objects")

    @functools.cached_property
    def _checkpoint_refs_text(self) -> str:
        return os.fspath(self.git_dir / "refs" / "checkpoints")

    @property
    def bases_dir(self) -> Path:
        """Where each first snapshot taken in the background names its tree when done."""
        return self.directory / "bases"

    def resolved(self, state: State) -> State | None:
        """`state` with its tree known, or None when it is not (a partial state).

        A state recorded while the first snapshot ran in the background takes
        that snapshot's tree once it is done and was not overtaken by a
        command that ran meanwhile (`Checkpointer` writes the tree only then).
        """
        if state.tree is not None:
            return state
        found = self._base(state.base)
        if found is None:
            return None
        tree, _, first_seen = found
        return State(tree, first_seen, state.dirs).with_paths(dict(state.overlay))

    def base_unsettled(self, base: str) -> tuple[str, ...]:
        """Paths that changed while background snapshot `base` ran (not known to be ours)."""
        found = self._base(base)
        return () if found is None else found[1]

    def _base(
        self, base: str | None
    ) -> tuple[str, tuple[str, ...], tuple[tuple[str, Entry | None], ...]] | None:
        if base is None or not _is_base_id(base):
            return None
        try:
            raw = json.loads((self.bases_dir / base).read_text(encoding="utf-8"))
            tree, unsettled = raw["tree"], raw["unsettled"]
            first_seen = State.from_data({"tree": tree, "overlay": raw["first_seen"]}).overlay
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, SnapshotError):
            return None
        if not _is_oid(tree) or not isinstance(unsettled, list):
            return None
        paths = tuple(p for p in unsettled if isinstance(p, str) and valid_path(p))
        return tree, paths, first_seen

    def name_base(
        self, base: str, snap: FullSnapshot, first_seen: Mapping[str, Entry | None]
    ) -> None:
        """Record what background snapshot `base` produced (see `resolved`).

        Args:
            base: the snapshot's id.
            snap: the snapshot.
            first_seen: each path an editor call touched while it ran, as it
                was before the first of those calls: the snapshot read it
                later, and a state recorded before that call had it so.
        """
        self.bases_dir.mkdir(exist_ok=True)
        overlay = State(snap.tree).with_paths(first_seen).to_data()["overlay"]
        data = {"tree": snap.tree, "unsettled": list(snap.unsettled), "first_seen": overlay}
        _write_bytes(self.bases_dir / base, json.dumps(data).encode())

    @property
    def journal_dir(self) -> Path:
        """Where rewinds keep their journals."""
        return self.directory / "journals"

    def ensure(self) -> None:
        """Create the store's layout (idempotent; no git process)."""
        if self._ready:
            return
        git_dir = self.git_dir
        for sub in ("objects/info", "objects/pack", "refs/heads", "refs/checkpoints", "info"):
            (git_dir / sub).mkdir(parents=True, exist_ok=True)
        (self.journal_dir).mkdir(exist_ok=True)
        _write_text(git_dir / "HEAD", "ref: refs/heads/main\n")
        _write_text(git_dir / "config", _CONFIG)
        _write_text(git_dir / "info" / "attributes", _ATTRIBUTES)
        found = git_dirs(self.workspace.root)
        alternates = git_dir / "objects" / "info" / "alternates"
        if found is not None and (found[1] / "objects").is_dir():
            _write_text(alternates, f"{found[1] / 'objects'}\n")
            self._seed_index(found[0])
        else:
            with contextlib.suppress(FileNotFoundError):
                alternates.unlink()
        (self.directory / "tmp").mkdir(exist_ok=True)
        self._ready = True

    def _seed_index(self, project_git_dir: Path) -> None:
        """Start the persistent index from the project's, so the first snapshot hashes little."""
        index = self.directory / "index"
        if index.exists():
            return
        with contextlib.suppress(OSError):
            _write_bytes(index, (project_git_dir / "index").read_bytes())
            self._refresh = True

    # -- snapshots -----------------------------------------------------------

    async def snapshot(self, *, dirs: bool = False, since_ns: int | None = None) -> FullSnapshot:
        """Take a full snapshot of the workspace (hold `lock`).

        Args:
            dirs: also record the empty folders (a second walk of the
                untracked ones): rewinds do, to remove the folders created
                since the target and to bring back, on undo, those they removed.
            since_ns: report as unsettled what changed since this time (a
                snapshot in the background, that calls did not wait for),
                not only during the snapshot.

        Raises:
            SnapshotError: git failed (a message the model can act on).
        """
        self.ensure()
        root = self.workspace.root
        watch = change_watch()
        unchanged = self._unchanged
        if unchanged is not None and not dirs and since_ns is None and not watch.changed(str(root)):
            # Not a byte, a mode or a name changed since the last snapshot
            # began reading (inotify saw nothing): it holds as it is.
            return unchanged
        self._unchanged = None
        if self._refresh:
            # A seeded index holds the project's stat data, some of it smudged
            # (racily clean entries): refreshed once, so later listings stat
            # and do not hash.
            await self._check(["update-index", "-q", "--refresh"], "refresh", tolerate=True)
            self._refresh = False
        # Before the listing: a change made while git reads the tree counts.
        watched = watch.begin(str(root))
        listing = await self._listing()
        started = _now_ns() if since_ns is None else since_ns
        chosen: dict[str, None] = {}
        skipped: list[str] = []
        new: list[str] = []
        for item in listing.split("\0"):
            if len(item) < 3:
                continue
            tag, path = item[0], item[2:]
            if path.endswith("/"):
                skipped.append(f"{path.rstrip('/')}: a nested repository")
                continue
            if self.workspace.is_hidden(path) or not valid_path(path):
                skipped.append(f"{path}: a protected name")
                continue
            if "\ufffd" in path and not _lexists(root / path):
                # git's output is read as UTF-8 with replacement: a name that is
                # not UTF-8 arrives mangled, names no file and cannot be added.
                # Reported, so a rewind says it left the file as it is.
                skipped.append(f"{path}: a name that is not valid UTF-8")
                continue
            if tag == "?":
                new.append(path)
            elif (why := self._uncapturable(root / path)) is not None:
                skipped.append(f"{path}: {why}")
            else:
                chosen[path] = None
        counts: dict[str, int] = {}
        for path in new:
            top = path.split("/", 1)[0] if "/" in path else ""
            counts[top] = counts.get(top, 0) + 1
        for path in new:
            top = path.split("/", 1)[0] if "/" in path else ""
            if top and counts[top] > self.limits.max_new_files:
                continue
            try:
                st = os.lstat(root / path)
            except OSError:
                continue
            if is_regular(st) and st.st_size > self.limits.max_file_bytes:
                skipped.append(f"{path}: over {self.limits.max_file_bytes:,} bytes")
                continue
            chosen[path] = None
        skipped.extend(
            f"{top}/: {count:,} new files (over {self.limits.max_new_files:,})"
            for top, count in counts.items()
            if top and count > self.limits.max_new_files
        )
        # A path beneath a link (a tracked folder a command replaced by a link)
        # makes `git add` die on the whole pathspec ("beyond a symbolic link")
        # and record none of the call's changes: such a path is gone from the
        # work tree as git sees it, so it leaves the index on its own.
        beyond = _beneath_links(root, chosen)
        for path in beyond:
            del chosen[path]
        for part in _chunks(beyond, 200):
            await self._check(
                ["update-index", "--force-remove", "--", *part], "record the removed files"
            )
        if chosen:
            spec = self.directory / "tmp" / f"pathspec-{secrets.token_hex(6)}"
            _write_bytes(spec, b"".join(os.fsencode(p) + b"\0" for p in chosen))
            try:
                await self._check(
                    [
                        "add",
                        "-A",
                        "--ignore-errors",
                        f"--pathspec-from-file={spec}",
                        "--pathspec-file-nul",
                    ],
                    "record the changed files",
                    tolerate=True,
                )
            finally:
                with contextlib.suppress(OSError):
                    spec.unlink()
        if chosen or beyond or self.last_tree is None:
            tree = (await self._check(["write-tree"], "write the snapshot")).strip()
        else:
            tree = self.last_tree
        self.last_tree = tree
        unsettled = tuple(p for p in chosen if _changed_after(root / p, started))
        if watched and not unsettled:
            self._unchanged = FullSnapshot(tree, (), (), tuple(skipped), ())
        return FullSnapshot(
            tree=tree,
            dirs=await self._empty_dirs() if dirs else (),
            changed=(*chosen, *beyond),
            skipped=tuple(skipped),
            unsettled=unsettled,
        )

    def _uncapturable(self, path: Path) -> str | None:
        """Why the changed tracked path `path` cannot be recorded as it is now, or None.

        git refuses to add a FIFO, a socket or a device and keeps the path's
        old entry, so a snapshot would claim the old content is still there
        and a rewind would neither restore nor report the path. Hashing a
        file grown past `Limits.max_changed_bytes` would hold the snapshot
        for git's whole timeout. Either is reported instead (``skipped``).
        """
        try:
            st = os.lstat(path)
        except OSError:
            return None  # deleted: git records that
        if is_directory(st) or stat.S_ISLNK(st.st_mode):
            return None
        if not is_regular(st):
            return "not a regular file, a link or a folder"
        if st.st_size > self.limits.max_changed_bytes:
            return f"over {self.limits.max_changed_bytes:,} bytes"
        return None

    async def _empty_dirs(self) -> tuple[str, ...]:
        """The empty folders among the untracked ones (``mkdir -p`` leaves them)."""
        listing = await self._check(
            ["ls-files", "-z", "-o", "--directory", "--exclude-standard"],
            "list the workspace's folders",
            max_bytes=1 << 26,
        )
        root = self.workspace.root
        found: list[str] = []
        for item in listing.split("\0"):
            if not item.endswith("/"):
                continue
            top = item.rstrip("/")
            if not valid_path(top) or self.workspace.is_hidden(top):
                continue
            for dirpath, dirs, files in _walk(str(root / top)):
                relative = Path(dirpath).relative_to(root).as_posix()
                if ".git" in dirs or ".git" in files:
                    dirs.clear()  # a nested repository
                    continue
                if not dirs and not files and valid_path(relative):
                    found.append(relative)
                if len(found) > self.limits.max_new_files:
                    return tuple(sorted(found))
        return tuple(sorted(found))

    async def _listing(self) -> str:
        args = ["ls-files", "-z", "-t", "-m", "-d", "-o", "--exclude-standard"]
        warnings: list[str] = []
        try:
            out = await self._check(
                args, "list the workspace's changes", max_bytes=1 << 28, warnings=warnings
            )
        except SnapshotError:
            index = self.directory / "index"
            if not index.exists():
                raise
            # A seeded index git cannot read here (split, sparse, a newer
            # version): start from an empty one.
            index.unlink()
            warnings.clear()
            out = await self._check(
                args, "list the workspace's changes", max_bytes=1 << 28, warnings=warnings
            )
        unlisted = [m for w in warnings for m in _UNLISTED.findall(w)]
        if unlisted:
            # Landlock's listing right reaches everything beneath a folder, so a
            # folder above a hidden folder is not listable by the snapshot's git
            # (a hidden file leaves its folder listable): taken as empty, its
            # files would be "created after" every checkpoint, and a rewind
            # would delete them all.
            shown = ", ".join(sorted({"the workspace root" if d == "." else d for d in unlisted}))
            raise UnlistedFolders(
                f"The checkpoint snapshot could not list {shown} under this confinement "
                f"(a folder holding a hidden folder cannot be listed under landlock), so it "
                f"cannot record what this call changes. Use isolation='bwrap' where it "
                f"works, or move the hidden folder out of the workspace."
            )
        return out

    def snapshot_paths(self, paths: Iterable[str]) -> dict[str, Entry | None]:
        """The current entries of `paths` (relative, POSIX), hashed in-process.

        A directory or an unreadable path is left out; an absent path maps to
        None. Blobs are written to the store as loose objects.
        """
        # Only the object folder: the rest of the layout (config, the seeded
        # index, a first `git_dirs` walk) is the first full snapshot's to make,
        # and that one runs in the background while a first editor call
        # records its paths over it.
        if not self._ready:
            (self.git_dir / "objects").mkdir(parents=True, exist_ok=True)
        found: dict[str, Entry | None] = {}
        root_fd = self.workspace.open_root()
        try:
            for path in paths:
                if not valid_path(path) or self.workspace.is_hidden(path):
                    continue
                entry = self._entry_of(root_fd, path)
                if entry is None or isinstance(entry, Entry):
                    found[path] = entry
        finally:
            os.close(root_fd)
        return found

    def _entry_of(self, root_fd: int, path: str) -> Entry | bool | None:
        from lionfactory._os.beneath import DIRECTORY_FLAGS, open_beneath

        parts = tuple(path.split("/"))
        try:
            dir_fd = open_beneath(root_fd, parts[:-1], DIRECTORY_FLAGS)
        except FileNotFoundError:
            return None
        except OSError:
            return False
        try:
            try:
                st = os.lstat(parts[-1], dir_fd=dir_fd)
            except FileNotFoundError:
                return None
            if stat.S_ISLNK(st.st_mode):
                data = os.fsencode(os.readlink(parts[-1], dir_fd=dir_fd))
                return Entry(SYMLINK, self.write_blob(data))
            if not is_regular(st) or st.st_size > self.limits.max_file_bytes:
                return False
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            try:
                data = _read_all(fd)
            finally:
                os.close(fd)
            mode = EXECUTABLE if st.st_mode & stat.S_IXUSR else REGULAR
            return Entry(mode, self.write_blob(data))
        except OSError:
            return False
        finally:
            os.close(dir_fd)

    def write_blob(self, data: bytes) -> str:
        """Store `data` as a loose object (if it is not there) and return its id."""
        oid = blob_id(data)
        folder = f"{self._objects_text}/{oid[:2]}"
        target = f"{folder}/{oid[2:]}"
        if os.path.exists(target):
            return oid
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder)
        _write_bytes(Path(target), zlib.compress(b"blob %d\0" % len(data) + data, 1))
        return oid

    # -- reading back --------------------------------------------------------

    async def manifest(self, state: State) -> Manifest:
        """Every path of `state` with its entry."""
        base: Manifest = {}
        if state.tree is not None:
            base = dict(await self._tree_manifest(state.tree))
        for path, entry in state.overlay:
            if entry is None:
                base.pop(path, None)
            else:
                base[path] = entry
        return base

    async def _tree_manifest(self, tree: str) -> Manifest:
        known = self._manifests.get(tree)
        if known is not None:
            return known
        out = await self._check(
            ["ls-tree", "-r", "-z", "--full-tree", tree],
            "read a checkpoint",
            max_bytes=512 * 1024 * 1024,
        )
        manifest: Manifest = {}
        for line in out.split("\0"):
            if not line:
                continue
            meta, _, path = line.partition("\t")
            mode, _kind, oid = meta.split(" ")
            manifest[path] = Entry(mode, oid)
        if len(self._manifests) > 32:
            self._manifests.clear()
        self._manifests[tree] = manifest
        return manifest

    async def read_blobs(self, oids: Iterable[str]) -> dict[str, bytes]:
        """The content of each blob, verified against its id.

        Loose objects are read in-process; others (packed, in the project's
        store) are checked out through a scratch index into the store's
        temporary folder, never into the workspace.

        Raises:
            SnapshotError: a blob is missing or does not hash to its id.
        """
        wanted = list(dict.fromkeys(oids))
        found: dict[str, bytes] = {}
        missing: list[str] = []
        for oid in wanted:
            data = self._read_loose(oid)
            if data is None:
                missing.append(oid)
            else:
                found[oid] = data
        if missing:
            found.update(await self._read_through_git(missing))
        for oid, data in found.items():
            if blob_id(data) != oid:
                raise SnapshotError(
                    f"The checkpoint store holds a corrupt or forged object {oid}; nothing was "
                    f"restored. Rewind to another checkpoint."
                )
        return found

    def _read_loose(self, oid: str) -> bytes | None:
        try:
            raw = zlib.decompress((self.git_dir / "objects" / oid[:2] / oid[2:]).read_bytes())
        except (OSError, zlib.error):
            return None
        header, _, body = raw.partition(b"\0")
        return body if header.startswith(b"blob ") else None

    async def _read_through_git(self, oids: list[str]) -> dict[str, bytes]:
        scratch = self.directory / "tmp" / f"read-{secrets.token_hex(6)}"
        scratch.mkdir()
        index = scratch / "index"
        git = self.git.with_env(GIT_INDEX_FILE=str(index))
        names = {oid: f"b{i}" for i, oid in enumerate(oids)}
        try:
            for chunk in _chunks(list(names.items()), 200):
                args = ["update-index", "--add"]
                for oid, name in chunk:
                    args += ["--cacheinfo", f"{REGULAR},{oid},{name}"]
                await self._check(args, "read a checkpoint's files", git=git)
                await self._check(
                    [
                        "checkout-index",
                        "-f",
                        f"--prefix={scratch}/out/",
                        "--",
                        *(n for _, n in chunk),
                    ],
                    "read a checkpoint's files",
                    git=git,
                )
            out: dict[str, bytes] = {}
            for oid, name in names.items():
                try:
                    out[oid] = (scratch / "out" / name).read_bytes()
                except OSError:
                    raise SnapshotError(
                        f"The checkpoint store lacks object {oid} (pruned, or the project's "
                        f"history it was shared with was cleaned); rewind to a later checkpoint."
                    ) from None
            return out
        finally:
            _remove_tree(scratch)

    async def changed_between(self, a: State, b: State) -> set[str]:
        """Paths whose entry differs between two states."""
        if a == b:
            return set()
        if a.tree == b.tree:
            paths = {p for p, _ in a.overlay} | {p for p, _ in b.overlay}
            ma = dict(a.overlay)
            mb = dict(b.overlay)
            base = await self._tree_manifest(a.tree) if a.tree is not None else {}
            return {p for p in paths if ma.get(p, base.get(p)) != mb.get(p, base.get(p))}
        if a.tree is not None and b.tree is not None and not a.overlay and not b.overlay:
            out = await self._check(
                ["diff-tree", "-r", "-z", "--no-renames", "--name-only", a.tree, b.tree],
                "compare two checkpoints",
                max_bytes=1 << 28,
            )
            return {p for p in out.split("\0") if p}
        first, second = await self.manifest(a), await self.manifest(b)
        return {p for p in first.keys() | second.keys() if first.get(p) != second.get(p)}

    # -- refs and pruning ----------------------------------------------------

    def keep_ref(self, state: State, *, touch: bool = False) -> bool:
        """Keep the state's tree with a ref named after it (so ``gc`` keeps it).

        One ref per tree, not per checkpoint: the checkpoints around editor
        calls share their base tree and write no ref at all. The ref's mtime
        says when the tree was last taken (`touch`), which pruning goes by.

        Returns:
            Whether a new ref was written.
        """
        if state.tree is None:
            return False
        self.ensure()
        ref = f"{self._checkpoint_refs_text}/{state.tree}"
        if os.path.exists(ref):
            if touch:
                with contextlib.suppress(OSError):
                    os.utime(ref)
            return False
        _write_bytes(Path(ref), f"{state.tree}\n".encode())
        return True

    async def prune(self) -> tuple[str, ...]:
        """Drop the oldest trees' refs beyond `Limits.keep` or `Limits.max_store_bytes`.

        Returns:
            The tree ids dropped (branches forget the checkpoints on them).
        """
        folder = self.git_dir / "refs" / "checkpoints"
        refs = sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime_ns)
        drop = refs[: max(0, len(refs) - self.limits.keep)]
        size = _folder_bytes(self.git_dir / "objects")
        rest = refs[len(drop) :]
        while size > self.limits.max_store_bytes and len(rest) > 1:
            drop.append(rest.pop(0))
            size = int(size * (len(rest) / (len(rest) + 1)))
        if not drop:
            return ()
        for ref in drop:
            with contextlib.suppress(OSError):
                ref.unlink()
        # Loose objects written in-process for edits are reachable from no ref:
        # keep two weeks of them, as git's own default does.
        await self._check(
            ["gc", "--quiet", "--prune=2.weeks.ago"], "prune the checkpoint store", tolerate=True
        )
        self._manifests.clear()
        return tuple(ref.name for ref in drop)

    # -- git -----------------------------------------------------------------

    def _drop_partial_writes(self) -> None:
        _drop_partial_writes_in(self.directory, self.git_dir)

    async def _check(
        self,
        args: list[str],
        what: str,
        *,
        git: Git | None = None,
        tolerate: bool = False,
        max_bytes: int = 16 * 1024 * 1024,
        warnings: list[str] | None = None,
    ) -> str:
        runner = git or self.git
        try:
            result = await runner.run(
                args, cwd=self.workspace.root, max_bytes=max_bytes, timeout=600.0
            )
        except GitError as exc:
            raise SnapshotError(f"Could not {what}: {exc.message}") from None
        if warnings is not None:
            warnings.append(result.stderr)
        full = any(sign in result.stderr for sign in _DISK_FULL)
        if (
            full
            or result.timed_out
            or result.stdout_truncated
            or (result.returncode != 0 and not tolerate)
        ):
            # A full disk is never tolerated: a snapshot missing what git could
            # not write would look whole.
            detail = (result.stderr.strip() or result.stdout.strip())[-1000:]
            if full:
                self._drop_partial_writes()
                raise SnapshotError(
                    f"Could not {what}: the disk holding the checkpoint store "
                    f"({self.directory}) is full. Free space, or build the toolkit with "
                    f"checkpoints=False."
                )
            raise SnapshotError(f"Could not {what} (git exit {result.returncode}: {detail}).")
        return result.stdout


_UNLISTED = re.compile(r"could not open directory '(.*?)/?': ")
"""git's warning for a folder it cannot list (it goes on, as if the folder were empty)."""

_DISK_FULL = ("No space left", "Out of diskspace", "ENOSPC")
"""How git says the disk is full."""


def _drop_partial_writes_in(directory: Path, git_dir: Path) -> None:
    """Remove what a git killed by a full disk left half-written (the caller holds the lock).

    Its temporary objects and packs and its index lock, and the store's own
    scratch files: none is referenced, and each holds space the next
    snapshot needs. Complete objects stay (they are valid, and shared).
    """
    for dirpath, _dirs, files in os.walk(git_dir / "objects"):
        for name in files:
            if name.startswith(("tmp_", ".tmp-")):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(dirpath, name))
    for lock in (directory / "index.lock", git_dir / "index.lock"):
        with contextlib.suppress(OSError):
            lock.unlink()
    scratch = directory / "tmp"
    with contextlib.suppress(OSError):
        for child in scratch.iterdir():
            if child.is_dir():
                _remove_tree(child)
            else:
                child.unlink()


def _store_isolation(
    isolation: Isolation | None, directory: Path, readable: tuple[Path, ...]
) -> Isolation | None:
    """The toolkit's confinement for the snapshot git (`snapshot_isolation`), its store made."""
    if isolation is None or not isolation.confined:
        return isolation
    directory.mkdir(parents=True, exist_ok=True)
    return snapshot_isolation(isolation, directory, readable)


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def valid_path(path: str) -> bool:
    """Whether a snapshot path may be captured or restored at all.

    Refused: an empty, absolute or dotted component, and any component that
    is ``.git`` in any letter case or with trailing dots or spaces (the names
    case-insensitive or Windows-like file systems treat as ``.git``).
    """
    if not path or path.startswith("/") or "\0" in path:
        return False
    for part in path.split("/"):
        if part in ("", ".", ".."):
            return False
        if part.casefold().rstrip(". ") == ".git" or part.casefold().startswith("git~"):
            return False
    return True


def _beneath_links(root: Path, paths: Iterable[str]) -> list[str]:
    """The `paths` with a link among their parent folders (each folder checked once)."""
    links: dict[str, bool] = {}
    found: list[str] = []
    for path in paths:
        prefix = ""
        for part in path.split("/")[:-1]:
            prefix = f"{prefix}/{part}" if prefix else part
            known = links.get(prefix)
            if known is None:
                known = links[prefix] = os.path.islink(root / prefix)
            if known:
                found.append(path)
                break
    return found


def _lexists(path: Path) -> bool:
    """`os.path.lexists`, for the async listing (one ``lstat``, as `_uncapturable` makes)."""
    return os.path.lexists(path)


def _now_ns() -> int:
    return time.time_ns()


def _changed_after(path: Path, started: int) -> bool:
    try:
        return os.lstat(path).st_mtime_ns > started
    except OSError:
        return False


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _write_bytes(path: Path, data: bytes) -> None:
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(temp, "wb") as handle:
            handle.write(data)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


def _write_text(path: Path, text: str) -> None:
    with contextlib.suppress(OSError):
        if path.read_text(encoding="utf-8") == text:
            return
    _write_bytes(path, text.encode("utf-8"))


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _folder_bytes(folder: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _walk(top: str) -> Iterator[tuple[str, list[str], list[str]]]:
    """`os.walk(top)` (top-down, links to folders listed but not entered), without recursion.

    Python 3.11's `os.walk` recurses once per level, so a tree a confined
    command nested a thousand folders deep raised `RecursionError` out of
    every snapshot taken for a rewind. A folder that cannot be listed (one
    nested past ``PATH_MAX``) is left out, as `os.walk` leaves it.
    """
    stack = [top]
    while stack:
        folder = stack.pop()
        dirs: list[str] = []
        files: list[str] = []
        links: set[str] = set()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        is_dir = False
                    (dirs if is_dir else files).append(entry.name)
                    if is_dir and entry.is_symlink():
                        links.add(entry.name)
        except OSError:
            continue
        yield folder, dirs, files
        # The caller may prune `dirs` (a nested repository), as with `os.walk`.
        stack.extend(os.path.join(folder, d) for d in reversed(dirs) if d not in links)


def _remove_tree(folder: Path) -> None:
    """Remove `folder` and what it holds, at any depth; a link is removed, never followed.

    Through `_walk`, not ``os.walk``: a sandbox's worktree is what confined
    commands wrote, and a tree nested a thousand deep made the recursive
    walk raise `RecursionError` out of the sandbox's cleanup.
    """
    folders: list[str] = []
    for dirpath, dirs, files in _walk(str(folder)):
        folders.append(dirpath)
        for name in (*files, *(d for d in dirs if os.path.islink(os.path.join(dirpath, d)))):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(dirpath, name))
    # `_walk` lists each folder before the folders in it: reversed, each goes after its own.
    for dirpath in reversed(folders):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)

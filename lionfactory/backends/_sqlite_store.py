"""`SqliteBranchStore`: branches in one SQLite file, the embedded default.

The standard library's sqlite3, in WAL mode: readers never block the writer
and the writer never blocks readers, and a save is one write transaction
(``BEGIN IMMEDIATE``, version check, write, commit). SQLite makes that
transaction atomic and durable against a crashed process: a save killed at
any point leaves the previous version, whole. Several processes may share
the file; a writer waits for another's transaction (up to `busy_timeout`
seconds) instead of failing. ``synchronous=NORMAL``: in WAL mode a process
crash loses nothing committed; only a power cut may lose the last commits
(never corrupt the file), the usual trade for a write without an fsync.

Every call runs in an anyio worker thread. Connections are made with
``check_same_thread=False`` and kept in a small pool, one per thread at a
time, because opening a connection per call costs more than a small save.
A network file system is not supported (SQLite's locking needs a local one).
"""

from __future__ import annotations

import os
import queue
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio

from lionfactory.backends._store import BranchStore, StoredBranch, timestamp
from lionfactory.errors import ConflictError, UnknownBranchError

__all__ = ["SqliteBranchStore"]

T = TypeVar("T")

# `deleted`: a deleted branch keeps its row, without data, so that its id's
# versions go on from where they were when a branch of that id is saved
# again. A writer still holding a copy from before the delete then meets a
# version it never saw and gets a conflict, instead of overwriting the new
# branch because the numbering restarted at 1.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS branches (
    id TEXT PRIMARY KEY,
    name TEXT,
    version INTEGER NOT NULL,
    saved_at REAL NOT NULL,
    data BLOB NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0
)
"""


class SqliteBranchStore(BranchStore):
    """Branches saved in a SQLite file (made on first use), safe across processes.

    Example::

        store = SqliteBranchStore("branches.db")
        await store.save(branch)
        again = await store.load(branch.id)

    Args:
        path: the database file; its directory must exist.
        busy_timeout: seconds a save waits for another process's transaction.

    Raises:
        ValueError: the directory does not exist.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> None:
        super().__init__()
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise ValueError(f"the directory of the store file must exist, got {str(path)!r}")
        self.busy_timeout = busy_timeout
        self._pool: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._ready = False

    def __repr__(self) -> str:
        return f"SqliteBranchStore({str(self.path)!r})"

    async def list(self) -> list[StoredBranch]:
        """Every stored branch, oldest save first."""
        rows = await self._run(
            lambda db: db.execute(
                "SELECT id, name, version, saved_at FROM branches WHERE deleted = 0"
                " ORDER BY saved_at, id"
            ).fetchall()
        )
        return [StoredBranch(uuid.UUID(i), n, v, timestamp(t)) for i, n, v, t in rows]

    async def aclose(self) -> None:
        """Close the pooled connections."""
        while True:
            try:
                self._pool.get_nowait().close()
            except queue.Empty:
                return

    # -- backend -------------------------------------------------------------

    async def _write(
        self, branch_id: uuid.UUID, name: str | None, expected: int, data: bytes
    ) -> int:
        def write(db: sqlite3.Connection) -> int:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT version, deleted FROM branches WHERE id = ?", (str(branch_id),)
                ).fetchone()
                last = 0 if row is None else int(row[0])
                live = 0 if row is None or row[1] else last
                if live != expected:
                    raise ConflictError(branch_id, expected, live)
                db.execute(
                    "INSERT INTO branches (id, name, version, saved_at, data, deleted)"
                    " VALUES (?, ?, ?, ?, ?, 0) ON CONFLICT(id) DO UPDATE SET"
                    " name = excluded.name, version = excluded.version,"
                    " saved_at = excluded.saved_at, data = excluded.data, deleted = 0",
                    (str(branch_id), name, last + 1, time.time(), data),
                )
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return last + 1

        return await self._run(write)

    async def _read(self, branch_id: uuid.UUID) -> tuple[int, bytes]:
        row = await self._run(
            lambda db: db.execute(
                "SELECT version, data FROM branches WHERE id = ? AND deleted = 0",
                (str(branch_id),),
            ).fetchone()
        )
        if row is None:
            raise UnknownBranchError(branch_id)
        return int(row[0]), bytes(row[1])

    async def _version(self, branch_id: uuid.UUID) -> int:
        row = await self._run(
            lambda db: db.execute(
                "SELECT version FROM branches WHERE id = ? AND deleted = 0", (str(branch_id),)
            ).fetchone()
        )
        return 0 if row is None else int(row[0])

    async def _delete(self, branch_id: uuid.UUID) -> bool:
        def delete(db: sqlite3.Connection) -> bool:
            with db:
                cursor = db.execute(
                    "UPDATE branches SET deleted = 1, data = X'', name = NULL"
                    " WHERE id = ? AND deleted = 0",
                    (str(branch_id),),
                )
            return cursor.rowcount > 0

        return await self._run(delete)

    # -- connections -----------------------------------------------------------

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        def call() -> T:
            with self._connection() as db:
                return work(db)

        return await anyio.to_thread.run_sync(call)

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        try:
            db = self._pool.get_nowait()
        except queue.Empty:
            db = self._connect()
        try:
            yield db
        except BaseException:
            db.close()  # its state is unknown; the next call makes a fresh one
            raise
        self._pool.put(db)

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE
        # takes the write lock up front, so the version check and the write
        # cannot interleave with another writer's).
        db = sqlite3.connect(
            self.path, timeout=self.busy_timeout, isolation_level=None, check_same_thread=False
        )
        try:
            if not self._ready:
                _prepare(db)
                self._ready = True
            db.execute("PRAGMA synchronous=NORMAL")
            # A page cache that holds a long branch (16 MiB, some 40,000
            # messages; the default 2 MiB holds about 5,000): a load after a
            # save then reads its pages from memory instead of making a
            # system call per 4 KiB page, half the read's time. SQLite takes
            # the memory as pages are used, not up front.
            db.execute("PRAGMA cache_size=-16384")
        except BaseException:
            db.close()
            raise
        return db


def _prepare(db: sqlite3.Connection) -> None:
    """WAL mode (a property of the file, kept once set) and the table."""
    mode: Any = db.execute("PRAGMA journal_mode=WAL").fetchone()
    if mode is None or str(mode[0]).lower() != "wal":
        raise sqlite3.OperationalError(f"cannot switch the store to WAL mode (got {mode!r})")
    db.execute(_SCHEMA)
    columns = {row[1] for row in db.execute("PRAGMA table_info(branches)")}
    if "deleted" not in columns:  # a file made before deletes kept their versions
        db.execute("ALTER TABLE branches ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0")

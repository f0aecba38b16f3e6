"""`RedisBranchStore`: branches in Redis, shared by every process and machine that reaches it.

Layout, under the key prefix `namespace`: ``<ns>:branch:<id>`` is a hash
(``version``, ``name``, ``saved_at``, ``data``) and ``<ns>:branches`` a
sorted set of the ids by save time. A save is one Lua script (version
check, write, index), which Redis runs atomically, so two writers racing
from the same version cannot both win.

Like `RedisExchange`, it runs redis-py's synchronous client in anyio worker
threads: its asyncio client cannot run under trio.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from lionfactory.backends._redis_exchange import connect
from lionfactory.backends._store import BranchStore, StoredBranch, timestamp
from lionfactory.errors import ConfigurationError, ConflictError, UnknownBranchError

if TYPE_CHECKING:
    import redis

__all__ = ["RedisBranchStore"]

logger = logging.getLogger("lionfactory")

T = TypeVar("T")

_READ_SIZE = 1 << 20

# KEYS: the branch hash, the index. ARGV: expected version, id, name ("" with
# ARGV[6] = "0" for None), saved_at, data, has-name. Returns the new version,
# or -(live version) - 1 on a conflict. A deleted branch keeps its hash with
# ``deleted`` set and no data, so a branch saved again under its id goes on
# numbering from its last version (see `_DELETE`).
_SAVE = """
local last = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
local live = last
if redis.call('HEXISTS', KEYS[1], 'deleted') == 1 then live = 0 end
if live ~= tonumber(ARGV[1]) then return -live - 1 end
local version = last + 1
redis.call('HDEL', KEYS[1], 'deleted')
redis.call('HSET', KEYS[1], 'version', version, 'saved_at', ARGV[4], 'data', ARGV[5])
if ARGV[6] == '1' then
  redis.call('HSET', KEYS[1], 'name', ARGV[3])
else
  redis.call('HDEL', KEYS[1], 'name')
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
return version
"""

# KEYS: the branch hash, the index. ARGV: id. Keeps the version (a tombstone),
# so a writer holding a copy from before the delete meets a newer version
# once the id is saved again, and gets a conflict instead of overwriting the
# new branch. Returns 1 if a live branch was deleted.
_DELETE = """
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'deleted') == 1 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 0
end
redis.call('HDEL', KEYS[1], 'data', 'name', 'saved_at')
redis.call('HSET', KEYS[1], 'deleted', '1')
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""


class RedisBranchStore(BranchStore):
    """Branches saved in Redis, for workers and server replicas on several machines.

    Example, a worker taking up a branch another machine saved::

        async with RedisBranchStore("redis://10.0.0.5:6379/0") as store:
            branch = await store.load(branch_id, resources={"chat_model": model})
            await branch.run("Carry on.")
            await store.save(branch)

    Args:
        url: a Redis URL, as redis-py's ``Redis.from_url`` takes it.
        client: an existing ``redis.Redis`` client instead of `url`.
        namespace: the key prefix (stores with different ones never meet).

    Raises:
        ValueError: neither or both of `url` and `client`, or a namespace that
            is empty or holds ':'.
        ImportError: redis-py is missing (``pip install 'lionfactory[redis]'``).
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: redis.Redis | None = None,
        namespace: str = "lionfactory",
    ) -> None:
        super().__init__()
        # Replies read a mebibyte at a time: a stored branch is megabytes, and
        # redis-py's default 64 KiB reads made loading 10,000 messages wait on
        # some 60 socket reads (1.7 ms instead of 5 on a busy machine). The
        # buffer is one per connection; the exchange, whose replies are
        # small, keeps the default.
        self._client = connect(url, client, namespace, socket_read_size=_READ_SIZE)
        self.namespace = namespace
        self._index = f"{namespace}:branches"
        self._save = self._client.register_script(_SAVE)
        self._delete_script = self._client.register_script(_DELETE)

    def __repr__(self) -> str:
        return f"RedisBranchStore(namespace={self.namespace!r})"

    async def list(self) -> list[StoredBranch]:
        """Every stored branch, oldest save first."""

        def read() -> list[StoredBranch]:
            members: list[bytes] = self._client.zrange(self._index, 0, -1)  # type: ignore[assignment]
            ids: list[uuid.UUID] = []
            bad: list[bytes] = []
            for raw in members:
                try:
                    ids.append(uuid.UUID(raw.decode()))
                except (UnicodeDecodeError, ValueError):
                    bad.append(raw)
            pipe = self._client.pipeline(transaction=False)
            for branch_id in ids:
                pipe.hmget(self._key(branch_id), "name", "version", "saved_at", "deleted")
            out = []
            for branch_id, (name, version, saved_at, deleted) in zip(
                ids, pipe.execute(), strict=True
            ):
                if version is None or deleted is not None:
                    continue  # deleted between the two reads
                try:
                    entry = StoredBranch(
                        branch_id,
                        None if name is None else name.decode(),
                        int(version),
                        timestamp(float(saved_at)),
                    )
                except (UnicodeDecodeError, ValueError, TypeError, OverflowError, OSError):
                    bad.append(str(branch_id).encode())
                    continue
                out.append(entry)
            if bad:
                # Another program wrote them: one bad entry must not hide the others.
                logger.warning(
                    "RedisBranchStore %r: skipped %d malformed index entr%s: %s",
                    self.namespace,
                    len(bad),
                    "y" if len(bad) == 1 else "ies",
                    ", ".join(repr(b[:80]) for b in bad[:5]),
                )
            return out

        return await self._thread(read)

    async def aclose(self) -> None:
        """Close the client's connections."""
        self._client.close()

    # -- backend -------------------------------------------------------------

    async def _write(
        self, branch_id: uuid.UUID, name: str | None, expected: int, data: bytes
    ) -> int:
        args: list[Any] = [expected, str(branch_id), name or "", repr(time.time()), data]
        args.append("0" if name is None else "1")
        outcome = int(
            await self._thread(self._save, keys=[self._key(branch_id), self._index], args=args)
        )
        if outcome < 0:
            raise ConflictError(branch_id, expected, -outcome - 1)
        return outcome

    async def _read(self, branch_id: uuid.UUID) -> tuple[int, bytes]:
        version, data = await self._thread(
            self._client.hmget, self._key(branch_id), "version", "data"
        )
        if version is None or data is None:
            raise UnknownBranchError(branch_id)
        try:
            return int(version), data if isinstance(data, bytes) else data.encode()
        except ValueError:
            raise ConfigurationError(
                f"the stored branch {branch_id} is malformed (version {version!r:.40})"
            ) from None

    async def _version(self, branch_id: uuid.UUID) -> int:
        version, deleted = await self._thread(
            self._client.hmget, self._key(branch_id), "version", "deleted"
        )
        return 0 if version is None or deleted is not None else int(version)

    async def _delete(self, branch_id: uuid.UUID) -> bool:
        keys = [self._key(branch_id), self._index]
        return bool(await self._thread(self._delete_script, keys=keys, args=[str(branch_id)]))

    def _key(self, branch_id: uuid.UUID) -> str:
        return f"{self.namespace}:branch:{branch_id}"

    @staticmethod
    async def _thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

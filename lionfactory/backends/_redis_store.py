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
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from lionfactory.backends._redis_exchange import connect
from lionfactory.backends._store import BranchStore, StoredBranch, timestamp
from lionfactory.errors import ConflictError, UnknownBranchError

if TYPE_CHECKING:
    import redis

__all__ = ["RedisBranchStore"]

T = TypeVar("T")

# KEYS: the branch hash, the index. ARGV: expected version, id, name ("" with
# ARGV[6] = "0" for None), saved_at, data, has-name. Returns the new version,
# or -(found version) - 1 on a conflict.
_SAVE = """
local found = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if found ~= tonumber(ARGV[1]) then return -found - 1 end
local version = found + 1
redis.call('HSET', KEYS[1], 'version', version, 'saved_at', ARGV[4], 'data', ARGV[5])
if ARGV[6] == '1' then
  redis.call('HSET', KEYS[1], 'name', ARGV[3])
else
  redis.call('HDEL', KEYS[1], 'name')
end
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[2])
return version
"""


class RedisBranchStore(BranchStore):
    """Branches saved in Redis, for workers and server replicas on several machines.

    Example::

        store = RedisBranchStore("redis://127.0.0.1:6379/0")
        await store.save(branch)
        again = await store.load(branch.id)

    Args:
        url: a Redis URL, as redis-py's ``Redis.from_url`` takes it.
        namespace: the key prefix (stores with different ones never meet).
        client: an existing ``redis.Redis`` client instead of `url`.

    Raises:
        ImportError: redis-py is missing (``pip install 'lionfactory[redis]'``).
        ValueError: an empty namespace, or neither/both of `url` and `client`.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        namespace: str = "lionfactory",
        client: redis.Redis | None = None,
    ) -> None:
        super().__init__()
        self._client = connect(url, client, namespace)
        self.namespace = namespace
        self._index = f"{namespace}:branches"
        self._save = self._client.register_script(_SAVE)

    def __repr__(self) -> str:
        return f"RedisBranchStore(namespace={self.namespace!r})"

    async def list(self) -> list[StoredBranch]:
        """Every stored branch, oldest save first."""

        def read() -> list[StoredBranch]:
            ids: list[bytes] = self._client.zrange(self._index, 0, -1)  # type: ignore[assignment]
            pipe = self._client.pipeline(transaction=False)
            for raw in ids:
                pipe.hmget(self._key(uuid.UUID(raw.decode())), "name", "version", "saved_at")
            out = []
            for raw, (name, version, saved_at) in zip(ids, pipe.execute(), strict=True):
                if version is None:
                    continue  # deleted between the two reads
                out.append(
                    StoredBranch(
                        uuid.UUID(raw.decode()),
                        None if name is None else name.decode(),
                        int(version),
                        timestamp(float(saved_at)),
                    )
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
        return int(version), data if isinstance(data, bytes) else data.encode()

    async def _version(self, branch_id: uuid.UUID) -> int:
        version = await self._thread(self._client.hget, self._key(branch_id), "version")
        return 0 if version is None else int(version)

    async def _delete(self, branch_id: uuid.UUID) -> bool:
        def delete() -> bool:
            pipe = self._client.pipeline()
            pipe.delete(self._key(branch_id))
            pipe.zrem(self._index, str(branch_id))
            removed, _ = pipe.execute()
            return bool(removed)

        return await self._thread(delete)

    def _key(self, branch_id: uuid.UUID) -> str:
        return f"{self.namespace}:branch:{branch_id}"

    @staticmethod
    async def _thread(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

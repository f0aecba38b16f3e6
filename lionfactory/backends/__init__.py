"""Backends for work beyond one process: an exchange on Redis, stores for branches.

* `RedisExchange`: the `Exchange` contract (mailboxes between branches) on
  Redis Streams, shared by any number of processes and machines.
  `BaseExchange` is the contract both implement.
* `BranchStore`: save and load branches by id, with optimistic concurrency
  (`lionfactory.errors.ConflictError`). `SqliteBranchStore` is embedded (one
  file, the standard library's sqlite3); `RedisBranchStore` is shared over
  the network. `open_store(url)` picks one from a URL.

What a store or a stream holds was written by whoever can reach it, so it
is read as untrusted input: a stored branch is restored only through the
factory registry (`lionfactory.register_factory`), and a stream entry that
is not a message goes to a dead-letter stream instead of blocking the inbox.

Redis needs the ``redis`` extra (``pip install 'lionfactory[redis]'``); it
is imported only when a Redis backend is built.
"""

from lionfactory._exchange import BaseExchange
from lionfactory.backends._redis_exchange import RedisExchange
from lionfactory.backends._redis_store import RedisBranchStore
from lionfactory.backends._sqlite_store import SqliteBranchStore
from lionfactory.backends._store import BranchStore, StoredBranch

__all__ = [
    "BaseExchange",
    "BranchStore",
    "RedisBranchStore",
    "RedisExchange",
    "SqliteBranchStore",
    "StoredBranch",
    "open_store",
]


def open_store(url: str, *, namespace: str = "lionfactory") -> SqliteBranchStore | RedisBranchStore:
    """A branch store from a URL: ``sqlite:///path.db`` or ``redis://host:port/db``.

    Args:
        url: ``sqlite:///relative.db``, ``sqlite:////absolute/path.db``, or a
            Redis URL (``redis://``, ``rediss://``, ``unix://``).
        namespace: the key prefix for Redis.

    Raises:
        ValueError: any other scheme, or a sqlite URL without a path.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a string, got {url!r:.200}")
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if not path:
            raise ValueError(
                f"a sqlite store URL needs a file path (sqlite:///path.db), got {url!r}"
            )
        return SqliteBranchStore(path)
    if url.startswith(("redis://", "rediss://", "unix://")):
        return RedisBranchStore(url, namespace=namespace)
    raise ValueError(
        f"unknown store URL {url!r}: use sqlite:///path.db (a file on this machine) or "
        f"redis://host:port/db (shared)"
    )

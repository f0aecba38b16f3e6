"""Backends for work beyond one process: an exchange on Redis, stores for branches.

* `RedisExchange`: the `Exchange` contract (mailboxes between branches) on
  Redis Streams, shared by any number of processes and machines.
* `BranchStore`: save and load branches by id, with optimistic concurrency
  (`ConflictError`). `SqliteBranchStore` is embedded (one file, the standard
  library's sqlite3); `RedisBranchStore` is shared over the network.
  `open_store(url)` picks one from a URL.

Redis needs the ``redis`` extra (``pip install 'lionfactory[redis]'``); it
is imported only when a Redis backend is built.
"""

from lionfactory._exchange import BaseExchange
from lionfactory.backends._redis_exchange import RedisExchange

__all__ = [
    "BaseExchange",
    "RedisExchange",
]

"""`RedisExchange`: the exchange contract across processes and machines, on Redis Streams.

Layout, under one key prefix (the `namespace`):

* ``<ns>:owners``: a sorted set of the registered owners, scored by
  registration order (``<ns>:seq`` counts);
* ``<ns>:inbox:<owner>``: the owner's mailbox, a Redis Stream with one
  consumer group. An entry holds the message id and its JSON.

Why Streams: an entry handed to a consumer stays in the group's pending list
until it is acknowledged, and the same consumer reading from id ``0`` gets
its pending entries back, first and in order. That is at-least-once delivery
with ids, kept by the server, so a process that dies between reading and
acknowledging loses nothing: its successor (the same owner) reads them again.
Acknowledged entries are deleted, so a stream holds only unconsumed mail.

Untrusted entries: anyone who reaches the server can append to a stream.
An entry that is not a message (no payload, invalid JSON, not a `Message`)
is moved to ``<ns>:deadletter:<owner>`` (a stream keeping the newest
10,000, each with the entry's id, payload and the reason), acknowledged and
deleted, so it never blocks the good mail around it; `take_rejected` reports
each one once, and the messenger tool puts the count in its response.

Each operation is one round trip: sending checks both owners and appends in
one Lua script (a broadcast appends to every inbox in that same script, so
it reaches all or none), receiving reads the pending and the new entries
(and, when consuming, acknowledges and deletes them) in another, and
`unregister` reads and deletes the inbox and the owner in a third, so no
send can land between the two. A capped receive or peek reads only what it
returns (``COUNT``), and `count` is ``XLEN``, so draining a large inbox in
capped receives costs what it takes.

Concurrency: redis-py's asyncio client cannot run under trio, so the async
methods run the synchronous client in anyio worker threads (a second client
for asyncio alone would be a second implementation of every operation). The
hop is not free: on a busy two-core machine a send plus a receive through
the async methods costs about twice the synchronous calls, and the same as a
raw redis-py loop run in worker threads, which is what any trio code must do;
``tests/benchmarks/bench_exchange.py`` measures all three.
The client's connection pool is thread-safe, so one `RedisExchange` may be
shared by every task and thread of a process.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import pydantic

from lionfactory._exchange import BaseExchange, check_timeout, owner_id, sender_filter
from lionfactory._messages import Message
from lionfactory.backends._redis_scripts import (
    ACK,
    COUNT,
    DEAD_LETTER,
    PEEK,
    RECEIVE,
    SEND,
    UNREGISTER,
)
from lionfactory.errors import UnknownOwnerError

if TYPE_CHECKING:
    import redis

__all__ = ["RedisExchange"]

logger = logging.getLogger("lionfactory")

T = TypeVar("T")

_GROUP = "lionfactory"
_CONSUMER = "owner"
# How long one blocking read in `wait` may hold a worker thread: a cancelled
# wait abandons its thread, which then returns within this bound.
_BLOCK_MS = 1000


class RedisExchange(BaseExchange):
    """Mailboxes between branches in any number of processes, on Redis Streams.

    The same contract as `Exchange`: per-owner inboxes, delivery at once,
    per-sender order, broadcast, `peek`/`receive`/`wait`, and at-least-once
    delivery with ids (``receive(..., ack=False)`` then `ack`). Pass it to
    `messenger_tool` exactly like an `Exchange`.

    Example::

        exchange = RedisExchange("redis://127.0.0.1:6379/0", namespace="team-a")
        exchange.register(alice.id)
        exchange.register(bob.id)
        exchange.send(alice.id, bob.id, "the tests pass")
        [message] = exchange.receive(bob.id)

    An owner is one consumer: run each branch in one process at a time. Two
    processes receiving for the same owner would split its mail between them.

    Args:
        url: a Redis URL (``redis://host:port/db``, ``rediss://``,
            ``unix://``), as redis-py's ``Redis.from_url`` takes it.
        namespace: the key prefix; exchanges with different namespaces on
            one server never see each other's owners or mail.
        client: an existing ``redis.Redis`` client to use instead of `url`
            (it must not decode responses).

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
        self._client = connect(url, client, namespace)
        self.namespace = namespace
        self._owners_key = f"{namespace}:owners"
        self._seq_key = f"{namespace}:seq"
        self._prefix = f"{namespace}:inbox:"
        self._send_script = self._client.register_script(SEND)
        self._receive_script = self._client.register_script(RECEIVE)
        self._ack_script = self._client.register_script(ACK)
        self._peek_script = self._client.register_script(PEEK)
        self._count_script = self._client.register_script(COUNT)
        self._unregister_script = self._client.register_script(UNREGISTER)
        self._dead_letter_script = self._client.register_script(DEAD_LETTER)
        # Malformed entries set aside per owner and not reported yet (this process).
        self._rejected: dict[uuid.UUID, int] = {}
        self._rejected_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RedisExchange(namespace={self.namespace!r})"

    def close(self) -> None:
        """Close the client's connections (the exchange may not be used after)."""
        self._client.close()

    # -- owners --------------------------------------------------------------

    def register(self, owner: uuid.UUID) -> None:
        """Give `owner` an inbox; registering twice (from any process) is harmless."""
        import redis

        key = self._inbox(owner_id(owner, "owner"))
        try:
            self._client.xgroup_create(key, _GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        if self._client.zscore(self._owners_key, str(owner)) is None:
            order = self._client.incr(self._seq_key)
            self._client.zadd(self._owners_key, {str(owner): order}, nx=True)

    def unregister(self, owner: uuid.UUID) -> list[Message]:
        """Remove `owner`'s inbox and return the messages still in it, pending ones first.

        Raises:
            UnknownOwnerError: `owner` is not registered.
        """
        key = self._inbox(owner_id(owner, "owner"))
        flat = self._unregister_script(keys=[self._owners_key, key], args=[str(owner)])
        if flat == -1:
            raise UnknownOwnerError(owner, "owner")
        pairs = list(zip(flat[0::2], flat[1::2], strict=True))
        return self._messages(owner, pairs, gone=True)

    def __contains__(self, owner: object) -> bool:
        if not isinstance(owner, uuid.UUID):
            return False
        return self._client.zscore(self._owners_key, str(owner)) is not None

    @property
    def owners(self) -> tuple[uuid.UUID, ...]:
        """The registered owners, in registration order."""
        members: list[bytes] = self._client.zrange(self._owners_key, 0, -1)  # type: ignore[assignment]
        return tuple(uuid.UUID(o.decode()) for o in members)

    # -- mail ----------------------------------------------------------------

    def _deliver(self, message: Message, sender: uuid.UUID, recipient: uuid.UUID | None) -> None:
        # Registration is checked by the script, atomically with the delivery.
        outcome = self._send_script(
            keys=[self._owners_key],
            args=[
                self._prefix,
                str(sender),
                "" if recipient is None else str(recipient),
                message.id,
                message.model_dump_json(),
            ],
        )
        if outcome == 1:
            raise UnknownOwnerError(sender, "sender")
        if outcome == 2:
            assert recipient is not None
            raise UnknownOwnerError(recipient, "recipient")

    def _receive(
        self, owner: uuid.UUID, sender: str | None, ack: bool, limit: int | None
    ) -> list[Message]:
        """Pending first, then new, as `BaseExchange.receive` says.

        A receive filtered by sender or capped by `limit` delivers everything
        new into the pending list and acknowledges only what it returns, so
        the rest comes back, in order, on the next receive.
        """
        # A filtered receive reads everything (the filter runs here); an
        # unfiltered one reads at most `limit`, and consumes in the script.
        consume = ack and sender is None
        messages: list[Message] = []
        while True:
            room = None if sender is not None or limit is None else limit - len(messages)
            entries = self._call(
                owner,
                self._receive_script,
                _GROUP,
                _CONSUMER,
                "1" if consume else "0",
                str(room or 0),
            )
            parsed = self._messages(owner, entries)
            messages.extend(parsed)
            # Malformed entries took room a capped read had: read on for it.
            if room is None or len(parsed) == len(entries) or len(messages) >= (limit or 0):
                break
        if sender is not None:
            messages = [m for m in messages if m.sender == sender]
        if limit is not None:
            messages = messages[:limit]
        if ack and not consume and messages:
            self.ack(owner, [m.id for m in messages])
        return messages

    def _peek(self, owner: uuid.UUID, sender: str | None, limit: int | None) -> list[Message]:
        """Without delivering anything: the new entries stay new."""
        return self._peek_from(owner, sender, limit)[1]

    def _count(self, owner: uuid.UUID, sender: str | None) -> int:
        """Without `sender`, one ``XLEN``; with it, the inbox is read."""
        if sender is not None:
            return len(self._peek(owner, sender, None))
        return int(self._call(owner, self._count_script))

    def take_rejected(self, owner: uuid.UUID) -> int:
        """How many malformed entries of `owner` this process set aside since the last call."""
        with self._rejected_lock:
            return self._rejected.pop(owner, 0)

    def ack(self, owner: uuid.UUID, message_ids: Iterable[str]) -> None:
        """Consume pending messages of `owner` by id; ids not pending are ignored.

        Raises:
            UnknownOwnerError: `owner` is not registered.
        """
        ids = [str(i) for i in message_ids]
        if ids:
            self._call(owner, self._ack_script, _GROUP, _CONSUMER, *ids)

    async def wait(
        self, owner: uuid.UUID, timeout: float | None = None, *, sender: uuid.UUID | None = None
    ) -> bool:
        """Sleep until `owner` has mail (from `sender`), or `timeout` seconds pass.

        Blocks on the stream in a worker thread (``XREAD BLOCK`` from the
        newest entry seen), so mail wakes it at once; nothing is polled.

        Raises:
            UnknownOwnerError: `owner` is not registered.
            ValueError: a negative or NaN timeout.
        """
        check_timeout(timeout)
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        key = self._inbox(owner_id(owner, "owner"))
        wanted = sender_filter(sender)
        first = True
        while True:
            try:
                last, waiting = await self._offload(
                    self._peek_from, owner, wanted, None if wanted is not None else 1
                )
            except UnknownOwnerError:
                if first:
                    raise
                return False  # unregistered while we waited
            first = False
            if waiting:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            block = _BLOCK_MS if left > _BLOCK_MS / 1000 else max(1, math.ceil(left * 1000))
            await self._offload(self._client.xread, {key: last}, count=1, block=block)

    # -- internals -----------------------------------------------------------

    def _inbox(self, owner: uuid.UUID) -> str:
        return f"{self._prefix}{owner}"

    def _peek_from(
        self, owner: uuid.UUID, wanted: str | None, limit: int | None = None
    ) -> tuple[bytes, list[Message]]:
        cap = "0" if wanted is not None or limit is None else str(limit)
        while True:
            last, *flat = self._call(owner, self._peek_script, _GROUP, _CONSUMER, cap)
            entries = list(zip(flat[0::2], flat[1::2], strict=True))
            messages = self._messages(owner, entries)
            # Malformed entries are gone now; a capped look is taken again to fill up.
            if cap == "0" or len(messages) == len(entries):
                break
        if wanted is not None:
            messages = [m for m in messages if m.sender == wanted]
            if limit is not None:
                messages = messages[:limit]
        return last, messages

    def _messages(
        self, owner: uuid.UUID, entries: list[Any], *, gone: bool = False
    ) -> list[Message]:
        """Parse (stream id, payload) entries; move the malformed ones to the dead letters.

        Args:
            owner: whose inbox they came from.
            entries: what a script returned.
            gone: the inbox was deleted already (unregister): only record them.
        """
        messages: list[Message] = []
        bad: list[str | bytes] = []
        for entry_id, payload in entries:
            try:
                messages.append(Message.model_validate_json(payload))
            except pydantic.ValidationError as exc:
                reason = "no message payload" if not payload else exc.errors()[0]["msg"][:200]
                bad.extend([entry_id, payload, reason])
        if bad:
            keys = [self._inbox(owner), f"{self.namespace}:deadletter:{owner}"]
            self._dead_letter_script(keys=keys, args=[_GROUP, *bad])
            count = len(bad) // 3
            with self._rejected_lock:
                self._rejected[owner] = self._rejected.get(owner, 0) + count
            logger.warning(
                "RedisExchange %r: moved %d malformed entr%s of %s's inbox to %s%s",
                self.namespace,
                count,
                "y" if count == 1 else "ies",
                owner,
                keys[1],
                " (the inbox was being removed)" if gone else "",
            )
        return messages

    def _call(self, owner: uuid.UUID, script: Any, *args: str) -> Any:
        """Run a script on `owner`'s inbox; a missing inbox is an unknown owner."""
        import redis

        key = self._inbox(owner_id(owner, "owner"))
        try:
            return script(keys=[key], args=list(args))
        except redis.ResponseError as exc:
            if "NOGROUP" in str(exc) or "no such key" in str(exc):
                raise UnknownOwnerError(owner, "owner") from None
            raise

    async def _offload(self, call: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run a blocking client call in a worker thread (see the module's docstring)."""
        # abandon_on_cancel: a cancelled wait must not sit out a blocking read.
        return await anyio.to_thread.run_sync(
            functools.partial(call, *args, **kwargs), abandon_on_cancel=True
        )


def connect(
    url: str | None, client: redis.Redis | None, namespace: object, **options: Any
) -> redis.Redis:
    """The client of a Redis backend: `client`, or a new one for `url` made with `options`.

    The one check of the arguments every Redis backend takes. `options` are
    ``Redis.from_url`` keyword arguments; a `client` passed in is used as it is.

    Raises:
        ValueError: a namespace that is empty or holds ':' (it prefixes every
            key), or neither/both of `url` and `client`.
        ImportError: redis-py is missing, saying which extra to install.
    """
    if not isinstance(namespace, str) or not namespace or ":" in namespace:
        raise ValueError(f"namespace must be a non-empty string without ':', got {namespace!r}")
    if (url is None) == (client is None):
        raise ValueError(f"pass exactly one of url and client, got url={url!r}")
    if client is not None:
        return client
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the Redis backends need redis-py: pip install 'lionfactory[redis]'"
        ) from exc
    return redis.Redis.from_url(url or "", **options)

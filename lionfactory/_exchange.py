"""`Exchange`: mailboxes between branches, and `BaseExchange`, the contract of every backend.

An exchange routes `Message` objects between *owners*, identified by branch
UUIDs. It holds ids and messages only, never `Branch` objects, so a clone
that shares an exchange with its source can never reach the source through
it: a clone is only as connected as the ids it was given.

Delivery is immediate: `send` puts the message into the recipient's inbox
before it returns, so there is no background task to supervise and nothing
to flush. Inboxes are FIFO queues appended to in send order, which keeps the
order of every sender's messages; `receive` consumes, `peek` does not, and
`wait` sleeps on an anyio event until mail arrives (no polling).

At-least-once delivery: ``receive(owner, ack=False)`` hands messages out
without consuming them; they stay *pending* and come back, first and in
order, from every later `receive` until `ack` names their ids. A consumer
that records what it received before acknowledging (the messenger tool does,
on its branch) therefore never loses a message when it stops between the two,
and drops the repeats by id. The in-memory exchange keeps the same contract
as the Redis one (`lionfactory.backends.RedisExchange`), so code written
against one runs on the other.

Concurrency: every mutation is a synchronous method without an ``await``
inside, holding the exchange's lock, so it is atomic both under a
cooperative loop (concurrent senders in a task group) and across threads:
`unregister` takes an inbox away in one step, and a send from another
thread lands either in what it returns or is refused with
`UnknownOwnerError`, never lost. `wait` belongs to the event loop that
created the exchange's waiters: from a worker thread, send to an owner some
task waits on through ``anyio.from_thread.run_sync``, because waking the
waiter sets an event of that loop.

Cost: a capped `receive` (``limit=``) and a capped `peek` cost what they
take, not what is queued, so draining a large inbox in small receives is
linear; `count` is constant-time. Filtering by sender reads the whole inbox.
"""

from __future__ import annotations

import abc
import itertools
import math
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

import anyio
import attrs

from lionfactory._messages import Message
from lionfactory.errors import UnknownOwnerError

__all__ = [
    "BaseExchange",
    "Exchange",
    "check_limit",
    "check_timeout",
    "checked_message",
    "owner_id",
    "sender_filter",
]

T = TypeVar("T")


@attrs.define(eq=False)
class _Waiters:
    """The event the waiters of one inbox sleep on, and how many there are."""

    event: anyio.Event
    count: int = 0


def owner_id(value: Any, role: str) -> uuid.UUID:
    """`value` if it is a UUID, else a TypeError naming its `role`."""
    if isinstance(value, uuid.UUID):
        return value
    raise TypeError(f"{role} must be a branch id (uuid.UUID), got {value!r}")


def check_timeout(timeout: float | None) -> None:
    """Refuse a negative or NaN `wait` timeout."""
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"timeout must be >= 0 seconds or None, got {timeout!r}")


def sender_filter(sender: Any) -> str | None:
    """The id a ``sender=`` filter matches (`Message.sender` holds it as a string), or None."""
    return None if sender is None else str(owner_id(sender, "sender"))


def checked_message(
    sender: uuid.UUID,
    recipient: uuid.UUID | None,
    content: str,
    channel: str,
    metadata: Mapping[str, Any] | None,
) -> Message:
    """The `Message` of a send, once its ids and content are checked (not its owners).

    The part of the send rule every backend shares (`BaseExchange.send` calls
    it); whether the owners are registered is the backend's to check, with
    the delivery (Redis does it atomically in one script).

    Raises:
        TypeError: an id is not a UUID or the content is not a string.
    """
    owner_id(sender, "sender")
    if recipient is not None:
        owner_id(recipient, "recipient")
    if not isinstance(content, str):
        raise TypeError(f"content must be a string, got {content!r:.200}")
    return Message(
        role="user",
        content=content,
        sender=str(sender),
        recipient=None if recipient is None else str(recipient),
        channel=channel,
        metadata=dict(metadata or {}),
    )


class BaseExchange(abc.ABC):
    """What every exchange offers: the contract the messenger tool is written against.

    `send`, `receive`, `peek` and `count` check their arguments here, once for
    every backend (ids are UUIDs, content is a string, a limit is at least
    1), and then call what the backend implements: `_deliver`, `_receive`,
    `_peek` and `_count`, which get the checked values (a sender filter as
    the id string `Message.sender` holds). Whether an owner is registered is
    the backend's to check, with the work it guards.

    The synchronous methods suit scripts and worker threads; the ``a``-prefixed
    coroutines are what async code calls. They run the synchronous method
    through `_offload`, which calls it directly: right for a backend that
    never blocks (the in-memory `Exchange`). A backend that does network I/O
    overrides `_offload` alone to run it off the event loop.
    """

    @abc.abstractmethod
    def register(self, owner: uuid.UUID) -> None:
        """Give `owner` an inbox; registering twice is harmless."""

    @abc.abstractmethod
    def unregister(self, owner: uuid.UUID) -> list[Message]:
        """Remove `owner`'s inbox and return the messages still in it (pending first)."""

    @abc.abstractmethod
    def __contains__(self, owner: object) -> bool: ...

    @property
    @abc.abstractmethod
    def owners(self) -> tuple[uuid.UUID, ...]:
        """The registered owners, in registration order."""

    def send(
        self,
        sender: uuid.UUID,
        recipient: uuid.UUID | None,
        content: str,
        channel: str = "team",
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> Message:
        """Deliver a message to `recipient`'s inbox now, or broadcast it.

        Args:
            sender: the sending owner (must be registered).
            recipient: the receiving owner, or None to broadcast to every
                registered owner except the sender.
            content: the text.
            channel: a label the recipient sees (``"team"`` by default).
            metadata: facts to carry along (the messenger puts the sender's
                display name here).

        Returns:
            The delivered `Message` (role ``user``; `sender` and `recipient`
            are the ids as strings, `recipient` None for a broadcast). A
            broadcast delivers this one immutable message to every inbox.

        Raises:
            UnknownOwnerError: the sender or the recipient is not registered.
            TypeError: an id is not a UUID or the content is not a string.
        """
        message = checked_message(sender, recipient, content, channel, metadata)
        self._deliver(message, sender, recipient)
        return message

    def receive(
        self,
        owner: uuid.UUID,
        *,
        sender: uuid.UUID | None = None,
        ack: bool = True,
        limit: int | None = None,
    ) -> list[Message]:
        """Take the messages waiting for `owner`: pending ones first, then new ones, oldest first.

        Args:
            owner: whose inbox.
            sender: only take this sender's messages; the others stay, in order.
            ack: consume them (the default); False leaves them pending, so
                every `receive` returns them again until `ack` names them.
            limit: take at most this many (the oldest); the rest stay queued
                (or pending) in order.

        Raises:
            UnknownOwnerError: `owner` is not registered.
            ValueError: `limit` is below 1.
        """
        check_limit(limit)
        return self._receive(owner, sender_filter(sender), ack, limit)

    def peek(
        self, owner: uuid.UUID, *, sender: uuid.UUID | None = None, limit: int | None = None
    ) -> list[Message]:
        """What `receive` would return (at most `limit` of it), without taking anything.

        Args:
            owner: whose inbox.
            sender: only this sender's messages.
            limit: at most this many (the oldest).

        Raises:
            UnknownOwnerError: `owner` is not registered.
            ValueError: `limit` is below 1.
        """
        check_limit(limit)
        return self._peek(owner, sender_filter(sender), limit)

    def count(self, owner: uuid.UUID, *, sender: uuid.UUID | None = None) -> int:
        """How many messages wait for `owner` (from `sender`), pending ones included.

        Raises:
            UnknownOwnerError: `owner` is not registered.
        """
        return self._count(owner, sender_filter(sender))

    def take_rejected(self, owner: uuid.UUID) -> int:
        """How many malformed entries of `owner`'s inbox were set aside since the last call.

        A backend that stores messages another program can write (a Redis
        stream) moves an entry that is not a message to a dead-letter place
        instead of failing every receive; this reports each one once. The
        in-memory exchange holds only `Message` objects: always 0.
        """
        return 0

    @abc.abstractmethod
    def ack(self, owner: uuid.UUID, message_ids: Iterable[str]) -> None:
        """Consume pending messages of `owner` by id; unknown ids are ignored."""

    @abc.abstractmethod
    async def wait(
        self, owner: uuid.UUID, timeout: float | None = None, *, sender: uuid.UUID | None = None
    ) -> bool:
        """Sleep until `owner` has mail (from `sender`), or `timeout` seconds pass."""

    # -- async ---------------------------------------------------------------

    async def asend(
        self,
        sender: uuid.UUID,
        recipient: uuid.UUID | None,
        content: str,
        channel: str = "team",
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> Message:
        """`send` for async code."""
        return await self._offload(
            self.send, sender, recipient, content, channel, metadata=metadata
        )

    async def areceive(
        self,
        owner: uuid.UUID,
        *,
        sender: uuid.UUID | None = None,
        ack: bool = True,
        limit: int | None = None,
    ) -> list[Message]:
        """`receive` for async code."""
        return await self._offload(self.receive, owner, sender=sender, ack=ack, limit=limit)

    async def apeek(
        self, owner: uuid.UUID, *, sender: uuid.UUID | None = None, limit: int | None = None
    ) -> list[Message]:
        """`peek` for async code."""
        return await self._offload(self.peek, owner, sender=sender, limit=limit)

    async def aack(self, owner: uuid.UUID, message_ids: Iterable[str]) -> None:
        """`ack` for async code."""
        # Taken here, in the caller's thread: the iterable may be a generator of this loop.
        await self._offload(self.ack, owner, list(message_ids))

    async def acount(self, owner: uuid.UUID, *, sender: uuid.UUID | None = None) -> int:
        """`count` for async code."""
        return await self._offload(self.count, owner, sender=sender)

    async def atake_rejected(self, owner: uuid.UUID) -> int:
        """`take_rejected` for async code."""
        return self.take_rejected(owner)

    # -- what a backend implements -------------------------------------------

    @abc.abstractmethod
    def _deliver(self, message: Message, sender: uuid.UUID, recipient: uuid.UUID | None) -> None:
        """Put the checked `message` into `recipient`'s inbox, or every other owner's (None).

        Raises:
            UnknownOwnerError: the sender or the recipient is not registered
                (then nothing is delivered).
        """

    @abc.abstractmethod
    def _receive(
        self, owner: uuid.UUID, sender: str | None, ack: bool, limit: int | None
    ) -> list[Message]:
        """`receive`, once `limit` is checked and `sender` is an id string (or None)."""

    @abc.abstractmethod
    def _peek(self, owner: uuid.UUID, sender: str | None, limit: int | None) -> list[Message]:
        """`peek`, once `limit` is checked and `sender` is an id string (or None)."""

    def _count(self, owner: uuid.UUID, sender: str | None) -> int:
        """`count`, with `sender` an id string (or None): by default, what `_peek` finds."""
        return len(self._peek(owner, sender, None))

    async def _offload(self, call: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run a synchronous method for its async twin: directly, since it never blocks."""
        return call(*args, **kwargs)


def check_limit(limit: int | None) -> None:
    """Refuse a `limit` below 1 (None means no limit)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be at least 1 or None, got {limit!r}")


@attrs.define(eq=False, init=False, repr=False)
class Exchange(BaseExchange):
    """Mailboxes between branches, keyed by branch id, in this process's memory.

    Example::

        exchange = Exchange()
        exchange.register(alice.id)
        exchange.register(bob.id)
        exchange.send(alice.id, bob.id, "the tests pass")
        [message] = exchange.receive(bob.id)
    """

    _inboxes: dict[uuid.UUID, deque[Message]]
    # Handed out with ack=False and not acknowledged yet, in delivery order.
    _pending: dict[uuid.UUID, dict[str, Message]]
    _waiters: dict[uuid.UUID, _Waiters]
    _lock: threading.Lock

    def __init__(self) -> None:
        self.__attrs_init__(inboxes={}, pending={}, waiters={}, lock=threading.Lock())

    def __repr__(self) -> str:
        waiting = sum(len(inbox) for inbox in self._inboxes.values())
        waiting += sum(len(taken) for taken in self._pending.values())
        return f"Exchange(owners={len(self._inboxes)}, pending={waiting})"

    # -- owners --------------------------------------------------------------

    def register(self, owner: uuid.UUID) -> None:
        """Give `owner` an inbox; registering twice is harmless."""
        owner_id(owner, "owner")
        with self._lock:
            self._inboxes.setdefault(owner, deque())
            self._pending.setdefault(owner, {})

    def unregister(self, owner: uuid.UUID) -> list[Message]:
        """Remove `owner`'s inbox and return the messages still in it, pending ones first.

        Raises:
            UnknownOwnerError: `owner` is not registered.
        """
        with self._lock:
            inbox = self._inbox(owner, "owner")
            left = [*self._pending.pop(owner, {}).values(), *inbox]
            del self._inboxes[owner]
            waiting = self._waiters.pop(owner, None)
        if waiting is not None:
            waiting.event.set()  # wake waiters; they find no inbox and return False
        return left

    def __contains__(self, owner: object) -> bool:
        return owner in self._inboxes

    @property
    def owners(self) -> tuple[uuid.UUID, ...]:
        """The registered owners, in registration order."""
        return tuple(self._inboxes)

    # -- mail ----------------------------------------------------------------

    def _deliver(self, message: Message, sender: uuid.UUID, recipient: uuid.UUID | None) -> None:
        with self._lock:
            if sender not in self._inboxes:
                raise UnknownOwnerError(sender, "sender")
            if recipient is not None and recipient not in self._inboxes:
                raise UnknownOwnerError(recipient, "recipient")
            targets = (
                [recipient] if recipient is not None else [o for o in self._inboxes if o != sender]
            )
            woken = []
            for target in targets:
                self._inboxes[target].append(message)
                waiting = self._waiters.pop(target, None)
                if waiting is not None:
                    woken.append(waiting)
        for waiting in woken:
            waiting.event.set()

    def _receive(
        self, owner: uuid.UUID, sender: str | None, ack: bool, limit: int | None
    ) -> list[Message]:
        with self._lock:
            inbox = self._inbox(owner, "owner")
            pending = self._pending[owner]
            matching = (m for m in pending.values() if sender is None or m.sender == sender)
            taken = list(itertools.islice(matching, limit))
            room = None if limit is None else limit - len(taken)
            fresh: list[Message] = []
            if sender is None:
                # The oldest first, popped one by one: O(taken), not O(queued).
                count = len(inbox) if room is None else min(room, len(inbox))
                fresh = [inbox.popleft() for _ in range(count)]
            else:
                kept: list[Message] = []
                for message in inbox:
                    if message.sender == sender and (room is None or len(fresh) < room):
                        fresh.append(message)
                    else:
                        kept.append(message)
                if fresh:
                    inbox.clear()
                    inbox.extend(kept)
            taken.extend(fresh)
            if ack:
                for message in taken:
                    pending.pop(message.id, None)
            else:
                pending.update((m.id, m) for m in fresh)
        return taken

    def _peek(self, owner: uuid.UUID, sender: str | None, limit: int | None) -> list[Message]:
        with self._lock:
            return list(itertools.islice(self._waiting(owner, sender), limit))

    def _count(self, owner: uuid.UUID, sender: str | None) -> int:
        with self._lock:
            if sender is None:
                return len(self._inbox(owner, "owner")) + len(self._pending[owner])
            return sum(1 for _ in self._waiting(owner, sender))

    def ack(self, owner: uuid.UUID, message_ids: Iterable[str]) -> None:
        """Consume pending messages of `owner` by id; ids not pending are ignored.

        Raises:
            UnknownOwnerError: `owner` is not registered.
        """
        ids = list(message_ids)
        with self._lock:
            self._inbox(owner, "owner")
            pending = self._pending[owner]
            for message_id in ids:
                pending.pop(message_id, None)

    async def wait(
        self, owner: uuid.UUID, timeout: float | None = None, *, sender: uuid.UUID | None = None
    ) -> bool:
        """Sleep until `owner` has mail (from `sender`, if given), or `timeout` seconds pass.

        Returns at once when such mail is already waiting (pending mail
        counts). Nothing is consumed.

        Args:
            owner: whose inbox.
            timeout: seconds to wait at most; None waits without limit.
            sender: only mail from this sender counts.

        Returns:
            Whether such mail is waiting (False after a timeout, or when the
            owner was unregistered meanwhile).

        Raises:
            UnknownOwnerError: `owner` is not registered.
            ValueError: a negative or NaN timeout.
        """
        check_timeout(timeout)
        self._inbox(owner, "owner")
        wanted = sender_filter(sender)
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while owner in self._inboxes and not self._has_mail(owner, wanted):
                await self._sleep(owner)
        return self._has_mail(owner, wanted)

    # -- internals -----------------------------------------------------------

    def _has_mail(self, owner: uuid.UUID, sender: str | None) -> bool:
        with self._lock:
            if owner not in self._inboxes:
                return False
            return next(self._waiting(owner, sender), None) is not None

    def _waiting(self, owner: uuid.UUID, sender: str | None) -> Iterator[Message]:
        """Pending, then queued messages of `owner` (from `sender`), lazily; under the lock."""
        inbox = self._inbox(owner, "owner")
        waiting = itertools.chain(self._pending[owner].values(), inbox)
        if sender is None:
            return waiting
        return (m for m in waiting if m.sender == sender)

    async def _sleep(self, owner: uuid.UUID) -> None:
        """Sleep until the next delivery to `owner` (or its unregistration)."""
        waiting = self._waiters.get(owner)
        if waiting is None:
            # Created here, inside the loop, not in register(): register() may
            # run in synchronous code before any event loop exists.
            waiting = self._waiters[owner] = _Waiters(anyio.Event())
        waiting.count += 1
        try:
            await waiting.event.wait()
        finally:
            waiting.count -= 1
            # A cancelled last waiter drops the event, so no event outlives the
            # loop that made it (asyncio events bind to their first loop).
            if waiting.count == 0 and self._waiters.get(owner) is waiting:
                del self._waiters[owner]

    def _inbox(self, owner: Any, role: str) -> deque[Message]:
        try:
            return self._inboxes[owner_id(owner, role)]
        except KeyError:
            raise UnknownOwnerError(owner, role) from None

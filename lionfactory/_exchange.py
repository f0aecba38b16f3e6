"""`Exchange`: mailboxes between branches.

An exchange routes `Message` objects between *owners*, identified by branch
UUIDs. It holds ids and messages only, never `Branch` objects, so a clone
that shares an exchange with its source can never reach the source through
it (DESIGN §4.3).

Delivery is immediate: `send` puts the message into the recipient's inbox
before it returns, so there is no background task to supervise and nothing
to flush. Inboxes are FIFO queues appended to in send order, which keeps the
order of every sender's messages; `receive` consumes, `peek` does not, and
`wait` sleeps on an anyio event until mail arrives (no polling).

Concurrency: an exchange belongs to one event loop. Every mutation is a
synchronous method without an ``await`` inside, so under a cooperative loop
it is atomic: concurrent senders in a task group cannot interleave inside a
`send`, and nothing is lost or delivered twice. It is not thread-safe; call
it from the loop's thread (``anyio.from_thread.run_sync`` from a worker).
"""

from __future__ import annotations

import math
import uuid
from collections import deque
from collections.abc import Mapping
from typing import Any

import anyio
import attrs

from lionfactory._messages import Message
from lionfactory.errors import UnknownOwnerError

__all__ = ["Exchange"]


@attrs.define(eq=False)
class _Waiters:
    """The event the waiters of one inbox sleep on, and how many there are."""

    event: anyio.Event
    count: int = 0


def _owner(value: Any, role: str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    raise TypeError(f"{role} must be a branch id (uuid.UUID), got {value!r}")


@attrs.define(eq=False, init=False, repr=False)
class Exchange:
    """Mailboxes between branches, keyed by branch id.

    Example::

        exchange = Exchange()
        exchange.register(alice.id)
        exchange.register(bob.id)
        exchange.send(alice.id, bob.id, "the tests pass")
        [message] = exchange.receive(bob.id)
    """

    _inboxes: dict[uuid.UUID, deque[Message]]
    _waiters: dict[uuid.UUID, _Waiters]

    def __init__(self) -> None:
        self.__attrs_init__(inboxes={}, waiters={})

    def __repr__(self) -> str:
        pending = sum(len(inbox) for inbox in self._inboxes.values())
        return f"Exchange(owners={len(self._inboxes)}, pending={pending})"

    # -- owners --------------------------------------------------------------

    def register(self, owner: uuid.UUID) -> None:
        """Give `owner` an inbox; registering twice is harmless."""
        self._inboxes.setdefault(_owner(owner, "owner"), deque())

    def unregister(self, owner: uuid.UUID) -> list[Message]:
        """Remove `owner`'s inbox and return the messages still in it.

        Raises:
            UnknownOwnerError: `owner` is not registered.
        """
        inbox = self._inbox(owner, "owner")
        del self._inboxes[owner]
        waiting = self._waiters.pop(owner, None)
        if waiting is not None:
            waiting.event.set()  # wake waiters; they find no inbox and return False
        return list(inbox)

    def __contains__(self, owner: object) -> bool:
        return owner in self._inboxes

    @property
    def owners(self) -> tuple[uuid.UUID, ...]:
        """The registered owners, in registration order."""
        return tuple(self._inboxes)

    # -- mail ----------------------------------------------------------------

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
        self._inbox(sender, "sender")
        if recipient is not None:
            self._inbox(recipient, "recipient")
        if not isinstance(content, str):
            raise TypeError(f"content must be a string, got {content!r:.200}")
        message = Message(
            role="user",
            content=content,
            sender=str(sender),
            recipient=None if recipient is None else str(recipient),
            channel=channel,
            metadata=dict(metadata or {}),
        )
        targets = (
            [recipient] if recipient is not None else [o for o in self._inboxes if o != sender]
        )
        for target in targets:
            self._inboxes[target].append(message)
            waiting = self._waiters.pop(target, None)
            if waiting is not None:
                waiting.event.set()
        return message

    def receive(
        self, owner: uuid.UUID, *, sender: uuid.UUID | None = None, limit: int | None = None
    ) -> list[Message]:
        """Take the messages waiting for `owner`, oldest first.

        Args:
            owner: whose inbox.
            sender: only take this sender's messages; the others stay, in order.
            limit: take at most this many (the oldest); the rest stay queued.

        Raises:
            UnknownOwnerError: `owner` is not registered.
            ValueError: `limit` is below 1.
        """
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1 or None, got {limit!r}")
        inbox = self._inbox(owner, "owner")
        wanted = None if sender is None else str(_owner(sender, "sender"))
        taken: list[Message] = []
        kept: list[Message] = []
        for message in inbox:
            full = limit is not None and len(taken) >= limit
            if not full and (wanted is None or message.sender == wanted):
                taken.append(message)
            else:
                kept.append(message)
        if taken:
            inbox.clear()
            inbox.extend(kept)
        return taken

    def peek(self, owner: uuid.UUID, *, sender: uuid.UUID | None = None) -> list[Message]:
        """The messages waiting for `owner`, oldest first, without taking them.

        Raises:
            UnknownOwnerError: `owner` is not registered.
        """
        inbox = self._inbox(owner, "owner")
        if sender is None:
            return list(inbox)
        wanted = str(_owner(sender, "sender"))
        return [m for m in inbox if m.sender == wanted]

    async def wait(
        self, owner: uuid.UUID, timeout: float | None = None, *, sender: uuid.UUID | None = None
    ) -> bool:
        """Sleep until `owner` has mail (from `sender`, if given), or `timeout` seconds pass.

        Returns at once when such mail is already waiting. Nothing is consumed.

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
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"timeout must be >= 0 seconds or None, got {timeout!r}")
        self._inbox(owner, "owner")
        wanted = None if sender is None else str(_owner(sender, "sender"))
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while owner in self._inboxes and not self._has_mail(owner, wanted):
                await self._sleep(owner)
        return self._has_mail(owner, wanted)

    # -- internals -----------------------------------------------------------

    def _has_mail(self, owner: uuid.UUID, sender: str | None) -> bool:
        inbox = self._inboxes.get(owner)
        if not inbox:
            return False
        return sender is None or any(m.sender == sender for m in inbox)

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
            return self._inboxes[_owner(owner, role)]
        except KeyError:
            raise UnknownOwnerError(owner, role) from None

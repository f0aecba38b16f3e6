"""The ``messenger`` tool: let branches of a team write to each other.

`messenger_tool(branch, exchange=..., roster=...)` builds a Tool bound to one
branch (so a clone never speaks for its source), talking through a shared `Exchange`. The
model addresses teammates by their roster names. Actions: ``send``,
``receive``, ``done``, ``finished``, ``wakeup`` and ``help``; every answer is
a typed `MessengerResponse`, with one `RecipientResult` per addressed name.

Decisions worth knowing:

* **Identity.** The branch sends as its own id, under a display name
  (`sender_name`, default the first 8 characters of the id). A roster that
  gives the display name to a different branch is refused at factory time,
  as are roster names that differ only in case (the model could not tell
  them apart; names match case-insensitively).
* **Clones.** Replaying the factory for a clone registers the clone's own id
  on the same exchange: the clone sends as itself (its id is the `sender`)
  and has its own inbox, starting empty (mail already sent to the source
  stays with the source). The clone continues its source's role: in the
  clone's roster, names that meant the source (or an earlier ancestor) mean
  the clone, and it keeps the source's display name. Other branches' rosters
  are not touched, so their mail to those names still reaches the source;
  give them ``clone.id`` to reach the clone. The lineage is read from the
  ``"lionfactory.messenger.lineage"`` key the factory keeps in
  ``branch.metadata`` (clones copy metadata).
* **Recording.** Through `Branch.act`/`run`, the call's tool message is the
  record: its content lists what was sent and received, and its metadata
  (key ``"messenger"``) holds the exchanged `Message` objects as JSON. Nothing
  is appended during the call, because a message between an assistant's
  tool call and its result is rejected by providers. A direct
  ``await tool(...)`` has no tool message, so received messages are appended
  to the log as ``user`` messages and sent ones as ``assistant`` messages,
  each with `sender`, `recipient` and `channel` set.
* **Events.** ``done``, ``finished``, ``wakeup`` and ``help`` call `on_event`
  (one callable for all, or a mapping from event kind to callable; sync or
  async) with a `MessengerEvent`. A callback that raises is reported in the
  response (``success=False``, `error` names the exception), never swallowed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from lionfactory._branch import Branch
from lionfactory._exchange import BaseExchange
from lionfactory._tool import Tool, ToolHints
from lionfactory.tools._messenger_handler import _MessengerHandler
from lionfactory.tools._messenger_models import (
    MAX_RECEIVE_CHARS,
    MAX_RECEIVE_MESSAGES,
    MAX_WAIT_SECONDS,
    EventCallback,
    MessengerEvent,
    MessengerRequest,
    MessengerResponse,
    ReceivedMessage,
    RecipientResult,
)

__all__ = [
    "MessengerEvent",
    "MessengerRequest",
    "MessengerResponse",
    "ReceivedMessage",
    "RecipientResult",
    "messenger_tool",
]

logger = logging.getLogger("lionfactory")

_EVENT_KINDS: tuple[str, ...] = ("done", "finished", "wakeup", "help")
_LINEAGE_KEY = "lionfactory.messenger.lineage"


def _callbacks(on_event: Any) -> dict[str, EventCallback]:
    if on_event is None:
        return {}
    if isinstance(on_event, Mapping):
        unknown = sorted(set(on_event) - set(_EVENT_KINDS))
        if unknown:
            raise ValueError(f"on_event keys must be among {list(_EVENT_KINDS)}, got {unknown!r}")
        for kind, callback in on_event.items():
            if not callable(callback):
                raise TypeError(f"on_event[{kind!r}] must be callable, got {callback!r}")
        return dict(on_event)
    if not callable(on_event):
        raise TypeError(f"on_event must be a callable or a mapping of callables, got {on_event!r}")
    return dict.fromkeys(_EVENT_KINDS, on_event)


def _lineage(branch: Branch) -> tuple[uuid.UUID, ...]:
    """The ids this branch descends from (itself last, once set): see "Clones" above."""
    value = branch.metadata.get(_LINEAGE_KEY, ())
    try:
        return tuple(uuid.UUID(v) for v in value)
    except (TypeError, ValueError, AttributeError):
        return ()  # not ours: someone else wrote the key; start a fresh lineage


def _roster(roster: Any, me: uuid.UUID, ancestors: set[uuid.UUID]) -> dict[str, uuid.UUID]:
    if not isinstance(roster, Mapping):
        raise TypeError(f"roster must map display names to branch ids, got {roster!r}")
    checked: dict[str, uuid.UUID] = {}
    folded: dict[str, str] = {}
    for name, value in roster.items():
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"roster names must be non-empty strings, got {name!r}")
        if isinstance(value, uuid.UUID):
            owner = value
        else:
            try:
                owner = uuid.UUID(str(value))
            except ValueError:
                raise ValueError(f"roster[{name!r}] must be a branch id, got {value!r}") from None
        key = name.strip().casefold()
        if key in folded:
            raise ValueError(
                f"roster names {folded[key]!r} and {name!r} name two branches the same way "
                f"(names match case-insensitively); rename one"
            )
        folded[key] = name
        checked[name.strip()] = me if owner in ancestors else owner
    return checked


_DESCRIPTION = f"""\
Write to your teammates and read what they wrote to you.

Teammates are addressed by their roster names (case does not matter). Messages are
delivered at once to the teammate's inbox; they read them with action 'receive'.

Actions:
- send: deliver `content` to `to` (one name or a list). Each name gets its own result;
  names that are unknown or not reachable are reported, the others still get the message.
- receive: take the messages waiting for you, oldest first (`sender` keeps only one
  teammate's): at most {MAX_RECEIVE_MESSAGES} messages and {MAX_RECEIVE_CHARS:,} characters
  per call; `remaining` says how many more wait. With `timeout`, wait up to that many
  seconds (at most {MAX_WAIT_SECONDS:g}) when none is waiting.
- done: say your part is done (optional note in `content`).
- finished: say the whole task is finished (optional note in `content`).
- wakeup: ask exactly one teammate (`to`) to look at its messages now; optional `content`.
- help: ask for help with `content`, urgency 'blocked' if you cannot go on, else 'fyi';
  name teammates in `to` to send it to them too.
"""


def messenger_tool(
    branch: Branch,
    *,
    exchange: BaseExchange,
    roster: Mapping[str, uuid.UUID],
    sender_name: str | None = None,
    channel: str = "team",
    on_event: EventCallback | Mapping[str, EventCallback] | None = None,
) -> Tool:
    """Build the ``messenger`` tool for `branch` on `exchange`.

    Registers the branch on the exchange if it is not yet. Register the tool
    through its factory (``branch.register(messenger_tool, exchange=...,
    roster=...)``) so that a clone gets its own identity (see the module
    docstring for how a clone appears).

    Args:
        branch: the branch whose model sends and receives.
        exchange: the shared exchange: an `Exchange` in this process, or a
            `lionfactory.backends.RedisExchange` between processes.
        roster: display name -> branch id of the teammates the model may
            address. An entry for the branch itself is allowed.
        sender_name: this branch's display name; the first 8 characters of
            its id when None.
        channel: the channel label put on sent messages.
        on_event: called with a `MessengerEvent` on done, finished, wakeup
            and help: one callable for all, or a mapping from kind to callable.

    Returns:
        The ``messenger`` Tool, ``bound_to=branch.id``.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: an empty name or channel, a bad roster id, roster names
            equal but for case, or a display name the roster gives to another
            branch.
    """
    if not isinstance(branch, Branch):
        raise TypeError(f"messenger_tool needs a Branch, got {branch!r}")
    if not isinstance(exchange, BaseExchange):
        raise TypeError(
            f"exchange must be an Exchange (or another BaseExchange such as RedisExchange), "
            f"got {exchange!r}"
        )
    if not isinstance(channel, str) or not channel.strip():
        raise ValueError(f"channel must be a non-empty string, got {channel!r}")
    if sender_name is not None and (not isinstance(sender_name, str) or not sender_name.strip()):
        raise ValueError(f"sender_name must be a non-empty string or None, got {sender_name!r}")
    lineage = _lineage(branch)
    checked = _roster(roster, branch.id, {*lineage, branch.id})
    name = sender_name.strip() if sender_name is not None else str(branch.id)[:8]
    for other, owner in checked.items():
        if other.casefold() == name.casefold() and owner != branch.id:
            raise ValueError(
                f"display name {name!r} already names branch {owner} in the roster; two branches "
                f"cannot share a display name (pass another sender_name)"
            )
    callbacks = _callbacks(on_event)
    exchange.register(branch.id)
    if branch.id not in lineage:
        # Strings, not UUIDs, so metadata stays JSON-ready; a tuple, so the
        # shallow metadata copy of clone() cannot share a mutable value.
        branch.metadata[_LINEAGE_KEY] = (*map(str, lineage), str(branch.id))
    handler = _MessengerHandler(branch, exchange, checked, name, channel.strip(), callbacks)
    return Tool(
        name="messenger",
        description=_DESCRIPTION,
        request_model=MessengerRequest,
        handler=handler,
        bound_to=branch.id,
        response_model=MessengerResponse,
        hints=ToolHints("Message teammates"),
    )

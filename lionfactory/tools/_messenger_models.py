"""The ``messenger`` tool's records, request and response models, and limits.

Kept apart from the factory (`lionfactory.tools.messenger`) and the handler
(`lionfactory.tools._messenger_handler`) so that both import them and neither
imports the other.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import attrs
from pydantic import Field

from lionfactory._messages import Message
from lionfactory.tools._models import ToolModel

__all__ = [
    "MAX_RECEIVE_CHARS",
    "MAX_RECEIVE_MESSAGES",
    "MAX_WAIT_SECONDS",
    "EventCallback",
    "EventKind",
    "MessengerAction",
    "MessengerEvent",
    "MessengerRequest",
    "MessengerResponse",
    "ReceivedMessage",
    "RecipientResult",
]

MessengerAction = Literal["send", "receive", "done", "finished", "wakeup", "help"]
EventKind = Literal["done", "finished", "wakeup", "help"]
MAX_WAIT_SECONDS = 300.0
MAX_RECEIVE_MESSAGES = 50
"""Most messages one ``receive`` takes; the rest stay queued, counted in `remaining`."""
MAX_RECEIVE_CHARS = 20_000
"""Most message characters one ``receive`` returns, about 5,000 tokens: a teammate
(or a flood of them) cannot fill another agent's context in one call, as no other
tool's output can."""


@attrs.frozen
class MessengerEvent:
    """What an `on_event` callback receives.

    Attributes:
        kind: ``done``, ``finished``, ``wakeup`` or ``help``.
        branch_id: the branch whose model acted.
        sender_name: its display name.
        content: the text the model gave (may be None for done/finished).
        to: the names the event's message went to (wakeup, help).
        urgency: for help, ``fyi`` or ``blocked``.
        messages: the exchange messages sent with the event.
    """

    kind: EventKind
    branch_id: uuid.UUID
    sender_name: str
    content: str | None = None
    to: tuple[str, ...] = ()
    urgency: Literal["fyi", "blocked"] | None = None
    messages: tuple[Message, ...] = ()


EventCallback = Callable[[MessengerEvent], "Awaitable[Any] | Any"]


class MessengerRequest(ToolModel):
    """Arguments of one ``messenger`` call."""

    action: MessengerAction = Field(
        description=(
            "'send': write `content` to the names in `to`; 'receive': take the messages "
            "waiting for you; 'done': your part is done; 'finished': the whole task is "
            "finished; 'wakeup': ask one teammate to look at its messages now; 'help': ask "
            "for help (with `urgency`)."
        )
    )
    to: str | list[str] | None = Field(
        default=None,
        description=("send/help: one roster name or a list of names; wakeup: exactly one name."),
    )
    content: str | None = Field(
        default=None,
        description="send/help: the message (required); wakeup/done/finished: an optional note.",
    )
    sender: str | None = Field(
        default=None, description="receive: only take messages from this roster name."
    )
    timeout: float | None = Field(
        default=None,
        ge=0,
        le=MAX_WAIT_SECONDS,
        description=(
            f"receive: when no message is waiting, wait up to this many seconds for one "
            f"(at most {MAX_WAIT_SECONDS:g}). Default: do not wait."
        ),
    )
    urgency: Literal["fyi", "blocked"] = Field(
        default="fyi",
        description="help: 'blocked' when you cannot go on without an answer, else 'fyi'.",
    )


class RecipientResult(ToolModel):
    """What happened for one addressed name."""

    name: str = Field(description="The name as you wrote it.")
    delivered: bool = Field(description="Whether the message reached that teammate's inbox.")
    message_id: str | None = Field(default=None, description="The delivered message's id.")
    error: str | None = Field(default=None, description="Why it was not delivered.")


class ReceivedMessage(ToolModel):
    """One message taken from the inbox."""

    sender: str = Field(description="Who sent it: a roster name when known (reply to it).")
    sender_id: str = Field(description="The sending branch's id.")
    content: str = Field(description="The text.")
    channel: str | None = Field(default=None, description="The channel it travelled on.")
    broadcast: bool = Field(description="Whether it went to everyone rather than to you.")
    message_id: str = Field(description="The message's id.")


class MessengerResponse(ToolModel):
    """The result of one ``messenger`` call."""

    success: bool = Field(description="Whether the action fully worked; if not, read `error`.")
    action: MessengerAction = Field(description="The action this answers.")
    content: str | None = Field(default=None, description="A readable summary of the result.")
    error: str | None = Field(default=None, description="What went wrong and what to do next.")
    results: list[RecipientResult] = Field(
        default_factory=list, description="send/wakeup/help: one entry per addressed name."
    )
    messages: list[ReceivedMessage] = Field(
        default_factory=list, description="receive: the messages taken, oldest first."
    )
    remaining: int = Field(
        default=0,
        description="receive: how many more messages are waiting; call receive again for them.",
    )
    rejected: int = Field(
        default=0,
        description=(
            "receive: how many malformed inbox entries (written by something that is not a "
            "teammate) were set aside since the last receive; informational only."
        ),
    )

"""The ``messenger`` tool's handler (private; see `lionfactory.tools.messenger`)."""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from lionfactory._branch import Branch
from lionfactory._call import current_call
from lionfactory._echo import echo, shorten
from lionfactory._exchange import BaseExchange
from lionfactory._messages import Message
from lionfactory.errors import ToolFailure, UnknownOwnerError
from lionfactory.tools._messenger_models import (
    MAX_RECEIVE_CHARS,
    MAX_RECEIVE_MESSAGES,
    EventCallback,
    EventKind,
    MessengerAction,
    MessengerEvent,
    MessengerRequest,
    MessengerResponse,
    ReceivedMessage,
    RecipientResult,
)

__all__ = ["_MessengerHandler"]

logger = logging.getLogger("lionfactory")


class _Failure(ToolFailure):
    """A messenger action that cannot be done; the handler returns `message` as a failure."""


class _MessengerHandler:
    """The ``messenger`` handler: one branch's identity on one exchange."""

    def __init__(
        self,
        branch: Branch,
        exchange: BaseExchange,
        roster: dict[str, uuid.UUID],
        name: str,
        channel: str,
        callbacks: dict[str, EventCallback],
    ) -> None:
        self.branch = branch
        self.exchange = exchange
        self.roster = roster
        self.name = name
        self.channel = channel
        self.callbacks = callbacks
        self._by_folded = {n.casefold(): n for n in roster}
        self._names = {i: n for n, i in reversed(roster.items())}
        # Ids of the exchange messages this branch has recorded as received,
        # read from its append-only record (a restored branch included).
        self._seen: set[str] = set()
        self._scanned = 0

    def __repr__(self) -> str:
        return f"<messenger handler {self.name!r} branch={str(self.branch.id)[:8]}>"

    async def __call__(self, request: MessengerRequest) -> MessengerResponse:
        action = request.action
        try:
            if action == "send":
                return await self._send(request)
            if action == "receive":
                return await self._receive(request)
            if action == "wakeup":
                return await self._wakeup(request)
            if action == "help":
                return await self._help(request)
            return await self._milestone(request)
        except _Failure as failure:
            return MessengerResponse(success=False, action=action, error=failure.message)

    # -- actions -------------------------------------------------------------

    async def _send(self, request: MessengerRequest) -> MessengerResponse:
        names = self._targets(request.to, "send")
        if not request.content:
            raise _Failure("send needs `content`: the message to deliver.")
        results, sent = await self._deliver(names, request.content)
        self._record(sent=sent)
        return self._delivery_response("send", results)

    async def _receive(self, request: MessengerRequest) -> MessengerResponse:
        sender = None
        if request.sender is not None:
            resolved = self._resolve(request.sender)
            if isinstance(resolved, str):
                raise _Failure(resolved)
            sender = resolved
        me = self.branch.id
        if request.timeout:
            await self.exchange.wait(me, request.timeout, sender=sender)
        # At-least-once: a receive takes without consuming, the call's record
        # holds what it took, and a later receive acknowledges it. So the
        # head of the inbox may be messages this branch already recorded: skip
        # them (acknowledging them now), or a capped receive would hand out
        # only repeats and answer "nothing" while mail waits behind them.
        head = await self._unrecorded_head(me, sender)
        # Decide how many fit before taking any, so what does not fit stays
        # queued (in order) for the next receive.
        count, chars = 0, 0
        for message in head:
            if count and chars + len(message.content) > MAX_RECEIVE_CHARS:
                break
            count += 1
            chars += len(message.content)
        handed = (
            await self.exchange.areceive(me, sender=sender, ack=False, limit=count) if count else []
        )
        # What comes back after a crash between taking and recording is shown
        # only if this branch never recorded it: the model never sees a
        # message twice.
        seen = self._recorded_ids()
        repeats = [m.id for m in handed if m.id in seen]
        if repeats:
            await self.exchange.aack(me, repeats)
        taken = [m for m in handed if m.id not in seen]
        remaining = max(0, await self.exchange.acount(me, sender=sender) - len(taken))
        rejected = await self.exchange.atake_rejected(me)
        self._record(received=taken)
        shown = [
            ReceivedMessage(
                sender=self._sender_name(m),
                sender_id=m.sender or "",
                # One message alone may exceed the budget: it is cut, not held
                # back forever (its whole text stays in the call's record).
                content=shorten(m.content, MAX_RECEIVE_CHARS),
                channel=m.channel,
                broadcast=m.recipient is None,
                message_id=m.id,
            )
            for m in taken
        ]
        lines = [f"From {m.sender} ({m.channel}): {m.content}" for m in shown]
        if remaining:
            lines.append(
                f"{remaining} more message(s) are waiting; call receive again to read them."
            )
        if rejected:
            lines.append(
                f"{rejected} malformed inbox entr{'y' if rejected == 1 else 'ies'} (not messages) "
                f"were set aside for the operator; nothing was lost and nothing is needed of you."
            )
        return MessengerResponse(
            success=True,
            action="receive",
            content="\n".join(lines) if lines else "No messages are waiting.",
            messages=shown,
            remaining=remaining,
            rejected=rejected,
        )

    async def _unrecorded_head(self, me: uuid.UUID, sender: uuid.UUID | None) -> list[Message]:
        """The oldest waiting messages the branch has not recorded, after acknowledging the rest.

        At most `MAX_RECEIVE_MESSAGES` are read per look, so a receive costs
        what it takes, not what is queued.
        """
        seen = self._recorded_ids()
        acked: set[str] = set()
        while True:
            head = await self.exchange.apeek(me, sender=sender, limit=MAX_RECEIVE_MESSAGES)
            repeats = [m.id for m in head if m.id in seen and m.id not in acked]
            if not repeats:
                # Recorded ones an acknowledgement could not remove (never
                # handed out) are filtered after the receive instead.
                return [m for m in head if m.id not in seen]
            await self.exchange.aack(me, repeats)
            acked.update(repeats)

    async def _wakeup(self, request: MessengerRequest) -> MessengerResponse:
        names = self._targets(request.to, "wakeup")
        if len(names) != 1:
            raise _Failure(
                f"wakeup takes exactly one name, got {len(names)}: {names}. Call it once per "
                f"teammate."
            )
        note = f" {request.content}" if request.content else ""
        results, sent = await self._deliver(names, f"[WAKEUP]{note}")
        self._record(sent=sent)
        response = self._delivery_response("wakeup", results)
        if sent:
            event = self._event("wakeup", request.content, names, sent)
            await self._fire(event, response)
        return response

    async def _help(self, request: MessengerRequest) -> MessengerResponse:
        if not request.content:
            raise _Failure("help needs `content`: what you need, and what you tried.")
        names = [] if request.to is None else self._targets(request.to, "help")
        if not names and "help" not in self.callbacks:
            raise _Failure(
                "No one receives help requests here: name teammates in `to` to ask them."
            )
        results, sent = await self._deliver(names, f"[HELP:{request.urgency}] {request.content}")
        self._record(sent=sent)
        response = (
            self._delivery_response("help", results)
            if names
            else MessengerResponse(success=True, action="help", content="Help request raised.")
        )
        event = self._event("help", request.content, names, sent, urgency=request.urgency)
        await self._fire(event, response)
        return response

    async def _milestone(self, request: MessengerRequest) -> MessengerResponse:
        kind: EventKind = "done" if request.action == "done" else "finished"
        text = "Marked your part as done." if kind == "done" else "Marked the task as finished."
        response = MessengerResponse(success=True, action=kind, content=text)
        await self._fire(self._event(kind, request.content, [], []), response)
        return response

    # -- helpers -------------------------------------------------------------

    def _recorded_ids(self) -> set[str]:
        """The exchange message ids the branch's record shows as received."""
        record = self.branch.messages.record
        for message in record[self._scanned :]:
            entry = message.metadata.get("messenger")
            if message.role == "tool" and isinstance(entry, dict):
                self._seen.update(m.get("id", "") for m in entry.get("received", ()))
            elif message.role == "user" and "exchange_message_id" in message.metadata:
                self._seen.add(message.metadata["exchange_message_id"])
        self._scanned = len(record)
        return self._seen

    def _targets(self, to: str | list[str] | None, action: str) -> list[str]:
        names = [to] if isinstance(to, str) else list(to or [])
        names = list(dict.fromkeys(n.strip() for n in names if n.strip()))
        if not names:
            known = ", ".join(self.roster) or "none"
            raise _Failure(f"{action} needs `to`: a roster name (known: {known}).")
        return names

    def _resolve(self, name: str) -> uuid.UUID | str:
        """The id for a roster name, or the reason there is none."""
        found = self._by_folded.get(name.strip().casefold())
        if found is None:
            known = ", ".join(n for n in self.roster if self.roster[n] != self.branch.id)
            return f"unknown name {echo(name)}; known names: {known or 'none'}"
        owner = self.roster[found]
        if owner == self.branch.id:
            return f"{echo(name)} is you"
        return owner

    async def _deliver(
        self, names: list[str], content: str
    ) -> tuple[list[RecipientResult], list[Message]]:
        results: list[RecipientResult] = []
        sent: list[Message] = []
        for name in names:
            owner = self._resolve(name)
            if isinstance(owner, str):
                results.append(RecipientResult(name=shorten(name), delivered=False, error=owner))
                continue
            try:
                message = await self.exchange.asend(
                    self.branch.id,
                    owner,
                    content,
                    self.channel,
                    metadata={"sender_name": self.name},
                )
            except UnknownOwnerError:
                results.append(
                    RecipientResult(
                        name=shorten(name),
                        delivered=False,
                        error=f"{echo(name)} is not on the exchange yet (its messenger is not set "
                        f"up); try again later",
                    )
                )
                continue
            sent.append(message)
            results.append(RecipientResult(name=name, delivered=True, message_id=message.id))
        return results, sent

    def _delivery_response(
        self, action: MessengerAction, results: list[RecipientResult]
    ) -> MessengerResponse:
        delivered = [r.name for r in results if r.delivered]
        failed = [f"{r.name} ({r.error})" for r in results if not r.delivered]
        parts = [f"Delivered to {', '.join(delivered)}."] if delivered else []
        error = None
        if failed:
            error = f"Not delivered to: {'; '.join(failed)}."
            if delivered:
                error += " The others got it; do not send it to them again."
            parts.append(error)
        return MessengerResponse(
            success=not failed,
            action=action,
            content=" ".join(parts),
            error=error,
            results=results,
        )

    def _sender_name(self, message: Message) -> str:
        try:
            sender = uuid.UUID(message.sender or "")
        except ValueError:
            return message.sender or "?"
        return _show_name(self._names.get(sender), message.metadata.get("sender_name"), sender)

    def _event(
        self,
        kind: EventKind,
        content: str | None,
        to: list[str],
        sent: list[Message],
        urgency: Literal["fyi", "blocked"] | None = None,
    ) -> MessengerEvent:
        return MessengerEvent(
            kind=kind,
            branch_id=self.branch.id,
            sender_name=self.name,
            content=content,
            to=tuple(to),
            urgency=urgency,
            messages=tuple(sent),
        )

    async def _fire(self, event: MessengerEvent, response: MessengerResponse) -> None:
        callback = self.callbacks.get(event.kind)
        if callback is None:
            return
        try:
            out = callback(event)
            if inspect.isawaitable(out):
                await out
        except Exception as exc:
            logger.warning("messenger on_event callback for %r raised", event.kind, exc_info=True)
            problem = (
                f"The {event.kind} went through, but the on_event callback raised "
                f"{type(exc).__name__}: {str(exc)[:300]}. Do not repeat the call; tell the user."
            )
            response.success = False
            response.error = f"{response.error} {problem}" if response.error else problem

    def _record(self, *, sent: Sequence[Message] = (), received: Sequence[Message] = ()) -> None:
        if not sent and not received:
            return
        context = current_call()
        if context is not None and context.branch_id == self.branch.id:
            entry = context.metadata.setdefault("messenger", {"sent": [], "received": []})
            entry["sent"].extend(m.model_dump(mode="json") for m in sent)
            entry["received"].extend(m.model_dump(mode="json") for m in received)
            return
        for message in sent:
            recipient = uuid.UUID(message.recipient) if message.recipient else None
            to = self._names.get(recipient, message.recipient) if recipient else "everyone"
            self.branch.messages.append(
                Message(
                    role="assistant",
                    content=f"[to {to} on {message.channel}] {message.content}",
                    sender=message.sender,
                    recipient=message.recipient,
                    channel=message.channel,
                    metadata={"exchange_message_id": message.id},
                )
            )
        for message in received:
            self.branch.messages.append(
                Message(
                    role="user",
                    content=f"[from {self._sender_name(message)} on {message.channel}] "
                    f"{message.content}",
                    sender=message.sender,
                    recipient=message.recipient,
                    channel=message.channel,
                    metadata={"exchange_message_id": message.id},
                )
            )


def _show_name(roster_name: str | None, claimed: Any, owner: uuid.UUID) -> str:
    """How a sender appears: its name in our roster, else the name it sent, else its id."""
    if roster_name is not None:
        return roster_name
    if isinstance(claimed, str) and claimed:
        return claimed
    return str(owner)[:8]

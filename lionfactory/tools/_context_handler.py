"""The ``context`` tool's handler (private; see `lionfactory.tools.context`)."""

from __future__ import annotations

from collections.abc import Sequence

from lionfactory._branch import Branch
from lionfactory._messages import ChatModel, Message, estimate_tokens
from lionfactory.tools._context_models import (
    ContextAction,
    ContextMessage,
    ContextRequest,
    ContextResponse,
)
from lionfactory.tools._context_ops import (
    DEFAULT_KEEP_LAST,
    ContextFailure,
    clamp,
    close_groups,
    first_turn_error,
    one_message_unless,
    preview,
    split_view,
    summarise,
    tool_groups,
)

__all__ = ["_ContextHandler"]


class _ContextHandler:
    """The ``context`` handler: one branch, an optional summariser."""

    def __init__(self, branch: Branch, chat_model: ChatModel | None) -> None:
        self.branch = branch
        self.chat_model = chat_model

    def __repr__(self) -> str:
        return f"<context handler branch={str(self.branch.id)[:8]}>"

    async def __call__(self, request: ContextRequest) -> ContextResponse:
        try:
            if request.action == "status":
                return self._status()
            if request.action == "get_messages":
                return self._get_messages(request)
            if request.action == "evict":
                return self._evict(request)
            if request.action == "evict_action_results":
                return self._evict_action_results(request)
            if request.action == "restore":
                return self._restore(request)
            return await self._compact(request)
        except ContextFailure as failure:
            return ContextResponse(success=False, action=request.action, error=failure.message)

    # -- reading -------------------------------------------------------------

    def _status(self) -> ContextResponse:
        log = self.branch.messages
        visible, pending = split_view(self.branch)
        roles: dict[str, int] = {}
        for message in visible:
            roles[message.role] = roles.get(message.role, 0) + 1
        return ContextResponse(
            success=True,
            action="status",
            active_count=len(visible),
            pending_count=len(pending),
            total_count=log.total,
            evicted_count=log.total - len(log),
            role_counts=roles,
            estimated_tokens=log.estimate_tokens(),
        )

    def _get_messages(self, request: ContextRequest) -> ContextResponse:
        visible, _ = split_view(self.branch)
        view_index = {m.id: i for i, m in enumerate(visible)}
        log = self.branch.messages
        listing: Sequence[Message] = visible if request.scope == "active" else log.record
        lo, hi = clamp(request.start, request.end, len(listing), floor=0)
        entries = [
            ContextMessage(
                index=i,
                role=m.role,
                active=log.is_active(m.id),
                view_index=view_index.get(m.id),
                tool=m.tool,
                tokens=estimate_tokens([m]),
                preview=preview(m),
            )
            for i, m in ((i, listing[i]) for i in range(lo, hi))
        ]
        notice = None
        if not entries:
            notice = f"No messages in [{lo}:{hi}); the {request.scope} scope has {len(listing)}."
        return ContextResponse(
            success=True,
            action="get_messages",
            messages=entries,
            active_count=len(visible),
            notice=notice,
        )

    # -- changing ------------------------------------------------------------

    def _evict(self, request: ContextRequest) -> ContextResponse:
        visible, pending = split_view(self.branch)
        floor = _floor(visible)
        lo, hi = clamp(request.start, request.end, len(visible), floor=floor)
        hi = one_message_unless(request.end, lo, hi)
        if lo >= hi:
            raise ContextFailure(
                f"Nothing to evict: the range [{lo}:{hi}) is empty after clamping. The view has "
                f"{len(visible)} messages; evictable indices are {floor} to {len(visible) - 1}. "
                f"Call get_messages to see them."
            )
        chosen = {m.id for m in visible[lo:hi]}
        ids = close_groups(chosen, visible)
        refusal = first_turn_error(visible, pending, ids)
        if refusal:
            raise ContextFailure(refusal)
        removed = self.branch.messages.evict_ids(ids)
        return self._changed("evict", evicted=len(removed), extra=len(ids) - len(chosen))

    def _evict_action_results(self, request: ContextRequest) -> ContextResponse:
        visible, pending = split_view(self.branch)
        keep = DEFAULT_KEEP_LAST if request.keep_last is None else max(request.keep_last, 0)
        results = [m for m in visible if m.role == "tool"]
        kept = results[max(len(results) - keep, 0) :] if keep else []
        groups = tool_groups(visible)
        kept_groups = {groups[m.id] for m in kept}
        ids = {m.id for m in visible if m.id in groups and groups[m.id] not in kept_groups}
        refusal = first_turn_error(visible, pending, ids)
        if refusal:
            raise ContextFailure(refusal)
        removed = self.branch.messages.evict_ids(ids)
        return self._changed("evict_action_results", evicted=len(removed))

    def _restore(self, request: ContextRequest) -> ContextResponse:
        log = self.branch.messages
        record = log.record
        lo, hi = clamp(request.start, request.end, len(record), floor=0)
        hi = one_message_unless(request.end, lo, hi)
        wanted = {m.id for m in record[lo:hi] if not log.is_active(m.id)}
        ids = close_groups(wanted, record)
        restored = 0
        for index in sorted(log.record_index(i) for i in ids if not log.is_active(i)):
            restored += len(log.restore(index, index + 1))
        extra = max(restored - len(wanted), 0)
        return self._changed("restore", restored=restored, extra=extra)

    async def _compact(self, request: ContextRequest) -> ContextResponse:
        visible, _ = split_view(self.branch)
        floor = _floor(visible)
        lo, hi = clamp(request.start, request.end, len(visible), floor=floor)
        if lo >= hi:
            raise ContextFailure(
                f"Nothing to compact: the range [{lo}:{hi}) is empty after clamping. The view "
                f"has {len(visible)} messages; compactable indices are {floor} to "
                f"{len(visible) - 1}. Call get_messages to see them."
            )
        span = visible[lo:hi]
        if request.mode == "tool_io":
            span = [m for m in span if m.role == "tool" or m.tool_calls]
        ids = close_groups({m.id for m in span}, visible)
        if not ids:
            raise ContextFailure(
                f"No tool calls or tool results in [{lo}:{hi}). Use mode='all' to compact every "
                f"message of the range, or choose another range."
            )
        selected = [m for m in visible if m.id in ids]
        if request.auto and request.summary is not None:
            raise ContextFailure("Pass either `summary` or auto=true, not both.")
        if request.auto:
            text, notice = await summarise(selected, self.chat_model or self.branch.chat_model)
        elif request.summary and request.summary.strip():
            text, notice = request.summary.strip(), None
        else:
            raise ContextFailure(
                "compact needs a `summary` of the messages it replaces (or auto=true to let a "
                "chat model write it). Read them with get_messages first."
            )
        # The view may have changed while a summariser ran: check again on the
        # view as it is now, and apply nothing if the selection is gone.
        visible, pending = split_view(self.branch)
        if not ids <= {m.id for m in visible}:
            raise ContextFailure(
                "The view changed while the summary was written; call compact again."
            )
        summary = Message(
            role="assistant",
            content=f"[Summary of {len(selected)} compacted messages]\n{text}",
            metadata={"summary_of": [m.id for m in selected], "compaction_mode": request.mode},
        )
        refusal = first_turn_error(visible, pending, ids, summary=summary)
        if refusal:
            raise ContextFailure(refusal)
        self.branch.messages.replace([m.id for m in selected], summary)
        after, _ = split_view(self.branch)
        response = self._changed(
            "compact", extra=len(ids) - len(span), notice=notice, compacted=len(selected)
        )
        response.summary_index = next(i for i, m in enumerate(after) if m.id == summary.id)
        return response

    def _changed(
        self,
        action: ContextAction,
        *,
        extra: int = 0,
        notice: str | None = None,
        **fields: int,
    ) -> ContextResponse:
        notes = [notice] if notice else []
        if extra > 0:
            notes.append(
                f"{extra} more message(s) moved along to keep tool calls and their results "
                f"together."
            )
        visible, _ = split_view(self.branch)
        return ContextResponse(
            success=True,
            action=action,
            active_count=len(visible),
            estimated_tokens=self.branch.messages.estimate_tokens(),
            notice=" ".join(notes) or None,
            **fields,
        )


def _floor(visible: Sequence[Message]) -> int:
    """The first index an eviction or compaction may touch: 1 past a system message."""
    return 1 if visible and visible[0].role == "system" else 0

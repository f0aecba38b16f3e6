"""lionfactory's tools as LangChain ``StructuredTool``s, for LangChain and LangGraph.

    from lionfactory.integrations.langchain import langchain_tools

    tools = langchain_tools(branch)
    model = chat_model.bind_tools(tools)

Install with ``pip install 'lionfactory[langchain]'`` (``langchain-core``
only); approvals inside a LangGraph graph need ``'lionfactory[langgraph]'``.

Approvals. A call that a lionfactory hook asks about (`ApprovalRequired`, a
coding `Rule` with ``"ask"``) is held on the branch. Inside a LangGraph
graph with a checkpointer the tool then calls LangGraph's ``interrupt()``
with the pending call (``{"call_id", "tool", "arguments", "reason",
"hook"}``): the graph stops with it in ``__interrupt__``, and resuming with
``Command(resume=decision)`` runs the lionfactory call exactly once::

    state = await graph.ainvoke({"messages": [...]}, config)
    (asked,) = state["__interrupt__"]
    state = await graph.ainvoke(Command(resume=True), config)   # or False,
    # {"decision": "approve", "arguments": {...}}, {"decision": "deny", "reason": "..."}

LangGraph runs the interrupted node again on resume; a call the branch has
already answered under the same id, tool and arguments is not run again
(its recorded answer comes back), so the other calls of that node that
finished before the interrupt run once. The prebuilt ``ToolNode`` runs a
reply's calls concurrently, so a held call waits for the others of the same
tool list to finish before it interrupts (with ``ainvoke``; sync calls in
worker threads are not waited for).
Outside a graph the tool answers the held call with ``status="error"`` and a
text that says it awaits approval; decide it on the branch
(``branch.approve(call_id)`` or ``branch.deny(call_id, reason)``) and invoke
the tool again with the same tool call: the decision is carried out once.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio

from lionfactory.integrations._calls import missing_extra

try:
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import StructuredTool
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise missing_extra(__name__, "langchain-core", "langchain") from exc

from lionfactory._acting import ActionResult, pending_payload
from lionfactory._tool import Tool, running_event_loop
from lionfactory.integrations._calls import (
    Source,
    ToolSource,
    model_view,
    recorded_answer,
    tool_source,
)

__all__ = ["langchain_tools"]

# The call id LangChain passes to the tool travels to our function under this
# keyword; it is set from LangChain's own ToolCall, so a model that sends an
# argument of that name cannot choose the id a call is recorded under.
_CALL_ID = "__lionfactory_call_id__"
_SYNC = "__lionfactory_sync__"


class _LionfactoryStructuredTool(StructuredTool):
    """A StructuredTool that hands the LangChain tool call id to its function."""

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args, kwargs = super()._to_args_and_kwargs(tool_input, tool_call_id)
        kwargs = {k: v for k, v in kwargs.items() if k not in (_CALL_ID, _SYNC)}
        kwargs[_CALL_ID] = tool_call_id
        return args, kwargs


def langchain_tools(source: Source) -> list[StructuredTool]:
    """One ``StructuredTool`` per tool of `source`, with our JSON schema.

    The tools' ``args_schema`` is lionfactory's JSON schema as a dict, so
    LangChain passes the model's arguments through unvalidated and
    lionfactory's own pipeline checks them: an invalid call is recorded on
    the branch and answered with the error the model reads (``error``,
    ``error_type``, ``errors``), as the ToolMessage's content. Every call
    runs as `Branch.act` runs it, recorded under LangChain's tool call id.
    The ToolMessage's content is that JSON text, its ``artifact`` the same
    result as a dict, and its ``status`` is ``"error"`` when the call did
    not produce a successful response (invalid arguments, a denial, a typed
    failure such as ``success: false``, a call held for approval).

    Both ``ainvoke`` and ``invoke`` work. ``invoke`` runs the call on an
    event loop of its own (trio), one sync call at a time per tool list, and
    refuses to run inside a running event loop (use ``ainvoke`` there). The
    list is a snapshot of `source`'s tools: a tool registered on the branch
    later needs a new call.

    Args:
        source: a `Branch`, a `Tool`, or a list of Tools (not bound to a
            branch: their calls are recorded nowhere).

    Raises:
        TypeError: `source` is not a Branch, a Tool or a list of Tools.
        ValueError: a tool of the list is bound to a branch, or two share a name.
    """
    tools = tool_source(source)
    lock = threading.Lock()
    flight = _InFlight()
    return [_structured_tool(tools, tool, lock, flight) for tool in tools.tools.values()]


class _InFlight:
    """The calls of this tool list running now on the event loop, to wait for before a pause.

    LangGraph's ToolNode runs a reply's calls concurrently, and an
    ``interrupt()`` in one ends the node while the others may still run;
    they would then finish unrecorded and run again when the node is re-run
    on resume. A held call therefore waits until every other call is done or
    is itself about to pause.
    """

    def __init__(self) -> None:
        self.running: set[int] = set()
        self.pausing: set[int] = set()
        self.changed: anyio.Event | None = None
        self.count = 0

    def _notify(self) -> None:
        if self.changed is not None:
            self.changed.set()
            self.changed = None

    @contextlib.asynccontextmanager
    async def track(self) -> AsyncIterator[int]:
        self.count += 1
        key = self.count
        self.running.add(key)
        try:
            yield key
        finally:
            self.running.discard(key)
            self.pausing.discard(key)
            self._notify()

    async def settle_others(self, own: int) -> None:
        self.pausing.add(own)
        self._notify()
        while self.running - self.pausing:
            if self.changed is None:
                self.changed = anyio.Event()
            await self.changed.wait()


def _structured_tool(
    source: ToolSource, tool: Tool, lock: threading.Lock, flight: _InFlight
) -> StructuredTool:
    schema = tool.schema("openai")["function"]
    name = tool.name

    async def invoke(**arguments: Any) -> tuple[Any, dict[str, Any]]:
        call_id = arguments.pop(_CALL_ID, None)
        sync = arguments.pop(_SYNC, False)
        if sync:
            action = await _run(source, name, arguments, call_id, None)
        else:
            async with flight.track() as own:
                action = await _run(source, name, arguments, call_id, (flight, own))
        seen = pending_payload(action.pending) if action.pending is not None else model_view(action)
        content = json.dumps(seen, ensure_ascii=False, default=str)
        if call_id is None:
            return content, seen
        # The tool's own answer (its predicate or response model), as the
        # CLI and the MCP server ask it; a held call has not succeeded either.
        failed = action.pending is not None or not action.ok or action.failed
        message = ToolMessage(
            content,
            artifact=seen,
            tool_call_id=call_id,
            name=name,
            status="error" if failed else "success",
        )
        return message, seen

    def invoke_sync(**arguments: Any) -> tuple[Any, dict[str, Any]]:
        import functools

        import trio

        library = running_event_loop()
        if library is not None:
            raise RuntimeError(
                f"tool {name!r} was invoked synchronously inside a running {library} event "
                f"loop; use `await tool.ainvoke(...)` there"
            )
        with lock:
            return trio.run(functools.partial(invoke, **arguments, **{_SYNC: True}))

    return _LionfactoryStructuredTool(
        name=name,
        description=schema["description"],
        args_schema=schema["parameters"],
        func=invoke_sync,
        coroutine=invoke,
        response_format="content_and_artifact",
    )


async def _run(
    source: ToolSource,
    name: str,
    arguments: dict[str, Any],
    call_id: str | None,
    flight: tuple[_InFlight, int] | None,
) -> ActionResult:
    """Run one call, carrying out a decision on a held call and pausing a graph for one."""
    graph = _in_graph()
    if call_id is not None and graph:
        answered = recorded_answer(source, call_id, name, arguments)
        if answered is not None:
            return answered  # LangGraph re-ran the node of an interrupt: no second run
    held = source.held(call_id, name, arguments) if call_id is not None else None
    if held is None:
        action = await source.call(name, arguments, call_id=call_id)
        held = action.pending
        if held is None:
            return action
        if not graph:
            return action
    if not held.decided and graph:
        if flight is not None:
            await flight[0].settle_others(flight[1])
        decision = _interrupt(
            {
                "call_id": held.id,
                "tool": held.tool,
                "arguments": held.arguments,
                "reason": held.reason,
                "hook": held.hook,
            }
        )
        _apply(source, held.id, decision)
    return await source.carry_out(held.id)


def _in_graph() -> bool:
    """Whether the call runs inside a LangGraph node (where ``interrupt()`` works)."""
    try:
        from langgraph._internal._constants import CONFIG_KEY_SCRATCHPAD
        from langgraph.config import get_config
    except ImportError:
        return False
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:
        return False
    return CONFIG_KEY_SCRATCHPAD in configurable


def _interrupt(value: dict[str, Any]) -> Any:
    from langgraph.types import interrupt

    return interrupt(value)


def _apply(source: ToolSource, call_id: str, decision: Any) -> None:
    """Record a LangGraph resume value as the branch's decision on the held call.

    Accepted: True / ``"approve"`` / ``{"decision": "approve", "arguments":
    {...}}`` to approve (optionally edited); False / ``"deny"`` /
    ``{"decision": "deny", "reason": "..."}`` to deny.
    """
    verdict: Any = decision
    arguments: Mapping[str, Any] | None = None
    reason = "a person denied the call"
    if isinstance(decision, Mapping):
        verdict = decision.get("decision", decision.get("approve"))
        if isinstance(decision.get("arguments"), Mapping):
            arguments = decision["arguments"]
        if isinstance(decision.get("reason"), str) and decision["reason"].strip():
            reason = decision["reason"]
    if verdict in (True, "approve", "approved", "allow"):
        source.decide(call_id, approve=True, arguments=arguments)
    elif verdict in (False, "deny", "denied", "reject"):
        source.decide(call_id, approve=False, reason=reason)
    else:
        raise ValueError(
            f"resume a held lionfactory call with True/False, 'approve'/'deny' or "
            f"{{'decision': 'approve'|'deny', 'arguments': {{...}}, 'reason': '...'}}; "
            f"got {decision!r:.200}"
        )

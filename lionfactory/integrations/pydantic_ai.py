"""lionfactory's tools as a pydantic-ai toolset.

    from pydantic_ai import Agent
    from lionfactory.integrations.pydantic_ai import pydantic_ai_toolset

    agent = Agent(model, toolsets=[pydantic_ai_toolset(branch)])

Approvals use pydantic-ai's deferred tools. A call that a lionfactory hook
asks about (`ApprovalRequired`, a coding `Rule` with ``"ask"``) is held on
the branch and raised to pydantic-ai as its own ``ApprovalRequired``, so an
agent whose ``output_type`` includes ``DeferredToolRequests`` ends the run
with the call in ``approvals``; resuming with ``DeferredToolResults`` runs
the lionfactory call exactly once (a ``ToolApproved(override_args=...)``
runs the edited arguments, which the hooks judge again)::

    agent = Agent(model, output_type=[str, DeferredToolRequests], toolsets=[toolset])
    result = await agent.run("deploy")
    if isinstance(result.output, DeferredToolRequests):
        approvals = {c.tool_call_id: True for c in result.output.approvals}
        decisions = DeferredToolResults(approvals=approvals)
        result = await agent.run(message_history=result.all_messages(),
                                 deferred_tool_results=decisions)

A denial (``False`` or ``ToolDenied``) is answered by pydantic-ai itself and
never reaches the toolset; call ``branch.deny(call_id, reason)`` too if the
branch is kept, so its record of the call is settled.

Install with ``pip install 'lionfactory[pydantic-ai]'`` (``pydantic-ai-slim``
is enough: the toolset needs no provider).
"""

from __future__ import annotations

from typing import Any

from lionfactory.integrations._calls import missing_extra

try:
    from pydantic_ai import ApprovalRequired as DeferForApproval
    from pydantic_ai import ModelRetry, RunContext
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise missing_extra(__name__, "pydantic-ai", "pydantic-ai") from exc
from pydantic_core import SchemaValidator, core_schema

from lionfactory.integrations._calls import (
    Source,
    ToolSource,
    is_input_error,
    model_view,
    tool_source,
)

__all__ = ["pydantic_ai_toolset"]

# pydantic-ai only checks that the arguments are a JSON object; lionfactory's
# own pipeline validates them, so an invalid call reaches the branch, is
# recorded there, and its error text is the one lionfactory's loop would show.
_ANY_OBJECT = SchemaValidator(
    core_schema.dict_schema(core_schema.str_schema(), core_schema.any_schema())
)


def pydantic_ai_toolset(
    source: Source, *, id: str | None = None, max_retries: int = 2
) -> AbstractToolset[Any]:
    """A pydantic-ai toolset offering `source`'s tools.

    From a `Branch` the toolset is live: each agent step offers the branch's
    tools as they are then (a tool registered later shows up, an
    unregistered one goes), and every call runs as `Branch.act` runs it,
    recorded on that branch under pydantic-ai's tool call id. Invalid
    arguments (a `ToolInputError`) become `ModelRetry`, so pydantic-ai asks
    the model to correct the call with lionfactory's error text; a denial,
    an unknown tool or an unexpected failure comes back as the error
    payload the model reads, and typed failures (``success: false``) as the
    tool's response.

    Args:
        source: a `Branch`, a `Tool`, or a list of Tools (not bound to a
            branch: their calls are recorded nowhere).
        id: the toolset's id, unique among an agent's toolsets.
        max_retries: how many corrected attempts pydantic-ai allows per tool.

    Raises:
        TypeError: `source` is not a Branch, a Tool or a list of Tools.
        ValueError: a tool of the list is bound to a branch, or two share a
            name; a negative `max_retries`.
    """
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
    return _LionfactoryToolset(tool_source(source), id, max_retries)


class _LionfactoryToolset(AbstractToolset[Any]):
    """A toolset over a `ToolSource`: schemas from our tools, calls through our pipeline."""

    def __init__(self, source: ToolSource, id: str | None, max_retries: int) -> None:
        self._source = source
        self._id = id
        self._max_retries = max_retries

    def __repr__(self) -> str:
        where = self._source.branch if self._source.branch is not None else "a tool list"
        return f"<lionfactory toolset over {where!r}>"

    @property
    def id(self) -> str | None:
        return self._id

    @property
    def label(self) -> str:
        return "lionfactory toolset"

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools: dict[str, ToolsetTool[Any]] = {}
        for name, tool in self._source.tools.items():
            schema = tool.schema("openai")["function"]
            definition = ToolDefinition(
                name=name,
                description=schema["description"],
                parameters_json_schema=schema["parameters"],
            )
            tools[name] = ToolsetTool(
                toolset=self,
                tool_def=definition,
                max_retries=self._max_retries,
                args_validator=_ANY_OBJECT,
            )
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        call_id = ctx.tool_call_id or ""
        if ctx.tool_call_approved:
            action = await self._source.call_approved(name, tool_args, call_id=call_id)
        else:
            action = await self._source.call(name, tool_args, call_id=call_id or None)
            if action.pending is not None:
                # Held on the branch; pydantic-ai ends the run with it in
                # DeferredToolRequests.approvals and calls again once approved.
                raise DeferForApproval(
                    metadata={"reason": action.pending.reason, "hook": action.pending.hook}
                )
        if is_input_error(action):
            raise ModelRetry(action.error or "the arguments were invalid")
        return model_view(action)

"""What every framework adapter shares: which tools it offers and how one call runs.

A framework asks two questions of an adapter: which tools are there, and
what did this call produce. Both are answered here once, so the four
adapters differ only in the foreign shapes they build.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from lionfactory._acting import ActionResult, execute_call
from lionfactory._branch import Branch
from lionfactory._messages import ToolCall
from lionfactory._tool import Tool
from lionfactory.errors import ToolInputError

__all__ = ["Source", "ToolSource", "is_input_error", "model_view", "tool_source"]

Source = Branch | Tool | Sequence[Tool]
"""What an adapter is built from: a branch (live), one tool, or a list of tools."""


@attrs.frozen
class ToolSource:
    """The tools an adapter offers, and where their calls are recorded.

    Attributes:
        branch: the branch whose tools are offered and on which every call is
            recorded, or None for a fixed list.
        fixed: the fixed list's tools by name (empty for a branch).
        owner: the branch id a fixed list's calls run under (no branch
            records them, so they get an id of their own).
    """

    branch: Branch | None
    fixed: Mapping[str, Tool]
    owner: uuid.UUID = attrs.field(factory=uuid.uuid4)

    @property
    def tools(self) -> Mapping[str, Tool]:
        """The tools offered right now (a branch's are looked up at every call)."""
        return self.branch.tools if self.branch is not None else self.fixed

    async def call(
        self, name: str, arguments: Mapping[str, Any], *, call_id: str | None = None
    ) -> ActionResult:
        """Run one call; through a branch it is recorded there as `Branch.act` records it."""
        if self.branch is not None:
            return await self.branch.act(name, arguments, call_id=call_id)
        call = ToolCall(name=name, arguments=dict(arguments))
        if call_id:
            call = call.model_copy(update={"id": call_id})
        return await execute_call(self.owner, self.fixed, call)


def tool_source(source: Source) -> ToolSource:
    """Check what an adapter was given and wrap it.

    Raises:
        TypeError: `source` is not a Branch, a Tool or a list of Tools.
        ValueError: two tools share a name, or a tool is bound to a branch
            (its calls must run through that branch: pass the branch).
    """
    if isinstance(source, Branch):
        return ToolSource(branch=source, fixed={})
    tools = [source] if isinstance(source, Tool) else source
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise TypeError(f"expected a Branch, a Tool or a list of Tools, got {source!r:.200}")
    fixed: dict[str, Tool] = {}
    for tool in tools:
        if not isinstance(tool, Tool):
            raise TypeError(f"expected a Branch, a Tool or a list of Tools, got {tool!r:.200}")
        if tool.bound_to is not None:
            # Its policy (the read-before-edit guard, nudges) reads the branch's
            # messages; run outside that branch, every call would miss them.
            raise ValueError(
                f"tool {tool.name!r} is bound to branch {tool.bound_to}; "
                f"pass that Branch to the adapter instead of its tools"
            )
        if tool.name in fixed:
            raise ValueError(f"two tools are named {tool.name!r}; tool names must be unique")
        fixed[tool.name] = tool
    return ToolSource(branch=None, fixed=fixed)


def model_view(action: ActionResult) -> dict[str, Any]:
    """What the model reads about a call: the tool's response, or the error payload.

    The error payload (``error``, ``error_type``, ``errors`` for invalid
    input) is the one `Branch.act` recorded on the tool message, so a
    framework's model reads exactly what lionfactory's own loop would show it.
    """
    return action.payload


def is_input_error(action: ActionResult) -> bool:
    """Whether the call failed on its arguments (the model can correct and retry)."""
    return isinstance(action.exception, ToolInputError)

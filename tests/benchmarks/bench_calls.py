"""Target 2: the overhead of a tool call and of `Branch.act`.

Times N awaits of a trivial async function directly (the baseline), N
``await tool(...)`` calls of the same function wrapped by `function_tool`,
and N ``branch.act(...)`` calls of that tool, all in one trio run. Reports
the overhead in microseconds per call over the direct await (targets: under
50 us per tool call, under 150 us per act) and the ratio to the direct call.
A sync function (which runs in a worker thread) is reported for information.
"""

from __future__ import annotations

from typing import Any

import trio
from _common import Row, Size, abest_of, info_row, sizes

from lionfactory import Branch, function_tool

BENCH = "calls"
TOOL_BUDGET_US = 50
ACT_BUDGET_US = 150

SIZES: dict[Size, dict[str, Any]] = {
    "tiny": {"calls": 200, "repeat": 2},
    "full": {"calls": 10_000, "repeat": 5},
}


async def noop(x: int) -> int:
    """Return `x` (the trivial tool)."""
    return x


def noop_sync(x: int) -> int:
    """Return `x` (the trivial tool, sync: it runs in a worker thread)."""
    return x


def run(size: Size) -> list[Row]:
    params = sizes(size, SIZES)
    n, repeat = params["calls"], params["repeat"]
    tool = function_tool(noop)
    sync_tool = function_tool(noop_sync)

    async def direct() -> None:
        for i in range(n):
            await noop(i)

    async def through_tool() -> None:
        for i in range(n):
            await tool(x=i)

    async def through_sync_tool() -> None:
        for i in range(n):
            await sync_tool(x=i)

    async def through_act() -> None:
        # A fresh branch per repetition, so the log grows the same way each time.
        branch = Branch("benchmark")
        branch.register(tool)
        for i in range(n):
            await branch.act("noop", {"x": i})

    async def measure() -> dict[str, float]:
        return {
            "direct": await abest_of(direct, repeat),
            "tool": await abest_of(through_tool, repeat),
            "act": await abest_of(through_act, repeat),
            "sync": await abest_of(through_sync_tool, max(1, repeat // 2)),
        }

    seconds = trio.run(measure)
    per_call = {name: value / n * 1e6 for name, value in seconds.items()}
    base = per_call["direct"]
    return [
        info_row(BENCH, f"direct await fn() ({n:,} calls)", base, "us"),
        overhead_row("await tool(...) per call", per_call["tool"], base, TOOL_BUDGET_US),
        overhead_row("branch.act(...) per call", per_call["act"], base, ACT_BUDGET_US),
        info_row(
            BENCH, "await tool(...) of a sync fn (thread)", per_call["sync"], "us", baseline=base
        ),
    ]


def overhead_row(name: str, value: float, base: float, budget: float) -> Row:
    """A per-call time whose overhead over the direct await must stay under `budget` us."""
    return Row(BENCH, name, value, base, "us", f"< {budget:g} us over base", value - base < budget)

"""Target 2: the overhead of a tool call and of `Branch.act`, layer by layer.

Times N awaits of a trivial async function directly (the baseline), N
``await tool(...)`` calls of the same function wrapped by `function_tool`
(the raw tool call), and N ``branch.act(...)`` calls of that tool, in
alternating rounds of one trio run. Reports the tool call's overhead over the
direct await (target: under 50 us) and `Branch.act`'s overhead over the raw
tool call (target: at most 20 us).

The act overhead is then taken apart: each layer `Branch.act` adds around the
tool call (the arguments and the `ToolCall` record, the call-id mapping, the
assistant message, the call's context scope, the result's JSON encoding, the
tool message, the `ActionResult` and its failure check, the two log appends)
is timed in place, N times, through the library's own functions, and printed
with its share of the staged overhead; what the staged copy leaves out (the
end-to-end overhead minus the staged sum) is printed after the layers. The
garbage collector's pauses are a layer of their own: the log keeps every
call's records, so collections come (and full ones traverse the grown log)
in an act loop and never in the raw tool loop, whose objects are all freed
at once; timed inside the stage they happened to interrupt, they made the
tool call look three times as slow as alone and hid half of the end-to-end
overhead. A sync function (which runs in a worker thread) is reported for
information.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import trio
from _common import Row, Size, abest_of, info_row, interleaved, sizes

from lionfactory import Branch, function_tool
from lionfactory._acting import _ended, _tool_message, arguments_object
from lionfactory._call import CallContext, enter_call, leave_call
from lionfactory._messages import call_message, encode_json, new_tool_call

BENCH = "calls"
TOOL_BUDGET_US = 50
ACT_BUDGET_US = 20
TOOL_LAYER = "the tool call itself (tool.invoke)"
GC_LAYER = "garbage collection (pauses while the log grows)"

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

    async def measure() -> tuple[dict[str, float], dict[str, float]]:
        totals = await interleaved(
            {"direct": direct, "tool": through_tool, "act": through_act}, repeat
        )
        totals["sync"] = await abest_of(through_sync_tool, max(1, repeat // 2))
        return totals, await _layers(tool, n, repeat)

    seconds, layer_seconds = trio.run(measure)
    per_call = {name: value / n * 1e6 for name, value in seconds.items()}
    base, raw = per_call["direct"], per_call["tool"]
    overhead = per_call["act"] - raw
    rows = [
        info_row(BENCH, f"direct await fn() ({n:,} calls)", base, "us"),
        Row(
            BENCH,
            "await tool(...) per call",
            raw,
            base,
            "us",
            f"< {TOOL_BUDGET_US:g} us over base",
            raw - base < TOOL_BUDGET_US,
        ),
        Row(
            BENCH,
            "branch.act(...) per call",
            per_call["act"],
            raw,
            "us",
            f"<= {ACT_BUDGET_US:g} us over the tool call",
            overhead <= ACT_BUDGET_US,
        ),
        info_row(BENCH, "branch.act(...) overhead over the tool call", overhead, "us"),
    ]
    layers = {name: value / n * 1e6 for name, value in layer_seconds.items()}
    inner = layers.pop(TOOL_LAYER)
    staged = sum(layers.values())
    rows.append(
        info_row(
            BENCH,
            "staged act, layers timed in place: overhead over its own tool call",
            staged,
            "us",
            baseline=inner,
        )
    )
    for layer, us in layers.items():
        rows.append(info_row(BENCH, f"  act layer: {layer} ({_share(us, staged)})", us, "us"))
    # What the staged copy leaves out: `act`'s and `execute_call`'s own
    # frames, the tool lookups and the outcome checks. Two separate
    # best-of figures, so on a loaded machine it is noise, and may be below 0.
    rows.append(
        info_row(
            BENCH,
            "  not staged: end-to-end act overhead minus the staged sum",
            overhead - staged,
            "us",
        )
    )
    rows.append(
        info_row(
            BENCH, "await tool(...) of a sync fn (thread)", per_call["sync"], "us", baseline=base
        )
    )
    return rows


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%} of it" if whole > 0 else "-"


async def _layers(tool: Any, n: int, repeat: int) -> dict[str, float]:
    """The layers of `Branch.act`, timed in place: seconds for N calls, per layer.

    The calls run through a staged copy of ``Branch._act`` and
    ``execute_call`` made of the library's own functions, in their order,
    with a `time.perf_counter_ns` reading between stages: timing each layer
    alone in a tight loop measured well under its cost inside a call
    (caches warm for one function), so the layers did not add up. The
    garbage collector's pauses (read through `gc.callbacks`) are taken out
    of the stage they interrupted and reported as `GC_LAYER`. The success
    path is what a valid call takes; the error branches do not run.
    """
    names = [
        "arguments and the ToolCall record",
        "call-id mapping (provider_call_ids)",
        "assistant message",
        "assistant message log append",
        "call context scope",
        TOOL_LAYER,
        "result encoding (encode_json)",
        "tool message",
        "ActionResult and failure check",
        "tool message log append",
    ]
    best = [float("inf")] * (len(names) + 1)
    clock = time.perf_counter_ns
    paused = [0, 0]  # nanoseconds paused so far, the start of the running pause

    def on_gc(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            paused[1] = clock()
        else:
            paused[0] += clock() - paused[1]

    gc.callbacks.append(on_gc)
    try:
        for _ in range(repeat):
            branch = Branch("benchmark")
            branch.register(tool)
            log = branch.messages
            spent = [0] * (len(names) + 1)
            paused[0] = 0
            for i in range(n):
                marks = [clock() - paused[0]]
                call = new_tool_call("noop", arguments_object("noop", {"x": i}))
                marks.append(clock() - paused[0])
                # `Branch._act`'s check for a lone call whose id nothing holds.
                if not (call.id and call.id not in branch._pending):
                    raise AssertionError("the staged call took the id-renaming path")
                calls = (call,)
                marks.append(clock() - paused[0])
                message = call_message(calls, {})
                marks.append(clock() - paused[0])
                log.append(message)
                marks.append(clock() - paused[0])
                context = CallContext(call_id=call.id, tool=call.name, branch_id=branch.id)
                token = enter_call(context)  # `execute_call`'s way in and out of the call
                try:
                    marks.append(clock() - paused[0])
                    result = await tool.invoke(call.arguments)
                    marks.append(clock() - paused[0])
                finally:
                    leave_call(token)
                marks.append(clock() - paused[0])
                content = encode_json(result)
                marks.append(clock() - paused[0])
                reply = _tool_message(call, content, context)
                marks.append(clock() - paused[0])
                failed = tool.reports_failure(result)
                _ended(call, reply, result, None, result=result, failed=failed)
                marks.append(clock() - paused[0])
                log.append(reply)
                marks.append(clock() - paused[0])
                stages = [marks[k + 1] - marks[k] for k in range(11)]
                # The scope's cost is its entry (t4-t5) and its exit (t6-t7).
                stages[4] += stages.pop(6)
                for k, value in enumerate(stages):
                    spent[k] += value
            spent[-1] = paused[0]
            best = [min(b, s / 1e9) for b, s in zip(best, spent, strict=True)]
    finally:
        gc.callbacks.remove(on_gc)
    return dict(zip([*names, GC_LAYER], best, strict=True))

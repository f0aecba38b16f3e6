"""Target 5: `Branch.clone()` with the full coding toolkit registered.

Builds branches of 1,000, 10,000 and 100,000 messages, each with the coding
toolkit registered (every tool whose module exists), and times `clone()`.
The baseline is what a clone cannot avoid: ``list(branch.messages)`` plus
calling the factories once more (a new `Branch` and `coding_toolkit`).
Targets: clone costs at most 3x that baseline at every size, and grows
linearly: its marginal cost per message from the middle size to the largest
(the time difference divided by the 90,000 extra messages, which cancels the
constant factory cost) is at most 3x the marginal cost of
``list(branch.messages)``. A clone that was quadratic anywhere would show a
marginal cost growing with the size, far above the list's.

Loading a saved branch (`Branch.from_dict`) looks its factories up in the
factory registry instead of importing them by the path the data names. The
row "load N messages through the registry" times loading the largest
branch's saved data against the same load with the factories imported by
path, as loading did before the registry; target: at most 1.1x.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import resource
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

from _common import Row, Size, best_of, budget_row, check_row, info_row, ratio_row, sizes

from lionfactory import Branch, Message
from lionfactory._registration import FACTORIES
from lionfactory.coding import ALL_CODING_TOOLS, DEFAULT_CODING_TOOLS, coding_toolkit

BENCH = "clone"

SIZES: dict[Size, dict[str, Any]] = {
    "tiny": {"messages": (100, 1_000, 3_000), "load": 2_000, "repeat": 3, "kept": (5, 50)},
    "full": {
        "messages": (1_000, 10_000, 100_000),
        "load": 10_000,
        "repeat": 15,
        "kept": (50, 1_000),
    },
}


def toolkit_names() -> tuple[str, ...]:
    """Every coding tool whose module exists (sandbox and subagent may be missing)."""
    optional = {"sandbox": "lionfactory.coding.sandbox", "subagent": "lionfactory.coding.subagent"}
    missing = {n for n, module in optional.items() if importlib.util.find_spec(module) is None}
    return tuple(n for n in ALL_CODING_TOOLS if n not in missing) or DEFAULT_CODING_TOOLS


def make_branch(messages: int, root: str, names: tuple[str, ...]) -> Branch:
    branch = Branch("You are a benchmark.")
    branch.register(coding_toolkit, workspace_root=root, tools=names)
    for i in range(messages - 1):  # the system message is the first
        role = "user" if i % 2 == 0 else "assistant"
        branch.messages.append(Message(role=role, content=f"message {i}"))
    return branch


def import_by_path(name: str, *, what: str = "factory") -> Any:
    """How loading found a factory before the registry: import the module the data names."""
    module, _, qualname = name.partition(":")
    target: Any = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def load_rows(branch: Branch, repeat: int) -> list[Row]:
    data = branch.to_dict()
    count = len(branch.messages.record)
    registry = best_of(lambda: Branch.from_dict(data), repeat)
    resolve = FACTORIES.resolve
    FACTORIES.resolve = import_by_path  # type: ignore[method-assign]
    try:
        by_path = best_of(lambda: Branch.from_dict(data), repeat)
    finally:
        del FACTORIES.resolve  # back to the class's method
    assert FACTORIES.resolve == resolve
    loaded = Branch.from_dict(data)
    return [
        ratio_row(
            BENCH,
            f"load {count:,} messages through the registry",
            registry * 1e3,
            by_path * 1e3,
            "ms",
            1.1,
        ),
        check_row(
            BENCH,
            "a loaded branch holds every message, own tools",
            len(loaded.messages.record) == count
            and all(tool.bound_to in (None, loaded.id) for tool in loaded.tools.values()),
            "correct",
        ),
    ]


def run(size: Size) -> list[Row]:
    params = sizes(size, SIZES)
    repeat = params["repeat"]
    names = toolkit_names()
    rows: list[Row] = []
    growth: list[tuple[float, float]] = []  # (clone, list) seconds per size
    with tempfile.TemporaryDirectory(prefix="lf-bench-clone-") as root:

        def factories() -> None:
            coding_toolkit(Branch("You are a benchmark."), workspace_root=root, tools=names)

        factory_time = best_of(factories, repeat)
        rows.append(
            info_row(BENCH, f"factory calls ({len(names)} tools)", factory_time * 1e3, "ms")
        )
        isolated = True
        for count in params["messages"]:
            branch = make_branch(count, root, names)
            listing = best_of(lambda: list(branch.messages), repeat)  # noqa: B023 - called now
            clone_time = best_of(branch.clone, repeat)
            base = listing + factory_time
            growth.append((clone_time, listing))
            rows.append(
                ratio_row(BENCH, f"clone {count:,} messages", clone_time * 1e3, base * 1e3, "ms", 3)
            )
            rows.append(
                info_row(
                    BENCH,
                    f"clone {count:,} messages: per message",
                    clone_time / count * 1e6,
                    "us",
                    baseline=base / count * 1e6,
                )
            )
            clone = branch.clone()
            isolated = (
                isolated
                and len(clone.messages) == count
                and all(tool.bound_to in (None, clone.id) for tool in clone.tools.values())
            )
    (_, _), (clone_mid, list_mid), (clone_top, list_top) = growth
    middle, top = params["messages"][1:]
    extra = top - middle
    rows.append(
        ratio_row(
            BENCH,
            f"marginal cost per message {middle:,} -> {top:,}",
            max(clone_top - clone_mid, 0.0) / extra * 1e9,
            max(list_top - list_mid, 1e-9) / extra * 1e9,
            "ns",
            3,
        )
    )
    rows.append(check_row(BENCH, "clones hold every message, own tools", isolated, "correct"))
    with tempfile.TemporaryDirectory(prefix="lf-bench-load-") as root:
        rows.extend(load_rows(make_branch(params["load"], root, names), repeat))
    rows += memory_rows(1_000, names, *params["kept"])
    return rows


def memory_rows(messages: int, names: tuple[str, ...], traced: int, many: int) -> list[Row]:
    """What each kept clone of a toolkit branch allocates, and 1,000 clones' RSS growth.

    A clone shares what is immutable (the messages themselves, compiled
    matchers, schemas) with its source; what it owns is its tools, its
    registrations and the list of message references.
    """
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="lf-bench-clone-") as root:
        branch = make_branch(messages, root, names)
        branch.clone()  # warm every cache a first clone fills
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept = [branch.clone() for _ in range(traced)]
        per_clone = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
        tracemalloc.stop()
        refs = list(branch.messages)
        rows.append(
            budget_row(
                BENCH,
                f"memory per kept clone ({messages:,} messages, full toolkit)",
                per_clone / 1024,
                50,
                "KiB",
            )
        )
        rows.append(
            info_row(
                BENCH,
                "memory of the message references alone",
                sys.getsizeof(refs) / 1024,
                "KiB",
            )
        )
        del kept
        gc.collect()
        start = _rss_kib()
        clones = [branch.clone() for _ in range(many)]
        # Scaled to 1,000 clones (the tiny size keeps fewer).
        grown = (_rss_kib() - start) / 1024 * 1_000 / many
        rows.append(
            budget_row(BENCH, f"RSS growth for 1,000 kept clones ({many:,} kept)", grown, 50, "MiB")
        )
        del clones
    return rows


def _rss_kib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return float(line.split()[1])
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)

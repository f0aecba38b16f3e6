"""Shared helpers of the benchmarks: rows, timing, tables, child-process memory.

Every benchmark compares lionfactory with a baseline measured in the same run,
on the same data, so the ratios hold on any machine while the absolute
figures do not. Timings are the minimum of several repetitions (the minimum
is the run least disturbed by other work on a shared machine). Memory is
measured in a fresh ``python -c`` child so that nothing this process already
allocated hides or inflates the figure.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

Size = Literal["tiny", "full"]

BENCH_DIR = Path(__file__).resolve().parent

MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured figure, its baseline and whether it meets its target.

    Attributes:
        bench: the benchmark's name (``reader``, ``calls``, ...).
        name: what was measured.
        value: the figure, in `unit`.
        baseline: the same-run baseline in `unit`, or None when the figure
            stands alone (an absolute budget, a yes/no check).
        unit: ``s``, ``ms``, ``us``, ``MiB``, ``x`` or ``bool`` (1.0 = yes).
        target: the promise in words (``<= 2x``, ``< 50 us``), or ``""``.
        met: whether the target holds; None for an informational row.
    """

    bench: str
    name: str
    value: float
    baseline: float | None
    unit: str
    target: str = ""
    met: bool | None = None

    @property
    def ratio(self) -> float | None:
        """``value / baseline``, or None without a (positive) baseline."""
        if self.baseline is None or self.baseline <= 0:
            return None
        return self.value / self.baseline

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-ready data, ratio included."""
        return {**dataclasses.asdict(self), "ratio": self.ratio}


def ratio_row(bench: str, name: str, value: float, baseline: float, unit: str, limit: float) -> Row:
    """A row whose target is ``value <= limit * baseline``."""
    met = baseline > 0 and value <= limit * baseline
    return Row(bench, name, value, baseline, unit, f"<= {limit:g}x", met)


def budget_row(
    bench: str, name: str, value: float, limit: float, unit: str, *, baseline: float | None = None
) -> Row:
    """A row whose target is an absolute budget, ``value < limit``."""
    return Row(bench, name, value, baseline, unit, f"< {limit:g} {unit}", value < limit)


def info_row(
    bench: str, name: str, value: float, unit: str, *, baseline: float | None = None
) -> Row:
    """A row without a target: a figure that explains the others."""
    return Row(bench, name, value, baseline, unit)


def check_row(bench: str, name: str, ok: bool, target: str) -> Row:
    """A yes/no correctness check, shown as 1 (yes) or 0 (no)."""
    return Row(bench, name, 1.0 if ok else 0.0, None, "bool", target, ok)


# -- timing ---------------------------------------------------------------------


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """The shortest of `repeat` timed calls of `fn`, in seconds."""
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


async def abest_of(fn: Callable[[], Awaitable[object]], repeat: int) -> float:
    """The shortest of `repeat` timed awaits of `fn()`, in seconds."""
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        best = min(best, time.perf_counter() - start)
    return best


async def interleaved(
    subjects: Mapping[str, Callable[[], object]], repeat: int
) -> dict[str, float]:
    """The shortest time of each subject, measured in alternating rounds, in seconds.

    A subject is a sync or an async callable (an awaitable result is
    awaited). Alternating baseline and subject round by round, instead of
    timing all of one and then all of the other, exposes both to the same
    moments of a shared machine's load, so their ratio stays honest.
    """
    best = dict.fromkeys(subjects, math.inf)
    for _ in range(repeat):
        for name, fn in subjects.items():
            start = time.perf_counter()
            result = fn()
            if inspect.isawaitable(result):
                await result
            best[name] = min(best[name], time.perf_counter() - start)
    return best


# -- memory in a child process -------------------------------------------------

# The child imports a benchmark module, lets a setup function prepare the
# operation (imports, tools, data) and only then takes its baselines, so the
# figures are the operation's own growth, not the interpreter's or the imports'.
#
# Resident memory comes from /proc/self/status (VmRSS, VmHWM) after resetting
# the high-water mark through /proc/self/clear_refs. getrusage's ru_maxrss is
# the fallback only: Linux carries a parent's peak across fork and exec into
# the child's ru_maxrss, so a child of a big benchmark process would start
# with the parent's peak and hide the operation's growth.
_CHILD = """\
import importlib, json, resource, sys, time, tracemalloc
sys.path.insert(0, {bench_dir!r})

def status(field):
    try:
        with open("/proc/self/status") as lines:
            for line in lines:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None

def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as out:
            out.write("5")
        return True
    except OSError:
        return False

setup = getattr(importlib.import_module({module!r}), {function!r})
op = setup(**json.loads(sys.argv[1]))
exact = reset_peak() and status("VmHWM") is not None
rss_before = status("VmRSS") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
tracemalloc.start()
start = time.perf_counter()
result = op()
elapsed = time.perf_counter() - start
traced_peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
rss_peak = status("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{
    "traced_peak": traced_peak,
    "rss_growth": max(rss_peak - rss_before, 0),
    "rss_peak": rss_peak,
    "rss_source": "VmHWM" if exact else "ru_maxrss",
    "elapsed": elapsed,
    "result": result,
}}))
"""


def child_memory(module: str, function: str, **kwargs: Any) -> dict[str, Any]:
    """Run ``module.function(**kwargs)()`` in a fresh interpreter and measure it.

    `function` is a setup function that returns the zero-argument operation
    to measure (its return value must be JSON-ready). The child reports
    ``traced_peak`` (tracemalloc's peak of Python allocations during the
    operation, bytes), ``rss_growth`` (the peak resident set during the
    operation less the resident set before it, bytes; from ``/proc`` on
    Linux, else from ``getrusage``), ``rss_source``,
    ``elapsed`` (seconds, slowed by tracemalloc) and ``result``.

    Raises:
        RuntimeError: the child failed; the message holds its stderr.
    """
    code = _CHILD.format(bench_dir=str(BENCH_DIR), module=module, function=function)
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(kwargs)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    if done.returncode != 0:
        raise RuntimeError(f"{module}.{function} failed in a child:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# -- output ----------------------------------------------------------------------


def _number(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bool":
        return "yes" if value else "no"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def format_table(rows: Iterable[Row]) -> str:
    """The rows as an aligned plain-text table (Markdown pipe syntax)."""
    header = ["benchmark", "measurement", "value", "baseline", "ratio", "target", "met"]
    body = []
    for row in rows:
        ratio = row.ratio
        body.append(
            [
                row.bench,
                row.name,
                f"{_number(row.value, row.unit)} {row.unit if row.unit != 'bool' else ''}".strip(),
                "-" if row.baseline is None else f"{_number(row.baseline, row.unit)} {row.unit}",
                "-" if ratio is None else f"{_number(ratio, 'x')}x",
                row.target or "-",
                {True: "yes", False: "NO", None: "-"}[row.met],
            ]
        )
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), rule, *(line(cells) for cells in body)])


def sizes(size: Size, table: Mapping[Size, dict[str, Any]]) -> dict[str, Any]:
    """The parameters of one size, refusing an unknown size by name."""
    if size not in table:
        raise ValueError(f"size must be one of {sorted(table)}, got {size!r}")
    return dict(table[size])

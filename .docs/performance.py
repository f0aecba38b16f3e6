"""Write the Performance page from the benchmarks' JSON results.

    python .docs/performance.py            # pages/performance.md from benchmarks.json
    python .docs/performance.py --run      # run the benchmarks (full size) first,
                                           # saving their JSON to benchmarks.json
    python .docs/performance.py --check    # exit 1 if the page is not what the
                                           # committed results give

``--run`` passes any further arguments to ``tests/benchmarks/run.py``
(``--run --only reader,calls`` measures some benchmarks; the page then shows
those). The page is generated, never edited by hand.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "benchmarks.json"
PAGE = HERE / "pages" / "performance.md"
RUN = HERE.parent / "tests" / "benchmarks" / "run.py"

INTRO = """\
# Performance

`python tests/benchmarks/run.py` measures lionfactory's speed and memory
against **baselines taken in the same run, on the same data**: a raw `rg`
beside `search`, a plain loop beside the reader's window, a raw `bwrap true`
beside a confined `bash`, the reference Node server beside `mcp serve`. The
ratios (value / baseline) carry over to other machines; the absolute times
do not. Memory is measured in a fresh child process (tracemalloc and the
peak resident set).

- `--only reader,calls` runs some benchmarks, `--size tiny` runs all of them
  at small sizes in a minute or two (the test suite does, so they never rot);
- `--json` prints the rows as JSON; `--strict` exits 1 when a target is missed.

This page is generated from such a JSON file by `python .docs/performance.py`
(`--run` measures anew first). Short workloads move by 10-20% from run to run
on a small shared machine; a target is a promise the benchmark checks, and a
missed one is shown as missed.
"""


def _number(value: float, unit: str) -> str:
    if unit == "bool":
        return "yes" if value else "no"
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def _with_unit(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s" and abs(value) < 1:
        # Seconds below one read better in ms or us, as the benchmarks print them.
        value, unit = (value * 1e3, "ms") if abs(value) >= 1e-3 else (value * 1e6, "us")
    text = _number(value, unit)
    if unit == "bool":
        return text
    return f"{text}x" if unit == "x" else f"{text} {unit}"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def render(results: dict[str, Any]) -> str:
    """The page's Markdown for one results file."""
    machine = results.get("machine", {})
    lines = [INTRO]
    lines.append("## The run shown here\n")
    facts = [
        ("date (UTC)", results.get("date", "unknown")),
        ("commit", results.get("commit") or "unknown"),
        ("size", results.get("size", "unknown")),
        (
            "machine",
            f"{machine.get('processor', '?')}, {machine.get('cpus', '?')} CPUs, "
            f"{machine.get('system', '?')} {machine.get('release', '')} "
            f"({machine.get('machine', '?')})",
        ),
        ("Python", f"{machine.get('implementation', '')} {machine.get('python', '?')}"),
    ]
    lines += ["| | |", "|---|---|", *(f"| {k} | {_cell(v)} |" for k, v in facts), ""]
    if results.get("size") != "full":
        lines += [
            '!!! warning "Not the full sizes"',
            "",
            f"    These figures come from a `--size {results.get('size')}` run, which only",
            "    checks that every benchmark works; the targets speak of the full sizes.",
            "",
        ]
    rows: list[dict[str, Any]] = results.get("rows", [])
    benches = list(dict.fromkeys(row["bench"] for row in rows))
    for bench in benches:
        own = [row for row in rows if row["bench"] == bench]
        seconds = results.get("seconds", {}).get(bench)
        took = f" ({seconds:.0f} s)" if isinstance(seconds, int | float) else ""
        lines += [
            f"## {bench}\n",
            f"`python tests/benchmarks/run.py --only {bench}`{took}\n",
            "| measurement | value | baseline | ratio | target | met |",
            "|---|---|---|---|---|---|",
        ]
        for row in own:
            ratio = row.get("ratio")
            met = {True: "yes", False: "**missed**", None: "-"}[row.get("met")]
            lines.append(
                "| "
                + " | ".join(
                    [
                        _cell(row["name"]),
                        _with_unit(row["value"], row["unit"]),
                        _with_unit(row.get("baseline"), row["unit"]),
                        "-" if ratio is None else f"{_number(ratio, 'x')}x",
                        _cell(row.get("target") or "-"),
                        met,
                    ]
                )
                + " |"
            )
        lines.append("")
    failures = results.get("failures", {})
    if failures:
        lines += ["## Benchmarks that crashed\n"]
        lines += [f"- `{name}`" for name in failures]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    """Write (or with ``--check`` compare) the page; ``--run`` measures first."""
    if argv[:1] == ["--run"]:
        done = subprocess.run(
            [sys.executable, str(RUN), "--json", *argv[1:]],
            stdout=subprocess.PIPE,
            text=True,
            check=False,
        )
        # 1: a target missed (only with --strict); 2: a benchmark crashed, which
        # the page lists. Anything else left no results to show.
        if done.returncode not in (0, 1, 2) or not done.stdout.strip():
            sys.stderr.write(f"the benchmarks exited with {done.returncode}\n")
            return done.returncode
        RESULTS.write_text(done.stdout, encoding="utf-8")
    page = render(json.loads(RESULTS.read_text(encoding="utf-8")))
    if argv[:1] == ["--check"]:
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE} is not what {RESULTS.name} gives: run python .docs/performance.py")
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

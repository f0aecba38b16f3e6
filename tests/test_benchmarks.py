"""Every benchmark runs at its tiny size and reports finite figures.

The benchmarks report ratios; they do not assert timing targets (a loaded CI
machine would make such assertions flaky). These smoke tests only keep the
scripts from rotting: each one must run, through the real command line, and
produce rows with finite numbers.
"""

from __future__ import annotations

import json
import math
import platform
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parent / "benchmarks"
RUN = BENCHMARKS / "run.py"
NAMES = (
    "reader",
    "calls",
    "processes",
    "search",
    "clone",
    "import",
    "documents",
    "editor",
    "exchange",
    "mcp",
    "code_intel",
    "checkpoints",
)


def run_benchmarks(*args: str) -> subprocess.CompletedProcess[str]:
    # -X faulthandler: a run stuck past the timeout is ended with SIGABRT, and
    # the failure shows where each of its threads was (a hang is a bug to find).
    argv = [sys.executable, "-X", "faulthandler", str(RUN), *args]
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            out, err = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            out, err = process.communicate(timeout=30)
            pytest.fail(f"{' '.join(args)} ran past 120 s; its threads:\n{err[-20000:]}")
    return subprocess.CompletedProcess(argv, process.returncode, out, err)


def tiny_report(name: str) -> dict[str, Any]:
    proc = run_benchmarks("--only", name, "--size", "tiny", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


@pytest.mark.parametrize("name", NAMES)
def test_benchmark_reports_finite_rows_and_a_target_at_tiny_size(name: str) -> None:
    report = tiny_report(name)
    assert report["failures"] == {}
    rows = report["rows"]
    assert rows, f"{name} produced no rows"
    for row in rows:
        assert row["bench"] == name
        assert math.isfinite(row["value"]), row
        assert row["baseline"] is None or math.isfinite(row["baseline"]), row
        assert row["ratio"] is None or math.isfinite(row["ratio"]), row
        assert row["met"] in (True, False, None), row
        assert (row["met"] is None) == (row["target"] == ""), row
    assert any(row["met"] is not None for row in rows), f"{name} checks no target"


def test_every_benchmark_module_is_registered_and_smoke_tested() -> None:
    modules = {path.stem.removeprefix("bench_") for path in BENCHMARKS.glob("bench_*.py")}
    assert modules == set(NAMES)


def test_the_table_output_ends_with_a_summary() -> None:
    proc = run_benchmarks("--only", "calls", "--size", "tiny")
    assert proc.returncode == 0, proc.stderr
    assert "| calls" in proc.stdout
    assert "Summary of `python tests/benchmarks/run.py --only calls --size tiny`" in proc.stdout


def test_an_unknown_benchmark_name_is_refused_with_the_valid_ones() -> None:
    proc = run_benchmarks("--only", "nope")
    assert proc.returncode == 2
    assert "unknown benchmark(s) ['nope']" in proc.stderr
    assert "reader, calls" in proc.stderr


def test_the_json_report_names_the_machine_the_date_and_the_commit() -> None:
    report = tiny_report("calls")
    machine = report["machine"]
    assert machine["python"] == platform.python_version()
    assert machine["cpus"] >= 1 and machine["system"] and machine["machine"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", report["date"])
    assert report["commit"] is None or re.fullmatch(r"[0-9a-f]{4,40}(\+dirty)?", report["commit"])

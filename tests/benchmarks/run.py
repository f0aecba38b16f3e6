"""Run lionfactory's benchmarks and print their figures against same-run baselines.

Usage::

    python tests/benchmarks/run.py                      # every benchmark, full size
    python tests/benchmarks/run.py --only reader,calls  # some of them
    python tests/benchmarks/run.py --size tiny          # a quick run at tiny sizes
    python tests/benchmarks/run.py --json               # rows as JSON on stdout

Every benchmark measures its baseline in the same run, on the same data, so
the ratios hold on any machine. The script reports; it does not judge: it
exits 0 whether or not the targets are met, unless ``--strict`` is given,
when a missed target makes it exit 1. A benchmark that crashes is reported
and makes the exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import Row, format_table  # found through the path set above

BENCHMARKS: dict[str, str] = {
    "reader": "bench_reader",
    "calls": "bench_calls",
    "processes": "bench_processes",
    "search": "bench_search",
    "clone": "bench_clone",
    "import": "bench_import",
    "documents": "bench_documents",
    "editor": "bench_editor",
    "exchange": "bench_exchange",
    "mcp": "bench_mcp",
    "code_intel": "bench_code_intel",
    "checkpoints": "bench_checkpoints",
}
"""Benchmark names, in the order of the targets, and their modules."""


def _names(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown benchmark(s) {unknown or value!r}; choose from {', '.join(BENCHMARKS)}"
        )
    return names


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        type=_names,
        default=list(BENCHMARKS),
        metavar="NAME[,NAME]",
        help=f"run only these benchmarks ({', '.join(BENCHMARKS)})",
    )
    parser.add_argument(
        "--size",
        choices=("tiny", "full"),
        default="full",
        help="tiny: seconds, for smoke tests; full: the sizes the targets speak of (default)",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON only")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    return parser.parse_args(argv)


def summary(
    rows: list[Row], failures: dict[str, str], seconds: dict[str, float], command: str
) -> str:
    """One line per benchmark: targets met and missed, and how long it took."""
    lines = [
        f"Summary of `{command}` (Python {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs)",
        "| benchmark | targets met | missed | seconds |",
        "|-----------|-------------|--------|---------|",
    ]
    for name, took in seconds.items():
        own = [row for row in rows if row.bench == name]
        met = sum(row.met is True for row in own)
        missed = "crashed" if name in failures else str(sum(row.met is False for row in own))
        lines.append(f"| {name} | {met} | {missed} | {took:.1f} |")
    return "\n".join(lines)


def machine() -> dict[str, object]:
    """What the figures were measured on: the interpreter, the platform, the CPUs."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cpus": os.cpu_count(),
    }


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def commit() -> str | None:
    """The checkout's commit (with ``+dirty`` for uncommitted changes), or None."""
    import subprocess

    top = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=top,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=top,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def _write_bytecode() -> None:
    """Compile the package's bytecode cache, as installing it does.

    The start-up rows (the import, the MCP servers' spawn) time fresh
    processes, which read each module's cached bytecode. In a checkout the
    cache of a module changed since it was last imported is stale, and with
    ``PYTHONDONTWRITEBYTECODE`` set (or a read-only tree) every fresh process
    compiles that module again, which an installed package never does.
    """
    import compileall

    import lionfactory

    compileall.compile_dir(Path(lionfactory.__file__).parent, quiet=2)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _write_bytecode()
    rows: list[Row] = []
    failures: dict[str, str] = {}
    seconds: dict[str, float] = {}
    for name in args.only:
        if not args.json:
            print(f"running {name} ({args.size})...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            found = importlib.import_module(BENCHMARKS[name]).run(args.size)
        except Exception:
            failures[name] = traceback.format_exc()
            print(f"benchmark {name} failed:\n{failures[name]}", file=sys.stderr)
            continue
        finally:
            seconds[name] = time.perf_counter() - start
        rows.extend(found)
        if not args.json:
            print(format_table(found), end="\n\n", flush=True)
    missed = [row for row in rows if row.met is False]
    if args.json:
        print(
            json.dumps(
                {
                    "size": args.size,
                    "machine": machine(),
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "commit": commit(),
                    "rows": [row.as_dict() for row in rows],
                    "failures": failures,
                    "seconds": seconds,
                },
                indent=2,
            )
        )
    else:
        given = sys.argv[1:] if argv is None else argv
        command = " ".join(["python tests/benchmarks/run.py", *given])
        print(summary(rows, failures, seconds, command))
        for row in missed:
            print(f"  missed: {row.bench}: {row.name} (target {row.target})")
    if failures:
        return 2
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())

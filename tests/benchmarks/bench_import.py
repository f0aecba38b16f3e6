"""Target 6: the cost of importing lionfactory in a fresh process.

Times ``python -c "import lionfactory, lionfactory.tools, lionfactory.coding"``
(best of several fresh processes; target: under 300 ms of wall time) against
``python -c "pass"`` (the interpreter's own start-up, the baseline), and
checks that the import leaves out the heavy optional dependencies: docling,
docling_core, httpx, mcp and the Python wrappers of ruff and ast-grep. Those
load only when a tool first needs them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from _common import Row, Size, budget_row, check_row, info_row, sizes

BENCH = "import"
BUDGET_MS = 300

IMPORT = "import lionfactory, lionfactory.tools, lionfactory.coding"
HEAVY = frozenset(
    {"docling", "docling_core", "httpx", "mcp", "ruff", "ast_grep_cli", "ast_grep_py"}
)
"""Top-level packages the import must not load."""

SIZES: dict[Size, dict[str, Any]] = {
    "tiny": {"repeat": 2},
    "full": {"repeat": 7},
}


def fresh_process(code: str, repeat: int) -> float:
    """The shortest wall time of `repeat` fresh interpreters running `code`, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        best = min(best, time.perf_counter() - start)
    return best


def heavy_modules() -> list[str]:
    """The heavy top-level packages a fresh import of lionfactory loads (should be none)."""
    code = (
        f"{IMPORT}; import sys, json; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(HEAVY)!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def run(size: Size) -> list[Row]:
    repeat = sizes(size, SIZES)["repeat"]
    fresh_process("pass", 1)  # warm the file cache for both measurements
    fresh_process(IMPORT, 1)
    base = fresh_process("pass", repeat) * 1e3
    total = fresh_process(IMPORT, repeat) * 1e3
    loaded = heavy_modules()
    return [
        budget_row(
            BENCH, "fresh process importing lionfactory", total, BUDGET_MS, "ms", baseline=base
        ),
        info_row(BENCH, "import time over interpreter start-up", total - base, "ms"),
        check_row(
            BENCH,
            "no docling/httpx/mcp/ruff/ast-grep loaded"
            + (f" (loaded: {', '.join(loaded)})" if loaded else ""),
            not loaded,
            "none loaded",
        ),
    ]

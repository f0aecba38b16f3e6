"""Target 3: starting processes through the ``bash`` tool.

* N sequential calls of the standalone ``bash_tool()`` (the default
  isolation ``"none"``, which still runs each command in a PID namespace of
  its own so that nothing outlives the call; the tool's supervisor prepares
  that namespace while the previous command runs) of ``true`` against N
  ``subprocess.run(["true"])`` in the same run (target: at most 1.3x), per
  call; the first call of a new tool (which starts its supervisor) against
  one ``subprocess.run``; for information, against N ``subprocess.run`` of
  the containment argv a call would run without the supervisor (a fresh
  ``bwrap`` each);
  for information, the same through ``anyio.open_process`` directly, the
  floor of any anyio-based runner on this machine; and against the same N
  calls of lionagi's own ``bash_tool`` (the framework lionfactory improves
  on; the ``lionagi`` extra, installed with ``dev``), whose
  ``subprocess.run`` in a worker thread neither isolates the command nor
  makes sure nothing outlives it (target: at most 1.0x, ahead of it);
* M concurrent ``sleep S`` calls through ``branch.act_many`` (target: the
  wall time stays under 2 x S, i.e. the calls really run in parallel);
* for each isolation mechanism available here (bwrap, landlock): N sequential
  isolated ``bash`` calls of ``true`` against N ``subprocess.run`` of the
  mechanism's own argv around ``true`` (the raw mechanism, target: at most
  1.3x), with the absolute cost per call and the ratio to plain ``true``.
  With ``network="none"`` the raw run gets the same seccomp program on a
  descriptor (opened from a file made once), as the seam hands it to bwrap.
  The isolated tool runs its commands through the branch's supervisor (one
  sandbox per branch, started by the first call; its start is reported) and
  as a shell script (``bash -c true``);
* for each mechanism, the latency from ``bash(background=True)`` to the job's
  first output seen by ``jobs(action="wait")``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import trio
from _common import Row, Size, budget_row, check_row, info_row, interleaved, ratio_row, sizes

from lionfactory import Branch
from lionfactory._os.isolation import mechanism_problem, workspace_isolation
from lionfactory._os.landlock_exec import unix_socket_filter
from lionfactory.tools import bash_tool, jobs_tool

BENCH = "processes"

SIZES: dict[Size, dict[str, Any]] = {
    "tiny": {"calls": 10, "concurrent": 4, "sleep": 0.05, "repeat": 2},
    "full": {"calls": 100, "concurrent": 32, "sleep": 0.5, "repeat": 7},
}


def run(size: Size) -> list[Row]:
    params = sizes(size, SIZES)
    n, m, pause, repeat = params["calls"], params["concurrent"], params["sleep"], params["repeat"]
    with tempfile.TemporaryDirectory(prefix="lf-bench-processes-") as root:
        bash = bash_tool(workspace_root=root)
        contained = workspace_isolation("none", Path(root)).launch(
            ["true"], cwd=Path(root), env=None
        )

        def plain() -> None:
            for _ in range(n):
                subprocess.run(["true"], check=True, cwd=root)

        def raw_contained() -> None:
            for _ in range(n):
                subprocess.run(list(contained.argv), check=True, cwd=root)

        async def through_tool() -> None:
            for _ in range(n):
                result = await bash(command="true")
                if result["return_code"] != 0:
                    raise RuntimeError(f"bash true failed: {result}")

        lionagi_bash = _lionagi_bash()

        async def through_lionagi() -> None:
            assert lionagi_bash is not None
            for _ in range(n):
                result = await lionagi_bash(command="true", cwd=root)
                if result["return_code"] != 0:
                    raise RuntimeError(f"lionagi's bash true failed: {result}")

        async def async_floor() -> None:
            # What any anyio-based runner pays: spawn with pipes, wait, close.
            for _ in range(n):
                process = await anyio.open_process(
                    ["true"],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=root,
                    start_new_session=True,
                )
                async with process:
                    await process.wait()

        async def concurrent() -> tuple[float, bool]:
            branch = Branch("benchmark")
            branch.register(bash_tool, workspace_root=root)
            calls = [("bash", {"command": f"sleep {pause}"})] * m
            start = time.perf_counter()
            results = await branch.act_many(calls)
            elapsed = time.perf_counter() - start
            return elapsed, all(r.ok and r.result["return_code"] == 0 for r in results)  # type: ignore[index]

        async def first_call() -> tuple[float, float]:
            # A new tool's first call starts its supervisor (and the first
            # namespace); the tool is dropped after it, which closes both.
            best, once = float("inf"), float("inf")
            for _ in range(repeat):
                fresh = bash_tool(workspace_root=root)
                start = time.perf_counter()
                result = await fresh(command="true")
                best = min(best, time.perf_counter() - start)
                if result["return_code"] != 0:
                    raise RuntimeError(f"first bash true failed: {result}")
                del fresh
                start = time.perf_counter()
                subprocess.run(["true"], check=True, cwd=root)  # noqa: ASYNC221 (the baseline)
                once = min(once, time.perf_counter() - start)
            return best, once

        async def measure() -> tuple[dict[str, float], float, bool]:
            plain()  # warm up: the first exec pays for loading `true`
            best_first, one_plain = await first_call()
            await through_tool()
            subjects: dict[str, Any] = {
                "plain": plain,
                "contained": raw_contained,
                "tool": through_tool,
                "floor": async_floor,
            }
            if lionagi_bash is not None:
                await through_lionagi()  # its first call imports and builds its worker
                subjects["lionagi"] = through_lionagi
            best = await interleaved(subjects, repeat)
            wall, ok = await concurrent()
            best["first"], best["one_plain"] = best_first, one_plain
            return best, wall, ok

        best, wall, ok = trio.run(measure)
        base, tool_time = best["plain"], best["tool"]
        isolated = [
            row for mech in ("bwrap", "landlock") for row in _isolated(mech, root, n, base, repeat)
        ]
    return [
        ratio_row(
            BENCH,
            f"{n} sequential standalone bash_tool() `true` vs subprocess.run(['true'])",
            tool_time,
            base,
            "s",
            1.3,
        ),
        info_row(
            BENCH,
            "standalone bash_tool(): ms per `true` call (baseline: subprocess.run)",
            tool_time / n * 1000,
            "ms",
            baseline=base / n * 1000,
        ),
        info_row(
            BENCH,
            "standalone bash_tool(): ms of a new tool's first call (starts its supervisor; "
            "baseline: one subprocess.run)",
            best["first"] * 1000,
            "ms",
            baseline=best["one_plain"] * 1000,
        ),
        info_row(
            BENCH,
            f"{n} sequential bash `true` vs its containment argv without the supervisor",
            tool_time,
            "s",
            baseline=best["contained"],
        ),
        info_row(
            BENCH, f"{n} x anyio.open_process(true) + wait", best["floor"], "s", baseline=base
        ),
        *(
            [
                ratio_row(
                    BENCH,
                    f"{n} sequential standalone bash_tool() `true` vs lionagi's bash_tool",
                    tool_time,
                    best["lionagi"],
                    "s",
                    1.0,
                )
            ]
            if "lionagi" in best
            else [info_row(BENCH, "lionagi row skipped: lionagi is not installed", 0.0, "note")]
        ),
        budget_row(
            BENCH,
            f"{m} concurrent `sleep {pause:g}` (act_many)",
            wall,
            2 * pause,
            "s",
            baseline=pause,
        ),
        check_row(BENCH, f"{m} concurrent sleeps all succeeded", ok, "all ok"),
        *isolated,
    ]


def _lionagi_bash() -> Any:
    """The bash tool function of lionagi (async, keyword arguments), or None without lionagi."""
    try:
        from lionagi.tools.code.bash import BashTool
    except ImportError:
        return None
    return BashTool().to_tool().func_callable


def _isolated(mechanism: str, root: str, n: int, plain: float, repeat: int) -> list[Row]:
    """Rows for `n` isolated ``true`` calls under `mechanism`, or none where it cannot run."""
    if mechanism_problem(mechanism) is not None:
        return []
    bash = bash_tool(workspace_root=root, isolation=mechanism)
    # The raw mechanism: the very argv the seam builds (with one private temp
    # dir, made once), run by subprocess.run with no tool around it.
    isolation = workspace_isolation(mechanism, Path(root))
    launch = isolation.launch(["true"], cwd=Path(root), env=None)
    program = unix_socket_filter() if launch.pass_fds else None
    for fd in launch.pass_fds:
        os.close(fd)
    seccomp = Path(root) / "seccomp.bpf"
    if program is not None:
        seccomp.write_bytes(program)

    def raw() -> None:
        for _ in range(n):
            if program is None:
                subprocess.run(list(launch.argv), check=True, cwd=root, env=launch.env)
                continue
            fd = os.open(seccomp, os.O_RDONLY)
            try:
                argv = list(launch.argv)
                argv[argv.index("--seccomp") + 1] = str(fd)
                subprocess.run(argv, check=True, cwd=root, env=launch.env, pass_fds=(fd,))
            finally:
                os.close(fd)

    async def through_tool() -> None:
        for _ in range(n):
            result = await bash(command="true")
            if result["return_code"] != 0:
                raise RuntimeError(f"isolated bash true failed: {result}")

    async def first_call() -> float:
        # A fresh branch key: the first confined call starts the supervisor.
        branch = Branch("benchmark")
        branch.register(bash_tool(workspace_root=root, isolation=mechanism))
        start = time.perf_counter()
        await branch.act("bash", {"command": "true"})
        elapsed = time.perf_counter() - start
        await branch.aclose()
        return elapsed

    async def job_latency() -> float:
        branch = Branch("benchmark")
        branch.register(bash_tool(workspace_root=root, isolation=mechanism))
        branch.register(jobs_tool())
        await branch.act("bash", {"command": "true"})  # the supervisor is up
        best_latency = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            started = await branch.act("bash", {"command": "echo ready", "background": True})
            job = started.result["job_id"]  # type: ignore[index]
            await branch.act("jobs", {"action": "wait", "job_id": job, "until": "ready"})
            best_latency = min(best_latency, time.perf_counter() - start)
            await branch.act("jobs", {"action": "kill", "job_id": job})
        await branch.aclose()
        return best_latency

    async def measure() -> dict[str, float]:
        raw()  # warm up
        best = await interleaved({"raw": raw, "tool": through_tool}, repeat)
        best["first"] = await first_call()
        best["job"] = await job_latency()
        return best

    try:
        best = trio.run(measure)
    finally:
        if launch.tmpdir is not None:
            shutil.rmtree(launch.tmpdir, ignore_errors=True)
    return [
        ratio_row(
            BENCH,
            f"{n} sequential bash `true` under {mechanism} vs raw {mechanism}",
            best["tool"],
            best["raw"],
            "s",
            1.3,
        ),
        info_row(BENCH, f"{mechanism}: ms per isolated bash call", best["tool"] / n * 1000, "ms"),
        info_row(
            BENCH, f"{mechanism}: ms per raw {mechanism} `true`", best["raw"] / n * 1000, "ms"
        ),
        info_row(
            BENCH,
            f"{n} sequential bash `true` under {mechanism} vs plain `true`",
            best["tool"],
            "s",
            baseline=plain,
        ),
        info_row(
            BENCH,
            f"{mechanism}: ms of a branch's first call (starts its supervisor)",
            best["first"] * 1000,
            "ms",
        ),
        info_row(
            BENCH,
            f"{mechanism}: ms from bash background=True to the job's output seen by wait",
            best["job"] * 1000,
            "ms",
        ),
    ]

"""Code intelligence on the ty language server: start, cost per edit, memory.

* First diagnostics on a generated 100-file project: from starting the
  server to the first file's errors (target: <= 1 s); same-run baseline: a
  ``ty check`` of the whole project on the command line.
* What diagnostics add to an editor call on lionfactory's own tree (a copy):
  the median of a comment-line edit through the coding toolkit with
  ``code_engine="auto"`` minus the same toolkit with ``code_engine="ast"``
  (target: <= 100 ms); for information, the server's own part of it: the
  same edit sent straight to the server, until its diagnostics arrive.
* The server's resident memory after it checked files of lionfactory's own
  tree (target: <= 150 MiB).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
from _common import Row, Size, budget_row, info_row, sizes

from lionfactory import Branch
from lionfactory._os.workspace import Workspace
from lionfactory.coding import coding_toolkit
from lionfactory.tools._code_intel import build_code_intel, path_uri, ty_command

BENCH = "code_intel"
PACKAGE = Path(__file__).resolve().parents[2] / "lionfactory"

SIZES: dict[Size, dict[str, Any]] = {
    "tiny": {"files": 20, "edits": 3},
    "full": {"files": 100, "edits": 15},
}


def generated_project(root: Path, files: int) -> None:
    pkg = root / "gen"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for n in range(files):
        previous = f"from gen.m{n - 1} import f{n - 1}\n\n\n" if n else ""
        call = f"f{n - 1}(x)" if n else "x"
        body = "".join(
            f"def g{n}_{k}(value: int) -> int:\n    return value * {k}\n\n\n" for k in range(20)
        )
        (pkg / f"m{n}.py").write_text(
            f"{previous}def f{n}(x: int) -> int:\n    return {call} + 1\n\n\n{body}"
            f"BROKEN_{n} = undefined_{n}\n"
        )


def rss_mib(pgid: int, binary: str) -> float:
    total = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
            argv0 = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")[0].decode()
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if int(fields[2]) != pgid or argv0 != binary:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
    return total / 1024


async def first_diagnostics(root: Path, files: int) -> float:
    intel = build_code_intel(Workspace.at(root))
    assert intel is not None
    try:
        started = time.perf_counter()
        server = await intel.server()
        found, fresh = await intel.diagnostics(
            server, root / "gen" / f"m{files // 2}.py", timeout=10
        )
        took = time.perf_counter() - started
        assert fresh and found, "the first file's error was reported"
        return took
    finally:
        await intel.aclose()


@contextlib.asynccontextmanager
async def editing(
    root: Path, engine: str, *, checkpoints: bool = True
) -> AsyncIterator[Callable[[int], Awaitable[float]]]:
    """``edit(n)``: the time of the `n`-th comment-line edit through the coding toolkit's editor.

    Edit 0 (untimed by its callers) pays for opening the file in the server
    and starts the workspace's first snapshot, which is waited for after it.
    """
    branch = Branch()
    branch.register(
        coding_toolkit,
        workspace_root=root,
        code_engine=engine,
        notify=False,
        checkpoints=checkpoints,
    )
    target = "lionfactory/tools/code_nav.py"
    text = (root / target).read_text()
    marks = ["# bench mark a\n", "# bench mark b\n"]

    async def edit(n: int) -> float:
        old, new = marks[n % 2], marks[(n + 1) % 2]
        started = time.perf_counter()
        result = await branch.act(
            "editor",
            {"action": "edit", "file_path": target, "old_string": old, "new_string": new},
        )
        took = time.perf_counter() - started
        assert result.ok and result.result["success"], result.result
        if engine == "auto":
            assert result.result["diagnostics"] is not None
        if n == 0 and checkpoints:
            await _first_snapshot_done(root)
        return took

    try:
        await branch.act("reader", {"action": "read", "path": target})
        (root / target).write_text(marks[0] + text)
        await branch.act("reader", {"action": "read", "path": target})
        yield edit
    finally:
        (root / target).write_text(text)
        await branch.aclose()


async def edit_times(
    root: Path, engine: str, edits: int, *, checkpoints: bool = True
) -> list[float]:
    """The times of `edits` comment-line edits (`editing`), after an untimed first one."""
    async with editing(root, engine, checkpoints=checkpoints) as edit:
        await edit(0)
        return [await edit(n) for n in range(1, edits + 1)]


async def _first_snapshot_done(root: Path) -> None:
    """Wait for the workspace's first snapshot, which the first editor call started.

    Untimed: it runs once per workspace and process, in the background, and
    the edits measured here are the ones after it. Left running, it would be
    timed with them (its git processes take the cores the type checker
    needs), and a branch closed before it is done cancels it, so the next
    run of this function would start it again.
    """
    from lionfactory.coding._checkpointing import _BASES

    base = _BASES.get(root.resolve())
    if base is not None:
        await base.wait(120.0)


async def server_check_times(root: Path, edits: int) -> list[float]:
    """The server's own time for the benchmark's edit: new text sent to its diagnostics published.

    The same comment-line edit of the same file as `edit_times`, sent straight
    to the server with no editor, no file write and no delta: the part of an
    editor call with diagnostics that is the type checker's work.
    """
    intel = build_code_intel(Workspace.at(root))
    assert intel is not None
    target = root / "lionfactory/tools/code_nav.py"
    text = target.read_text()
    try:
        server = await intel.server()
        await intel.diagnostics(server, target, timeout=10)
        uri = path_uri(target)
        times = []
        for n in range(edits + 1):
            started = time.perf_counter()
            _, version = await server.sync(target, f"# bench mark {n % 2}\n" + text, None)
            arrived = await server.client.pump(
                lambda v=version: server.current(uri, v) is not None,  # type: ignore[misc]
                timeout=10,
            )
            assert arrived, "the server published the edited text's diagnostics"
            if n:
                times.append(time.perf_counter() - started)
        return times
    finally:
        await intel.aclose()


@contextlib.asynccontextmanager
async def direct_checks(
    root: Path,
) -> AsyncIterator[tuple[list[float], Callable[[int], Awaitable[None]]]]:
    """(times, check): `check(n)` times one `server_check_times` edit on a server of its own.

    Run between the editor's edits (`edit_times`'s ``between``), each check
    meets the machine of the edit just before it: on a shared machine the
    load changes from one second to the next, and a check timed in a
    separate run is not the check of the edits it is subtracted from.
    """
    intel = build_code_intel(Workspace.at(root))
    assert intel is not None
    target = root / "lionfactory/tools/code_nav.py"
    text = target.read_text()
    times: list[float] = []
    try:
        server = await intel.server()
        await intel.diagnostics(server, target, timeout=10)
        uri = path_uri(target)

        async def check(n: int) -> None:
            started = time.perf_counter()
            _, version = await server.sync(target, f"# bench mark {n % 2}\n" + text, None)
            arrived = await server.client.pump(
                lambda: server.current(uri, version) is not None, timeout=10
            )
            assert arrived, "the server published the edited text's diagnostics"
            times.append(time.perf_counter() - started)

        yield times, check
    finally:
        await intel.aclose()


async def server_memory(root: Path) -> float:
    intel = build_code_intel(Workspace.at(root))
    assert intel is not None
    try:
        server = await intel.server()
        for name in ("tools/code_nav.py", "coding/_toolkit.py", "_branch.py", "tools/editor.py"):
            await intel.diagnostics(server, root / "lionfactory" / name, timeout=10)
        return rss_mib(server.pid, intel.command[0])
    finally:
        await intel.aclose()


def run(size: Size) -> list[Row]:
    params = sizes(size, SIZES)
    command = ty_command()
    if command is None:
        return [info_row(BENCH, "ty is not installed: nothing measured", 0.0, "bool")]
    with tempfile.TemporaryDirectory(prefix="bench-code-intel-") as tmp:
        folder = Path(tmp)
        project = folder / "project"
        generated_project(project, params["files"])
        own = folder / "own"
        shutil.copytree(PACKAGE, own / "lionfactory", ignore=shutil.ignore_patterns("__pycache__"))

        started = time.perf_counter()
        subprocess.run(
            [command[0], "check", "--no-progress", "."],
            cwd=project,
            capture_output=True,
            check=False,
            timeout=120,
        )
        cli = time.perf_counter() - started
        first = trio.run(first_diagnostics, project, params["files"])
        off = trio.run(edit_times, own, "ast", params["edits"])
        on = trio.run(edit_times, own, "auto", params["edits"])
        server_only = trio.run(server_check_times, own, params["edits"])
        memory = trio.run(server_memory, own)
    added = (statistics.median(on) - statistics.median(off)) * 1000
    files = params["files"]
    return [
        budget_row(
            BENCH, f"first diagnostics, {files}-file project", first, 1.0, "s", baseline=cli
        ),
        budget_row(
            BENCH,
            "editor call: added by diagnostics (median, own tree)",
            added,
            100.0,
            "ms",
            baseline=statistics.median(off) * 1000,
        ),
        info_row(
            BENCH, "editor call with diagnostics (median)", statistics.median(on) * 1000, "ms"
        ),
        info_row(
            BENCH,
            "of which the server's own check of the edit (median)",
            statistics.median(server_only) * 1000,
            "ms",
        ),
        budget_row(BENCH, "server resident memory (own tree)", memory, 150.0, "MiB"),
    ]

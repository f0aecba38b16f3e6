"""Checkpoints: what a checkpoint adds to a call, against the same call without one.

Each subject is a `coding_toolkit` branch with the default ``checkpoints=True``;
its baseline is the same call on a branch built with ``checkpoints=False``,
on the same tree, timed in alternating rounds (`interleaved`). A call with a
checkpoint pays for the state before it and the record after it.

* an editor ``write`` in a 1,000-file git repository (target: at most 2 ms
  more; the touched path is hashed in-process, no git process runs);
* a bash command that changes nothing in a 10,000-file repository (target:
  at most 100 ms more: the persistent index stats every file, hashes none);
* a bash command changing one file there (target: at most 300 ms more);
* for information, the first snapshot of the 10,000-file tree, which the
  project's own index seeds (only what differs from it is hashed), and the
  same first snapshot with no project index to seed from.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import trio
from _common import Row, Size, budget_row, info_row, interleaved, sizes

from lionfactory import Branch
from lionfactory.coding import coding_toolkit

BENCH = "checkpoints"

SIZES: dict[Size, dict[str, Any]] = {
    "tiny": {"small": 100, "large": 1_000, "repeat": 3},
    "full": {"small": 1_000, "large": 10_000, "repeat": 7},
}


def make_repo(root: Path, files: int, *, commit: bool = True) -> None:
    for index in range(files):
        folder = root / f"pkg{index % 50}"
        folder.mkdir(exist_ok=True)
        (folder / f"mod{index}.py").write_text(f"VALUE = {index}\n" * 20)
    if commit:
        env = {
            **os.environ,
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "b",
            "GIT_AUTHOR_EMAIL": "b@b",
            "GIT_COMMITTER_NAME": "b",
            "GIT_COMMITTER_EMAIL": "b@b",
        }
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "tree"]):
            subprocess.run(["git", *args], cwd=root, check=True, env=env)


def branch_for(root: Path, checkpoints: bool) -> Branch:
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=root, notify=False, checkpoints=checkpoints)
    return branch


async def _act(branch: Branch, tool: str, arguments: dict[str, Any]) -> None:
    result = await branch.act(tool, arguments)
    answer = result.result or {}
    if not result.ok or answer.get("success") is False or answer.get("return_code", 0) != 0:
        raise RuntimeError(result.error or answer)


async def _measure(size: Size) -> list[Row]:
    config = sizes(size, SIZES)
    repeat = config["repeat"]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="lf-bench-ckpt-") as tmp:
        os.environ.setdefault("LIONFACTORY_STATE_DIR", str(Path(tmp) / "state"))
        small = Path(tmp) / "small"
        small.mkdir()
        make_repo(small, config["small"])
        on, off = branch_for(small, True), branch_for(small, False)
        counter = iter(range(10**9))

        def write(branch: Branch) -> Any:
            name = "on.py" if branch is on else "off.py"
            arguments = {"action": "write", "file_path": name, "content": f"x = {next(counter)}\n"}
            return _act(branch, "editor", arguments)

        # Outside the timing: the first full snapshot, and a file each branch
        # wrote itself (so its later writes need no read first).
        await write(on)
        await write(off)
        times = await interleaved({"on": lambda: write(on), "off": lambda: write(off)}, repeat * 3)
        added = (times["on"] - times["off"]) * 1000
        rows.append(
            budget_row(
                BENCH,
                f"editor write, {config['small']:,} files: added",
                added,
                2.0,
                "ms",
                baseline=times["off"] * 1000,
            )
        )

        large = Path(tmp) / "large"
        large.mkdir()
        make_repo(large, config["large"])
        on, off = branch_for(large, True), branch_for(large, False)
        start = trio.current_time()
        await _act(on, "bash", {"command": "nice true"})
        rows.append(
            info_row(
                BENCH,
                f"first bash call, {config['large']:,} files (seeded)",
                (trio.current_time() - start) * 1000,
                "ms",
            )
        )
        nothing = {"command": "nice true"}
        times = await interleaved(
            {"on": lambda: _act(on, "bash", nothing), "off": lambda: _act(off, "bash", nothing)},
            repeat,
        )
        rows.append(
            budget_row(
                BENCH,
                f"bash, nothing changed, {config['large']:,} files: added",
                (times["on"] - times["off"]) * 1000,
                100.0,
                "ms",
                baseline=times["off"] * 1000,
            )
        )

        def one_change(branch: Branch) -> Any:
            return _act(branch, "bash", {"command": f"echo {next(counter)} > pkg0/mod0.py"})

        times = await interleaved(
            {"on": lambda: one_change(on), "off": lambda: one_change(off)}, repeat
        )
        rows.append(
            budget_row(
                BENCH,
                f"bash, one file changed, {config['large']:,} files: added",
                (times["on"] - times["off"]) * 1000,
                300.0,
                "ms",
                baseline=times["off"] * 1000,
            )
        )

        bare = Path(tmp) / "bare"
        bare.mkdir()
        make_repo(bare, config["large"], commit=False)
        branch = branch_for(bare, True)
        start = trio.current_time()
        await _act(branch, "bash", {"command": "nice true"})
        rows.append(
            info_row(
                BENCH,
                f"first bash call, {config['large']:,} files (no index)",
                (trio.current_time() - start) * 1000,
                "ms",
            )
        )
    return rows


def run(size: Size) -> list[Row]:
    return trio.run(_measure, size)

"""A directory swapped for a symlink while the file tools run: nothing leaks out.

A thread keeps exchanging ``ws/d`` (a real directory) with a symlink to a
directory outside the workspace, atomically (``renameat2(RENAME_EXCHANGE)``,
so ``ws/d`` always exists and is one or the other). Meanwhile the reader
(read, list_dir), the editor (edit, write), code_nav and the coding
toolkit's image reader run a drawn mix of calls on paths under ``d/``.

Property: zero reads and zero writes outside the workspace (the outside
directory is snapshotted, and no answer holds its marker, its names or its
image bytes), and zero exceptions: every call answers with its normal or its
typed-error response. The test runs once with ``openat2`` and once with the
component-by-component walk the workspace falls back to on older kernels.
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from lionfactory import Branch
from lionfactory._os import beneath as _beneath
from lionfactory.coding import coding_toolkit
from lionfactory.tools.code_nav import code_nav_tool
from lionfactory.tools.editor import editor_tool
from lionfactory.tools.reader import reader_tool

OUTSIDE = "OUTSIDE_CANARY_51d2"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_LIBC = ctypes.CDLL(None, use_errno=True)

KINDS = ("read", "list_dir", "edit", "write", "code_nav", "image")
INSIDE_PNG = b"\x89PNG\r\n\x1a\ninside-image"
OUTSIDE_PNG = b"\x89PNG\r\n\x1a\n" + OUTSIDE.encode()


def exchange(a: Path, b: Path) -> None:
    """Swap two names atomically (Linux ``renameat2`` with ``RENAME_EXCHANGE``)."""
    if _LIBC.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


@contextmanager
def racing_layout() -> Iterator[tuple[Path, Path]]:
    """``base/ws`` with ``d/`` and a parked link to ``base/outside``; yields (ws, outside)."""
    with tempfile.TemporaryDirectory(prefix="lf-race-") as raw:
        base = Path(raw).resolve()
        ws, outside = base / "ws", base / "outside"
        for directory in (ws / "d", outside):
            directory.mkdir(parents=True)
        (ws / "d" / "note.txt").write_text("alpha inside\n")
        (ws / "d" / "f.py").write_text("def inside_fn():\n    return 1\n")
        (ws / "d" / "img.png").write_bytes(INSIDE_PNG)
        (outside / "note.txt").write_text(f"alpha {OUTSIDE}\n")
        (outside / "f.py").write_text(f"def {OUTSIDE}():\n    return 1\n")
        (outside / "img.png").write_bytes(OUTSIDE_PNG)
        (outside / f"{OUTSIDE}.txt").write_text("only outside\n")
        (ws / "parked").symlink_to(outside)
        yield ws, outside


def snapshot(directory: Path) -> dict[str, tuple[int, str]]:
    return {
        p.name: (p.lstat().st_ino, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(directory.iterdir())
    }


def leaked(answer: dict[str, Any]) -> bool:
    text = repr(answer)
    return OUTSIDE in text or base64.b64encode(OUTSIDE_PNG).decode() in text


async def run_calls(ws: Path, lanes: list[list[str]]) -> tuple[list[str], list[BaseException]]:
    reader = reader_tool(workspace_root=ws)
    editor = editor_tool(workspace_root=ws)
    nav = code_nav_tool(workspace_root=ws)
    kit = {t.name: t for t in coding_toolkit(Branch(), workspace_root=ws, tools=["reader"])}
    problems: list[str] = []
    errors: list[BaseException] = []

    async def one(kind: str, i: int) -> None:
        if kind == "read":
            answer = await reader(action="read", path="d/note.txt")
        elif kind == "list_dir":
            answer = await reader(action="list_dir", path="d", recursive=i % 2 == 0)
        elif kind == "edit":
            old, new = ("alpha", "beta") if i % 2 else ("beta", "alpha")
            answer = await editor(
                action="edit", file_path="d/note.txt", old_string=old, new_string=new
            )
        elif kind == "write":
            answer = await editor(action="write", file_path=f"d/new_{i}.txt", content="new\n")
        elif kind == "code_nav":
            answer = await nav(action="outline", path="d/f.py")
        else:
            answer = await kit["reader"](action="read", path="d/img.png")
        if not isinstance(answer, dict) or not isinstance(answer.get("success"), bool):
            problems.append(f"{kind}: not a typed answer: {answer!r}")
        elif not answer["success"] and not answer.get("error"):
            problems.append(f"{kind}: failure without an error text: {answer!r}")
        if leaked(answer):
            problems.append(f"{kind}: read outside the workspace: {answer!r}")

    async def lane(kinds: list[str], offset: int) -> None:
        for i, kind in enumerate(kinds):
            try:
                await one(kind, offset + i)
            except Exception as exc:
                errors.append(exc)

    async with trio.open_nursery() as nursery:
        for n, kinds in enumerate(lanes):
            nursery.start_soon(lane, kinds, n * 1000)
    return problems, errors


@pytest.fixture(params=["openat2", "walk"])
def open_strategy(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run with the kernel's ``openat2`` and with the component walk fallback."""
    with _beneath.forced_strategy(request.param):
        yield request.param


# No shrinking: a failure depends on thread timing, so a smaller example is
# not a simpler one, and shrinking it only burns minutes.
@settings(max_examples=4, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(
    lanes=st.lists(
        st.lists(st.sampled_from(KINDS), min_size=40, max_size=80), min_size=3, max_size=6
    )
)
def test_swapping_a_directory_for_an_outside_link_never_leaks(
    open_strategy: str, lanes: list[list[str]]
) -> None:
    with racing_layout() as (ws, outside):
        before = snapshot(outside)
        stop = threading.Event()
        flips = [0]

        def flipper() -> None:
            while not stop.is_set():
                exchange(ws / "d", ws / "parked")
                flips[0] += 1

        thread = threading.Thread(target=flipper, daemon=True)
        thread.start()
        try:
            problems, errors = trio.run(run_calls, ws, lanes)
        finally:
            stop.set()
            thread.join()
        assert flips[0] > 0
        assert not errors, errors[:5]
        assert not problems, problems[:5]
        assert snapshot(outside) == before

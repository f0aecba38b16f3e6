"""The ignore matcher reads only what a file tool could: what bash plants cannot point it out.

A confined command can write every file in the workspace: ``.gitignore``
files, a nested ``.git`` file, the repository's config. Each attack below
points the in-process matcher (which runs unconfined) at something outside the
workspace: a secret whose lines, read as patterns, would hide matching files
from ``list_dir`` (an oracle on content the command itself cannot read), a
FIFO that would hang the call, a ``core.excludesFile`` in a repository's
config. None of them changes what the listing shows.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from _test_helpers import home_git as git

from lionfactory._os.binaries import BinaryFinder
from lionfactory._os.global_excludes import global_excludes
from lionfactory.tools import reader_tool

SECRET_LINE = "secret-name.txt"


@pytest.fixture
def scene(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A repository workspace with a file named like a line of a secret outside it."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    secret = home / ".ssh" / "id_rsa"
    secret.write_text(f"-----BEGIN KEY-----\n{SECRET_LINE}\n")
    monkeypatch.setenv("HOME", str(home))
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "-q")
    (ws / SECRET_LINE).write_text("")
    (ws / "sub").mkdir()
    (ws / "sub" / SECRET_LINE).write_text("")
    return ws, secret


async def listed(ws: Path) -> set[str]:
    reader = reader_tool(workspace_root=ws)
    with anyio.fail_after(60):
        answer: dict[str, Any] = await reader(action="list_dir", path=".", recursive=True)
    assert answer["success"], answer
    return {row.split()[0].rstrip("/") for row in answer["content"].splitlines() if row.strip()}


async def test_a_gitignore_linked_to_a_secret_is_not_read(scene: tuple[Path, Path]) -> None:
    ws, secret = scene
    (ws / ".gitignore").symlink_to(secret)
    (ws / "sub" / ".gitignore").symlink_to(secret)

    names = await listed(ws)

    assert SECRET_LINE in names
    assert f"sub/{SECRET_LINE}" in names


async def test_a_nested_git_file_cannot_lead_the_matcher_outside(
    scene: tuple[Path, Path], tmp_path: Path
) -> None:
    ws, secret = scene
    # gitdir: a directory outside the workspace whose info/exclude is the secret.
    outside = tmp_path / "outside-git"
    (outside / "info").mkdir(parents=True)
    (outside / "info" / "exclude").symlink_to(secret)
    (ws / "sub" / ".git").write_text(f"gitdir: {outside}\n")

    names = await listed(ws)

    assert f"sub/{SECRET_LINE}" in names


async def test_a_gitdir_inside_the_workspace_with_a_linked_exclude_is_not_read(
    scene: tuple[Path, Path],
) -> None:
    ws, secret = scene
    planted = ws / "planted.git"
    (planted / "info").mkdir(parents=True)
    (planted / "info" / "exclude").symlink_to(secret)
    (ws / "sub" / ".git").write_text("gitdir: ../planted.git\n")

    names = await listed(ws)

    assert f"sub/{SECRET_LINE}" in names


async def test_the_real_info_exclude_of_a_nested_gitdir_inside_the_workspace_applies(
    scene: tuple[Path, Path],
) -> None:
    ws, _ = scene
    planted = ws / "planted.git"
    (planted / "info").mkdir(parents=True)
    (planted / "info" / "exclude").write_text(f"{SECRET_LINE}\n")
    (ws / "sub" / ".git").write_text("gitdir: ../planted.git\n")

    names = await listed(ws)

    assert f"sub/{SECRET_LINE}" not in names
    assert SECRET_LINE in names


async def test_a_fifo_named_gitignore_does_not_hang_list_dir(scene: tuple[Path, Path]) -> None:
    ws, _ = scene
    fifo = ws / "sub" / ".gitignore"
    os.mkfifo(fifo)
    hung: list[bool] = []

    def release() -> None:
        # A reader stuck in a blocking open() (the bug) cannot be cancelled:
        # open the FIFO's other end so the test fails instead of hanging.
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            hung.append(True)

    watchdog = threading.Timer(30, release)
    watchdog.start()
    try:
        with anyio.move_on_after(10) as scope:
            names = await listed(ws)
    finally:
        watchdog.cancel()
    assert not hung and not scope.cancelled_caught, "list_dir hung on a FIFO named .gitignore"
    assert f"sub/{SECRET_LINE}" in names


async def test_core_excludes_file_in_a_repository_config_is_not_used(
    scene: tuple[Path, Path],
) -> None:
    ws, secret = scene
    git(ws, "config", "core.excludesFile", str(secret))

    found = await global_excludes(ws, BinaryFinder())

    assert found != secret
    assert SECRET_LINE in await listed(ws)


async def test_core_excludes_file_of_the_users_global_config_applies(
    scene: tuple[Path, Path],
) -> None:
    ws, _ = scene
    home = Path(os.environ["HOME"])
    (home / "ignore").write_text(f"{SECRET_LINE}\n")
    (home / ".gitconfig").write_text("[core]\n\texcludesFile = ~/ignore\n")

    assert await global_excludes(ws, BinaryFinder()) == home / "ignore"
    assert SECRET_LINE not in await listed(ws)


async def test_a_walk_in_a_worker_thread_ends_when_its_caller_is_cancelled(
    tmp_path: Path,
) -> None:
    import anyio.to_thread

    from lionfactory._os.project import ProjectView
    from lionfactory._os.workspace import Workspace

    ws = tmp_path / "ws"
    for index in range(200):
        (ws / f"d{index:03d}").mkdir(parents=True)
    view = ProjectView(Workspace.at(ws))
    cancelled = threading.Event()
    walked: list[str] = []

    def walk() -> None:
        # Start only once the caller is cancelled: the walk must notice it.
        assert cancelled.wait(30)
        walked.extend(path for path, _ in view.walk(ws))

    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.to_thread.run_sync, walk)
            await anyio.sleep(0.05)
            scope.cancel()
            cancelled.set()

    assert scope.cancelled_caught
    assert len(walked) == 0

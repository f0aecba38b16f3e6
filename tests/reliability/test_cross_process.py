"""Edits from several processes, and other programs writing meanwhile: nothing is lost.

Real processes: each child runs the editor in its own interpreter, so only
the directory lock (``flock``) can serialise them. Other programs do not take
that lock; the change check before the replacement (and the carry-over of
appends that race the rename) keeps their writes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from lionfactory.tools import _editor_files
from lionfactory.tools.editor import editor_tool

# Each child increments its own counter line M times, then prints how many
# edits reported success. It waits for "go" on stdin so all children start
# editing at once.
CHILD = textwrap.dedent(
    """
    import sys, trio
    from lionfactory.tools.editor import editor_tool

    root, me, edits = sys.argv[1], sys.argv[2], int(sys.argv[3])
    editor = editor_tool(workspace_root=root)

    async def main():
        ok = 0
        for k in range(edits):
            answer = await editor(
                action="edit", file_path="shared.txt",
                old_string=f"{me}={k};", new_string=f"{me}={k + 1};",
            )
            ok += answer["success"]
        print(ok, flush=True)

    sys.stdin.readline()
    trio.run(main)
    """
)


def start_children(root: Path, names: list[str], edits: int) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), name, str(edits)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]


@settings(max_examples=3, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(processes=st.integers(2, 4), edits=st.integers(10, 40))
def test_edits_from_several_processes_all_land(tmp_path_factory: Any, processes: int, edits: int):
    root = tmp_path_factory.mktemp("multi")
    names = [f"p{i}" for i in range(processes)]
    (root / "shared.txt").write_text("".join(f"{name}=0;\n" for name in names))
    children = start_children(root, names, edits)
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    reported = [int(child.communicate(timeout=120)[0]) for child in children]
    for child in children:
        child.__exit__(None, None, None)  # closes the pipes
    assert reported == [edits] * processes
    assert (root / "shared.txt").read_text() == "".join(f"{name}={edits};\n" for name in names)


def appending_step(target: Path, when: str) -> _editor_files.WriteSteps:
    """Steps where "another program" appends one line to the target, at `when`.

    ``before check``: between the read and the change check; ``before
    rename``: after the check, just before the rename; ``after rename``: by
    a program that opened the file before the rename and writes after it
    (into the replaced file).
    """

    def append(handle: Any) -> None:
        handle.write("late line\n")
        handle.flush()

    if when == "before check":

        def fsync(fd: int) -> None:
            with open(target, "a") as handle:
                append(handle)
            os.fsync(fd)

        return attrs.evolve(_editor_files.DEFAULT_STEPS, fsync=fsync)

    def replace(dir_fd: int, temp: str, name: str) -> None:
        with open(target, "a") as handle:
            if when == "before rename":
                append(handle)
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            if when == "after rename":
                append(handle)

    return attrs.evolve(_editor_files.DEFAULT_STEPS, replace=replace)


@pytest.mark.parametrize("when", ["before check", "before rename", "after rename"])
async def test_an_append_racing_the_replacement_is_kept(workspace: Path, when: str):
    """Appended bytes that land in the file being replaced are carried to the new one."""
    target = workspace / "a.txt"
    target.write_text("first\n")
    editor = editor_tool(workspace_root=workspace, _write_steps=appending_step(target, when))
    answer = await editor(action="edit", file_path="a.txt", old_string="first", new_string="1st")
    assert answer["success"], answer
    assert target.read_text() == "1st\nlate line\n"


async def test_a_whole_file_write_over_a_file_changed_meanwhile_is_refused(workspace: Path):
    target = workspace / "a.txt"
    target.write_text("first\n")
    editor = editor_tool(
        workspace_root=workspace, _write_steps=appending_step(target, "before check")
    )
    answer = await editor(action="write", file_path="a.txt", content="new\n")
    assert answer["success"] is False
    assert "changed while it was being written" in answer["error"]
    assert target.read_text() == "first\nlate line\n"


KILLED_WRITER = textwrap.dedent(
    """
    import os, sys, time, attrs, trio
    from lionfactory.tools import _editor_files
    from lionfactory.tools.editor import editor_tool

    def write(fd, data):
        os.write(fd, data[:10])
        print("ready", flush=True)
        time.sleep(600)  # killed long before

    steps = attrs.evolve(_editor_files.DEFAULT_STEPS, write=write)
    editor = editor_tool(workspace_root=sys.argv[1], _write_steps=steps)
    trio.run(lambda: editor(action="write", file_path="big.txt", content="x" * 100))
    """
)


def temps(directory: Path) -> list[str]:
    return sorted(
        p.name for p in directory.iterdir() if p.name.startswith(_editor_files.TEMP_PREFIX)
    )


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(workspace: Path):
    with subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(workspace)], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert len(temps(workspace)) == 1  # recognisable by its name
    editor = editor_tool(workspace_root=workspace)
    answer = trio.run(lambda: editor(action="write", file_path="other.txt", content="y\n"))
    assert answer["success"], answer
    assert temps(workspace) == []
    assert sorted(p.name for p in workspace.iterdir()) == ["other.txt"]


async def test_an_edit_is_redone_on_content_another_program_rewrote_meanwhile(workspace: Path):
    target = workspace / "a.txt"
    target.write_text("first\n")

    def fsync(fd: int) -> None:
        if target.read_text() == "first\n":  # only the first attempt
            target.write_text("zero\nfirst\n")
        os.fsync(fd)

    steps = attrs.evolve(_editor_files.DEFAULT_STEPS, fsync=fsync)
    editor = editor_tool(workspace_root=workspace, _write_steps=steps)
    answer = await editor(action="edit", file_path="a.txt", old_string="first", new_string="1st")
    assert answer["success"], answer
    assert target.read_text() == "zero\n1st\n"

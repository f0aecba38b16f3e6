"""Binary lookup: the running environment first, then PATH; only executables."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lionfactory._os.binaries import BinaryFinder, environment_dirs


def make_program(directory: Path, name: str, mode: int = 0o755) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    program = directory / name
    program.write_text("#!/bin/sh\n")
    program.chmod(mode)
    return program


def test_environment_dirs_include_the_interpreter_folder() -> None:
    assert Path(sys.executable).parent in environment_dirs()


def test_environment_comes_before_path(tmp_path: Path) -> None:
    in_env = make_program(tmp_path / "env", "tool")
    make_program(tmp_path / "path", "tool")
    finder = BinaryFinder(env_dirs=[tmp_path / "env"], path=str(tmp_path / "path"))
    assert finder.find("tool") == str(in_env)


def test_candidates_list_every_match_in_order(tmp_path: Path) -> None:
    first = make_program(tmp_path / "a", "tool")
    second = make_program(tmp_path / "b", "tool")
    finder = BinaryFinder(env_dirs=(), path=f"{tmp_path / 'a'}:{tmp_path / 'b'}:{tmp_path / 'a'}")
    assert finder.candidates("tool") == [str(first), str(second)]


def test_non_executable_files_are_skipped(tmp_path: Path) -> None:
    make_program(tmp_path / "a", "tool", mode=0o644)
    finder = BinaryFinder(env_dirs=(), path=str(tmp_path / "a"))
    assert finder.find("tool") is None


def test_path_none_reads_the_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    program = make_program(tmp_path / "a", "tool")
    finder = BinaryFinder(env_dirs=())
    monkeypatch.setenv("PATH", str(tmp_path / "a"))
    assert finder.find("tool") == str(program)


def test_hidden_names_are_never_found(tmp_path: Path) -> None:
    make_program(tmp_path / "a", "tool")
    other = make_program(tmp_path / "a", "other")
    finder = BinaryFinder(env_dirs=(), path=str(tmp_path / "a"), hidden={"tool"})
    assert (finder.find("tool"), finder.find("other")) == (None, str(other))


@given(layout=st.lists(st.sampled_from(["exec", "plain", "folder", "none"]), max_size=5))
@settings(max_examples=60, deadline=None)
def test_find_is_the_first_candidate(layout: list[str]) -> None:
    """`find` stops at the first hit; it names what `candidates` lists first, or None."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        dirs = []
        for index, kind in enumerate(layout):
            directory = root / f"d{index}"
            directory.mkdir()
            if kind == "exec":
                make_program(directory, "tool")
            elif kind == "plain":
                make_program(directory, "tool", mode=0o644)
            elif kind == "folder":
                (directory / "tool").mkdir()
            dirs.append(str(directory))
        finder = BinaryFinder(env_dirs=dirs[:1], path=":".join(dirs[1:] + dirs[:1]))
        candidates = finder.candidates("tool")
        assert finder.find("tool") == (candidates[0] if candidates else None)

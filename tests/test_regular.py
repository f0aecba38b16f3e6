"""The one seam for a regular file: a directory, a FIFO and a file too large, refused alike."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from _test_helpers import open_descriptors, opened_since

from lionfactory._os.regular import FileRefused, open_regular, read_capped, read_regular
from lionfactory._os.workspace import PathRefused, Workspace

PACKAGE = Path(__file__).resolve().parent.parent / "lionfactory"


def test_reads_a_regular_file_whole(workspace: Path) -> None:
    (workspace / "a.txt").write_bytes(b"x" * 10)
    data, st = read_regular(Workspace.at(workspace).locate("a.txt"), 10)
    assert (data, st.st_size) == (b"x" * 10, 10)


@pytest.mark.parametrize(
    ("make", "kind", "words"),
    [
        (lambda p: p.mkdir(), "directory", "'thing' is a directory"),
        (lambda p: os.mkfifo(p), "not_regular", "'thing' is not a regular file"),
        (lambda p: p.write_bytes(b"x" * 11), "too_large", "'thing' is larger than 10 bytes"),
    ],
)
def test_refuses_with_one_wording(workspace: Path, make, kind: str, words: str) -> None:
    make(workspace / "thing")
    with pytest.raises(FileRefused) as caught:
        read_regular(Workspace.at(workspace).locate("thing"), 10)
    assert (caught.value.kind, caught.value.message, str(caught.value)) == (kind, words, words)


def test_a_refusal_closes_the_descriptor(workspace: Path) -> None:
    (workspace / "d").mkdir()
    before = open_descriptors()
    for _ in range(20):
        with pytest.raises(FileRefused):
            open_regular(Workspace.at(workspace).locate("d"))
    assert opened_since(before) == set()


def test_a_file_that_grows_after_its_fstat_is_refused_not_cut(workspace: Path) -> None:
    """The size check of the open judges the fstat; the read of max+1 catches the growth."""
    path = workspace / "log"
    path.write_bytes(b"x" * 5)
    stream, st = open_regular(Workspace.at(workspace).locate("log"), max_bytes=10)
    with stream:
        assert st.st_size == 5
        path.write_bytes(b"x" * 50)
        with pytest.raises(FileRefused, match="larger than 10 bytes"):
            read_capped(stream, "log", 10)


def test_a_file_that_grows_while_it_is_read_is_read_on_to_the_cap(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read stops at the size `fstat` gave only when nothing follows it.

    The file grows right after `read_capped`'s own ``fstat``, the moment a
    writer could slip in; what it wrote is read too, up to the cap.
    """
    path = workspace / "log"
    path.write_bytes(b"a" * 5)
    stream, _ = open_regular(Workspace.at(workspace).locate("log"), max_bytes=100)
    real_fstat = os.fstat

    def fstat_then_grow(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        monkeypatch.setattr(os, "fstat", real_fstat)
        with open(path, "ab") as writer:
            writer.write(b"b" * 20)
        return st

    monkeypatch.setattr(os, "fstat", fstat_then_grow)
    with stream:
        assert read_capped(stream, "log", 100) == b"a" * 5 + b"b" * 20
        stream.seek(0)
        path.write_bytes(b"c" * 101)
        with pytest.raises(FileRefused, match="larger than 100 bytes"):
            read_capped(stream, "log", 100)


def test_workspace_refusals_pass_through(workspace: Path) -> None:
    (workspace / "out").symlink_to("/etc/hostname")
    with pytest.raises(PathRefused):
        read_regular(Workspace.at(workspace).locate("out"), 100)
    with pytest.raises(FileNotFoundError):
        read_regular(Workspace.at(workspace).locate("missing"), 100)


def _calls_s_isreg(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(
        isinstance(node, ast.Attribute) and node.attr in ("S_ISREG", "S_ISDIR")
        for node in ast.walk(tree)
    )


def test_no_tool_checks_the_file_type_itself() -> None:
    """Tools, the coding toolkit and MCP ask `lionfactory._os.regular`, so the wording is one."""
    offenders = [
        str(path.relative_to(PACKAGE))
        for folder in ("tools", "coding", "mcp")
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        if _calls_s_isreg(path)
    ]
    assert offenders == []

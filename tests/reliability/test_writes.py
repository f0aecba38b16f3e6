"""The editor loses nothing: injected write faults, byte-exact edits, refused encodings.

Faults go through the editor's private `_write_steps` seam (a `WriteSteps`
with one step replaced); everything else is a real file in a fresh
temporary directory per example.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import trio
from hypothesis import assume, event, given
from hypothesis import strategies as st

from lionfactory.tools._editor_files import DEFAULT_STEPS, WriteSteps
from lionfactory.tools.editor import editor_tool

MARKER = "MARKER_LINE"
REPLACEMENT = "REPLACED \u00e9\u4e2d"


@attrs.frozen
class TextFile:
    """A generated text file: its bytes and permission bits."""

    data: bytes
    mode: int


# Line text: anything but line breaks and the marker's letters (so the
# marker occurs exactly once).
line_text = st.text(
    st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\nMR\x00"), max_size=20
)


@st.composite
def text_files(draw: st.DrawFn) -> TextFile:
    """LF, CRLF or mixed endings, an optional BOM and final newline, a mode, one marker line."""
    lines = draw(st.lists(line_text, max_size=8))
    lines.insert(draw(st.integers(0, len(lines))), MARKER)
    style = draw(st.sampled_from(["lf", "crlf", "mixed"]))
    if style == "mixed":
        endings = draw(
            st.lists(st.sampled_from(["\n", "\r\n"]), min_size=len(lines), max_size=len(lines))
        )
    else:
        endings = ["\n" if style == "lf" else "\r\n"] * len(lines)
    if not draw(st.booleans()):
        endings[-1] = ""  # no final newline
    text = "".join(line + end for line, end in zip(lines, endings, strict=True))
    bom = draw(st.booleans())
    data = (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")
    mode = draw(st.sampled_from([0o600, 0o644, 0o640, 0o755, 0o700, 0o444]))
    event(f"{style}, {'bom' if bom else 'no bom'}, {'final newline' if endings[-1] else 'none'}")
    return TextFile(data, mode)


class Injected(OSError):
    def __init__(self, code: int) -> None:
        super().__init__(code, os.strerror(code))


def failing(code: int) -> Callable[..., Any]:
    def step(*_args: object) -> Any:
        raise Injected(code)

    return step


def partial_write(code: int) -> Callable[[int, bytes], None]:
    """Write half the data, then fail (a full disk in the middle of a write)."""

    def write(fd: int, data: bytes) -> None:
        os.write(fd, data[: len(data) // 2])
        raise Injected(code)

    return write


FAULTS = ["open_temp", "write", "partial write", "fsync", "replace"]


def faulty_steps(fault: str, code: int) -> WriteSteps:
    if fault == "partial write":
        return attrs.evolve(DEFAULT_STEPS, write=partial_write(code))
    return attrs.evolve(DEFAULT_STEPS, **{fault: failing(code)})


@contextmanager
def file_in_workspace(file: TextFile, name: str = "doc.txt") -> Iterator[tuple[Path, Path]]:
    with tempfile.TemporaryDirectory(prefix="lf-writes-") as base:
        root = Path(base)
        target = root / name
        target.write_bytes(file.data)
        target.chmod(file.mode)
        yield root, target


def state(target: Path) -> tuple[bytes, int, int, list[str]]:
    """Bytes, mode, mtime and the directory listing (which would show a temp file)."""
    st_ = target.stat()
    return (
        target.read_bytes(),
        stat.S_IMODE(st_.st_mode),
        st_.st_mtime_ns,
        sorted(os.listdir(target.parent)),
    )


def call_editor(root: Path, steps: WriteSteps | None, **arguments: Any) -> dict[str, Any]:
    editor = editor_tool(workspace_root=root, _write_steps=steps)
    return trio.run(lambda: editor(**arguments))


@given(
    file=text_files(),
    fault=st.sampled_from(FAULTS),
    code=st.sampled_from([errno.EIO, errno.ENOSPC, errno.EACCES, errno.EDQUOT, errno.EROFS]),
    action=st.sampled_from(["edit", "write"]),
)
def test_a_fault_at_any_write_step_leaves_the_original_and_no_temp_file(
    file: TextFile, fault: str, code: int, action: str
) -> None:
    with file_in_workspace(file) as (root, target):
        before = state(target)
        arguments: dict[str, Any] = {"action": action, "file_path": target.name}
        if action == "edit":
            arguments |= {"old_string": MARKER, "new_string": REPLACEMENT}
        else:
            arguments |= {"content": "brand new\n"}
        answer = call_editor(root, faulty_steps(fault, code), **arguments)
        assert answer["success"] is False and answer["error"], answer
        assert "unchanged" in answer["error"] or "Cannot write" in answer["error"], answer
        assert state(target) == before


@given(fault=st.sampled_from(FAULTS))
def test_a_fault_while_creating_a_file_leaves_nothing(fault: str) -> None:
    with tempfile.TemporaryDirectory(prefix="lf-writes-") as base:
        root = Path(base)
        answer = call_editor(
            root,
            faulty_steps(fault, errno.ENOSPC),
            action="write",
            file_path="new.txt",
            content="x",
        )
        assert answer["success"] is False, answer
        assert os.listdir(root) == []


@given(file=text_files())
def test_an_edit_changes_only_the_marker(file: TextFile) -> None:
    """Line endings, a BOM, a missing final newline and the mode survive, byte for byte."""
    with file_in_workspace(file) as (root, target):
        answer = call_editor(
            root,
            None,
            action="edit",
            file_path=target.name,
            old_string=MARKER,
            new_string=REPLACEMENT,
        )
        assert answer["success"] is True, answer
        expected = file.data.replace(MARKER.encode(), REPLACEMENT.encode())
        assert target.read_bytes() == expected
        assert stat.S_IMODE(target.stat().st_mode) == file.mode
        assert os.listdir(root) == [target.name]


@given(
    lines=st.lists(line_text.filter(bool), min_size=3, max_size=8, unique=True),
    data=st.data(),
)
def test_a_multiline_edit_written_with_lf_keeps_crlf(lines: list[str], data: st.DataObject) -> None:
    """The model writes LF line breaks; a CRLF file gets CRLF in the replacement too."""
    start = data.draw(st.integers(0, len(lines) - 2))
    old = "\n".join(lines[start : start + 2])
    crlf = "".join(line + "\r\n" for line in lines)
    assume(crlf.count(old.replace("\n", "\r\n")) == 1)
    file = TextFile(crlf.encode(), 0o644)
    with file_in_workspace(file) as (root, target):
        answer = call_editor(
            root,
            None,
            action="edit",
            file_path=target.name,
            old_string=old,
            new_string="one\ntwo\nthree",
        )
        assert answer["success"] is True, answer
        expected = crlf.replace(old.replace("\n", "\r\n"), "one\r\ntwo\r\nthree")
        assert target.read_bytes() == expected.encode()


@given(lines=st.lists(line_text, min_size=1, max_size=6), new_lines=st.integers(2, 4))
def test_new_lines_in_a_crlf_file_get_crlf(lines: list[str], new_lines: int) -> None:
    """A pure-CRLF file stays pure CRLF whatever line breaks the model's new_string has."""
    crlf = "".join(line + "\r\n" for line in [*lines, MARKER])
    file = TextFile(crlf.encode(), 0o644)
    new = "\n".join(f"new {i}" for i in range(new_lines))
    with file_in_workspace(file) as (root, target):
        answer = call_editor(
            root, None, action="edit", file_path=target.name, old_string=MARKER, new_string=new
        )
        assert answer["success"] is True, answer
        data = target.read_bytes()
        assert data.count(b"\n") == data.count(b"\r\n"), data


def invalid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


@given(
    prefix=st.binary(max_size=40),
    bad=st.sampled_from(
        [b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"]
    ),
    suffix=st.binary(max_size=40),
)
def test_a_non_utf8_file_is_refused_untouched(prefix: bytes, bad: bytes, suffix: bytes) -> None:
    data = prefix + MARKER.encode() + bad + suffix
    assume(invalid_utf8(data))
    with file_in_workspace(TextFile(data, 0o640)) as (root, target):
        before = state(target)
        answer = call_editor(
            root, None, action="edit", file_path=target.name, old_string=MARKER, new_string="x"
        )
        assert answer["success"] is False, answer
        assert "not valid UTF-8" in answer["error"]
        assert state(target) == before

"""reader: read (streamed window), list_dir, refusals, file evidence."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lionfactory._call import CallContext, call_context
from lionfactory.errors import ToolInputError
from lionfactory.tools.reader import ReaderRequest, ReaderResponse, reader_tool


@pytest.fixture
def reader(workspace: Path):
    return reader_tool(workspace_root=workspace)


def rows_of(content: str) -> list[str]:
    return [row.split("\t", 1)[1] for row in content.split("\n")] if content else []


async def test_read_returns_numbered_rows(reader, workspace: Path):
    (workspace / "a.txt").write_text("alpha\nbeta\n")
    result = await reader(action="read", path="a.txt")
    assert result["success"] is True
    assert result["content"] == "1\talpha\n2\tbeta"
    assert result["total_lines"] == 2
    assert result["truncated"] is False
    assert result["next_offset"] is None


async def test_read_window_uses_offset_and_limit(reader, workspace: Path):
    (workspace / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    result = await reader(action="read", path="a.txt", offset=3, limit=2)
    assert result["content"] == "4\tline 4\n5\tline 5"
    assert result["next_offset"] == 5
    assert result["truncated"] is True
    assert "offset=5" in result["notice"]


async def test_negative_offset_is_zero(reader, workspace: Path):
    (workspace / "a.txt").write_text("x\ny\n")
    result = await reader(action="read", path="a.txt", offset=-7)
    assert result["content"].startswith("1\tx")


async def test_a_missing_limit_is_2000(reader, workspace: Path):
    (workspace / "a.txt").write_text("".join(f"{i}\n" for i in range(2500)))
    result = await reader(action="read", path="a.txt")
    assert len(result["content"].split("\n")) == 2000
    assert result["next_offset"] == 2000
    assert result["total_lines"] == 2500


async def test_last_line_without_newline_is_a_line(reader, workspace: Path):
    (workspace / "a.txt").write_bytes(b"one\ntwo")
    result = await reader(action="read", path="a.txt")
    assert result["content"] == "1\tone\n2\ttwo"
    assert result["total_lines"] == 2


async def test_crlf_rows_show_the_text_without_the_terminator(reader, workspace: Path):
    (workspace / "a.txt").write_bytes(b"one\r\ntwo\r\n")
    result = await reader(action="read", path="a.txt")
    assert result["content"] == "1\tone\n2\ttwo"


async def test_offset_past_the_end_says_so(reader, workspace: Path):
    (workspace / "a.txt").write_text("x\n")
    result = await reader(action="read", path="a.txt", offset=10)
    assert result["success"] is True
    assert result["content"] == ""
    assert "past the end" in result["notice"]
    assert "smaller offset" in result["notice"]


async def test_empty_file_is_read_as_empty(reader, workspace: Path):
    (workspace / "empty.txt").write_bytes(b"")
    result = await reader(action="read", path="empty.txt")
    assert result["success"] is True
    assert result["content"] == ""
    assert result["total_lines"] == 0


async def test_long_lines_are_cut_with_a_marker(reader, workspace: Path):
    (workspace / "a.txt").write_text("é" * 5000 + "\nshort\n")
    result = await reader(action="read", path="a.txt")
    first, second = result["content"].split("\n")
    assert first.startswith("1\t" + "é" * 2000 + " … [line cut: 2,000 of 5,000 characters shown]")
    assert second == "2\tshort"
    assert result["truncated"] is True
    assert "cut" in result["notice"]


async def test_line_of_exactly_2000_characters_is_not_cut(reader, workspace: Path):
    (workspace / "a.txt").write_text("z" * 2000 + "\n")
    result = await reader(action="read", path="a.txt")
    assert result["content"] == "1\t" + "z" * 2000
    assert result["truncated"] is False


async def test_output_stops_at_256_kib_with_next_offset(reader, workspace: Path):
    line = "w" * 1000
    (workspace / "a.txt").write_text((line + "\n") * 1000)
    result = await reader(action="read", path="a.txt")
    shown = result["content"].split("\n")
    assert len(result["content"].encode()) <= 256 * 1024
    assert result["next_offset"] == len(shown) < 1000
    assert result["total_lines"] == 1000
    assert "256 KiB" in result["notice"]
    more = await reader(action="read", path="a.txt", offset=result["next_offset"])
    assert more["content"].startswith(f"{len(shown) + 1}\t")


async def test_invalid_utf8_is_replaced_and_said_so(reader, workspace: Path):
    (workspace / "a.txt").write_bytes(b"ok\n\xff\xfebad\n")
    result = await reader(action="read", path="a.txt")
    assert result["content"] == "1\tok\n2\t\ufffd\ufffdbad"
    assert "not valid UTF-8" in result["notice"]


async def test_window_at_the_end_of_a_50_mb_file(reader, workspace: Path):
    lines = [f"{i:08d} " + "abcdefghij" * 9 for i in range(520_000)]
    (workspace / "big.txt").write_text("\n".join(lines) + "\n")
    assert (workspace / "big.txt").stat().st_size > 50_000_000
    result = await reader(action="read", path="big.txt", offset=len(lines) - 25, limit=100)
    assert rows_of(result["content"]) == lines[-25:]
    assert result["content"].split("\t", 1)[0] == str(len(lines) - 24)
    assert result["total_lines"] == len(lines)
    assert result["next_offset"] is None


async def test_missing_file_is_refused_with_advice(reader):
    result = await reader(action="read", path="nope.txt")
    assert result["success"] is False
    assert "File not found" in result["error"]
    assert "list_dir" in result["error"]


async def test_directory_is_refused_with_list_dir_hint(reader, workspace: Path):
    (workspace / "sub").mkdir()
    result = await reader(action="read", path="sub")
    assert result["success"] is False
    assert "use action 'list_dir'" in result["error"]


async def test_an_absolute_symlink_inside_the_workspace_is_followed(reader, workspace: Path):
    (workspace / "real.txt").write_text("x\n")
    (workspace / "link.txt").symlink_to(workspace / "real.txt")
    result = await reader(action="read", path="link.txt")
    assert result["success"] is True, result
    assert result["content"] == "1\tx"


async def test_read_follows_a_directory_link_inside_the_workspace(reader, workspace: Path):
    (workspace / "real_docs").mkdir()
    (workspace / "real_docs" / "guide.md").write_text("inside guide\n")
    (workspace / "docs").symlink_to("real_docs")
    result = await reader(action="read", path="docs/guide.md")
    assert result["success"] is True, result
    assert "inside guide" in result["content"]
    listed = await reader(action="list_dir", path="docs")
    assert listed["success"] is True, listed
    assert listed["content"].split("\n") == ["docs/guide.md"]


async def test_read_refuses_a_relative_link_leaving_the_workspace(reader, workspace: Path):
    outside = workspace.parent / "outside_reader"
    outside.mkdir()
    (outside / "s.txt").write_text("OUTSIDE\n")
    (workspace / "leak.txt").symlink_to(f"../{outside.name}/s.txt")
    result = await reader(action="read", path="leak.txt")
    assert result["success"] is False
    assert "outside the workspace" in result["error"]
    assert "OUTSIDE" not in str(result)


async def test_read_refuses_a_link_to_env(reader, workspace: Path):
    (workspace / ".env").write_text("TOKEN=hunter2\n")
    (workspace / "notes").symlink_to(".env")
    result = await reader(action="read", path="notes")
    assert result["success"] is False
    assert "protected" in result["error"]
    assert "hunter2" not in str(result)


async def test_binary_file_is_refused_with_bash_hint(reader, workspace: Path):
    (workspace / "blob.bin").write_bytes(b"abc\x00def" + b"x" * 100)
    result = await reader(action="read", path="blob.bin")
    assert result["success"] is False
    assert "binary" in result["error"]
    assert "Use bash" in result["error"]


async def test_nul_after_the_first_8_kib_is_not_sniffed(reader, workspace: Path):
    (workspace / "late.txt").write_bytes(b"a" * 9000 + b"\x00\n")
    result = await reader(action="read", path="late.txt")
    assert result["success"] is True


async def test_reading_a_pdf_points_to_open(reader, workspace: Path):
    (workspace / "doc.pdf").write_bytes(b"%PDF-1.4\n")
    result = await reader(action="read", path="doc.pdf")
    assert result["success"] is False
    assert "action 'open'" in result["error"]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("../x.txt", "outside the workspace"),
        ("/etc/hostname", "outside the workspace"),
        ("~/x.txt", "outside the workspace"),
        ("a\x00b", "NUL byte"),
        (".env", "protected"),
        ("conf/.env.local", "protected"),
        ("keys/id_rsa", "protected"),
    ],
)
async def test_paths_outside_or_protected_are_refused(reader, path: str, expected: str):
    result = await reader(action="read", path=path)
    assert result["success"] is False
    assert expected in result["error"]


async def test_a_url_for_read_points_to_open(reader):
    result = await reader(action="read", path="https://example.com/a.txt")
    assert result["success"] is False
    assert "only action 'open'" in result["error"]


async def test_read_records_whole_file_evidence_in_the_call_context(reader, workspace: Path):
    data = b"one\ntwo\n"
    target = workspace / "a.txt"
    target.write_bytes(data)
    with call_context(CallContext(call_id="c1", tool="reader", wants_evidence=True)) as ctx:
        result = await reader(action="read", path="a.txt")
    st = target.stat()
    assert ctx.metadata["file_evidence"] == {
        "path": str(target),
        "mtime_ns": st.st_mtime_ns,
        "size": st.st_size,
        "sha256": hashlib.sha256(data).hexdigest(),
        "whole_file": True,
    }
    assert "file_evidence" not in result and "sha256" not in str(result)


async def test_a_partial_window_is_not_whole_file_evidence(reader, workspace: Path):
    data = b"".join(b"%d\n" % i for i in range(10))
    (workspace / "a.txt").write_bytes(data)
    with call_context(CallContext(call_id="c1", tool="reader", wants_evidence=True)) as ctx:
        await reader(action="read", path="a.txt", limit=3)
    evidence = ctx.metadata["file_evidence"]
    assert evidence["whole_file"] is False
    assert evidence["sha256"] == hashlib.sha256(data).hexdigest()


async def test_a_failed_read_records_no_evidence(reader):
    with call_context(CallContext(call_id="c1", tool="reader", wants_evidence=True)) as ctx:
        await reader(action="read", path="missing.txt")
    assert ctx.metadata == {}


@pytest.fixture
def tree(workspace: Path) -> Path:
    for rel in [
        "README.md",
        "setup.cfg",
        "src/app.py",
        "src/util.PY",
        "src/data/table.csv",
        "docs/guide.md",
        ".env",
        "src/.env.local",
        "keys/id_rsa",
        ".git/HEAD",
        ".git/objects/ab/cdef",
    ]:
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    (workspace / "src" / "link.py").symlink_to(workspace / "src" / "app.py")
    return workspace


async def test_list_dir_lists_files_and_subdirectories(reader, tree: Path):
    result = await reader(action="list_dir", path=".")
    assert result["content"].split("\n") == ["README.md", "docs/", "keys/", "setup.cfg", "src/"]
    assert result["total"] == 5


async def test_list_dir_recursive_hides_protected_names_git_and_links(reader, tree: Path):
    result = await reader(action="list_dir", path=".", recursive=True)
    assert result["content"].split("\n") == [
        "README.md",
        "docs/guide.md",
        "setup.cfg",
        "src/app.py",
        "src/data/table.csv",
        "src/util.PY",
    ]


async def test_list_dir_paths_are_relative_to_the_workspace_root(reader, tree: Path):
    result = await reader(action="list_dir", path="src/data")
    assert result["content"] == "src/data/table.csv"


@pytest.fixture
def checkout(workspace: Path) -> Path:
    """A project with a .venv, node_modules and nested .gitignore rules (no git repository)."""
    for rel, text in {
        ".gitignore": ".venv/\nnode_modules/\n*.log\n",
        "src/app.py": "",
        "src/run.log": "",
        "logs/.gitignore": "!keep.log\n",
        "logs/keep.log": "",
        "logs/drop.log": "",
        ".venv/lib/site.py": "",
        "node_modules/pkg/index.js": "",
    }.items():
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return workspace


async def test_list_dir_recursive_leaves_out_ignored_paths(reader, checkout: Path):
    result = await reader(action="list_dir", path=".", recursive=True)
    assert result["content"].split("\n") == [
        ".gitignore",
        "logs/.gitignore",
        "logs/keep.log",
        "src/app.py",
    ]
    # .venv/, node_modules/, src/run.log, logs/drop.log
    assert result["notice"].startswith("4 ignored path(s)")
    assert "include_ignored=true" in result["notice"]


async def test_list_dir_flat_leaves_out_ignored_directories(reader, checkout: Path):
    result = await reader(action="list_dir", path=".")
    assert result["content"].split("\n") == [".gitignore", "logs/", "src/"]


async def test_list_dir_include_ignored_lists_everything(reader, checkout: Path):
    result = await reader(action="list_dir", path=".", recursive=True, include_ignored=True)
    listed = result["content"].split("\n")
    assert {".venv/lib/site.py", "node_modules/pkg/index.js", "src/run.log"} <= set(listed)
    assert result["notice"] is None


async def test_list_dir_of_a_named_ignored_directory_lists_it(reader, checkout: Path):
    result = await reader(action="list_dir", path=".venv", recursive=True)
    assert result["content"] == ".venv/lib/site.py"


@pytest.mark.parametrize("types", [["py"], [".py"], ["PY"], [".Py"]])
async def test_file_types_match_case_insensitively_with_or_without_dot(reader, tree, types):
    result = await reader(action="list_dir", path=".", recursive=True, file_types=types)
    assert result["content"].split("\n") == ["src/app.py", "src/util.PY"]


async def test_list_dir_is_capped_at_1000_rows_with_the_total(reader, workspace: Path):
    for i in range(1005):
        (workspace / f"f{i:04d}.txt").write_text("")
    result = await reader(action="list_dir", path=".")
    rows = result["content"].split("\n")
    assert len(rows) == 1000
    assert rows[0] == "f0000.txt"
    assert rows[-1] == "f0999.txt"
    assert result["truncated"] is True
    assert result["total"] == 1005
    assert "first 1000 of 1005" in result["notice"]


async def test_list_dir_of_a_file_points_to_read(reader, tree: Path):
    result = await reader(action="list_dir", path="README.md")
    assert result["success"] is False
    assert "use action 'read'" in result["error"]


async def test_list_dir_of_a_missing_directory_says_what_to_do(reader):
    result = await reader(action="list_dir", path="nowhere")
    assert result["success"] is False
    assert "list_dir' on a parent directory" in result["error"]


async def test_list_dir_of_a_protected_directory_is_refused(reader, workspace: Path):
    (workspace / ".env").mkdir()
    result = await reader(action="list_dir", path=".env")
    assert result["success"] is False
    assert "protected" in result["error"]


async def test_unknown_action_is_an_input_error(reader):
    with pytest.raises(ToolInputError, match="action"):
        await reader(action="delete", path="a.txt")


async def test_unknown_argument_is_an_input_error(reader):
    with pytest.raises(ToolInputError, match="Extra inputs"):
        await reader(action="read", path="a.txt", encoding="latin-1")


def test_every_schema_field_has_a_description():
    for model in (ReaderRequest, ReaderResponse):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"


def test_tool_is_named_reader_and_bound_to_no_branch(reader):
    assert reader.name == "reader"
    assert reader.bound_to is None
    assert "list_dir" in reader.description


def test_root_is_resolved_at_factory_time(workspace: Path, monkeypatch, tmp_path: Path):
    (workspace / "here.txt").write_text("here\n")
    monkeypatch.chdir(workspace)
    tool = reader_tool()
    monkeypatch.chdir(tmp_path)
    assert tool.run_sync(action="read", path="here.txt")["content"] == "1\there"


@pytest.mark.parametrize(
    ("kwargs", "error", "shown"),
    [
        ({"cache_ttl": -1}, ValueError, "got -1"),
        ({"cache_ttl": "5"}, TypeError, "got '5'"),
        ({"pdf_pipeline": "fast"}, ValueError, "got 'fast'"),
        ({"allowed_hosts": "example.com"}, TypeError, "got 'example.com'"),
        ({"allowed_hosts": ["https://example.com"]}, ValueError, "got 'https://example.com'"),
        ({"allowed_hosts": ["10.0.0.1"]}, ValueError, "got '10.0.0.1'"),
        ({"allowed_hosts": ["*.example.com"]}, ValueError, "got '*.example.com'"),
        ({"resolver": "dns"}, TypeError, "got 'dns'"),
    ],
)
def test_factory_misuse_fails_at_once_showing_the_value(workspace, kwargs, error, shown):
    with pytest.raises(error, match=re.escape(shown)):
        reader_tool(workspace_root=workspace, **kwargs)


def test_importing_the_tools_imports_neither_docling_nor_httpx():
    code = (
        "import sys, lionfactory.tools, lionfactory.tools.reader, lionfactory.tools.editor; "
        "print(sorted(m for m in ('docling', 'httpx') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert out.stdout.strip() == "[]"


async def test_a_huge_file_is_not_counted_past_the_budget(reader, workspace: Path):
    from lionfactory.tools._reader_window import FULL_COUNT_BYTES

    line = b"x" * 99 + b"\n"
    lines = FULL_COUNT_BYTES // len(line) + 50_000
    (workspace / "huge.txt").write_bytes(line * lines)
    result = await reader(action="read", path="huge.txt", limit=3)
    assert result["success"] is True
    assert result["content"].splitlines() == [f"{n}\t{'x' * 99}" for n in (1, 2, 3)]
    assert result["total_lines"] is None
    assert result["next_offset"] == 3
    assert result["truncated"] is True
    assert "not all counted" in result["notice"]
    # The end of the file is counted exactly: the window reached it.
    last = await reader(action="read", path="huge.txt", offset=lines - 2)
    assert last["total_lines"] == lines
    assert last["next_offset"] is None


async def test_evidence_of_a_huge_file_skips_the_hash_and_the_full_count(reader, workspace: Path):
    line = b"y" * 99 + b"\n"
    lines = 200_000  # 20 MB: over the hashing and full-count thresholds
    (workspace / "huge.txt").write_bytes(line * lines)
    context = CallContext(call_id="c", tool="reader", wants_evidence=True)
    with call_context(context):
        result = await reader(action="read", path="huge.txt", limit=3)
    assert result["total_lines"] is None
    evidence = context.metadata["file_evidence"]
    assert evidence["sha256"] is None
    assert evidence["size"] == len(line) * lines
    assert evidence["whole_file"] is False


async def test_evidence_of_a_small_file_is_hashed(reader, workspace: Path):
    (workspace / "small.txt").write_bytes(b"a\nb\n")
    context = CallContext(call_id="c", tool="reader", wants_evidence=True)
    with call_context(context):
        await reader(action="read", path="small.txt")
    evidence = context.metadata["file_evidence"]
    assert evidence["sha256"] == hashlib.sha256(b"a\nb\n").hexdigest()
    assert evidence["whole_file"] is True


async def test_a_read_asked_for_evidence_returns_the_whole_file_hash(reader, workspace: Path):
    data = b"".join(b"line %d\n" % i for i in range(50))
    (workspace / "h.txt").write_bytes(data)
    with call_context(CallContext(call_id="c", tool="reader", wants_evidence=True)):
        whole = await reader(action="read", path="h.txt")
        window = await reader(action="read", path="h.txt", offset=10, limit=5)
    # A window read still hashes every byte (the evidence needs it): the same hash.
    assert whole["content_hash"] == window["content_hash"] == hashlib.sha256(data).hexdigest()
    plain = await reader(action="read", path="h.txt")
    assert plain["content_hash"] is None  # nothing asked for evidence: nothing hashed


async def test_a_path_read_before_is_judged_again_when_it_became_a_link_leaving(
    reader, workspace: Path
):
    # The reader remembers where a path points lexically; where it leads is the
    # kernel's answer at every open, so a swap between two reads is caught.
    outside = workspace.parent / "outside_swap"
    outside.mkdir()
    (outside / "s.txt").write_text("OUTSIDE\n")
    (workspace / "notes.txt").write_text("inside\n")
    first = await reader(action="read", path="notes.txt")
    assert first["success"] is True and "inside" in first["content"]
    (workspace / "notes.txt").unlink()
    (workspace / "notes.txt").symlink_to(f"../{outside.name}/s.txt")
    second = await reader(action="read", path="notes.txt")
    assert second["success"] is False
    assert "outside the workspace" in second["error"]
    assert "OUTSIDE" not in str(second)


async def test_a_refused_path_is_refused_every_time(reader, workspace: Path):
    (workspace / ".env").write_text("TOKEN=hunter2\n")
    for _ in range(2):
        result = await reader(action="read", path=".env")
        assert result["success"] is False
        assert "hunter2" not in str(result)


def test_a_budgeted_count_reads_no_further_than_its_budget() -> None:
    import io

    from lionfactory.tools._reader_window import read_window

    class Counted(io.BytesIO):
        taken = 0

        def read(self, size: int | None = -1, /) -> bytes:
            data = super().read(size)
            self.taken += len(data)
            return data

    line = b"z" * 99 + b"\n"
    stream = Counted(line * 500_000)  # 50 MB
    window = read_window(stream, offset=0, limit=3, count_budget=100_000)
    assert window.content.splitlines() == [f"{n}\t{'z' * 99}" for n in (1, 2, 3)]
    assert window.total_lines is None
    assert window.next_offset == 3
    # The first chunk (64 KiB) holds the window; the count reads what is left
    # of the budget after the window's bytes, and one byte to tell that the
    # stream goes on.
    assert stream.taken == 3 * len(line) + 100_000 + 1


@pytest.mark.parametrize("tail_lines", [0, 1, 999, 1_001, 400_000])
def test_a_known_size_skips_a_count_that_would_run_out(tail_lines: int) -> None:
    """With the stream's size known, a count past the budget is not started.

    The window and its total are what the budgeted count gives without the
    size: exact when the rest fits in the budget, unknown when it does not,
    and only then is nothing read past the window's chunk.
    """
    import io

    from lionfactory.tools._reader_window import read_window

    line = b"y" * 99 + b"\n"
    data = line * (3 + tail_lines)
    budget = 100_000  # 1,000 lines of 100 bytes
    counted = read_window(io.BytesIO(data), offset=0, limit=3, count_budget=budget)
    stream = io.BytesIO(data)
    sized = read_window(stream, offset=0, limit=3, count_budget=budget, size=len(data))
    assert sized == counted
    if tail_lines * len(line) > budget:
        assert sized.total_lines is None and sized.next_offset == 3
        assert stream.tell() == min(len(data), 1 << 16)  # the first chunk only
    else:
        assert sized.total_lines == 3 + tail_lines


_LINE_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=12
)


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(_LINE_TEXT, min_size=1, max_size=40),
    before=st.sampled_from([0, 1, 4060, 4090, 4095, 4096, 4097, 6000]),
    back=st.integers(0, 12),
    limit=st.integers(1, 60),
)
def test_rows_are_numbered_alike_below_and_above_the_cached_prefixes(
    lines: list[str], before: int, back: int, limit: int
) -> None:
    """Rows numbered from cached prefixes (up to 4096) and formatted ones read the same.

    The window is compared with a plain numbering of the lines, for windows
    below, across and above the last cached prefix.
    """
    import io

    from lionfactory.tools._reader_window import read_window

    every = [f"f{n}" for n in range(before)] + lines
    offset = max(0, before - back)
    stream = io.BytesIO("".join(f"{line}\n" for line in every).encode("utf-8"))
    window = read_window(stream, offset=offset, limit=limit)
    shown = every[offset : offset + limit]
    assert window.content == "\n".join(f"{offset + i + 1}\t{line}" for i, line in enumerate(shown))
    assert window.total_lines == len(every)


_WINDOW_LINES = st.lists(
    st.one_of(
        st.text(alphabet="ab\t é€😀\r", max_size=70),
        st.binary(max_size=12).map(lambda raw: raw.replace(b"\n", b"").decode("latin-1")),
    ),
    max_size=30,
)


@settings(max_examples=500, deadline=None)
@given(
    lines=_WINDOW_LINES,
    raw=st.lists(st.sampled_from([b"", b"\xff", b"\xe2\x82", b"\r", b"\xf0\x9f\x98\x80"])),
    crlf=st.booleans(),
    final_newline=st.booleans(),
    offset=st.integers(0, 8),
    limit=st.integers(1, 40),
    line_chars=st.integers(1, 80) | st.just(2000),
    output_bytes=st.integers(1, 700) | st.just(256 * 1024),
)
def test_whole_blocks_of_rows_read_like_one_line_at_a_time(
    lines: list[str],
    raw: list[bytes],
    crlf: bool,
    final_newline: bool,
    offset: int,
    limit: int,
    line_chars: int,
    output_bytes: int,
) -> None:
    """The bulk path (whole blocks of lines) gives the window the line-by-line path gives.

    Lines longer than the cut, invalid or cut-off UTF-8, CR and CRLF, a
    missing final newline, and windows that meet the output cap; the caps
    are made small so that short lines reach them.
    """
    import io

    from lionfactory.tools import _reader_window as window_module

    encoded = [line.encode("utf-8", "surrogatepass") for line in lines]
    for index, extra in enumerate(raw):
        if encoded:
            encoded[index % len(encoded)] += extra
    ending = b"\r\n" if crlf else b"\n"
    data = ending.join(encoded) + (ending if final_newline and encoded else b"")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(window_module, "MAX_LINE_CHARS", line_chars)
        patch.setattr(window_module, "MAX_OUTPUT_BYTES", output_bytes)
        bulk = window_module.read_window(io.BytesIO(data), offset=offset, limit=limit)
        patch.setattr(window_module, "_bulk_rows", lambda *args: None)
        single = window_module.read_window(io.BytesIO(data), offset=offset, limit=limit)
    assert bulk == single


@settings(max_examples=300, deadline=None)
@given(
    lines=_WINDOW_LINES,
    ending=st.sampled_from([b"\n", b"\r\n"]),
    offset=st.integers(0, 4),
    limit=st.integers(1, 40),
    piece_bytes=st.integers(1, 160),
    output_bytes=st.integers(1, 900) | st.just(256 * 1024),
)
def test_a_window_decoded_in_small_pieces_reads_like_one_line_at_a_time(
    lines: list[str],
    ending: bytes,
    offset: int,
    limit: int,
    piece_bytes: int,
    output_bytes: int,
) -> None:
    """A window whose lines span many bulk pieces gives the line-by-line window.

    The bulk path decodes at most `_BULK_BYTES` at a time and numbers the
    lines of all its pieces in one go; a piece boundary anywhere (inside a
    line too) must not change a row, its number, the cap or the count.
    """
    import io

    from lionfactory.tools import _reader_window as window_module

    data = b"".join(line.encode("utf-8", "surrogatepass") + ending for line in lines)
    windows = []
    for bulk in (True, False):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(window_module, "MAX_OUTPUT_BYTES", output_bytes)
            if bulk:
                patch.setattr(window_module, "_BULK_BYTES", piece_bytes)
            else:  # every line by the line-by-line path
                patch.setattr(window_module, "_bulk_rows", lambda *args: None)
            windows.append(window_module.read_window(io.BytesIO(data), offset=offset, limit=limit))
    in_pieces, line_by_line = windows
    assert in_pieces == line_by_line

"""The language-server client and the diagnostics delta, against a server that misbehaves.

`fake_lsp_server.py` is a real process speaking LSP over stdio; each mode
does one thing real servers do wrong.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lionfactory._call import CallContext, call_context
from lionfactory._os.workspace import Workspace
from lionfactory.tools._code_intel import CodeIntel, _compare, _line_map, build_code_intel
from lionfactory.tools._lsp import char_column, utf16_column
from lionfactory.tools.code_nav import code_nav_tool
from lionfactory.tools.editor import editor_tool

FAKE = Path(__file__).with_name("fake_lsp_server.py")


def fake_intel(root: Path, mode: str, *extra: str) -> CodeIntel:
    intel = build_code_intel(Workspace.at(root), command=(sys.executable, str(FAKE), mode, *extra))
    assert intel is not None
    return intel


def group_members(pgid: int) -> list[int]:
    """Processes of group `pgid` still running (read from /proc)."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            data = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            members.append(int(name))
    return members


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "mod.py").write_text("def f():\n    x = 1\n    y = BAD\n    return x\n")
    return tmp_path


async def edit(intel: CodeIntel, root: Path, **arguments: object) -> dict:
    tool = editor_tool(workspace_root=root, diagnostics=intel.editing())
    return await tool(**arguments)


# -- columns ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "chars"),
    [("abc", 2), ("😀x", 1), ("😀x", 2), ("a😀😀b", 3), ("é😀", 2), ("", 0)],
)
def test_utf16_columns_round_trip(line: str, chars: int) -> None:
    units = utf16_column(line, chars)
    assert units == len(line[:chars].encode("utf-16-le")) // 2
    assert char_column(line, units) == chars


async def test_a_column_after_emoji_is_counted_in_characters(tmp_path: Path) -> None:
    (tmp_path / "e.py").write_text('s = "😀😀"; t = BAD\n')
    intel = fake_intel(tmp_path, "normal")
    try:
        server = await intel.server()
        found, fresh = await intel.diagnostics(server, tmp_path / "e.py", timeout=5)
    finally:
        await intel.aclose()
    assert fresh
    line = 's = "😀😀"; t = BAD'
    assert [(d.line, d.column) for d in found] == [(1, line.index("BAD") + 1)]


async def test_a_position_after_emoji_reaches_the_server_in_utf16(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text('def target():\n    pass\nprint("😀😀", target())\n')
    tool = code_nav_tool(
        workspace_root=tmp_path, _server_command=(sys.executable, str(FAKE), "normal")
    )
    try:
        result = await tool(action="find_definition", path="m.py", symbol="target", line=3)
    finally:
        await tool.handler.close_branch(None)
    assert result["engine"] == "ty"
    assert result["rows"] == ["m.py:1: def target():"]


# -- the delta -------------------------------------------------------------------


async def test_a_line_added_above_an_error_introduces_nothing(project: Path) -> None:
    intel = fake_intel(project, "normal")
    try:
        result = await edit(
            intel,
            project,
            action="insert",
            file_path="mod.py",
            insert_line=0,
            new_string="# a comment",
        )
    finally:
        await intel.aclose()
    d = result["diagnostics"]
    assert (d["introduced"], d["resolved"], d["fresh"], d["engine"]) == ([], [], True, "ty")
    assert [(r["line"], r["code"]) for r in d["remaining"]] == [(4, "bad")]


async def test_a_new_error_is_introduced_and_a_removed_one_resolved(project: Path) -> None:
    intel = fake_intel(project, "normal")
    try:
        added = await edit(
            intel,
            project,
            action="edit",
            file_path="mod.py",
            old_string="    x = 1\n",
            new_string="    x = 1\n    z = BAD\n",
        )
        removed = await edit(
            intel,
            project,
            action="edit",
            file_path="mod.py",
            old_string="    y = BAD\n",
            new_string="",
        )
    finally:
        await intel.aclose()
    assert [(d["line"], d["column"]) for d in added["diagnostics"]["introduced"]] == [(3, 9)]
    assert added["diagnostics"]["resolved"] == []
    assert removed["diagnostics"]["introduced"] == []
    assert [d["line"] for d in removed["diagnostics"]["resolved"]] == [4]


async def test_an_error_written_by_another_program_is_not_the_edits(project: Path) -> None:
    intel = fake_intel(project, "normal")
    try:
        await edit(
            intel, project, action="insert", file_path="mod.py", insert_line=0, new_string="#"
        )
        # The server has the text of that edit; the file on disk changes under it.
        (project / "mod.py").write_text((project / "mod.py").read_text() + "w = BAD\n")
        removal = {"action": "edit", "file_path": "mod.py", "old_string": "    y = BAD\n"}
        result = await edit(intel, project, **removal, new_string="")
    finally:
        await intel.aclose()
    d = result["diagnostics"]
    assert d["introduced"] == []  # the other program's error was there before the change
    assert [r["line"] for r in d["resolved"]] == [4]
    assert [r["line"] for r in d["remaining"]] == [5]


def test_a_moved_or_reformatted_line_keeps_its_error() -> None:
    from lionfactory.tools._code_intel import Diagnostic

    old_lines = ["def a():", "    y = BAD", "", "def b():", "    pass"]
    new_lines = ["def b():", "    pass", "", "def a():", "    y  =  BAD"]
    old = [Diagnostic("m.py", 2, 9, "bad", "bad token", "error")]
    now = [Diagnostic("m.py", 5, 11, "bad", "bad token", "error")]
    assert _compare(old, now, old_lines, new_lines) == ([], [])
    assert _line_map(["a", "b"], ["x", "a", "b"]) == {1: 2, 2: 3}


def test_a_second_copy_of_an_old_error_is_introduced() -> None:
    from lionfactory.tools._code_intel import Diagnostic

    old_lines = ["y = BAD"]
    new_lines = ["y = BAD", "z = BAD"]
    old = [Diagnostic("m.py", 1, 5, "bad", "bad token", "error")]
    now = [*old, Diagnostic("m.py", 2, 5, "bad", "bad token", "error")]
    introduced, resolved = _compare(old, now, old_lines, new_lines)
    assert [d.line for d in introduced] == [2]
    assert resolved == []


async def test_a_non_python_file_gets_no_diagnostics(project: Path) -> None:
    intel = fake_intel(project, "normal")
    try:
        result = await edit(intel, project, action="write", file_path="notes.txt", content="BAD")
    finally:
        await intel.aclose()
    assert result["success"] is True
    assert result["diagnostics"] is None
    assert intel.pids() == []  # nothing was started for a text file


# -- what servers do wrong -------------------------------------------------------


async def test_a_late_report_is_not_fresh_and_comes_with_the_next_call(project: Path) -> None:
    intel = fake_intel(project, "late", "2.0")
    branch = CallContext(call_id="c", tool="editor")
    try:
        with call_context(branch):
            started = time.monotonic()
            result = await edit(
                intel,
                project,
                action="edit",
                file_path="mod.py",
                old_string="    x = 1\n",
                new_string="    x = BAD\n",
            )
            took = time.monotonic() - started
            d = result["diagnostics"]
            assert (d["fresh"], d["introduced"]) == (False, [])
            assert took < 1.5 + 1.0  # the edit's budget, with room for a slow machine
            assert await intel.late_report() is None  # not there yet
            server = await intel.server()
            # Until the report of the edited version arrives, not for the whole delay.
            ((uri, doc),) = server.docs.items()
            arrived = await server.client.pump(
                lambda: server.current(uri, doc.version) is not None, timeout=30
            )
            assert arrived
            late = await intel.late_report()
            assert late is not None
            assert [x["line"] for x in late["introduced"]] == [2]
            assert await intel.late_report() is None  # given once
    finally:
        await intel.aclose()


async def test_reports_out_of_order_keep_the_newest_version(project: Path) -> None:
    intel = fake_intel(project, "out_of_order")
    try:
        result = await edit(
            intel,
            project,
            action="edit",
            file_path="mod.py",
            old_string="    y = BAD\n",
            new_string="    y = 2\n",
        )
        server = await intel.server()
        await server.client.pump(lambda: False, timeout=0.3)
        (uri,) = server.docs
        published = server.client.published[uri]
    finally:
        await intel.aclose()
    d = result["diagnostics"]
    assert d["fresh"] is True
    assert d["remaining"] == []
    assert [x["line"] for x in d["resolved"]] == [3]
    assert (published.version, published.diagnostics) == (2, [])


async def test_a_stale_version_report_is_not_taken_for_the_new_text(project: Path) -> None:
    intel = fake_intel(project, "stale", "0.3")
    try:
        result = await edit(
            intel,
            project,
            action="edit",
            file_path="mod.py",
            old_string="    y = BAD\n",
            new_string="    y = 2\n",
        )
    finally:
        await intel.aclose()
    d = result["diagnostics"]
    # The old version's report (still listing the error) came first; it was skipped.
    assert (d["fresh"], d["remaining"]) == (True, [])
    assert [x["line"] for x in d["resolved"]] == [3]


async def test_a_crashed_server_fails_no_edit_and_is_started_again(project: Path) -> None:
    intel = fake_intel(project, "crash")
    try:
        result = await edit(
            intel,
            project,
            action="edit",
            file_path="mod.py",
            old_string="    x = 1\n",
            new_string="    x = 2\n",
        )
        assert result["success"] is True
        assert result["diagnostics"] is None
        assert (project / "mod.py").read_text().startswith("def f():\n    x = 2\n")
        first = intel.pids()
        server = await intel.server()  # a fresh one
        assert server.pid not in first
        found, fresh = await intel.diagnostics(server, project / "mod.py", timeout=5)
        assert fresh
        assert [d.line for d in found] == [3]
    finally:
        await intel.aclose()


async def test_a_hanging_initialize_costs_an_edit_its_budget_only(project: Path) -> None:
    intel = fake_intel(project, "hang_init")
    try:
        started = time.monotonic()
        result = await edit(
            intel,
            project,
            action="edit",
            file_path="mod.py",
            old_string="    x = 1\n",
            new_string="    x = 2\n",
        )
        took = time.monotonic() - started
        assert result["success"] is True
        assert result["diagnostics"]["fresh"] is False
        assert took < 1.5 + 1.0
        intel.init_timeout = 0.2
        nav = code_nav_tool(workspace_root=project, code_intel=intel)
        answer = await nav(action="find_definition", path="mod.py", symbol="f")
        # The semantic engine failed; the syntax engine answered and says why.
        assert (answer["success"], answer["engine"]) == (True, "ast")
        assert "initialize" in answer["note"]
        hover = await nav(action="hover", path="mod.py", symbol="f")
        assert hover["success"] is False
        assert "initialize" in hover["error"]
    finally:
        await intel.aclose()


async def test_ten_thousand_diagnostics_are_capped(project: Path) -> None:
    intel = fake_intel(project, "flood")
    try:
        result = await edit(
            intel,
            project,
            action="edit",
            file_path="mod.py",
            old_string="    x = 1\n",
            new_string="    x = 2\n",
        )
        nav = code_nav_tool(workspace_root=project, code_intel=intel)
        listed = await nav(action="diagnostics", paths=["mod.py"], limit=50)
    finally:
        await intel.aclose()
    d = result["diagnostics"]
    assert len(d["remaining"]) == 20
    assert d["omitted"] == {"remaining": 10_000 - 20}
    assert d["introduced"] == []  # the same 10,000 before and after
    assert listed["total"] == 10_000
    assert len(listed["rows"]) == 50
    assert listed["next_offset"] == 50


async def test_a_server_request_is_answered(project: Path) -> None:
    # The server waits for our answer to workspace/configuration before it
    # answers initialize (and exits if the answer is missing or wrong).
    intel = fake_intel(project, "ask")
    try:
        server = await intel.server()
        assert server.ready
        found, _ = await intel.diagnostics(server, project / "mod.py", timeout=5)
        assert [d.line for d in found] == [3]
    finally:
        await intel.aclose()


async def test_close_leaves_no_process(project: Path) -> None:
    intel = fake_intel(project, "late", "30")
    await edit(
        intel,
        project,
        action="edit",
        file_path="mod.py",
        old_string="    x = 1\n",
        new_string="    x = 2\n",
    )
    (pid,) = intel.pids()
    assert group_members(pid)
    await intel.close_branch(None)
    assert group_members(pid) == []
    assert intel.pids() == []


# -- in the coding toolkit -------------------------------------------------------


def fake_toolkit(project: Path, mode: str, *extra: str) -> Any:
    """A `coding_toolkit` branch on `project` whose type checker is the fake server in `mode`."""
    from lionfactory import Branch
    from lionfactory.coding import coding_toolkit

    branch = Branch()
    branch.register(
        coding_toolkit,
        workspace_root=project,
        isolation="none",
        _code_server=(sys.executable, str(FAKE), mode, *extra),
    )
    return branch


async def test_a_late_report_rides_on_the_next_toolkit_result(project: Path) -> None:
    branch = fake_toolkit(project, "late", "2.0")
    try:
        assert (await branch.act("reader", {"action": "read", "path": "mod.py"})).ok
        edited = await branch.act(
            "editor",
            {
                "action": "edit",
                "file_path": "mod.py",
                "old_string": "    x = 1\n",
                "new_string": "    x = BAD\n",
            },
        )
        assert edited.result["diagnostics"]["fresh"] is False
        assert "late_diagnostics" not in edited.result
        # Waits (for the report itself, at most 5 s) for the current errors.
        listed = await branch.act("code_nav", {"action": "diagnostics", "paths": ["mod.py"]})
        late = listed.result["late_diagnostics"]
        assert [(d["line"], d["code"]) for d in late["introduced"]] == [(2, "bad")]
        again = await branch.act("reader", {"action": "read", "path": "mod.py"})
        assert "late_diagnostics" not in again.result  # given once
    finally:
        await branch.aclose()


async def test_semantic_actions_need_the_semantic_engine(project: Path) -> None:
    off = code_nav_tool(workspace_root=project, engine="ast")
    hover = await off(action="hover", path="mod.py", symbol="f")
    assert (hover["success"], hover["engine"]) == (False, "ast")
    assert "needs the ty engine" in hover["error"]
    refused = await off(action="outline", path="mod.py", engine="ty")
    assert refused["success"] is False
    assert "engine='ty' is not available" in refused["error"]
    with pytest.raises(ValueError, match="engine must be"):
        code_nav_tool(workspace_root=project, engine="jedi")


async def test_a_path_outside_the_workspace_is_refused_by_the_semantic_engine(
    project: Path,
) -> None:
    tool = code_nav_tool(
        workspace_root=project, _server_command=(sys.executable, str(FAKE), "normal")
    )
    try:
        result = await tool(action="find_definition", path="../x.py", symbol="f")
        listed = await tool(action="diagnostics", paths=["/etc/passwd"])
    finally:
        await tool.handler.close_branch(None)
    assert (result["success"], result["engine"]) == (False, "ty")
    assert listed["success"] is False


async def test_a_broken_header_ends_the_connection_with_a_typed_answer(project: Path) -> None:
    intel = fake_intel(project, "garbage")
    try:
        nav = code_nav_tool(workspace_root=project, code_intel=intel)
        result = await nav(action="hover", path="mod.py", symbol="f")
        edited = await edit(
            intel,
            project,
            action="edit",
            file_path="mod.py",
            old_string="    x = 1\n",
            new_string="    x = 2\n",
        )
    finally:
        await intel.aclose()
    assert result["success"] is False
    assert "without a usable length" in result["error"]
    assert edited["success"] is True
    assert edited["diagnostics"] is None


async def test_a_huge_hover_is_cut(project: Path) -> None:
    intel = fake_intel(project, "huge_hover")
    try:
        nav = code_nav_tool(workspace_root=project, code_intel=intel)
        result = await nav(action="hover", path="mod.py", symbol="f")
    finally:
        await intel.aclose()
    assert result["success"] is True
    assert len(result["text"]) < 4100
    assert result["text"].endswith("[hover cut at 4,000 characters]")


# -- what the editor knows and what runs meanwhile --------------------------------


def test_written_bytes_stand_for_a_read_until_the_file_changes(tmp_path: Path) -> None:
    """The editor's bytes are used while the file is the one written; a later change is read."""
    import subprocess

    from lionfactory.tools._code_intel import _written_text

    workspace = Workspace.at(tmp_path)
    path = tmp_path / "a.py"
    path.write_bytes(b"x = 1\n")
    st = path.stat()
    # Same inode, size and mtime: taken as written, not read (the file says "x = 1").
    assert _written_text(workspace, path, b"x = 2\n", st) == (
        "x = 2\n",
        (st.st_mtime_ns, st.st_size),
    )
    # Another program appends: the file is read, as the editor's read-back did.
    subprocess.run(["sh", "-c", f"printf 'y = 2\\n' >> '{path}'"], check=True)
    assert _written_text(workspace, path, b"x = 1\n", st) == (
        "x = 1\ny = 2\n",
        (path.stat().st_mtime_ns, path.stat().st_size),
    )
    # Replaced by another file of the same size: another inode, read.
    subprocess.run(["sh", "-c", f"printf 'x = 9\\ny = 2\\n' > '{path}.new'"], check=True)
    os.replace(f"{path}.new", path)
    assert _written_text(workspace, path, b"x = 1\ny = 2\n", st)[0] == "x = 9\ny = 2\n"  # type: ignore[index]


def test_written_bytes_pass_the_refusals_of_a_read(tmp_path: Path) -> None:
    from lionfactory.tools._code_intel import _written_text

    workspace = Workspace.at(tmp_path)
    key = tmp_path / "key.py"
    data = b"-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n"
    key.write_bytes(data)
    assert _written_text(workspace, key, data, key.stat()) is None
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"x = '\xe9'\n")
    assert _written_text(workspace, latin, b"x = '\xe9'\n", latin.stat()) is None
    outside = tmp_path.parent / f"{tmp_path.name}-outside.py"
    outside.write_bytes(b"x = 1\n")
    assert _written_text(workspace, outside, b"x = 1\n", outside.stat()) is None


async def test_work_while_checking_runs_once_the_new_text_is_sent(project: Path) -> None:
    """`while_checking` work runs after the server has the edit, before its diagnostics."""
    from lionfactory.tools._code_intel import while_checking

    intel = fake_intel(project, "normal")
    seen: list[str] = []

    async def work() -> None:
        (server,) = intel._servers.values()
        seen.append(server.docs[next(iter(server.docs))].text)

    try:
        with while_checking(work):
            result = await edit(
                intel,
                project,
                action="edit",
                file_path="mod.py",
                old_string="x = 1",
                new_string="x = 2",
            )
            text = await edit(intel, project, action="write", file_path="notes.txt", content="a\n")
    finally:
        await intel.aclose()
    assert result["diagnostics"]["fresh"] is True
    assert text["success"] and text["diagnostics"] is None
    # Once, for the Python edit (the text file waits for no diagnostics).
    assert seen == [(project / "mod.py").read_text()]


async def test_a_toolkit_edit_with_diagnostics_has_its_checkpoint_recorded(project: Path) -> None:
    """The record taken during the diagnostics wait is the call's, complete as it returns."""
    branch = fake_toolkit(project, "normal")
    try:
        assert (await branch.act("reader", {"action": "read", "path": "mod.py"})).ok
        for old, new in (("x = 1", "x = 2"), ("x = 2", "x = 3")):
            arguments = {"action": "edit", "file_path": "mod.py", "old_string": old}
            edited = await branch.act("editor", {**arguments, "new_string": new})
            assert edited.ok and edited.result["diagnostics"]["fresh"] is True, edited.result
            entry = branch.checkpoint_log.entries[-1]
            assert (entry.checkpoint.tool, entry.checkpoint.files_changed) == (
                "editor",
                ("mod.py",),
            )
            assert entry.data["after"]["overlay"] != entry.data["before"]["overlay"]
    finally:
        await branch.aclose()

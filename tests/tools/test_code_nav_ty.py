"""``code_nav`` and the editor's diagnostics on the real ty language server."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest

from lionfactory import Branch
from lionfactory._os.mechanisms import mechanism_problem
from lionfactory._os.workspace import Workspace
from lionfactory.coding import coding_toolkit
from lionfactory.tools._code_intel import CodeIntel, build_code_intel, ty_command
from lionfactory.tools.code_nav import code_nav_tool
from lionfactory.tools.editor import editor_tool

pytestmark = pytest.mark.skipif(ty_command() is None, reason="ty is not installed")

PACKAGE = Path(__file__).resolve().parents[2] / "lionfactory"


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


PROJECT = {
    "pkg/__init__.py": "",
    "pkg/util.py": '''
        def helper(x: int) -> int:
            """Add one."""
            return x + 1
        ''',
    "pkg/models.py": """
        class Config:
            def load(self) -> "Config":
                return self
        """,
    "pkg/app.py": """
        from pkg.models import Config
        from pkg.util import helper


        def main() -> int:
            config = Config().load()
            print(config)
            return helper(2)


        def broken() -> None:
            print(not_defined_anywhere)
        """,
    "pkg/other.py": """
        from pkg import util


        def twice() -> int:
            return util.helper(util.helper(0))
        """,
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(tmp_path, PROJECT)
    return tmp_path


@pytest.fixture
async def intel(project: Path):
    made = build_code_intel(Workspace.at(project))
    assert made is not None
    yield made
    await made.aclose()


async def nav(intel: CodeIntel, **arguments: object) -> dict:
    return await code_nav_tool(workspace_root=intel.root, code_intel=intel)(**arguments)


async def edit(intel: CodeIntel, **arguments: object) -> dict:
    tool = editor_tool(workspace_root=intel.root, diagnostics=intel.editing())
    result = await tool(**arguments)
    assert result["success"] is True, result
    return result


# -- navigation ------------------------------------------------------------------


async def test_find_definition_follows_an_import_into_another_file(intel: CodeIntel) -> None:
    result = await nav(intel, action="find_definition", path="pkg/app.py", symbol="helper", line=8)
    assert result["engine"] == "ty"
    assert result["rows"] == ["pkg/util.py:1: def helper(x: int) -> int:"]


async def test_find_definition_of_a_method_through_a_call_chain(intel: CodeIntel) -> None:
    result = await nav(intel, action="find_definition", path="pkg/app.py", symbol="load")
    assert result["rows"] == ['pkg/models.py:2: def load(self) -> "Config":']


async def test_find_references_lists_uses_in_other_files(intel: CodeIntel) -> None:
    result = await nav(intel, action="find_references", path="pkg/util.py", symbol="helper")
    rows = set(result["rows"])
    assert "pkg/app.py:8: return helper(2)" in rows
    assert "pkg/other.py:5: return util.helper(util.helper(0))" in rows
    assert "pkg/util.py:1: def helper(x: int) -> int:" in rows
    assert result["total"] == len(result["rows"])


async def test_references_are_paged(intel: CodeIntel) -> None:
    everything = await nav(intel, action="find_references", path="pkg/util.py", symbol="helper")
    first = await nav(intel, action="find_references", path="pkg/util.py", symbol="helper", limit=2)
    second = await nav(
        intel, action="find_references", path="pkg/util.py", symbol="helper", offset=2, limit=2
    )
    assert first["next_offset"] == 2
    assert first["rows"] + second["rows"] == everything["rows"][:4]


async def test_hover_workspace_symbols_and_diagnostics(intel: CodeIntel) -> None:
    hover = await nav(intel, action="hover", path="pkg/app.py", symbol="helper", line=8)
    assert "def helper(x: int) -> int" in hover["text"]
    symbols = await nav(intel, action="workspace_symbols", query="Config")
    assert "pkg/models.py:1: class Config" in symbols["rows"]
    found = await nav(intel, action="diagnostics", paths=["pkg/app.py", "pkg/util.py"])
    assert found["rows"] == [
        "pkg/app.py:12: error[unresolved-reference] Name `not_defined_anywhere` used when not "
        "defined (column 11)"
    ]


async def test_a_symbol_not_on_the_given_line_is_a_typed_failure(intel: CodeIntel) -> None:
    result = await nav(intel, action="find_references", path="pkg/app.py", symbol="helper", line=5)
    assert result["success"] is False
    assert "line 5" in result["error"]


async def test_a_symbol_missing_from_the_file_is_found_in_the_workspace(intel: CodeIntel) -> None:
    result = await nav(intel, action="find_definition", path="pkg/other.py", symbol="Config")
    assert result["rows"] == ["pkg/models.py:1: class Config:"]


async def test_the_ast_engine_still_answers_when_asked(intel: CodeIntel) -> None:
    result = await nav(
        intel, action="find_definition", path="pkg/app.py", symbol="helper", engine="ast"
    )
    assert (result["engine"], result["rows"]) == ("ast", [])  # an import is no definition


# -- diagnostics after edits -----------------------------------------------------

NO_OP_EDITS = {
    "insert a comment at the top": {
        "action": "insert",
        "file_path": "pkg/app.py",
        "insert_line": 0,
        "new_string": "# a comment line",
    },
    "reformat": {
        "action": "edit",
        "file_path": "pkg/app.py",
        "old_string": "def broken() -> None:\n    print(not_defined_anywhere)\n",
        "new_string": "def broken()->None:\n\n    print( not_defined_anywhere )\n",
    },
    # The function with the error moves above `main`: a `write` of the whole file.
    "move a function": {"action": "write", "file_path": "pkg/app.py", "content": None},
}


@pytest.mark.parametrize("name", list(NO_OP_EDITS))
async def test_a_no_op_edit_introduces_nothing(intel: CodeIntel, project: Path, name: str) -> None:
    arguments = dict(NO_OP_EDITS[name])
    if name == "move a function":
        text = (project / "pkg/app.py").read_text()
        body = "def broken() -> None:\n    print(not_defined_anywhere)\n"
        moved = text.replace("\n\n" + body, "").replace(
            "\n\ndef main", "\n\n" + body + "\n\ndef main"
        )
        assert moved != text and moved.count("def broken") == 1
        arguments["content"] = moved
    result = await edit(intel, **arguments)
    d = result["diagnostics"]
    assert d["fresh"] is True
    assert d["introduced"] == []
    assert d["resolved"] == []
    assert [x["code"] for x in d["remaining"]] == ["unresolved-reference"]


async def test_an_undefined_name_is_introduced_then_resolved(intel: CodeIntel) -> None:
    added = await edit(
        intel,
        action="edit",
        file_path="pkg/app.py",
        old_string="    config = Config().load()\n",
        new_string="    config = Config().load()\n    x = undefined_name_xyz\n",
    )
    d = added["diagnostics"]
    assert d["engine"] == "ty"
    assert d["introduced"] == [
        {
            "path": "pkg/app.py",
            "line": 7,
            "column": 9,
            "code": "unresolved-reference",
            "message": "Name `undefined_name_xyz` used when not defined",
            "severity": "error",
        }
    ]
    assert len(d["remaining"]) == 2
    removed = await edit(
        intel,
        action="edit",
        file_path="pkg/app.py",
        old_string="    x = undefined_name_xyz\n",
        new_string="",
    )
    assert removed["diagnostics"]["introduced"] == []
    assert [x["message"] for x in removed["diagnostics"]["resolved"]] == [
        "Name `undefined_name_xyz` used when not defined"
    ]


async def test_a_patch_reports_every_python_file_it_touched(intel: CodeIntel) -> None:
    patch = "\n".join(
        [
            "*** Begin Patch",
            "*** Update File: pkg/other.py",
            "@@",
            "-    return util.helper(util.helper(0))",
            "+    return util.helper(util.helper(0), 3)",
            "*** Add File: pkg/new.py",
            "+y = missing_one",
            "*** End Patch",
            "",
        ]
    )
    result = await edit(intel, action="apply_patch", patch=patch)
    d = result["diagnostics"]
    assert sorted((x["path"], x["code"]) for x in d["introduced"]) == [
        ("pkg/new.py", "unresolved-reference"),
        ("pkg/other.py", "too-many-positional-arguments"),
    ]


async def test_an_edit_that_breaks_a_caller_in_another_open_file_says_so(
    intel: CodeIntel,
) -> None:
    # The caller's file is open in the server (code_nav looked at it).
    await nav(intel, action="diagnostics", paths=["pkg/app.py"])
    broke = await edit(
        intel,
        action="edit",
        file_path="pkg/util.py",
        old_string="def helper(x: int) -> int:",
        new_string="def helper(x: int, y: int) -> int:",
    )
    d = broke["diagnostics"]
    assert [(x["path"], x["line"], x["code"]) for x in d["introduced"]] == [
        ("pkg/app.py", 8, "missing-argument")
    ]
    assert d["remaining"] == []  # util.py itself is fine
    fixed = await edit(
        intel,
        action="edit",
        file_path="pkg/util.py",
        old_string="def helper(x: int, y: int) -> int:",
        new_string="def helper(x: int, y: int = 0) -> int:",
    )
    assert [(x["path"], x["code"]) for x in fixed["diagnostics"]["resolved"]] == [
        ("pkg/app.py", "missing-argument")
    ]


async def test_a_new_file_with_no_errors_reports_none(intel: CodeIntel) -> None:
    result = await edit(intel, action="write", file_path="pkg/fresh.py", content="x: int = 1\n")
    assert result["diagnostics"]["introduced"] == []
    assert result["diagnostics"]["remaining"] == []


# -- lionfactory's own tree ------------------------------------------------------


@pytest.fixture(scope="module")
def own_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("own")
    shutil.copytree(PACKAGE, root / "lionfactory", ignore=shutil.ignore_patterns("__pycache__"))
    return root


async def test_on_lionfactory_itself(own_tree: Path) -> None:
    intel = build_code_intel(Workspace.at(own_tree))
    assert intel is not None
    try:
        found = await nav(
            intel,
            action="find_definition",
            path="lionfactory/tools/code_nav.py",
            symbol="Workspace",
            line=_line_of(own_tree / "lionfactory/tools/code_nav.py", "workspace = Workspace.at("),
        )
        assert any(
            r.startswith("lionfactory/_os/workspace.py:") and "class Workspace" in r
            for r in found["rows"]
        ), found
        uses = await nav(
            intel,
            action="find_references",
            path="lionfactory/_os/workspace.py",
            symbol="PathRefused",
        )
        files = {r.split(":")[0] for r in uses["rows"]}
        assert "lionfactory/tools/code_nav.py" in files and len(files) > 5
        result = await edit(
            intel,
            action="insert",
            file_path="lionfactory/tools/code_nav.py",
            insert_line=0,
            new_string="# a comment",
        )
        assert result["diagnostics"]["fresh"] is True
        assert result["diagnostics"]["introduced"] == []
    finally:
        await intel.aclose()


def _line_of(path: Path, text: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if text in line:
            return number
    raise AssertionError(text)


# -- the toolkit: warm, owned by the branch, confined ------------------------------


def _argv0(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return ""


def ty_servers() -> set[int]:
    """Pids of running ``ty server`` processes of this environment's ty."""
    command = ty_command()
    assert command is not None
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        if state[state.rindex(b")") + 2 :].startswith(b"Z"):
            continue
        if command[0].encode() in argv and b"server" in argv:
            found.add(int(name))
    return found


@pytest.mark.parametrize("isolation", ["bwrap", "landlock"])
async def test_the_toolkit_server_is_confined_and_ends_with_its_branch(
    project: Path, isolation: str
) -> None:
    if mechanism_problem(isolation) is not None:
        pytest.skip(f"{isolation}: {mechanism_problem(isolation)}")
    before = ty_servers()
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=project, isolation=isolation)
    read = await branch.act("reader", {"action": "read", "path": "pkg/app.py"})
    assert read.ok
    result = await branch.act(
        "editor",
        {
            "action": "edit",
            "file_path": "pkg/app.py",
            "old_string": "    return helper(2)\n",
            "new_string": "    return helper('two')\n",
        },
    )
    assert result.ok, result.error
    diagnostics = result.result["diagnostics"]
    assert [x["code"] for x in diagnostics["introduced"]] == ["invalid-argument-type"]
    started = ty_servers() - before
    assert started, "the toolkit started a ty server"
    command = ty_command()
    assert command is not None
    (server,) = [p for p in started if _argv0(p) == command[0]]
    if isolation == "bwrap":
        # No network but loopback, and the workspace mounted read-only.
        interfaces = Path(f"/proc/{server}/net/dev").read_text().splitlines()[2:]
        assert [line.split(":")[0].strip() for line in interfaces] == ["lo"]
        mounts = Path(f"/proc/{server}/mountinfo").read_text().splitlines()
        (mount,) = [m for m in mounts if m.split()[4] == str(project)]
        assert mount.split()[5].startswith("ro")
    await branch.aclose()
    assert ty_servers() & started == set()


@pytest.mark.skipif(mechanism_problem("landlock") is not None, reason="landlock unavailable")
async def test_under_landlock_a_protected_file_at_the_root_leaves_the_project_listed(
    project: Path,
) -> None:
    # The confined server could not list a root holding .env, so it found
    # no `pkg` and a definition stopped at the import line.
    (project / ".env").write_text("TOKEN=s3cret\n")
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=project, isolation="landlock", checkpoints=False)
    result = await branch.act(
        "code_nav",
        {"action": "find_definition", "path": "pkg/app.py", "symbol": "helper", "line": 8},
    )
    assert result.ok, result.error
    assert result.result["engine"] == "ty"
    assert result.result["rows"] == ["pkg/util.py:1: def helper(x: int) -> int:"]
    await branch.aclose()


def test_the_cli_calls_code_nav_on_ty(project: Path) -> None:
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lionfactory",
            "call",
            "code_nav",
            "action=find_references",
            "path=pkg/util.py",
            "symbol=helper",
            "--json",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["engine"] == "ty"
    assert "pkg/other.py:5: return util.helper(util.helper(0))" in result["rows"]


# -- the fallback engine ---------------------------------------------------------


@pytest.mark.parametrize("isolation", ["none", "landlock", "bwrap"])
async def test_pyrefly_answers_where_ty_is_absent(project: Path, isolation: str) -> None:
    from lionfactory.tools._code_intel import engine_command

    if engine_command("pyrefly") is None:
        pytest.skip("pyrefly is not installed")
    if isolation != "none" and mechanism_problem(isolation) is not None:
        pytest.skip(f"{isolation}: {mechanism_problem(isolation)}")
    made = build_code_intel(Workspace.at(project), engine="pyrefly", isolation=isolation)
    assert made is not None
    try:
        found = await nav(
            made, action="find_definition", path="pkg/app.py", symbol="helper", line=8
        )
        assert (found["engine"], found["rows"]) == (
            "pyrefly",
            ["pkg/util.py:1: def helper(x: int) -> int:"],
        )
        added = await edit(
            made,
            action="edit",
            file_path="pkg/app.py",
            old_string="    print(config)\n",
            new_string="    print(config)\n    x = undefined_name_xyz\n",
        )
        d = added["diagnostics"]
        assert d["engine"] == "pyrefly"
        assert [(x["line"], x["code"]) for x in d["introduced"]] == [(8, "unknown-name")]
        noop = await edit(
            made, action="insert", file_path="pkg/app.py", insert_line=0, new_string="# hi"
        )
        assert noop["diagnostics"]["introduced"] == []
    finally:
        await made.aclose()

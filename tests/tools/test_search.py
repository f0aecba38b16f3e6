"""The search tool: grep and find against real files with the real binaries."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from fnmatch import fnmatchcase as fnmatch
from pathlib import Path
from typing import Any

import pytest

from lionfactory._os.binaries import BinaryFinder
from lionfactory._tool import ToolHints
from lionfactory.errors import ToolInputError
from lionfactory.tools.search import SearchRequest, SearchResponse, search_tool


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "src" / "app.py").write_text("def load_config():\n    return save_state()\n")
    (root / "src" / "pkg" / "util.py").write_text("def save_state():\n    pass\n# load later\n")
    (root / "docs" / "notes.md").write_text("load the config, then save it\n")
    (root / "bin.dat").write_bytes(b"load\x00binary")
    (root / ".env").write_text("load_secret=1\n")
    (root / ".ENV.production").write_text("load_secret=2\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("load_from_git\n")
    return root


ENGINES = ("ripgrep", "builtin")


def finder(engine: str) -> BinaryFinder:
    """The default lookup, or one that cannot see rg (so the builtin engine runs)."""
    return BinaryFinder(hidden={"rg"} if engine == "builtin" else ())


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


async def search(workspace: Path, engine: str, **arguments: Any) -> dict[str, Any]:
    result = await search_tool(workspace_root=workspace, _binaries=finder(engine))(**arguments)
    if result["success"]:
        assert result["engine"] == engine
    return result


def fake_binary(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(exist_ok=True)
    program = directory / name
    program.write_text(body)
    program.chmod(0o755)
    return program


async def test_grep_matches_an_extended_regex(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="grep", pattern="def (load|save)_")
    assert result == {
        "success": True,
        "content": "src/app.py:1:def load_config():\nsrc/pkg/util.py:1:def save_state():",
        "count": 2,
        "total": 2,
        "truncated": False,
        "error": None,
        "engine": engine,
        "ignore_rules": "applied",
        "ignored": None if engine == "ripgrep" else 0,
        "notice": None,
    }


async def test_grep_include_filters_by_file_name(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="grep", pattern="load", include="*.md")
    assert result["content"] == "docs/notes.md:1:load the config, then save it"


async def test_grep_in_a_subdirectory_reports_paths_from_the_root(
    workspace: Path, engine: str
) -> None:
    result = await search(workspace, engine, action="grep", pattern="load", path="src/pkg")
    assert result["content"] == "src/pkg/util.py:3:# load later"


async def test_grep_in_a_single_file_names_the_file(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="grep", pattern="save", path="src/app.py")
    assert result["content"] == "src/app.py:2:    return save_state()"


async def test_grep_pattern_starting_with_a_dash_is_a_pattern(workspace: Path, engine: str) -> None:
    (workspace / "flags.txt").write_text("use --verbose here\n")
    result = await search(workspace, engine, action="grep", pattern="--verbose")
    assert result["content"] == "flags.txt:1:use --verbose here"


async def test_grep_without_matches_is_a_success(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="grep", pattern="nothing_like_this")
    assert (result["success"], result["count"], result["total"]) == (True, 0, 0)
    assert result["content"] == "No matches found (ignored files were not searched)."


async def test_grep_skips_binary_files(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="grep", pattern="binary")
    assert result["total"] == 0


async def test_grep_never_searches_protected_files_or_git(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="grep", pattern="load")
    assert ".env" not in result["content"].lower()
    assert "secret" not in result["content"]
    assert ".git" not in result["content"]
    assert result["total"] == 3


async def test_grep_cuts_very_long_lines(workspace: Path, engine: str) -> None:
    (workspace / "long.txt").write_text("needle" + "x" * 5000 + "\n")
    result = await search(workspace, engine, action="grep", pattern="needle")
    assert result["content"].endswith("...[line cut]")
    assert len(result["content"]) < 600


async def test_grep_cap_reports_total_and_truncated(workspace: Path, engine: str) -> None:
    (workspace / "many.txt").write_text("hit\n" * 30)
    result = await search(workspace, engine, action="grep", pattern="hit", max_results=10)
    assert (result["count"], result["total"], result["truncated"]) == (10, 30, True)
    assert result["content"].splitlines()[-1].startswith("[showing 10 of 30 matches")


async def test_grep_default_shows_50(workspace: Path, engine: str) -> None:
    (workspace / "many.txt").write_text("hit\n" * 120)
    result = await search(workspace, engine, action="grep", pattern="hit")
    assert (result["count"], result["total"], result["truncated"]) == (50, 120, True)


async def test_grep_invalid_regex_is_a_typed_failure_quoting_the_engine(
    workspace: Path, engine: str
) -> None:
    result = await search(workspace, engine, action="grep", pattern="(unclosed")
    assert result["success"] is False
    assert result["error"].startswith("The pattern is not a valid regular expression;")
    quoted = {"ripgrep": "ripgrep said: regex parse error", "builtin": "grep said: "}
    assert quoted[engine] in result["error"]


async def test_grep_launch_failure_is_an_error(tmp_path: Path, workspace: Path) -> None:
    fake_binary(tmp_path / "bin", "grep", "\x00\x01 not a program")
    tool = search_tool(
        workspace_root=workspace, _binaries=BinaryFinder(env_dirs=(), path=str(tmp_path / "bin"))
    )
    result = await tool(action="grep", pattern="load")
    assert result["success"] is False
    assert "Could not start" in result["error"]


async def test_missing_grep_is_an_error(tmp_path: Path, workspace: Path) -> None:
    (tmp_path / "empty").mkdir()
    tool = search_tool(
        workspace_root=workspace, _binaries=BinaryFinder(env_dirs=(), path=str(tmp_path / "empty"))
    )
    result = await tool(action="grep", pattern="load")
    assert result["success"] is False
    assert "not installed" in result["error"]


async def test_find_matches_a_glob_on_names(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="find", pattern="*.py")
    assert result["content"] == "src/app.py\nsrc/pkg/util.py"
    assert (result["count"], result["total"]) == (2, 2)


async def test_find_marks_directories(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="find", pattern="pkg")
    assert result["content"] == "src/pkg/"


async def test_find_never_lists_protected_files_or_git(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="find", pattern="*")
    listed = result["content"].splitlines()
    assert listed == [
        "bin.dat",
        "docs/",
        "docs/notes.md",
        "src/",
        "src/app.py",
        "src/pkg/",
        "src/pkg/util.py",
    ]


async def test_find_explicit_protected_glob_lists_nothing(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="find", pattern=".env*")
    assert (result["success"], result["total"]) == (True, 0)


async def test_find_does_not_list_symlinks(workspace: Path, engine: str) -> None:
    (workspace / "link.py").symlink_to(workspace / "src" / "app.py")
    result = await search(workspace, engine, action="find", pattern="*.py")
    assert "link.py" not in result["content"]


async def test_find_cap_reports_total_and_truncated(workspace: Path, engine: str) -> None:
    for index in range(120):
        (workspace / "docs" / f"page{index:03}.txt").write_text("")
    result = await search(workspace, engine, action="find", pattern="page*")
    assert (result["count"], result["total"], result["truncated"]) == (100, 120, True)
    assert result["content"].splitlines()[0] == "docs/page000.txt"


async def test_find_pattern_with_a_slash_is_an_error(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="find", pattern="src/*.py")
    assert result["success"] is False
    assert "path='src'" in result["error"]


async def test_include_with_find_is_an_error(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="find", pattern="*", include="*.py")
    assert result["success"] is False


@pytest.mark.parametrize("max_results", [0, -1, 1001])
async def test_max_results_out_of_range_is_rejected(
    workspace: Path, max_results: int, engine: str
) -> None:
    with pytest.raises(ToolInputError, match="max_results"):
        await search(workspace, engine, action="grep", pattern="x", max_results=max_results)


async def test_empty_pattern_is_rejected(workspace: Path, engine: str) -> None:
    with pytest.raises(ToolInputError, match="pattern"):
        await search(workspace, engine, action="find", pattern="")


async def test_unknown_action_is_rejected(workspace: Path, engine: str) -> None:
    with pytest.raises(ToolInputError, match="action"):
        await search(workspace, engine, action="list", pattern="x")


@pytest.mark.parametrize(
    "path", ["..", "/", "../other", "src/../../", "~", ".env", ".git", "a\x00b"]
)
@pytest.mark.parametrize("action", ["grep", "find"])
async def test_escape_attempts_are_refused_before_launch(
    tmp_path: Path, workspace: Path, path: str, action: str
) -> None:
    marker = tmp_path / "launched"
    bindir = tmp_path / "bin"
    fake_binary(bindir, "grep", f"#!/bin/sh\ntouch {marker}\n")
    fake_binary(bindir, "find", f"#!/bin/sh\ntouch {marker}\n")
    tool = search_tool(
        workspace_root=workspace, _binaries=BinaryFinder(env_dirs=(), path=str(bindir))
    )
    result = await tool(action=action, pattern="x", path=path)
    assert result["success"] is False
    assert "launched" not in os.listdir(tmp_path)


async def test_missing_path_is_an_error(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="grep", pattern="x", path="nope")
    assert result["success"] is False
    assert "does not exist" in result["error"]


async def test_default_workspace_is_the_cwd_at_factory_time(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workspace)
    tool = search_tool()
    monkeypatch.chdir(tmp_path)
    result = await tool(action="find", pattern="app.py")
    assert result["content"] == "src/app.py"


def test_tool_schema_states_the_defaults() -> None:
    tool = search_tool()
    assert tool.name == "search"
    assert tool.request_model is SearchRequest
    assert tool.response_model is SearchResponse
    assert tool.hints == ToolHints.reading("Search the workspace")
    description = tool.schema()["function"]["parameters"]["properties"]["max_results"][
        "description"
    ]
    assert "default 50 for grep and 100 for find" in description
    assert "default 50 for grep, 100 for find" in tool.description
    assert all(field.description for field in SearchResponse.model_fields.values())


# -- the fields a model knows from other coding agents ---------------------------


async def test_grep_output_mode_files_with_matches(workspace: Path, engine: str) -> None:
    result = await search(
        workspace, engine, action="grep", pattern="load", output_mode="files_with_matches"
    )
    assert result["content"] == "docs/notes.md\nsrc/app.py\nsrc/pkg/util.py"
    assert (result["count"], result["total"]) == (3, 3)


async def test_grep_output_mode_count(workspace: Path, engine: str) -> None:
    (workspace / "many.txt").write_text("load\nload\nx\nload\n")
    result = await search(workspace, engine, action="grep", pattern="load", output_mode="count")
    assert result["content"].splitlines() == [
        "docs/notes.md:1",
        "many.txt:3",
        "src/app.py:1",
        "src/pkg/util.py:1",
    ]


async def test_grep_context_lines_and_group_separators(workspace: Path, engine: str) -> None:
    (workspace / "f.txt").write_text("a\nhit 1\nb\nc\nd\nhit 2\ne\n")
    result = await search(workspace, engine, action="grep", pattern="hit", path="f.txt", context=1)
    assert result["content"].splitlines() == [
        "f.txt-1-a",
        "f.txt:2:hit 1",
        "f.txt-3-b",
        "--",
        "f.txt-5-d",
        "f.txt:6:hit 2",
        "f.txt-7-e",
    ]
    assert result["count"] == 2
    after = await search(workspace, engine, action="grep", pattern="hit 1", path="f.txt", after=2)
    assert after["content"].splitlines() == ["f.txt:2:hit 1", "f.txt-3-b", "f.txt-4-c"]


async def test_grep_case_insensitive(workspace: Path, engine: str) -> None:
    (workspace / "f.txt").write_text("Hello\nHELLO\nhello\n")
    sensitive = await search(workspace, engine, action="grep", pattern="hello", path="f.txt")
    insensitive = await search(
        workspace, engine, action="grep", pattern="hello", path="f.txt", case_insensitive=True
    )
    assert (sensitive["total"], insensitive["total"]) == (1, 3)


async def test_grep_multiline_spans_lines(workspace: Path, engine: str) -> None:
    (workspace / "f.py").write_text("def f(\n    x,\n):\n    pass\n")
    single = await search(workspace, engine, action="grep", pattern=r"f\(\n\s+x")
    multi = await search(workspace, engine, action="grep", pattern=r"f\(\n\s+x", multiline=True)
    assert single["total"] == 0
    assert multi["content"] == "f.py:1:def f(\nf.py:2:    x,"


async def test_grep_type_filter(workspace: Path, engine: str) -> None:
    result = await search(workspace, engine, action="grep", pattern="load", type="md")
    assert result["content"] == "docs/notes.md:1:load the config, then save it"


async def test_grep_perl_classes_work_on_both_engines(workspace: Path, engine: str) -> None:
    (workspace / "n.txt").write_text("id 42\nid x\n")
    result = await search(workspace, engine, action="grep", pattern=r"id \d+")
    assert result["content"] == "n.txt:1:id 42"


async def test_head_limit_is_max_results(workspace: Path, engine: str) -> None:
    (workspace / "many.txt").write_text("hit\n" * 30)
    result = await search(workspace, engine, action="grep", pattern="hit", head_limit=5)
    assert (result["count"], result["total"], result["truncated"]) == (5, 30, True)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"type": "cobol"}, "unknown file type 'cobol'; use one of c, cpp"),
        ({"include": "src/*.py"}, "without '/' or braces"),
        ({"include": "*.{py,md}"}, "without '/' or braces"),
        ({"context": 1, "before": 2}, "either context, or before"),
        ({"max_results": 5, "head_limit": 6}, "same setting"),
        ({"include": "*.py", "type": "py"}, "either include or type"),
        ({"output_mode": "lines"}, "output_mode"),
        ({"context": -1}, "context"),
        ({"after": 51}, "after"),
        ({"head_limit": 0}, "head_limit"),
        ({"output_mode": "count", "context": 2}, "context add context lines to output_mode"),
    ],
)
async def test_new_fields_are_validated_with_a_clear_message(
    workspace: Path, arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolInputError, match=re.escape(message)):
        await search_tool(workspace_root=workspace)(action="grep", pattern="x", **arguments)


async def test_grep_only_fields_with_find_are_refused(workspace: Path) -> None:
    result = await search_tool(workspace_root=workspace)(
        action="find", pattern="*", context=2, case_insensitive=True
    )
    assert result["success"] is False
    assert result["error"].startswith("context, case_insensitive apply to grep only")


# -- what is in the project -------------------------------------------------------


@pytest.fixture
def checkout(workspace: Path) -> Path:
    for rel, text in {
        ".gitignore": ".venv/\nnode_modules/\n*.log\n",
        "sub/.gitignore": "!keep.log\n",
        "sub/keep.log": "needle\n",
        "sub/drop.log": "needle\n",
        ".venv/lib/site.py": "needle\n",
        "node_modules/pkg/index.js": "needle\n",
    }.items():
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text(text)
    return workspace


async def test_grep_skips_ignored_paths_and_says_so(checkout: Path, engine: str) -> None:
    result = await search(checkout, engine, action="grep", pattern="needle")
    assert result["content"] == "sub/keep.log:1:needle"
    assert result["ignore_rules"] == "applied"
    # .venv/, node_modules/ and sub/drop.log (the builtin engine counts them)
    assert result["ignored"] == (None if engine == "ripgrep" else 3)


async def test_include_ignored_searches_everything(checkout: Path, engine: str) -> None:
    result = await search(checkout, engine, action="grep", pattern="needle", include_ignored=True)
    assert result["content"].splitlines() == [
        ".venv/lib/site.py:1:needle",
        "node_modules/pkg/index.js:1:needle",
        "sub/drop.log:1:needle",
        "sub/keep.log:1:needle",
    ]
    assert result["ignore_rules"] == "not applied"


async def test_an_ignored_directory_given_as_path_is_searched(checkout: Path, engine: str) -> None:
    result = await search(checkout, engine, action="find", pattern="*.py", path=".venv")
    assert result["content"] == ".venv/lib/site.py"


async def test_find_skips_ignored_directories(checkout: Path, engine: str) -> None:
    result = await search(checkout, engine, action="find", pattern="*")
    assert ".venv" not in result["content"] and "node_modules" not in result["content"]
    assert "sub/keep.log" in result["content"].splitlines()


async def test_an_ignore_file_above_the_project_selects_the_builtin_engine(
    tmp_path: Path,
) -> None:
    root = tmp_path / "outer" / "ws"
    root.mkdir(parents=True)
    (root / "a.py").write_text("needle\n")
    (tmp_path / "outer" / ".ignore").write_text("*.py\n")
    result = await search_tool(workspace_root=root)(action="grep", pattern="needle")
    # Only ignore files inside the project apply; ripgrep would read this one too.
    assert (result["engine"], result["content"]) == ("builtin", "a.py:1:needle")
    assert "outside the project" in result["notice"]


@pytest.mark.parametrize("include", ["x:y.txt", "*:*", "a,b.txt", "[xa]*.txt"])
async def test_include_globs_with_punctuation(workspace: Path, engine: str, include: str) -> None:
    for name in ("a,b.txt", "x:y.txt", "xzy.txt"):
        (workspace / name).write_text("hit\n")
    result = await search(workspace, engine, action="grep", pattern="hit", include=include)
    expected = sorted(n for n in ("a,b.txt", "x:y.txt", "xzy.txt") if fnmatch(n, include))
    assert result["content"].splitlines() == [f"{n}:1:hit" for n in expected]


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


async def test_the_global_excludes_file_applies_before_and_after_git_was_asked(
    git_repo: Path, tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first search asks git for core.excludesFile; later ones reuse the
    # answer from the same worker-thread hop as the path checks. Both hide
    # what the file ignores, and a changed configuration is asked again.
    root = git_repo
    (root / "kept.py").write_text("needle\n")
    (root / "notes.swp").write_text("needle\n")
    (root / "draft.bak2").write_text("needle\n")
    home = tmp_path / "home"
    home.mkdir()
    (home / "first").write_text("*.swp\n")
    (home / "second").write_text("*.bak2\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    (home / ".gitconfig").write_text("[core]\n\texcludesFile = ~/first\n")
    for _ in range(2):
        found = await search(
            root, engine, action="grep", pattern="needle", output_mode="files_with_matches"
        )
        assert found["content"].splitlines() == ["draft.bak2", "kept.py"]
    (home / ".gitconfig").write_text("[core]\n\texcludesFile = ~/second\n")
    for _ in range(2):
        found = await search(
            root, engine, action="grep", pattern="needle", output_mode="files_with_matches"
        )
        assert found["content"].splitlines() == ["kept.py", "notes.swp"]


@pytest.fixture
def deep_tree(tmp_path: Path, deep_directory: Callable[[Path, int], Path]) -> Path:
    """A workspace whose one file lies 1,200 directories down (deeper than Python recursion)."""
    root = tmp_path / "ws"
    root.mkdir()
    (deep_directory(root, 1200) / "deep.txt").write_text("needle\n")
    return root


async def test_a_tree_deeper_than_python_recursion_is_searched(
    deep_tree: Path, engine: str
) -> None:
    found = await search(deep_tree, engine, action="grep", pattern="needle")
    assert found["success"] is True, found
    assert found["content"] == "d/" * 1200 + "deep.txt:1:needle"
    listed = await search(deep_tree, engine, action="find", pattern="deep.txt")
    assert listed["content"] == "d/" * 1200 + "deep.txt"

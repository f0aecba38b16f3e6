"""The ast_search tool, with the real ast-grep binary."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from lionfactory._os.binaries import BinaryFinder
from lionfactory._tool import ToolHints
from lionfactory.errors import ToolInputError
from lionfactory.tools.ast_search import (
    AstSearchMatch,
    AstSearchRequest,
    AstSearchResponse,
    ast_search_tool,
)

AST_GREP = BinaryFinder().find("ast-grep")
needs_ast_grep = pytest.mark.skipif(AST_GREP is None, reason="ast-grep is not installed")

# Stands in for Linux's /usr/bin/sg ("execute command as different group ID").
FAKE_SG = "#!/bin/sh\necho 'Usage: sg group [[-c] command]' >&2\ntouch \"$0.ran\"\nexit 1\n"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text("print(1)\nx = 2\nprint(x, 3)\n")
    (root / "pkg" / "b.py").write_text("def f():\n    print('é')\n    s = 'ééé'; print(s)\n")
    return root


def fake_program(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(exist_ok=True)
    program = directory / name
    program.write_text(body)
    program.chmod(0o755)
    return program


async def search(workspace: Path, **arguments: Any) -> dict[str, Any]:
    return await ast_search_tool(workspace_root=workspace)(**arguments)


@needs_ast_grep
async def test_finds_print_calls_with_one_argument(workspace: Path) -> None:
    result = await search(workspace, pattern="print($A)")
    assert result["status"] == "matches"
    assert result["matches"] == [
        {"file": "pkg/a.py", "line": 1, "col": 1, "text": "print(1)"},
        {"file": "pkg/b.py", "line": 2, "col": 5, "text": "print('é')"},
        {"file": "pkg/b.py", "line": 3, "col": 16, "text": "print(s)"},
    ]
    assert (result["total"], result["truncated"]) == (3, False)


@needs_ast_grep
async def test_multi_metavariable_matches_every_call(workspace: Path) -> None:
    result = await search(workspace, pattern="print($$$ARGS)", path="pkg/a.py")
    assert [m["line"] for m in result["matches"]] == [1, 3]


@needs_ast_grep
async def test_cap_reports_total_and_truncated(workspace: Path) -> None:
    result = await search(workspace, pattern="print($A)", max_results=2)
    assert len(result["matches"]) == 2
    assert (result["total"], result["truncated"]) == (3, True)


@needs_ast_grep
async def test_no_match_is_ok(workspace: Path) -> None:
    result = await search(workspace, pattern="nothing_called_this($A)")
    assert (result["status"], result["matches"], result["total"]) == ("ok", [], 0)


@needs_ast_grep
async def test_protected_and_git_files_are_not_searched(workspace: Path) -> None:
    (workspace / ".env").mkdir()
    (workspace / ".env" / "secret.py").write_text("print(1)\n")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "hook.py").write_text("print(1)\n")
    result = await search(workspace, pattern="print($A)")
    assert {m["file"] for m in result["matches"]} == {"pkg/a.py", "pkg/b.py"}


@needs_ast_grep
async def test_other_languages_are_searched(workspace: Path) -> None:
    (workspace / "main.go").write_text('package main\n\nfunc main() { println("hi") }\n')
    result = await search(workspace, pattern="println($A)", lang="go")
    assert result["matches"] == [{"file": "main.go", "line": 3, "col": 15, "text": 'println("hi")'}]


@needs_ast_grep
async def test_a_fake_sg_first_on_path_is_skipped(workspace: Path, tmp_path: Path) -> None:
    """Only `sg` programs on PATH: the unrelated one comes first, ast-grep's second."""
    fake_program(tmp_path / "bin1", "sg", FAKE_SG)
    fake_program(tmp_path / "bin2", "sg", f'#!/bin/sh\nexec "{AST_GREP}" "$@"\n')
    finder = BinaryFinder(env_dirs=(), path=f"{tmp_path / 'bin1'}{os.pathsep}{tmp_path / 'bin2'}")
    result = await ast_search_tool(workspace_root=workspace, _binaries=finder)(pattern="print($A)")
    assert result["status"] == "matches"
    assert result["total"] == 3


async def test_only_a_fake_sg_means_unavailable(workspace: Path, tmp_path: Path) -> None:
    fake_program(tmp_path / "bin", "sg", FAKE_SG)
    finder = BinaryFinder(env_dirs=(), path=str(tmp_path / "bin"))
    result = await ast_search_tool(workspace_root=workspace, _binaries=finder)(pattern="print($A)")
    assert result["status"] == "unavailable"
    assert "pip install 'lionfactory[code]'" in result["summary"]


@needs_ast_grep
async def test_an_sg_that_is_ast_grep_is_used(workspace: Path, tmp_path: Path) -> None:
    fake_program(tmp_path / "bin", "sg", f'#!/bin/sh\nexec "{AST_GREP}" "$@"\n')
    finder = BinaryFinder(env_dirs=(), path=str(tmp_path / "bin"))
    result = await ast_search_tool(workspace_root=workspace, _binaries=finder)(pattern="print($A)")
    assert result["status"] == "matches"


async def test_missing_binary_is_unavailable(workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    finder = BinaryFinder(env_dirs=(), path=str(tmp_path / "empty"))
    result = await ast_search_tool(workspace_root=workspace, _binaries=finder)(pattern="f($A)")
    assert result["status"] == "unavailable"


async def test_array_json_output_is_parsed(workspace: Path, tmp_path: Path) -> None:
    body = (
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "ast-grep 0.0.0"; exit 0; fi\n'
        'echo \'[{"file": "pkg/a.py", "text": "print(1)", '
        '"range": {"start": {"line": 0, "column": 0}}}]\'\n'
    )
    fake_program(tmp_path / "bin", "ast-grep", body)
    finder = BinaryFinder(env_dirs=(), path=str(tmp_path / "bin"))
    result = await ast_search_tool(workspace_root=workspace, _binaries=finder)(pattern="print($A)")
    assert result["matches"] == [{"file": "pkg/a.py", "line": 1, "col": 1, "text": "print(1)"}]


async def test_unexpected_exit_is_an_error(workspace: Path, tmp_path: Path) -> None:
    body = (
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "ast-grep 0.0.0"; exit 0; fi\n'
        "echo 'it broke' >&2\nexit 3\n"
    )
    fake_program(tmp_path / "bin", "ast-grep", body)
    finder = BinaryFinder(env_dirs=(), path=str(tmp_path / "bin"))
    result = await ast_search_tool(workspace_root=workspace, _binaries=finder)(pattern="print($A)")
    assert result["status"] == "error"
    assert "exit 3" in result["summary"] and "it broke" in result["summary"]


@pytest.mark.parametrize("path", ["..", "/", "../other", ".env", ".git", "missing"])
async def test_bad_paths_are_refused_before_launch(
    workspace: Path, tmp_path: Path, path: str
) -> None:
    (workspace / ".git").mkdir()
    body = (
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "ast-grep 0.0.0"; exit 0; fi\n'
        f"touch {tmp_path / 'launched'}\n"
    )
    fake_program(tmp_path / "bin", "ast-grep", body)
    finder = BinaryFinder(env_dirs=(), path=str(tmp_path / "bin"))
    result = await ast_search_tool(workspace_root=workspace, _binaries=finder)(
        pattern="f($A)", path=path
    )
    assert result["status"] == "error"
    assert "launched" not in os.listdir(tmp_path)


@pytest.mark.parametrize("max_results", [0, -1, 501])
async def test_max_results_out_of_range_is_rejected(workspace: Path, max_results: int) -> None:
    with pytest.raises(ToolInputError, match="max_results"):
        await search(workspace, pattern="f($A)", max_results=max_results)


async def test_unknown_language_is_rejected(workspace: Path) -> None:
    with pytest.raises(ToolInputError, match="lang"):
        await search(workspace, pattern="f($A)", lang="cobol")


def test_models_describe_every_field() -> None:
    tool = ast_search_tool()
    assert (tool.name, tool.request_model) == ("ast_search", AstSearchRequest)
    assert tool.response_model is AstSearchResponse
    assert tool.hints == ToolHints.reading("Search code by syntax")
    for model in (AstSearchRequest, AstSearchResponse, AstSearchMatch):
        assert all(field.description for field in model.model_fields.values())


@needs_ast_grep
async def test_ignored_files_are_left_out_and_counted(workspace: Path) -> None:
    """Outside a git repository ast-grep reads .venv; the project's rules drop it."""
    (workspace / ".gitignore").write_text(".venv/\n")
    (workspace / ".venv" / "lib").mkdir(parents=True)
    (workspace / ".venv" / "lib" / "site.py").write_text("print(9)\n")
    (workspace / ".github").mkdir()
    (workspace / ".github" / "tool.py").write_text("print(8)\n")
    result = await search(workspace, pattern="print($A)")
    files = {m["file"] for m in result["matches"]}
    assert files == {"pkg/a.py", "pkg/b.py", ".github/tool.py"}  # hidden is not ignored
    assert "Left out 1 match in files ignored by .gitignore/.ignore;" in result["summary"]
    everything = await search(workspace, pattern="print($A)", include_ignored=True)
    assert ".venv/lib/site.py" in {m["file"] for m in everything["matches"]}

"""The code_check tool, with the real ruff binary."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lionfactory._os.binaries import BinaryFinder
from lionfactory._os.environment import EnvPolicy
from lionfactory._tool import ToolHints
from lionfactory.errors import ToolInputError
from lionfactory.tools.code_check import (
    CodeCheckRequest,
    CodeCheckResponse,
    CodeDiagnostic,
    code_check_tool,
)

pytestmark = pytest.mark.skipif(
    BinaryFinder().find("ruff") is None, reason="ruff is not installed (the code extra)"
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "unused.py").write_text("import os\n\nprint('hello')\n")
    (root / "clean.py").write_text("print('clean')\n")
    return root


async def check(workspace: Path, **arguments: Any) -> dict[str, Any]:
    return await code_check_tool(workspace_root=workspace)(**arguments)


def fake_ruff(directory: Path, body: str) -> BinaryFinder:
    directory.mkdir()
    program = directory / "ruff"
    program.write_text(body)
    program.chmod(0o755)
    return BinaryFinder(env_dirs=(), path=str(directory))


async def test_finds_an_unused_import(workspace: Path) -> None:
    result = await check(workspace, paths=["pkg/unused.py"])
    assert result["status"] == "diagnostics"
    assert result["diagnostics"] == [
        {
            "file": "pkg/unused.py",
            "line": 1,
            "col": 8,
            "end_line": 1,
            "end_col": 10,
            "severity": result["diagnostics"][0]["severity"],
            "code": "F401",
            "message": "`os` imported but unused",
            "source": "ruff",
            "fixable": True,
        }
    ]
    assert (result["total"], result["truncated"]) == (1, False)
    assert "1 diagnostic in 1 file" in result["summary"]


async def test_empty_paths_check_the_workspace_root(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The process runs elsewhere, with a lint error of its own nearby.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "other.py").write_text("import sys\n")
    monkeypatch.chdir(elsewhere)
    result = await check(workspace)
    assert [d["file"] for d in result["diagnostics"]] == ["pkg/unused.py"]


async def test_clean_code_is_ok(workspace: Path) -> None:
    result = await check(workspace, paths=["clean.py"])
    assert (result["status"], result["diagnostics"], result["total"]) == ("ok", [], 0)


async def test_syntax_error_is_an_error_diagnostic(workspace: Path) -> None:
    (workspace / "broken.py").write_text("def f(:\n")
    result = await check(workspace, paths=["broken.py"])
    assert result["status"] == "diagnostics"
    assert result["diagnostics"][0]["severity"] == "error"
    assert result["diagnostics"][0]["file"] == "broken.py"


async def test_cap_reports_total_and_truncated(workspace: Path) -> None:
    (workspace / "many.py").write_text("".join(f"import m{i}\n" for i in range(7)))
    result = await check(workspace, paths=["many.py"], max_diagnostics=3)
    assert len(result["diagnostics"]) == 3
    assert (result["total"], result["truncated"]) == (7, True)
    assert "max_diagnostics" in result["summary"]


async def test_a_check_never_modifies_files(workspace: Path) -> None:
    (workspace / "pyproject.toml").write_text("[tool.ruff]\nfix = true\n")
    await check(workspace, paths=["pkg/unused.py"])
    assert (workspace / "pkg" / "unused.py").read_text() == "import os\n\nprint('hello')\n"


@pytest.mark.parametrize("path", ["..", "/etc", "../other.py", ".env", "missing.py"])
async def test_paths_outside_or_missing_are_errors(workspace: Path, path: str) -> None:
    (workspace / ".env").write_text("A=1\n")
    result = await check(workspace, paths=[path])
    assert result["status"] == "error"
    assert result["summary"]


async def test_missing_ruff_is_unavailable_with_an_install_hint(
    workspace: Path, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    tool = code_check_tool(
        workspace_root=workspace, _binaries=BinaryFinder(env_dirs=(), path=str(tmp_path / "empty"))
    )
    result = await tool()
    assert result["status"] == "unavailable"
    assert "pip install 'lionfactory[code]'" in result["summary"]


async def test_ruff_crash_without_output_is_an_error(workspace: Path, tmp_path: Path) -> None:
    finder = fake_ruff(tmp_path / "bin", "#!/bin/sh\necho 'error: bad config' >&2\nexit 2\n")
    result = await code_check_tool(workspace_root=workspace, _binaries=finder)()
    assert result["status"] == "error"
    assert "exit 2" in result["summary"] and "bad config" in result["summary"]


async def test_ruff_output_that_is_not_json_is_an_error(workspace: Path, tmp_path: Path) -> None:
    finder = fake_ruff(tmp_path / "bin", "#!/bin/sh\necho 'not json'\nexit 1\n")
    result = await code_check_tool(workspace_root=workspace, _binaries=finder)()
    assert result["status"] == "error"


async def test_ruff_launch_failure_is_an_error(workspace: Path, tmp_path: Path) -> None:
    finder = fake_ruff(tmp_path / "bin", "\x00\x01 not a program")
    result = await code_check_tool(workspace_root=workspace, _binaries=finder)()
    assert result["status"] == "error"
    assert "Could not start" in result["summary"]


@pytest.mark.parametrize("max_diagnostics", [0, -1, 501])
async def test_max_diagnostics_out_of_range_is_rejected(
    workspace: Path, max_diagnostics: int
) -> None:
    with pytest.raises(ToolInputError, match="max_diagnostics"):
        await check(workspace, max_diagnostics=max_diagnostics)


async def test_only_ruff_is_accepted(workspace: Path) -> None:
    with pytest.raises(ToolInputError, match="tool"):
        await check(workspace, tool="mypy")


def test_models_describe_every_field() -> None:
    tool = code_check_tool()
    assert (tool.name, tool.request_model) == ("code_check", CodeCheckRequest)
    assert tool.response_model is CodeCheckResponse
    assert tool.hints == ToolHints.reading("Check code with ruff")
    for model in (CodeCheckRequest, CodeCheckResponse, CodeDiagnostic):
        assert all(field.description for field in model.model_fields.values())


async def test_ignored_files_are_not_reported_unless_asked(workspace: Path) -> None:
    (workspace / ".gitignore").write_text("generated/\n")
    (workspace / "generated").mkdir()
    (workspace / "generated" / "out.py").write_text("import sys\n")
    result = await check(workspace)
    assert {d["file"] for d in result["diagnostics"]} == {"pkg/unused.py"}
    everything = await check(workspace, include_ignored=True)
    assert {d["file"] for d in everything["diagnostics"]} == {"pkg/unused.py", "generated/out.py"}


# -- configuration that would echo files -------------------------------------------

SECRET = "SECRET_VALUE_3b7d"


@pytest.fixture
def outside_secret(tmp_path: Path) -> Path:
    secret = tmp_path / "outside.toml"
    secret.write_text(f'key = "{SECRET}"\nthis is = not toml {SECRET}\n')
    return secret


def pyproject_extending(workspace: Path, target: str) -> None:
    (workspace / "pyproject.toml").write_text(f"[tool.ruff]\nextend = {target!r}\n")


@pytest.mark.parametrize(
    "target",
    [".env", "../outside.toml", "{outside}", "sub/../../outside.toml", "~/outside.toml", "$HOME/x"],
)
async def test_a_config_extending_outside_or_a_protected_file_is_refused_unechoed(
    workspace: Path, outside_secret: Path, target: str
) -> None:
    (workspace / ".env").write_text(f"API_KEY={SECRET}\n")
    (workspace / "app.py").write_text("import os\n")
    pyproject_extending(workspace, target.format(outside=outside_secret))

    result = await code_check_tool(workspace_root=workspace)()

    assert result["status"] == "error"
    assert "ruff was not run" in result["summary"]
    assert SECRET not in json.dumps(result)


async def test_a_config_extending_a_system_file_is_refused(workspace: Path) -> None:
    (workspace / "ruff.toml").write_text("extend = '/etc/hostname'\n")

    result = await code_check_tool(workspace_root=workspace)()

    assert result["status"] == "error"
    assert "outside the workspace" in result["summary"]
    hostname = Path("/etc/hostname")
    if hostname.is_file() and hostname.read_text().strip():
        assert hostname.read_text().strip() not in json.dumps(result)


async def test_a_config_that_is_a_link_to_an_outside_file_is_refused(
    workspace: Path, outside_secret: Path
) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / ".ruff.toml").symlink_to(outside_secret)

    result = await code_check_tool(workspace_root=workspace)(paths=["."])

    assert result["status"] == "error"
    assert SECRET not in json.dumps(result)


async def test_a_nested_chain_is_followed(workspace: Path, outside_secret: Path) -> None:
    (workspace / "cfg").mkdir()
    (workspace / "cfg" / "base.toml").write_text("extend = '../../outside.toml'\n")
    pyproject_extending(workspace, "cfg/base.toml")

    result = await code_check_tool(workspace_root=workspace)()

    assert result["status"] == "error"
    assert SECRET not in json.dumps(result)


async def test_a_config_extending_a_file_inside_the_workspace_applies(workspace: Path) -> None:
    (workspace / "base.toml").write_text("[lint]\nselect = ['T201']\n")  # print(), off by default
    pyproject_extending(workspace, "base.toml")

    result = await code_check_tool(workspace_root=workspace)()

    assert result["status"] == "diagnostics", result
    assert {d["code"] for d in result["diagnostics"]} == {"T201"}


async def test_an_unparsable_workspace_config_is_not_echoed(workspace: Path) -> None:
    (workspace / "ruff.toml").write_text(f"line-length = {SECRET}\n")

    result = await code_check_tool(workspace_root=workspace)()

    assert result["status"] == "error"
    assert SECRET not in json.dumps(result)


async def test_ruff_stderr_keeps_only_its_own_message_lines(
    workspace: Path, tmp_path: Path
) -> None:
    script = (
        "#!/bin/sh\n"
        "echo 'ruff failed' >&2\n"
        "echo '  Cause: TOML parse error at line 1, column 1' >&2\n"
        f"echo '1 | password = {SECRET}' >&2\n"
        "echo '  |  ^' >&2\n"
        "exit 2\n"
    )
    finder = fake_ruff(tmp_path / "bin", script)

    result = await code_check_tool(workspace_root=workspace, _binaries=finder)()

    assert result["status"] == "error"
    assert "TOML parse error" in result["summary"]
    assert SECRET not in result["summary"]


async def test_an_env_policy_keeps_secrets_from_ruff(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fake ruff records the environment it got, then reports no findings.
    seen = tmp_path / "seen-env.txt"
    monkeypatch.setenv("LF_TEST_API_KEY", "sk-ruff-secret")
    finder = fake_ruff(tmp_path / "bin", f"#!/bin/sh\nenv > {seen}\necho '[]'\n")
    tool = code_check_tool(workspace_root=workspace, _binaries=finder, env_policy=EnvPolicy())
    await tool()
    recorded = seen.read_text()
    assert "PATH=" in recorded
    assert "LF_TEST_API_KEY" not in recorded
    unfiltered = code_check_tool(workspace_root=workspace, _binaries=finder)
    await unfiltered()
    assert "LF_TEST_API_KEY=sk-ruff-secret" in seen.read_text()


async def test_a_tree_deeper_than_python_recursion_is_checked(
    workspace: Path, deep_directory: Callable[[Path, int], Path]
) -> None:
    (deep_directory(workspace, 1200) / "deep.py").write_text("import os\n")

    result = await code_check_tool(workspace_root=workspace)(paths=["."])

    assert result["status"] == "diagnostics"
    assert sorted(d["file"].rpartition("/")[2] for d in result["diagnostics"]) == [
        "deep.py",
        "unused.py",
    ]


async def test_a_config_extending_outside_deep_in_the_tree_is_refused(
    workspace: Path, outside_secret: Path, deep_directory: Callable[[Path, int], Path]
) -> None:
    (deep_directory(workspace, 1200) / "ruff.toml").write_text(
        f"extend = {str(outside_secret)!r}\n"
    )

    result = await code_check_tool(workspace_root=workspace)(paths=["."])

    assert result["status"] == "error"
    assert "outside the workspace" in result["summary"]
    assert SECRET not in json.dumps(result)


def test_configs_below_are_found_as_a_top_down_walk_finds_them(tmp_path: Path) -> None:
    from lionfactory.tools.code_check import _CONFIG_NAMES, _configs_below

    for folder in ("a", "a/b", "a/.git", "c", "c/d", "e"):
        (tmp_path / folder).mkdir()
    for config in ("ruff.toml", "a/pyproject.toml", "a/b/.ruff.toml", "a/.git/ruff.toml"):
        (tmp_path / config).write_text("")
    (tmp_path / "c" / "d" / "ruff.toml").write_text("")
    (tmp_path / "c" / "ruff.toml").symlink_to(tmp_path / "nowhere")  # dangling: still listed
    (tmp_path / "e" / "linked").symlink_to(tmp_path / "a", target_is_directory=True)
    walked = [
        Path(top) / name
        for top, dirs, files in _walk_skipping_git(tmp_path)
        for name in _CONFIG_NAMES
        if name in files
    ]
    assert list(_configs_below(tmp_path)) == walked
    assert tmp_path / "a" / ".git" / "ruff.toml" not in walked
    assert not any("linked" in str(path) for path in walked)


def _walk_skipping_git(top: Path) -> Any:
    for walked in os.walk(top):
        walked[1][:] = [d for d in walked[1] if d != ".git"]
        yield walked

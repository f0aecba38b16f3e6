"""The notices a failed command gets: true about what stopped it, silent when nothing did."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from _test_helpers import mechanism_params

from lionfactory import Branch
from lionfactory.coding import coding_toolkit
from lionfactory.tools import EnvPolicy, bash_tool

IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
IDENTITY |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    env = {**IDENTITY, "PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    for argv in (["git", "init", "-q"], ["git", "commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(argv, cwd=root, check=True, env=env)
    return root


async def test_a_traceback_is_not_blamed_on_the_shells_underscore_variable(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``$_`` (the parent shell's last argument) is never what a program missed.

    The coding toolkit's default bash, as an agent gets it.
    """
    monkeypatch.setenv("_", "/usr/bin/python3")
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=repo)
    (repo / "my_module.py").write_text("def run_it(a_b):\n    return a_b[0]\n\nrun_it([])\n")
    action = await branch.act("bash", {"command": "python3 my_module.py"})
    result = action.result
    assert result is not None
    assert result["return_code"] != 0, result
    assert "IndexError" in result["stderr"] and "run_it" in result["stderr"]
    assert "withheld" not in (result["notice"] or ""), result["notice"]


async def test_a_withheld_variable_named_inside_another_word_is_not_a_mention(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LF_TEST_API_KEY", "x")
    tool = bash_tool(workspace_root=repo, env_policy=EnvPolicy())
    result = await tool(command="sh -c 'echo MY_LF_TEST_API_KEY_FILE is fine >&2; exit 3'")
    assert result["return_code"] == 3
    assert "withheld" not in (result["notice"] or ""), result["notice"]
    named = await tool(command="sh -c 'echo LF_TEST_API_KEY: unset >&2; exit 3'")
    assert "withheld LF_TEST_API_KEY" in (named["notice"] or ""), named


@pytest.mark.parametrize("mechanism", mechanism_params())
async def test_git_commit_in_the_workspace_is_told_about_the_read_only_git(
    repo: Path, mechanism: str
) -> None:
    """Under bwrap ``.git`` is read-only: the notice names it and the sandbox tool's commit.

    Landlock cannot narrow a writable tree, so there the commit lands, and no
    notice says otherwise.
    """
    (repo / "a.txt").write_text("a\n", encoding="utf-8")
    tool = bash_tool(workspace_root=repo, isolation=mechanism, env=IDENTITY)
    result = await tool(command="git add a.txt && git commit -q -m 'add a'")
    notice = result["notice"] or ""
    assert "Write inside the workspace" not in notice
    if mechanism == "bwrap":
        assert result["return_code"] != 0, result
        assert ".git read-only" in notice and "action='commit'" in notice, result
        assert "sandbox tool" in notice
    else:
        assert result["return_code"] == 0, result
        log = await tool(command="git log --format=%s")
        assert log["stdout"].split("\n")[0] == "add a", log
    # A write elsewhere still gets the general notice.
    outside = await tool(command="touch /usr/lionfactory-test-file")
    assert outside["return_code"] != 0
    assert "writable roots" in (outside["notice"] or ""), outside


async def test_a_timeout_that_looks_like_seconds_is_told_the_unit(repo: Path) -> None:
    tool = bash_tool(workspace_root=repo)
    assert (
        "MILLISECONDS"
        in tool.request_model.model_json_schema()["properties"]["timeout"]["description"]
    )
    result = await tool(command="sleep 2", timeout=5)
    assert result["timed_out"] is True
    assert "in milliseconds: 5 ms is 0.005 s" in result["error"]
    assert "timeout=5000" in result["error"]


@pytest.mark.parametrize("cap", [None, 2_000])
async def test_output_past_the_cap_names_where_the_rest_is_kept(
    repo: Path, cap: int | None
) -> None:
    """The default cap (30,000 bytes a stream) and the toolkit's option, end to end."""
    branch = Branch()
    options = {} if cap is None else {"max_output_bytes": cap}
    branch.register(coding_toolkit, workspace_root=repo, tools=["bash"], **options)
    size = 40_000 if cap is None else 5_000
    command = f"python3 -c \"print('x' * {size})\""
    action = await branch.act("bash", {"command": command})
    result = action.result
    assert result is not None and result["output_id"] is not None, result
    limit = 30_000 if cap is None else cap
    assert len(result["stdout"].encode()) < limit + 400
    assert f"job_id='{result['output_id']}'" in result["stdout"]
    kept = await branch.act("jobs", {"action": "output", "job_id": result["output_id"]})
    assert kept.result is not None and kept.result["total_bytes"] == size + 1
    assert f"at most {limit:,} bytes" in branch.tools["bash"].description


def test_the_cap_is_checked_at_once(repo: Path) -> None:
    with pytest.raises(ValueError, match="max_output_bytes must be between"):
        bash_tool(workspace_root=repo, max_output_bytes=10)
    with pytest.raises(TypeError, match="max_output_bytes"):
        bash_tool(workspace_root=repo, max_output_bytes="big")  # type: ignore[arg-type]

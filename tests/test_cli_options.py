"""``lionfactory call bash --shell/--isolation`` and what ``mcp serve --help`` says it serves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _test_helpers import mechanism_params


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lionfactory", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_a_shell_an_operator_is_refused_with_the_flags_that_allow_it(
    tmp_path: Path,
) -> None:
    done = run_cli("call", "bash", "command=echo a | wc -c", cwd=tmp_path)
    assert done.returncode == 1
    assert "lionfactory call --shell bash" in done.stdout + done.stderr


def test_shell_runs_the_script(tmp_path: Path) -> None:
    done = run_cli("call", "--shell", "bash", "command=echo a b | wc -w", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"


@pytest.mark.parametrize("mechanism", mechanism_params())
def test_isolation_confines_the_script(tmp_path: Path, mechanism: str) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    work = tmp_path / "work"
    work.mkdir()
    command = f"command=echo in > inside.txt; echo out > {outside}; true"
    done = run_cli("call", "--isolation", mechanism, "bash", command, cwd=work)
    assert done.returncode == 0, done.stderr
    assert (work / "inside.txt").read_text() == "in\n"
    assert not outside.exists()


def test_the_bash_options_are_refused_for_another_tool(tmp_path: Path) -> None:
    done = run_cli("call", "--shell", "reader", "action=list_dir", "path=.", cwd=tmp_path)
    assert done.returncode == 2
    assert "options of bash" in done.stderr


def test_mcp_serve_help_names_the_served_tools(tmp_path: Path) -> None:
    from lionfactory._cli import cli_factories

    done = run_cli("mcp", "serve", "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    ((_, kwargs),) = cli_factories("coding", None, tmp_path)
    served = ", ".join(
        name for n in kwargs["tools"] for name in ((n, "jobs") if n == "bash" else (n,))
    )
    assert f"with --toolkit coding (the default): {served};" in text
    assert "more with --tools: context, sandbox, checkpoint, subagent" in text
    assert "With --toolkit standalone: reader, editor, bash," in text

"""In the confined bash, ``python`` and ``pip`` are the workspace's own virtual environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _test_helpers import mechanism_params

from lionfactory import Branch
from lionfactory.coding import coding_toolkit
from lionfactory.tools import bash_tool

PREFIX = "python -c 'import sys; print(sys.prefix)'"


@pytest.fixture(scope="module")
def made_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with a real virtual environment in ``.venv`` (pip included)."""
    root = tmp_path_factory.mktemp("project")
    subprocess.run([sys.executable, "-m", "venv", str(root / ".venv")], check=True, timeout=300)
    return root


async def test_the_toolkits_bash_runs_the_workspaces_venv(made_venv: Path) -> None:
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=made_venv)
    ran = await branch.act("bash", {"command": PREFIX})
    assert ran.result is not None and ran.result["error"] is None, ran.result
    assert ran.result["stdout"].strip() == str(made_venv / ".venv")
    pip = await branch.act("bash", {"command": "pip --version"})
    assert pip.result is not None
    assert str(made_venv / ".venv") in pip.result["stdout"], pip.result
    # No network in the toolkit's default: the install fails, and says whose pip ran.
    install = await branch.act("bash", {"command": "pip install --retries 0 surely-not-xyz"})
    assert install.result is not None and install.result["return_code"] != 0
    assert str(made_venv / ".venv" / "bin" / "python") in (install.result["notice"] or ""), (
        install.result
    )


@pytest.mark.parametrize("mechanism", mechanism_params())
async def test_a_failed_import_names_the_interpreter_and_how_to_choose_another(
    made_venv: Path, mechanism: str
) -> None:
    tool = bash_tool(workspace_root=made_venv, isolation=mechanism)
    result = await tool(command="python -c 'import surely_not_installed_xyz'")
    assert result["return_code"] != 0
    notice = result["notice"] or ""
    assert str(made_venv / ".venv" / "bin" / "python") in notice, result
    assert "virtual environment" in notice and "by its path" in notice


@pytest.mark.parametrize("mechanism", mechanism_params())
async def test_without_a_venv_path_decides_and_the_notice_says_how_to_make_one(
    tmp_path: Path, mechanism: str
) -> None:
    agents = Path(sys.prefix)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "VIRTUAL_ENV": str(agents)}
    tool = bash_tool(workspace_root=tmp_path, isolation=mechanism, env=env)
    ran = await tool(command="python3 -c 'import sys; print(sys.prefix)'")
    # The agent's own environment is not forced on the command.
    assert ran["stdout"].strip() != str(agents), ran
    failed = await tool(command="python3 -c 'import surely_not_installed_xyz'")
    notice = failed["notice"] or ""
    assert "first on PATH" in notice and "python -m venv .venv" in notice, failed


@pytest.mark.parametrize("mechanism", mechanism_params())
async def test_virtual_env_naming_an_environment_inside_the_workspace_is_used(
    made_venv: Path, tmp_path: Path, mechanism: str
) -> None:
    env = {"PATH": "/usr/bin:/bin", "VIRTUAL_ENV": str(made_venv / ".venv")}
    tool = bash_tool(workspace_root=made_venv, isolation=mechanism, env=env)
    ran = await tool(command=PREFIX)
    assert ran["stdout"].strip() == str(made_venv / ".venv"), ran


async def test_unconfined_bash_keeps_the_path_it_was_given(made_venv: Path) -> None:
    tool = bash_tool(workspace_root=made_venv, env={"PATH": "/usr/bin:/bin"})
    ran = await tool(command="sh -c 'echo $PATH'")
    assert ran["stdout"].strip() == "/usr/bin:/bin"

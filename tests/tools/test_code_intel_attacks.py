"""Attacks on code intelligence: plant with a confined `bash`, trigger with `code_nav` or an edit.

ty reads its configuration (``ty.toml``, ``pyproject.toml``, the project's
``.venv/pyvenv.cfg``) as it starts and again when one changes. A FIFO, a
link to ``/dev/zero`` or a giant file there blocked it: every request then
timed out after 10 s with "retry", which could never help.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from lionfactory import Branch
from lionfactory._os.mechanisms import mechanism_problem
from lionfactory.coding import coding_toolkit
from lionfactory.tools._code_intel import ty_command

pytestmark = pytest.mark.skipif(ty_command() is None, reason="ty is not installed")

APP = "from pkg.helper import helper\n\n\ndef main() -> int:\n    return helper(2)\n"


@pytest.fixture
def project(workspace: Path) -> Path:
    (workspace / "pkg").mkdir()
    (workspace / "pkg" / "__init__.py").write_text("")
    (workspace / "pkg" / "helper.py").write_text("def helper(x: int) -> int:\n    return x\n")
    (workspace / "pkg" / "app.py").write_text(APP)
    return workspace


def kit(root: Path, isolation: str = "auto") -> Branch:
    branch = Branch("You write code.")
    branch.register(
        coding_toolkit, workspace_root=root, notify=False, checkpoints=False, isolation=isolation
    )
    return branch


async def bash(branch: Branch, command: str) -> None:
    result = await branch.act("bash", {"command": command})
    assert result.ok, result.error
    assert result.result["return_code"] == 0, result.result


async def hover(branch: Branch) -> dict[str, Any]:
    result = await branch.act(
        "code_nav", {"action": "hover", "path": "pkg/app.py", "line": 5, "symbol": "helper"}
    )
    assert result.ok, result.error
    out: dict[str, Any] = result.result
    return out


@pytest.mark.parametrize(
    ("name", "plant"),
    [
        ("ty.toml", "mkfifo ty.toml"),
        ("pyproject.toml", "mkfifo pyproject.toml"),
        (".venv/pyvenv.cfg", "mkdir .venv && mkfifo .venv/pyvenv.cfg"),
        ("pyproject.toml", "ln -s /dev/zero pyproject.toml"),
        ("ty.toml", "truncate -s 64M ty.toml"),
    ],
)
async def test_a_planted_config_is_a_typed_answer_at_once(
    project: Path, name: str, plant: str
) -> None:
    branch = kit(project)
    await bash(branch, plant)
    started = time.monotonic()
    with trio.fail_after(30):
        out = await hover(branch)
        definition = await branch.act(
            "code_nav",
            {"action": "find_definition", "path": "pkg/app.py", "line": 5, "symbol": "helper"},
        )
    # Not the 10 s request timeout of a server blocked on the file.
    assert time.monotonic() - started < 8
    assert out["success"] is False
    assert name in out["error"] and "retry" not in out["error"]
    assert "remove it" in out["error"]
    # The syntactic engine still answers, saying why ty did not.
    assert definition.ok and definition.result["engine"] == "ast"
    assert name in definition.result["note"]
    await branch.aclose()


async def test_a_config_planted_while_the_server_runs_stops_it_and_a_fix_brings_it_back(
    project: Path,
) -> None:
    branch = kit(project)
    with trio.fail_after(60):
        # A folder of a config's name ty skips: it does not stop ty.
        await bash(branch, "mkdir ty.toml")
        assert (await hover(branch))["text"] == "def helper(x: int) -> int"
        await bash(branch, "mkfifo pyproject.toml")
        started = time.monotonic()
        refused = await hover(branch)
        assert time.monotonic() - started < 8
        assert "pyproject.toml" in refused["error"]
        await bash(branch, "rm pyproject.toml")
        assert (await hover(branch))["text"] == "def helper(x: int) -> int"
    await branch.aclose()


async def test_an_edit_under_a_planted_config_does_not_wait_for_a_blocked_server(
    project: Path,
) -> None:
    branch = kit(project)
    await bash(branch, "mkfifo ty.toml")
    read = await branch.act("reader", {"action": "read", "path": "pkg/app.py"})
    assert read.ok, read.error
    with trio.fail_after(30):
        edited = await branch.act(
            "editor",
            {
                "action": "edit",
                "file_path": "pkg/app.py",
                "old_string": "    return helper(2)\n",
                "new_string": "    return helper(3)\n",
            },
        )
    assert edited.ok, edited.error
    # No engine can run here: the edit stands on its own, with no stale
    # "not reported in time" diagnostics after the whole wait.
    assert edited.result.get("diagnostics") is None
    await branch.aclose()


@pytest.fixture
def secret_home() -> Any:
    """A module in the home directory, which the toolkit's confinement hides."""
    folder = Path(tempfile.mkdtemp(dir=Path.home(), prefix=".lionfactory-test-"))
    (folder / "secretmod.py").write_text('SECRET = "hunter2"\n')
    yield folder
    shutil.rmtree(folder)


@pytest.mark.parametrize("isolation", ["bwrap", "landlock"])
async def test_a_ty_config_naming_a_folder_outside_reads_no_more_than_bash_may(
    project: Path, secret_home: Path, isolation: str
) -> None:
    if mechanism_problem(isolation) is not None:
        pytest.skip(f"{isolation}: {mechanism_problem(isolation)}")
    (project / "pkg" / "leak.py").write_text("from secretmod import SECRET\n\nSECRET\n")
    branch = kit(project, isolation)
    config = f'[environment]\nextra-paths = ["{secret_home}"]\n'
    await bash(branch, f"cat > ty.toml <<'EOF'\n{config}EOF")
    peek = await branch.act("bash", {"command": f"cat {secret_home}/secretmod.py"})
    assert peek.ok and peek.result["return_code"] != 0, "the confinement hides the home"
    with trio.fail_after(60):
        found = await branch.act(
            "code_nav", {"action": "hover", "path": "pkg/leak.py", "line": 3, "symbol": "SECRET"}
        )
    assert found.ok, found.error
    # ty runs confined as the commands do: the module is not found, so its
    # value (a literal type would show it) never reaches the model.
    assert "hunter2" not in str(found.result)
    assert found.result["text"] == "Unknown"
    await branch.aclose()

"""Toolchains shown from a hidden home stay read-only and credential-free, at any time.

A fake home (hidden) holds a pyenv root and a ``~/.local`` found through
``PATH``; the confined ``bash`` of a branch runs the toolchain's program, and
a credential file written after the branch's first command, one deeper
inside the tree, one reached through a link and a dangling one are all
hidden (and never make a command fail). Writes into the toolchain fail.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import mechanism_params

from lionfactory import Branch
from lionfactory.tools.bash import bash_tool
from lionfactory.tools.jobs import jobs_tool

SECRET = "lf-toolchain-secret-77aa"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    tool = home / ".pyenv" / "versions" / "3.99" / "bin" / "toolx"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\necho toolx-ran\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    (home / ".pyenv" / "versions" / "3.99" / "lib").mkdir()
    local = home / ".local"
    (local / "bin").mkdir(parents=True)
    (local / "lib" / "python3" / "site-packages").mkdir(parents=True)
    (home / "private.txt").write_text(SECRET)
    return home


def make_branch(tmp_path: Path, home: Path, mechanism: str) -> Branch:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    pyenv = home / ".pyenv"
    env = {
        **os.environ,
        "PATH": f"{pyenv}/versions/3.99/bin:{home}/.local/bin:{os.environ['PATH']}",
        "PYENV_ROOT": str(pyenv),
    }
    branch = Branch()
    branch.register(
        bash_tool(workspace_root=workspace, isolation=mechanism, env=env, hidden_paths=[home])
    )
    branch.register(jobs_tool())
    return branch


async def run(branch: Branch, command: str) -> dict[str, Any]:
    result = await branch.act("bash", {"command": command})
    assert result.ok, result.error
    return dict(result.result)


@pytest.mark.parametrize("mechanism", mechanism_params())
async def test_credentials_written_later_deeper_or_behind_links_are_hidden(
    mechanism: str, tmp_path: Path, home: Path
) -> None:
    branch = make_branch(tmp_path, home, mechanism)
    version = home / ".pyenv" / "versions" / "3.99"
    try:
        first = await run(branch, "toolx && cat " + str(home / "private.txt"))
        assert "toolx-ran" in first["stdout"] and SECRET not in first["stdout"]
        # Written after the branch's sandbox was made.
        (version / ".netrc").write_text(f"machine example.com password {SECRET}\n")
        (version / "etc").mkdir()
        (version / "etc" / "npmrc").write_text(f"//registry.example/:_authToken={SECRET}\n")
        git = home / ".pyenv" / ".git"
        git.mkdir()
        (git / "config").write_text(f'[remote "o"]\n\turl = https://u:{SECRET}@example.com/r\n')
        (home / ".pyenv" / "config.toml").write_text(f'[registry]\ntoken = "{SECRET}"\n')
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "pip.conf").write_text(f"[global]\nindex-url = https://u:{SECRET}@x/\n")
        (version / "pip.conf").symlink_to(elsewhere / "pip.conf")
        (version / "credentials").symlink_to(tmp_path / "missing")
        paths = [
            version / ".netrc",
            version / "etc" / "npmrc",
            git / "config",
            home / ".pyenv" / "config.toml",
            version / "pip.conf",
            elsewhere / "pip.conf",
        ]
        for path in paths:
            read = await run(branch, f"cat {path}; echo still-runs")
            assert SECRET not in read["stdout"], (path, read)
            assert "still-runs" in read["stdout"], (path, read)
        again = await run(branch, "toolx")
        assert again["return_code"] == 0 and "toolx-ran" in again["stdout"], again
    finally:
        await branch.aclose()


@pytest.mark.parametrize("mechanism", mechanism_params())
async def test_writes_into_an_exposed_toolchain_outside_the_workspace_fail(
    mechanism: str, tmp_path: Path, home: Path
) -> None:
    branch = make_branch(tmp_path, home, mechanism)
    targets = [
        home / ".pyenv" / "versions" / "3.99" / "lib" / "evil.pth",
        home / ".pyenv" / "versions" / "3.99" / "bin" / "toolx",
        home / ".local" / "lib" / "python3" / "site-packages" / "evil.pth",
        home / ".local" / "bin" / "evil",
    ]
    try:
        shown = await run(branch, "toolx")
        assert shown["return_code"] == 0, shown
        for target in targets:
            done = await run(branch, f"echo planted >> {target}")
            assert done["return_code"] != 0, (target, done)
            assert not target.exists() or "planted" not in target.read_text(), target
    finally:
        await branch.aclose()

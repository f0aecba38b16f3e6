"""Toolchains shown from a hidden home stay read-only and credential-free, at any time.

A fake home (hidden) holds a pyenv root and a ``~/.local`` found through
``PATH``; the confined ``bash`` of a branch runs the toolchain's program, and
a credential file written after the branch's first command, one deeper
inside the tree, one reached through a link and a dangling one are all
hidden (and never make a command fail). Writes into the toolchain fail.

Credential names planted more than four levels below the exposed prefix,
before the first command and after it (in folders made after it too), are
hidden. One that appears while a background job runs is hidden from that job
under bwrap (the running sandbox gets a mount over it); under Landlock, whose
rules cannot change for a running process, the job keeps reading it and only
later commands are kept from it: the documented limit.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
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


def deep_folder(home: Path, *more: str) -> Path:
    """Eight levels below the exposed prefix ``.pyenv``."""
    parts = ("versions", "3.99", "lib", "python3.99", "site-packages", "pkg", "a", "b", *more)
    return home.joinpath(".pyenv", *parts)


@pytest.mark.parametrize("mechanism", mechanism_params())
async def test_credentials_planted_deep_before_and_after_the_first_command_are_hidden(
    mechanism: str, tmp_path: Path, home: Path
) -> None:
    before = deep_folder(home)
    before.mkdir(parents=True)
    (before / ".netrc").write_text(f"machine x password {SECRET}\n")
    (before / "credentials.toml").write_text(f'token = "{SECRET}"\n')
    branch = make_branch(tmp_path, home, mechanism)
    try:
        first = await run(branch, f"toolx; cat {before}/.netrc {before}/credentials.toml; echo ran")
        assert "toolx-ran" in first["stdout"] and "ran" in first["stdout"], first
        assert SECRET not in first["stdout"], first
        # After the sandbox was made, in folders that did not exist then.
        after = deep_folder(home, "c", "d", "e")
        after.mkdir(parents=True)
        (after / "pip.conf").write_text(f"[global]\nindex-url = https://u:{SECRET}@x/\n")
        (after / "hosts.yml").write_text(f"github.com:\n  oauth_token: {SECRET}\n")
        git = after / "repo" / ".git"
        git.mkdir(parents=True)
        (git / "config").write_text(f'[remote "o"]\n\turl = https://u:{SECRET}@example.com/r\n')
        (after / "settings.toml").write_text("ordinary = true\n")
        for path in (after / "pip.conf", after / "hosts.yml", git / "config"):
            read = await run(branch, f"cat {path}; echo still-runs")
            assert SECRET not in read["stdout"], (path, read)
            assert "still-runs" in read["stdout"], (path, read)
        # Only credentials are hidden: an ordinary file beside them is read.
        plain = await run(branch, f"cat {after}/settings.toml")
        assert plain["stdout"] == "ordinary = true\n", plain
    finally:
        await branch.aclose()


@pytest.mark.parametrize("mechanism", mechanism_params())
async def test_a_credential_appearing_while_a_job_runs(
    mechanism: str, tmp_path: Path, home: Path
) -> None:
    """Hidden from the running job too under bwrap; under Landlock only from later commands."""
    folder = deep_folder(home, "later")
    target = folder / "credentials.toml"
    branch = make_branch(tmp_path, home, mechanism)
    try:
        # The job reads the file again and again; "<n> start" marks when
        # each read begins.
        loop = (
            f"i=0; while true; do i=$((i+1)); echo $i start; cat {target} 2>/dev/null; "
            "sleep 0.05; done"
        )
        started = await branch.act("bash", {"command": loop, "background": True})
        job = started.result["job_id"]

        async def output() -> str:
            page = await branch.act("jobs", {"action": "output", "job_id": job, "offset": 0})
            return str(page.result["output"])

        async def until(holds: Callable[[str], bool]) -> None:
            # Another process's output, which no event reports: polled.
            with trio.fail_after(30):
                while not holds(await output()):  # noqa: ASYNC110
                    await trio.sleep(0.05)

        await until(lambda text: "2 start" in text)
        folder.mkdir(parents=True)
        target.write_text(f'token = "{SECRET}"\n')
        await until(lambda text: SECRET in text)  # the job read it: nothing had checked since
        later = await run(branch, f"cat {target}; echo still-runs")
        assert SECRET not in later["stdout"] and "still-runs" in later["stdout"], later
        # From here on the file is checked: what the job prints after its
        # next two reads began (one begun before the check may finish it).
        mark = len(await output())
        await until(lambda text: text[mark:].count(" start\n") >= 12)
        tail = (await output())[mark:].split(" start\n", 2)[2]
        if mechanism == "bwrap":
            assert SECRET not in tail, tail[-500:]
        else:
            assert SECRET in tail  # Landlock's rules are fixed for a running process
    finally:
        await branch.aclose()


@pytest.mark.parametrize("mechanism", mechanism_params())
async def test_a_hidden_credential_replaced_by_a_rename_stays_hidden(
    mechanism: str, tmp_path: Path, home: Path
) -> None:
    """An atomic writer renames a new file over the old one: the kernel drops that mount."""
    netrc = home / ".pyenv" / "versions" / "3.99" / ".netrc"
    netrc.write_text("machine x password old\n")
    branch = make_branch(tmp_path, home, mechanism)
    try:
        first = await run(branch, f"cat {netrc}; echo ran")
        assert "old" not in first["stdout"] and "ran" in first["stdout"], first
        written = netrc.with_name(".netrc.tmp-writer")
        written.write_text(f"machine x password {SECRET}\n")
        os.replace(written, netrc)
        again = await run(branch, f"cat {netrc}; echo still-runs")
        assert SECRET not in again["stdout"] and "still-runs" in again["stdout"], again
    finally:
        await branch.aclose()

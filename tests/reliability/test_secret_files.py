"""Secrets stay put: private keys under any name, and git's internals, are refused.

A private key renamed to ``notes.txt`` or ``logo.png`` is still a key: every
tool that reads file content (reader, editor, code_nav, the toolkit's image
reader, documents) refuses it by its first bytes. And the editor does not
write inside ``.git``: git runs what its config and hooks name, so a model
with only reader, editor and sandbox could otherwise run any command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _test_helpers import git
from hypothesis import given
from hypothesis import strategies as st

from lionfactory import Branch
from lionfactory._os.isolation import default_hidden
from lionfactory._os.mechanisms import mechanism_problem
from lionfactory.coding import coding_toolkit
from lionfactory.tools.bash import bash_tool
from lionfactory.tools.code_nav import code_nav_tool
from lionfactory.tools.editor import editor_tool
from lionfactory.tools.reader import reader_tool

KEY_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ"
HEADERS = [
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----BEGIN EC PRIVATE KEY-----",
    "-----BEGIN PRIVATE KEY-----",
    "-----BEGIN ENCRYPTED PRIVATE KEY-----",
    "-----BEGIN DSA PRIVATE KEY-----",
    "-----BEGIN PGP PRIVATE KEY BLOCK-----",
    "PuTTY-User-Key-File-3: ssh-ed25519",
]


async def every_reading_tool(root: Path, name: str) -> list[tuple[str, dict[str, Any]]]:
    reader = reader_tool(workspace_root=root)
    editor = editor_tool(workspace_root=root)
    nav = code_nav_tool(workspace_root=root)
    kit = {t.name: t for t in coding_toolkit(Branch(), workspace_root=root, tools=["reader"])}
    return [
        ("reader.read", await reader(action="read", path=name)),
        ("toolkit reader", await kit["reader"](action="read", path=name)),
        ("code_nav", await nav(action="outline", path=name)),
        (
            "editor.edit",
            await editor(action="edit", file_path=name, old_string="A", new_string="B"),
        ),
        ("editor.write", await editor(action="write", file_path=name, content="replaced\n")),
    ]


@pytest.mark.parametrize("header", HEADERS)
@pytest.mark.parametrize("name", ["notes.txt", "logo.png", "module.py"])
async def test_a_private_key_under_any_name_is_refused_by_every_tool(
    workspace: Path, header: str, name: str
):
    content = f"\n{header}\n{KEY_BODY}\n-----END PRIVATE KEY-----\n"
    (workspace / name).write_text(content)
    for tool, answer in await every_reading_tool(workspace, name):
        assert answer["success"] is False, (tool, answer)
        assert "private key" in answer["error"], (tool, answer)
        assert KEY_BODY not in repr(answer), tool
    assert (workspace / name).read_text() == content


@given(
    leading=st.sampled_from(["", "\n", "  \n\t", "\ufeff"]),
    kind=st.sampled_from(["", "RSA ", "EC ", "OPENSSH ", "ENCRYPTED ", "DSA "]),
)
def test_the_key_header_is_found_after_whitespace_and_a_bom(leading: str, kind: str) -> None:
    import tempfile

    import trio

    with tempfile.TemporaryDirectory() as raw:
        root = Path(raw)
        (root / "f.txt").write_text(f"{leading}-----BEGIN {kind}PRIVATE KEY-----\n{KEY_BODY}\n")
        reader = reader_tool(workspace_root=root)
        answer = trio.run(lambda: reader(action="read", path="f.txt"))
        assert answer["success"] is False and "private key" in answer["error"]


# --- .git -----------------------------------------------------------------------


@pytest.fixture
def repo(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", "/dev/null")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    git(workspace, "init", "--quiet", "-b", "main")
    (workspace / "app.py").write_text("print(1)\n")
    git(workspace, "add", "-A")
    git(workspace, "-c", "user.name=T", "-c", "user.email=t@e", "commit", "--quiet", "-m", "i")
    return workspace


@pytest.mark.parametrize(
    "path", [".git/config", ".git/hooks/post-checkout", ".GIT/config", "sub/.git", ".git/x"]
)
async def test_the_editor_refuses_git_internals(repo: Path, path: str):
    editor = editor_tool(workspace_root=repo)
    before = (repo / ".git" / "config").read_bytes()
    answer = await editor(action="write", file_path=path, content="[core]\n\tfsmonitor = x\n")
    assert answer["success"] is False
    assert "inside a .git directory" in answer["error"]
    assert (repo / ".git" / "config").read_bytes() == before
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()
    assert not (repo / "sub").exists()


async def test_git_internals_are_writable_when_the_factory_allows_it(repo: Path):
    editor = editor_tool(workspace_root=repo, allow_git_internals=True)
    answer = await editor(action="write", file_path=".git/description", content="mine\n")
    assert answer["success"], answer
    assert (repo / ".git" / "description").read_text() == "mine\n"


async def test_reader_editor_and_sandbox_cannot_run_a_command_through_git_config(
    repo: Path, tmp_path: Path
):
    """The escalation: write core.fsmonitor, then let the sandbox run git."""
    marker = tmp_path / "pwned"
    branch = Branch()
    tools = {
        t.name: t
        for t in coding_toolkit(branch, workspace_root=repo, tools=["reader", "editor", "sandbox"])
    }
    config = (repo / ".git" / "config").read_text()
    hostile = config + f"[core]\n\tfsmonitor = touch {marker}; false\n"
    await tools["reader"](action="read", path=".git/config")
    written = await tools["editor"](action="write", file_path=".git/config", content=hostile)
    assert written["success"] is False
    hook = await tools["editor"](
        action="write",
        file_path=".git/hooks/post-checkout",
        content=f"#!/bin/sh\ntouch {marker}\n",
    )
    assert hook["success"] is False
    await tools["sandbox"](action="create")
    await tools["sandbox"](action="discard")
    assert not marker.exists()


@pytest.mark.skipif(mechanism_problem("bwrap") is not None, reason="bwrap unavailable")
async def test_a_hidden_file_cannot_be_linked_under_another_name_for_the_reader(
    workspace: Path,
) -> None:
    """Plant with bash (`ln .env notes.txt`), trigger with the reader: nothing to show."""
    (workspace / ".env").write_text("TOKEN=s3cret\n")
    bash = bash_tool(
        workspace_root=workspace,
        isolation="bwrap",
        hidden_paths=[*default_hidden(), workspace / ".env"],
    )
    planted = await bash(command="ln .env notes.txt; cat notes.txt .env")
    # The hidden file is a mount of /dev/null: a link to it crosses devices.
    assert "Invalid cross-device link" in planted["stderr"], planted
    assert "s3cret" not in planted["stdout"]
    read = await reader_tool(workspace_root=workspace)(action="read", path="notes.txt")
    assert read["success"] is False and "s3cret" not in str(read)

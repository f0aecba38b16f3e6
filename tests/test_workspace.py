"""Workspace: path containment, symlinks, protected names."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from lionfactory._workspace import PathRefused, Workspace, open_nofollow


@pytest.fixture
def ws(workspace: Path) -> Workspace:
    (workspace / "src").mkdir()
    (workspace / "src" / "a.py").write_text("print(1)\n")
    return Workspace.at(workspace)


def refusal(ws: Workspace, path: object) -> str:
    with pytest.raises(PathRefused) as info:
        ws.resolve(path)
    return info.value.message


def test_relative_path_resolves_inside_the_root(ws: Workspace):
    assert ws.resolve("src/a.py") == ws.root / "src" / "a.py"


def test_absolute_path_inside_the_root_is_accepted(ws: Workspace):
    assert ws.resolve(str(ws.root / "src" / "a.py")) == ws.root / "src" / "a.py"


def test_dot_is_the_root(ws: Workspace):
    assert ws.resolve(".") == ws.root


def test_dotdot_escape_is_refused_with_advice(ws: Workspace):
    message = refusal(ws, "../outside.txt")
    assert "outside the workspace" in message
    assert "give a path inside it" in message


def test_dotdot_that_stays_inside_is_accepted(ws: Workspace):
    assert ws.resolve("src/../src/a.py") == ws.root / "src" / "a.py"


def test_absolute_path_elsewhere_is_refused(ws: Workspace):
    assert "outside the workspace" in refusal(ws, "/etc/passwd")


def test_home_relative_path_is_refused(ws: Workspace):
    message = refusal(ws, "~/.bashrc")
    assert "relative to the workspace root" in message


def test_nul_byte_is_refused(ws: Workspace):
    assert "NUL" in refusal(ws, "src/a.py\x00.txt")


def test_empty_path_is_refused_with_a_hint(ws: Workspace):
    assert "use '.'" in refusal(ws, "  ")


def test_non_string_path_is_refused(ws: Workspace):
    assert "must be a string" in refusal(ws, 42)


def test_symlink_as_final_component_is_refused(ws: Workspace):
    (ws.root / "link.py").symlink_to(ws.root / "src" / "a.py")
    message = refusal(ws, "link.py")
    assert "symbolic link" in message
    assert "Use the path of the file it points to" in message


def test_intermediate_symlink_inside_the_root_is_followed(ws: Workspace):
    (ws.root / "alias").symlink_to(ws.root / "src")
    assert ws.resolve("alias/a.py") == ws.root / "src" / "a.py"


def test_intermediate_symlink_leading_outside_is_refused(ws: Workspace, tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    (ws.root / "escape").symlink_to(outside)
    assert "outside the workspace" in refusal(ws, "escape/secret.txt")


@pytest.mark.parametrize(
    "path",
    [
        ".env",
        ".env.local",
        "config/.env.production",
        ".ENV",
        "deploy/.env/values.txt",
        ".netrc",
        ".pgpass",
        "site/.htpasswd",
        "keys/id_rsa",
        "id_dsa",
        "id_ecdsa",
        "ID_ED25519",
    ],
)
def test_protected_names_are_refused_in_any_component(ws: Workspace, path: str):
    message = refusal(ws, path)
    assert "protected" in message
    assert "may hold secrets" in message


def test_protected_name_behind_an_intermediate_symlink_is_refused(ws: Workspace):
    (ws.root / "conf").mkdir()
    (ws.root / "conf" / "x").write_text("")
    (ws.root / ".env").mkdir()
    (ws.root / "innocent").symlink_to(ws.root / ".env")
    assert "protected" in refusal(ws, "innocent/x")


def test_id_rsa_pub_is_not_protected(ws: Workspace):
    assert ws.resolve("keys/id_rsa.pub") == ws.root / "keys" / "id_rsa.pub"


def test_protected_names_are_a_factory_option(workspace: Path):
    ws = Workspace.at(workspace, protected=["*.key"])
    assert ws.resolve(".env") == workspace / ".env"
    assert "protected" in refusal(ws, "certs/server.KEY")


def test_a_protected_pattern_with_a_slash_is_rejected(workspace: Path):
    with pytest.raises(ValueError, match="single path component, got 'a/b'"):
        Workspace.at(workspace, protected=["a/b"])


def test_root_is_resolved_once(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(workspace)
    ws = Workspace.at()
    monkeypatch.chdir(tmp_path)
    assert ws.root == workspace.resolve()


def test_missing_root_is_rejected_at_once(tmp_path: Path):
    with pytest.raises(ValueError, match="must be an existing directory, got"):
        Workspace.at(tmp_path / "nope")


def test_root_of_the_wrong_type_is_rejected(tmp_path: Path):
    with pytest.raises(TypeError, match="got 3"):
        Workspace.at(3)  # type: ignore[arg-type]


def test_iter_files_hides_git_protected_names_and_symlinks(ws: Workspace):
    (ws.root / ".git").mkdir()
    (ws.root / ".git" / "HEAD").write_text("ref")
    (ws.root / ".env").write_text("SECRET=1")
    (ws.root / "src" / "id_ed25519").write_text("key")
    (ws.root / "src" / "link.py").symlink_to(ws.root / "src" / "a.py")
    found = [ws.relative(p) for p in ws.iter_files(ws.root, recursive=True)]
    assert found == ["src/a.py"]


def test_is_hidden_marks_git_and_protected_paths(ws: Workspace):
    assert ws.is_hidden(".git/config")
    assert ws.is_hidden("app/.env.local")
    assert not ws.is_hidden("src/a.py")


def test_open_nofollow_refuses_a_symlink(ws: Workspace):
    link = ws.root / "link.py"
    link.symlink_to(ws.root / "src" / "a.py")
    with pytest.raises(OSError, match="Too many levels of symbolic links") as info:
        open_nofollow(link, os.O_WRONLY)
    assert info.value.errno == errno.ELOOP
    assert (ws.root / "src" / "a.py").read_text() == "print(1)\n"

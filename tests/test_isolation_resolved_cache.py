"""A workspace isolation resolves its paths as realpath does, and is made again when they change."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lionfactory._os.environment import EnvPolicy
from lionfactory._os.isolation import _paths, default_hidden, workspace_isolation


def realpaths(values: list[str | Path]) -> tuple[Path, ...]:
    return tuple(dict.fromkeys(Path(os.path.realpath(v)) for v in values))


def test_paths_resolve_exactly_as_realpath_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Links first, midway and last, dangling links, loops, relative and unnormal spellings."""
    real = tmp_path / "real"
    (real / "inner").mkdir(parents=True)
    (real / "file").write_text("x")
    (tmp_path / "first").symlink_to(real)
    (real / "last").symlink_to(real / "inner")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "relative").symlink_to("real/inner")
    monkeypatch.chdir(real)
    values: list[str | Path] = [
        real,
        real / "inner",
        tmp_path / "first" / "inner",
        real / "last",
        real / "last" / "deeper" / "missing",
        tmp_path / "dangling",
        tmp_path / "dangling" / "below",
        tmp_path / "loop",
        tmp_path / "relative",
        real / "file" / "beyond",
        f"{tmp_path}/first/../real",
        f"{real}/./inner",
        f"{real}/inner/",
        f"/{real}",
        "inner",
        "last/x",
        "/",
        tmp_path / "missing" / "deeper",
        *default_hidden(),
    ]
    assert _paths(values) == realpaths(values)
    for value in values:
        assert _paths([value]) == realpaths([value]), value


def test_the_same_inputs_give_the_same_isolation(tmp_path: Path) -> None:
    first = workspace_isolation("auto", tmp_path, env_policy=EnvPolicy(inherit="core"))
    again = workspace_isolation("auto", tmp_path, env_policy=EnvPolicy(inherit="core"))
    assert again is first
    assert workspace_isolation("auto", tmp_path, env_policy=EnvPolicy(inherit="all")) != first
    assert workspace_isolation("auto", tmp_path, network="full").policy.network == "full"
    assert workspace_isolation("none", tmp_path).mechanism == "none"
    other = tmp_path / "other"
    other.mkdir()
    assert workspace_isolation("auto", other).policy.writable == (other,)


def test_a_hidden_folder_made_a_link_hides_its_target_in_the_next_isolation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    keys = tmp_path / "keys"
    keys.mkdir()
    root = tmp_path / "work"
    root.mkdir()
    monkeypatch.setenv("HOME", str(home))
    before = workspace_isolation("auto", root)
    assert home / ".ssh" in before.policy.hidden
    (home / ".ssh").rmdir()
    (home / ".ssh").symlink_to(keys)
    after = workspace_isolation("auto", root)
    assert keys in after.policy.hidden and home / ".ssh" not in after.policy.hidden


def test_a_workspace_reached_through_a_link_is_writable_where_it_leads(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    assert workspace_isolation("auto", link).policy.writable == (real,)
    link.unlink()
    other = tmp_path / "other"
    other.mkdir()
    link.symlink_to(other)
    assert workspace_isolation("auto", link).policy.writable == (other,)


def test_a_new_program_on_path_is_exposed_in_the_next_isolation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The toolchain is derived again when a PATH directory changes, and so is the isolation."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    prefix = tmp_path / "opt" / "tool"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "tool").write_text("#!/bin/sh\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    root = tmp_path / "work"
    root.mkdir()
    before = workspace_isolation("auto", root)
    assert prefix not in before.policy.exposed
    (bin_dir / "tool").symlink_to(prefix / "bin" / "tool")
    os.utime(bin_dir, ns=(1, 1))  # a coarse clock could keep the mtime: make it differ
    after = workspace_isolation("auto", root)
    assert prefix in after.policy.exposed and after != before

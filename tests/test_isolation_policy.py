"""The isolation seam: policy records, mechanism choice, argv translation, launch behaviour."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lionfactory._isolation import (
    Isolation,
    Policy,
    containment,
    mechanism_problem,
    resolve_isolation,
    workspace_isolation,
)
from lionfactory._process import LaunchError, run_process
from lionfactory.errors import ConfigurationError


def _mechanisms() -> list[object]:
    params = []
    for name in ("bwrap", "landlock"):
        problem = mechanism_problem(name)
        params.append(
            pytest.param(name, marks=pytest.mark.skipif(problem is not None, reason=str(problem)))
        )
    return params


MECHANISMS = _mechanisms()


def test_unknown_mechanism_and_network_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="isolation must be one of"):
        workspace_isolation("docker", tmp_path)
    with pytest.raises(ValueError, match="network must be one of"):
        workspace_isolation("auto", tmp_path, network="lan")
    with pytest.raises(TypeError, match="isolation must be"):
        workspace_isolation(3, tmp_path)  # type: ignore[arg-type]


def test_a_policy_narrows_only_with_less_access(tmp_path: Path) -> None:
    wide = Policy(writable=[tmp_path], hidden=[tmp_path / "home"], network="loopback")
    assert Policy(writable=[tmp_path / "sub"], hidden=[tmp_path / "home"]).narrows(wide)
    assert not Policy(writable=[tmp_path.parent], hidden=[tmp_path / "home"]).narrows(wide)
    assert not Policy(writable=[tmp_path], hidden=[], network="none").narrows(wide)
    assert not Policy(writable=[tmp_path], hidden=[tmp_path / "home"], network="full").narrows(wide)
    home = [tmp_path / "home"]
    assert not Policy(writable=[tmp_path], hidden=home, exposed=[home[0] / ".ssh"]).narrows(wide)
    assert not Policy(writable=[tmp_path], hidden=home, protect_git=False).narrows(wide)


def test_auto_takes_the_first_working_mechanism_and_none_stays_none(tmp_path: Path) -> None:
    policy = Policy(writable=[tmp_path])
    auto = resolve_isolation("auto", policy)
    expected = next(
        (name for name in ("bwrap", "landlock") if mechanism_problem(name) is None), "none"
    )
    assert auto.mechanism == expected
    assert resolve_isolation("none", policy).confined is False


def test_bwrap_mounts_a_workspace_in_a_hidden_home_over_the_tmpfs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    workspace = home / "project"
    (workspace / ".git").mkdir(parents=True)
    policy = Policy(writable=[workspace], hidden=[home], private_tmp=False)
    argv = (
        Isolation("bwrap", policy, "bwrap", binary="bwrap")
        .launch(["true"], cwd=workspace, env={})
        .argv
    )
    joined = " ".join(argv)
    hide = joined.index(f"--tmpfs {home.resolve()}")
    bind = joined.index(f"--bind {workspace.resolve()} {workspace.resolve()}")
    protect = joined.index(f"--ro-bind {workspace.resolve()}/.git")
    assert hide < bind < protect
    assert "--unshare-net" in argv and "--unshare-pid" in argv
    assert argv[-2:] == ("--", "true")


def test_network_full_and_loopback_keep_the_hosts_network(tmp_path: Path) -> None:
    for network in ("loopback", "full"):
        policy = Policy(writable=[tmp_path], network=network)  # type: ignore[arg-type]
        argv = Isolation("bwrap", policy, binary="bwrap").launch(["true"], cwd=tmp_path, env={})
        assert "--unshare-net" not in argv.argv


def test_none_without_a_pid_namespace_launches_the_argv_unchanged(tmp_path: Path) -> None:
    policy = Policy(writable=[tmp_path], pid_namespace=False)
    launch = Isolation("none", policy).launch(["ls"], cwd=tmp_path, env=None)
    assert launch.argv == ("ls",)
    assert launch.env is None


def test_none_wraps_the_argv_only_in_a_pid_namespace(tmp_path: Path) -> None:
    launch = Isolation("none", Policy(writable=[tmp_path])).launch(["ls"], cwd=tmp_path, env=None)
    assert launch.argv[-2:] == ("--", "ls")
    assert launch.env is None
    if containment() == "bwrap":
        # The host's filesystem and rights as they are; only the PID namespace is new.
        assert launch.argv[1:5] == ("--dev-bind", "/", "/", "--unshare-pid")
        assert "--cap-drop" not in launch.argv and "--unshare-net" not in launch.argv
    else:
        assert containment() == "helper" and "-P" in launch.argv


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_a_missing_program_is_still_a_launch_error(tmp_path: Path, mechanism: str) -> None:
    isolation = workspace_isolation(mechanism, tmp_path)
    with pytest.raises(LaunchError, match="not found on PATH"):
        await run_process(["no-such-program-xyz"], cwd=tmp_path, timeout=10, isolation=isolation)


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_the_private_temp_dir_is_writable_and_gone_afterwards(
    tmp_path: Path, mechanism: str
) -> None:
    isolation = workspace_isolation(mechanism, tmp_path)
    result = await run_process(
        ["sh", "-c", 'echo data > "$TMPDIR/f" && cat "$TMPDIR/f" && echo "$TMPDIR"'],
        cwd=tmp_path,
        timeout=10,
        isolation=isolation,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "data"
    if mechanism == "landlock":
        assert not os.path.exists(lines[1])


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_an_inherited_isolation_refuses_a_root_outside_its_writable_roots(
    tmp_path: Path, mechanism: str
) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    isolation = workspace_isolation(mechanism, inner)
    assert workspace_isolation(isolation, inner) is isolation
    with pytest.raises(ConfigurationError, match="outside the isolation's writable roots"):
        workspace_isolation(isolation, tmp_path)


def test_a_home_of_slash_hides_only_its_key_folders() -> None:
    from lionfactory._isolation import default_hidden

    hidden = default_hidden("/")
    assert Path("/") not in hidden
    assert Path("/.ssh") in hidden
    with pytest.raises(ValueError, match="must not contain '/'"):
        Policy(writable=["/tmp"], hidden=["/"])


@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_an_exposed_program_under_tmp_still_runs_inside_the_sandbox(
    tmp_path: Path, mechanism: str
) -> None:
    """A virtual environment under /tmp (a CI checkout) stays runnable over the private /tmp."""
    assert Path("/tmp") in tmp_path.resolve().parents  # pytest's tmp_path is under /tmp here
    environment = tmp_path / "env"
    environment.mkdir()
    program = environment / "tool.sh"
    program.write_text("#!/bin/sh\necho from-the-environment\n")
    program.chmod(0o755)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    policy = Policy(writable=[workspace], exposed=[environment])
    isolation = resolve_isolation(mechanism, policy)
    result = await run_process([str(program)], cwd=workspace, timeout=30, isolation=isolation)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "from-the-environment"

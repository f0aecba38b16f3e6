"""The isolation seam: policy records, mechanism choice, argv translation, launch behaviour."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from lionfactory._os.isolation import (
    Isolation,
    Policy,
    containment,
    mechanism_problem,
    resolve_isolation,
    toolchain_paths,
    workspace_isolation,
)
from lionfactory._os.process import LaunchError, run_process
from lionfactory._tool import Tool
from lionfactory.errors import ConfigurationError
from lionfactory.tools.bash import bash_tool


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
    from lionfactory._os.isolation import default_hidden

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


# --- The user's toolchain under a hidden home --------------------------------


class Toolchain:
    """A hidden home holding a tool directory, a pyenv-like shim layout, a venv and secrets."""

    def __init__(self, base: Path) -> None:
        self.home = base / "home"
        self.ws = base / "ws"
        self.ws.mkdir()
        self.tools = self.home / ".toolchain" / "bin"
        self.tools.mkdir(parents=True)
        _script(self.tools / "mytool", "echo TOOL-OK")
        # pyenv: a shim finds the selected version under the root's versions/.
        self.pyenv = self.home / ".pyenv"
        shims = self.pyenv / "shims"
        shims.mkdir(parents=True)
        version = self.pyenv / "versions" / "3.99" / "bin"
        version.mkdir(parents=True)
        _script(version / "shimmed", f'exec {sys.executable} "$@"')
        _script(shims / "shimmed", 'exec "$PYENV_ROOT/versions/3.99/bin/shimmed" "$@"')
        # A virtual environment under the home, first on PATH.
        self.venv = self.home / "venvs" / "proj"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(self.venv)], check=True)
        # A cargo-like prefix whose credentials must stay hidden.
        cargo = self.home / ".cargo"
        (cargo / "bin").mkdir(parents=True)
        _script(cargo / "bin" / "cargolike", "echo CARGO-OK")
        (cargo / "credentials.toml").write_text(SECRET)
        (self.home / ".ssh").mkdir()
        (self.home / ".ssh" / "id_ed25519").write_text(SECRET)
        (self.home / "secret.txt").write_text(SECRET)
        path = [self.venv / "bin", shims, self.tools, cargo / "bin"]
        self.env = {
            **os.environ,
            "HOME": str(self.home),
            "PYENV_ROOT": str(self.pyenv),
            "VIRTUAL_ENV": str(self.venv),
            "PATH": os.pathsep.join([*map(str, path), os.environ["PATH"]]),
        }

    def tool(self, mechanism: str) -> Tool:
        return bash_tool(
            workspace_root=self.ws, isolation=mechanism, hidden_paths=[self.home], env=self.env
        )


SECRET = "TOOLCHAIN_SECRET_77"


def _script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.fixture
def toolchain(tmp_path: Path) -> Toolchain:
    return Toolchain(tmp_path)


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize(
    ("command", "expected"),
    [("mytool", "TOOL-OK"), ("cargolike", "CARGO-OK"), ("shimmed -c 'print(42)'", "42")],
    ids=["path_dir", "cargo_prefix", "pyenv_shim"],
)
def test_programs_on_path_under_a_hidden_home_run(
    toolchain: Toolchain, mechanism: str, command: str, expected: str
) -> None:
    result = toolchain.tool(mechanism).run_sync(command=command)
    assert result["stdout"].strip() == expected, result


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_venv_python_is_the_same_inside_and_outside(
    toolchain: Toolchain, mechanism: str
) -> None:
    probe = "import sys; print(sys.executable, sys.prefix, sys.base_prefix)"
    outside = subprocess.run(
        ["python3", "-c", probe], env=toolchain.env, capture_output=True, text=True, check=True
    ).stdout
    result = toolchain.tool(mechanism).run_sync(command=f"python3 -c '{probe}'")
    assert result["stdout"] == outside, result
    assert str(toolchain.venv) in outside


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("secret", ["secret.txt", ".ssh/id_ed25519", ".cargo/credentials.toml"])
def test_secrets_in_the_home_stay_hidden_beside_the_toolchain(
    toolchain: Toolchain, mechanism: str, secret: str
) -> None:
    result = toolchain.tool(mechanism).run_sync(command=f"cat {toolchain.home / secret}")
    assert SECRET not in result["stdout"] + result["stderr"]


def test_toolchain_paths_derive_prefixes_from_path(toolchain: Toolchain) -> None:
    found = set(toolchain_paths(environ=toolchain.env))
    home = toolchain.home.resolve()
    assert home / ".pyenv" in found  # shims/ -> the pyenv root
    assert home / ".cargo" in found and home / ".toolchain" in found
    assert home / "venvs" / "proj" in found
    assert home not in found and home / ".ssh" not in found


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_exposed_paths_add_a_directory_the_path_does_not_name(
    toolchain: Toolchain, mechanism: str
) -> None:
    extra = toolchain.home / "data"
    extra.mkdir()
    (extra / "notes.txt").write_text("NOTES")
    hidden = toolchain.tool(mechanism).run_sync(command=f"cat {extra / 'notes.txt'}")
    assert "NOTES" not in hidden["stdout"]
    tool = bash_tool(
        workspace_root=toolchain.ws,
        isolation=mechanism,
        hidden_paths=[toolchain.home],
        env=toolchain.env,
        exposed_paths=[extra],
    )
    assert tool.run_sync(command=f"cat {extra / 'notes.txt'}")["stdout"] == "NOTES"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_program_hidden_inside_the_sandbox_is_a_typed_error(
    toolchain: Toolchain, mechanism: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found on the host's PATH at call time, but its directory was not on
    # PATH when the factory derived what to expose.
    late = toolchain.home / "late" / "bin"
    late.mkdir(parents=True)
    _script(late / "latetool", "echo LATE")
    tool = bash_tool(
        workspace_root=toolchain.ws, isolation=mechanism, hidden_paths=[toolchain.home]
    )
    monkeypatch.setenv("PATH", f"{late}{os.pathsep}{os.environ['PATH']}")
    result = tool.run_sync(command="latetool")
    assert result["return_code"] is None, result
    assert "not found on PATH inside the confinement" in result["error"]
    assert str(late) in result["error"]  # the PATH it searched


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_bin_directory_in_the_home_does_not_expose_the_home(
    toolchain: Toolchain, mechanism: str
) -> None:
    # ~/bin's prefix is the home itself: only the directory may show.
    own = toolchain.home / "bin"
    own.mkdir()
    _script(own / "homebin", "echo HOMEBIN")
    env = {**toolchain.env, "PATH": f"{own}{os.pathsep}{toolchain.env['PATH']}"}
    tool = bash_tool(
        workspace_root=toolchain.ws, isolation=mechanism, hidden_paths=[toolchain.home], env=env
    )
    assert tool.run_sync(command="homebin")["stdout"].strip() == "HOMEBIN"
    leaked = tool.run_sync(command=f"cat {toolchain.home / 'secret.txt'}")
    assert SECRET not in leaked["stdout"] + leaked["stderr"]


def test_slash_is_never_exposed(tmp_path: Path) -> None:
    policy = Policy(
        writable=[tmp_path], hidden=[tmp_path / "h"], exposed=["/", "/usr"], private_tmp=False
    )
    argv = Isolation("landlock", policy).launch(["true"], cwd=tmp_path, env={}).argv
    shown = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-x"]
    assert shown == ["/usr"]


def test_a_childless_program_skips_only_the_unconfined_pid_namespace(tmp_path: Path) -> None:
    unconfined = resolve_isolation("none", Policy(writable=(tmp_path,)))
    assert unconfined.policy.pid_namespace
    childless = unconfined.childless()
    assert not childless.policy.pid_namespace and not childless.wraps
    assert attrs.evolve(childless.policy, pid_namespace=True) == unconfined.policy
    if mechanism_problem("bwrap") is None:
        confined = resolve_isolation("bwrap", Policy(writable=(tmp_path,)))
        assert confined.childless() is confined


def test_a_workspace_policy_is_the_one_resolving_every_path_afresh_gives(tmp_path: Path) -> None:
    """The derived toolchain is taken as derived (resolved); extras and hidden ones are resolved."""
    from lionfactory._os.isolation import default_exposed, default_hidden

    real = tmp_path / "real-tools"
    real.mkdir()
    link = tmp_path / "tools-link"
    link.symlink_to(real)
    toolchain = default_exposed()
    extras = [link, toolchain[0], tmp_path / "missing"]  # a link, a duplicate, a missing path
    got = workspace_isolation("none", tmp_path, exposed=extras).policy
    afresh = Policy(
        writable=(str(tmp_path),),
        hidden=[str(p) for p in default_hidden()],
        exposed=[*map(str, toolchain), *map(str, extras)],
    )
    assert got.exposed == afresh.exposed
    assert got.hidden == afresh.hidden
    assert real in got.exposed and link not in got.exposed
    assert (
        workspace_isolation("none", tmp_path).policy.exposed
        == Policy(writable=(str(tmp_path),), exposed=[*map(str, toolchain)]).exposed
    )


def test_building_a_workspace_policy_resolves_no_derived_toolchain_path_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lionfactory._os.isolation import default_exposed

    derived = {str(p) for p in default_exposed()}
    asked: list[str] = []
    realpath = os.path.realpath

    def counting(path: str | os.PathLike[str], **kwargs: bool) -> str:
        asked.append(os.fspath(path))
        return realpath(path, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(os.path, "realpath", counting)
    workspace_isolation("none", tmp_path)
    assert not derived & set(asked), sorted(derived & set(asked))


@pytest.mark.skipif(mechanism_problem("landlock") is not None, reason="landlock unavailable")
def test_landlock_refuses_to_hide_a_path_inside_the_workspace_and_auto_says_it_cannot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Landlock only adds access beneath a folder: in the writable workspace a
    # hidden .env stays readable to commands, so asking for it is refused
    # rather than silently not done.
    (tmp_path / ".env").write_text("TOKEN=1\n")
    inside = [tmp_path / ".env"]
    with pytest.raises(ConfigurationError, match=r"cannot hide .*\.env.*isolation='bwrap'"):
        bash_tool(workspace_root=tmp_path, isolation="landlock", hidden_paths=inside)
    outside = tmp_path.parent / f"{tmp_path.name}-secret"
    tool = bash_tool(workspace_root=tmp_path, isolation="landlock", hidden_paths=[outside])
    assert "cannot hide" not in tool.description
    # "auto" without bwrap still confines with landlock, and says what it cannot do.
    from lionfactory._os import isolation as isolation_module

    real = isolation_module.mechanism_problem
    monkeypatch.setattr(
        isolation_module,
        "mechanism_problem",
        lambda m, network="none": "not here (the test)" if m == "bwrap" else real(m, network),
    )
    auto = bash_tool(workspace_root=tmp_path, isolation="auto", hidden_paths=inside)
    assert "isolation: landlock" in auto.description
    assert "Landlock cannot hide" in auto.description and ".env" in auto.description

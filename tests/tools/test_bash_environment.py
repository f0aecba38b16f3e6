"""``bash``'s environment policy and the notices that explain a refused command."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from _test_helpers import mechanism_params

from lionfactory.tools import EnvPolicy, bash_tool

PY = sys.executable
SECRET_VALUE = "sk-test-value-9f2c"
PRINT_ENV = f'{PY} -c "import os; print(sorted(os.environ))"'
NEEDS_KEY = f"{PY} -c \"import os; print(os.environ['LF_TEST_API_KEY'])\""


MECHANISMS = mechanism_params()


@pytest.fixture(autouse=True)
def secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LF_TEST_API_KEY", SECRET_VALUE)


def test_standalone_bash_without_a_policy_inherits_everything(tmp_path: Path) -> None:
    # Documented: the standalone default keeps today's behaviour.
    result = bash_tool(workspace_root=tmp_path).run_sync(command=PRINT_ENV)
    assert "LF_TEST_API_KEY" in result["stdout"]


@pytest.mark.parametrize("isolation", ["none", *MECHANISMS])
def test_a_policy_withholds_secret_names_from_the_command(tmp_path: Path, isolation: str) -> None:
    tool = bash_tool(workspace_root=tmp_path, isolation=isolation, env_policy=EnvPolicy())
    result = tool.run_sync(command=PRINT_ENV)
    assert "LF_TEST_API_KEY" not in result["stdout"]
    assert "'PATH'" in result["stdout"]


@pytest.mark.parametrize("isolation", ["none", *MECHANISMS])
def test_a_command_failing_on_a_withheld_variable_is_told_its_name_only(
    tmp_path: Path, isolation: str
) -> None:
    tool = bash_tool(workspace_root=tmp_path, isolation=isolation, env_policy=EnvPolicy())
    result = tool.run_sync(command=NEEDS_KEY)
    assert result["return_code"] != 0
    assert "withheld LF_TEST_API_KEY" in result["notice"]
    assert SECRET_VALUE not in str(result)


def test_a_policy_applies_to_the_factorys_env_too(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"], "MY_TOKEN": "t", "KEEP": "k"}
    tool = bash_tool(workspace_root=tmp_path, env=env, env_policy=EnvPolicy(set={"ADDED": "a"}))
    result = tool.run_sync(command=PRINT_ENV)
    assert "MY_TOKEN" not in result["stdout"]
    assert "'KEEP'" in result["stdout"] and "'ADDED'" in result["stdout"]


def test_a_successful_command_gets_no_withheld_notice(tmp_path: Path) -> None:
    tool = bash_tool(workspace_root=tmp_path, env_policy=EnvPolicy())
    result = tool.run_sync(command=PRINT_ENV)
    assert result["return_code"] == 0 and result["notice"] is None


def test_env_policy_must_be_a_policy(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="env_policy"):
        bash_tool(workspace_root=tmp_path, env_policy={"inherit": "core"})  # type: ignore[arg-type]


RESOLVE = f"{PY} -c \"import socket; socket.getaddrinfo('pypi.org', 443)\""
CONNECT_LOCAL = f"{PY} -c \"import socket; socket.create_connection(('127.0.0.1', 9), 5)\""


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("command", [RESOLVE, CONNECT_LOCAL], ids=["resolve", "connect"])
def test_a_network_failure_names_the_network_setting(
    tmp_path: Path, mechanism: str, command: str
) -> None:
    result = bash_tool(workspace_root=tmp_path, isolation=mechanism).run_sync(command=command)
    assert result["return_code"] != 0
    assert "network='none'" in result["notice"], result


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_write_outside_the_roots_names_the_writable_roots(tmp_path: Path, mechanism: str) -> None:
    # Outside /tmp: bwrap's private /tmp would make the directory vanish instead.
    outside = Path(tempfile.mkdtemp(prefix="lionfactory-test-", dir="/var/tmp"))
    try:
        tool = bash_tool(workspace_root=tmp_path, isolation=mechanism)
        result = tool.run_sync(command=f"touch {outside}/x")
        assert result["return_code"] != 0
        assert f"writable roots ({tmp_path.resolve()})" in result["notice"], result
        assert not (outside / "x").exists()
    finally:
        shutil.rmtree(outside)


def test_an_unconfined_failure_gets_no_sandbox_notice(tmp_path: Path) -> None:
    result = bash_tool(workspace_root=tmp_path).run_sync(command="touch /proc/lf-nope")
    assert result["return_code"] != 0
    assert result["notice"] is None

"""`EnvPolicy`: the environment a started program gets, step by step as documented."""

from __future__ import annotations

import pytest

from lionfactory._os.environment import CORE_NAMES, EnvPolicy
from lionfactory.tools import EnvPolicy as PublicEnvPolicy

BASE = {
    "PATH": "/usr/bin",
    "HOME": "/home/u",
    "VIRTUAL_ENV": "/home/u/.venv",
    "OPENAI_API_KEY": "sk-live-1",
    "github_token": "ghp-2",
    "DB_PASSWORD": "hunter2",
    "AWS_SECRET_ACCESS_KEY": "aws-3",
    "GOOGLE_APPLICATION_CREDENTIALS": "/k.json",
    "EDITOR": "vim",
}


def test_the_policy_is_public_from_the_tools_package() -> None:
    assert PublicEnvPolicy is EnvPolicy


def test_all_drops_secret_looking_names_case_insensitively() -> None:
    result = EnvPolicy().apply(BASE)
    assert dict(result.variables) == {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "VIRTUAL_ENV": "/home/u/.venv",
        "EDITOR": "vim",
    }
    assert result.withheld == (
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "OPENAI_API_KEY",
        "github_token",
    )


def test_ignore_default_excludes_keeps_everything() -> None:
    result = EnvPolicy(ignore_default_excludes=True).apply(BASE)
    assert dict(result.variables) == BASE
    assert result.withheld == ()


def test_core_keeps_only_core_names_including_the_python_environment() -> None:
    result = EnvPolicy(inherit="core").apply(BASE)
    assert set(result.variables) == {"PATH", "HOME", "VIRTUAL_ENV"}
    assert {"PATH", "HOME", "USER", "LANG", "TERM", "TMPDIR", "VIRTUAL_ENV"} <= CORE_NAMES
    assert "EDITOR" in result.withheld


def test_none_starts_empty_and_set_adds() -> None:
    result = EnvPolicy(inherit="none", set={"A": "1"}).apply(BASE)
    assert dict(result.variables) == {"A": "1"}
    assert set(result.withheld) == set(BASE)


def test_exclude_then_set_then_include_only_in_that_order() -> None:
    policy = EnvPolicy(
        exclude=["ED*"],
        # set comes after the excludes: a key given on purpose is kept ...
        set={"OPENAI_API_KEY": "given", "EXTRA": "x"},
        # ... and include_only comes last, so it filters set too.
        include_only=["PATH", "OPENAI_*"],
    )
    result = policy.apply(BASE)
    assert dict(result.variables) == {"PATH": "/usr/bin", "OPENAI_API_KEY": "given"}
    assert "EDITOR" in result.withheld and "EXTRA" not in result.withheld


def test_no_base_means_the_environment_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LF_TEST_TOKEN", "t")
    monkeypatch.setenv("LF_TEST_PLAIN", "p")
    result = EnvPolicy().apply()
    assert result.variables["LF_TEST_PLAIN"] == "p"
    assert "LF_TEST_TOKEN" in result.withheld and "LF_TEST_TOKEN" not in result.variables


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"inherit": "some"}, ValueError),
        ({"exclude": "KEY"}, TypeError),
        ({"include_only": [""]}, TypeError),
        ({"set": {"A=B": "x"}}, ValueError),
        ({"set": {"A": 1}}, TypeError),
        ({"set": {"A": "x\x00"}}, ValueError),
        ({"ignore_default_excludes": "yes"}, TypeError),
    ],
)
def test_invalid_options_are_refused(options: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        EnvPolicy(**options)  # type: ignore[arg-type]


def test_the_policy_is_frozen() -> None:
    policy = EnvPolicy(set={"A": "1"})
    with pytest.raises(AttributeError):
        policy.inherit = "none"  # type: ignore[misc]
    with pytest.raises(TypeError):
        policy.set["B"] = "2"  # type: ignore[index]

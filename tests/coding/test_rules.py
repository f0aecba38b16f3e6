"""Permission rules: globs on bash's simple commands and on paths; examples checked at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from lionfactory.coding import Rule
from lionfactory.coding.rules import MODES, RuleHook, mode_rules, simple_commands
from lionfactory.errors import ApprovalRequired, ToolDenied


def test_simple_commands_look_through_operators_wrappers_and_inner_scripts() -> None:
    assert simple_commands("cd src && /usr/bin/git push origin; ls | wc -l") == [
        "cd src",
        "git push origin",
        "ls",
        "wc -l",
    ]
    assert simple_commands("env A=1 timeout 5 rm -rf x") == ["rm -rf x"]
    assert "git push" in simple_commands("sh -c 'echo hi && git push'")


def test_a_bash_rule_matches_any_simple_command_of_the_script() -> None:
    rule = Rule("bash", "git push*", "ask")
    assert rule.matches("bash", {"command": "make && git push origin main"})
    assert not rule.matches("bash", {"command": "git status"})
    assert not rule.matches("bash", {"command": "echo 'git push'"})
    assert not rule.matches("editor", {"command": "git push"})


def test_a_path_rule_matches_the_normalised_path(tmp_path: Path) -> None:
    rule = Rule("editor", "secrets/*", "deny")
    assert rule.matches("editor", {"file_path": "secrets/key.pem"})
    assert rule.matches("editor", {"file_path": "./docs/../secrets/key.pem"})
    assert rule.matches("editor", {"file_path": f"{tmp_path}/secrets/k"}, tmp_path)
    assert not rule.matches("editor", {"file_path": "src/secrets.py"})
    # A missing or malformed path argument never crashes a rule.
    assert not rule.matches("editor", {"file_path": 3})


def test_code_check_paths_are_each_matched() -> None:
    rule = Rule("code_check", "vendor/*", "deny")
    assert rule.matches("code_check", {"paths": ["src/a.py", "vendor/b.py"]})
    assert not rule.matches("code_check", {"paths": ["src/a.py"]})


def test_an_example_the_rule_does_not_match_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="does not match its example 'git push'"):
        Rule("bash", "git push *", "ask", examples=["git push"])


def test_a_counterexample_the_rule_matches_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="matches its counterexample"):
        Rule("bash", "git*", "ask", counterexamples=["git status"])


def test_examples_of_a_consistent_rule_pass() -> None:
    rule = Rule(
        "bash",
        "rm -r*",
        "deny",
        examples=["rm -rf build", "cd x && rm -r y"],
        counterexamples=["rm file.txt", "echo rm -rf"],
    )
    assert rule.examples == ("rm -rf build", "cd x && rm -r y")


def test_malformed_rules_are_refused() -> None:
    with pytest.raises(ValueError, match="decision"):
        Rule("bash", "x", "maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="only bash"):
        Rule("context", "x*", "ask")
    with pytest.raises(TypeError):
        Rule("bash", "", "ask")
    with pytest.raises(ValueError, match="unknown keys"):
        Rule.from_dict({"tool": "bash", "glob": "x"})


def test_rules_round_trip_through_json_data() -> None:
    rule = Rule("bash", "git push*", "ask", "pushes", examples=["git push"])
    assert Rule.from_dict(rule.to_dict()) == rule


def test_the_strictest_matching_rule_decides() -> None:
    hook = RuleHook(
        (
            Rule("bash", "git *", "allow"),
            Rule("bash", "git push*", "ask", reason="pushes"),
            Rule("bash", "git push --force*", "deny", reason="rewrites history"),
        )
    )
    assert hook.decide("bash", {"command": "git status"})[0] == "allow"
    assert hook.decide("bash", {"command": "git push"})[0] == "ask"
    assert hook.decide("bash", {"command": "git push --force origin"})[0] == "deny"
    assert hook.decide("bash", {"command": "ls"}) == ("allow", None)
    with pytest.raises(ApprovalRequired, match="pushes") as asked:
        hook("bash", {"command": "git push"})
    assert asked.value.hook == "rule bash 'git push*' -> ask"
    with pytest.raises(ToolDenied, match="rewrites history"):
        hook("bash", {"command": "git status; git push --force"})


def test_every_mode_expands_to_rules_and_an_unknown_mode_is_refused() -> None:
    assert set(MODES) == {"read_only", "ask_edits", "accept_edits", "auto"}
    assert mode_rules("auto") == () and mode_rules(None) == ()
    decisions = {r.tool: r.decision for r in mode_rules("accept_edits")}
    assert decisions == {"bash": "ask", "sandbox": "ask"}
    with pytest.raises(ValueError, match="mode must be one of"):
        mode_rules("yolo")


_DENY_RM = RuleHook((Rule("bash", match="rm *", decision="deny", reason="no deleting"),))


@pytest.mark.parametrize(
    "script",
    [
        "true && rm -rf d",
        "echo $(rm -rf d)",
        'echo "done: `rm -rf d`"',
        "ls | xargs rm -rf",
        "ls | xargs -n 1 rm -rf",
        "(cd sub; rm -rf d)",
        "{ rm -rf d; }",
        "for f in a b; do rm -rf $f; done",
        "f() { rm -rf d; }; f",
        "cat <<EOF\n$(rm -rf d)\nEOF",
        "cat <<EOF > out\n`rm -rf d`\nEOF",
        "diff <(rm -rf d) b",
        "env -i timeout 5 rm -rf d",
        "bash -c 'true; rm -rf d'",
        "sh -c \"sh -c 'rm -rf d'\"",
        "eval 'rm -rf' d",
        'eval "true && rm -rf d"',
        "bash <<EOF\nrm -rf d\nEOF",
        "env sh <<'X'\ntrue; rm -rf d\nX",
        "bash <<< 'rm -rf d'",
    ],
)
def test_a_deny_glob_refuses_a_command_anywhere_in_the_script(script: str) -> None:
    with pytest.raises(ToolDenied, match="no deleting"):
        _DENY_RM("bash", {"command": script})


@pytest.mark.parametrize(
    "script",
    ["echo rm -rf d", "echo 'rm -rf d'", "cat <<'EOF'\nrm -rf d\nEOF", "grep 'rm *' notes"],
)
def test_a_deny_glob_lets_text_that_only_mentions_the_command_run(script: str) -> None:
    _DENY_RM("bash", {"command": script})


def test_an_ask_glob_holds_a_push_after_cd() -> None:
    hook = RuleHook((Rule("bash", match="git push*", decision="ask", reason="pushes"),))
    with pytest.raises(ApprovalRequired, match="pushes"):
        hook("bash", {"command": "cd x && git push origin main"})
    hook("bash", {"command": "cd x && git status"})


@pytest.mark.parametrize(
    "script", ["echo 'unclosed", "ls && (", "rm -rf d\nif then fi", "sh -c 'a ('"]
)
def test_a_script_that_does_not_parse_is_denied_even_by_allow_rules(script: str) -> None:
    hook = RuleHook((Rule("bash", match="*", decision="allow"),))
    assert hook.decide("bash", {"command": script}) == ("deny", None)
    with pytest.raises(ToolDenied, match="could not be checked against the approval rules"):
        hook("bash", {"command": script})


def test_without_bash_globs_the_rules_do_not_read_the_script() -> None:
    hook = RuleHook((Rule("editor", match="*.lock", decision="deny"),))
    hook("bash", {"command": "echo 'unclosed"})


def test_a_rule_example_that_is_not_shell_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="not valid shell"):
        Rule("bash", "git push*", "ask", examples=["git push 'origin"])


def test_examples_are_strings_or_a_type_error_names_the_other_item() -> None:
    assert Rule("bash", "git push *", "ask", examples="git push x").examples == ("git push x",)
    with pytest.raises(TypeError, match=r"rule examples must be strings, got 3"):
        Rule("bash", "git push *", "ask", examples=["git push x", 3])  # type: ignore[list-item]

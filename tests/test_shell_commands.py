"""normalized_commands: the one reading of a script both command policies share.

Every attack form here must be caught by a permission `Rule` on bash and by
`deny_destructive_commands` alike: the two read commands through the same
normalization and the same nesting limit.
"""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lionfactory._shell.commands import MAX_NESTING, ShellTooDeep, normalized_commands
from lionfactory.coding import Rule, deny_destructive_commands
from lionfactory.coding.rules import RuleHook, simple_commands
from lionfactory.errors import ApprovalRequired, ToolDenied


def texts(script: str) -> list[str]:
    return [command.text for command in normalized_commands(script)]


def policy_denies(command: str) -> bool:
    try:
        deny_destructive_commands("bash", {"command": command})
    except ToolDenied:
        return True
    return False


def rule_denies(glob: str, command: str) -> bool:
    try:
        RuleHook((Rule("bash", glob, "deny"),))("bash", {"command": command})
    except ToolDenied:
        return True
    return False


# Each form runs `rm -rf d` (bash would run it so); both policies must refuse it.
RM_FORMS = {
    "eval --": "eval -- 'rm -rf d'",
    "eval": "eval rm -rf d",
    "continuation in the program": "r\\\nm -rf d",
    "continuation in an argument": "rm -r\\\nf d",
    "continuation in double quotes": '"r\\\nm" -rf d',
    "ANSI-C unicode escape": "$'\\u0072m' -rf d",
    "ANSI-C long unicode escape": "$'\\U00000072\\U0000006d' -rf d",
    "ANSI-C hex and octal": "$'\\x72\\155' -rf d",
    "coproc": "coproc rm -rf d",
    "named coproc": "coproc X { rm -rf d; }",
    "bash --rcfile": "bash --rcfile F -c 'rm -rf d'",
    "bash --init-file": "bash --init-file F -c 'rm -rf d'",
    "bash -o option": "bash -o errexit -c 'rm -rf d'",
    "sh -xc cluster": "sh -xec 'rm -rf d'",
    "find -exec": "find . -exec rm -rf {} +",
    "find -execdir": "find . -execdir rm -rf {} \\;",
    "find -ok": "find . -ok rm -rf {} \\;",
    "find -exec sh -c": "find . -exec sh -c 'rm -rf \"$1\"' _ {} \\;",
    "env": "env -i A=1 rm -rf d",
    "command": "command rm -rf d",
    "builtin": "builtin rm -rf d",
    "exec": "exec -a x rm -rf d",
    "nice": "nice -n 5 rm -rf d",
    "timeout": "timeout -s KILL 5 rm -rf d",
    "nohup": "nohup rm -rf d",
    "stdbuf": "stdbuf -o L rm -rf d",
    "sudo": "sudo -u root rm -rf d",
    "xargs": "echo d | xargs -n 1 rm -rf",
    "here-document to bash": "bash <<EOF\nrm -rf d\nEOF",
    "here-string to sh": "sh <<< 'rm -rf d'",
    "echo piped into sh": "echo 'rm -rf d' | sh",
    "printf piped into bash": "printf 'rm -rf d' | bash -s",
    "source /dev/stdin": "source /dev/stdin <<< 'rm -rf d'",
    ". /dev/stdin": ". /dev/stdin <<EOF\nrm -rf d\nEOF",
    "continuation in a here-document": "bash <<EOF\nr\\\nm -rf d\nEOF",
    "here-document opening with a backslash": "bash <<'EOF'\n\\rm -rf d\nEOF",
}


@pytest.mark.parametrize("command", RM_FORMS.values(), ids=RM_FORMS.keys())
def test_every_wrapper_and_quoting_form_is_denied_by_both_policies(command: str) -> None:
    assert any(text.startswith("rm -rf") for text in texts(command))
    assert rule_denies("rm -rf*", command)
    assert policy_denies(command)


GIT_RESET_FORMS = {
    "continuation": "g\\\nit reset --hard",
    "git -C": "git -C . reset --hard",
    "git -c": "git -c a=b reset --hard",
    "eval --": "eval -- git reset --hard",
}


@pytest.mark.parametrize("command", GIT_RESET_FORMS.values(), ids=GIT_RESET_FORMS.keys())
def test_git_reset_forms_are_denied_by_both_policies(command: str) -> None:
    assert rule_denies("git reset --hard*", command)
    assert policy_denies(command)


@pytest.mark.parametrize(
    "command",
    [
        "git -C . push",
        "git -c a=b push origin main",
        "git --git-dir=.git --work-tree=. push",
        "git --git-dir .git --work-tree . push",
        "git --no-pager push",
        "git -P push",
        "cd x && git -C sub push",
    ],
)
def test_a_git_push_rule_sees_past_git_global_options(command: str) -> None:
    """The README's own recipe: `git push*` asks for `git -C . push` too."""
    rule = Rule("bash", "git push*", "ask")
    with pytest.raises(ApprovalRequired):
        RuleHook((rule,))("bash", {"command": command})


def test_git_global_options_stay_visible_to_a_rule_written_for_them() -> None:
    assert Rule("bash", "git -c *", "deny").matches("bash", {"command": "git -c a=b push"})
    assert texts("git -c a=b push") == ["git push"]


def test_a_rule_on_a_wrapper_still_matches_the_command_as_written() -> None:
    assert Rule("bash", "sudo *", "deny").matches("bash", {"command": "sudo -u x ls"})
    assert Rule("bash", "timeout *", "deny").matches("bash", {"command": "timeout 5 make"})


def test_examples_may_name_the_forms_looked_through() -> None:
    rule = Rule(
        "bash",
        "git push*",
        "ask",
        examples=["git -C . push", "git -c a=b push", "eval -- 'git push'", "g\\\nit push"],
        counterexamples=["git -C push status", "echo git push"],
    )
    assert rule.examples[0] == "git -C . push"
    with pytest.raises(ValueError, match="does not match its example"):
        Rule("bash", "git push*", "ask", examples=["git status"])


def nest_here_documents(command: str, levels: int) -> str:
    for level in range(levels):
        command = f"bash <<E{level}\n{command}\nE{level}"
    return command


def nest_substitutions(command: str, levels: int) -> str:
    for _ in range(levels):
        command = f"echo $({command})"
    return command


@pytest.mark.parametrize("nest", [nest_here_documents, nest_substitutions])
def test_one_nesting_limit_denies_for_both_policies(nest: object) -> None:
    assert callable(nest)
    inside = nest("ls", MAX_NESTING)
    assert texts(inside)[-1] == "ls"
    too_deep = nest("ls", MAX_NESTING + 1)
    with pytest.raises(ShellTooDeep):
        normalized_commands(too_deep)
    assert policy_denies(too_deep)
    assert rule_denies("rm *", too_deep)  # a rule set with bash globs refuses it
    assert Rule("bash", "rm *", "deny").matches("bash", {"command": too_deep})
    # Nine here-documents deep, with the destructive command at the bottom.
    assert policy_denies(nest("rm -rf d", MAX_NESTING + 1))
    assert rule_denies("rm -rf*", nest("rm -rf d", MAX_NESTING + 1))


def test_backticks_nested_in_here_documents_stop_at_a_bound() -> None:
    script = "ls"
    for level in range(12):
        inner = script.replace("\\", "\\\\").replace("`", "\\`").replace("$", "\\$")
        script = f"cat <<E{level}\n`{inner}`\nE{level}"
    assert policy_denies(script)
    with pytest.raises(ShellTooDeep):
        normalized_commands(script)


def test_the_same_here_document_fed_to_many_shells_is_read_once() -> None:
    body = "rm -rf d"
    script = "{ " + "sh; " * 50 + "} <<EOF\n" + body + "\nEOF"
    assert texts(script).count("rm -rf d") == 1
    assert policy_denies(script)


def test_rules_and_the_policy_share_the_normalization() -> None:
    script = "sudo timeout 5 env A=1 bash --rcfile F -c 'git -C . push -f'"
    assert simple_commands(script)[-1] == "git push -f"
    assert policy_denies(script)


# -- the property: every wrapper and quoting form of a denied command is denied


DENIED = [
    (("rm", "-rf", "d"), "rm *"),
    (("rm", "-r", "-f", "d"), "rm *"),
    (("git", "reset", "--hard"), "git reset --hard*"),
    (("git", "push", "--force"), "git push*"),
    (("git", "clean", "-fd"), "git clean*"),
]

WRAPPERS = [
    (),
    ("env", "A=1"),
    ("env", "-i"),
    ("command",),
    ("builtin",),
    ("exec",),
    ("nice", "-n", "5"),
    ("timeout", "5"),
    ("timeout", "-k", "1", "5"),
    ("nohup",),
    ("stdbuf", "-oL"),
    ("sudo", "-u", "root"),
    ("xargs",),
    ("coproc",),
    ("time",),
]


def _ansi_c(word: str) -> str:
    return "$'" + "".join(f"\\u{ord(char):04x}" for char in word) + "'"


def _word(word: str, style: int) -> str:
    if style == 1:
        return "'" + word + "'"
    if style == 2:
        return '"' + word + '"'
    if style == 3:
        return _ansi_c(word)
    if style == 4 and len(word) > 1:
        return word[:1] + "\\\n" + shlex.quote(word[1:])
    if style == 5:
        return "".join("\\" + char for char in word)
    return shlex.quote(word)


def _quoted_script(script: str, style: int) -> str:
    if style == 1:
        escaped = "".join("\\" + c if c in '"$`\\' else c for c in script)
        return '"' + escaped + '"'
    if style == 2:
        return "$'" + script.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    return shlex.quote(script)


@st.composite
def scripts(draw: st.DrawFn) -> tuple[str, str]:
    argv, glob = draw(st.sampled_from(DENIED))
    wrappers = draw(st.lists(st.sampled_from(WRAPPERS), max_size=3))
    words = [w for wrapper in wrappers for w in wrapper] + list(argv)
    # Wrapper words are written plainly, the command's own in any quoting.
    plain = len(words) - len(argv)
    styles = draw(st.lists(st.integers(0, 5), min_size=len(argv), max_size=len(argv)))
    rendered = [shlex.quote(w) for w in words[:plain]]
    rendered += [_word(w, s) for w, s in zip(argv, styles, strict=True)]
    if draw(st.booleans()):
        rendered = ["find", ".", "-exec", *rendered, "+"]
    script = " ".join(rendered)
    for level in range(draw(st.integers(0, 3))):
        kind = draw(st.integers(0, 11))
        quoted = _quoted_script(script, draw(st.integers(0, 2)))
        script = [
            f"sh -c {quoted}",
            f"bash --rcfile F -c {quoted}",
            f"bash -xc {quoted}",
            f"eval {quoted}",
            f"eval -- {quoted}",
            f"bash <<'E{level}'\n{script}\nE{level}",
            # An unquoted delimiter undoes escapes: only for text without any.
            f"sh <<E{level}\n{script}\nE{level}"
            if not set(script) & set("\\$`")
            else f"sh <<'E{level}'\n{script}\nE{level}",
            f"echo $({script})",
            f"true && {{ {script}; }}",
            f"( {script} )",
            f"x=$({script})",
            f"if true; then {script}; fi",
        ][kind]
    return script, glob


@settings(max_examples=300, deadline=None)
@given(scripts())
def test_every_generated_form_of_a_denied_command_is_denied_by_both(case: tuple[str, str]) -> None:
    script, glob = case
    assert rule_denies(glob, script), script
    assert policy_denies(script), script


@pytest.mark.parametrize("command", ["sudo -i", "sudo", "doas -s", "sudo -u root", "env sudo -s"])
def test_a_wrapper_with_no_program_is_judged_as_the_program(command: str) -> None:
    """`sudo -i` runs a root shell: with nothing behind it, the wrapper itself is the command."""
    assert policy_denies(command)
    assert rule_denies("sudo*", command) or rule_denies("doas*", command)

"""deny_destructive_commands: what it denies, what it lets through, and how a denial reads."""

from __future__ import annotations

import contextlib
import json
import shlex
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lionfactory import Branch
from lionfactory.coding.policies import _check_script, deny_destructive_commands
from lionfactory.errors import ToolDenied
from lionfactory.tools.bash import MAX_COMMAND_CHARS, bash_tool


def denial(command: str) -> str | None:
    """The denial reason for `command`, or None when it passes."""
    try:
        deny_destructive_commands("bash", {"command": command})
    except ToolDenied as exc:
        return exc.reason
    return None


DENIED = {
    "rm -rf": "rm -rf build",
    "rm -fr": "rm -fr build",
    "rm -Rf": "rm -Rf build",
    "rm -r -f": "rm -r -f build",
    "rm -f -r": "rm -f -r build",
    "rm long": "rm --recursive --force build",
    "rm long abbreviated": "rm --rec --forc build",
    "rm flags after operand": "rm build -rf",
    "rm cluster with v": "rm -vrf build",
    "absolute rm": "/bin/rm -rf build",
    "rm no-preserve-root": "rm --no-preserve-root -r /",
    "git reset --hard": "git reset --hard",
    "git reset --hard ref": "git reset --hard HEAD~3",
    "git -C reset --hard": "git -C sub reset --hard",
    "git push --force": "git push --force origin main",
    "git push -f": "git push -f",
    "git push -uf": "git push -uf origin main",
    "git push --force-with-lease": "git push --force-with-lease",
    "git push --force-with-lease=ref": "git push --force-with-lease=main:abc origin main",
    "git push +refspec": "git push origin +main",
    "git push --mirror": "git push --mirror backup",
    "git clean -f": "git clean -f",
    "git clean -fdx": "git clean -fdx",
    "git clean --force": "git clean --force -d",
    "sudo": "sudo apt-get install x",
    "absolute sudo": "/usr/bin/sudo ls",
    "doas": "doas ls",
    "su -c": "su -c whoami",
    "mkfs": "mkfs -t ext4 /dev/sdb1",
    "mkfs.ext4": "mkfs.ext4 /dev/sdb1",
    "wipefs": "wipefs -a /dev/sdb",
    "shred": "shred -u notes.txt",
    "dd to a device": "dd if=/dev/zero of=/dev/sda bs=1M",
    "chmod -R 777": "chmod -R 777 .",
    "chmod -R on /": "chmod -R 755 /",
    "chown -R on /etc": "chown -R me /etc",
    "shutdown": "shutdown -h now",
    "env wrapper": "env FOO=1 rm -rf build",
    "assignment prefix": "FOO=1 BAR=2 rm -rf build",
    "timeout wrapper": "timeout -s KILL 5 rm -rf build",
    "nice wrapper": "nice -n 10 git reset --hard",
    "xargs": "xargs -0 rm -rf",
    "find -exec": "find . -name cache -exec rm -rf {} ;",
    "sh -c": "sh -c 'rm -rf build'",
    "bash -ec list": "bash -ec 'echo start; git push --force'",
    "env -S": "env -S 'sudo ls'",
    "second command of a list": "echo hi; rm -rf build",
    "substitution in double quotes": 'echo "$(rm -rf build)"',
    "unclosed quote": "rm -rf 'build",
    "env -S in a cluster": "env -iS'rm -rf d'",
    "env -S then arguments": "env -S rm -rf d",
    "env --split-string=": "env --split-string='rm -rf d'",
    "env -u then -S": "env -u HOME -S 'rm -rf d'",
    "git clean with requireForce off": "git -c clean.requireForce=false clean -dx",
    "git clean without -f": "git clean -d",
    "git --attr-source reset --hard": "git --attr-source HEAD reset --hard",
    "git unknown option before reset": "git --frobnicate HEAD reset --hard",
    "dd of=//dev": "dd if=/dev/zero of=//dev/sda",
    "dd of=/./dev": "dd if=/dev/zero of=/./dev/sda",
    "dd of=/proc/self/root": "dd if=/dev/zero of=/proc/self/root/dev/sda",
    "dd of=/proc/1/root": "dd if=/dev/zero of=/proc/1/root/dev/sda",
    "dd of=../../dev": "dd if=/dev/zero of=../../../../dev/sda",
    "mkdosfs": "mkdosfs /dev/sdb1",
    "mkntfs": "mkntfs -f /dev/sdb1",
    "chmod -R 1777": "chmod -R 1777 .",
    "chmod -R go+w": "chmod -R go+w .",
    "chmod -R a+rwX": "chmod -R a+rwX .",
    "chmod -R o=rwx": "chmod -R u+r,o=rwx src",
    "systemctl reboot": "systemctl reboot",
    "systemctl poweroff": "systemctl --force poweroff",
    "loginctl poweroff": "loginctl poweroff",
    "init 0": "init 0",
    "telinit 6": "telinit 6",
    "sudoedit": "sudoedit /etc/hosts",
}

ALLOWED = {
    "rm one file": "rm notes.txt",
    "rm -r without force": "rm -r build",
    "rm -f without recursion": "rm -f notes.txt",
    "rm file named -rf after --": "rm -- -rf",
    "git reset --soft": "git reset --soft HEAD~1",
    "git reset file": "git reset src/app.py",
    "git push": "git push origin main",
    "git push --no-force-with-lease": "git push --no-force-with-lease",
    "git clean dry run": "git clean -fdn",
    "git status": "git status",
    "git commit mentioning sudo": "git commit -m 'drop sudo from the docs'",
    "echo a dangerous text": "echo rm -rf /",
    "grep for a dangerous text": "grep -rn 'rm -rf' .",
    "quoted semicolon": "grep ';' notes.txt sudo",
    "dd to a file": "dd if=/dev/zero of=blank.img bs=1K count=1",
    "dd to /dev/null": "dd if=big.bin of=/dev/null",
    "chmod -R in the project": "chmod -R u+w build",
    "chmod 777 one file": "chmod 777 run.sh",
    "find -delete": "find . -name '*.pyc' -delete",
    "bash running a script": "bash scripts/test.sh",
    "pytest": "pytest -x tests",
    "git clean -n": "git clean -n -d",
    "git log grepping reset": "git log --grep reset",
    "git commit message naming reset": "git commit -m 'reset --hard was wrong'",
    "dd to a file under a dev folder name": "dd if=/dev/zero of=build/dev.img",
    "dd to //dev/null": "dd if=big.bin of=//dev//null",
    "chmod -R g+w": "chmod -R g+w build",
    "chmod -R 755": "chmod -R 755 build",
    "chmod -R u+rwX": "chmod -R u+rwX build",
    "systemctl status": "systemctl status nginx",
    "env running a harmless program": "env -i PATH=/bin ls -la",
    "env -S harmless": "env -S 'echo hi'",
}


@pytest.mark.parametrize("command", DENIED.values(), ids=DENIED.keys())
def test_destructive_command_is_denied(command: str) -> None:
    assert denial(command) is not None


@pytest.mark.parametrize("command", ALLOWED.values(), ids=ALLOWED.keys())
def test_ordinary_command_passes(command: str) -> None:
    assert denial(command) is None


def test_the_hook_returns_none_so_arguments_are_unchanged() -> None:
    arguments = {"command": "ls -la"}
    assert deny_destructive_commands("bash", arguments) is None
    assert arguments == {"command": "ls -la"}


@pytest.mark.parametrize("tool_name", ["editor", "reader", "search", "BASH"])
def test_other_tools_are_ignored(tool_name: str) -> None:
    assert deny_destructive_commands(tool_name, {"command": "rm -rf /"}) is None


@pytest.mark.parametrize("arguments", [{}, {"command": None}, {"command": ["rm", "-rf", "x"]}])
def test_a_missing_or_mistyped_command_is_left_to_validation(arguments: dict[str, object]) -> None:
    assert deny_destructive_commands("bash", arguments) is None


@pytest.mark.parametrize(
    ("command", "advice"),
    [
        ("rm -rf build", "rm <file>"),
        ("git reset --hard", "git stash"),
        ("git push --force", "without force"),
        ("git clean -fd", "git clean -n"),
        ("sudo ls", "without it"),
    ],
)
def test_the_reason_names_the_command_and_what_to_do_instead(command: str, advice: str) -> None:
    reason = denial(command)
    assert reason is not None
    assert "denied" in reason
    assert advice in reason
    assert "deny_destructive_commands" in reason


RECURSIVE = ["-r", "-R", "--recursive", "--recu"]
FORCE = ["-f", "--force", "--forc"]
CLUSTERS = ["-rf", "-fr", "-Rf", "-fR", "-rfv", "-vfr", "-frv"]
NAME = st.text(st.sampled_from("abcxyz_.-/0123456789 "), min_size=1, max_size=12).filter(
    lambda name: not name.startswith("-")
)
PREFIX = st.sampled_from(["", "/bin/", "/usr/bin/", "env A=1 ", "timeout 9 ", "nice -n 5 "])


@st.composite
def recursive_forced_rm(draw: st.DrawFn) -> str:
    """An rm that deletes recursively and by force, in any spelling and argument order."""
    if draw(st.booleans()):
        flags = [draw(st.sampled_from(CLUSTERS))]
    else:
        flags = [draw(st.sampled_from(RECURSIVE)), draw(st.sampled_from(FORCE))]
    flags += draw(st.lists(st.sampled_from(["-v", "-d", "--verbose"]), max_size=2))
    arguments = draw(st.permutations(flags + draw(st.lists(NAME, min_size=1, max_size=3))))
    prefix = draw(PREFIX)
    if prefix.startswith("/"):
        return shlex.join([f"{prefix}rm", *arguments])
    return prefix + shlex.join(["rm", *arguments])


@given(recursive_forced_rm())
def test_every_spelling_of_a_forced_recursive_rm_is_denied(command: str) -> None:
    assert denial(command) is not None, command


@given(
    st.sampled_from(["echo", "cat", "grep", "printf", "git log --grep", "python -c"]),
    st.lists(st.text(max_size=30), max_size=5),
)
def test_words_given_to_a_harmless_program_never_deny(program: str, words: list[str]) -> None:
    """The policy judges the program that runs, not the text it is handed."""
    assert denial(f"{program} {shlex.join(words)}") is None


@given(st.text(max_size=60))
def test_the_hook_never_raises_anything_but_a_denial(command: str) -> None:
    with contextlib.suppress(ToolDenied):
        deny_destructive_commands("bash", {"command": command})


async def test_branch_act_reports_the_denial_and_nothing_runs(tmp_path: Path) -> None:
    target = tmp_path / "x"
    target.mkdir()
    (target / "keep.txt").write_text("precious\n")
    tool = bash_tool(workspace_root=tmp_path).with_hooks(pre=[deny_destructive_commands])
    branch = Branch()
    branch.register(tool)

    result = await branch.act("bash", {"command": "rm -rf x"})

    assert result.error_type == "ToolDenied"
    assert result.error is not None
    assert result.error.startswith("Tool 'bash' denied the call: `rm -rf x` deletes")
    assert json.loads(result.message.content)["error"] == result.error
    assert (target / "keep.txt").read_text() == "precious\n"


async def test_branch_act_runs_an_allowed_command_through_the_hook(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x")
    tool = bash_tool(workspace_root=tmp_path).with_hooks(pre=[deny_destructive_commands])
    branch = Branch()
    branch.register(tool)

    result = await branch.act("bash", {"command": "rm notes.txt"})

    assert result.ok
    assert result.result is not None and result.result["return_code"] == 0
    assert not (tmp_path / "notes.txt").exists()


def test_a_command_longer_than_bash_accepts_is_denied_unread() -> None:
    reason = denial("echo " + "a" * (MAX_COMMAND_CHARS + 1))
    assert reason is not None and "at most" in reason
    assert len(reason) < 500


def _work(function: Callable[[], object]) -> float:
    """CPU seconds of the fastest of five runs (the least disturbed by other processes)."""
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        function()
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize(
    ("prefix", "unit", "suffix"),
    [
        pytest.param("echo ", "a", "", id="one long word"),
        pytest.param("echo ", "a ", "", id="many words"),
        pytest.param("", "env ", "ls", id="many env wrappers"),
        pytest.param("", "nice ", "ls", id="many nice wrappers"),
        pytest.param("find . ", "-exec ", "", id="many find -exec"),
        pytest.param("echo ", "'a'", "", id="many quoted pieces"),
        pytest.param("echo ", "a;", "", id="many commands"),
    ],
)
def test_checking_a_command_grows_linearly_with_its_length(
    prefix: str, unit: str, suffix: str
) -> None:
    """Four times the command costs about four times the work, not sixteen.

    The sizes go past the bash tool's cap (the hook refuses longer commands
    unread) because the scan itself must stay linear for any shell-backed
    tool a policy guards.
    """

    def check(size: int) -> Callable[[], object]:
        command = prefix + unit * (size // len(unit)) + suffix
        return lambda: _check_script(command, depth=0)

    small, large = _work(check(25_000)), _work(check(100_000))
    # A quadratic scan gives a ratio near 16; a linear one near 4.
    assert large / max(small, 1e-6) < 9, (small, large)


# -- a destructive command anywhere in a script

HIDDEN = {
    "after &&": "true && rm -rf d",
    "after ||": "false || rm -rf d",
    "after ;": "ls; rm -rf d",
    "after a newline": "ls\nrm -rf d",
    "in a pipeline": "ls | xargs rm -rf",
    "at the end of a pipeline": "echo d | rm -rf d",
    "background": "rm -rf d &",
    "command substitution": "echo $(rm -rf d)",
    "backticks": "echo `rm -rf d`",
    "substitution in double quotes": 'echo "now $(rm -rf d)"',
    "substitution in an assignment": "x=$(rm -rf d)",
    "substitution in export": "export X=$(rm -rf d)",
    "substitution in a redirect target": "echo hi > $(rm -rf d)",
    "process substitution": "cat <(rm -rf d)",
    "subshell": "(cd sub && rm -rf d)",
    "group": "{ ls; rm -rf d; }",
    "if": "if true; then rm -rf d; fi",
    "while": "while true; do rm -rf d; done",
    "for": "for f in a b; do rm -rf $f; done",
    "case": "case x in x) rm -rf d;; esac",
    "function body": "f() { rm -rf d; }; f",
    "here-document": "cat <<EOF\n$(rm -rf d)\nEOF",
    "negation": "! rm -rf d",
    "redirected": "rm -rf d 2>/dev/null",
    "assignment prefix": "LANG=C rm -rf d",
    "eval": "eval rm -rf d",
    "eval quoted": "eval 'rm -rf d'",
    "nested sh -c": "sh -c 'true && rm -rf d'",
    "git reset in a list": "git status && git reset --hard",
    "sudo in a substitution": "echo $(sudo ls)",
}


@pytest.mark.parametrize("command", HIDDEN.values(), ids=HIDDEN.keys())
def test_a_destructive_command_hidden_in_a_script_is_denied(command: str) -> None:
    assert denial(command) is not None


SCRIPTS_ALLOWED = {
    "pipe": "pytest -q | tail -20",
    "cd and make": "cd sub && make",
    "redirect": "python gen.py > out.json",
    "rm in quotes": "echo 'rm -rf d' | cat",
    "rm as grep pattern": "grep -r 'rm -rf' . || true",
    "plain rm": "rm notes.txt && ls",
}


@pytest.mark.parametrize("command", SCRIPTS_ALLOWED.values(), ids=SCRIPTS_ALLOWED.keys())
def test_ordinary_scripts_pass(command: str) -> None:
    assert denial(command) is None


@pytest.mark.parametrize("command", ["echo 'unclosed", "echo $(ls", "ls &&", "(ls"])
def test_a_script_that_does_not_parse_is_denied_with_a_clear_reason(command: str) -> None:
    reason = denial(command)
    assert reason is not None and "not valid shell syntax" in reason


def test_a_backtick_in_an_expanded_here_document_is_checked() -> None:
    with pytest.raises(ToolDenied, match="recursively"):
        deny_destructive_commands("bash", {"command": "cat <<EOF > out\n`rm -rf /home`\nEOF"})


@pytest.mark.parametrize("script", ["bash <<EOF\nrm -rf /home\nEOF", "sh <<< 'rm -rf /home'"])
def test_a_script_fed_to_a_shell_on_stdin_is_checked(script: str) -> None:
    with pytest.raises(ToolDenied, match="recursively"):
        deny_destructive_commands("bash", {"command": script})


def test_a_here_document_fed_to_another_program_is_data() -> None:
    deny_destructive_commands("bash", {"command": "cat <<EOF\nrm -rf /home\nEOF"})

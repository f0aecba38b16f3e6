"""The bash tool under hostile command strings: refused, or exactly one program with shlex's argv.

Commands are built from segments whose quoting is known by construction:
bare words, single- and double-quoted text full of operators, backslash
escapes, and unquoted operators. A ``touch CANARY`` marker is joined on
through an operator, unquoted (the call must be refused) or quoted (the
call must run with the operator as a plain argument). The program is an
argv echo, so the argv it received can be compared with `shlex.split`.
Property: an unquoted operator means a refusal; otherwise the echo runs
with exactly ``shlex.split(command)``; the canary file never appears.
"""

from __future__ import annotations

import json
import shlex
import string
import sys
import tempfile
from pathlib import Path

import pytest
import trio
from hypothesis import event, example, given
from hypothesis import strategies as st

from lionfactory.tools.bash import bash_tool

ECHO = "import json, sys\nsys.stdout.write(json.dumps(sys.argv[1:]))\n"
PREFIX = [sys.executable, "-I", "-S", "echo_argv.py"]

OPERATORS = (";", "&&", "||", "|", "&", "<", ">", ">>", "`", "$(", "\n", "2>&1", "<(", "|&")
# Characters that may stand bare in a word: none starts an operator, quote or escape.
BARE = string.ascii_letters + string.digits + "-_.=/*~{}()#!%^+,:@[]?\u00e9\u4e2d"
# Inside quotes anything goes (except NUL, which is refused on its own).
QUOTED = BARE + " \t\n;&|<>`$()'\"\\\u00a0"

Segment = tuple[str, bool]
"""Command text and whether it puts an unquoted operator in the command."""

bare_words = st.text(BARE, min_size=1, max_size=6).map(lambda s: (s, False))
variables = st.sampled_from(["$HOME", "${PATH}", "$1", "$$", "$"]).map(lambda s: (s, False))
single_quoted = st.text(QUOTED.replace("'", ""), max_size=8).map(lambda s: (f"'{s}'", False))
double_quoted = st.text(QUOTED, max_size=8).map(
    lambda s: ('"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"', False)
)
escaped = st.sampled_from(QUOTED).map(lambda c: ("\\" + c, False))
operators = st.sampled_from(OPERATORS).map(lambda op: (op, True))
nul = st.just(("\x00", True))
safe_segments = st.one_of(bare_words, variables, single_quoted, double_quoted, escaped)
segments = st.one_of(safe_segments, operators, nul)


def quoted_forms(operator: str) -> list[str]:
    """Ways to pass `operator` literally: single quotes, double quotes, escapes."""
    return [f"'{operator}'", f'"{operator}"', "".join("\\" + c for c in operator)]


@st.composite
def joiners(draw: st.DrawFn) -> Segment:
    """The operator the canary marker is appended through, unquoted or quoted."""
    operator = draw(st.sampled_from(OPERATORS))
    if draw(st.integers(0, 2)) == 0:
        return operator, True
    return draw(st.sampled_from(quoted_forms(operator))), False


@st.composite
def commands(draw: st.DrawFn) -> tuple[str, bool]:
    """A command after the echo prefix, and whether it must be refused."""
    # Half the commands hold only quoted or bare text before the marker, so
    # that the "runs with shlex's argv" half of the property is exercised.
    parts = draw(st.lists(st.one_of(safe_segments, segments), max_size=8))
    if draw(st.booleans()):
        parts = [part for part in parts if not part[1]]
    joiner = draw(joiners())
    text = ""
    for piece, _ in parts:
        # Gluing segments without a space makes one word of several quotings.
        text += draw(st.sampled_from([" ", "", "  "])) + piece
    text += " " + joiner[0] + " touch CANARY"
    return text, any(unsafe for _, unsafe in [*parts, joiner])


async def call(workspace: Path, command: str) -> dict[str, object]:
    return await bash_tool(workspace_root=workspace)(command=command, timeout=20_000)


def run(command: str) -> tuple[dict[str, object], bool]:
    """Run `command` in a fresh workspace; return the answer and whether a canary appeared."""
    with tempfile.TemporaryDirectory(prefix="lf-shell-") as base:
        workspace = Path(base)
        (workspace / "echo_argv.py").write_text(ECHO)
        answer = trio.run(call, workspace, command)
        canary = any(p.name == "CANARY" for p in workspace.rglob("*")) or Path("CANARY").exists()
    return answer, canary


@given(commands())
@example(("x ; touch CANARY", True))
@example(("'a;b' \"c|d\" e\\&f ';' touch CANARY", False))
@example(("a\\\nb '$(touch CANARY)' \"`touch CANARY`\" '&&' touch CANARY", False))
def test_a_command_is_refused_or_runs_with_shlex_argv(generated: tuple[str, bool]) -> None:
    body, must_refuse = generated
    command = shlex.join(PREFIX) + " " + body
    answer, canary = run(command)
    assert not canary, f"a canary appeared for {command!r}: {answer}"
    if must_refuse:
        event("refused")
        assert answer["return_code"] is None and answer["error"], answer
        assert answer["stdout"] == ""
    else:
        event("ran")
        assert answer["error"] is None, f"{command!r} was refused: {answer['error']}"
        assert answer["return_code"] == 0, answer
        assert json.loads(str(answer["stdout"])) == shlex.split(command)[len(PREFIX) :]


@pytest.mark.parametrize("operator", OPERATORS)
def test_every_operator_unquoted_is_refused(operator: str) -> None:
    answer, canary = run(f"{shlex.join(PREFIX)} ok {operator} touch CANARY")
    assert not canary
    assert answer["return_code"] is None and answer["error"], answer


@pytest.mark.parametrize("operator", OPERATORS)
@pytest.mark.parametrize("form", [0, 1, 2])
def test_every_operator_quoted_is_one_argument(operator: str, form: int) -> None:
    quoted = quoted_forms(operator)[form]
    answer, canary = run(f"{shlex.join(PREFIX)} ok {quoted} touch CANARY")
    assert not canary
    assert answer["error"] is None, answer
    assert json.loads(str(answer["stdout"])) == ["ok", operator, "touch", "CANARY"]

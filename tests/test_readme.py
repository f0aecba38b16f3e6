"""Every Python block of the README runs as shown and prints what it says.

A block is one of three kinds, chosen by the line right before it:

* no marker: a complete program, run as a script from an empty temporary
  directory (an unmarked block that is not a complete program fails here);
* ``<!-- readme-test: notebook -->``: a notebook cell that may use top-level
  ``await``, run under asyncio (Jupyter's loop) from an empty temporary
  directory;
* ``<!-- readme-test: same-as examples/NAME.py -->``: the block appears
  verbatim in that example, which `test_examples.py` runs. Such a block may
  not state output: it is not run here, so nothing would check it.

What a run block prints is checked against what the README says it prints,
in two ways:

* an inline expectation: a comment ``# -> VALUE`` at the end of a line whose
  statement ends in a ``print(...)`` call, or alone on the line right after
  it, says that this print (every execution of it, taken together) writes
  exactly the one line ``VALUE`` to stdout. ``# -> ...`` says the print
  writes one line whose text varies (an id, a path, a timing) and is not
  compared; ``# ~> REGEX`` says the one line fully matches ``REGEX``. A print
  that writes several lines, or runs in a loop more than once, is stated with
  an output block instead. Each print carries at most one expectation; prints
  without one are not checked line by line. Output is attributed to a print
  by the source line of the call (the interpreter's ``print`` is wrapped for
  the run), so unannotated prints and logging around it do not shift it.
* an output block: right after the code block (blank lines allowed between),
  the marker line ``<!-- readme-test: output -->`` followed by a fenced
  ```` ```text ```` block is the block's whole stdout, line for line. A line
  that is exactly ``...`` stands for any number of lines (zero or more) that
  vary between runs. The marker is required: a ``text`` block without it is
  prose, not a claim.

A mismatch fails with a diff that names the README line of the claim.
"""

from __future__ import annotations

import ast
import difflib
import io
import json
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
MARKER = re.compile(r"<!-- readme-test: (?P<kind>[^>]*?) -->")
OUTPUT_MARKER = "<!-- readme-test: output -->"
EXPECTATION = re.compile(r"#\s*(?P<op>->|~>)\s?(?P<value>.*)")

# Wraps `print` so each call made from the block's own source records the
# line of the call and the text it wrote to stdout; the text is still written.
# Then runs the block: a program like `python block.py` (runpy, so `__main__`
# is a real module), a notebook cell the way Jupyter does (compiled with
# top-level await allowed, awaited on an asyncio loop if it awaits anything).
RUNNER = """\
import ast, asyncio, builtins, io, json, runpy, sys
kind, source_path, record_path = sys.argv[1:4]
del sys.argv[1:4]
sys.argv[0] = source_path
_print = builtins.print
def _recording_print(*args, **kwargs):
    target = kwargs.get("file")
    frame = sys._getframe(1)
    if (target is None or target is sys.stdout) and frame.f_code.co_filename == source_path:
        buffer = io.StringIO()
        _print(*args, **{**kwargs, "file": buffer, "flush": False})
        text = buffer.getvalue()
        with open(record_path, "a", encoding="utf-8") as record:
            record.write(json.dumps([frame.f_lineno, text]) + "\\n")
        sys.stdout.write(text)
        if kwargs.get("flush"):
            sys.stdout.flush()
        return
    _print(*args, **kwargs)
builtins.print = _recording_print
if kind == "program":
    runpy.run_path(source_path, run_name="__main__")
else:
    source = open(source_path, encoding="utf-8").read()
    code = compile(source, source_path, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace = {"__name__": "__main__"}
    result = eval(code, namespace)
    if asyncio.iscoroutine(result):
        asyncio.run(result)
"""


@attrs.frozen
class Block:
    line: int
    kind: str
    code: str
    output: str | None = None
    output_line: int = 0


@attrs.frozen
class Expectation:
    """One `# ->` / `# ~>` comment: README line, the print's block line, op, value."""

    readme_line: int
    print_line: int
    op: str
    value: str


@attrs.frozen
class Run:
    """What a block did: its process, and each recorded print as (block line, text)."""

    done: subprocess.CompletedProcess[str]
    prints: list[tuple[int, str]]


def readme_blocks(text: str) -> list[Block]:
    """Every ```python block, its kind, and the output block that follows it.

    The kind is the marker on the line before the block, or "program".
    """
    blocks = []
    lines = [line.rstrip("\n") for line in text.splitlines()]
    i = 0
    while i < len(lines):
        if lines[i] != "```python":
            i += 1
            continue
        start = i
        before = lines[i - 1].strip() if i else ""
        marker = MARKER.fullmatch(before)
        i += 1
        body = []
        while i < len(lines) and lines[i] != "```":
            body.append(lines[i] + "\n")
            i += 1
        i += 1
        output, output_line = None, 0
        j = i
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j < len(lines) and lines[j].strip() == OUTPUT_MARKER:
            assert j + 1 < len(lines) and lines[j + 1] == "```text", (
                f"README line {j + 1}: {OUTPUT_MARKER} must be followed by a ```text block"
            )
            output_line = j + 3  # 1-based README line of its first line
            k = j + 2
            out = []
            while k < len(lines) and lines[k] != "```":
                out.append(lines[k] + "\n")
                k += 1
            output = "".join(out)
            i = k + 1
        kind = marker["kind"] if marker else "program"
        blocks.append(Block(start + 1, kind, "".join(body), output, output_line))
    return blocks


BLOCKS = readme_blocks(README)


def expectations(block: Block) -> list[Expectation]:
    """The inline expectations of `block`, each tied to the print it describes.

    Raises AssertionError (naming the README line) for a comment that follows
    no print call, or a second expectation on one print.
    """
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(block.code, "<readme>", "exec", flags=flags)
    # A print call ending on line L is described by a comment on line L.
    prints_ending_at: dict[int, int] = {}
    statement_ends: dict[int, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.end_lineno is not None:
            statement_ends[node.end_lineno] = node.lineno
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "print"
            and node.end_lineno is not None
        ):
            prints_ending_at[node.end_lineno] = node.lineno
    code_lines = block.code.splitlines()
    found: list[Expectation] = []
    seen: set[int] = set()
    tokens = tokenize.generate_tokens(io.StringIO(block.code).readline)
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        match = EXPECTATION.fullmatch(token.string)
        if match is None:
            continue
        line = token.start[0]
        readme_line = block.line + line
        alone = not code_lines[line - 1][: token.start[1]].strip()
        target = line - 1 if alone else line
        assert target in prints_ending_at and target in statement_ends, (
            f"README line {readme_line}: {token.string!r} must end a line whose "
            "statement ends in a print(...) call, or be alone on the line after it"
        )
        print_line = prints_ending_at[target]
        assert print_line not in seen, (
            f"README line {readme_line}: a second expectation for one print; "
            "state output of several lines with an output block"
        )
        seen.add(print_line)
        found.append(Expectation(readme_line, print_line, match["op"], match["value"].rstrip()))
    return found


def lines_match(expected: list[str], actual: list[str]) -> bool:
    """Whether `actual` matches `expected`, where a line `...` is any run of lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(lines_match(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and actual[0] == expected[0] and lines_match(expected[1:], actual[1:])


def output_mismatches(block: Block, stdout: str, prints: list[tuple[int, str]]) -> list[str]:
    """Every way the run's output differs from what the README says; [] if none."""
    problems = []
    for claim in expectations(block):
        text = "".join(written for line, written in prints if line == claim.print_line)
        printed = text.splitlines()
        shown = f"# {claim.op} {claim.value}".rstrip()
        where = f"README line {claim.readme_line} ({shown!r})"
        if len(printed) != 1:
            problems.append(
                f"{where}: the print wrote {len(printed)} lines, not one: {printed!r}"
                + ("; state output of several lines with an output block" if printed else "")
            )
        elif claim.op == "~>" and re.fullmatch(claim.value, printed[0]) is None:
            problems.append(f"{where}: {printed[0]!r} does not match the pattern")
        elif claim.op == "->" and claim.value != "..." and printed[0] != claim.value:
            problems.append(
                f"{where}: the print wrote\n    {printed[0]!r}\n  the README says\n"
                f"    {claim.value!r}"
            )
    if block.output is not None:
        expected = block.output.splitlines()
        actual = stdout.splitlines()
        if not lines_match(expected, actual):
            diff = difflib.unified_diff(
                expected,
                actual,
                f"README line {block.output_line} (output block)",
                "what the block printed",
                lineterm="",
            )
            problems.append("\n".join(diff))
    return problems


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def execute(block: Block, tmp_path: Path) -> Run | None:
    """Run `block` by its kind; None for a same-as block (checked, not run)."""
    work = tmp_path / "cwd"
    work.mkdir(exist_ok=True)
    if block.kind in ("program", "notebook"):
        source = tmp_path / ("block.py" if block.kind == "program" else "cell.py")
        source.write_text(block.code, encoding="utf-8")
        record = tmp_path / "prints.jsonl"
        record.write_text("", encoding="utf-8")
        argv = [sys.executable, "-c", RUNNER, block.kind, str(source), str(record)]
        done = run(argv, work)
        prints = [
            (int(line), str(text))
            for line, text in map(json.loads, record.read_text(encoding="utf-8").splitlines())
        ]
        return Run(done, prints)
    same_as = re.fullmatch(r"same-as (examples/[\w.-]+\.py)", block.kind)
    assert same_as, f"unknown readme-test marker {block.kind!r} (line {block.line})"
    example = (ROOT / same_as[1]).read_text(encoding="utf-8")
    assert block.code in example, f"README line {block.line} is not verbatim in {same_as[1]}"
    assert block.output is None and not expectations(block), (
        f"README line {block.line}: a same-as block is not run here, so it may not state output"
    )
    return None


def test_every_python_block_is_found() -> None:
    assert len(BLOCKS) == README.count("```python\n")
    assert len(BLOCKS) >= 10


def test_every_output_marker_belongs_to_a_block() -> None:
    assert README.count(OUTPUT_MARKER) == sum(block.output is not None for block in BLOCKS)


def test_the_readme_states_output() -> None:
    # Guards the checks below against a README that states nothing to check.
    assert sum(len(expectations(block)) for block in BLOCKS) >= 8


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"line-{b.line}-{b.kind.split()[0]}")
def test_readme_block_runs_as_shown(block: Block, tmp_path: Path) -> None:
    ran = execute(block, tmp_path)
    if ran is not None:
        done = ran.done
        assert done.returncode == 0, f"README line {block.line}:\n{done.stdout}{done.stderr}"
        problems = output_mismatches(block, done.stdout, ran.prints)
        assert not problems, "\n".join(problems)


def test_the_quick_example_prints_the_answer(tmp_path: Path) -> None:
    ran = execute(BLOCKS[0], tmp_path)
    assert ran is not None
    assert ran.done.returncode == 0, ran.done.stderr
    assert ran.done.stdout.splitlines()[0] == "3"


# -- the runner itself: each kind fails when it should -------------------------


def test_an_unmarked_fragment_fails(tmp_path: Path) -> None:
    ran = execute(Block(1, "program", "print(branch.tools)\n"), tmp_path)
    assert ran is not None and ran.done.returncode != 0
    assert "NameError" in ran.done.stderr


def test_an_unmarked_block_with_top_level_await_fails(tmp_path: Path) -> None:
    code = "import anyio\nawait anyio.sleep(0)\n"
    ran = execute(Block(1, "program", code), tmp_path)
    assert ran is not None and ran.done.returncode != 0
    assert "SyntaxError" in ran.done.stderr


def test_a_notebook_cell_runs_top_level_await_on_asyncio(tmp_path: Path) -> None:
    code = (
        "import asyncio\nimport sniffio\n"
        "await asyncio.sleep(0)\nprint(sniffio.current_async_library())\n"
    )
    ran = execute(Block(1, "notebook", code), tmp_path)
    assert ran is not None
    assert ran.done.returncode == 0, ran.done.stderr
    assert ran.done.stdout.strip() == "asyncio"


def test_a_failing_notebook_cell_fails(tmp_path: Path) -> None:
    ran = execute(Block(1, "notebook", "import asyncio\nawait asyncio.sleep(0)\n1 / 0\n"), tmp_path)
    assert ran is not None and ran.done.returncode != 0


def test_a_same_as_block_must_be_verbatim_in_its_example(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="not verbatim"):
        execute(Block(1, "same-as examples/quickstart.py", "not in there\n"), tmp_path)
    with pytest.raises(AssertionError, match="unknown readme-test marker"):
        execute(Block(1, "sometimes", "pass\n"), tmp_path)


def test_a_same_as_block_may_not_state_output(tmp_path: Path) -> None:
    example = (ROOT / "examples" / "quickstart.py").read_text(encoding="utf-8")
    line = next(line for line in example.splitlines() if line.strip().startswith("print("))
    # The line is verbatim in the example; the output block is the offence.
    with pytest.raises(AssertionError, match="may not state output"):
        execute(Block(1, "same-as examples/quickstart.py", line + "\n", "3\n", 2), tmp_path)


# -- the output checks: each fails when the README is wrong --------------------


def checked(text: str, tmp_path: Path) -> list[str]:
    """Parse `text` as a README, run its one block, and compare as the test does."""
    (block,) = readme_blocks(text)
    ran = execute(block, tmp_path)
    assert ran is not None and ran.done.returncode == 0, ran
    return output_mismatches(block, ran.done.stdout, ran.prints)


def test_a_wrong_inline_expectation_fails(tmp_path: Path) -> None:
    text = "intro\n\n```python\nx = 2\nprint(x + 1)  # -> 4\n```\n"
    problems = checked(text, tmp_path)
    assert len(problems) == 1
    # The README line of the comment is line 5 of the synthetic README.
    assert problems[0].startswith("README line 5 ('# -> 4')"), problems
    assert "'3'" in problems[0] and "'4'" in problems[0]


def test_a_true_inline_expectation_passes(tmp_path: Path) -> None:
    text = "```python\nx = 2\nprint(x + 1)  # -> 3\n```\n"
    assert checked(text, tmp_path) == []


def test_an_expectation_alone_on_the_next_line_is_checked(tmp_path: Path) -> None:
    text = "```python\nprint(\n    sorted({'b', 'a'})\n)\n# -> ['a', 'c']\n```\n"
    (problem,) = checked(text, tmp_path)
    assert problem.startswith("README line 5 ") and "['a', 'b']" in problem


def test_an_expectation_is_tied_to_its_own_print(tmp_path: Path) -> None:
    # The unannotated prints around it (and its being in a coroutine) do not
    # shift which output the comment is compared with.
    code = (
        "import trio\nprint('before')\n\nasync def main():\n    print('noise')\n"
        "    print('answer')  # -> answer\n    print('after')\n\ntrio.run(main)\n"
    )
    assert checked(f"```python\n{code}```\n", tmp_path) == []
    wrong = code.replace("# -> answer", "# -> noise")
    (problem,) = checked(f"```python\n{wrong}```\n", tmp_path)
    assert "'answer'" in problem


def test_a_print_that_never_runs_fails(tmp_path: Path) -> None:
    text = "```python\nif False:\n    print(1)  # -> 1\n```\n"
    (problem,) = checked(text, tmp_path)
    assert "wrote 0 lines" in problem


def test_a_print_of_several_lines_needs_an_output_block(tmp_path: Path) -> None:
    text = "```python\nfor i in range(2):\n    print(i)  # -> 0\n```\n"
    (problem,) = checked(text, tmp_path)
    assert "wrote 2 lines" in problem and "output block" in problem


def test_a_varying_line_is_skipped_or_matched_by_pattern(tmp_path: Path) -> None:
    code = (
        "import uuid\nprint(uuid.uuid4())  # -> ...\nprint(uuid.uuid4().hex)  # ~> [0-9a-f]{32}\n"
    )
    assert checked(f"```python\n{code}```\n", tmp_path) == []
    wrong = code.replace("{32}", "{31}")
    (problem,) = checked(f"```python\n{wrong}```\n", tmp_path)
    assert "does not match the pattern" in problem


def test_a_notebook_cell_expectation_is_checked(tmp_path: Path) -> None:
    text = (
        "<!-- readme-test: notebook -->\n```python\nimport asyncio\n"
        "await asyncio.sleep(0)\nprint('hi')  # -> ho\n```\n"
    )
    (problem,) = checked(text, tmp_path)
    assert problem.startswith("README line 5 ")


def test_an_expectation_on_no_print_is_refused(tmp_path: Path) -> None:
    (block,) = readme_blocks("```python\nx = 3  # -> 3\n```\n")
    with pytest.raises(AssertionError, match=r"README line 2: .*print"):
        expectations(block)


def test_a_second_expectation_on_one_print_is_refused() -> None:
    (block,) = readme_blocks("```python\nprint('a\\nb')  # -> a\n# -> b\n```\n")
    with pytest.raises(AssertionError, match="README line 3: a second expectation"):
        expectations(block)


def test_an_output_block_must_match_stdout(tmp_path: Path) -> None:
    text = (
        f"```python\nprint('one')\nprint('two')\n```\n\n{OUTPUT_MARKER}\n```text\none\nthree\n```\n"
    )
    (problem,) = checked(text, tmp_path)
    assert "README line 8 (output block)" in problem
    assert "-three" in problem and "+two" in problem


def test_an_output_block_wildcard_stands_for_varying_lines(tmp_path: Path) -> None:
    code = (
        "import os, uuid\nprint('start')\nprint(uuid.uuid4())\nprint(os.getpid())\nprint('end')\n"
    )
    text = f"```python\n{code}```\n{OUTPUT_MARKER}\n```text\nstart\n...\nend\n```\n"
    assert checked(text, tmp_path) == []
    missing_end = text.replace("end\n```\n", "end\nmore\n```\n")
    (problem,) = checked(missing_end, tmp_path)
    assert "+end" not in problem and "-more" in problem


def test_a_text_block_without_the_marker_is_prose() -> None:
    (block,) = readme_blocks("```python\nprint(1)\n```\n\n```text\n2\n```\n")
    assert block.output is None


def test_lines_match_wildcards() -> None:
    assert lines_match(["a", "...", "b"], ["a", "b"])
    assert lines_match(["a", "...", "b"], ["a", "x", "y", "b"])
    assert not lines_match(["a", "...", "b"], ["a", "x"])
    assert not lines_match(["a"], ["a", "b"])
    assert lines_match(["..."], [])


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    commands = re.search(r"```bash\n(.*?)```", README, re.DOTALL)
    assert commands is not None
    test_command = commands.group(1).strip().splitlines()[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()

"""Every code block of the README and of the documentation pages runs as shown.

The pages are the Markdown files under ``.docs/pages/``. Every fenced block
is one of these kinds, chosen by the marker on the line right before it:

* a ```` ```python ```` block with no marker: a complete program, run as a
  script from an empty temporary directory (an unmarked block that is not a
  complete program fails here);
* ``<!-- docs-test: notebook -->`` before a Python block: a notebook cell that
  may use top-level ``await``, run under asyncio (Jupyter's loop) from an
  empty temporary directory;
* ``<!-- docs-test: same-as examples/NAME.py -->`` before a Python block: the
  block appears verbatim in that example, which `test_examples.py` runs. Such
  a block may not state output: it is not run here, so nothing would check it;
* ``<!-- docs-test: shell -->`` before a ```` ```bash ```` block: a script run
  with ``bash -eu -o pipefail`` from an empty temporary directory, with the
  test interpreter's ``bin`` directory first on ``PATH`` (so ``lionfactory``
  and ``python`` are the installed ones);
* ``<!-- docs-test: shell at the top -->`` before a ```` ```bash ```` block: the
  same, run from the top of the checkout, for what a page tells the reader to
  run there (``python examples/first_agent.py``); it must not write there;
* ``<!-- docs-test: output -->`` before a ```` ```text ```` block right after a
  Python or shell block (blank lines allowed between): that block's whole
  stdout, line for line (below);
* ``<!-- docs-test: not-run -->`` (optionally followed by ``: why``) before any
  block: shown, never run: an install command, a configuration file, a layout.

Any other block (an unmarked ```` ```bash ````, ```` ```json ```` or ```` ```text ````
block, a fence without a language) fails the test: it neither runs nor says
that it does not.

What a run block prints is checked against what the page says it prints,
in two ways:

* an inline expectation (Python blocks): a comment ``# -> VALUE`` at the end
  of a line whose statement ends in a ``print(...)`` call, or alone on the line
  right after it, says that this print (every execution of it, taken
  together) writes exactly the one line ``VALUE`` to stdout. ``# -> ...`` says
  the print writes one line whose text varies (an id, a path, a timing) and is
  not compared; ``# ~> REGEX`` says the one line fully matches ``REGEX``. A
  print that writes several lines, or runs in a loop more than once, is stated
  with an output block instead. Each print carries at most one expectation;
  prints without one are not checked line by line. Output is attributed to a
  print by the source line of the call (the interpreter's ``print`` is wrapped
  for the run), so unannotated prints and logging around it do not shift it.
* an output block: a line that is exactly ``...`` stands for any number of
  lines (zero or more) that vary between runs. The marker is required: a
  ``text`` block without it is not a claim, and fails as unmarked.

A mismatch fails with a diff that names the file and line of the claim.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = ROOT / ".docs" / "pages"
README = (ROOT / "README.md").read_text()
MARKER = re.compile(r"<!-- docs-test: (?P<kind>[^>]*?) -->")
OUTPUT_MARKER = "<!-- docs-test: output -->"
EXPECTATION = re.compile(r"#\s*(?P<op>->|~>)\s?(?P<value>.*)")
FENCE = re.compile(r"```(?P<lang>[\w+-]*)")

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
    """One fenced block: where it is, its language and kind, and what it says it prints."""

    source: str
    line: int
    lang: str
    kind: str
    code: str
    output: str | None = None
    output_line: int = 0


@attrs.frozen
class Expectation:
    """One `# ->` / `# ~>` comment: its file line, the print's block line, op, value."""

    doc_line: int
    print_line: int
    op: str
    value: str


@attrs.frozen
class Run:
    """What a block did: its process, and each recorded print as (block line, text)."""

    done: subprocess.CompletedProcess[str]
    prints: list[tuple[int, str]]


def _fenced(lines: list[str], i: int) -> tuple[list[str], int]:
    """The body of the fence opened at `lines[i]`, and the index after its end."""
    body = []
    i += 1
    while i < len(lines) and lines[i] != "```":
        body.append(lines[i] + "\n")
        i += 1
    return body, i + 1


def doc_blocks(text: str, source: str = "README.md") -> list[Block]:
    """Every fenced block of `text`, its kind, and the output block that follows it.

    The kind is the marker on the line before the block; an unmarked Python
    block is a "program", any other unmarked block is "unmarked" (which the
    test refuses). An output block is folded into the block it follows.
    """
    blocks = []
    lines = [line.rstrip("\n") for line in text.splitlines()]
    i = 0
    while i < len(lines):
        fence = FENCE.fullmatch(lines[i].strip())
        if fence is None:
            i += 1
            continue
        assert lines[i] == lines[i].lstrip(), f"{source} line {i + 1}: an indented fence"
        start, lang = i, fence["lang"]
        before = lines[i - 1].strip() if i else ""
        marker = MARKER.fullmatch(before)
        body, i = _fenced(lines, i)
        output, output_line = None, 0
        j = i
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j < len(lines) and lines[j].strip() == OUTPUT_MARKER:
            assert j + 1 < len(lines) and lines[j + 1] == "```text", (
                f"{source} line {j + 1}: {OUTPUT_MARKER} must be followed by a ```text block"
            )
            output_line = j + 3  # 1-based line of its first line
            out, i = _fenced(lines, j + 1)
            output = "".join(out)
        if marker is not None:
            kind = marker["kind"]
        else:
            kind = "program" if lang == "python" else "unmarked"
        blocks.append(Block(source, start + 1, lang, kind, "".join(body), output, output_line))
    return blocks


def all_sources() -> list[Path]:
    """The README and every page of the site."""
    return [ROOT / "README.md", *sorted(PAGES.rglob("*.md"))]


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


BLOCKS = [
    block
    for path in all_sources()
    for block in doc_blocks(path.read_text(encoding="utf-8"), _name(path))
]
README_BLOCKS = [block for block in BLOCKS if block.source == "README.md"]


def expectations(block: Block) -> list[Expectation]:
    """The inline expectations of `block`, each tied to the print it describes.

    Raises AssertionError (naming the file line) for a comment that follows
    no print call, or a second expectation on one print.
    """
    if block.lang != "python" or block.kind not in ("program", "notebook"):
        return []
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(block.code, f"<{block.source}>", "exec", flags=flags)
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
        doc_line = block.line + line
        alone = not code_lines[line - 1][: token.start[1]].strip()
        target = line - 1 if alone else line
        assert target in prints_ending_at and target in statement_ends, (
            f"{block.source} line {doc_line}: {token.string!r} must end a line whose "
            "statement ends in a print(...) call, or be alone on the line after it"
        )
        print_line = prints_ending_at[target]
        assert print_line not in seen, (
            f"{block.source} line {doc_line}: a second expectation for one print; "
            "state output of several lines with an output block"
        )
        seen.add(print_line)
        found.append(Expectation(doc_line, print_line, match["op"], match["value"].rstrip()))
    return found


def lines_match(expected: list[str], actual: list[str]) -> bool:
    """Whether `actual` matches `expected`, where a line `...` is any run of lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(lines_match(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and actual[0] == expected[0] and lines_match(expected[1:], actual[1:])


def output_mismatches(block: Block, stdout: str, prints: list[tuple[int, str]]) -> list[str]:
    """Every way the run's output differs from what the page says; [] if none."""
    problems = []
    for claim in expectations(block):
        text = "".join(written for line, written in prints if line == claim.print_line)
        printed = text.splitlines()
        shown = f"# {claim.op} {claim.value}".rstrip()
        where = f"{block.source} line {claim.doc_line} ({shown!r})"
        if len(printed) != 1:
            problems.append(
                f"{where}: the print wrote {len(printed)} lines, not one: {printed!r}"
                + ("; state output of several lines with an output block" if printed else "")
            )
        elif claim.op == "~>" and re.fullmatch(claim.value, printed[0]) is None:
            problems.append(f"{where}: {printed[0]!r} does not match the pattern")
        elif claim.op == "->" and claim.value != "..." and printed[0] != claim.value:
            problems.append(
                f"{where}: the print wrote\n    {printed[0]!r}\n  the page says\n"
                f"    {claim.value!r}"
            )
    if block.output is not None:
        expected = block.output.splitlines()
        actual = stdout.splitlines()
        if not lines_match(expected, actual):
            diff = difflib.unified_diff(
                expected,
                actual,
                f"{block.source} line {block.output_line} (output block)",
                "what the block printed",
                lineterm="",
            )
            problems.append("\n".join(diff))
    return problems


def run(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env,
    )


def execute(block: Block, tmp_path: Path) -> Run | None:
    """Run `block` by its kind; None for a block that is checked, not run."""
    where = f"{block.source} line {block.line}"
    work = tmp_path / "cwd"
    work.mkdir(exist_ok=True)
    if block.kind == "unmarked":
        raise AssertionError(
            f"{where}: a ```{block.lang} block that neither runs nor is marked; mark it "
            "<!-- docs-test: not-run -->, <!-- docs-test: shell --> or make it an output block"
        )
    if block.kind in ("program", "notebook"):
        assert block.lang == "python", f"{where}: {block.kind!r} is for ```python blocks"
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
    if block.kind in ("shell", "shell at the top"):
        assert block.lang == "bash", f"{where}: {block.kind!r} is for ```bash blocks"
        bindir = str(Path(sys.executable).parent)
        env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
        cwd = work if block.kind == "shell" else ROOT
        done = run(["bash", "-eu", "-o", "pipefail", "-c", block.code], cwd, env)
        return Run(done, [])
    if re.fullmatch(r"not-run(: .+)?", block.kind):
        assert block.output is None, f"{where}: a block that is not run may not state output"
        return None
    same_as = re.fullmatch(r"same-as (examples/[\w.-]+\.py)", block.kind)
    assert same_as, f"unknown docs-test marker {block.kind!r} ({where})"
    example = (ROOT / same_as[1]).read_text(encoding="utf-8")
    assert block.code in example, f"{where} is not verbatim in {same_as[1]}"
    # A quoted fragment need not parse on its own (an `except` clause, an
    # indented body), so its claims are found by their comment syntax.
    claims = [line for line in block.code.splitlines() if re.search(r"#\s*(->|~>)", line)]
    assert block.output is None and not claims, (
        f"{where}: a same-as block is not run here, so it may not state output"
    )
    return None


def test_every_block_is_found() -> None:
    for path in all_sources():
        text = path.read_text(encoding="utf-8")
        opened = sum(
            1 for line in text.splitlines() if FENCE.fullmatch(line.strip()) and line != "```"
        )
        found = [block for block in BLOCKS if block.source == _name(path)]
        assert opened == len(found) + sum(block.output is not None for block in found), path
    assert len(BLOCKS) >= 40
    assert len(README_BLOCKS) >= 3


def test_every_output_marker_belongs_to_a_block() -> None:
    for path in all_sources():
        text = path.read_text(encoding="utf-8")
        found = [block for block in BLOCKS if block.source == _name(path)]
        markers = sum(line.strip() == OUTPUT_MARKER for line in text.splitlines())
        assert markers == sum(block.output is not None for block in found), path


def test_the_pages_state_output() -> None:
    # Guards the checks below against pages that state nothing to check.
    assert sum(len(expectations(block)) for block in BLOCKS) >= 30
    assert sum(block.output is not None for block in BLOCKS) >= 5


@pytest.mark.parametrize(
    "block", BLOCKS, ids=lambda b: f"{b.source}:{b.line}-{b.kind.split()[0].rstrip(':')}"
)
def test_block_runs_as_shown(block: Block, tmp_path: Path) -> None:
    ran = execute(block, tmp_path)
    if ran is not None:
        done = ran.done
        assert done.returncode == 0, (
            f"{block.source} line {block.line}:\n{done.stdout}{done.stderr}"
        )
        problems = output_mismatches(block, done.stdout, ran.prints)
        assert not problems, "\n".join(problems)


def test_the_quick_example_prints_the_answer(tmp_path: Path) -> None:
    first = next(block for block in README_BLOCKS if block.lang == "python")
    ran = execute(first, tmp_path)
    assert ran is not None
    assert ran.done.returncode == 0, ran.done.stderr
    assert ran.done.stdout.splitlines()[0] == "3"


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    commands = re.search(r"```bash\n(.*?)```", README, re.DOTALL)
    assert commands is not None
    test_command = commands.group(1).strip().splitlines()[1]
    assert test_command == (
        "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/python -m pytest"
    )
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci
    assert ci[-1] == test_command  # the last thing CI does


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= 300


def test_ci_builds_the_site_strictly() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".venv/bin/mkdocs build --strict -f .docs/mkdocs.yml" in ci
    assert "'.[dev,docs]'" in ci or "'.[docs]'" in ci


# -- words: what a reader meets -------------------------------------------------

DIARY = re.compile(
    r"\b(this|last|next|the \w+) session\b|\bthis round\b|\bmerged tree\b|EDITOR_FIGURES"
    r"|\bissue #?\d+|#\d{2,}\b",
    re.IGNORECASE,
)


@pytest.mark.parametrize("path", all_sources(), ids=_name)
def test_no_development_diary_in_what_a_user_reads(path: Path) -> None:
    hits = [
        f"{_name(path)} line {number}: {line.strip()[:100]}"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if DIARY.search(line)
    ]
    assert not hits, "\n".join(hits)


def _prose(path: Path) -> str:
    """A page's text without the API-reference directives (``::: module``)."""
    return "\n".join(
        line for line in path.read_text(encoding="utf-8").splitlines() if not line.startswith(":::")
    )


@pytest.mark.parametrize(
    "module", ["lionfactory", "lionfactory.tools", "lionfactory.coding", "lionfactory.errors"]
)
def test_the_pages_mention_every_public_name(module: str) -> None:
    text = "\n".join(_prose(path) for path in sorted(PAGES.rglob("*.md")))
    names = importlib.import_module(module).__all__
    # A schema marker renders the model's name and fields on its page.
    missing = [
        name
        for name in names
        if f"`{name}" not in text
        and f".{name}`" not in text
        and f"<!-- schema: {module}.{name} -->" not in text
    ]
    assert not missing, f"no page mentions {module}: {missing}"


def test_every_module_has_a_reference_page() -> None:
    directives = {
        line.split()[1]
        for path in (PAGES / "reference").glob("*.md")
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith("::: ")
    }
    for module in (
        "lionfactory",
        "lionfactory.tools",
        "lionfactory.coding",
        "lionfactory.errors",
        "lionfactory.mcp",
        "lionfactory.backends",
        "lionfactory.models",
        "lionfactory.integrations",
        "lionfactory.testing",
    ):
        assert module in directives, module


def test_the_performance_page_is_generated_from_the_committed_results() -> None:
    script = ROOT / ".docs" / "performance.py"
    done = run([sys.executable, str(script), "--check"], ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


# -- the runner itself: each kind fails when it should -------------------------


def block(code: str, kind: str = "program", lang: str = "python", **more: object) -> Block:
    return Block("README.md", 1, lang, kind, code, **more)  # type: ignore[arg-type]


def test_an_unmarked_fragment_fails(tmp_path: Path) -> None:
    ran = execute(block("print(branch.tools)\n"), tmp_path)
    assert ran is not None and ran.done.returncode != 0
    assert "NameError" in ran.done.stderr


def test_an_unmarked_block_with_top_level_await_fails(tmp_path: Path) -> None:
    code = "import anyio\nawait anyio.sleep(0)\n"
    ran = execute(block(code), tmp_path)
    assert ran is not None and ran.done.returncode != 0
    assert "SyntaxError" in ran.done.stderr


def test_a_notebook_cell_runs_top_level_await_on_asyncio(tmp_path: Path) -> None:
    code = (
        "import asyncio\nimport sniffio\n"
        "await asyncio.sleep(0)\nprint(sniffio.current_async_library())\n"
    )
    ran = execute(block(code, "notebook"), tmp_path)
    assert ran is not None
    assert ran.done.returncode == 0, ran.done.stderr
    assert ran.done.stdout.strip() == "asyncio"


def test_a_failing_notebook_cell_fails(tmp_path: Path) -> None:
    code = "import asyncio\nawait asyncio.sleep(0)\n1 / 0\n"
    ran = execute(block(code, "notebook"), tmp_path)
    assert ran is not None and ran.done.returncode != 0


def test_a_same_as_block_must_be_verbatim_in_its_example(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="not verbatim"):
        execute(block("not in there\n", "same-as examples/quickstart.py"), tmp_path)
    with pytest.raises(AssertionError, match="unknown docs-test marker"):
        execute(block("pass\n", "sometimes"), tmp_path)


def test_a_same_as_block_may_not_state_output(tmp_path: Path) -> None:
    example = (ROOT / "examples" / "quickstart.py").read_text(encoding="utf-8")
    line = next(line for line in example.splitlines() if line.strip().startswith("print("))
    # The line is verbatim in the example; the output block is the offence.
    quoted = block(line + "\n", "same-as examples/quickstart.py", output="3\n", output_line=2)
    with pytest.raises(AssertionError, match="may not state output"):
        execute(quoted, tmp_path)


def test_an_unmarked_block_of_another_language_fails(tmp_path: Path) -> None:
    for lang in ("bash", "json", "text", ""):
        (found,) = doc_blocks(f"intro\n\n```{lang}\nanything\n```\n")
        assert found.kind == "unmarked"
        with pytest.raises(AssertionError, match="neither runs nor is marked"):
            execute(found, tmp_path)


def test_a_not_run_block_is_shown_only(tmp_path: Path) -> None:
    text = "<!-- docs-test: not-run: installs from a checkout -->\n```bash\nexit 1\n```\n"
    (found,) = doc_blocks(text)
    assert execute(found, tmp_path) is None
    stated = (
        f"<!-- docs-test: not-run -->\n```bash\nexit 1\n```\n{OUTPUT_MARKER}\n```text\nx\n```\n"
    )
    (claims,) = doc_blocks(stated)
    with pytest.raises(AssertionError, match="may not state output"):
        execute(claims, tmp_path)


def test_a_shell_block_runs_and_its_output_is_checked(tmp_path: Path) -> None:
    text = (
        f"<!-- docs-test: shell -->\n```bash\necho one\nlionfactory --version\n```\n"
        f"{OUTPUT_MARKER}\n```text\none\n...\n```\n"
    )
    assert checked(text, tmp_path) == []
    failing = "<!-- docs-test: shell -->\n```bash\nfalse\necho never\n```\n"
    (found,) = doc_blocks(failing)
    ran = execute(found, tmp_path)
    assert ran is not None and ran.done.returncode != 0 and "never" not in ran.done.stdout
    wrong = text.replace("one\n...", "two\n...")
    (problem,) = checked(wrong, tmp_path)
    assert "-two" in problem and "+one" in problem


# -- the output checks: each fails when the page is wrong --------------------


def checked(text: str, tmp_path: Path) -> list[str]:
    """Parse `text` as a page, run its one block, and compare as the test does."""
    (found,) = doc_blocks(text)
    ran = execute(found, tmp_path)
    assert ran is not None and ran.done.returncode == 0, ran
    return output_mismatches(found, ran.done.stdout, ran.prints)


def test_a_wrong_inline_expectation_fails(tmp_path: Path) -> None:
    text = "intro\n\n```python\nx = 2\nprint(x + 1)  # -> 4\n```\n"
    problems = checked(text, tmp_path)
    assert len(problems) == 1
    # The line of the comment is line 5 of the synthetic page.
    assert problems[0].startswith("README.md line 5 ('# -> 4')"), problems
    assert "'3'" in problems[0] and "'4'" in problems[0]


def test_a_true_inline_expectation_passes(tmp_path: Path) -> None:
    text = "```python\nx = 2\nprint(x + 1)  # -> 3\n```\n"
    assert checked(text, tmp_path) == []


def test_an_expectation_alone_on_the_next_line_is_checked(tmp_path: Path) -> None:
    text = "```python\nprint(\n    sorted({'b', 'a'})\n)\n# -> ['a', 'c']\n```\n"
    (problem,) = checked(text, tmp_path)
    assert problem.startswith("README.md line 5 ") and "['a', 'b']" in problem


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
        "<!-- docs-test: notebook -->\n```python\nimport asyncio\n"
        "await asyncio.sleep(0)\nprint('hi')  # -> ho\n```\n"
    )
    (problem,) = checked(text, tmp_path)
    assert problem.startswith("README.md line 5 ")


def test_an_expectation_on_no_print_is_refused(tmp_path: Path) -> None:
    (found,) = doc_blocks("```python\nx = 3  # -> 3\n```\n")
    with pytest.raises(AssertionError, match=r"README\.md line 2: .*print"):
        expectations(found)


def test_a_second_expectation_on_one_print_is_refused() -> None:
    (found,) = doc_blocks("```python\nprint('a\\nb')  # -> a\n# -> b\n```\n")
    with pytest.raises(AssertionError, match=r"README\.md line 3: a second expectation"):
        expectations(found)


def test_an_output_block_must_match_stdout(tmp_path: Path) -> None:
    text = (
        f"```python\nprint('one')\nprint('two')\n```\n\n{OUTPUT_MARKER}\n```text\none\nthree\n```\n"
    )
    (problem,) = checked(text, tmp_path)
    assert "README.md line 8 (output block)" in problem
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


def test_a_text_block_without_the_marker_is_not_an_output_block() -> None:
    first, second = doc_blocks("```python\nprint(1)\n```\n\n```text\n2\n```\n")
    assert first.output is None and second.kind == "unmarked"


def test_lines_match_wildcards() -> None:
    assert lines_match(["a", "...", "b"], ["a", "b"])
    assert lines_match(["a", "...", "b"], ["a", "x", "y", "b"])
    assert not lines_match(["a", "...", "b"], ["a", "x"])
    assert not lines_match(["a"], ["a", "b"])
    assert lines_match(["..."], [])


def test_the_performance_page_has_a_table_per_workload_with_baseline_and_ratio() -> None:
    spec = importlib.util.spec_from_file_location("performance", ROOT / ".docs" / "performance.py")
    assert spec is not None and spec.loader is not None
    performance = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(performance)
    report = {
        "size": "full",
        "machine": {"processor": "Example CPU", "cpus": 4, "python": "3.11.9"},
        "date": "2026-01-02T03:04:05Z",
        "commit": "abc1234",
        "rows": [
            {
                "bench": "reader",
                "name": "window",
                "value": 0.0015,
                "baseline": 0.0005,
                "unit": "s",
                "target": "<= 2x",
                "met": False,
                "ratio": 3.0,
            },
            {
                "bench": "calls",
                "name": "act",
                "value": 54.0,
                "baseline": None,
                "unit": "us",
                "target": "< 150 us",
                "met": True,
                "ratio": None,
            },
        ],
        "failures": {"mcp": "Traceback ..."},
        "seconds": {"reader": 12.0, "calls": 1.0},
    }
    page = performance.render(report)
    assert "| date (UTC) | 2026-01-02T03:04:05Z |" in page and "| commit | abc1234 |" in page
    assert "Example CPU, 4 CPUs" in page and "Not the full sizes" not in page
    assert "## reader\n" in page and "## calls\n" in page
    assert "| window | 1.5 ms | 500 us | 3x | <= 2x | **missed** |" in page
    assert "| act | 54.0 us | - | - | < 150 us | yes |" in page
    assert "- `mcp`" in page  # a crashed benchmark is listed, not hidden
    assert "Not the full sizes" in performance.render({**report, "size": "tiny"})

"""Every Python block of the README runs as shown, so the README cannot rot.

A block is one of three kinds, chosen by the line right before it:

* no marker: a complete program, run as a script from an empty temporary
  directory (an unmarked block that is not a complete program fails here);
* ``<!-- readme-test: notebook -->``: a notebook cell that may use top-level
  ``await``, run under asyncio (Jupyter's loop) from an empty temporary
  directory;
* ``<!-- readme-test: same-as examples/NAME.py -->``: the block appears
  verbatim in that example, which `test_examples.py` runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
MARKER = re.compile(r"<!-- readme-test: (?P<kind>[^>]*?) -->")

# Runs a notebook cell the way Jupyter does: compiled with top-level await
# allowed, and awaited on an asyncio loop if it awaits anything.
NOTEBOOK_RUNNER = """\
import ast, asyncio, sys
source = open(sys.argv[1], encoding="utf-8").read()
code = compile(source, sys.argv[1], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
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


def readme_blocks(text: str) -> list[Block]:
    """Every ```python block with the marker on the line before it (or "program")."""
    blocks = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        if lines[i].rstrip("\n") != "```python":
            i += 1
            continue
        start = i
        before = lines[i - 1].strip() if i else ""
        marker = MARKER.fullmatch(before)
        i += 1
        body = []
        while i < len(lines) and lines[i].rstrip("\n") != "```":
            body.append(lines[i])
            i += 1
        blocks.append(Block(start + 1, marker["kind"] if marker else "program", "".join(body)))
        i += 1
    return blocks


BLOCKS = readme_blocks(README)


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


def execute(block: Block, tmp_path: Path) -> subprocess.CompletedProcess[str] | None:
    """Run `block` by its kind; None for a same-as block (checked, not run)."""
    work = tmp_path / "cwd"
    work.mkdir(exist_ok=True)
    if block.kind == "program":
        script = tmp_path / "block.py"
        script.write_text(block.code, encoding="utf-8")
        return run([sys.executable, str(script)], work)
    if block.kind == "notebook":
        cell = tmp_path / "cell.py"
        cell.write_text(block.code, encoding="utf-8")
        return run([sys.executable, "-c", NOTEBOOK_RUNNER, str(cell)], work)
    same_as = re.fullmatch(r"same-as (examples/[\w.-]+\.py)", block.kind)
    assert same_as, f"unknown readme-test marker {block.kind!r} (line {block.line})"
    example = (ROOT / same_as[1]).read_text(encoding="utf-8")
    assert block.code in example, f"README line {block.line} is not verbatim in {same_as[1]}"
    return None


def test_every_python_block_is_found() -> None:
    assert len(BLOCKS) == README.count("```python\n")
    assert len(BLOCKS) >= 10


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"line-{b.line}-{b.kind.split()[0]}")
def test_readme_block_runs_as_shown(block: Block, tmp_path: Path) -> None:
    done = execute(block, tmp_path)
    if done is not None:
        assert done.returncode == 0, f"README line {block.line}:\n{done.stdout}{done.stderr}"


def test_the_quick_example_prints_the_answer(tmp_path: Path) -> None:
    done = execute(BLOCKS[0], tmp_path)
    assert done is not None and done.returncode == 0, done
    assert done.stdout.splitlines()[0] == "3"


# -- the runner itself: each kind fails when it should -------------------------


def test_an_unmarked_fragment_fails(tmp_path: Path) -> None:
    done = execute(Block(1, "program", "print(branch.tools)\n"), tmp_path)
    assert done is not None and done.returncode != 0
    assert "NameError" in done.stderr


def test_an_unmarked_block_with_top_level_await_fails(tmp_path: Path) -> None:
    code = "import anyio\nawait anyio.sleep(0)\n"
    done = execute(Block(1, "program", code), tmp_path)
    assert done is not None and done.returncode != 0
    assert "SyntaxError" in done.stderr


def test_a_notebook_cell_runs_top_level_await_on_asyncio(tmp_path: Path) -> None:
    code = (
        "import asyncio\nimport sniffio\n"
        "await asyncio.sleep(0)\nprint(sniffio.current_async_library())\n"
    )
    done = execute(Block(1, "notebook", code), tmp_path)
    assert done is not None and done.returncode == 0, done.stderr
    assert done.stdout.strip() == "asyncio"


def test_a_failing_notebook_cell_fails(tmp_path: Path) -> None:
    done = execute(
        Block(1, "notebook", "import asyncio\nawait asyncio.sleep(0)\n1 / 0\n"), tmp_path
    )
    assert done is not None and done.returncode != 0


def test_a_same_as_block_must_be_verbatim_in_its_example(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="not verbatim"):
        execute(Block(1, "same-as examples/quickstart.py", "not in there\n"), tmp_path)
    with pytest.raises(AssertionError, match="unknown readme-test marker"):
        execute(Block(1, "sometimes", "pass\n"), tmp_path)


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    commands = re.search(r"```bash\n(.*?)```", README, re.DOTALL)
    assert commands is not None
    test_command = commands.group(1).strip().splitlines()[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()

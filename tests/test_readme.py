"""The README's self-contained Python examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.DOTALL)
# The first two blocks are complete programs; later ones show calls in context.
RUNNABLE = BLOCKS[:2]


@pytest.mark.parametrize("code", RUNNABLE, ids=["quick-example", "branch-bound-factory"])
def test_readme_example_runs(code: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_the_quick_example_prints_the_answer(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(RUNNABLE[0])
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stdout.splitlines()[0] == "3"


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    commands = re.search(r"```bash\n(.*?)```", README, re.DOTALL)
    assert commands is not None
    test_command = commands.group(1).strip().splitlines()[1]
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()

"""'*** Begin Patch' (V4A) patches of real files apply exactly, or are refused untouched.

The patches are made the way a model's V4A patch reads: real Python files of
installed packages (`editor_corpus.source_files`) changed at a few places
(a line changed, two lines changed, a line added, a line removed), each
change a hunk with three lines of context and an ``@@`` line naming the
enclosing function or class, as Codex writes them. Every patch must apply to
exactly the changed bytes or be refused with the file untouched; none may be
misapplied.
"""

from __future__ import annotations

import ast
import difflib
import random
import re
from pathlib import Path

import editor_corpus as corpus
import pytest

from lionfactory.tools import editor_tool


def changed(lines: list[str], rng: random.Random) -> list[str]:
    """`lines` (a text split at line feeds) with one to four changes."""
    lines = list(lines)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(lines) - 1)  # the last element is the text's end
        kind = rng.choice(["change", "change_two", "insert", "delete"])
        if kind == "change":
            lines[at] += "  # edited"
        elif kind == "change_two" and at + 2 < len(lines):
            lines[at : at + 2] = [lines[at] + "  # e1", lines[at + 1] + "  # e2"]
        elif kind == "insert":
            indent = re.match(r"\s*", lines[at])
            lines.insert(at, (indent.group() if indent else "") + "x_new = 1  # added")
        elif kind == "delete" and len(lines) > 5:
            del lines[at]
    return lines


def enclosing(old: list[str]) -> dict[int, list[int]]:
    """For each line index, the first lines of the defs and classes holding it, outermost first."""
    chains: dict[int, list[int]] = {}
    nodes = [
        node
        for node in ast.walk(ast.parse("\n".join(old)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]
    for node in sorted(nodes, key=lambda n: n.lineno):
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
            chains.setdefault(line - 1, []).append(node.lineno - 1)
    return chains


def v4a(path: str, old: list[str], new: list[str]) -> str:
    """The V4A patch from `old` to `new`: hunks of three context lines, each anchored.

    A hunk's ``@@`` line names the innermost function or class its first
    change is in whose first line comes before the hunk; when that line's
    text occurs more than once in the file, the enclosing ones are named
    too, outermost first, each on its own ``@@`` line (as a careful model
    disambiguates).
    """
    out = ["*** Begin Patch", f"*** Update File: {path}"]
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    chains = enclosing(old)
    for group in matcher.get_grouped_opcodes(3):
        changed_at = next(i1 for tag, i1, _, _, _ in group if tag != "equal")
        openers = [o for o in chains.get(changed_at, []) if o < group[0][1]]
        if not openers:
            out.append("@@")
        elif sum(line.strip() == old[openers[-1]].strip() for line in old) == 1:
            out.append(f"@@ {old[openers[-1]].strip()}")
        else:
            out += [f"@@ {old[o].strip()}" for o in openers]
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in old[i1:i2]]
            if tag in ("replace", "delete"):
                out += ["-" + line for line in old[i1:i2]]
            if tag in ("replace", "insert"):
                out += ["+" + line for line in new[j1:j2]]
    out.append("*** End Patch")
    return "\n".join(out) + "\n"


def test_the_corpus_of_real_v4a_patches_applies_with_none_misapplied(tmp_path: Path) -> None:
    rng = random.Random(20240601)
    outcomes = {"applied": 0, "refused": 0, "misapplied": 0}
    refused: list[str] = []
    files = [f for f in corpus.source_files(250) if "\r" not in f.read_text(encoding="utf-8")]
    assert len(files) >= 100, "the corpus needs the installed packages' sources"
    editor = editor_tool(workspace_root=tmp_path)
    for n, source in enumerate(files):
        text = source.read_text(encoding="utf-8")
        before = text.split("\n")
        after = changed(before, rng)
        if after == before:
            continue
        name = f"m{n}.py"
        (tmp_path / name).write_text(text, encoding="utf-8")
        result = editor.run_sync(action="apply_patch", patch=v4a(name, before, after))
        now = (tmp_path / name).read_text(encoding="utf-8")
        if result["success"] and now == "\n".join(after):
            outcomes["applied"] += 1
        elif not result["success"] and now == text:
            outcomes["refused"] += 1
            refused.append(f"{source}: {result['error'][:200]}")
        else:
            outcomes["misapplied"] += 1
    total = sum(outcomes.values())
    assert outcomes["misapplied"] == 0, outcomes
    # A change at a line that occurs twice in one function is refused as
    # ambiguous (never guessed); everything else applies.
    assert outcomes["applied"] >= 0.99 * total, (outcomes, refused)


def test_a_last_hunk_whose_trailing_empty_line_is_the_final_line_feed_applies(
    tmp_path: Path,
) -> None:
    (tmp_path / "m.py").write_text("def f():\n    a = 1\n    return a\n")
    editor = editor_tool(workspace_root=tmp_path)
    patch = (
        "*** Begin Patch\n*** Update File: m.py\n@@ def f():\n     a = 1\n-    return a\n"
        "+    return a + 1\n \n*** End Patch\n"
    )
    result = editor.run_sync(action="apply_patch", patch=patch)
    assert result["success"] is True, result
    assert (tmp_path / "m.py").read_text() == "def f():\n    a = 1\n    return a + 1\n"


@pytest.mark.parametrize(
    "body",
    [
        # The empty line would have to come before the file's end: not the final line feed.
        "@@\n     a = 1\n-    return a\n+    return 2\n \n     # more\n",
        "@@\n-    a = 1\n+    a = 2\n \n",
    ],
)
def test_an_empty_trailing_line_not_at_the_end_of_the_file_is_still_refused(
    tmp_path: Path, body: str
) -> None:
    text = "def f():\n    a = 1\n    return a\n    # more\n"
    (tmp_path / "m.py").write_text(text)
    editor = editor_tool(workspace_root=tmp_path)
    result = editor.run_sync(
        action="apply_patch", patch=f"*** Begin Patch\n*** Update File: m.py\n{body}*** End Patch\n"
    )
    assert result["success"] is False and "cannot be placed" in result["error"]
    assert (tmp_path / "m.py").read_text() == text


TWO_CLASSES = (
    "class A:\n"
    "    def f(self):\n"
    "        x = 1\n"
    "        y = 2\n"
    "        return x\n"
    "\n"
    "    def g(self):\n"
    "        return 0\n"
    "\n"
    "\n"
    "class B:\n"
    "    def f(self):\n"
    "        x = 1\n"
    "        y = 2\n"
    "        return x\n"
)


def apply(tmp_path: Path, text: str, body: str) -> tuple[dict[str, object], str]:
    (tmp_path / "m.py").write_text(text)
    editor = editor_tool(workspace_root=tmp_path)
    patch = f"*** Begin Patch\n*** Update File: m.py\n{body}*** End Patch\n"
    result = editor.run_sync(action="apply_patch", patch=patch)
    return result, (tmp_path / "m.py").read_text()


def test_lines_that_occur_twice_go_where_the_named_class_holds_them(tmp_path: Path) -> None:
    result, text = apply(
        tmp_path, TWO_CLASSES, "@@ class B:\n@@ def f(self):\n-        y = 2\n+        y = 3\n"
    )
    assert result["success"] is True, result
    assert text == TWO_CLASSES.replace(
        "y = 2\n        return x\n", "y = 3\n        return x\n", 2
    ).replace("y = 3", "y = 2", 1)


def test_an_enclosing_function_named_again_for_a_second_hunk_applies(tmp_path: Path) -> None:
    """The second ``@@ def f`` names the function the first hunk is in: no later one has it."""
    body = (
        "@@ class B:\n@@ def f(self):\n-        x = 1\n+        x = 10\n"
        "@@ def f(self):\n         y = 2\n-        return x\n+        return x + 1\n"
    )
    result, text = apply(tmp_path, TWO_CLASSES, body)
    assert result["success"] is True, result
    head, _, tail = TWO_CLASSES.partition("class B:")
    assert text == head + "class B:" + tail.replace("x = 1", "x = 10").replace(
        "return x\n", "return x + 1\n"
    )


def test_lines_that_occur_twice_under_no_telling_anchor_are_refused(tmp_path: Path) -> None:
    result, text = apply(tmp_path, TWO_CLASSES, "@@\n-        y = 2\n+        y = 3\n")
    assert result["success"] is False and "occur 2 times" in str(result["error"])
    assert text == TWO_CLASSES

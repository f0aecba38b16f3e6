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

import difflib
import random
import re
from pathlib import Path

import editor_corpus as corpus
import pytest

from lionfactory.tools import editor_tool

ANCHOR = re.compile(r"^\s*(?:async\s+def|def|class)\s+\w+")


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


def v4a(path: str, old: list[str], new: list[str]) -> str:
    """The V4A patch from `old` to `new`: hunks of three context lines, anchored."""
    out = ["*** Begin Patch", f"*** Update File: {path}"]
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for group in matcher.get_grouped_opcodes(3):
        first = group[0][1]
        anchor = next(
            (old[j].strip() for j in range(first - 1, -1, -1) if ANCHOR.match(old[j])), ""
        )
        out.append(f"@@ {anchor}".rstrip())
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
    assert outcomes["applied"] >= 0.97 * total, (outcomes, refused)


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

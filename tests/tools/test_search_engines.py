"""ripgrep and the builtin engine agree with each other, and with git, on generated trees."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

import trio
from hypothesis import given
from hypothesis import strategies as st

from lionfactory._os.binaries import BinaryFinder
from lionfactory._os.project import ProjectView
from lionfactory._os.workspace import Workspace
from lionfactory.tools.search import search_tool

DIRS = ("", "a", "b", "build", "a/sub", "b/build", "a/sub/deep", ".hidden")
FILES = ("x.py", "keep.log", "a.log", "y.txt", "important.tmp", "z.tmp", "notes.md")
PATTERNS = (
    "*.log",
    "!keep.log",
    "build/",
    "/a",
    "a/",
    "*.tmp",
    "!important.tmp",
    "sub/*.py",
    "**/b",
    "b/**",
    "x.py",
    "/y.txt",
    "a/**/x.py",
    "!*.py",
    "sub",
    "!sub/",
    "deep/",
    "*.txt",
    "!a.log",
    "# a comment",
    "",
    ".hidden/",
)


@st.composite
def trees(draw: st.DrawFn) -> dict[str, str]:
    files = draw(
        st.sets(st.tuples(st.sampled_from(DIRS), st.sampled_from(FILES)), min_size=1, max_size=14)
    )
    tree = {f"{d}/{name}".lstrip("/"): f"needle in {d}/{name}\n" for d, name in files}
    kinds = draw(st.sampled_from([(".gitignore",), (".gitignore", ".ignore")]))
    for directory in draw(st.sets(st.sampled_from(DIRS), max_size=3)):
        kind = draw(st.sampled_from(kinds))
        patterns = draw(st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=5))
        tree[f"{directory}/{kind}".lstrip("/")] = "\n".join(patterns) + "\n"
    return tree


def build(root: Path, tree: dict[str, str], repository: bool) -> None:
    root.mkdir()
    if repository:
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    for name, text in tree.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


async def both_engines(root: Path, **arguments: Any) -> dict[str, dict[str, Any]]:
    answers = {}
    for engine, finder in (
        ("ripgrep", BinaryFinder()),
        ("builtin", BinaryFinder(hidden={"rg"})),
    ):
        answer = await search_tool(workspace_root=root, _binaries=finder)(**arguments)
        assert answer["success"] and answer["engine"] == engine, answer
        answers[engine] = answer
    return answers


def listed(answer: dict[str, Any]) -> set[str]:
    return {row for row in answer["content"].splitlines() if not row.startswith(("No ", "["))}


def git_project_files(root: Path) -> set[str]:
    done = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return {name for name in done.stdout.split("\0") if name}


async def compare(root: Path, tree: dict[str, str], repository: bool) -> None:
    find = await both_engines(root, action="find", pattern="*", max_results=1000)
    assert find["ripgrep"]["content"] == find["builtin"]["content"]
    files = {row for row in listed(find["ripgrep"]) if not row.endswith("/")}
    grep = await both_engines(
        root, action="grep", pattern="needle", output_mode="files_with_matches", max_results=1000
    )
    assert grep["ripgrep"]["content"] == grep["builtin"]["content"]
    assert listed(grep["ripgrep"]) == {f for f in files if not f.endswith("ignore")}
    lines = await both_engines(root, action="grep", pattern="in [ab]/", context=1)
    assert lines["ripgrep"]["content"] == lines["builtin"]["content"]
    everything = await both_engines(
        root, action="find", pattern="*", include_ignored=True, max_results=1000
    )
    assert everything["ripgrep"]["content"] == everything["builtin"]["content"]
    assert {r for r in listed(everything["ripgrep"]) if not r.endswith("/")} == set(tree)
    if repository and not any(name.endswith(".ignore") for name in tree):
        assert files == git_project_files(root)
    # code_check and ast_search filter a helper's report path by path with
    # `visible`; it must agree with the walk.
    view = ProjectView(Workspace.at(root))
    assert {name for name in tree if view.visible(name)} == files


@given(tree=trees(), repository=st.booleans())
def test_engines_agree_with_each_other_and_with_git(tree: dict[str, str], repository: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="lf-engines-") as base:
        root = Path(base) / "ws"
        build(root, tree, repository)
        trio.run(compare, root, tree, repository)


async def test_engines_agree_on_context_case_and_modes(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    build(
        root,
        {
            "a.py": "One\ntwo\nONE more\nthree\nfour\none again\n",
            "b.txt": "nothing\none\n",
            ".gitignore": "ignored.py\n",
            "ignored.py": "one\n",
        },
        repository=False,
    )
    for arguments in (
        {"pattern": "one", "case_insensitive": True, "before": 1},
        {"pattern": "one", "output_mode": "count"},
        {"pattern": "one", "output_mode": "files_with_matches", "type": "py"},
        {"pattern": "o\\w+\\s", "after": 2, "include": "*.py"},
        {"pattern": "two\\nONE", "multiline": True},
        {"pattern": "^t", "max_results": 2},
    ):
        answers = await both_engines(root, action="grep", **arguments)
        assert answers["ripgrep"]["content"] == answers["builtin"]["content"], arguments
        assert answers["ripgrep"]["total"] == answers["builtin"]["total"], arguments

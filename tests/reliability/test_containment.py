"""Workspace containment under hostile paths, for every path-taking tool.

Property: given any path, a tool either works on a location inside the root
that is not protected, or returns a typed refusal. It never raises, never
changes anything beside the workspace (a canary directory and file whose
names, modes, sizes, mtimes and contents are snapshotted) and never answers
with the content of a canary or a protected file.

Paths are drawn from the components that matter in the layout (symlinks
inside-to-outside, outside-to-inside, chains, loops, dangling, to protected
files, to the parent), ``..``, ``~``, NUL, dots, Unicode look-alikes of
``.`` and ``/``, names and paths longer than the kernel allows, and prefixes
that make the path absolute inside, beside or above the root.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from _support import NAMES, Layout, allowed_target, hostile_workspace, leaks, snapshot_outside
from hypothesis import event, example, given
from hypothesis import strategies as st

from lionfactory._os.binaries import BinaryFinder
from lionfactory.tools.ast_search import ast_search_tool
from lionfactory.tools.bash import bash_tool
from lionfactory.tools.code_check import code_check_tool
from lionfactory.tools.code_nav import code_nav_tool
from lionfactory.tools.editor import editor_tool
from lionfactory.tools.reader import reader_tool
from lionfactory.tools.search import search_tool

# One dot leader, two dot leader, fullwidth full stop, division slash,
# fullwidth solidus, zero-width space, Cyrillic e, dotless i, no-break space.
LOOKALIKES = "\u2024\u2025\uff0e\u2215\uff0f\u200b\u0435\u0131\u00a0"
# \udcff is a lone surrogate the filesystem encoding can carry (surrogateescape);
# surrogates it cannot encode are covered by test_unencodable_paths_are_refused.
ALPHABET = "./~\x00-_ aZ\\*?$" + LOOKALIKES + "\udcff"

components = st.one_of(
    st.sampled_from(NAMES),
    st.sampled_from(["..", ".", "", "~", "...", "\x00", "a" * 256, "\u00e9" * 200]),
    st.text(alphabet=ALPHABET, min_size=1, max_size=6),
)
PREFIXES = ("", "", "", "/", "./", "~/", "~root/", "{ws}/", "{canary}/", "{base}/", "{ws}/../")


# Paths that exist in the layout (some through links), as starting points
# for mutation: random paths alone rarely name anything that exists.
EXISTING = (
    ".",
    "a.txt",
    "pkg",
    "pkg/mod.py",
    "sub",
    ".git/config",
    "self/self/pkg/mod.py",
    "sub/back/secret.py",
    "sub/root/pkg",
    "sub/root/.env",
    "out_dir/deep",
    "chain1/secret.py",
    "up/canary",
    "up/ws/pkg/mod.py",
    "in_link",
    "env_link",
    "loop_a/x",
    "dangling_out/x.py",
    ".env",
    "keys/id_rsa",
    ".env.py",
    "sub/.env.py",
    "{canary}/ws_link/pkg",
    "{ws}/pkg/mod.py",
    "{canary}/deep",
    "{base}/ws/sub",
)


@st.composite
def random_paths(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 30)) == 0:
        return draw(st.sampled_from(["a/" * 2100, "../" * 40 + "etc/passwd", "\x00", " "]))
    prefix = draw(st.sampled_from(PREFIXES))
    parts = draw(st.lists(components, min_size=1, max_size=6))
    trailing = "/" if draw(st.booleans()) else ""
    # Braces in generated names must not read as template fields.
    body = "/".join(parts).replace("{", "{{").replace("}", "}}")
    return prefix + body + trailing


@st.composite
def mutated_paths(draw: st.DrawFn) -> str:
    path = draw(st.sampled_from(EXISTING))
    for _ in range(draw(st.integers(0, 3))):
        how = draw(st.sampled_from(["append", "up", "dot", "lookalike", "slashes", "prefix"]))
        if how == "append":
            path += "/" + draw(components).replace("{", "{{").replace("}", "}}")
        elif how == "up":
            path += "/.."
        elif how == "dot":
            path = path.replace("/", "/./", 1)
        elif how == "lookalike":
            path = path.replace("/", draw(st.sampled_from(["\u2215", "\uff0f"])), 1)
        elif how == "slashes":
            path = path.replace("/", "//", 1)
        elif not path.startswith("{"):
            path = draw(st.sampled_from(PREFIXES)) + path
    return path


hostile_paths = st.one_of(mutated_paths(), random_paths())
"""A path template; ``{ws}``, ``{canary}`` and ``{base}`` are filled in per example."""


def every_existing_path(test: Callable[..., None]) -> Callable[..., None]:
    """Run `test` on each of `EXISTING` too, before the generated examples."""
    for template in reversed(EXISTING):
        test = example(template=template)(test)
    return test


def fill(template: str, layout: Layout) -> str:
    return template.format(ws=layout.ws, canary=layout.canary, base=layout.base)


def refused(answer: dict[str, Any]) -> bool:
    """A typed refusal: the tool's own failure shape, with a message."""
    if "success" in answer:
        return answer["success"] is False and bool(answer["error"])
    if "status" in answer:
        return answer["status"] == "error" and bool(answer["summary"])
    return answer["return_code"] is None and bool(answer["error"])


def worked(answer: dict[str, Any]) -> bool:
    if "success" in answer:
        return answer["success"] is True
    if "status" in answer:
        return answer["status"] in ("ok", "matches", "diagnostics")
    return answer["return_code"] is not None


def check(tool: str, path: str, answer: dict[str, Any], layout: Layout) -> None:
    event(f"{tool}: {'worked' if worked(answer) else 'refused'}")
    assert not leaks(answer), f"{tool} leaked {leaks(answer)} for {path!r}: {answer}"
    assert worked(answer) or refused(answer), f"{tool}: neither worked nor refused: {answer}"
    if worked(answer):
        assert allowed_target(layout.ws, path) is not None, (
            f"{tool} worked on {path!r}, which is outside the root or protected: {answer}"
        )


def relative_files(answer: dict[str, Any]) -> list[str]:
    items = answer.get("diagnostics") or answer.get("matches") or []
    return [item["file"] for item in items]


async def run_file_tools(layout: Layout, path: str) -> list[tuple[str, dict[str, Any]]]:
    root = layout.ws
    reader, editor, nav = (
        reader_tool(workspace_root=root),
        editor_tool(workspace_root=root),
        code_nav_tool(workspace_root=root),
    )
    return [
        ("reader.read", await reader(action="read", path=path)),
        ("reader.list_dir", await reader(action="list_dir", path=path, recursive=True)),
        ("reader.list_dir flat", await reader(action="list_dir", path=path)),
        ("code_nav", await nav(action="outline", path=path)),
        (
            "editor.edit",
            await editor(action="edit", file_path=path, old_string="hello", new_string="howdy"),
        ),
        ("editor.write", await editor(action="write", file_path=path, content="written\n")),
    ]


@given(template=hostile_paths)
@every_existing_path
def test_file_tools_stay_inside_the_root(template: str) -> None:
    with hostile_workspace() as layout:
        path = fill(template, layout)
        before = snapshot_outside(layout)
        answers = trio.run(run_file_tools, layout, path)
        for tool, answer in answers:
            check(tool, path, answer, layout)
        tools = dict(answers)
        if worked(tools["editor.write"]):
            written = allowed_target(layout.ws, path)
            assert written is not None and not written.is_symlink()
            assert written.read_bytes() == b"written\n"
        assert snapshot_outside(layout) == before


async def run_process_tools(layout: Layout, path: str) -> list[tuple[str, dict[str, Any]]]:
    root = layout.ws
    search, check_, ast = (
        search_tool(workspace_root=root),
        code_check_tool(workspace_root=root),
        ast_search_tool(workspace_root=root),
    )
    # The same search without rg: the builtin engine (a Python walk, then grep).
    builtin = search_tool(workspace_root=root, _binaries=BinaryFinder(hidden={"rg"}))
    bash = bash_tool(workspace_root=root)
    pwd = f"{sys.executable} -I -S -c 'import os;print(os.getcwd())'"
    return [
        ("search.grep", await search(action="grep", pattern="SECRET|PROTECTED|hello", path=path)),
        ("search.find", await search(action="find", pattern="*", path=path, max_results=1000)),
        (
            "search.grep builtin",
            await builtin(action="grep", pattern="SECRET|PROTECTED|hello", path=path),
        ),
        (
            "search.find builtin",
            await builtin(action="find", pattern="*", path=path, max_results=1000),
        ),
        ("code_check", await check_(paths=[path])),
        ("ast_search", await ast(pattern="print($A)", path=path)),
        ("bash", await bash(command=pwd, cwd=path)),
    ]


@given(template=hostile_paths)
@every_existing_path
def test_process_tools_stay_inside_the_root(template: str) -> None:
    """search, code_check, ast_search and bash's cwd."""
    with hostile_workspace() as layout:
        path = fill(template, layout)
        before = snapshot_outside(layout)
        answers = trio.run(run_process_tools, layout, path)
        for tool, answer in answers:
            check(tool, path, answer, layout)
            for file in relative_files(answer):
                assert not Path(file).is_absolute() and ".." not in Path(file).parts, (tool, file)
        bash = dict(answers)["bash"]
        if worked(bash):
            cwd = Path(bash["stdout"].strip())
            assert allowed_target(layout.ws, str(cwd)) is not None, bash
        assert snapshot_outside(layout) == before


def test_searching_the_root_reports_nothing_beside_or_protected() -> None:
    """The root holds links out and protected Python; a whole-tree search shows neither."""
    with hostile_workspace() as layout:
        answers = trio.run(run_process_tools, layout, ".")
        tools = dict(answers)
        assert all(worked(answer) for _, answer in answers), answers
        for engine in ("", " builtin"):
            assert tools["search.grep" + engine]["content"] == "a.txt:1:hello world"
            found = tools["search.find" + engine]["content"].splitlines()
            assert "pkg/mod.py" in found
            assert not [f for f in found if "secret" in f or ".env" in f or "id_rsa" in f]
        assert tools["search.grep"]["engine"] == "ripgrep"
        assert tools["search.grep builtin"]["engine"] == "builtin"
        assert tools["code_check"]["status"] == "ok", tools["code_check"]
        assert tools["ast_search"]["status"] == "ok", tools["ast_search"]


@pytest.mark.parametrize("path", ["\ud800", "a/\udbff\udfff\ud800", "sub/\ud83d"])
def test_unencodable_paths_are_refused(path: str) -> None:
    """A lone surrogate (JSON escapes allow one) cannot name a file; every tool refuses it."""
    with hostile_workspace() as layout:
        answers = trio.run(run_file_tools, layout, path)
        answers += trio.run(run_process_tools, layout, path)
        for tool, answer in answers:
            assert refused(answer), (tool, answer)

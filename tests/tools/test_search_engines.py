"""ripgrep and the builtin engine agree with each other, and with git, on generated trees."""

from __future__ import annotations

import fnmatch
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from lionfactory._os.binaries import BinaryFinder
from lionfactory._os.project import ProjectView
from lionfactory._os.workspace import Workspace
from lionfactory.tools import _search_engines as engines
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


# -- ripgrep's plain output against its JSON events --------------------------------


def _adversarial_tree(root: Path) -> None:
    root.mkdir()
    files: dict[bytes, bytes] = {
        b"a.txt": b"one needle\ntwo\nthree needle\n",
        b"crlf.txt": b"needle\r\nfoo\r\nNEEDLE bar\r\n",
        b"co:lon-12:x.txt": b"needle colon\n12:needle-ish\n",
        b"caf\xe9.txt": b"needle in a latin-1 name\n",
        b"latin.txt": b"needle caf\xe9 \xff\n",
        b"new\nline.txt": b"needle behind a newline in the name\n",
        b"--": b"needle in a file called --\n",
        b"multi.txt": b"aaa\nneedle\nbbb\nneedle2\nccc\n",
        b"ctx.txt": b"".join(
            b"l%d needle\n" % i if i % 5 == 0 else b"l%d\n" % i for i in range(30)
        ),
        b"early.bin": b"\0start\nneedle here\n",
        # A match before the first NUL, which lies past ripgrep's first
        # buffer: its plain output adds a notice about the binary file.
        b"late.bin": b"needle early\n" + b"filler line\n" * 20_000 + b"\0\nneedle late\n",
        b"sub/deep.txt": b"needle deep\n",
    }
    for name, data in files.items():
        path = os.path.join(os.fsencode(root), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as file:
            file.write(data)


QUERIES = (
    {"pattern": "needle"},
    {"pattern": "needle", "case_insensitive": True},
    {"pattern": "needle", "before": 2, "after": 1},
    {"pattern": "needle\\nbbb\\nneedle2", "multiline": True},
    {"pattern": "needle", "multiline": True, "after": 1},
    {"pattern": "^l[0-9]+ needle$", "before": 3, "after": 3},
    {"pattern": "needle", "globs": ("*.txt",)},
    {"pattern": "needle", "target": "./sub"},
    {"pattern": "needle", "target": "./late.bin"},
    {"pattern": "needle", "target": "./early.bin"},
    {"pattern": "needle", "target": "./new\nline.txt"},
    {"pattern": "absent"},
)


async def test_plain_lines_and_json_events_give_the_same_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ws"
    _adversarial_tree(root)
    workspace = Workspace.at(root)
    view = ProjectView(workspace)
    rg = BinaryFinder().find("rg")
    assert rg is not None
    parse = engines._parse_text_lines
    plain_answers: list[bool] = []

    def watched(stdout: str) -> list[engines.Line] | None:
        lines = parse(stdout)
        plain_answers.append(lines is not None)
        return lines

    for arguments in QUERIES:
        query = engines.GrepQuery(**{"target": ".", **arguments})  # type: ignore[arg-type]
        monkeypatch.setattr(engines, "_parse_text_lines", watched)
        plain = await engines.grep_ripgrep(rg, workspace, view, query)
        monkeypatch.setattr(engines, "_parse_text_lines", lambda stdout: None)
        events = await engines.grep_ripgrep(rg, workspace, view, query)
        assert plain == events, arguments
    # The plain output answered the searches that do not reach the name with
    # a newline (the multiline pair, ctx.txt's lines, ./sub, late.bin given
    # by name, nothing found); the rest met that name, or early.bin's
    # binary notice, and fell back to the events.
    TEXT, JSON = True, False  # which output answered each query
    assert plain_answers == [
        *(JSON, JSON, JSON),  # the whole tree, case-insensitive, context
        *(TEXT, JSON, TEXT),  # the multiline pair, multiline + context, ctx.txt
        *(JSON, TEXT, TEXT),  # *.txt, ./sub, late.bin by name
        *(JSON, JSON, TEXT),  # early.bin by name, the newline name, nothing
    ]
    everything = await engines.grep_ripgrep(
        rg, workspace, view, engines.GrepQuery(pattern="needle", target=".")
    )
    assert {line.path for line in everything.lines} >= {"new\nline.txt", "caf\ufffd.txt", "--"}


def test_plain_lines_refuse_what_they_cannot_read_exactly() -> None:
    parse = engines._parse_text_lines
    assert parse("./a\x001:x\n--\n./b\x002-y\n./cut\x003:fragm") == [
        engines.Line("a", 1, "x", True),
        engines.Line("b", 2, "y", False),
    ]
    assert parse("./a\x001:text with \x00 and : inside\n") == [
        engines.Line("a", 1, "text with \x00 and : inside", True)
    ]
    assert parse("") == []
    assert parse("./new\nline.txt\x001:x\n") is None  # a name with a newline
    assert parse("./late.bin: WARNING: stopped searching binary file\n") is None
    assert parse("b.txt\x001:x\n") is None  # every path starts with the target's "./"
    assert parse("./a\x00x:y\n") is None


# -- the protected names as ripgrep globs ------------------------------------------

_NAME_PARTS = (
    ".env", "env", ".", "id_rsa", "id_ed25519", ".pub", "pub", "_sk", ".bak", "~", ".swp",
    ".copy", "pem", ".key", "key", "x", "-", ".netrc", "netrc", "credentials", ".aws", "p",
)  # fmt: skip


@given(
    names=st.sets(
        st.lists(st.sampled_from(_NAME_PARTS), min_size=1, max_size=4)
        .map("".join)
        .flatmap(lambda name: st.sampled_from([name, name.upper(), name.title()]))
        .filter(lambda name: name not in (".", "..")),
        min_size=1,
        max_size=25,
    )
)
def test_ripgrep_globs_exclude_exactly_the_protected_patterns(names: set[str]) -> None:
    rg = BinaryFinder().find("rg")
    assert rg is not None
    protected = Workspace.at(Path("/")).protected
    expected = {
        name
        for name in names
        if not any(fnmatch.fnmatchcase(name.casefold(), pattern) for pattern in protected)
    }
    with tempfile.TemporaryDirectory(prefix="lf-globs-") as base:
        for name in names:
            Path(base, name).write_text("x\n")
        done = subprocess.run(
            [
                rg,
                "--no-config",
                "--hidden",
                "--files",
                "--null",
                *engines._protected_globs(protected),
            ],
            cwd=base,
            capture_output=True,
            check=False,
        )
    listed = {
        os.fsdecode(record).removeprefix("./") for record in done.stdout.split(b"\0") if record
    }
    assert listed == expected


def _expanded(glob: str) -> set[str]:
    """The patterns a brace glob of `_protected_globs` stands for (no nesting, no escapes)."""
    head, brace, rest = glob.partition("{")
    if not brace:
        return {glob}
    inside, _, tail = rest.partition("}")
    return {head + choice + more for choice in inside.split(",") for more in _expanded(tail)}


def test_the_factored_globs_stand_for_exactly_the_protected_patterns() -> None:
    protected = Workspace.at(Path("/")).protected
    globs = engines._protected_globs(protected)
    assert len(globs) <= 5
    stood_for: set[str] = set()
    for argument in globs:
        stood_for |= _expanded(argument.removeprefix("--iglob=!"))
    assert stood_for == protected


def test_families_are_heads_with_the_same_tails() -> None:
    families, rest = engines._families(
        ["a", "a.x", "a.y", "b", "b.x", "b.y", "c", "c.x", "solo", "solo.x", "*.pem", "d", "d.x"]
    )
    assert families == [(["a", "b"], [".x", ".y"]), (["c", "d", "solo"], [".x"])]
    assert rest == ["*.pem"]


def test_a_head_inside_another_head_is_not_factored() -> None:
    # "ab" has the tails ".x", "c" and "c.x"; "abc" only ".x": no family
    # stands for exactly these, so they stay as they are.
    assert engines._families(["ab", "ab.x", "abc", "abc.x"]) == (
        [],
        ["ab", "ab.x", "abc", "abc.x"],
    )

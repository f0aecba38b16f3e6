"""The editor on real files: every perturbation class, zero misapplied, atomic failures.

The corpus (`editor_corpus`) cuts real source files of installed projects
into hunks and perturbs them as models do; each case runs through the
``editor`` tool on a real file in a temporary workspace.
"""

from __future__ import annotations

import collections
from pathlib import Path

import editor_corpus as corpus
import pytest
from _test_helpers import git as _git

from lionfactory.tools.editor import editor_tool

pytestmark = pytest.mark.skipif(
    len(corpus.source_files(5)) < 5, reason="fewer than 5 real source files installed"
)


@pytest.fixture(scope="module")
def cases() -> list[corpus.Case]:
    return corpus.build(limit=60)


async def _outcomes(workspace: Path, cases: list[corpus.Case]) -> dict[str, collections.Counter]:
    editor = editor_tool(workspace_root=workspace)
    outcomes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for index, case in enumerate(cases):
        name = f"case_{index}.py"
        path = workspace / name
        path.write_bytes(case.before)
        result = await editor(
            action="edit", file_path=name, old_string=case.old, new_string=case.new
        )
        verdict = corpus.judge(case, result["success"], path.read_bytes())
        assert verdict != "misapplied", (case.kind, case.source, case.old, result)
        outcomes[case.kind][verdict] += 1
    return outcomes


@pytest.mark.parametrize("kind", corpus.RECOVERABLE)
async def test_recoverable_class_applies_at_least_95_percent_and_never_wrong(
    workspace: Path, cases, kind
):
    chosen = [c for c in cases if c.kind == kind]
    assert len(chosen) >= 40
    outcome = (await _outcomes(workspace, chosen))[kind]
    assert outcome["misapplied"] == 0
    assert outcome["applied"] / len(chosen) >= 0.95, outcome


@pytest.mark.parametrize("kind", corpus.MUST_REFUSE)
async def test_must_refuse_class_is_always_refused_and_the_file_untouched(
    workspace: Path, cases, kind
):
    chosen = [c for c in cases if c.kind == kind]
    assert len(chosen) >= 30
    outcome = (await _outcomes(workspace, chosen))[kind]
    assert outcome == collections.Counter(refused=len(chosen))


async def test_a_failed_multi_edit_leaves_each_real_file_byte_identical(workspace: Path, cases):
    editor = editor_tool(workspace_root=workspace)
    good = [c for c in cases if c.kind == "exact"][:20]
    bad = {c.source: c for c in cases if c.kind == "nowhere"}
    checked = 0
    for index, case in enumerate(good):
        if case.source not in bad:
            continue
        path = workspace / f"multi_{index}.py"
        path.write_bytes(case.before)
        wrong = bad[case.source]
        result = await editor(
            action="multi_edit",
            file_path=path.name,
            edits=[
                {"old_string": case.old, "new_string": case.new},
                {"old_string": wrong.old, "new_string": wrong.new},
            ],
        )
        assert result["success"] is False
        assert "edit 1 (counting from 0) of 2 failed" in result["error"]
        assert path.read_bytes() == case.before
        checked += 1
    assert checked >= 10


@pytest.fixture
def repo(workspace: Path) -> Path:
    _git(workspace, "init", "-q")
    _git(workspace, "config", "user.email", "t@example.com")
    _git(workspace, "config", "user.name", "t")
    return workspace


def _commit_of_real_files(repo: Path, cases: list[corpus.Case], count: int) -> dict[str, bytes]:
    """A commit of `count` real files, then a change of several hunks in each; the changed bytes."""
    exact = [c for c in cases if c.kind == "exact"]
    sources = sorted({c.source for c in exact})[:count]
    changed: dict[str, bytes] = {}
    for n, source in enumerate(sources):
        name = f"pkg/mod_{n}.py"
        (repo / "pkg").mkdir(exist_ok=True)
        (repo / name).write_bytes(Path(source).read_bytes())
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    for n, source in enumerate(sources):
        name = f"pkg/mod_{n}.py"
        text = Path(source).read_text(encoding="utf-8")
        for case in (c for c in exact if c.source == source):
            if text.count(case.old) == 1:
                text = text.replace(case.old, case.new)
        lines = text.split("\n")
        lines.insert(len(lines) // 2, "# a line the commit adds")
        changed[name] = "\n".join(lines).encode()
        (repo / name).write_bytes(changed[name])
    return changed


async def test_a_whole_commit_as_a_git_diff_applies_exactly(repo: Path, cases):
    changed = _commit_of_real_files(repo, cases, 5)
    (repo / "pkg" / "added.py").write_text("x = 1\n")
    _git(repo, "add", "-A")
    diff = _git(repo, "diff", "--cached")
    _git(repo, "reset", "-q", "--hard")
    editor = editor_tool(workspace_root=repo)
    result = await editor(action="apply_patch", patch=diff)
    assert result["success"] is True, result["error"]
    for name, data in changed.items():
        assert (repo / name).read_bytes() == data
    assert (repo / "pkg" / "added.py").read_text() == "x = 1\n"


async def test_a_commit_patch_with_one_stale_hunk_changes_no_file(repo: Path, cases):
    _commit_of_real_files(repo, cases, 4)
    diff = _git(repo, "diff")
    _git(repo, "reset", "-q", "--hard")
    before = {p: p.read_bytes() for p in (repo / "pkg").iterdir()}
    # The last file's first removed line no longer matches what the file holds.
    last = sorted(before)[-1]
    text = last.read_text().split("\n")
    first_hunk = diff.rsplit("+++ ", 1)[1].split("\n-", 1)[1].split("\n", 1)[0]
    text = [line + " # drifted" if line == first_hunk else line for line in text]
    last.write_text("\n".join(text))
    before[last] = last.read_bytes()
    editor = editor_tool(workspace_root=repo)
    result = await editor(action="apply_patch", patch=diff)
    assert result["success"] is False
    assert "cannot be placed" in result["error"]
    assert {p: p.read_bytes() for p in (repo / "pkg").iterdir()} == before

"""What is in the project: the ignore matcher against real git."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import home_git as git

from lionfactory import Branch
from lionfactory._os.binaries import BinaryFinder
from lionfactory._os.global_excludes import global_excludes, known_global_excludes
from lionfactory._os.project import ProjectView, project_top, stray_ignore_files
from lionfactory._os.workspace import Workspace
from lionfactory.coding import coding_toolkit
from lionfactory.tools import ast_search_tool, code_check_tool, reader_tool, search_tool

TREE = {
    ".gitignore": "*.log\nbuild/\n/top_only.txt\n.venv/\nnode_modules\n",
    "app.log": "",
    "top_only.txt": "",
    "src/top_only.txt": "",
    "src/main.py": "",
    "src/build/out.py": "",
    "build/out.py": "",
    "build.py": "",
    ".venv/lib/site.py": "",
    "node_modules/pkg/index.js": "",
    "sub/.gitignore": "!keep.log\nlocal/\n",
    "sub/keep.log": "",
    "sub/drop.log": "",
    "sub/local/x.py": "",
    "sub/deep/.gitignore": "*.tmp\n!important.tmp\n",
    "sub/deep/important.tmp": "",
    "sub/deep/other.tmp": "",
    "sub/deep/keep.log": "",
    "sub/deep/a.log": "",
    "logs/.gitignore": "!*.log\n",
    "logs/kept.log": "",
    "excluded.txt": "",
    ".github/workflow.yml": "",
    ".ignore": "from_dot_ignore.txt\n",
    "from_dot_ignore.txt": "",
    "docs/.ignore": "!app.log\n",
    "docs/app.log": "",
}


def build(root: Path, tree: dict[str, str]) -> None:
    for name, text in tree.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def walked(root: Path, *, include_ignored: bool = False, start: str = ".") -> set[str]:
    workspace = Workspace.at(root)
    view = ProjectView(workspace, include_ignored=include_ignored)
    return {
        path for path, is_dir in view.walk(root / start if start != "." else root) if not is_dir
    }


def git_project_files(root: Path) -> set[str]:
    """What git calls the project: untracked files not ignored (nothing is committed)."""
    output = git(root, "ls-files", "--others", "--exclude-standard", "-z")
    return {name for name in output.split("\0") if name}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "home").mkdir()
    git(root, "init", "-q")
    build(root, TREE)
    (root / ".git" / "info").mkdir(exist_ok=True)
    (root / ".git" / "info" / "exclude").write_text("excluded.txt\n")
    return root


def test_the_walk_agrees_with_git_on_nested_rules_and_negation(repo: Path) -> None:
    # .ignore is ripgrep's convention, unknown to git: leave its two effects aside.
    expected = git_project_files(repo) - {"from_dot_ignore.txt"} | {"docs/app.log"}
    assert walked(repo) == expected


def test_negation_in_nested_gitignore_matches_git_check_ignore(repo: Path) -> None:
    paths = ["sub/keep.log", "sub/drop.log", "sub/deep/keep.log", "sub/deep/a.log", "logs/kept.log"]
    # check-ignore exits 1 when some path is not ignored; its output is what counts.
    done = subprocess.run(
        ["git", "check-ignore", *paths], cwd=repo, capture_output=True, text=True, check=False
    )
    ignored_by_git = set(done.stdout.split())
    assert ignored_by_git == {"sub/drop.log", "sub/deep/a.log"}
    files = walked(repo)
    assert {p for p in paths if p not in files} == ignored_by_git


def test_ignored_directories_are_not_entered_and_counted_once(repo: Path) -> None:
    workspace = Workspace.at(repo)
    view = ProjectView(workspace)
    files = [path for path, is_dir in view.walk(repo) if not is_dir]
    assert not [f for f in files if f.startswith((".venv/", "node_modules/", "build/"))]
    assert "src/build/out.py" not in files  # "build/" matches at any depth
    assert "build.py" in files  # a directory-only pattern does not match a file
    # app.log, top_only.txt, build/, .venv/, node_modules/, sub/drop.log, sub/local/,
    # sub/deep/other.tmp, sub/deep/a.log, excluded.txt, from_dot_ignore.txt, src/build/
    assert view.skipped == 12


def test_include_ignored_walks_everything_but_git_and_protected(repo: Path) -> None:
    (repo / ".env").write_text("SECRET=1\n")
    files = walked(repo, include_ignored=True)
    assert {".venv/lib/site.py", "node_modules/pkg/index.js", "app.log"} <= files
    assert ".env" not in files
    assert not [f for f in files if f.startswith(".git/")]


def test_the_same_rules_apply_outside_a_git_repository(tmp_path: Path, repo: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    build(plain, TREE)
    assert project_top(plain) == (plain, False)
    # Only .git/info/exclude belongs to the repository.
    assert walked(plain) == walked(repo) | {"excluded.txt"}


def test_a_named_ignored_directory_is_walked_below_its_rules(repo: Path) -> None:
    assert walked(repo, start=".venv") == {".venv/lib/site.py"}
    view = ProjectView(Workspace.at(repo))
    assert view.visible(".venv/lib/site.py", start=".venv")
    assert not view.visible(".venv/lib/site.py")
    assert not view.visible("sub/drop.log")
    assert view.visible("sub/keep.log")


def test_a_subdirectory_workspace_inherits_the_repository_rules(repo: Path) -> None:
    files = walked(repo / "sub")
    assert "sub/keep.log" not in files  # paths are relative to the workspace
    assert files == {".gitignore", "keep.log", "deep/.gitignore", "deep/important.tmp"} | {
        "deep/keep.log"
    }


def test_a_worktree_reads_the_common_info_exclude(repo: Path, tmp_path: Path) -> None:
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", str(worktree))
    (worktree / "excluded.txt").write_text("")
    assert (worktree / ".git").is_file()
    assert "excluded.txt" not in walked(worktree)


async def test_global_excludes_come_from_git_config(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / "global-ignore").write_text("*.swp\n")
    (home / ".gitconfig").write_text("[core]\n\texcludesFile = ~/global-ignore\n")
    (repo / "notes.swp").write_text("")
    monkeypatch.setenv("HOME", str(home))
    found = await global_excludes(repo, BinaryFinder())
    assert found == home / "global-ignore"
    view = ProjectView(Workspace.at(repo), global_file=found)
    assert not view.visible("notes.swp")
    assert "notes.swp" not in git_project_files(repo)  # git, with the same HOME, agrees


async def test_no_global_excludes_outside_a_repository(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert await global_excludes(plain, BinaryFinder()) is None


def test_ignore_files_above_the_project_are_reported_as_stray(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    (outer / "ws").mkdir(parents=True)
    assert stray_ignore_files(outer / "ws") == []
    (outer / ".gitignore").write_text("*.py\n")
    assert stray_ignore_files(outer / "ws") == [outer / ".gitignore"]
    (outer / "ws" / ".git").mkdir()
    # Inside a repository ripgrep stops reading .gitignore at the repository root.
    assert stray_ignore_files(outer / "ws") == []


# -- every tool that walks the tree sees the same project ---------------------------


def python_checkout(root: Path, *, repository: bool, venv_files: int) -> None:
    root.mkdir()
    if repository:
        git(root, "init", "-q")
    build(
        root,
        {
            ".gitignore": ".venv/\nnode_modules/\n",
            "src/app.py": "import os\nprint(1)\n",
            "src/util.py": "def clone():\n    print(2)\n",
            "node_modules/pkg/tool.py": "import sys\nprint(3)\n",
        },
    )
    venv = root / ".venv" / "lib"
    venv.mkdir(parents=True)
    for index in range(venv_files):
        (venv / f"mod{index:04d}.py").write_text("import os\ndef clone():\n    print(4)\n")


def paths_of(name: str, answer: dict[str, Any]) -> set[str]:
    if name in ("code_check", "ast_search"):
        items = answer.get("diagnostics") or answer.get("matches") or []
        return {item["file"] for item in items}
    content = answer["content"] or ""
    return {row.split(":")[0].rstrip("/") for row in content.splitlines() if "." in row}


async def walk_all(tools: dict[str, Any], include_ignored: bool) -> dict[str, set[str]]:
    flag = {"include_ignored": include_ignored}
    answers = {
        "grep": await tools["search"](action="grep", pattern="print", max_results=1000, **flag),
        "find": await tools["search"](action="find", pattern="*.py", max_results=1000, **flag),
        "list_dir": await tools["reader"](action="list_dir", path=".", recursive=True, **flag),
        "code_check": await tools["code_check"](paths=["."], max_diagnostics=500, **flag),
        "ast_search": await tools["ast_search"](pattern="print($A)", max_results=500, **flag),
    }
    return {name: paths_of(name, answer) for name, answer in answers.items()}


IGNORED = (".venv/", "node_modules/")


@pytest.mark.slow
@pytest.mark.parametrize("repository", [True, False], ids=["git", "no-git"])
@pytest.mark.parametrize("kit", [False, True], ids=["standalone", "toolkit"])
async def test_every_walking_tool_skips_ignored_directories(
    tmp_path: Path, repository: bool, kit: bool
) -> None:
    root = tmp_path / "ws"
    python_checkout(root, repository=repository, venv_files=5000 if not kit else 50)
    if kit:
        tools = {t.name: t for t in coding_toolkit(Branch(), workspace_root=root, notify=False)}
    else:
        tools = {
            "search": search_tool(workspace_root=root),
            "reader": reader_tool(workspace_root=root),
            "code_check": code_check_tool(workspace_root=root),
            "ast_search": ast_search_tool(workspace_root=root),
        }
    default = await walk_all(tools, include_ignored=False)
    for name, paths in default.items():
        assert paths, f"{name} found nothing"
        assert not [p for p in paths if p.startswith(IGNORED)], (name, sorted(paths)[:5])
        assert "src/app.py" in paths, (name, paths)
    everything = await walk_all(tools, include_ignored=True)
    for name, paths in everything.items():
        # Sorted by path, the .venv's thousands of files come first.
        assert any(p.startswith(".venv/lib/mod") for p in paths), (name, sorted(paths)[:5])


async def test_a_changed_git_config_is_asked_again(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    for name in ("first", "second"):
        (home / name).write_text("*.swp\n")
    monkeypatch.setenv("HOME", str(home))
    (home / ".gitconfig").write_text("[core]\n\texcludesFile = ~/first\n")
    assert await global_excludes(repo, BinaryFinder()) == home / "first"
    (home / ".gitconfig").write_text("[core]\n\texcludesFile = ~/second\n\n")
    assert await global_excludes(repo, BinaryFinder()) == home / "second"


async def test_the_remembered_answer_is_known_without_asking_git(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "ignore").write_text("*.swp\n")
    monkeypatch.setenv("HOME", str(home))
    (home / ".gitconfig").write_text("[core]\n\texcludesFile = ~/ignore\n")
    assert known_global_excludes(repo) == (False, None)
    assert await global_excludes(repo, BinaryFinder()) == home / "ignore"
    assert known_global_excludes(repo) == (True, home / "ignore")
    # The file it names is checked every time, not remembered.
    (home / "ignore").unlink()
    assert known_global_excludes(repo) == (True, None)
    (home / ".gitconfig").write_text("[core]\n\texcludesFile = ~/other\n")
    assert known_global_excludes(repo) == (False, None)


def test_outside_a_repository_nothing_is_asked(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert known_global_excludes(plain) == (True, None)


def test_patterns_git_cannot_read_are_skipped(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    build(root, {".gitignore": "[z-a]\n\\\\\n!\n*.log\n", "a.log": "", "b.txt": ""})
    assert walked(root) == {".gitignore", "b.txt"}

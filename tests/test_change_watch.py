"""The change watch: "nothing changed under this tree" only when inotify saw every change."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lionfactory._os import change_watch as module
from lionfactory._os.change_watch import ChangeWatch

pytestmark = pytest.mark.skipif(
    module._filesystem(os.path.realpath("/tmp")) not in module._LOCAL,
    reason="the temporary directory is not on a local filesystem",
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "sub" / "mod.py").write_text("x = 1\n")
    (root / "top.txt").write_text("top\n")
    return root


@pytest.fixture
def watch(tree: Path) -> ChangeWatch:
    watch = ChangeWatch()
    assert watch.begin(str(tree)) is True
    assert watch.changed(str(tree)) is False
    return watch


def test_a_tree_never_begun_counts_as_changed(tree: Path) -> None:
    assert ChangeWatch().changed(str(tree)) is True


def test_reading_files_is_no_change(tree: Path, watch: ChangeWatch) -> None:
    (tree / "pkg" / "sub" / "mod.py").read_text()
    os.listdir(tree / "pkg")
    assert watch.changed(str(tree)) is False


@pytest.mark.parametrize(
    "change",
    [
        lambda t: (t / "pkg" / "sub" / "mod.py").write_text("x = 2\n"),
        lambda t: (t / "pkg" / "sub" / "new.py").write_text(""),
        lambda t: (t / "top.txt").unlink(),
        lambda t: (t / "top.txt").rename(t / "pkg" / "moved.txt"),
        lambda t: (t / "top.txt").chmod(0o755),
        lambda t: (t / "pkg" / "empty").mkdir(),
        lambda t: (t / "pkg" / "link").symlink_to("sub"),
    ],
    ids=["write", "create", "delete", "rename", "chmod", "mkdir", "symlink"],
)
def test_each_kind_of_change_is_seen_at_any_depth(tree: Path, watch: ChangeWatch, change) -> None:  # type: ignore[no-untyped-def]
    change(tree)
    assert watch.changed(str(tree)) is True
    assert watch.begin(str(tree)) is True  # a new moment: unchanged from here on
    assert watch.changed(str(tree)) is False


def test_a_folder_created_later_is_watched_too(tree: Path, watch: ChangeWatch) -> None:
    (tree / "new" / "deep").mkdir(parents=True)
    assert watch.changed(str(tree)) is True
    watch.begin(str(tree))
    (tree / "new" / "deep" / "f.txt").write_text("later\n")
    assert watch.changed(str(tree)) is True


def test_a_folder_moved_in_is_watched_too(tree: Path, tmp_path: Path, watch: ChangeWatch) -> None:
    outside = tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    outside.rename(tree / "came")
    watch.begin(str(tree))
    (tree / "came" / "inner" / "f.txt").write_text("x\n")
    assert watch.changed(str(tree)) is True


def test_git_folders_are_not_watched_but_a_new_repository_is_seen(tree: Path) -> None:
    (tree / ".git").mkdir()
    watch = ChangeWatch()
    watch.begin(str(tree))
    (tree / ".git" / "index").write_text("git status rewrote me\n")
    assert watch.changed(str(tree)) is False
    (tree / "pkg" / ".git").mkdir()
    assert watch.changed(str(tree)) is True


def test_a_hard_linked_file_makes_every_answer_changed(tree: Path, tmp_path: Path) -> None:
    """A write through a link outside the tree would report nothing here."""
    os.link(tree / "top.txt", tmp_path / "elsewhere.txt")
    watch = ChangeWatch()
    assert watch.begin(str(tree)) is False
    assert watch.changed(str(tree)) is True
    (tmp_path / "elsewhere.txt").unlink()
    (tree / "top.txt").write_text("single again\n")
    assert watch.begin(str(tree)) is True
    assert watch.changed(str(tree)) is False


def test_a_hard_link_made_inside_is_seen(tree: Path, watch: ChangeWatch) -> None:
    os.link(tree / "top.txt", tree / "pkg" / "twin.txt")
    assert watch.changed(str(tree)) is True
    assert watch.begin(str(tree)) is False  # two names of one file: no promise


def test_a_replaced_root_is_walked_again(tree: Path, tmp_path: Path, watch: ChangeWatch) -> None:
    tree.rename(tmp_path / "old")
    tree.mkdir()
    assert watch.changed(str(tree)) is True
    assert watch.begin(str(tree)) is True
    (tree / "fresh.txt").write_text("seen\n")
    assert watch.changed(str(tree)) is True


def test_a_network_filesystem_is_never_unchanged(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(module, "_filesystem", lambda path: "nfs4")
    watch = ChangeWatch()
    assert watch.begin(str(tree)) is False
    assert watch.changed(str(tree)) is True


def test_too_many_folders_are_not_watched(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(module, "MAX_FOLDERS", 1)
    watch = ChangeWatch()
    assert watch.begin(str(tree)) is False
    assert watch.changed(str(tree)) is True

"""The inotify-kept set of credential files in a tree equals a fresh walk's, at any depth."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from lionfactory._os import tree_watch
from lionfactory._os.isolation import (
    _CONTENT_CHECKED,
    _SECRET_NAME,
    _content_checked,
    _holds_credential,
    _secret_name,
)
from lionfactory._os.tree_watch import TreeWatch, polled

TOKEN = 'token = "lf-tree-watch"\n'


def fresh(root: Path) -> set[str]:
    return set(polled(str(root), _secret_name, _content_checked, _holds_credential))


def watched(watch: TreeWatch, root: Path, *, apart: bool = False) -> set[str]:
    return set(watch.secrets(str(root), apart=apart))


def new_watch() -> TreeWatch:
    """A watch as the isolation makes it: able to walk in a process of its own."""
    return TreeWatch(
        _secret_name,
        _content_checked,
        _holds_credential,
        apart=(_SECRET_NAME.pattern, _CONTENT_CHECKED),
    )


@pytest.mark.parametrize("apart", [False, True], ids=["walked here", "walked apart"])
def test_every_change_at_any_depth_is_seen_as_a_fresh_walk_sees_it(
    tmp_path: Path, apart: bool
) -> None:
    """Walked apart, the first walk's watches are the parent's: every later change is seen."""
    root = tmp_path / "tree"
    deep = root.joinpath(*"abcdefghij")  # ten levels down
    deep.mkdir(parents=True)
    (deep / ".netrc").write_text("machine x password p\n")
    (deep / "config").write_text(TOKEN)  # judged by the parent after a walk apart
    (root / "a" / "config").write_text("[core]\n")
    watch = new_watch()
    assert watched(watch, root, apart=apart) == fresh(root)
    assert fresh(root) == {str(deep / ".netrc"), str(deep / "config")}
    (deep / "config").unlink()

    steps = [
        lambda: (deep / "credentials").write_text("k"),
        lambda: (deep / "new" / "deeper").mkdir(parents=True),
        lambda: (deep / "new" / "deeper" / "pip.conf").write_text("[global]\n"),
        # A content-checked file counts only once its text holds a token.
        lambda: (deep / "config.toml").write_text("[build]\n"),
        lambda: (deep / "config.toml").write_text(TOKEN),
        lambda: (deep / "config.toml").write_text("[build]\n"),
        # A subtree made elsewhere and moved in, then moved out again.
        lambda: _moved_in(tmp_path, deep),
        lambda: (deep / "moved").rename(tmp_path / "gone"),
        lambda: (deep / ".netrc").unlink(),
        lambda: (root / "a" / "repo" / ".git").mkdir(parents=True),
        lambda: (root / "a" / "repo" / ".git" / "config").write_text(
            "[credential]\n\thelper = store\n"
        ),
        # Inside .git too; only its object store (hashes as names) is skipped.
        lambda: (root / "a" / "repo" / ".git" / "hooks").mkdir(),
        lambda: (root / "a" / "repo" / ".git" / "hooks" / ".netrc").write_text("x"),
        lambda: (root / "a" / "repo" / ".git" / "objects" / "ab").mkdir(parents=True),
        lambda: os.replace(deep / "credentials", deep / "renamed.txt"),
    ]
    for number, step in enumerate(steps):
        step()
        assert watched(watch, root) == fresh(root), number


def _moved_in(tmp_path: Path, into: Path) -> None:
    made = tmp_path / "made" / "x" / "y"
    made.mkdir(parents=True)
    (made / "hosts.yml").write_text("github.com: {}\n")
    (tmp_path / "made").rename(into / "moved")


def test_a_subtree_of_a_watched_tree_is_answered_from_the_same_watch(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / ".npmrc").write_text("x")
    (tmp_path / ".pypirc").write_text("x")
    watch = TreeWatch(_secret_name, _content_checked, _holds_credential)
    assert watched(watch, tmp_path) == {
        str(tmp_path / "a" / "b" / ".npmrc"),
        str(tmp_path / ".pypirc"),
    }
    assert watched(watch, tmp_path / "a") == {str(tmp_path / "a" / "b" / ".npmrc")}


def test_asking_again_lists_no_folder_where_walking_again_lists_them_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-launch check reads queued events; a walk lists every folder again.

    Counted, not timed: the two differ by a thousand times on a quiet
    machine and by less than twenty on a loaded one.
    """
    for top in range(40):
        for sub in range(40):
            (tmp_path / str(top) / str(sub) / "lib").mkdir(parents=True)
    (tmp_path / "39" / "39" / "lib" / ".netrc").write_text("x")
    watch = TreeWatch(_secret_name, _content_checked, _holds_credential)
    assert len(watched(watch, tmp_path)) == 1
    listed: list[str] = []
    real_list, real_walk = tree_watch.list_folder, tree_watch.walk

    def counted_list(folder: str, *args: Any, **kwargs: Any) -> Any:
        listed.append(folder)
        return real_list(folder, *args, **kwargs)

    def counted_walk(*args: Any, **kwargs: Any) -> Any:
        listed.append("walk")
        return real_walk(*args, **kwargs)

    monkeypatch.setattr(tree_watch, "list_folder", counted_list)
    monkeypatch.setattr(tree_watch, "walk", counted_walk)
    for _ in range(5):
        assert len(watched(watch, tmp_path)) == 1
    assert listed == []
    assert len(fresh(tmp_path)) == 1
    assert len(listed) == 1 + 40 + 40 * 40 * 2  # every folder, each once


def test_a_walk_apart_finds_what_a_walk_here_finds(tmp_path: Path) -> None:
    """Every folder watched and every candidate named, odd names included, by the child."""
    root = tmp_path / "tree"
    for n in range(50):
        folder = root / f"d{n}" / "e\nnew line" / "f \u00e9t\u00e9"
        folder.mkdir(parents=True)
        for m in range(5):
            (folder / f"file{m}.py").write_text("")
    (root / "d7" / "e\nnew line" / ".NPMRC").write_text("//registry/:_authToken=x\n")
    (root / "d8" / "config.toml").write_text(TOKEN)
    (root / "d9" / "config").write_text("[core]\n")
    (root / "d9" / ".git" / "objects" / "ab").mkdir(parents=True)  # skipped by both
    here, apart = new_watch(), new_watch()
    assert here._ready() and apart._ready()
    by_here = here._walk_apart(here._fd, str(root))
    by_child = apart._walk_apart(apart._fd, str(root), apart=True)
    assert by_here is not None and by_child is not None
    assert sorted(by_child[0].values()) == sorted(by_here[0].values())
    assert len(by_child[0]) == 1 + 50 * 3 + 1  # the root, three levels of 50, d9/.git
    assert (
        by_child[1]
        == by_here[1]
        == {
            str(root / "d7" / "e\nnew line" / ".NPMRC"): True,
            str(root / "d8" / "config.toml"): True,
            str(root / "d9" / "config"): False,
        }
    )


def test_a_failed_walk_apart_walks_here_instead(tmp_path: Path, monkeypatch) -> None:
    import lionfactory._os.tree_watch as module

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / ".netrc").write_text("machine m password p\n")
    monkeypatch.setattr(module, "_WALKER", tmp_path / "missing_walker.py")
    watch = new_watch()
    assert (
        watched(watch, tmp_path, apart=True) == fresh(tmp_path) == {str(tmp_path / "x" / ".netrc")}
    )

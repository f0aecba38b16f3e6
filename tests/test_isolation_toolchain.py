"""`toolchain_paths`' derivation: the fast link walk finds exactly what realpath of each link found.

`_toolchain_paths` used to resolve every symlink of every PATH directory
with `os.path.realpath` (about 800 on a Debian PATH, 50 ms). It now follows
links with the folders of their targets resolved once, and scans a
directory reached under two names once. These tests hold it to the old
computation, kept here as the reference, on trees built to break it: link
chains, links out of the directory and back, loops, dangling links, links
to folders, a target realpath tolerates but the kernel does not
(``missing/../tool``), chains longer than the kernel follows, a PATH
directory that is a link to another one, and PATH entries repeated,
relative or missing.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lionfactory._os.isolation import _MAX_PATH_ENTRIES, _paths, _prefix_of, _toolchain_paths


def reference(path: str, named: tuple[str, ...]) -> tuple[Path, ...]:
    """The derivation as it was: realpath of every link, then realpath of every found path."""
    found: list[Path] = [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)]
    found += [Path(value) for value in named if value]
    for entry in path.split(os.pathsep):
        if not entry or not os.path.isabs(entry) or not os.path.isdir(entry):
            continue
        directory = Path(entry)
        for candidate in {directory, Path(os.path.realpath(directory))}:
            found += _prefix_of(candidate)
        try:
            with os.scandir(directory) as entries:
                for count, item in enumerate(entries):
                    if count >= _MAX_PATH_ENTRIES:
                        break
                    if item.is_symlink():
                        target = Path(os.path.realpath(item.path))
                        if target.is_file():
                            found += _prefix_of(target.parent)
        except OSError:
            continue
    return _paths(p for p in found if p.exists())


def derived(path: str, named: tuple[str, ...] = ()) -> tuple[Path, ...]:
    return _toolchain_paths.__wrapped__(path, named, ())


# Folders of the generated trees; "alias" is a link to "p0/bin" (as /bin is
# to /usr/bin on merged-/usr systems) and "loopdir" a link to itself.
FOLDERS = ("p0/bin", "p1/shims", "home/.cargo/bin", "home/.local/bin", "lib/x", "plain")
NODES = ("a", "b", "c", "d")
KINDS = ("file", "dir", "absent", "name", "relative", "absolute", "tolerated", "odd", "via_alias")


@st.composite
def trees(draw: st.DrawFn) -> tuple[dict[tuple[int, int], tuple[str, int, int, int]], list[int]]:
    nodes = {}
    for folder in range(len(FOLDERS)):
        for node in range(len(NODES)):
            kind = draw(st.sampled_from(KINDS))
            target = (draw(st.integers(0, len(FOLDERS) - 1)), draw(st.integers(0, len(NODES) - 1)))
            nodes[folder, node] = (kind, *target, draw(st.integers(0, 2)))
    # PATH entries: folder indices, -1 the alias link, -2 a missing folder,
    # -3 a relative entry, -4 an empty entry, -5 the self-linked folder.
    entries = draw(st.lists(st.integers(-5, len(FOLDERS) - 1), min_size=1, max_size=9))
    return nodes, entries


def build(root: Path, nodes: dict[tuple[int, int], tuple[str, int, int, int]]) -> None:
    for name in FOLDERS:
        (root / name).mkdir(parents=True, exist_ok=True)
    (root / "alias").symlink_to("p0/bin")
    (root / "loopdir").symlink_to("loopdir")
    for (folder, node), (kind, to_folder, to_node, variant) in nodes.items():
        here = root / FOLDERS[folder] / NODES[node]
        there = root / FOLDERS[to_folder] / NODES[to_node]
        if kind == "file":
            here.write_text("#!/bin/sh\n")
        elif kind == "dir":
            here.mkdir()
        elif kind == "name":  # a bare name in the same folder: maybe itself, a loop
            here.symlink_to(NODES[to_node])
        elif kind == "relative":
            here.symlink_to(os.path.relpath(there, here.parent))
        elif kind == "absolute":
            here.symlink_to(there)
        elif kind == "tolerated":  # realpath walks over the missing folder, the kernel cannot
            here.symlink_to(f"missing/../{os.path.relpath(there, here.parent)}")
        elif kind == "odd":
            here.symlink_to((f"{NODES[to_node]}/", ".", "..")[variant])
        elif kind == "via_alias":  # through the folder link, into p0/bin
            here.symlink_to(root / "alias" / NODES[to_node])


def path_of(root: Path, entries: list[int]) -> str:
    names = {-1: str(root / "alias"), -2: str(root / "nowhere"), -3: "p0/bin", -4: ""}
    names[-5] = str(root / "loopdir")
    return os.pathsep.join(names.get(e) or str(root / FOLDERS[e]) for e in entries)


@given(trees())
def test_the_derivation_matches_realpath_of_every_link(
    tree: tuple[dict[tuple[int, int], tuple[str, int, int, int]], list[int]],
) -> None:
    nodes, entries = tree
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp).resolve()
        build(root, nodes)
        path = path_of(root, entries)
        assert derived(path, (str(root / "p1"),)) == reference(path, (str(root / "p1"),))


def _chain(folder: Path, length: int) -> None:
    """``folder/tool`` -> `length` links in a folder off PATH -> a file in a third folder."""
    target = folder.parent / "lib" / "tools"
    target.mkdir(parents=True)
    (target / "real").write_text("#!/bin/sh\n")
    links = folder.parent / "chain"
    links.mkdir()
    previous = target / "real"
    for index in range(length - 1, 0, -1):
        link = links / f"link{index}"
        link.symlink_to(os.path.relpath(previous, links))
        previous = link
    (folder / "tool").symlink_to(os.path.relpath(previous, folder))


def test_a_chain_the_kernel_follows_finds_the_file_folder(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    _chain(folder, 30)
    found = derived(str(folder))
    assert found == reference(str(folder), ())
    assert tmp_path / "lib" / "tools" in found


def test_a_chain_longer_than_the_kernel_follows_is_still_resolved(tmp_path: Path) -> None:
    # 45 hops: stat() fails with ELOOP, realpath still reaches the file, so
    # the old derivation counted its folder and the new one must too.
    folder = tmp_path / "bin"
    folder.mkdir()
    _chain(folder, 45)
    with pytest.raises(OSError, match="symbolic links"):
        os.stat(folder / "tool")
    found = derived(str(folder))
    assert found == reference(str(folder), ())
    assert tmp_path / "lib" / "tools" in found


def test_a_directory_reached_under_two_names_is_scanned_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "usr" / "bin"
    real.mkdir(parents=True)
    (tmp_path / "bin").symlink_to("usr/bin")
    other = tmp_path / "opt" / "tool" / "bin"
    other.mkdir(parents=True)
    (other / "tool").write_text("#!/bin/sh\n")
    (real / "tool").symlink_to(other / "tool")
    scans: list[str] = []
    original = os.scandir

    def counting(path: str | os.PathLike[str]) -> object:
        scans.append(os.fspath(path))
        return original(path)

    path = os.pathsep.join([str(real), str(tmp_path / "bin"), str(real)])
    monkeypatch.setattr(os, "scandir", counting)
    found = derived(path)
    assert scans == [str(real)]
    assert found == reference(path, ())
    assert tmp_path / "opt" / "tool" in found

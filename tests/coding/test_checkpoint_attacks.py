"""Attacks on checkpoints and rewind: plant with a confined `bash`, trigger with a rewind.

Whatever a confined command can write (deep trees, FIFOs, sparse giants,
links, names that are not UTF-8) is untrusted input to the snapshot and the
restore: a rewind must neither fail untyped, hang, write outside, nor leave a
path it did not put back unreported.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from lionfactory import Branch, RewindReport
from lionfactory._os.isolation import default_hidden, workspace_isolation
from lionfactory._os.mechanisms import mechanism_problem
from lionfactory.coding import coding_toolkit
from lionfactory.coding._snapshots import Limits, SnapshotError


def kit_branch(root: Path, **limits: Any) -> Branch:
    branch = Branch("You write code.")
    branch.register(coding_toolkit, workspace_root=root, notify=False)
    # A loaded machine can take longer than the default 5 s over a first
    # snapshot; a partial checkpoint is not what these tests attack.
    branch.checkpoint_log.rewinder.limits = Limits(first_snapshot_wait=120.0, **limits)  # type: ignore[union-attr]
    return branch


async def bash(branch: Branch, command: str) -> None:
    result = await branch.act("bash", {"command": command})
    assert result.ok, result.error
    assert result.result["return_code"] == 0, result.result


async def rewound(
    root: Path, files: dict[str, str], command: str, **limits: Any
) -> tuple[Branch, RewindReport]:
    """Write `files`, run `command` in a toolkit branch, rewind to before it."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    branch = kit_branch(root, **limits)
    # Neither the command's checkpoint nor the rewind may hang on what it plants.
    with trio.fail_after(120):
        await bash(branch, command)
        report = await branch.rewind(branch.checkpoints[0].id, scope="code")
    return branch, report


def remove_chain(parent: Path) -> None:
    """Remove the chain of nested ``d`` folders under `parent`, one descriptor at a time.

    What a test leaves must not break the next session: pytest's clean-up of
    old temporary folders recurses (``shutil.rmtree``) and so does not get
    through a tree nested past the recursion limit.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fd = os.open(parent, flags)
    depth = 0
    while True:
        try:
            deeper = os.open("d", flags, dir_fd=fd)
        except FileNotFoundError:
            break
        os.close(fd)
        fd, depth = deeper, depth + 1
    for _ in range(depth):
        up = os.open("..", flags, dir_fd=fd)
        os.close(fd)
        fd = up
        os.rmdir("d", dir_fd=fd)
    os.close(fd)


@pytest.fixture
def chained(workspace: Path) -> Any:
    yield workspace
    remove_chain(workspace)


@pytest.mark.parametrize("depth", [1100, 3000])
async def test_a_tree_nested_past_the_recursion_limit_is_rewound(chained: Path, depth: int) -> None:
    # Python 3.11's os.walk recursed once per level: 1,100 nested folders made
    # every rewind raise RecursionError (no typed answer, nothing restored).
    # 3,000 reach past PATH_MAX: those folders cannot be listed, never mind.
    branch, report = await rewound(
        chained,
        {"keep.txt": "orig\n"},
        f"python3 -c \"import os\nfor _ in range({depth}):\n os.mkdir('d'); os.chdir('d')\n\" "
        "&& echo changed > keep.txt",
    )
    assert (chained / "keep.txt").read_text() == "orig\n"
    assert report.restored == ("keep.txt",)
    if depth < 2000:
        # The empty folders the command created are gone, each reported.
        assert not (chained / "d").exists()
        assert "d" in report.deleted
    await branch.aclose()


def test_a_tree_nested_past_the_recursion_limit_is_removed_without_following_links(
    tmp_path: Path,
) -> None:
    """What removes a sandbox's worktree and the store's scratch: any depth, no link followed.

    The recursive walk it used raised `RecursionError` on a tree 1,100 deep
    (what one confined command makes), out of the sandbox's cleanup.
    """
    from lionfactory.coding._snapshots import _remove_tree

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept.txt").write_text("kept\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link").symlink_to(outside, target_is_directory=True)
    bottom = tree
    for _ in range(1100):  # not mkdir(parents=True): it recurses too
        bottom = bottom / "d"
        bottom.mkdir()
    (bottom / "file.txt").write_text("x\n")
    try:
        _remove_tree(tree)
    finally:
        if tree.exists():  # left for pytest's recursive clean-up, it would break it
            (bottom / "file.txt").unlink(missing_ok=True)
            remove_chain(tree)
    assert not os.path.lexists(tree)
    assert (outside / "kept.txt").read_text() == "kept\n"


async def test_a_tracked_file_grown_sparse_to_terabytes_is_reported_not_hashed(
    workspace: Path,
) -> None:
    # `truncate -s` makes a 1 TB file in no time; hashing it held the call's
    # snapshot (and so the call) for git's whole ten-minute timeout.
    branch, report = await rewound(
        workspace,
        {"keep.txt": "orig\n", "big.dat": "small\n"},
        "echo one > keep.txt && truncate -s 1T big.dat",
    )
    assert (workspace / "keep.txt").read_text() == "orig\n"
    # Left as it is (never read into memory to be compared), and reported.
    assert (workspace / "big.dat").stat().st_size == 1 << 40
    assert report.skipped == ("big.dat",)
    assert report.restored == ("keep.txt",)
    await branch.aclose()


async def test_a_changed_file_over_the_changed_limit_is_left_alone_and_reported(
    workspace: Path,
) -> None:
    (workspace / "data.bin").write_bytes(b"v1\n")
    branch = kit_branch(workspace, max_changed_bytes=1 << 20)
    await bash(branch, "echo v2 > data.bin")
    await bash(branch, "head -c 2000000 /dev/zero > data.bin")
    await bash(branch, "echo small > other.txt")
    # The store still holds v2 for it: the rewind to v1 must not read what
    # is there now to compare (a terabyte, say), nor call it a conflict.
    preview = await branch.rewind(branch.checkpoints[0].id, scope="code", dry_run=True)
    report = await branch.rewind(branch.checkpoints[0].id, scope="code")
    assert preview.skipped == report.skipped == ("data.bin",)
    assert preview.conflicts == report.conflicts == ()
    assert (workspace / "data.bin").stat().st_size == 2_000_000
    assert report.deleted == ("other.txt",)
    # Once it is small again, it is captured and rewound as any file.
    await bash(branch, "echo v3 > data.bin")
    await branch.rewind(branch.checkpoints[0].id, scope="code")
    assert (workspace / "data.bin").read_bytes() == b"v1\n"
    await branch.aclose()


async def test_a_tracked_file_replaced_by_a_fifo_is_reported_and_never_opened(
    workspace: Path,
) -> None:
    # git refuses to add a FIFO and keeps the old entry: the snapshot said the
    # file was unchanged, and the rewind neither restored nor reported it.
    branch, report = await rewound(workspace, {"a.txt": "orig\n"}, "rm a.txt && mkfifo a.txt")
    assert report.skipped == ("a.txt",)
    assert report.restored == ()
    assert (workspace / "a.txt").is_fifo()
    await branch.aclose()


async def test_a_name_that_is_not_utf8_is_reported_not_silently_left(workspace: Path) -> None:
    # git's output is read as UTF-8 with replacement: the mangled name named no
    # file, so a file created after the target survived the rewind unreported.
    branch, report = await rewound(
        workspace, {"keep.txt": "orig\n"}, "printf x > $'bad\\xff' && echo one > keep.txt"
    )
    assert (workspace / "keep.txt").read_text() == "orig\n"
    assert report.skipped == ("bad\ufffd",)
    assert b"bad\xff" in os.listdir(os.fsencode(workspace))
    await branch.aclose()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file beside the workspace, never to be written by a rewind."""
    path = tmp_path / "outside.txt"
    path.write_text("theirs\n")
    return path


async def test_a_link_to_outside_planted_where_a_file_is_restored_is_replaced_not_followed(
    workspace: Path, tmp_path: Path, outside: Path
) -> None:
    branch, report = await rewound(
        workspace,
        {"a.txt": "orig\n", "sub/b.txt": "b\n"},
        f"rm a.txt && ln -s {outside} a.txt && rm -r sub && ln -s {tmp_path} sub",
    )
    # A tracked folder turned into a link made `git add` die on the whole
    # pathspec ("beyond a symbolic link"): the snapshot recorded none of the
    # call's changes, and the rewind put back nothing and reported nothing.
    assert set(branch.checkpoints[0].files_changed) == {"a.txt", "sub", "sub/b.txt"}
    assert outside.read_text() == "theirs\n"
    assert not (tmp_path / "b.txt").exists()
    assert not (workspace / "a.txt").is_symlink()
    assert (workspace / "a.txt").read_text() == "orig\n"
    assert (workspace / "sub" / "b.txt").read_text() == "b\n"
    assert set(report.restored) == {"a.txt", "sub/b.txt"}
    await branch.aclose()


@pytest.mark.parametrize("name", ["new\nline", " lead", "tab\tx", "back\\slash", 'quo"te'])
async def test_awkward_names_are_captured_and_deleted_by_a_rewind(
    workspace: Path, name: str
) -> None:
    branch, report = await rewound(
        workspace,
        {"a.txt": "orig\n", "stage": name},
        'touch -- "$(cat stage)" && echo one > a.txt',
    )
    assert name in branch.checkpoints[0].files_changed
    assert not (workspace / name).exists()
    assert name in report.deleted
    assert (workspace / "a.txt").read_text() == "orig\n"
    await branch.aclose()


@pytest.mark.parametrize(
    "command",
    [
        # A folder replaced by a file blinds no other change of the call.
        "echo changed > a.txt && rm -r sub && echo file > sub",
        # A file replaced by a folder comes back as the file.
        "echo changed > a.txt && rm -r sub && mkdir -p sub/b.txt/in && echo z > sub/b.txt/in/f",
    ],
)
async def test_a_file_and_a_folder_swapped_come_back_as_they_were(
    workspace: Path, command: str
) -> None:
    branch, report = await rewound(workspace, {"a.txt": "orig\n", "sub/b.txt": "b\n"}, command)
    assert (workspace / "a.txt").read_text() == "orig\n"
    assert (workspace / "sub" / "b.txt").read_text() == "b\n"
    assert set(report.restored) == {"a.txt", "sub/b.txt"}
    assert report.conflicts == ()
    await branch.aclose()


async def test_a_rewind_never_writes_through_a_hard_link_out_of_the_workspace(
    workspace: Path, outside: Path
) -> None:
    # A package manager's cache (uv, pnpm) links its files into a project; a
    # restore wrote such a file in place, so the cache outside changed too.
    branch, _ = await rewound(workspace, {"a.py": "v1\n"}, "echo v2 > a.py")
    await bash(branch, "echo v3 > a.py")
    (workspace / "a.py").unlink()
    os.link(outside, workspace / "a.py")  # the cache's link, not the command's
    report = await branch.rewind(branch.checkpoints[0].id, scope="code", force=("a.py",))
    assert report.restored == ("a.py",)
    assert (workspace / "a.py").read_text() == "v1\n"
    assert outside.read_text() == "theirs\n"
    assert (workspace / "a.py").stat().st_nlink == 1
    await branch.aclose()


async def test_a_rewind_never_writes_a_protected_file_through_a_hard_link(
    workspace: Path,
) -> None:
    branch, _ = await rewound(
        workspace, {".env": "SECRET=1\n", "a.txt": "orig\n"}, "echo planted > a.txt"
    )
    # `ln .env a.txt`: the rewind wrote the checkpoint's a.txt into .env.
    await bash(branch, "rm a.txt && ln .env a.txt")
    report = await branch.rewind(branch.checkpoints[-2].id, scope="code")
    assert (workspace / ".env").read_text() == "SECRET=1\n"
    assert (workspace / "a.txt").read_text() == "planted\n"
    assert report.restored == ("a.txt",)
    await branch.aclose()


@pytest.mark.parametrize("target", ["link", "file", "absent"])
@pytest.mark.parametrize("swap", ["folder", "gone"])
def test_a_path_swapped_just_after_its_check_is_a_conflict_not_an_error(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, target: str, swap: str
) -> None:
    # Something else (a job of the branch, the user) swaps the file for a
    # folder, or removes it, between the restore's check and its change:
    # IsADirectoryError or FileNotFoundError came out of the rewind, untyped,
    # halfway through its operations.
    from lionfactory.coding import _restore
    from lionfactory.coding._restore import Op, apply_op
    from lionfactory.coding._snapshots import EXECUTABLE, REGULAR, SYMLINK, Entry, blob_id

    (workspace / "a").write_bytes(b"old")
    checked = _restore._entry_in

    def racing(dir_fd: int, name: str) -> Any:
        found = checked(dir_fd, name)
        os.unlink(name, dir_fd=dir_fd)
        if swap == "folder":
            os.mkdir(name, dir_fd=dir_fd)
            (workspace / name / "theirs").write_text("x")
        return found

    monkeypatch.setattr(_restore, "_entry_in", racing)
    data = b"new"
    mode = {"link": SYMLINK, "file": EXECUTABLE, "absent": None}[target]
    op = Op(
        "a", Entry(REGULAR, blob_id(b"old")), None if mode is None else Entry(mode, blob_id(data))
    )
    root_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        outcome = apply_op(root_fd, op, {blob_id(data): data})
    finally:
        os.close(root_fd)
    if swap == "folder":
        assert outcome == "conflict"
        assert (workspace / "a" / "theirs").read_text() == "x"
    else:
        # Gone: a deletion is done; a write that finds no file is a conflict,
        # or (a link) puts the link where nothing is.
        assert outcome == {"absent": "already", "file": "conflict", "link": "done"}[target]
    assert [n for n in os.listdir(workspace) if n.startswith(".lionfactory")] == []


def landlock_branch(
    workspace: Path,
    files: dict[str, str],
    hidden: tuple[Path, ...] = (),
    requested: str = "landlock",
) -> Branch:
    for name, text in files.items():
        (workspace / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / name).write_text(text)
    isolation = workspace_isolation(requested, workspace, hidden=(*default_hidden(), *hidden))
    assert isolation.mechanism == "landlock"
    branch = Branch("You write code.")
    branch.register(coding_toolkit, workspace_root=workspace, notify=False, isolation=isolation)
    branch.checkpoint_log.rewinder.limits = Limits(first_snapshot_wait=120.0)  # type: ignore[union-attr]
    return branch


@pytest.mark.skipif(mechanism_problem("landlock") is not None, reason="landlock unavailable")
async def test_a_folder_the_snapshot_cannot_list_never_turns_a_rewind_into_deleting_it(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under landlock the snapshot's git cannot list a folder holding a
    # hidden folder (listing it would list inside the hidden one too): the
    # snapshot took the workspace for empty, and after `rm -r keys` a rewind
    # to it deleted every file as "created after" it. Only "auto" on a
    # machine without bwrap gets there (an explicit "landlock" refuses a
    # hidden path inside the workspace, which it cannot hide from commands).
    from lionfactory._os import isolation as isolation_module

    def no_bwrap(mechanism: str, network: str = "none") -> str | None:
        return (
            "not here (the test)" if mechanism == "bwrap" else mechanism_problem(mechanism, network)
        )

    monkeypatch.setattr(isolation_module, "mechanism_problem", no_bwrap)
    files = {"keys/id": "S=1\n", "a.txt": "orig\n", "src/main.py": "print(1)\n"}
    branch = landlock_branch(workspace, files, hidden=(workspace / "keys",), requested="auto")
    await bash(branch, "rm -r keys")
    with pytest.raises(SnapshotError, match="could not list the workspace root"):
        await branch.rewind(branch.checkpoints[0].id, scope="code", dry_run=True)
    with pytest.raises(SnapshotError, match="partial"):
        await branch.rewind(branch.checkpoints[0].id, scope="code")
    assert (workspace / "a.txt").read_text() == "orig\n"
    assert (workspace / "src" / "main.py").read_text() == "print(1)\n"
    # With the folder listable again, checkpoints are whole.
    await bash(branch, "echo changed > a.txt")
    report = await branch.rewind(branch.checkpoints[1].id, scope="code")
    assert report.restored == ("a.txt",)
    assert (workspace / "a.txt").read_text() == "orig\n"
    await branch.aclose()


@pytest.mark.skipif(mechanism_problem("landlock") is not None, reason="landlock unavailable")
async def test_under_landlock_a_protected_file_at_the_root_leaves_checkpoints_whole(
    workspace: Path,
) -> None:
    # The root holding .env is listed (its name shown, its bytes not), so
    # the checkpoint is complete and a rewind puts back what a command did.
    files = {".env": "S=1\n", "a.txt": "orig\n", "src/main.py": "print(1)\n"}
    branch = landlock_branch(workspace, files)
    await bash(branch, "echo changed > a.txt && rm src/main.py && echo new > b.txt")
    # A partial checkpoint would refuse both (SnapshotError).
    dry = await branch.rewind(branch.checkpoints[0].id, scope="code", dry_run=True)
    assert sorted(dry.restored) == ["a.txt", "src/main.py"], dry
    report = await branch.rewind(branch.checkpoints[0].id, scope="code")
    assert sorted(report.restored) == ["a.txt", "src/main.py"]
    assert report.deleted == ("b.txt",)
    assert (workspace / "a.txt").read_text() == "orig\n"
    assert (workspace / "src" / "main.py").read_text() == "print(1)\n"
    assert not (workspace / "b.txt").exists()
    assert (workspace / ".env").read_text() == "S=1\n"
    await branch.aclose()

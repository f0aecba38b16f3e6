"""Checkpoints and rewind: real files, real git, real bash, under each confinement."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _test_helpers import git, mechanism_params, processes_in

from lionfactory import Branch, Checkpoint, RewindReport
from lionfactory._os.beneath import DIRECTORY_FLAGS
from lionfactory.backends import SqliteBranchStore
from lionfactory.coding import coding_toolkit
from lionfactory.coding._checkpointing import bash_reads_only
from lionfactory.coding._restore import Op, apply_op
from lionfactory.coding._snapshots import Entry, Limits, SnapshotError, SnapshotStore, blob_id
from lionfactory.errors import CheckpointNotFound, ConfigurationError

HERE = Path(__file__).resolve().parent


def manifest(root: Path) -> dict[str, tuple[str, ...]]:
    """Type, exec bit, sha256 or link target of every path under `root` but ``.git``."""
    out: dict[str, tuple[str, ...]] = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        rel = Path(dirpath).relative_to(root).as_posix()
        for name in dirs:
            path = Path(dirpath) / name
            key = f"{rel}/{name}".lstrip("./") if rel != "." else name
            if path.is_symlink():
                out[key] = ("link", os.readlink(path))
            else:
                out[key] = ("dir",)
        for name in files:
            path = Path(dirpath) / name
            key = f"{rel}/{name}" if rel != "." else name
            if path.is_symlink():
                out[key] = ("link", os.readlink(path))
            else:
                st = path.lstat()
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                out[key] = ("file", str(bool(st.st_mode & stat.S_IXUSR)), digest)
    return out


def kit_branch(root: Path, **kwargs: Any) -> Branch:
    branch = Branch("You write code.")
    branch.register(coding_toolkit, workspace_root=root, notify=False, **kwargs)
    # A loaded machine (the suite's other workers) can take longer than the
    # default 5 s over a first snapshot, and a command would then run with a
    # partial checkpoint; that path has its own test, which sets 0 s.
    branch.checkpoint_log.rewinder.limits = Limits(first_snapshot_wait=120.0)  # type: ignore[union-attr]
    return branch


async def ok(branch: Branch, tool: str, **arguments: Any) -> Any:
    result = await branch.act(tool, arguments)
    assert result.ok, result.error
    return result.result


async def bash(branch: Branch, command: str) -> Any:
    out = await ok(branch, "bash", command=command)
    assert out["return_code"] == 0, out
    return out


# -- the store ----------------------------------------------------------------


async def test_a_snapshot_is_byte_exact_whatever_gitattributes_says(workspace: Path) -> None:
    (workspace / ".gitattributes").write_text("* text eol=lf\n*.bin filter=evil diff=evil\n")
    (workspace / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    (workspace / "data.bin").write_bytes(bytes(range(256)))
    (workspace / "empty").write_bytes(b"")
    branch = kit_branch(workspace)
    await bash(branch, "printf 'x\\r\\n' >> crlf.txt && rm data.bin && : > empty2")
    report = await branch.rewind(branch.checkpoints[0].id)
    assert (workspace / "crlf.txt").read_bytes() == b"a\r\nb\r\n"
    assert (workspace / "data.bin").read_bytes() == bytes(range(256))
    assert not (workspace / "empty2").exists()
    assert set(report.restored) == {"crlf.txt", "data.bin"}
    assert "empty2" in report.deleted


async def test_ignored_files_nested_repositories_and_protected_names_are_never_touched(
    workspace: Path,
) -> None:
    (workspace / ".gitignore").write_text("*.log\n")
    (workspace / "keep.txt").write_text("k\n")
    branch = kit_branch(workspace)
    await bash(
        branch,
        "echo log > run.log && echo secret > .env && mkdir sub && cd sub && git init -q "
        "&& echo n > n.txt && cd .. && echo changed > keep.txt",
    )
    report = await branch.rewind(branch.checkpoints[0].id)
    assert (workspace / "keep.txt").read_text() == "k\n"
    # Ignored, protected and nested-repository content stays as it is.
    assert (workspace / "run.log").read_text() == "log\n"
    assert (workspace / ".env").read_text() == "secret\n"
    assert (workspace / "sub" / "n.txt").read_text() == "n\n"
    assert report.restored == ("keep.txt",)
    assert "run.log" not in report.deleted


async def test_a_new_file_over_the_size_limit_is_skipped_and_reported(workspace: Path) -> None:

    branch = kit_branch(workspace)
    checkpointer = branch.checkpoint_log.rewinder
    checkpointer.limits = Limits(max_file_bytes=10)  # type: ignore[union-attr]
    await bash(branch, "printf 'small' > a && head -c 100 /dev/zero > big")
    await bash(branch, "rm a")
    report = await branch.rewind(branch.checkpoints[1].id, dry_run=True)
    assert report.restored == ("a",)
    assert "big" in report.skipped
    assert any("big: over 10 bytes" in s for s in branch.checkpoint_log.entries[1].data["skipped"])


def test_checkpoints_are_refused_for_the_home_directory_and_the_root() -> None:
    for root in (Path.home(), Path("/")):
        with pytest.raises(ValueError, match="checkpoints are refused"):
            coding_toolkit(Branch(), workspace_root=root)
        # Without checkpoints the toolkit builds as before.
        coding_toolkit(Branch(), workspace_root=root, checkpoints=False)


def test_bash_commands_that_only_read_take_no_checkpoint() -> None:
    assert bash_reads_only("ls -la && git status && cat a | grep x")
    assert bash_reads_only("rg foo src 2>/dev/null")
    for writing in (
        "echo x > a",
        "rm a",
        "sed -i s/a/b/ f",
        "find . -delete",
        "git checkout .",
        "python x.py",
        "cat $(rm -rf .)",
        "sort -o out in",
    ):
        assert not bash_reads_only(writing), writing


# -- branch API ---------------------------------------------------------------


async def test_checkpoints_record_the_call_and_the_files_it_changed(workspace: Path) -> None:
    branch = kit_branch(workspace)
    await ok(branch, "editor", action="write", file_path="a.txt", content="one\n")
    await bash(branch, "ls")  # reads only: no checkpoint
    await bash(branch, "echo two > b.txt && mkdir -p d/e")
    first, second = branch.checkpoints
    assert isinstance(first, Checkpoint)
    assert (first.tool, first.files_changed) == ("editor", ("a.txt",))
    assert (second.tool, second.files_changed) == ("bash", ("b.txt",))
    record = branch.messages.record
    assert record[second.message_index].role in ("assistant", "tool", "system")
    with pytest.raises(CheckpointNotFound, match="no checkpoint 'nope'"):
        await branch.rewind("nope")
    with pytest.raises(ValueError, match="scope must be one of"):
        await branch.rewind(first.id, scope="files")  # type: ignore[arg-type]


async def test_a_rewind_with_no_toolkit_is_a_clear_error(workspace: Path) -> None:
    branch = kit_branch(workspace)
    await ok(branch, "editor", action="write", file_path="a.txt", content="one\n")
    bare = Branch()
    bare.checkpoint_log.entries.extend(branch.checkpoint_log.entries)
    with pytest.raises(ConfigurationError, match="no toolkit to rewind"):
        await bare.rewind(branch.checkpoints[0].id)


async def test_dry_run_changes_nothing_and_says_exactly_what_the_rewind_does(
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("a\n")
    branch = kit_branch(workspace)
    await bash(branch, "rm a.txt && mkdir -p x/y && echo z > x/z && ln -s a.txt link")
    before = manifest(workspace)
    dry = await branch.rewind(branch.checkpoints[0].id, dry_run=True)
    assert manifest(workspace) == before
    assert dry.undo == ""
    real = await branch.rewind(branch.checkpoints[0].id)
    assert (dry.restored, dry.deleted, dry.conflicts) == (
        real.restored,
        real.deleted,
        real.conflicts,
    )
    assert manifest(workspace) == {"a.txt": ("file", "False", hashlib.sha256(b"a\n").hexdigest())}


async def test_undo_puts_back_what_the_rewind_replaced(workspace: Path) -> None:
    branch = kit_branch(workspace)
    await ok(branch, "editor", action="write", file_path="a.txt", content="one\n")
    await bash(branch, "echo two >> a.txt && chmod +x a.txt && ln -s a.txt l && mkdir -p e/f")
    after = manifest(workspace)
    report = await branch.rewind(branch.checkpoints[0].id)
    assert isinstance(report, RewindReport)
    assert manifest(workspace) == {}
    undone = await branch.rewind(report.undo)
    assert undone.conflicts == ()
    assert manifest(workspace) == after


async def test_modes_and_links_come_back_as_they_were(workspace: Path) -> None:
    (workspace / "run.sh").write_text("#!/bin/sh\n")
    (workspace / "run.sh").chmod(0o755)
    os.symlink("run.sh", workspace / "link")
    branch = kit_branch(workspace)
    start = manifest(workspace)
    await bash(branch, "chmod -x run.sh && rm link && echo x > link && mkdir -p a/b/c")
    await branch.rewind(branch.checkpoints[0].id)
    assert manifest(workspace) == start
    assert os.readlink(workspace / "link") == "run.sh"


# -- safety -------------------------------------------------------------------


async def test_a_user_edit_between_checkpoints_is_a_conflict_left_untouched(
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("a\n")
    (workspace / "b.txt").write_text("b\n")
    branch = kit_branch(workspace)
    await bash(branch, "echo agent > a.txt")
    (workspace / "b.txt").write_text("the user's work\n")  # outside the branch's tools
    (workspace / "mine.txt").write_text("created by the user\n")
    await bash(branch, "echo agent2 > a.txt")
    report = await branch.rewind(branch.checkpoints[0].id)
    assert report.restored == ("a.txt",)
    assert set(report.conflicts) == {"b.txt", "mine.txt"}
    assert (workspace / "b.txt").read_text() == "the user's work\n"
    assert (workspace / "mine.txt").exists()
    forced = await branch.rewind(branch.checkpoints[0].id, force=["b.txt"])
    assert forced.restored == ("b.txt",)
    assert (workspace / "b.txt").read_text() == "b\n"
    assert (workspace / "mine.txt").exists()


async def test_a_change_between_commands_that_changed_nothing_is_still_seen(
    workspace: Path,
) -> None:
    """The snapshot a command that changed nothing reuses never hides a later change."""
    (workspace / "a.txt").write_text("a\n")
    branch = kit_branch(workspace)
    await bash(branch, "echo agent > a.txt")
    await bash(branch, "nice true")
    await bash(branch, "nice true")
    assert len(branch.checkpoints) == 3
    assert branch.checkpoints[-1].files_changed == ()
    (workspace / "new" / "deep").mkdir(parents=True)
    (workspace / "new" / "deep" / "user.txt").write_text("the user's\n")
    (workspace / "a.txt").chmod(0o755)
    await bash(branch, "nice true")  # its checkpoint holds the user's changes
    await bash(branch, "rm -r new && chmod -x a.txt")
    report = await branch.rewind(branch.checkpoints[3].id)
    assert set(report.restored) == {"a.txt", "new/deep/user.txt"}
    assert (workspace / "new" / "deep" / "user.txt").read_text() == "the user's\n"
    assert os.access(workspace / "a.txt", os.X_OK)


async def test_an_edit_after_the_last_call_is_a_conflict(workspace: Path) -> None:
    (workspace / "a.txt").write_text("a\n")
    branch = kit_branch(workspace)
    await ok(branch, "editor", action="write", file_path="n.txt", content="n\n")
    (workspace / "a.txt").write_text("user\n")
    report = await branch.rewind(branch.checkpoints[0].id)
    assert report.deleted == ("n.txt",)
    assert report.conflicts == ("a.txt",)
    assert (workspace / "a.txt").read_text() == "user\n"


def test_a_directory_swapped_for_a_link_to_outside_is_never_written_through(
    tmp_path: Path, workspace: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "d").symlink_to(outside)
    data = b"payload"
    op = Op("d/f", None, Entry("100644", blob_id(data)))
    fd = os.open(workspace, DIRECTORY_FLAGS)
    try:
        assert apply_op(fd, op, {blob_id(data): data}) == "refused"
    finally:
        os.close(fd)
    assert list(outside.iterdir()) == []


async def test_a_swap_during_a_rewind_writes_nothing_outside(
    tmp_path: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lionfactory.coding._checkpointing as checkpointing

    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / "d").mkdir()
    (workspace / "d" / "f").write_text("original\n")
    branch = kit_branch(workspace)
    await bash(branch, "echo changed > d/f")
    real_apply = checkpointing.apply_op

    def swap_then_apply(root_fd: int, op: Op, blobs: dict[str, bytes]) -> str:
        # Another process swaps the directory for a link between the check and the write.
        if (workspace / "d").is_dir() and not (workspace / "d").is_symlink():
            os.rename(workspace / "d", tmp_path / "moved")
            (workspace / "d").symlink_to(outside)
        return real_apply(root_fd, op, blobs)

    monkeypatch.setattr(checkpointing, "apply_op", swap_then_apply)
    report = await branch.rewind(branch.checkpoints[0].id)
    assert list(outside.iterdir()) == []
    assert report.conflicts == ("d/f",)
    assert report.restored == ()


async def test_a_crafted_checkpoint_naming_git_hooks_or_a_case_folded_twin_is_never_restored(
    workspace: Path,
) -> None:
    from lionfactory._checkpoints import CheckpointEntry
    from lionfactory.coding._snapshots import State

    git(workspace, "init", "-q")
    branch = kit_branch(workspace)
    await ok(branch, "editor", action="write", file_path="a.txt", content="a\n")
    entry = branch.checkpoint_log.entries[0]
    store = SnapshotStore.for_workspace(branch_workspace(workspace), isolation=None)
    hook = store.write_blob(b"#!/bin/sh\ntouch /tmp/pwned\n")
    crafted = State.from_data(entry.data["before"]).with_paths(
        {
            ".git/hooks/pre-commit": Entry("100755", hook),
            ".GIT/hooks/post-checkout": Entry("100755", hook),
            "sub/.Git/config": Entry("100644", hook),
            "git~1/config": Entry("100644", hook),
            ".git./x": Entry("100644", hook),
        }
    )
    branch.checkpoint_log.replace(
        CheckpointEntry(entry.checkpoint, {**entry.data, "before": crafted.to_data()})
    )
    report = await branch.rewind(entry.checkpoint.id)
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert not (workspace / ".GIT").exists()
    assert not (workspace / "sub").exists()
    assert not (workspace / "git~1").exists()
    assert {".git/hooks/pre-commit", ".GIT/hooks/post-checkout", "sub/.Git/config"} <= set(
        report.skipped
    )


def branch_workspace(root: Path) -> Any:
    from lionfactory._os.workspace import Workspace

    return Workspace.at(root)


async def test_a_forged_object_in_the_projects_store_is_refused(workspace: Path) -> None:
    """The alternate is writable by confined commands: restored blobs are hashed again."""
    import zlib

    git(workspace, "init", "-q")
    (workspace / "a.txt").write_text("good\n")
    git(workspace, "add", "a.txt")
    oid = blob_id(b"good\n")
    branch = kit_branch(workspace)
    await bash(branch, "echo bad > a.txt")
    # The seeded index took the blob from the project's objects: forge it there.
    loose = workspace / ".git" / "objects" / oid[:2] / oid[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob 5\0evil\n"))
    with pytest.raises(Exception, match="corrupt or forged"):
        await branch.rewind(branch.checkpoints[0].id)
    assert (workspace / "a.txt").read_text() == "bad\n"


async def test_two_branches_rewinding_one_workspace_keep_each_others_work(
    workspace: Path,
) -> None:
    (workspace / "f").write_text("f\n")
    (workspace / "g").write_text("g\n")
    one, two = kit_branch(workspace), kit_branch(workspace)
    await bash(one, "echo one > f")
    await bash(two, "echo two > g")
    await bash(one, "echo one-again > f")
    report = await one.rewind(one.checkpoints[0].id)
    assert report.restored == ("f",)
    assert report.conflicts == ("g",)
    assert (workspace / "g").read_text() == "two\n"
    report = await two.rewind(two.checkpoints[0].id)
    # f is branch one's rewind: someone else's change for branch two.
    assert report.restored == ("g",)
    assert (workspace / "f").read_text() == "f\n"
    assert (workspace / "g").read_text() == "g\n"


async def test_a_background_job_gets_checkpoints_and_its_writes_are_the_branchs(
    workspace: Path,
) -> None:
    branch = kit_branch(workspace)
    started = await ok(
        branch, "bash", command="echo a > a.txt; sleep 0.3; echo b > b.txt", background=True
    )
    job_id = started["job_id"]
    await ok(branch, "jobs", action="wait", job_id=job_id)
    await ok(branch, "jobs", action="kill", job_id=job_id)
    tools = [c.tool for c in branch.checkpoints]
    # Its start, its end (seen by the wait), and the kill of the ended job.
    assert tools == ["bash", "jobs", "jobs"]
    report = await branch.rewind(branch.checkpoints[0].id)
    assert set(report.deleted) == {"a.txt", "b.txt"}
    assert report.conflicts == ()


# -- conversation ---------------------------------------------------------------


async def test_a_conversation_rewind_drops_later_messages_and_their_read_evidence(
    workspace: Path,
) -> None:
    (workspace / "a.txt").write_text("one\n")
    (workspace / "b.txt").write_text("bee\n")
    branch = kit_branch(workspace)
    await ok(branch, "reader", action="read", path="a.txt")
    edit = {"action": "edit", "file_path": "a.txt", "old_string": "one", "new_string": "1"}
    assert (await ok(branch, "editor", **edit))["success"]
    await ok(branch, "reader", action="read", path="b.txt")
    second = {"action": "edit", "file_path": "a.txt", "old_string": "1", "new_string": "2"}
    assert (await ok(branch, "editor", **second))["success"]
    checkpoint = branch.checkpoints[0]
    carrying = branch.messages.record[checkpoint.message_index]
    assert carrying.role == "assistant"
    assert carrying.tool_calls[0].arguments == edit
    total = branch.messages.total
    report = await branch.rewind(checkpoint.id, scope="both")
    assert (workspace / "a.txt").read_text() == "one\n"
    assert branch.messages.total == total  # the record keeps everything
    active_ids = {m.id for m in branch.messages.active}
    later = branch.messages.record[checkpoint.message_index + 1 :]
    assert later and all(m.id not in active_ids for m in later)
    # The read of b.txt came after the checkpoint: its evidence is withdrawn.
    b_edit = {"action": "edit", "file_path": "b.txt", "old_string": "bee", "new_string": "b"}
    refused = await ok(branch, "editor", **b_edit)
    assert not refused["success"] and "has not been read" in refused["error"]
    # The read of a.txt came before it and still stands: the edit works again.
    assert (await ok(branch, "editor", **edit))["success"]
    # Undo brings back the files and the view as they were before the rewind.
    await branch.rewind(report.undo, scope="both")
    assert (workspace / "a.txt").read_text() == "2\n"
    assert later[0].id in {m.id for m in branch.messages.active}


async def test_code_scope_leaves_the_conversation_and_conversation_scope_the_files(
    workspace: Path,
) -> None:
    branch = kit_branch(workspace)
    await ok(branch, "editor", action="write", file_path="a.txt", content="a\n")
    view = len(branch.messages)
    await branch.rewind(branch.checkpoints[0].id, scope="code")
    assert not (workspace / "a.txt").exists()
    assert len(branch.messages) == view
    await ok(branch, "editor", action="write", file_path="b.txt", content="b\n")
    await branch.rewind(branch.checkpoints[-1].id, scope="conversation")
    assert (workspace / "b.txt").exists()
    assert len(branch.messages) < view + 2


# -- persistence, clones, processes ---------------------------------------------


async def test_a_branch_loaded_in_another_process_lists_and_rewinds_its_checkpoints(
    tmp_path: Path, workspace: Path
) -> None:
    db = str(tmp_path / "branches.db")
    branch = kit_branch(workspace)
    await ok(branch, "editor", action="write", file_path="a.txt", content="a\n")
    await bash(branch, "echo b > b.txt")
    async with SqliteBranchStore(db) as store:
        await store.save(branch)
    out = run_worker("rewind", db, str(branch.id), branch.checkpoints[0].id)
    assert out["checkpoints"] == [c.id for c in branch.checkpoints]
    assert set(out["deleted"]) == {"a.txt", "b.txt"}
    assert not (workspace / "a.txt").exists()


async def test_a_rewind_killed_halfway_is_completed_by_the_next_call(
    tmp_path: Path, workspace: Path
) -> None:
    db = str(tmp_path / "branches.db")
    for name in "abcd":
        (workspace / name).write_text(f"{name}\n")
    branch = kit_branch(workspace)
    await bash(branch, "for f in a b c d; do echo changed > $f; done; echo new > e")
    async with SqliteBranchStore(db) as store:
        await store.save(branch)
    done = run_worker("crash", db, str(branch.id), branch.checkpoints[0].id, code=-9)
    assert done is None
    changed = [n for n in "abcd" if (workspace / n).read_text() == "changed\n"]
    assert 0 < len(changed) < 4  # killed halfway
    # The next call on the workspace (any checkpointing call) completes the rewind.
    await ok(branch, "editor", action="write", file_path="z.txt", content="z\n")
    assert all((workspace / n).read_text() == f"{n}\n" for n in "abcd")
    assert not (workspace / "e").exists()


def run_worker(*args: str, code: int = 0) -> Any:
    result = subprocess.run(
        [sys.executable, str(HERE / "_checkpoint_worker.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(HERE)},
    )
    assert result.returncode == code, result.stderr
    return json.loads(result.stdout) if result.stdout.strip() else None


async def test_a_clone_reads_its_sources_checkpoints_and_takes_its_own(workspace: Path) -> None:
    branch = kit_branch(workspace)
    await ok(branch, "editor", action="write", file_path="a.txt", content="a\n")
    clone = branch.clone()
    assert clone.checkpoints == branch.checkpoints
    await ok(clone, "editor", action="write", file_path="b.txt", content="b\n")
    assert len(clone.checkpoints) == 2
    assert len(branch.checkpoints) == 1
    report = await clone.rewind(branch.checkpoints[0].id)
    assert set(report.deleted) == {"a.txt", "b.txt"}


@pytest.mark.parametrize("mechanism", [*mechanism_params(), "none"])
async def test_checkpoints_work_under_each_confinement(workspace: Path, mechanism: str) -> None:
    git(workspace, "init", "-q")
    (workspace / "a.txt").write_bytes(b"a\r\n")
    branch = kit_branch(workspace, isolation=mechanism)
    # One program per call: unconfined, bash runs no shell script.
    await bash(branch, "rm a.txt")
    await bash(branch, "mkdir -p x/y")
    await bash(branch, "cp .git/HEAD 'with space'")
    await ok(branch, "editor", action="write", file_path="n\nl.txt", content="x")
    report = await branch.rewind(branch.checkpoints[0].id)
    assert manifest(workspace) == {"a.txt": ("file", "False", hashlib.sha256(b"a\r\n").hexdigest())}
    assert report.restored == ("a.txt",)


# -- the model-facing tool ------------------------------------------------------


async def test_the_checkpoint_tool_lists_diffs_pages_and_rewinds(workspace: Path) -> None:
    (workspace / "a.txt").write_text("one\ntwo\n")
    branch = kit_branch(workspace, tools=["reader", "editor", "bash", "checkpoint"])
    await bash(branch, "echo three >> a.txt && printf '\\000\\001' > bin && ln -s a.txt l")
    listed = await ok(branch, "checkpoint", action="list")
    [entry] = listed["checkpoints"]
    assert entry["tool"] == "bash"
    assert set(entry["files_changed"]) == {"a.txt", "bin", "l"}
    diff = await ok(branch, "checkpoint", action="diff", from_id=entry["id"])
    assert diff["name_status"] == ["M\ta.txt", "A\tbin", "A\tl"]
    assert "+three" in diff["diff"]
    assert "Binary file bin differs" in diff["diff"]
    assert diff["next_offset"] is None
    dry = await ok(branch, "checkpoint", action="rewind", to=entry["id"])
    assert dry["report"]["dry_run"] is True
    assert (workspace / "bin").exists()
    done = await ok(branch, "checkpoint", action="rewind", to=entry["id"], dry_run=False)
    assert set(done["report"]["deleted"]) == {"bin", "l"}
    assert (workspace / "a.txt").read_text() == "one\ntwo\n"
    missing = await ok(branch, "checkpoint", action="rewind", to="ckpt_nope")
    assert not missing["success"] and "list" in missing["error"]


async def test_a_long_diff_comes_in_pages(workspace: Path) -> None:
    branch = kit_branch(workspace, tools=["editor", "checkpoint"])
    big = "".join(f"line {i} of a long file\n" for i in range(3000))
    await ok(branch, "editor", action="write", file_path="big.txt", content=big)
    first = branch.checkpoints[0].id
    pages, offset = [], 0
    while offset is not None:
        page = await ok(branch, "checkpoint", action="diff", from_id=first, offset=offset)
        pages.append(page["diff"])
        offset = page["next_offset"]
    assert len(pages) > 1
    assert "".join(pages).count("\n+line ") == 3000


def test_the_checkpoint_tool_needs_checkpoints(workspace: Path) -> None:
    with pytest.raises(ValueError, match="needs checkpoints=True"):
        coding_toolkit(Branch(), workspace_root=workspace, tools=["checkpoint"], checkpoints=False)


async def test_checkpoints_survive_a_redis_store_round_trip(
    workspace: Path, redis_url: str, redis_namespace: str
) -> None:
    from lionfactory.backends import RedisBranchStore

    branch = kit_branch(workspace)
    await bash(branch, "echo one > a.txt")
    async with RedisBranchStore(redis_url, namespace=redis_namespace) as store:
        await store.save(branch)
        loaded = await store.load(branch.id)
    assert loaded.checkpoints == branch.checkpoints
    report = await loaded.rewind(loaded.checkpoints[0].id)
    assert report.deleted == ("a.txt",)


async def test_a_file_written_while_a_snapshot_is_taken_is_reported_as_a_conflict(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A background job's write that lands mid-snapshot leaves an uncertain record."""
    import lionfactory.coding._snapshots as snapshots

    (workspace / "a.txt").write_text("a\n")
    branch = kit_branch(workspace)
    real = snapshots.SnapshotStore._check

    async def racing(self: Any, args: list[str], what: str, **kwargs: Any) -> str:
        out = await real(self, args, what, **kwargs)
        if args[:1] == ["add"]:
            (workspace / "job.out").write_text("written by a job during the snapshot\n")
        return out

    monkeypatch.setattr(snapshots.SnapshotStore, "_check", racing)
    await bash(branch, "echo b > a.txt && echo first > job.out")
    entry = branch.checkpoint_log.entries[0]
    assert "job.out" in entry.data.get("unsettled", ())
    monkeypatch.setattr(snapshots.SnapshotStore, "_check", real)
    report = await branch.rewind(entry.checkpoint.id)
    assert "job.out" in report.conflicts
    assert (workspace / "job.out").exists()


async def test_a_sandbox_merge_takes_a_checkpoint_of_the_home_checkout(workspace: Path) -> None:
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "config", "user.name", "T")
    git(workspace, "config", "user.email", "t@example.invalid")
    (workspace / "a.py").write_text("x = 1\n")
    git(workspace, "add", "-A")
    git(workspace, "commit", "-q", "-m", "init")
    branch = kit_branch(
        workspace, tools=["reader", "editor", "bash", "sandbox"], allow_merge_into_protected=True
    )
    assert (await ok(branch, "sandbox", action="create"))["success"]
    await ok(branch, "reader", action="read", path="a.py")
    edit = {"action": "edit", "file_path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}
    assert (await ok(branch, "editor", **edit))["success"]
    await ok(branch, "sandbox", action="commit", message="x is 2")
    assert (await ok(branch, "sandbox", action="merge"))["success"]
    assert (workspace / "a.py").read_text() == "x = 2\n"
    merge = branch.checkpoints[-1]
    assert merge.tool == "sandbox"
    assert merge.files_changed == ("a.py",)
    report = await branch.rewind(merge.id, scope="code")
    assert report.restored == ("a.py",)
    assert (workspace / "a.py").read_text() == "x = 1\n"


def assert_calls_answered(branch: Branch) -> None:
    """Every call in the active view has its result there, and every result its call."""
    active = list(branch.messages.active)
    calls = [c.id for m in active if m.role == "assistant" for c in m.tool_calls]
    results = [m.call_id for m in active if m.role == "tool"]
    assert sorted(calls) == sorted(results), [(m.role, m.call_id) for m in active]


async def test_a_conversation_rewind_never_leaves_a_call_without_its_result(
    workspace: Path,
) -> None:
    """Eviction is inclusive: the turn that made the checkpoint's call leaves with its results."""
    branch = kit_branch(workspace, tools=["editor", "checkpoint"])
    await ok(branch, "editor", action="write", file_path="a.txt", content="a\n")
    await ok(branch, "editor", action="write", file_path="b.txt", content="b\n")
    first, second = branch.checkpoints
    carrying = branch.messages.record[second.message_index]
    # Rewound from inside a call (the model's own tool): that call keeps its place.
    done = await ok(branch, "checkpoint", action="rewind", to=second.id, dry_run=False)
    assert done["success"], done
    assert not branch.messages.is_active(carrying.id)
    assert_calls_answered(branch)
    assert branch.messages.active[-1].role == "tool"
    assert not (workspace / "b.txt").exists()
    # The undo brings back the view as it was, with the rewind call's own result.
    undone = await ok(
        branch, "checkpoint", action="rewind", to=done["report"]["undo"], dry_run=False
    )
    assert undone["success"], undone
    assert branch.messages.is_active(carrying.id)
    assert_calls_answered(branch)
    assert (workspace / "b.txt").exists()
    # From outside any call: the view ends before the first write's turn.
    await branch.rewind(first.id, scope="conversation")
    assert_calls_answered(branch)
    assert [m.role for m in branch.messages.active] == ["system"]


@pytest.mark.parametrize(
    ("mode", "real"),
    [
        (None, "done"),
        ("auto", "done"),
        ("accept_edits", "done"),
        ("ask_edits", "pending"),
        ("read_only", "error"),
    ],
)
async def test_a_real_rewind_goes_through_the_modes_and_a_dry_run_never_asks(
    workspace: Path, mode: str | None, real: str
) -> None:
    (workspace / "a.txt").write_text("a\n")
    tools = ["reader", "editor", "checkpoint"]
    branch = kit_branch(workspace, tools=tools, mode=mode)
    await ok(branch, "reader", action="read", path="a.txt")
    edit = {"action": "edit", "file_path": "a.txt", "old_string": "a", "new_string": "b"}
    first = await branch.act("editor", edit)
    if first.outcome == "pending":
        branch.approve(first.call_id)
        await branch.settle()
    elif mode == "read_only":
        assert first.outcome == "error" and "read_only mode" in (first.error or "")
        # A read-only session has no checkpoint of its own: one from a session that wrote.
        writer = kit_branch(workspace, tools=tools)
        await ok(writer, "reader", action="read", path="a.txt")
        await ok(writer, "editor", **edit)
        branch = Branch.from_dict(
            {**branch.to_dict(), "checkpoints": writer.checkpoint_log.to_data()}
        )
    assert (workspace / "a.txt").read_text() == "b\n"
    [checkpoint] = branch.checkpoints
    for quiet in (
        {"action": "list"},
        {"action": "diff", "from_id": checkpoint.id},
        {"action": "rewind", "to": checkpoint.id},
        {"action": "rewind", "to": checkpoint.id, "dry_run": False, "scope": "conversation"},
    ):
        assert (await branch.act("checkpoint", quiet)).outcome == "done", quiet
    assert (workspace / "a.txt").read_text() == "b\n"
    for arguments in (
        {"action": "rewind", "to": checkpoint.id, "dry_run": False},
        {"action": "rewind", "to": checkpoint.id, "dry_run": False, "paths": ["a.txt"]},
    ):
        result = await branch.act("checkpoint", arguments)
        assert result.outcome == real, (arguments, result)
        if real == "pending":
            branch.deny(result.call_id, "not now")
            await branch.settle()
    assert (workspace / "a.txt").read_text() == ("a\n" if real == "done" else "b\n")


async def test_a_job_that_ends_by_itself_closes_its_checkpoint_window(workspace: Path) -> None:
    """Its end checkpoint names what it wrote; a later user edit is a conflict again."""
    branch = kit_branch(workspace)
    started = await ok(branch, "bash", command="sleep 0.3; echo late > late.txt", background=True)
    assert (await ok(branch, "jobs", action="wait", job_id=started["job_id"]))["matched"]
    start, end = branch.checkpoints
    assert (start.tool, end.tool) == ("bash", "jobs")
    assert "late.txt" in end.files_changed
    assert branch.checkpoint_log.entries[-1].data.get("jobs_ended") == [started["job_id"]]
    # The window is closed: the user's file is not the branch's to delete.
    (workspace / "mine.txt").write_text("the user's\n")
    report = await branch.rewind(start.id, scope="code")
    assert report.deleted == ("late.txt",)
    assert report.conflicts == ("mine.txt",)
    assert (workspace / "mine.txt").exists()


async def test_a_job_end_is_seen_by_the_next_call_of_any_tool(workspace: Path) -> None:
    import functools

    import anyio.to_thread

    from lionfactory.tools.jobs import REGISTRY, job_running

    (workspace / "a.txt").write_text("a\n")
    branch = kit_branch(workspace)
    started = await ok(branch, "bash", command="echo done > out.txt", background=True)
    job = REGISTRY.tables[branch.id].jobs[started["job_id"]]
    await anyio.to_thread.run_sync(functools.partial(job.popen.wait, timeout=60))
    assert not job_running(branch.id, started["job_id"])
    await ok(branch, "reader", action="read", path="a.txt")
    assert [c.tool for c in branch.checkpoints] == ["bash", "jobs"]


# -- the first snapshot of a large tree -------------------------------------------


def large_tree(root: Path, files: int) -> None:
    for index in range(files):
        folder = root / f"pkg{index % 40}"
        folder.mkdir(exist_ok=True)
        (folder / f"m{index}.py").write_text(f"V = {index}\n" * 30)


async def test_the_first_snapshot_of_a_large_tree_does_not_block_an_edit(
    workspace: Path,
) -> None:
    """The edit records its path over the snapshot still being taken; the rewind completes it."""
    from lionfactory.coding._checkpointing import _BASES

    large_tree(workspace, 6_000)
    branch = kit_branch(workspace, tools=["editor", "bash", "checkpoint"])
    await ok(branch, "editor", action="write", file_path="new.py", content="x = 1\n")
    base = _BASES[workspace.resolve()]
    # 6,000 files are not hashed in the time of an edit: the edit did not wait.
    assert not base.finished
    [checkpoint] = branch.checkpoints
    assert checkpoint.files_changed == ("new.py",)
    report = await branch.rewind(checkpoint.id, scope="code")
    assert base.finished and base.error is None
    assert report.deleted == ("new.py",)
    assert report.conflicts == ()
    assert (workspace / "pkg0" / "m0.py").exists()


async def test_a_command_that_outruns_the_first_snapshot_gets_a_partial_checkpoint(
    workspace: Path,
) -> None:
    """Never silent: the partial checkpoint says why, and a rewind to it is refused."""
    from lionfactory.coding._checkpointing import _BASES

    large_tree(workspace, 6_000)
    branch = kit_branch(workspace, tools=["editor", "bash", "checkpoint"])
    checkpointer = branch.checkpoint_log.rewinder
    checkpointer.limits = Limits(first_snapshot_wait=0.0)  # type: ignore[union-attr]
    await bash(branch, "echo made > made.txt")
    partial = branch.checkpoint_log.entries[0]
    assert "first snapshot" in partial.data["partial"]
    listed = await ok(branch, "checkpoint", action="list")
    assert "first snapshot" in listed["checkpoints"][0]["partial"]
    refused = await ok(
        branch, "checkpoint", action="rewind", to=partial.checkpoint.id, dry_run=False
    )
    assert not refused["success"] and "partial" in refused["error"]
    assert (workspace / "made.txt").exists()
    assert _BASES[workspace.resolve()].finished
    # Later checkpoints are whole again.
    await bash(branch, "rm made.txt")
    report = await branch.rewind(branch.checkpoints[-1].id, scope="code")
    assert report.restored == ("made.txt",)


async def test_the_first_snapshot_wait_starts_once_the_toolchain_walk_is_done(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first command of the process is not partial because the credential walk was slow.

    The first confined launch waits for the walk of the toolchain's trees
    (seconds under load, over the whole venv and pyenv); the snapshot's git
    waits for it too. Here the walk of a toolchain tree takes 4 s and the
    snapshot is allowed 2 s: counted from the call, the command would run
    with a partial checkpoint; counted from when launching can begin, the
    snapshot of a small tree is done in time.
    """
    from lionfactory._os import isolation as isolation_module

    toolchain = tmp_path / "toolchain"
    (toolchain / "bin").mkdir(parents=True)
    watch = isolation_module._WATCH
    walk = watch._walk_apart
    walks: list[float] = []

    def slow_walk(fd: int, top: str, *, apart: bool = False) -> Any:
        if top == str(toolchain):
            time.sleep(4.0)
            walks.append(time.monotonic())
        return walk(fd, top, apart=apart)

    monkeypatch.setattr(watch, "_walk_apart", slow_walk)
    (workspace / "a.txt").write_text("a\n")
    branch = kit_branch(workspace, tools=["bash", "checkpoint"], exposed_paths=[toolchain])
    branch.checkpoint_log.rewinder.limits = Limits(first_snapshot_wait=2.0)  # type: ignore[union-attr]
    await bash(branch, "echo made > made.txt")
    assert walks, "the toolchain tree was walked while the call waited"
    [entry] = branch.checkpoint_log.entries
    assert "partial" not in entry.data, entry.data["partial"]
    report = await branch.rewind(entry.checkpoint.id, scope="code")
    assert report.deleted == ("made.txt",)


async def test_closing_the_branch_cancels_its_first_snapshot(workspace: Path) -> None:
    from lionfactory.coding._checkpointing import _BASES

    large_tree(workspace, 6_000)
    branch = kit_branch(workspace)
    await ok(branch, "editor", action="write", file_path="new.py", content="x = 1\n")
    base = _BASES[workspace.resolve()]
    assert not base.finished
    await branch.aclose()
    assert base.finished
    assert base.error is not None and "cancelled" in base.error


_EXITS_DURING_SNAPSHOT = """
import os, sys, time
from pathlib import Path

import trio

from lionfactory import Branch
from lionfactory.coding import coding_toolkit

root = Path(sys.argv[1])


def gits():
    found = set()
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(os.readlink(f"/proc/{name}/cwd")).is_relative_to(root.parent):
                with open(f"/proc/{name}/cmdline", "rb") as file:
                    if file.read().startswith(b"git"):
                        found.add(name)
        except OSError:
            pass
    return found


async def main():
    branch = Branch()
    branch.register(coding_toolkit, workspace_root=root, notify=False)
    done = await branch.act("editor", {"action": "write", "file_path": "n.py", "content": "x\\n"})
    assert done.ok, done.error
    # The snapshot runs several gits, with Python between them: wait for one
    # that has run for a while (hashing the tree), not one about to end.
    deadline = time.monotonic() + 60
    seen = {}
    while not any(time.monotonic() - since > 0.3 for since in seen.values()):
        assert time.monotonic() < deadline, "no long snapshot git was seen"
        now = gits()
        seen = {pid: seen.get(pid, time.monotonic()) for pid in now}
        await trio.sleep(0.01)


trio.run(main)
sys.exit(0)  # with the branch open and its first snapshot's git running
"""


def test_a_program_that_ends_during_its_first_snapshot_leaves_no_process(
    workspace: Path,
) -> None:
    # The snapshot's thread dies with the interpreter; cancelled at exit, its
    # git (and the sandbox around it) ends with it instead of going on for init.
    git(workspace, "init", "-q")
    large_tree(workspace, 12_000)
    done = subprocess.run(
        [sys.executable, "-c", _EXITS_DURING_SNAPSHOT, str(workspace)],
        capture_output=True,
        text=True,
        timeout=120,
        # The store beside the workspace, where the search for leftovers looks too.
        env={**os.environ, "LIONFACTORY_STATE_DIR": str(workspace.parent / "state")},
    )
    assert done.returncode == 0, done.stderr
    try:
        assert processes_in(workspace.parent) == []
    finally:
        for pid in processes_in(workspace.parent):
            os.kill(pid, 9)


async def test_the_store_git_dies_with_this_process_on_every_route(workspace: Path) -> None:
    """A SIGKILL runs no exit hook: the store's git asks the runner to die with us.

    Under a PID namespace the runner gives every program the parent-death
    signal; the store asks for it where git runs directly too (no isolation).
    """
    import attrs

    from lionfactory._os.process import run_process

    git(workspace, "init", "-q")
    store = SnapshotStore.for_workspace(branch_workspace(workspace), isolation=None)
    asked: list[object] = []

    async def recording(argv: Any, **options: Any) -> Any:
        asked.append(options.get("die_with_parent"))
        return await run_process(argv, **options)

    result = await attrs.evolve(store.git, runner=recording).run(["version"], cwd=workspace)
    assert result.returncode == 0 and result.stdout.startswith("git version")
    assert asked and all(flag is True for flag in asked)


# -- a full disk ------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Any:
    """A 4 MiB tmpfs (root may mount one); skipped, with the reason, where mounting is refused."""
    folder = tmp_path / "small"
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill: {done.stderr.strip() or done.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> Path:
    """Fill `folder`'s disk to the last byte; the filler file is returned for freeing."""
    filler = folder / "filler"
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError:
            pass
    with contextlib.suppress(OSError), open(folder / "tail", "wb") as handle:
        while True:
            handle.write(b"\0")
            handle.flush()
    return filler


async def test_a_full_checkpoint_store_refuses_the_call_and_the_next_one_works(
    workspace: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot that cannot be stored leaves nothing partial; the call does not run."""
    monkeypatch.setenv("LIONFACTORY_STATE_DIR", str(small_disk / "state"))
    (workspace / "data.bin").write_bytes(os.urandom(6 * 1024 * 1024))
    branch = kit_branch(workspace)
    refused = await branch.act("bash", {"command": "echo ran > ran.txt"})
    assert not refused.ok
    assert "full" in (refused.error or "") and "checkpoints=False" in (refused.error or "")
    assert not (workspace / "ran.txt").exists()
    assert branch.checkpoints == ()
    # Space comes back (the big file goes): the next call is checkpointed and runs.
    (workspace / "data.bin").unlink()
    await bash(branch, "echo ran > ran.txt")
    assert [c.tool for c in branch.checkpoints] == ["bash"]
    report = await branch.rewind(branch.checkpoints[0].id, scope="code")
    assert report.deleted == ("ran.txt",)


async def test_a_rewind_on_a_full_workspace_disk_reports_and_leaves_nothing_partial(
    small_disk: Path,
) -> None:
    """A restore that cannot be written leaves the file as it was and says so; it works later."""
    workspace = small_disk / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("original\n")
    branch = kit_branch(workspace)
    await bash(branch, "rm a.txt")
    first = branch.checkpoints[0].id
    filler = fill(small_disk)
    with pytest.raises(SnapshotError, match="full") as raised:
        await branch.rewind(first, scope="code")
    assert "rewind again" in raised.value.message
    # Nothing half-written, nothing left behind, no undo checkpoint for a rewind not done.
    assert not (workspace / "a.txt").exists()
    assert len(branch.checkpoints) == 1
    assert not [p for p in workspace.iterdir() if p.name.startswith(".")]
    filler.unlink()
    (small_disk / "tail").unlink(missing_ok=True)
    again = await branch.rewind(first, scope="code")
    assert again.restored == ("a.txt",)
    assert (workspace / "a.txt").read_text() == "original\n"


# -- the record of an edit, taken while the type checker checks it ------------------


def checkpointer_of(branch: Branch) -> Any:
    return branch.checkpoint_log.rewinder


async def test_an_edits_record_taken_while_checking_is_not_taken_again(tmp_path: Path) -> None:
    """`_RecordAfter.early` records the change; the call's end then records nothing more."""
    from lionfactory._os.workspace import Workspace
    from lionfactory.coding._checkpointing import CallPlan
    from lionfactory.coding._toolkit import _RecordAfter

    root = tmp_path / "ws"
    root.mkdir()
    branch = kit_branch(root)
    try:
        await ok(branch, "editor", action="write", file_path="a.py", content="x = 1\n")
        await bash(branch, "touch b")  # waits for the first snapshot that edit started
        checkpointer = checkpointer_of(branch)
        workspace = Workspace.at(root)
        assert not checkpointer.first_snapshot_pending(workspace)
        entry = await checkpointer.before(workspace, "editor", ["a.py"])
        (root / "a.py").write_text("x = 2\n")
        record = _RecordAfter(checkpointer, workspace, entry, CallPlan(("a.py",)))
        await record.early()
        taken = branch.checkpoint_log.entries[-1]
        assert taken.checkpoint.files_changed == ("a.py",)
        assert taken.data["after"]["overlay"][0][0] == "a.py"
        # Another program's change after the record is not this call's.
        (root / "a.py").write_text("x = 3\n")
        await record(None)
        assert branch.checkpoint_log.entries[-1] is taken
    finally:
        await branch.aclose()


async def test_an_edit_over_a_pending_first_snapshot_is_recorded_as_it_ends(
    tmp_path: Path,
) -> None:
    """While the first snapshot is pending, `early` leaves the record to the call's end."""
    from lionfactory._os.workspace import Workspace
    from lionfactory.coding._checkpointing import CallPlan
    from lionfactory.coding._toolkit import _RecordAfter

    root = tmp_path / "ws"
    root.mkdir()
    branch = kit_branch(root)
    try:
        checkpointer = checkpointer_of(branch)
        workspace = Workspace.at(root)
        entry = await checkpointer.before(workspace, "editor", ["a.py"])
        assert checkpointer.first_snapshot_pending(workspace)
        (root / "a.py").write_text("x = 1\n")
        record = _RecordAfter(checkpointer, workspace, entry, CallPlan(("a.py",)))
        await record.early()
        assert "after" not in branch.checkpoint_log.entries[-1].data
        await record(None)
        assert branch.checkpoint_log.entries[-1].checkpoint.files_changed == ("a.py",)
    finally:
        await branch.aclose()

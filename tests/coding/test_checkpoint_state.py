"""A state machine over editor and shell changes, rewinds and undos of one workspace.

Each step is a real call on a `coding_toolkit` branch (editor writes and
edits; bash ``printf``, ``rm``, ``mv``, ``cp``, ``chmod +x``, ``ln -s``,
``mkdir -p``, ``truncate``) on names with spaces and newlines and on CRLF,
binary and empty content. Before each call the workspace's manifest (type,
executable bit, sha256 or link target of every file and link) is recorded;
when the call took a checkpoint, that manifest is the checkpoint's. After a
rewind to any checkpoint the workspace's manifest must equal the one
recorded for it, and after an undo the one just before the rewind.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import trio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from lionfactory import Branch
from lionfactory.coding import coding_toolkit
from lionfactory.coding._snapshots import Limits

NAMES = ("a.txt", "b b.txt", "c\nd", "dir/e.bin", "dir/sub/f", "-dash")
CONTENTS = (b"", b"plain\n", b"x\r\ny\r\n", bytes(range(0, 256, 7)), b"no newline")
TEXTS = ("", "plain\n", "x\r\ny\r\n", "unicode \u00e9\u4e2d\n")


def files_manifest(root: Path) -> dict[str, tuple[str, ...]]:
    """Type, exec bit, sha256 or link target of every file and link under `root` (not ``.git``)."""
    out: dict[str, tuple[str, ...]] = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in [*files, *(d for d in dirs if (Path(dirpath) / d).is_symlink())]:
            path = Path(dirpath) / name
            key = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[key] = ("link", os.readlink(path))
            else:
                executable = bool(path.lstat().st_mode & stat.S_IXUSR)
                out[key] = ("file", str(executable), hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def q(name: str) -> str:
    return shlex.quote(name if not name.startswith("-") else f"./{name}")


class CheckpointMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="lf-ckpt-machine-"))
        self.root = self.tmp / "ws"
        self.root.mkdir()
        self.branch = Branch("You write code.")
        self.branch.register(coding_toolkit, workspace_root=self.root, notify=False)
        # On a loaded machine a first snapshot can outlast the default 5 s
        # wait, and a command would get a partial checkpoint (tested elsewhere).
        rewinder = self.branch.checkpoint_log.rewinder
        rewinder.limits = Limits(first_snapshot_wait=120.0)  # type: ignore[union-attr]
        self.recorded: dict[str, dict[str, tuple[str, ...]]] = {}

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def act(self, tool: str, arguments: dict[str, Any]) -> Any:
        before = files_manifest(self.root)
        known = {c.id for c in self.branch.checkpoints}
        result = trio.run(self.branch.act, tool, arguments)
        for checkpoint in self.branch.checkpoints:
            if checkpoint.id not in known:
                self.recorded[checkpoint.id] = before
        return result

    def shell(self, command: str) -> None:
        self.act("bash", {"command": command})

    @rule(name=st.sampled_from(NAMES), text=st.sampled_from(TEXTS))
    def editor_write(self, name: str, text: str) -> None:
        if (self.root / name).exists():
            trio.run(self.branch.act, "reader", {"action": "read", "path": name})
        self.act("editor", {"action": "write", "file_path": name, "content": text})

    @rule(name=st.sampled_from(NAMES))
    def editor_edit(self, name: str) -> None:
        trio.run(self.branch.act, "reader", {"action": "read", "path": name})
        self.act(
            "editor",
            {"action": "edit", "file_path": name, "old_string": "x", "new_string": "X"},
        )

    @rule(name=st.sampled_from(NAMES), content=st.sampled_from(CONTENTS))
    def bash_printf(self, name: str, content: bytes) -> None:
        escaped = "".join(f"\\{byte:03o}" for byte in content)
        folder = os.path.dirname(name)
        prefix = f"mkdir -p {q(folder)} && " if folder else ""
        self.shell(f"{prefix}printf '{escaped}' > {q(name)}")

    @rule(name=st.sampled_from(NAMES))
    def bash_rm(self, name: str) -> None:
        self.shell(f"rm -f {q(name)}")

    @rule(source=st.sampled_from(NAMES), dest=st.sampled_from(NAMES))
    def bash_mv(self, source: str, dest: str) -> None:
        self.shell(f"mv -f {q(source)} {q(dest)}")

    @rule(source=st.sampled_from(NAMES), dest=st.sampled_from(NAMES))
    def bash_cp(self, source: str, dest: str) -> None:
        self.shell(f"cp -P {q(source)} {q(dest)}")

    @rule(name=st.sampled_from(NAMES))
    def bash_chmod(self, name: str) -> None:
        self.shell(f"chmod +x {q(name)}")

    @rule(name=st.sampled_from(NAMES), link=st.sampled_from(("a.txt", "../outside", "dir")))
    def bash_ln(self, name: str, link: str) -> None:
        self.shell(f"ln -sfn {q(link)} {q(name)}")

    @rule(folder=st.sampled_from(("dir", "dir/sub", "new/deep/er")))
    def bash_mkdir(self, folder: str) -> None:
        self.shell(f"mkdir -p {q(folder)}")

    @rule(name=st.sampled_from(NAMES), size=st.sampled_from((0, 3)))
    def bash_truncate(self, name: str, size: int) -> None:
        self.shell(f"truncate -s {size} {q(name)}")

    @precondition(lambda self: bool(self.branch.checkpoints))
    @rule(data=st.data(), undo=st.booleans())
    def rewind(self, data: st.DataObject, undo: bool) -> None:
        targets = [c.id for c in self.branch.checkpoints if c.id in self.recorded]
        target = data.draw(st.sampled_from(targets))
        before = files_manifest(self.root)
        report = trio.run(lambda: self.branch.rewind(target, scope="code"))
        assert report.conflicts == (), report
        assert files_manifest(self.root) == self.recorded[target], report
        self.recorded[report.undo] = before
        if undo:
            again = trio.run(lambda: self.branch.rewind(report.undo, scope="code"))
            assert again.conflicts == (), again
            assert files_manifest(self.root) == before, again
            self.recorded[again.undo] = self.recorded[target]

    @invariant()
    def nothing_outside(self) -> None:
        assert not (self.tmp / "outside").exists()


CheckpointMachine.TestCase.settings = settings(
    max_examples=20, stateful_step_count=15, deadline=None, derandomize=True
)
TestCheckpointMachine = CheckpointMachine.TestCase

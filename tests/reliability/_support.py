"""Shared pieces of the reliability suite: a hostile workspace, a canary and its snapshot.

Hypothesis runs the same test body many times, so nothing here is a pytest
fixture: every example builds a fresh `Layout` in its own temporary directory
(a function-scoped fixture would be shared by all examples of one test).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

from lionfactory._os.workspace import DEFAULT_PROTECTED_NAMES

SECRET = "SECRET_CANARY_9c1e"
"""In every file beside the workspace; no tool answer may ever contain it."""

PROTECTED = "PROTECTED_VALUE_7f3a"
"""In every protected file inside the workspace; no tool answer may contain it."""

# name -> link target, relative to the workspace (or absolute when it starts
# with "{canary}" or "{ws}"): inside-to-outside, chains, loops, dangling links,
# links to protected files and to the workspace's parent.
WORKSPACE_LINKS = {
    "out_dir": "../canary",
    "out_file": "../canary/secret.txt",
    "out_abs": "{canary}/secret.txt",
    "out_py": "../canary/secret.py",
    "loop_a": "loop_b",
    "loop_b": "loop_a",
    "self": ".",
    "up": "..",
    "dangling": "missing",
    "dangling_out": "../canary/missing",
    "env_link": ".env",
    "chain1": "chain2",
    "chain2": "out_dir",
    "in_link": "a.txt",
    "sub/back": "../../canary",
    "sub/root": "{ws}",
}

# Links from the canary into the workspace (outside-to-inside).
CANARY_LINKS = {"ws_link": "../ws", "file_link": "../ws/a.txt"}

NAMES = (
    "a.txt",
    "pkg",
    "mod.py",
    "sub",
    "keys",
    ".env",
    ".ENV",
    ".env.local",
    ".env.py",
    "id_rsa",
    "Id_Rsa",
    ".git",
    "config",
    "canary",
    "secret.txt",
    "secret.py",
    "ws",
    "new.txt",
    *(name.rsplit("/", 1)[-1] for name in WORKSPACE_LINKS),
    *CANARY_LINKS,
)
"""Path components that mean something in the layout."""


@attrs.frozen
class Layout:
    """A workspace with a canary directory and a canary file beside it."""

    base: Path
    ws: Path
    canary: Path


def build_layout(base: Path) -> Layout:
    """Populate `base` with ``ws/`` (the workspace) and ``canary/`` beside it."""
    base = base.resolve()
    ws, canary = base / "ws", base / "canary"
    for directory in (ws / "pkg", ws / "sub", ws / "keys", ws / ".git", canary / "deep"):
        directory.mkdir(parents=True)
    (ws / "a.txt").write_text("hello world\n")
    (ws / "pkg" / "mod.py").write_text("def f():\n    return 1\n")
    (ws / ".git" / "config").write_text("[core]\n")
    for protected in (".env", "sub/.env.local", "keys/id_rsa", ".netrc"):
        (ws / protected).write_text(f"TOKEN={PROTECTED}\n")
    # Python under a protected name: ruff and ast-grep would report it if they scanned it.
    (ws / ".env.py").write_text(f"print({PROTECTED})\n")
    (ws / "sub" / ".env.py").write_text(f"print({PROTECTED})\n")
    (canary / "secret.txt").write_text(f"{SECRET}\n")
    (canary / "secret.py").write_text(f"print({SECRET})\n")
    (canary / "deep" / "more.py").write_text(f"import os\nprint({SECRET})\n")
    (base / "sibling.txt").write_text(f"{SECRET}\n")
    for links, home in ((WORKSPACE_LINKS, ws), (CANARY_LINKS, canary)):
        for name, target in links.items():
            (home / name).symlink_to(target.format(canary=canary, ws=ws))
    return Layout(base=base, ws=ws, canary=canary)


@contextmanager
def hostile_workspace() -> Iterator[Layout]:
    """A fresh `Layout` in a temporary directory, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="lf-reliability-") as base:
        yield build_layout(Path(base))


def snapshot_outside(layout: Layout) -> dict[str, tuple[Any, ...]]:
    """Everything beside the workspace: names, types, modes, sizes, mtimes, contents.

    Symlinks are recorded, never followed, so the snapshot itself touches
    nothing inside the workspace.
    """
    state: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(layout.base, followlinks=False):
        here = Path(dirpath)
        if here == layout.base:
            dirnames[:] = [d for d in dirnames if d != "ws"]
        st = os.lstat(here)
        state[str(here)] = ("dir", st.st_mode, st.st_mtime_ns, tuple(sorted(os.listdir(here))))
        for name in filenames + [d for d in dirnames if (here / d).is_symlink()]:
            path = here / name
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                state[str(path)] = ("link", os.readlink(path), st.st_mtime_ns)
            else:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                state[str(path)] = ("file", st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return state


def leaks(answer: Any) -> list[str]:
    """The markers an answer gives away (empty when it leaks nothing)."""
    text = json.dumps(answer, ensure_ascii=False, default=str)
    return [marker for marker in (SECRET, PROTECTED) if marker in text]


def is_protected(name: str) -> bool:
    """The workspace's default protected-name rule, restated independently."""
    folded = name.casefold()
    return any(fnmatch.fnmatchcase(folded, pattern) for pattern in DEFAULT_PROTECTED_NAMES)


def allowed_target(ws: Path, path: str) -> Path | None:
    """Where a tool may act for `path`, by an independent oracle; None if nowhere.

    Lexically normalised (as the tools document), then every symlink resolved
    by the kernel: both must be inside the root, and no component of either
    may be a protected name.
    """
    if "\x00" in path or not path.strip() or path.startswith("~"):
        return None
    lexical = Path(os.path.normpath(ws / path))
    try:
        real = Path(os.path.realpath(lexical))
    except (OSError, ValueError):
        return None
    for candidate in (lexical, real):
        if candidate != ws and ws not in candidate.parents:
            return None
        if any(is_protected(part) for part in candidate.relative_to(ws).parts):
            return None
    return lexical

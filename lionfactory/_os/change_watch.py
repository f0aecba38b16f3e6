"""Whether anything changed in a tree since a moment, by inotify: no walk, no stat.

A checkpoint's full snapshot stats every file of the workspace (git's
persistent index hashes none of them when nothing changed, but a 10,000-file
tree still costs tens of milliseconds and a confined git process). A bash
command that changed nothing then pays that twice, before and after it.
`ChangeWatch` answers the question "did anything change under this tree
since the last snapshot began?" from the queued inotify events instead, so
the snapshot can hand back its previous result when the answer is no.

The answer "nothing changed" is given only where inotify sees every change:

* every folder of the tree is watched (a folder created later is watched
  when its creation is read, and its creation alone already means "changed");
* the tree is on a local filesystem (a network or FUSE filesystem's other
  writers are invisible to inotify);
* no regular file has a second hard link (a write through a link outside the
  tree reports nothing here);
* no event was lost (a queue overflow) and the watch limit was not reached.

Otherwise `changed` says yes and the caller does the full work. What inotify
never reports, a write through a shared ``mmap`` of a file, is the one blind
spot; git's stat cache sees it only once the kernel updated the mtime.

Folders named ``.git`` are not watched: a snapshot never records them (git
refuses the name), and a ``git status`` rewriting ``.git/index`` must not
count as a change. Their creation or removal is an event of the folder
holding them, so a new nested repository is seen.

One inotify instance per process serves every tree (the kernel allows a user
128 of them; a test suite opens hundreds of workspaces).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import threading

from lionfactory._os.tree_watch import (
    _IN_IGNORED,
    _IN_ISDIR,
    EventsLost,
    inotify_init,
    read_events,
)

__all__ = ["ChangeWatch", "change_watch"]

_IN_ATTRIB = 0x004
# Every change of content, metadata, names, and the watched folder's own fate.
_MASK = (
    0x002  # IN_MODIFY
    | _IN_ATTRIB
    | 0x008  # IN_CLOSE_WRITE
    | 0x040  # IN_MOVED_FROM
    | 0x080  # IN_MOVED_TO
    | 0x100  # IN_CREATE
    | 0x200  # IN_DELETE
    | 0x400  # IN_DELETE_SELF
    | 0x800  # IN_MOVE_SELF
    | 0x01000000  # IN_ONLYDIR
    | 0x02000000  # IN_DONT_FOLLOW
)
_NEW_FOLDER = 0x100 | 0x080  # IN_CREATE | IN_MOVED_TO
_GONE_SELF = 0x400 | 0x800  # IN_DELETE_SELF | IN_MOVE_SELF

MAX_FOLDERS = 20_000
"""A tree with more folders is not watched (its first walk would cost more than it saves)."""

# Filesystems whose every writer is this kernel (so inotify sees each change).
_LOCAL = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs", "bcachefs"}
)


def _filesystem(path: str) -> str | None:
    """The type of the filesystem mounted deepest above `path` (``/proc/self/mountinfo``)."""
    best, kind = "", None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                fields = line.split()
                if " - " not in line or len(fields) < 5:
                    continue
                point = fields[4].replace("\\040", " ")
                after = line.split(" - ", 1)[1].split()
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) >= len(best) and after:
                    best, kind = point, after[0]
    except OSError:
        return None
    return kind


class _Tree:
    """One watched tree: its folders by watch descriptor, and whether it changed."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.folders: dict[int, str] = {}
        self.changed = True  # until a `begin` after a complete walk
        self.usable = True
        self.linked: set[str] = set()


class ChangeWatch:
    """The trees asked about, each with its folders watched by one inotify instance."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._libc: ctypes.CDLL | None = None
        self._fd = -1
        self._trees: dict[str, _Tree] = {}
        self._owner: dict[int, _Tree] = {}

    def forget(self) -> None:
        """Drop everything (a forked child must not read its parent's events)."""
        self._lock = threading.Lock()
        self._fd = -1
        self._trees, self._owner = {}, {}

    def begin(self, root: str) -> bool:
        """Mark now as the moment `changed(root)` is measured from; whether the watch works.

        The first call walks the tree and watches its folders. Call it just
        before reading the tree, so a change made while it is read counts.
        """
        with self._lock:
            tree = self._trees.get(root)
            if tree is None:
                tree = self._trees[root] = _Tree(root)
                tree.usable = _filesystem(root) in _LOCAL and self._ready()
                if tree.usable:
                    self._watch(tree, root)
            self._drain()
            tree.changed = not tree.usable or bool(tree.linked)
            return not tree.changed

    def changed(self, root: str) -> bool:
        """Whether anything under `root` may have changed since the last `begin(root)`."""
        with self._lock:
            tree = self._trees.get(root)
            if tree is None:
                return True
            self._drain()
            return tree.changed

    # -- inotify -----------------------------------------------------------------

    def _ready(self) -> bool:
        if self._fd < 0:
            self._libc, self._fd = inotify_init()
        return self._fd >= 0

    def _watch(self, tree: _Tree, top: str) -> None:
        """Watch every folder of `top` (it is in `tree`); each is watched before it is listed."""
        assert self._libc is not None
        stack = [top]
        while stack and tree.usable:
            folder = stack.pop()
            wd = self._libc.inotify_add_watch(self._fd, os.fsencode(folder), _MASK)
            if wd < 0:
                # A folder that vanished meanwhile has nothing to watch (its
                # removal is an event); any other failure leaves a blind spot.
                tree.usable = ctypes.get_errno() == errno.ENOENT and folder != tree.root
                continue
            tree.folders[wd] = folder
            self._owner[wd] = tree
            if len(tree.folders) > MAX_FOLDERS:
                tree.usable = False
                break
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        self._note(tree, entry.path, entry, stack)
            except OSError:
                tree.usable = os.path.lexists(folder) is False
        if not tree.usable:
            self._drop(tree)

    def _note(
        self, tree: _Tree, path: str, entry: os.DirEntry[str] | None, stack: list[str]
    ) -> None:
        """Put subfolder `path` on `stack`; remember a regular file with a second link."""
        try:
            st = entry.stat(follow_symlinks=False) if entry is not None else os.lstat(path)
        except OSError:
            tree.linked.discard(path)
            return
        if stat.S_ISDIR(st.st_mode):
            if os.path.basename(path) != ".git":
                stack.append(path)
        elif stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            tree.linked.add(path)
        else:
            tree.linked.discard(path)

    def _drop(self, tree: _Tree) -> None:
        assert self._libc is not None
        for wd in tree.folders:
            self._libc.inotify_rm_watch(self._fd, wd)
            self._owner.pop(wd, None)
        tree.folders.clear()

    def _drain(self) -> None:
        if self._fd < 0:
            return
        try:
            for wd, mask, name in read_events(self._fd):
                self._event(wd, mask, name)
        except EventsLost:
            self._lost()

    def _lost(self) -> None:
        """Events were lost: no tree can say "unchanged" again (each is walked anew)."""
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1
        self._trees, self._owner = {}, {}

    def _event(self, wd: int, mask: int, name: str) -> None:
        tree = self._owner.get(wd)
        if tree is None:
            return
        tree.changed = True
        folder = tree.folders.get(wd)
        if mask & _GONE_SELF and folder == tree.root:
            # The root was moved or removed: what appears at its path now is
            # another folder, unwatched. Walked again at the next `begin`.
            self._drop(tree)
            self._trees.pop(tree.root, None)
            return
        if mask & _IN_IGNORED:
            tree.folders.pop(wd, None)
            self._owner.pop(wd, None)
            if folder == tree.root:
                tree.usable = False  # the root itself went: walked again if it comes back
                self._trees.pop(tree.root, None)
            return
        if folder is None or not name:
            return
        path = os.path.join(folder, name)
        if mask & _IN_ISDIR:
            if mask & _NEW_FOLDER and name != ".git":
                self._watch(tree, path)
            return
        self._note(tree, path, None, [])


_WATCH = ChangeWatch()
os.register_at_fork(after_in_child=_WATCH.forget)


def change_watch() -> ChangeWatch:
    """The process's watch."""
    return _WATCH

"""Credential files anywhere inside a tree: found by one walk, then kept current by inotify.

Exposed toolchain trees are large (a pyenv root here holds 12,000 folders
and 130,000 entries) and a credential may appear in any folder at any
moment (``cargo login``, ``gh auth login``, a ``pip config set`` in a venv).
Each confined launch asks which credential files a tree holds now. Walking
the tree each time costs seconds; even a stat per known folder (to see
which changed) took 0.4 s for that pyenv tree on the test machine. So a
tree is walked once, every folder in it gets an inotify watch, and each
later question only reads the queued events (tens of microseconds when
nothing changed): a folder created later is walked and watched when its
creation is read, a file created, renamed into place or rewritten is judged
then.

Where inotify is unavailable, or the per-user watch limit
(``fs.inotify.max_user_watches``) is reached, or the event queue overflowed,
the tree is walked again on each question instead (`polled`): correct at
any depth, at the cost of that walk.

Nothing here follows a link: a credential that is a link is reported as the
link, and the caller decides what it leads to.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from .tree_walk_main import LIMIT_STATUS, git_objects, list_folder, walk

__all__ = ["EventsLost", "TreeWatch", "inotify_init", "polled", "read_events"]

_IN_MODIFY = 0x002
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_IN_ISDIR = 0x40000000
_MASK = (
    _IN_MODIFY
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW
)
_APPEARS = _IN_CREATE | _IN_MOVED_TO | _IN_CLOSE_WRITE | _IN_MODIFY
_GOES = _IN_DELETE | _IN_MOVED_FROM
_EVENT = struct.Struct("iIII")

# Run by `TreeWatch.prewarm` for a first walk off this interpreter.
_WALKER = Path(__file__).with_name("tree_walk_main.py")

Judge = Callable[[str], bool]
"""Whether the content-checked file at a path holds a credential (reads it)."""


def inotify_init() -> tuple[ctypes.CDLL | None, int]:
    """(libc, a new non-blocking inotify descriptor); the descriptor is -1 where there is none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None, -1
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    return libc, fd if fd >= 0 else -1


class EventsLost(Exception):
    """The inotify queue overflowed or its descriptor failed: some change was never reported."""


def read_events(fd: int) -> Iterator[tuple[int, int, str]]:
    """Every (wd, mask, name) event queued on `fd` now, in order, without waiting.

    Raises:
        EventsLost: the caller must start again (what it watched is unknown).
    """
    while True:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            raise EventsLost from None
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            raw = data[offset + _EVENT.size : offset + _EVENT.size + length]
            offset += _EVENT.size + length
            if mask & _IN_Q_OVERFLOW:
                raise EventsLost
            yield wd, mask, os.fsdecode(raw.rstrip(b"\0"))


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def polled(
    root: str, secret_name: Callable[[str], bool], checked_name: Judge, judge: Judge
) -> list[str]:
    """The credential files under `root`, at any depth, by one full walk (no watch).

    Args:
        root: the tree.
        secret_name: whether a file name is a credential name.
        checked_name: whether a file name is one whose content is judged.
        judge: whether such a file holds a credential.
    """
    found: list[str] = []
    stack = [root]
    while stack:
        for entry in list_folder(stack.pop(), stack):
            if secret_name(entry.name) or (checked_name(entry.name) and judge(entry.path)):
                found.append(entry.path)
    return found


class TreeWatch:
    """The credential files of every tree asked about, kept current by one inotify instance.

    One instance per process (`secrets` is thread-safe): the kernel allows
    a user 128 inotify instances, and every tree shares this one.

    Args:
        secret_name: whether a file name is a credential name.
        checked_name: whether a file name is one whose content is judged.
        judge: whether such a file holds a credential (called again when it
            is rewritten).
        apart: the regular expression `secret_name` matches a lower-cased
            name with, and the names `checked_name` accepts: given, a
            background first walk (`prewarm`) runs in a process of its own
            (`tree_walk_main`), which then needs them as text.
    """

    def __init__(
        self,
        secret_name: Callable[[str], bool],
        checked_name: Judge,
        judge: Judge,
        *,
        apart: tuple[str, tuple[str, ...]] | None = None,
    ) -> None:
        self._secret_name = secret_name
        self._checked_name = checked_name
        self._judge = judge
        self._apart = apart
        # Held for the quick part (reading events, answering). A first walk
        # takes seconds and runs under `_walking` alone, so a question about
        # a tree already walked (before a command, on the event loop) never
        # waits for another tree's first walk.
        self._lock = threading.Lock()
        self._walking = threading.Lock()
        self._libc: ctypes.CDLL | None = None
        self._fd = -1
        self._generation = 0
        self._reset()

    def _reset(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd = -1
        self._generation += 1
        self._folders: dict[int, str] = {}
        # Credential candidates seen: path -> whether it counts now.
        self._found: dict[str, bool] = {}
        self._roots: set[str] = set()
        # Trees the watch could not cover (limit reached): polled instead.
        self._unwatched: set[str] = set()
        # Events of folders a walk in progress watches but has not handed
        # over yet: replayed when it does.
        self._early: dict[int, list[tuple[int, str]]] = {}
        # Trees a background first walk was started for (`prewarm`).
        self._prewarming: set[str] = set()

    def forget(self) -> None:
        """Drop everything (a forked child must not read its parent's events)."""
        self._lock = threading.Lock()
        self._walking = threading.Lock()
        self._reset()

    def secrets(self, root: str, *, apart: bool = False) -> list[str]:
        """The credential files under `root` now, at any depth (walked on the first question).

        `apart`: a first walk runs in a process of its own (when the watch
        was given `apart`), which keeps its second of Python off this
        interpreter (for a background walk; a caller that waits for the
        answer gains nothing by it).
        """
        with self._lock:
            answer = self._answer(root)
        if answer is not None:
            return answer
        with self._walking:
            with self._lock:
                answer = self._answer(root)
                if answer is not None:
                    return answer
                fd, generation = self._fd, self._generation
            walked = self._walk_apart(fd, root, apart=apart)
            with self._lock:
                if walked is None:
                    self._unwatched.add(root)
                elif generation == self._generation:
                    self._drain()
                    self._take(*walked)
                    self._early.clear()  # no other walk runs: nothing else waits for them
                    self._roots.add(root)
                    return self._under(root)
        # The watch limit was reached, or events were lost meanwhile.
        return polled(root, self._secret_name, self._checked_name, self._judge)

    def prewarm(self, roots: list[str]) -> None:
        """Start the first walk of trees not asked about yet, in a daemon thread.

        A first walk of a large toolchain tree takes seconds; a toolkit asks
        for it when it is built, so by the time its first command launches
        (after at least one model turn) the walk is usually done and that
        launch waits for what is left of it, not for all of it. The walk is
        the one `secrets` would do (same lock, same hand-over), so a question
        meanwhile is answered exactly as without it.
        """
        with self._lock:
            pending = [
                root
                for root in roots
                if root not in self._prewarming
                and not any(_is_under(root, known) for known in self._roots)
            ]
            self._prewarming.update(pending)
        if pending:
            threading.Thread(
                target=self._prewarmed, args=(pending,), name="lionfactory-tree-watch", daemon=True
            ).start()

    def _prewarmed(self, roots: list[str]) -> None:
        for root in roots:
            try:
                self.secrets(root, apart=True)
            except OSError:
                # Asked again before a launch, where a failure is reported.
                continue

    def _answer(self, root: str) -> list[str] | None:
        """The answer for a tree already walked, or None (call it holding `_lock`)."""
        if any(_is_under(root, u) for u in self._unwatched) or not self._ready():
            return polled(root, self._secret_name, self._checked_name, self._judge)
        self._drain()
        if any(_is_under(root, known) for known in self._roots):
            return self._under(root)
        return None

    def _under(self, root: str) -> list[str]:
        return [path for path, counts in self._found.items() if counts and _is_under(path, root)]

    # -- inotify -----------------------------------------------------------------

    def _ready(self) -> bool:
        if self._fd >= 0:
            return True
        self._libc, self._fd = inotify_init()
        return self._fd >= 0

    def _walk_apart(
        self, fd: int, top: str, *, apart: bool = False
    ) -> tuple[dict[int, str], dict[str, bool]] | None:
        """Watch and list every folder of `top`: (folders by wd, candidates); None at the limit.

        Touches nothing shared (the caller hands the result over with `_take`).
        Each folder is watched before it is listed, so an entry created
        meanwhile is either listed or reported.
        """
        libc = self._libc
        assert libc is not None
        walked = self._walk_elsewhere(fd, top) if apart and self._apart is not None else False
        if walked is False:
            walked = walk(
                lambda folder: libc.inotify_add_watch(fd, os.fsencode(folder), _MASK),
                top,
                self._secret_name,
                self._checked_name,
            )
        if walked is None:
            return None
        folders, secrets, checked = walked
        found = dict.fromkeys(secrets, True)
        for path in checked:
            found[path] = self._judge(path)
        return folders, found

    def _walk_elsewhere(
        self, fd: int, top: str
    ) -> tuple[dict[int, str], list[str], list[str]] | Literal[False] | None:
        """`walk` in a process of its own: its result, None at the limit, False if it failed.

        The process is this package's own script run by this interpreter,
        on the host, as this user: its output is what `walk` returns here.
        """
        assert self._apart is not None
        pattern, names = self._apart
        argv = [sys.executable, "-I", "-S", str(_WALKER), str(fd), str(_MASK), top, pattern, *names]
        try:
            done = subprocess.run(
                argv, pass_fds=(fd,), stdin=subprocess.DEVNULL, capture_output=True, check=False
            )
        except OSError:
            return False
        if done.returncode == LIMIT_STATUS:
            return None
        fields = done.stdout.split(b"\0")
        if done.returncode != 0 or fields.pop() != b"":
            return False  # walked here instead (its watches are added again: same wds)
        folders: dict[int, str] = {}
        secrets: list[str] = []
        checked: list[str] = []
        at = 0
        while at < len(fields):
            kind = fields[at]
            if kind == b"w":
                folders[int(fields[at + 1])] = os.fsdecode(fields[at + 2])
                at += 3
            else:
                (secrets if kind == b"s" else checked).append(os.fsdecode(fields[at + 1]))
                at += 2
        return folders, secrets, checked

    def _take(self, folders: dict[int, str], found: dict[str, bool]) -> None:
        """Hand a walk's result over, and replay the events its folders had meanwhile."""
        # The same folder renamed keeps its wd: the path is updated.
        self._folders.update(folders)
        self._found.update(found)
        for wd in folders:
            for mask, name in self._early.pop(wd, ()):
                self._event(wd, mask, name)

    def _walk(self, top: str) -> bool:
        """Walk a new subtree now (holding `_lock`); False at the watch limit."""
        walked = self._walk_apart(self._fd, top)
        if walked is None:
            return False
        self._take(*walked)
        return True

    def _judge_file(self, found: dict[str, bool], name: str, path: str) -> None:
        if self._secret_name(name):
            found[path] = True
        elif self._checked_name(name):
            found[path] = self._judge(path)

    def _drain(self) -> None:
        try:
            for wd, mask, name in read_events(self._fd):
                self._event(wd, mask, name)
        except EventsLost:
            # Start again: every tree is walked again on its next question.
            self._reset()
            self._ready()

    def _event(self, wd: int, mask: int, name: str) -> None:
        folder = self._folders.get(wd)
        if folder is None:
            if self._walking.locked() and not mask & _IN_IGNORED:
                self._early.setdefault(wd, []).append((mask, name))
            return
        if mask & _IN_IGNORED:
            del self._folders[wd]
            return
        if not name:
            return
        path = os.path.join(folder, name)
        if mask & _IN_ISDIR:
            if mask & _GOES:
                for known in [p for p in self._found if _is_under(p, path)]:
                    del self._found[known]
            elif (
                mask & (_IN_CREATE | _IN_MOVED_TO)
                and not git_objects(folder, name)
                and not self._walk(path)
            ):
                # A new (or moved-in) subtree is walked and watched now; at
                # the limit, its trees are polled from now on.
                self._unwatched.update(r for r in self._roots if _is_under(path, r))
        elif mask & _GOES:
            self._found.pop(path, None)
        elif mask & _APPEARS:
            self._judge_file(self._found, name, path)

"""What is in the project: git's ignore rules, one matcher for every tool that walks the tree.

A workspace usually holds more than the project: a ``.venv`` with thousands of
installed packages, ``node_modules``, build output. A search that answers
from those is useless to an agent, so every tool that walks a directory
(search, the reader's ``list_dir``, code_check and ast_search) asks the
`ProjectView` of one call which paths are project content. Ignored content is
reachable only when the model asks for it (``include_ignored=true``) or names
an ignored directory as the path to search or list: the rules apply *below*
the starting point, as ripgrep applies them to a path it is given.

The rules are git's, in ripgrep's precedence, so that the ripgrep engine and
this matcher agree (a property test compares them on generated trees):

* ``.gitignore`` files at every level from the project top down, plus
  ``.git/info/exclude`` of the repository and git's global excludes file
  (``core.excludesFile``, resolved by git itself in
  `lionfactory._os.global_excludes`; lowest precedence). A
  deeper file overrides a shallower one; inside a file the last matching
  pattern decides; ``!`` re-includes; a leading or inner ``/`` anchors; a
  trailing ``/`` matches directories only. An ignored directory is not
  entered, so nothing below it can be re-included (git's rule).
* ``.ignore`` (and ripgrep's ``.rgignore``) files the same way, taking
  precedence over every ``.gitignore`` (ripgrep's convention for rules meant
  for search tools only).
* A directory holding ``.git`` (a repository or a worktree) starts a new
  ``.gitignore`` chain: the outer project's ``.gitignore`` files do not apply
  inside a nested repository, its own ``info/exclude`` does.
* The *project top* is the nearest directory at or above the workspace root
  that holds ``.git``; outside a repository it is the workspace root itself,
  so only ignore files inside the workspace apply, and neither
  ``info/exclude`` nor the global file (git applies those to repositories
  only). Ignore files in directories above the top are never read.
* ``.git`` and the protected names are never project content, whatever the
  rules say; symbolic links are never followed (nor listed).

Ignore files are input a command in the workspace can write, read by this
unconfined process: they are opened through the file tools' seam
(`lionfactory._os.beneath`), beneath a descriptor of the project top, following
no symbolic link, non-blocking, regular files only, at most 1 MB. A
``.gitignore`` linked to a key outside is not read (its lines would otherwise
hide matching names: an oracle on content the command itself cannot read), a
FIFO does not hang the walk. A ``.git`` *file*'s ``gitdir:`` is followed
inside the project top the same way, and outside it only into the layout git
makes for a linked worktree (``<common>/worktrees/<name>`` whose ``gitdir``
file points back at this ``.git`` file), which a command in the workspace
cannot fake outside it.

Pattern matching is pathspec's (`GitIgnoreSpecPattern`, a maintained
implementation of gitignore's wildmatch), not hand-written globbing. pathspec
matches a directory pattern against everything below the directory too (it
is built to test paths without walking); a walk must judge each path by the
patterns that match *that* path, so the directory marker group pathspec puts
into its regular expressions is used to tell the two apart (`_Rules`).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import anyio.from_thread
import attrs

from lionfactory._os import beneath as _beneath
from lionfactory._os.regular import FileRefused, regular_stat
from lionfactory._os.workspace import Workspace

if TYPE_CHECKING:
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

__all__ = [
    "IGNORE_FILES",
    "ProjectView",
    "project_top",
    "read_regular",
    "stray_ignore_files",
]

IGNORE_FILES = (".rgignore", ".ignore", ".gitignore")
"""Ignore files read in every directory, highest precedence first."""

_DIR_MARK = "ps_d"
_MAX_IGNORE_FILE = 1_000_000


_MAX_GIT_FILE = 64 * 1024
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)


def _read_fd(fd: int, limit: int) -> bytes | None:
    """Up to `limit` bytes of an open descriptor (closed here) if it is a regular file."""
    try:
        regular_stat(fd, "")
        chunks, size = [], 0
        while size < limit:
            chunk = os.read(fd, min(65536, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except (OSError, FileRefused):
        return None
    finally:
        os.close(fd)


def _read_beneath(base_fd: int, parts: tuple[str, ...], limit: int) -> bytes | None:
    """A regular file below `base_fd`, reached through no symlink; None for anything else."""
    try:
        fd = _beneath.open_beneath(base_fd, parts, _READ_FLAGS)
    except OSError:
        return None
    return _read_fd(fd, limit)


def read_regular(path: Path, limit: int = _MAX_IGNORE_FILE) -> bytes | None:
    """A regular file by path (links followed: the user's own files), without blocking.

    For files outside every workspace, such as the user's global excludes
    file: a FIFO or device there does not hang the caller either.
    """
    try:
        fd = os.open(path, _READ_FLAGS | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    return _read_fd(fd, limit)


def _parse_patterns(data: bytes | None) -> tuple[GitIgnoreSpecPattern, ...]:
    """The patterns of one ignore file's bytes; a missing or unreadable file has none."""
    if not data:
        return ()
    if len(data) == _MAX_IGNORE_FILE:
        data = data[: data.rfind(b"\n") + 1]  # a cut line is not a pattern
    # Imported on the first ignore file read, not with the module: the tools
    # that walk a tree are imported by every server at start-up (10 ms).
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

    patterns = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            pattern = GitIgnoreSpecPattern(line)
        except (ValueError, re.error):
            continue  # git skips a pattern it cannot read; so does ripgrep
        if pattern.include is not None and pattern.regex is not None:
            patterns.append(pattern)
    return tuple(patterns)


@attrs.frozen
class _Rules:
    """The patterns of one ignore file, matched relative to its directory.

    pathspec's regular expressions match a path *or anything below it*:
    ``foo/`` becomes ``^(?:.+/)?foo(?P<ps_d>/)`` and also matches
    ``foo/bar``. Only a match of the path itself counts here, because the walk
    never reaches a path below an ignored directory. A directory is tested as
    ``"name/"``: a self-match then ends with the directory marker at the very
    end, or (for ``foo/**``-style patterns that have no marker) consumes only
    part of the path, meaning the path lies strictly inside the pattern's
    directory. For a file, a marker that took part means an ancestor matched.

    Paths are absolute strings: the walk judges tens of thousands of them,
    and `pathlib` operations would cost more than the matching itself.
    """

    prefix: str  # the directory, with a trailing "/"
    patterns: tuple[GitIgnoreSpecPattern, ...]
    # Per pattern, last first (the last matching pattern decides): its match
    # function, whether it has a directory marker, and whether it ignores.
    # Worked out once, not for each of the walk's tens of thousands of paths.
    _checks: tuple[tuple[Callable[[str], re.Match[str] | None], bool, bool], ...] = attrs.field(
        init=False, eq=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        checks = []
        for pattern in reversed(self.patterns):
            regex = pattern.regex
            assert regex is not None  # _parse_patterns keeps only compiled patterns
            find = regex.match if regex.pattern[:1] == "^" else regex.search
            checks.append((find, _DIR_MARK in regex.groupindex, bool(pattern.include)))
        object.__setattr__(self, "_checks", tuple(checks))

    def decide(self, path: str, is_dir: bool) -> bool | None:
        """True: ignored; False: re-included by a ``!`` pattern; None: no pattern matches."""
        if not self._checks:
            return None
        text = path[len(self.prefix) :] + ("/" if is_dir else "")
        end = len(text)
        for find, marked, ignores in self._checks:
            match = find(text)
            if match is None:
                continue
            if marked and match.start(_DIR_MARK) != -1:
                if not (is_dir and match.end(_DIR_MARK) == end):
                    continue
            elif is_dir and match.end() == end:
                continue
            return ignores
        return None


_NO_RULES = _Rules("/", ())


def _prefix(directory: str) -> str:
    return directory if directory.endswith("/") else directory + "/"


@attrs.frozen
class _Level:
    """One directory's contribution: its ignore files and whether it holds ``.git``."""

    custom: _Rules
    dot: _Rules
    git: _Rules
    exclude: _Rules
    is_repo: bool


def _check_cancelled() -> None:
    """Raise the caller's cancellation in a worker thread; nothing in any other thread."""
    # Outside a worker thread (RuntimeError) the event loop's own checkpoints apply.
    with contextlib.suppress(RuntimeError):
        anyio.from_thread.check_cancelled()


def _lexical(path: str) -> str:
    return os.path.normpath(path)


def _below(path: str, top: str) -> tuple[str, ...] | None:
    """`path`'s components below `top` (both normalised, absolute), or None outside it."""
    if path == top:
        return ()
    prefix = _prefix(top)
    if not path.startswith(prefix):
        return None
    return tuple(path[len(prefix) :].split("/"))


def _linked_worktree_common(gitdir: str, dot_git: str) -> str | None:
    """The common directory of a genuine linked worktree's admin folder `gitdir`, else None.

    Outside the project top only git's own layout is accepted:
    ``<common>/worktrees/<name>`` whose ``gitdir`` file names `dot_git`. A
    command in the workspace cannot write such a folder outside it.
    """
    parent = os.path.dirname(gitdir)
    if os.path.basename(parent) != "worktrees":
        return None
    back = read_regular(Path(gitdir) / "gitdir", _MAX_GIT_FILE)
    if back is None:
        return None
    named = back.decode("utf-8", errors="replace").strip()
    if _lexical(os.path.join(os.path.dirname(dot_git), named)) != dot_git:
        return None
    return os.path.dirname(parent)


def _exclude_file(top_fd: int, top: str, parts: tuple[str, ...]) -> tuple[bool, bytes | None]:
    """Whether the directory ``top/parts`` holds a repository, and its ``info/exclude``.

    A ``.git`` directory: its ``info/exclude``, beneath the top. A ``.git``
    file (a worktree or submodule): the ``gitdir:`` it names, inside the top
    through the same seam, outside only into a genuine linked worktree's
    layout (`_linked_worktree_common`).
    """
    try:
        fd = _beneath.open_beneath(top_fd, (*parts, ".git"), _READ_FLAGS)
    except OSError:
        return False, None
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        return False, None
    if stat.S_ISDIR(mode):
        os.close(fd)
        return True, _read_beneath(top_fd, (*parts, ".git", "info", "exclude"), _MAX_IGNORE_FILE)
    text = _read_fd(fd, _MAX_GIT_FILE)
    if text is None or not text.startswith(b"gitdir:"):
        return False, None
    directory = "/".join((top, *parts)) if parts else top
    named = text[len(b"gitdir:") :].decode("utf-8", errors="replace").strip()
    gitdir = _lexical(os.path.join(directory, named))
    inside = _below(gitdir, top)
    if inside is None:
        common = _linked_worktree_common(gitdir, _lexical(directory + "/.git"))
        if common is None:
            return True, None
        try:
            common_fd = os.open(common, _beneath.DIRECTORY_FLAGS)
        except OSError:
            return True, None
        try:
            return True, _read_beneath(common_fd, ("info", "exclude"), _MAX_IGNORE_FILE)
        finally:
            os.close(common_fd)
    # A worktree's info/exclude lives in the common directory its "commondir"
    # file names (as git and ripgrep read it); both stay inside the top.
    base = gitdir
    commondir = _read_beneath(top_fd, (*inside, "commondir"), _MAX_GIT_FILE)
    if commondir is not None:
        base = _lexical(os.path.join(gitdir, commondir.decode("utf-8", errors="replace").strip()))
    common_parts = _below(base, top)
    if common_parts is None:
        return True, None
    return True, _read_beneath(top_fd, (*common_parts, "info", "exclude"), _MAX_IGNORE_FILE)


def project_top(root: Path) -> tuple[Path, bool]:
    """The project top for a workspace root and whether it is a git repository."""
    for directory in (root, *root.parents):
        if os.path.lexists(directory / ".git"):
            return directory, True
    return root, False


def stray_ignore_files(root: Path) -> list[Path]:
    """Ignore files above the project top that ripgrep would read but the rules do not.

    ripgrep reads ``.ignore``/``.rgignore`` files in every parent of the
    searched path, and ``.gitignore`` files up to the repository root (in
    every parent when there is no repository). The matcher stops at the
    project top, so a search runs on ripgrep only when none of those exist.
    """
    top, is_repo = project_top(root)
    found = []
    for directory in top.parents:
        for name in IGNORE_FILES:
            if name == ".gitignore" and is_repo:
                continue
            if os.path.lexists(directory / name):
                found.append(directory / name)
    return found


@attrs.define(eq=False)
class ProjectView:
    """Which paths of one workspace are project content, for the length of one call.

    Ignore files are read lazily, once per directory, as the walk or the
    checks reach them; build a fresh view per call so that edits to the
    rules apply to the next call.

    Attributes:
        workspace: the workspace (root, protected names).
        include_ignored: when True, ignore files are not consulted at all;
            ``.git``, protected names and symlinks stay out regardless.
        global_file: git's global excludes file
            (`lionfactory._os.global_excludes.global_excludes`).
        skipped: how many ignored paths the walk left out so far (an ignored
            directory counts once, whatever it holds).
    """

    workspace: Workspace
    include_ignored: bool = False
    global_file: Path | None = None
    skipped: int = 0
    _top: str = attrs.field(init=False)
    _root: str = attrs.field(init=False)
    _root_prefix: str = attrs.field(init=False)
    _chains: dict[str, tuple[_Rules, ...]] = attrs.field(init=False, factory=dict)
    _levels: dict[str, _Level] = attrs.field(init=False, factory=dict)
    _global: _Rules = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        top, _ = project_top(self.workspace.root)
        self._top = str(top)
        self._root = str(self.workspace.root)
        self._root_prefix = _prefix(self._root)
        if self.global_file is None:
            self._global = _NO_RULES
        else:
            # Matched relative to the workspace root, as ripgrep matches the
            # file it is given with --ignore-file.
            patterns = _parse_patterns(read_regular(self.global_file))
            self._global = _Rules(_prefix(self._root), patterns)

    def _level(self, directory: str) -> _Level:
        level = self._levels.get(directory)
        if level is None:
            level = self._read_level(directory)
            self._levels[directory] = level
        return level

    def _read_level(self, directory: str) -> _Level:
        """One directory's ignore files, each opened beneath the project top.

        Also the walk's cancellation point: run in a worker thread
        (``anyio.to_thread.run_sync``), a walk of a huge tree ends at the next
        directory once the calling task is cancelled, instead of running on.
        """
        _check_cancelled()
        prefix = _prefix(directory)
        parts = _below(directory, self._top)
        if parts is None:
            return _Level(_NO_RULES, _NO_RULES, _NO_RULES, _NO_RULES, False)
        try:
            top_fd = os.open(self._top, _beneath.DIRECTORY_FLAGS)
        except OSError:
            return _Level(_NO_RULES, _NO_RULES, _NO_RULES, _NO_RULES, False)
        try:
            custom, dot, git = (
                _Rules(
                    prefix, _parse_patterns(_read_beneath(top_fd, (*parts, name), _MAX_IGNORE_FILE))
                )
                for name in IGNORE_FILES
            )
            is_repo, exclude = _exclude_file(top_fd, self._top, parts)
        finally:
            os.close(top_fd)
        return _Level(custom, dot, git, _Rules(prefix, _parse_patterns(exclude)), is_repo)

    def _rules(self, directory: str) -> tuple[_Rules, ...]:
        """Every rule set that judges an entry of `directory`, in precedence order.

        ``.rgignore`` files deepest first, then ``.ignore`` files, then
        ``.gitignore`` files up to the nearest repository root and that
        repository's ``info/exclude``, then the global file: the first rule
        set with a matching pattern decides (ripgrep's order).
        """
        chain = self._chains.get(directory)
        if chain is not None:
            return chain
        levels = []
        current = directory
        while True:
            levels.append(self._level(current))
            parent = os.path.dirname(current)
            if current == self._top or parent == current:
                break
            current = parent
        git: list[_Rules] = []
        for level in levels:
            git.append(level.git)
            if level.is_repo:
                git.append(level.exclude)
                break
        rules = (
            *(level.custom for level in levels),
            *(level.dot for level in levels),
            *git,
            self._global,
        )
        chain = tuple(r for r in rules if r.patterns)
        self._chains[directory] = chain
        return chain

    def _ignored(self, path: str, is_dir: bool) -> bool:
        """Whether the rules exclude `path` (absolute; its parent is not ignored)."""
        # The parent as `os.path.dirname` gives it for these paths (absolute,
        # no doubled or trailing slashes), without its per-call overhead: a
        # walk asks this for every entry.
        for rules in self._rules(path.rpartition("/")[0] or "/"):
            decision = rules.decide(path, is_dir)
            if decision is not None:
                return decision
        return False

    def skips(self, relative: str, is_dir: bool) -> bool:
        """Whether a walk should leave out `relative` (and, for a directory, its subtree).

        The predicate form of the rules for walks done elsewhere (the
        workspace's descriptor-based listing): `relative` is root-relative and
        its parent was not skipped. Counts what it skips in `skipped`.
        """
        if not self.include_ignored and self._ignored(self._root_prefix + relative, is_dir):
            self.skipped += 1
            return True
        return False

    def _excluded_name(self, name: str) -> bool:
        return name == ".git" or self.workspace.is_protected(name)

    def hidden(self, relative: str) -> bool:
        """`Workspace.is_hidden` for many paths: ``.git`` or a protected component.

        The workspace's protected-name rule remembers its answers per path and
        per name, so a helper's output of tens of thousands of paths costs one
        dictionary lookup for most of them.
        """
        return self.workspace.is_hidden(relative)

    def visible(self, relative: str, start: str = ".") -> bool:
        """Whether a root-relative path is project content when reached from `start`.

        `start` is the directory or file a tool was pointed at; it and its
        ancestors are not judged (naming an ignored directory is a way in).
        Used to filter what a helper program (ruff, ast-grep) reported.
        """
        if self.workspace.is_hidden(relative):
            return False
        if self.include_ignored:
            return True
        root = self.workspace.root
        base = root if start in ("", ".") else root / start
        path = root / relative
        if base not in path.parents:
            return path == base
        parts = path.relative_to(base).parts
        current = base
        for index, part in enumerate(parts):
            current = current / part
            is_dir = index < len(parts) - 1 or current.is_dir()
            if self._ignored(str(current), is_dir):
                return False
        return True

    def walk(self, start: Path, *, recursive: bool = True) -> Iterator[tuple[str, bool]]:
        """Yield ``(relative, is_dir)`` for the project content under `start`.

        Paths are POSIX and relative to the workspace root, sorted within each
        directory. `start` itself is not yielded nor judged; a file `start`
        yields itself. Symlinks, ``.git``, protected names and (unless
        ``include_ignored``) ignored paths are left out; ignored directories
        are not entered.
        """
        try:
            mode = os.lstat(start).st_mode
        except OSError:
            return
        skip = len(_prefix(self._root))
        if stat.S_ISREG(mode):
            yield str(start)[skip:], False
            return
        if not stat.S_ISDIR(mode):
            return
        judge = not self.include_ignored
        pending = [str(start)]
        while pending:
            directory = pending.pop()
            try:
                with os.scandir(directory) as scan:
                    entries = sorted(scan, key=lambda entry: entry.name)
            except OSError:
                continue
            subdirs = []
            for entry in entries:
                if self._excluded_name(entry.name):
                    continue
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    is_file = not is_dir and entry.is_file(follow_symlinks=False)
                except OSError:
                    continue
                if not (is_dir or is_file):
                    continue
                path = entry.path
                if judge and self._ignored(path, is_dir):
                    self.skipped += 1
                    continue
                yield path[skip:], is_dir
                if is_dir and recursive:
                    subdirs.append(path)
            pending.extend(reversed(subdirs))

"""The workspace: one root directory, path containment and protected names.

Every file-touching tool goes through a `Workspace`, the single seam between
model input and the filesystem. A path is checked once, lexically
(`Workspace.locate`): it must stay inside the root and no component may be a
protected name. The resulting `Location` is then **opened relative to a
descriptor of the root**, one atomic lookup that never leaves the root
(`lionfactory._os.beneath`), so no name is ever checked and then resolved
again: a directory swapped for a link to the outside between the check and
the open gets a refusal, never the outside file. Writes happen relative to the
descriptor of the parent directory for the same reason.

Rules:

* The root is resolved once, when the factory runs (`Workspace.at`).
* Refused: a NUL byte, an empty path, a leading ``~``, anything that escapes
  the root lexically (``..``, an absolute path elsewhere), and a protected
  name in any component (``.env``, ``.netrc``, private keys, cloud
  credentials...; `DEFAULT_PROTECTED_NAMES`).
* Reads and listings of a path the model names follow symbolic links that
  stay beneath the root (``docs -> real_docs``, common in monorepos, or an
  absolute target inside the root); a link leading out of the root, a loop, and a link
  whose *resolved* path has a protected name or ``.git`` component are
  refused (`Location.open`). Writes refuse a link in any component: an atomic
  replace renames over the final name, and through a link it would replace
  the link, not its target. Recursive listings never descend into a
  directory link, so a cycle cannot make them loop.
* A file whose first bytes are a PEM or OpenSSH private-key header is refused
  whatever its name (`Location.open_read`): renaming a key does not make it
  readable.
* Protected names match case-insensitively (`fnmatch` patterns), and also
  with the Windows spellings that name the same file there (trailing dots and
  spaces, an ``:stream`` suffix), so ``.ENV`` is hidden too: hiding one
  harmless file is cheaper than leaking one secret.

Tools that hand a path to another program (bash's working directory, search,
code_check, ast_search) cannot pass a descriptor; they use `Workspace.resolve`,
which checks the path as it is at that moment.
"""

from __future__ import annotations

import errno
import fnmatch
import functools
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import attrs

from lionfactory._echo import echo
from lionfactory._os import beneath as _beneath
from lionfactory._os.secret_names import BACKUP_SUFFIXES, DEFAULT_PROTECTED_NAMES
from lionfactory.errors import ToolFailure

__all__ = [
    "BACKUP_SUFFIXES",
    "DEFAULT_PROTECTED_NAMES",
    "Location",
    "PathRefused",
    "ProtectedRule",
    "Workspace",
    "factor_backups",
    "protected_matcher",
    "protected_rule",
    "refuse_private_key",
    "starts_like_private_key",
]

_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_PATH_MAX = 4096  # Linux's limit, its terminating NUL included

# A private key announces itself in its first line: PEM ("-----BEGIN RSA
# PRIVATE KEY-----", "... ENCRYPTED PRIVATE KEY", "OPENSSH PRIVATE KEY", "PGP
# PRIVATE KEY BLOCK") or PuTTY's format. Leading whitespace and a BOM are
# skipped; a header further down (a certificate bundle with the key after it)
# is left to the name rules (*.pem, *.key).
_KEY_SNIFF = 4096
_PRIVATE_KEY_HEADER = re.compile(
    rb"(?:\xef\xbb\xbf)?\s*(?:-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    rb"|PuTTY-User-Key-File-)"
)


MAX_PATH_CHARS = 4096
"""Longest path a tool accepts: Linux's PATH_MAX; no longer name can be opened."""


class PathRefused(ToolFailure):
    """A path the model gave cannot be used; `message` says what to do instead."""

    def __init__(self, path: object, message: str) -> None:
        super().__init__(message)
        self.path = path


def _normalise_patterns(names: Iterable[str]) -> frozenset[str]:
    if isinstance(names, frozenset):
        return _normalise_set(names)
    return _normalise_set(frozenset(names))


@functools.lru_cache(maxsize=32)
def _normalise_set(names: frozenset[str]) -> frozenset[str]:
    # Cached: every Workspace.at of the default set would casefold and check
    # its 440 patterns again.
    patterns = frozenset(name.casefold() for name in names)
    for pattern in patterns:
        if not pattern or "/" in pattern or "\x00" in pattern:
            raise ValueError(f"a protected name must be a single path component, got {pattern!r}")
    return patterns


def _spellings(name: str) -> tuple[str, ...]:
    """`name` casefolded, plus the name Windows would open for it.

    Windows drops trailing dots and spaces and reads ``name:stream`` as a
    stream of ``name``: on a share, ``.env.`` and ``.env::$DATA`` are ``.env``.
    """
    folded = name.casefold()
    windows = folded.split(":", 1)[0].rstrip(". ")
    return (folded,) if windows in (folded, "") else (folded, windows)


# Bounds on the answers a rule remembers: far more names and directories than
# a search reports, a few hundred KiB at most.
_NAMES_REMEMBERED = 8192
_PATHS_REMEMBERED = 4096
# Components `ProtectedRule.hidden` answers without the protected-name rule.
_NOT_NAMES = frozenset({"", ".", ".git"})
# Located paths one workspace remembers (then it starts again).
_LOCATED_PATHS = 1024


class ProtectedRule:
    """The compiled protected-name rule of one set, with its answers remembered.

    Answers are remembered because a search's results repeat the same file
    names (``__init__.py``, ``test_*.py``) and directories. They are kept on
    the rule rather than in a cache keyed by the compiled expression:
    hashing a compiled expression hashes its whole program (2.4 us for the
    default set, every lookup), which cost more than the match it saved.
    One rule per distinct set (`protected_rule`), shared by every Workspace.
    """

    __slots__ = ("_names", "_paths", "regex")

    def __init__(self, regex: re.Pattern[str]) -> None:
        self.regex = regex
        self._names: dict[str, bool] = {}
        self._paths: dict[str, bool] = {}

    def name(self, name: str) -> bool:
        """Whether one path component is protected (any spelling of it)."""
        known = self._names.get(name)
        if known is None:
            known = any(self.regex.match(n) for n in _spellings(name))
            if len(self._names) >= _NAMES_REMEMBERED:
                self._names.clear()  # dict operations are atomic under the GIL
            self._names[name] = known
        return known

    def hidden(self, relative: str) -> bool:
        """Whether a root-relative POSIX path has a ``.git`` or protected component.

        Directories are remembered, not the paths under them: a listing
        reports tens of thousands of files, each once, in a few hundred
        directories, and remembering every file filled the bound and dropped
        the directories with it.
        """
        head, _, name = relative.rpartition("/")
        if head:
            known = self._paths.get(head)
            if known is None:
                known = self._directory(head)
            if known:
                return True
        return self._component(name)

    def _component(self, name: str) -> bool:
        if name in _NOT_NAMES:
            return name == ".git"  # "" and "." are not components (nor in Path.parts)
        known = self._names.get(name)
        return self.name(name) if known is None else known

    def _directory(self, path: str) -> bool:
        """`hidden` for a directory, remembered for it and for each parent on the way.

        A loop, not a recursion: a command can make a tree thousands of
        levels deep, and a search of it must not end in a RecursionError.
        """
        unknown = []
        known = False
        current = path
        while current:
            remembered = self._paths.get(current)
            if remembered is not None:
                known = remembered
                break
            unknown.append(current)
            current = current.rpartition("/")[0]
        for directory in reversed(unknown):  # from the top down
            known = known or self._component(directory.rpartition("/")[2])
            if len(self._paths) >= _PATHS_REMEMBERED:
                self._paths.clear()  # dict operations are atomic under the GIL
            self._paths[directory] = known
        return known


@functools.lru_cache(maxsize=32)
def protected_rule(patterns: frozenset[str]) -> ProtectedRule:
    """The shared `ProtectedRule` of a normalised set of patterns."""
    return ProtectedRule(protected_matcher(patterns))


_TRANSLATED = re.compile(r"\(\?s:(?P<body>.*)\)\\[Zz]", re.DOTALL)


def _translated_body(pattern: str) -> str | None:
    """The body of `fnmatch.translate(pattern)`, without its group and end anchor."""
    found = _TRANSLATED.fullmatch(fnmatch.translate(pattern))
    return found["body"] if found else None


def factor_backups(patterns: frozenset[str]) -> tuple[list[str], tuple[str, ...], list[str]]:
    """`patterns` as ``(bases, suffixes, rest)``: each base and base + suffix, then the rest.

    A base is a pattern whose every backup spelling (`BACKUP_SUFFIXES`,
    casefolded) is in the set too; `rest` is what no base covers. Both are
    sorted. The compiled rule and ripgrep's globs are written from this one
    factoring.
    """
    suffixes = tuple(s.casefold() for s in BACKUP_SUFFIXES)
    bases = sorted(p for p in patterns if all(p + s in patterns for s in suffixes))
    covered = {b + s for b in bases for s in suffixes}
    return bases, suffixes, sorted(patterns - covered - set(bases))


@functools.lru_cache(maxsize=32)
def protected_matcher(patterns: frozenset[str]) -> re.Pattern[str]:
    """One regular expression matching exactly the names any of `patterns` matches.

    Cached per distinct set: compiling the default set's 440 patterns one by one
    cost 12 ms, paid for every Workspace. The alternation is also factored:
    a base pattern ``b`` whose every backup spelling ``b + s`` (`BACKUP_SUFFIXES`)
    is in the set stands once as ``b`` followed by an optional suffix group, which matches the same
    names (a suffix is literal text, so ``b + s`` matches exactly the names
    ``b`` matches followed by ``s``) with a ninth of the alternatives. Patterns
    that do not factor stay as they are.
    """
    bases, suffixes, rest = factor_backups(patterns)
    bodies = [_translated_body(b) for b in bases]
    if any(body is None for body in bodies):  # an unexpected translate(): no factoring
        bases, rest = [], sorted(patterns)
    alternatives = []
    if bases:
        suffix_group = "|".join(re.escape(s) for s in suffixes)
        alternatives.append(f"(?s:(?:{'|'.join(b for b in bodies if b)})(?:{suffix_group})?)\\Z")
    alternatives += [fnmatch.translate(p) for p in rest]
    return re.compile("|".join(alternatives) or "(?!)")


def starts_like_private_key(data: bytes | bytearray) -> bool:
    """Whether file content `data` (its start suffices) begins with a private-key header."""
    return _PRIVATE_KEY_HEADER.match(data[:_KEY_SNIFF]) is not None


def refuse_private_key(fd: int, shown: str) -> None:
    """Raise `PathRefused` when the open regular file `fd` starts like a private key."""
    if starts_like_private_key(os.pread(fd, _KEY_SNIFF, 0)):
        raise PathRefused(
            shown,
            f"{shown!r} holds a private key (it starts with a private-key header); "
            f"tools never read or change key material, whatever the file is called.",
        )


@attrs.frozen
class Location:
    """A model-supplied path, checked once and ready to be opened below the root.

    Attributes:
        workspace: the workspace it lies in.
        parts: the components below the root (empty for the root itself);
            none is ``.``, ``..``, empty or protected.
        shown: the path as the model wrote it, for messages.
    """

    workspace: Workspace
    parts: tuple[str, ...]
    shown: str

    @functools.cached_property
    def path(self) -> Path:
        """The absolute path (for messages, evidence and cache keys; never opened by name)."""
        # Cached: a read asks for it three times, and each join parses the parts again.
        return self.workspace.root.joinpath(*self.parts)

    @property
    def name(self) -> str:
        """The final component (``""`` for the root)."""
        return self.parts[-1] if self.parts else ""

    @property
    def in_git_dir(self) -> bool:
        """Whether a component is ``.git`` (in any spelling that opens it)."""
        return any(".git" in _spellings(part) for part in self.parts)

    @property
    def relative(self) -> str:
        """The path relative to the root in POSIX form (``"."`` for the root)."""
        return "/".join(self.parts) or "."

    def open(self, flags: int, mode: int = 0o666, *, follow: bool = False) -> int:
        """Open this location with `flags`, never leaving the root.

        Args:
            flags: `os.open` flags.
            mode: the permission bits when `flags` creates the file.
            follow: follow symbolic links that stay inside the root (for
                reading and listing only; `flags` must not create). Without
                it, a link in any component is refused.

        Raises:
            PathRefused: a component is a symbolic link (without `follow`);
                with `follow`, a link leads outside the root, loops, or
                resolves to a protected name or into ``.git``.
            OSError: anything else (``ENOENT``, ``ENOTDIR``, ``EACCES``...).
        """
        root_fd = self.workspace.open_root()
        try:
            if not follow:
                return _beneath.open_beneath(root_fd, self.parts, flags, mode)
            fd, real = _beneath.open_following(root_fd, self.parts, flags)
        except OSError as exc:
            raise self._translate(exc, follow=follow) from None
        finally:
            os.close(root_fd)
        try:
            self._check_resolved(real)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _check_resolved(self, real: tuple[str, ...]) -> None:
        """Refuse a path whose links led to a protected name or into ``.git``.

        The spelled components were checked by `Workspace.locate`; a link
        (``notes -> .env``, ``x -> .git/config``, ``cfg -> app`` then
        ``cfg/.env``) is judged by where it really leads.
        """
        if real == self.parts:
            return
        for part in real:
            if self.workspace.is_protected(part):
                raise PathRefused(
                    self.shown,
                    f"{self.shown!r} is a link to a protected name ({part!r} may hold "
                    f"secrets); tools never read, write, list or search it.",
                )
        if not self.in_git_dir and any(".git" in _spellings(part) for part in real):
            raise PathRefused(
                self.shown,
                f"{self.shown!r} is a link into .git; links are not followed into "
                f"repository internals. Give the .git path itself if you mean it.",
            )

    def open_dir(self, *, follow: bool = False) -> int:
        """A directory descriptor of this location (usable for ``dir_fd=``, scandir and flock).

        Args:
            follow: follow links that stay inside the root (listing a
                directory the model names through a link); writers keep the
                default, so nothing is ever created through a link.
        """
        return self.open(_beneath.DIRECTORY_FLAGS, follow=follow)

    def open_read(self, *, follow: bool = True) -> int:
        """Open for reading; a regular file that starts like a private key is refused.

        Links that stay inside the root are followed (``docs -> real_docs``),
        judged by where they lead; see `open`. Non-blocking, so a FIFO
        planted under a file's name cannot hang the call; callers check the
        type with ``fstat``.

        Raises:
            PathRefused: a link leading outside, looping or to a protected
                name; or a private key.
            OSError: as `open`.
        """
        fd = self.open(os.O_RDONLY | _O_NONBLOCK, follow=follow)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                refuse_private_key(fd, self.shown)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def read_cached(
        self, most: int, *, head_over: int | None = None, head: int = 0
    ) -> tuple[os.stat_result, bytes | bytearray] | None:
        """The whole file, when reading it cannot wait for any I/O; None otherwise.

        With `head_over`, a file larger than that gives its first `head`
        bytes instead (the fstat's size tells the caller which it got).

        For a read on the event loop (see `lionfactory._os.beneath.read_cached`):
        None whenever the lookup or the data is not cached, the file is not
        a regular file of at most `most` bytes on the root's own local mount,
        a component is a link, or the file starts like a private key. The
        caller then reads it with `open_read` in a worker thread, which
        follows links inside the root and gives every refusal its message.
        """
        found = _beneath.read_cached(
            str(self.workspace.root), self.parts, most, head_over=head_over, head=head
        )
        if found is None or starts_like_private_key(found[1]):
            return None
        return found

    def make_parent(self) -> tuple[int, list[tuple[int, str]]]:
        """The parent directory's descriptor, creating missing directories on the way.

        Returns:
            The descriptor and what `lionfactory._os.beneath.make_parents` created
            (release it with `lionfactory._os.beneath.release_created`).

        Raises:
            PathRefused: a component is a symbolic link.
            OSError: anything else.
        """
        root_fd = self.workspace.open_root()
        try:
            return _beneath.make_parents(root_fd, self.parts[:-1])
        except OSError as exc:
            raise self._translate(exc) from None
        finally:
            os.close(root_fd)

    def _translate(self, exc: OSError, *, follow: bool = False) -> OSError | PathRefused:
        if exc.errno == errno.ELOOP and follow:
            return PathRefused(
                self.shown,
                f"{self.shown!r} passes through a symbolic link loop (or more than "
                f"{_beneath.MAX_LINKS} links); fix the link or use the real path of the file.",
            )
        if exc.errno == errno.EXDEV and follow:
            return PathRefused(
                self.shown,
                f"{self.shown!r} is, or passes through, a symbolic link that leads outside the "
                f"workspace {self.workspace.root}; tools follow only links whose target stays "
                f"inside the workspace. Use the real path of the file, if it is inside the "
                f"workspace.",
            )
        if exc.errno == errno.ELOOP:
            return PathRefused(
                self.shown,
                f"{self.shown!r} is, or passes through, a symbolic link; tools do not write "
                f"through links. Use the real path of the file, if it is inside the workspace.",
            )
        if exc.errno == errno.EXDEV:
            return PathRefused(self.shown, self.workspace.escape_message(self.shown))
        return exc


@attrs.frozen
class Workspace:
    """A resolved workspace root and the protected-name policy.

    Build one with `Workspace.at(...)` at factory time; it does no I/O after that
    except when opening or resolving a path.

    Attributes:
        root: the absolute, symlink-free workspace root.
        protected: casefolded fnmatch patterns of protected names.
    """

    root: Path
    protected: frozenset[str] = DEFAULT_PROTECTED_NAMES
    # One compiled alternation of every pattern: searches check one name per
    # match, and fnmatch per pattern per name cost ~6 us each (the search
    # benchmark's 2,000 matches spent 13 ms here). Compiled once per process
    # for each distinct set (`protected_rule`): a toolkit builds several
    # Workspaces per branch and per clone, and compiling the default set
    # cost 12 ms each time.
    _protected_rule: ProtectedRule = attrs.field(init=False, repr=False, eq=False)
    _located: dict[str, Location] = attrs.field(init=False, repr=False, eq=False, factory=dict)

    @_protected_rule.default
    def _compile(self) -> ProtectedRule:
        return protected_rule(self.protected)

    @classmethod
    def at(
        cls,
        root: str | os.PathLike[str] | Workspace | None = None,
        *,
        protected: Iterable[str] | None = None,
    ) -> Workspace:
        """Resolve `root` (default: the current directory) once.

        A `Workspace` with the asked protected names is taken as it is: a
        toolkit builds its workspace once and hands it to each of its tools,
        which resolved the same root again, one realpath each (a tenth of
        building a coding toolkit, paid by every clone and MCP session).

        Raises:
            ValueError: the root does not exist or is not a directory.
            TypeError: the root is not a path.
        """
        patterns = _normalise_patterns(DEFAULT_PROTECTED_NAMES if protected is None else protected)
        if isinstance(root, Workspace):
            if root.protected == patterns:
                return root
            root = root.root
        if root is not None and not isinstance(root, (str, os.PathLike)):
            raise TypeError(f"workspace_root must be a path or None, got {root!r}")
        resolved = Path.cwd() if root is None else Path(root).expanduser()
        resolved = resolved.resolve()
        if not resolved.is_dir():
            raise ValueError(f"workspace_root must be an existing directory, got {str(root)!r}")
        return cls(root=resolved, protected=patterns)

    def is_protected(self, name: str) -> bool:
        """Whether one path component is a protected name."""
        return self._protected_rule.name(name)

    def is_hidden(self, relative: str | Path) -> bool:
        """Whether a root-relative path has a protected or ``.git`` component.

        Listings and searches skip these; direct access to ``.git`` is allowed
        (a model may read ``.git/HEAD``), protected names never are.
        """
        # A string is taken as it is (no Path round trip: searches ask this for
        # every result); the rule reads empty and "." components as nothing.
        text = relative if isinstance(relative, str) else relative.as_posix()
        return self._protected_rule.hidden(text)

    def relative(self, path: Path) -> str:
        """`path` relative to the root, in POSIX form (``"."`` for the root itself)."""
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

    def contains(self, path: Path) -> bool:
        """Whether an absolute, resolved path lies inside the root."""
        return path == self.root or self.root in path.parents

    def open_root(self) -> int:
        """A new directory descriptor of the root (the caller closes it)."""
        return os.open(self.root, _beneath.DIRECTORY_FLAGS)

    def locate(self, path: object) -> Location:
        """Check a model-supplied path once, lexically, and return what to open.

        No filesystem access: symbolic links are judged later, by the
        kernel, when the `Location` is opened.

        Raises:
            PathRefused: with a message telling the model what to do instead.
        """
        # The check is lexical and the workspace immutable, so a path string
        # gives the same Location every time: remembered per workspace
        # (bounded), since redoing the pathlib work was about 3% of a served
        # 20 KB read. Refused paths are not kept: their check raises again.
        known = self._located.get(path) if type(path) is str else None
        if known is not None:
            return known
        shown, lexical = self._lexical(path)
        parts = lexical.relative_to(self.root).parts
        self._refuse_protected(shown, parts)
        location = Location(workspace=self, parts=parts, shown=shown)
        if type(path) is str:
            if len(self._located) >= _LOCATED_PATHS:
                self._located.clear()  # dict operations are atomic under the GIL
            self._located[path] = location
        return location

    def entries(
        self,
        location: Location,
        *,
        recursive: bool,
        skip: Callable[[str, bool], bool] | None = None,
    ) -> Iterator[tuple[str, bool]]:
        """The visible entries under a directory: ``(root-relative path, is_directory)``.

        Regular files and directories only, depth first in name order; hidden
        names (``.git``, protected names) and their subtrees are skipped, and
        symlinks are never listed or entered. Every directory is opened
        relative to its parent's descriptor with ``O_NOFOLLOW``, so swapping
        one for a link mid-walk ends that branch of the walk instead of
        listing the link's target.

        Args:
            location: the directory to list.
            recursive: also walk subdirectories.
            skip: ``skip(relative_path, is_directory)``; an entry it accepts
                is neither yielded nor, for a directory, entered (an ignore
                filter prunes whole subtrees this way).

        Raises:
            PathRefused: the directory itself is (or passes through) a link.
            OSError: the directory cannot be opened (``ENOENT``, ``ENOTDIR``...).
        """
        top = location.open_dir(follow=True)
        prefix = "" if not location.parts else location.relative + "/"
        try:
            listing = self._scan(top)
        except BaseException:
            os.close(top)
            raise
        stack = [(top, prefix, iter(listing))]
        try:
            while stack:
                fd, base, pending = stack[-1]
                entry = next(pending, None)
                if entry is None:
                    os.close(fd)
                    stack.pop()
                    continue
                name, is_dir = entry
                if skip is not None and skip(base + name, is_dir):
                    continue
                yield base + name, is_dir
                if not (is_dir and recursive):
                    continue
                try:
                    sub = _beneath.open_child(fd, name, _beneath.DIRECTORY_FLAGS)
                except OSError:
                    continue  # gone, swapped for a link, or unreadable: skip it
                try:
                    listing = self._scan(sub)
                except OSError:
                    os.close(sub)
                    continue
                stack.append((sub, base + name + "/", iter(listing)))
        finally:
            for fd, _, _ in stack:
                os.close(fd)

    def _scan(self, fd: int) -> list[tuple[str, bool]]:
        found: list[tuple[str, bool]] = []
        protected = self._protected_rule.name
        with os.scandir(fd) as scan:
            for entry in scan:
                name = entry.name
                if name == ".git" or protected(name):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    found.append((name, True))
                elif entry.is_file(follow_symlinks=False):
                    found.append((name, False))
        found.sort()
        return found

    def directory(self, cwd: str | None) -> Path:
        """A model's working directory for a program: inside the root and existing.

        ``None`` is the root. Used by bash and the sub-agent alike.

        Raises:
            PathRefused: outside the workspace, or not a directory.
        """
        directory = self.resolve("." if cwd is None else cwd)
        if not directory.is_dir():
            raise PathRefused(
                cwd, f"{echo(cwd)} is not a directory in the workspace; give an existing directory."
            )
        return directory

    def search_target(self, path: str) -> str:
        """A model's search path, root-relative, for a helper program to walk.

        The one rule the tools that hand a directory to a program (search,
        ast_search, code_check) share: inside the workspace, not through a
        link, not into ``.git`` or a protected name, and existing.

        Raises:
            PathRefused: with a message saying what to search instead.
        """
        resolved = self.resolve(path)
        relative = self.relative(resolved)
        if self.is_hidden(relative):
            raise PathRefused(
                path, f"{echo(path)} is inside .git; search the working tree instead."
            )
        if not resolved.exists():
            raise PathRefused(
                path, f"{echo(path)} does not exist; search '.' or an existing folder."
            )
        return relative

    def resolve(self, path: object, *, allow_symlink: bool = False) -> Path:
        """Resolve a model-supplied path to an absolute path inside the root.

        For handing a path to another program (a working directory, a search
        root), which cannot take a descriptor; file tools use `locate`.

        Args:
            path: a path relative to the root, or absolute inside it.
            allow_symlink: accept a symlink as the final component (only for
                callers that never follow it, such as a listing).

        Returns:
            The absolute path, with intermediate symlinks resolved.

        Raises:
            PathRefused: with a message telling the model what to do instead.
        """
        shown, lexical = self._lexical(path)
        rel_parts = lexical.relative_to(self.root).parts
        self._refuse_protected(shown, rel_parts)
        try:
            is_link = lexical.is_symlink()
            # Resolve the parent only: the final component is checked by
            # lstat above, and resolving it would follow a symlink.
            real_parent = lexical.parent.resolve(strict=False)
        except (OSError, RuntimeError) as exc:
            raise PathRefused(
                shown, f"The path {shown!r} cannot be resolved ({_reason(exc)}); check the name."
            ) from None
        if is_link and not allow_symlink:
            raise PathRefused(
                shown,
                f"{shown!r} is a symbolic link; tools do not follow links. "
                f"Use the path of the file it points to, if that is inside the workspace.",
            )
        real = real_parent / lexical.name if lexical != self.root else self.root
        if not self.contains(real):
            raise PathRefused(shown, self.escape_message(shown))
        self._refuse_protected(shown, real.relative_to(self.root).parts)
        return real

    def _lexical(self, path: object) -> tuple[str, Path]:
        """The path and its absolute, lexically normalised form, checked to stay inside."""
        if not isinstance(path, str):
            raise PathRefused(path, f"A path must be a string, got {type(path).__name__}.")
        if len(path) > MAX_PATH_CHARS:
            # Checked first, so no message below ever quotes a huge path back.
            raise PathRefused(
                path,
                f"The path is {len(path):,} characters long; paths are at most "
                f"{MAX_PATH_CHARS:,} (the system's limit). Give a real path.",
            )
        if "\x00" in path:
            raise PathRefused(path, "The path contains a NUL byte; give a plain path.")
        try:
            os.fsencode(path)
        except UnicodeError:
            # JSON can carry a lone surrogate ("\ud800"); no file name can.
            raise PathRefused(
                path,
                "The path contains characters that cannot be part of a file name "
                "(such as a lone surrogate); give a plain path.",
            ) from None
        if not path.strip():
            raise PathRefused(path, "The path is empty; use '.' for the workspace root.")
        if path.startswith("~"):
            raise PathRefused(
                path,
                f"Home-relative paths such as {path!r} are outside the workspace; "
                f"give a path relative to the workspace root {self.root}.",
            )
        candidate = Path(path)
        if not candidate.is_absolute():
            candidate = self.root / candidate
        lexical = Path(os.path.normpath(candidate))
        if not self.contains(lexical):
            raise PathRefused(path, self.escape_message(path))
        if len(os.fsencode(lexical)) >= _PATH_MAX:
            # Opening below a descriptor has no length limit, but a file no
            # path can name is out of reach for git, shells and every other
            # program, and for the user.
            raise PathRefused(
                path,
                f"The path is longer than the system allows ({_PATH_MAX - 1} bytes from the "
                f"filesystem root); use a shorter path.",
            )
        return path, lexical

    def _refuse_protected(self, path: str, parts: tuple[str, ...]) -> None:
        for part in parts:
            if self.is_protected(part):
                raise PathRefused(
                    path,
                    f"{path!r} is protected ({part!r} may hold secrets); "
                    f"tools never read, write, list or search it.",
                )

    def escape_message(self, path: str) -> str:
        """The refusal text for a path outside the root."""
        return (
            f"The path {path!r} is outside the workspace {self.root}; "
            f"give a path inside it (relative paths start at the workspace root)."
        )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__

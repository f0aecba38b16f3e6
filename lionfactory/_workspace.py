"""The workspace: one root directory, path containment and protected names.

Every file-touching tool resolves the paths a model gives it through a
`Workspace`, the single seam between model input and the filesystem. A path
either resolves to a location inside the root or is refused with a
`PathRefused` whose message tells the model what to do instead; tools turn that
into their typed failure response.

Rules (DESIGN §9, file-tools issue):

* The root is resolved once, when the factory runs (`Workspace.at`).
* Refused: a NUL byte, an empty path, a leading ``~``, anything that escapes
  the root lexically (``..``, an absolute path elsewhere) or after resolving
  intermediate symlinks, a symlink as the final component, and a protected
  name in *any* component (``.env``, ``.env.*``, ``.netrc``, private keys...).
* Protected names match case-insensitively (`fnmatch` patterns), so ``.ENV``
  is hidden too: hiding one harmless file is cheaper than leaking one secret.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import attrs

from lionfactory.errors import LionfactoryError

__all__ = [
    "DEFAULT_PROTECTED_NAMES",
    "PathRefused",
    "Workspace",
    "open_nofollow",
]

DEFAULT_PROTECTED_NAMES: frozenset[str] = frozenset(
    {
        ".env",
        ".env.*",
        ".netrc",
        ".pgpass",
        ".htpasswd",
        "id_rsa",
        "id_dsa",
        "id_ecdsa",
        "id_ed25519",
    }
)
"""Names (fnmatch patterns) that no tool reads, writes, lists or searches."""

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


MAX_PATH_CHARS = 4096
"""Longest path a tool accepts: Linux's PATH_MAX; no longer name can be opened."""


class PathRefused(LionfactoryError):
    """A path the model gave cannot be used; `message` says what to do instead."""

    def __init__(self, path: object, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return self.message


def open_nofollow(path: Path, flags: int, mode: int = 0o666) -> int:
    """`os.open` that refuses to follow a symlink in the final component.

    Uses ``O_NOFOLLOW`` where the platform has it (it makes the open fail with
    ``ELOOP``), so a symlink swapped in after resolution cannot redirect a write.
    """
    return os.open(path, flags | _O_NOFOLLOW | _O_CLOEXEC, mode)


def _normalise_patterns(names: Iterable[str]) -> frozenset[str]:
    patterns = frozenset(name.casefold() for name in names)
    for pattern in patterns:
        if not pattern or "/" in pattern or "\x00" in pattern:
            raise ValueError(f"a protected name must be a single path component, got {pattern!r}")
    return patterns


@functools.lru_cache(maxsize=4096)
def _hidden(protected: re.Pattern[str], relative: str) -> bool:
    # Cached per (policy, path): a search reports many matches per file and
    # many files per directory, so most lookups hit the parent's answer.
    head, _, name = relative.rpartition("/")
    if head and _hidden(protected, head):
        return True
    if name in ("", "."):  # not components (Path.parts drops them too)
        return False
    return name == ".git" or protected.match(name.casefold()) is not None


@attrs.frozen
class Workspace:
    """A resolved workspace root and the protected-name policy.

    Build one with `Workspace.at(...)` at factory time; it does no I/O after that
    except when resolving a path.

    Attributes:
        root: the absolute, symlink-free workspace root.
        protected: casefolded fnmatch patterns of protected names.
    """

    root: Path
    protected: frozenset[str] = DEFAULT_PROTECTED_NAMES
    # One compiled alternation of every pattern: searches check one name per
    # match, and fnmatch per pattern per name cost ~6 us each (the search
    # benchmark's 2,000 matches spent 13 ms here).
    _protected_re: re.Pattern[str] = attrs.field(init=False, repr=False, eq=False)

    @_protected_re.default
    def _compile(self) -> re.Pattern[str]:
        return re.compile("|".join(fnmatch.translate(p) for p in sorted(self.protected)) or "(?!)")

    @classmethod
    def at(
        cls,
        root: str | os.PathLike[str] | None = None,
        *,
        protected: Iterable[str] | None = None,
    ) -> Workspace:
        """Resolve `root` (default: the current directory) once.

        Raises:
            ValueError: the root does not exist or is not a directory.
            TypeError: the root is not a path.
        """
        if root is not None and not isinstance(root, (str, os.PathLike)):
            raise TypeError(f"workspace_root must be a path or None, got {root!r}")
        resolved = Path.cwd() if root is None else Path(root).expanduser()
        resolved = resolved.resolve()
        if not resolved.is_dir():
            raise ValueError(f"workspace_root must be an existing directory, got {str(root)!r}")
        patterns = _normalise_patterns(DEFAULT_PROTECTED_NAMES if protected is None else protected)
        return cls(root=resolved, protected=patterns)

    def is_protected(self, name: str) -> bool:
        """Whether one path component is a protected name."""
        return self._protected_re.match(name.casefold()) is not None

    def is_hidden(self, relative: str | Path) -> bool:
        """Whether a root-relative path has a protected or ``.git`` component.

        Listings and searches skip these; direct access to ``.git`` is allowed
        (a model may read ``.git/HEAD``), protected names never are.
        """
        return _hidden(self._protected_re, Path(relative).as_posix())

    def relative(self, path: Path) -> str:
        """`path` relative to the root, in POSIX form (``"."`` for the root itself)."""
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

    def contains(self, path: Path) -> bool:
        """Whether an absolute, resolved path lies inside the root."""
        return path == self.root or self.root in path.parents

    def resolve(self, path: object, *, allow_symlink: bool = False) -> Path:
        """Resolve a model-supplied path to an absolute path inside the root.

        Args:
            path: a path relative to the root, or absolute inside it.
            allow_symlink: accept a symlink as the final component (only for
                callers that never follow it, such as a listing).

        Returns:
            The absolute path, with intermediate symlinks resolved.

        Raises:
            PathRefused: with a message telling the model what to do instead.
        """
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
            raise PathRefused(path, self._escape_message(path))
        rel_parts = lexical.relative_to(self.root).parts
        self._refuse_protected(path, rel_parts)
        try:
            is_link = lexical.is_symlink()
            # Resolve the parent only: the final component is checked by
            # lstat above, and resolving it would follow a symlink.
            real_parent = lexical.parent.resolve(strict=False)
        except (OSError, RuntimeError) as exc:
            raise PathRefused(
                path, f"The path {path!r} cannot be resolved ({_reason(exc)}); check the name."
            ) from None
        if is_link and not allow_symlink:
            raise PathRefused(
                path,
                f"{path!r} is a symbolic link; tools do not follow links. "
                f"Use the path of the file it points to, if that is inside the workspace.",
            )
        real = real_parent / lexical.name if lexical != self.root else self.root
        if not self.contains(real):
            raise PathRefused(path, self._escape_message(path))
        self._refuse_protected(path, real.relative_to(self.root).parts)
        return real

    def iter_files(self, directory: Path, *, recursive: bool) -> Iterator[Path]:
        """Yield the regular files under `directory`, skipping hidden paths and symlinks.

        Directories are walked without following symlinks, so a link cannot
        lead the walk outside the root or into a loop.
        """
        if recursive:
            for dirpath, dirnames, filenames in os.walk(directory, followlinks=False):
                base = Path(dirpath)
                dirnames[:] = sorted(
                    d for d in dirnames if d != ".git" and not self.is_protected(d)
                )
                for name in sorted(filenames):
                    if self.is_protected(name):
                        continue
                    candidate = base / name
                    if candidate.is_file() and not candidate.is_symlink():
                        yield candidate
        else:
            try:
                entries = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError:
                return
            for entry in entries:
                if self.is_protected(entry.name) or entry.name == ".git":
                    continue
                if entry.is_file(follow_symlinks=False):
                    yield Path(entry.path)

    def _refuse_protected(self, path: str, parts: tuple[str, ...]) -> None:
        for part in parts:
            if self.is_protected(part):
                raise PathRefused(
                    path,
                    f"{path!r} is protected ({part!r} may hold secrets); "
                    f"tools never read, write, list or search it.",
                )

    def _escape_message(self, path: str) -> str:
        return (
            f"The path {path!r} is outside the workspace {self.root}; "
            f"give a path inside it (relative paths start at the workspace root)."
        )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__

"""Which global excludes file applies to a repository: the user's own setting, remembered.

git's ``core.excludesFile`` may be set in the system, global or repository
configuration (or not at all, then ``$XDG_CONFIG_HOME/git/ignore``). Only the
user's **global** configuration counts here: a repository's config is a file
a command in the workspace can write, and a ``core.excludesFile`` planted
there would make this unconfined process read any file it names (its lines
then hide matching names from listings: an oracle on the file's content).
git is asked (through the process seam, ``git config --global``, outside any
repository), and the ignore matcher (`lionfactory._os.project`) and ripgrep
(``--ignore-file``) both use its answer. `project_view` builds the matcher of
one tool call with it: the one way every tool that walks the tree learns what
is in the project.
"""

from __future__ import annotations

import functools
import os
import stat
from pathlib import Path

import anyio.to_thread

from lionfactory._os.binaries import BinaryFinder
from lionfactory._os.process import LaunchError, run_process
from lionfactory._os.project import ProjectView, project_top
from lionfactory._os.workspace import Workspace

__all__ = ["global_excludes", "known_global_excludes", "known_view", "project_view"]

_GIT_TIMEOUT = 10.0

# Where the user's configuration can name core.excludesFile. Asking git costs a
# process per call (tens of milliseconds on a loaded machine, a third of a
# whole search), so the answer is kept while none of these files and none of
# the variables that move them change. A file pulled in by an include.path
# of one of them is not watched: editing only that file is noticed once one of
# these changes, or a new process starts.
_GIT_CONFIG_ENV = (
    "HOME",
    "XDG_CONFIG_HOME",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
)
_EXCLUDES_CACHE: dict[tuple[object, ...], Path | None] = {}
_EXCLUDES_CACHE_SIZE = 64


def _config_files() -> list[Path]:
    home = Path(os.environ.get("HOME", "/"))
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    files = [home / ".gitconfig", Path(xdg) / "git" / "config"]
    if os.environ.get("GIT_CONFIG_GLOBAL"):
        files.append(Path(os.environ["GIT_CONFIG_GLOBAL"]))
    return files


def _signature(path: Path) -> tuple[str, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (str(path), st.st_mtime_ns, st.st_size)


def _excludes_key(top: Path) -> tuple[object, ...]:
    env = tuple(os.environ.get(name) for name in _GIT_CONFIG_ENV)
    return (str(top), env, *(_signature(path) for path in _config_files()))


def _top_and_key(root: Path) -> tuple[Path, tuple[object, ...]]:
    top, _ = project_top(root)
    return top, _excludes_key(top)


def known_global_excludes(root: Path) -> tuple[bool, Path | None]:
    """`global_excludes` when git need not be asked: ``(True, answer)``, else ``(False, None)``.

    Blocking (a few ``stat`` calls): run it in a worker thread. Callers that
    have other filesystem checks to make put them in the same thread hop; on
    a loaded machine each round trip to a worker thread costs more than the
    checks themselves.
    """
    top, is_repo = project_top(root)
    if not is_repo:
        return True, None
    key = _excludes_key(top)
    if key not in _EXCLUDES_CACHE:
        return False, None
    configured = _EXCLUDES_CACHE[key]
    return True, configured if configured is not None and _is_regular(configured) else None


async def global_excludes(root: Path, binaries: BinaryFinder) -> Path | None:
    """The global excludes file git names, for a workspace inside a repository, else None.

    Asks git for ``core.excludesFile`` of the user's global configuration
    (``~`` expanded; never a repository's or the system's); unset, it is
    git's default ``$XDG_CONFIG_HOME/git/ignore`` or ``~/.config/git/ignore``.
    None when that is not a regular file, or when the workspace is not in a
    repository (git applies it to repositories only).
    """
    known, answer = await anyio.to_thread.run_sync(known_global_excludes, root)
    if known:
        return answer
    top, key = await anyio.to_thread.run_sync(_top_and_key, root)
    configured = await _ask_git(top, binaries)
    if len(_EXCLUDES_CACHE) >= _EXCLUDES_CACHE_SIZE:
        _EXCLUDES_CACHE.clear()
    _EXCLUDES_CACHE[key] = configured
    if configured is None:
        return None
    return configured if await anyio.to_thread.run_sync(_is_regular, configured) else None


def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


async def _ask_git(top: Path, binaries: BinaryFinder) -> Path | None:
    configured: str | None = None
    git = await anyio.to_thread.run_sync(binaries.find, "git")
    if git is not None:
        try:
            # --global, from the filesystem root: no repository's configuration
            # is consulted, whatever the workspace holds.
            env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
            if os.environ.get("GIT_CONFIG_GLOBAL"):
                env["GIT_CONFIG_GLOBAL"] = os.environ["GIT_CONFIG_GLOBAL"]
            result = await run_process(
                [git, "config", "--global", "--type=path", "--get", "core.excludesFile"],
                cwd=Path("/"),
                timeout=_GIT_TIMEOUT,
                env=env,
            )
        except LaunchError:
            result = None
        if result is not None and result.returncode == 0 and result.stdout.strip():
            configured = result.stdout.strip()
    if configured is None:
        xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(
            os.environ.get("HOME", "/"), ".config"
        )
        configured = os.path.join(xdg, "git", "ignore")
    path = Path(configured)
    return path if path.is_absolute() else top / path


def known_view(workspace: Workspace, *, include_ignored: bool) -> ProjectView | None:
    """`project_view` when no process has to be asked, else None (blocking: a worker thread)."""
    if include_ignored:
        return ProjectView(workspace, include_ignored=True)
    known, global_file = known_global_excludes(workspace.root)
    if not known:
        return None
    return ProjectView(workspace, include_ignored=False, global_file=global_file)


async def project_view(
    workspace: Workspace, binaries: BinaryFinder, *, include_ignored: bool
) -> ProjectView:
    """The project's ignore rules for one call of a tool that walks `workspace`.

    git is asked for its global excludes file only when the rules apply:
    with ``include_ignored`` nothing but ``.git``, protected names and links
    is left out.
    """
    if include_ignored:
        return ProjectView(workspace, include_ignored=True)
    view = await anyio.to_thread.run_sync(
        functools.partial(known_view, workspace, include_ignored=include_ignored)
    )
    if view is not None:
        return view
    global_file = await global_excludes(workspace.root, binaries)
    return ProjectView(workspace, include_ignored=False, global_file=global_file)

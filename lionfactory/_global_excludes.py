"""Which global excludes file git applies to a repository, asked of git and remembered.

git's ``core.excludesFile`` may be set in the system, global or repository
configuration (or not at all, then ``$XDG_CONFIG_HOME/git/ignore``); only git
reads all of those correctly, so git is asked (through the process seam) and
the ignore matcher (`lionfactory._project`) and ripgrep (``--ignore-file``)
both use its answer. `project_view` builds the matcher of one tool call with
it: the one way every tool that walks the tree learns what is in the project.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio.to_thread

from lionfactory._binaries import BinaryFinder
from lionfactory._process import LaunchError, run_process
from lionfactory._project import ProjectView, git_dir, project_top
from lionfactory._workspace import Workspace

__all__ = ["global_excludes", "project_view"]

_GIT_TIMEOUT = 10.0

# Where git's configuration can name core.excludesFile. Asking git costs a
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
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_PARAMETERS",
    "GIT_DIR",
)
_EXCLUDES_CACHE: dict[tuple[object, ...], Path | None] = {}
_EXCLUDES_CACHE_SIZE = 64


def _config_files(top: Path) -> list[Path]:
    home = Path(os.environ.get("HOME", "/"))
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    files = [Path("/etc/gitconfig"), home / ".gitconfig", Path(xdg) / "git" / "config"]
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"):
        if os.environ.get(name):
            files.append(Path(os.environ[name]))
    repository = git_dir(top)
    if repository is not None:
        files += [repository / "config", top / ".git"]
    return files


def _signature(path: Path) -> tuple[str, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (str(path), st.st_mtime_ns, st.st_size)


def _excludes_key(top: Path) -> tuple[object, ...]:
    env = tuple(os.environ.get(name) for name in _GIT_CONFIG_ENV)
    return (str(top), env, *(_signature(path) for path in _config_files(top)))


async def global_excludes(root: Path, binaries: BinaryFinder) -> Path | None:
    """The global excludes file git names, for a workspace inside a repository, else None.

    Asks git (``core.excludesFile`` from every configuration git reads, ``~``
    expanded); unset, it is git's default ``$XDG_CONFIG_HOME/git/ignore`` or
    ``~/.config/git/ignore``. None when the file does not exist, or when the
    workspace is not in a repository (git applies it to repositories only).
    """
    top, is_repo = project_top(root)
    if not is_repo:
        return None
    key = await anyio.to_thread.run_sync(_excludes_key, top)
    if key in _EXCLUDES_CACHE:
        configured = _EXCLUDES_CACHE[key]
    else:
        configured = await _ask_git(top, binaries)
        if len(_EXCLUDES_CACHE) >= _EXCLUDES_CACHE_SIZE:
            _EXCLUDES_CACHE.clear()
        _EXCLUDES_CACHE[key] = configured
    if configured is None:
        return None
    return configured if await anyio.to_thread.run_sync(configured.is_file) else None


async def _ask_git(top: Path, binaries: BinaryFinder) -> Path | None:
    configured: str | None = None
    git = await anyio.to_thread.run_sync(binaries.find, "git")
    if git is not None:
        try:
            result = await run_process(
                [git, "config", "--type=path", "--get", "core.excludesFile"],
                cwd=top,
                timeout=_GIT_TIMEOUT,
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


async def project_view(
    workspace: Workspace, binaries: BinaryFinder, *, include_ignored: bool
) -> ProjectView:
    """The project's ignore rules for one call of a tool that walks `workspace`.

    git is asked for its global excludes file only when the rules apply:
    with ``include_ignored`` nothing but ``.git``, protected names and links
    is left out.
    """
    global_file = None if include_ignored else await global_excludes(workspace.root, binaries)
    return ProjectView(workspace, include_ignored=include_ignored, global_file=global_file)

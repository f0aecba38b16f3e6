r"""The ``search`` tool: grep file contents and find files by name in the project.

Decisions:

* **What is searched** is the project, not everything under the root: git's
  ignore rules (``.gitignore`` at every level, ``.git/info/exclude``, the
  global excludes file, ``.ignore``) decide, through the one matcher of
  `lionfactory._os.project`. ``include_ignored=true`` searches ignored files on
  purpose; naming an ignored directory as ``path`` searches it too (the
  rules apply below it). ``.git`` internals and protected names (``.env``
  and friends) are never searched nor listed, and symlinks are not followed.
* **Engines** (`lionfactory.tools._search_engines`): ripgrep when ``rg`` is
  installed (the ``search`` extra ships it), else grep over a Python walk
  with the same rules. The response names the engine that ran; both return
  the same results on the same tree.
* ``grep`` takes a regular expression in ripgrep's syntax (Perl-like:
  ``\d``, ``\w``, ``(a|b)``); ``output_mode`` picks matching lines (with
  optional context), the files that match, or a count per file. A pattern
  the engine rejects is a typed failure quoting the engine's message.
* ``find`` matches a glob against file and directory names; a directory is
  listed (with a trailing ``/``) when it holds project files, the way git
  sees directories.
* ``max_results`` (alias ``head_limit``) is 1 to 1,000; omitted it is 50 for
  grep and 100 for find. Results are sorted by path, then line, relative to
  the workspace root; ``count`` is what is shown, ``total`` what was found,
  ``truncated`` says when they differ.
* A search path outside the workspace, through a protected name or into
  ``.git`` is refused before any process starts. Every launch failure, a
  timeout or an unexpected exit status is an error, never an empty success.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from lionfactory._os.binaries import BinaryFinder
from lionfactory._os.environment import EnvPolicy
from lionfactory._os.isolation import Isolation
from lionfactory._tool import Tool
from lionfactory.tools._helper import HelperSpec, helper_tool
from lionfactory.tools._search_handler import SearchHandler
from lionfactory.tools._search_models import (
    DEFAULT_FIND_RESULTS,
    DEFAULT_GREP_RESULTS,
    MAX_RESULTS,
    SearchRequest,
    SearchResponse,
)

__all__ = ["SearchRequest", "SearchResponse", "search_tool"]

_DESCRIPTION = f"""\
Search the project. Two actions:
- grep: lines of files whose text matches `pattern`, a regular expression in
  ripgrep's syntax (\\d, \\w, \\s, (a|b), a.*?b; escape ( [ {{ . with a backslash).
  output_mode "content" (default) shows "path:line:text" rows (context rows, set with
  `context` or `before`/`after`, are "path-line-text"); "files_with_matches" shows
  the paths; "count" shows "path:count". Filter files with `type` (e.g. "py") or
  `include` (a glob on file names such as "*.py"). `case_insensitive` and
  `multiline` (a match may span lines) are off by default. Binary files are skipped.
- find: files and directories whose name matches `pattern`, a glob such as
  "*.py" or "test_*" (names only, no "/"; put the directory in `path`).
  Directories end with "/".
Only project files are searched: paths ignored by .gitignore (at any level),
.git/info/exclude, git's global excludes file or .ignore files are skipped, so a
.venv or node_modules does not drown the results. Set include_ignored=true to search
ignored files too (or give an ignored directory as `path`). Secret files such as .env
and the .git folder are never searched.
`path` is a directory or file relative to the workspace root (default ".").
At most `max_results` results are shown (default {DEFAULT_GREP_RESULTS} for grep, \
{DEFAULT_FIND_RESULTS} for find,
at most {MAX_RESULTS}); `total` says how many were found and `truncated` whether
some were left out. Results are sorted by path, then line."""


_SPEC = HelperSpec(
    name="search",
    title="Search the workspace",
    description=_DESCRIPTION,
    handler=SearchHandler,
)


def search_tool(
    *,
    workspace_root: str | os.PathLike[str] | None = None,
    protected_names: Iterable[str] | None = None,
    isolation: str | Isolation = "none",
    env_policy: EnvPolicy | None = None,
    _binaries: BinaryFinder | None = None,
) -> Tool:
    """Build the ``search`` tool.

    Args:
        workspace_root: the directory searched and every path must stay
            inside; the current directory when None. Resolved once, now.
        protected_names: fnmatch patterns of names never searched nor listed;
            the workspace defaults (``.env``, ``.env.*``, private keys, ...)
            when None.
        isolation: how the helper program is confined: ``"none"``, ``"auto"``,
            ``"bwrap"``, ``"landlock"``, or an inherited `Isolation` (see
            `bash_tool`; the network is always ``"none"``).
        _binaries: private test seam: where ``rg``, ``grep`` and ``git`` are
            looked up (the running environment, then PATH, by default). A
            finder that cannot see ``rg`` selects the builtin engine.
        env_policy: which inherited environment variables the helper program
            gets (`EnvPolicy`); None: all of them.

    Returns:
        The ``search`` Tool (safe to share: it is bound to no branch).

    Raises:
        ValueError: the workspace root is not a directory.
        TypeError: an option of the wrong type.
        ConfigurationError: the requested isolation cannot work here.
    """
    return helper_tool(_SPEC, workspace_root, protected_names, isolation, env_policy, _binaries)

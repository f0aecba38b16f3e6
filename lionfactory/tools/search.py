r"""The ``search`` tool: grep file contents and find files by name in the project.

Decisions:

* **What is searched** is the project, not everything under the root: git's
  ignore rules (``.gitignore`` at every level, ``.git/info/exclude``, the
  global excludes file, ``.ignore``) decide, through the one matcher of
  `lionfactory._project`. ``include_ignored=true`` searches ignored files on
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
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from lionfactory._binaries import BinaryFinder, finder_or_default
from lionfactory._tool import Tool
from lionfactory._workspace import Workspace
from lionfactory.tools._search_engines import FILE_TYPES

__all__ = ["SearchRequest", "SearchResponse", "search_tool"]

DEFAULT_GREP_RESULTS = 50
DEFAULT_FIND_RESULTS = 100
MAX_RESULTS = 1000
MAX_CONTEXT = 50

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


class SearchRequest(BaseModel):
    """Arguments of one ``search`` call."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["grep", "find"] = Field(
        description="'grep' searches file contents; 'find' searches file and directory names."
    )
    pattern: str = Field(
        min_length=1,
        description=(
            "grep: a regular expression (ripgrep syntax), e.g. 'def (load|save)_\\w+'. "
            "find: a glob on names, e.g. '*.py' or 'test_*'."
        ),
    )
    path: str = Field(
        default=".",
        description="Directory or file to search, relative to the workspace root (default '.').",
    )
    include: str | None = Field(
        default=None,
        description=(
            "grep only: search only files whose name matches this glob, e.g. '*.py' "
            "(*, ? and [...]; no '/', no braces). Use either include or type."
        ),
    )
    type: str | None = Field(
        default=None,
        description=(
            "grep only: search only files of this type: "
            + ", ".join(f"{name} ({' '.join(globs)})" for name, globs in FILE_TYPES.items())
            + "."
        ),
    )
    output_mode: Literal["content", "files_with_matches", "count"] = Field(
        default="content",
        description=(
            "grep only: 'content' shows matching lines (default); 'files_with_matches' "
            "only the paths of matching files; 'count' the number of matching lines per file."
        ),
    )
    before: int | None = Field(
        default=None,
        ge=0,
        le=MAX_CONTEXT,
        description=f"grep content only: lines of context before each match (0-{MAX_CONTEXT}).",
    )
    after: int | None = Field(
        default=None,
        ge=0,
        le=MAX_CONTEXT,
        description=f"grep content only: lines of context after each match (0-{MAX_CONTEXT}).",
    )
    context: int | None = Field(
        default=None,
        ge=0,
        le=MAX_CONTEXT,
        description=(
            f"grep content only: lines of context before and after each match "
            f"(0-{MAX_CONTEXT}); give either context or before/after."
        ),
    )
    case_insensitive: bool = Field(
        default=False, description="grep only: match regardless of case (default false)."
    )
    multiline: bool = Field(
        default=False,
        description=(
            "grep only: let a match span lines: \\n in the pattern matches a line break "
            "('.' still does not). Default false."
        ),
    )
    include_ignored: bool = Field(
        default=False,
        description=(
            "Also search files that .gitignore, .ignore or git's exclude files ignore "
            "(virtualenvs, node_modules, build output). Default false."
        ),
    )
    max_results: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RESULTS,
        description=(
            f"Most results to show: default {DEFAULT_GREP_RESULTS} for grep and "
            f"{DEFAULT_FIND_RESULTS} for find, at most {MAX_RESULTS}."
        ),
    )
    head_limit: int | None = Field(
        default=None,
        ge=1,
        le=MAX_RESULTS,
        description="Another name for max_results; give one of them.",
    )

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str | None) -> str | None:
        if value is not None and value not in FILE_TYPES:
            raise ValueError(
                f"unknown file type {value!r}; use one of {', '.join(FILE_TYPES)}, "
                f"or a glob in include"
            )
        return value

    @field_validator("include")
    @classmethod
    def _plain_glob(cls, value: str | None) -> str | None:
        if value is not None and (not value or "/" in value or "{" in value or "}" in value):
            raise ValueError(
                f"include is one glob on file names with *, ? and [...], without '/' or braces "
                f"(got {value!r}); search a directory with path, or use type"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SearchRequest:
        if self.context is not None and (self.before is not None or self.after is not None):
            raise ValueError("give either context, or before and/or after, not both")
        if (
            self.max_results is not None
            and self.head_limit is not None
            and self.max_results != self.head_limit
        ):
            raise ValueError(
                f"max_results ({self.max_results}) and head_limit ({self.head_limit}) are the "
                f"same setting; give one of them"
            )
        if self.include is not None and self.type is not None:
            raise ValueError("give either include or type, not both")
        lines = [n for n in ("context", "before", "after") if getattr(self, n) is not None]
        if lines and self.output_mode != "content":
            raise ValueError(
                f"{', '.join(lines)} add context lines to output_mode 'content'; "
                f"drop them for {self.output_mode!r}"
            )
        return self


class SearchResponse(BaseModel):
    """The outcome of one ``search`` call."""

    model_config = ConfigDict(extra="forbid")

    success: bool = Field(description="Whether the search ran (finding nothing is a success).")
    content: str | None = Field(
        default=None, description="The results, one per line, paths relative to the root."
    )
    count: int = Field(default=0, description="How many results are shown.")
    total: int = Field(default=0, description="How many results were found.")
    truncated: bool = Field(
        default=False, description="True when some results were left out (count < total)."
    )
    error: str | None = Field(default=None, description="Why the search failed, and what to do.")
    engine: Literal["ripgrep", "builtin"] | None = Field(
        default=None,
        description="Which engine ran: 'ripgrep', or 'builtin' (grep and a Python walk).",
    )
    ignore_rules: Literal["applied", "not applied"] | None = Field(
        default=None,
        description=(
            "'applied': paths ignored by .gitignore/.ignore/git excludes were skipped; "
            "'not applied': include_ignored was set."
        ),
    )
    ignored: int | None = Field(
        default=None,
        description=(
            "How many ignored paths were skipped (an ignored directory counts once); null "
            "when the engine does not count them (ripgrep)."
        ),
    )
    notice: str | None = Field(default=None, description="Notes on the answer, if any.")


def search_tool(
    *,
    workspace_root: str | os.PathLike[str] | None = None,
    protected_names: Iterable[str] | None = None,
    _binaries: BinaryFinder | None = None,
) -> Tool:
    """Build the ``search`` tool.

    Args:
        workspace_root: the directory searched and every path must stay
            inside; the current directory when None. Resolved once, now.
        protected_names: fnmatch patterns of names never searched nor listed;
            the workspace defaults (``.env``, ``.env.*``, private keys, ...)
            when None.
        _binaries: private test seam: where ``rg``, ``grep`` and ``git`` are
            looked up (the running environment, then PATH, by default). A
            finder that cannot see ``rg`` selects the builtin engine.

    Returns:
        The ``search`` Tool (safe to share: it is bound to no branch).

    Raises:
        ValueError: the workspace root is not a directory.
        TypeError: an option of the wrong type.
    """
    # Imported here: the handler module imports this one's request and response models.
    from lionfactory.tools._search_handler import SearchHandler

    binaries = finder_or_default(_binaries)
    workspace = Workspace.at(workspace_root, protected=protected_names)
    return Tool(
        name="search",
        description=_DESCRIPTION,
        request_model=SearchRequest,
        handler=SearchHandler(workspace, binaries),
    )

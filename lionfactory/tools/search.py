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

import fnmatch
import os
from collections.abc import Iterable
from typing import Literal

import anyio.to_thread
import attrs
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from lionfactory._binaries import BinaryFinder, finder_or_default
from lionfactory._project import ProjectView, global_excludes, stray_ignore_files
from lionfactory._tool import Tool
from lionfactory._workspace import PathRefused, Workspace
from lionfactory.tools._search_engines import (
    FILE_TYPES,
    OUTPUT_CAP,
    EngineFailure,
    Found,
    GrepQuery,
    Line,
    grep_builtin,
    grep_ripgrep,
    list_builtin,
    list_ripgrep,
)

__all__ = ["SearchRequest", "SearchResponse", "search_tool"]

DEFAULT_GREP_RESULTS = 50
DEFAULT_FIND_RESULTS = 100
MAX_RESULTS = 1000
MAX_CONTEXT = 50

_LINE_CAP = 500

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

_GREP_ONLY = (
    "include",
    "type",
    "output_mode",
    "before",
    "after",
    "context",
    "case_insensitive",
    "multiline",
)


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


def _failure(message: str) -> SearchResponse:
    return SearchResponse(success=False, error=message)


def _cut(text: str) -> str:
    text = text.removesuffix("\r")
    return text if len(text) <= _LINE_CAP else text[:_LINE_CAP] + "...[line cut]"


def _content_rows(lines: list[Line], limit: int, before: int, after: int) -> tuple[list[str], int]:
    """Rows for the first `limit` matching lines with their context; and the match count."""
    matches = [line for line in lines if line.is_match]
    kept = {(line.path, line.number) for line in matches[:limit]}
    rows: list[str] = []
    previous: tuple[str, int] | None = None
    for line in lines:
        key = (line.path, line.number)
        if not line.is_match:
            near = any(
                (line.path, number) in kept
                for number in range(line.number - after, line.number + before + 1)
            )
            if not near:
                continue
        elif key not in kept:
            continue
        if (before or after) and previous is not None and previous != (line.path, line.number - 1):
            rows.append("--")
        sign = ":" if line.is_match else "-"
        rows.append(f"{line.path}{sign}{line.number}{sign}{_cut(line.text)}")
        previous = key
    return rows, len(matches)


def _globs(request: SearchRequest) -> tuple[str, ...]:
    if request.type is not None:
        return FILE_TYPES[request.type]
    return () if request.include is None else (request.include,)


def _directories(files: list[str], base: str) -> set[str]:
    """Every directory strictly below `base` that holds one of `files`."""
    found: set[str] = set()
    prefix = "" if base == "." else base + "/"
    for file in files:
        head = file.rpartition("/")[0]
        while head and head.startswith(prefix) and head != base and head not in found:
            found.add(head)
            head = head.rpartition("/")[0]
    return found


@attrs.frozen
class _SearchHandler:
    workspace: Workspace
    binaries: BinaryFinder

    def _target(self, path: str) -> str:
        resolved = self.workspace.resolve(path)
        relative = self.workspace.relative(resolved)
        if self.workspace.is_hidden(relative):
            raise PathRefused(path, f"{path!r} is inside .git; search the working tree instead.")
        if not resolved.exists():
            raise PathRefused(path, f"{path!r} does not exist; search '.' or an existing folder.")
        return relative

    async def _view(self, request: SearchRequest) -> ProjectView:
        global_file = None
        if not request.include_ignored:
            global_file = await global_excludes(self.workspace.root, self.binaries)
        return ProjectView(
            self.workspace, include_ignored=request.include_ignored, global_file=global_file
        )

    async def _ripgrep(self, request: SearchRequest) -> tuple[str | None, str | None]:
        """The rg binary to use, or None and why the builtin engine runs instead."""
        rg = await anyio.to_thread.run_sync(self.binaries.find, "rg")
        if rg is None:
            return None, None
        if not request.include_ignored:
            stray = await anyio.to_thread.run_sync(stray_ignore_files, self.workspace.root)
            if stray:
                return None, (
                    f"The builtin engine ran: ripgrep would also apply {stray[0]}, an ignore "
                    f"file outside the project."
                )
        return rg, None

    def _finish(
        self,
        request: SearchRequest,
        found: Found,
        rows: list[str],
        total: int,
        limit: int,
        noun: str,
        notes: list[str],
    ) -> SearchResponse:
        lines = list(rows)
        if total > limit:
            lines.append(
                f"[showing {limit} of {total} {noun}; narrow the search or raise "
                f"max_results (at most {MAX_RESULTS})]"
            )
        if found.cut:
            lines.append(
                f"[{found.engine} printed more than {OUTPUT_CAP:,} bytes; the total counts only "
                f"what fitted; narrow the search]"
            )
        if total == 0:
            hint = "" if request.include_ignored else " (ignored files were not searched)"
            lines.append(f"No {noun} found{hint}.")
        if found.warning:
            notes.append(f"The engine reported: {found.warning}")
        return SearchResponse(
            success=True,
            content="\n".join(lines),
            count=min(total, limit),
            total=total,
            truncated=total > limit or found.cut,
            engine="ripgrep" if found.engine == "ripgrep" else "builtin",
            ignore_rules="not applied" if request.include_ignored else "applied",
            ignored=found.skipped,
            notice=" ".join(notes) or None,
        )

    async def _grep(self, request: SearchRequest, relative: str) -> SearchResponse:
        context = request.context or 0
        query = GrepQuery(
            pattern=request.pattern,
            target="." if relative == "." else f"./{relative}",
            mode=request.output_mode,
            case_insensitive=request.case_insensitive,
            multiline=request.multiline,
            before=request.before if request.before is not None else context,
            after=request.after if request.after is not None else context,
            globs=_globs(request),
            include_ignored=request.include_ignored,
        )
        view = await self._view(request)
        rg, why = await self._ripgrep(request)
        if rg is not None:
            found = await grep_ripgrep(rg, self.workspace, view, query)
        else:
            found = await grep_builtin(self.binaries, self.workspace, view, query)
        hidden = view.hidden
        found.lines = [line for line in found.lines if not hidden(line.path)]
        counts = {path: n for path, n in sorted(found.counts.items()) if not hidden(path)}
        limit = request.max_results or request.head_limit or DEFAULT_GREP_RESULTS
        notes = [why] if why else []
        if request.output_mode == "content":
            rows, total = _content_rows(found.lines, limit, query.before, query.after)
            return self._finish(request, found, rows, total, limit, "matches", notes)
        if request.output_mode == "files_with_matches":
            rows = list(counts)[:limit]
        else:
            rows = [f"{path}:{n}" for path, n in list(counts.items())[:limit]]
        return self._finish(request, found, rows, len(counts), limit, "files", notes)

    async def _find(self, request: SearchRequest, relative: str) -> SearchResponse:
        if "/" in request.pattern:
            return _failure(
                "find matches names, not paths: give a glob without '/' as pattern and put "
                "the directory in path (e.g. pattern='*.py', path='src')."
            )
        view = await self._view(request)
        rg, why = await self._ripgrep(request)
        target = "." if relative == "." else f"./{relative}"
        if rg is not None:
            found = await list_ripgrep(rg, self.workspace, view, target)
        else:
            found = await list_builtin(self.workspace, view, target)
        files = [f for f in found.files if not view.hidden(f)]
        directories = _directories(files, relative)
        entries = sorted(
            [(f, False) for f in files] + [(d, True) for d in directories],
            key=lambda entry: entry[0],
        )
        matching = [
            f"{path}/" if is_dir else path
            for path, is_dir in entries
            if fnmatch.fnmatchcase(path.rpartition("/")[2], request.pattern)
        ]
        limit = request.max_results or request.head_limit or DEFAULT_FIND_RESULTS
        notes = [why] if why else []
        return self._finish(request, found, matching[:limit], len(matching), limit, "files", notes)

    async def __call__(self, request: SearchRequest) -> SearchResponse:
        if request.action == "find":
            given = [name for name in _GREP_ONLY if name in request.model_fields_set]
            if given:
                return _failure(
                    f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to grep only; "
                    f"for find put the glob in pattern."
                )
        try:
            relative = await anyio.to_thread.run_sync(self._target, request.path)
        except PathRefused as exc:
            return _failure(exc.message)
        try:
            if request.action == "grep":
                return await self._grep(request, relative)
            return await self._find(request, relative)
        except EngineFailure as exc:
            return _failure(exc.message)


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
    binaries = finder_or_default(_binaries)
    workspace = Workspace.at(workspace_root, protected=protected_names)
    return Tool(
        name="search",
        description=_DESCRIPTION,
        request_model=SearchRequest,
        handler=_SearchHandler(workspace, binaries),
    )

"""The ``search`` handler: picks the engine, runs it, shapes the answer for the model.

Kept apart from `lionfactory.tools.search` (the request and response models
and the factory) so that each module stays readable on its own.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import NamedTuple

import anyio.to_thread
import attrs

from lionfactory._os.binaries import BinaryFinder
from lionfactory._os.global_excludes import known_view, project_view
from lionfactory._os.isolation import Isolation
from lionfactory._os.project import ProjectView, stray_ignore_files
from lionfactory._os.workspace import PathRefused, Workspace
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
from lionfactory.tools._search_models import (
    DEFAULT_FIND_RESULTS,
    DEFAULT_GREP_RESULTS,
    MAX_RESULTS,
    SearchRequest,
    SearchResponse,
)

__all__ = ["SearchHandler"]

_LINE_CAP = 500

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


class _Prepared(NamedTuple):
    relative: str
    view: ProjectView | None
    rg: str | None
    stray: list[Path]


class _Engine(NamedTuple):
    view: ProjectView
    rg: str | None
    why: str | None


@attrs.frozen
class SearchHandler:
    """The ``search`` handler for one workspace."""

    workspace: Workspace
    binaries: BinaryFinder
    isolation: Isolation | None = None

    def _prepare(self, request: SearchRequest) -> _Prepared:
        """Every filesystem check before the search, in one worker-thread hop.

        Blocking (``stat`` calls up the tree and along ``PATH``). Done in
        one hop rather than one each: on a loaded machine the round trips
        cost more than the checks, a millisecond or two of a small search.

        Raises:
            PathRefused: the search path is outside, hidden or missing.
        """
        relative = self.workspace.search_target(request.path)
        view = known_view(self.workspace, include_ignored=request.include_ignored)
        rg = self.binaries.find("rg")
        stray: list[Path] = []
        if rg is not None and not request.include_ignored:
            stray = stray_ignore_files(self.workspace.root)
        return _Prepared(relative, view, rg, stray)

    async def _engine(self, request: SearchRequest, prepared: _Prepared) -> _Engine:
        """The project view, and the rg binary or None and why the builtin engine runs."""
        view = prepared.view
        if view is None:
            # git has to be asked for its global excludes file (once per
            # configuration): a process, so not in the worker thread.
            view = await project_view(
                self.workspace, self.binaries, include_ignored=request.include_ignored
            )
        if prepared.stray:
            why = (
                f"The builtin engine ran: ripgrep would also apply {prepared.stray[0]}, an "
                f"ignore file outside the project."
            )
            return _Engine(view, None, why)
        return _Engine(view, prepared.rg, None)

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

    async def _grep(self, request: SearchRequest, prepared: _Prepared) -> SearchResponse:
        relative = prepared.relative
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
        view, rg, why = await self._engine(request, prepared)
        if rg is not None:
            found = await grep_ripgrep(rg, self.workspace, view, query, self.isolation)
        else:
            found = await grep_builtin(self.binaries, self.workspace, view, query, self.isolation)
        hidden = view.hidden
        # One check per file, not per line: a file reports many lines.
        shown = {path for path in {line.path for line in found.lines} if not hidden(path)}
        found.lines = [line for line in found.lines if line.path in shown]
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

    async def _find(self, request: SearchRequest, prepared: _Prepared) -> SearchResponse:
        if "/" in request.pattern:
            return _failure(
                "find matches names, not paths: give a glob without '/' as pattern and put "
                "the directory in path (e.g. pattern='*.py', path='src')."
            )
        relative = prepared.relative
        view, rg, why = await self._engine(request, prepared)
        target = "." if relative == "." else f"./{relative}"
        if rg is not None:
            found = await list_ripgrep(rg, self.workspace, view, target, self.isolation)
        else:
            found = await list_builtin(self.workspace, view, target)
        hidden = view.hidden
        files = [f for f in found.files if not hidden(f)]
        # One compiled pattern, matched before sorting: a project lists tens
        # of thousands of files, few of which a find keeps.
        match = re.compile(fnmatch.translate(request.pattern)).match
        entries = [(f, "") for f in files if match(f.rpartition("/")[2])]
        entries += [(d, "/") for d in _directories(files, relative) if match(d.rpartition("/")[2])]
        entries.sort()  # a file and a directory never share a path
        matching = [path + slash for path, slash in entries]
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
            prepared = await anyio.to_thread.run_sync(self._prepare, request)
        except PathRefused as exc:
            return _failure(exc.message)
        try:
            if request.action == "grep":
                return await self._grep(request, prepared)
            return await self._find(request, prepared)
        except EngineFailure as exc:
            return _failure(exc.message)

"""The ``search`` tool: grep file contents and find files by name in the workspace.

Both actions run a fixed argv (no shell) through `lionfactory._process` with a
30-second timeout, from the workspace root, so every result is a path relative
to that root.

Decisions (DESIGN §9):

* ``grep`` is ``grep -rnHIE``: the pattern is an *extended* regular
  expression, passed with ``-e`` so one starting with ``-`` is never read as
  an option; binary files are skipped; ``include`` is a glob on file names
  (``grep --include``). Exit 0 and 1 (no match) are success; any other exit,
  a timeout or a launch failure is an error.
* ``find`` matches a glob against file and directory names (``find -name``);
  directories are shown with a trailing ``/``; symlinks are not listed. A
  nonzero exit, a timeout or a launch failure is an error.
* ``max_results`` is validated (1 to 1,000); omitted it is 50 for grep and
  100 for find. ``count`` is what is shown, ``total`` what was found, and
  ``truncated`` says when they differ; the content says so too.
* Protected names (``.env`` and friends) and ``.git`` internals are never
  searched nor listed: they are excluded from the command line *and* filtered
  from its output, because grep's and find's name matching is not the
  workspace's case-insensitive matching. A search path outside the
  workspace, through a protected name or into ``.git`` is refused before any
  process starts.
* ripgrep is not used even when installed: one implementation means one set
  of results and one set of tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Literal

import anyio.to_thread
import attrs
from pydantic import BaseModel, ConfigDict, Field

from lionfactory._binaries import BinaryFinder, finder_or_default
from lionfactory._isolation import Isolation, workspace_isolation
from lionfactory._process import LaunchError, ProcessResult, run_process
from lionfactory._tool import Tool
from lionfactory._workspace import PathRefused, Workspace

__all__ = ["SearchRequest", "SearchResponse", "search_tool"]

DEFAULT_GREP_RESULTS = 50
DEFAULT_FIND_RESULTS = 100
MAX_RESULTS = 1000
TIMEOUT_SECONDS = 30.0

# grep's and find's output is parsed, not shown, so it may be longer than
# bash's 100,000 bytes; past this cap `total` becomes a lower bound.
_OUTPUT_CAP = 8_000_000
_LINE_CAP = 500
_STDERR_CAP = 300

_DESCRIPTION = f"""\
Search the workspace. Two actions:
- grep: lines of files whose text matches `pattern`, an extended regular
  expression (grep -E: use | for alternation, \\. for a literal dot). Results are
  "path:line:text". `include` limits the search to file names matching a glob
  such as "*.py". Binary files are skipped.
- find: files and directories whose name matches `pattern`, a glob such as
  "*.py" or "test_*" (names only, no "/"; put the directory in `path`).
  Directories end with "/".
`path` is a directory or file relative to the workspace root (default ".").
At most `max_results` results are shown (default {DEFAULT_GREP_RESULTS} for grep, \
{DEFAULT_FIND_RESULTS} for find,
at most {MAX_RESULTS}); `total` says how many were found and `truncated` whether
some were left out. Secret files such as .env and the .git folder are never searched."""


class SearchRequest(BaseModel):
    """Arguments of one ``search`` call."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["grep", "find"] = Field(
        description="'grep' searches file contents; 'find' searches file and directory names."
    )
    pattern: str = Field(
        min_length=1,
        description=(
            "grep: an extended regular expression (grep -E), e.g. 'def (load|save)_'. "
            "find: a glob on names, e.g. '*.py' or 'test_*'."
        ),
    )
    path: str = Field(
        default=".",
        description="Directory or file to search, relative to the workspace root (default '.').",
    )
    include: str | None = Field(
        default=None,
        description="grep only: search only files whose name matches this glob, e.g. '*.py'.",
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


def _failure(message: str) -> SearchResponse:
    return SearchResponse(success=False, error=message)


def _strip_dot(path: str) -> str:
    return path[2:] if path.startswith("./") else path


def _cut(text: str) -> str:
    return text if len(text) <= _LINE_CAP else text[:_LINE_CAP] + "...[line cut]"


def _records(result: ProcessResult, separator: str) -> list[str]:
    records = result.stdout.split(separator)
    # The last record is either empty (output ends with a separator) or a
    # fragment cut by the output cap; neither is a result.
    return records[:-1]


@attrs.frozen
class _SearchHandler:
    workspace: Workspace
    binaries: BinaryFinder
    isolation: Isolation | None = None

    def _target(self, path: str) -> str:
        resolved = self.workspace.resolve(path)
        relative = self.workspace.relative(resolved)
        if self.workspace.is_hidden(relative):
            raise PathRefused(path, f"{path!r} is inside .git; search the working tree instead.")
        if not resolved.exists():
            raise PathRefused(path, f"{path!r} does not exist; search '.' or an existing folder.")
        # A leading "./" keeps a name starting with "-" from reading as an option.
        return "." if relative == "." else f"./{relative}"

    def _exclusions(self, grep: bool) -> list[str]:
        if grep:
            args = ["--exclude-dir=.git"]
            for pattern in sorted(self.workspace.protected):
                args += [f"--exclude={pattern}", f"--exclude-dir={pattern}"]
            return args
        args = ["(", "-name", ".git"]
        for pattern in sorted(self.workspace.protected):
            args += ["-o", "-iname", pattern]
        return [*args, ")", "-prune", "-o"]

    async def _run(self, program: str, args: list[str]) -> ProcessResult | SearchResponse:
        binary = await anyio.to_thread.run_sync(self.binaries.find, program)
        if binary is None:
            return _failure(f"{program} is not installed (not found on PATH); use bash instead.")
        try:
            return await run_process(
                [binary, *args],
                cwd=self.workspace.root,
                timeout=TIMEOUT_SECONDS,
                max_bytes=_OUTPUT_CAP,
                announce_truncation=False,
                isolation=self.isolation,
            )
        except LaunchError as exc:
            return _failure(f"{exc.message} The search could not run.")

    def _finish(
        self, results: list[str], limit: int, noun: str, cut: bool, program: str
    ) -> SearchResponse:
        shown = results[:limit]
        lines = list(shown)
        if len(results) > limit:
            lines.append(
                f"[showing {limit} of {len(results)} {noun}; narrow the search or raise "
                f"max_results (at most {MAX_RESULTS})]"
            )
        if cut:
            lines.append(
                f"[{program} printed more than {_OUTPUT_CAP:,} bytes; the total counts only "
                f"what fitted; narrow the search]"
            )
        if not results:
            lines.append(f"No {noun} found.")
        return SearchResponse(
            success=True,
            content="\n".join(lines),
            count=len(shown),
            total=len(results),
            truncated=len(results) > limit or cut,
        )

    def _error(self, program: str, result: ProcessResult) -> SearchResponse | None:
        if result.timed_out:
            return _failure(
                f"{program} did not finish within {TIMEOUT_SECONDS:.0f} s; search a smaller "
                f"path or a more specific pattern."
            )
        ok = (0, 1) if program == "grep" else (0,)
        if result.returncode not in ok:
            detail = result.stderr.strip()[:_STDERR_CAP] or "no message"
            return _failure(f"{program} failed (exit {result.returncode}): {detail}")
        return None

    async def _grep(self, request: SearchRequest, target: str) -> SearchResponse:
        args = ["-rnHIE", "-Z", "--color=never"]
        if request.include is not None:
            args.append(f"--include={request.include}")
        # After --include: when both match, grep obeys the last one given.
        args += [*self._exclusions(grep=True), "-e", request.pattern, "--", target]
        result = await self._run("grep", args)
        if isinstance(result, SearchResponse):
            return result
        error = self._error("grep", result)
        if error is not None:
            return error
        matches: list[tuple[str, int, str]] = []
        for record in _records(result, "\n"):
            path, nul, rest = record.partition("\0")
            number, colon, text = rest.partition(":")
            if not (nul and colon and number.isdigit()):
                continue
            relative = _strip_dot(path)
            if not self.workspace.is_hidden(relative):
                matches.append((relative, int(number), text))
        matches.sort(key=lambda match: (match[0], match[1]))
        rows = [f"{path}:{number}:{_cut(text)}" for path, number, text in matches]
        limit = request.max_results or DEFAULT_GREP_RESULTS
        return self._finish(rows, limit, "matches", result.stdout_truncated, "grep")

    async def _find(self, request: SearchRequest, target: str) -> SearchResponse:
        if "/" in request.pattern:
            return _failure(
                "find matches names, not paths: give a glob without '/' as pattern and put "
                "the directory in path (e.g. pattern='*.py', path='src')."
            )
        args = [target, "-mindepth", "1", *self._exclusions(grep=False)]
        args += ["-name", request.pattern, "!", "-type", "l", "-print0"]
        result = await self._run("find", args)
        if isinstance(result, SearchResponse):
            return result
        error = self._error("find", result)
        if error is not None:
            return error
        found = sorted(
            relative
            for relative in map(_strip_dot, _records(result, "\0"))
            if not self.workspace.is_hidden(relative)
        )
        limit = request.max_results or DEFAULT_FIND_RESULTS
        shown = await anyio.to_thread.run_sync(self._mark_dirs, found[:limit])
        return self._finish(shown + found[limit:], limit, "files", result.stdout_truncated, "find")

    def _mark_dirs(self, paths: list[str]) -> list[str]:
        root = self.workspace.root
        return [f"{p}/" if os.path.isdir(root / p) else p for p in paths]

    async def __call__(self, request: SearchRequest) -> SearchResponse:
        if request.action == "find" and request.include is not None:
            return _failure("include applies to grep only; for find put the glob in pattern.")
        try:
            target = await anyio.to_thread.run_sync(self._target, request.path)
        except PathRefused as exc:
            return _failure(exc.message)
        if request.action == "grep":
            return await self._grep(request, target)
        return await self._find(request, target)


def search_tool(
    *,
    workspace_root: str | os.PathLike[str] | None = None,
    protected_names: Iterable[str] | None = None,
    isolation: str | Isolation = "none",
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
        _binaries: private test seam: where ``grep`` and ``find`` are looked
            up (the running environment, then PATH, by default).

    Returns:
        The ``search`` Tool (safe to share: it is bound to no branch).

    Raises:
        ValueError: the workspace root is not a directory.
        TypeError: an option of the wrong type.
        ConfigurationError: the requested isolation cannot work here.
    """
    binaries = finder_or_default(_binaries)
    workspace = Workspace.at(workspace_root, protected=protected_names)
    confinement = workspace_isolation(isolation, workspace.root)
    return Tool(
        name="search",
        description=confinement.annotate(_DESCRIPTION),
        request_model=SearchRequest,
        handler=_SearchHandler(workspace, binaries, confinement),
    )

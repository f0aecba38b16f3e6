"""The ``ast_search`` tool: structural code search with ast-grep.

Decisions:

* The binary is ``ast-grep`` (PyPI ``ast-grep-cli``), looked up in the running
  environment first, then PATH (`lionfactory._os.binaries`). ``sg`` is accepted
  too, but only when its ``--version`` says ast-grep: on Linux
  ``/usr/bin/sg`` is the unrelated "execute as another group" command. Every
  candidate is verified at call time (one short process), so installing or
  removing ast-grep takes effect without rebuilding the tool. None found is
  ``unavailable`` with an install hint.
* It runs ``ast-grep run --pattern=... --lang ... --json=stream`` from the
  workspace root with a 30-second timeout; both the stream and the array
  JSON forms are parsed. Exit 0 is matches, exit 1 with no output is no
  match (ast-grep's warnings, such as a pattern that did not parse, go into
  the summary); anything else, a timeout or a launch failure is ``error``.
* What is searched is the project: every match is checked against the
  project's ignore rules (`lionfactory._os.project`, the matcher search and
  list_dir use), because ast-grep applies ``.gitignore`` only inside a git
  repository. Hidden files are searched (``--no-ignore=hidden``), as search
  does; ``.git`` and protected names never are. ``include_ignored`` turns
  the rules off (and ast-grep's own). The search path is
  contained in the workspace before anything starts.
* Matches are sorted by file, line and column (ast-grep searches in
  parallel, so its own order varies). ``line`` and ``col`` are one-based;
  ``col`` counts characters. ``max_results`` is 1-500 (default 50);
  ``total`` counts the matches before the cap.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
import attrs
from pydantic import Field

from lionfactory._os.binaries import BinaryFinder, HelperFailure, run_helper
from lionfactory._os.environment import EnvPolicy
from lionfactory._os.global_excludes import project_view
from lionfactory._os.isolation import Isolation
from lionfactory._os.process import LaunchError, ProcessResult, run_process
from lionfactory._os.project import ProjectView
from lionfactory._os.workspace import PathRefused, Workspace
from lionfactory._tool import Tool
from lionfactory.tools._helper import (
    HelperReport,
    HelperSpec,
    count,
    helper_tool,
    left_out_ignored,
    not_installed,
)
from lionfactory.tools._models import ToolModel

__all__ = ["AstSearchMatch", "AstSearchRequest", "AstSearchResponse", "ast_search_tool"]

TIMEOUT_SECONDS = 30.0
DEFAULT_RESULTS = 50
MAX_RESULTS = 500

_VERSION_TIMEOUT = 10.0
_ALL_IGNORES = ("hidden", "dot", "exclude", "global", "parent", "vcs")
_OUTPUT_CAP = 16_000_000
_STDERR_CAP = 300
_TEXT_CAP = 500

Language = Literal["python", "rust", "typescript", "javascript", "go", "c", "cpp"]

_DESCRIPTION = f"""\
Search code by syntax tree with ast-grep: the pattern is code with
metavariables, matched structurally (whitespace and formatting do not matter).
$NAME matches one node (print($A) matches print(x) but not print(a, b)); $$$NAME
matches any number of nodes (print($$$ARGS) matches every call of print).
`lang` picks the language of the pattern and of the files searched. `path` is a
directory or file relative to the workspace root (default "."). Files ignored by
.gitignore, .ignore or git's exclude files are skipped unless include_ignored=true.
At most `max_results` matches are returned (default {DEFAULT_RESULTS}, at most
{MAX_RESULTS}); `total` says how many there were.
status is "matches", "ok" (no match), "unavailable" (ast-grep is not installed)
or "error" (see summary)."""


class AstSearchRequest(ToolModel):
    """Arguments of one ``ast_search`` call."""

    pattern: str = Field(
        min_length=1,
        description="Code to match, with metavariables: e.g. 'print($A)' or "
        "'def $NAME($$$PARAMS): $$$BODY'.",
    )
    path: str = Field(
        default=".",
        description="Directory or file to search, relative to the workspace root (default '.').",
    )
    lang: Language = Field(default="python", description="Language of the pattern and files.")
    include_ignored: bool = Field(
        default=False,
        description=(
            "Also search files that .gitignore, .ignore or git's exclude files ignore "
            "(virtualenvs, node_modules, build output). Default false."
        ),
    )
    max_results: int = Field(
        default=DEFAULT_RESULTS,
        ge=1,
        le=MAX_RESULTS,
        description=f"Most matches to return (default {DEFAULT_RESULTS}, at most {MAX_RESULTS}).",
    )


class AstSearchMatch(ToolModel):
    """One structural match."""

    file: str = Field(description="The file, relative to the workspace root.")
    line: int = Field(description="One-based line where the match starts.")
    col: int = Field(description="One-based column (in characters) where it starts.")
    text: str = Field(description="The matched code (long matches are cut).")


class AstSearchResponse(HelperReport, ToolModel):
    """The outcome of one ``ast_search`` call."""

    status: Literal["ok", "matches", "unavailable", "error"] = Field(
        description="'matches': see the list; 'ok': nothing matched; 'unavailable': "
        "ast-grep is not installed; 'error': the search could not run (see summary)."
    )
    matches: list[AstSearchMatch] = Field(
        default_factory=list, description="The matches, at most max_results of them."
    )
    summary: str = Field(default="", description="One or two sentences on the outcome.")
    total: int = Field(default=0, description="How many matches there were before the cap.")
    truncated: bool = Field(
        default=False, description="True when some matches were left out (see total)."
    )


def _error(summary: str) -> AstSearchResponse:
    return AstSearchResponse(status="error", summary=summary)


def _entries(stdout: str, cut: bool) -> list[Any]:
    """Parse ast-grep's JSON: an array, or one object per line (the last may be cut)."""
    text = stdout.strip()
    if not text:
        return []
    if text.startswith("["):
        parsed = json.loads(text)
        if not isinstance(parsed, list):
            raise TypeError(f"expected a JSON array, got {type(parsed).__name__}")
        return parsed
    lines = [line for line in text.splitlines() if line.strip()]
    if cut:
        lines = lines[:-1]
    return [json.loads(line) for line in lines]


async def _is_ast_grep(binary: str, cwd: Path, isolation: Isolation | None) -> bool:
    try:
        result = await run_process(
            [binary, "--version"], cwd=cwd, timeout=_VERSION_TIMEOUT, isolation=isolation
        )
    except LaunchError:
        return False
    return result.returncode == 0 and "ast-grep" in (result.stdout + result.stderr).lower()


@attrs.frozen
class _AstSearchHandler:
    workspace: Workspace
    binaries: BinaryFinder
    isolation: Isolation | None = None

    def _candidates(self) -> list[str]:
        return self.binaries.candidates("ast-grep") + self.binaries.candidates("sg")

    async def _binary(self) -> str | None:
        for candidate in await anyio.to_thread.run_sync(self._candidates):
            if await _is_ast_grep(candidate, self.workspace.root, self.isolation):
                return candidate
        return None

    def _match(
        self, entry: dict[str, Any], view: ProjectView, target: str
    ) -> AstSearchMatch | Literal["ignored"] | None:
        """The match, or "ignored" (the project's rules skip its file), or None (never shown)."""
        start = entry.get("range", {}).get("start", {})
        path = Path(os.path.normpath(self.workspace.root / str(entry.get("file", ""))))
        if not self.workspace.contains(path):
            return None
        relative = self.workspace.relative(path)
        if view.hidden(relative):
            return None
        if not view.visible(relative, start=target):
            return "ignored"
        text = str(entry.get("text", ""))
        if len(text) > _TEXT_CAP:
            text = text[:_TEXT_CAP] + "...[cut]"
        return AstSearchMatch(
            file=relative,
            line=int(start.get("line", 0)) + 1,
            col=int(start.get("column", 0)) + 1,
            text=text,
        )

    def _response(
        self, result: ProcessResult, limit: int, view: ProjectView, target: str
    ) -> AstSearchResponse:
        stderr = result.stderr.strip()[:_STDERR_CAP]
        try:
            entries = _entries(result.stdout, result.stdout_truncated)
            found = [self._match(entry, view, target) for entry in entries]
        except (ValueError, TypeError, AttributeError) as exc:
            return _error(f"ast-grep printed output that is not its JSON report ({exc}).")
        matches = sorted(
            (m for m in found if isinstance(m, AstSearchMatch)),
            key=lambda m: (m.file, m.line, m.col),
        )
        ignored = sum(m == "ignored" for m in found)
        skipped = left_out_ignored(ignored, "match", "matches")
        if not matches:
            summary = "No matches." + skipped
            if stderr:
                summary += f" ast-grep said: {stderr}"
            return AstSearchResponse(status="ok", summary=summary)
        shown = matches[:limit]
        files = len({m.file for m in matches})
        summary = f"{count(len(matches), 'match', 'matches')} in {count(files, 'file', 'files')}."
        if len(shown) < len(matches):
            summary += f" Showing the first {len(shown)}; raise max_results to see more."
        if result.stdout_truncated:
            summary += f" ast-grep printed more than {_OUTPUT_CAP:,} bytes; total is a lower bound."
        summary += skipped
        return AstSearchResponse(
            status="matches",
            matches=shown,
            summary=summary,
            total=len(matches),
            truncated=len(shown) < len(matches) or result.stdout_truncated,
        )

    async def __call__(self, request: AstSearchRequest) -> AstSearchResponse:
        try:
            target = await anyio.to_thread.run_sync(self.workspace.search_target, request.path)
        except PathRefused as exc:
            return _error(exc.message)
        binary = await self._binary()
        if binary is None:
            return AstSearchResponse(
                status="unavailable",
                summary=not_installed("ast-grep", "ast-grep-cli"),
            )
        view = await project_view(
            self.workspace, self.binaries, include_ignored=request.include_ignored
        )
        argv = [binary, "run", f"--pattern={request.pattern}", "--lang", request.lang]
        # Hidden files (.github/...) are project content here as in search;
        # ast-grep's own ignore handling is a first cut, the project's rules
        # decide (it applies .gitignore only inside a git repository).
        kinds = _ALL_IGNORES if request.include_ignored else ("hidden",)
        argv += [f"--no-ignore={kind}" for kind in kinds]
        # "./" keeps a name starting with "-" from reading as an option.
        argv += ["--json=stream", "--", "." if target == "." else f"./{target}"]
        result = await run_helper(
            argv,
            program="ast-grep",
            cwd=self.workspace.root,
            timeout=TIMEOUT_SECONDS,
            max_bytes=_OUTPUT_CAP,
            isolation=self.isolation,
            smaller="search a smaller path",
            # Exit 1 means "no match" only when nothing was printed.
            failed=lambda run: (
                run.returncode not in (0, 1) or (run.returncode == 1 and bool(run.stdout.strip()))
            ),
            stderr=lambda text: text.strip()[:_STDERR_CAP],
        )
        if isinstance(result, HelperFailure):
            return _error(result.message)
        return await anyio.to_thread.run_sync(
            self._response, result, request.max_results, view, target
        )


_SPEC = HelperSpec(
    name="ast_search",
    title="Search code by syntax",
    description=_DESCRIPTION,
    handler=_AstSearchHandler,
)


def ast_search_tool(
    *,
    workspace_root: str | os.PathLike[str] | None = None,
    protected_names: Iterable[str] | None = None,
    isolation: str | Isolation = "none",
    env_policy: EnvPolicy | None = None,
    _binaries: BinaryFinder | None = None,
) -> Tool:
    """Build the ``ast_search`` tool.

    Args:
        workspace_root: the directory searched and every path must stay
            inside; the current directory when None. Resolved once, now.
        protected_names: fnmatch patterns of names never searched; the
            workspace defaults when None.
        isolation: how the helper program is confined: ``"none"``, ``"auto"``,
            ``"bwrap"``, ``"landlock"``, or an inherited `Isolation` (see
            `bash_tool`; the network is always ``"none"``).
        _binaries: private test seam: where ``ast-grep`` (and ``sg``) are
            looked up (the running environment, then PATH, by default).
        env_policy: which inherited environment variables the helper program
            gets (`EnvPolicy`); None: all of them.

    Returns:
        The ``ast_search`` Tool (safe to share: it is bound to no branch).

    Raises:
        ValueError: the workspace root is not a directory.
        TypeError: an option of the wrong type.
        ConfigurationError: the requested isolation cannot work here.
    """
    return helper_tool(_SPEC, workspace_root, protected_names, isolation, env_policy, _binaries)

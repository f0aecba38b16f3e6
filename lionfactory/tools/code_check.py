"""The ``code_check`` tool: lint Python with ruff and return structured diagnostics.

Decisions (ADR-0013 D2 "Diagnostics", DESIGN §9):

* Only ruff. It runs as ``ruff check --output-format=json --no-cache
  --no-fix`` from the workspace root, so the workspace's own ruff
  configuration applies; ``--no-fix`` because a configuration with
  ``fix = true`` would otherwise let a *check* rewrite files.
* Empty ``paths`` checks the workspace root (the baseline scanned the
  process's current directory). Every path is contained in the workspace
  before ruff starts.
* ruff is looked up in the running environment first, then PATH
  (`lionfactory._binaries`). Absent, the status is ``unavailable`` with an
  install hint; a launch failure, a timeout (30 s) or an unexpected exit is
  ``error`` with at most 300 characters of stderr. Exit 2 with JSON on stdout
  is still parsed, as in the baseline.
* ``max_diagnostics`` (1-500, default 50) caps the list; ``total`` counts
  the diagnostics before the cap and ``truncated`` says when some were left out.
* Files are reported relative to the workspace root; line and col are
  one-based, as ruff reports them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
import attrs
from pydantic import BaseModel, ConfigDict, Field

from lionfactory._binaries import BinaryFinder, finder_or_default
from lionfactory._isolation import Isolation, workspace_isolation
from lionfactory._process import LaunchError, run_process
from lionfactory._tool import Tool
from lionfactory._workspace import PathRefused, Workspace

__all__ = ["CodeCheckRequest", "CodeCheckResponse", "CodeDiagnostic", "code_check_tool"]

TIMEOUT_SECONDS = 30.0
DEFAULT_DIAGNOSTICS = 50
MAX_DIAGNOSTICS = 500
INSTALL_HINT = "pip install 'lionfactory[code]'"

# The JSON is parsed, not shown, so it may exceed the usual 100,000 bytes; a
# cut array cannot be parsed and is reported as an error.
_OUTPUT_CAP = 16_000_000
_STDERR_CAP = 300

_DESCRIPTION = f"""\
Lint Python files with ruff and return structured diagnostics (rule code,
message, one-based line and column, whether ruff can fix it automatically).
`paths` are files or directories relative to the workspace root; an empty list
checks the whole workspace. The workspace's own ruff configuration applies.
Nothing is modified. At most `max_diagnostics` diagnostics are returned (default
{DEFAULT_DIAGNOSTICS}, at most {MAX_DIAGNOSTICS}); `total` says how many there were.
status is "ok" (no findings), "diagnostics", "unavailable" (ruff is not installed)
or "error" (see summary)."""


class CodeDiagnostic(BaseModel):
    """One finding of the linter."""

    model_config = ConfigDict(extra="forbid")

    file: str = Field(description="The file, relative to the workspace root.")
    line: int = Field(description="One-based line where the finding starts.")
    col: int = Field(description="One-based column where the finding starts.")
    end_line: int | None = Field(default=None, description="One-based line where it ends.")
    end_col: int | None = Field(default=None, description="One-based column where it ends.")
    severity: Literal["error", "warning", "info"] = Field(
        default="warning", description="How serious ruff considers it."
    )
    code: str = Field(default="", description="The rule code, e.g. 'F401'.")
    message: str = Field(description="What is wrong.")
    source: str = Field(default="ruff", description="The tool that reported it.")
    fixable: bool = Field(
        default=False, description="Whether `ruff check --fix` can fix it automatically."
    )


class CodeCheckRequest(BaseModel):
    """Arguments of one ``code_check`` call."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(
        default_factory=list,
        description=(
            "Files or directories to check, relative to the workspace root; "
            "empty (the default) checks the whole workspace."
        ),
    )
    tool: Literal["ruff"] = Field(default="ruff", description="The checker; only 'ruff'.")
    max_diagnostics: int = Field(
        default=DEFAULT_DIAGNOSTICS,
        ge=1,
        le=MAX_DIAGNOSTICS,
        description=f"Most diagnostics to return (default {DEFAULT_DIAGNOSTICS}, "
        f"at most {MAX_DIAGNOSTICS}).",
    )


class CodeCheckResponse(BaseModel):
    """The outcome of one ``code_check`` call."""

    model_config = ConfigDict(extra="forbid")

    status: Literal["ok", "diagnostics", "unavailable", "error"] = Field(
        description="'ok': no findings; 'diagnostics': see the list; 'unavailable': ruff is "
        "not installed; 'error': the check could not run (see summary)."
    )
    diagnostics: list[CodeDiagnostic] = Field(
        default_factory=list, description="The findings, at most max_diagnostics of them."
    )
    summary: str = Field(default="", description="One or two sentences on the outcome.")
    tool: str = Field(default="ruff", description="The checker that ran.")
    total: int = Field(default=0, description="How many diagnostics there were before the cap.")
    truncated: bool = Field(
        default=False, description="True when some diagnostics were left out (see total)."
    )


def _error(summary: str) -> CodeCheckResponse:
    return CodeCheckResponse(status="error", summary=summary)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _location(entry: dict[str, Any], key: str) -> tuple[int | None, int | None]:
    location = entry.get(key) or {}
    return location.get("row"), location.get("column")


@attrs.frozen
class _CodeCheckHandler:
    workspace: Workspace
    binaries: BinaryFinder
    isolation: Isolation | None = None

    def _targets(self, paths: list[str]) -> list[str]:
        targets = []
        for path in paths or ["."]:
            resolved = self.workspace.resolve(path)
            if not resolved.exists():
                raise PathRefused(path, f"{path!r} does not exist in the workspace.")
            relative = self.workspace.relative(resolved)
            # "./" keeps a name starting with "-" from reading as an option.
            targets.append("." if relative == "." else f"./{relative}")
        return targets

    def _relative(self, filename: str) -> str:
        path = Path(filename)
        if not path.is_absolute():
            path = self.workspace.root / path
        path = Path(os.path.normpath(path))
        if self.workspace.contains(path):
            return self.workspace.relative(path)
        return filename

    def _diagnostic(self, entry: dict[str, Any]) -> CodeDiagnostic:
        line, col = _location(entry, "location")
        end_line, end_col = _location(entry, "end_location")
        code = entry.get("code") or ""
        severity = entry.get("severity")
        if severity not in ("error", "warning", "info"):
            # Older ruff has no severity; a syntax error has no code (or
            # "invalid-syntax") and is the only thing worse than a lint.
            severity = "error" if code in ("", "invalid-syntax") else "warning"
        return CodeDiagnostic(
            file=self._relative(str(entry.get("filename", ""))),
            line=line or 1,
            col=col or 1,
            end_line=end_line,
            end_col=end_col,
            severity=severity,
            code=code,
            message=str(entry.get("message", "")),
            fixable=entry.get("fix") is not None,
        )

    async def __call__(self, request: CodeCheckRequest) -> CodeCheckResponse:
        try:
            targets = await anyio.to_thread.run_sync(self._targets, request.paths)
        except PathRefused as exc:
            return _error(exc.message)
        ruff = await anyio.to_thread.run_sync(self.binaries.find, "ruff")
        if ruff is None:
            return CodeCheckResponse(
                status="unavailable",
                summary=f"ruff is not installed; install it with {INSTALL_HINT} "
                f"(or pip install ruff).",
            )
        argv = [ruff, "check", "--output-format=json", "--no-cache", "--no-fix", "--", *targets]
        try:
            result = await run_process(
                argv,
                cwd=self.workspace.root,
                timeout=TIMEOUT_SECONDS,
                max_bytes=_OUTPUT_CAP,
                announce_truncation=False,
                isolation=self.isolation,
            )
        except LaunchError as exc:
            return _error(exc.message)
        if result.timed_out:
            return _error(f"ruff did not finish within {TIMEOUT_SECONDS:.0f} s; check fewer paths.")
        stderr = result.stderr.strip()[:_STDERR_CAP]
        if result.returncode not in (0, 1) and not result.stdout.strip():
            return _error(f"ruff failed (exit {result.returncode}): {stderr or 'no message'}")
        try:
            entries = json.loads(result.stdout)
            if not isinstance(entries, list):
                raise TypeError(type(entries).__name__)
            diagnostics = [self._diagnostic(entry) for entry in entries]
        except (ValueError, TypeError, AttributeError) as exc:
            return _error(f"ruff printed output that is not its JSON report ({exc}): {stderr}")
        diagnostics = [d for d in diagnostics if not self.workspace.is_hidden(d.file)]
        if not diagnostics:
            return CodeCheckResponse(status="ok", summary="ruff found no problems.")
        shown = diagnostics[: request.max_diagnostics]
        files = len({d.file for d in diagnostics})
        fixable = sum(d.fixable for d in diagnostics)
        summary = f"ruff found {_count(len(diagnostics), 'diagnostic')} in {_count(files, 'file')}"
        summary += f" ({fixable} fixable with `ruff check --fix`)." if fixable else "."
        if len(shown) < len(diagnostics):
            summary += f" Showing the first {len(shown)}; raise max_diagnostics to see more."
        return CodeCheckResponse(
            status="diagnostics",
            diagnostics=shown,
            summary=summary,
            total=len(diagnostics),
            truncated=len(shown) < len(diagnostics),
        )


def code_check_tool(
    *,
    workspace_root: str | os.PathLike[str] | None = None,
    protected_names: Iterable[str] | None = None,
    isolation: str | Isolation = "none",
    _binaries: BinaryFinder | None = None,
) -> Tool:
    """Build the ``code_check`` tool.

    Args:
        workspace_root: the directory ruff runs in and every path must stay
            inside; the current directory when None. Resolved once, now.
        protected_names: fnmatch patterns of names never checked; the
            workspace defaults when None.
        isolation: how the helper program is confined: ``"none"``, ``"auto"``,
            ``"bwrap"``, ``"landlock"``, or an inherited `Isolation` (see
            `bash_tool`; the network is always ``"none"``).
        _binaries: private test seam: where ``ruff`` is looked up (the
            running environment, then PATH, by default).

    Returns:
        The ``code_check`` Tool (safe to share: it is bound to no branch).

    Raises:
        ValueError: the workspace root is not a directory.
        TypeError: an option of the wrong type.
        ConfigurationError: the requested isolation cannot work here.
    """
    binaries = finder_or_default(_binaries)
    workspace = Workspace.at(workspace_root, protected=protected_names)
    confinement = workspace_isolation(isolation, workspace.root)
    return Tool(
        name="code_check",
        description=confinement.annotate(_DESCRIPTION),
        request_model=CodeCheckRequest,
        handler=_CodeCheckHandler(workspace, binaries, confinement),
    )

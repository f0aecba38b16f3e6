"""The ``code_check`` tool: lint Python with ruff and return structured diagnostics.

Decisions (structured diagnostics a model can act on, one linter):

* Only ruff. It runs as ``ruff check --output-format=json --no-cache
  --no-fix`` from the workspace root, so the workspace's own ruff
  configuration applies; ``--no-fix`` because a configuration with
  ``fix = true`` would otherwise let a *check* rewrite files.
* Only project content is reported: ruff's own file discovery runs (the
  workspace's ruff configuration keeps its say), then every diagnostic is
  checked against the project's ignore rules (`lionfactory._os.project`), the
  same matcher search and list_dir use. ``include_ignored`` turns both off.
* Empty ``paths`` checks the workspace root (the baseline scanned the
  process's current directory). Every path is contained in the workspace
  before ruff starts.
* ruff is looked up in the running environment first, then PATH
  (`lionfactory._os.binaries`). Absent, the status is ``unavailable`` with an
  install hint; a launch failure, a timeout (30 s) or an unexpected exit is
  ``error`` with at most 300 characters of stderr. Exit 2 with JSON on stdout
  is still parsed, as in the baseline.
* ``max_diagnostics`` (1-500, default 50) caps the list; ``total`` counts
  the diagnostics before the cap and ``truncated`` says when some were left out.
* Files are reported relative to the workspace root; line and col are
  one-based, as ruff reports them.
* ruff's configuration is workspace content the model can write, and ruff
  prints the text of a configuration it cannot parse. So before ruff runs,
  every ruff configuration file under the checked paths and above them up
  to the root (``pyproject.toml``, ``ruff.toml``, ``.ruff.toml``) is read,
  and its ``extend`` chain followed: a file (or a link) that leads outside
  the workspace or to a protected name, a ``~`` or ``$VARIABLE`` in the
  path, or a file that is not TOML, refuses the check without running ruff.
  ruff's stderr is never passed through whole: only its ``error:`` and
  ``Cause:`` lines, cut short, and none that quotes a line of a file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
import attrs
from pydantic import Field

from lionfactory._echo import echo, shorten
from lionfactory._os.binaries import BinaryFinder, HelperFailure, run_helper
from lionfactory._os.environment import EnvPolicy
from lionfactory._os.global_excludes import project_view
from lionfactory._os.isolation import Isolation
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

__all__ = ["CodeCheckRequest", "CodeCheckResponse", "CodeDiagnostic", "code_check_tool"]

TIMEOUT_SECONDS = 30.0
DEFAULT_DIAGNOSTICS = 50
MAX_DIAGNOSTICS = 500

# The JSON is parsed, not shown, so it may exceed the usual 100,000 bytes; a
# cut array cannot be parsed and is reported as an error.
_OUTPUT_CAP = 16_000_000
_STDERR_CAP = 300
_CONFIG_NAMES = ("pyproject.toml", "ruff.toml", ".ruff.toml")
_MAX_EXTEND_DEPTH = 10
# ruff's own message lines; a line quoting a file ("1 | KEY=value") or any
# other text is dropped.
_STDERR_LINE = re.compile(r"^\s*(error|warning|ruff failed|Cause)\b")

_DESCRIPTION = f"""\
Lint Python files with ruff and return structured diagnostics (rule code,
message, one-based line and column, whether ruff can fix it automatically).
`paths` are files or directories relative to the workspace root; an empty list
checks the whole workspace. The workspace's own ruff configuration applies.
Files ignored by .gitignore, .ignore or git's exclude files are not checked unless
include_ignored=true.
Nothing is modified. At most `max_diagnostics` diagnostics are returned (default
{DEFAULT_DIAGNOSTICS}, at most {MAX_DIAGNOSTICS}); `total` says how many there were.
status is "ok" (no findings), "diagnostics", "unavailable" (ruff is not installed)
or "error" (see summary)."""


class CodeDiagnostic(ToolModel):
    """One finding of the linter."""

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


class CodeCheckRequest(ToolModel):
    """Arguments of one ``code_check`` call."""

    paths: list[str] = Field(
        default_factory=list,
        description=(
            "Files or directories to check, relative to the workspace root; "
            "empty (the default) checks the whole workspace."
        ),
    )
    tool: Literal["ruff"] = Field(default="ruff", description="The checker; only 'ruff'.")
    include_ignored: bool = Field(
        default=False,
        description=(
            "Also check files that .gitignore, .ignore or git's exclude files ignore, and "
            "those ruff excludes by default (virtualenvs, node_modules, build output). "
            "Default false."
        ),
    )
    max_diagnostics: int = Field(
        default=DEFAULT_DIAGNOSTICS,
        ge=1,
        le=MAX_DIAGNOSTICS,
        description=f"Most diagnostics to return (default {DEFAULT_DIAGNOSTICS}, "
        f"at most {MAX_DIAGNOSTICS}).",
    )


class CodeCheckResponse(HelperReport, ToolModel):
    """The outcome of one ``code_check`` call."""

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


def _location(entry: dict[str, Any], key: str) -> tuple[int | None, int | None]:
    location = entry.get(key) or {}
    return location.get("row"), location.get("column")


def _ruff_stderr(stderr: str) -> str:
    """The explanation from ruff's stderr, without any text it quoted from a file."""
    kept = [shorten(line.strip(), 160) for line in stderr.splitlines() if _STDERR_LINE.match(line)]
    return shorten(" ".join(kept), _STDERR_CAP)


def _config_files(workspace: Workspace, targets: list[Path]) -> Iterator[Path]:
    """Every ruff configuration file ruff could apply to `targets`, inside the workspace."""
    seen: set[Path] = set()
    for target in targets:
        directory = target if target.is_dir() else target.parent
        for folder in (directory, *directory.parents):
            if not workspace.contains(folder):
                break
            for name in _CONFIG_NAMES:
                if (folder / name) not in seen and os.path.lexists(folder / name):
                    seen.add(folder / name)
                    yield folder / name
        if target.is_dir():
            for path in _configs_below(target):
                if path not in seen:
                    seen.add(path)
                    yield path


def _configs_below(top: Path) -> Iterator[Path]:
    """The ruff configuration files under `top`, as a top-down `os.walk` finds them.

    Links are listed, never entered, and ``.git`` is skipped. An explicit
    stack instead of `os.walk`, which recurses once a directory on Python
    3.11: a command can make a tree deeper than the recursion limit, and the
    check of it must not end in a RecursionError.
    """
    stack = [os.fspath(top)]
    while stack:
        directory = stack.pop()
        try:
            with os.scandir(directory) as scan:
                entries = list(scan)
        except OSError:
            continue  # gone or unreadable, as os.walk skips it
        files = set()
        below = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if not is_dir:
                files.add(entry.name)
            elif entry.name != ".git" and not entry.is_symlink():
                below.append(entry.path)
        for name in _CONFIG_NAMES:
            if name in files:
                yield Path(directory) / name
        stack.extend(reversed(below))  # the first subdirectory is walked next


def _extend_of(path: Path, data: dict[str, Any]) -> Any:
    if path.name == "pyproject.toml":
        tool = data.get("tool")
        ruff = tool.get("ruff") if isinstance(tool, dict) else None
        return ruff.get("extend") if isinstance(ruff, dict) else None
    return data.get("extend")


def _config_problem(workspace: Workspace, config: Path) -> str | None:
    """Why ruff must not read `config` and its ``extend`` chain, or None."""
    import tomllib  # only a workspace with a ruff configuration needs the parser

    current, shown = config, workspace.relative(config)
    for _ in range(_MAX_EXTEND_DEPTH):
        real = Path(os.path.realpath(current))
        if not workspace.contains(real) or workspace.is_hidden(workspace.relative(real)):
            return (
                f"the ruff configuration {shown} leads outside the workspace or to a protected "
                f"file; ruff was not run. Point it at a configuration inside the workspace."
            )
        try:
            data = tomllib.loads(real.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            return (
                f"the ruff configuration {shown} is not a readable TOML file; ruff was not run. "
                f"Fix or remove it."
            )
        extend = _extend_of(real, data)
        if extend is None:
            return None
        if not isinstance(extend, str) or not extend.strip() or any(c in extend for c in "~$"):
            return (
                f"the ruff configuration {shown} extends {echo(extend, 80)}, which cannot be "
                f"checked to stay in the workspace (no ~ or $VARIABLES); ruff was not run."
            )
        current = real.parent / extend
        shown = f"{shown} -> {echo(extend, 80)}"
    return f"the ruff configuration {shown} extends too many files in a chain; ruff was not run."


@attrs.frozen
class _CodeCheckHandler:
    workspace: Workspace
    binaries: BinaryFinder
    isolation: Isolation | None = None

    def _targets(self, paths: list[str]) -> list[str]:
        """The root-relative paths to check, each contained in the workspace.

        Raises:
            PathRefused: a path outside the workspace or missing, or a ruff
                configuration that would make ruff read outside it.
        """
        targets: list[str] = []
        resolved_targets: list[Path] = []
        for path in paths or ["."]:
            resolved = self.workspace.resolve(path)
            if not resolved.exists():
                raise PathRefused(path, f"{echo(path)} does not exist in the workspace.")
            resolved_targets.append(resolved)
            targets.append(self.workspace.relative(resolved))
        for config in _config_files(self.workspace, resolved_targets):
            problem = _config_problem(self.workspace, config)
            if problem is not None:
                raise PathRefused(config, problem[0].upper() + problem[1:])
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

    def _visible(
        self, view: ProjectView, targets: list[str], diagnostics: list[CodeDiagnostic]
    ) -> tuple[list[CodeDiagnostic], int]:
        """The diagnostics in project files, and how many the ignore rules left out."""
        shown = [d for d in diagnostics if not os.path.isabs(d.file) and not view.hidden(d.file)]
        kept = [d for d in shown if any(view.visible(d.file, start=t) for t in targets)]
        return kept, len(shown) - len(kept)

    async def __call__(self, request: CodeCheckRequest) -> CodeCheckResponse:
        try:
            targets = await anyio.to_thread.run_sync(self._targets, request.paths)
        except PathRefused as exc:
            return _error(exc.message)
        view = await project_view(
            self.workspace, self.binaries, include_ignored=request.include_ignored
        )
        ruff = await anyio.to_thread.run_sync(self.binaries.find, "ruff")
        if ruff is None:
            return CodeCheckResponse(
                status="unavailable",
                summary=not_installed("ruff", "ruff"),
            )
        argv = [ruff, "check", "--output-format=json", "--no-cache", "--no-fix"]
        if request.include_ignored:
            # ruff's default exclusions (.venv, node_modules, build, ...) would
            # still hide what the model asked for; .git stays out.
            argv += ["--no-respect-gitignore", "--exclude=.git"]
        # "./" keeps a name starting with "-" from reading as an option.
        argv += ["--", *("." if t == "." else f"./{t}" for t in targets)]
        result = await run_helper(
            argv,
            program="ruff",
            cwd=self.workspace.root,
            timeout=TIMEOUT_SECONDS,
            max_bytes=_OUTPUT_CAP,
            isolation=self.isolation,
            smaller="check fewer paths",
            # ruff exits 2 on a broken file it still reports: the report counts.
            failed=lambda run: run.returncode not in (0, 1) and not run.stdout.strip(),
            stderr=_ruff_stderr,
        )
        if isinstance(result, HelperFailure):
            return _error(result.message)
        stderr = _ruff_stderr(result.stderr)
        try:
            entries = json.loads(result.stdout)
            if not isinstance(entries, list):
                raise TypeError(type(entries).__name__)
            diagnostics = [self._diagnostic(entry) for entry in entries]
        except (ValueError, TypeError, AttributeError) as exc:
            return _error(f"ruff printed output that is not its JSON report ({exc}): {stderr}")
        # ruff has its own reading of the ignore files (and its own exclusions);
        # what is reported is what the project's rules call project content.
        diagnostics, ignored = await anyio.to_thread.run_sync(
            self._visible, view, targets, diagnostics
        )
        skipped = left_out_ignored(ignored, "diagnostic")
        if not diagnostics:
            return CodeCheckResponse(status="ok", summary="ruff found no problems." + skipped)
        shown = diagnostics[: request.max_diagnostics]
        files = len({d.file for d in diagnostics})
        fixable = sum(d.fixable for d in diagnostics)
        summary = f"ruff found {count(len(diagnostics), 'diagnostic')} in {count(files, 'file')}"
        summary += f" ({fixable} fixable with `ruff check --fix`)." if fixable else "."
        if len(shown) < len(diagnostics):
            summary += f" Showing the first {len(shown)}; raise max_diagnostics to see more."
        summary += skipped
        return CodeCheckResponse(
            status="diagnostics",
            diagnostics=shown,
            summary=summary,
            total=len(diagnostics),
            truncated=len(shown) < len(diagnostics),
        )


_SPEC = HelperSpec(
    name="code_check",
    title="Check code with ruff",
    description=_DESCRIPTION,
    handler=_CodeCheckHandler,
    path_field="paths",
)


def code_check_tool(
    *,
    workspace_root: str | os.PathLike[str] | None = None,
    protected_names: Iterable[str] | None = None,
    isolation: str | Isolation = "none",
    env_policy: EnvPolicy | None = None,
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
        env_policy: which inherited environment variables the helper program
            gets (`EnvPolicy`); None: all of them.

    Returns:
        The ``code_check`` Tool (safe to share: it is bound to no branch).

    Raises:
        ValueError: the workspace root is not a directory.
        TypeError: an option of the wrong type.
        ConfigurationError: the requested isolation cannot work here.
    """
    return helper_tool(_SPEC, workspace_root, protected_names, isolation, env_policy, _binaries)

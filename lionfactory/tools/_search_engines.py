"""The two engines behind the ``search`` tool: ripgrep, and grep plus a Python walk.

Both answer the same two questions with the same rules of what is in the
project (`lionfactory._os.project`): which lines of which files match a regular
expression, and which files exist. The ``search`` handler turns their
answers into the model-facing response, so every difference the model could
see lives here, and a property test compares the engines on generated trees.

* **ripgrep** (``rg``, shipped as a wheel by the ``search`` extra) walks the
  tree with git's ignore rules natively. It runs with ``--no-config`` (a
  user's ``RIPGREP_CONFIG_PATH`` must not change results), ``--hidden``
  (dot-files such as ``.github/`` are project content; ``.git`` and the
  protected names are excluded by override globs, case-insensitively for the
  protected ones), ``--no-require-git`` (``.gitignore`` applies outside a
  repository too) and ``--no-ignore-global`` with the global excludes file
  git names passed as ``--ignore-file`` (git's answer, not ripgrep's own
  reading of two config files). ``grep`` reads ``--null`` lines, and
  ``--json`` events when those are ambiguous (a file name with a newline, a
  binary file's notice); the files and count modes read ``--count --null``
  records; ``find`` lists
  ``rg --files`` and the handler matches names against the glob (a
  ``--glob`` that includes would override the ignore rules in ripgrep, so a
  file-name filter is a ``--type-add`` definition, judged after them).
  ripgrep never follows symlinks unless asked, and is never asked.
* **builtin**, used when ``rg`` is not installed (or when ignore files
  above the project would leak into ripgrep's walk): `ProjectView.walk`
  lists the project's files and ``grep -P`` (Perl syntax, the closest to
  ripgrep's) searches them in batches; a multiline search runs Python's
  ``re`` over the same files instead, since grep is line-based.

Results are sorted by path, then line; paths are relative to the workspace.
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import fnmatch
import functools
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, NamedTuple

import anyio.to_thread
import attrs

from lionfactory._os.binaries import BinaryFinder, HelperFailure, run_helper
from lionfactory._os.isolation import Isolation
from lionfactory._os.process import ProcessResult
from lionfactory._os.project import ProjectView
from lionfactory._os.workspace import Workspace, factor_backups

__all__ = [
    "FILE_TYPES",
    "EngineFailure",
    "Found",
    "GrepQuery",
    "Line",
    "grep_builtin",
    "grep_ripgrep",
    "list_builtin",
    "list_ripgrep",
]

TIMEOUT_SECONDS = 30.0
# The engines' output is parsed, not shown, so it may be far longer than a
# prompt; past this cap the totals become lower bounds.
OUTPUT_CAP = 16_000_000
_STDERR_CAP = 300
_ARGV_BUDGET = 100_000
_BINARY_SNIFF = 8192

Mode = Literal["content", "files_with_matches", "count"]

FILE_TYPES: dict[str, tuple[str, ...]] = {
    "c": ("*.c", "*.h"),
    "cpp": ("*.cpp", "*.cc", "*.cxx", "*.hpp", "*.hh", "*.hxx", "*.h"),
    "css": ("*.css", "*.scss", "*.sass", "*.less"),
    "go": ("*.go",),
    "html": ("*.html", "*.htm"),
    "java": ("*.java",),
    "js": ("*.js", "*.mjs", "*.cjs", "*.jsx"),
    "json": ("*.json",),
    "md": ("*.md", "*.markdown"),
    "py": ("*.py", "*.pyi"),
    "rb": ("*.rb",),
    "rst": ("*.rst",),
    "rust": ("*.rs",),
    "sh": ("*.sh", "*.bash", "*.zsh"),
    "sql": ("*.sql",),
    "toml": ("*.toml",),
    "ts": ("*.ts", "*.tsx", "*.mts", "*.cts"),
    "txt": ("*.txt",),
    "yaml": ("*.yaml", "*.yml"),
}
"""File types for the ``type`` filter: name globs, the same table for both engines."""


class EngineFailure(Exception):
    """The engine could not answer; `message` says why, in words for the model."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@attrs.frozen
class GrepQuery:
    """One content search, as both engines receive it."""

    pattern: str
    target: str  # "." or "./relative": a leading "./" keeps "-x" from reading as an option
    mode: Mode = "content"
    case_insensitive: bool = False
    multiline: bool = False
    before: int = 0
    after: int = 0
    globs: tuple[str, ...] = ()  # file-name globs; empty: every file
    include_ignored: bool = False


class Line(NamedTuple):
    """A matching (or context) line.

    A named tuple rather than an attrs record: a search builds one per
    reported line, thousands a call, and a frozen attrs record costs five
    times as much to create.
    """

    path: str
    number: int
    text: str
    is_match: bool


@attrs.define
class Found:
    """What an engine found.

    Attributes:
        lines: content mode: matching and context lines, sorted.
        counts: files and count modes: matching lines per file.
        files: ``list_*``: the project's files, sorted.
        cut: the engine printed more than `OUTPUT_CAP`; totals are lower bounds.
        engine: ``"ripgrep"`` or ``"builtin"``.
        skipped: ignored paths left out, when the engine counts them.
        warning: a non-fatal complaint of the engine (an unreadable file).
    """

    engine: str
    lines: list[Line] = attrs.Factory(list)
    counts: dict[str, int] = attrs.Factory(dict)
    files: list[str] = attrs.Factory(list)
    cut: bool = False
    skipped: int | None = None
    warning: str | None = None


def _strip_dot(path: str) -> str:
    return path[2:] if path.startswith("./") else path


def _glob_escape(pattern: str) -> str:
    # A protected name is an fnmatch pattern; ripgrep's globs also read
    # braces and commas (alternation) and backslashes, which fnmatch takes
    # literally.
    return re.sub(r"([{},\\])", r"[\1]", pattern)


def _brace(patterns: Iterable[str]) -> str:
    return "{" + ",".join(_glob_escape(p) for p in patterns) + "}"


def _families(patterns: list[str]) -> tuple[list[tuple[list[str], list[str]]], list[str]]:
    """`patterns` as families ``(heads, tails)`` and what no family covers.

    A family is literal heads that share one set of tails, every head and
    every head + tail being in `patterns` (the private-key names: ``id_rsa``,
    ``id_rsa.[!p]*``, ...), so ``{heads}`` and ``{heads}{tails}`` match
    exactly those patterns' names. A family needs two heads or more.
    """
    given = set(patterns)
    literal = [p for p in patterns if not any(c in p for c in "*?[")]
    by_tails: dict[frozenset[str], list[str]] = {}
    for head in literal:
        tails = frozenset(p[len(head) :] for p in given if p != head and p.startswith(head))
        if tails:
            by_tails.setdefault(tails, []).append(head)
    families = []
    covered: set[str] = set()
    for tails, heads in by_tails.items():
        members = set(heads) | {h + t for h in heads for t in tails}
        if len(heads) > 1 and not members & covered:
            families.append((sorted(heads), sorted(tails)))
            covered |= members
    return families, sorted(given - covered)


@functools.lru_cache(maxsize=32)
def _protected_globs(protected: frozenset[str]) -> tuple[str, ...]:
    """The protected names as a few ripgrep override globs.

    Brace alternations, not one ``--iglob`` a name: ripgrep compiles each
    case-insensitive glob into a regular expression, and 440 of them made
    the same walk five to ten times slower. The alternations are also
    factored, which cut compiling the globs, paid by every ripgrep run, from
    6 ms to about 1.5: a base name whose every backup spelling is in the set
    stands once in ``{bases}`` and once in ``{bases}{suffixes}``, as
    `protected_matcher` has it (`factor_backups`; a suffix is literal, so the
    pair matches exactly what the long list does), and the private-key
    families the same way (`_families`). (An empty alternative, ``{,~}``,
    would say each pair in one glob, but ripgrep drops empty alternatives,
    and it refuses nested braces.)
    """
    if not protected:
        return ()
    bases, suffixes, rest = factor_backups(protected)
    groups = [(bases, list(suffixes))] if bases else []
    families, rest = _families(rest)
    globs = []
    for heads, tails in [*groups, *families]:
        globs += [_brace(heads), _brace(heads) + _brace(tails)]
    if rest:
        globs.append(_brace(rest))
    return tuple(f"--iglob=!{glob}" for glob in globs)


def _sort_lines(lines: Iterable[Line]) -> list[Line]:
    unique = {(line.path, line.number): line for line in lines if not line.is_match}
    unique.update({(line.path, line.number): line for line in lines if line.is_match})
    return [unique[key] for key in sorted(unique)]


async def _run(
    binary: str, args: list[str], root: Path, name: str, isolation: Isolation | None
) -> ProcessResult:
    result = await run_helper(
        [binary, *args],
        program=name,
        cwd=root,
        timeout=TIMEOUT_SECONDS,
        max_bytes=OUTPUT_CAP,
        # Neither engine starts a process: ripgrep runs with --no-config and
        # is never given a preprocessor (--pre) or --search-zip, and grep
        # runs none.
        isolation=None if isolation is None else isolation.childless(),
        smaller="search a smaller path or use a more specific pattern",
        # The callers read the exit status themselves: a rejected pattern is
        # told apart from other failures there.
        failed=lambda _: False,
    )
    if isinstance(result, HelperFailure):
        raise EngineFailure(result.message)
    return result


def _records(result: ProcessResult, separator: str) -> list[str]:
    records = result.stdout.split(separator)
    # The last record is empty (output ends with a separator) or a fragment
    # cut by the output cap; neither is a result.
    return records[:-1]


# -- ripgrep -----------------------------------------------------------------------


def _rg_walk_args(workspace: Workspace, view: ProjectView) -> list[str]:
    args = ["--no-config", "--hidden", "--no-require-git", "--no-messages", "--glob=!.git"]
    args += _protected_globs(workspace.protected)
    if view.include_ignored:
        args.append("--no-ignore")
    else:
        args.append("--no-ignore-global")
        if view.global_file is not None:
            args.append(f"--ignore-file={view.global_file}")
    return args


def _type_args(globs: tuple[str, ...]) -> list[str]:
    # A --glob that includes would override the ignore rules (ripgrep gives
    # overrides the last word); a file type is judged after them. A type
    # definition cannot hold ":" (its separator): "?" stands in, and the
    # results are filtered by the exact glob afterwards.
    if not globs:
        return []
    escaped = (glob.replace(":", "?") for glob in globs)
    return [*(f"--type-add=lfselect:{glob}" for glob in escaped), "--type=lfselect"]


def _exactly(found: Found, globs: tuple[str, ...]) -> None:
    """Keep only results whose file name matches one of `globs` (after a ":" stand-in)."""
    if not any(":" in glob for glob in globs):
        return
    found.lines = [line for line in found.lines if _selected(line.path, globs)]
    found.counts = {path: n for path, n in found.counts.items() if _selected(path, globs)}


def _selected(path: str, globs: tuple[str, ...]) -> bool:
    name = path.rpartition("/")[2]
    return any(fnmatch.fnmatchcase(name, glob) for glob in globs)


def _text(field: dict[str, Any] | None) -> str:
    if not field:
        return ""
    if "text" in field:
        return str(field["text"])
    return base64.b64decode(field.get("bytes", "")).decode("utf-8", errors="replace")


def _rg_failure(result: ProcessResult) -> EngineFailure:
    message = result.stderr.strip().removeprefix("rg: ")
    if "regex parse error" in message or "error parsing regex" in message.lower():
        detail = " ".join(message.split())[:_STDERR_CAP]
        return EngineFailure(
            f"The pattern is not a valid regular expression; ripgrep said: {detail}. "
            f"Escape special characters such as ( [ {{ . * + ? with a backslash."
        )
    return EngineFailure(
        f"ripgrep failed (exit {result.returncode}): {message[:_STDERR_CAP] or 'no message'}"
    )


def _rg_check(result: ProcessResult, produced: bool) -> str | None:
    """Raise for a failed run; a warning when ripgrep finished but skipped something.

    With ``--no-messages`` ripgrep still exits 2 after a file it could not
    read, but says nothing; a pattern it rejects is always printed. A run that
    printed its results (the summary event, or any record) and no complaint
    is a success that skipped some files.
    """
    if result.returncode in (0, 1):
        return None
    if result.stderr.strip() or not produced:
        raise _rg_failure(result)
    return "ripgrep could not read some files; they were skipped."


def _parse_json_events(stdout: str, cut: bool) -> list[Line]:
    records = stdout.split("\n")
    if cut or not stdout.endswith("\n"):
        records.pop()  # a record cut by the output cap
    # Only match and context events matter; begin, end and summary events (two
    # per file) are skipped without decoding them, and the rest is decoded as
    # one array: one call into the JSON decoder instead of one per event.
    wanted = [r for r in records if r.startswith(('{"type":"match"', '{"type":"context"'))]
    try:
        events = json.loads("[" + ",".join(wanted) + "]")
    except ValueError:
        events = []
        for record in wanted:
            with contextlib.suppress(ValueError):
                events.append(json.loads(record))
    lines: list[Line] = []
    for event in events:
        kind = event.get("type")
        if kind not in ("match", "context"):
            continue
        data = event["data"]
        path = _strip_dot(_text(data.get("path")))
        number = int(data["line_number"])
        # A multiline match spans several lines in one event. Only "\n" ends
        # a line (as for grep); str.splitlines would also split at \f or \x1c.
        for offset, text in enumerate(_text(data.get("lines")).removesuffix("\n").split("\n")):
            lines.append(Line(path, number + offset, text, kind == "match"))
    return lines


# ripgrep's plain output, one record per line: ``./path NUL number`` then ":"
# for a matching line or "-" for a context line, then the line itself; or
# "--" between context groups. `_TEXT_RECORDS` checks that records tile the
# whole output; `_TEXT_RECORD` takes one apart.
_TEXT_RECORDS = re.compile(r"(?:\./[^\0\n]*\0[0-9]+[:-][^\n]*\n|--\n)*")
_TEXT_RECORD = re.compile(r"\./([^\0\n]*)\0([0-9]+)([:-])([^\n]*)\n")


def _parse_text_lines(stdout: str) -> list[Line] | None:
    """Lines from ripgrep's plain output, or None when the output is not unambiguous.

    A file name holding a newline splits its record, leaving a fragment with
    no NUL (every path starts with ``./``, the target's prefix, so no
    fragment reads as a whole record), and a binary file that matched before
    its first NUL gets a notice without one: either fails the check, and the
    caller asks for JSON events instead.
    """
    # What follows the last newline is empty or a record cut by the output
    # cap; neither is a line.
    whole = stdout[: stdout.rfind("\n") + 1]
    if _TEXT_RECORDS.fullmatch(whole) is None:
        return None
    return [
        Line(path, int(number), text, sign == ":")
        for path, number, sign, text in _TEXT_RECORD.findall(whole)
    ]


async def grep_ripgrep(
    rg: str,
    workspace: Workspace,
    view: ProjectView,
    query: GrepQuery,
    isolation: Isolation | None = None,
) -> Found:
    """Search with ``rg``: ``--null`` lines for content, ``--count`` records otherwise.

    Content falls back to ``--json`` events when the lines are ambiguous.
    """
    args = _rg_walk_args(workspace, view) + _type_args(query.globs)
    if query.case_insensitive:
        args.append("--ignore-case")
    else:
        args.append("--case-sensitive")
    if query.multiline:
        args.append("--multiline")
    tail = ["--regexp", query.pattern, "--", query.target]
    plain = ["--null", "--no-heading", "--with-filename", "--color=never"]
    if query.mode != "content":
        result = await _run(
            rg, [*args, "--count", *plain, *tail], workspace.root, "ripgrep", isolation
        )
        found = Found(engine="ripgrep", cut=result.stdout_truncated)
        found.warning = _rg_check(result, bool(result.stdout))
        for record in _records(result, "\n"):
            path, nul, count = record.partition("\0")
            if nul and count.isdigit():
                found.counts[_strip_dot(path)] = int(count)
        _exactly(found, query.globs)
        return found
    args += [f"--before-context={query.before}", f"--after-context={query.after}"]
    # Plain lines first: ripgrep's JSON events are ten times the bytes and
    # cost more to decode than the search itself takes. The events are the
    # exact answer, asked for only when the plain output cannot be read
    # unambiguously, or when a failed run printed nothing (only the events'
    # summary tells a finished search from a failed one then).
    result = await _run(
        rg, [*args, "--line-number", *plain, *tail], workspace.root, "ripgrep", isolation
    )
    lines = None
    if result.returncode in (0, 1) or result.stderr.strip() or result.stdout:
        lines = _parse_text_lines(result.stdout)
    if lines is not None:
        warning = _rg_check(result, bool(result.stdout))
    else:
        result = await _run(rg, [*args, "--json", *tail], workspace.root, "ripgrep", isolation)
        warning = _rg_check(result, '"type":"summary"' in result.stdout)
        lines = _parse_json_events(result.stdout, result.stdout_truncated)
    found = Found(engine="ripgrep", cut=result.stdout_truncated, warning=warning)
    found.lines = _sort_lines(lines)
    _exactly(found, query.globs)
    return found


async def list_ripgrep(
    rg: str,
    workspace: Workspace,
    view: ProjectView,
    target: str,
    isolation: Isolation | None = None,
) -> Found:
    """The project's files under `target` with ``rg --files``."""
    args = [*_rg_walk_args(workspace, view), "--files", "--null", "--", target]
    result = await _run(rg, args, workspace.root, "ripgrep", isolation)
    warning = _rg_check(result, bool(result.stdout))
    files = sorted(_strip_dot(record) for record in _records(result, "\0"))
    return Found(engine="ripgrep", files=files, cut=result.stdout_truncated, warning=warning)


# -- builtin: a Python walk, then grep -------------------------------------------


def _walk_files(view: ProjectView, workspace: Workspace, target: str) -> list[str]:
    start = workspace.root if target == "." else workspace.root / _strip_dot(target)
    return sorted(path for path, is_dir in view.walk(start, recursive=True) if not is_dir)


async def list_builtin(workspace: Workspace, view: ProjectView, target: str) -> Found:
    """The project's files under `target`, walked in Python with the same rules."""
    files = await anyio.to_thread.run_sync(_walk_files, view, workspace, target)
    return Found(engine="builtin", files=files, skipped=view.skipped)


def _select(files: list[str], globs: tuple[str, ...]) -> list[str]:
    return [file for file in files if _selected(file, globs)] if globs else files


def _batches(files: list[str]) -> list[list[str]]:
    batches: list[list[str]] = []
    size = _ARGV_BUDGET
    for file in files:
        if size + len(file) + 3 > _ARGV_BUDGET:
            batches.append([])
            size = 0
        # "./" keeps a name starting with "-" from reading as an option.
        batches[-1].append(f"./{file}")
        size += len(file) + 3
    return batches


async def _grep_failure(
    grep: str, query: GrepQuery, root: Path, result: ProcessResult, isolation: Isolation | None
) -> EngineFailure:
    """Tell a pattern grep rejects from any other failure (an unreadable file)."""
    message = " ".join(result.stderr.strip().split())[:_STDERR_CAP] or "no message"
    # The same pattern over empty input (stdin is /dev/null) fails only if
    # the pattern itself is the problem.
    probe = await _run(grep, ["-P", "-e", query.pattern], root, "grep", isolation)
    if probe.returncode == 2:
        return EngineFailure(
            f"The pattern is not a valid regular expression; grep said: {message}. "
            f"Escape special characters such as ( [ {{ . * + ? with a backslash."
        )
    return EngineFailure(f"grep failed (exit {result.returncode}): {message}")


def _parse_grep(result: ProcessResult, found: Found, mode: Mode) -> None:
    for record in _records(result, "\n"):
        path, nul, rest = record.partition("\0")
        if not nul:
            continue  # a "--" group separator
        path = _strip_dot(path)
        if mode != "content":
            if rest.isdigit() and int(rest) > 0:
                found.counts[path] = int(rest)
            continue
        match = re.match(r"(\d+)([:-])", rest)
        if match is not None:
            text = rest[match.end() :]
            found.lines.append(Line(path, int(match[1]), text, match[2] == ":"))


def _python_multiline(root: Path, files: list[str], query: GrepQuery, found: Found) -> None:
    flags = re.MULTILINE | (re.IGNORECASE if query.case_insensitive else 0)
    try:
        regex = re.compile(query.pattern, flags)
    except re.error as exc:
        raise EngineFailure(
            f"The pattern is not a valid regular expression ({exc}). Escape special characters "
            f"such as ( [ {{ . * + ? with a backslash."
        ) from None
    for file in files:
        try:
            data = (root / file).read_bytes()
        except OSError:
            continue
        if b"\0" in data[:_BINARY_SNIFF]:
            continue
        text = data.decode("utf-8", errors="replace")
        rows = text.removesuffix("\n").split("\n")
        starts = [0]
        for row in rows:
            starts.append(starts[-1] + len(row) + 1)
        matched: set[int] = set()
        for match in regex.finditer(text):
            first = bisect.bisect_right(starts, match.start()) - 1
            last = bisect.bisect_right(starts, max(match.end() - 1, match.start())) - 1
            matched.update(i for i in range(first, last + 1) if i < len(rows))
        if not matched:
            continue
        if query.mode != "content":
            found.counts[file] = len(matched)
            continue
        shown: dict[int, bool] = {}
        for index in matched:
            for near in range(index - query.before, index + query.after + 1):
                if 0 <= near < len(rows):
                    shown[near] = shown.get(near, False) or near in matched
        for index, is_match in shown.items():
            found.lines.append(Line(file, index + 1, rows[index], is_match))


async def grep_builtin(
    binaries: BinaryFinder,
    workspace: Workspace,
    view: ProjectView,
    query: GrepQuery,
    isolation: Isolation | None = None,
) -> Found:
    """Search the walked project files with ``grep -P`` (or ``re`` when multiline)."""
    files = await anyio.to_thread.run_sync(_walk_files, view, workspace, query.target)
    files = _select(files, query.globs)
    found = Found(engine="builtin", skipped=view.skipped)
    if query.multiline:
        await anyio.to_thread.run_sync(_python_multiline, workspace.root, files, query, found)
        found.lines = _sort_lines(found.lines)
        return found
    grep = await anyio.to_thread.run_sync(binaries.find, "grep")
    if grep is None:
        raise EngineFailure(
            "ripgrep (rg) and grep are not installed; install ripgrep with "
            "pip install 'lionfactory[search]', or use bash."
        )
    args = ["-HIP", "-Z", "--color=never"]
    if query.case_insensitive:
        args.append("-i")
    if query.mode == "content":
        args += ["-n", f"--before-context={query.before}", f"--after-context={query.after}"]
    else:
        args.append("-c")
    args += ["-e", query.pattern, "--"]
    for batch in _batches(files):
        result = await _run(grep, [*args, *batch], workspace.root, "grep", isolation)
        if result.returncode not in (0, 1):
            raise await _grep_failure(grep, query, workspace.root, result, isolation)
        found.cut = found.cut or result.stdout_truncated
        _parse_grep(result, found, query.mode)
    found.lines = _sort_lines(found.lines)
    return found

"""The ``editor`` tool: write files and replace exact strings in them.

`editor_tool()` builds a Tool with two actions:

* ``write`` replaces (or creates) a whole file;
* ``edit`` replaces an exact ``old_string`` with ``new_string``.

The file is read and written as bytes and decoded strictly as UTF-8, so
CRLF, mixed line endings, a BOM and a missing final newline survive an edit
and a non-UTF-8 file is refused untouched; an empty ``old_string`` is
refused; the success snippet is centred on the edit site.

Every path is opened through the workspace seam (no symlink followed, never
outside the root) and written relative to its parent directory's
descriptor (`lionfactory.tools._editor_files`): atomically, with the old mode,
owner, group and extended attributes kept, in place for a hard-linked file.
Read-modify-replace runs under a directory lock that other lionfactory
processes honour too, and the replacement happens only if the file is still
the one that was read; an edit whose file changed meanwhile is redone on the
new content. Files inside ``.git`` are refused by default: git executes
what its config and hooks name.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import anyio.to_thread
import attrs
from pydantic import BaseModel, ConfigDict, Field

from lionfactory._evidence import (
    MAX_HASHED_BYTES,
    FileEvidence,
    evidence_wanted,
    record_all_evidence,
    record_evidence,
)
from lionfactory._os.beneath import open_child, release_created
from lionfactory._os.regular import FileRefused, refusal, regular_stat
from lionfactory._os.workspace import Location, PathRefused, Workspace, refuse_private_key
from lionfactory._tool import Tool, ToolHints
from lionfactory.tools._editor_files import (
    DEFAULT_STEPS,
    FileChanged,
    LateChange,
    Original,
    WriteSteps,
    WrittenFile,
    commit,
    directory_lock,
    remove_stale_temps,
)
from lionfactory.tools._editor_text import snippet
from lionfactory.tools._targets import resolved

if TYPE_CHECKING:
    from lionfactory.tools._editor_match import Hunk, Placed
    from lionfactory.tools._editor_patch import FileOp

# The matcher (`_editor_match`) and the patch parser (`_editor_patch`) are
# imported by the calls that use them, not with this module: together they
# were about a tenth of what an MCP server imports before it can answer
# `initialize`, for tools that may never edit.

__all__ = [
    "EditSpec",
    "EditorCheck",
    "EditorDiagnostics",
    "EditorRequest",
    "EditorResponse",
    "editor_tool",
]


_HASH = r"^[0-9a-fA-F]{64}$"
MAX_EDITS = 100
"""Edits in one ``multi_edit`` call at most."""

MAX_PATCH_CHARS = 8 * 1024 * 1024
"""The longest ``apply_patch`` text accepted (a bigger change is split into several patches)."""


class EditSpec(BaseModel):
    """One replacement of a ``multi_edit`` call."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    old_string: str = Field(
        min_length=1,
        description="The exact text to replace (after the previous edits of this call).",
    )
    new_string: str = Field(description="The replacement text ('' deletes old_string).")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence instead of exactly one."
    )


class EditorRequest(BaseModel):
    """Arguments of one ``editor`` call."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    action: Literal["write", "edit", "multi_edit", "insert", "apply_patch"] = Field(
        description=(
            "'write' replaces the whole file with `content`; 'edit' replaces `old_string` with "
            "`new_string`; 'multi_edit' applies `edits` in order, all or none; 'insert' adds "
            "`new_string` after line `insert_line`; 'apply_patch' applies `patch` (several "
            "files, all or none)."
        )
    )
    file_path: str | None = Field(
        default=None,
        description=(
            "The file, relative to the workspace root (or absolute inside it); every action "
            "but apply_patch (whose patch names its files)."
        ),
    )
    content: str | None = Field(
        default=None, description="write: the complete new content of the file."
    )
    old_string: str | None = Field(
        default=None,
        description=(
            "edit: the exact text to replace, character for character, including whitespace "
            "and indentation, without the line-number prefixes the reader shows. It must "
            "occur exactly once unless replace_all is true."
        ),
    )
    new_string: str | None = Field(
        default=None,
        description="edit: the replacement text ('' deletes old_string); insert: the lines to add.",
    )
    replace_all: bool = Field(
        default=False, description="edit: replace every occurrence instead of exactly one."
    )
    edits: list[EditSpec] | None = Field(
        default=None,
        max_length=MAX_EDITS,
        description=(
            "multi_edit: the replacements, applied in order (each sees the previous ones); if "
            "any fails, the file is left untouched."
        ),
    )
    insert_line: int | None = Field(
        default=None,
        ge=0,
        description="insert: the line after which new_string goes (0 = the top of the file).",
    )
    patch: str | None = Field(
        default=None,
        max_length=MAX_PATCH_CHARS,
        description=(
            "apply_patch: a patch in the '*** Begin Patch' format or a unified diff (as "
            "`git diff` prints it); paths relative to the workspace root."
        ),
    )
    expected_hash: str | None = Field(
        default=None,
        pattern=_HASH,
        description=(
            "write/edit/multi_edit/insert: the `content_hash` (SHA-256) of the file from your "
            "latest read or edit of it; the change is refused if the file's bytes no longer "
            "match it."
        ),
    )


class EditorResponse(BaseModel):
    """The result of one ``editor`` call."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    success: bool = Field(description="Whether the file was changed; if not, read `error`.")
    content: str | None = Field(
        default=None,
        description="What changed, with numbered lines around the edit site.",
    )
    error: str | None = Field(default=None, description="What went wrong and what to do instead.")
    matched: str | None = Field(
        default=None,
        description=(
            "edit/multi_edit/apply_patch: how old_string (or the hunks) was located: 'exact', or "
            "the difference that was tolerated: 'trailing_whitespace', 'indent', 'tabs', "
            "'line_endings' or 'unicode' (the loosest one, when there were several)."
        ),
    )
    content_hash: str | None = Field(
        default=None,
        description=(
            "The SHA-256 (hex) of the file's new bytes, when the call was asked for evidence "
            "or carried expected_hash: pass it as expected_hash to the next change."
        ),
    )
    diagnostics: dict[str, Any] | None = Field(
        default=None,
        description=(
            "For Python files, when a type checker is available: the errors this change "
            "`introduced` and `resolved` ({path, line, column, code, message, severity}, "
            "1-based lines), the errors `remaining` in the changed files, the `engine`, "
            "whether the report is `fresh` (it matches the new text) and `waited_ms`."
        ),
    )


# --- operations (blocking; run in worker threads) -------------------------------

_Outcome = tuple[EditorResponse, FileEvidence | None]
Written = dict[Path, WrittenFile]
"""Each file a change wrote, as the editor knows it (`EditorDiagnostics`)."""
_Done = TypeVar("_Done", bound=tuple[EditorResponse, Any])
"""What a change returns: its response first (a file's evidence, or a patch's list)."""


EditorCheck = Callable[[Location, EditorRequest], "str | None"]
"""``check(location, request)``: a refusal text, or None to let the change go ahead."""


class EditorDiagnostics(Protocol):
    """What the editor asks about the errors a change introduced (`editor_tool`'s ``diagnostics``).

    ``before(paths)`` runs before the change with the absolute paths it
    touches and returns a token; ``after(token)`` runs once it succeeded and
    returns the ``diagnostics`` field of the response (None: nothing to say).
    A hook may also have blocking methods the editor runs in the worker
    thread of the change, so that the hook reads the files there rather than
    in a thread round trip of its own: ``prepare(token)`` right before the
    change (to read the content it replaces; the editor always runs it when
    the hook has it, so a hook may leave that read to it), ``settle(token)``
    right after the change succeeded (to read the new content). A hook with
    ``settle_written(token, written)`` gets that instead of ``settle``, with
    `Written`: the files the change wrote as the editor knows them (a
    ``write`` or an ``edit``; empty for a patch), so it need not read back
    bytes the editor holds; for an ``edit``, which reads the file itself,
    such a hook gets no ``prepare`` either: `WrittenFile.old` is the content
    the edit replaced. An error any of them raises is ignored: the change
    goes ahead, or stands.
    """

    async def before(self, paths: Iterable[Path]) -> Any:
        """Note the state of `paths` before the change; a token for `after`."""
        ...

    async def after(self, token: Any) -> dict[str, Any] | None:
        """The ``diagnostics`` of the change `token` was taken for."""
        ...


def _failure(message: str) -> _Outcome:
    return EditorResponse(success=False, error=message), None


_ATTEMPTS = 3
"""Reads of a file an edit makes before giving up on a file that keeps changing."""

_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _evidence(path: Path, st: os.stat_result, data: bytes) -> FileEvidence:
    digest = hashlib.sha256(data) if len(data) <= MAX_HASHED_BYTES else None
    return FileEvidence.of(path, st, digest, whole_file=True)


def _lines(data: bytes) -> int:
    return data.count(b"\n") + (bool(data) and not data.endswith(b"\n"))


def _changed_during(shown: str, what: str) -> str:
    return (
        f"{shown!r} changed while it was being {what} (another program wrote it); nothing "
        f"was overwritten. Read it again and retry against its current content."
    )


def _late_change(shown: str) -> str:
    return (
        f"{shown!r} was changed by another program at the moment the edit replaced it: the "
        f"edit is in place, but that program's change went to the previous version. Read "
        f"the file and check it before going on."
    )


def _open_existing(dir_fd: int, loc: Location) -> Original | str | None:
    """The file at `loc` opened for reading, None when absent, or a refusal message."""
    shown = loc.shown
    try:
        fd = open_child(dir_fd, loc.name, os.O_RDONLY | _O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{shown!r} is a symbolic link; edit the file it points to instead."
        return _os_error("read", shown, exc)
    try:
        st = regular_stat(fd, shown)
        refuse_private_key(fd, shown)
    except (FileRefused, PathRefused) as exc:
        os.close(fd)
        return refusal(exc, shown, "the editor changes files only.", directory="give a file path.")
    except BaseException:
        os.close(fd)
        raise
    return Original(fd=fd, st=st)


def _hash_refusal(shown: str) -> str:
    return (
        f"Refused: {shown!r} is not the content expected_hash names (its current SHA-256 "
        f"differs: it changed since that read, or the hash is of another file). Read the file "
        f"again and retry with the content_hash of that read."
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_hash(fd: int) -> str:
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        digest.update(chunk)
        offset += len(chunk)
    return digest.hexdigest()


def _write(
    loc: Location,
    content: str,
    steps: WriteSteps,
    want_evidence: bool,
    expected_hash: str | None = None,
    written_out: Written | None = None,
) -> _Outcome:
    shown = loc.shown
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        return _failure(f"content cannot be encoded as UTF-8 ({exc.reason}); fix the text.")
    if not loc.parts:
        return _failure(f"{shown!r} is the workspace root, a directory; give a file path.")
    try:
        dir_fd, created = loc.make_parent()
    except PathRefused as exc:
        return _failure(exc.message)
    except OSError as exc:
        return _failure(_os_error("write", shown, exc))
    done = False
    try:
        with directory_lock(dir_fd):
            remove_stale_temps(dir_fd)
            original = _open_existing(dir_fd, loc)
            if isinstance(original, str):
                return _failure(original)
            try:
                if expected_hash is not None:
                    if original is None:
                        return _failure(
                            f"{shown!r} does not exist, so it cannot match expected_hash; to "
                            f"create it, call write without expected_hash."
                        )
                    if _file_hash(original.fd) != expected_hash.lower():
                        return _failure(_hash_refusal(shown))
                written = commit(dir_fd, loc.name, data, original=original, steps=steps)
            except FileChanged:
                return _failure(_changed_during(shown, "written"))
            except LateChange:
                return _failure(_late_change(shown))
            except OSError as exc:
                return _failure(_os_error("write", shown, exc))
            finally:
                if original is not None:
                    os.close(original.fd)
            done = True
    finally:
        os.close(dir_fd)
        # A failed write removes the directories it created for the file.
        release_created(created, remove=not done)
    if written_out is not None:
        written_out[loc.path] = WrittenFile(data, written)
    evidence = _evidence(loc.path, written, data) if want_evidence else None
    verb = "Created" if original is None else "Wrote"
    message = f"{verb} {shown!r} ({len(data):,} bytes, {_lines(data)} lines)."
    digest = _sha256(data) if want_evidence or expected_hash else None
    return EditorResponse(success=True, content=message, content_hash=digest), evidence


def _os_error(what: str, shown: str, exc: OSError) -> str:
    reason = (exc.strerror or str(exc)).lower()
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        return f"Cannot {what} {shown!r}: a parent path is a file, not a directory."
    return f"Cannot {what} {shown!r} ({reason}); the file was left unchanged."


def _read_utf8(dir_fd: int, loc: Location) -> Original | str:
    """The file opened and read (its bytes checked to be valid UTF-8), or a refusal message.

    The decoded text is dropped at once: edits work on the bytes (see
    `lionfactory.tools._editor_match`), so a big file is held once, not as
    bytes and text side by side.
    """
    shown = loc.shown
    opened = _open_existing(dir_fd, loc)
    if opened is None:
        return (
            f"File not found: {shown!r}. To create it, use action 'write' with the full "
            f"content; to find an existing file, use the reader's list_dir."
        )
    if isinstance(opened, str):
        return opened
    try:
        with os.fdopen(os.dup(opened.fd), "rb") as stream:
            data = stream.read()
        # ASCII is UTF-8: the check is a scan, not a 50 MB string (most code
        # is ASCII; isascii stops at the first byte that is not).
        if not data.isascii():
            data.decode("utf-8")
    except UnicodeDecodeError as exc:
        os.close(opened.fd)
        return (
            f"{shown!r} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start}); the editor changes UTF-8 text only and left the file untouched. "
            f"Use bash for other encodings."
        )
    except BaseException:
        os.close(opened.fd)
        raise
    return attrs.evolve(opened, data=data)


@attrs.frozen
class _Change:
    """A file's new bytes and what to tell the model about them."""

    data: bytes
    summary: str
    matched: str | None = None
    site: int | None = None  # byte offset of the change for the snippet (None: diff it)
    length: int = 0


_Transform = Callable[[bytes], "_Change | str"]

# From the most exact to the loosest: a call's `matched` names the loosest rule it used.
_LOOSENESS = ("exact", "line_endings", "trailing_whitespace", "indent", "tabs", "unicode")


def _loosest(rules: Iterable[str]) -> str:
    return max(rules, key=_LOOSENESS.index, default="exact")


_MATCH_NOTES = {
    "trailing_whitespace": "old_string matched once trailing whitespace was ignored",
    "line_endings": "old_string matched once line endings were ignored",
    "indent": "old_string matched with a uniform indentation shift; new_string was re-indented",
    "tabs": "old_string matched with its indentation mapped between spaces and tabs; "
    "new_string was re-indented in the file's style",
    "unicode": "old_string matched once look-alike quotes, dashes or spaces were read as "
    "ASCII; new_string uses the file's characters",
}


def _note(matched: str) -> str:
    note = _MATCH_NOTES.get(matched)
    return f" ({note}; copy the file's exact text next time)" if note else ""


def _edit_transform(old: str, new: str, replace_all: bool, shown: str) -> _Transform:
    from lionfactory.tools._editor_match import Refused, replace

    def transform(data: bytes) -> _Change | str:
        outcome = replace(data, old, new, replace_all=replace_all, shown=shown)
        if isinstance(outcome, Refused):
            return outcome.message
        done = f"{outcome.count} occurrences" if outcome.count > 1 else "1 occurrence"
        return _Change(
            outcome.data,
            f"replaced {done}{_note(outcome.matched)}",
            outcome.matched,
            outcome.site,
            outcome.length,
        )

    return transform


def _multi_transform(edits: list[EditSpec], shown: str) -> _Transform:
    from lionfactory.tools._editor_match import Refused, is_python, python_parses, replace

    def transform(data: bytes) -> _Change | str:
        original = data
        rules: list[str] = []
        tolerant: list[int] = []
        for index, spec in enumerate(edits):
            if spec.old_string == spec.new_string:
                return (
                    f"edit {index} (counting from 0): old_string and new_string are identical; "
                    f"nothing was changed. Remove that edit."
                )
            outcome = replace(
                data, spec.old_string, spec.new_string, replace_all=spec.replace_all, shown=shown
            )
            if isinstance(outcome, Refused):
                return (
                    f"edit {index} (counting from 0) of {len(edits)} failed, so none was applied "
                    f"and {shown!r} is unchanged: {outcome.message}"
                )
            rules.append(outcome.matched)
            if outcome.matched != "exact":
                tolerant.append(index)
            data = outcome.data
        if tolerant and is_python(shown):
            # Each tolerant edit proved itself on its own text; the whole call
            # must also leave a parsing Python file parsing.
            before, after = original.decode("utf-8"), data.decode("utf-8")
            if python_parses(before, shown) and not python_parses(after, shown):
                return (
                    f"edits {', '.join(map(str, tolerant))} matched only loosely, and the edits "
                    f"together would leave the Python file {shown!r} unparsable; none was "
                    f"applied. Read the lines and copy each old_string exactly."
                )
        loose = _loosest(rules)
        detail = (
            ""
            if loose == "exact"
            else " ("
            + ", ".join(f"edit {i}: {r}" for i, r in enumerate(rules) if r != "exact")
            + "; copy the file's exact text next time)"
        )
        return _Change(data, f"applied {len(edits)} edits in order{detail}", loose)

    return transform


def _insert_transform(line: int, text: str, shown: str) -> _Transform:
    def transform(data: bytes) -> _Change | str:
        total = _lines(data)
        if line > total:
            return (
                f"insert_line {line} is past the end of {shown!r}, which has {total} lines; use "
                f"0 to {total} ({total} appends at the end)."
            )
        ending = b"\r\n" if _uniform_crlf(data) else b"\n"
        body = text.replace("\r\n", "\n").encode("utf-8").replace(b"\n", ending)
        if not body.endswith(ending):
            body += ending
        offset = 3 if data.startswith(b"\xef\xbb\xbf") else 0
        for _ in range(line):
            offset = data.index(b"\n", offset) + 1 if data.find(b"\n", offset) >= 0 else len(data)
        prefix = b""
        if offset == len(data) and data and not data.endswith(b"\n"):
            prefix = ending  # the last line had no line break: end it first
        updated = data[:offset] + prefix + body + data[offset:]
        where = "at the top" if line == 0 else f"after line {line}"
        added = body.count(b"\n")
        return _Change(
            updated,
            f"inserted {added} line{'s' * (added != 1)} {where}",
            None,
            offset + len(prefix),
            len(body),
        )

    return transform


def _uniform_crlf(data: bytes) -> bool:
    lf = data.count(b"\n")
    return lf > 0 and lf == data.count(b"\r\n")


def _changed_span(before: bytes, after: bytes) -> tuple[int, int]:
    """The byte offset and length of what differs between two versions (for the snippet).

    Compared in 4 KiB blocks first, so an edit in a big file costs a few
    memory comparisons, not a Python loop over every byte.
    """
    limit = min(len(before), len(after))
    step = 1 << 12
    head = 0
    while head + step <= limit and before[head : head + step] == after[head : head + step]:
        head += step
    while head < limit and before[head] == after[head]:
        head += 1
    room = limit - head
    tail = 0
    while (
        tail + step <= room
        and before[len(before) - tail - step : len(before) - tail]
        == after[len(after) - tail - step : len(after) - tail]
    ):
        tail += step
    while tail < room and before[len(before) - 1 - tail] == after[len(after) - 1 - tail]:
        tail += 1
    return head, len(after) - head - tail


def _mutate(
    loc: Location,
    transform: _Transform,
    steps: WriteSteps,
    want_evidence: bool = True,
    expected_hash: str | None = None,
    written_out: Written | None = None,
) -> _Outcome:
    shown = loc.shown
    if not loc.parts:
        return _failure(f"{shown!r} is the workspace root, a directory; give a file path.")
    try:
        dir_fd = attrs.evolve(loc, parts=loc.parts[:-1]).open_dir()
    except PathRefused as exc:
        return _failure(exc.message)
    except FileNotFoundError:
        return _failure(
            f"File not found: {shown!r} (its directory does not exist). To create it, use "
            f"action 'write'; to find an existing file, use the reader's list_dir."
        )
    except OSError as exc:
        return _failure(_os_error("read", shown, exc))
    try:
        with directory_lock(dir_fd):
            remove_stale_temps(dir_fd)
            # A file another program changes between the read and the
            # replacement is read again and the change redone on what it
            # holds now, unless the caller pinned the content by its hash.
            for _ in range(_ATTEMPTS):
                read = _read_utf8(dir_fd, loc)
                if isinstance(read, str):
                    return _failure(read)
                try:
                    assert read.data is not None
                    if expected_hash is not None and _sha256(read.data) != expected_hash.lower():
                        return _failure(_hash_refusal(shown))
                    change = transform(read.data)
                    if isinstance(change, str):
                        return _failure(change)
                    written = commit(dir_fd, loc.name, change.data, original=read, steps=steps)
                except FileChanged:
                    continue
                except LateChange:
                    return _failure(_late_change(shown))
                except OSError as exc:
                    return _failure(_os_error("write", shown, exc))
                finally:
                    os.close(read.fd)
                if written_out is not None:
                    written_out[loc.path] = WrittenFile(change.data, written, read.data, read.st)
                return _success(loc, read.data, change, written, want_evidence, expected_hash)
            return _failure(_changed_during(shown, "edited"))
    finally:
        os.close(dir_fd)


def _success(
    loc: Location,
    before: bytes,
    change: _Change,
    written: os.stat_result,
    want_evidence: bool,
    expected_hash: str | None,
) -> _Outcome:
    updated = change.data
    evidence = _evidence(loc.path, written, updated) if want_evidence else None
    if change.site is None:
        site, length = _changed_span(before, updated)
    else:
        site, length = change.site, change.length
    shown_lines = snippet(updated, site, length)
    message = f"Edited {loc.shown!r}: {change.summary}. Around the change:\n{shown_lines}"
    digest = _sha256(updated) if want_evidence or expected_hash else None
    return EditorResponse(
        success=True, content=message, matched=change.matched, content_hash=digest
    ), evidence


# --- apply_patch ----------------------------------------------------------------


@attrs.define
class _Planned:
    """One file operation of a patch, checked and computed, not yet written."""

    op: FileOp
    loc: Location
    dest: Location | None = None  # an update's new path (a move)
    dir_fd: int | None = None  # the source's parent directory (update/delete)
    read: Original | None = None
    data: bytes | None = None  # the new content (add/update)
    matched: list[str] = attrs.field(factory=list)
    hunks: int = 0


class _PatchRefused(Exception):
    """A patch that cannot be applied as a whole; nothing was written."""


def _located(workspace: Workspace, path: str) -> Location | PathRefused:
    """`path` located once, or the refusal (kept for the plan to report)."""
    try:
        return workspace.locate(path)
    except PathRefused as exc:
        return exc


def _locate(workspace: Workspace, path: str, protect_git: bool) -> Location:
    return _accept(_located(workspace, path), path, protect_git)


def _accept(located: Location | PathRefused, path: str, protect_git: bool) -> Location:
    """The located path of a patch operation, or `_PatchRefused` saying why not."""
    if isinstance(located, PathRefused):
        raise _PatchRefused(f"{path!r}: {located.message}") from None
    loc = located
    if not loc.parts:
        raise _PatchRefused(f"{path!r} is the workspace root, not a file.")
    if protect_git and loc.in_git_dir:
        raise _PatchRefused(_git_refusal(path))
    return loc


def _must_be_absent(loc: Location, what: str) -> None:
    """Refuse (`_PatchRefused`) a new file's path that exists or passes through a link.

    Judged without following links, as the write will be: a directory link
    inside the workspace (``link -> src``) is refused now, before the patch
    writes its first file, not halfway through.
    """
    try:
        fd = loc.open_read(follow=False)
    except FileNotFoundError:
        return
    except PathRefused as exc:
        raise _PatchRefused(f"{loc.shown!r}: {exc.message}") from None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise _PatchRefused(f"{loc.shown!r}: a parent path is a file.") from None
        if exc.errno != errno.ENOENT:
            raise _PatchRefused(_os_error("check", loc.shown, exc)) from None
        return
    os.close(fd)
    raise _PatchRefused(
        f"{loc.shown!r} already exists, so the patch cannot {what} it; use '*** Update File:' "
        f"(or a unified diff against it) to change an existing file."
    )


def _plan_update(plan: _Planned, text: str) -> bytes:
    from lionfactory.tools._editor_match import (
        apply_placed,
        find_line,
        is_python,
        lines_of,
        python_parses,
    )

    op, shown = plan.op, plan.loc.shown
    lines = lines_of(text)
    placed: list[Placed] = []
    blocks: dict[int, int | None] = {}
    cursor = 0
    for number, hunk in enumerate(op.hunks, 1):
        after = cursor
        opened: list[int] = []  # the lines its '@@' lines were found at
        for anchor in getattr(hunk, "anchors", ()):
            found = find_line(lines, anchor, after)
            earlier = (
                None if found is not None or not cursor else _last_before(lines, anchor, after)
            )
            if earlier is not None:
                # The anchor lies before the previous hunk's end: this hunk
                # is in the same function or class as that one (models name
                # the enclosing function for each hunk). It is placed after
                # the previous hunk, where its lines must still be unique.
                opened.append(earlier)
                continue
            if found is None:
                raise _PatchRefused(
                    f"hunk {number} of {shown!r}: its '@@ {anchor}' line was not found after "
                    f"line {after}; the patch was not applied. Read the file and use a line "
                    f"it holds."
                )
            after = found + 1
            opened.append(found)
        where = _place(lines, hunk, after)
        if isinstance(where, str) and after != cursor and is_python(shown):
            # Its lines occur more than once after its '@@' line: the one
            # occurrence inside the function or class an '@@' line opens
            # (the innermost that holds exactly one) is the one meant.
            for line in reversed(opened):
                inside = _inside_block(text, lines, hunk, line, after, blocks)
                if inside is not None:
                    where = inside
                    break
        if isinstance(where, str) and after != cursor:
            # Placed from its '@@' line it fails, yet its lines may be the one
            # place after the previous hunk: a model names the enclosing
            # function again for a second hunk in it, and the next line with
            # that text is a later function's. Unique there, it is placed.
            again = _place(lines, hunk, cursor)
            where = where if isinstance(again, str) else again
        if isinstance(where, str):
            raise _PatchRefused(
                f"hunk {number} of {shown!r} cannot be placed: {where}. Nothing was applied."
            )
        if where.first < cursor:
            raise _PatchRefused(
                f"hunk {number} of {shown!r} overlaps or precedes the hunk before it (line "
                f"{where.first + 1}); order the hunks by position. Nothing was applied."
            )
        placed.append(where)
        plan.matched.append(where.matched)
        cursor = where.first + where.count
    plan.hunks = len(placed)
    result = apply_placed(lines, placed)
    if (
        any(m != "exact" for m in plan.matched)
        and is_python(shown)
        and python_parses(text, shown)
        and not python_parses(result, shown)
    ):
        raise _PatchRefused(
            f"the hunks of {shown!r} matched only loosely, and applying them would leave the "
            f"Python file unparsable; nothing was applied. Read the lines and copy them exactly."
        )
    try:
        return result.encode("utf-8")
    except UnicodeEncodeError:
        raise _PatchRefused(f"the new text of {shown!r} is not valid UTF-8.") from None


def _place(lines: Any, hunk: Hunk, after: int) -> Placed | str:
    """Where `hunk` goes at or after line `after`, or why not (`place_hunk`).

    A '*** Begin Patch' hunk whose last line is an empty context line past
    the file's final line feed (the empty string stands for that line feed,
    as Codex's apply_patch reads it) is retried without it, where it then
    ends at the end of the file.
    """
    from lionfactory.tools._editor_match import place_hunk

    where = place_hunk(lines, attrs.evolve(hunk, after=after))
    if isinstance(where, str) and _ends_in_phantom_line(hunk):
        trimmed = attrs.evolve(hunk, old=hunk.old[:-1], new=hunk.new[:-1], after=after, at_end=True)
        again = place_hunk(lines, trimmed)
        where = where if isinstance(again, str) else again
    return where


def _last_before(lines: Any, anchor: str, before: int) -> int | None:
    """The last line before `before` that an ``@@ anchor`` line names, or None."""
    from lionfactory.tools._editor_match import find_line

    last = None
    at = find_line(lines, anchor, 0)
    while at is not None and at < before:
        last = at
        at = find_line(lines, anchor, at + 1)
    return last


def _inside_block(
    text: str, lines: Any, hunk: Hunk, opener: int, after: int, blocks: dict[int, int | None]
) -> Placed | None:
    """`hunk` placed at or after `after` inside the Python def or class opened at line `opener`.

    None when that line opens no def or class (or the file does not parse),
    or when the hunk is not the one place in that block.
    `blocks` remembers each opening line's block end, and the parse, per file.
    """
    from lionfactory.tools._editor_match import lines_of

    if hunk.at_end:
        return None
    if not blocks:
        import ast

        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            blocks[-1] = None
            return None
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                blocks.setdefault(node.lineno - 1, node.end_lineno)
    end = blocks.get(opener)
    if end is None or end <= after:
        return None
    # The text up to the block's end: placed there, the hunk's line indices
    # are the file's own.
    prefix = text[: lines.starts[end]] if end < len(lines.starts) else text
    found = _place(lines_of(prefix), hunk, after)
    if isinstance(found, str) or found.first + found.count > end:
        return None
    return found


def _ends_in_phantom_line(hunk: Hunk) -> bool:
    """Whether a V4A hunk (one with ``@@`` anchors) ends with an empty line on both sides."""
    old, new = hunk.old, hunk.new
    return (
        hasattr(hunk, "anchors") and len(old) > 1 and old[-1] == "" and bool(new) and new[-1] == ""
    )


def _plan(
    workspace: Workspace,
    ops: list[FileOp],
    located: list[Location | PathRefused],
    protect_git: bool,
) -> list[_Planned]:
    """Every operation checked and every hunk placed, nothing written (phase one).

    `located`: each operation's path, located once by the caller (the same
    `Location` the check saw).
    """
    plans: list[_Planned] = []
    try:
        for op, where in zip(ops, located, strict=True):
            plan = _Planned(op, _accept(where, op.path, protect_git))
            plans.append(plan)
            if op.kind == "add":
                _must_be_absent(plan.loc, "add")
                try:
                    plan.data = op.content.encode("utf-8")
                except UnicodeEncodeError:
                    raise _PatchRefused(f"the content of {op.path!r} is not valid UTF-8.") from None
                continue
            loc = plan.loc
            try:
                plan.dir_fd = attrs.evolve(loc, parts=loc.parts[:-1]).open_dir()
            except PathRefused as exc:
                raise _PatchRefused(f"{op.path!r}: {exc.message}") from None
            except OSError:
                raise _PatchRefused(
                    f"File not found: {op.path!r}; the patch was not applied. To create it, use "
                    f"'*** Add File:'."
                ) from None
            read = _read_utf8(plan.dir_fd, loc)
            if isinstance(read, str):
                raise _PatchRefused(read + " The patch was not applied.")
            plan.read = read
            if op.kind == "update":
                if op.move_to is not None:
                    plan.dest = _locate(workspace, op.move_to, protect_git)
                    _must_be_absent(plan.dest, "move a file onto")
                assert read.data is not None
                plan.data = _plan_update(plan, read.data.decode("utf-8")) if op.hunks else read.data
    except BaseException:
        _close_plans(plans)
        raise
    return plans


def _close_plans(plans: list[_Planned]) -> None:
    for plan in plans:
        if plan.read is not None:
            os.close(plan.read.fd)
            plan.read = None
        if plan.dir_fd is not None:
            os.close(plan.dir_fd)
            plan.dir_fd = None


def _create(
    loc: Location, data: bytes, steps: WriteSteps
) -> tuple[os.stat_result, list[tuple[int, str]]]:
    """Write a new file; its stat, and the directories made for it (for a rollback).

    The caller releases the directories (`release_created`): removed if the
    patch is rolled back, kept otherwise. A failed write removes them at once.
    """
    dir_fd, created = loc.make_parent()
    done = False
    try:
        with directory_lock(dir_fd):
            remove_stale_temps(dir_fd)
            written = commit(dir_fd, loc.name, data, original=None, steps=steps)
            done = True
            return written, created
    finally:
        os.close(dir_fd)
        if not done:
            release_created(created, remove=True)


def _unlink(dir_fd: int, name: str) -> None:
    with directory_lock(dir_fd):
        os.unlink(name, dir_fd=dir_fd)


def _still_as_read(dir_fd: int, name: str, read: Original) -> bool:
    try:
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    st = read.st
    return (now.st_ino, now.st_size, now.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)


def _apply_patch(
    workspace: Workspace,
    ops: list[FileOp],
    steps: WriteSteps,
    want_evidence: bool,
    protect_git: bool,
    check: EditorCheck | None = None,
    request: EditorRequest | None = None,
) -> tuple[EditorResponse, list[FileEvidence]]:
    """Apply every operation of a patch, or none (phase two writes; a failure rolls back).

    `check` (with the `request` it judges) runs first, on every file the
    patch updates, moves or deletes, at the `Location` the plan then uses.
    """
    located = [_located(workspace, op.path) for op in ops]
    if check is not None:
        assert request is not None
        for op, where in zip(ops, located, strict=True):
            if op.kind == "add" or isinstance(where, PathRefused):
                continue  # a new file needs no check; a refused path gets the plan's error
            refusal = check(where, request)
            if refusal is not None:
                return EditorResponse(success=False, error=refusal), []
    try:
        plans = _plan(workspace, ops, located, protect_git)
    except _PatchRefused as exc:
        return EditorResponse(success=False, error=f"The patch was not applied: {exc}"), []
    undo: list[Callable[[], str | None]] = []
    made: list[list[tuple[int, str]]] = []  # directories the writes created
    evidence: list[FileEvidence] = []
    report: list[str] = []
    at = ""  # the file being written, for the error
    try:
        try:
            for plan in plans:
                op, loc = plan.op, plan.loc
                if op.kind == "delete":
                    continue  # deletions go last: nothing is lost if a write fails
                assert plan.data is not None
                if op.kind == "add" or plan.dest is not None:
                    target = loc if op.kind == "add" else plan.dest
                    assert target is not None
                    at = target.shown
                    written, created = _create(target, plan.data, steps)
                    made.append(created)
                    undo.append(functools.partial(release_created, created, remove=True))
                    undo.append(functools.partial(_remove, target, plan.data))
                else:
                    assert plan.dir_fd is not None
                    assert plan.read is not None
                    at = loc.shown
                    with directory_lock(plan.dir_fd):
                        written = commit(
                            plan.dir_fd, loc.name, plan.data, original=plan.read, steps=steps
                        )
                    undo.append(functools.partial(_restore, plan))
                    target = loc
                described = _describe(plan)
                if want_evidence:
                    evidence.append(_evidence(target.path, written, plan.data))
                    # A caller without read history edits next by carrying this hash.
                    described += f" (content_hash {_sha256(plan.data)})"
                report.append(described)
            for plan in plans:
                if plan.op.kind == "delete" or plan.dest is not None:
                    assert plan.dir_fd is not None
                    assert plan.read is not None
                    at = plan.loc.shown
                    if not _still_as_read(plan.dir_fd, plan.loc.name, plan.read):
                        raise FileChanged(plan.loc.name)
                    _unlink(plan.dir_fd, plan.loc.name)
                    undo.append(functools.partial(_recreate, plan, steps))
                    if plan.op.kind == "delete":
                        report.append(f"deleted {plan.loc.shown!r}")
        except (FileChanged, LateChange, OSError, PathRefused) as exc:
            kept = _rollback(undo)
            if isinstance(exc, (FileChanged, LateChange)):
                why = f"{at!r} changed while the patch was being applied (another program wrote it)"
            elif isinstance(exc, PathRefused):
                why = f"{at!r} could not be written: {exc.message}"
            else:
                why = f"writing {at!r} failed ({(exc.strerror or str(exc)).lower()})"
            tail = (
                " Every file was put back as it was."
                if not kept
                else " Not everything could be put back: " + "; ".join(kept) + "."
            )
            return EditorResponse(
                success=False,
                error=f"The patch was not applied: {why}.{tail} Read the files and retry.",
            ), []
    finally:
        _close_plans(plans)
        for created in made:
            release_created(created, remove=False)  # kept: the patch stands
    rules = [m for plan in plans for m in plan.matched]
    loose = _loosest(rules) if rules else None
    note = "" if loose in (None, "exact") else f" Hunks were located loosely{_note(loose)}."
    digest = None
    if len(evidence) == 1 and evidence[0].sha256 is not None:
        digest = evidence[0].sha256
    return EditorResponse(
        success=True,
        content="Applied the patch: " + ", ".join(report) + "." + note,
        matched=loose,
        content_hash=digest,
    ), evidence


def _describe(plan: _Planned) -> str:
    op = plan.op
    if op.kind == "add":
        return f"added {plan.loc.shown!r}"
    moved = f" and moved it to {plan.dest.shown!r}" if plan.dest is not None else ""
    hunks = f" ({plan.hunks} hunk{'s' * (plan.hunks != 1)})" if plan.hunks else ""
    return f"updated {plan.loc.shown!r}{hunks}{moved}"


def _holding(dir_fd: int, name: str, data: bytes) -> Original | None:
    """The file `name` opened, if it holds exactly `data` (what this patch wrote); else None.

    A rollback undoes only its own writes: a file that holds anything else
    was changed by someone after the patch wrote it, and that change stays.
    """
    try:
        fd = open_child(dir_fd, name, os.O_RDONLY | _O_NONBLOCK)
    except OSError:
        return None
    try:
        try:
            st = regular_stat(fd, name)
        except FileRefused:
            st = None
        if st is None or st.st_size != len(data):
            os.close(fd)
            return None
        with os.fdopen(os.dup(fd), "rb") as stream:
            same = stream.read(len(data) + 1) == data
    except BaseException:
        os.close(fd)
        raise
    if not same:
        os.close(fd)
        return None
    return Original(fd=fd, st=st, data=data)


def _kept(shown: str) -> str:
    return f"{shown!r} was changed by someone else after the patch wrote it; their version was kept"


def _remove(loc: Location, data: bytes) -> str | None:
    """Remove a file this patch created, unless someone changed it since."""
    dir_fd = attrs.evolve(loc, parts=loc.parts[:-1]).open_dir()
    try:
        with directory_lock(dir_fd):
            ours = _holding(dir_fd, loc.name, data)
            if ours is None:
                return _kept(loc.shown)
            try:
                if not _still_as_read(dir_fd, loc.name, ours):
                    return _kept(loc.shown)
                os.unlink(loc.name, dir_fd=dir_fd)
            finally:
                os.close(ours.fd)
    finally:
        os.close(dir_fd)
    return None


def _restore(plan: _Planned) -> str | None:
    """Put an updated file's old bytes back, unless someone changed it since the patch."""
    assert plan.dir_fd is not None
    assert plan.read is not None
    assert plan.read.data is not None
    assert plan.data is not None
    with directory_lock(plan.dir_fd):
        current = _holding(plan.dir_fd, plan.loc.name, plan.data)
        if current is None:
            return _kept(plan.loc.shown)
        try:
            commit(plan.dir_fd, plan.loc.name, plan.read.data, original=current)
        except FileChanged:
            return _kept(plan.loc.shown)
        finally:
            os.close(current.fd)
    return None


def _recreate(plan: _Planned, steps: WriteSteps) -> str | None:
    """Bring back a file the patch deleted (or moved away), unless its name is taken since."""
    assert plan.dir_fd is not None
    assert plan.read is not None
    assert plan.read.data is not None
    with directory_lock(plan.dir_fd):
        try:
            commit(plan.dir_fd, plan.loc.name, plan.read.data, original=None, steps=steps)
        except FileChanged:
            return (
                f"{plan.loc.shown!r} was created again by someone else after the patch "
                f"removed it; their version was kept"
            )
        with contextlib.suppress(OSError):
            os.chmod(plan.loc.name, stat.S_IMODE(plan.read.st.st_mode), dir_fd=plan.dir_fd)
    return None


def _rollback(undo: list[Callable[[], str | None]]) -> list[str]:
    """Undo the writes done so far, newest first; what was not undone, and why."""
    kept: list[str] = []
    for step in reversed(undo):
        try:
            outcome = step()
        except (OSError, PathRefused, LateChange) as exc:
            outcome = exc.message if isinstance(exc, PathRefused) else str(exc) or repr(exc)
        if outcome is not None:
            kept.append(outcome)
    return kept


# --- the tool -------------------------------------------------------------------


@attrs.frozen
class _EditorHandler:
    """The ``editor`` handler: one workspace, one set of write steps."""

    workspace: Workspace
    steps: WriteSteps = attrs.field(default=DEFAULT_STEPS, repr=False)
    protect_git: bool = True
    check: EditorCheck | None = None
    diagnostics: EditorDiagnostics | None = None

    async def __call__(self, request: EditorRequest) -> EditorResponse:
        if request.action == "apply_patch":
            return await self.patch(request)
        if not request.file_path:
            return EditorResponse(
                success=False, error=f"action {request.action!r} needs `file_path`: the file."
            )
        try:
            loc = self.workspace.locate(request.file_path)
        except PathRefused as exc:
            return EditorResponse(success=False, error=exc.message)
        return await self.at(loc, request)

    async def patch(self, request: EditorRequest) -> EditorResponse:
        """Apply ``request.patch``: every file operation, or none."""
        ops = patch_operations(request)
        if isinstance(ops, str):
            return EditorResponse(success=False, error=ops)
        context = evidence_wanted()
        token = None
        if self.diagnostics is not None:
            token = await self.diagnostics.before(self._patch_paths(ops))
        response, evidence = await anyio.to_thread.run_sync(
            self._settled,
            token,
            _apply_patch,
            self.workspace,
            ops,
            self.steps,
            context is not None,
            self.protect_git,
            self.check,
            request,
        )
        record_all_evidence(context, evidence)
        return await self._with_diagnostics(response, token)

    def _patch_paths(self, ops: list[FileOp]) -> list[Path]:
        paths = []
        for op in ops:
            for name in (op.path, getattr(op, "move_to", None)):
                if name:
                    with contextlib.suppress(PathRefused):
                        paths.append(self.workspace.locate(name).path)
        return paths

    def _settled(self, token: Any, change: Callable[..., _Done], *args: Any) -> _Done:
        """``change(*args)`` between the hook's ``prepare`` and (if it worked) ``settle``.

        All three in this one worker thread: see `EditorDiagnostics`. A
        ``write`` or ``edit`` (`_write`, `_mutate`) reports what it wrote to
        a hook with ``settle_written``: reading the file back, just written,
        cost a tenth of a millisecond per edit.
        """
        settle_written = getattr(self.diagnostics, "settle_written", None)
        told = token is not None and settle_written is not None and change in (_write, _mutate)
        prepare = getattr(self.diagnostics, "prepare", None)
        # An edit reads the file it changes: `settle_written` gets those bytes.
        if token is not None and prepare is not None and not (told and change is _mutate):
            # Diagnostics never stop an edit: without what `prepare` read, `after` says nothing.
            with contextlib.suppress(Exception):
                prepare(token)
        written: Written | None = None
        if told:
            written = {}
            outcome = change(*args, written_out=written)
        else:
            outcome = change(*args)
        if token is None or not outcome[0].success:
            return outcome
        # Diagnostics never fail an edit that happened: `after` reads for itself.
        with contextlib.suppress(Exception):
            if settle_written is not None:
                settle_written(token, written or {})
            elif (settle := getattr(self.diagnostics, "settle", None)) is not None:
                settle(token)
        return outcome

    async def _with_diagnostics(self, response: EditorResponse, token: Any) -> EditorResponse:
        """`response` with the diagnostics of the change, when it succeeded and there are any."""
        if self.diagnostics is None or token is None or not response.success:
            return response
        response.diagnostics = await self.diagnostics.after(token)
        return response

    async def at(self, loc: Location, request: EditorRequest) -> EditorResponse:
        """Carry out `request` on a path this workspace already located.

        The check (if any) judges this same `Location`, so the path is not
        resolved a second time between the check and the edit.
        """
        if request.action == "apply_patch":
            return await self.patch(request)
        if self.check is not None:
            refusal = await anyio.to_thread.run_sync(self.check, loc, request)
            if refusal is not None:
                return EditorResponse(success=False, error=refusal)
        if self.protect_git and loc.in_git_dir:
            return EditorResponse(success=False, error=_git_refusal(request.file_path or ""))
        context = evidence_wanted()
        want = context is not None
        token = None
        if self.diagnostics is not None:
            token = await self.diagnostics.before([loc.path])
        if request.action == "write":
            if request.content is None:
                return EditorResponse(
                    success=False,
                    error="action 'write' needs `content`: the complete new file content.",
                )
            response, evidence = await anyio.to_thread.run_sync(
                self._settled,
                token,
                _write,
                loc,
                request.content,
                self.steps,
                want,
                request.expected_hash,
            )
        else:
            transform = _transform_for(request, loc.shown)
            if isinstance(transform, str):
                return EditorResponse(success=False, error=transform)
            response, evidence = await anyio.to_thread.run_sync(
                self._settled,
                token,
                _mutate,
                loc,
                transform,
                self.steps,
                want,
                request.expected_hash,
            )
        record_evidence(context, evidence)
        return await self._with_diagnostics(response, token)


@attrs.frozen
class _EditorTargets:
    """What an editor call touches: its file, or every file of its patch and both ends of a move.

    Each path as this workspace resolves it (``src/a.py``, however it was
    spelled); a path the editor would refuse is left out, since it is never
    written.
    """

    workspace: Workspace

    def __call__(self, request: EditorRequest) -> tuple[str, ...]:
        if request.action != "apply_patch":
            paths = [request.file_path] if request.file_path else []
        else:
            ops = patch_operations(request)
            if isinstance(ops, str):
                return ()  # refused before any file is touched
            paths = [path for op in ops for path in (op.path, op.move_to) if path is not None]
        return resolved(self.workspace, paths)


def patch_operations(request: EditorRequest) -> list[FileOp] | str:
    """The file operations of an ``apply_patch`` request, or why it cannot be used."""
    from lionfactory.tools._editor_patch import PatchError, parse_patch

    if not request.patch or not request.patch.strip():
        return "action 'apply_patch' needs `patch`: the patch text."
    for name in ("file_path", "content", "old_string", "new_string", "edits", "insert_line"):
        if getattr(request, name) is not None:
            return (
                f"action 'apply_patch' takes only `patch` (its paths name the files); remove "
                f"`{name}`."
            )
    if request.expected_hash is not None:
        return "action 'apply_patch' does not take expected_hash; remove it."
    try:
        return parse_patch(request.patch)
    except PatchError as exc:
        return f"The patch was not applied: {exc}"


def _transform_for(request: EditorRequest, shown: str) -> _Transform | str:
    if request.action == "edit":
        checked = _check_edit(request)
        if isinstance(checked, str):
            return checked
        old, new = checked
        return _edit_transform(old, new, request.replace_all, shown)
    if request.action == "multi_edit":
        if not request.edits:
            return (
                "action 'multi_edit' needs `edits`: a list of {old_string, new_string, "
                "replace_all?} applied in order."
            )
        if request.old_string is not None or request.new_string is not None:
            return "action 'multi_edit' takes its strings in `edits`; remove old_string/new_string."
        return _multi_transform(request.edits, shown)
    if request.insert_line is None:
        return "action 'insert' needs `insert_line` (0 inserts at the top of the file)."
    if not request.new_string:
        return "action 'insert' needs a non-empty `new_string`: the lines to insert."
    return _insert_transform(request.insert_line, request.new_string, shown)


def _git_refusal(shown: str) -> str:
    return (
        f"{shown!r} is inside a .git directory (or is a .git file); the editor does not change "
        f"git's internals, because git runs what they name (hooks, core.fsmonitor, "
        f"core.pager). Change the repository with git commands instead."
    )


def _check_edit(request: EditorRequest) -> tuple[str, str] | str:
    """The edit's (old, new) strings, or why they cannot be used."""
    if not request.old_string:
        return (
            "action 'edit' needs a non-empty `old_string` (the exact text to replace). "
            "To create or overwrite a whole file, use action 'write'."
        )
    if request.new_string is None:
        return "action 'edit' needs `new_string` (use '' to delete old_string)."
    if request.old_string == request.new_string:
        return "old_string and new_string are identical; there is nothing to change."
    return request.old_string, request.new_string


_DESCRIPTION = """\
Write and edit text files inside the workspace.

Actions:
- write: replace the whole file at `file_path` with `content` (the file and its parent
  directories are created if missing). The replacement is atomic.
- edit: replace `old_string` with `new_string` in an existing UTF-8 file. Copy old_string
  from the file exactly, without the '<line number><TAB>' prefixes the reader shows. It must
  occur exactly once unless replace_all is true; add surrounding lines to make it unique.
  If the exact text is nowhere, a unique match that differs only in trailing whitespace,
  a uniform indentation shift, tabs vs spaces, line endings or look-alike quotes/dashes/
  spaces is applied, written in the file's own style (`matched` says which).
- multi_edit: `edits` = [{old_string, new_string, replace_all?}, ...] applied in order to
  one file (each sees the previous ones); if one fails, none is applied.
- insert: add `new_string` as whole lines after line `insert_line` (0 = top).
- apply_patch: `patch` in the '*** Begin Patch' format (*** Add File / *** Delete File /
  *** Update File [+ *** Move to], '@@' hunks of ' ', '-', '+' lines, *** End Patch) or a
  unified diff as `git diff` prints it; all files are changed, or none.
Line endings (CRLF or LF), a byte-order mark and a missing final newline are kept. Pass a
read's `content_hash` as `expected_hash` to refuse the change if the file moved on.

Read a file before editing it. Paths outside the workspace, symbolic links, secret files
(.env, .netrc, private keys, ...) and files inside .git are refused.
"""


def editor_tool(
    *,
    workspace_root: str | os.PathLike[str] | None = None,
    protected_names: Iterable[str] | None = None,
    allow_git_internals: bool = False,
    check: EditorCheck | None = None,
    diagnostics: EditorDiagnostics | None = None,
    _write_steps: WriteSteps | None = None,
) -> Tool:
    """Build the ``editor`` tool.

    Args:
        workspace_root: the directory every path is resolved in; the current
            directory when None. Resolved once, now.
        protected_names: fnmatch patterns of names never written; the
            workspace defaults (``.env``, ``.env.*``, private keys, ...) when None.
        allow_git_internals: let the editor change files inside ``.git``
            directories (and ``.git`` files). Off by default: git executes
            what its config and hooks name, so a model that can write
            ``.git/config`` can run commands through any later git call.
        check: ``check(location, request) -> refusal text or None``, a
            policy the editor asks before it changes a file (the coding
            toolkit's read-before-edit guard). It gets the `Location` the
            editor resolved itself and then writes, so the path is looked up
            once: for ``write``, ``edit``, ``multi_edit`` and ``insert`` the
            request's file, for ``apply_patch`` every file the patch
            updates, moves or deletes (not one it adds), before any is
            written. A text refuses the call with that text as the error and
            changes nothing. It runs in a worker thread, so it may block
            (open, hash); it is not called for a path the editor refuses.
        diagnostics: an `EditorDiagnostics` (the coding toolkit's type
            checker) asked before and after every change; what it returns
            after a successful change becomes the response's
            ``diagnostics``. None: the field stays None.
        _write_steps: private test seam replacing the steps of the atomic write.

    Returns:
        The ``editor`` Tool (safe to share: it is bound to no branch).

    Raises:
        ValueError: the root is not an existing directory, or a protected
            name is not a single path component.
        TypeError: the root is not a path.
    """
    if not isinstance(allow_git_internals, bool):
        raise TypeError(f"allow_git_internals must be a bool, got {allow_git_internals!r}")
    if check is not None and not callable(check):
        raise TypeError(f"check must be callable or None, got {check!r}")
    if _write_steps is not None and not isinstance(_write_steps, WriteSteps):
        raise TypeError(f"_write_steps must be a WriteSteps, got {_write_steps!r}")
    workspace = Workspace.at(workspace_root, protected=protected_names)
    return Tool(
        name="editor",
        description=_DESCRIPTION,
        request_model=EditorRequest,
        handler=_EditorHandler(
            workspace,
            _write_steps or DEFAULT_STEPS,
            protect_git=not allow_git_internals,
            check=check,
            diagnostics=diagnostics,
        ),
        response_model=EditorResponse,
        targets=_EditorTargets(workspace),
        # `write` overwrites a whole file: the strongest action sets the hints.
        hints=ToolHints("Edit files", destructive=True),
    )

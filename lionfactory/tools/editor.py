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

import errno
import hashlib
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import anyio.to_thread
import attrs
from pydantic import BaseModel, ConfigDict, Field

from lionfactory._beneath import open_child, release_created
from lionfactory._evidence import (
    MAX_HASHED_BYTES,
    FileEvidence,
    evidence_wanted,
    record_evidence,
)
from lionfactory._tool import Tool, ToolHints
from lionfactory._workspace import Location, PathRefused, Workspace, refuse_private_key
from lionfactory.tools._editor_files import (
    DEFAULT_STEPS,
    FileChanged,
    LateChange,
    Original,
    WriteSteps,
    commit,
    directory_lock,
    remove_stale_temps,
)
from lionfactory.tools._editor_text import match_lines, not_found, snippet

__all__ = ["EditorRequest", "EditorResponse", "editor_tool"]


class EditorRequest(BaseModel):
    """Arguments of one ``editor`` call."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["write", "edit"] = Field(
        description=(
            "'write' replaces the whole file with `content` (creating it and its parent "
            "directories if needed); 'edit' replaces `old_string` with `new_string`."
        )
    )
    file_path: str = Field(
        description="The file, relative to the workspace root (or absolute inside it)."
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
        default=None, description="edit: the replacement text ('' deletes old_string)."
    )
    replace_all: bool = Field(
        default=False, description="edit: replace every occurrence instead of exactly one."
    )


class EditorResponse(BaseModel):
    """The result of one ``editor`` call."""

    model_config = ConfigDict(extra="forbid")

    success: bool = Field(description="Whether the file was changed; if not, read `error`.")
    content: str | None = Field(
        default=None,
        description="What changed, with numbered lines around the edit site.",
    )
    error: str | None = Field(default=None, description="What went wrong and what to do instead.")


# --- operations (blocking; run in worker threads) -------------------------------

_Outcome = tuple[EditorResponse, FileEvidence | None]


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
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            return f"{shown!r} is a directory; give a file path."
        if not stat.S_ISREG(st.st_mode):
            return f"{shown!r} is not a regular file; the editor changes files only."
        refuse_private_key(fd, shown)
    except PathRefused as exc:
        os.close(fd)
        return exc.message
    except BaseException:
        os.close(fd)
        raise
    return Original(fd=fd, st=st)


def _write(loc: Location, content: str, steps: WriteSteps, want_evidence: bool) -> _Outcome:
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
    evidence = _evidence(loc.path, written, data) if want_evidence else None
    verb = "Created" if original is None else "Wrote"
    message = f"{verb} {shown!r} ({len(data):,} bytes, {_lines(data)} lines)."
    return EditorResponse(success=True, content=message), evidence


def _os_error(what: str, shown: str, exc: OSError) -> str:
    reason = (exc.strerror or str(exc)).lower()
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        return f"Cannot {what} {shown!r}: a parent path is a file, not a directory."
    return f"Cannot {what} {shown!r} ({reason}); the file was left unchanged."


def _read_utf8(dir_fd: int, loc: Location) -> Original | str:
    """The file opened and read (its bytes checked to be valid UTF-8), or a refusal message.

    The decoded text is dropped at once: edits work on the bytes (see `_edit`),
    so a big file is held once, not as bytes and text side by side.
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


def _encoded(text: str) -> bytes | None:
    """`text` as UTF-8, or None when it holds a lone surrogate (it then matches nothing)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return None


def _edit(
    loc: Location,
    old: str,
    new: str,
    replace_all: bool,
    steps: WriteSteps,
    want_evidence: bool = True,
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
            # replacement is read again and the edit redone on what it holds now.
            for _ in range(_ATTEMPTS):
                read = _read_utf8(dir_fd, loc)
                if isinstance(read, str):
                    return _failure(read)
                try:
                    outcome = _apply(dir_fd, loc, read, old, new, replace_all, steps, want_evidence)
                except FileChanged:
                    continue
                except LateChange:
                    return _failure(_late_change(shown))
                finally:
                    os.close(read.fd)
                return outcome
            return _failure(_changed_during(shown, "edited"))
    finally:
        os.close(dir_fd)


def _apply(
    dir_fd: int,
    loc: Location,
    read: Original,
    old: str,
    new: str,
    replace_all: bool,
    steps: WriteSteps,
    want_evidence: bool,
) -> _Outcome:
    # The search and replacement run on the UTF-8 bytes. For valid UTF-8 that
    # is exactly the same as on the text (UTF-8 is self-synchronising: an
    # encoded needle can only match at character boundaries), and it saves a
    # decode, an encode and two text copies of the file: a 50 MB edit drops
    # from ~4.7x to ~2x the file size in peak memory.
    shown = loc.shown
    data = read.data
    assert data is not None
    old_b = _encoded(old)
    count = 0 if old_b is None else data.count(old_b)
    # Only a new_string with line breaks needs to know the file's line
    # endings; counting them costs two passes over a big file.
    # An old_string with "\r" means the model handles line endings itself
    # (say, turning CRLF into LF): its new_string is then taken literally.
    crlf_file = "\n" in new and "\r" not in old and data.count(b"\n") == data.count(b"\r\n") > 0
    if not count and b"\r\n" in data and "\n" in old and "\r" not in old:
        # The model writes "\n"; a CRLF file keeps its CRLF endings.
        old = old.replace("\n", "\r\n")
        old_b = _encoded(old)
        count = 0 if old_b is None else data.count(old_b)
        crlf_file = True
    if crlf_file:
        # New lines in a file that uses CRLF throughout get CRLF too; a
        # file with mixed endings is left to the model's own choice.
        new = new.replace("\r\n", "\n").replace("\n", "\r\n")
    if not count or old_b is None:
        return _failure(not_found(data.decode("utf-8"), old, shown))
    if count > 1 and not replace_all:
        where = ", ".join(str(n) for n in match_lines(data, old_b, 10))
        return _failure(
            f"old_string occurs {count} times in {shown!r} (lines {where}"
            f"{', ...' if count > 10 else ''}); include more surrounding lines to make it "
            f"unique, or set replace_all=true to replace every occurrence."
        )
    new_b = _encoded(new)
    if new_b is None:
        reason = "surrogates not allowed"
        return _failure(f"new_string cannot be encoded as UTF-8 ({reason}); fix it.")
    site = data.find(old_b)
    updated = data.replace(old_b, new_b) if replace_all else data.replace(old_b, new_b, 1)
    try:
        written = commit(dir_fd, loc.name, updated, original=read, steps=steps)
    except OSError as exc:
        return _failure(_os_error("write", shown, exc))
    evidence = _evidence(loc.path, written, updated) if want_evidence else None
    done = f"{count} occurrences" if count > 1 else "1 occurrence"
    shown_lines = snippet(updated, site, len(new_b))
    message = f"Edited {shown!r}: replaced {done}. Around the edit:\n{shown_lines}"
    return EditorResponse(success=True, content=message), evidence


# --- the tool -------------------------------------------------------------------


@attrs.frozen
class _EditorHandler:
    """The ``editor`` handler: one workspace, one set of write steps."""

    workspace: Workspace
    steps: WriteSteps = attrs.field(default=DEFAULT_STEPS, repr=False)
    protect_git: bool = True

    async def __call__(self, request: EditorRequest) -> EditorResponse:
        try:
            loc = self.workspace.locate(request.file_path)
        except PathRefused as exc:
            return EditorResponse(success=False, error=exc.message)
        return await self.at(loc, request)

    async def at(self, loc: Location, request: EditorRequest) -> EditorResponse:
        """Carry out `request` on a path this workspace already located.

        The coding toolkit's guard locates the file once, checks its
        evidence there, and hands the same `Location` on, so the path is
        not resolved a second time between the check and the edit.
        """
        if self.protect_git and loc.in_git_dir:
            return EditorResponse(success=False, error=_git_refusal(request.file_path))
        context = evidence_wanted()
        if request.action == "write":
            if request.content is None:
                return EditorResponse(
                    success=False,
                    error="action 'write' needs `content`: the complete new file content.",
                )
            response, evidence = await anyio.to_thread.run_sync(
                _write, loc, request.content, self.steps, context is not None
            )
        else:
            checked = _check_edit(request)
            if isinstance(checked, str):
                return EditorResponse(success=False, error=checked)
            old, new = checked
            response, evidence = await anyio.to_thread.run_sync(
                _edit, loc, old, new, request.replace_all, self.steps, context is not None
            )
        record_evidence(context, evidence)
        return response


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
- edit: replace `old_string` with `new_string` in an existing UTF-8 file. old_string must
  match the file exactly, including indentation and whitespace, and must not contain the
  '<line number><TAB>' prefixes the reader shows. It must occur exactly once unless
  replace_all is true; add surrounding lines to make it unique. new_string '' deletes it.
  Line endings (CRLF or LF), a byte-order mark and a missing final newline are kept.

Read a file before editing it. Paths outside the workspace, symbolic links, secret files
(.env, .netrc, private keys, ...) and files inside .git are refused.
"""


def editor_tool(
    *,
    workspace_root: str | os.PathLike[str] | None = None,
    protected_names: Iterable[str] | None = None,
    allow_git_internals: bool = False,
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
    if _write_steps is not None and not isinstance(_write_steps, WriteSteps):
        raise TypeError(f"_write_steps must be a WriteSteps, got {_write_steps!r}")
    workspace = Workspace.at(workspace_root, protected=protected_names)
    return Tool(
        name="editor",
        description=_DESCRIPTION,
        request_model=EditorRequest,
        handler=_EditorHandler(
            workspace, _write_steps or DEFAULT_STEPS, protect_git=not allow_git_internals
        ),
        response_model=EditorResponse,
        # `write` overwrites a whole file: the strongest action sets the hints.
        hints=ToolHints("Edit files", destructive=True),
    )

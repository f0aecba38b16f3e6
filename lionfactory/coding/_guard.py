"""The read-before-edit guard of the coding toolkit.

An edit, or a write over an existing file, needs *evidence* that this branch
has seen the file's current content: a successful text read, write or edit of
that file by this toolkit. The reader and editor leave that evidence in the
running call's private metadata (`lionfactory._evidence`).

Where the evidence lives decides when it counts:

* A call made through `Branch.act` stores its metadata on its tool message.
  The guard looks for evidence only among the tool messages of the branch's
  **active view**, so evicting or compacting the message withdraws the
  evidence, for reads and mutations alike, and a clone (or a branch restored
  from disk) holds exactly the evidence its own view shows. There is no
  second copy to fall out of step with the view.
* A call made outside `Branch.act` (a script calling ``await tool(...)``)
  has no message; its evidence is kept in this toolkit's own `EvidenceStore`.

Evidence matches the file when its recorded ``mtime_ns`` and size still
match; when only the mtime moved (a ``touch``, a checkout that rewrote the
same bytes), the content hash decides (files over 8 MiB are not hashed when
read, so for them a moved mtime always asks for a new read). A partial-window read is enough for
``edit`` (the exact-match of ``old_string`` protects the rest) but a
``write`` over an existing file needs evidence of the whole file.

A caller that keeps no conversation (a stateless MCP connection, a client
that opens one session per call) proves its read by carrying it instead:
the reader returns ``content_hash`` (SHA-256 of the file's bytes) and the
editor's ``write``, ``edit``, ``multi_edit`` and ``insert`` take it back as
``expected_hash``. A hash that matches the open file's current bytes counts
as evidence of the whole file; one that does not is refused (read again),
even when the branch holds evidence. Inside `requiring_hash` (or with
``require_hash=True``) the branch's evidence is not consulted at all and
every change of an existing file must carry a matching hash: a stateless
server has no branch that could hold a read.

``multi_edit`` and ``insert`` need the same evidence as ``edit``;
``apply_patch`` needs it for every file it updates, moves or deletes, and
none for a file it adds (which must not exist).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import attrs

from lionfactory._evidence import FileEvidence
from lionfactory._os.regular import FileRefused, regular_stat
from lionfactory._os.workspace import Location, PathRefused
from lionfactory.tools.editor import EditorRequest

if TYPE_CHECKING:
    from lionfactory._branch import Branch

__all__ = [
    "EvidenceCheck",
    "EvidenceStore",
    "check_evidence",
    "hash_required",
    "requiring_hash",
    "sha256_of",
]

_REQUIRE_HASH: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "lionfactory_require_hash", default=False
)


@contextlib.contextmanager
def requiring_hash() -> Iterator[None]:
    """Within the block, changes of existing files need a matching ``expected_hash``.

    For servers that keep no conversation per caller (stateless MCP): the
    branch's evidence is not consulted, only the hash the call carries.
    """
    token = _REQUIRE_HASH.set(True)
    try:
        yield
    finally:
        _REQUIRE_HASH.reset(token)


def hash_required() -> bool:
    """Whether the running code is inside `requiring_hash`."""
    return _REQUIRE_HASH.get()


_HASH_CHUNK = 1 << 20


@attrs.define(eq=False)
class EvidenceStore:
    """Evidence from calls made outside `Branch.act`, by resolved path."""

    by_path: dict[str, FileEvidence] = attrs.field(factory=dict)

    def record(self, evidence: FileEvidence | None) -> None:
        """Keep the latest evidence for its path."""
        if evidence is not None:
            self.by_path[evidence.path] = evidence


def _active_evidence(branch: Branch, path: str) -> Iterable[FileEvidence]:
    """Evidence for `path` on the tool messages of the active view, newest first."""
    for message in reversed(branch.messages.active):
        if message.role != "tool":
            continue
        for evidence in FileEvidence.all_from_metadata(message.metadata):
            if evidence.path == path:
                yield evidence


def sha256_of(fd: int) -> str | None:
    """The hex digest of an open file's whole content (read with ``pread``), or None."""
    digest = hashlib.sha256()
    offset = 0
    try:
        while chunk := os.pread(fd, _HASH_CHUNK, offset):
            digest.update(chunk)
            offset += len(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def _matches(evidence: FileEvidence, st: os.stat_result, sha256: Callable[[], str | None]) -> bool:
    if evidence.size != st.st_size:
        return False
    if evidence.mtime_ns == st.st_mtime_ns:
        return True
    # A big file's evidence carries no hash: a moved mtime then needs a new read.
    return evidence.sha256 is not None and evidence.sha256 == sha256()


def check_evidence(
    branch: Branch,
    store: EvidenceStore,
    key: str,
    st: os.stat_result,
    sha256: Callable[[], str | None],
    *,
    whole_file: bool,
    display: str,
    expected_hash: str | None = None,
    require_hash: bool = False,
) -> str | None:
    """Return None when the branch may change the file, else the refusal text.

    Blocking (maybe hashing): call it from a worker thread. The caller opened
    the file through the workspace seam; `st` and `sha256` describe that
    open file, so nothing here looks the path up again.

    Args:
        branch: the branch whose active view holds the evidence.
        store: evidence of calls made outside `Branch.act`.
        key: the file's absolute path, as evidence records it.
        st: the open file's stat.
        sha256: computes the open file's content digest (called only when
            the mtime moved but the size did not).
        whole_file: the change needs evidence of the whole file (a write).
        display: the path as the model wrote it, for the message.
        expected_hash: the ``content_hash`` the call carries, if any: when it
            matches the file's bytes it is the evidence; when not, a refusal.
        require_hash: refuse a change without ``expected_hash`` whatever the
            branch holds (also implied inside `requiring_hash`).
    """
    if expected_hash is not None:
        if sha256() == expected_hash.lower():
            return None
        return (
            f"Refused: {display!r} is not the content expected_hash names (it changed since "
            f"that read, or the hash is of another file). Read the file again and retry with "
            f"the new content_hash."
        )
    if require_hash or hash_required():
        return (
            f"Refused: this connection keeps no read history, so a change of {display!r} must "
            f"carry expected_hash: the content_hash of your latest read (or edit) of the file. "
            f"Read it, then retry with expected_hash set."
        )
    candidates = list(_active_evidence(branch, key))
    local = store.by_path.get(key)
    if local is not None:
        candidates.append(local)
    if not candidates:
        verb = "read the whole file" if whole_file else "read it"
        return (
            f"Refused: {display!r} has not been read in this conversation (or that read is no "
            f"longer in the context). Read the file first ({verb} with the reader tool), then "
            f"retry; where the conversation keeps no state (a stateless MCP connection), pass "
            f"the read's content_hash as expected_hash."
        )
    usable = [e for e in candidates if e.whole_file or not whole_file]
    if any(_matches(e, st, sha256) for e in usable):
        return None
    if not usable:
        return (
            f"Refused: only part of {display!r} has been read; overwriting it needs a read of "
            f"the whole file. Read it without an offset/limit that cuts it (use next_offset "
            f"until the end), or use edit to change one part."
        )
    return (
        f"Refused: {display!r} changed since it was last read (modified outside this "
        f"conversation). Read it again, then retry the change against its current content."
    )


def _check_file(
    branch: Branch,
    store: EvidenceStore,
    loc: Location,
    *,
    whole_file: bool,
    display: str,
    expected_hash: str | None,
    require_hash: bool,
) -> str | None:
    try:
        fd = loc.open_read()
    except (PathRefused, OSError):
        # A new file needs no evidence; a missing file for edit, a link or a
        # key gets the editor's own error.
        return None
    try:
        try:
            st = regular_stat(fd, display)
        except FileRefused:
            return None  # a directory or a device: the editor explains
        return check_evidence(
            branch,
            store,
            str(loc.path),
            st,
            lambda: sha256_of(fd),
            whole_file=whole_file,
            display=display,
            expected_hash=expected_hash,
            require_hash=require_hash,
        )
    finally:
        os.close(fd)


@attrs.frozen
class EvidenceCheck:
    """The guard as the editor's ``check``: one branch's evidence, one store.

    The editor calls it (in a worker thread) on each `Location` it resolved
    itself, before it changes that file, so the guard opens exactly the file
    the edit then writes and never looks a path up on its own.
    """

    branch: Branch
    store: EvidenceStore
    require_hash: bool = False
    """See `check_evidence`."""

    def __call__(self, loc: Location, request: EditorRequest) -> str | None:
        """The refusal of changing `loc` for `request`, or None when it may go ahead.

        For ``apply_patch`` the editor calls this once per file the patch
        updates, moves or deletes; for the other actions, on the request's file.
        """
        patch = request.action == "apply_patch"
        refusal = _check_file(
            self.branch,
            self.store,
            loc,
            whole_file=request.action == "write",
            display=loc.shown,
            expected_hash=None if patch else request.expected_hash,
            require_hash=self.require_hash,
        )
        if refusal is None or not patch:
            return refusal
        if self.require_hash or hash_required():
            return (
                f"Refused: this connection keeps no read history, and a patch cannot "
                f"carry expected_hash for {loc.shown!r}. Change existing files with edit or "
                f"multi_edit and expected_hash (apply_patch may still add new files)."
            )
        return refusal + " (The patch was not applied; no file was changed.)"

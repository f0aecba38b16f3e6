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
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import attrs

from lionfactory._evidence import FileEvidence

if TYPE_CHECKING:
    from lionfactory._branch import Branch

__all__ = ["EvidenceStore", "check_evidence", "sha256_of"]

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
        evidence = FileEvidence.from_metadata(message.metadata)
        if evidence is not None and evidence.path == path:
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
    """
    candidates = list(_active_evidence(branch, key))
    local = store.by_path.get(key)
    if local is not None:
        candidates.append(local)
    if not candidates:
        verb = "read the whole file" if whole_file else "read it"
        return (
            f"Refused: {display!r} has not been read in this conversation (or that read is no "
            f"longer in the context). Read the file first ({verb} with the reader tool), then "
            f"retry."
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

"""The read-before-edit guard (DESIGN §7.2).

An edit, or a write over an existing file, needs *evidence* that this branch
has seen the file's current content: a successful text read, write or edit of
that file by this toolkit. The reader and editor leave that evidence in the
running call's private metadata (`lionfactory.tools._evidence`).

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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from lionfactory.tools._evidence import EVIDENCE_KEY

if TYPE_CHECKING:
    from lionfactory._branch import Branch

__all__ = ["EvidenceStore", "check_evidence"]

_HASH_CHUNK = 1 << 20


@attrs.define(eq=False)
class EvidenceStore:
    """Evidence from calls made outside `Branch.act`, by resolved path."""

    by_path: dict[str, dict[str, Any]] = attrs.field(factory=dict)

    def record(self, evidence: Mapping[str, Any] | None) -> None:
        """Keep the latest evidence for its path."""
        if evidence:
            self.by_path[str(evidence["path"])] = dict(evidence)


def _active_evidence(branch: Branch, path: str) -> Iterable[Mapping[str, Any]]:
    """Evidence for `path` on the tool messages of the active view, newest first."""
    for message in reversed(branch.messages.active):
        if message.role != "tool":
            continue
        evidence = message.metadata.get(EVIDENCE_KEY)
        if evidence and evidence.get("path") == path:
            yield evidence


def _sha256(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(_HASH_CHUNK):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def _matches(evidence: Mapping[str, Any], st: os.stat_result, path: Path) -> bool:
    if evidence.get("size") != st.st_size:
        return False
    if evidence.get("mtime_ns") == st.st_mtime_ns:
        return True
    expected = evidence.get("sha256")
    # A big file's evidence carries no hash: a moved mtime then needs a new read.
    return expected is not None and expected == _sha256(path)


def check_evidence(
    branch: Branch,
    store: EvidenceStore,
    path: Path,
    *,
    whole_file: bool,
    display: str,
) -> str | None:
    """Return None when the branch may change `path`, else the refusal text.

    Blocking (stat, maybe hashing): call it from a worker thread.

    Args:
        branch: the branch whose active view holds the evidence.
        store: evidence of calls made outside `Branch.act`.
        path: the resolved path about to be changed; must exist.
        whole_file: the change needs evidence of the whole file (a write).
        display: the path as the model wrote it, for the message.
    """
    try:
        st = path.stat()
    except OSError:
        # Gone since the caller checked: the editor reports the missing file.
        return None
    key = str(path)
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
    usable = [e for e in candidates if e.get("whole_file") or not whole_file]
    if any(_matches(e, st, path) for e in usable):
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

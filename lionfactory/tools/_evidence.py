"""File evidence: what a file looked like right after a tool read or wrote it.

The coding toolkit's read-before-edit guard (DESIGN §7.2) needs to know that a
branch has seen a file's current content. The reader and the editor record
that fact here, in the private metadata of the running call
(`lionfactory.current_call()`), never in the response the model reads. Outside
a `CallContext` nothing is recorded, and nothing is computed: hashing a large
file costs time that only a guard can justify.

Both tools record the same shape::

    ctx.metadata["file_evidence"] = {
        "path": "/abs/resolved/path",
        "mtime_ns": 1700000000000000000,
        "size": 1234,
        "sha256": "…",
        "whole_file": True,
    }
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import attrs

from lionfactory._call import CallContext, current_call

__all__ = ["FileEvidence", "evidence_wanted", "record_evidence"]

EVIDENCE_KEY = "file_evidence"

MAX_HASHED_BYTES = 8 * 1024 * 1024
"""Files up to this size get a content hash in their evidence (see `FileEvidence`)."""


@attrs.frozen
class FileEvidence:
    """The state of one file as a tool saw it.

    Attributes:
        path: the resolved absolute path.
        mtime_ns: the modification time, in nanoseconds.
        size: the size in bytes.
        sha256: the hex digest of the whole content, or None for a file over
            `MAX_HASHED_BYTES` (hashing 500 MB to show a 2,000-line window
            would cost a hundred times the window; without the hash, a file
            whose mtime moved must simply be read again).
        whole_file: whether the model was shown (or wrote) the whole content.
    """

    path: str
    mtime_ns: int
    size: int
    sha256: str | None
    whole_file: bool

    @classmethod
    def of(
        cls, path: Path, st: os.stat_result, digest: hashlib._Hash | None, *, whole_file: bool
    ) -> FileEvidence:
        """Build the record from a stat result and a finished hash of the content."""
        return cls(
            path=str(path),
            mtime_ns=st.st_mtime_ns,
            size=st.st_size,
            sha256=None if digest is None else digest.hexdigest(),
            whole_file=whole_file,
        )


def evidence_wanted() -> CallContext | None:
    """The running call's context when evidence should be recorded, else None."""
    return current_call()


def record_evidence(context: CallContext | None, evidence: FileEvidence | None) -> None:
    """Store `evidence` in `context.metadata` (a no-op when either is None)."""
    if context is None or evidence is None:
        return
    context.metadata[EVIDENCE_KEY] = attrs.asdict(evidence)

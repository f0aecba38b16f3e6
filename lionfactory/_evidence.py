"""File evidence: what a file looked like right after a tool read or wrote it.

The coding toolkit's read-before-edit guard must know that a branch has seen
a file's current content before it lets the branch change the file. The
reader and the editor record that fact in the private metadata of the
running call (`lionfactory.current_call()`), never in the response the model
reads; `Branch.act` then keeps it on the tool message, so evidence lives and
dies with that message in the active view.

Only a call that asks for evidence gets it: the toolkit asks
(`asking_for_evidence`) around each call of its reader and editor. A plain
reader or editor, even under `Branch.act`, computes nothing: hashing a large
file costs time that only a guard can justify.

On a message the record is a plain JSON-ready dict under `EVIDENCE_KEY`
(messages are persisted and restored as JSON); everywhere else it is the
typed `FileEvidence`, and `FileEvidence.from_metadata` is the one way back.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from lionfactory._call import CallContext, current_call

__all__ = [
    "EVIDENCE_KEY",
    "MAX_HASHED_BYTES",
    "MORE_EVIDENCE_KEY",
    "FileEvidence",
    "asking_for_evidence",
    "evidence_wanted",
    "record_all_evidence",
    "record_evidence",
]

EVIDENCE_KEY = "file_evidence"
"""The key of a call's (and its tool message's) metadata that holds the evidence."""

MORE_EVIDENCE_KEY = "file_evidence_more"
"""The key of the evidence of further files one call touched (a multi-file patch), a list."""

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

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> FileEvidence | None:
        """The evidence a call or tool message's metadata holds, or None.

        Metadata that is missing the record, or holds one of another shape
        (hand-edited, or from an older version), counts as no evidence: the
        guard then asks for a new read, which is always safe.
        """
        raw = metadata.get(EVIDENCE_KEY)
        if not isinstance(raw, Mapping):
            return None
        try:
            return cls(
                path=str(raw["path"]),
                mtime_ns=int(raw["mtime_ns"]),
                size=int(raw["size"]),
                sha256=None if raw.get("sha256") is None else str(raw["sha256"]),
                whole_file=bool(raw["whole_file"]),
            )
        except (KeyError, TypeError, ValueError):
            return None

    @classmethod
    def all_from_metadata(cls, metadata: Mapping[str, Any]) -> list[FileEvidence]:
        """Every file's evidence a call or tool message holds (one, or several for a patch)."""
        found = [cls.from_metadata(metadata)]
        more = metadata.get(MORE_EVIDENCE_KEY)
        if isinstance(more, list):
            found.extend(cls.from_metadata({EVIDENCE_KEY: raw}) for raw in more)
        return [evidence for evidence in found if evidence is not None]

    def to_metadata(self) -> dict[str, Any]:
        """The JSON-ready dict stored under `EVIDENCE_KEY` (the fields, in their order)."""
        # Written out: attrs.asdict's generic walk cost ten times this on every read.
        return {
            "path": self.path,
            "mtime_ns": self.mtime_ns,
            "size": self.size,
            "sha256": self.sha256,
            "whole_file": self.whole_file,
        }


@contextlib.contextmanager
def asking_for_evidence(context: CallContext) -> Iterator[CallContext]:
    """Ask the tools run inside the block to record evidence in `context`."""
    previous = context.wants_evidence
    context.wants_evidence = True
    try:
        yield context
    finally:
        context.wants_evidence = previous


def evidence_wanted() -> CallContext | None:
    """The running call's context when it asked for evidence, else None."""
    context = current_call()
    return context if context is not None and context.wants_evidence else None


def record_evidence(context: CallContext | None, evidence: FileEvidence | None) -> None:
    """Store `evidence` in `context.metadata` (a no-op when either is None)."""
    if context is None or evidence is None:
        return
    context.metadata[EVIDENCE_KEY] = evidence.to_metadata()


def record_all_evidence(context: CallContext | None, evidence: list[FileEvidence]) -> None:
    """Store the evidence of several files in `context.metadata` (a no-op for None or [])."""
    if context is None or not evidence:
        return
    context.metadata[EVIDENCE_KEY] = evidence[0].to_metadata()
    if len(evidence) > 1:
        context.metadata[MORE_EVIDENCE_KEY] = [e.to_metadata() for e in evidence[1:]]

"""`FileEvidence` in message metadata: the stored dict and the round trip."""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from lionfactory._evidence import EVIDENCE_KEY, FileEvidence

evidences = st.builds(
    FileEvidence,
    path=st.text(),
    mtime_ns=st.integers(min_value=0, max_value=2**63),
    size=st.integers(min_value=0, max_value=2**63),
    sha256=st.none() | st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
    whole_file=st.booleans(),
)


@given(evidences)
def test_the_stored_dict_is_every_field_in_order_and_reads_back(evidence: FileEvidence) -> None:
    stored = evidence.to_metadata()
    assert stored == attrs.asdict(evidence)
    assert list(stored) == [field.name for field in attrs.fields(FileEvidence)]
    assert FileEvidence.from_metadata({EVIDENCE_KEY: stored}) == evidence

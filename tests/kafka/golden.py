"""Golden record bytes from Kafka's own serializer: the records a real Kafka
3.9 wrote to its log and snapshots are decoded by kraftsim, encoded again at the same version,
and must come out byte for byte as Kafka wrote them."""

from __future__ import annotations

from pathlib import Path

from kraftsim.metadata import records as recs
from kraftsim.metadata.batch import decode_control_record
from kraftsim.metadata.segments import iter_file_batches


def assert_golden(paths: list[Path]) -> dict[str, set[int]]:
    """Every record in ``paths`` (written by Kafka), decoded by kraftsim and encoded again at the
    same version, is byte for byte what Kafka's serializer wrote; returns the versions seen."""
    seen: dict[str, set[int]] = {}
    for path in paths:
        for _, batch in iter_file_batches(path):
            for rec in batch.records():
                assert rec.value is not None
                if batch.is_control:
                    ctl = decode_control_record(rec)
                    assert ctl is not None, (path, rec.offset)
                    assert ctl[1].encode(0) == rec.value, (path, rec.offset, ctl)
                    continue
                msg, version = recs.unframe(rec.value)
                assert recs.frame(msg, version) == rec.value, (path, rec.offset, msg)
                seen.setdefault(type(msg).__name__, set()).add(version)
    return seen

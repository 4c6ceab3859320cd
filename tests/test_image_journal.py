"""The image's undo journal: reverts, metadata transactions and deltas (metadata/image/journal.py).

The property: whatever marks, reverts, commits and aborted transactions are interleaved with a
valid record stream, the image ends equal to a plain image that replayed only the records that
stand (and, at every revert, equal to one that replayed the records up to that point). Records
go through their framed bytes and the loader's fast path, as they do on restart.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftsim.metadata.image import MetadataImage
from kraftsim.metadata.image.fast_replay import replay_framed
from kraftsim.metadata.loader import load_image
from kraftsim.metadata.log import MetadataLog
from kraftsim.metadata.records import by_name, frame, unframe
from kraftsim.rpc.message import Message
from tests.test_image_property import SUPPORTED, _check_indexes, streams

R = by_name
BEGIN = R("BeginTransactionRecord")
END = R("EndTransactionRecord")
ABORT = R("AbortTransactionRecord")
TXN_TYPES = (BEGIN, END, ABORT)


class Live:
    """The image under test, fed framed values at increasing offsets."""

    def __init__(self) -> None:
        self.image = MetadataImage(SUPPORTED)
        self.stood: list[bytes] = []  # the records that stand, in order (the reference's input)

    def apply(self, value: bytes) -> None:
        replay_framed(self.image, value, self.image.offset + 1)


def plain(values: list[bytes]) -> MetadataImage:
    """A reference image: nothing marked, nothing reverted, no transaction aborted."""
    img = MetadataImage(SUPPORTED)
    for i, v in enumerate(values):
        img.replay(unframe(v)[0], i)
    return img


def _keys_changed(old: MetadataImage, new: MetadataImage) -> dict[str, set[Any]]:
    """Brute force: which brokers, topics, partitions, configs and features differ."""
    out: dict[str, set[Any]] = {}
    out["broker"] = {b for b in set(old.cluster.brokers) | set(new.cluster.brokers)
                     if old.cluster.brokers.get(b) != new.cluster.brokers.get(b)}
    out["topic"] = {t for t in set(old.topics.by_id) | set(new.topics.by_id)
                    if (t in old.topics.by_id) != (t in new.topics.by_id)}
    parts: set[Any] = set()
    for tid in set(old.topics.by_id) | set(new.topics.by_id):
        a, b = old.topics.by_id.get(tid), new.topics.by_id.get(tid)
        for pid in set(a.partitions if a else ()) | set(b.partitions if b else ()):
            if (a.partitions.get(pid) if a else None) != (b.partitions.get(pid) if b else None):
                parts.add((tid, pid))
    out["partition"] = parts
    cfg: set[Any] = set()
    for res in set(old.configs.resources) | set(new.configs.resources):
        a, b = old.configs.resources.get(res, {}), new.configs.resources.get(res, {})
        if res[0] == 2 and res[1] not in new.topics.by_name and res[1] in old.topics.by_name:
            pass  # a removed topic's configs go with it: also reported, per key
        cfg |= {(res, k) for k in set(a) | set(b) if a.get(k) != b.get(k)}
    out["config"] = cfg
    out["feature"] = {f for f in {*old.features.all_levels(), *new.features.all_levels()}
                      if old.features.all_levels().get(f) != new.features.all_levels().get(f)}
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(), st.data())
def test_reverts_aborts_and_deltas_equal_replaying_what_stands(
        stream: tuple[list[tuple[Message, int]], list[int]], data: st.DataObject) -> None:
    recs, cuts = stream
    values = [frame(r, v) for r, v in recs]
    outside_txn = set(cuts) | {0}
    live = Live()
    i = 0
    while i < len(values):
        action = data.draw(st.sampled_from(["apply", "apply", "revert", "abort", "delta", "commit"]))
        ahead = values[i:i + data.draw(st.integers(1, 6))]
        if action == "apply":
            live.apply(values[i])
            live.stood.append(values[i])
            i += 1
        elif action == "commit":
            live.image.commit(live.image.offset)
        elif action == "revert":
            # The controller's case: appended, then the write did not become durable.
            at = live.image.offset
            live.image.mark()
            for v in ahead:
                live.apply(v)
            live.image.revert_to(at)
            assert live.image.offset == at
            assert live.image == plain(live.stood)
            _check_indexes(live.image)
        elif action == "abort":
            # A transaction that aborts leaves no trace, and the abort itself can be reverted.
            if i not in outside_txn or any(isinstance(unframe(v)[0], TXN_TYPES) for v in ahead):
                continue
            live.apply(frame(BEGIN(name="kraftsim test"), 0))
            for v in ahead:
                live.apply(v)
            with_txn = plain(live.stood + ahead)
            at = live.image.offset
            live.image.mark()
            live.apply(frame(ABORT(reason="test"), 0))
            assert live.image == plain(live.stood)
            live.image.revert_to(at)
            assert live.image == with_txn and live.image.transaction.open
            live.image.commit(at)
            live.apply(frame(ABORT(reason="test"), 0))
            assert live.image == plain(live.stood) and not live.image.transaction.open
        elif action == "delta":
            since = live.image.offset
            before = plain(live.stood)
            live.image.mark()
            for v in ahead:
                live.apply(v)
                live.stood.append(v)
            i += len(ahead)
            delta = live.image.delta(since)
            expected = _keys_changed(before, live.image)
            for kind, keys in expected.items():
                got = set(delta.changes(kind))
                if kind == "topic":
                    got = {k for k, (a, b) in delta.changes(kind).items() if (a is None) != (b is None)}
                assert got == keys, kind
            live.image.commit(live.image.offset)
    assert live.image == plain(live.stood)
    _check_indexes(live.image)
    if not live.image.transaction.open:
        live.image.commit(live.image.offset)
        assert not live.image.journaling


def _image(*records: Any) -> MetadataImage:
    img = MetadataImage()
    for r in records:
        img.replay(r, img.offset + 1)
    return img


MV = R("FeatureLevelRecord")(name="metadata.version", feature_level=21)
TID = uuid.UUID(int=7 << 64)


def test_the_journal_is_off_unless_someone_may_revert() -> None:
    img = _image(MV, R("TopicRecord")(name="t", topic_id=TID))
    assert not img.journaling and img.revertible_from() == img.offset
    img.mark()
    assert img.journaling
    img.replay(R("ConfigRecord")(resource_type=2, resource_name="t", name="k", value="v"), 2)
    img.commit(2)
    assert not img.journaling


def test_cannot_revert_or_mark_before_the_journal() -> None:
    img = _image(MV, R("TopicRecord")(name="t", topic_id=TID))
    with pytest.raises(ValueError, match="can only go back to 1"):
        img.revert_to(0)
    with pytest.raises(ValueError, match="can only go back to 1"):
        img.mark(0)
    img.mark()
    img.replay(R("NoOpRecord")(), 2)
    img.revert_to(1)
    assert img.offset == 1


def test_a_failed_record_leaves_the_journaled_image_unchanged() -> None:
    img = _image(MV, R("TopicRecord")(name="t", topic_id=TID))
    img.mark()
    with pytest.raises(Exception, match="duplicate TopicRecord"):
        img.replay(R("TopicRecord")(name="t", topic_id=TID), 2)
    assert img.offset == 1 and img._starts == []


def test_an_open_transaction_stays_revertible_past_commit() -> None:
    img = _image(MV)
    img.mark()
    img.replay(BEGIN(name="migration"), 1)
    img.replay(R("TopicRecord")(name="t", topic_id=TID), 2)
    img.commit(2)  # committed in the Raft sense, but the transaction is still open
    assert img.journaling and img.revertible_from() == 0
    img.replay(ABORT(reason="failover"), 3)
    assert img.topics.by_name == {} and img.offset == 3 and not img.journaling


def test_delta_across_an_aborted_transaction() -> None:
    img = _image(MV)
    img.mark()
    img.replay(BEGIN(name="x"), 1)
    img.replay(R("TopicRecord")(name="t", topic_id=TID), 2)
    img.replay(ABORT(reason="x"), 3)
    assert img.delta(0).changes("topic") == {}  # it never happened, seen from before it began
    (old, new), = img.delta(2).changes("topic").values()  # seen from inside, the topic went away
    assert old.name == "t" and new is None


# ----- the loader honours transactions -----------------------------------------------------------

def _log(tmp_path: Path, records: list[Any]) -> MetadataLog:
    mlog = MetadataLog.open(tmp_path)
    mlog.append_records([(r, 0) for r in records], epoch=1, timestamp=1)
    mlog.flush_now()
    return mlog


def test_loader_drops_an_aborted_transaction(tmp_path: Path) -> None:
    t2 = uuid.UUID(int=8 << 64)
    mlog = _log(tmp_path, [MV, BEGIN(name="x"), R("TopicRecord")(name="gone", topic_id=TID), ABORT(reason="r"),
                           R("TopicRecord")(name="kept", topic_id=t2)])
    image, result = load_image(mlog, MetadataImage)
    assert set(image.topics.by_name) == {"kept"} and result.last_offset == 4


def test_loader_keeps_an_ended_transaction(tmp_path: Path) -> None:
    mlog = _log(tmp_path, [MV, BEGIN(name="x"), R("TopicRecord")(name="t", topic_id=TID), END()])
    image, _ = load_image(mlog, MetadataImage)
    assert set(image.topics.by_name) == {"t"}
    assert not image.journaling


def test_loader_aborts_a_transaction_open_at_the_end_unless_asked_to_keep_it(tmp_path: Path) -> None:
    mlog = _log(tmp_path, [MV, BEGIN(name="x"), R("TopicRecord")(name="t", topic_id=TID)])
    image, result = load_image(mlog, MetadataImage)
    assert image.topics.by_name == {} and not image.transaction.open
    assert result.last_offset == 2 and image.offset == 0
    kept, _ = load_image(mlog, MetadataImage, open_transaction="keep")
    assert set(kept.topics.by_name) == {"t"} and kept.transaction.open
    kept.replay(ABORT(reason="Controller failover"), 3)
    assert kept.topics.by_name == {}

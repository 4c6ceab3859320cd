"""Eligible leader replicas (KIP-966) as a Kafka 4.x controller keeps them: replay of the ELR
fields and ClearElrRecord, and the PartitionChangeBuilder's ELR rules (sans-I/O)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kraftsim.metadata import versions
from kraftsim.metadata.image import MetadataImage, ReplayError
from kraftsim.metadata.image.topics import Partition
from kraftsim.metadata.loader import load_image
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.metadata.records import by_name

R = by_name
R44 = versions.release("4.4")
MV44 = R44.latest_production
T1 = uuid.UUID(int=0xE1)
T2 = uuid.UUID(int=0xE2)


def _elr_image(elr_level: int = 1) -> MetadataImage:
    img = MetadataImage(release=R44)
    img.replay(R("FeatureLevelRecord")(name="metadata.version", feature_level=MV44), 0)
    if elr_level:
        img.replay(R("FeatureLevelRecord")(name=versions.ELR_VERSION, feature_level=elr_level), 1)
    img.replay(R("TopicRecord")(name="a", topic_id=T1), 2)
    img.replay(R("TopicRecord")(name="b", topic_id=T2), 3)
    return img


def _partition(img: MetadataImage, tid: uuid.UUID, pid: int, isr: list[int], leader: int,
               elr: list[int] | None = None, lke: list[int] | None = None) -> None:
    img.replay(R("PartitionRecord")(partition_id=pid, topic_id=tid, replicas=[1, 2, 3], isr=isr, leader=leader,
                                    leader_epoch=4, partition_epoch=6, eligible_leader_replicas=elr,
                                    last_known_elr=lke, directories=[uuid.UUID(int=0)] * 3), img.offset + 1)


def _part(img: MetadataImage, tid: uuid.UUID, pid: int) -> Partition:
    p = img.topics.partition(tid, pid)
    assert p is not None
    return p


# ----- replay ----------------------------------------------------------------------------------

def test_clear_elr_of_one_topic_empties_both_lists_and_bumps_the_partition_epoch() -> None:
    img = _elr_image()
    _partition(img, T1, 0, [1], 1, elr=[2, 3])
    _partition(img, T1, 1, [], -1, elr=[2], lke=[1])
    _partition(img, T1, 2, [1, 2, 3], 1)
    _partition(img, T2, 0, [1], 1, elr=[3])
    assert set(img.topics.elr_index) == {2, 3}
    img.mark()
    img.replay(R("ClearElrRecord")(topic_name="a"), img.offset + 1)
    for pid in (0, 1):
        p = _part(img, T1, pid)
        assert (p.elr, p.last_known_elr, p.leader_epoch, p.partition_epoch) == ((), (), 4, 7)
    assert _part(img, T1, 2).partition_epoch == 6  # nothing to clear: untouched
    assert _part(img, T2, 0).elr == (3,)
    assert set(img.topics.elr_index) == {3}
    img.revert_to(img.offset - 1)
    assert _part(img, T1, 0).elr == (2, 3) and _part(img, T1, 1).last_known_elr == (1,)
    assert set(img.topics.elr_index) == {2, 3}


def test_clear_elr_without_a_name_clears_every_topic() -> None:
    img = _elr_image()
    _partition(img, T1, 0, [1], 1, elr=[2])
    _partition(img, T2, 0, [1], 1, lke=[3])
    img.replay(R("ClearElrRecord")(topic_name=""), img.offset + 1)
    assert _part(img, T1, 0).elr == () and _part(img, T2, 0).last_known_elr == ()
    assert not img.topics.elr_index


def test_clear_elr_of_an_unknown_topic_is_refused_and_changes_nothing() -> None:
    img = _elr_image()
    _partition(img, T1, 0, [1], 1, elr=[2])
    before = img.offset
    with pytest.raises(ReplayError, match="Unable to find a topic named c in order to clear its ELRs."):
        img.replay(R("ClearElrRecord")(topic_name="c"), img.offset + 1)
    assert img.offset == before and _part(img, T1, 0).elr == (2,)


def test_a_3_9_image_has_no_clear_elr_record() -> None:
    img = MetadataImage()
    with pytest.raises(ReplayError, match="Unknown metadata id 28"):
        img.replay(R("ClearElrRecord")(topic_name=""), 0)


def test_a_log_kafka_4x_wrote_with_elr_loads(tmp_path: Path) -> None:
    """PartitionRecord and PartitionChangeRecord v2 with the ELR fields, then ClearElrRecord."""
    log = MetadataLog.open(tmp_path, LogConfig(linger_ms=0))
    log.append_records([
        (R("FeatureLevelRecord")(name="metadata.version", feature_level=MV44), 0),
        (R("FeatureLevelRecord")(name=versions.ELR_VERSION, feature_level=1), 0),
        (R("TopicRecord")(name="a", topic_id=T1), 0),
        (R("PartitionRecord")(partition_id=0, topic_id=T1, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1,
                              leader_epoch=0, partition_epoch=0, directories=[uuid.UUID(int=0)] * 3), 2),
        (R("PartitionChangeRecord")(partition_id=0, topic_id=T1, isr=[1], eligible_leader_replicas=[2, 3]), 2),
        (R("PartitionChangeRecord")(partition_id=0, topic_id=T1, isr=[], leader=-1, eligible_leader_replicas=[1, 2, 3],
                                    last_known_elr=[1]), 2),
    ], epoch=1, timestamp=1)
    log.flush_now()
    image, _ = load_image(log, lambda: MetadataImage(R44.supported_features(), R44))
    p = _part(image, T1, 0)
    assert (p.isr, p.leader, p.elr, p.last_known_elr, p.leader_epoch, p.partition_epoch) == \
        ((), -1, (1, 2, 3), (1,), 1, 2)
    log.append_records([(R("ClearElrRecord")(topic_name="a"), 0)], epoch=1, timestamp=2)
    log.flush_now()
    image, _ = load_image(log, lambda: MetadataImage(R44.supported_features(), R44))
    p = _part(image, T1, 0)
    assert (p.elr, p.last_known_elr, p.partition_epoch) == ((), (), 3)
    log.close()


@pytest.mark.parametrize("elr_level", [1, 0])
def test_a_snapshot_keeps_the_elr_fields_only_with_elr_on(elr_level: int) -> None:
    """PartitionRegistration.toRecord: non-empty ELR lists are written with ELR on; with it off
    a 4.x image drops them without complaint."""
    img = _elr_image(elr_level)
    _partition(img, T1, 0, [], -1, elr=[2, 3], lke=[1])
    recs = [rec for rec, _ in img.records() if type(rec).__name__ == "PartitionRecord"]
    assert len(recs) == 1
    if elr_level:
        assert (recs[0].eligible_leader_replicas, recs[0].last_known_elr) == ([2, 3], [1])
    else:
        assert (recs[0].eligible_leader_replicas, recs[0].last_known_elr) == (None, None)
    copy = MetadataImage(release=R44)
    for i, (rec, _) in enumerate(img.records()):
        copy.replay(rec, i)
    assert (copy == img) is bool(elr_level)

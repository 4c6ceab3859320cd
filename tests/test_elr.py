"""Eligible leader replicas (KIP-966) as a Kafka 4.x controller keeps them: replay of the ELR
fields and ClearElrRecord, and the PartitionChangeBuilder's ELR rules (sans-I/O)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kraftsim.controller.managers.cluster import ClusterControlManager
from kraftsim.controller.managers.configuration import ConfigurationControlManager
from kraftsim.controller.managers.partition_change import Election, PartitionChangeBuilder
from kraftsim.controller.managers.replication import ReplicationControlManager
from kraftsim.metadata import versions
from kraftsim.metadata.image import MetadataImage, ReplayError
from kraftsim.metadata.image.configs import BROKER, TOPIC
from kraftsim.metadata.image.topics import Partition
from kraftsim.metadata.loader import load_image
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.metadata.records import by_name
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.registry import request_class
from tests.controller_harness import WriteHarness, request_context

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
    assert img.topics.elr_index.brokers() == {2, 3}
    img.mark()
    img.replay(R("ClearElrRecord")(topic_name="a"), img.offset + 1)
    for pid in (0, 1):
        p = _part(img, T1, pid)
        assert (p.elr, p.last_known_elr, p.leader_epoch, p.partition_epoch) == ((), (), 4, 7)
    assert _part(img, T1, 2).partition_epoch == 6  # nothing to clear: untouched
    assert _part(img, T2, 0).elr == (3,)
    # As in Kafka's broker-to-ELR index, the cleared members stay listed.
    assert [pid for _, pid, _ in img.topics.partitions_with_elr_member(2)] == [0, 1]
    # A delta sees the cleared partitions as partition changes.
    assert set(img.delta(img.offset - 1).changes("partition")) == {(T1, 0), (T1, 1)}
    img.revert_to(img.offset - 1)
    assert _part(img, T1, 0).elr == (2, 3) and _part(img, T1, 1).last_known_elr == (1,)
    # The index is as it was: each partition listed once (not the cleared entry plus a re-added one).
    assert [pid for _, pid, _ in img.topics.partitions_with_elr_member(2)] == [0, 1]


def test_clear_elr_without_a_name_clears_every_topic() -> None:
    img = _elr_image()
    _partition(img, T1, 0, [1], 1, elr=[2])
    _partition(img, T2, 0, [1], 1, lke=[3])
    img.replay(R("ClearElrRecord")(topic_name=""), img.offset + 1)
    assert _part(img, T1, 0).elr == () and _part(img, T2, 0).last_known_elr == ()


def test_a_member_listed_after_a_clear_is_listed_twice_when_it_enters_again() -> None:
    """Kafka's index is a list: the stale entry stays, the new one is appended; taking the
    broker out again leaves one entry, padded with partition 0 as Java's array copy does."""
    img = _elr_image()
    _partition(img, T1, 3, [1], 1, elr=[2])
    img.replay(R("ClearElrRecord")(topic_name="a"), img.offset + 1)
    change = R("PartitionChangeRecord")
    img.replay(change(partition_id=3, topic_id=T1, eligible_leader_replicas=[2]), img.offset + 1)
    assert [pid for _, pid, _ in img.topics.partitions_with_elr_member(2)] == [3, 3]
    img.replay(change(partition_id=3, topic_id=T1, eligible_leader_replicas=[]), img.offset + 1)
    assert img.topics.elr_index.entries(2) == [(img.topics.by_id[T1].key, 0)]


def test_a_deleted_topic_left_in_the_elr_index_faults_as_kafka_does() -> None:
    """RemoveTopicRecord drops the topic's entries of its partitions' ELR members only: a
    member cleared by ClearElrRecord keeps its entry, and walking it fails."""
    img = _elr_image()
    _partition(img, T1, 0, [1], 1, elr=[2])
    _partition(img, T1, 1, [1], 1, elr=[3])
    img.replay(R("ClearElrRecord")(topic_name="a"), img.offset + 1)
    img.replay(R("PartitionChangeRecord")(partition_id=1, topic_id=T1, eligible_leader_replicas=[3]),
               img.offset + 1)
    img.replay(R("RemoveTopicRecord")(topic_id=T1), img.offset + 1)
    assert img.topics.partitions_with_elr_member(3) == []
    with pytest.raises(RuntimeError, match="ELR index of broker 2"):
        img.topics.partitions_with_elr_member(2)


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


# ----- the builder's ELR rules ----------------------------------------------------------------

def _p(isr: tuple[int, ...], leader: int, elr: tuple[int, ...] = (), lke: tuple[int, ...] = (),
       replicas: tuple[int, ...] = (1, 2, 3)) -> Partition:
    return Partition(replicas, isr, (uuid.UUID(int=0),) * len(replicas), leader, 4, 6, elr=elr, last_known_elr=lke)


def _accept(*ok: int) -> Callable[[int], bool]:
    return lambda r: r in ok


def _build(p: Partition, accept: Callable[[int], bool], release: str = "4.4", min_isr: int = 2,
           **kw: Any) -> Any:
    rv = PartitionChangeBuilder(p, T1, 0, accept, MV44, release=versions.release(release),
                                eligible_leader_replicas_enabled=True, min_isr=min_isr, **kw).build()
    return None if rv is None else rv[0]


def test_an_isr_below_min_isr_moves_the_removed_members_into_the_elr() -> None:
    rec = _build(_p((1, 2, 3), 1), _accept(1, 2), target_isr=(1, 2))
    assert (rec.isr, rec.eligible_leader_replicas) == ([1, 2], None)  # at min ISR: no ELR
    rec = _build(_p((1, 2), 1), _accept(1), target_isr=(1,))
    assert (rec.leader, rec.isr, rec.eligible_leader_replicas, rec.last_known_elr) == (-2, [1], [2], None)
    # The last member leaves: an empty ISR is written, the leader goes, the ELR holds everyone,
    # and LastKnownElr the last leader.
    rec = _build(_p((1,), 1, elr=(2,)), _accept(), target_isr=())
    assert (rec.leader, rec.isr, rec.eligible_leader_replicas, rec.last_known_elr) == (-1, [], [1, 2], [1])


def test_the_elr_comes_out_in_java_hashset_order_and_skips_unclean_shutdowns() -> None:
    # Ids 17 and 1 share bucket 1 of 16: insertion order (ELR first, then the ISR) within it.
    p = _p((1, 3, 17), 1, replicas=(17, 1, 3))
    rec = _build(p, _accept(), target_isr=())
    assert rec.eligible_leader_replicas == [1, 17, 3]
    rec = _build(p, _accept(), target_isr=(), unclean_shutdown_replicas=(17,))
    assert rec.eligible_leader_replicas == [1, 3]


def test_a_leader_from_the_elr_becomes_the_whole_isr() -> None:
    p = _p((), -1, elr=(1, 2), lke=(1,))
    rec = _build(p, _accept(2))
    assert (rec.leader, rec.isr, rec.eligible_leader_replicas, rec.last_known_elr) == (2, [2], [1], [])
    assert rec.leader_recovery_state == -1  # a clean election


def test_the_last_known_leader_is_elected_uncleanly_when_isr_and_elr_are_empty() -> None:
    p = _p((), -1, lke=(3,))
    rec = _build(p, _accept(3))
    assert (rec.leader, rec.isr, rec.leader_recovery_state, rec.last_known_elr) == (3, [3], 1, [])
    assert _build(p, _accept(1, 2)) is None  # 4.1+: only if it is acceptable
    rec = _build(p, _accept(1, 2), release="4.0")  # 4.0 elects it anyway
    assert (rec.leader, rec.isr) == (3, [3])


def test_an_unclean_election_empties_the_elr() -> None:
    p = _p((), -1, elr=(1,), lke=(1,))
    rec = _build(p, _accept(3), election=Election.UNCLEAN)
    assert (rec.leader, rec.isr, rec.eligible_leader_replicas, rec.leader_recovery_state) == (3, [3], [], 1)


def test_an_isr_back_at_min_isr_empties_the_elr() -> None:
    rec = _build(_p((1,), 1, elr=(2, 3)), _accept(1, 2, 3), target_isr=(1, 2))
    assert (rec.isr, rec.eligible_leader_replicas) == ([1, 2], [])


def test_a_completed_reassignment_at_min_isr_empties_the_elr() -> None:
    p = Partition((1, 4, 2, 3), (1,), (uuid.UUID(int=0),) * 4, 1, 4, 6, removing_replicas=(2, 3), adding_replicas=(4,),
                  elr=(2, 3))
    rec = _build(p, _accept(1, 4), target_isr=(1, 4), default_dir=lambda b: uuid.UUID(int=0))
    assert (rec.leader, rec.isr, rec.replicas, rec.removing_replicas, rec.adding_replicas,
            rec.eligible_leader_replicas) == (1, [1, 4], [1, 4], [], [], [])


def test_elr_off_clears_what_is_left_and_never_writes_an_empty_isr() -> None:
    p = _p((1,), 1, elr=(2,))
    rv = PartitionChangeBuilder(p, T1, 0, _accept(), MV44, release=R44, target_isr=()).build()
    assert rv is not None
    assert (rv[0].leader, rv[0].isr, rv[0].eligible_leader_replicas, rv[0].last_known_elr) == (-1, None, [], None)


def test_3_9_elr_is_not_modelled() -> None:
    with pytest.raises(NotImplementedError):
        PartitionChangeBuilder(_p((1,), 1), T1, 0, _accept(1), versions.IBP_3_9_IV0,
                               eligible_leader_replicas_enabled=True)


# ----- the managers (4.4, ELR on) ---------------------------------------------------------------

RegReq = request_class(ApiKey.BROKER_REGISTRATION)
HbReq = request_class(ApiKey.BROKER_HEARTBEAT)
IacReq = request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS)


class ElrCluster(WriteHarness):
    """A 4.4 controller's managers with ELR on, three unfenced brokers and topic "t" (RF 3,
    min.insync.replicas 2), over the write path."""

    def __init__(self, elr_level: int = 1) -> None:
        super().__init__(MV44, {"broker.session.timeout.ms": "9000"}, release=R44,
                         supported_features=R44.supported_features())
        if elr_level:
            self.replay(R("FeatureLevelRecord")(name=versions.ELR_VERSION, feature_level=elr_level),
                        R("ConfigRecord")(resource_type=BROKER, resource_name="", name="min.insync.replicas",
                                          value="1"))
        self.cm = ClusterControlManager(self.ctx)
        self.cm.activate()
        self.configs = ConfigurationControlManager(self.ctx)
        for b in (1, 2, 3):
            self.register(b)
            self.heartbeat(b)
        self.replay(R("TopicRecord")(name="t", topic_id=T1),
                    R("ConfigRecord")(resource_type=TOPIC, resource_name="t", name="min.insync.replicas", value="2"),
                    R("PartitionRecord")(partition_id=0, topic_id=T1, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1,
                                         leader_epoch=0, partition_epoch=0,
                                         directories=[self.image.cluster.brokers[b].directories[0] for b in (1, 2, 3)]))

    def register(self, bid: int, incarnation: int = 0, previous_epoch: int = -1) -> list[Any]:
        features = [RegReq.Feature(name=n, min_supported_version=0, max_supported_version=hi)
                    for n, (_, hi) in R44.supported_features().items()]
        req = RegReq(broker_id=bid, cluster_id=self.ctx.cluster_id, incarnation_id=uuid.UUID(int=bid << 8 | incarnation),
                     listeners=[RegReq.Listener(name="PLAINTEXT", host="localhost", port=9092 + bid, security_protocol=0)],
                     features=features, rack=None, log_dirs=[uuid.UUID(int=(bid + 1) << 80)],
                     previous_broker_epoch=previous_epoch)
        result = self.cm.register_broker(req, request_context(ApiKey.BROKER_REGISTRATION, 4))
        records = [r for r, _ in result.records]
        assert self.apply(result).error_code == 0
        return records

    def heartbeat(self, bid: int, want_fence: bool = False) -> list[Any]:
        req = HbReq(broker_id=bid, broker_epoch=self.image.cluster.brokers[bid].epoch,
                    current_metadata_offset=self.next_offset - 1, want_fence=want_fence, want_shut_down=False)
        result = self.cm.heartbeat(req, request_context(ApiKey.BROKER_HEARTBEAT, 1))
        records = [r for r, _ in result.records]
        self.apply(result)
        return records

    def alter_min_isr(self, resource: tuple[int, str], value: str | None) -> tuple[list[Any], Any]:
        op = 0 if value is not None else 1
        req = IacReq(resources=[IacReq.AlterConfigsResource(resource_type=resource[0], resource_name=resource[1], configs=[
            IacReq.AlterableConfig(name="min.insync.replicas", config_operation=op, value=value)])], validate_only=False)
        result = self.configs.incremental_alter_configs(req, request_context(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1))
        records = [r for r, _ in result.records]
        resp = self.apply(result)
        return records, resp.responses[0]

    def part(self) -> Partition:
        return _part(self.image, T1, 0)


def _changes(records: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.leader, r.isr, r.eligible_leader_replicas, r.last_known_elr) for r in records
            if type(r).__name__ == "PartitionChangeRecord"]


def test_fencing_brokers_one_by_one_fills_the_elr_and_unfencing_elects_from_it() -> None:
    c = ElrCluster()
    assert _changes(c.heartbeat(3, want_fence=True)) == [(-2, [1, 2], None, None)]
    assert _changes(c.heartbeat(2, want_fence=True)) == [(-2, [1], [2], None)]
    assert _changes(c.heartbeat(1, want_fence=True)) == [(-1, [], [1, 2], [1])]
    p = c.part()
    assert (p.isr, p.elr, p.last_known_elr, p.leader) == ((), (1, 2), (1,), -1)
    # Broker 3 (not in the ELR) cannot lead; broker 2 (in it) can, and becomes the ISR.
    assert _changes(c.heartbeat(3)) == []
    assert _changes(c.heartbeat(2)) == [(2, [2], [1], [])]
    assert (c.part().elr, c.part().last_known_elr) == ((1,), ())


def test_an_unclean_restart_takes_the_broker_out_of_the_isr_and_the_elr() -> None:
    c = ElrCluster()
    c.heartbeat(3, want_fence=True)
    c.heartbeat(2, want_fence=True)
    assert c.part().elr == (2,)
    c.cm.heartbeats.remove(2)  # its session is gone (it restarted)
    records = c.register(2, incarnation=1)  # no previous epoch: an unclean shutdown
    assert _changes(records) == [(-2, None, [], None)]
    assert type(records[-1]).__name__ == "RegisterBrokerRecord"
    assert c.part().elr == ()


def test_a_clean_restart_is_handled_as_a_fencing() -> None:
    c = ElrCluster()
    epoch = c.image.cluster.brokers[1].epoch
    c.cm.heartbeats.remove(1)
    records = c.register(1, incarnation=1, previous_epoch=epoch)
    # Leader 1 leaves the ISR (still at min ISR 2): broker 2 leads, no ELR.
    assert _changes(records) == [(2, [2, 3], None, None)]


def test_a_min_isr_change_writes_clear_elr_records() -> None:
    c = ElrCluster()
    c.heartbeat(3, want_fence=True)
    c.heartbeat(2, want_fence=True)
    records, resp = c.alter_min_isr((TOPIC, "t"), "3")
    assert resp.error_code == 0
    assert [type(r).__name__ for r in records] == ["ConfigRecord", "ClearElrRecord"]
    assert records[1].topic_name == "t"
    assert (c.part().elr, c.part().partition_epoch) == ((), 3)
    records, _ = c.alter_min_isr((BROKER, ""), "2")
    assert [(type(r).__name__, getattr(r, "topic_name", None)) for r in records] == \
        [("ConfigRecord", None), ("ClearElrRecord", "")]


def test_broker_level_min_isr_is_refused_with_elr_on() -> None:
    c = ElrCluster()
    records, resp = c.alter_min_isr((BROKER, "1"), "2")
    assert records == [] and (resp.error_code, resp.error_message) == (
        ErrorCode.INVALID_CONFIG, "Broker-level min.insync.replicas cannot be altered while ELR is enabled.")
    records, resp = c.alter_min_isr((BROKER, ""), None)
    assert records == [] and (resp.error_code, resp.error_message) == (
        ErrorCode.INVALID_CONFIG, "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")


def test_elr_off_under_4_4_keeps_the_last_isr_member_and_writes_no_clear_elr() -> None:
    c = ElrCluster(elr_level=0)
    for b in (3, 2):
        c.heartbeat(b, want_fence=True)
    assert _changes(c.heartbeat(1, want_fence=True)) == [(-1, None, None, None)]
    assert c.part().isr == (1,)
    records, _ = c.alter_min_isr((TOPIC, "t"), "1")
    assert [type(r).__name__ for r in records] == ["ConfigRecord"]


def test_create_topics_clears_the_new_topics_elr_after_its_min_isr_config() -> None:
    """Kafka's createTopic takes its ConfigRecords from incrementalAlterConfig, which appends
    the ClearElrRecord: before the PartitionRecords."""
    c = ElrCluster()
    mgr = ReplicationControlManager(c.ctx, random.Random(1), new_topic_id=lambda: uuid.UUID(int=0xC0))
    CT = request_class(ApiKey.CREATE_TOPICS)
    req = CT(timeout_ms=1000, validate_only=False, topics=[
        CT.CreatableTopic(name=n, num_partitions=1, replication_factor=3, assignments=[], configs=configs)
        for n, configs in (("m", [CT.CreatableTopicConfig(name="min.insync.replicas", value="2")]), ("n", []))])
    result = mgr.create_topics(req, request_context(ApiKey.CREATE_TOPICS, 7))
    # (PartitionRecords come framed: FramedRecord.)
    assert [(type(r).__name__, getattr(r, "topic_name", None)) for r, _ in result.records] == [
        ("TopicRecord", None), ("ConfigRecord", None), ("ClearElrRecord", "m"), ("FramedRecord", None),
        ("TopicRecord", None), ("FramedRecord", None)]

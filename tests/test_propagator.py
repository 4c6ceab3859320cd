"""The migration's broker requests computed from plain images (migration/propagator.py): what
Kafka's MigrationPropagator sends the ZooKeeper-mode brokers, full and per delta."""

from __future__ import annotations

import uuid
from typing import Any

from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.messages import (
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from kraftsim.metadata.versions import IBP_3_9_IV0
from kraftsim.migration.propagator import TYPE_FULL, TYPE_INCREMENTAL, TYPE_UNKNOWN, Propagator, request_versions
from kraftsim.rpc.api_keys import ApiKey

T1 = uuid.UUID(int=0x11)
T2 = uuid.UUID(int=0x22)
ZK_EPOCH = 7
KRAFT_EPOCH = 3


class Image:
    def __init__(self) -> None:
        self.img = MetadataImage()
        self.offset = 0
        self.replay(FeatureLevelRecord(name="metadata.version", feature_level=IBP_3_9_IV0))

    def replay(self, rec: Any) -> None:
        self.offset += 1
        self.img.replay(rec, self.offset)

    def broker(self, b: int, epoch: int, zk: bool = True, fenced: bool = False) -> None:
        rec = RegisterBrokerRecord(broker_id=b, incarnation_id=uuid.uuid4(), broker_epoch=epoch, fenced=True,
                                   is_migrating_zk_broker=zk, end_points=[RegisterBrokerRecord.BrokerEndpoint(
                                       name="PLAINTEXT", host="h", port=9000 + b, security_protocol=0)])
        self.replay(rec)
        if not fenced:
            self.replay(UnfenceBrokerRecord(id=b, epoch=epoch))

    def topic(self, tid: uuid.UUID, name: str, parts: dict[int, list[int]]) -> None:
        self.replay(TopicRecord(name=name, topic_id=tid))
        for pid, replicas in parts.items():
            self.replay(PartitionRecord(partition_id=pid, topic_id=tid, replicas=replicas, isr=replicas,
                                        leader=replicas[0], leader_epoch=0, partition_epoch=0))


def cluster() -> Image:
    i = Image()
    i.broker(1, 100)
    i.broker(2, 200)
    i.broker(3, 300, fenced=True)  # fenced: listed, but not sent to
    i.broker(4, 400, zk=False)  # a KRaft broker: listed, not sent to
    i.topic(T1, "a", {0: [1, 2], 1: [2, 3]})
    return i


def kinds(reqs: list[Any]) -> list[tuple[int, str, int]]:
    return [(r.broker_id, ApiKey(r.api_key).name, getattr(r.body, "type_", -1)) for r in reqs]


def test_versions_follow_metadata_version() -> None:
    assert request_versions(IBP_3_9_IV0) == (7, 8, 4)
    assert request_versions(3) == (6, 7, 3)


def test_full_sync_is_update_metadata_then_leader_and_isr_full() -> None:
    i = cluster()
    reqs = Propagator(3000).full(i.img, KRAFT_EPOCH, ZK_EPOCH)
    assert kinds(reqs) == [(1, "UPDATE_METADATA", TYPE_UNKNOWN), (2, "UPDATE_METADATA", TYPE_UNKNOWN),
                           (1, "LEADER_AND_ISR", TYPE_FULL), (2, "LEADER_AND_ISR", TYPE_FULL),
                           (1, "UPDATE_METADATA", TYPE_FULL), (2, "UPDATE_METADATA", TYPE_FULL)]
    umr = reqs[0].body
    assert reqs[0].version == 8 and reqs[2].version == 7
    assert (umr.controller_id, umr.is_kraft_controller, umr.controller_epoch, umr.broker_epoch) == (3000, True, 7, 100)
    assert sorted(b.id for b in umr.live_brokers) == [1, 2, 3, 4]
    assert umr.live_brokers[0].endpoints[0].port == 9001 and umr.live_brokers[0].endpoints[0].listener == "PLAINTEXT"
    (ts,) = umr.topic_states
    assert (ts.topic_name, ts.topic_id) == ("a", T1)
    assert [(p.partition_index, p.leader, p.controller_epoch, p.replicas, p.offline_replicas)
            for p in ts.partition_states] == [(0, 1, KRAFT_EPOCH, [1, 2], []), (1, 2, KRAFT_EPOCH, [2, 3], [])]
    lisr2 = reqs[3].body
    assert (lisr2.broker_epoch, lisr2.controller_epoch, lisr2.is_kraft_controller) == (200, ZK_EPOCH, True)
    (lt,) = lisr2.topic_states
    assert lt.topic_id == T1 and [p.partition_index for p in lt.partition_states] == [0, 1]
    assert all(p.is_new for p in lt.partition_states)
    assert sorted(leader.broker_id for leader in lisr2.live_leaders) == [1, 2]
    assert [p.partition_index for p in reqs[2].body.topic_states[0].partition_states] == [0]


def test_delta_new_topic_changed_leader_and_deleted_topic() -> None:
    i = cluster()
    prop = Propagator(3000)
    prop.full(i.img, KRAFT_EPOCH, ZK_EPOCH)
    assert prop.incremental(i.img, KRAFT_EPOCH, ZK_EPOCH, []) == []  # nothing changed, nothing sent

    i.topic(T2, "b", {0: [2, 1]})
    reqs = prop.incremental(i.img, KRAFT_EPOCH, ZK_EPOCH, ["b"])
    assert kinds(reqs) == [(2, "LEADER_AND_ISR", TYPE_INCREMENTAL), (1, "LEADER_AND_ISR", TYPE_INCREMENTAL),
                           (1, "UPDATE_METADATA", TYPE_INCREMENTAL), (2, "UPDATE_METADATA", TYPE_INCREMENTAL)]
    assert [t.topic_name for t in reqs[2].body.topic_states] == ["b"]

    i.replay(PartitionChangeRecord(topic_id=T1, partition_id=0, leader=2, isr=[2], replicas=[2, 3]))
    reqs = prop.incremental(i.img, KRAFT_EPOCH, ZK_EPOCH, ["a"])
    assert kinds(reqs) == [(2, "LEADER_AND_ISR", TYPE_INCREMENTAL), (1, "UPDATE_METADATA", TYPE_INCREMENTAL),
                           (2, "UPDATE_METADATA", TYPE_INCREMENTAL), (1, "STOP_REPLICA", -1)]
    p = reqs[0].body.topic_states[0].partition_states[0]
    assert (p.leader, p.leader_epoch, p.isr, p.replicas) == (2, 1, [2], [2, 3])
    stop = reqs[3].body  # broker 1 left the replicas of a-0
    assert [(t.topic_name, [(s.partition_index, s.leader_epoch, s.delete_partition) for s in t.partition_states])
            for t in stop.topic_states] == [("a", [(0, 1, True)])]

    i.replay(RemoveTopicRecord(topic_id=T2))
    reqs = prop.incremental(i.img, KRAFT_EPOCH, ZK_EPOCH, ["b"])
    assert kinds(reqs) == [(1, "UPDATE_METADATA", TYPE_INCREMENTAL), (2, "UPDATE_METADATA", TYPE_INCREMENTAL),
                           (2, "STOP_REPLICA", -1), (1, "STOP_REPLICA", -1)]
    st = reqs[0].body.topic_states[0].partition_states[0]
    assert (st.leader, st.leader_epoch, st.zk_version, st.controller_epoch) == (-2, 0, 0, ZK_EPOCH)
    sr = reqs[2].body
    assert sr.topic_states[0].partition_states[0].leader_epoch == -2  # EpochDuringDelete
    assert sr.topic_states[0].partition_states[0].delete_partition and sr.broker_epoch == 200
    assert reqs[2].version == 4


def test_a_broker_unfenced_gets_everything_the_others_the_brokers() -> None:
    i = cluster()
    prop = Propagator(3000)
    prop.full(i.img, KRAFT_EPOCH, ZK_EPOCH)
    i.replay(UnfenceBrokerRecord(id=3, epoch=300))
    reqs = prop.incremental(i.img, KRAFT_EPOCH, ZK_EPOCH, [])
    assert kinds(reqs) == [(3, "UPDATE_METADATA", TYPE_UNKNOWN), (1, "UPDATE_METADATA", TYPE_UNKNOWN),
                           (2, "UPDATE_METADATA", TYPE_UNKNOWN), (3, "LEADER_AND_ISR", TYPE_INCREMENTAL),
                           (1, "UPDATE_METADATA", TYPE_INCREMENTAL), (2, "UPDATE_METADATA", TYPE_INCREMENTAL),
                           (3, "UPDATE_METADATA", TYPE_INCREMENTAL)]
    assert [p.partition_index for p in reqs[3].body.topic_states[0].partition_states] == [1]
    assert reqs[3].body.broker_epoch == 300

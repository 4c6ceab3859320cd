"""A simulated ZooKeeper-mode broker's answers to controller requests (broker/zk_control.py):
Kafka's shapes at old and new versions, and its epoch checks (tests/test_migration.py drives
it over sockets from kraftsim's controller)."""

from __future__ import annotations

import uuid

from kraftsim.broker.zk_control import ZkControlState
from kraftsim.rpc.error_codes import ErrorCode as E
from kraftsim.rpc.messages import LeaderAndIsrRequest as LISR
from kraftsim.rpc.messages import StopReplicaRequest as SR
from kraftsim.rpc.messages import UpdateMetadataRequest as UMR

TID = uuid.UUID(int=5)


def lisr(epoch: int, leader_epoch: int, replicas: list[int], kraft: bool = True) -> LISR:
    st = LISR.LeaderAndIsrPartitionState(partition_index=0, controller_epoch=1, leader=replicas[0],
                                         leader_epoch=leader_epoch, isr=replicas, replicas=replicas)
    return LISR(controller_id=3000, is_kraft_controller=kraft, controller_epoch=epoch, broker_epoch=10,
                type_=2, topic_states=[LISR.LeaderAndIsrTopicState(topic_name="t", topic_id=TID,
                                                                   partition_states=[st])])


def test_leader_and_isr_v7_then_stale_epochs() -> None:
    s = ZkControlState(1)
    r = s.leader_and_isr(lisr(5, 0, [1, 2]), 7, stale_broker_epoch=False)
    assert r.error_code == E.NONE and [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partition_errors])
                                       for t in r.topics] == [(TID, [(0, E.NONE)])]
    assert (s.controller_id, s.kraft_controller, s.controller_epoch, s.led()) == (3000, True, 5, [("t", 0)])
    # The same leader epoch again from a KRaft controller is taken; an older one is not.
    assert s.leader_and_isr(lisr(5, 0, [1, 2]), 7, False).topics[0].partition_errors[0].error_code == E.NONE
    assert s.leader_and_isr(lisr(5, 0, [2, 1], kraft=False), 6, False).topics[0].partition_errors[0].error_code == \
        E.STALE_CONTROLLER_EPOCH  # v6 has no isKRaftController: equal epoch from a ZooKeeper controller
    old = s.leader_and_isr(lisr(4, 9, [1]), 7, False)
    assert old.error_code == E.STALE_CONTROLLER_EPOCH and old.topics[0].partition_errors[0].error_code == \
        E.STALE_CONTROLLER_EPOCH
    assert s.leader_and_isr(lisr(6, 9, [1]), 7, stale_broker_epoch=True).error_code == E.STALE_BROKER_EPOCH
    # Not a replica: UNKNOWN_TOPIC_OR_PARTITION.
    assert s.leader_and_isr(lisr(5, 3, [2, 3]), 7, False).topics[0].partition_errors[0].error_code == \
        E.UNKNOWN_TOPIC_OR_PARTITION


def test_leader_and_isr_v1_ungrouped_and_update_metadata_v4() -> None:
    s = ZkControlState(2)
    st = LISR.LeaderAndIsrPartitionState(topic_name="u", partition_index=3, controller_epoch=1, leader=2,
                                         leader_epoch=1, isr=[2], replicas=[2])
    r = s.leader_and_isr(LISR(controller_id=1, controller_epoch=1, ungrouped_partition_states=[st]), 1, False)
    assert [(p.topic_name, p.partition_index, p.error_code) for p in r.partition_errors] == [("u", 3, E.NONE)]
    assert not s.kraft_controller
    ump = UMR.UpdateMetadataPartitionState(topic_name="u", partition_index=3, leader=2, isr=[2], replicas=[2])
    umr = UMR(controller_id=1, controller_epoch=1, ungrouped_partition_states=[ump],
              live_brokers=[UMR.UpdateMetadataBroker(id=2)])
    assert s.update_metadata(umr, 4, False).error_code == E.NONE and s.metadata == {("u", 3): 2}
    umr.controller_epoch = 0
    assert s.update_metadata(umr, 4, False).error_code == E.STALE_CONTROLLER_EPOCH


def test_stop_replica_v0_v3_and_stale() -> None:
    s = ZkControlState(1)
    s.leader_and_isr(lisr(5, 4, [1, 2]), 7, False)
    r = s.stop_replica(SR(controller_id=3000, controller_epoch=5, topic_states=[SR.StopReplicaTopicState(
        topic_name="t", partition_states=[SR.StopReplicaPartitionState(partition_index=0, leader_epoch=3,
                                                                       delete_partition=True)])]), 3, False)
    assert [(p.topic_name, p.partition_index, p.error_code) for p in r.partition_errors] == \
        [("t", 0, E.FENCED_LEADER_EPOCH)] and ("t", 0) in s.partitions
    r = s.stop_replica(SR(controller_id=3000, controller_epoch=5, delete_partitions=True,
                          ungrouped_partitions=[SR.StopReplicaPartitionV0(topic_name="t", partition_index=0)]), 0, False)
    assert r.partition_errors[0].error_code == E.NONE and s.partitions == {}
    r = s.stop_replica(SR(controller_id=3000, controller_epoch=4), 4, False)
    assert (r.error_code, r.partition_errors) == (E.STALE_CONTROLLER_EPOCH, [])

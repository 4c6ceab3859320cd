"""What a broker asks of its controller, over the real write path: AlterPartition (reference
§3.7), AssignReplicasToDirs and AllocateProducerIds (§6.8).

The per-partition error codes were checked against a real Kafka 3.9.2 controller given the same
requests from a scripted broker."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kraftsim.controller.managers.alter_partition import AlterPartitionManager, validate_isr
from kraftsim.controller.managers.cluster import ClusterControlManager
from kraftsim.controller.managers.producer_ids import ProducerIdControlManager
from kraftsim.controller.managers.replica_directories import ReplicaDirectoryManager
from kraftsim.metadata.directories import LOST, UNASSIGNED
from kraftsim.metadata.records import by_name
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.error_codes import ErrorCode as E
from kraftsim.rpc.messages import AllocateProducerIdsRequest, AlterPartitionRequest, AssignReplicasToDirsRequest
from tests.controller_harness import WriteHarness, request_context

R = by_name
AP = AlterPartitionRequest
AR = AssignReplicasToDirsRequest
TID = uuid.UUID(int=(42 << 64) | 1)
T2 = uuid.UUID(int=(43 << 64) | 1)
DIR = {b: uuid.UUID(int=(b + 100) << 64) for b in range(1, 7)}
DIR1B = uuid.UUID(int=(200 << 64))
RECOVERING = 1


class H(WriteHarness):
    """Brokers 1-3 unfenced (epoch 100+id), 4 fenced, 5 in controlled shutdown; topic t with
    p0 [1,2,3] led by 1 and p1 [2,1] led by 2; topic t2 with p0 [1] in an unassigned dir."""

    def __init__(self, level: int = 21, config: dict[str, str] | None = None) -> None:
        super().__init__(level, config)
        brc = R("BrokerRegistrationChangeRecord")
        for b in (1, 2, 3, 4, 5):
            dirs = [DIR[b], DIR1B] if b == 1 else [DIR[b]]
            self.replay(R("RegisterBrokerRecord")(broker_id=b, broker_epoch=100 + b, incarnation_id=uuid.UUID(int=b),
                                                  fenced=True, log_dirs=dirs if level >= 17 else []))
            if b != 4:
                self.replay(brc(broker_id=b, broker_epoch=100 + b, fenced=-1))
        self.replay(brc(broker_id=5, broker_epoch=105, in_controlled_shutdown=1))
        dirs = level >= 17
        self.replay(R("TopicRecord")(name="t", topic_id=TID),
                    part(0, [1, 2, 3], [1, 2, 3], 1, [DIR[1], DIR[2], DIR[3]] if dirs else []),
                    part(1, [2, 1], [2, 1], 2, [DIR[2], DIR[1]] if dirs else []),
                    R("TopicRecord")(name="t2", topic_id=T2),
                    part(0, [1, 2], [1, 2], 1, [UNASSIGNED, DIR[2]] if dirs else [], T2))
        self.cluster = ClusterControlManager(self.ctx)
        self.alter = AlterPartitionManager(self.ctx, self.cluster)
        self.dirs = ReplicaDirectoryManager(self.ctx, self.cluster)
        self.pids = ProducerIdControlManager(self.ctx, self.cluster)

    def partition(self, pid: int, topic: uuid.UUID = TID) -> Any:
        return self.image.topics.by_id[topic].partitions[pid]

    def alter_partition(self, parts: list[Any], *, version: int = 3, broker: int = 1, epoch: int = 101,
                        topic_id: uuid.UUID = TID, topic_name: str = "t") -> Any:
        req = AP(broker_id=broker, broker_epoch=epoch, topics=[AP.TopicData(
            topic_name=topic_name if version < 2 else None, topic_id=topic_id if version >= 2 else uuid.UUID(int=0),
            partitions=parts)])
        result = self.alter.alter_partition(req, request_context(ApiKey.ALTER_PARTITION, version))
        self.last_records = [r for r, _ in result.records]
        return self.apply(result)


def part(pid: int, replicas: list[int], isr: list[int], leader: int, dirs: list[uuid.UUID],
         topic: uuid.UUID = TID, **kw: Any) -> Any:
    """A PartitionRecord at leader epoch 0 and partition epoch 0 (the schema defaults are -1)."""
    return R("PartitionRecord")(partition_id=pid, topic_id=topic, replicas=replicas, isr=isr, leader=leader,
                                leader_epoch=0, partition_epoch=0, directories=dirs, **kw)


def pd(pid: int, isr: list[int], leader_epoch: int = 0, partition_epoch: int = 0, *, version: int = 3,
       lrs: int = 0, epochs: dict[int, int] | None = None) -> Any:
    p = AP.PartitionData(partition_index=pid, leader_epoch=leader_epoch, partition_epoch=partition_epoch)
    if version >= 3:
        p.new_isr_with_epochs = [AP.BrokerState(broker_id=b, broker_epoch=(epochs or {}).get(b, -1)) for b in isr]
    else:
        p.new_isr = isr
    if version >= 1:
        p.leader_recovery_state = lrs
    return p


def codes(resp: Any) -> list[int]:
    return [p.error_code for t in resp.topics for p in t.partitions]


@pytest.fixture
def h() -> Any:
    harness = H()
    yield harness
    harness.close()


# ----- AlterPartition --------------------------------------------------------------------------

def test_isr_shrink_and_expand(h: H) -> None:
    r = h.alter_partition([pd(0, [1, 3])])
    p = r.topics[0].partitions[0]
    assert (p.error_code, p.leader_id, p.isr, p.leader_epoch, p.partition_epoch, p.leader_recovery_state) == \
        (0, 1, [1, 3], 0, 1, 0)  # MV 3.9: a shrink does not bump the leader epoch (KAFKA-15021)
    assert h.partition(0).isr == (1, 3) and h.partition(0).partition_epoch == 1
    r = h.alter_partition([pd(0, [1, 3, 2], partition_epoch=1)])
    assert codes(r) == [0] and h.partition(0).isr == (1, 3, 2)
    # Asking for the ISR it already has writes nothing and answers with the current state.
    r = h.alter_partition([pd(0, [1, 3, 2], partition_epoch=2)])
    assert codes(r) == [0] and h.last_records == [] and r.topics[0].partitions[0].partition_epoch == 2


def test_isr_shrink_bumps_the_leader_epoch_below_36iv0() -> None:
    h = H(level=12)  # 3.6-IV0: no bump any more (KAFKA-15021)
    try:
        r = h.alter_partition([pd(0, [1, 2])])
        assert r.topics[0].partitions[0].leader_epoch == 0
    finally:
        h.close()
    h = H(level=11)  # 3.5-IV2
    try:
        r = h.alter_partition([pd(0, [1, 2])])
        p = r.topics[0].partitions[0]
        assert (p.error_code, p.leader_id, p.leader_epoch, p.partition_epoch) == (0, 1, 1, 1)
        assert h.partition(0).leader_epoch == 1
    finally:
        h.close()


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_per_partition_errors_in_kafkas_order(h: H, version: int) -> None:
    parts = [
        pd(0, [1], leader_epoch=1, version=version),                       # leader epoch ahead of ours
        pd(0, [1], partition_epoch=5, version=version),                    # partition epoch ahead
        pd(0, [1], leader_epoch=-1, version=version),                      # leader epoch behind
        pd(1, [2], version=version),                                       # sender does not lead p1
        pd(0, [1], partition_epoch=-1, version=version),                   # partition epoch behind
        pd(0, [1, 9], version=version),                                    # not a subset of the replicas
        pd(0, [2, 3], version=version),                                    # without the leader
        pd(0, [1, 1], version=version),                                    # a duplicate
        pd(7, [1], version=version),                                       # no such partition
        # where two rules apply, the first in Kafka's order wins
        pd(1, [2], leader_epoch=-1, version=version),                      # epoch behind beats not leader
        pd(1, [2], partition_epoch=-1, version=version),                   # not leader beats epoch behind
        pd(0, [9], partition_epoch=-1, version=version),                   # epoch behind beats a bad ISR
    ]
    if version >= 1:
        parts += [pd(0, [1, 2], version=version, lrs=RECOVERING),          # RECOVERING with ISR > 1
                  pd(0, [1], version=version, lrs=RECOVERING)]             # RECOVERED -> RECOVERING
    r = h.alter_partition(parts, version=version)
    expected = [E.NOT_CONTROLLER, E.NOT_CONTROLLER, E.FENCED_LEADER_EPOCH, E.INVALID_REQUEST,
                E.INVALID_UPDATE_VERSION, E.INVALID_REQUEST, E.INVALID_REQUEST, E.INVALID_REQUEST,
                E.UNKNOWN_TOPIC_OR_PARTITION, E.FENCED_LEADER_EPOCH, E.INVALID_REQUEST, E.INVALID_UPDATE_VERSION]
    if version >= 1:
        expected += [E.INVALID_REQUEST, E.INVALID_REQUEST]
    assert codes(r) == expected
    assert h.last_records == []
    assert r.topics[0].partitions[0].leader_id == 0  # an error carries nothing else


@pytest.mark.parametrize("version,code", [(0, E.OPERATION_NOT_ATTEMPTED), (1, E.OPERATION_NOT_ATTEMPTED),
                                          (2, E.INELIGIBLE_REPLICA), (3, E.INELIGIBLE_REPLICA)])
def test_ineligible_replicas(h: H, version: int, code: int) -> None:
    h.replay(part(2, [1, 4, 5, 6], [1], 1, [DIR[1], DIR[4], DIR[5], DIR[6]]))
    for member in (4, 5, 6):  # fenced, in controlled shutdown, not registered
        r = h.alter_partition([pd(2, [1, member], version=version)], version=version)
        assert codes(r) == [code], member
    if version >= 3:  # only v3 carries broker epochs; -1 skips the check
        r = h.alter_partition([pd(0, [1, 2], epochs={2: 999})])
        assert codes(r) == [E.INELIGIBLE_REPLICA]
        r = h.alter_partition([pd(0, [1, 2], epochs={2: 102})])
        assert codes(r) == [0]


@pytest.mark.parametrize("version,code", [(1, E.UNKNOWN_TOPIC_OR_PARTITION), (2, E.UNKNOWN_TOPIC_ID)])
def test_unknown_topic(h: H, version: int, code: int) -> None:
    r = h.alter_partition([pd(0, [1], version=version), pd(1, [1], version=version)], version=version,
                          topic_id=uuid.UUID(int=99), topic_name="nope")
    assert codes(r) == [code, code]


def test_stale_broker_epoch_fails_the_request_but_an_empty_one_is_answered_at_once(h: H) -> None:
    with pytest.raises(ApiError) as e:
        h.alter_partition([pd(0, [1])], epoch=999)
    assert (e.value.code, e.value.message) == (E.STALE_BROKER_EPOCH, "Expected broker epoch 101, but got broker epoch 999")
    with pytest.raises(ApiError) as e:
        h.alter_partition([pd(0, [1])], broker=9)
    assert e.value.code == E.STALE_BROKER_EPOCH
    req = AP(broker_id=9, broker_epoch=1, topics=[])  # QuorumController answers without an event
    r = h.alter.alter_partition(req, request_context(ApiKey.ALTER_PARTITION, 3)).response
    assert (r.error_code, r.topics) == (0, [])


def test_completing_a_reassignment_that_moves_the_leader_reports_new_leader_elected() -> None:
    for version, code in ((3, E.NEW_LEADER_ELECTED), (1, E.FENCED_LEADER_EPOCH)):
        h = H()
        try:  # p3 moves from [1] to [2, 3]: adding 2 and 3, removing 1, the leader
            h.replay(part(3, [1, 2, 3], [1], 1, [DIR[1], DIR[2], DIR[3]], removing_replicas=[1],
                          adding_replicas=[2, 3]))
            r = h.alter_partition([pd(3, [1, 2, 3], version=version)], version=version)
            assert codes(r) == [code]
            p = h.partition(3)  # the record is written all the same
            assert (p.replicas, p.isr, p.leader, p.removing_replicas, p.adding_replicas) == ((2, 3), (2, 3), 2, (), ())
        finally:
            h.close()


def test_recovering_leader_reports_recovered(h: H) -> None:
    h.replay(R("PartitionChangeRecord")(partition_id=0, topic_id=TID, isr=[1], leader_recovery_state=RECOVERING))
    r = h.alter_partition([pd(0, [1], partition_epoch=1, lrs=0)])
    assert codes(r) == [0] and r.topics[0].partitions[0].leader_recovery_state == 0
    assert h.partition(0).leader_recovery_state == 0


def test_an_unknown_leader_recovery_state_is_a_fault(h: H) -> None:
    with pytest.raises(RuntimeError):  # Kafka: IllegalArgumentException in the event
        h.alter_partition([pd(0, [1], lrs=7)])


def test_validate_isr_is_replicas_validate_isr() -> None:
    assert validate_isr([1, 2, 3], []) and validate_isr([1, 2, 3], [3, 1])
    assert not validate_isr([], [1]) and not validate_isr([1, 2], [1, 1]) and not validate_isr([1, -1], [-1])
    assert not validate_isr([1, 2], [3])


# ----- AssignReplicasToDirs ------------------------------------------------------------------

def assign(h: H, dirs: dict[uuid.UUID, list[tuple[uuid.UUID, list[int]]]], broker: int = 1, epoch: int = 101) -> Any:
    req = AR(broker_id=broker, broker_epoch=epoch, directories=[
        AR.DirectoryData(id=d, topics=[AR.TopicData(topic_id=t, partitions=[AR.PartitionData(partition_index=p)
                                                                            for p in ps]) for t, ps in topics])
        for d, topics in dirs.items()])
    result = h.dirs.assign_replicas_to_dirs(req, request_context(ApiKey.ASSIGN_REPLICAS_TO_DIRS, 0))
    h.last_records = [r for r, _ in result.records]
    return h.apply(result)


def test_assign_replicas_to_an_online_directory(h: H) -> None:
    r = assign(h, {DIR1B: [(T2, [0]), (TID, [0, 1, 9]), (uuid.UUID(int=5), [0])]}, broker=1)
    assert [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.directories[0].topics] == [
        (T2, [(0, 0)]), (TID, [(0, 0), (1, 0), (9, E.UNKNOWN_TOPIC_OR_PARTITION)]),
        (uuid.UUID(int=5), [(0, E.UNKNOWN_TOPIC_ID)])]
    assert h.partition(0, T2).directories == (DIR1B, DIR[2])
    assert h.partition(0).directories == (DIR1B, DIR[2], DIR[3]) and h.partition(1).directories == (DIR[2], DIR1B)
    assert h.partition(0).isr == (1, 2, 3)  # online: no ISR change
    r = assign(h, {DIR1B: [(T2, [0])]})  # already there: no record
    assert h.last_records == [] and r.directories[0].topics[0].partitions[0].error_code == 0


def test_assign_a_replica_the_broker_does_not_host(h: H) -> None:
    r = assign(h, {DIR[3]: [(TID, [1])]}, broker=3, epoch=103)
    assert r.directories[0].topics[0].partitions[0].error_code == E.NOT_LEADER_OR_FOLLOWER
    assert h.last_records == []


def test_assign_to_an_offline_directory_takes_the_broker_out_of_the_isr(h: H) -> None:
    assign(h, {LOST: [(TID, [0])], uuid.UUID(int=777 << 64): [(T2, [0])]})
    # First the directory records, then the ISR and leadership changes (in request order).
    assert [(r.partition_id, r.directories is not None, r.isr) for r in h.last_records] == [
        (0, True, None), (0, True, None), (0, False, [2, 3]), (0, False, [2])]
    p = h.partition(0)
    assert (p.directories, p.isr, p.leader) == ((LOST, DIR[2], DIR[3]), (2, 3), 2)
    assert h.partition(0, T2).leader == 2


def test_assign_refusals() -> None:
    old = H(level=16)  # 3.7-IV1: no directory assignment yet
    try:
        with pytest.raises(ApiError) as e:
            assign(old, {DIR1B: [(TID, [0])]})
        assert (e.value.code, e.value.message) == (E.UNSUPPORTED_VERSION, "Directory assignment is not supported yet.")
    finally:
        old.close()
    h = H()
    try:
        with pytest.raises(ApiError) as e:
            assign(h, {DIR1B: [(TID, [0])]}, epoch=5)
        assert e.value.code == E.STALE_BROKER_EPOCH
    finally:
        h.close()


# ----- AllocateProducerIds --------------------------------------------------------------------

def allocate(h: H, broker: int = 1, epoch: int = 101) -> Any:
    result = h.pids.allocate_producer_ids(AllocateProducerIdsRequest(broker_id=broker, broker_epoch=epoch),
                                          request_context(ApiKey.ALLOCATE_PRODUCER_IDS, 0))
    h.last_records = [r for r, _ in result.records]
    return h.apply(result)


def test_blocks_of_1000_from_zero(h: H) -> None:
    r = allocate(h)
    assert (r.error_code, r.producer_id_start, r.producer_id_len) == (0, 0, 1000)
    assert [(x.broker_id, x.broker_epoch, x.next_producer_id) for x in h.last_records] == [(1, 101, 1000)]
    r = allocate(h, 2, 102)
    assert (r.producer_id_start, r.producer_id_len) == (1000, 1000)
    assert h.image.producer_ids.next_producer_id == 2000


@pytest.mark.parametrize("broker,epoch,message", [(1, 7, "Expected broker epoch 101, but got broker epoch 7"),
                                                  (9, 1, "No broker registration found for broker id 9")])
def test_broker_epoch_is_checked(h: H, broker: int, epoch: int, message: str) -> None:
    with pytest.raises(ApiError) as e:
        allocate(h, broker, epoch)
    assert (e.value.code, e.value.message) == (E.STALE_BROKER_EPOCH, message)


def test_exhausted_ids_are_unknown_server_error(h: H) -> None:
    h.replay(R("ProducerIdsRecord")(broker_id=1, broker_epoch=101, next_producer_id=(1 << 63) - 1001))
    assert allocate(h).producer_id_start == (1 << 63) - 1001  # the very last block still fits
    with pytest.raises(ApiError) as e:
        allocate(h)
    assert e.value.code == E.UNKNOWN_SERVER_ERROR

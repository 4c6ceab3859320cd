"""AlterPartition (api 56, v0-3): a partition leader asks to change its ISR.

Kafka 3.9's ``ReplicationControlManager.alterPartition``. The sender must be registered with its
current broker epoch (else the whole request fails with STALE_BROKER_EPOCH). Then each partition
is judged on its own, in this order (the first failure is its error):

=============================================================  ==========================================
unknown topic (by id from v2, by name before)                  UNKNOWN_TOPIC_ID (v2+) / UNKNOWN_TOPIC_OR_PARTITION
unknown partition                                              UNKNOWN_TOPIC_OR_PARTITION
request leader epoch, then partition epoch, ahead of ours      NOT_CONTROLLER (the sender knows newer state:
                                                               we are probably not the controller any more)
request leader epoch behind ours                               FENCED_LEADER_EPOCH
sender is not the leader                                       INVALID_REQUEST
request partition epoch behind ours                            INVALID_UPDATE_VERSION
new ISR not a subset of the replicas (or with duplicates), or  INVALID_REQUEST
without the leader
RECOVERING with more than one ISR member; RECOVERED back to    INVALID_REQUEST
RECOVERING
an ISR member unregistered, in controlled shutdown, fenced,    INELIGIBLE_REPLICA (v2+) / OPERATION_NOT_ATTEMPTED
or with another broker epoch (v3 carries epochs; -1 skips)
=============================================================  ==========================================

An accepted change goes through the PartitionChangeBuilder (an ISR shrink bumps the leader epoch
below metadata.version 3.6-IV0 or while ZooKeeper brokers may register; a change that completes
a reassignment may elect another leader). If the resulting record names a leader other than the
sender, the record is still written but the sender is told NEW_LEADER_ELECTED (v2+) /
FENCED_LEADER_EPOCH, so it refreshes its metadata. Otherwise the response carries the partition
as it will be after the record: leader, ISR, epochs, recovery state. A change that changes
nothing writes nothing and answers with the current state.

An unknown LeaderRecoveryState byte makes Kafka throw IllegalArgumentException inside the event
(a fault: UNKNOWN_SERVER_ERROR and a failover); kraftsim raises the same kind of fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.managers.cluster import ClusterControlManager
from kraftsim.controller.managers.elr import elr_targets
from kraftsim.controller.managers.partition_change import Election, PartitionChangeBuilder
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.metadata.authorizer.authorizer import AclOperation
from kraftsim.metadata.image.topics import NO_LEADER_CHANGE, RECOVERED, RECOVERING, Partition, Topic
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import AlterPartitionResponse

if TYPE_CHECKING:
    from kraftsim.metadata.messages import PartitionChangeRecord
    from kraftsim.rpc.messages import AlterPartitionRequest

TopicResult = AlterPartitionResponse.TopicData
PartitionResult = AlterPartitionResponse.PartitionData


def validate_isr(replicas: tuple[int, ...] | list[int], isr: list[int]) -> bool:
    """Replicas.validateIsr: no negatives, no duplicates, every member a replica."""
    if not isr:
        return True
    if not replicas:
        return False
    if min(isr) < 0 or len(set(isr)) != len(isr):
        return False
    return set(isr).issubset(replicas)


@dataclass(slots=True)
class _After:
    """The fields of a partition the response reports, after a PartitionChangeRecord."""

    leader: int
    isr: list[int]
    leader_recovery_state: int
    leader_epoch: int
    partition_epoch: int


def _merge(p: Partition, change: PartitionChangeRecord) -> _After:
    """PartitionRegistration.merge, for the fields the response carries."""
    leader_changed = change.leader != NO_LEADER_CHANGE
    return _After(
        leader=change.leader if leader_changed else p.leader,
        isr=list(change.isr) if change.isr is not None else list(p.isr),
        leader_recovery_state=(p.leader_recovery_state if change.leader_recovery_state == -1
                               else change.leader_recovery_state),
        leader_epoch=p.leader_epoch + 1 if leader_changed else p.leader_epoch,
        partition_epoch=p.partition_epoch + 1)


class AlterPartitionManager:
    """ISR changes from partition leaders. Reads the image and the cluster manager's rules
    (broker epochs, acceptable leaders, unclean election, ZooKeeper brokers)."""

    def __init__(self, ctx: ControllerContext, cluster: ClusterControlManager) -> None:
        self.ctx = ctx
        self.cluster = cluster

    def routes(self) -> list[Route]:
        return [Route(Api.ALTER_PARTITION, "alterPartition", self.alter_partition,
                      cluster_operation=AclOperation.CLUSTER_ACTION)]

    def alter_partition(self, request: AlterPartitionRequest,
                        context: RequestContext) -> ControllerResult[AlterPartitionResponse]:
        version = context.api_version
        if not request.topics:  # QuorumController answers at once: no event, no epoch check
            return ControllerResult([], AlterPartitionResponse(error_code=0, topics=[]), atomic=False)
        self.cluster.check_broker_epoch(request.broker_id, request.broker_epoch)
        topics = self.ctx.image.topics
        records: list[RecordAndVersion] = []
        response_topics: list[AlterPartitionResponse.TopicData] = []
        for td in request.topics:
            out = TopicResult(topic_name=td.topic_name, topic_id=td.topic_id, partitions=[])
            response_topics.append(out)
            topic = topics.by_id.get(td.topic_id) if version > 1 else topics.by_name.get(td.topic_name)
            if topic is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID if version > 1 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                out.partitions = [PartitionResult(partition_index=pd.partition_index, error_code=int(code))
                                  for pd in td.partitions]
                continue
            for pd in td.partitions:
                out.partitions.append(self._alter_one(request.broker_id, topic, pd, version, records))
        return ControllerResult(records, AlterPartitionResponse(error_code=0, topics=response_topics), atomic=False)

    def _alter_one(self, broker_id: int, topic: Topic, pd: AlterPartitionRequest.PartitionData, version: int,
                   records: list[RecordAndVersion]) -> AlterPartitionResponse.PartitionData:
        pid = pd.partition_index
        if version >= 3:
            new_isr = [(b.broker_id, b.broker_epoch) for b in pd.new_isr_with_epochs]
        else:
            new_isr = [(b, -1) for b in pd.new_isr]
        p = topic.partitions.get(pid)
        error = self._validate(broker_id, p, pd, new_isr, version)
        if error is not None:
            return PartitionResult(partition_index=pid, error_code=int(error))
        assert p is not None
        lrs = pd.leader_recovery_state if version >= 1 else RECOVERED
        cluster = self.cluster
        image = self.ctx.image
        rec = PartitionChangeBuilder(
            p, topic.id, pid, cluster.leader_acceptor(p), image.metadata_version, release=image.release,
            target_isr=[b for b, _ in new_isr], target_leader_recovery_state=lrs,
            election=Election.UNCLEAN if cluster.unclean_election_enabled(topic.name) else Election.ONLINE,
            zk_migration_enabled=cluster.zk_registration_allowed(),
            default_dir=image.cluster.default_dir, **elr_targets(self.ctx, topic)).build()
        if rec is None:
            after = _After(p.leader, list(p.isr), p.leader_recovery_state, p.leader_epoch, p.partition_epoch)
        else:
            records.append(rec)
            change = rec[0]
            after = _merge(p, change)
            if change.leader != broker_id and change.leader != NO_LEADER_CHANGE:
                # Completing a reassignment moved the leadership: the record stands, and the old
                # leader learns it must refresh its metadata before trying again.
                code = ErrorCode.NEW_LEADER_ELECTED if version > 1 else ErrorCode.FENCED_LEADER_EPOCH
                return PartitionResult(partition_index=pid, error_code=int(code))
        return PartitionResult(partition_index=pid, error_code=0, leader_id=after.leader, isr=after.isr,
                               leader_recovery_state=after.leader_recovery_state, leader_epoch=after.leader_epoch,
                               partition_epoch=after.partition_epoch)

    def _validate(self, broker_id: int, p: Partition | None, pd: AlterPartitionRequest.PartitionData, new_isr: list[tuple[int, int]],
                  version: int) -> ErrorCode | None:
        """validateAlterPartitionData: the table of the module doc, in order."""
        if p is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if pd.leader_epoch > p.leader_epoch or pd.partition_epoch > p.partition_epoch:
            return ErrorCode.NOT_CONTROLLER
        if pd.leader_epoch < p.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if broker_id != p.leader:
            return ErrorCode.INVALID_REQUEST
        if pd.partition_epoch < p.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        isr = [b for b, _ in new_isr]
        if not validate_isr(p.replicas, isr) or p.leader not in isr:
            return ErrorCode.INVALID_REQUEST
        lrs = pd.leader_recovery_state if version >= 1 else RECOVERED
        if lrs not in (RECOVERED, RECOVERING):
            raise RuntimeError(f"Value {lrs} is not a valid leader recovery state")  # Kafka: a fault
        if lrs == RECOVERING and len(isr) > 1:
            return ErrorCode.INVALID_REQUEST
        if p.leader_recovery_state == RECOVERED and lrs == RECOVERING:
            return ErrorCode.INVALID_REQUEST
        brokers = self.ctx.image.cluster.brokers
        for b, epoch in new_isr:
            reg = brokers.get(b)
            if (reg is None or reg.in_controlled_shutdown or reg.fenced
                    or (epoch != -1 and reg.epoch != epoch)):
                return ErrorCode.INELIGIBLE_REPLICA if version > 1 else ErrorCode.OPERATION_NOT_ATTEMPTED
        return None

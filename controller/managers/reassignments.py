"""ReassignmentManager: AlterPartitionReassignments (api 45) and ListPartitionReassignments
(api 46), as a Kafka 3.9 controller serves them (``kafka-reassign-partitions``).

A reassignment moves a partition to a new replica list in stages, all through
PartitionChangeRecords: first the target replicas join the replica list as ``adding`` (and the
ones leaving are marked ``removing``); the new replicas catch up and their leader adds them to
the ISR with AlterPartition; the PartitionChangeBuilder then completes the move in that same
record (the removed replicas leave, the leader moves if it was one of them). A move that only
reorders or shrinks within the ISR completes at once.

Kafka's rules (``ReplicationControlManager.alterPartitionReassignments``):

* ALTER on the cluster (DESCRIBE for the list), else the whole request fails;
* each partition is judged alone, in request order: an unknown topic or partition is
  UNKNOWN_TOPIC_OR_PARTITION; a target list is validated as a manual assignment
  (INVALID_REPLICA_ASSIGNMENT: empty, unregistered broker, duplicate); a null target cancels:
  NO_REASSIGNMENT_IN_PROGRESS when there is none, and a revert that would leave no ISR member
  needs unclean leader election enabled for the topic (else INVALID_REPLICA_ASSIGNMENT);
* the records of the whole request form one atomic batch. Past 10,000 records the partition
  whose record does not fit gets UNKNOWN_SERVER_ERROR (Kafka's BoundedList throws inside the
  per-partition try) and the others keep their results.

Errors carry their message only where it differs from the error's default text, as Kafka's
``ApiError.fromThrowable`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Unpack

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.managers.cluster import ClusterControlManager
from kraftsim.controller.managers.elr import elr_targets
from kraftsim.controller.managers.partition_change import Election, PartitionChangeBuilder, Targets
from kraftsim.controller.managers.replication import validate_manual_assignment
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.controller.write_path import MAX_RECORDS_PER_USER_OP
from kraftsim.metadata.authorizer.authorizer import AclOperation
from kraftsim.metadata.image.topics import Partition, Topic
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode, from_throwable_message
from kraftsim.rpc.messages import AlterPartitionReassignmentsResponse, ListPartitionReassignmentsResponse

if TYPE_CHECKING:
    from kraftsim.metadata.messages import PartitionChangeRecord
    from kraftsim.rpc.messages import AlterPartitionReassignmentsRequest, ListPartitionReassignmentsRequest

TopicResponse = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
PartitionResponse = AlterPartitionReassignmentsResponse.ReassignablePartitionResponse
OngoingTopic = ListPartitionReassignmentsResponse.OngoingTopicReassignment
OngoingPartition = ListPartitionReassignmentsResponse.OngoingPartitionReassignment


class _RecordCapReached(Exception):
    """Kafka's BoundedListTooLongException: not an ApiException, so UNKNOWN_SERVER_ERROR."""


class ReassignmentManager:
    def __init__(self, ctx: ControllerContext, cluster: ClusterControlManager) -> None:
        self.ctx = ctx
        self.cluster = cluster

    def routes(self) -> list[Route]:
        return [
            Route(Api.ALTER_PARTITION_REASSIGNMENTS, "alterPartitionReassignments", self.alter_reassignments,
                  timeout_ms=lambda r: r.timeout_ms, error=alter_error, cluster_operation=AclOperation.ALTER),
            Route(Api.LIST_PARTITION_REASSIGNMENTS, "listPartitionReassignments", self.list_reassignments,
                  mutating=False, cluster_operation=AclOperation.DESCRIBE),
        ]

    # ----- AlterPartitionReassignments -----------------------------------------------------------

    def alter_reassignments(self, request: AlterPartitionReassignmentsRequest,
                            context: RequestContext) -> ControllerResult[AlterPartitionReassignmentsResponse]:
        records: list[RecordAndVersion] = []
        responses: list[TopicResponse] = []
        # v1 (4.1+, KIP-860): false refuses a target that changes the replication factor.
        allow_rf_change = bool(request.allow_replication_factor_change)
        for t in request.topics:
            partitions: list[PartitionResponse] = []
            for target in t.partitions:
                code, message = ErrorCode.NONE, None
                try:
                    record = self._alter_one(t.name, target.partition_index, target.replicas, allow_rf_change)
                    if record is not None:
                        if len(records) >= MAX_RECORDS_PER_USER_OP:
                            raise _RecordCapReached()
                        records.append(record)
                except ApiError as e:
                    code, message = e.code, e.message
                except _RecordCapReached:
                    code = ErrorCode.UNKNOWN_SERVER_ERROR
                partitions.append(PartitionResponse(partition_index=target.partition_index, error_code=int(code),
                                                    error_message=message))
            responses.append(TopicResponse(name=t.name, partitions=partitions))
        return ControllerResult(records, AlterPartitionReassignmentsResponse(
            error_code=0, error_message=None, responses=responses,
            allow_replication_factor_change=allow_rf_change), atomic=True)

    def _alter_one(self, name: str, pid: int, replicas: Sequence[int] | None,
                   allow_rf_change: bool = True) -> tuple[PartitionChangeRecord, int] | None:
        topic: Topic | None = self.ctx.image.topics.by_name.get(name)
        if topic is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {name}.")
        p = topic.partitions.get(pid)
        if p is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {name}:{pid}.")
        if replicas is None:
            return self._cancel(topic, pid, p)
        return self._change(topic, pid, p, list(replicas), allow_rf_change)

    def _builder(self, topic: Topic, pid: int, p: Partition, **targets: Unpack[Targets]) -> PartitionChangeBuilder:
        image = self.ctx.image
        return PartitionChangeBuilder(p, topic.id, pid, self.cluster.leader_acceptor(p), image.metadata_version,
                                      zk_migration_enabled=self.cluster.zk_registration_allowed(),
                                      default_dir=image.cluster.default_dir, release=image.release,
                                      **elr_targets(self.ctx, topic), **targets)

    def _change(self, topic: Topic, pid: int, p: Partition, target: list[int],
                allow_rf_change: bool = True) -> tuple[PartitionChangeRecord, int] | None:
        """changePartitionReassignment: the target joins as adding, what leaves is removing."""
        validate_manual_assignment(target, None, self.ctx.image.cluster.brokers)
        if not allow_rf_change:
            # validatePartitionReplicationFactorUnchanged: against the replicas the partition will
            # have once a reassignment in progress completes.
            size = len((set(p.replicas) | set(p.adding_replicas)) - set(p.removing_replicas)) \
                if p.adding_replicas or p.removing_replicas else len(p.replicas)
            if size != len(target):
                raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                               f"The replication factor is changed from {size} to {len(target)}")
        current = list(p.replicas)
        removing = sorted(set(current) - set(target))  # Kafka's TreeSet difference
        adding = sorted(set(target) - set(current))
        replicas = target + removing
        targets: Targets = {}
        if replicas != current:
            targets["target_replicas"] = replicas
        if removing:
            targets["target_removing"] = removing
        if adding:
            targets["target_adding"] = adding
        return self._builder(topic, pid, p, **targets).build()

    def _cancel(self, topic: Topic, pid: int, p: Partition) -> tuple[PartitionChangeRecord, int] | None:
        """cancelPartitionReassignment: back to the original replicas, the adding ones out of the ISR."""
        if not p.is_reassigning():
            raise ApiError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)  # the default message: none sent
        adding = set(p.adding_replicas)
        replicas = [r for r in p.replicas if r not in adding]
        isr = [r for r in p.isr if r not in adding]
        unclean_allowed = self.cluster.unclean_election_enabled(topic.name)
        if not isr:
            if not replicas:
                raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               "Invalid replica assignment: addingReplicas contains all replicas.")
            isr = [replicas[0]]
            if not unclean_allowed:
                raise ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"Unable to revert partition assignment for {topic.name}:{pid} because it would "
                               f"require an unclean leader election.")
        return self._builder(topic, pid, p, target_isr=isr, target_replicas=replicas, target_removing=[],
                             target_adding=[],
                             election=Election.UNCLEAN if unclean_allowed else Election.ONLINE).build()

    # ----- ListPartitionReassignments ------------------------------------------------------------

    def list_reassignments(self, request: ListPartitionReassignmentsRequest,
                           context: RequestContext) -> ControllerResult[ListPartitionReassignmentsResponse]:
        topics = self.ctx.image.topics
        out: list[OngoingTopic] = []
        if request.topics is None:
            by_topic: dict[str, list[int]] = {}
            for topic, pid, _ in topics.reassigning_partitions():
                by_topic.setdefault(topic.name, []).append(pid)
            wanted = [(name, sorted(pids)) for name, pids in by_topic.items()]
        else:
            wanted = [(t.name, list(t.partition_indexes)) for t in request.topics]
        for name, pids in wanted:
            found = topics.by_name.get(name)
            if found is None:
                continue
            ongoing: list[OngoingPartition] = []
            for pid in pids:
                p = found.partitions.get(pid)
                if p is not None and p.is_reassigning():
                    ongoing.append(OngoingPartition(partition_index=pid, replicas=list(p.replicas),
                                                    adding_replicas=list(p.adding_replicas),
                                                    removing_replicas=list(p.removing_replicas)))
            if ongoing:
                out.append(OngoingTopic(name=name, partitions=ongoing))
        return ControllerResult([], ListPartitionReassignmentsResponse(error_code=0, error_message=None, topics=out))


def alter_error(request: AlterPartitionReassignmentsRequest, version: int, code: int,
                message: str | None) -> AlterPartitionReassignmentsResponse:
    """AlterPartitionReassignmentsRequest.getErrorResponse: the error at the top and on every
    partition asked for (its topics carry no ErrorCode of their own, so the schema rule that
    mirrors result arrays does not reach them)."""
    msg = from_throwable_message(code, message)
    return AlterPartitionReassignmentsResponse(error_code=int(code), error_message=msg, responses=[
        TopicResponse(name=t.name, partitions=[PartitionResponse(partition_index=p.partition_index, error_code=int(code),
                                                                 error_message=msg) for p in t.partitions])
        for t in request.topics])

"""LeaderElectionManager: ElectLeaders (api 43, v0-2), as a Kafka 3.9 controller answers it.

Operators run it (``kafka-leader-election``, ``Admin.electLeaders``) to move leadership back to
the preferred replica (the first of the replica list) after brokers came and went, or, as a last
resort, to elect a leader outside the ISR (unclean) for a partition that has none.

Kafka's rules (``ControllerApis.handleElectLeaders`` + ``ReplicationControlManager.electLeaders``):

* the caller needs ALTER on the cluster; an election type other than 0 (PREFERRED) or 1 (UNCLEAN)
  fails the whole request with INVALID_REQUEST "Unknown election type N" (v0 carries no type:
  preferred);
* each named partition is judged alone, in request order: an unknown topic or partition is
  UNKNOWN_TOPIC_OR_PARTITION; a partition already led by its preferred replica (preferred) or
  with any leader (unclean) is ELECTION_NOT_NEEDED; otherwise the PartitionChangeBuilder elects,
  and no record means PREFERRED_LEADER_NOT_AVAILABLE (preferred: the first replica is not in
  the ISR or not active) or ELIGIBLE_LEADERS_NOT_AVAILABLE (unclean: no active replica);
* with no partitions named (null), every partition of every topic is tried, and those whose
  election was not needed are left out of the answer;
* each partition's record is built from the image as it was before the request, so a partition
  named twice is elected twice, as in Kafka; not atomic, and more than 10,000 records fail the
  whole request with POLICY_VIOLATION.

In the all-partitions form Kafka answers topics and partitions in the order of its timeline hash
tables; kraftsim answers them in the image's order (docs/differences.md).

The same preferred election moves leaders back on its own (``balance_partition_leaders``, Kafka's
``ReplicationControlManager.maybeBalancePartitionLeaders``): the active controller runs it every
``leader.imbalance.check.interval.seconds`` while some partition is led by another replica than
its preferred one (the scheduling is the controller core's, ``controller/quorum_controller.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.managers.cluster import ClusterControlManager
from kraftsim.controller.managers.elr import elr_targets
from kraftsim.controller.managers.partition_change import Election, PartitionChangeBuilder, election_from_wire
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.controller.write_path import check_record_count
from kraftsim.metadata.authorizer.authorizer import AclOperation
from kraftsim.metadata.image.topics import NO_LEADER, Partition, Topic
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode, generic_message
from kraftsim.rpc.messages import ElectLeadersResponse

if TYPE_CHECKING:
    from kraftsim.rpc.messages import ElectLeadersRequest

TopicResult = ElectLeadersResponse.ReplicaElectionResult
PartitionResult = ElectLeadersResponse.PartitionResult

# ReplicationControlManager.MAX_ELECTIONS_PER_IMBALANCE: the records one balancing run writes at
# most; the controller runs again 10 ms later while a run reaches it.
MAX_ELECTIONS_PER_IMBALANCE: Final = 1_000


class LeaderElectionManager:
    def __init__(self, ctx: ControllerContext, cluster: ClusterControlManager) -> None:
        self.ctx = ctx
        self.cluster = cluster

    def routes(self) -> list[Route]:
        return [Route(Api.ELECT_LEADERS, "electLeaders", self.elect_leaders, timeout_ms=lambda r: r.timeout_ms,
                      error=error_response, cluster_operation=AclOperation.ALTER)]

    def elect_leaders(self, request: ElectLeadersRequest,
                      context: RequestContext) -> ControllerResult[ElectLeadersResponse]:
        wire = request.election_type if context.api_version >= 1 else 0
        if wire not in (0, 1):
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Unknown election type {wire}")
        election = election_from_wire(wire)
        records: list[RecordAndVersion] = []
        results: list[ElectLeadersResponse.ReplicaElectionResult] = []
        topics = self.ctx.image.topics
        if request.topic_partitions is None:
            for name, topic in topics.by_name.items():
                partitions = []
                for pid in topic.partitions:
                    code, message = self._elect(name, pid, election, records)
                    if code != ErrorCode.ELECTION_NOT_NEEDED:
                        partitions.append(PartitionResult(partition_id=pid, error_code=int(code),
                                                          error_message=message))
                results.append(TopicResult(topic=name, partition_result=partitions))
        else:
            for t in request.topic_partitions:
                partitions = []
                for pid in t.partitions:
                    code, message = self._elect(t.topic, pid, election, records)
                    partitions.append(PartitionResult(partition_id=pid, error_code=int(code), error_message=message))
                results.append(TopicResult(topic=t.topic, partition_result=partitions))
        return ControllerResult(records, ElectLeadersResponse(error_code=0, replica_election_results=results),
                                atomic=False)

    def _elect(self, name: str, pid: int, election: Election,
               records: list[RecordAndVersion]) -> tuple[ErrorCode, str | None]:
        topic: Topic | None = self.ctx.image.topics.by_name.get(name)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {name}"
        p = topic.partitions.get(pid)
        if p is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {name}-{pid}"
        if (election == Election.PREFERRED and p.leader == (p.replicas[0] if p.replicas else NO_LEADER)) \
                or (election == Election.UNCLEAN and p.leader != NO_LEADER):
            return self._default(ErrorCode.ELECTION_NOT_NEEDED)
        record = self._build(topic, pid, p, election)
        if record is None:
            return self._default(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if election == Election.PREFERRED
                                 else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
        records.append(record)
        check_record_count(len(records))
        return ErrorCode.NONE, None

    def _build(self, topic: Topic, pid: int, p: Partition, election: Election) -> RecordAndVersion | None:
        """The PartitionChangeRecord of one election (None: nothing would change), as Kafka's
        electLeader and maybeTriggerLeaderChangeForPartitionsWithoutPreferredLeader build it."""
        image = self.ctx.image
        return PartitionChangeBuilder(
            p, topic.id, pid, self.cluster.leader_acceptor(p), image.metadata_version, election=election,
            zk_migration_enabled=self.cluster.zk_registration_allowed(), default_dir=image.cluster.default_dir,
            release=image.release, **elr_targets(self.ctx, topic)).build()

    def balance_partition_leaders(self, max_elections: int = MAX_ELECTIONS_PER_IMBALANCE) -> ControllerResult[bool]:
        """Kafka's maybeBalancePartitionLeaders: a preferred election for each partition the image
        counts as imbalanced (leader other than the first replica, PreferredReplicaImbalanceCount),
        until ``max_elections`` records. The response is True when the cap was reached: more may
        be waiting, and the controller runs again at once instead of after the interval.

        Where the preferred replica is not in the ISR or not an acceptable leader, the election
        keeps the current leader and writes nothing, so a partition whose preferred broker is
        down costs a look per run and no record. The work is proportional to the imbalanced
        partitions (the image's index), not to all of them.

        The partitions are taken in the index's order; Kafka walks a timeline hash set of
        (topic id, partition), whose order follows the random topic ids and the set's history.
        The records are the same; only which partitions a capped run takes first differs
        (docs/differences.md)."""
        records: list[RecordAndVersion] = []
        accepted: dict[tuple[int, int], bool] = {}
        for topic, pid, p in self.ctx.image.topics.imbalanced_partitions():
            if len(records) >= max_elections:
                break
            if self._keeps_its_leader(p, accepted):
                continue
            record = self._build(topic, pid, p, Election.PREFERRED)
            if record is not None:
                records.append(record)
        return ControllerResult(records, len(records) >= max_elections, atomic=False)

    def _keeps_its_leader(self, p: Partition, accepted: dict[tuple[int, int], bool]) -> bool:
        """Whether a preferred election would certainly write nothing for ``p``, decided without
        building it: the PartitionChangeBuilder's own steps, short-cut for the common case of a
        preferred replica out of the ISR (its broker is down). Nothing else would change: no
        reassignment to complete, no ELR or LastKnownElr to clear, the ISR and replicas as they are; and the
        first replica is not a valid leader (not in the ISR) while the current one is (in the
        ISR and accepted by the acceptor the builder asks), so the builder keeps it.

        The acceptor's verdict depends only on the broker and the replica's directory, and the
        image does not change during a run: ``accepted`` keeps it per (broker, directory as an
        int: a UUID hashes in Python code)."""
        if p.removing_replicas or p.adding_replicas or p.elr or p.last_known_elr or not p.replicas:
            return False
        isr = p.isr
        leader = p.leader
        if p.replicas[0] in isr or leader not in isr:
            return False
        key = (leader, p.directories[p.replicas.index(leader)].int)
        verdict = accepted.get(key)
        if verdict is None:
            verdict = accepted[key] = self.cluster.leader_acceptor(p)(leader)
        return verdict

    @staticmethod
    def _default(code: ErrorCode) -> tuple[ErrorCode, str | None]:
        return code, generic_message(code)  # Kafka's new ApiError(code): the generic message


def error_response(request: ElectLeadersRequest, version: int, code: int, message: str | None) -> ElectLeadersResponse:
    """ElectLeadersRequest.getErrorResponse: the error at the top and on every partition named
    (the partitions are bare ints in the request, which the generic rule cannot mirror)."""
    results = [TopicResult(topic=t.topic, partition_result=[
        PartitionResult(partition_id=pid, error_code=code, error_message=message) for pid in t.partitions])
        for t in request.topic_partitions or ()]
    # v0 has no top-level error code: Kafka sets it from v1 only (the partitions carry it).
    return ElectLeadersResponse(error_code=code if version >= 1 else 0, replica_election_results=results)

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
tables; kraftsim answers them in the image's order (README, Differences from Kafka 3.9).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.managers.cluster import ClusterControlManager
from kraftsim.controller.managers.partition_change import Election, PartitionChangeBuilder, election_from_wire
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import AnyRoute, Route
from kraftsim.controller.write_path import check_record_count
from kraftsim.metadata.authorizer.authorizer import AclOperation
from kraftsim.metadata.image.topics import NO_LEADER, Topic
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



class LeaderElectionManager:
    def __init__(self, ctx: ControllerContext, cluster: ClusterControlManager) -> None:
        self.ctx = ctx
        self.cluster = cluster

    def routes(self) -> list[AnyRoute]:
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
        image = self.ctx.image
        record = PartitionChangeBuilder(
            p, topic.id, pid, self.cluster.leader_acceptor(p), image.metadata_version, election=election,
            zk_migration_enabled=self.cluster.zk_registration_allowed(), default_dir=image.cluster.default_dir).build()
        if record is None:
            return self._default(ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE if election == Election.PREFERRED
                                 else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)
        records.append(record)
        check_record_count(len(records))
        return ErrorCode.NONE, None

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

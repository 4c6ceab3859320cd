"""AssignReplicasToDirs (api 73): a JBOD broker says which log directory holds each replica.

Kafka 3.9's ``ReplicationControlManager.handleAssignReplicasToDirs`` (KIP-858). A new replica
is placed in its broker's default directory, which is UNASSIGNED when the broker has several;
the broker then picks one and reports it here. Refused whole with UNSUPPORTED_VERSION "Directory
assignment is not supported yet." below metadata.version 3.7-IV2, and with STALE_BROKER_EPOCH for
an unregistered broker or another epoch. Per partition: UNKNOWN_TOPIC_ID for an unknown topic,
UNKNOWN_TOPIC_OR_PARTITION for an unknown partition, NOT_LEADER_OR_FOLLOWER when the broker is
not one of its replicas; otherwise a PartitionChangeRecord moving the replica to the directory
(none if it is already there). Assignments to a directory the broker does not have online also
take the broker out of those partitions' ISR and leadership, after all the directory records.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.managers.cluster import ClusterControlManager
from kraftsim.controller.managers.elr import elr_targets
from kraftsim.controller.managers.partition_change import PartitionChangeBuilder
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.metadata import directories
from kraftsim.metadata.authorizer.authorizer import AclOperation
from kraftsim.metadata.image.topics import NO_LEADER, Partition, Topic
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import AssignReplicasToDirsResponse

if TYPE_CHECKING:
    from kraftsim.rpc.messages import AssignReplicasToDirsRequest

DirectoryResult = AssignReplicasToDirsResponse.DirectoryData
TopicResult = AssignReplicasToDirsResponse.TopicData
PartitionResult = AssignReplicasToDirsResponse.PartitionData


class ReplicaDirectoryManager:
    def __init__(self, ctx: ControllerContext, cluster: ClusterControlManager) -> None:
        self.ctx = ctx
        self.cluster = cluster

    def routes(self) -> list[Route]:
        return [Route(Api.ASSIGN_REPLICAS_TO_DIRS, "assignReplicasToDirs", self.assign_replicas_to_dirs,
                      cluster_operation=AclOperation.CLUSTER_ACTION)]

    def assign_replicas_to_dirs(self, request: AssignReplicasToDirsRequest,
                                context: RequestContext) -> ControllerResult[AssignReplicasToDirsResponse]:
        image = self.ctx.image
        mv = image.metadata_version
        if not self.ctx.release.directory_assignment_supported(mv):
            raise ApiError(ErrorCode.UNSUPPORTED_VERSION, "Directory assignment is not supported yet.")
        broker_id = request.broker_id
        self.cluster.check_broker_epoch(broker_id, request.broker_epoch)
        reg = image.cluster.brokers[broker_id]
        topics = image.topics
        records: list[RecordAndVersion] = []
        offline: dict[tuple[uuid.UUID, int], tuple[Topic, int, Partition]] = {}
        response_dirs: list[DirectoryResult] = []
        for rd in request.directories:
            dir_id = rd.id
            dir_offline = not directories.is_online(dir_id, reg.directories)
            out_dir = DirectoryResult(id=dir_id, topics=[])
            response_dirs.append(out_dir)
            for rt in rd.topics:
                topic = topics.by_id.get(rt.topic_id)
                out_topic = TopicResult(topic_id=rt.topic_id, partitions=[])
                out_dir.topics.append(out_topic)
                for rp in rt.partitions:
                    pid = rp.partition_index
                    if topic is None:
                        code = ErrorCode.UNKNOWN_TOPIC_ID
                    else:
                        p = topic.partitions.get(pid)
                        if p is None:
                            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                        elif broker_id not in p.replicas:
                            code = ErrorCode.NOT_LEADER_OR_FOLLOWER
                        else:
                            code = ErrorCode.NONE
                            builder = PartitionChangeBuilder(p, topic.id, pid, self.cluster.leader_acceptor(p), mv,
                                                             default_dir=image.cluster.default_dir,
                                                             release=image.release, **elr_targets(self.ctx, topic))
                            rec = builder.set_directory(broker_id, dir_id).build()
                            if rec is not None:
                                records.append(rec)
                            if dir_offline:
                                offline[(topic.id, pid)] = (topic, pid, p)
                    out_topic.partitions.append(PartitionResult(partition_index=pid, error_code=int(code)))
        if offline:
            self.cluster.generate_leader_and_isr_updates(broker_id, NO_LEADER, offline.values(), records)
        return ControllerResult(records, AssignReplicasToDirsResponse(error_code=0, directories=response_dirs),
                                atomic=False)

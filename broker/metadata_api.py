"""Metadata (v0-12) and DescribeCluster (v0-1) answered from the fleet's replayed image, as a
Kafka 3.9 broker answers them from its KRaftMetadataCache (KafkaApis.handleTopicMetadataRequest,
handleDescribeCluster).

Only unfenced brokers with a listener of the request's listener name are listed. A partition
whose leader has no such endpoint gets LEADER_NOT_AVAILABLE (or LISTENER_NOT_FOUND from v6
when the leader is registered); v0 leaves unavailable replicas out of the replica and ISR lists
and says REPLICA_NOT_AVAILABLE. In KRaft the "controller id" a client is told is a random alive
broker: clients cannot reach controllers, so they send their admin requests to a broker, which
forwards them. Topics that do not exist are UNKNOWN_TOPIC_OR_PARTITION (or
INVALID_TOPIC_EXCEPTION for an illegal name): the fleet does not auto-create topics.
"""

from __future__ import annotations

import random
import uuid
from typing import TYPE_CHECKING

from kraftsim.metadata.directories import is_online
from kraftsim.metadata.image.cluster import BrokerRegistration
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.image.topics import NO_LEADER, Partition, Topic
from kraftsim.metadata.topic_names import GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME, invalid_reason
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import DescribeClusterResponse, MetadataResponse

if TYPE_CHECKING:
    from kraftsim.rpc.messages import DescribeClusterRequest, MetadataRequest

INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME})
NO_TOPIC_ID = uuid.UUID(int=0)
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)
# With no authorizer every supported operation is allowed (AuthHelper.authorizedOperations):
# CLUSTER: CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE.
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))
# TOPIC: READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS.
TOPIC_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))
ENDPOINT_BROKERS = 1


def alive_brokers(image: MetadataImage) -> list[BrokerRegistration]:
    return [b for b in image.cluster.brokers.values() if not b.fenced]


def random_alive_broker(image: MetadataImage) -> int:
    alive = alive_brokers(image)
    return random.choice(alive).id if alive else -1


def metadata(image: MetadataImage, cluster_id: str, listener: str, version: int,
             req: MetadataRequest) -> MetadataResponse:
    resp = MetadataResponse(throttle_time_ms=0, cluster_id=cluster_id, controller_id=random_alive_broker(image))
    resp.brokers = [MetadataResponse.MetadataResponseBroker(node_id=b.id, host=ep[0], port=ep[1], rack=b.rack)
                    for b in alive_brokers(image) if (ep := b.listeners.get(listener)) is not None]
    topics_img = image.topics
    requested = req.topics
    all_topics = requested is None or (version == 0 and not requested)
    out: list[MetadataResponse.MetadataResponseTopic] = []
    if all_topics:
        names = sorted(topics_img.by_name)
    else:
        assert requested is not None  # else all_topics
        names = []
        for t in requested:
            if t.name is None or (version < 12 and t.topic_id.int):
                if version < 12:  # KafkaApis: InvalidRequestException for the whole request
                    return _invalid(resp, req, version)
                topic = topics_img.by_id.get(t.topic_id)
                if topic is None:
                    out.append(MetadataResponse.MetadataResponseTopic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=t.topic_id, is_internal=False,
                        partitions=[], topic_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED))
                    continue
                names.append(topic.name)
            else:
                names.append(t.name)
    include_ops = version >= 8 and req.include_topic_authorized_operations
    seen: set[str] = set()
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        topic = topics_img.by_name.get(name)
        if topic is None:
            if all_topics:
                continue
            error = ErrorCode.INVALID_TOPIC_EXCEPTION if invalid_reason(name) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            entry = MetadataResponse.MetadataResponseTopic(error_code=error, name=name, topic_id=NO_TOPIC_ID,
                                                           is_internal=name in INTERNAL_TOPICS, partitions=[])
        else:
            entry = MetadataResponse.MetadataResponseTopic(
                error_code=ErrorCode.NONE, name=name, topic_id=topic.id, is_internal=name in INTERNAL_TOPICS,
                partitions=_partitions(image, topic, listener, version))
        entry.topic_authorized_operations = TOPIC_OPERATIONS if include_ops else AUTHORIZED_OPERATIONS_OMITTED
        out.append(entry)
    resp.topics = out
    if 8 <= version <= 10 and req.include_cluster_authorized_operations:
        resp.cluster_authorized_operations = CLUSTER_OPERATIONS
    return resp


def _invalid(resp: MetadataResponse, req: MetadataRequest, version: int) -> MetadataResponse:
    resp.topics = [MetadataResponse.MetadataResponseTopic(error_code=ErrorCode.INVALID_REQUEST, name=t.name,
                                                          topic_id=t.topic_id, partitions=[])
                   for t in req.topics or []]
    resp.brokers = []
    return resp


def _partitions(image: MetadataImage, topic: Topic, listener: str,
                version: int) -> list[MetadataResponse.MetadataResponsePartition]:
    brokers = image.cluster.brokers
    filter_unavailable = version == 0
    listener_errors = version >= 6
    out = []
    for pid in sorted(topic.partitions):
        p: Partition = topic.partitions[pid]
        if filter_unavailable:
            replicas = [r for r in p.replicas if _alive_on(brokers.get(r), listener)]
            isr = [r for r in p.isr if _alive_on(brokers.get(r), listener)]
        else:
            replicas, isr = list(p.replicas), list(p.isr)
        offline = [r for r in p.replicas if _offline(brokers.get(r), listener, p, r)]
        leader = brokers.get(p.leader) if p.leader != NO_LEADER else None
        part = MetadataResponse.MetadataResponsePartition(partition_index=pid, leader_epoch=p.leader_epoch,
                                                          replica_nodes=replicas, isr_nodes=isr,
                                                          offline_replicas=offline)
        if leader is None or listener not in leader.listeners:
            part.leader_id = -1
            part.error_code = (ErrorCode.LISTENER_NOT_FOUND if leader is not None and listener_errors
                               else ErrorCode.LEADER_NOT_AVAILABLE)
        else:
            part.leader_id = p.leader
            part.error_code = (ErrorCode.REPLICA_NOT_AVAILABLE
                               if len(replicas) < len(p.replicas) or len(isr) < len(p.isr) else ErrorCode.NONE)
        out.append(part)
    return out


def _alive_on(b: BrokerRegistration | None, listener: str) -> bool:
    return b is not None and not b.fenced and listener in b.listeners


def _offline(b: BrokerRegistration | None, listener: str, p: Partition, replica: int) -> bool:
    """isReplicaOffline: unregistered, fenced, without the listener, or its directory offline."""
    if b is None or b.fenced or listener not in b.listeners:
        return True
    return not is_online(p.directory(replica), b.directories)


def describe_cluster(image: MetadataImage, cluster_id: str, listener: str, version: int,
                     req: DescribeClusterRequest) -> DescribeClusterResponse:
    """AuthHelper.computeDescribeClusterResponse for a broker endpoint."""
    endpoint_type = req.endpoint_type if version >= 1 else ENDPOINT_BROKERS
    if endpoint_type not in (1, 2):
        return DescribeClusterResponse(
            error_code=ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message=f"Unsupported endpoint type {endpoint_type}")
    if endpoint_type != ENDPOINT_BROKERS:
        return DescribeClusterResponse(
            error_code=ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            error_message="The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
                          "CONTROLLER")
    # v2 (4.0+): fenced brokers too when asked for, each saying whether it is (KafkaApis).
    listed = image.cluster.brokers.values() if req.include_fenced_brokers else alive_brokers(image)
    nodes = [DescribeClusterResponse.DescribeClusterBroker(broker_id=b.id, host=ep[0], port=ep[1], rack=b.rack,
                                                           is_fenced=b.fenced)
             for b in listed if (ep := b.listeners.get(listener)) is not None]
    controller = random_alive_broker(image)
    if not any(n.broker_id == controller for n in nodes):
        controller = -1
    resp = DescribeClusterResponse(error_code=ErrorCode.NONE, cluster_id=cluster_id, controller_id=controller,
                                   brokers=nodes, throttle_time_ms=0,
                                   cluster_authorized_operations=CLUSTER_OPERATIONS
                                   if req.include_cluster_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED)
    if version >= 1:
        resp.endpoint_type = ENDPOINT_BROKERS
    return resp

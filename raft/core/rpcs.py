"""The Raft RPCs' messages for the one partition KRaft replicates, ``__cluster_metadata-0``:
how this node builds its requests and answers, and how it reads the endpoints a peer names
(Kafka's RaftUtil and the request classes' helpers).

Builders fill every field any version has; the encoder writes those of the version in use. Where
an answer depends on the version (the leader's endpoint from v1, or v17 for Fetch), the builder
takes the version of the request it answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from kraftsim.metadata.files import METADATA_PARTITION, METADATA_TOPIC, METADATA_TOPIC_ID
from kraftsim.raft.core.events import RaftRequest, RaftResponse
from kraftsim.raft.core.keys import NO_DIRECTORY_ID, OffsetAndEpoch, ReplicaKey
from kraftsim.raft.core.log import Validity, ValidOffsetAndEpoch
from kraftsim.raft.core.voters import Endpoints
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.error_codes import ErrorCode, generic_message
from kraftsim.rpc.file_slice import FileSlice
from kraftsim.rpc.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoteRequest,
    VoteResponse,
)

E = ErrorCode
MAX_FETCH_SIZE_BYTES = 8 * 1024 * 1024  # KafkaRaftClient.MAX_FETCH_SIZE_BYTES
NOT_LEADER_MESSAGE = ("For requests intended only for the leader, this error indicates that the broker is not the "
                      "current leader. For requests intended for any replica, this error indicates that the broker "
                      "is not a replica of the topic partition.")


def error_message(code: int) -> str | None:
    return NOT_LEADER_MESSAGE if code == E.NOT_LEADER_OR_FOLLOWER else generic_message(code)


def error_response(api_key: int, code: int) -> RaftResponse:
    """A response carrying only an error code: what a failed send becomes (RaftUtil.errorResponse)."""
    cls = {ApiKey.VOTE: VoteResponse, ApiKey.BEGIN_QUORUM_EPOCH: BeginQuorumEpochResponse,
           ApiKey.END_QUORUM_EPOCH: EndQuorumEpochResponse, ApiKey.FETCH: FetchResponse,
           ApiKey.FETCH_SNAPSHOT: FetchSnapshotResponse, ApiKey.API_VERSIONS: ApiVersionsResponse,
           ApiKey.UPDATE_RAFT_VOTER: UpdateRaftVoterResponse}.get(ApiKey(api_key))
    if cls is None:
        raise ValueError(f"no Raft response for api key {api_key}")
    response: RaftResponse = cls(error_code=code)
    return response


# -- partition checks --------------------------------------------------------------------------

class _Partition(Protocol):
    @property
    def partition_index(self) -> int: ...


class _Topic(Protocol):
    @property
    def topic_name(self) -> str: ...

    @property
    def partitions(self) -> Sequence[_Partition]: ...


class _NodeEndpoint(Protocol):
    @property
    def node_id(self) -> int: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


class _NamedEndpoint(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


def _one_partition(topics: Sequence[_Topic]) -> bool:
    return (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC and len(topics[0].partitions) == 1
            and topics[0].partitions[0].partition_index == METADATA_PARTITION)


_PARTITIONLESS = (AddRaftVoterRequest, AddRaftVoterResponse, RemoveRaftVoterRequest, RemoveRaftVoterResponse,
                  UpdateRaftVoterRequest, UpdateRaftVoterResponse, ApiVersionsRequest, ApiVersionsResponse)


def valid_partition(message: RaftRequest | RaftResponse) -> bool:
    """The message names exactly ``__cluster_metadata-0`` (by topic id for Fetch)."""
    if isinstance(message, FetchRequest):
        t = message.topics
        return (len(t) == 1 and t[0].topic_id == METADATA_TOPIC_ID and len(t[0].partitions) == 1
                and t[0].partitions[0].partition == METADATA_PARTITION)
    if isinstance(message, FetchResponse):
        r = message.responses
        return (len(r) == 1 and r[0].topic_id == METADATA_TOPIC_ID and len(r[0].partitions) == 1
                and r[0].partitions[0].partition_index == METADATA_PARTITION)
    if isinstance(message, (FetchSnapshotRequest, FetchSnapshotResponse)):
        raise TypeError("FetchSnapshot names its partition by topic name and index: use its own lookup")
    if isinstance(message, _PARTITIONLESS):
        raise TypeError(f"{type(message).__name__} names no partition")
    return _one_partition(message.topics)


# -- endpoints a message names ---------------------------------------------------------------

def leader_endpoints_from_response(listener: str, leader_id: int, nodes: Iterable[_NodeEndpoint]) -> Endpoints:
    """The leader's address from a response's NodeEndpoints (the listener is the one the
    request went out on)."""
    for node in nodes:
        if node.node_id == leader_id:
            return Endpoints.of([(listener, node.host, node.port)])
    return Endpoints()


def endpoints_from_request(items: Iterable[_NamedEndpoint]) -> Endpoints:
    return Endpoints.of((e.name, e.host, e.port) for e in items)


def _node_endpoints(cls: type, listener: str, api_version: int, min_version: int, leader_id: int | None,
                    endpoints: Endpoints) -> list[object]:
    address = endpoints.address(listener)
    if api_version < min_version or address is None or leader_id is None or leader_id < 0:
        return []
    return [cls.NodeEndpoint(node_id=leader_id, host=address.host, port=address.port)]  # type: ignore[attr-defined]


# -- Vote ------------------------------------------------------------------------------------

def vote_request(cluster_id: str, epoch: int, candidate: ReplicaKey, voter: ReplicaKey,
                 last: OffsetAndEpoch, pre_vote: bool = False) -> VoteRequest:
    """PreVote (v2, Kafka 4.0) cannot be sent below v2: the network fails such a request with
    UNSUPPORTED_VERSION, as Kafka's client does, and the asker stands at once."""
    return VoteRequest(cluster_id=cluster_id, voter_id=voter.id, topics=[VoteRequest.TopicData(
        topic_name=METADATA_TOPIC, partitions=[VoteRequest.PartitionData(
            partition_index=METADATA_PARTITION, candidate_epoch=epoch, candidate_id=candidate.id,
            candidate_directory_id=candidate.wire_directory_id, voter_directory_id=voter.wire_directory_id,
            last_offset_epoch=last.epoch, last_offset=last.offset, pre_vote=pre_vote)])])


def vote_response(listener: str, api_version: int, error: int, epoch: int, leader_id: int | None,
                  granted: bool, leader_endpoints: Endpoints) -> VoteResponse:
    response = VoteResponse(error_code=E.NONE, topics=[VoteResponse.TopicData(
        topic_name=METADATA_TOPIC, partitions=[VoteResponse.PartitionData(
            partition_index=METADATA_PARTITION, error_code=error, leader_id=-1 if leader_id is None else leader_id,
            leader_epoch=epoch, vote_granted=granted)])])
    response.node_endpoints = _node_endpoints(VoteResponse, listener, api_version, 1, leader_id,  # type: ignore[assignment]
                                              leader_endpoints)
    return response


# -- BeginQuorumEpoch / EndQuorumEpoch -------------------------------------------------------

def update_voter_request(cluster_id: str, voter: ReplicaKey, epoch: int, kraft_versions: tuple[int, int],
                         listeners: Endpoints) -> UpdateRaftVoterRequest:
    """A voter's own entry, as it should be (RaftUtil.updateVoterRequest)."""
    return UpdateRaftVoterRequest(
        cluster_id=cluster_id, current_leader_epoch=epoch, voter_id=voter.id,
        voter_directory_id=voter.wire_directory_id,
        listeners=[UpdateRaftVoterRequest.Listener(name=name, host=a.host, port=a.port) for name, a in listeners.items()],
        kraft_version_feature=UpdateRaftVoterRequest.KRaftVersionFeature(min_supported_version=kraft_versions[0],
                                                                        max_supported_version=kraft_versions[1]))


def begin_quorum_epoch_request(cluster_id: str, epoch: int, leader_id: int, leader_endpoints: Endpoints,
                               voter: ReplicaKey) -> BeginQuorumEpochRequest:
    return BeginQuorumEpochRequest(
        cluster_id=cluster_id, voter_id=voter.id,
        topics=[BeginQuorumEpochRequest.TopicData(topic_name=METADATA_TOPIC, partitions=[
            BeginQuorumEpochRequest.PartitionData(partition_index=METADATA_PARTITION, leader_epoch=epoch,
                                                  leader_id=leader_id, voter_directory_id=voter.wire_directory_id)])],
        leader_endpoints=[BeginQuorumEpochRequest.LeaderEndpoint(name=name, host=a.host, port=a.port)
                          for name, a in leader_endpoints.items()])


def begin_quorum_epoch_response(listener: str, api_version: int, error: int, epoch: int, leader_id: int | None,
                                leader_endpoints: Endpoints) -> BeginQuorumEpochResponse:
    response = BeginQuorumEpochResponse(error_code=E.NONE, topics=[BeginQuorumEpochResponse.TopicData(
        topic_name=METADATA_TOPIC, partitions=[BeginQuorumEpochResponse.PartitionData(
            partition_index=METADATA_PARTITION, error_code=error, leader_id=-1 if leader_id is None else leader_id,
            leader_epoch=epoch)])])
    response.node_endpoints = _node_endpoints(BeginQuorumEpochResponse, listener, api_version, 1,  # type: ignore[assignment]
                                              leader_id, leader_endpoints)
    return response


def end_quorum_epoch_request(cluster_id: str, epoch: int, leader_id: int, leader_endpoints: Endpoints,
                             successors: Sequence[ReplicaKey]) -> EndQuorumEpochRequest:
    return EndQuorumEpochRequest(
        cluster_id=cluster_id,
        topics=[EndQuorumEpochRequest.TopicData(topic_name=METADATA_TOPIC, partitions=[
            EndQuorumEpochRequest.PartitionData(
                partition_index=METADATA_PARTITION, leader_epoch=epoch, leader_id=leader_id,
                preferred_successors=[k.id for k in successors],
                preferred_candidates=[EndQuorumEpochRequest.ReplicaInfo(
                    candidate_id=k.id, candidate_directory_id=k.wire_directory_id) for k in successors])])],
        leader_endpoints=[EndQuorumEpochRequest.LeaderEndpoint(name=name, host=a.host, port=a.port)
                          for name, a in leader_endpoints.items()])


def preferred_candidates(partition: EndQuorumEpochRequest.PartitionData) -> list[ReplicaKey]:
    """v1's PreferredCandidates, or v0's PreferredSuccessors (ids only)."""
    if partition.preferred_candidates:
        return [ReplicaKey.of(c.candidate_id, c.candidate_directory_id) for c in partition.preferred_candidates]
    return [ReplicaKey(i) for i in partition.preferred_successors]


def end_quorum_epoch_response(listener: str, api_version: int, error: int, epoch: int, leader_id: int | None,
                              leader_endpoints: Endpoints) -> EndQuorumEpochResponse:
    response = EndQuorumEpochResponse(error_code=E.NONE, topics=[EndQuorumEpochResponse.TopicData(
        topic_name=METADATA_TOPIC, partitions=[EndQuorumEpochResponse.PartitionData(
            partition_index=METADATA_PARTITION, error_code=error, leader_id=-1 if leader_id is None else leader_id,
            leader_epoch=epoch)])])
    response.node_endpoints = _node_endpoints(EndQuorumEpochResponse, listener, api_version, 1,  # type: ignore[assignment]
                                              leader_id, leader_endpoints)
    return response


# -- Fetch -----------------------------------------------------------------------------------

NO_HIGH_WATERMARK_SENT = 2**63 - 1  # Fetch v18's HighWatermark default: what a v17 fetch decodes to


def fetch_request(cluster_id: str, replica: ReplicaKey | None, epoch: int, fetch_offset: int, last_fetched_epoch: int,
                  max_wait_ms: int, high_watermark: int = NO_HIGH_WATERMARK_SENT) -> FetchRequest:
    """A replica's Fetch, with its id in ReplicaState as from v15 (:func:`for_version` moves it
    to ReplicaId for an older peer, as Kafka's request builder does). ``high_watermark``: the
    fetcher's own (-1 if it knows none), which Kafka 4.1's follower sends in v18 (KIP-1166) so
    that a leader ahead of it answers at once; the encoder leaves it out below v18."""
    replica_id = -1 if replica is None else replica.id
    return FetchRequest(
        cluster_id=cluster_id, replica_id=-1,
        replica_state=FetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=-1),
        max_wait_ms=max_wait_ms, min_bytes=0, max_bytes=MAX_FETCH_SIZE_BYTES,
        topics=[FetchRequest.FetchTopic(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[
            FetchRequest.FetchPartition(
                partition=METADATA_PARTITION, current_leader_epoch=epoch, fetch_offset=fetch_offset,
                last_fetched_epoch=last_fetched_epoch, partition_max_bytes=MAX_FETCH_SIZE_BYTES,
                replica_directory_id=replica.wire_directory_id if replica else NO_DIRECTORY_ID,
                high_watermark=high_watermark)])])


def for_version(message: RaftRequest, version: int) -> RaftRequest:
    """The request as a peer speaking ``version`` gets it: before Fetch v15 the replica id
    travels in ReplicaId, not ReplicaState (FetchRequest.Builder). Other fields a version lacks
    are ignorable and left out by the encoder."""
    if isinstance(message, FetchRequest) and version < 15 and message.replica_state.replica_id != -1:
        return message.replace(replica_id=message.replica_state.replica_id,
                               replica_state=FetchRequest.ReplicaState())
    return message


def fetch_replica_id(request: FetchRequest) -> int:
    """FetchRequest.replicaId: ReplicaId when set (before v15), else ReplicaState's."""
    return request.replica_id if request.replica_id != -1 else request.replica_state.replica_id


def fetch_response(listener: str, api_version: int, error: int, epoch: int, leader_id: int | None,
                   leader_endpoints: Endpoints, *, records: bytes | FileSlice = b"", high_watermark: int | None = None,
                   log_start_offset: int = 0, valid: ValidOffsetAndEpoch | None = None) -> FetchResponse:
    """RaftUtil.singletonFetchResponse with the partition KafkaRaftClient fills in."""
    part = FetchResponse.PartitionData(
        partition_index=METADATA_PARTITION, error_code=error,
        high_watermark=-1 if high_watermark is None else high_watermark, log_start_offset=log_start_offset,
        records=records)  # type: ignore[arg-type]  # a FileSlice: see rpc/file_slice.py
    part.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=-1 if leader_id is None else leader_id,
                                                         leader_epoch=epoch)
    if valid is not None and valid.kind is Validity.DIVERGING:
        part.diverging_epoch = FetchResponse.EpochEndOffset(epoch=valid.offset_and_epoch.epoch,
                                                            end_offset=valid.offset_and_epoch.offset)
    elif valid is not None and valid.kind is Validity.SNAPSHOT:
        part.snapshot_id = FetchResponse.SnapshotId(end_offset=valid.offset_and_epoch.offset,
                                                    epoch=valid.offset_and_epoch.epoch)
    response = FetchResponse(error_code=E.NONE, responses=[FetchResponse.FetchableTopicResponse(
        topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[part])])
    address = leader_endpoints.address(listener)
    if api_version >= 17 and address is not None and leader_id is not None and leader_id >= 0:
        response.node_endpoints = [FetchResponse.NodeEndpoint(node_id=leader_id, host=address.host, port=address.port)]
    return response


def is_diverging(part: FetchResponse.PartitionData) -> bool:
    return part.diverging_epoch.epoch != -1 or part.diverging_epoch.end_offset != -1


def is_snapshot_redirect(part: FetchResponse.PartitionData) -> bool:
    return part.snapshot_id.epoch != -1 or part.snapshot_id.end_offset != -1


# -- FetchSnapshot ---------------------------------------------------------------------------

def fetch_snapshot_request(cluster_id: str, replica: ReplicaKey, epoch: int, snapshot_id: OffsetAndEpoch,
                           position: int, max_bytes: int) -> FetchSnapshotRequest:
    return FetchSnapshotRequest(
        cluster_id=cluster_id, replica_id=replica.id, max_bytes=max_bytes,
        topics=[FetchSnapshotRequest.TopicSnapshot(name=METADATA_TOPIC, partitions=[
            FetchSnapshotRequest.PartitionSnapshot(
                partition=METADATA_PARTITION, current_leader_epoch=epoch, position=position,
                snapshot_id=FetchSnapshotRequest.SnapshotId(end_offset=snapshot_id.offset, epoch=snapshot_id.epoch),
                replica_directory_id=replica.wire_directory_id)])])


def snapshot_request_partition(request: FetchSnapshotRequest) -> FetchSnapshotRequest.PartitionSnapshot | None:
    for topic in request.topics:
        if topic.name == METADATA_TOPIC:
            for p in topic.partitions:
                if p.partition == METADATA_PARTITION:
                    return p
    return None


def snapshot_response_partition(response: FetchSnapshotResponse) -> FetchSnapshotResponse.PartitionSnapshot | None:
    for topic in response.topics:
        if topic.name == METADATA_TOPIC:
            for p in topic.partitions:
                if p.index == METADATA_PARTITION:
                    return p
    return None


def fetch_snapshot_response(listener: str, api_version: int, error: int, epoch: int, leader_id: int | None,
                            leader_endpoints: Endpoints, *, with_leader: bool = True, topic: str = METADATA_TOPIC,
                            index: int = METADATA_PARTITION) -> FetchSnapshotResponse:
    """A FetchSnapshot answer; the caller fills in the snapshot fields of a successful one."""
    part = FetchSnapshotResponse.PartitionSnapshot(index=index, error_code=error)
    if with_leader:
        part.current_leader = FetchSnapshotResponse.LeaderIdAndEpoch(
            leader_id=-1 if leader_id is None else leader_id, leader_epoch=epoch)
    response = FetchSnapshotResponse(error_code=E.NONE,
                                     topics=[FetchSnapshotResponse.TopicSnapshot(name=topic, partitions=[part])])
    response.node_endpoints = _node_endpoints(FetchSnapshotResponse, listener, api_version, 1,  # type: ignore[assignment]
                                              leader_id, leader_endpoints)
    return response


# -- DescribeQuorum --------------------------------------------------------------------------

def describe_quorum_partition_error(request: DescribeQuorumRequest, error: int) -> DescribeQuorumResponse:
    """DescribeQuorumRequest.getPartitionLevelErrorResponse: every partition asked, with ``error``."""
    return DescribeQuorumResponse(topics=[DescribeQuorumResponse.TopicData(topic_name=t.topic_name, partitions=[
        DescribeQuorumResponse.PartitionData(partition_index=p.partition_index, error_code=error,
                                             error_message=error_message(error)) for p in t.partitions])
        for t in request.topics])


def describe_quorum_not_leader() -> DescribeQuorumResponse:
    code = E.NOT_LEADER_OR_FOLLOWER
    return DescribeQuorumResponse(topics=[DescribeQuorumResponse.TopicData(topic_name=METADATA_TOPIC, partitions=[
        DescribeQuorumResponse.PartitionData(partition_index=METADATA_PARTITION, error_code=code,
                                             error_message=error_message(code))])])

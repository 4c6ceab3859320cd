"""The Raft RPCs this node answers as the leader of ``__cluster_metadata``: Fetch, FetchSnapshot,
DescribeQuorum, and Vote / BeginQuorumEpoch / EndQuorumEpoch.

They follow Kafka 3.9's KafkaRaftClient, not the controller: they run outside the controller's
event queue (a long-polling fetch must not hold it), read storage directly, and answer with
Kafka's errors, in Kafka's order of checks. A fetch is served from the log as Kafka's
``log.read`` serves it (whole batches from the one holding the fetch offset, up to 8 MiB, from
one segment, uncommitted records included), tells a fetcher whose log diverged where to truncate
(DivergingEpoch), sends one that is behind the log start to a snapshot (SnapshotId), and waits
up to MaxWaitMs when there is nothing new. FetchSnapshot's partition-level errors come back as
a Kafka 3.9 controller sends them: UNKNOWN_SERVER_ERROR (see ``_snapshot_partition_error``).

With one voter, Vote and BeginQuorumEpoch from another node cannot make this node step down;
they are answered as a leader that keeps its epoch (see docs/differences.md).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from kraftsim.metadata.authorizer.authorizer import CLUSTER_NAME, AclOperation, AllowAll, Authorizer, ResourceType
from kraftsim.metadata.files import METADATA_PARTITION, METADATA_TOPIC, METADATA_TOPIC_ID
from kraftsim.metadata.log import MetadataLog
from kraftsim.metadata.snapshots import SnapshotId
from kraftsim.raft.leader import RaftLeader, ReplicaState
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import Dispatcher, RequestContext
from kraftsim.rpc.error_codes import ErrorCode, generic_message
from kraftsim.rpc.file_slice import FileSlice
from kraftsim.rpc.message import Message
from kraftsim.rpc.messages import (
    BeginQuorumEpochResponse,
    DescribeQuorumResponse,
    EndQuorumEpochResponse,
    FetchResponse,
    FetchSnapshotResponse,
    VoteResponse,
)

if TYPE_CHECKING:
    from kraftsim.rpc.messages import (
        BeginQuorumEpochRequest,
        DescribeQuorumRequest,
        EndQuorumEpochRequest,
        FetchRequest,
        FetchSnapshotRequest,
        VoteRequest,
    )

Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)
E = TypeVar("E")
# The three responses _partition_response builds: one partition, the leader, its endpoints.
PartitionResponse = TypeVar("PartitionResponse", VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse)

log = logging.getLogger("kraftsim.raft")

MAX_FETCH_SIZE_BYTES = 8 * 1024 * 1024  # KafkaRaftClient.MAX_FETCH_SIZE_BYTES
BOOTSTRAP_SNAPSHOT_ID = SnapshotId(0, 0)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """This node's address on a listener, as the static voter set has it."""

    listener: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Valid:
    """The outcome of checking a fetch offset and epoch (Kafka's ValidOffsetAndEpoch)."""

    kind: str  # "valid", "diverging" or "snapshot"
    offset: int = -1
    epoch: int = -1


class RaftApis:
    def __init__(self, leader: RaftLeader, cluster_id: str, endpoints: list[Endpoint],
                 directory_id: uuid.UUID | None = None,
                 authorizer: Callable[[], Authorizer] = AllowAll) -> None:
        self.leader = leader
        self.authorizer = authorizer  # the controller's, asked at each request (AllowAll when none is configured)
        self.cluster_id = cluster_id
        self.endpoints = endpoints
        self.directory_id = directory_id  # this node's metadata log directory id (meta.properties)
        self.shutting_down = False

    @property
    def mlog(self) -> MetadataLog:
        return self.leader.mlog

    API_KEYS = (Api.FETCH, Api.FETCH_SNAPSHOT, Api.DESCRIBE_QUORUM, Api.VOTE,
                Api.BEGIN_QUORUM_EPOCH, Api.END_QUORUM_EPOCH)

    def install(self, dispatcher: Dispatcher) -> None:
        # ControllerApis asks each its cluster operation before handing it to the Raft client.
        guard, action = self._authorized, AclOperation.CLUSTER_ACTION
        dispatcher.register(Api.FETCH, guard(self.fetch, action, refused_fetch))
        dispatcher.register(Api.FETCH_SNAPSHOT, guard(self.fetch_snapshot, action, refused_fetch_snapshot))
        dispatcher.register(Api.DESCRIBE_QUORUM, guard(self.describe_quorum, AclOperation.DESCRIBE,
                                                       refused_describe_quorum))
        dispatcher.register(Api.VOTE, guard(self.vote, action, refused_vote))
        dispatcher.register(Api.BEGIN_QUORUM_EPOCH, guard(self.begin_quorum_epoch, action, refused_begin_quorum_epoch))
        dispatcher.register(Api.END_QUORUM_EPOCH, guard(self.end_quorum_epoch, action, refused_end_quorum_epoch))

    def _authorized(self, handler: Callable[[RequestContext, Req], Resp | Awaitable[Resp]], operation: AclOperation,
                    refusal: Callable[[RequestContext, Req], Resp]
                    ) -> Callable[[RequestContext, Req], Resp | Awaitable[Resp]]:
        """AuthHelper.authorizeClusterOperation in front of ``handler``: refused, ``refusal``
        (the request's getErrorResponse with CLUSTER_AUTHORIZATION_FAILED)."""
        authorizer = self.authorizer

        def handle(ctx: RequestContext, req: Req) -> Resp | Awaitable[Resp]:
            if not authorizer().authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME):
                return refusal(ctx, req)
            return handler(ctx, req)

        return handle

    # ---- shared checks -------------------------------------------------------------------------

    def _valid_cluster(self, cluster_id: str | None) -> bool:
        return cluster_id is None or cluster_id == self.cluster_id  # not enforced when absent

    def _leader_only_error(self, request_epoch: int) -> int | None:
        """validateLeaderOnlyRequest."""
        epoch = self.leader.epoch
        if request_epoch < epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if request_epoch > epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if self.shutting_down:
            return ErrorCode.BROKER_NOT_AVAILABLE
        return None

    def _voter_only_error(self, remote_id: int, request_epoch: int) -> int | None:
        """validateVoterOnlyRequest."""
        if request_epoch < self.leader.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if remote_id < 0:
            return ErrorCode.INVALID_REQUEST
        return None

    def _is_me(self, voter_id: int, directory_id: uuid.UUID) -> bool:
        """isValidVoterKey: the request names this node (and its directory, when it names one)."""
        if voter_id != self.leader.node_id:
            return False
        return not directory_id.int or self.directory_id is None or directory_id == self.directory_id

    def _address(self, ctx: RequestContext) -> Endpoint | None:
        """The leader's address on the listener the request came in on (Endpoints.address)."""
        return next((e for e in self.endpoints if e.listener == ctx.listener), None)

    # ---- Fetch -----------------------------------------------------------------------------------

    async def fetch(self, ctx: RequestContext, req: FetchRequest) -> FetchResponse:
        version = ctx.api_version
        if not self._valid_cluster(req.cluster_id):
            return FetchResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
        topics = req.topics
        if (len(topics) != 1 or topics[0].topic_id != METADATA_TOPIC_ID or len(topics[0].partitions) != 1
                or topics[0].partitions[0].partition != METADATA_PARTITION):
            return FetchResponse(error_code=ErrorCode.INVALID_REQUEST)
        part = topics[0].partitions[0]
        if (req.max_wait_ms < 0 or part.fetch_offset < 0 or part.last_fetched_epoch < 0
                or part.last_fetched_epoch > part.current_leader_epoch):
            return self._fetch_response(ctx, ErrorCode.INVALID_REQUEST, b"", None, -1)
        replica_id = req.replica_state.replica_id if version >= 15 else req.replica_id
        response = self._try_fetch(ctx, replica_id, part)
        pd = response.responses[0].partitions[0]
        if (pd.error_code != ErrorCode.NONE or pd.records or req.max_wait_ms == 0
                or pd.diverging_epoch.epoch != -1 or pd.diverging_epoch.end_offset != -1
                or pd.snapshot_id.epoch != -1 or pd.snapshot_id.end_offset != -1):
            return response
        await self.leader.wait_for_data(part.fetch_offset, req.max_wait_ms)
        return self._try_fetch(ctx, replica_id, part)

    def _try_fetch(self, ctx: RequestContext, replica_id: int, part: FetchRequest.FetchPartition) -> FetchResponse:
        """tryCompleteFetchRequest."""
        error = self._leader_only_error(part.current_leader_epoch)
        if error is not None:
            return self._fetch_response(ctx, error, b"", None, -1)
        mlog = self.mlog
        try:
            latest = mlog.latest_snapshot()
            if part.fetch_offset == 0 and latest is not None and latest != BOOTSTRAP_SNAPSHOT_ID:
                # An empty fetcher is sent to the snapshot: cheaper than the whole log.
                valid = Valid("snapshot", latest.end_offset, latest.epoch)
            else:
                valid = self.validate_offset_and_epoch(part.fetch_offset, part.last_fetched_epoch)
            records: FileSlice | bytes = b""
            if valid.kind == "valid":
                records = mlog.read_slice(part.fetch_offset, MAX_FETCH_SIZE_BYTES)
                self.leader.update_replica_state(replica_id, part.replica_directory_id, part.fetch_offset)
            return self._fetch_response(ctx, ErrorCode.NONE, records, valid, self.leader.high_watermark)
        except Exception:  # noqa: BLE001 - Kafka: logged, answered UNKNOWN_SERVER_ERROR
            log.exception("unexpected error in fetch completion at offset %d", part.fetch_offset)
            return self._fetch_response(ctx, ErrorCode.UNKNOWN_SERVER_ERROR, b"", None, -1)

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> Valid:
        """ReplicatedLog.validateOffsetAndEpoch over this node's log and snapshots."""
        mlog = self.mlog
        start = mlog.start_offset
        if start == 0 and offset == 0:
            return Valid("valid", 0, 0)
        earliest = mlog.earliest_snapshot()
        if earliest is not None and (offset < start or (offset == start and epoch != earliest.epoch)
                                     or epoch < earliest.epoch):
            latest = mlog.latest_snapshot()
            assert latest is not None
            return Valid("snapshot", latest.end_offset, latest.epoch)
        end_offset, end_epoch = self._end_offset_for_epoch(epoch, earliest)
        if end_epoch != epoch or end_offset < offset:
            return Valid("diverging", end_offset, end_epoch)
        return Valid("valid", offset, epoch)

    def _end_offset_for_epoch(self, epoch: int, earliest: SnapshotId | None) -> tuple[int, int]:
        """KafkaMetadataLog.endOffsetForEpoch: (offset, epoch)."""
        mlog = self.mlog
        found = mlog.end_offset_for_epoch(epoch)
        if found is None:
            latest = mlog.latest_snapshot()
            last_epoch = mlog.last_epoch if mlog.epoch_entries else (latest.epoch if latest else 0)
            return mlog.end_offset, last_epoch
        found_epoch, found_offset = found
        if earliest is not None and found_offset == earliest.end_offset and found_epoch == epoch:
            return earliest.end_offset, earliest.epoch
        return found_offset, found_epoch

    def _fetch_response(self, ctx: RequestContext, error: int, records: FileSlice | bytes, valid: Valid | None,
                        high_watermark: int) -> FetchResponse:
        """RaftUtil.singletonFetchResponse."""
        leader = self.leader
        pd = FetchResponse.PartitionData(partition_index=METADATA_PARTITION, error_code=error,
                                         high_watermark=high_watermark, log_start_offset=self.mlog.start_offset,
                                         records=records)  # type: ignore[arg-type]  # a FileSlice: see rpc/file_slice.py
        pd.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=leader.node_id, leader_epoch=leader.epoch)
        if valid is not None and valid.kind == "diverging":
            pd.diverging_epoch = FetchResponse.EpochEndOffset(epoch=valid.epoch, end_offset=valid.offset)
        elif valid is not None and valid.kind == "snapshot":
            pd.snapshot_id = FetchResponse.SnapshotId(end_offset=valid.offset, epoch=valid.epoch)
        topic = FetchResponse.FetchableTopicResponse(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID,
                                                     partitions=[pd])
        resp = FetchResponse(error_code=ErrorCode.NONE, responses=[topic])
        address = self._address(ctx)
        if ctx.api_version >= 17 and address is not None:
            resp.node_endpoints = [FetchResponse.NodeEndpoint(node_id=leader.node_id, host=address.host,
                                                              port=address.port)]
        return resp

    # ---- FetchSnapshot -------------------------------------------------------------------------

    def fetch_snapshot(self, ctx: RequestContext, req: FetchSnapshotRequest) -> FetchSnapshotResponse:
        if not self._valid_cluster(req.cluster_id):
            return FetchSnapshotResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
        if not req.topics or not req.topics[0].partitions:
            return FetchSnapshotResponse(error_code=ErrorCode.INVALID_REQUEST)
        part = next((p for t in req.topics if t.name == METADATA_TOPIC for p in t.partitions
                     if p.partition == METADATA_PARTITION), None)
        if part is None:
            return self._snapshot_partition_error(ctx, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        error = self._leader_only_error(part.current_leader_epoch)
        if error is not None:
            return self._snapshot_partition_error(ctx, error)
        sid = SnapshotId(part.snapshot_id.end_offset, part.snapshot_id.epoch)
        path = self.mlog.snapshot_path(sid)
        if sid == BOOTSTRAP_SNAPSHOT_ID or sid.end_offset < 0 or sid.epoch < 0 or not path.exists():
            # The bootstrap checkpoint is never replicated: the first leader wrote its records.
            return self._snapshot_partition_error(ctx, ErrorCode.SNAPSHOT_NOT_FOUND)
        try:
            with open(path, "rb") as f:  # retention may have marked it for deletion meanwhile
                size = os.fstat(f.fileno()).st_size
                if part.position < 0 or part.position >= size:
                    return self._snapshot_partition_error(ctx, ErrorCode.POSITION_OUT_OF_RANGE)
                f.seek(part.position)
                chunk = f.read(max(0, min(req.max_bytes, size)))
        except FileNotFoundError:
            return self._snapshot_partition_error(ctx, ErrorCode.SNAPSHOT_NOT_FOUND)
        resp = self._snapshot_response(ctx)
        ps = resp.topics[0].partitions[0]
        ps.snapshot_id = FetchSnapshotResponse.SnapshotId(end_offset=sid.end_offset, epoch=sid.epoch)
        ps.size = size
        ps.position = part.position
        ps.unaligned_records = chunk
        return resp

    def _snapshot_partition_error(self, ctx: RequestContext, error: int) -> FetchSnapshotResponse:
        """A partition-level error, as a Kafka 3.9 controller answers it: its KafkaRaftClient
        builds the partition without UnalignedRecords, ControllerApis fails on the null field
        while sizing the response, and sends the request's error response instead:
        UNKNOWN_SERVER_ERROR, no topics."""
        log.error("FetchSnapshot from %s failed with %s; answered UNKNOWN_SERVER_ERROR, as Kafka 3.9's controller "
                  "answers it", ctx.client_id, ErrorCode(error).name)
        return FetchSnapshotResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR)

    def _snapshot_response(self, ctx: RequestContext) -> FetchSnapshotResponse:
        """RaftUtil.singletonFetchSnapshotResponse with addQuorumLeader, for a chunk served."""
        ps = FetchSnapshotResponse.PartitionSnapshot(index=METADATA_PARTITION, error_code=ErrorCode.NONE)
        ps.current_leader = FetchSnapshotResponse.LeaderIdAndEpoch(leader_id=self.leader.node_id,
                                                                  leader_epoch=self.leader.epoch)
        resp = FetchSnapshotResponse(error_code=ErrorCode.NONE,
                                     topics=[FetchSnapshotResponse.TopicSnapshot(name=METADATA_TOPIC, partitions=[ps])])
        address = self._address(ctx)
        if ctx.api_version >= 1 and address is not None:
            resp.node_endpoints = [FetchSnapshotResponse.NodeEndpoint(node_id=self.leader.node_id, host=address.host,
                                                                      port=address.port)]
        return resp

    # ---- DescribeQuorum ------------------------------------------------------------------------

    def describe_quorum(self, ctx: RequestContext, req: DescribeQuorumRequest) -> DescribeQuorumResponse:
        version = ctx.api_version
        topics = req.topics
        if (len(topics) != 1 or topics[0].topic_name != METADATA_TOPIC or len(topics[0].partitions) != 1
                or topics[0].partitions[0].partition_index != METADATA_PARTITION):
            return DescribeQuorumResponse(topics=[
                DescribeQuorumResponse.TopicData(topic_name=t.topic_name, partitions=[
                    DescribeQuorumResponse.PartitionData(partition_index=p.partition_index,
                                                         error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                         error_message=generic_message(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                    for p in t.partitions]) for t in topics])
        leader = self.leader

        def state(s: ReplicaState) -> DescribeQuorumResponse.ReplicaState:
            rs = DescribeQuorumResponse.ReplicaState(
                replica_id=s.replica_id, log_end_offset=s.end_offset, last_fetch_timestamp=s.last_fetch_ms,
                last_caught_up_timestamp=s.last_caught_up_ms)
            if version >= 2:
                rs.replica_directory_id = s.directory_id
            return rs

        partition = DescribeQuorumResponse.PartitionData(
            partition_index=METADATA_PARTITION, error_code=ErrorCode.NONE, leader_id=leader.node_id,
            leader_epoch=leader.epoch, high_watermark=leader.high_watermark,
            current_voters=[state(s) for s in leader.voter_states()],
            observers=[state(s) for s in leader.observer_states()])
        resp = DescribeQuorumResponse(topics=[DescribeQuorumResponse.TopicData(topic_name=METADATA_TOPIC,
                                                                              partitions=[partition])])
        if version >= 2:
            resp.nodes = [DescribeQuorumResponse.Node(node_id=leader.node_id, listeners=[
                DescribeQuorumResponse.Listener(name=e.listener, host=e.host, port=e.port) for e in self.endpoints])]
        return resp

    # ---- Vote, BeginQuorumEpoch, EndQuorumEpoch --------------------------------------------------

    def _valid_partition(self, req: VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest) -> bool:
        t = req.topics
        return (len(t) == 1 and t[0].topic_name == METADATA_TOPIC and len(t[0].partitions) == 1
                and t[0].partitions[0].partition_index == METADATA_PARTITION)

    def _endpoints(self, ctx: RequestContext, endpoint: Callable[..., E]) -> list[E]:
        address = self._address(ctx)
        if ctx.api_version < 1 or address is None:
            return []
        return [endpoint(node_id=self.leader.node_id, host=address.host, port=address.port)]

    def vote(self, ctx: RequestContext, req: VoteRequest) -> VoteResponse:
        if not self._valid_cluster(req.cluster_id):
            return VoteResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
        if not self._valid_partition(req):
            return VoteResponse(error_code=ErrorCode.INVALID_REQUEST)
        p = req.topics[0].partitions[0]
        if p.last_offset < 0 or p.last_offset_epoch < 0 or p.last_offset_epoch >= p.candidate_epoch:
            error: int | None = ErrorCode.INVALID_REQUEST
        else:
            error = self._voter_only_error(p.candidate_id, p.candidate_epoch)
        if error is None and ctx.api_version >= 1 and not self._is_me(req.voter_id, p.voter_directory_id):
            error = ErrorCode.INVALID_VOTER_KEY
        # A leader never grants a vote (LeaderState.canGrantVote): VoteGranted keeps its default, false.
        return self._partition_response(ctx, VoteResponse, error or ErrorCode.NONE)

    def begin_quorum_epoch(self, ctx: RequestContext, req: BeginQuorumEpochRequest) -> BeginQuorumEpochResponse:
        if not self._valid_cluster(req.cluster_id):
            return BeginQuorumEpochResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
        if not self._valid_partition(req):
            return BeginQuorumEpochResponse(error_code=ErrorCode.INVALID_REQUEST)
        p = req.topics[0].partitions[0]
        error = self._voter_only_error(p.leader_id, p.leader_epoch)
        if error is None and ctx.api_version >= 1 and not self._is_me(req.voter_id, p.voter_directory_id):
            error = ErrorCode.INVALID_VOTER_KEY
        return self._partition_response(ctx, BeginQuorumEpochResponse, error or ErrorCode.NONE)

    def end_quorum_epoch(self, ctx: RequestContext, req: EndQuorumEpochRequest) -> EndQuorumEpochResponse:
        if not self._valid_cluster(req.cluster_id):
            return EndQuorumEpochResponse(error_code=ErrorCode.INCONSISTENT_CLUSTER_ID)
        if not self._valid_partition(req):
            return EndQuorumEpochResponse(error_code=ErrorCode.INVALID_REQUEST)
        p = req.topics[0].partitions[0]
        error = self._voter_only_error(p.leader_id, p.leader_epoch)
        return self._partition_response(ctx, EndQuorumEpochResponse, error or ErrorCode.NONE)

    def _partition_response(self, ctx: RequestContext, cls: type[PartitionResponse], error: int) -> PartitionResponse:
        part = cls.PartitionData(partition_index=METADATA_PARTITION, error_code=error, leader_id=self.leader.node_id,
                                 leader_epoch=self.leader.epoch)
        resp = cls(error_code=ErrorCode.NONE, topics=[cls.TopicData(topic_name=METADATA_TOPIC, partitions=[part])])
        resp.node_endpoints = self._endpoints(ctx, cls.NodeEndpoint)
        return resp


# The Raft requests' getErrorResponse for CLUSTER_AUTHORIZATION_FAILED: the code alone, except
# DescribeQuorum (the code's generic message too) and Fetch (the session id, and before v13
# every requested partition with the code and no high watermark).
_REFUSED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def refused_fetch(ctx: RequestContext, req: FetchRequest) -> FetchResponse:
    code = _REFUSED
    topics = [] if ctx.api_version >= 13 else [
        FetchResponse.FetchableTopicResponse(
            topic=t.topic, topic_id=t.topic_id,
            partitions=[FetchResponse.PartitionData(partition_index=p.partition, error_code=code,
                                                    high_watermark=-1, records=None)
                        for p in t.partitions])
        for t in req.topics]
    return FetchResponse(error_code=code, session_id=req.session_id, responses=topics)


def refused_fetch_snapshot(ctx: RequestContext, req: FetchSnapshotRequest) -> FetchSnapshotResponse:
    return FetchSnapshotResponse(error_code=_REFUSED)


def refused_describe_quorum(ctx: RequestContext, req: DescribeQuorumRequest) -> DescribeQuorumResponse:
    return DescribeQuorumResponse(error_code=_REFUSED, error_message=generic_message(_REFUSED))


def refused_vote(ctx: RequestContext, req: VoteRequest) -> VoteResponse:
    return VoteResponse(error_code=_REFUSED)


def refused_begin_quorum_epoch(ctx: RequestContext, req: BeginQuorumEpochRequest) -> BeginQuorumEpochResponse:
    return BeginQuorumEpochResponse(error_code=_REFUSED)


def refused_end_quorum_epoch(ctx: RequestContext, req: EndQuorumEpochRequest) -> EndQuorumEpochResponse:
    return EndQuorumEpochResponse(error_code=_REFUSED)

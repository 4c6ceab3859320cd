"""Fetch, FetchSnapshot and DescribeQuorum: how the leader serves its log, and how a follower
takes what it is served.

The leader checks a fetcher's offset and last epoch against its own log: a fetcher whose log
went another way is told where the two agree (DivergingEpoch) and truncates there; one that is
behind the log start (or empty, while a snapshot exists) is sent to the snapshot (SnapshotId).
Every valid fetch reports the fetcher's progress, which moves the high watermark. A fetch with
nothing to return waits in the purgatory (``purgatory.py``), unless the fetcher should learn of a
newer high watermark: from Fetch v18 (Kafka 4.1, KIP-1166) it says which one it holds, and one
behind the leader's is answered at once, as Kafka 4.1's leader does; below v18 the leader goes by
the high watermark it last told that fetcher (kraftsim's rule, docs/differences.md).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kraftsim.raft.core import rpcs
from kraftsim.raft.core.common import (
    handle_top_level_error,
    maybe_handle_common_response,
    response_leader_endpoints,
    valid_cluster_id,
    validate_leader_only,
)
from kraftsim.raft.core.events import InboundRequest
from kraftsim.raft.core.keys import OffsetAndEpoch, ReplicaKey
from kraftsim.raft.core.leader_state import LeaderState, ReplicaState
from kraftsim.raft.core.log import Validity, ValidOffsetAndEpoch, truncate_to_end_offset, validate_offset_and_epoch
from kraftsim.raft.core.purgatory import ParkedFetch
from kraftsim.raft.core.quorum import RaftStateError
from kraftsim.raft.core.states import FollowerState
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.file_slice import FileSlice
from kraftsim.rpc.messages import (
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
)

if TYPE_CHECKING:
    from kraftsim.raft.core.node import RaftNode

logger = logging.getLogger("kraftsim.raft")
E = ErrorCode
BOOTSTRAP_SNAPSHOT_ID = OffsetAndEpoch(0, 0)  # the bootstrap checkpoint: never replicated
FETCH_SENDS_HIGH_WATERMARK = 18  # the Fetch version with the fetcher's HighWatermark (KIP-1166, Kafka 4.1)


# -- Fetch, on the leader ------------------------------------------------------------------------

def _empty_fetch_response(node: RaftNode, req: InboundRequest, error: int) -> FetchResponse:
    q = node.quorum
    return rpcs.fetch_response(req.listener, req.api_version, error, q.epoch, q.leader_id, q.state.leader_endpoints,
                               log_start_offset=node.log.start_offset)


def handle_fetch_request(node: RaftNode, req: InboundRequest, message: FetchRequest, now_ms: int) -> FetchResponse | None:
    """The answer, or None when the fetch is parked (its answer comes later, in the outbox)."""
    if not valid_cluster_id(node, message.cluster_id):
        return FetchResponse(error_code=E.INCONSISTENT_CLUSTER_ID)
    if not rpcs.valid_partition(message):
        return FetchResponse(error_code=E.INVALID_REQUEST)
    p = message.topics[0].partitions[0]
    if (message.max_wait_ms < 0 or p.fetch_offset < 0 or p.last_fetched_epoch < 0
            or p.last_fetched_epoch > p.current_leader_epoch):
        return _empty_fetch_response(node, req, E.INVALID_REQUEST)
    replica = ReplicaKey.of(rpcs.fetch_replica_id(message), p.replica_directory_id)
    state = node.quorum.state
    told = state.told_high_watermark.get(replica) if isinstance(state, LeaderState) else None
    response = try_complete_fetch(node, req, message, replica, now_ms)
    part = response.responses[0].partitions[0]
    if (part.error_code != E.NONE or part.records or message.max_wait_ms == 0 or rpcs.is_diverging(part)
            or rpcs.is_snapshot_redirect(part)):
        return response
    sends_high_watermark = req.api_version >= FETCH_SENDS_HIGH_WATERMARK
    if sends_high_watermark:
        if p.high_watermark < part.high_watermark:
            return response  # Kafka 4.1: the fetcher's high watermark is behind the leader's
    elif told is not None and told < p.fetch_offset and part.high_watermark > told:
        return response  # records it holds, told uncommitted, are committed now: it may apply them
    node.purgatory.park(ParkedFetch(message, req.api_version, req.reply_to, req.listener, replica, p.fetch_offset,
                                    now_ms + message.max_wait_ms, response, part.high_watermark,
                                    sends_high_watermark))
    return None


def try_complete_fetch(node: RaftNode, req: InboundRequest, message: FetchRequest, replica: ReplicaKey,
                       now_ms: int) -> FetchResponse:
    """tryCompleteFetchRequest: validate, read, and count the fetcher's progress. Anything the
    log raises is logged and answered UNKNOWN_SERVER_ERROR, as Kafka's catch-all does (a
    segment a disk error made unreadable must not stop the leader)."""
    p = message.topics[0].partitions[0]
    try:
        return _try_complete_fetch(node, req, p, replica, now_ms)
    except RaftStateError:
        raise
    except Exception:  # noqa: BLE001 - Kafka: logged, UNKNOWN_SERVER_ERROR
        logger.exception("unexpected error in fetch completion at offset %d", p.fetch_offset)
        return _empty_fetch_response(node, req, E.UNKNOWN_SERVER_ERROR)


def _try_complete_fetch(node: RaftNode, req: InboundRequest, p: FetchRequest.FetchPartition, replica: ReplicaKey,
                        now_ms: int) -> FetchResponse:
    error = validate_leader_only(node, p.current_leader_epoch)
    if error is not None:
        return _empty_fetch_response(node, req, error)
    state = node.quorum.state
    assert isinstance(state, LeaderState)
    log = node.log
    latest = log.latest_snapshot_id()
    valid: ValidOffsetAndEpoch
    if p.fetch_offset == 0 and latest is not None and latest != BOOTSTRAP_SNAPSHOT_ID:
        valid = ValidOffsetAndEpoch(Validity.SNAPSHOT, latest)  # an empty fetcher: the snapshot is cheaper
    else:
        valid = validate_offset_and_epoch(log, p.fetch_offset, p.last_fetched_epoch)
    records: bytes | FileSlice = b""
    if valid.kind is Validity.VALID:
        records = log.read(p.fetch_offset, node.max_fetch_bytes)
        if state.update_replica_state(replica, now_ms, p.fetch_offset):
            node.on_leader_high_watermark(state)
    elif valid.kind is Validity.DIVERGING:
        node.stats.diverging_answers += 1
    else:
        node.stats.snapshot_redirects += 1
    hw = state.high_watermark
    state.told_high_watermark[replica] = -1 if hw is None else hw
    return rpcs.fetch_response(req.listener, req.api_version, E.NONE, state.epoch, state.local_key.id,
                               state.leader_endpoints, records=records, high_watermark=hw,
                               log_start_offset=log.start_offset, valid=valid)


def complete_parked_fetch(node: RaftNode, parked: ParkedFetch, now_ms: int, *, expired: bool,
                          error: int | None = None) -> FetchResponse:
    """A parked fetch's answer: the first answer if it waited in vain, an error if this node
    stopped leading, else a fresh read."""
    req = InboundRequest(parked.request, parked.api_version, parked.reply_to, parked.listener)
    if error is not None:
        return _empty_fetch_response(node, req, error)
    if expired:
        return parked.first_answer
    return try_complete_fetch(node, req, parked.request, parked.replica, now_ms)


# -- Fetch, on the follower ------------------------------------------------------------------------

def handle_fetch_response(node: RaftNode, source: int, message: FetchResponse, now_ms: int) -> bool:
    if message.error_code != E.NONE:
        return handle_top_level_error(node, message.error_code)
    if not rpcs.valid_partition(message):
        return False
    part = message.responses[0].partitions[0]
    leader_id = part.current_leader.leader_id if part.current_leader.leader_id >= 0 else None
    endpoints = response_leader_endpoints(node, leader_id, rpcs.leader_endpoints_from_response(
        node.listener_name, part.current_leader.leader_id, message.node_endpoints))
    handled = maybe_handle_common_response(node, part.error_code, leader_id, part.current_leader.leader_epoch,
                                           endpoints, now_ms)
    if handled is not None:
        return handled
    state = node.quorum.state
    if not isinstance(state, FollowerState):
        raise RaftStateError(f"a Fetch answer to handle while {state.role}")
    if part.error_code != E.NONE:
        return False
    log = node.log
    if part.diverging_epoch.epoch >= 0:
        end = OffsetAndEpoch(part.diverging_epoch.end_offset, part.diverging_epoch.epoch)
        if state.high_watermark is not None and end.offset < state.high_watermark:
            raise RaftStateError(f"the leader asked to truncate to {end.offset}, below the high watermark "
                                 f"{state.high_watermark}")
        truncate_to_end_offset(log, end)
        node.on_log_truncated()
        node.stats.truncations += 1
    elif rpcs.is_snapshot_redirect(part):
        if part.snapshot_id.epoch < 0 or part.snapshot_id.end_offset < 0:
            return False  # half a snapshot id: Kafka logs it and backs off
        snapshot_id = OffsetAndEpoch(part.snapshot_id.end_offset, part.snapshot_id.epoch)
        state.set_fetching_snapshot(log.create_snapshot_unchecked(snapshot_id))
    else:
        records = bytes(part.records or b"")
        if records:
            node.append_as_follower(records)
        if part.high_watermark >= 0:
            node.update_follower_high_watermark(state, part.high_watermark)
    state.reset_fetch_timeout(now_ms)
    return True


# -- FetchSnapshot ---------------------------------------------------------------------------------

def handle_fetch_snapshot_request(node: RaftNode, req: InboundRequest, message: FetchSnapshotRequest,
                                  now_ms: int) -> FetchSnapshotResponse:
    q = node.quorum

    def answer(error: int, **kw: object) -> FetchSnapshotResponse:
        return rpcs.fetch_snapshot_response(req.listener, req.api_version, error, q.epoch, q.leader_id,
                                            q.state.leader_endpoints, **kw)  # type: ignore[arg-type]

    if not valid_cluster_id(node, message.cluster_id):
        return FetchSnapshotResponse(error_code=E.INCONSISTENT_CLUSTER_ID)
    if not message.topics or not message.topics[0].partitions:
        return FetchSnapshotResponse(error_code=E.INVALID_REQUEST)
    p = rpcs.snapshot_request_partition(message)
    if p is None:
        first = message.topics[0]
        return answer(E.UNKNOWN_TOPIC_OR_PARTITION, with_leader=False, topic=first.name,
                      index=first.partitions[0].partition)
    error = validate_leader_only(node, p.current_leader_epoch)
    if error is not None:
        return answer(error)
    snapshot_id = OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch)
    size = node.log.snapshot_size(snapshot_id)
    if size is None or snapshot_id == BOOTSTRAP_SNAPSHOT_ID:
        return answer(E.SNAPSHOT_NOT_FOUND)
    if p.position < 0 or p.position >= size:
        return answer(E.POSITION_OUT_OF_RANGE)
    chunk = node.log.read_snapshot(snapshot_id, p.position, min(message.max_bytes, size))
    state = q.state
    assert isinstance(state, LeaderState)
    state.update_check_quorum(ReplicaKey.of(message.replica_id, p.replica_directory_id), now_ms)
    response = answer(E.NONE)
    ps = response.topics[0].partitions[0]
    ps.snapshot_id = FetchSnapshotResponse.SnapshotId(end_offset=snapshot_id.offset, epoch=snapshot_id.epoch)
    ps.size = size
    ps.position = p.position
    ps.unaligned_records = chunk
    return response


def handle_fetch_snapshot_response(node: RaftNode, source: int, message: FetchSnapshotResponse, now_ms: int) -> bool:
    if message.error_code != E.NONE:
        return handle_top_level_error(node, message.error_code)
    if not message.topics or not message.topics[0].partitions:
        return False
    p = rpcs.snapshot_response_partition(message)
    if p is None:
        return False
    leader_id = p.current_leader.leader_id if p.current_leader.leader_id >= 0 else None
    endpoints = response_leader_endpoints(node, leader_id, rpcs.leader_endpoints_from_response(
        node.listener_name, p.current_leader.leader_id, message.node_endpoints))
    handled = maybe_handle_common_response(node, p.error_code, leader_id, p.current_leader.leader_epoch,
                                           endpoints, now_ms)
    if handled is not None:
        return handled
    state = node.quorum.state
    if not isinstance(state, FollowerState):
        raise RaftStateError(f"a FetchSnapshot answer to handle while {state.role}")
    if p.error_code == E.SNAPSHOT_NOT_FOUND or p.snapshot_id.end_offset < 0 or p.snapshot_id.epoch < 0:
        # The leader dropped the snapshot meanwhile: start over with a Fetch.
        state.set_fetching_snapshot(None)
        state.reset_fetch_timeout(now_ms)
        return True
    writer = state.fetching_snapshot
    snapshot_id = OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch)
    if writer is None:
        raise RaftStateError(f"a FetchSnapshot answer for {snapshot_id} with no snapshot being fetched")
    if writer.snapshot_id != snapshot_id:
        raise RaftStateError(f"a FetchSnapshot answer for {snapshot_id} while fetching {writer.snapshot_id}")
    if writer.size != p.position:
        raise RaftStateError(f"a FetchSnapshot answer at {p.position} with {writer.size} bytes fetched")
    writer.append(bytes(p.unaligned_records or b""))
    if writer.size == p.size:
        writer.freeze()
        state.fetching_snapshot = None
        if not node.log.truncate_to_latest_snapshot():
            raise RaftStateError(f"snapshot {snapshot_id} fetched but the log ({node.log.end_offset}) is past it")
        node.on_snapshot_loaded(snapshot_id)
        node.stats.snapshots_fetched += 1
        node.update_follower_high_watermark(state, node.log.high_watermark)
    state.reset_fetch_timeout(now_ms)
    return True


# -- DescribeQuorum ----------------------------------------------------------------------------------

def handle_describe_quorum_request(node: RaftNode, req: InboundRequest, message: DescribeQuorumRequest,
                                   now_ms: int) -> DescribeQuorumResponse:
    if not rpcs.valid_partition(message):
        return rpcs.describe_quorum_partition_error(message, E.UNKNOWN_TOPIC_OR_PARTITION)
    state = node.quorum.state
    if not isinstance(state, LeaderState):
        return rpcs.describe_quorum_not_leader()
    version = req.api_version
    leader_id = state.local_key.id

    def replica(s: ReplicaState) -> DescribeQuorumResponse.ReplicaState:
        is_leader = s.key.id == leader_id
        rs = DescribeQuorumResponse.ReplicaState(
            replica_id=s.key.id, log_end_offset=-1 if s.end_offset is None else s.end_offset,
            last_fetch_timestamp=now_ms if is_leader else s.last_fetch_ms,
            last_caught_up_timestamp=now_ms if is_leader else s.last_caught_up_ms)
        if version >= 2:
            rs.replica_directory_id = s.key.wire_directory_id
        return rs

    voters = state.voters_in_map_order()
    partition = DescribeQuorumResponse.PartitionData(
        partition_index=0, error_code=E.NONE, leader_id=leader_id, leader_epoch=state.epoch,
        high_watermark=-1 if state.high_watermark is None else state.high_watermark,
        current_voters=[replica(s) for s in voters], observers=[replica(s) for s in state.active_observers(now_ms)])
    response = DescribeQuorumResponse(topics=[DescribeQuorumResponse.TopicData(
        topic_name=message.topics[0].topic_name, partitions=[partition])])
    if version >= 2:
        response.nodes = [DescribeQuorumResponse.Node(node_id=s.key.id, listeners=[
            DescribeQuorumResponse.Listener(name=name, host=a.host, port=a.port) for name, a in s.endpoints.items()])
            for s in voters]
    return response

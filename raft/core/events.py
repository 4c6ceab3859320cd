"""What passes between the node and its driver: requests and responses in and out, and the
events the node reports (the h11-style boundary of a sans-I/O protocol).

The driver owns the sockets, the clock and the disk's timing. It feeds the node what arrives
(:class:`InboundRequest`, :class:`InboundResponse`) with the time, takes what the node wants sent
(:class:`OutboundRequest`, :class:`OutboundResponse`) and what happened (:class:`LeaderChange`,
:class:`HighWatermark`, :class:`ShutdownComplete`), and polls the node again at the time it asks
for. Messages are the project's generated protocol classes; the driver encodes them at whatever
version it negotiated with the peer.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import TypeAlias

from kraftsim.raft.core.voters import Address
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

# ApiVersions goes out from a leader adding a voter (it asks the new voter which kraft.version
# range it supports, as Kafka's AddVoterHandler does); the server, not the node, answers it.
RaftRequest: TypeAlias = (VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest
                          | FetchSnapshotRequest | DescribeQuorumRequest | AddRaftVoterRequest
                          | RemoveRaftVoterRequest | UpdateRaftVoterRequest | ApiVersionsRequest)
RaftResponse: TypeAlias = (VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse
                           | FetchSnapshotResponse | DescribeQuorumResponse | AddRaftVoterResponse
                           | RemoveRaftVoterResponse | UpdateRaftVoterResponse | ApiVersionsResponse)


@dataclass(frozen=True, slots=True)
class InboundRequest:
    """A request from a peer. ``reply_to`` is the driver's own token (connection and correlation
    id, say): the node hands it back on the response, now or, for a parked Fetch, later."""

    message: RaftRequest
    api_version: int
    reply_to: Hashable
    listener: str = "CONTROLLER"  # the listener it arrived on: the one whose address answers name


@dataclass(frozen=True, slots=True)
class InboundResponse:
    """The answer to one of the node's requests, or the driver's stand-in for it (a response
    carrying only an error code, when the connection failed)."""

    source: int
    correlation_id: int
    message: RaftResponse


@dataclass(frozen=True, slots=True)
class OutboundRequest:
    correlation_id: int
    destination: int
    address: Address | None  # None: the driver knows the peer by id
    message: RaftRequest


@dataclass(frozen=True, slots=True)
class OutboundResponse:
    reply_to: Hashable
    api_version: int
    message: RaftResponse


Outbound: TypeAlias = OutboundRequest | OutboundResponse


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """A new epoch or leader. ``epoch_start_offset`` is set when this node became the leader:
    its state machine may act as leader once it has replayed the log up to there."""

    epoch: int
    leader_id: int | None
    epoch_start_offset: int | None = None


@dataclass(frozen=True, slots=True)
class HighWatermark:
    """Everything below ``offset`` is committed."""

    offset: int


@dataclass(frozen=True, slots=True)
class ShutdownComplete:
    timed_out: bool


Event: TypeAlias = LeaderChange | HighWatermark | ShutdownComplete

"""The Raft RPCs this node serves: Fetch, FetchSnapshot, DescribeQuorum, Vote, BeginQuorumEpoch,
EndQuorumEpoch and the voter changes (AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter), handed to
the Raft node (``raft/client.py``) after the authorization Kafka's ControllerApis asks for them
(CLUSTER_ACTION; DESCRIBE for DescribeQuorum; ALTER for adding and removing a voter).

They run outside the controller's event queue, as Kafka's go to its Raft client, not its
controller: a long-polling fetch must not hold the queue. The node answers as Kafka 3.9's
KafkaRaftClient answers, in its order of checks, whichever role it has (a follower answers a
Fetch NOT_LEADER_OR_FOLLOWER with the leader it knows, DescribeQuorum too). One thing happens
here: FetchSnapshot's partition-level errors go out as a Kafka 3.9 controller sends them,
UNKNOWN_SERVER_ERROR (see :func:`kafka_3_9_fetch_snapshot_answer`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from kraftsim.metadata.authorizer.authorizer import CLUSTER_NAME, AclOperation, AllowAll, Authorizer, ResourceType
from kraftsim.raft.client import RaftClient
from kraftsim.raft.core.events import RaftResponse
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import Dispatcher, RequestContext
from kraftsim.rpc.error_codes import ErrorCode, generic_message
from kraftsim.rpc.message import Message
from kraftsim.rpc.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
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

Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)

log = logging.getLogger("kraftsim.raft")


class RaftApis:
    def __init__(self, client: RaftClient, authorizer: Callable[[], Authorizer] = AllowAll) -> None:
        self.client = client
        self.authorizer = authorizer  # the controller's, asked at each request (AllowAll when none is configured)

    API_KEYS = (Api.FETCH, Api.FETCH_SNAPSHOT, Api.DESCRIBE_QUORUM, Api.VOTE,
                Api.BEGIN_QUORUM_EPOCH, Api.END_QUORUM_EPOCH, Api.ADD_RAFT_VOTER, Api.REMOVE_RAFT_VOTER,
                Api.UPDATE_RAFT_VOTER)

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
        dispatcher.register(Api.ADD_RAFT_VOTER, guard(self.add_raft_voter, AclOperation.ALTER, refused_add_raft_voter))
        dispatcher.register(Api.REMOVE_RAFT_VOTER, guard(self.remove_raft_voter, AclOperation.ALTER,
                                                         refused_remove_raft_voter))
        dispatcher.register(Api.UPDATE_RAFT_VOTER, guard(self.update_raft_voter, action, refused_update_raft_voter))

    def _authorized(self, handler: Callable[[RequestContext, Req], Resp | Awaitable[Resp]], operation: AclOperation,
                    refusal: Callable[[RequestContext, Req], Resp]
                    ) -> Callable[[RequestContext, Req], Resp | Awaitable[Resp]]:
        """AuthHelper.authorizeClusterOperation in front of ``handler``: refused, ``refusal``
        (the request's getErrorResponse with CLUSTER_AUTHORIZATION_FAILED)."""
        authorizer = self.authorizer
        cuts = self.client.network.cuts

        def handle(ctx: RequestContext, req: Req) -> Resp | Awaitable[Resp]:
            peer = cuts.peer_of(ctx.client_id) if cuts else None  # an injected voter partition (raft/cuts.py)
            if peer is not None and cuts.deaf_to(peer):
                return _unanswered(None)  # it never arrives
            if not authorizer().authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME):
                return refusal(ctx, req)
            answer = handler(ctx, req)
            if peer is not None and cuts.mute_to(peer):
                return _unanswered(answer)  # handled, the answer lost on the way
            return answer

        return handle

    def fetch(self, ctx: RequestContext, req: FetchRequest) -> FetchResponse | Awaitable[FetchResponse]:
        answer = self.client.handle_request(ctx, req)
        if isinstance(answer, Message):
            return _now(answer, FetchResponse)
        return _later(answer, FetchResponse)  # parked until there is something to fetch

    def fetch_snapshot(self, ctx: RequestContext, req: FetchSnapshotRequest) -> FetchSnapshotResponse:
        return kafka_3_9_fetch_snapshot_answer(ctx, _now(self.client.handle_request(ctx, req), FetchSnapshotResponse))

    def describe_quorum(self, ctx: RequestContext, req: DescribeQuorumRequest) -> DescribeQuorumResponse:
        return _now(self.client.handle_request(ctx, req), DescribeQuorumResponse)

    def vote(self, ctx: RequestContext, req: VoteRequest) -> VoteResponse:
        return _now(self.client.handle_request(ctx, req), VoteResponse)

    def begin_quorum_epoch(self, ctx: RequestContext, req: BeginQuorumEpochRequest) -> BeginQuorumEpochResponse:
        return _now(self.client.handle_request(ctx, req), BeginQuorumEpochResponse)

    def end_quorum_epoch(self, ctx: RequestContext, req: EndQuorumEpochRequest) -> EndQuorumEpochResponse:
        return _now(self.client.handle_request(ctx, req), EndQuorumEpochResponse)


    def add_raft_voter(self, ctx: RequestContext, req: AddRaftVoterRequest
                       ) -> AddRaftVoterResponse | Awaitable[AddRaftVoterResponse]:
        answer = self.client.handle_request(ctx, req)
        if isinstance(answer, Message):
            return _now(answer, AddRaftVoterResponse)
        return _later(answer, AddRaftVoterResponse)  # once the new voter set is committed (v1: or written)

    def remove_raft_voter(self, ctx: RequestContext, req: RemoveRaftVoterRequest
                          ) -> RemoveRaftVoterResponse | Awaitable[RemoveRaftVoterResponse]:
        answer = self.client.handle_request(ctx, req)
        if isinstance(answer, Message):
            return _now(answer, RemoveRaftVoterResponse)
        return _later(answer, RemoveRaftVoterResponse)

    def update_raft_voter(self, ctx: RequestContext, req: UpdateRaftVoterRequest) -> UpdateRaftVoterResponse:
        return _now(self.client.handle_request(ctx, req), UpdateRaftVoterResponse)


async def _unanswered(answer: Message | Awaitable[Message] | None) -> Resp:
    """A request over a cut link: never answered (cancelled when its connection closes)."""
    if answer is not None and not isinstance(answer, Message):
        await answer
    await asyncio.get_running_loop().create_future()
    raise AssertionError("unreachable")


def _now(answer: RaftResponse | Awaitable[RaftResponse], cls: type[Resp]) -> Resp:
    """The answer of a request the node always answers at once (all but Fetch)."""
    if not isinstance(answer, cls):
        raise TypeError(f"the Raft node answered {type(answer).__name__} where {cls.__name__} was due")
    return answer


async def _later(answer: Awaitable[RaftResponse], cls: type[Resp]) -> Resp:
    return _now(await answer, cls)


def kafka_3_9_fetch_snapshot_answer(ctx: RequestContext, response: FetchSnapshotResponse) -> FetchSnapshotResponse:
    """A partition-level error, as a Kafka 3.9 controller answers it: its KafkaRaftClient builds
    the partition without UnalignedRecords, ControllerApis fails on the null field while sizing
    the response, and sends the request's error response instead: UNKNOWN_SERVER_ERROR, no
    topics. (A kraftsim follower takes it as a Kafka follower does: it backs off and asks again,
    or learns the new leader elsewhere.)"""
    for topic in response.topics:
        for p in topic.partitions:
            if p.error_code != ErrorCode.NONE:
                log.error("FetchSnapshot from %s failed with %s; answered UNKNOWN_SERVER_ERROR, as Kafka 3.9's "
                          "controller answers it", ctx.client_id, _name(p.error_code))
                return FetchSnapshotResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
    return response


def _name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)


# The Raft requests' getErrorResponse for CLUSTER_AUTHORIZATION_FAILED: the code alone, except
# DescribeQuorum, AddRaftVoter and RemoveRaftVoter (the code's generic message too) and Fetch (the session id, and before v13
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


def refused_add_raft_voter(ctx: RequestContext, req: AddRaftVoterRequest) -> AddRaftVoterResponse:
    return AddRaftVoterResponse(error_code=_REFUSED, error_message=generic_message(_REFUSED))


def refused_remove_raft_voter(ctx: RequestContext, req: RemoveRaftVoterRequest) -> RemoveRaftVoterResponse:
    return RemoveRaftVoterResponse(error_code=_REFUSED, error_message=generic_message(_REFUSED))


def refused_update_raft_voter(ctx: RequestContext, req: UpdateRaftVoterRequest) -> UpdateRaftVoterResponse:
    return UpdateRaftVoterResponse(error_code=_REFUSED)

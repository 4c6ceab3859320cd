"""Vote, BeginQuorumEpoch and EndQuorumEpoch: how this node answers them, and what it does with
the answers to its own.

Vote is granted only to a candidate whose log is at least as up to date as this node's (last
epoch first, then end offset), at most once per epoch, and only after the vote is written to
``quorum-state``. BeginQuorumEpoch tells a voter who won. EndQuorumEpoch tells the voters that
the leader resigned; a voter named among its preferred successors stands sooner the higher it is
named, so the most caught-up voter usually wins before anyone else's timer fires.

A pre-vote (Vote v2's PreVote, Kafka 4.0) asks the same question without binding anyone: no
epoch bump on the asking side, nothing written on the answering side. Its answers move a
prospective replica to Candidate, or back to its leader or to Unattached.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kraftsim.raft.core import rpcs
from kraftsim.raft.core.common import (
    handle_top_level_error,
    maybe_handle_common_response,
    maybe_transition,
    response_leader_endpoints,
    valid_cluster_id,
    valid_voter_key,
    validate_voter_only,
)
from kraftsim.raft.core.events import InboundRequest
from kraftsim.raft.core.keys import OffsetAndEpoch, ReplicaKey
from kraftsim.raft.core.leader_state import LeaderState
from kraftsim.raft.core.quorum import RaftStateError
from kraftsim.raft.core.states import CandidateState, FollowerState, ProspectiveState, ResignedState, UnattachedState
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    VoteRequest,
    VoteResponse,
)

if TYPE_CHECKING:
    from kraftsim.raft.core.node import RaftNode

E = ErrorCode
log = logging.getLogger("kraftsim.raft")


# -- Vote --------------------------------------------------------------------------------------

def _vote_response(node: RaftNode, req: InboundRequest, error: int, granted: bool) -> VoteResponse:
    q = node.quorum
    return rpcs.vote_response(req.listener, req.api_version, error, q.epoch, q.leader_id, granted,
                              q.state.leader_endpoints)


def handle_vote_request(node: RaftNode, req: InboundRequest, message: VoteRequest, now_ms: int) -> VoteResponse:
    if not valid_cluster_id(node, message.cluster_id):
        return VoteResponse(error_code=E.INCONSISTENT_CLUSTER_ID)
    if not rpcs.valid_partition(message):
        return VoteResponse(error_code=E.INVALID_REQUEST)
    p = message.topics[0].partitions[0]
    # A pre-vote (Vote v2, served from Kafka 4.0) comes from a voter that has not bumped its
    # epoch, so its log may end in that very epoch; a candidate's log ends before its epoch.
    pre_vote = req.api_version >= 2 and p.pre_vote
    illegal_epoch = p.last_offset_epoch > p.candidate_epoch if pre_vote else p.last_offset_epoch >= p.candidate_epoch
    if p.last_offset < 0 or p.last_offset_epoch < 0 or illegal_epoch:
        return _vote_response(node, req, E.INVALID_REQUEST, False)
    error = validate_voter_only(node, p.candidate_id, p.candidate_epoch)
    if error is not None:
        return _vote_response(node, req, error, False)
    if p.candidate_epoch > node.quorum.epoch:
        node.transition_to_unattached(p.candidate_epoch, now_ms)
    voter = None if message.voter_id < 0 else ReplicaKey.of(message.voter_id, p.voter_directory_id)
    if not valid_voter_key(node, voter):
        return _vote_response(node, req, E.INVALID_VOTER_KEY, False)
    candidate = ReplicaKey.of(p.candidate_id, p.candidate_directory_id)
    up_to_date = node.candidate_log_up_to_date(OffsetAndEpoch(p.last_offset, p.last_offset_epoch))
    granted = node.quorum.state.can_grant_vote(candidate, up_to_date, pre_vote)
    state = node.quorum.state
    if granted and not pre_vote and isinstance(state, (UnattachedState, ProspectiveState)) and state.voted_key is None:
        node.quorum.to_voted(p.candidate_epoch, candidate, now_ms)  # durable before the answer leaves
    node.stats.votes_granted += granted and not pre_vote
    # Every answer, as Kafka logs it at INFO: who asked, in which epoch, a pre-vote or not.
    log.info("%s from %s in epoch %d (last offset %d in epoch %d) %s", "pre-vote" if pre_vote else "vote request",
             candidate, p.candidate_epoch, p.last_offset, p.last_offset_epoch, "granted" if granted else "refused")
    return _vote_response(node, req, E.NONE, granted)


def handle_vote_response(node: RaftNode, source: int, message: VoteResponse, now_ms: int) -> bool:
    if message.error_code == E.UNSUPPORTED_VERSION and isinstance(node.quorum.state, ProspectiveState):
        # A voter that cannot take a pre-vote (Kafka 3.9, no Vote v2) cannot be asked whether it
        # would vote: stand at once, as Kafka 4.0 does.
        node.transition_to_candidate(now_ms)
        return True
    if message.error_code != E.NONE:
        return handle_top_level_error(node, message.error_code)
    if not rpcs.valid_partition(message):
        return False
    p = message.topics[0].partitions[0]
    leader_id = p.leader_id if p.leader_id >= 0 else None
    endpoints = response_leader_endpoints(node, leader_id, rpcs.leader_endpoints_from_response(
        node.listener_name, p.leader_id, message.node_endpoints))
    handled = maybe_handle_common_response(node, p.error_code, leader_id, p.leader_epoch, endpoints, now_ms)
    if handled is not None:
        return handled
    if p.error_code != E.NONE:
        return False
    state = node.quorum.state
    if isinstance(state, CandidateState):
        state.record(source, p.vote_granted)
        if p.vote_granted:
            node.maybe_transition_to_leader(state, now_ms)
        elif state.is_vote_rejected() and not state.backing_off and node.candidate_backoff:
            # Lost for sure: back off now rather than wait out the election timeout (from Kafka
            # 4.1 it waits it out: its next attempt is a pre-vote, which costs no epoch).
            state.start_backing_off(now_ms, node.binary_exponential_backoff_ms(state.retries))
    elif isinstance(state, ProspectiveState):
        state.record(source, p.vote_granted)
        if p.vote_granted:
            node.maybe_transition_to_candidate(state, now_ms)
        elif state.is_vote_rejected():
            node.prospective_lost(state, now_ms)  # no backoff: it follows, or waits its timer out
    return True


# -- BeginQuorumEpoch ----------------------------------------------------------------------------

def _begin_response(node: RaftNode, req: InboundRequest, error: int) -> BeginQuorumEpochResponse:
    q = node.quorum
    return rpcs.begin_quorum_epoch_response(req.listener, req.api_version, error, q.epoch, q.leader_id,
                                            q.state.leader_endpoints)


def handle_begin_quorum_epoch_request(node: RaftNode, req: InboundRequest, message: BeginQuorumEpochRequest,
                                      now_ms: int) -> BeginQuorumEpochResponse:
    if not valid_cluster_id(node, message.cluster_id):
        return BeginQuorumEpochResponse(error_code=E.INCONSISTENT_CLUSTER_ID)
    if not rpcs.valid_partition(message):
        return BeginQuorumEpochResponse(error_code=E.INVALID_REQUEST)
    p = message.topics[0].partitions[0]
    error = validate_voter_only(node, p.leader_id, p.leader_epoch)
    if error is not None:
        return _begin_response(node, req, error)
    endpoints = (rpcs.endpoints_from_request(message.leader_endpoints) if message.leader_endpoints
                 else node.quorum.voters.listeners(p.leader_id))
    maybe_transition(node, p.leader_id, p.leader_epoch, endpoints, now_ms)
    voter = None if message.voter_id < 0 else ReplicaKey.of(message.voter_id, p.voter_directory_id)
    if not valid_voter_key(node, voter):
        return _begin_response(node, req, E.INVALID_VOTER_KEY)
    return _begin_response(node, req, E.NONE)


def handle_begin_quorum_epoch_response(node: RaftNode, source: int, message: BeginQuorumEpochResponse,
                                       now_ms: int) -> bool:
    if message.error_code != E.NONE:
        return handle_top_level_error(node, message.error_code)
    if not rpcs.valid_partition(message):
        return False
    p = message.topics[0].partitions[0]
    leader_id = p.leader_id if p.leader_id >= 0 else None
    endpoints = response_leader_endpoints(node, leader_id, rpcs.leader_endpoints_from_response(
        node.listener_name, p.leader_id, message.node_endpoints))
    handled = maybe_handle_common_response(node, p.error_code, leader_id, p.leader_epoch, endpoints, now_ms)
    if handled is not None:
        return handled
    if p.error_code != E.NONE:
        return False
    state = node.quorum.state
    if isinstance(state, LeaderState):
        state.add_acknowledgement(source)
    return True


# -- EndQuorumEpoch ------------------------------------------------------------------------------

def _end_response(node: RaftNode, req: InboundRequest, error: int) -> EndQuorumEpochResponse:
    q = node.quorum
    return rpcs.end_quorum_epoch_response(req.listener, req.api_version, error, q.epoch, q.leader_id,
                                          q.state.leader_endpoints)


def handle_end_quorum_epoch_request(node: RaftNode, req: InboundRequest, message: EndQuorumEpochRequest,
                                    now_ms: int) -> EndQuorumEpochResponse:
    if not valid_cluster_id(node, message.cluster_id):
        return EndQuorumEpochResponse(error_code=E.INCONSISTENT_CLUSTER_ID)
    if not rpcs.valid_partition(message):
        return EndQuorumEpochResponse(error_code=E.INVALID_REQUEST)
    p = message.topics[0].partitions[0]
    error = validate_voter_only(node, p.leader_id, p.leader_epoch)
    if error is not None:
        return _end_response(node, req, error)
    endpoints = (rpcs.endpoints_from_request(message.leader_endpoints) if message.leader_endpoints
                 else node.quorum.voters.listeners(p.leader_id))
    maybe_transition(node, p.leader_id, p.leader_epoch, endpoints, now_ms)
    state = node.quorum.state
    if isinstance(state, FollowerState) and state.leader_id == p.leader_id:
        backoff = end_epoch_election_backoff_ms(node, rpcs.preferred_candidates(p))
        state.fetch_timer.reset(now_ms, backoff)  # stand after ``backoff``, not the full fetch timeout
    return _end_response(node, req, E.NONE)


def end_epoch_election_backoff_ms(node: RaftNode, candidates: list[ReplicaKey]) -> int:
    """The first preferred successor stands at once, the next after max/2^(n-1), each later one
    twice as late; a voter not named waits the full backoff maximum."""
    position = len(candidates)
    for i, c in enumerate(candidates):
        if c.id == node.quorum.local_id and (c.directory_id is None or c.directory_id == node.quorum.directory_id):
            position = i
            break
    return strict_exponential_backoff_ms(node.config.election_backoff_max_ms, position, len(candidates))


def strict_exponential_backoff_ms(max_ms: int, position: int, total: int) -> int:
    if position == 0:
        return 0
    if position < 0 or position >= total:
        return max_ms
    base = max_ms >> (total - 1)
    return min(max_ms, base << (position - 1))


def handle_end_quorum_epoch_response(node: RaftNode, source: int, message: EndQuorumEpochResponse,
                                     now_ms: int) -> bool:
    if message.error_code != E.NONE:
        return handle_top_level_error(node, message.error_code)
    if not rpcs.valid_partition(message):
        return False
    p = message.topics[0].partitions[0]
    leader_id = p.leader_id if p.leader_id >= 0 else None
    endpoints = response_leader_endpoints(node, leader_id, rpcs.leader_endpoints_from_response(
        node.listener_name, p.leader_id, message.node_endpoints))
    handled = maybe_handle_common_response(node, p.error_code, leader_id, p.leader_epoch, endpoints, now_ms)
    if handled is not None:
        return handled
    if p.error_code != E.NONE:
        return False
    state = node.quorum.state
    if not isinstance(state, ResignedState):
        raise RaftStateError(f"EndQuorumEpoch answered while {state.role}")
    state.acknowledge(source)
    return True

"""Checks and reactions every Raft RPC shares (KafkaRaftClient's validate* and
maybeHandleCommonResponse): is the request for this cluster and this epoch, and what does an
answer tell this node about the epoch and its leader, whatever else it says.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kraftsim.raft.core.keys import ReplicaKey
from kraftsim.raft.core.leader_state import LeaderState
from kraftsim.raft.core.quorum import RaftStateError
from kraftsim.raft.core.voters import Endpoints
from kraftsim.rpc.error_codes import ErrorCode

if TYPE_CHECKING:
    from kraftsim.raft.core.node import RaftNode

E = ErrorCode


def valid_cluster_id(node: RaftNode, cluster_id: str | None) -> bool:
    return cluster_id is None or cluster_id == node.cluster_id  # not enforced when absent


def validate_voter_only(node: RaftNode, remote_id: int, epoch: int) -> int | None:
    """Vote, BeginQuorumEpoch, EndQuorumEpoch: an error, or None."""
    if epoch < node.quorum.epoch:
        return E.FENCED_LEADER_EPOCH
    if remote_id < 0:
        return E.INVALID_REQUEST
    return None


def validate_leader_only(node: RaftNode, epoch: int) -> int | None:
    """Fetch, FetchSnapshot: an error, or None when this node leads ``epoch`` and is not
    shutting down."""
    current = node.quorum.epoch
    if epoch < current:
        return E.FENCED_LEADER_EPOCH
    if epoch > current:
        return E.UNKNOWN_LEADER_EPOCH
    if not isinstance(node.quorum.state, LeaderState):
        return E.NOT_LEADER_OR_FOLLOWER  # an observer looking for the leader of this epoch
    if node.shutdown_deadline_ms is not None:
        return E.BROKER_NOT_AVAILABLE
    return None


def valid_voter_key(node: RaftNode, voter: ReplicaKey | None) -> bool:
    """The request was meant for this replica (v1's VoterId and directory; v0 names none)."""
    if voter is None:
        return True
    if voter.id != node.quorum.local_id:
        return False
    return voter.directory_id is None or voter.directory_id == node.quorum.directory_id


def response_leader_endpoints(node: RaftNode, leader_id: int | None, from_message: Endpoints) -> Endpoints:
    """The leader's endpoints a response names, else the voter set's (a peer without
    NodeEndpoints, i.e. an older version)."""
    if leader_id is None:
        return Endpoints()
    return from_message or node.quorum.voters.listeners(leader_id)


def has_consistent_leader(node: RaftNode, epoch: int, leader_id: int | None) -> bool:
    quorum = node.quorum
    if leader_id is not None and leader_id == quorum.local_id:
        return isinstance(quorum.state, LeaderState)  # told it leads: it had better
    return epoch != quorum.epoch or leader_id is None or quorum.leader_id is None or leader_id == quorum.leader_id


def maybe_transition(node: RaftNode, leader_id: int | None, epoch: int, endpoints: Endpoints, now_ms: int) -> None:
    """Follow what a request or response says about the epoch: a higher epoch (with its leader
    if named), or the leader of this epoch if this node did not know it (or knew fewer of its
    endpoints). Two leaders for one epoch is a broken quorum (RaftStateError)."""
    quorum = node.quorum
    if not has_consistent_leader(node, epoch, leader_id):
        raise RaftStateError(f"leader {leader_id} in epoch {epoch} contradicts leader {quorum.leader_id} "
                             f"in epoch {quorum.epoch} on node {quorum.local_id}")
    if epoch > quorum.epoch:
        if leader_id is not None:
            node.transition_to_follower(epoch, leader_id, endpoints, now_ms)
        else:
            node.transition_to_unattached(epoch, now_ms)
    elif leader_id is not None and (quorum.leader_id is None or len(endpoints) > len(quorum.state.leader_endpoints)):
        node.transition_to_follower(epoch, leader_id, endpoints, now_ms)


def maybe_handle_common_response(node: RaftNode, error: int, leader_id: int | None, epoch: int,
                                 endpoints: Endpoints, now_ms: int) -> bool | None:
    """None: the API's own handler takes it from here. True: handled, the peer is ready for the
    next request. False: handled, back off before the next one."""
    quorum = node.quorum
    if leader_id is not None and not endpoints:
        endpoints = quorum.voters.listeners(leader_id)
    if epoch < quorum.epoch or error == E.UNKNOWN_LEADER_EPOCH:
        return True  # this node is ahead: the answer is stale
    if epoch > quorum.epoch or error in (E.FENCED_LEADER_EPOCH, E.NOT_LEADER_OR_FOLLOWER):
        maybe_transition(node, leader_id, epoch, endpoints, now_ms)
        return True
    if leader_id is not None and (quorum.leader_id is None or not quorum.state.leader_endpoints):
        # The leader of this epoch, learnt from the answer (or its address: a replica restarted
        # knowing the leader but not where it listens, a voter its log does not name yet):
        # follow it, and if there is no error let the API's handler use the answer too (an
        # observer's first Fetch can append).
        node.transition_to_follower(epoch, leader_id, endpoints, now_ms)
        return None if error == E.NONE else True
    if error == E.BROKER_NOT_AVAILABLE:
        return False
    if error == E.INVALID_VOTER_KEY:
        return True  # the request named another replica; nothing to learn
    if error == E.INVALID_REQUEST:
        raise RaftStateError("a peer answered INVALID_REQUEST to this node's request")
    return None


def handle_top_level_error(node: RaftNode, error: int) -> bool:
    if error == E.BROKER_NOT_AVAILABLE:
        return False
    if error == E.CLUSTER_AUTHORIZATION_FAILED:
        raise RaftStateError("a peer refused this node: CLUSTER_AUTHORIZATION_FAILED")
    return False  # unexpected: back off (Kafka logs it)

"""What each epoch state does when polled: its timers, and the requests it sends (Kafka's
pollLeader, pollProspective, pollCandidate, pollFollower, pollUnattached, pollResigned). Each
returns how long until it needs polling again.

Where a timer says "time for an election", ``node.stand`` asks for pre-votes first (Kafka 4.0)
or stands at once (Kafka 3.9).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from kraftsim.raft.core import reconfig_rpcs, rpcs
from kraftsim.raft.core.leader_state import LeaderState
from kraftsim.raft.core.states import CandidateState, FollowerState, ProspectiveState, ResignedState, UnattachedState
from kraftsim.raft.core.timer import NEVER

if TYPE_CHECKING:
    from kraftsim.raft.core.node import RaftNode


def poll_current_state(node: RaftNode, now_ms: int) -> int:
    state = node.quorum.state
    if isinstance(state, LeaderState):
        return poll_leader(node, state, now_ms)
    if isinstance(state, CandidateState):
        return poll_candidate(node, state, now_ms)
    if isinstance(state, ProspectiveState):
        return poll_prospective(node, state, now_ms)
    if isinstance(state, FollowerState):
        if node.quorum.is_voter():
            return poll_follower_as_voter(node, state, now_ms)
        return poll_follower_as_observer(node, state, now_ms)
    if isinstance(state, UnattachedState):
        if node.quorum.is_voter():
            return poll_unattached_as_voter(node, state, now_ms)
        return poll_unattached_as_observer(node, state, now_ms)
    return poll_resigned(node, state, now_ms)


def poll_leader(node: RaftNode, state: LeaderState, now_ms: int) -> int:
    until_check_quorum = state.time_until_check_quorum_expires(now_ms)
    if node.shutdown_deadline_ms is not None or state.resign_requested or until_check_quorum == 0:
        node.transition_to_resigned(state.non_leader_voters_by_descending_end(), now_ms)
        return 0
    until_change_expires = reconfig_rpcs.expire_pending(node, state, now_ms)
    until_drain = node.drain_appends(state, now_ms)
    until_begin = send_begin_quorum_epoch(node, state, now_ms)
    return min(until_check_quorum, until_change_expires, until_drain, until_begin)


def send_begin_quorum_epoch(node: RaftNode, state: LeaderState, now_ms: int) -> int:
    """Every fetch timeout / 2, BeginQuorumEpoch to every other voter: it tells a voter that
    missed the election (or does not know the leader's address) whom to fetch from."""
    wait = state.time_until_begin_quorum_epoch(now_ms)
    if wait == 0:
        q = node.quorum
        wait = NEVER
        for key in q.voters.keys():
            if key.id != state.local_key.id:
                build = partial(rpcs.begin_quorum_epoch_request, node.cluster_id, state.epoch, state.local_key.id,
                                q.listeners, key)
                wait = min(wait, node.maybe_send(now_ms, key.id, build))
        state.reset_begin_quorum_epoch_timer(now_ms)
    return wait


def poll_candidate(node: RaftNode, state: CandidateState, now_ms: int) -> int:
    if node.shutdown_deadline_ms is not None:
        # Keep campaigning: a win lets it resign properly, someone else's win lets it go.
        return min(node.shutdown_deadline_ms - now_ms, send_vote_requests(node, state, now_ms))
    if state.backing_off:
        if state.backoff_timer.expired(now_ms):
            node.stand(now_ms)
            return 0
        return state.backoff_timer.remaining_ms(now_ms)
    if state.election_timer.expired(now_ms):
        if node.pre_vote:
            node.transition_to_prospective(now_ms)  # Kafka 4.0: ask again, with no backoff
            return 0
        backoff = node.binary_exponential_backoff_ms(state.retries)
        state.start_backing_off(now_ms, backoff)
        return backoff
    return min(send_vote_requests(node, state, now_ms), state.election_timer.remaining_ms(now_ms))


def poll_prospective(node: RaftNode, state: ProspectiveState, now_ms: int) -> int:
    if node.shutdown_deadline_ms is not None:
        return min(node.shutdown_deadline_ms - now_ms, send_vote_requests(node, state, now_ms))
    if state.election_timer.expired(now_ms):
        node.prospective_lost(state, now_ms)
        return 0
    return min(send_vote_requests(node, state, now_ms), state.election_timer.remaining_ms(now_ms))


def send_vote_requests(node: RaftNode, state: CandidateState | ProspectiveState, now_ms: int) -> int:
    """Vote to every voter that has not answered, while a majority is still possible: with
    PreVote in the current epoch from a prospective replica, for real in the new epoch from a
    candidate."""
    if state.is_vote_rejected():
        return NEVER
    wait = NEVER
    last = node.log_end()
    pre_vote = isinstance(state, ProspectiveState)
    for key in state.unrecorded_voters():
        build = partial(rpcs.vote_request, node.cluster_id, state.epoch, state.local_key, key, last, pre_vote)
        wait = min(wait, node.maybe_send(now_ms, key.id, build))
    return wait


def poll_follower_as_voter(node: RaftNode, state: FollowerState, now_ms: int) -> int:
    if node.shutdown_deadline_ms is not None:
        return 0  # nothing to hand over: shut down at once
    if state.fetch_timer.expired(now_ms):
        node.stand(now_ms)  # the leader went quiet
        return 0
    if state.update_voter_timer.expired(now_ms):
        if node.local_voter_needs_update():
            wait = node.maybe_send(now_ms, state.leader_id, lambda: rpcs.update_voter_request(
                node.cluster_id, node.quorum.local_key, state.epoch, node.supported_kraft_versions,
                node.quorum.listeners))
        else:
            wait = send_fetch(node, state, now_ms)
        state.update_voter_timer.reset(now_ms, state.update_voter_period_ms)
    else:
        wait = send_fetch(node, state, now_ms)
    return min(wait, state.fetch_timer.remaining_ms(now_ms), state.update_voter_timer.remaining_ms(now_ms))


def poll_follower_as_observer(node: RaftNode, state: FollowerState, now_ms: int) -> int:
    requests = node.requests
    if state.fetch_timer.expired(now_ms):
        return send_fetch_to_any_voter(node, now_ms)
    leader = state.leader_id
    if requests.has_timed_out(leader, now_ms):
        requests.reset(leader)
        wait = send_fetch_to_any_voter(node, now_ms)  # maybe the leader changed: ask around
    elif requests.is_backing_off(leader, now_ms):
        wait = send_fetch_to_any_voter(node, now_ms)
    elif not requests.has_any_in_flight(now_ms):
        wait = send_fetch(node, state, now_ms)
    else:
        wait = requests.backoff_before_bootstrap_ready(now_ms)
    return min(wait, state.fetch_timer.remaining_ms(now_ms))


def send_fetch(node: RaftNode, state: FollowerState, now_ms: int) -> int:
    """A Fetch (or a FetchSnapshot chunk, while downloading one) to the leader. A voter sends
    it only once its log is flushed: the fetch offset is what the leader counts as durable. So
    does a follower that always flushes (a controller, which the leader may add as a voter and
    then count with the offset it fetched at as an observer)."""
    log = node.log
    writer = state.fetching_snapshot
    if writer is not None:
        snapshot_id, position = writer.snapshot_id, writer.size
        return node.maybe_send(now_ms, state.leader_id, lambda: rpcs.fetch_snapshot_request(
            node.cluster_id, node.quorum.local_key, state.epoch, snapshot_id, position, node.max_fetch_bytes))
    if (node.quorum.is_voter() or node.followers_always_flush) and log.flushed_end_offset < log.end_offset:
        log.flush()
        if log.flushed_end_offset < log.end_offset:
            return NEVER  # polled again when the flush completes
    return node.maybe_send(now_ms, state.leader_id, lambda: build_fetch(node, state.epoch))


def build_fetch(node: RaftNode, epoch: int) -> rpcs.FetchRequest:
    q = node.quorum
    replica = None if q.local_id is None else q.local_key
    hw = q.high_watermark
    return rpcs.fetch_request(node.cluster_id, replica, epoch, node.log.end_offset, node.log.last_fetched_epoch(),
                              node.config.fetch_max_wait_ms, -1 if hw is None else hw)


def send_fetch_to_any_voter(node: RaftNode, now_ms: int) -> int:
    peer = node.requests.find_ready_bootstrap(now_ms)
    if peer is None:
        return node.requests.backoff_before_bootstrap_ready(now_ms)
    return node.maybe_send(now_ms, peer, lambda: build_fetch(node, node.quorum.epoch))


def poll_unattached_as_voter(node: RaftNode, state: UnattachedState, now_ms: int) -> int:
    if node.shutdown_deadline_ms is not None:
        return node.shutdown_deadline_ms - now_ms
    if state.election_timer.expired(now_ms):
        node.stand(now_ms)
        return 0
    return state.election_timer.remaining_ms(now_ms)


def poll_unattached_as_observer(node: RaftNode, state: UnattachedState, now_ms: int) -> int:
    """An observer never stands, so its election timer is no reason to wake: a replica that voted
    as a voter and then read its own removal (or that a candidate counts as a voter before this
    replica's log says so) keeps the voter's timer, which would otherwise wake it in a loop once
    run out."""
    return send_fetch_to_any_voter(node, now_ms)


def poll_resigned(node: RaftNode, state: ResignedState, now_ms: int) -> int:
    """Tell the voters until each has heard (EndQuorumEpoch); when the election timer fires,
    unless shutting down, stand again (Kafka 3.9) or move to the next epoch (Kafka 4.0)."""
    q = node.quorum
    wait = NEVER
    for voter in sorted(state.unacked_voters):
        wait = min(wait, node.maybe_send(now_ms, voter, lambda: rpcs.end_quorum_epoch_request(
            node.cluster_id, state.epoch, state.local_id, q.listeners, state.preferred_successors)))
    if node.shutdown_deadline_ms is not None:
        timeout = node.shutdown_deadline_ms - now_ms
    elif state.election_timer.expired(now_ms):
        if q.is_voter() and not node.pre_vote:
            node.transition_to_candidate(now_ms)
        else:
            # No longer a voter: step aside. Kafka 4.0 does so as a voter too (a new epoch, so
            # that nobody takes this replica for the leader any more), and keeps its run-out
            # timer, so that it asks for pre-votes straight after.
            node.transition_to_unattached(state.epoch + 1, now_ms)
        timeout = 0
    else:
        timeout = state.election_timer.remaining_ms(now_ms)
    return min(timeout, wait)

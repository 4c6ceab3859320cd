"""The sans-I/O Raft node (kraftsim.raft.core) message by message, against Kafka 3.9's
KafkaRaftClient rules: votes, elections, the leader's high watermark and check-quorum, fetches
(diverging, snapshot, long poll), resignation, and the storage it sits on; and Kafka 4.0's
pre-vote (KIP-996), asked and answered."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest

from kraftsim.metadata.batch import ControlRecordType, decode_control_record, read_batches
from kraftsim.raft.core import rpcs
from kraftsim.raft.core.config import QuorumConfig
from kraftsim.raft.core.election_rpcs import strict_exponential_backoff_ms
from kraftsim.raft.core.election_state import ElectionState
from kraftsim.raft.core.events import (
    HighWatermark,
    InboundRequest,
    InboundResponse,
    LeaderChange,
    OutboundRequest,
    OutboundResponse,
    RaftRequest,
    RaftResponse,
    ShutdownComplete,
)
from kraftsim.raft.core.keys import OffsetAndEpoch, ReplicaKey
from kraftsim.raft.core.log import Validity, truncate_to_end_offset, validate_offset_and_epoch
from kraftsim.raft.core.memory_log import LogStateError, MemoryLog
from kraftsim.raft.core.node import NotLeaderError, RaftNode
from kraftsim.raft.core.quorum import RaftStateError
from kraftsim.raft.core.state_store import FileQuorumStateStore, MemoryQuorumStateStore
from kraftsim.raft.core.timer import NEVER
from kraftsim.raft.core.voters import Address, Endpoints, VoterSet
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import (
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)

E = ErrorCode
L = "CONTROLLER"
CLUSTER = "raft-unit-test-cluster"
T = 1000  # election timeout
FETCH_TIMEOUT = 2000
VOTERS = VoterSet.static({i: Address(f"c{i}", 9093) for i in (1, 2, 3)}, L)


def node(node_id: int = 1, *, log: MemoryLog | None = None, store: MemoryQuorumStateStore | None = None,
         now: int = 0, seed: int = 0, voters: VoterSet = VOTERS, pre_vote: bool = False,
         candidate_backoff: bool = True, **config: int) -> RaftNode:
    return RaftNode(node_id=node_id, directory_id=uuid.UUID(int=node_id), cluster_id=CLUSTER, voters=voters,
                    listeners=Endpoints({L: Address(f"c{node_id}", 9093)}), listener_name=L,
                    log=log or MemoryLog(), store=store or MemoryQuorumStateStore(),
                    config=QuorumConfig(**config), rng=random.Random(seed), now_ms=now, pre_vote=pre_vote,
                    candidate_backoff=candidate_backoff)


def ask(n: RaftNode, message: RaftRequest, now: int, version: int = 1) -> RaftResponse | None:
    """Send ``message`` to the node; its immediate answer (None if it parked the request)."""
    n.handle_request(InboundRequest(message, version, "token", L), now)
    out = [o for o in n.take_outbound() if isinstance(o, OutboundResponse)]
    return out[0].message if out else None


def requests_out(n: RaftNode) -> list[OutboundRequest]:
    return [o for o in n.take_outbound() if isinstance(o, OutboundRequest)]


def vote(epoch: int, candidate: int, last_epoch: int, last_offset: int, voter: int = 1) -> VoteRequest:
    return rpcs.vote_request(CLUSTER, epoch, ReplicaKey(candidate), ReplicaKey(voter), OffsetAndEpoch(last_offset,
                                                                                                       last_epoch))


def granted(response: RaftResponse | None) -> bool:
    assert isinstance(response, VoteResponse) and response.error_code == 0
    p = response.topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.vote_granted


def log_with(epochs: list[tuple[int, int]]) -> MemoryLog:
    """A log holding ``count`` one-record batches in each ``epoch``, flushed."""
    log = MemoryLog()
    for epoch, count in epochs:
        for i in range(count):
            log.append_as_leader([b"v%d-%d" % (epoch, i)], epoch=epoch, timestamp=0)
    log.flush()
    return log


def elect(n: RaftNode, now: int = 2 * T) -> int:
    """Drive ``n`` (of VOTERS) to leadership: its timer fires, voter 2 grants. The time it won."""
    n.poll(now)
    assert n.role == "candidate"
    votes = requests_out(n)
    assert {r.destination for r in votes} == {2, 3}
    r2 = next(r for r in votes if r.destination == 2)
    n.handle_response(InboundResponse(2, r2.correlation_id, rpcs.vote_response(L, 1, E.NONE, n.epoch, None, True,
                                                                               Endpoints())), now)
    assert n.role == "leader"
    return now


def fetch(epoch: int, offset: int, last_epoch: int, replica: int = 2, wait: int = 0) -> FetchRequest:
    return rpcs.fetch_request(CLUSTER, ReplicaKey(replica), epoch, offset, last_epoch, wait)


def partition(response: RaftResponse | None) -> FetchResponse.PartitionData:
    assert isinstance(response, FetchResponse) and response.error_code == 0, response
    return response.responses[0].partitions[0]


# -- votes -------------------------------------------------------------------------------------

def test_a_vote_goes_only_to_a_candidate_whose_log_is_as_up_to_date_last_epoch_first() -> None:
    # This voter's log ends at offset 5 in epoch 2.
    def fresh() -> RaftNode:
        return node(log=log_with([(1, 3), (2, 2)]))

    assert not granted(ask(fresh(), vote(3, 2, last_epoch=2, last_offset=4), 0))  # shorter, same epoch
    assert granted(ask(fresh(), vote(3, 2, last_epoch=2, last_offset=5), 0))  # equal
    assert not granted(ask(fresh(), vote(3, 2, last_epoch=1, last_offset=100), 0))  # longer, older epoch
    assert granted(ask(fresh(), vote(3, 2, last_epoch=2, last_offset=9), 0))  # longer, same epoch
    assert granted(ask(fresh(), vote(4, 2, last_epoch=3, last_offset=1), 0))  # shorter, newer epoch


def test_one_vote_per_epoch_written_before_the_answer_and_kept_across_a_restart() -> None:
    store = MemoryQuorumStateStore()
    log = MemoryLog()
    n = node(store=store, log=log)
    assert granted(ask(n, vote(5, 2, 0, 0), 0))
    assert store.state == ElectionState(5, voted_key=ReplicaKey(2), voters=frozenset({1, 2, 3}))
    assert n.role == "voted"
    assert not granted(ask(n, vote(5, 3, 0, 0), 1))  # another candidate, same epoch
    assert granted(ask(n, vote(5, 2, 0, 0), 2))  # the same one again

    restarted = node(store=store, log=log, now=10)
    assert restarted.epoch == 5
    assert not granted(ask(restarted, vote(5, 3, 0, 0), 11))
    assert granted(ask(restarted, vote(6, 3, 0, 0), 12))  # a new epoch, a new vote


def pre_vote(epoch: int, candidate: int, last_epoch: int, last_offset: int) -> VoteRequest:
    """Vote v2 with PreVote (KIP-996, Kafka 4.0): ``epoch`` is the prospective's own, not bumped."""
    request = vote(epoch, candidate, last_epoch, last_offset)
    request.topics[0].partitions[0].pre_vote = True
    return request


def test_a_pre_vote_goes_to_any_up_to_date_log_and_binds_nothing() -> None:
    store = MemoryQuorumStateStore()
    n = node(store=store, log=log_with([(1, 3), (2, 2)]))  # ends at offset 5 in epoch 2
    # The prospective's log may end in its own epoch; a candidate's may not.
    assert granted(ask(n, pre_vote(2, 2, last_epoch=2, last_offset=5), 0, version=2))
    assert ask(n, vote(2, 2, 2, 5), 0, version=1).topics[0].partitions[0].error_code \
        == E.INVALID_REQUEST  # type: ignore[union-attr]
    assert ask(n, pre_vote(2, 2, 3, 5), 0, version=2).topics[0].partitions[0].error_code \
        == E.INVALID_REQUEST  # type: ignore[union-attr]
    assert not granted(ask(n, pre_vote(2, 3, last_epoch=2, last_offset=4), 0, version=2))  # shorter
    # Nothing written, no vote cast: a second prospective is granted too, and a real vote after.
    assert granted(ask(n, pre_vote(2, 3, last_epoch=2, last_offset=5), 0, version=2))
    assert store.state.voted_key is None and n.role == "unattached"
    assert granted(ask(n, vote(3, 3, 2, 5), 1, version=2))
    assert store.state.voted_key == ReplicaKey(3)
    # Having voted binds the real vote of this epoch, not a pre-vote.
    assert not granted(ask(n, vote(3, 2, 2, 5), 2, version=2))
    assert granted(ask(n, pre_vote(3, 2, 2, 5), 2, version=2))
    assert store.state.voted_key == ReplicaKey(3)


def test_a_follower_grants_a_pre_vote_only_until_its_leader_has_answered_a_fetch() -> None:
    n = follower_of_2(MemoryLog())
    assert granted(ask(n, pre_vote(5, 3, 0, 0), 0, version=2))  # the leader may be gone already
    n = follower_of_2(MemoryLog())
    n.poll(1)
    fetch_answer(n, 2)
    assert not granted(ask(n, pre_vote(5, 3, 0, 0), 3, version=2))
    assert (n.role, n.epoch, n.leader_id) == ("follower", 5, 2)


def test_a_leader_refuses_a_pre_vote_a_candidate_grants_one() -> None:
    leader = node()
    elect(leader)
    assert not granted(ask(leader, pre_vote(leader.epoch, 2, 0, 0), 2 * T, version=2))
    assert leader.role == "leader"
    candidate = node()
    candidate.poll(2 * T)
    assert candidate.role == "candidate"
    assert granted(ask(candidate, pre_vote(candidate.epoch, 2, 0, 0), 2 * T, version=2))
    assert not granted(ask(candidate, vote(candidate.epoch, 2, 0, 0), 2 * T, version=2))
    assert candidate.role == "candidate"


# -- asking for pre-votes (KIP-996, Kafka 4.0) -------------------------------------------------

def answer_votes(n: RaftNode, now: int, grants: dict[int, bool], epoch: int | None = None,
                 leader: int | None = None) -> list[VoteRequest]:
    """Answer the node's outstanding Vote requests from the voters in ``grants``; the requests."""
    sent = [r for r in requests_out(n) if isinstance(r.message, VoteRequest)]
    for r in sent:
        if r.destination in grants:
            answer = rpcs.vote_response(L, 2, E.NONE, n.epoch if epoch is None else epoch, leader,
                                        grants[r.destination], Endpoints())
            n.handle_response(InboundResponse(r.destination, r.correlation_id, answer), now)
    return [r.message for r in sent]  # type: ignore[misc]


def test_an_unattached_voter_asks_pre_votes_in_its_epoch_and_stands_only_with_a_majority() -> None:
    store = MemoryQuorumStateStore()
    n = node(store=store, pre_vote=True, log=log_with([(3, 2)]))
    writes = store.writes
    n.poll(2 * T)
    assert (n.role, n.epoch) == ("prospective", 3)
    assert store.writes == writes  # nothing persisted: on disk it is still unattached in epoch 3
    asked = answer_votes(n, 2 * T + 1, {})
    parts = [m.topics[0].partitions[0] for m in asked]
    assert {(p.candidate_epoch, p.pre_vote, p.last_offset_epoch, p.last_offset) for p in parts} == {(3, True, 3, 2)}
    n.poll(2 * T + 1)
    assert not requests_out(n)  # one request per voter, until it answers
    # Voter 2 grants the pre-vote: a majority of three with its own. Now it stands, epoch 4.
    n2 = node(store=store, pre_vote=True, log=log_with([(3, 2)]), now=10 * T)
    n2.poll(12 * T)
    answer_votes(n2, 12 * T, {2: True})
    assert (n2.role, n2.epoch, n2.voted_for) == ("candidate", 4, 1)
    assert store.state == ElectionState(4, voted_key=ReplicaKey(1, uuid.UUID(int=1)), voters=frozenset({1, 2, 3}))
    assert not answer_votes(n2, 12 * T, {})  # sent at the next poll
    n2.poll(12 * T)
    real = answer_votes(n2, 12 * T, {})
    assert {(m.topics[0].partitions[0].candidate_epoch, m.topics[0].partitions[0].pre_vote) for m in real} \
        == {(4, False)}
    assert (n2.stats.pre_votes_started, n2.stats.elections_started) == (1, 1)


def test_a_follower_whose_leader_went_quiet_asks_first_and_a_refusal_sends_it_back_to_its_leader() -> None:
    n = follower_of_2(MemoryLog(), pre_vote=True)
    state_before = n.quorum.store.read()
    n.poll(FETCH_TIMEOUT)
    assert (n.role, n.epoch, n.leader_id) == ("prospective", 5, 2)  # no epoch bump; the leader kept
    # Voter 3 has fetched from leader 2 in epoch 5: it refuses, and so does the leader.
    answer_votes(n, FETCH_TIMEOUT + 1, {2: False, 3: False}, leader=2)
    assert (n.role, n.epoch, n.leader_id) == ("follower", 5, 2)
    assert n.quorum.store.read() == state_before
    assert n.stats.elections_started == 0
    # Its timer run out with no answer: the same, without a refusal.
    n.poll(2 * FETCH_TIMEOUT + 1)
    assert n.role == "prospective"
    requests_out(n)
    n.poll(2 * FETCH_TIMEOUT + 1 + 2 * T)
    assert (n.role, n.epoch, n.leader_id) == ("follower", 5, 2)


def test_a_refused_prospective_without_a_leader_goes_back_to_unattached_in_its_epoch() -> None:
    n = node(pre_vote=True, log=log_with([(3, 2)]))
    n.poll(2 * T)
    answer_votes(n, 2 * T, {2: False, 3: False})
    assert (n.role, n.epoch, n.leader_id, n.voted_for) == ("unattached", 3, None, None)
    wake = n.poll(2 * T)
    assert 2 * T + T <= wake < 2 * T + 2 * T  # a fresh election timeout, no backoff
    n.poll(wake)
    assert n.role == "prospective" and n.stats.pre_votes_started == 2


def test_a_voter_that_cannot_take_a_pre_vote_makes_the_prospective_stand_at_once() -> None:
    n = node(pre_vote=True)
    n.poll(2 * T)
    (r, _) = requests_out(n)
    unsupported = rpcs.error_response(52, E.UNSUPPORTED_VERSION)  # a Kafka 3.9 voter: no Vote v2
    n.handle_response(InboundResponse(r.destination, r.correlation_id, unsupported), 2 * T + 1)
    assert (n.role, n.epoch) == ("candidate", 1)


def test_a_prospective_grants_one_real_vote_in_its_epoch_and_keeps_asking() -> None:
    store = MemoryQuorumStateStore()
    store.write(ElectionState(4, voters=frozenset({1, 2, 3})), 0)  # it learnt of epoch 4, no leader
    n = node(pre_vote=True, store=store, log=log_with([(3, 1)]))
    n.poll(2 * T)
    assert (n.role, n.epoch, n.voted_for) == ("prospective", 4, None)
    assert granted(ask(n, vote(4, 2, 3, 1), 2 * T + 1, version=2))  # a candidate of its own epoch
    assert (n.role, n.epoch, n.voted_for) == ("prospective", 4, 2)
    assert store.state == ElectionState(4, voted_key=ReplicaKey(2), voters=frozenset({1, 2, 3}))
    assert not granted(ask(n, vote(4, 3, 3, 1), 2 * T + 2, version=2))  # one vote per epoch
    assert granted(ask(n, pre_vote(4, 3, 3, 1), 2 * T + 2, version=2))  # a pre-vote binds nothing


def test_from_kafka_4_0_a_vote_is_kept_when_the_leader_is_learnt_and_written_beside_it() -> None:
    for pre, kept in ((False, None), (True, ReplicaKey(2))):
        store = MemoryQuorumStateStore()
        n = node(store=store, pre_vote=pre)
        assert granted(ask(n, vote(5, 2, 0, 0), 0))
        begin = rpcs.begin_quorum_epoch_request(CLUSTER, 5, 2, Endpoints({L: Address("c2", 9093)}), ReplicaKey(1))
        ask(n, begin, 1)
        assert (n.role, n.leader_id) == ("follower", 2)
        assert store.state == ElectionState(5, leader_id=2, voted_key=kept, voters=frozenset({1, 2, 3}))
        again = node(store=store, pre_vote=pre, now=10)  # restarts a follower, with its vote if kept
        assert (again.role, again.leader_id, again.voted_for) == ("follower", 2, kept and kept.id)


def test_kafka_4_0_candidates_ask_again_after_a_lost_election_and_resigned_leaders_move_on() -> None:
    n = node(pre_vote=True)
    n.poll(2 * T)
    answer_votes(n, 2 * T, {2: True})
    assert (n.role, n.epoch) == ("candidate", 1)
    wake = n.poll(2 * T)
    assert wake <= 2 * T + 2 * T
    n.poll(wake)  # its election timer ran out: ask again, in epoch 1, no backoff
    assert (n.role, n.epoch, n.voted_for) == ("prospective", 1, 1)
    answer_votes(n, wake, {2: True})
    assert (n.role, n.epoch) == ("candidate", 2)
    n.poll(wake)
    answer_votes(n, wake, {2: False, 3: False})  # refused: back off, then ask again
    assert n.quorum.state.backing_off  # type: ignore[union-attr]
    n.poll(n.poll(wake))
    assert (n.role, n.epoch) == ("prospective", 2)
    # A leader that resigned moves to the next epoch when its timer runs out, then asks.
    leader = node(pre_vote=True)
    leader.poll(2 * T)
    answer_votes(leader, 2 * T, {2: True})
    leader.poll(2 * T)
    answer_votes(leader, 2 * T, {2: True})
    assert (leader.role, leader.epoch) == ("leader", 1)
    leader.resign(1)
    leader.poll(3 * T)
    assert leader.role == "resigned"
    leader.poll(3 * T + 2 * T)
    assert (leader.role, leader.epoch, leader.leader_id) == ("prospective", 2, None)


def test_from_kafka_4_1_a_refused_candidate_waits_out_its_election_timeout_with_no_backoff() -> None:
    n = node(pre_vote=True, candidate_backoff=False)
    n.poll(2 * T)
    answer_votes(n, 2 * T, {2: True})
    n.poll(2 * T)
    answer_votes(n, 2 * T + 1, {2: False, 3: False})
    assert (n.role, n.epoch) == ("candidate", 1) and not n.quorum.state.backing_off  # type: ignore[union-attr]
    wake = n.poll(2 * T + 1)
    assert wake >= 2 * T + T  # its election timer, not a backoff of at most 100 ms
    n.poll(wake)
    assert (n.role, n.epoch) == ("prospective", 1)


def test_a_lone_kafka_4_0_voter_elects_itself_at_start_through_its_own_pre_vote() -> None:
    n = node(voters=VoterSet.static({1: Address("c1", 9093)}, L), pre_vote=True)
    assert (n.role, n.epoch) == ("leader", 1)
    assert (n.stats.pre_votes_started, n.stats.elections_started) == (1, 1)


class FailingStore(MemoryQuorumStateStore):
    def write(self, state: ElectionState, kraft_version: int) -> None:
        if state.voted_key is not None:
            raise OSError("disk full")
        super().write(state, kraft_version)


def test_a_vote_that_cannot_be_written_is_not_answered() -> None:
    n = node(store=FailingStore())
    with pytest.raises(OSError):
        n.handle_request(InboundRequest(vote(5, 2, 0, 0), 1, "token", L), 0)
    assert n.take_outbound() == []
    assert n.role == "unattached"


def test_vote_requests_answered_with_kafkas_errors() -> None:
    n = node(log=log_with([(1, 1)]))
    bad_cluster = vote(3, 2, 1, 1).replace(cluster_id="another")
    assert ask(n, bad_cluster, 0) == VoteResponse(error_code=E.INCONSISTENT_CLUSTER_ID)
    bad = vote(3, 2, last_epoch=3, last_offset=1)  # a last epoch at the candidate's own
    assert ask(n, bad, 0).topics[0].partitions[0].error_code == E.INVALID_REQUEST  # type: ignore[union-attr]
    assert granted(ask(n, vote(3, 2, 1, 1), 0))
    stale = ask(n, vote(2, 3, 1, 1), 1)
    assert isinstance(stale, VoteResponse)
    assert (stale.topics[0].partitions[0].error_code, stale.topics[0].partitions[0].leader_epoch) == (
        E.FENCED_LEADER_EPOCH, 3)
    not_me = ask(n, vote(4, 2, 1, 1, voter=3), 2)  # v1 names voter 3, not this node
    assert not_me.topics[0].partitions[0].error_code == E.INVALID_VOTER_KEY  # type: ignore[union-attr]


def test_election_timeouts_are_random_in_t_to_2t() -> None:
    starts = []
    for seed in range(60):
        n = node(seed=seed, election_timeout_ms=T)
        wake = n.poll(0)
        assert T <= wake < 2 * T
        assert n.poll(wake - 1) == wake and n.role == "unattached"
        n.poll(wake)
        assert n.role == "candidate" and n.epoch == 1
        starts.append(wake)
    assert len(set(starts)) > 20  # spread out, not one value


def test_lost_elections_back_off_exponentially_up_to_the_maximum() -> None:
    n = node(election_backoff_max_ms=1000)
    for retries, cap in ((1, 100), (2, 300), (3, 700), (4, 1000), (12, 1000)):
        draws = {n.binary_exponential_backoff_ms(retries) for _ in range(300)}
        assert max(draws) <= cap and all(d % 100 == 0 for d in draws)
        assert max(draws) == cap  # reaches it: 2^retries - 1 steps of 100 ms, capped
    # Preferred successors of a resigned leader: the first at once, then 1000 >> (n-1) doubling.
    assert [strict_exponential_backoff_ms(1000, p, 3) for p in range(4)] == [0, 250, 500, 1000]


def test_a_rejected_candidate_backs_off_without_waiting_out_its_timeout() -> None:
    n = node()
    n.poll(2 * T)
    votes = requests_out(n)
    for r in votes:
        no = rpcs.vote_response(L, 1, E.NONE, 1, None, False, Endpoints())
        n.handle_response(InboundResponse(r.destination, r.correlation_id, no), 2 * T + 5)
    state = n.quorum.state
    assert n.role == "candidate" and state.backing_off  # type: ignore[union-attr]
    wake = n.poll(2 * T + 5)
    assert wake <= 2 * T + 5 + 100  # retries 1: 0 or 100 ms, far below the election timeout
    n.poll(wake)
    assert n.role == "candidate" and n.epoch == 2


# -- the leader ----------------------------------------------------------------------------------

def test_the_winner_opens_its_epoch_with_a_leader_change_record_and_persists_first() -> None:
    store = MemoryQuorumStateStore()
    log = MemoryLog()
    n = node(store=store, log=log)
    elect(n)
    assert store.state == ElectionState(1, leader_id=1, voters=frozenset({1, 2, 3}))
    assert n.take_events()[-1] == LeaderChange(1, 1, 0)
    (batch,) = list(read_batches(log.read(0, 1 << 20)))
    assert batch.is_control and batch.partition_leader_epoch == 1
    kind, message = decode_control_record(batch.records()[0])  # type: ignore[misc]
    assert kind == ControlRecordType.LEADER_CHANGE
    assert (message.leader_id, [v.voter_id for v in message.voters],
            [v.voter_id for v in message.granting_voters]) == (1, [1, 2, 3], [1, 2])


def test_the_high_watermark_waits_for_the_epochs_first_record_and_never_goes_back() -> None:
    log = log_with([(1, 4)])  # a previous epoch left four records, uncommitted as far as we know
    store = MemoryQuorumStateStore()
    store.write(ElectionState(1, leader_id=2, voters=frozenset({1, 2, 3})), 0)
    n = node(log=log, store=store)
    now = elect(n, 3 * FETCH_TIMEOUT)
    assert n.epoch == 2 and n.quorum.state.epoch_start_offset == 4  # type: ignore[union-attr]
    n.poll(now)  # flushes the LeaderChange at offset 4
    assert n.high_watermark is None
    # Voter 2 has the old records only: a majority at 4 is not past the epoch's start.
    partition(ask(n, fetch(2, 4, 1, replica=2), now + 1))
    assert n.high_watermark is None
    # Voter 2 has the LeaderChange too: offsets below 5 are committed, the old ones with it.
    assert partition(ask(n, fetch(2, 5, 2, replica=2), now + 2)).high_watermark == 5
    assert n.high_watermark == 5 and HighWatermark(5) in n.take_events()
    # A voter behind (3 at 0) does not pull it back.
    partition(ask(n, fetch(2, 0, 0, replica=3), now + 3))
    assert n.high_watermark == 5


def test_an_observer_does_not_count_towards_the_high_watermark() -> None:
    n = node()
    now = elect(n)
    n.poll(now)
    partition(ask(n, fetch(1, 1, 1, replica=9), now + 1))  # an observer, caught up
    assert n.high_watermark is None
    partition(ask(n, fetch(1, 1, 1, replica=3), now + 2))
    assert n.high_watermark == 1


def test_check_quorum_a_leader_unheard_by_a_majority_for_1_5_fetch_timeouts_resigns() -> None:
    n = node(fetch_timeout_ms=FETCH_TIMEOUT)
    start = elect(n)
    n.poll(start)
    limit = start + FETCH_TIMEOUT * 3 // 2
    for t in range(start + 500, limit, 500):  # voter 2 keeps fetching: with the leader, a majority
        ask(n, fetch(1, 1, 1, replica=2), t)
        n.poll(t)
    assert n.role == "leader"
    last = limit - 500  # the last fetch
    assert n.poll(last + 1) <= last + FETCH_TIMEOUT * 3 // 2
    n.poll(last + FETCH_TIMEOUT * 3 // 2 - 1)
    assert n.role == "leader"
    n.poll(last + FETCH_TIMEOUT * 3 // 2)
    assert n.role == "resigned" and n.epoch == 1
    # and it tells the voters, the most caught-up first among its preferred successors
    ends = [r for r in requests_out(n) if r.message.api_key() == 54]
    assert {r.destination for r in ends} == {2, 3}
    part = ends[0].message.topics[0].partitions[0]  # type: ignore[union-attr]
    assert part.preferred_successors == [2, 3]


def test_appends_are_written_after_the_linger_and_only_by_the_leader_of_that_epoch() -> None:
    n = node(append_linger_ms=25)
    now = elect(n)
    n.poll(now)
    with pytest.raises(NotLeaderError):
        n.append(2, [b"x"], now)
    assert n.append(1, [b"a", b"b"], now) == 2  # offsets 1 and 2, after the LeaderChange at 0
    assert n.append(1, [b"c"], now + 5) == 3
    assert n.poll(now + 5) == now + 25 and n.log.end_offset == 1
    n.poll(now + 25)
    assert n.log.end_offset == 4 and n.log.flushed_end_offset == 4
    follower = node(2)
    with pytest.raises(NotLeaderError):
        follower.append(0, [b"x"], 0)


# -- fetch, on the leader -----------------------------------------------------------------------

def test_fetch_answers_with_the_records_and_tells_a_diverged_follower_where_to_truncate() -> None:
    log = log_with([(1, 3), (3, 2)])  # epoch 1: offsets 0-2, epoch 3: 3-4
    store = MemoryQuorumStateStore()
    store.write(ElectionState(3, leader_id=2, voters=frozenset({1, 2, 3})), 0)
    n = node(log=log, store=store)
    now = elect(n, 3 * FETCH_TIMEOUT)
    n.poll(now)  # epoch 4 from offset 5
    ok = partition(ask(n, fetch(4, 3, 3), now))
    assert [b.base_offset for b in read_batches(bytes(ok.records or b""))] == [3, 4, 5]
    # A follower whose offsets 3.. are from epoch 2: it agrees up to the end of epoch 1.
    diverged = partition(ask(n, fetch(4, 4, 2), now))
    assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (1, 3)
    assert not diverged.records
    # One with more epoch-3 records than the leader: back to where epoch 3 ends here.
    ahead = partition(ask(n, fetch(4, 7, 3), now))
    assert (ahead.diverging_epoch.epoch, ahead.diverging_epoch.end_offset) == (3, 5)


def test_a_follower_behind_the_log_start_or_empty_is_sent_to_the_snapshot() -> None:
    n = node()
    now = elect(n)
    n.poll(now)
    for i in range(3):
        n.append(1, [b"r%d" % i], now)
    n.poll(now + 100)
    partition(ask(n, fetch(1, 4, 1, replica=2), now + 101))  # commits 0-3
    sid = n.log.take_snapshot(3)  # type: ignore[attr-defined]
    assert sid == OffsetAndEpoch(3, 1) and n.log.delete_before_snapshot(sid)  # type: ignore[attr-defined]
    for offset in (0, 2):
        p = partition(ask(n, fetch(1, offset, 1 if offset else 0, replica=3), now + 102))
        assert (p.snapshot_id.end_offset, p.snapshot_id.epoch) == (3, 1) and not p.records
    ok = partition(ask(n, fetch(1, 3, 1, replica=3), now + 103))
    assert ok.snapshot_id.end_offset == -1 and ok.log_start_offset == 3


def test_fetch_errors_in_kafkas_order() -> None:
    follower = node(2)
    assert partition(ask(follower, fetch(0, 0, 0, replica=3), 0)).error_code == E.NOT_LEADER_OR_FOLLOWER
    n = node()
    now = elect(n)
    n.poll(now)
    assert partition(ask(n, fetch(0, 0, 0), now)).error_code == E.FENCED_LEADER_EPOCH
    assert partition(ask(n, fetch(2, 0, 0), now)).error_code == E.UNKNOWN_LEADER_EPOCH
    assert partition(ask(n, fetch(1, -1, 0), now)).error_code == E.INVALID_REQUEST
    assert ask(n, fetch(1, 0, 0).replace(cluster_id="x"), now) == FetchResponse(error_code=E.INCONSISTENT_CLUSTER_ID)
    n.shutdown(5000, now)
    assert partition(ask(n, fetch(1, 0, 0), now)).error_code == E.BROKER_NOT_AVAILABLE


def test_a_fetch_with_nothing_new_waits_until_data_or_its_max_wait() -> None:
    n = node(append_linger_ms=0)
    now = elect(n)
    n.poll(now)
    assert ask(n, fetch(1, 1, 1, wait=500), now) is None  # parked
    assert n.poll(now) == now + 500
    n.append(1, [b"new"], now + 100)
    n.poll(now + 100)
    (answer,) = [o for o in n.take_outbound() if isinstance(o, OutboundResponse)]
    assert answer.reply_to == "token"
    assert [b.base_offset for b in read_batches(bytes(partition(answer.message).records or b""))] == [1]
    # The fetch of offset 2 commits offset 1, which the fetcher was told was not committed: it is
    # answered at once with the new high watermark.
    told = ask(n, fetch(1, 2, 1, wait=500), now + 150)
    assert told is not None and partition(told).high_watermark == 2 and not partition(told).records
    # Nothing new: answered at the deadline with the first answer.
    assert ask(n, fetch(1, 2, 1, wait=500), now + 200) is None
    n.poll(now + 699)
    assert not n.take_outbound()
    n.poll(now + 700)
    (late,) = n.take_outbound()
    assert isinstance(late, OutboundResponse) and not partition(late.message).records


def test_a_parked_fetch_holding_uncommitted_records_is_answered_when_they_commit() -> None:
    """A fetcher served records before the leader's flush completed (so before their commit)
    polls at the end: the commit of what it holds answers it with the new high watermark, not
    its MaxWaitMs (kraftsim's rule beside Kafka's log-end rule: see purgatory.py)."""
    lone = VoterSet.static({1: Address("c1", 9093)}, L)
    log = MemoryLog(sync_flush=False)
    n = node(voters=lone, log=log, append_linger_ms=0)
    now = 10
    n.poll(now)
    log.complete_flush()
    n.poll(now)  # the LeaderChange is committed
    start = log.end_offset
    assert n.high_watermark == start
    n.append(n.epoch, [b"a", b"b"], now)
    n.poll(now)  # written; its flush asked for and not done
    end = log.end_offset
    assert end == start + 2 and n.high_watermark == start
    served = partition(ask(n, fetch(n.epoch, start, n.epoch, replica=7), now))
    assert served.high_watermark == start and served.records
    assert ask(n, fetch(n.epoch, end, n.epoch, replica=7, wait=60_000), now) is None  # parked at the end
    n.poll(now + 1)
    assert not n.take_outbound()
    log.complete_flush()
    n.poll(now + 2)
    (answer,) = [o for o in n.take_outbound() if isinstance(o, OutboundResponse)]
    p = partition(answer.message)
    assert p.high_watermark == end and not p.records
    # A fetcher with nothing uncommitted keeps waiting for new records.
    assert ask(n, fetch(n.epoch, end, n.epoch, replica=7, wait=60_000), now + 3) is None
    n.poll(now + 4)
    assert not n.take_outbound()


def test_a_fetch_holding_records_committed_since_its_last_answer_is_answered_at_once() -> None:
    """The same fetcher, but the flush completes between two of its fetches: its next fetch at
    the end is answered at once with the new high watermark (it was told they were uncommitted),
    where a purgatory keyed on the log end alone would hold it for its whole MaxWaitMs."""
    lone = VoterSet.static({1: Address("c1", 9093)}, L)
    log = MemoryLog(sync_flush=False)
    n = node(voters=lone, log=log, append_linger_ms=0)
    now = 10
    n.poll(now)
    log.complete_flush()
    n.poll(now)
    start = log.end_offset
    n.append(n.epoch, [b"a", b"b"], now)
    n.poll(now)
    end = log.end_offset
    served = partition(ask(n, fetch(n.epoch, start, n.epoch, replica=7), now))
    assert served.high_watermark == start and served.records
    log.complete_flush()
    n.poll(now + 1)
    assert n.high_watermark == end
    told = ask(n, fetch(n.epoch, end, n.epoch, replica=7, wait=60_000), now + 2)
    assert told is not None and partition(told).high_watermark == end and not partition(told).records
    # Told now: the next fetch at the end waits for new records.
    assert ask(n, fetch(n.epoch, end, n.epoch, replica=7, wait=60_000), now + 3) is None


def fetch_v18(n: RaftNode, offset: int, high_watermark: int, now: int, replica: int = 7,
              wait: int = 60_000) -> RaftResponse | None:
    """A Fetch v18 (Kafka 4.1) from ``replica`` at ``offset`` holding ``high_watermark``."""
    return ask(n, rpcs.fetch_request(CLUSTER, ReplicaKey(replica), n.epoch, offset, n.epoch, wait, high_watermark),
               now, version=18)


def test_a_v18_fetch_whose_high_watermark_is_behind_the_leaders_is_answered_at_once() -> None:
    """Kafka 4.1's leader (KIP-1166) answers a fetch at once when the fetcher's HighWatermark is
    behind its own, and parks one that holds the leader's, until new records or its MaxWaitMs."""
    n = node(append_linger_ms=0)
    now = elect(n)
    n.poll(now)
    assert ask(n, fetch(1, 1, 1, replica=2), now) is not None  # voter 2 acknowledges: offset 0 committed
    end = n.log.end_offset
    assert n.high_watermark == end == 1
    # A fetcher at the end the leader never answered (so nothing told it the high watermark):
    # by the high watermark it sends (-1, none known), it is behind.
    stale = fetch_v18(n, end, -1, now, replica=3)
    assert stale is not None and partition(stale).high_watermark == end and not partition(stale).records
    # The same fetch below v18 says nothing of its high watermark: it waits.
    assert ask(n, fetch(1, end, 1, replica=7, wait=500), now) is None
    # Holding the leader's high watermark, it waits too: until new records ...
    assert fetch_v18(n, end, end, now, replica=3, wait=500) is None
    n.append(n.epoch, [b"new"], now + 10)
    n.poll(now + 10)
    answers = [o.message for o in n.take_outbound() if isinstance(o, OutboundResponse)]
    assert len(answers) == 2 and all(partition(a).records for a in answers)
    # ... or its MaxWaitMs, answered then with its first answer.
    end = n.log.end_offset
    assert ask(n, fetch(1, end, 1, replica=2), now + 20) is not None  # offset 1 committed
    assert n.high_watermark == end
    assert fetch_v18(n, end, end, now + 20, replica=3, wait=500) is None
    n.poll(now + 519)
    assert not n.take_outbound()
    n.poll(now + 520)
    (late,) = n.take_outbound()
    assert isinstance(late, OutboundResponse) and partition(late.message).high_watermark == end
    assert not partition(late.message).records


def test_a_parked_v18_fetch_is_answered_when_the_high_watermark_moves() -> None:
    """A v18 fetch parked at the end is answered when the high watermark moves at all (Kafka 4.1
    completes its purgatory then), even short of the records it holds; below v18, only when they
    are committed (kraftsim's rule: see purgatory.py)."""
    n = node(append_linger_ms=0)
    now = elect(n)
    n.poll(now)
    assert ask(n, fetch(1, 1, 1, replica=2), now) is not None
    n.append(n.epoch, [b"a"], now)
    n.poll(now)
    n.append(n.epoch, [b"b"], now)
    n.poll(now)
    end = n.log.end_offset
    assert (n.high_watermark, end) == (1, 3)
    assert fetch_v18(n, end, 1, now, replica=7) is None  # holds the leader's high watermark: parked
    assert ask(n, fetch(1, end, 1, replica=8, wait=60_000), now) is None  # v17, told nothing: parked
    assert ask(n, fetch(1, 2, 1, replica=2), now + 1) is not None  # voter 2 has offset 1: committed
    n.poll(now + 1)
    (answer,) = [o for o in n.take_outbound() if isinstance(o, OutboundResponse)]
    assert partition(answer.message).high_watermark == 2 and not partition(answer.message).records
    assert len(n.purgatory) == 1  # the v17 fetch still waits: what it holds is not all committed


def test_parked_fetches_are_answered_not_leader_when_the_leader_resigns() -> None:
    n = node()
    now = elect(n)
    n.poll(now)
    assert ask(n, fetch(1, 1, 1, wait=500), now) is None
    n.resign(1)
    n.poll(now + 1)
    answers = [o for o in n.take_outbound() if isinstance(o, OutboundResponse)]
    assert [partition(a.message).error_code for a in answers] == [E.NOT_LEADER_OR_FOLLOWER]
    assert n.role == "resigned"


def test_describe_quorum_from_the_leader_and_from_anyone_else() -> None:
    n = node()
    now = elect(n)
    n.poll(now)
    ask(n, fetch(1, 1, 1, replica=2), now + 10)
    ask(n, fetch(1, 1, 1, replica=7), now + 10)
    request = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
    r = ask(n, request, now + 20, version=2)
    assert isinstance(r, DescribeQuorumResponse)
    p = r.topics[0].partitions[0]
    assert (p.leader_id, p.leader_epoch, p.high_watermark) == (1, 1, 1)
    assert [(v.replica_id, v.log_end_offset) for v in p.current_voters] == [(1, 1), (2, 1), (3, -1)]
    assert [(o.replica_id, o.last_fetch_timestamp) for o in p.observers] == [(7, now + 10)]
    assert [node.node_id for node in r.nodes] == [1, 2, 3]
    other = ask(node(2), request, 0, version=2)
    assert other.topics[0].partitions[0].error_code == E.NOT_LEADER_OR_FOLLOWER  # type: ignore[union-attr]


# -- the follower --------------------------------------------------------------------------------

def follower_of_2(log: MemoryLog, epoch: int = 5, **kw: bool) -> RaftNode:
    n = node(log=log, **kw)
    begin = rpcs.begin_quorum_epoch_request(CLUSTER, epoch, 2, Endpoints({L: Address("c2", 9093)}), ReplicaKey(1))
    assert ask(n, begin, 0).topics[0].partitions[0].error_code == 0  # type: ignore[union-attr]
    assert (n.role, n.epoch, n.leader_id) == ("follower", epoch, 2)
    return n


def fetch_answer(n: RaftNode, now: int, **part: object) -> None:
    """Answer the node's outstanding Fetch with a partition built from ``part``."""
    (request,) = requests_out(n)
    assert isinstance(request.message, FetchRequest)
    response = rpcs.fetch_response(L, 17, E.NONE, n.epoch, 2, Endpoints({L: Address("c2", 9093)}))
    p = response.responses[0].partitions[0]
    for k, v in part.items():
        setattr(p, k, v)
    n.handle_response(InboundResponse(2, request.correlation_id, response), now)


def test_a_follower_appends_what_it_fetched_and_follows_the_leaders_high_watermark() -> None:
    leader_log = log_with([(5, 3)])
    n = follower_of_2(MemoryLog())
    n.poll(1)
    fetch_answer(n, 2, records=leader_log.read(0, 1 << 20), high_watermark=2)
    assert (n.log.end_offset, n.log.flushed_end_offset, n.high_watermark) == (3, 3, 2)
    n.poll(3)
    (next_fetch,) = requests_out(n)
    part = next_fetch.message.topics[0].partitions[0]  # type: ignore[union-attr]
    assert (part.fetch_offset, part.last_fetched_epoch) == (3, 5)
    assert part.high_watermark == 2  # its own, for Fetch v18 (Kafka 4.1); left out below v18


def test_a_follower_truncates_its_divergent_tail_but_never_below_its_high_watermark() -> None:
    log = log_with([(3, 2), (4, 3)])  # offsets 0-1 epoch 3, 2-4 epoch 4 (uncommitted)
    n = follower_of_2(log)
    n.poll(1)
    fetch_answer(n, 2, diverging_epoch=FetchResponse.EpochEndOffset(epoch=3, end_offset=2))
    assert log.end_offset == 2 and log.last_fetched_epoch() == 3 and n.stats.truncations == 1
    n.poll(3)
    fetch_answer(n, 4, records=log_with([(3, 2), (5, 1)]).read(2, 1 << 20), high_watermark=3)
    assert n.high_watermark == 3
    n.poll(5)
    with pytest.raises(RaftStateError, match="below the high watermark"):
        fetch_answer(n, 6, diverging_epoch=FetchResponse.EpochEndOffset(epoch=3, end_offset=1))


def test_a_follower_fetches_a_snapshot_in_chunks_and_restarts_its_log_there() -> None:
    source = log_with([(2, 6)])
    source.update_high_watermark(6)
    sid = source.take_snapshot(6)
    assert sid is not None
    data = source.snapshots[sid]
    n = follower_of_2(MemoryLog())
    n.poll(1)
    fetch_answer(n, 2, snapshot_id=FetchResponse.SnapshotId(end_offset=6, epoch=2))
    position, now = 0, 3
    while position < len(data):
        n.poll(now)
        (request,) = requests_out(n)
        p = request.message.topics[0].partitions[0]  # type: ignore[union-attr]
        assert p.position == position
        chunk = data[position:position + 100]
        response = rpcs.fetch_snapshot_response(L, 1, E.NONE, 5, 2, Endpoints())
        ps = response.topics[0].partitions[0]
        ps.snapshot_id = FetchSnapshotResponse.SnapshotId(end_offset=6, epoch=2)
        ps.size, ps.position, ps.unaligned_records = len(data), position, chunk
        n.handle_response(InboundResponse(2, request.correlation_id, response), now)
        position += len(chunk)
        now += 1
    assert (n.log.start_offset, n.log.end_offset, n.log.last_fetched_epoch(), n.high_watermark) == (6, 6, 2, 6)
    assert n.stats.snapshots_fetched == 1 and n.log.snapshots[sid] == data


def test_end_quorum_epoch_makes_the_first_preferred_successor_stand_at_once() -> None:
    def resigned_to(n: RaftNode, successors: list[int]) -> None:
        end = rpcs.end_quorum_epoch_request(CLUSTER, 5, 2, Endpoints(), [ReplicaKey(i) for i in successors])
        assert ask(n, end, 100).topics[0].partitions[0].error_code == 0  # type: ignore[union-attr]

    first = follower_of_2(MemoryLog())
    resigned_to(first, [1, 3])
    first.poll(100)
    assert first.role == "candidate" and first.epoch == 6
    second = follower_of_2(MemoryLog())
    resigned_to(second, [3, 1])
    second.poll(100 + 499)
    assert second.role == "follower"
    second.poll(100 + 500)  # 1000 >> 1 for the second of two
    assert second.role == "candidate"


def test_a_follower_without_answers_from_its_leader_stands_after_the_fetch_timeout() -> None:
    n = follower_of_2(MemoryLog())
    n.poll(FETCH_TIMEOUT - 1)
    assert n.role == "follower"
    n.poll(FETCH_TIMEOUT)
    assert n.role == "candidate" and n.epoch == 6


def test_a_restarted_leader_comes_back_resigned_in_its_epoch() -> None:
    store, log = MemoryQuorumStateStore(), MemoryLog()
    n = node(store=store, log=log)
    elect(n)
    log.crash()
    again = node(store=store, log=log, now=10_000)
    assert (again.role, again.epoch) == ("resigned", 1)
    assert not granted(ask(again, vote(1, 2, 0, 5), 10_001))  # no second vote in the epoch it led


def test_a_lone_voter_elects_itself_at_start() -> None:
    n = node(voters=VoterSet.static({1: Address("c1", 9093)}, L))
    assert (n.role, n.epoch) == ("leader", 1)


def test_graceful_shutdown_resigns_tells_the_voters_and_completes_once_another_leads() -> None:
    n = node()
    now = elect(n)
    n.poll(now)
    n.take_outbound()
    n.shutdown(5000, now + 1)
    n.poll(now + 1)
    assert n.role == "resigned"
    assert {r.destination for r in requests_out(n) if r.message.api_key() == 54} == {2, 3}
    begin = rpcs.begin_quorum_epoch_request(CLUSTER, 2, 3, Endpoints({L: Address("c3", 9093)}), ReplicaKey(1))
    ask(n, begin, now + 50)
    n.poll(now + 50)
    assert ShutdownComplete(timed_out=False) in n.take_events()
    assert n.poll(now + 60) == NEVER


# -- storage -------------------------------------------------------------------------------------

def test_unflushed_records_are_lost_in_a_crash() -> None:
    log = MemoryLog(sync_flush=False)
    log.append_as_leader([b"a"], epoch=1, timestamp=0)
    log.flush()
    log.complete_flush()
    log.append_as_leader([b"b"], epoch=1, timestamp=0)
    log.flush()  # asked, not done
    log.append_as_leader([b"c"], epoch=2, timestamp=0)
    assert (log.end_offset, log.flushed_end_offset) == (3, 1)
    log.crash()
    assert (log.end_offset, log.last_fetched_epoch()) == (1, 1)
    assert log.generation == 1


def test_the_log_validates_fetch_offsets_and_truncates_to_the_leaders_end_offset_as_kafka() -> None:
    log = log_with([(1, 3), (3, 2)])
    assert validate_offset_and_epoch(log, 0, 0).kind is Validity.VALID
    assert validate_offset_and_epoch(log, 5, 3).kind is Validity.VALID
    d = validate_offset_and_epoch(log, 4, 2)
    assert (d.kind, d.offset_and_epoch) == (Validity.DIVERGING, OffsetAndEpoch(3, 1))
    assert truncate_to_end_offset(log, OffsetAndEpoch(3, 1)) == 3 and log.end_offset == 3
    log.update_high_watermark(2)
    with pytest.raises(LogStateError):
        log.truncate_to(1)


def test_the_quorum_state_file_is_kafkas_json(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path / "quorum-state")
    assert store.read() is None
    voted = ElectionState(7, voted_key=ReplicaKey(2, uuid.UUID(int=5)), voters=frozenset({1, 2, 3}))
    store.write(voted, kraft_version=0)
    assert json.loads((tmp_path / "quorum-state").read_text()) == {
        "clusterId": "", "leaderId": -1, "leaderEpoch": 7, "votedId": 2, "appliedOffset": 0,
        "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}], "data_version": 0}
    assert store.read() == ElectionState(7, voted_key=ReplicaKey(2), voters=frozenset({1, 2, 3}))
    store.write(voted, kraft_version=1)
    assert json.loads((tmp_path / "quorum-state").read_text()) == {
        "leaderId": -1, "leaderEpoch": 7, "votedId": 2, "votedDirectoryId": "AAAAAAAAAAAAAAAAAAAABQ", "data_version": 1}
    assert store.read() == ElectionState(7, voted_key=ReplicaKey(2, uuid.UUID(int=5)))


@pytest.mark.parametrize("api_key,versions", [(1, range(13, 18)), (52, range(2)), (53, range(2)), (54, range(2)),
                                              (59, range(2))])
def test_the_nodes_requests_encode_at_every_kafka_3_9_version(api_key: int, versions: range) -> None:
    k1, k2 = ReplicaKey(1, uuid.UUID(int=1)), ReplicaKey(2, uuid.UUID(int=2))
    here = Endpoints({L: Address("c1", 9093)})
    message: RaftRequest = {
        1: rpcs.fetch_request(CLUSTER, k2, 3, 10, 2, 500),
        52: rpcs.vote_request(CLUSTER, 3, k1, k2, OffsetAndEpoch(5, 2)),
        53: rpcs.begin_quorum_epoch_request(CLUSTER, 3, 1, here, k2),
        54: rpcs.end_quorum_epoch_request(CLUSTER, 3, 1, here, [k2]),
        59: rpcs.fetch_snapshot_request(CLUSTER, k2, 3, OffsetAndEpoch(5, 2), 0, 100),
    }[api_key]
    for v in versions:
        sent = rpcs.for_version(message, v)
        back = type(message).decode(sent.encode(v), v)
        if api_key == 1:
            assert rpcs.fetch_replica_id(back) == 2  # type: ignore[arg-type]

"""The epoch states a replica can be in, but the leader's (``leader_state.py``), each with the
timers it runs and its answer to "may I vote for this candidate?" (Kafka's EpochState family).

Kafka 3.9 has no separate Voted state: a voter that granted its vote in an epoch is Unattached
with ``voted_key`` set, and stays so until it learns the leader or its election timer fires.
:attr:`UnattachedState.role` still calls it "voted" for people reading summaries.

KIP-996 (Kafka 4.0) puts :class:`ProspectiveState` before Candidate: a voter whose timer fires
first asks the others (Vote with PreVote, in its current epoch, nothing persisted) whether they
would vote for it, and only stands if a majority would. Each state here answers such a pre-vote
as Kafka 4.0's does (``pre_vote`` of ``can_grant_vote``). From Kafka 4.0 a replica also keeps the
vote it cast when it moves within the epoch (to Follower, to Prospective and back), so
``quorum-state`` may name both the leader and the vote.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from kraftsim.raft.core.election_state import ElectionState
from kraftsim.raft.core.keys import ReplicaKey
from kraftsim.raft.core.log import SnapshotWriter
from kraftsim.raft.core.timer import Timer
from kraftsim.raft.core.voters import NO_ENDPOINTS, Endpoints


@dataclass(slots=True)
class UnattachedState:
    """No leader known in this epoch (or its endpoint unknown); maybe voted."""

    epoch: int
    voters: frozenset[int]
    election_timeout_ms: int
    election_timer: Timer
    leader_id: int | None = None
    voted_key: ReplicaKey | None = None
    high_watermark: int | None = None

    @property
    def role(self) -> str:
        return "voted" if self.voted_key is not None else "unattached"

    @property
    def leader_endpoints(self) -> Endpoints:
        return NO_ENDPOINTS

    def election(self) -> ElectionState:
        # Both only from Kafka 4.0 (a vote kept within the epoch); Kafka 3.9 never has both.
        return ElectionState(self.epoch, leader_id=self.leader_id, voted_key=self.voted_key, voters=self.voters)

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool = False) -> bool:
        return unattached_or_prospective_can_grant_vote(self.leader_id, self.voted_key, candidate, log_up_to_date,
                                                        pre_vote)


def unattached_or_prospective_can_grant_vote(leader_id: int | None, voted_key: ReplicaKey | None,
                                             candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool) -> bool:
    """One vote per epoch: again for the same candidate, never for another; none once the leader
    is known; otherwise only to a candidate whose log is at least as up to date. A pre-vote (Vote
    v2, Kafka 4.0) binds nothing: granted to any up-to-date log."""
    if pre_vote:
        return log_up_to_date
    if voted_key is not None:
        if voted_key.id == candidate.id:
            return voted_key.directory_id is None or voted_key.directory_id == candidate.directory_id
        return False
    if leader_id is not None:
        return False
    return log_up_to_date


class Vote(enum.Enum):
    UNRECORDED = 0
    GRANTED = 1
    REJECTED = 2


class _VoteTally:
    """One election's answers, counted: a candidate's votes and a prospective voter's pre-votes
    alike (Kafka's EpochElection); each state keeps its own rule for recording an answer."""

    __slots__ = ()
    votes: dict[int, Vote]

    def majority_size(self) -> int:
        return len(self.votes) // 2 + 1

    def _count(self, vote: Vote) -> int:
        return sum(1 for v in self.votes.values() if v is vote)

    def is_vote_granted(self) -> bool:
        return self._count(Vote.GRANTED) >= self.majority_size()

    def is_vote_rejected(self) -> bool:
        """No majority is possible any more."""
        return self._count(Vote.GRANTED) + self._count(Vote.UNRECORDED) < self.majority_size()


@dataclass(slots=True)
class CandidateState(_VoteTally):
    """Standing for election in this epoch: counting votes, then backing off if it lost."""

    local_key: ReplicaKey
    epoch: int
    voters: list[ReplicaKey]
    retries: int
    election_timer: Timer
    backoff_timer: Timer
    high_watermark: int | None = None
    backing_off: bool = False
    votes: dict[int, Vote] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.votes:
            self.votes = {k.id: Vote.UNRECORDED for k in self.voters}
            self.votes[self.local_key.id] = Vote.GRANTED

    role = "candidate"
    leader_id = None

    @property
    def voted_key(self) -> ReplicaKey:
        return self.local_key

    @property
    def leader_endpoints(self) -> Endpoints:
        return NO_ENDPOINTS

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, voted_key=self.local_key, voters=frozenset(self.votes))

    def record(self, voter_id: int, granted: bool) -> bool:
        """A voter's answer; whether it was new. A voter cannot change its answer in an epoch,
        so a contrary answer means a broken voter (ValueError, as Kafka's IllegalArgument)."""
        current = self.votes.get(voter_id)
        if current is None:
            raise ValueError(f"vote from non-voter {voter_id}")
        new = Vote.GRANTED if granted else Vote.REJECTED
        if current is not Vote.UNRECORDED and current is not new:
            raise ValueError(f"voter {voter_id} answered {new.name} after {current.name} in epoch {self.epoch}")
        self.votes[voter_id] = new
        return current is Vote.UNRECORDED

    def unrecorded_voters(self) -> list[ReplicaKey]:
        return [k for k in self.voters if self.votes[k.id] is Vote.UNRECORDED]

    def granting_voters(self) -> list[int]:
        return sorted(i for i, v in self.votes.items() if v is Vote.GRANTED)

    def start_backing_off(self, now_ms: int, backoff_ms: int) -> None:
        self.backoff_timer.reset(now_ms, backoff_ms)
        self.backing_off = True

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool = False) -> bool:
        return pre_vote and log_up_to_date  # it voted for itself in this epoch; a pre-vote binds nothing


@dataclass(slots=True)
class ProspectiveState(_VoteTally):
    """Asking for pre-votes in the current epoch (KIP-996, Kafka 4.0): a majority granted and it
    stands (Candidate, the epoch bumped); a majority refused, or its election timer run out, and
    it goes back to following the leader it knew, or to Unattached. It keeps what the state it
    left knew of the epoch (the leader, the vote it cast), and is never persisted: on disk it is
    still that state (Kafka's ProspectiveState, entered by a memory-only transition)."""

    local_key: ReplicaKey
    epoch: int
    voters: list[ReplicaKey]
    retries: int
    election_timer: Timer
    leader_id: int | None = None
    leader_endpoints: Endpoints = NO_ENDPOINTS
    voted_key: ReplicaKey | None = None
    high_watermark: int | None = None
    votes: dict[int, Vote] = field(default_factory=dict)

    role = "prospective"

    def __post_init__(self) -> None:
        if not self.votes:
            self.votes = {k.id: Vote.UNRECORDED for k in self.voters}
            self.votes[self.local_key.id] = Vote.GRANTED

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, leader_id=self.leader_id, voted_key=self.voted_key,
                             voters=frozenset(self.votes))

    def record(self, voter_id: int, granted: bool) -> bool:
        """A voter's answer; whether it was new. A pre-vote binds nothing, so a later answer
        replaces an earlier one (Kafka's EpochElection.recordVote)."""
        current = self.votes.get(voter_id)
        if current is None:
            raise ValueError(f"pre-vote from non-voter {voter_id}")
        if voter_id == self.local_key.id and not granted:
            raise ValueError("a prospective replica cannot refuse itself")
        self.votes[voter_id] = Vote.GRANTED if granted else Vote.REJECTED
        return current is Vote.UNRECORDED

    def unrecorded_voters(self) -> list[ReplicaKey]:
        return [k for k in self.voters if self.votes[k.id] is Vote.UNRECORDED]

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool = False) -> bool:
        return unattached_or_prospective_can_grant_vote(self.leader_id, self.voted_key, candidate, log_up_to_date,
                                                        pre_vote)


@dataclass(slots=True)
class FollowerState:
    """Following a known leader: fetching from it, and standing if it goes quiet."""

    epoch: int
    leader_id: int
    leader_endpoints: Endpoints
    voters: frozenset[int]
    fetch_timeout_ms: int
    fetch_timer: Timer
    high_watermark: int | None = None
    fetching_snapshot: SnapshotWriter | None = None
    # Whether a fetch (or FetchSnapshot) of this epoch was answered: until then a pre-vote may
    # be granted, as the leader may be gone already (Kafka 4.0's hasFetchedFromLeader).
    has_fetched_from_leader: bool = False
    # The vote this replica cast in the epoch, kept when it learnt the leader (Kafka 4.0; Kafka
    # 3.9 forgets it, and writes only the leader).
    voted_key: ReplicaKey | None = None
    # A voter whose entry in the voter set is out of date (its listeners, its kraft.version
    # range) asks the leader to update it (UpdateRaftVoter) once per period: three fetch
    # timeouts, a few rounds of Fetch first (Kafka's FollowerState.updateVoterPeriodMs).
    update_voter_timer: Timer = field(init=False)

    role = "follower"

    def __post_init__(self) -> None:
        start = self.fetch_timer.deadline_ms - self.fetch_timeout_ms
        self.update_voter_timer = Timer(start, self.update_voter_period_ms)

    @property
    def update_voter_period_ms(self) -> int:
        return self.fetch_timeout_ms * 3

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, leader_id=self.leader_id, voted_key=self.voted_key, voters=self.voters)

    def reset_fetch_timeout(self, now_ms: int) -> None:
        """After a successful Fetch or FetchSnapshot answer from the leader."""
        self.fetch_timer.reset(now_ms, self.fetch_timeout_ms)
        self.has_fetched_from_leader = True

    def update_high_watermark(self, offset: int) -> bool:
        """Whether it moved. Backwards is a broken leader or log (ValueError)."""
        if self.high_watermark is not None:
            if offset < 0:
                raise ValueError(f"negative high watermark {offset}")
            if offset < self.high_watermark:
                raise ValueError(f"high watermark going back from {self.high_watermark} to {offset}")
            if offset == self.high_watermark:
                return False
        self.high_watermark = offset
        return True

    def set_fetching_snapshot(self, writer: SnapshotWriter | None) -> None:
        if self.fetching_snapshot is not None:
            self.fetching_snapshot.close()
        self.fetching_snapshot = writer

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool = False) -> bool:
        # It has a leader in this epoch; a pre-vote only while that leader has not answered yet.
        return pre_vote and not self.has_fetched_from_leader and log_up_to_date

    def close(self) -> None:
        self.set_fetching_snapshot(None)


@dataclass(slots=True)
class ResignedState:
    """A leader that stepped down (shutting down, or no longer hearing a majority). It stays in
    its epoch, accepts no writes and grants no vote, and tells the voters (EndQuorumEpoch) so
    that they need not wait out their fetch timeouts."""

    local_id: int
    epoch: int
    voters: frozenset[int]
    election_timer: Timer
    preferred_successors: list[ReplicaKey]
    leader_endpoints: Endpoints
    unacked_voters: set[int] = field(default_factory=set)

    role = "resigned"
    voted_key = None

    @property
    def leader_id(self) -> int:
        return self.local_id

    def __post_init__(self) -> None:
        if not self.unacked_voters:
            self.unacked_voters = set(self.voters) - {self.local_id}

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, leader_id=self.local_id, voters=self.voters)

    @property
    def high_watermark(self) -> int | None:
        return None

    def acknowledge(self, voter_id: int) -> None:
        if voter_id not in self.voters:
            raise ValueError(f"EndQuorumEpoch acknowledged by non-voter {voter_id}")
        self.unacked_voters.discard(voter_id)

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool = False) -> bool:
        return pre_vote and log_up_to_date

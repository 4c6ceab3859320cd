"""This replica as the leader of an epoch: the replicas' progress, the high watermark, and the
leader's own health check (Kafka's LeaderState).

The high watermark is the end offset a majority of voters has reached (the leader's own is what
it flushed, a follower's is its fetch offset, which it sends only once its log is flushed). It
exposes nothing until that offset is past the epoch's start, i.e. until the LeaderChange record
that opens the epoch is committed: only then is the new leader sure its log holds everything any
previous leader committed, so only then can it tell anyone what is committed. After that it only
moves forward.

Check-quorum: a leader that has not heard a Fetch (or FetchSnapshot) from a majority of voters
within 1.5 × the fetch timeout resigns, because a majority that stopped fetching has probably
elected someone else, and a leader cut off from it must stop answering as one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kraftsim.controller.java.hash_order import capacity_for, order_by_hash
from kraftsim.raft.core.election_state import ElectionState
from kraftsim.raft.core.keys import ReplicaKey
from kraftsim.raft.core.timer import NEVER, Timer
from kraftsim.raft.core.voters import NO_ENDPOINTS, Endpoints, VoterSet

if TYPE_CHECKING:
    from kraftsim.raft.core.reconfig_rpcs import PendingChange

OBSERVER_SESSION_TIMEOUT_MS = 300_000  # an observer silent this long is forgotten
CHECK_QUORUM_TIMEOUT_FACTOR = 1.5


@dataclass(slots=True)
class ReplicaState:
    """One replica as the leader sees it (LeaderState.ReplicaState)."""

    key: ReplicaKey
    endpoints: Endpoints = NO_ENDPOINTS
    end_offset: int | None = None
    last_fetch_ms: int = -1
    last_fetch_leader_end: int = -1
    last_caught_up_ms: int = -1
    acknowledged: bool = False

    def fetched(self, now_ms: int, fetch_offset: int, leader_end: int | None) -> None:
        """A fetch at ``fetch_offset``. Caught up if it reached the leader's end, or the end the
        leader had at its previous fetch (then as of that fetch)."""
        if leader_end is not None:
            if fetch_offset >= leader_end:
                self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
            elif self.last_fetch_leader_end > 0 and fetch_offset >= self.last_fetch_leader_end:
                self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
            self.last_fetch_leader_end = leader_end
        self.last_fetch_ms = max(self.last_fetch_ms, now_ms)
        self.end_offset = fetch_offset
        self.acknowledged = True


def _by_descending_end(state: ReplicaState) -> tuple[int, int, int]:
    """Kafka's ReplicaState order: larger end offsets first, unknown ones last, then by key."""
    end = state.end_offset
    return (1, 0, 0) if end is None else (0, -end, 0)


@dataclass(slots=True)
class LeaderState:
    local_key: ReplicaKey
    epoch: int
    epoch_start_offset: int
    voters: VoterSet
    granting_voters: list[int]
    local_endpoints: Endpoints
    fetch_timeout_ms: int
    now_ms: int
    high_watermark: int | None = None
    resign_requested: bool = False
    voter_states: dict[int, ReplicaState] = field(default_factory=dict)
    observer_states: dict[ReplicaKey, ReplicaState] = field(default_factory=dict)
    observer_capacity: int = 16  # the table size Kafka's HashMap of observers has grown to
    fetched_voters: set[int] = field(default_factory=set)
    # The high watermark each fetcher was last told. A fetch at an offset beyond it holds records
    # it was told are uncommitted; once they are committed it is answered at once rather than
    # parked (what Fetch v18's HighWatermark field tells Kafka 4.1's leader, KIP-1166).
    told_high_watermark: dict[ReplicaKey, int] = field(default_factory=dict)
    check_quorum_timeout_ms: int = 0
    check_quorum_timer: Timer = field(init=False)
    begin_quorum_epoch_timeout_ms: int = 0
    begin_quorum_epoch_timer: Timer = field(init=False)
    pending_change: PendingChange | None = None  # the add or remove being handled (reconfig_rpcs.py)
    voters_version: int = -1  # the voter-set history's version ``voters`` was last taken from

    role = "leader"
    voted_key = None

    @property
    def leader_id(self) -> int:
        return self.local_key.id

    def __post_init__(self) -> None:
        for node in self.voters.nodes():
            self.voter_states[node.key.id] = ReplicaState(node.key, node.endpoints,
                                                          acknowledged=node.is_voter(self.local_key))
        self.check_quorum_timeout_ms = int(self.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)
        self.check_quorum_timer = Timer(self.now_ms, self.check_quorum_timeout_ms)
        self.begin_quorum_epoch_timeout_ms = self.fetch_timeout_ms // 2
        self.begin_quorum_epoch_timer = Timer(self.now_ms, 0)

    @property
    def leader_endpoints(self) -> Endpoints:
        return self.local_endpoints

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, leader_id=self.local_key.id, voters=frozenset(self.voter_states))

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool = False) -> bool:
        return False

    # -- check-quorum and BeginQuorumEpoch timers ------------------------------------------------
    def time_until_check_quorum_expires(self, now_ms: int) -> int:
        if len(self.voter_states) == 1:
            return NEVER  # a lone voter is always its own majority
        return self.check_quorum_timer.remaining_ms(now_ms)

    def update_check_quorum(self, key: ReplicaKey, now_ms: int) -> None:
        """A Fetch or FetchSnapshot from ``key``: once a majority (the leader counting, if a
        voter) has fetched since the last reset, the timer starts again."""
        if key.id == self.local_key.id:
            raise ValueError("a Fetch from the leader itself")
        state = self.voter_states.get(key.id)
        if state is not None and state.key.matches(key):
            self.fetched_voters.add(key.id)
        majority = len(self.voter_states) // 2 + 1
        if self.local_key.id in self.voter_states:
            majority -= 1
        if len(self.fetched_voters) >= majority:
            self.fetched_voters.clear()
            self.check_quorum_timer.reset(now_ms, self.check_quorum_timeout_ms)

    def time_until_begin_quorum_epoch(self, now_ms: int) -> int:
        return self.begin_quorum_epoch_timer.remaining_ms(now_ms)

    def reset_begin_quorum_epoch_timer(self, now_ms: int) -> None:
        self.begin_quorum_epoch_timer.reset(now_ms, self.begin_quorum_epoch_timeout_ms)

    # -- replica progress and the high watermark ---------------------------------------------
    def _replica(self, key: ReplicaKey) -> ReplicaState:
        state = self.voter_states.get(key.id)
        if state is None or not state.key.matches(key):
            state = self.observer_states.get(key)
            if state is None:
                state = self.observer_states[key] = ReplicaState(key)
                self.observer_capacity = max(self.observer_capacity, capacity_for(len(self.observer_states)))
        return state

    def is_voter(self, key: ReplicaKey) -> bool:
        state = self.voter_states.get(key.id)
        return state is not None and state.key.matches(key)

    def update_local_state(self, end_offset: int) -> bool:
        """The leader's own durable end offset moved; whether the high watermark did."""
        state = self._replica(self.local_key)
        if state.end_offset is not None and state.end_offset > end_offset:
            raise ValueError(f"the leader's end offset going back from {state.end_offset} to {end_offset}")
        state.end_offset = end_offset
        return self._maybe_update_high_watermark()

    def update_replica_state(self, key: ReplicaKey, now_ms: int, fetch_offset: int) -> bool:
        """A replica fetched at ``fetch_offset``; whether the high watermark moved. Negative ids
        (consumers, tools) are no replicas."""
        if key.id < 0:
            return False
        if key.id == self.local_key.id:
            raise ValueError(f"remote replica {key} has the leader's id")
        state = self._replica(key)
        state.fetched(now_ms, fetch_offset, self._replica(self.local_key).end_offset)
        self.update_check_quorum(key, now_ms)
        return self.is_voter(state.key) and self._maybe_update_high_watermark()

    def _maybe_update_high_watermark(self) -> bool:
        ordered = sorted(self.voter_states.values(), key=lambda s: (_by_descending_end(s), s.key.sort_key()))
        candidate = ordered[len(self.voter_states) // 2].end_offset
        if candidate is None or candidate <= self.epoch_start_offset:
            return False  # nothing of this epoch committed yet: nothing may be exposed
        if self.high_watermark is not None and candidate <= self.high_watermark:
            return False  # never backwards (it could seem to only if a voter lost committed data)
        self.high_watermark = candidate
        return True

    def add_acknowledgement(self, voter_id: int) -> None:
        """A voter heard BeginQuorumEpoch. One removed meanwhile (its answer was in flight
        when the new set was written) is no longer tracked as a voter: nothing to note."""
        state = self.voter_states.get(voter_id)
        if state is not None:
            state.acknowledged = True

    def update_voters(self, voters: VoterSet, version: int) -> None:
        """The log's latest voter set changed (Kafka's updateVoterAndObserverStates): a new
        voter keeps the progress it made as an observer, a removed one becomes an observer
        with its progress, so the high watermark counts the new set's majority at once."""
        self.voters_version = version
        if voters == self.voters:
            return
        self.voters = voters
        old = self.voter_states
        new: dict[int, ReplicaState] = {}
        for node in voters.nodes():
            state = old.pop(node.key.id, None)
            if state is None or not state.key.matches(node.key):
                if state is not None:
                    old[node.key.id] = state
                state = self.observer_states.pop(node.key, None) or ReplicaState(node.key)
            self.observer_states.pop(node.key, None)
            state.key = node.key
            state.endpoints = node.endpoints
            new[node.key.id] = state
        self.voter_states = new
        self.fetched_voters &= set(new)
        for state in old.values():
            state.endpoints = NO_ENDPOINTS
            self.observer_states.setdefault(state.key, state)
        self.observer_capacity = max(self.observer_capacity, capacity_for(len(self.observer_states)))

    def non_leader_voters_by_descending_end(self) -> list[ReplicaKey]:
        """The preferred successors when resigning: the most caught-up voters first."""
        ordered = sorted(self.voter_states.values(), key=lambda s: (_by_descending_end(s), s.key.sort_key()))
        return [s.key for s in ordered if not s.key.matches(self.local_key)]

    def active_observers(self, now_ms: int) -> list[ReplicaState]:
        """The observers heard from lately, in the order Kafka's HashMap of them iterates (what
        DescribeQuorum lists)."""
        for key in [k for k, s in self.observer_states.items() if now_ms - s.last_fetch_ms >= OBSERVER_SESSION_TIMEOUT_MS]:
            del self.observer_states[key]
        return order_by_hash(list(self.observer_states.values()), lambda s: s.key.java_hash(),
                             self.observer_capacity)

    def voters_in_map_order(self) -> list[ReplicaState]:
        """The voters in the order Kafka's HashMap of them (keyed by id) iterates."""
        return order_by_hash(list(self.voter_states.values()), lambda s: s.key.id, capacity_for(len(self.voter_states)))

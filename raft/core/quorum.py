"""The replica's place in the quorum: which epoch state it is in, and the only ways to move
between them (Kafka's QuorumState).

Transitions that change what the replica has promised (a new epoch, a vote, a leader) are
durable: the election state is written to the store *before* the new state takes effect, so
nothing the replica says afterwards can be forgotten by a crash. Resigned is the exception: a
leader that restarts always comes back resigned in its own epoch (it reads that it led), which
both keeps it from voting again in that epoch and keeps every (offset, epoch) naming one record
even if the crash lost unflushed records of that epoch.

Kafka 3.9's (``pre_vote`` off):

    Unattached → Unattached (higher epoch, or a vote), Candidate (election timeout),
                 Follower (a leader of this or a higher epoch)
    Candidate  → Unattached (higher epoch), Candidate (lost, after backoff), Leader (majority)
    Leader     → Unattached (higher epoch), Resigned (shutdown, resign, check-quorum)
    Follower   → Unattached (higher epoch), Candidate (fetch timeout), Follower (higher epoch)
    Resigned   → Unattached (higher epoch), Candidate (election timeout), Follower

Kafka 4.0's (``pre_vote`` on, KIP-996): a timer leads to Prospective, and only Prospective
stands.

    Unattached  → Unattached (higher epoch, or a vote), Prospective (election timeout),
                  Follower (a leader of this or a higher epoch)
    Prospective → Candidate (a majority of pre-votes), Prospective (a vote, kept),
                  Follower (a higher epoch's leader; or it lost, or its timer ran out, and it
                  knew the leader), Unattached (a higher epoch; or it lost, or its timer ran out,
                  and it knew no leader it could fetch from)
    Candidate   → Unattached (higher epoch), Prospective (lost, after backoff; or its election
                  timer ran out), Leader (majority)
    Follower    → Unattached (higher epoch), Prospective (fetch timeout), Follower
    Resigned    → Unattached (higher epoch, or its election timer ran out), Follower

Kafka 4.0 keeps a vote cast in an epoch through every move within that epoch (Follower,
Prospective, Unattached again), so that no replica votes twice in an epoch whatever it learns.

An observer (not in the voter set) only moves between Unattached and Follower.
"""

from __future__ import annotations

import logging
import random
import uuid
from typing import TypeAlias

from kraftsim.raft.core.config import QuorumConfig
from kraftsim.raft.core.election_state import ElectionState
from kraftsim.raft.core.keys import OffsetAndEpoch, ReplicaKey
from kraftsim.raft.core.leader_state import LeaderState
from kraftsim.raft.core.state_store import QuorumStateStore
from kraftsim.raft.core.states import (
    CandidateState,
    FollowerState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
)
from kraftsim.raft.core.timer import NEVER, Timer
from kraftsim.raft.core.voter_history import VoterSetHistory
from kraftsim.raft.core.voters import Endpoints, VoterSet

log = logging.getLogger("kraftsim.raft")

EpochState: TypeAlias = (UnattachedState | ProspectiveState | CandidateState | FollowerState | LeaderState
                         | ResignedState)


class RaftStateError(Exception):
    """A transition or message that Raft's rules forbid (Kafka's IllegalStateException in the
    Raft client, which stops the process): in a simulation, a bug to report with its seed."""


class QuorumState:
    def __init__(self, *, local_id: int | None, directory_id: uuid.UUID, history: VoterSetHistory,
                 listeners: Endpoints, store: QuorumStateStore, config: QuorumConfig, rng: random.Random,
                 pre_vote: bool = False) -> None:
        """``pre_vote``: Kafka 4.0's election (KIP-996), for a release that serves Vote v2."""
        self.local_id = local_id
        self.pre_vote = pre_vote
        self.directory_id = directory_id
        self.history = history
        self.listeners = listeners
        self.store = store
        self.config = config
        self.rng = rng
        self.state: EpochState = UnattachedState(0, history.latest().ids(), NEVER, Timer(0, NEVER))
        self.transitions = 0  # how many times the state was replaced (observers of the node can tell cheaply)

    @property
    def voters(self) -> VoterSet:
        """The latest voter set the log holds, committed or not (Kafka's lastVoterSet)."""
        return self.history.latest()

    @property
    def kraft_version(self) -> int:
        return self.history.kraft_version()

    # -- who we are --------------------------------------------------------------------------
    @property
    def local_key(self) -> ReplicaKey:
        if self.local_id is None:
            raise RaftStateError("this replica has no node id")
        return ReplicaKey(self.local_id, self.directory_id)

    def is_voter(self) -> bool:
        return self.local_id is not None and self.voters.is_voter(ReplicaKey(self.local_id, self.directory_id))

    def is_observer(self) -> bool:
        return not self.is_voter()

    def is_only_voter(self) -> bool:
        return self.local_id is not None and self.voters.is_only_voter(ReplicaKey(self.local_id, self.directory_id))

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int | None:
        return self.state.leader_id

    def has_remote_leader(self) -> bool:
        leader = self.leader_id
        return leader is not None and leader != self.local_id

    @property
    def high_watermark(self) -> int | None:
        return self.state.high_watermark

    def random_election_timeout_ms(self) -> int:
        """Uniform in [T, 2T): voters whose timers fire at different times rarely split votes."""
        t = self.config.election_timeout_ms
        return 0 if t == 0 else t + self.rng.randrange(t)

    # -- start-up ----------------------------------------------------------------------------
    def initialize(self, log_end: OffsetAndEpoch, now_ms: int) -> None:
        """The state this replica restarts in, from the store and the log (Kafka's initialize)."""
        election = self.store.read() or ElectionState(0, voters=self.voters.ids())
        ids = self.voters.ids()
        # An observer never stands, so its unattached timer never fires. (Kafka starts it with a
        # voter's random timeout here, and once that runs out an observer still looking for the
        # leader polls with no timeout at all: a busy loop; transitionToUnattached already uses
        # "never" for observers, as this does everywhere.)
        unattached_timeout = NEVER if self.is_observer() else self.random_election_timeout_ms()
        state: EpochState
        if election.voted_key is not None and self.local_id is None:
            raise RaftStateError(f"quorum state {election} has a vote but this replica has no id")
        if election.epoch < log_end.epoch:
            log.warning("epoch %d in quorum-state is below the log's last epoch %d", election.epoch, log_end.epoch)
            state = self._unattached(log_end.epoch, now_ms, unattached_timeout)
        elif self.local_id is not None and election.is_leader(self.local_id):
            state = ResignedState(self.local_id, election.epoch, ids, Timer(now_ms, self.random_election_timeout_ms()),
                                  [], self.listeners)
        elif self.local_id is not None and election.is_voted_candidate(self.local_key):
            state = CandidateState(self.local_key, election.epoch, self.voters.keys(), 1,
                                   Timer(now_ms, self.random_election_timeout_ms()), Timer(now_ms, 0))
        elif election.voted_key is not None and (election.leader_id is None or not self.pre_vote):
            state = self._unattached(election.epoch, now_ms, unattached_timeout, voted_key=election.voted_key)
        elif election.leader_id is not None:
            # Kafka 4.0 may have written the vote beside the leader: it is kept.
            endpoints = self.voters.listeners(election.leader_id)
            if not endpoints:
                # The leader's address is unknown: find it through Fetch or BeginQuorumEpoch.
                state = self._unattached(election.epoch, now_ms, unattached_timeout, leader_id=election.leader_id,
                                         voted_key=election.voted_key)
            else:
                state = FollowerState(election.epoch, election.leader_id, endpoints, ids, self.config.fetch_timeout_ms,
                                      Timer(now_ms, self.config.fetch_timeout_ms), voted_key=election.voted_key)
        else:
            state = self._unattached(election.epoch, now_ms, unattached_timeout)
        self._durable(state)

    # -- transitions -------------------------------------------------------------------------
    def _unattached(self, epoch: int, now_ms: int, timeout_ms: int, *, leader_id: int | None = None,
                    voted_key: ReplicaKey | None = None, high_watermark: int | None = None) -> UnattachedState:
        return UnattachedState(epoch, self.voters.ids(), timeout_ms, Timer(now_ms, timeout_ms), leader_id=leader_id,
                               voted_key=voted_key, high_watermark=high_watermark)

    def _durable(self, new: EpochState) -> None:
        self.store.write(new.election(), self.kraft_version)
        self._memory(new)

    def _memory(self, new: EpochState) -> None:
        old = self.state
        if isinstance(old, FollowerState):
            old.close()
        self.state = new
        self.transitions += 1
        log.debug("transition to %s (epoch %d) from %s (epoch %d)", new.role, new.epoch, old.role, old.epoch)

    def to_resigned(self, successors: list[ReplicaKey], now_ms: int) -> None:
        if not isinstance(self.state, LeaderState):
            raise RaftStateError(f"resigning from {self.state.role}")
        self._memory(ResignedState(self.local_key.id, self.epoch, self.voters.ids(),
                                   Timer(now_ms, self.random_election_timeout_ms()), successors, self.listeners))

    def to_unattached(self, epoch: int, now_ms: int, leader_id: int | None = None) -> None:
        """A higher epoch whose leader is not known, or (Kafka 4.0) the same epoch after a lost
        pre-vote, keeping the leader it knew but cannot fetch from, and its vote. A voter keeps
        what is left of its election timer, so a stream of higher epochs cannot keep it from
        ever standing."""
        state = self.state
        if epoch < state.epoch or (epoch == state.epoch and not isinstance(state, ProspectiveState)):
            raise RaftStateError(f"unattached in epoch {epoch} from {state.role} in epoch {state.epoch}")
        if self.is_observer():
            timeout = NEVER
        elif isinstance(state, (CandidateState, UnattachedState)):
            timeout = state.election_timer.remaining_ms(now_ms)
        elif self.pre_vote and (isinstance(state, ResignedState)
                                or (isinstance(state, ProspectiveState) and not state.is_vote_rejected())):
            timeout = state.election_timer.remaining_ms(now_ms)
        else:
            timeout = self.random_election_timeout_ms()
        voted = state.voted_key if epoch == state.epoch else None
        self._durable(self._unattached(epoch, now_ms, timeout, leader_id=leader_id, voted_key=voted,
                                       high_watermark=state.high_watermark))

    def to_voted(self, epoch: int, candidate: ReplicaKey, now_ms: int) -> None:
        """Grant this epoch's vote to ``candidate``, durably, and restart the election timer:
        the candidate is as likely to win as this voter would be."""
        state = self.state
        if self.local_id is None or candidate.id == self.local_id:
            raise RaftStateError(f"voting for {candidate} from replica {self.local_id}")
        if epoch < state.epoch or (epoch == state.epoch and not (isinstance(state, (UnattachedState, ProspectiveState))
                                                                  and state.voted_key is None)):
            raise RaftStateError(f"voting in epoch {epoch} from {state.role} in epoch {state.epoch}")
        if isinstance(state, ProspectiveState):
            # Kafka 4.0's prospectiveAddVotedState: still asking, now bound, the tally started over.
            self._durable(ProspectiveState(self.local_key, epoch, self.voters.keys(), state.retries,
                                           Timer(now_ms, self.random_election_timeout_ms()),
                                           leader_id=state.leader_id, leader_endpoints=state.leader_endpoints,
                                           voted_key=candidate, high_watermark=state.high_watermark))
            return
        leader_id = state.leader_id if epoch == state.epoch else None
        self._durable(self._unattached(epoch, now_ms, self.random_election_timeout_ms(), leader_id=leader_id,
                                       voted_key=candidate, high_watermark=state.high_watermark))

    def to_follower(self, epoch: int, leader_id: int, endpoints: Endpoints, now_ms: int) -> None:
        state = self.state
        if not endpoints:
            raise RaftStateError(f"following {leader_id} in epoch {epoch} without its endpoints")
        if leader_id == self.local_id:
            raise RaftStateError(f"following itself in epoch {epoch}")
        if epoch < state.epoch:
            raise RaftStateError(f"following {leader_id} in epoch {epoch} from epoch {state.epoch}")
        if epoch == state.epoch:
            if isinstance(state, FollowerState) and len(state.leader_endpoints) >= len(endpoints):
                raise RaftStateError(f"following {leader_id} again in epoch {epoch}")
            if isinstance(state, LeaderState):
                raise RaftStateError(f"following {leader_id} in epoch {epoch}, which this replica leads")
        # Kafka 4.0 keeps the vote cast in this epoch (so that the replica cannot vote again in
        # it), a candidate's for itself included.
        voted = state.voted_key if self.pre_vote and epoch == state.epoch else None
        self._durable(FollowerState(epoch, leader_id, endpoints, self.voters.ids(), self.config.fetch_timeout_ms,
                                    Timer(now_ms, self.config.fetch_timeout_ms), high_watermark=state.high_watermark,
                                    voted_key=voted))

    def to_prospective(self, now_ms: int) -> None:
        """Ask for pre-votes in this epoch (Kafka 4.0): nothing changes on disk, so the move is
        in memory only; the leader and the vote it knew come along."""
        state = self.state
        if not self.pre_vote:
            raise RaftStateError("pre-vote is off: a voter stands at once")
        if self.is_observer():
            raise RaftStateError("an observer cannot ask for pre-votes")
        if isinstance(state, (LeaderState, ProspectiveState)):
            raise RaftStateError(f"prospective from {state.role}")
        retries = state.retries + 1 if isinstance(state, CandidateState) else 1
        self._memory(ProspectiveState(self.local_key, state.epoch, self.voters.keys(), retries,
                                      Timer(now_ms, self.random_election_timeout_ms()),
                                      leader_id=state.leader_id, leader_endpoints=state.leader_endpoints,
                                      voted_key=state.voted_key, high_watermark=state.high_watermark))

    def to_candidate(self, now_ms: int) -> None:
        state = self.state
        if self.is_observer():
            raise RaftStateError("an observer cannot stand for election")
        if isinstance(state, LeaderState):
            raise RaftStateError("a leader cannot stand for election")
        if self.pre_vote and not isinstance(state, ProspectiveState):
            raise RaftStateError(f"candidate from {state.role}: only a prospective replica stands")
        if isinstance(state, CandidateState):
            retries = state.retries + 1
        elif isinstance(state, ProspectiveState):
            retries = state.retries
        else:
            retries = 1
        self._durable(CandidateState(self.local_key, state.epoch + 1, self.voters.keys(), retries,
                                     Timer(now_ms, self.random_election_timeout_ms()), Timer(now_ms, 0),
                                     high_watermark=state.high_watermark))

    def to_leader(self, epoch_start_offset: int, now_ms: int) -> LeaderState:
        """The new leader does not keep the high watermark it knew: it learns it again once its
        epoch's first record is committed (see ``leader_state.py``)."""
        state = self.state
        if self.is_observer() or not isinstance(state, CandidateState):
            raise RaftStateError(f"leader from {state.role}")
        if not state.is_vote_granted():
            raise RaftStateError("leader without a majority of votes")
        leader = LeaderState(self.local_key, state.epoch, epoch_start_offset, self.voters, state.granting_voters(),
                             self.listeners, self.config.fetch_timeout_ms, now_ms)
        self._durable(leader)
        return leader

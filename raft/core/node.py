"""A KRaft replica as a sans-I/O state machine: Kafka 3.9's KafkaRaftClient without threads,
sockets or clocks.

The driver calls :meth:`RaftNode.handle_request` and :meth:`RaftNode.handle_response` with what
arrives, :meth:`RaftNode.poll` whenever the time it last returned has come (and after feeding it
anything), and sends what :meth:`RaftNode.take_outbound` returns. Everything the node decides
depends only on those calls, their ``now_ms`` and the injected ``random.Random``: the same calls
make the same decisions, which is what lets the simulator replay a run from its seed.

The leader's writes: :meth:`RaftNode.append` queues records (the accumulator), :meth:`poll`
writes them after ``controller.quorum.append.linger.ms`` and asks the log to flush, and the high
watermark follows the flushed offsets of a majority. The driver hears of commits and leader
changes through :meth:`RaftNode.take_events`.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kraftsim.metadata import records as recs
from kraftsim.metadata.batch import ControlRecordType
from kraftsim.metadata.messages import KRaftVersionRecord
from kraftsim.raft.core import election_rpcs, fetch_rpcs, polling, reconfig_rpcs, rpcs
from kraftsim.raft.core.config import QuorumConfig
from kraftsim.raft.core.events import (
    Event,
    HighWatermark,
    InboundRequest,
    InboundResponse,
    LeaderChange,
    Outbound,
    OutboundRequest,
    OutboundResponse,
    RaftRequest,
    RaftResponse,
    ShutdownComplete,
)
from kraftsim.raft.core.keys import OffsetAndEpoch, ReplicaKey
from kraftsim.raft.core.leader_state import LeaderState
from kraftsim.raft.core.log import ReplicatedLog
from kraftsim.raft.core.purgatory import FetchPurgatory, ParkedFetch
from kraftsim.raft.core.quorum import QuorumState, RaftStateError
from kraftsim.raft.core.requests import RequestManager
from kraftsim.raft.core.state_store import QuorumStateStore
from kraftsim.raft.core.states import CandidateState, FollowerState, ProspectiveState, Vote
from kraftsim.raft.core.timer import NEVER
from kraftsim.raft.core.voter_history import VoterSetHistory
from kraftsim.raft.core.voters import Address, Endpoints, VoterNode, VoterSet
from kraftsim.raft.core.voters_records import voters_record_of
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.message import Message
from kraftsim.rpc.messages import (
    AddRaftVoterRequest,
    ApiVersionsResponse,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    RemoveRaftVoterRequest,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoteRequest,
    VoteResponse,
)

log = logging.getLogger("kraftsim.raft")

RequestBuilder = Callable[[], RaftRequest]
MAX_POLL_PASSES = 4
RETRY_BACKOFF_BASE_MS = 100  # KafkaRaftClient.RETRY_BACKOFF_BASE_MS, the election backoff's unit


class NotLeaderError(Exception):
    """An append or resignation on a replica that does not lead the given epoch."""


@dataclass(slots=True)
class NodeStats:
    """What happened on this node, for summaries and tests."""

    elections_started: int = 0
    pre_votes_started: int = 0  # times it asked for pre-votes (Prospective, Kafka 4.0)
    elections_won: int = 0
    votes_granted: int = 0
    diverging_answers: int = 0
    snapshot_redirects: int = 0
    truncations: int = 0
    snapshots_fetched: int = 0
    resignations: int = 0


class RaftNode:
    def __init__(self, *, node_id: int | None, directory_id: uuid.UUID, cluster_id: str, voters: VoterSet,
                 listeners: Endpoints, listener_name: str, log: ReplicatedLog, store: QuorumStateStore,
                 config: QuorumConfig, rng: random.Random, now_ms: int, kraft_version: int = 0,
                 bootstrap: Mapping[int, Address] | None = None, max_fetch_bytes: int = rpcs.MAX_FETCH_SIZE_BYTES,
                 followers_always_flush: bool = False, voter_history: VoterSetHistory | None = None,
                 supported_kraft_versions: tuple[int, int] = (0, 1), pre_vote: bool = False,
                 candidate_backoff: bool = True) -> None:
        """``voters`` and ``kraft_version`` are the static quorum's (``controller.quorum.voters``,
        kraft.version 0); ``voter_history``, when given, is what the driver read from the log at
        start-up (its static set and kraft.version standing where the log names none), and is
        fed from then on with every VotersRecord and KRaftVersionRecord appended, fetched or
        truncated (``voter_history.py``): it answers which set is in force at an offset, for
        majorities, a new leader's start-of-epoch records and snapshots alike.
        ``supported_kraft_versions`` is this replica's range (Kafka's
        KRaftVersion.supportedVersionRange), which it writes for itself as leader. ``pre_vote``:
        elect as Kafka 4.0 does (KIP-996, a release that serves Vote v2): a voter whose timer
        fires asks for pre-votes before it stands (``quorum.py``). ``candidate_backoff``: a
        candidate refused by a majority backs off before it tries again (Kafka 3.9 and 4.0);
        from Kafka 4.1 it waits out its election timeout instead, then asks for pre-votes."""
        self.cluster_id = cluster_id
        self.listener_name = listener_name
        self.log = log
        self.config = config
        self.rng = rng
        self.max_fetch_bytes = max_fetch_bytes
        self.followers_always_flush = followers_always_flush
        self.history = voter_history if voter_history is not None else VoterSetHistory(voters, kraft_version)
        self.supported_kraft_versions = supported_kraft_versions
        self.pre_vote = pre_vote
        self.candidate_backoff = candidate_backoff or not pre_vote
        self.quorum = QuorumState(local_id=node_id, directory_id=directory_id, history=self.history,
                                  listeners=listeners, store=store, config=config, rng=rng, pre_vote=pre_vote)
        # Without bootstrap servers, the static voters are where an observer looks for the leader.
        self.bootstrap = dict(bootstrap) if bootstrap is not None else {
            v: a for v in sorted(voters.ids()) if (a := voters.listeners(v).address(listener_name)) is not None}
        self.requests = RequestManager(sorted(self.bootstrap), config.retry_backoff_ms, config.request_timeout_ms, rng)
        self.purgatory = FetchPurgatory()
        self.stats = NodeStats()
        self.shutdown_deadline_ms: int | None = None
        self.shutdown_done = False
        self._outbox: list[Outbound] = []
        self._events: list[Event] = []
        self._correlation = 0
        self._pending: list[Sequence[bytes]] = []  # the accumulator: appends not yet written
        self._pending_records = 0
        self._linger_deadline_ms = NEVER
        self._needs_flush = False
        self._announced: tuple[int, int | None] | None = None
        self._announced_hw: int | None = None
        self._initialize(now_ms)

    def _initialize(self, now_ms: int) -> None:
        quorum = self.quorum
        quorum.initialize(self.log_end(), now_ms)
        if isinstance(quorum.state, LeaderState):
            raise RaftStateError("a replica cannot start as leader")
        if isinstance(quorum.state, CandidateState):
            self._on_become_candidate(now_ms)
        elif isinstance(quorum.state, FollowerState):
            self._on_become_follower(now_ms)
        if quorum.is_only_voter() and not isinstance(quorum.state, CandidateState):
            self.stand(now_ms)  # a lone voter elects itself at once
        self._emit_events()

    # -- views -------------------------------------------------------------------------------
    @property
    def node_id(self) -> int | None:
        return self.quorum.local_id

    @property
    def role(self) -> str:
        return self.quorum.state.role

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def leader_id(self) -> int | None:
        return self.quorum.leader_id

    @property
    def high_watermark(self) -> int | None:
        return self.quorum.high_watermark

    @property
    def voted_for(self) -> int | None:
        """Whom this node voted for in its epoch (a candidate votes for itself)."""
        voted = self.quorum.state.voted_key
        return None if voted is None else voted.id

    def is_leader(self) -> bool:
        return isinstance(self.quorum.state, LeaderState)

    def log_end(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.log.end_offset, self.log.last_fetched_epoch())

    def candidate_log_up_to_date(self, last: OffsetAndEpoch) -> bool:
        """Raft's election restriction: a vote only for a candidate whose last (epoch, offset) is
        at least this replica's, so whoever wins holds every committed record."""
        return last.at_least(self.log_end())

    # -- the driver's side ---------------------------------------------------------------------
    def handle_request(self, request: InboundRequest, now_ms: int) -> None:
        """Answer a request; the answer goes to the outbox now, or later for a parked Fetch."""
        m = request.message
        response: RaftResponse | None
        if isinstance(m, FetchRequest):
            response = fetch_rpcs.handle_fetch_request(self, request, m, now_ms)
        elif isinstance(m, VoteRequest):
            response = election_rpcs.handle_vote_request(self, request, m, now_ms)
        elif isinstance(m, BeginQuorumEpochRequest):
            response = election_rpcs.handle_begin_quorum_epoch_request(self, request, m, now_ms)
        elif isinstance(m, EndQuorumEpochRequest):
            response = election_rpcs.handle_end_quorum_epoch_request(self, request, m, now_ms)
        elif isinstance(m, FetchSnapshotRequest):
            response = fetch_rpcs.handle_fetch_snapshot_request(self, request, m, now_ms)
        elif isinstance(m, DescribeQuorumRequest):
            response = fetch_rpcs.handle_describe_quorum_request(self, request, m, now_ms)
        elif isinstance(m, AddRaftVoterRequest):
            response = reconfig_rpcs.handle_add_voter_request(self, request, m, now_ms)
        elif isinstance(m, RemoveRaftVoterRequest):
            response = reconfig_rpcs.handle_remove_voter_request(self, request, m, now_ms)
        elif isinstance(m, UpdateRaftVoterRequest):
            response = reconfig_rpcs.handle_update_voter_request(self, request, m, now_ms)
        else:
            raise TypeError(f"not a Raft request: {type(m).__name__}")
        if response is not None:
            self._outbox.append(OutboundResponse(request.reply_to, request.api_version, response))
        self._emit_events()

    def handle_response(self, response: InboundResponse, now_ms: int) -> None:
        """Take the answer to one of this node's requests; answers no longer awaited are dropped."""
        source, cid, m = response.source, response.correlation_id, response.message
        if not self.requests.is_response_expected(source, cid):
            return
        ok: bool
        if isinstance(m, FetchResponse):
            ok = fetch_rpcs.handle_fetch_response(self, source, m, now_ms)
        elif isinstance(m, VoteResponse):
            ok = election_rpcs.handle_vote_response(self, source, m, now_ms)
        elif isinstance(m, BeginQuorumEpochResponse):
            ok = election_rpcs.handle_begin_quorum_epoch_response(self, source, m, now_ms)
        elif isinstance(m, EndQuorumEpochResponse):
            ok = election_rpcs.handle_end_quorum_epoch_response(self, source, m, now_ms)
        elif isinstance(m, FetchSnapshotResponse):
            ok = fetch_rpcs.handle_fetch_snapshot_response(self, source, m, now_ms)
        elif isinstance(m, ApiVersionsResponse):
            ok = reconfig_rpcs.handle_api_versions_response(self, source, m, now_ms)
        elif isinstance(m, UpdateRaftVoterResponse):
            ok = reconfig_rpcs.handle_update_voter_response(self, source, m, now_ms)
        else:
            raise TypeError(f"not a Raft response: {type(m).__name__}")
        self.requests.on_response(source, cid, ok, now_ms)
        self._emit_events()

    def fail_request(self, destination: int, correlation_id: int, api_key: int, error: int, now_ms: int) -> None:
        """A request that got no answer (disconnected: BROKER_NOT_AVAILABLE; timed out:
        REQUEST_TIMED_OUT): handled as an answer carrying only the error, as Kafka does."""
        self.handle_response(InboundResponse(destination, correlation_id, rpcs.error_response(api_key, error)), now_ms)

    def poll(self, now_ms: int) -> int:
        """Run the timers of the current state and send what is due; returns when to poll next
        (an absolute time on the caller's clock)."""
        if self.shutdown_done:
            return NEVER
        if self._maybe_complete_shutdown(now_ms):
            self._emit_events()
            return NEVER
        # A transition asks to be polled again at once (Kafka's loop polls with no wait): do it
        # here, a few times at most, rather than make every driver come straight back.
        for _ in range(MAX_POLL_PASSES):
            transitions = self.quorum.transitions
            timeout = polling.poll_current_state(self, now_ms)
            if timeout > 0 or self.quorum.transitions == transitions:
                break
        timeout = min(timeout, self._expire_parked_fetches(now_ms))
        self._emit_events()
        return now_ms + timeout if timeout < NEVER else NEVER

    def take_outbound(self) -> list[Outbound]:
        out, self._outbox = self._outbox, []
        return out

    def take_events(self) -> list[Event]:
        out, self._events = self._events, []
        return out

    # -- the state machine's side ----------------------------------------------------------------
    def append(self, epoch: int, values: Sequence[bytes], now_ms: int) -> int:
        """Queue records for this leader's epoch; the offset the last one will get. They are
        written at the next poll after the linger time (with no linger, at once, as Kafka's IO
        thread drains an accumulator that has nothing to wait for as soon as it is woken), and
        committed when the high watermark passes them."""
        state = self.quorum.state
        if not isinstance(state, LeaderState) or state.resign_requested or self.shutdown_deadline_ms is not None:
            raise NotLeaderError(f"node {self.node_id} is not the leader (it is {state.role} in epoch {state.epoch})")
        if epoch != state.epoch:
            raise NotLeaderError(f"append for epoch {epoch}, but this node leads epoch {state.epoch}")
        if not values:
            raise ValueError("nothing to append")
        if not self._pending and self.config.append_linger_ms == 0:
            last = self.log.append_as_leader(values, epoch=state.epoch, timestamp=now_ms)[1]
            self._needs_flush = True
            return last
        if not self._pending:
            self._linger_deadline_ms = now_ms + self.config.append_linger_ms
        self._pending.append(list(values))
        self._pending_records += len(values)
        return self.log.end_offset + self._pending_records - 1

    def append_control(self, epoch: int, messages: Sequence[tuple[ControlRecordType, Message]], now_ms: int) -> int:
        """Write one control batch in this leader's epoch at once (KRaftVersionRecord and
        VotersRecord when kraft.version is upgraded, as Kafka's Raft client writes them); what
        lingers is written first, so that offsets keep the order of the calls."""
        state = self.quorum.state
        if not isinstance(state, LeaderState) or state.resign_requested or self.shutdown_deadline_ms is not None:
            raise NotLeaderError(f"node {self.node_id} is not the leader (it is {state.role} in epoch {state.epoch})")
        if epoch != state.epoch:
            raise NotLeaderError(f"append for epoch {epoch}, but this node leads epoch {state.epoch}")
        for values in self._pending:
            self.log.append_as_leader(values, epoch=state.epoch, timestamp=now_ms)
        self._drop_pending_appends()
        last = self.log.append_control_as_leader(messages, epoch=state.epoch, timestamp=now_ms)
        self._needs_flush = True
        for offset, (kind, message) in enumerate(messages, start=last - len(messages) + 1):
            self.history.add_control(offset, kind, message)
        state.update_voters(self.quorum.voters, self.history.version)
        return last

    @property
    def next_offset(self) -> int:
        """The offset the next appended record will get: the log end, past the appends queued."""
        return self.log.end_offset + self._pending_records

    def resign(self, epoch: int) -> None:
        """Step down from leading ``epoch`` (the state machine asks; a stale epoch is ignored)."""
        if epoch < 0:
            raise ValueError(f"resigning from negative epoch {epoch}")
        if epoch > self.epoch:
            raise ValueError(f"resigning from epoch {epoch}, above the current {self.epoch}")
        state = self.quorum.state
        if epoch < self.epoch or not isinstance(state, LeaderState):
            if epoch == self.epoch and self.leader_id != self.node_id:
                raise NotLeaderError(f"resigning from epoch {epoch}, which node {self.leader_id} leads")
            return
        state.resign_requested = True

    def shutdown(self, timeout_ms: int, now_ms: int) -> None:
        """Begin a graceful shutdown: a leader resigns and tells the voters (EndQuorumEpoch); the
        node reports ShutdownComplete once someone else leads, or when ``timeout_ms`` runs out."""
        if self.shutdown_deadline_ms is None:
            self.shutdown_deadline_ms = now_ms + timeout_ms

    def _maybe_complete_shutdown(self, now_ms: int) -> bool:
        if self.shutdown_deadline_ms is None:
            return False
        if now_ms >= self.shutdown_deadline_ms:
            self._finish_shutdown(timed_out=True)
            return True
        q = self.quorum
        if q.is_observer() or q.is_only_voter() or q.has_remote_leader():
            self._finish_shutdown(timed_out=False)
            return True
        return False

    def _finish_shutdown(self, timed_out: bool) -> None:
        self.shutdown_done = True
        self._events.append(ShutdownComplete(timed_out))

    # -- sending ----------------------------------------------------------------------------------
    def address_of(self, peer: int) -> Address | None:
        state = self.quorum.state
        if isinstance(state, FollowerState) and state.leader_id == peer:
            address = state.leader_endpoints.address(self.listener_name)
            if address is not None:
                return address
        return self.quorum.voters.listeners(peer).address(self.listener_name) or self.bootstrap.get(peer)

    def maybe_send(self, now_ms: int, peer: int, build: RequestBuilder) -> int:
        """Send to ``peer`` unless a request is already out to it or it is backing off; how long
        until it can take another (Kafka's maybeSendRequest)."""
        requests = self.requests
        if requests.is_backing_off(peer, now_ms):
            return requests.remaining_backoff_ms(peer, now_ms)
        if requests.is_ready(peer, now_ms):
            self._correlation += 1
            requests.on_request_sent(peer, self._correlation, now_ms)
            self._outbox.append(OutboundRequest(self._correlation, peer, self.address_of(peer), build()))
        return requests.remaining_request_ms(peer, now_ms)

    def send_to(self, now_ms: int, peer: int, address: Address, build: RequestBuilder) -> int | None:
        """Send to ``peer`` at ``address`` (a replica the voter set does not name yet) if it can
        take a request now; the request timeout if sent, None if not (Kafka's
        RequestSender.send)."""
        requests = self.requests
        if requests.is_backing_off(peer, now_ms) or not requests.is_ready(peer, now_ms):
            return None
        self._correlation += 1
        requests.on_request_sent(peer, self._correlation, now_ms)
        self._outbox.append(OutboundRequest(self._correlation, peer, address, build()))
        return self.config.request_timeout_ms

    def respond(self, response: OutboundResponse) -> None:
        self._outbox.append(response)

    def respond_later(self, parked: ParkedFetch, response: FetchResponse) -> None:
        self._outbox.append(OutboundResponse(parked.reply_to, parked.api_version, response))

    # -- transitions --------------------------------------------------------------------------------
    def stand(self, now_ms: int) -> None:
        """A timer says it is time for an election: ask for pre-votes first (Kafka 4.0), or
        stand at once (Kafka 3.9)."""
        if self.pre_vote:
            self.transition_to_prospective(now_ms)
        else:
            self.transition_to_candidate(now_ms)

    def transition_to_prospective(self, now_ms: int) -> None:
        self.quorum.to_prospective(now_ms)
        self.stats.pre_votes_started += 1
        log.info("asking the voters for pre-votes in epoch %d", self.quorum.epoch)
        state = self.quorum.state
        assert isinstance(state, ProspectiveState)
        if not self.maybe_transition_to_candidate(state, now_ms):
            self.requests.reset_all()

    def maybe_transition_to_candidate(self, state: ProspectiveState, now_ms: int) -> bool:
        if not state.is_vote_granted():
            return False
        granting = sorted(i for i, v in state.votes.items() if v is Vote.GRANTED)
        log.info("pre-votes granted by %s in epoch %d: standing for election", granting, state.epoch)
        self.transition_to_candidate(now_ms)
        return True

    def prospective_lost(self, state: ProspectiveState, now_ms: int) -> None:
        """Refused by a majority, or out of time: back to following the leader it knew, if it
        can reach it, else Unattached in the same epoch (Kafka's
        prospectiveTransitionAfterElectionLoss)."""
        log.info("pre-vote in epoch %d lost (%s): not standing", state.epoch,
                 "refused by a majority" if state.is_vote_rejected() else "out of time")
        if state.leader_id is not None and state.leader_endpoints:
            self.transition_to_follower(state.epoch, state.leader_id, state.leader_endpoints, now_ms)
        else:
            self.transition_to_unattached(state.epoch, now_ms, leader_id=state.leader_id)

    def transition_to_candidate(self, now_ms: int) -> None:
        self.quorum.to_candidate(now_ms)
        self.stats.elections_started += 1
        self._on_become_candidate(now_ms)

    def _on_become_candidate(self, now_ms: int) -> None:
        state = self.quorum.state
        assert isinstance(state, CandidateState)
        if not self.maybe_transition_to_leader(state, now_ms):
            self.requests.reset_all()

    def maybe_transition_to_leader(self, state: CandidateState, now_ms: int) -> bool:
        if not state.is_vote_granted():
            return False
        self._on_become_leader(now_ms)
        return True

    def _on_become_leader(self, now_ms: int) -> None:
        """Lead: persist it, start the epoch in the log's history, and open it with a
        LeaderChange record, which must commit before anything is exposed (leader_state.py)."""
        start = self.log.end_offset
        leader = self.quorum.to_leader(start, now_ms)
        self.stats.elections_won += 1
        self.log.initialize_leader_epoch(leader.epoch)
        lc = recs.data_class("LeaderChangeMessage")
        message = lc(version=0, leader_id=leader.local_key.id,
                     voters=[lc.Voter(voter_id=v) for v in sorted(leader.voter_states)],
                     granting_voters=[lc.Voter(voter_id=v) for v in leader.granting_voters])
        messages: list[tuple[ControlRecordType, Message]] = [(ControlRecordType.LEADER_CHANGE, message)]
        messages += self._start_of_epoch_voters()
        last = self.log.append_control_as_leader(messages, epoch=leader.epoch, timestamp=now_ms)
        for offset, (kind, control) in enumerate(messages, start=last - len(messages) + 1):
            self.history.add_control(offset, kind, control)
        if len(messages) > 1:
            leader.update_voters(self.quorum.voters, self.history.version)
        self._needs_flush = True
        self._drop_pending_appends()
        self.requests.reset_all()

    def local_voter_needs_update(self) -> bool:
        """Whether this voter's entry in a dynamic quorum's latest voter set differs from what it
        is (Kafka's voterNodeNeedsUpdate): then it asks the leader to update it."""
        q = self.quorum
        if self.history.kraft_version() < 1:
            return False
        current = q.voters.node(q.local_key.id)
        local = VoterNode(q.local_key, q.listeners, self.supported_kraft_versions)
        return current is not None and current.is_voter(local.key) and current != local

    def _start_of_epoch_voters(self) -> list[tuple[ControlRecordType, Message]]:
        """What a new leader of a dynamic quorum writes after its LeaderChange, in the same batch
        (Kafka's appendStartOfEpochControlRecords): the kraft.version and the voter set with its
        own entry brought up to date (its listeners, its kraft.version range), when the set still
        comes from the bootstrap checkpoint (offset -1) or its own entry differs."""
        level = self.history.kraft_version()
        entry = self.history.latest_entry()
        if level < 1 or entry is None:
            return []
        offset, voters = entry
        q = self.quorum
        local = VoterNode(q.local_key, q.listeners, self.supported_kraft_versions)
        if offset != -1 and not self.local_voter_needs_update():
            return []
        updated = voters.update_voter(local)
        if updated is None:
            return []  # its entry names another directory: nothing of its own to update
        return [(ControlRecordType.KRAFT_VERSION, KRaftVersionRecord(version=0, kraft_version=level)),
                (ControlRecordType.KRAFT_VOTERS, voters_record_of(updated))]

    def transition_to_unattached(self, epoch: int, now_ms: int, leader_id: int | None = None) -> None:
        """A higher epoch with no known leader (or a prospective replica's own epoch, after it
        lost). Parked fetches stay parked, as in Kafka: they are answered when their wait runs
        out (with the answer they would have got then)."""
        self._drop_voter_change()
        self._drop_pending_appends()
        self.quorum.to_unattached(epoch, now_ms, leader_id)
        self.requests.reset_all()

    def transition_to_resigned(self, successors: list[ReplicaKey], now_ms: int) -> None:
        self._leave_leadership(ErrorCode.NOT_LEADER_OR_FOLLOWER, now_ms)
        self.quorum.to_resigned(successors, now_ms)
        self.stats.resignations += 1
        self.requests.reset_all()

    def transition_to_follower(self, epoch: int, leader_id: int, endpoints: Endpoints, now_ms: int) -> None:
        self._drop_voter_change()
        self.quorum.to_follower(epoch, leader_id, endpoints, now_ms)
        self._on_become_follower(now_ms)

    def _on_become_follower(self, now_ms: int) -> None:
        self.requests.reset_all()
        self._leave_leadership(ErrorCode.NOT_LEADER_OR_FOLLOWER, now_ms)

    def _leave_leadership(self, error: int, now_ms: int) -> None:
        """Parked fetches are answered with ``error`` (so fetchers look for the new leader at
        once), and queued appends are dropped."""
        for parked in self.purgatory.take_all():
            self.respond_later(parked, fetch_rpcs.complete_parked_fetch(self, parked, now_ms, expired=False,
                                                                         error=error))
        self._drop_voter_change()
        self._drop_pending_appends()

    def _drop_voter_change(self) -> None:
        """A voter change pending when the leader's epoch ends is answered NOT_LEADER_OR_FOLLOWER
        (LeaderState.close): its record may still commit under the next leader."""
        state = self.quorum.state
        if isinstance(state, LeaderState):
            reconfig_rpcs.finish(self, state, ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def _drop_pending_appends(self) -> None:
        """Appends queued by a leader that no longer leads were never written: they are lost, as
        Kafka's accumulator drops them when its leader state closes."""
        self._pending.clear()
        self._pending_records = 0
        self._linger_deadline_ms = NEVER

    # -- the leader's log -------------------------------------------------------------------------
    def drain_appends(self, state: LeaderState, now_ms: int) -> int:
        """Write the queued appends once the linger time is up, flush, and count the leader's
        flushed end offset; how long until the next drain."""
        if self._pending and now_ms >= self._linger_deadline_ms:
            for values in self._pending:
                self.log.append_as_leader(values, epoch=state.epoch, timestamp=now_ms)
            self._pending.clear()
            self._pending_records = 0
            self._linger_deadline_ms = NEVER
            self._needs_flush = True
        if self._needs_flush:
            self._needs_flush = False
            self.log.flush()
        self.update_leader_end_offset(state, now_ms)
        return self._linger_deadline_ms - now_ms if self._pending else NEVER

    def update_leader_end_offset(self, state: LeaderState, now_ms: int) -> None:
        if state.voters_version != self.history.version:
            state.update_voters(self.quorum.voters, self.history.version)
        if state.update_local_state(self.log.flushed_end_offset):
            self.on_leader_high_watermark(state)
        for parked in self.purgatory.take_ready(self.log.end_offset, state.high_watermark):
            self.respond_later(parked, fetch_rpcs.complete_parked_fetch(self, parked, now_ms, expired=False))

    def on_leader_high_watermark(self, state: LeaderState) -> None:
        if state.high_watermark is not None:
            self.log.update_high_watermark(state.high_watermark)
            reconfig_rpcs.high_watermark_updated(self, state)

    def _expire_parked_fetches(self, now_ms: int) -> int:
        for parked in self.purgatory.take_expired(now_ms):
            self.respond_later(parked, fetch_rpcs.complete_parked_fetch(self, parked, now_ms, expired=True))
        deadline = self.purgatory.next_deadline_ms()
        return NEVER if deadline >= NEVER else max(0, deadline - now_ms)

    # -- the follower's log ------------------------------------------------------------------------
    def append_as_follower(self, records: bytes) -> None:
        if self.log.append_as_follower(records) is not None:
            self.history.add_batches(records)
        if self.quorum.is_voter() or self.followers_always_flush:
            self.log.flush()  # a voter fetches again only once this is durable: see polling.py

    def on_log_truncated(self) -> None:
        """The follower cut its log's tail: the voter changes there are undone."""
        self.history.truncate_new_entries(self.log.end_offset)

    def on_snapshot_loaded(self, snapshot_id: OffsetAndEpoch) -> None:
        """The log now starts at a fetched snapshot: the voter set and kraft.version are the
        snapshot's (its last VotersRecord and KRaftVersionRecord, standing at its last offset).
        A snapshot that names no voters (a static quorum's, or one a leader wrote below the
        quorum's first VotersRecord) leaves what this replica's log said below the snapshot's end."""
        size = self.log.snapshot_size(snapshot_id)
        data = self.log.read_snapshot(snapshot_id, 0, size) if size else b""
        probe = VoterSetHistory(VoterSet([]))
        probe.add_snapshot(data, snapshot_id.offset - 1)
        if probe.latest_entry() is None:
            self.history.truncate_new_entries(snapshot_id.offset)
            return
        self.history.clear()
        self.history.add_snapshot(data, snapshot_id.offset - 1)

    def update_follower_high_watermark(self, state: FollowerState, leader_high_watermark: int) -> None:
        """A follower commits what the leader committed, as far as its own log reaches."""
        offset = min(self.log.end_offset, leader_high_watermark)
        try:
            moved = state.update_high_watermark(offset)
        except ValueError as e:
            raise RaftStateError(str(e)) from e
        if moved:
            self.log.update_high_watermark(offset)

    def binary_exponential_backoff_ms(self, retries: int) -> int:
        """After a lost election: a random multiple of 100 ms below 2^retries × 100 ms, capped."""
        if retries <= 0:
            raise ValueError(f"retries {retries} must be positive")
        return min(RETRY_BACKOFF_BASE_MS * self.rng.randrange(2 << min(20, retries - 1)),
                   self.config.election_backoff_max_ms)

    # -- events -----------------------------------------------------------------------------------
    def _emit_events(self) -> None:
        q = self.quorum
        state = q.state
        if state.role != "resigned":  # Kafka tells listeners nothing while resigned
            current = (q.epoch, q.leader_id)
            if current != self._announced:
                self._announced = current
                start = state.epoch_start_offset if isinstance(state, LeaderState) else None
                self._events.append(LeaderChange(q.epoch, q.leader_id, start))
        hw = q.high_watermark
        if hw is not None and (self._announced_hw is None or hw > self._announced_hw):
            self._announced_hw = hw
            self._events.append(HighWatermark(hw))

    def __repr__(self) -> str:
        return (f"RaftNode(id={self.node_id}, {self.role}, epoch={self.epoch}, leader={self.leader_id}, "
                f"hw={self.high_watermark}, log=[{self.log.start_offset}, {self.log.end_offset}))")


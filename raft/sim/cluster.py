"""The simulated cluster: nodes with their logs and quorum-state stores, started, crashed and
restarted; messages carried between them; the workload's appends and snapshots.

Each node is driven the way a real driver would drive it: whatever arrives is handed to it, it
is polled straight after and again at the time it asks for, and what it wants sent goes onto the
network. A node's log flushes with a latency; a crash loses what was not flushed yet.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

from kraftsim.metadata.batch import ControlRecordType
from kraftsim.metadata.messages import KRaftVersionRecord
from kraftsim.raft.core import reconfig_rpcs
from kraftsim.raft.core.events import (
    InboundRequest,
    InboundResponse,
    LeaderChange,
    OutboundRequest,
    OutboundResponse,
    ShutdownComplete,
)
from kraftsim.raft.core.keys import ReplicaKey
from kraftsim.raft.core.memory_log import MemoryLog
from kraftsim.raft.core.node import NotLeaderError, RaftNode
from kraftsim.raft.core.state_store import MemoryQuorumStateStore
from kraftsim.raft.core.timer import NEVER
from kraftsim.raft.core.voter_history import VoterSetHistory
from kraftsim.raft.core.voters import Address, Endpoints, VoterNode, VoterSet
from kraftsim.raft.core.voters_records import voters_record_of
from kraftsim.raft.sim.config import SimConfig
from kraftsim.raft.sim.invariants import NodeView
from kraftsim.raft.sim.network import PRE_VOTE_VERSION, Envelope, Network
from kraftsim.raft.sim.scheduler import Scheduler
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    VoteRequest,
)

LISTENER = "CONTROLLER"
CLUSTER_ID = "kraftsim-simulated-AA"
NodeFactory = Callable[..., RaftNode]


class ReplyTo(NamedTuple):
    """Where a request's answer goes: the asking incarnation, and its correlation id."""

    node_id: int
    incarnation: int
    correlation_id: int


class AdminReply(NamedTuple):
    """Where a voter change's answer goes: the simulated admin client that asked for it."""

    kind: str  # "add" or "remove"
    voter_id: int
    leader_id: int


SUPPORTED_KRAFT_VERSIONS = (0, 1)  # what every simulated controller's ApiVersions says


def address(node_id: int) -> Address:
    return Address(f"controller-{node_id}", 9093)


def history_from_log(log: MemoryLog) -> VoterSetHistory:
    """What a controller of a dynamic quorum reads from its log at start-up (the start-up
    reader's job on disk): the voters and kraft.version of the snapshot the log starts at (at its
    last offset), then of every control batch after it."""
    history = VoterSetHistory(VoterSet([]))
    start = log.start_offset
    base = next((sid for sid in log.snapshots if sid.offset == start), None) if start > 0 else None
    if base is not None:
        history.add_snapshot(log.snapshots[base], base.offset - 1)
    for batch in log.batches_from(start):
        history.add_batches(batch.data)
    return history


@dataclass(eq=False)
class SimNode:
    """A node's disk (log and quorum-state, which outlive crashes) and its running incarnation."""

    node_id: int
    voter: bool
    directory_id: uuid.UUID
    log: MemoryLog
    store: MemoryQuorumStateStore = field(default_factory=MemoryQuorumStateStore)
    raft: RaftNode | None = None
    incarnation: int = 0
    next_wake_ms: int = NEVER
    flush_scheduled: bool = False
    stopping: bool = False  # a graceful shutdown is under way
    restart_at_ms: int | None = None

    @property
    def up(self) -> bool:
        return self.raft is not None

    def fingerprint(self) -> tuple[object, ...]:
        """What the invariants look at, as a cheap tuple: unchanged, nothing needs checking."""
        raft, log = self.raft, self.log
        head = (self.incarnation, self.store.writes, log.generation, log.start_offset, log.end_offset,
                log.flushed_end_offset, len(log.snapshots))
        if raft is None:
            return head
        quorum = raft.quorum  # a new state object on every transition; only the high watermark changes in place
        return head + (quorum.transitions, quorum.state.high_watermark)

    def view(self) -> NodeView:
        raft = self.raft
        if raft is None:
            return NodeView(self.node_id, self.incarnation, self.voter, False, "down", 0, None, None, self.log,
                            self.store.read())
        return NodeView(self.node_id, self.incarnation, self.voter, True, raft.role, raft.epoch, raft.leader_id,
                        raft.high_watermark, self.log, self.store.read(), raft.voted_for,
                        raft.history if raft.history.kraft_version() > 0 else None)


@dataclass(slots=True)
class ClusterStats:
    leaders: dict[int, int] = field(default_factory=dict)  # epoch -> leader, as leaders announced it
    appended: int = 0
    refused_appends: int = 0
    snapshots: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    # Voter changes asked of the leader, by (kind, answer), and those committed, in order
    # ("+4": 4 added, "-1": 1 removed, "-1 (leader)": the leader removed itself).
    voter_changes: Counter[tuple[str, str]] = field(default_factory=Counter)
    committed_changes: list[str] = field(default_factory=list)


class Cluster:
    def __init__(self, config: SimConfig, seed: int, node_factory: NodeFactory = RaftNode) -> None:
        self.config = config
        self.seed = seed
        self.node_factory = node_factory
        self.scheduler = Scheduler(random.Random(f"{seed}:schedule"))
        self.network = Network(config, random.Random(f"{seed}:network"))
        self.rng = random.Random(f"{seed}:cluster")  # the workload's choices
        self.stats = ClusterStats()
        ids = list(range(1, config.voters + config.observers + 1))
        self.voter_ids = ids[:config.voters]
        sync = config.flush_ms[1] == 0
        self.nodes = {i: SimNode(i, i in self.voter_ids, uuid.UUID(int=(seed % (1 << 32)) << 64 | i),
                                 MemoryLog(sync_flush=sync)) for i in ids}
        # A static quorum: controller.quorum.voters. A dynamic one: the voters a formatted
        # directory starts with (its bootstrap snapshot's VotersRecord), kraft.version 1, and
        # every controller a bootstrap server (controller.quorum.bootstrap.servers).
        if config.voter_changes:
            self.voters = VoterSet(VoterNode(ReplicaKey(i, self.nodes[i].directory_id),
                                             Endpoints({LISTENER: address(i)}), SUPPORTED_KRAFT_VERSIONS)
                                   for i in self.voter_ids)
            # ``format``: Kafka writes these in the bootstrap checkpoint (0-0); here they open every
            # log, in epoch 0, so that every snapshot holds them as a Kafka snapshot does.
            for sn in self.nodes.values():
                sn.log.append_control_as_leader([
                    (ControlRecordType.KRAFT_VERSION, KRaftVersionRecord(version=0, kraft_version=1)),
                    (ControlRecordType.KRAFT_VOTERS, voters_record_of(self.voters))], epoch=0, timestamp=0)
                sn.log.flush()
                sn.log.complete_flush()
        else:
            self.voters = VoterSet.static({i: address(i) for i in self.voter_ids}, LISTENER)
        self.events_log: list[str] = []  # node events for the trace: elections, leader changes

    @property
    def now_ms(self) -> int:
        return self.scheduler.now_ms

    def views(self) -> list[NodeView]:
        return [n.view() for n in self.nodes.values()]

    def fingerprint(self) -> tuple[tuple[object, ...], ...]:
        return tuple(n.fingerprint() for n in self.nodes.values())

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, node_id: int) -> None:
        sn = self.nodes[node_id]
        if sn.raft is not None:
            return
        sn.incarnation += 1
        sn.restart_at_ms = None
        sn.stopping = False
        dynamic: dict[str, object] = {}
        if self.config.voter_changes:
            dynamic = {"voter_history": history_from_log(sn.log),
                       "bootstrap": {i: address(i) for i in self.nodes}, "followers_always_flush": True}
        sn.raft = self.node_factory(
            node_id=node_id, directory_id=sn.directory_id, cluster_id=CLUSTER_ID, voters=self.voters,
            listeners=Endpoints({LISTENER: address(node_id)}), listener_name=LISTENER, log=sn.log, store=sn.store,
            config=self.config.quorum, rng=random.Random(f"{self.seed}:node:{node_id}:{sn.incarnation}"),
            now_ms=self.now_ms, max_fetch_bytes=self.config.max_fetch_bytes, pre_vote=self.config.pre_vote(node_id),
            candidate_backoff=self.config.release != "4.1", **dynamic)
        self.drive(sn)

    def crash(self, node_id: int) -> None:
        """The process dies: no goodbye, and the disk keeps only what was flushed."""
        sn = self.nodes[node_id]
        if sn.raft is None:
            return
        sn.raft = None
        sn.log.crash()
        sn.next_wake_ms = NEVER
        sn.flush_scheduled = False
        sn.stopping = False

    def stop_cleanly(self, node_id: int) -> None:
        """The end of a graceful shutdown: the log is flushed and closed."""
        sn = self.nodes[node_id]
        sn.log.flush()
        sn.log.complete_flush()
        self.crash(node_id)

    def schedule_restart(self, node_id: int, delay_ms: int) -> None:
        sn = self.nodes[node_id]
        sn.restart_at_ms = self.now_ms + delay_ms
        incarnation = sn.incarnation

        def restart() -> None:
            if sn.raft is None and sn.incarnation == incarnation:
                self.start(node_id)

        self.scheduler.after(delay_ms, f"restart {node_id}", restart)

    def shutdown(self, node_id: int, timeout_ms: int = 5_000) -> None:
        sn = self.nodes[node_id]
        if sn.raft is None or sn.stopping:
            return
        sn.stopping = True
        sn.raft.shutdown(timeout_ms, self.now_ms)
        self.drive(sn)

    # -- driving a node ----------------------------------------------------------------------------
    def drive(self, sn: SimNode) -> None:
        """Poll the node, send what it wants sent, note what it reports, and wake it when it asks."""
        raft = sn.raft
        if raft is None:
            return
        now = self.now_ms
        wake = raft.poll(now)
        for out in raft.take_outbound():
            if isinstance(out, OutboundRequest):
                self._send_request(sn, out)
            else:
                self._send_response(sn, out)
        for event in raft.take_events():
            if isinstance(event, LeaderChange):
                if event.leader_id == sn.node_id:
                    self.stats.leaders[event.epoch] = sn.node_id
                self.events_log.append(f"{now} node {sn.node_id}: epoch {event.epoch} leader {event.leader_id}")
            elif isinstance(event, ShutdownComplete):
                self.scheduler.after(0, f"stopped {sn.node_id}", lambda: self._stopped(sn))
        if sn.raft is None:
            return
        if sn.log.flush_requested_end > sn.log.flushed_end_offset and not sn.flush_scheduled:
            sn.flush_scheduled = True
            incarnation = sn.incarnation
            self.scheduler.after(self.rng.randint(*self.config.flush_ms), f"flush {sn.node_id}",
                                 lambda: self._flushed(sn, incarnation))
        if wake < NEVER and (wake < sn.next_wake_ms or sn.next_wake_ms <= now):
            sn.next_wake_ms = wake
            incarnation = sn.incarnation
            self.scheduler.at(wake, f"wake {sn.node_id}", lambda: self._wake(sn, incarnation, wake))

    def _wake(self, sn: SimNode, incarnation: int, at: int) -> None:
        if sn.incarnation != incarnation or sn.next_wake_ms != at:
            return  # superseded
        sn.next_wake_ms = NEVER
        self.drive(sn)

    def _flushed(self, sn: SimNode, incarnation: int) -> None:
        if sn.incarnation != incarnation or sn.raft is None:
            return
        sn.flush_scheduled = False
        sn.log.complete_flush()
        self.drive(sn)

    def _stopped(self, sn: SimNode) -> None:
        if sn.raft is None:
            return
        self.stop_cleanly(sn.node_id)
        self.schedule_restart(sn.node_id, self.rng.randint(0, self.config.fault_duration_ms))

    # -- the network ---------------------------------------------------------------------------------
    def _send_request(self, sn: SimNode, out: OutboundRequest) -> None:
        if out.address is not None and out.address != address(out.destination):
            raise AssertionError(f"node {sn.node_id} sent to {out.destination} at {out.address}")
        api_key = type(out.message).api_key()
        assert api_key is not None
        version = self.network.api_version(sn.node_id, out.destination, api_key)
        env = Envelope(sn.node_id, out.destination, sn.incarnation, None, out.correlation_id, version, out.message,
                       True)
        if isinstance(out.message, VoteRequest) and out.message.topics[0].partitions[0].pre_vote \
                and version < PRE_VOTE_VERSION:
            # A pre-vote to a Kafka 3.9 voter cannot be encoded: the client fails it before it
            # leaves (UNSUPPORTED_VERSION), as Kafka's NetworkClient does.
            self._refuse(env, ErrorCode.UNSUPPORTED_VERSION)
            return
        self._transmit(env)

    def _send_response(self, sn: SimNode, out: OutboundResponse) -> None:
        reply_to = out.reply_to
        if isinstance(reply_to, AdminReply):
            self._voter_change_answered(reply_to, out.message)
            return
        assert isinstance(reply_to, ReplyTo)
        src, src_incarnation, correlation_id = reply_to
        env = Envelope(sn.node_id, src, sn.incarnation, src_incarnation, correlation_id, out.api_version, out.message,
                       False)
        self._transmit(env)

    def _transmit(self, env: Envelope) -> None:
        dst = self.nodes.get(env.dst)
        if dst is None:
            raise AssertionError(f"node {env.src} sent to unknown node {env.dst}")
        self.network.stats.sent += 1
        if env.is_request and dst.raft is None:
            self._refuse(env)  # nobody listening: the connection fails at once
            return
        if env.is_request:
            env.dst_incarnation = dst.incarnation
        label = f"deliver {env.src}->{env.dst} {type(env.message).__name__}"
        for delay in self.network.delays(env.src, env.dst):
            self.scheduler.after(delay, label, partial(self._deliver, env))

    def _deliver(self, env: Envelope) -> None:
        dst = self.nodes[env.dst]
        if dst.raft is None or dst.incarnation != env.dst_incarnation:
            if env.is_request:
                self._refuse(env)  # the connection died with the process
            return
        self.network.stats.delivered += 1
        env = self.network.carry(env)
        if env.is_request and isinstance(env.message, ApiVersionsRequest):
            self._answer_api_versions(env)  # the server answers it, not the Raft node
            return
        if env.is_request:
            reply_to = ReplyTo(env.src, env.src_incarnation, env.correlation_id)
            request = InboundRequest(env.message, env.api_version, reply_to, LISTENER)  # type: ignore[arg-type]
            dst.raft.handle_request(request, self.now_ms)
        else:
            dst.raft.handle_response(InboundResponse(env.src, env.correlation_id, env.message),  # type: ignore[arg-type]
                                     self.now_ms)
        self.drive(dst)

    def _refuse(self, env: Envelope, error: int = ErrorCode.BROKER_NOT_AVAILABLE) -> None:
        """The sender learns the connection failed (Kafka: BROKER_NOT_AVAILABLE), or that the
        request could not be sent at the peer's version, soon after."""
        if error == ErrorCode.UNSUPPORTED_VERSION:
            self.network.stats.unsupported += 1
        else:
            self.network.stats.refused += 1
        src = self.nodes[env.src]
        incarnation = env.src_incarnation
        api_key = type(env.message).api_key()
        assert api_key is not None

        def fail() -> None:
            if src.raft is not None and src.incarnation == incarnation:
                src.raft.fail_request(env.dst, env.correlation_id, api_key, error, self.now_ms)
                self.drive(src)

        self.scheduler.after(self.rng.randint(*self.config.delay_ms), f"refused {env.src}->{env.dst}", fail)

    # -- the workload ----------------------------------------------------------------------------------
    def append(self) -> None:
        """A client appends one record to a node that thinks it leads (maybe a deposed one)."""
        leaders = [sn for sn in self.nodes.values() if sn.raft is not None and sn.raft.is_leader()]
        if not leaders:
            self.stats.refused_appends += 1
            return
        sn = self.rng.choice(leaders)
        assert sn.raft is not None
        try:
            sn.raft.append(sn.raft.epoch, [b"record-%d" % self.stats.appended], self.now_ms)
            self.stats.appended += 1
        except NotLeaderError:
            self.stats.refused_appends += 1
        self.drive(sn)

    def snapshot(self) -> None:
        """A node's state machine snapshots at its high watermark, and its log drops what the
        snapshot replaces (what makes a far-behind follower fetch a snapshot)."""
        up = [sn for sn in self.nodes.values() if sn.raft is not None and sn.raft.high_watermark is not None]
        if not up:
            return
        sn = self.rng.choice(up)
        log, raft = sn.log, sn.raft
        assert raft is not None
        boundary = None
        for b in log.batches_from(log.start_offset):
            if b.last_offset >= log.high_watermark:
                break
            boundary = b.last_offset + 1
        if boundary is None:
            return
        sid = log.take_snapshot(boundary)
        if sid is not None:
            raft.history.truncate_old_entries(sid.offset)  # as the controller's snapshotter has it trimmed
            log.delete_before_snapshot(sid)
            self.stats.snapshots += 1

    # -- voter changes ---------------------------------------------------------------------------------
    def _answer_api_versions(self, env: Envelope) -> None:
        lo, hi = SUPPORTED_KRAFT_VERSIONS
        answer = ApiVersionsResponse(supported_features=[
            ApiVersionsResponse.SupportedFeatureKey(name=reconfig_rpcs.KRAFT_VERSION_FEATURE, min_version=lo,
                                                    max_version=hi)])
        dst = self.nodes[env.dst]
        self._transmit(Envelope(env.dst, env.src, dst.incarnation, env.src_incarnation, env.correlation_id,
                                env.api_version, answer, False))

    def voter_change(self) -> None:
        """An admin asks the node that thinks it leads to add a spare controller or remove one of
        three or more voters (now and then the leader itself), as ``kraftsim metadata-quorum add-controller`` or
        ``remove-controller`` would; the answer comes back when the leader gives it."""
        leaders = [sn for sn in self.nodes.values() if sn.raft is not None and sn.raft.is_leader()]
        if not leaders:
            return
        sn = self.rng.choice(leaders)
        assert sn.raft is not None
        voters = sn.raft.quorum.voters
        spares = [i for i in self.nodes if i not in voters.ids()]
        # Never below two voters: a two-voter quorum whose leader removes itself and loses its
        # epoch before that commits can be left with no electable voter (the leader, holding the
        # record, sees itself as an observer; the other, without it, needs the leader's vote).
        if len(voters) < 3 and not spares:
            return
        remove = not spares or (len(voters) >= 3 and self.rng.random() < 0.5)
        if remove:
            self.ask_voter_change(sn, "remove", self.rng.choice(sorted(voters.ids())))
        else:
            self.ask_voter_change(sn, "add", self.rng.choice(spares))

    def ask_voter_change(self, sn: SimNode, kind: str, target: int) -> None:
        """AddRaftVoter or RemoveRaftVoter for node ``target`` (its directory), sent to ``sn``."""
        raft = sn.raft
        assert raft is not None
        request: AddRaftVoterRequest | RemoveRaftVoterRequest
        directory = self.nodes[target].directory_id
        if kind == "remove":
            request = RemoveRaftVoterRequest(cluster_id=CLUSTER_ID, voter_id=target, voter_directory_id=directory)
        else:
            where = address(target)
            request = AddRaftVoterRequest(cluster_id=CLUSTER_ID, timeout_ms=30_000, voter_id=target,
                                          voter_directory_id=directory, listeners=[
                                              AddRaftVoterRequest.Listener(name=LISTENER, host=where.host,
                                                                           port=where.port)])
        raft.handle_request(InboundRequest(request, 0, AdminReply(kind, target, sn.node_id), LISTENER), self.now_ms)
        self.drive(sn)

    def _voter_change_answered(self, reply: AdminReply, answer: object) -> None:
        assert isinstance(answer, (AddRaftVoterResponse, RemoveRaftVoterResponse))
        code = ErrorCode(answer.error_code).name
        self.stats.voter_changes[(reply.kind, code)] += 1
        if answer.error_code == ErrorCode.NONE:
            sign = "+" if reply.kind == "add" else "-"
            leader = " (leader)" if reply.kind == "remove" and reply.voter_id == reply.leader_id else ""
            self.stats.committed_changes.append(f"{sign}{reply.voter_id}{leader}")
            self.events_log.append(f"{self.now_ms} voter change {sign}{reply.voter_id}{leader} committed")

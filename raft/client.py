"""This controller's Raft node, run on the event loop: the I/O around the sans-I/O core
(``raft/core``), as Kafka's KafkaRaftClient runs inside its RaftManager.

The core decides everything; this driver feeds it and carries out what it asks:

- requests from peers arrive through ``raft/apis.py`` (after its authorization) and are handed
  to the node with a reply handle; the answer goes back on the request's connection, at once or,
  for a Fetch parked in the purgatory, when the node releases it;
- the node's own requests go out on one connection per peer (``raft/network.py``), and their
  answers, or a failure standing for one, come back to it;
- one timer wakes the node at the time it asks for, moved earlier by any input; every input is
  followed by a poll on the next turn of the event loop, so a burst of inputs costs one poll;
- ``now_ms`` is the wall clock of the controller's :class:`Clock`, as Kafka's Raft client runs
  on wall-clock time;
- the log flushes in the background, and a completed flush is an input (the leader counts only
  what it has flushed; a follower fetches again only once its log is durable).

What the node reports goes to the controller: a new leader or epoch (:attr:`on_leader_change`,
with the epoch's start offset when this node won it), the committed offset moving
(:attr:`on_commit`), this node no longer leading (:attr:`on_resign`: it resigned, or lost its
epoch, without a new leader being known yet), and a fault that stops the node
(:attr:`on_failure`). The controller appends through :meth:`append` while this node leads and
waits for commits with :meth:`wait_committed`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence

from kraftsim.metadata.batch import ControlRecordType
from kraftsim.metadata.log import MetadataLog
from kraftsim.metadata.messages import KRaftVersionRecord
from kraftsim.metadata.offset_waiters import OffsetWaiters
from kraftsim.metadata.segments import LogFailedError
from kraftsim.raft.core.config import QuorumConfig
from kraftsim.raft.core.events import (
    HighWatermark,
    InboundRequest,
    InboundResponse,
    LeaderChange,
    OutboundRequest,
    RaftRequest,
    RaftResponse,
    ShutdownComplete,
)
from kraftsim.raft.core.keys import ReplicaKey
from kraftsim.raft.core.leader_state import LeaderState
from kraftsim.raft.core.node import NotLeaderError, RaftNode
from kraftsim.raft.core.state_store import QuorumStateStore
from kraftsim.raft.core.timer import NEVER
from kraftsim.raft.core.voter_history import VoterSetHistory
from kraftsim.raft.core.voters import Address, Endpoints, VoterSet
from kraftsim.raft.core.voters_records import voters_record_of
from kraftsim.raft.disk_log import DiskLog
from kraftsim.raft.network import RaftNetwork
from kraftsim.rpc.clock import Clock, SystemClock
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.message import Message

log = logging.getLogger("kraftsim.raft")

__all__ = ["NotLeaderError", "RaftClient"]


class _Reply:
    """A request's reply handle: the node's answer lands here, now or later."""

    __slots__ = ("response", "future")

    def __init__(self) -> None:
        self.response: RaftResponse | None = None
        self.future: asyncio.Future[RaftResponse] | None = None


class RaftClient:
    def __init__(self, *, node_id: int, directory_id: uuid.UUID, cluster_id: str, voters: VoterSet,
                 listener_name: str, mlog: MetadataLog, store: QuorumStateStore, config: QuorumConfig,
                 clock: Clock | None = None, rng: random.Random | None = None, kraft_version: int = 0,
                 voter_history: VoterSetHistory | None = None, listeners: Endpoints | None = None,
                 bootstrap: Mapping[int, Address] | None = None,
                 supported_kraft_versions: tuple[int, int] = (0, 1),
                 speaks: Mapping[int, tuple[int, int]] | None = None, pre_vote: bool = False,
                 candidate_backoff: bool = True) -> None:
        """``voters`` and ``kraft_version``: the static quorum (``controller.quorum.voters`` at
        kraft.version 0; no voters for a node formatted ``--no-initial-controllers``);
        ``voter_history`` what the log says of the quorum (raft/dynamic_voters.py's
        read_history), which the node keeps from there; ``listeners`` this node's own (default:
        its entry in ``voters``); ``bootstrap`` where an observer first asks for the leader
        (default: the voters); ``supported_kraft_versions`` what this node's software supports,
        as a leader writes it into its own VotersRecord entry; ``speaks`` the versions it asks
        its peers in where they are not Kafka 3.9's (raft/network.py); ``pre_vote`` whether it elects
as Kafka 4.0 does, asking for pre-votes first (KIP-996), and ``candidate_backoff`` whether a
refused candidate backs off (up to 4.0) or waits out its election timeout (from 4.1). A controller flushes what it
        fetches as an observer too, since it may become a voter (Kafka's RaftManager builds its
        client so)."""
        self.mlog = mlog
        self.log = DiskLog(mlog)
        self.clock: Clock = clock or SystemClock()
        self.config = config
        self.node_id = node_id
        self.voters = voters
        self.node = RaftNode(node_id=node_id, directory_id=directory_id, cluster_id=cluster_id, voters=voters,
                             listeners=voters.listeners(node_id) if listeners is None else listeners,
                             listener_name=listener_name, log=self.log, store=store, config=config,
                             rng=rng or random.Random(), now_ms=self.clock.wall_ms(), kraft_version=kraft_version,
                             voter_history=voter_history, bootstrap=bootstrap,
                             supported_kraft_versions=supported_kraft_versions, followers_always_flush=True,
                             pre_vote=pre_vote, candidate_backoff=candidate_backoff)
        self.network = RaftNetwork(f"raft-client-{node_id}", config.request_timeout_ms, self._on_response,
                                   self._on_request_failed, speaks)
        self.on_leader_change: list[Callable[[LeaderChange], None]] = []
        self.on_commit: list[Callable[[int], None]] = []
        self.on_resign: list[Callable[[], None]] = []
        self.on_failure: list[Callable[[BaseException], None]] = []
        self.failure: BaseException | None = None
        self.leader_id: int | None = None  # as last announced
        self.epoch = 0  # likewise
        self.leader_epoch: int | None = None  # the epoch this node leads, as last announced
        self.committed_offset = -1  # the last committed offset this node knows (high watermark - 1)
        self._waiters = OffsetWaiters()
        self._started = False
        self._poll_scheduled = False
        self._processing = False
        self._again = False
        self._timer: asyncio.TimerHandle | asyncio.Task[None] | None = None
        self._timer_at = NEVER
        self._shutdown: asyncio.Future[bool] | None = None
        mlog.on_flush.append(self._flushed)
        mlog.on_failure.append(self._fail)

    # -- views -----------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        return self.node.is_leader()

    @property
    def end_offset(self) -> int:
        """The offset the next appended record gets (the write path replays records at it)."""
        return self.node.next_offset

    @property
    def high_watermark(self) -> int:
        """What the log holds committed, as far as this node knows (0 before it knows)."""
        return self.committed_offset + 1

    @property
    def is_only_voter(self) -> bool:
        return self.node.quorum.is_only_voter()

    @property
    def is_voter(self) -> bool:
        return self.node.quorum.is_voter()

    def observers(self) -> list[ReplicaKey]:
        """The observers this node, as the leader, has heard fetch lately (none when it does not
        lead): what DescribeQuorum lists."""
        state = self.node.quorum.state
        if not isinstance(state, LeaderState):
            return []
        return [s.key for s in state.active_observers(self.clock.wall_ms())]

    # -- life --------------------------------------------------------------------------------
    def start(self) -> None:
        """Report what the node decided at construction (a lone voter has elected itself) and
        start polling it."""
        self._started = True
        self._poll()

    async def shutdown(self, timeout_ms: int) -> bool:
        """Kafka's graceful shutdown: a leader resigns and tells the voters; done once another
        node leads (or there is no one to hand over to), or after ``timeout_ms``. Whether it
        completed in time."""
        if not self._started or self.failure is not None or self.node.shutdown_done:
            return False
        if self._shutdown is None:
            self._shutdown = asyncio.get_running_loop().create_future()
            self.node.shutdown(timeout_ms, self.clock.wall_ms())
            self._kick()
        try:
            return await asyncio.wait_for(asyncio.shield(self._shutdown), timeout_ms / 1000 + 1)
        except TimeoutError:
            return False

    async def close(self) -> None:
        self._started = False
        self._cancel_timer()
        await self.network.close()
        self._waiters.fail(NotLeaderError("the Raft client is closed"))

    # -- the controller's side ---------------------------------------------------------------
    def append(self, values: Sequence[bytes], timestamp: int) -> int:
        """Append records in the epoch this node leads; the offset of the last. NotLeaderError
        when it does not lead (any more), LogFailedError once the log has failed."""
        if self.failure is not None:
            raise LogFailedError(f"the metadata log failed: {self.failure}")
        epoch = self.leader_epoch
        if epoch is None:
            raise NotLeaderError(f"node {self.node_id} does not lead epoch {self.epoch}")
        last = self.node.append(epoch, values, self.clock.wall_ms())
        self._kick()
        return last

    def snapshot_control_records(self, last_offset: int) -> list[tuple[ControlRecordType, Message]]:
        """What a snapshot of the log up to ``last_offset`` starts with after its header, as
        Kafka's RecordsSnapshotWriter writes it: nothing at kraft.version 0; from 1 the
        KRaftVersionRecord and the VotersRecord of the voter set in force at that offset, as the
        node's voter-set history has them (a change written after it is not in the snapshot)."""
        history = self.node.history
        kraft_version = history.kraft_version_at(last_offset)
        voters = history.entry_at(last_offset)
        if kraft_version < 1 or voters is None:
            return []
        return [(ControlRecordType.KRAFT_VERSION, KRaftVersionRecord(version=0, kraft_version=kraft_version)),
                (ControlRecordType.KRAFT_VOTERS, voters_record_of(voters))]

    def snapshot_written(self, end_offset: int) -> None:
        """The state machine wrote a snapshot ending at ``end_offset``: the voter-set history
        forgets what the snapshot covers but the entry in force there, as Kafka's KafkaRaftClient
        does when a snapshot it created freezes."""
        self.node.history.truncate_old_entries(end_offset)

    def append_control(self, messages: Sequence[tuple[ControlRecordType, Message]], timestamp: int) -> int:
        """Append one control batch in the epoch this node leads (a kraft.version upgrade's
        KRaftVersionRecord and VotersRecord); the offset of its last record."""
        if self.failure is not None:
            raise LogFailedError(f"the metadata log failed: {self.failure}")
        epoch = self.leader_epoch
        if epoch is None:
            raise NotLeaderError(f"node {self.node_id} does not lead epoch {self.epoch}")
        last = self.node.append_control(epoch, messages, self.clock.wall_ms())
        self._kick()
        return last

    async def wait_committed(self, offset: int) -> None:
        """Return once ``offset`` is committed. NotLeaderError if this node stops leading first
        (what it appended may or may not be committed later), LogFailedError if the log fails."""
        if offset <= self.committed_offset:
            return
        if self.failure is not None:
            raise LogFailedError(f"the metadata log failed: {self.failure}")
        fut = self._waiters.wait(offset)
        self._kick()
        await fut

    def abandon_waiters(self) -> None:
        """Fail every :meth:`wait_committed` (the controller renounced)."""
        self._waiters.fail(NotLeaderError("the controller renounced"))

    def resign(self) -> None:
        """Step down from the epoch this node leads (a controller fault): it resigns at its next
        poll, tells the voters, and stands again after an election timeout."""
        epoch = self.leader_epoch
        if epoch is not None:
            self.node.resign(epoch)
            self._kick()

    def handle_request(self, ctx: RequestContext, message: RaftRequest) -> RaftResponse | Awaitable[RaftResponse]:
        """A Raft request from a peer, a broker or a tool: the node's answer, or an awaitable of
        it for a Fetch waiting for data."""
        reply = _Reply()
        self._call(lambda now: self.node.handle_request(InboundRequest(message, ctx.api_version, reply, ctx.listener),
                                                        now))
        response = reply.response
        if response is not None:
            return response
        fut: asyncio.Future[RaftResponse] = asyncio.get_running_loop().create_future()
        reply.future = fut
        return fut

    # -- inputs ------------------------------------------------------------------------------
    def _on_response(self, peer: int, correlation_id: int, message: RaftResponse) -> None:
        self._call(lambda now: self.node.handle_response(InboundResponse(peer, correlation_id, message), now))

    def _on_request_failed(self, peer: int, correlation_id: int, api_key: int, error: int) -> None:
        self._call(lambda now: self.node.fail_request(peer, correlation_id, api_key, error, now))

    def _flushed(self, offset: int) -> None:
        self._kick()

    def _call(self, action: Callable[[int], None]) -> None:
        """Feed the node one input, act on what it says, and poll it on the next turn."""
        if self.failure is not None:
            return
        try:
            action(self.clock.wall_ms())
        except Exception as e:  # noqa: BLE001 - a broken rule or storage: the node stops (Kafka's raft thread dies)
            self._fail(e)
            return
        self._process()
        self._kick()

    # -- polling -----------------------------------------------------------------------------
    def _kick(self) -> None:
        if self._started and not self._poll_scheduled:
            self._poll_scheduled = True
            asyncio.get_running_loop().call_soon(self._poll)

    def _poll(self) -> None:
        self._poll_scheduled = False
        if not self._started or self.failure is not None:
            return
        try:
            wake = self.node.poll(self.clock.wall_ms())
        except Exception as e:  # noqa: BLE001 - as in _call
            self._fail(e)
            return
        self._process()
        self._set_timer(wake)

    def _set_timer(self, wake_ms: int) -> None:
        if wake_ms >= NEVER or (self._timer is not None and self._timer_at <= wake_ms):
            return  # an earlier (or the same) wake-up is set; waking early costs one poll
        self._cancel_timer()
        self._timer_at = wake_ms
        delay_ms = max(0, wake_ms - self.clock.wall_ms())
        if isinstance(self.clock, SystemClock):
            self._timer = asyncio.get_running_loop().call_later(delay_ms / 1000, self._on_timer)
        else:  # a clock of the test's: sleep on it
            self._timer = asyncio.get_running_loop().create_task(self._sleep_then_poll(delay_ms))

    async def _sleep_then_poll(self, delay_ms: int) -> None:
        await self.clock.sleep_ms(delay_ms)
        self._timer = None
        self._on_timer()

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = NEVER
        self._poll()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = NEVER

    # -- outputs -----------------------------------------------------------------------------
    def _process(self) -> None:
        """Send what the node wants sent and report what it says happened. Listeners may call
        back (an append, a resignation): they are reported to after the node's call returned,
        and anything they cause is picked up by the loop here."""
        if self._processing:
            self._again = True
            return
        self._processing = True
        try:
            while True:
                self._again = False
                node = self.node
                for out in node.take_outbound():
                    if isinstance(out, OutboundRequest):
                        self.network.send(out)
                    else:
                        reply = out.reply_to
                        assert isinstance(reply, _Reply)
                        if reply.future is not None:
                            if not reply.future.done():
                                reply.future.set_result(out.message)
                        else:
                            reply.response = out.message
                for event in node.take_events():
                    if isinstance(event, LeaderChange):
                        self._leader_changed(event)
                    elif isinstance(event, HighWatermark):
                        self._committed(event.offset - 1)
                    elif isinstance(event, ShutdownComplete):
                        if self._shutdown is not None and not self._shutdown.done():
                            self._shutdown.set_result(not event.timed_out)
                if self.leader_epoch is not None and not node.is_leader():
                    self._resigned()
                if not self._again:
                    return
        finally:
            self._processing = False

    def _leader_changed(self, event: LeaderChange) -> None:
        was_leading = self.leader_epoch is not None
        self.epoch, self.leader_id = event.epoch, event.leader_id
        if event.leader_id == self.node_id:
            self.leader_epoch = event.epoch
            log.info("node %d is the Raft leader of epoch %d (its epoch starts at offset %s)", self.node_id,
                     event.epoch, event.epoch_start_offset)
        else:
            self.leader_epoch = None
            if was_leading:
                self._waiters.fail(NotLeaderError(f"node {self.node_id} no longer leads"))
            log.debug("in epoch %d the Raft leader is %s", event.epoch,
                      "unknown" if event.leader_id is None else event.leader_id)
        for listener in self.on_leader_change:
            listener(event)

    def _resigned(self) -> None:
        log.info("node %d resigned from epoch %d", self.node_id, self.leader_epoch)
        self.leader_epoch = None
        self._waiters.fail(NotLeaderError(f"node {self.node_id} resigned"))
        for listener in self.on_resign:
            listener()

    def _committed(self, offset: int) -> None:
        if offset <= self.committed_offset:
            return
        self.committed_offset = offset
        self._waiters.advance(offset)
        for listener in self.on_commit:
            listener(offset)

    def _fail(self, e: BaseException) -> None:
        if self.failure is not None:
            return
        self.failure = e
        if not isinstance(e, LogFailedError):
            log.error("the Raft node stopped: %r", e, exc_info=e)
        self._cancel_timer()
        self._waiters.fail(LogFailedError(str(e)))
        for listener in self.on_failure:
            listener(e)

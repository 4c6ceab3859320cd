"""This node as the leader of ``__cluster_metadata``: it appends in its epoch, decides what is
committed, and keeps the state of every replica that fetches from it.

The write path appends through :meth:`RaftLeader.append`; storage (``MetadataLog``) only says
what is flushed to this node's disk, and this class turns that into the high watermark. With one
voter an offset is committed once it is flushed here (Kafka's LeaderState with a single voter);
with more voters it would be the majority's flushed offset, and only this class would change.
Listeners hear of every advance of the committed offset (the controller trims its image's undo
journal) and of the failure after which nothing more can commit.

Fetchers are tracked as Kafka's LeaderState tracks them (``ReplicaState``): the offset each one
has (its fetch offset), when it last fetched and when it last caught up with the leader's end;
an observer silent for five minutes is forgotten. A fetch with nothing to return waits in
:meth:`wait_for_data` until the leader's end offset moves past its fetch offset.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kraftsim.metadata.batch import ControlRecordType
from kraftsim.metadata.log import MetadataLog
from kraftsim.metadata.offset_waiters import OffsetWaiters
from kraftsim.metadata.segments import LogFailedError
from kraftsim.rpc.clock import Clock
from kraftsim.rpc.message import Message

OBSERVER_SESSION_TIMEOUT_MS = 300_000  # LeaderState.OBSERVER_SESSION_TIMEOUT_MS
NO_DIRECTORY_ID = uuid.UUID(int=0)  # ReplicaKey.NO_DIRECTORY_ID


@dataclass(slots=True)
class ReplicaState:
    """One fetching replica, as LeaderState.ReplicaState."""

    replica_id: int
    directory_id: uuid.UUID
    end_offset: int = -1  # the fetch offset: what the replica has
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_fetch_leader_end: int = -1

    def fetched(self, now_ms: int, fetch_offset: int, leader_end: int) -> None:
        """updateFollowerState: caught up if it reached the leader's end, or the end the leader
        had at its previous fetch (then as of that fetch)."""
        if fetch_offset >= leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif self.last_fetch_leader_end > 0 and fetch_offset >= self.last_fetch_leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.last_fetch_leader_end = leader_end
        self.last_fetch_ms = max(self.last_fetch_ms, now_ms)
        self.end_offset = fetch_offset


class RaftLeader:
    __slots__ = ("mlog", "node_id", "epoch", "voters", "clock", "committed_offset", "failure", "on_commit",
                 "on_failure", "observers", "_waiters", "_data_waiters")

    def __init__(self, mlog: MetadataLog, node_id: int, epoch: int, voters: Sequence[int] = (),
                 clock: Clock | None = None) -> None:
        self.mlog = mlog
        self.node_id = node_id
        self.epoch = epoch
        self.voters = list(voters) or [node_id]
        self.clock = clock
        self.committed_offset = mlog.flushed_offset  # what is on disk at election was committed before
        self.failure: BaseException | None = None
        self.on_commit: list[Callable[[int], None]] = []
        self.on_failure: list[Callable[[BaseException], None]] = []
        self.observers: dict[tuple[int, uuid.UUID], ReplicaState] = {}
        self._waiters = OffsetWaiters()
        self._data_waiters = OffsetWaiters()  # fetches waiting for data past their fetch offset
        mlog.on_flush.append(self._flushed)
        mlog.on_failure.append(self._failed)

    @property
    def end_offset(self) -> int:
        """The offset the next appended record gets."""
        return self.mlog.end_offset

    @property
    def leader_end_offset(self) -> int:
        """The leader's own replica end offset: what it has flushed (LeaderState's local state)."""
        return self.mlog.flushed_offset + 1

    @property
    def high_watermark(self) -> int:
        return self.committed_offset + 1

    def append(self, values: Sequence[bytes], timestamp: int) -> int:
        """Append framed records in this leader's epoch; returns the last offset.
        LogFailedError when storage refuses (nothing appended)."""
        return self.mlog.append_values(values, epoch=self.epoch, timestamp=timestamp)[1]

    def append_control(self, messages: Sequence[tuple[ControlRecordType, Message]], timestamp: int) -> int:
        """Append one control batch (KRaftVersionRecord and VotersRecord when kraft.version is
        upgraded) in this leader's epoch; returns its last offset."""
        return self.mlog.append_control(messages, epoch=self.epoch, timestamp=timestamp)

    async def wait_committed(self, offset: int) -> None:
        """Return once ``offset`` is committed; LogFailedError if it never can be."""
        if offset <= self.committed_offset:
            return
        if self.failure is not None:
            raise LogFailedError(f"the metadata log failed: {self.failure}")
        fut = self._waiters.wait(offset)
        self.mlog.flush_soon()
        await fut

    async def wait_for_data(self, fetch_offset: int, max_wait_ms: int) -> None:
        """A fetch's long poll (Kafka's fetch purgatory): return when the leader's end offset has
        moved past ``fetch_offset``, or after ``max_wait_ms``.

        A fetcher can be ahead of the flushed end: fetches serve appended records before their
        fsync, which Kafka's leader (flushing as it appends) never does. Such a fetcher has
        nothing new to learn but the high watermark, so it is woken when the flush reaches what
        it holds, not left to wait for the next record (at most a NoOp interval late)."""
        if self.leader_end_offset > fetch_offset or self.failure is not None:
            return
        ahead = fetch_offset > self.leader_end_offset
        fut = self._data_waiters.wait(fetch_offset - 1 if ahead else fetch_offset)
        try:
            await asyncio.wait_for(asyncio.shield(fut), max_wait_ms / 1000)
        except TimeoutError:
            fut.cancel()

    # ---- replicas ------------------------------------------------------------------------

    def _now_ms(self) -> int:
        if self.clock is not None:
            return self.clock.wall_ms()
        import time

        return int(time.time() * 1000)

    def update_replica_state(self, replica_id: int, directory_id: uuid.UUID, fetch_offset: int) -> None:
        """A fetch from ``replica_id`` at ``fetch_offset`` (updateReplicaState). Negative ids
        (consumers, tools) are not replicas; this node never fetches from itself."""
        if replica_id < 0:
            return
        if replica_id == self.node_id:
            raise RuntimeError(f"Remote replica ID {replica_id} matches the local leader ID")
        key = (replica_id, directory_id)
        state = self.observers.get(key)
        if state is None:
            state = self.observers[key] = ReplicaState(replica_id, directory_id)
        state.fetched(self._now_ms(), fetch_offset, self.leader_end_offset)

    def observer_states(self) -> list[ReplicaState]:
        """The observers, after forgetting those silent for OBSERVER_SESSION_TIMEOUT_MS."""
        now = self._now_ms()
        stale = [k for k, s in self.observers.items() if now - s.last_fetch_ms >= OBSERVER_SESSION_TIMEOUT_MS]
        for k in stale:
            del self.observers[k]
        return list(self.observers.values())

    def voter_states(self) -> list[ReplicaState]:
        """The voters: this leader, whose end offset is what it flushed and whose times are now."""
        now = self._now_ms()
        return [ReplicaState(self.node_id, NO_DIRECTORY_ID, self.leader_end_offset, now, now)]

    # ---- storage events ----------------------------------------------------------------------

    def _flushed(self, offset: int) -> None:
        """One voter: flushed here is committed (with more, the majority's flushed offset)."""
        self._data_waiters.advance(offset)
        if offset <= self.committed_offset:
            return
        self.committed_offset = offset
        self._waiters.advance(offset)
        for listener in self.on_commit:
            listener(offset)

    def _failed(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        self._waiters.fail(LogFailedError(str(exc)))
        self._data_waiters.advance(1 << 62)  # waiting fetches answer now, with what there is
        for listener in self.on_failure:
            listener(exc)

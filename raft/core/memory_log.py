"""An in-memory ReplicatedLog for the simulator and the unit tests, with a disk's failure mode:
what was appended but not flushed is lost when the node crashes (:meth:`MemoryLog.crash`).

Batches are real RecordBatch v2 bytes (encoded by ``metadata.batch``), so a Fetch response the
simulator passes between nodes is what Kafka would send. A snapshot here is the concatenation of
the batches it replaces: any bytes would do for Raft, and these let the invariant checker
compare what a snapshot holds with what other nodes committed.

Flushing is synchronous by default. With ``sync_flush=False`` a flush only records that one was
asked for (:attr:`flush_requested_end`) and :meth:`complete_flush` finishes it, so a simulator can
give the disk a latency and crash a node inside it.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from kraftsim.metadata.batch import (
    ControlRecordType,
    IncompleteBatchError,
    encode_batch,
    encode_control_batch,
    read_batches,
)
from kraftsim.raft.core.keys import OffsetAndEpoch
from kraftsim.rpc.message import Message


class LogStateError(Exception):
    """A call the log refuses (Kafka's IllegalArgumentException / IllegalStateException): the
    caller broke a rule of the log, which in a simulation is a bug to report."""


@dataclass(frozen=True, slots=True)
class StoredBatch:
    base_offset: int
    last_offset: int
    epoch: int
    data: bytes


class MemorySnapshotWriter:
    def __init__(self, log: MemoryLog, snapshot_id: OffsetAndEpoch) -> None:
        self.log = log
        self.snapshot_id = snapshot_id
        self._chunks = bytearray()
        self._done = False

    @property
    def size(self) -> int:
        return len(self._chunks)

    def append(self, chunk: bytes) -> None:
        if self._done:
            raise LogStateError(f"snapshot {self.snapshot_id} is closed")
        self._chunks += chunk

    def freeze(self) -> None:
        self._done = True
        self.log.snapshots[self.snapshot_id] = bytes(self._chunks)
        self.log.writers.discard(self)

    def close(self) -> None:
        self._done = True
        self.log.writers.discard(self)


class MemoryLog:
    def __init__(self, *, sync_flush: bool = True) -> None:
        self.sync_flush = sync_flush
        self.batches: list[StoredBatch] = []
        self._lasts: list[int] = []  # last offsets, for bisect
        self._start = 0
        self._end = 0
        self._flushed_end = 0
        self.flush_requested_end = 0
        self._hw = 0
        self.epochs: list[tuple[int, int]] = []  # (epoch, start offset), Kafka's leader epoch cache
        self.snapshots: dict[OffsetAndEpoch, bytes] = {}
        self.writers: set[MemorySnapshotWriter] = set()
        # Bumped whenever records at or above the start are removed or replaced (truncation, a
        # crash, a snapshot replacing the log): a checker must then look at the log afresh.
        self.generation = 0
        self.truncations = 0  # truncations that removed records, for tests and summaries

    # -- offsets ---------------------------------------------------------------------------
    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._end

    @property
    def flushed_end_offset(self) -> int:
        return self._flushed_end

    @property
    def high_watermark(self) -> int:
        return self._hw

    def last_fetched_epoch(self) -> int:
        if self.epochs:
            return self.epochs[-1][0]
        latest = self.latest_snapshot_id()
        if latest is None:
            return 0
        if latest.offset != self._start or latest.offset != self._end:
            raise LogStateError(f"no epoch in the log but snapshot {latest} is not at its start and end")
        return latest.epoch

    def _epoch_cache_end_offset(self, epoch: int) -> OffsetAndEpoch | None:
        """LeaderEpochFileCache.endOffsetFor, None where Kafka answers UNDEFINED."""
        entries = self.epochs
        if epoch < 0 or not entries:
            return None
        if entries[-1][0] == epoch:
            return OffsetAndEpoch(self._end, epoch)
        higher = next((e for e in entries if e[0] > epoch), None)
        if higher is None:
            return None
        floor = None
        for e in entries:
            if e[0] <= epoch:
                floor = e
        return OffsetAndEpoch(higher[1], epoch if floor is None else floor[0])

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        found = self._epoch_cache_end_offset(epoch)
        earliest = self.earliest_snapshot_id()
        if found is None:
            return OffsetAndEpoch(self._end, self.last_fetched_epoch())
        if earliest is not None and found.offset == earliest.offset and found.epoch == epoch:
            return earliest
        return found

    # -- appending -------------------------------------------------------------------------
    def _note_epoch(self, epoch: int, offset: int) -> None:
        if not self.epochs or self.epochs[-1][0] < epoch:
            self.epochs.append((epoch, offset))
        elif self.epochs[-1][0] > epoch:
            raise LogStateError(f"epoch {epoch} is older than the log's epoch {self.epochs[-1][0]}")

    def _add(self, batch: StoredBatch) -> None:
        if batch.base_offset != self._end:
            raise LogStateError(f"batch at {batch.base_offset} does not start at the log end {self._end}")
        self._note_epoch(batch.epoch, batch.base_offset)
        self.batches.append(batch)
        self._lasts.append(batch.last_offset)
        self._end = batch.last_offset + 1

    def append_as_leader(self, values: Sequence[bytes], *, epoch: int, timestamp: int) -> tuple[int, int]:
        if not values:
            raise LogStateError("nothing to append")
        base = self._end
        data = encode_batch(base, values, epoch=epoch, timestamp=timestamp)
        self._add(StoredBatch(base, base + len(values) - 1, epoch, data))
        return base, self._end - 1

    def append_control_as_leader(self, messages: Sequence[tuple[ControlRecordType, Message]], *, epoch: int,
                                 timestamp: int) -> int:
        base = self._end
        data = encode_control_batch(base, messages, epoch=epoch, timestamp=timestamp)
        self._add(StoredBatch(base, base + len(messages) - 1, epoch, data))
        return self._end - 1

    def append_as_follower(self, records: bytes) -> tuple[int, int] | None:
        first = None
        try:
            for b in read_batches(records):
                if first is None:
                    first = b.base_offset
                self._add(StoredBatch(b.base_offset, b.last_offset, b.partition_leader_epoch, bytes(b.raw)))
        except IncompleteBatchError:
            pass  # a read cut at max bytes ends in part of a batch; the next fetch brings it whole
        return None if first is None else (first, self._end - 1)

    def initialize_leader_epoch(self, epoch: int) -> None:
        self._note_epoch(epoch, self._end)

    # -- reading ---------------------------------------------------------------------------
    def _index(self, offset: int) -> int:
        """The index of the batch holding ``offset`` (or the first after it)."""
        return bisect.bisect_left(self._lasts, offset)

    def read(self, offset: int, max_bytes: int) -> bytes:
        i = self._index(offset)
        out = bytearray()
        while i < len(self.batches):
            data = self.batches[i].data
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
            i += 1
        return bytes(out)

    def batches_from(self, offset: int) -> Iterator[StoredBatch]:
        for i in range(self._index(offset), len(self.batches)):
            yield self.batches[i]

    # -- truncating and flushing -------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        if offset < self._hw:
            raise LogStateError(f"truncation to {offset}, below the high watermark {self._hw}")
        if offset >= self._end:
            return
        i = self._index(offset)  # the batch holding ``offset`` goes whole, as a segment cut does
        del self.batches[i:]
        del self._lasts[i:]
        self._end = self._lasts[-1] + 1 if self._lasts else self._start
        self.epochs = [e for e in self.epochs if e[1] < self._end]
        self._flushed_end = min(self._flushed_end, self._end)
        self.flush_requested_end = min(self.flush_requested_end, self._end)
        self.generation += 1
        self.truncations += 1

    def update_high_watermark(self, offset: int) -> None:
        self._hw = min(max(offset, self._start), self._end)

    def flush(self) -> None:
        self.flush_requested_end = self._end
        if self.sync_flush:
            self.complete_flush()

    def complete_flush(self) -> None:
        """The disk has made durable what was asked: up to :attr:`flush_requested_end`."""
        self._flushed_end = max(self._flushed_end, min(self.flush_requested_end, self._end))

    def crash(self) -> None:
        """The node died: unflushed records and half-downloaded snapshots are gone, and the log
        comes back as Kafka's recovery leaves it."""
        if self._flushed_end < self._end:
            i = self._index(self._flushed_end)
            del self.batches[i:]
            del self._lasts[i:]
            self._end = self._lasts[-1] + 1 if self._lasts else self._start
            self.generation += 1
        # An epoch that began at the (new) log end held no durable record: recovery drops it.
        self.epochs = [e for e in self.epochs if e[1] < self._end]
        self._flushed_end = self.flush_requested_end = self._end
        self.writers.clear()
        self._hw = self._start
        self.truncate_to_latest_snapshot()

    # -- snapshots -------------------------------------------------------------------------
    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        if not self.snapshots:
            return None
        return min(self.snapshots, key=lambda s: (s.epoch, s.offset))

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        if not self.snapshots:
            return None
        return max(self.snapshots, key=lambda s: (s.epoch, s.offset))

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        data = self.snapshots.get(snapshot_id)
        return None if data is None else len(data)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        return self.snapshots[snapshot_id][position:position + max_bytes]

    def create_snapshot_unchecked(self, snapshot_id: OffsetAndEpoch) -> MemorySnapshotWriter | None:
        if snapshot_id in self.snapshots:
            return None
        writer = MemorySnapshotWriter(self, snapshot_id)
        self.writers.add(writer)
        return writer

    def truncate_to_latest_snapshot(self) -> bool:
        latest = self.latest_snapshot_id()
        last_epoch = self.epochs[-1][0] if self.epochs else 0
        if latest is None or not (latest.epoch > last_epoch or (latest.epoch == last_epoch and latest.offset > self._end)):
            return False
        self.batches.clear()
        self._lasts.clear()
        self._start = self._end = self._flushed_end = self.flush_requested_end = self._hw = latest.offset
        self.epochs = []
        self.snapshots = {s: d for s, d in self.snapshots.items() if (s.epoch, s.offset) >= (latest.epoch, latest.offset)}
        self.generation += 1
        return True

    def take_snapshot(self, end_offset: int) -> OffsetAndEpoch | None:
        """What a state machine does at a committed offset: write a snapshot ending at
        ``end_offset`` (a batch boundary at or below the high watermark). None when there is
        nothing new to snapshot or the offset is not a batch boundary."""
        if end_offset <= self._start or end_offset > self._hw:
            return None
        i = self._index(end_offset - 1)
        if i >= len(self.batches) or self.batches[i].last_offset != end_offset - 1:
            return None
        sid = OffsetAndEpoch(end_offset, self.batches[i].epoch)
        if sid in self.snapshots:
            return None
        prefix = b""
        if self._start > 0:
            base = next(s for s in self.snapshots if s.offset == self._start)
            prefix = self.snapshots[base]
        self.snapshots[sid] = prefix + b"".join(b.data for b in self.batches[:i + 1])
        return sid

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Kafka's deleteBeforeSnapshot: the log starts at the snapshot, and older snapshots and
        the batches below it go."""
        latest = self.latest_snapshot_id()
        if (snapshot_id not in self.snapshots or latest is None or not self._start < snapshot_id.offset <= latest.offset
                or snapshot_id.offset > self._end):
            return False
        i = self._index(snapshot_id.offset)
        del self.batches[:i]
        del self._lasts[:i]
        self._start = snapshot_id.offset
        kept = [e for e in self.epochs if e[1] >= self._start]
        below = [e for e in self.epochs if e[1] < self._start]
        if below and (not kept or kept[0][1] > self._start):
            kept.insert(0, (below[-1][0], self._start))  # the epoch holding the new start
        self.epochs = kept
        self.snapshots = {s: d for s, d in self.snapshots.items()
                          if (s.epoch, s.offset) >= (snapshot_id.epoch, snapshot_id.offset)}
        return True

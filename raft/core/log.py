"""What the Raft node needs of its log: the replicated log behind a small protocol (Kafka's
ReplicatedLog), and the checks Kafka builds on top of it.

Offsets are Kafka's: ``end_offset`` is one past the last record, ``start_offset`` the first
record still in the log (the end of the snapshot that replaced what came before). Records travel
as RecordBatch v2 bytes, so what a leader reads is what a follower appends, byte for byte, and
the same bytes answer a real Kafka voter's Fetch.

Durability is explicit: appends land in ``end_offset`` at once, ``flush()`` asks for them to be
made durable, and ``flushed_end_offset`` says how far that has got. A flush may complete inside
the call (Kafka's synchronous flush) or later; the node only counts flushed records towards the
high watermark, so a log that flushes in the background is safe as long as its driver polls the
node once the flush is done.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kraftsim.metadata.batch import ControlRecordType
from kraftsim.raft.core.keys import OffsetAndEpoch
from kraftsim.rpc.file_slice import FileSlice
from kraftsim.rpc.message import Message


class SnapshotWriter(Protocol):
    """A snapshot being downloaded from the leader, chunk by chunk (FetchSnapshot)."""

    snapshot_id: OffsetAndEpoch

    @property
    def size(self) -> int: ...

    def append(self, chunk: bytes) -> None: ...

    def freeze(self) -> None:
        """Make the snapshot complete and durable: it becomes the log's latest."""
        ...

    def close(self) -> None:
        """Abandon it, unless frozen."""
        ...


class ReplicatedLog(Protocol):
    @property
    def start_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def flushed_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    def last_fetched_epoch(self) -> int:
        """The epoch of the last record; of the snapshot if the log holds none; 0 if empty."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch ≤ ``epoch`` in the log and where it ends (the next epoch's start,
        or the log end for the last); the log end and last epoch when ``epoch`` is above all."""
        ...

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def latest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def append_as_leader(self, values: Sequence[bytes], *, epoch: int, timestamp: int) -> tuple[int, int]:
        """Records in one batch at the end of the log, in ``epoch``; (first, last) offset."""
        ...

    def append_control_as_leader(self, messages: Sequence[tuple[ControlRecordType, Message]], *, epoch: int,
                                 timestamp: int) -> int:
        """One control batch (LeaderChange at the start of an epoch); its last offset."""
        ...

    def append_as_follower(self, records: bytes) -> tuple[int, int] | None:
        """The whole batches of a Fetch response (a cut-off last batch is ignored), which must
        start at the log end; (first, last) offset, None if there was no whole batch."""
        ...

    def read(self, offset: int, max_bytes: int) -> bytes | FileSlice:
        """Whole batches from the one holding ``offset``: at most ``max_bytes``, but at least
        one batch; uncommitted and unflushed records included, as a leader serves them. A log on
        disk may return a slice of its segment file, which the server sends without reading it
        (``rpc/file_slice.py``); the last batch of such a slice may be cut short, as Kafka's
        file slices are (a follower appends the whole batches and fetches the rest again)."""
        ...

    def initialize_leader_epoch(self, epoch: int) -> None:
        """Start ``epoch`` at the log end in the epoch history, before anything is appended in
        it, so that ``end_offset_for_epoch`` answers for the previous epochs at once."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset``; never below the high watermark."""
        ...

    def truncate_to_latest_snapshot(self) -> bool:
        """If the latest snapshot ends beyond the log, empty the log and start it at the
        snapshot's end (high watermark included); whether that happened."""
        ...

    def update_high_watermark(self, offset: int) -> None: ...

    def flush(self) -> None:
        """Ask for everything appended to become durable (see the module docstring)."""
        ...

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        """The size of a complete snapshot; None if there is no such snapshot."""
        ...

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes: ...

    def create_snapshot_unchecked(self, snapshot_id: OffsetAndEpoch) -> SnapshotWriter | None:
        """A writer for a snapshot the leader sent; None if the snapshot is already here."""
        ...


class Validity(enum.Enum):
    VALID = "valid"
    DIVERGING = "diverging"
    SNAPSHOT = "snapshot"


@dataclass(frozen=True, slots=True)
class ValidOffsetAndEpoch:
    """How a fetcher's (offset, last epoch) stands against this log: valid, diverging (truncate
    to ``offset_and_epoch``), or below the log start (fetch the snapshot ``offset_and_epoch``)."""

    kind: Validity
    offset_and_epoch: OffsetAndEpoch = OffsetAndEpoch(-1, -1)


def validate_offset_and_epoch(log: ReplicatedLog, offset: int, epoch: int) -> ValidOffsetAndEpoch:
    """Kafka's ReplicatedLog.validateOffsetAndEpoch: the largest valid (offset, epoch) with
    ``offset`` and ``epoch`` (the epoch of the record at ``offset - 1``) as the bound."""
    if log.start_offset == 0 and offset == 0:
        return ValidOffsetAndEpoch(Validity.VALID, OffsetAndEpoch(0, 0))
    earliest = log.earliest_snapshot_id()
    if earliest is not None and (offset < log.start_offset
                                 or (offset == log.start_offset and epoch != earliest.epoch)
                                 or epoch < earliest.epoch):
        latest = log.latest_snapshot_id()
        if latest is None:
            raise AssertionError(f"log start offset {log.start_offset} above 0 but no snapshot")
        return ValidOffsetAndEpoch(Validity.SNAPSHOT, latest)
    end = log.end_offset_for_epoch(epoch)
    if end.epoch != epoch or end.offset < offset:
        return ValidOffsetAndEpoch(Validity.DIVERGING, end)
    return ValidOffsetAndEpoch(Validity.VALID, OffsetAndEpoch(offset, epoch))


def truncate_to_end_offset(log: ReplicatedLog, end: OffsetAndEpoch) -> int:
    """Kafka's ReplicatedLog.truncateToEndOffset: truncate to where this log and the leader's
    last agree, given the leader's diverging (end offset, epoch); returns the new log end."""
    if end.epoch == 0:
        offset = min(end.offset, log.end_offset)
    else:
        local = log.end_offset_for_epoch(end.epoch)
        offset = min(local.offset, end.offset) if local.epoch == end.epoch else local.offset
    log.truncate_to(offset)
    return offset

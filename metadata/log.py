"""The Raft-style metadata log of a single-voter quorum: append now, commit on fsync.

``append`` encodes records into RecordBatch v2 batches (at most 10,000 records each) and writes
them to the active segment at once, so offsets are assigned and the caller can replay them
immediately. Durability is a separate step: one background fsync covers every batch written
since the previous one (group commit), and only then does ``committed_offset`` advance and do
waiters in :meth:`wait_committed` wake. Any write or fsync error fails the log closed: nothing
past the error is acknowledged and every later append raises until the log is reopened.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from metadata import files
from metadata import records as recs
from metadata.batch import Batch, ControlRecordType, encode_batch_into, encode_control_batch
from metadata.segments import LogFailedError, SegmentedLog
from metadata.snapshots import (
    SnapshotId,
    list_snapshots,
    remove_partial,
    write_snapshot_file,
    write_snapshot_file_async,
)
from rpc.message import Message

log = logging.getLogger("kraftsim.log")

MAX_RECORDS_PER_BATCH = 10_000
DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024


@dataclass(slots=True)
class LogConfig:
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    linger_ms: int = 25  # controller.quorum.append.linger.ms
    retention_bytes: int = 100 * 1024 * 1024  # metadata.max.retention.bytes
    retention_ms: int = 7 * 24 * 3600 * 1000  # metadata.max.retention.ms


@dataclass(slots=True)
class _Waiter:
    offset: int
    future: asyncio.Future[None]


@dataclass
class MetadataLog:
    """``<metadata.log.dir>/__cluster_metadata-0``: segments, snapshots and small state files."""

    directory: Path
    segments: SegmentedLog
    config: LogConfig
    committed_offset: int = -1  # the last durable offset (high watermark - 1)
    epoch_entries: list[tuple[int, int]] = field(default_factory=list)  # (epoch, start offset)
    _waiters: list[tuple[int, int, _Waiter]] = field(default_factory=list)
    _seq: int = 0
    _commit_task: asyncio.Task[None] | None = None
    _last_appended: int = -1

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def open(cls, metadata_log_dir: Path, config: LogConfig | None = None) -> MetadataLog:
        config = config or LogConfig()
        directory = metadata_log_dir / files.METADATA_TOPIC_DIR
        directory.mkdir(parents=True, exist_ok=True)
        remove_partial(directory)
        snaps = list_snapshots(directory)
        start = snaps[-1].end_offset if snaps else 0
        segments = SegmentedLog.open(directory, config.segment_bytes, start_offset=start)
        self = cls(directory, segments, config)
        pm = directory / files.PARTITION_METADATA
        if not pm.exists():
            files.write_partition_metadata(pm)
        epochs = directory / files.LEADER_EPOCH_CHECKPOINT
        if epochs.exists():
            try:
                self.epoch_entries = [(e, o) for e, o in files.read_leader_epochs(epochs) if o < segments.end_offset]
            except files.StorageError as e:
                log.warning("ignoring %s", e)
                self.epoch_entries = []
        # Everything that survived recovery was fsynced before (or is now, by recovery).
        segments.sync()
        self.committed_offset = segments.end_offset - 1
        self._last_appended = self.committed_offset
        return self

    # -- offsets --------------------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        """The next offset to be assigned."""
        return self.segments.end_offset

    @property
    def start_offset(self) -> int:
        return self.segments.start_offset

    @property
    def last_epoch(self) -> int:
        return self.epoch_entries[-1][0] if self.epoch_entries else 0

    @property
    def failed(self) -> BaseException | None:
        return self.segments.failed

    # -- appending ------------------------------------------------------------------------
    def append_values(self, values: Sequence[bytes], *, epoch: int, timestamp: int) -> tuple[int, int]:
        """Append framed record values as batches of ≤10,000; returns (first, last) offset."""
        if not values:
            raise ValueError("nothing to append")
        self._note_epoch(epoch)
        base = self.end_offset
        out = bytearray()
        for i in range(0, len(values), MAX_RECORDS_PER_BATCH):
            chunk = values[i:i + MAX_RECORDS_PER_BATCH]
            encode_batch_into(out, base + i, chunk, epoch=epoch, timestamp=timestamp)
        last = base + len(values) - 1
        self.segments.append(out, base, last + 1, timestamp)
        self._last_appended = last
        self._schedule_commit()
        return base, last

    def append_records(self, items: Sequence[tuple[Message, int]], *, epoch: int, timestamp: int) -> tuple[int, int]:
        return self.append_values([recs.frame(r, v) for r, v in items], epoch=epoch, timestamp=timestamp)

    def append_control(self, messages: Sequence[tuple[ControlRecordType, Message]], *, epoch: int,
                       timestamp: int) -> int:
        """One control batch (e.g. LeaderChange at the start of an epoch); returns its offset."""
        self._note_epoch(epoch)
        base = self.end_offset
        data = encode_control_batch(base, messages, epoch=epoch, timestamp=timestamp)
        last = base + len(messages) - 1
        self.segments.append(data, base, last + 1, timestamp)
        self._last_appended = last
        self._schedule_commit()
        return last

    def _note_epoch(self, epoch: int) -> None:
        if not self.epoch_entries or self.epoch_entries[-1][0] < epoch:
            self.epoch_entries.append((epoch, self.end_offset))
            files.write_leader_epochs(self.directory / files.LEADER_EPOCH_CHECKPOINT, self.epoch_entries)
        elif self.epoch_entries[-1][0] > epoch:
            raise ValueError(f"epoch {epoch} is older than the log's epoch {self.epoch_entries[-1][0]}")

    def epoch_for_offset(self, offset: int) -> int:
        starts = [o for _, o in self.epoch_entries]
        i = bisect.bisect_right(starts, offset) - 1
        return self.epoch_entries[i][0] if i >= 0 else 0

    # -- committing -----------------------------------------------------------------------
    def _schedule_commit(self) -> None:
        if self._commit_task is None or self._commit_task.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # synchronous use (tools, tests): call commit_now()
            self._commit_task = loop.create_task(self._commit_loop(), name="kraftsim-log-commit")

    async def _commit_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._last_appended > self.committed_offset and self.failed is None:
            if self.config.linger_ms > 0:
                await asyncio.sleep(self.config.linger_ms / 1000)
            target = self._last_appended
            try:
                await loop.run_in_executor(None, self.segments.sync)
            except LogFailedError as e:
                if self.segments.failed is None:
                    self.segments.failed = e
                log.error("metadata log failed: %s; refusing further writes", e)
                self._fail_waiters(e)
                return
            except Exception as e:  # noqa: BLE001 - anything else is also a failed fsync
                self.segments.failed = e
                log.error("metadata log fsync failed: %r; refusing further writes", e)
                self._fail_waiters(LogFailedError(str(e)))
                return
            self._advance(target)

    def commit_now(self) -> int:
        """Synchronous fsync of everything appended so far (tools, tests, shutdown)."""
        target = self._last_appended
        if target > self.committed_offset:
            self.segments.sync()
            self._advance(target)
        return self.committed_offset

    def _advance(self, target: int) -> None:
        self.committed_offset = target
        waiters = self._waiters
        while waiters and waiters[0][0] <= target:
            import heapq

            _, _, w = heapq.heappop(waiters)
            if not w.future.done():
                w.future.set_result(None)

    def _fail_waiters(self, exc: BaseException) -> None:
        import heapq

        while self._waiters:
            _, _, w = heapq.heappop(self._waiters)
            if not w.future.done():
                w.future.set_exception(LogFailedError(str(exc)))

    async def wait_committed(self, offset: int) -> None:
        """Return once ``offset`` is durable; LogFailedError if the log failed first."""
        if offset <= self.committed_offset:
            return
        if self.failed is not None:
            raise LogFailedError(f"the metadata log failed: {self.failed}")
        import heapq

        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._seq += 1
        heapq.heappush(self._waiters, (offset, self._seq, _Waiter(offset, fut)))
        self._schedule_commit()
        await fut

    # -- reading --------------------------------------------------------------------------
    def batches(self, from_offset: int = 0, committed_only: bool = True) -> Iterator[Batch]:
        limit = self.committed_offset if committed_only else self.end_offset - 1
        for batch in self.segments.batches(from_offset):
            if batch.base_offset > limit:
                return
            yield batch

    # -- snapshots ------------------------------------------------------------------------
    def snapshots(self) -> list[SnapshotId]:
        return list_snapshots(self.directory)

    def latest_snapshot(self) -> SnapshotId | None:
        snaps = self.snapshots()
        return snaps[-1] if snaps else None

    def snapshot_path(self, sid: SnapshotId) -> Path:
        return self.directory / sid.file_name

    def write_snapshot(self, items: Iterator[tuple[Message, int]] | Sequence[tuple[Message, int]], last_offset: int,
                       timestamp: int, last_contained_timestamp: int) -> SnapshotId:
        """Write the image at ``last_offset`` (committed) as a snapshot; returns its id."""
        if last_offset > self.committed_offset:
            raise ValueError(f"snapshot at {last_offset} beyond the committed offset {self.committed_offset}")
        sid = SnapshotId(last_offset + 1, self.epoch_for_offset(last_offset))
        n = write_snapshot_file(self.snapshot_path(sid), items, epoch=sid.epoch, timestamp=timestamp,
                                last_contained_timestamp=last_contained_timestamp)
        log.info("wrote snapshot %s with %d records", sid.file_name, n)
        return sid

    async def write_snapshot_async(self, items: Iterator[tuple[Message, int]], last_offset: int, timestamp: int,
                                   last_contained_timestamp: int) -> SnapshotId:
        """:meth:`write_snapshot`, yielding to the event loop between batches; ``items`` must
        not change meanwhile (``MetadataImage.frozen_records``)."""
        if last_offset > self.committed_offset:
            raise ValueError(f"snapshot at {last_offset} beyond the committed offset {self.committed_offset}")
        sid = SnapshotId(last_offset + 1, self.epoch_for_offset(last_offset))
        n = await write_snapshot_file_async(self.snapshot_path(sid), items, epoch=sid.epoch, timestamp=timestamp,
                                            last_contained_timestamp=last_contained_timestamp)
        log.info("wrote snapshot %s with %d records", sid.file_name, n)
        return sid

    def apply_retention(self, now_ms: int) -> int:
        """Delete segments wholly below the latest snapshot per metadata.max.retention.*,
        then snapshots older than the new log start (the latest is always kept)."""
        latest = self.latest_snapshot()
        if latest is None:
            return 0
        deleted = self.segments.delete_segments_before(
            latest.end_offset, keep_bytes=self.config.retention_bytes,
            older_than_ms=now_ms - self.config.retention_ms)
        for seg in deleted:
            log.info("deleted segment %s below snapshot %s", seg.path.name, latest.file_name)
        start = self.start_offset
        for sid in self.snapshots()[:-1]:
            if sid.end_offset < start:
                self.snapshot_path(sid).unlink(missing_ok=True)
        return len(deleted)

    def close(self) -> None:
        if self.failed is None:
            self.commit_now()
        self.segments.close()
        if self._commit_task is not None:
            self._commit_task.cancel()

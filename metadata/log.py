"""The metadata log's storage: ``<metadata.log.dir>/__cluster_metadata-0`` on this node's disk.

``append`` encodes records into RecordBatch v2 batches and writes them to the active segment at
once, so offsets are assigned and the caller can replay them immediately. Durability is a
separate step: one background fsync covers every batch written since the previous one (group
flush), and only then does ``flushed_offset`` advance and do waiters in :meth:`wait_flushed`
wake. Any write or fsync error fails the log closed: nothing past the error is reported flushed
and every later append raises until the log is reopened.

Storage only: whether a flushed offset is *committed* is the Raft layer's decision
(``kraftsim.raft``): for a single voter it is the flush, for a quorum the majority's.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from kraftsim.metadata import files
from kraftsim.metadata import records as recs
from kraftsim.metadata.batch import (
    Batch,
    ControlRecordType,
    IncompleteBatchError,
    encode_batch_into,
    encode_control_batch,
    read_batches,
)
from kraftsim.metadata.offset_waiters import OffsetWaiters
from kraftsim.metadata.segments import (
    DELETED_SUFFIX,
    CorruptLogError,
    LogFailedError,
    Segment,
    SegmentedLog,
    segment_name,
)
from kraftsim.metadata.snapshots import (
    SnapshotError,
    SnapshotId,
    last_contained_timestamp,
    list_snapshots,
    remove_partial,
    write_snapshot_file,
    write_snapshot_file_async,
)
from kraftsim.rpc.file_slice import FileSlice
from kraftsim.rpc.message import Message

log = logging.getLogger("kraftsim.log")

# A batch holds what fits in this many bytes (Kafka's KafkaRaftClient.MAX_BATCH_SIZE_BYTES);
# an append larger than that is split across batches.
MAX_BATCH_BYTES = 8 * 1024 * 1024
BATCH_SLACK = 1024  # what a batch of MAX_BATCH_BYTES of values takes beyond them (headers, framing)
READ_CHUNK_BYTES = 8 * 1024 * 1024  # what a standby controller reads of the log at a time
# How often, at most, the recovery point follows the flushes (it is not fsynced between them).
RECOVERY_POINT_INTERVAL_S = 0.1
DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024


# ServerLogConfigs.LOG_DELETE_DELAY_MS_DEFAULT: KafkaMetadataLog keeps a file it has marked
# for deletion (renamed *.deleted) this long before deleting it, whatever log.delete.delay.ms says.
FILE_DELETE_DELAY_MS = 60_000


@dataclass(slots=True)
class LogConfig:
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    linger_ms: int = 25  # controller.quorum.append.linger.ms
    retention_bytes: int = 100 * 1024 * 1024  # metadata.max.retention.bytes (negative: no limit)
    retention_ms: int = 7 * 24 * 3600 * 1000  # metadata.max.retention.ms (negative: no limit)
    file_delete_delay_ms: int = FILE_DELETE_DELAY_MS


@dataclass(slots=True)
class Marked:
    """Files :meth:`MetadataLog.maybe_clean` renamed ``*.deleted``, to delete once the file
    delete delay has passed (``delete_marked``)."""

    segments: list[Segment] = field(default_factory=list)
    snapshots: list[Path] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.segments or self.snapshots)


@dataclass
class MetadataLog:
    """``<metadata.log.dir>/__cluster_metadata-0``: segments, snapshots and small state files."""

    directory: Path
    segments: SegmentedLog
    config: LogConfig
    flushed_offset: int = -1  # the last offset durable on this node's disk
    epoch_entries: list[tuple[int, int]] = field(default_factory=list)  # (epoch, start offset)
    _waiters: OffsetWaiters = field(default_factory=OffsetWaiters)
    _recovery_point_written: float = 0.0
    _flush_task: asyncio.Task[None] | None = None
    _last_appended: int = -1
    _failure_told: bool = False  # the waiters and on_failure heard of the failure
    # Kafka's log start offset: the first offset a fetch is served from the log rather than sent
    # to a snapshot. The first segment's base at open; moved up to a snapshot by maybe_clean.
    log_start_offset: int = 0
    # Bytes of every batch appended, cumulated, and (end offset, that total) per append, so that
    # a commit can be told how many batch bytes it covered (the snapshots' byte threshold).
    appended_bytes: int = 0
    _append_ends: deque[tuple[int, int]] = field(default_factory=deque)
    _committed_bytes: int = 0
    # Files opening marked for deletion (a log truncated to its latest snapshot), to delete after
    # the file delete delay as retention's are.
    marked_at_open: Marked = field(default_factory=Marked)
    # The snapshot files, oldest first, as last listed; None until listed again (see snapshots()).
    _snapshot_listing: list[SnapshotId] | None = None
    # Told of every flush (the new flushed offset) and of the failure that closes the log.
    on_flush: list[Callable[[int], None]] = field(default_factory=list)
    on_failure: list[Callable[[BaseException], None]] = field(default_factory=list)

    # -- opening --------------------------------------------------------------------------
    @classmethod
    def open(cls, metadata_log_dir: Path, config: LogConfig | None = None) -> MetadataLog:
        config = config or LogConfig()
        directory = metadata_log_dir / files.METADATA_TOPIC_DIR
        directory.mkdir(parents=True, exist_ok=True)
        remove_partial(directory)
        snaps = list_snapshots(directory)
        start = snaps[-1].end_offset if snaps else 0
        recovery_point = files.read_recovery_point(directory / files.RECOVERY_POINT_CHECKPOINT)
        segments = SegmentedLog.open(directory, config.segment_bytes, start_offset=start,
                                     recovery_point=recovery_point)
        self = cls(directory, segments, config, log_start_offset=segments.start_offset)
        for sid in snaps:  # KafkaMetadataLog.recoverSnapshots: those before the log start are not needed
            if sid.end_offset < self.log_start_offset:
                self.snapshot_path(sid).unlink(missing_ok=True)
                self.snapshots_changed()
                log.info("deleted unneeded snapshot file %s", sid.file_name)
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
        try:
            segments.sync()
        except LogFailedError:
            segments.close()
            raise
        self.flushed_offset = segments.end_offset - 1
        self._last_appended = self.flushed_offset
        if not self.epoch_entries:
            latest = self.latest_snapshot()
            if self.end_offset > (latest.end_offset if latest is not None else 0):
                self._rebuild_epochs()  # records past the snapshot, but no history of their epochs
        self.marked_at_open = self.truncate_to_latest_snapshot() or Marked()
        return self

    def _rebuild_epochs(self) -> None:
        """The epoch history from the batches themselves, when the checkpoint file is missing or
        unreadable but the log holds records: a Raft replica must know the epoch of its last
        record (and where each epoch starts) to be told where its log diverges."""
        entries: list[tuple[int, int]] = []
        for batch in self.segments.batches(self.log_start_offset, verify_crc=False):
            if not entries or batch.partition_leader_epoch > entries[-1][0]:
                entries.append((batch.partition_leader_epoch, max(batch.base_offset, self.log_start_offset)))
        self.epoch_entries = entries
        files.write_leader_epochs(self.directory / files.LEADER_EPOCH_CHECKPOINT, entries)
        log.warning("rebuilt the leader epoch checkpoint from the log: %s", entries)

    def truncate_to_latest_snapshot(self) -> Marked | None:
        """KafkaMetadataLog.truncateToLatestSnapshot: when the latest snapshot is of a later
        epoch than the log's last (0 when the epoch cache is empty, as it is once the log start
        offset reached the log end: Kafka's load drops the entry starting there), or of the same
        epoch but past the log end, every segment is marked for deletion and the log starts
        empty at the snapshot. The epoch cache is cleared, and the older snapshots are marked too.
        Returns what was marked (to delete after the file delete delay), None if nothing changed.
        At open (``marked_at_open``), and on a Raft follower that has just fetched a snapshot.
        An empty cache beside records past the snapshot (a lost checkpoint file) is not taken as
        epoch 0: that would throw the records away."""
        latest = self.latest_snapshot()
        if latest is None:
            return None
        if self.epoch_entries:
            last_epoch = self.epoch_entries[-1][0]
        elif self.end_offset <= latest.end_offset:
            last_epoch = 0
        else:
            return None
        if not (latest.epoch > last_epoch or (latest.epoch == last_epoch and latest.end_offset > self.end_offset)):
            return None
        log.warning("the latest snapshot %s is ahead of the log (its end %d, epoch %d): the log starts over at it",
                    latest.file_name, self.end_offset, last_epoch)
        marked = Marked(segments=self.segments.retire_all_and_start_at(latest.end_offset))
        self.log_start_offset = latest.end_offset
        self.flushed_offset = self._last_appended = latest.end_offset - 1
        self._append_ends.clear()
        self.appended_bytes = self._committed_bytes
        self.epoch_entries = []
        files.write_leader_epochs(self.directory / files.LEADER_EPOCH_CHECKPOINT, self.epoch_entries)
        self._write_recovery_point(durable=True)
        for old in self.snapshots():
            if old < latest:
                path = self.snapshot_path(old)
                self.snapshots_changed()
                os.replace(path, path.with_name(path.name + DELETED_SUFFIX))
                marked.snapshots.append(path.with_name(path.name + DELETED_SUFFIX))
        return marked

    # -- offsets --------------------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        """The next offset to be assigned."""
        return self.segments.end_offset

    @property
    def start_offset(self) -> int:
        """The log start offset (Kafka's): fetches below it are sent to a snapshot. Records of
        the first segment may still lie below it on disk."""
        return self.log_start_offset

    @property
    def last_epoch(self) -> int:
        return self.epoch_entries[-1][0] if self.epoch_entries else 0

    @property
    def failed(self) -> BaseException | None:
        return self.segments.failed

    # -- appending ------------------------------------------------------------------------
    def append_values(self, values: Sequence[bytes], *, epoch: int, timestamp: int) -> tuple[int, int]:
        """Append framed record values, in batches of at most MAX_BATCH_BYTES of values;
        returns the (first, last) offset."""
        if not values:
            raise ValueError("nothing to append")
        self.note_epoch(epoch)
        base = self.end_offset
        out = bytearray()
        start = size = 0
        for i, v in enumerate(values):
            if size and size + len(v) > MAX_BATCH_BYTES:
                encode_batch_into(out, base + start, values[start:i], epoch=epoch, timestamp=timestamp)
                start, size = i, 0
            size += len(v)
        encode_batch_into(out, base + start, values[start:] if start else values, epoch=epoch, timestamp=timestamp)
        last = base + len(values) - 1
        self._append(out, base, last + 1, timestamp)
        self._appended(last, len(out))
        return base, last

    def append_records(self, items: Sequence[tuple[Message, int]], *, epoch: int, timestamp: int) -> tuple[int, int]:
        return self.append_values([recs.frame(r, v) for r, v in items], epoch=epoch, timestamp=timestamp)

    def append_control(self, messages: Sequence[tuple[ControlRecordType, Message]], *, epoch: int,
                       timestamp: int) -> int:
        """One control batch (e.g. LeaderChange at the start of an epoch); returns its offset."""
        self.note_epoch(epoch)
        base = self.end_offset
        data = encode_control_batch(base, messages, epoch=epoch, timestamp=timestamp)
        last = base + len(messages) - 1
        self._append(data, base, last + 1, timestamp)
        self._appended(last, len(data))
        return last

    def _append(self, data: bytes | bytearray | memoryview, base: int, next_offset: int, timestamp: int) -> None:
        """Write to the segments; a failed write fails the log closed here, at once: whatever
        waits for an offset not yet flushed hears of it now (the flush loop, which would
        otherwise tell them, stops at a failed log without a word)."""
        try:
            self.segments.append(data, base, next_offset, timestamp)
        except LogFailedError as e:
            log.error("metadata log failed: %s; refusing further writes", e)
            self._fail_waiters(e)
            raise

    def _appended(self, last: int, size: int) -> None:
        self._last_appended = last
        self.appended_bytes += size
        self._append_ends.append((last + 1, self.appended_bytes))
        self.flush_soon()

    def bytes_through(self, offset: int) -> int:
        """The bytes of every batch appended up to and including ``offset`` (an offset at which
        an append ended), cumulated since this log was opened: what Kafka's metadata loader
        counts as it publishes committed batches."""
        ends = self._append_ends
        while ends and ends[0][0] <= offset + 1:
            self._committed_bytes = ends.popleft()[1]
        return self._committed_bytes

    def note_epoch(self, epoch: int) -> None:
        """``epoch`` starts at the log end unless it is the last epoch already (Kafka's
        LeaderEpochFileCache.assign, written to the checkpoint at once); an older epoch is
        refused (ValueError). A new Raft leader notes its epoch before appending anything."""
        if not self.epoch_entries or self.epoch_entries[-1][0] < epoch:
            self.epoch_entries.append((epoch, self.end_offset))
            files.write_leader_epochs(self.directory / files.LEADER_EPOCH_CHECKPOINT, self.epoch_entries)
        elif self.epoch_entries[-1][0] > epoch:
            raise ValueError(f"epoch {epoch} is older than the log's epoch {self.epoch_entries[-1][0]}")

    def append_as_follower(self, records: bytes | memoryview) -> tuple[int, int] | None:
        """A Raft follower's append of what its leader sent: every whole batch (a batch cut off
        at the end, as a read capped at max bytes leaves it, is left for the next fetch), each
        checked (CRC, header), the first starting at the log end and each where the previous
        ended, each batch's epoch noted where it starts. Returns the (first, last) offset
        appended, None when there was no whole batch. ValueError for batches that do not follow
        this log, CorruptBatchError for damaged ones: nothing is appended then."""
        batches: list[Batch] = []
        try:
            for batch in read_batches(records, max_batch_size=MAX_BATCH_BYTES + BATCH_SLACK):
                batches.append(batch)
        except IncompleteBatchError:
            pass
        if not batches:
            return None
        expected = self.end_offset
        for batch in batches:
            if batch.base_offset != expected:
                raise ValueError(f"a fetched batch at offset {batch.base_offset} where the log ends at {expected}")
            expected = batch.next_offset
        first = batches[0].base_offset
        view = memoryview(records)
        pos = 0
        i = 0
        while i < len(batches):  # one write per run of batches of one epoch
            epoch = batches[i].partition_leader_epoch
            j, size, max_ts = i, 0, -1
            while j < len(batches) and batches[j].partition_leader_epoch == epoch:
                size += batches[j].size_in_bytes
                max_ts = max(max_ts, batches[j].max_timestamp)
                j += 1
            self.note_epoch(epoch)
            self._append(view[pos:pos + size], batches[i].base_offset, batches[j - 1].next_offset, max_ts)
            self._appended(batches[j - 1].last_offset, size)
            pos += size
            i = j
        return first, expected - 1

    def truncate_to(self, offset: int) -> None:
        """A Raft follower's cut of its divergent tail: every batch holding an offset at or
        after ``offset`` goes (so the log may end before ``offset``), the epochs that started in
        it too, and what counts as flushed and appended with them. The caller (the Raft layer)
        never cuts below the high watermark."""
        if offset >= self.end_offset:
            return
        self._flush_task_must_be_idle("truncate")
        try:
            self.segments.truncate_to(offset)
        except LogFailedError as e:
            self._fail_waiters(e)
            raise
        end = self.end_offset
        log.warning("truncated the metadata log to offset %d (asked to cut at %d)", end, offset)
        self.epoch_entries = [e for e in self.epoch_entries if e[1] < end]
        files.write_leader_epochs(self.directory / files.LEADER_EPOCH_CHECKPOINT, self.epoch_entries)
        self.flushed_offset = min(self.flushed_offset, end - 1)
        self._last_appended = min(self._last_appended, end - 1)
        while self._append_ends and self._append_ends[-1][0] > end:
            self._append_ends.pop()
        self.appended_bytes = self._append_ends[-1][1] if self._append_ends else self._committed_bytes
        self._write_recovery_point(durable=True)

    def _flush_task_must_be_idle(self, what: str) -> None:
        """Cutting the log while a flush of what is cut is under way would report flushed what
        is gone: a Raft follower fetches again only once its log is flushed, so none can be."""
        if self._flush_task is not None and not self._flush_task.done() and self._last_appended > self.flushed_offset:
            raise RuntimeError(f"cannot {what} the metadata log while a flush is under way")

    def epoch_for_offset(self, offset: int) -> int:
        starts = [o for _, o in self.epoch_entries]
        i = bisect.bisect_right(starts, offset) - 1
        return self.epoch_entries[i][0] if i >= 0 else 0

    # -- flushing -------------------------------------------------------------------------
    def flush_soon(self) -> None:
        """Start a background flush of what is appended, unless one is under way."""
        if self._flush_task is None or self._flush_task.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # synchronous use (tools, tests): call flush_now()
            self._flush_task = loop.create_task(self._flush_loop(), name="kraftsim-log-flush")

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._last_appended > self.flushed_offset and self.failed is None:
            if self.config.linger_ms > 0:
                await asyncio.sleep(self.config.linger_ms / 1000)
            target = self._last_appended
            try:
                await loop.run_in_executor(None, self.segments.sync)
                if self.failed is not None:
                    return  # a write failed during the fsync: the waiters were told then
            except LogFailedError as e:
                if self._failure_told:
                    return  # a failed write closed the log meanwhile, and said so
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

    def flush_now(self) -> int:
        """Synchronous fsync of everything appended so far (tools, tests, shutdown)."""
        target = self._last_appended
        if target > self.flushed_offset:
            self.segments.sync()
            self._advance(target)
        return self.flushed_offset

    def _advance(self, target: int) -> None:
        self.flushed_offset = target
        now = time.monotonic()
        if now - self._recovery_point_written >= RECOVERY_POINT_INTERVAL_S:
            self._recovery_point_written = now
            self._write_recovery_point(durable=False)
        self._waiters.advance(target)
        for listener in self.on_flush:
            listener(target)

    def _fail_waiters(self, exc: BaseException) -> None:
        if self._failure_told:
            return
        self._failure_told = True
        self._waiters.fail(LogFailedError(str(exc)))
        for listener in self.on_failure:
            listener(exc)

    async def wait_flushed(self, offset: int) -> None:
        """Return once ``offset`` is durable; LogFailedError if the log failed first."""
        if offset <= self.flushed_offset:
            return
        if self.failed is not None:
            raise LogFailedError(f"the metadata log failed: {self.failed}")
        fut = self._waiters.wait(offset)
        self.flush_soon()
        await fut

    # -- reading --------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int) -> bytes:
        """Raw batch bytes from the batch holding ``offset`` (see ``SegmentedLog.read``); what a
        Raft leader serves a fetcher, uncommitted records included."""
        return self.segments.read(offset, max_bytes)

    def read_slice(self, offset: int, max_bytes: int) -> FileSlice | bytes:
        """:meth:`read` as a slice of the segment file, for a server to send without reading."""
        return self.segments.read_slice(offset, max_bytes)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int] | None:
        """(epoch, end offset): the largest known epoch at or below ``epoch`` and the offset where
        the next epoch starts (the log end for the latest), as Kafka's LeaderEpochFileCache
        answers; None when ``epoch`` is -1 or above every known epoch."""
        entries = self.epoch_entries
        if epoch < 0 or not entries:
            return None
        if entries[-1][0] == epoch:
            return epoch, self.end_offset
        higher = next((e for e in entries if e[0] > epoch), None)
        if higher is None:
            return None
        floor = None
        for e in entries:
            if e[0] <= epoch:
                floor = e
        return (epoch if floor is None else floor[0]), higher[1]

    def batches(self, from_offset: int = 0, flushed_only: bool = True) -> Iterator[Batch]:
        limit = self.flushed_offset if flushed_only else self.end_offset - 1
        for batch in self.segments.batches(from_offset):
            if batch.base_offset > limit:
                return
            yield batch

    def batches_between(self, first: int, last: int, chunk_bytes: int = READ_CHUNK_BYTES) -> Iterator[Batch]:
        """The batches holding offsets ``first`` to ``last`` (whole batches, so the first may
        start before ``first``), found through the segments' index and read ``chunk_bytes`` at a
        time: what a standby controller replays as the high watermark moves, without reading
        the log from the start of a segment each time."""
        offset = first
        while offset <= last:
            data = self.segments.read(offset, chunk_bytes)
            if not data:
                return
            moved = False
            try:
                for batch in read_batches(data, max_batch_size=MAX_BATCH_BYTES + BATCH_SLACK):
                    if batch.base_offset > last:
                        return
                    yield batch
                    offset = batch.next_offset
                    moved = True
            except IncompleteBatchError:
                pass  # the chunk ends in the middle of a batch: read on from it
            if not moved:
                raise CorruptLogError(self.directory / segment_name(offset), 0, offset,
                                      "no whole batch where the index points")

    # -- snapshots ------------------------------------------------------------------------
    def snapshots(self) -> list[SnapshotId]:
        """The snapshot files, oldest first. Listed from the directory once, then kept until
        this process adds, renames or removes one (:meth:`snapshots_changed`), as Kafka's
        KafkaMetadataLog keeps its set of snapshots: a Raft leader asks on every fetch it
        serves, and listing the directory each time was a sixth of its CPU per replicated write."""
        if self._snapshot_listing is None:
            self._snapshot_listing = list_snapshots(self.directory)
        return list(self._snapshot_listing)

    def snapshots_changed(self) -> None:
        """A snapshot file was added, renamed or removed: list the directory again when asked."""
        self._snapshot_listing = None

    def latest_snapshot(self) -> SnapshotId | None:
        snaps = self.snapshots()
        return snaps[-1] if snaps else None

    def earliest_snapshot(self) -> SnapshotId | None:
        snaps = self.snapshots()
        return snaps[0] if snaps else None

    def snapshot_path(self, sid: SnapshotId) -> Path:
        return self.directory / sid.file_name

    def write_snapshot(self, items: Iterable[recs.RecordAndVersion], last_offset: int, timestamp: int,
                       last_contained_timestamp: int,
                       control: Sequence[tuple[ControlRecordType, Message]] = ()) -> SnapshotId:
        """Write the image at ``last_offset`` (committed, so flushed) as a snapshot; returns its id.
        ``control``: the kraft.version and voter set a kraft.version 1 snapshot starts with."""
        if last_offset > self.flushed_offset:
            raise ValueError(f"snapshot at {last_offset} beyond the flushed offset {self.flushed_offset}")
        sid = SnapshotId(last_offset + 1, self.epoch_for_offset(last_offset))
        try:
            n = write_snapshot_file(self.snapshot_path(sid), items, epoch=sid.epoch, timestamp=timestamp,
                                    last_contained_timestamp=last_contained_timestamp, control=control)
        finally:
            self.snapshots_changed()
        log.info("wrote snapshot %s with %d records", sid.file_name, n)
        return sid

    async def write_snapshot_async(self, items: Iterable[recs.RecordAndVersion], last_offset: int,
                                   timestamp: int, last_contained_timestamp: int,
                                   control: Sequence[tuple[ControlRecordType, Message]] = ()) -> SnapshotId:
        """:meth:`write_snapshot`, yielding to the event loop between batches; ``items`` must
        not change meanwhile (``MetadataImage.frozen_records``)."""
        if last_offset > self.flushed_offset:
            raise ValueError(f"snapshot at {last_offset} beyond the flushed offset {self.flushed_offset}")
        sid = SnapshotId(last_offset + 1, self.epoch_for_offset(last_offset))
        try:
            n = await write_snapshot_file_async(self.snapshot_path(sid), items, epoch=sid.epoch, timestamp=timestamp,
                                                last_contained_timestamp=last_contained_timestamp, control=control)
        finally:
            self.snapshots_changed()
        log.info("wrote snapshot %s with %d records", sid.file_name, n)
        return sid

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """UnifiedLog.truncateFullyAndStartAt: every segment gone, an empty log at ``offset``,
        which is also the log start offset (a snapshot ahead of the log end covers what was)."""
        self.segments.reset_to(offset)
        self.flushed_offset = self._last_appended = offset - 1
        self.log_start_offset = offset

    # -- retention: Kafka's KafkaMetadataLog.maybeClean ----------------------------------------
    def maybe_clean(self, now_ms: int, high_watermark: int) -> Marked:
        """Delete old snapshots, and the segments only they needed, while the log and its
        snapshots are over ``metadata.max.retention.bytes`` (then while the oldest snapshot's
        last contained timestamp is older than ``metadata.max.retention.ms``): each time the
        log start offset moves up to the next snapshot, whole segments below it and the
        snapshots before it are renamed ``*.deleted``. The latest snapshot always stays.
        Returns what was renamed, to delete after the file delete delay (:meth:`delete_marked`).
        Kafka's Raft client runs this every minute."""
        marked = Marked()
        self._clean_by_size(high_watermark, marked)
        self._clean_by_time(now_ms, high_watermark, marked)
        return marked

    def delete_marked(self, marked: Marked) -> None:
        SegmentedLog.delete_retired(marked.segments)
        for path in marked.snapshots:
            path.unlink(missing_ok=True)
        for seg in marked.segments:
            log.info("deleted segment %s", seg.path.name)

    def _clean_by_size(self, high_watermark: int, marked: Marked) -> bool:
        limit = self.config.retention_bytes
        if limit < 0:
            return False
        sizes: dict[SnapshotId, int] = {}
        for sid in self.snapshots():
            try:
                sizes[sid] = self.snapshot_path(sid).stat().st_size
            except FileNotFoundError:
                continue
        total = sum(sizes.values())

        def reason(sid: SnapshotId) -> str | None:
            nonlocal total
            size = sizes.get(sid)
            if size is None:
                return None
            log_size = self.segments.size_in_bytes
            if log_size + total <= limit:
                return None
            old, total = total, total - size
            return f"the log size ({log_size}) and snapshots size ({old}) is greater than {limit}"

        return self._clean_snapshots(reason, high_watermark, marked)

    def _clean_by_time(self, now_ms: int, high_watermark: int, marked: Marked) -> bool:
        limit = self.config.retention_ms
        if limit < 0:
            return False

        def reason(sid: SnapshotId) -> str | None:
            try:
                timestamp = last_contained_timestamp(self.snapshot_path(sid))
            except (OSError, SnapshotError):
                return None
            if now_ms - timestamp <= limit:
                return None
            return f"its timestamp ({timestamp}) is now ({now_ms}) older than the retention ({limit})"

        return self._clean_snapshots(reason, high_watermark, marked)

    def _clean_snapshots(self, reason_for: Callable[[SnapshotId], str | None], high_watermark: int,
                         marked: Marked) -> bool:
        """KafkaMetadataLog.cleanSnapshots: for each snapshot but the latest, oldest first, while
        ``reason_for`` gives a reason to drop it, move the log start to the next snapshot."""
        snaps = self.snapshots()
        cleaned = False
        for snap, following in pairwise(snaps):
            reason = reason_for(snap)
            if reason is None or not self._delete_before_snapshot(following, reason, high_watermark, marked):
                return cleaned
            cleaned = True
        return cleaned

    def _delete_before_snapshot(self, sid: SnapshotId, reason: str, high_watermark: int, marked: Marked) -> bool:
        """KafkaMetadataLog.deleteBeforeSnapshot: the log start moves up to ``sid`` (never past
        the high watermark), the segments below it and the snapshots before it are marked."""
        snaps = self.snapshots()
        if sid not in snaps or not self.log_start_offset < sid.end_offset <= snaps[-1].end_offset:
            return False
        if sid.end_offset > high_watermark:
            log.error("cannot move the log start offset to %d, past the high watermark %d", sid.end_offset,
                      high_watermark)
            return False
        self.log_start_offset = sid.end_offset
        log.info("incremented the log start offset to %d due to snapshot generated", sid.end_offset)
        self._truncate_epochs_from_start(sid.end_offset)
        retired = self.segments.retire_below(self.log_start_offset, high_watermark)
        for seg in retired:
            log.info("marked segment %s for deletion: the log start offset %d is past it", seg.path.name,
                     self.log_start_offset)
        marked.segments += retired
        forgotten = [old for old in snaps if old < sid]
        for old in forgotten:
            path = self.snapshot_path(old)
            deleted = path.with_name(path.name + DELETED_SUFFIX)
            self.snapshots_changed()
            try:
                os.replace(path, deleted)
            except FileNotFoundError:
                continue
            log.info("marking snapshot %s for deletion because %s", old.file_name, reason)
            marked.snapshots.append(deleted)
        return bool(retired) or bool(forgotten)

    def _truncate_epochs_from_start(self, start: int) -> None:
        """LeaderEpochFileCache.truncateFromStart: entries starting at or before ``start`` go,
        the last of them kept as starting at ``start``."""
        removed = [e for e in self.epoch_entries if e[1] <= start]
        if not removed:
            return
        self.epoch_entries = [(removed[-1][0], start)] + [e for e in self.epoch_entries if e[1] > start]
        files.write_leader_epochs(self.directory / files.LEADER_EPOCH_CHECKPOINT, self.epoch_entries)

    def _write_recovery_point(self, durable: bool) -> None:
        try:
            files.write_recovery_point(self.directory / files.RECOVERY_POINT_CHECKPOINT, self.flushed_offset + 1,
                                       durable)
        except OSError as e:  # the log itself is fine; only what counts as a torn tail widens
            log.warning("the recovery point was not updated: %s", e)

    def close(self) -> None:
        if self.failed is None:
            self.flush_now()
            self._write_recovery_point(durable=True)
        self.segments.close()
        if self._flush_task is not None:
            self._flush_task.cancel()

"""The metadata log on this node's disk as the Raft node's :class:`ReplicatedLog` (Kafka's
KafkaMetadataLog over its UnifiedLog).

Storage stays :class:`~kraftsim.metadata.log.MetadataLog`'s (segments, the epoch checkpoint,
snapshots, retention); this adds what Raft asks of it. Reads are slices of the segment files,
sent with ``sendfile``. A flush is the log's background group fsync (its own linger is 0: the
node lingers before it writes), and the driver polls the node again when a flush completes
(``MetadataLog.on_flush``). The high watermark lives in memory, as Kafka's does for the metadata
log: a restarted replica learns it again from its leader, or as the leader once its epoch's
first record commits.

A follower's log changes under the state machine in two ways it must hear of: a cut of a
divergent tail (:attr:`on_truncate`, with the new log end), and a snapshot fetched from the
leader that replaces the whole log (:attr:`on_snapshot`, with its id). Files marked for deletion
by the latter go to :attr:`on_marked`, to be deleted after the file delete delay.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence

from kraftsim.metadata.batch import ControlRecordType
from kraftsim.metadata.log import Marked, MetadataLog
from kraftsim.metadata.snapshots import SnapshotFileWriter, SnapshotId
from kraftsim.raft.core.keys import OffsetAndEpoch
from kraftsim.rpc.file_slice import FileSlice
from kraftsim.rpc.message import Message

log = logging.getLogger("kraftsim.raft")


class LogRefusedError(Exception):
    """A call the log refuses because the caller broke one of its rules (Kafka's
    IllegalArgumentException in KafkaMetadataLog): a bug, which stops the Raft node."""


def _sid(oe: OffsetAndEpoch) -> SnapshotId:
    return SnapshotId(oe.offset, oe.epoch)


def _oe(sid: SnapshotId | None) -> OffsetAndEpoch | None:
    return None if sid is None else OffsetAndEpoch(sid.end_offset, sid.epoch)


class DiskSnapshotWriter:
    """A snapshot being fetched from the leader (the core's SnapshotWriter): a ``.part`` file
    that becomes the log's latest snapshot once frozen."""

    def __init__(self, disk_log: DiskLog, snapshot_id: OffsetAndEpoch) -> None:
        self.disk_log = disk_log
        self.snapshot_id = snapshot_id
        self._file = SnapshotFileWriter(disk_log.mlog.directory, _sid(snapshot_id))

    @property
    def size(self) -> int:
        return self._file.size

    def append(self, chunk: bytes) -> None:
        self._file.append(chunk)

    def freeze(self) -> None:
        try:
            self._file.freeze()
        finally:
            self.disk_log.mlog.snapshots_changed()
        log.info("fetched snapshot %s from the leader (%d bytes)", _sid(self.snapshot_id).file_name, self._file.size)

    def close(self) -> None:
        self._file.close()


class DiskLog:
    """``__cluster_metadata-0`` as the Raft node sees it."""

    def __init__(self, mlog: MetadataLog) -> None:
        self.mlog = mlog
        self._hw = mlog.start_offset
        self.on_truncate: list[Callable[[int], None]] = []
        self.on_snapshot: list[Callable[[SnapshotId], None]] = []
        self.on_marked: list[Callable[[Marked], None]] = []

    # -- offsets ---------------------------------------------------------------------------
    @property
    def start_offset(self) -> int:
        return self.mlog.start_offset

    @property
    def end_offset(self) -> int:
        return self.mlog.end_offset

    @property
    def flushed_end_offset(self) -> int:
        return self.mlog.flushed_offset + 1

    @property
    def high_watermark(self) -> int:
        return self._hw

    def last_fetched_epoch(self) -> int:
        """KafkaMetadataLog.lastFetchedEpoch: the epoch of the last record; of the latest
        snapshot when the log holds none past it; 0 for an empty log."""
        mlog = self.mlog
        if mlog.epoch_entries:
            return mlog.epoch_entries[-1][0]
        latest = mlog.latest_snapshot()
        if latest is None:
            return 0
        if latest.end_offset != mlog.start_offset or latest.end_offset != mlog.end_offset:
            raise LogRefusedError(f"the log has no epoch history but its snapshot {latest.file_name} is not at its "
                                  f"start and end ({mlog.start_offset}, {mlog.end_offset})")
        return latest.epoch

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """KafkaMetadataLog.endOffsetForEpoch: the epoch cache's answer, overridden by the oldest
        snapshot when the epoch ends where the log starts (it is below what the log holds); the
        log end and last epoch when the cache has no answer."""
        mlog = self.mlog
        found = mlog.end_offset_for_epoch(epoch)
        if found is None:
            return OffsetAndEpoch(mlog.end_offset, self.last_fetched_epoch())
        found_epoch, found_offset = found
        earliest = mlog.earliest_snapshot()
        if earliest is not None and found_offset == earliest.end_offset and found_epoch == epoch:
            return OffsetAndEpoch(earliest.end_offset, earliest.epoch)
        return OffsetAndEpoch(found_offset, found_epoch)

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        return _oe(self.mlog.earliest_snapshot())

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return _oe(self.mlog.latest_snapshot())

    # -- appending -------------------------------------------------------------------------
    def append_as_leader(self, values: Sequence[bytes], *, epoch: int, timestamp: int) -> tuple[int, int]:
        return self.mlog.append_values(values, epoch=epoch, timestamp=timestamp)

    def append_control_as_leader(self, messages: Sequence[tuple[ControlRecordType, Message]], *, epoch: int,
                                 timestamp: int) -> int:
        return self.mlog.append_control(messages, epoch=epoch, timestamp=timestamp)

    def append_as_follower(self, records: bytes) -> tuple[int, int] | None:
        try:
            return self.mlog.append_as_follower(records)
        except ValueError as e:
            raise LogRefusedError(str(e)) from e

    def initialize_leader_epoch(self, epoch: int) -> None:
        self.mlog.note_epoch(epoch)

    # -- reading ---------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int) -> bytes | FileSlice:
        return self.mlog.read_slice(offset, max_bytes)

    # -- truncating and flushing -------------------------------------------------------------
    def truncate_to(self, offset: int) -> None:
        if offset < self._hw:
            raise LogRefusedError(f"truncation to {offset}, below the high watermark {self._hw}")
        if offset >= self.mlog.end_offset:
            return
        self.mlog.truncate_to(offset)
        end = self.mlog.end_offset
        for listener in self.on_truncate:
            listener(end)

    def truncate_to_latest_snapshot(self) -> bool:
        marked = self.mlog.truncate_to_latest_snapshot()
        if marked is None:
            return False
        self._hw = self.mlog.start_offset
        latest = self.mlog.latest_snapshot()
        assert latest is not None
        for listener in self.on_marked:
            listener(marked)
        for snapshot_listener in self.on_snapshot:
            snapshot_listener(latest)
        return True

    def update_high_watermark(self, offset: int) -> None:
        self._hw = min(max(offset, self.mlog.start_offset), self.mlog.end_offset)

    def flush(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.mlog.flush_now()  # no event loop (tools, tests): at once
            return
        self.mlog.flush_soon()

    # -- snapshots -------------------------------------------------------------------------
    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int | None:
        path = self.mlog.snapshot_path(_sid(snapshot_id))
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return None

    def read_snapshot(self, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        """A chunk of a snapshot file; empty if retention deleted it meanwhile (the next
        request is told SNAPSHOT_NOT_FOUND)."""
        path = self.mlog.snapshot_path(_sid(snapshot_id))
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return b""
        try:
            return os.pread(fd, max(0, max_bytes), position)
        finally:
            os.close(fd)

    def create_snapshot_unchecked(self, snapshot_id: OffsetAndEpoch) -> DiskSnapshotWriter | None:
        if self.mlog.snapshot_path(_sid(snapshot_id)).exists():
            return None
        return DiskSnapshotWriter(self, snapshot_id)

"""Snapshots of the committed image, cut where Kafka's SnapshotGenerator cuts them, written
without stopping the controller.

Kafka's metadata loader publishes every commit (a metadata transaction once it ends), and the
SnapshotGenerator looks at each publication: a snapshot is due once the batches committed since
the last one (control batches too, counted by their size on disk) reach
``metadata.log.max.record.bytes.between.snapshots``, or else once
``metadata.log.max.snapshot.interval.ms`` has passed since the last one (checked only then). Its
counters reset when it schedules one; it schedules none while another is being written, and the
counters keep growing meanwhile, so the next commit schedules it. The snapshot is of the image of
that commit: frozen at once when nothing later is appended yet; otherwise the event queue is held
for the moment it takes what is in flight to commit, and the snapshot is of that later offset.
The records are then written a batch at a time between events. Deleting old snapshots and
segments is the log's retention (``MetadataLog.maybe_clean``), on its own timer. A failed write
(ENOSPC, EIO) is counted, logged once, its partial file removed, and tried again at a commit after
a backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from kraftsim.controller.event_queue import EventQueue
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.log import MetadataLog
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.metadata.snapshots import SnapshotId
from kraftsim.raft.client import NotLeaderError, RaftClient
from kraftsim.rpc.clock import Clock

log = logging.getLogger("kraftsim.controller")

Frozen = tuple[Iterator[RecordAndVersion], int]
"""A frozen view of the image's records and the offset it is at."""


class Snapshotter:
    __slots__ = ("image", "mlog", "clock", "max_bytes", "interval_ms", "bytes_since", "bytes_seen", "last_ms",
                 "writing", "failures", "retry_at_ms", "on_fault")

    def __init__(self, image: MetadataImage, mlog: MetadataLog, clock: Clock, max_bytes: int, interval_ms: int,
                 committed_offset: int) -> None:
        self.image = image
        self.mlog = mlog
        self.clock = clock
        self.max_bytes = max_bytes
        self.interval_ms = interval_ms
        self.bytes_since = 0  # batch bytes committed since the last snapshot was scheduled
        self.bytes_seen = mlog.bytes_through(committed_offset)
        self.last_ms = clock.monotonic_ms()
        self.writing = False
        self.failures = 0  # consecutive failed writes
        self.retry_at_ms = 0
        self.on_fault: Callable[[BaseException], None] | None = None

    def published(self, offset: int) -> str | None:
        """A commit up to ``offset``: count the bytes of its batches, and return why a snapshot
        is due now (the counters then start again), or None (SnapshotGenerator.publishLogDelta)."""
        seen = self.mlog.bytes_through(offset)
        self.bytes_since += seen - self.bytes_seen
        self.bytes_seen = seen
        reason = self._reason()
        if reason is None or not self._may_write():
            return None
        self.bytes_since, self.last_ms = 0, self.clock.monotonic_ms()
        return reason

    def due(self, force: bool = False) -> bool:
        """Whether a snapshot could be written now: (when not forced) one is due, nothing is
        being written, no backoff runs, and the image is not already the latest snapshot."""
        if not self._may_write(force):
            return False
        latest = self.mlog.latest_snapshot()
        if latest is not None and latest.end_offset > self.image.offset:
            return False
        return force or self._reason() is not None

    def _reason(self) -> str | None:
        if self.bytes_since >= self.max_bytes:
            return f"we have replayed at least {self.max_bytes} bytes"
        if self.interval_ms > 0 and self.bytes_since > 0 \
                and self.clock.monotonic_ms() - self.last_ms >= self.interval_ms:
            return f"we have waited at least {self.interval_ms // 60_000} minute(s)"
        return None

    def _may_write(self, force: bool = False) -> bool:
        img = self.image
        if self.writing or img.offset < 0 or img.transaction.open:
            return False
        return force or self.clock.monotonic_ms() >= self.retry_at_ms

    def freeze(self) -> Frozen | None:
        """The committed image's records, frozen now; None when records appended after the
        commit are still in flight (then :meth:`write` waits for them)."""
        img = self.image
        return None if img.journaling else (img.frozen_snapshot_records(), img.offset)

    async def write(self, queue: EventQueue, raft: RaftClient, frozen: Frozen | None = None) -> SnapshotId | None:
        """Write a snapshot of ``frozen`` (see :meth:`freeze`), or of the committed image once
        what is in flight commits; None if it failed or the log already has it."""
        img = self.image
        self.writing = True
        try:
            if frozen is None and img.journaling:  # writes in flight: hold new ones until those commit
                queue.pause()
                try:
                    await raft.wait_committed(raft.end_offset - 1)
                    frozen = img.frozen_snapshot_records(), img.offset
                    clean = not img.journaling
                except NotLeaderError:
                    return None  # renounced meanwhile: a later commit will make one due again
                finally:
                    queue.resume()
                if not clean:  # a transaction began meanwhile: not now
                    return None
            elif frozen is None:
                frozen = img.frozen_snapshot_records(), img.offset
            items, offset = frozen
            latest = self.mlog.latest_snapshot()
            if latest is not None and latest.end_offset > offset:
                return None  # Kafka's createSnapshot: a snapshot with this id exists
            t0 = self.clock.monotonic_ms()
            try:
                sid = await self.mlog.write_snapshot_async(items, offset, self.clock.wall_ms(), img.last_timestamp_ms,
                                                           control=raft.snapshot_control_records(offset))
            except (OSError, ValueError) as e:
                self._failed(e)
                return None
        finally:
            self.writing = False
        self.failures = 0
        raft.snapshot_written(sid.end_offset)
        log.info("generated snapshot %s at offset %d in %d ms", sid.file_name, offset, self.clock.monotonic_ms() - t0)
        return sid

    def _failed(self, e: BaseException) -> None:
        """Due again after a backoff: the bytes it was cut for count again."""
        self.failures += 1
        self.bytes_since = max(self.bytes_since, self.max_bytes)
        backoff = min(60_000, 1000 * 2 ** (self.failures - 1))
        self.retry_at_ms = self.clock.monotonic_ms() + backoff
        log.error("writing a snapshot failed: %s; its partial file is removed, next attempt at a commit in %d ms",
                  e, backoff)
        if self.on_fault is not None:
            self.on_fault(e)

"""Snapshots of the committed image, written without stopping the controller.

Due by bytes appended (``metadata.log.max.record.bytes.between.snapshots``) or by time
(``metadata.log.max.snapshot.interval.ms``), whatever the load, but never inside an open
metadata transaction. A snapshot must be exactly the committed state, so when writes are in
flight the event queue is held for the moment it takes them to commit (one fsync), a frozen view
of the image is taken, and the queue goes on; the records are then written a batch at a time
between events, and retention deletes what the new snapshot covers. A failed write (ENOSPC, EIO)
is counted, logged once, its partial file removed, and tried again with backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kraftsim.controller.event_queue import EventQueue
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.log import MetadataLog
from kraftsim.metadata.snapshots import SnapshotId
from kraftsim.raft.leader import RaftLeader
from kraftsim.rpc.clock import Clock

log = logging.getLogger("kraftsim.controller")


class Snapshotter:
    __slots__ = ("image", "mlog", "clock", "max_bytes", "interval_ms", "appended_bytes", "bytes_at_last",
                 "last_ms", "writing", "failures", "retry_at_ms", "on_fault")

    def __init__(self, image: MetadataImage, mlog: MetadataLog, clock: Clock, max_bytes: int, interval_ms: int,
                 appended_bytes: Callable[[], int]) -> None:
        self.image = image
        self.mlog = mlog
        self.clock = clock
        self.max_bytes = max_bytes
        self.interval_ms = interval_ms
        self.appended_bytes = appended_bytes  # record bytes appended so far (the write path counts)
        self.bytes_at_last = appended_bytes()
        self.last_ms = clock.monotonic_ms()
        self.writing = False
        self.failures = 0  # consecutive failed writes
        self.retry_at_ms = 0
        self.on_fault: Callable[[BaseException], None] | None = None

    def due(self, force: bool = False) -> bool:
        img = self.image
        if self.writing or img.offset < 0 or img.transaction.open:
            return False
        if not force and self.clock.monotonic_ms() < self.retry_at_ms:
            return False
        latest = self.mlog.latest_snapshot()
        if latest is not None and latest.end_offset > img.offset:
            return False
        if force:
            return True
        since = self.appended_bytes() - self.bytes_at_last
        by_bytes = since >= self.max_bytes
        by_time = (self.interval_ms > 0 and since > 0
                   and self.clock.monotonic_ms() - self.last_ms >= self.interval_ms)
        return by_bytes or by_time

    async def write(self, queue: EventQueue, raft: RaftLeader) -> SnapshotId | None:
        """Snapshot the committed image (call when :meth:`due`); None if it failed."""
        img = self.image
        self.writing = True
        try:
            if img.journaling:  # writes in flight: hold new ones until those commit
                queue.pause()
                try:
                    await raft.wait_committed(raft.end_offset - 1)
                    items, offset = img.frozen_snapshot_records(), img.offset
                    clean = not img.journaling
                finally:
                    queue.resume()
                if not clean:  # a transaction began meanwhile: not now
                    return None
            else:
                items, offset = img.frozen_snapshot_records(), img.offset
            appended, t0 = self.appended_bytes(), self.clock.monotonic_ms()
            try:
                sid = await self.mlog.write_snapshot_async(items, offset, self.clock.wall_ms(), img.last_timestamp_ms)
                self.mlog.apply_retention(self.clock.wall_ms())
            except (OSError, ValueError) as e:
                self._failed(e)  # still due: the next attempt comes after the backoff
                return None
            self.bytes_at_last, self.last_ms = appended, t0
        finally:
            self.writing = False
        self.failures = 0
        log.info("generated snapshot %s at offset %d in %d ms", sid.file_name, offset, self.clock.monotonic_ms() - t0)
        return sid

    def _failed(self, e: BaseException) -> None:
        self.failures += 1
        backoff = min(60_000, 1000 * 2 ** (self.failures - 1))
        self.retry_at_ms = self.clock.monotonic_ms() + backoff
        log.error("writing a snapshot failed: %s; its partial file is removed, next attempt in %d ms", e, backoff)
        if self.on_fault is not None:
            self.on_fault(e)

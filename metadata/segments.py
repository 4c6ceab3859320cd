"""The segment files of ``__cluster_metadata-0``: append, roll, read, recover, delete.

Synchronous and free of asyncio on purpose: recovery and the crash tests drive it directly, and
the async log (``metadata.log``) only decides *when* to call :meth:`SegmentedLog.sync`.

Layout is Kafka's: ``<20-digit base offset>.log`` files of back-to-back RecordBatch v2 batches.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from metadata.batch import Batch, BatchError, CorruptBatchError, IncompleteBatchError, read_batch
from metadata.files import fsync_dir

log = logging.getLogger("kraftsim.log")

READ_CHUNK = 8 * 1024 * 1024
MAX_BATCH_BYTES = 8 * 1024 * 1024 + 1024  # KafkaRaftClient.MAX_BATCH_SIZE_BYTES plus slack


class LogFailedError(Exception):
    """The log hit an I/O error and refuses writes until reopened (fail closed)."""


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def parse_segment_name(name: str) -> int | None:
    if len(name) == 24 and name.endswith(".log") and name[:20].isdigit():
        return int(name[:20])
    return None


@dataclass(slots=True)
class Segment:
    base_offset: int
    path: Path
    size: int
    next_offset: int  # one past the last offset it holds (== base_offset when empty)
    max_timestamp: int = -1


def iter_file_batches(path: Path, start: int = 0, verify_crc: bool = True,
                      end: int | None = None) -> Iterator[tuple[int, Batch]]:
    """(file position, batch) for every complete, valid batch; stops quietly at a torn tail
    and raises :class:`BatchError` (with ``.position`` in the file) at corruption."""
    with open(path, "rb") as f:
        f.seek(start)
        pos_in_file = start
        buf = b""
        eof = False
        while True:
            if not eof and len(buf) < READ_CHUNK:
                want = READ_CHUNK if end is None else min(READ_CHUNK, end - pos_in_file - len(buf))
                chunk = f.read(want) if want > 0 else b""
                if not chunk:
                    eof = True
                buf += chunk
            pos = 0
            while True:
                try:
                    batch = read_batch(buf, pos, verify_crc=verify_crc, max_batch_size=MAX_BATCH_BYTES)
                except IncompleteBatchError:
                    break
                except BatchError as e:
                    e.position = pos_in_file + pos
                    raise
                yield pos_in_file + pos, batch
                pos += batch.size_in_bytes
            buf = buf[pos:]
            pos_in_file += pos
            if eof:
                if buf:
                    raise IncompleteBatchError(f"{len(buf)} bytes of an incomplete batch at the end", pos_in_file)
                return


class SegmentedLog:
    """The ``.log`` segments of one directory, with one active (last) segment open for append."""

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.dir = directory
        self.segment_bytes = segment_bytes
        self.segments: list[Segment] = []
        self._fd: int | None = None
        self.failed: BaseException | None = None
        self.unsynced = False

    # -- opening and recovery -------------------------------------------------------------
    @classmethod
    def open(cls, directory: Path, segment_bytes: int, start_offset: int = 0) -> SegmentedLog:
        """Open (creating the directory if needed), validating and truncating the tail."""
        directory.mkdir(parents=True, exist_ok=True)
        self = cls(directory, segment_bytes)
        for leftover in directory.glob("*.log.deleted"):
            leftover.unlink(missing_ok=True)
        bases = sorted(b for b in (parse_segment_name(p.name) for p in directory.iterdir()) if b is not None)
        for i, base in enumerate(bases):
            path = directory / segment_name(base)
            last = i == len(bases) - 1
            seg = Segment(base, path, path.stat().st_size, base)
            if last:
                self._recover_tail(seg)
            else:
                seg.next_offset = bases[i + 1]
            self.segments.append(seg)
        if not self.segments:
            self._new_segment(start_offset)
        else:
            self._open_active()
        return self

    def _recover_tail(self, seg: Segment) -> None:
        """Keep exactly the valid batches of the last segment; truncate anything after them."""
        good_end = 0
        next_offset = seg.base_offset
        reason = None
        try:
            for pos, batch in iter_file_batches(seg.path):
                if batch.base_offset != next_offset:
                    reason = f"batch at position {pos} has base offset {batch.base_offset}, expected {next_offset}"
                    break
                good_end = pos + batch.size_in_bytes
                next_offset = batch.last_offset + 1
                seg.max_timestamp = max(seg.max_timestamp, batch.max_timestamp)
        except IncompleteBatchError as e:
            reason = f"torn batch at position {e.position}"
        except CorruptBatchError as e:
            reason = f"corrupt batch at position {e.position}: {e}"
        except BatchError as e:
            reason = f"unreadable batch at position {e.position}: {e}"
        size = seg.path.stat().st_size
        if good_end < size:
            log.warning("recovering %s: %s; truncating from %d to %d bytes (last valid offset %d)",
                        seg.path, reason or "trailing bytes", size, good_end, next_offset - 1)
            with open(seg.path, "r+b") as f:
                f.truncate(good_end)
                f.flush()
                os.fsync(f.fileno())
        seg.size = good_end
        seg.next_offset = next_offset

    def _open_active(self) -> None:
        seg = self.segments[-1]
        self._fd = os.open(seg.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _new_segment(self, base_offset: int) -> None:
        path = self.dir / segment_name(base_offset)
        seg = Segment(base_offset, path, 0, base_offset)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        self.segments.append(seg)
        self._fd = fd
        fsync_dir(self.dir)

    # -- properties -----------------------------------------------------------------------
    @property
    def start_offset(self) -> int:
        return self.segments[0].base_offset

    @property
    def end_offset(self) -> int:
        """The next offset to be written."""
        return self.segments[-1].next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- writing --------------------------------------------------------------------------
    def _check(self) -> None:
        if self.failed is not None:
            raise LogFailedError(f"the metadata log failed earlier and must be reopened: {self.failed}")

    def append(self, data: bytes | bytearray, base_offset: int, next_offset: int, max_timestamp: int) -> None:
        """Write one or more encoded batches starting at ``base_offset`` (not yet durable)."""
        self._check()
        if base_offset != self.end_offset:
            raise ValueError(f"append at {base_offset} but the log ends at {self.end_offset}")
        seg = self.segments[-1]
        try:
            if seg.size > 0 and seg.size + len(data) > self.segment_bytes:
                self.roll()
                seg = self.segments[-1]
            view = memoryview(data)
            assert self._fd is not None
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError as e:
            self.failed = e
            raise LogFailedError(f"write to {seg.path} failed: {e}") from e
        seg.size += len(data)
        seg.next_offset = next_offset
        seg.max_timestamp = max(seg.max_timestamp, max_timestamp)
        self.unsynced = True

    def roll(self) -> None:
        """Close the active segment (durably) and start a new one at the end offset."""
        self._check()
        if self._fd is not None:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        self._new_segment(self.end_offset)
        log.info("rolled the metadata log to a new segment at offset %d", self.end_offset)

    def sync(self) -> None:
        """fsync the active segment. Blocking: the async log runs it in a thread."""
        self._check()
        fd = self._fd
        assert fd is not None
        try:
            os.fsync(fd)
        except OSError as e:
            self.failed = e
            raise LogFailedError(f"fsync of the metadata log failed: {e}") from e

    def fileno(self) -> int:
        assert self._fd is not None
        return self._fd

    def truncate_to(self, offset: int) -> None:
        """Drop everything at or after ``offset`` (used when a snapshot is ahead of the log)."""
        self._check()
        if offset >= self.end_offset:
            return
        self.close()
        keep = [s for s in self.segments if s.base_offset < offset]
        for s in self.segments:
            if s.base_offset >= offset:
                s.path.unlink(missing_ok=True)
        self.segments = keep
        if keep:
            seg = keep[-1]
            pos_end = 0
            next_offset = seg.base_offset
            for pos, batch in iter_file_batches(seg.path):
                if batch.base_offset >= offset:
                    break
                pos_end = pos + batch.size_in_bytes
                next_offset = batch.last_offset + 1
            with open(seg.path, "r+b") as f:
                f.truncate(pos_end)
                os.fsync(f.fileno())
            seg.size = pos_end
            seg.next_offset = next_offset
            self._open_active()
        else:
            self._new_segment(offset)

    def reset_to(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset``."""
        self.close()
        for s in self.segments:
            s.path.unlink(missing_ok=True)
        self.segments = []
        self._new_segment(offset)

    def delete_segments_before(self, offset: int, keep_bytes: int | None = None,
                               older_than_ms: int | None = None) -> list[Segment]:
        """Delete whole non-active segments that end at or before ``offset``, oldest first,
        while the log is over ``keep_bytes`` or the segment is older than ``older_than_ms``."""
        deleted = []
        while len(self.segments) > 1:
            seg = self.segments[0]
            if seg.next_offset > offset:
                break
            over_size = keep_bytes is not None and self.size_in_bytes > keep_bytes
            too_old = older_than_ms is not None and 0 <= seg.max_timestamp < older_than_ms
            if not (over_size or too_old):
                break
            self.segments.pop(0)
            seg.path.unlink(missing_ok=True)
            deleted.append(seg)
        if deleted:
            fsync_dir(self.dir)
        return deleted

    def close(self) -> None:
        if self._fd is not None:
            try:
                if self.failed is None:
                    os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None

    # -- reading --------------------------------------------------------------------------
    def batches(self, from_offset: int = 0, verify_crc: bool = True) -> Iterator[Batch]:
        """Every batch holding offsets ≥ ``from_offset`` (whole batches: the first may start earlier)."""
        for i, seg in enumerate(self.segments):
            if seg.next_offset <= from_offset:
                continue
            if i + 1 < len(self.segments) and self.segments[i + 1].base_offset <= from_offset:
                continue
            for _, batch in iter_file_batches(seg.path, verify_crc=verify_crc, end=seg.size):
                if batch.last_offset >= from_offset:
                    yield batch

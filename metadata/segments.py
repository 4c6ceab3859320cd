"""The segment files of ``__cluster_metadata-0``: append, roll, read, recover, delete.

Synchronous and free of asyncio on purpose: recovery and the crash tests drive it directly, and
the async log (``metadata.log``) only decides *when* to call :meth:`SegmentedLog.sync`.

Layout is Kafka's: ``<20-digit base offset>.log`` files of back-to-back RecordBatch v2 batches.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kraftsim.metadata import fileio
from kraftsim.metadata.batch import LOG_OVERHEAD, Batch, BatchError, CorruptBatchError, IncompleteBatchError, read_batch
from kraftsim.metadata.files import WriteFailedError, fsync_dir, write_failed
from kraftsim.rpc.file_slice import FileSlice

log = logging.getLogger("kraftsim.log")

READ_CHUNK = 8 * 1024 * 1024
DELETED_SUFFIX = ".deleted"  # Kafka's LogFileUtils.DELETED_FILE_SUFFIX: a file waiting to be deleted
MAX_BATCH_BYTES = 8 * 1024 * 1024 + 1024  # KafkaRaftClient.MAX_BATCH_SIZE_BYTES plus slack
INDEX_INTERVAL_BYTES = 4096  # Kafka's index.interval.bytes: one index entry per 4 KiB of log
# BaseOffset, BatchLength, PartitionLeaderEpoch, Magic, CRC, Attributes, LastOffsetDelta.
_HEAD = struct.Struct(">qiibIhi")


class LogFailedError(Exception):
    """The log hit an I/O error and refuses writes until reopened (fail closed)."""


class CorruptLogError(Exception):
    """Damage that is not a torn tail: fsynced (acknowledged) bytes are unreadable, or valid
    batches follow the damage. Never repaired silently; the operator decides (``kraftsim log
    repair``). One line, naming the segment, the byte position and the offset."""

    def __init__(self, segment: Path, position: int, offset: int, reason: str) -> None:
        self.segment, self.position, self.offset = segment, position, offset
        super().__init__(
            f"corrupt metadata log: {segment.name} at byte {position} (offset {offset}): {reason}; the log must be "
            f"repaired, e.g. `kraftsim log repair {segment.parent.parent} --truncate-at {offset}` (it keeps a "
            f"backup of what it cuts)")


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def parse_segment_name(name: str) -> int | None:
    if len(name) == 24 and name.endswith(".log") and name[:20].isdigit():
        return int(name[:20])
    return None


class OffsetIndex:
    """A segment's sparse index: (batch base offset, file position) for the first batch and then
    at least every INDEX_INTERVAL_BYTES, as Kafka's .index (kept in memory: kraftsim writes no
    index files, and Kafka rebuilds missing ones)."""

    __slots__ = ("offsets", "positions")

    def __init__(self) -> None:
        self.offsets = array("q")
        self.positions = array("q")

    def add(self, base_offset: int, position: int) -> None:
        if not self.positions or position - self.positions[-1] >= INDEX_INTERVAL_BYTES:
            self.offsets.append(base_offset)
            self.positions.append(position)

    def floor(self, offset: int) -> int:
        """A position at or before the batch holding ``offset`` (0 when nothing is indexed)."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        return self.positions[i] if i >= 0 else 0


@dataclass(slots=True)
class Segment:
    base_offset: int
    path: Path
    size: int
    next_offset: int  # one past the last offset it holds (== base_offset when empty)
    max_timestamp: int = -1
    index: OffsetIndex | None = field(default=None, repr=False)  # built on first read
    read_fd: int | None = field(default=None, repr=False)

    def close_reader(self) -> None:
        if self.read_fd is not None:
            os.close(self.read_fd)
            self.read_fd = None


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
        self._retired_fds: list[int] = []  # descriptors of replaced active segments, closed by the next sync
        self.failed: BaseException | None = None
        self.unsynced = False

    # -- opening and recovery -------------------------------------------------------------
    @classmethod
    def open(cls, directory: Path, segment_bytes: int, start_offset: int = 0,
             recovery_point: int = 0) -> SegmentedLog:
        """Open (creating the directory if needed), validating the last segment. Bytes at or
        after ``recovery_point`` (the first offset not known to be fsynced) may be a torn tail
        and are truncated; damage before it, or followed by valid batches, is CorruptLogError."""
        directory.mkdir(parents=True, exist_ok=True)
        self = cls(directory, segment_bytes)
        for leftover in directory.glob("*" + DELETED_SUFFIX):  # Kafka's LogLoader deletes them all
            leftover.unlink(missing_ok=True)
        bases = sorted(b for b in (parse_segment_name(p.name) for p in directory.iterdir()) if b is not None)
        for i, base in enumerate(bases):
            path = directory / segment_name(base)
            last = i == len(bases) - 1
            seg = Segment(base, path, path.stat().st_size, base)
            if last:
                self._recover_tail(seg, recovery_point)
            else:
                seg.next_offset = bases[i + 1]
            self.segments.append(seg)
        if not self.segments:
            self._new_segment(start_offset)
        else:
            self._open_active()
        return self

    def _recover_tail(self, seg: Segment, recovery_point: int = 0) -> None:
        """Keep exactly the valid batches of the last segment and truncate a torn tail after
        them; refuse (CorruptLogError) damage that cannot be a torn tail."""
        good_end = 0
        next_offset = seg.base_offset
        reason = None
        seg.index = index = OffsetIndex()
        bad_at = None
        try:
            for pos, batch in iter_file_batches(seg.path):
                if batch.base_offset != next_offset:
                    reason = f"batch at position {pos} has base offset {batch.base_offset}, expected {next_offset}"
                    bad_at = pos
                    break
                index.add(batch.base_offset, pos)
                good_end = pos + batch.size_in_bytes
                next_offset = batch.last_offset + 1
                seg.max_timestamp = max(seg.max_timestamp, batch.max_timestamp)
        except IncompleteBatchError as e:
            reason = f"torn batch at position {e.position}"
            bad_at = e.position
        except CorruptBatchError as e:
            reason = f"corrupt batch at position {e.position}: {e}"
            bad_at = e.position
        except BatchError as e:
            reason = f"unreadable batch at position {e.position}: {e}"
            bad_at = e.position
        size = seg.path.stat().st_size
        if bad_at is not None:
            if next_offset < recovery_point:
                raise CorruptLogError(seg.path, bad_at, next_offset,
                                      f"{reason}, below the recovery point {recovery_point} (fsynced data)")
            follower = _valid_batch_after(seg.path, bad_at)
            if follower is not None:
                raise CorruptLogError(seg.path, bad_at, next_offset,
                                      f"{reason}, followed by a valid batch at position {follower}")
        if good_end < size:
            log.warning("recovering %s: %s; truncating the torn tail from %d to %d bytes (last valid offset %d)",
                        seg.path, reason or "trailing bytes", size, good_end, next_offset - 1)
            try:
                with open(seg.path, "r+b") as f:
                    f.truncate(good_end)
                    f.flush()
                    fileio.fsync(f.fileno())
            except OSError as e:
                raise write_failed(e, seg.path) from e
        seg.size = good_end
        seg.next_offset = next_offset

    def _open_active(self) -> None:
        seg = self.segments[-1]
        self._fd = os.open(seg.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def _new_segment(self, base_offset: int) -> None:
        path = self.dir / segment_name(base_offset)
        seg = Segment(base_offset, path, 0, base_offset, index=OffsetIndex())
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError as e:
            raise write_failed(e, path) from e
        self.segments.append(seg)
        self._fd = fd
        try:
            fsync_dir(self.dir)
        except OSError as e:
            raise write_failed(e, self.dir) from e

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

    def append(self, data: bytes | bytearray | memoryview, base_offset: int, next_offset: int,
               max_timestamp: int) -> None:
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
                n = fileio.write(self._fd, view)
                view = view[n:]
        except OSError as e:
            self.failed = e
            what = str(e) if isinstance(e, WriteFailedError) else f"cannot write {seg.path}: {e.strerror or e}"
            raise LogFailedError(what) from e
        if seg.index is not None:
            _index_batches(seg.index, data, seg.size)
        seg.size += len(data)
        seg.next_offset = next_offset
        seg.max_timestamp = max(seg.max_timestamp, max_timestamp)
        self.unsynced = True

    def roll(self) -> None:
        """Close the active segment (durably) and start a new one at the end offset."""
        self._check()
        if self._fd is not None:
            os.fsync(self._fd)
            self._retire_writer()  # a flush in another thread may be fsyncing it too
        self._new_segment(self.end_offset)
        log.info("rolled the metadata log to a new segment at offset %d", self.end_offset)

    def sync(self) -> None:
        """fsync the active segment. Blocking: the async log runs it in a thread."""
        self._check()
        self._close_retired()
        fd = self._fd
        assert fd is not None
        try:
            fileio.fsync(fd)
        except OSError as e:
            self.failed = e
            raise LogFailedError(f"cannot fsync {self.segments[-1].path}: {e.strerror or e}") from e

    def fileno(self) -> int:
        assert self._fd is not None
        return self._fd

    def truncate_to(self, offset: int) -> None:
        """Drop every batch holding an offset at or after ``offset``: a batch that holds it goes
        whole, as Kafka's segment truncation cuts at the start of the batch holding the offset
        (a Raft follower cutting a divergent tail). What is kept is fsynced before this returns."""
        self._check()
        if offset >= self.end_offset:
            return
        self._retire_writer()
        for s in self.segments:
            s.close_reader()
        keep = [s for s in self.segments if s.base_offset < offset]
        for s in self.segments:
            if s.base_offset >= offset:
                s.path.unlink(missing_ok=True)
            s.index = None
        self.segments = keep
        try:
            if keep:
                seg = keep[-1]
                pos_end = 0
                next_offset = seg.base_offset
                for pos, batch in iter_file_batches(seg.path, end=seg.size):
                    if batch.last_offset >= offset:
                        break
                    pos_end = pos + batch.size_in_bytes
                    next_offset = batch.last_offset + 1
                with open(seg.path, "r+b") as f:
                    f.truncate(pos_end)
                    fileio.fsync(f.fileno())
                seg.size = pos_end
                seg.next_offset = next_offset
                self._open_active()
                fsync_dir(self.dir)
            else:
                self._new_segment(offset)
        except OSError as e:
            self.failed = e
            raise LogFailedError(f"cannot truncate the metadata log at offset {offset}: {e.strerror or e}") from e

    def reset_to(self, offset: int) -> None:
        """Delete every segment and start an empty log at ``offset``."""
        self._retire_writer()
        for s in self.segments:
            s.close_reader()
            s.path.unlink(missing_ok=True)
        self.segments = []
        self._new_segment(offset)

    def _retire_writer(self) -> None:
        """Stop writing through the active segment's descriptor without closing it yet: a flush
        may be fsyncing it in another thread this very moment. It is closed by the next
        :meth:`sync` (which runs after that flush) or by :meth:`close`."""
        if self._fd is not None:
            self._retired_fds.append(self._fd)
            self._fd = None

    def _close_retired(self) -> None:
        while self._retired_fds:
            os.close(self._retired_fds.pop())

    def retire_below(self, log_start_offset: int, high_watermark: int) -> list[Segment]:
        """Kafka's deleteLogStartOffsetBreachedSegments: take out, oldest first, every segment
        whose successor starts at or below ``log_start_offset`` (so never the active one, and none
        reaching past ``high_watermark``), renamed ``<base>.log.deleted`` as Kafka renames them.
        Their readers stay open, for fetches still sending from them, until
        :meth:`delete_retired` removes the files."""
        retired = []
        while len(self.segments) > 1:
            seg, successor = self.segments[0], self.segments[1]
            if successor.base_offset > log_start_offset or successor.base_offset > high_watermark:
                break
            self.segments.pop(0)
            deleted = seg.path.with_name(seg.path.name + DELETED_SUFFIX)
            os.replace(seg.path, deleted)
            seg.path = deleted
            retired.append(seg)
        if retired:
            fsync_dir(self.dir)
        return retired

    def retire_all_and_start_at(self, offset: int) -> list[Segment]:
        """LocalLog.truncateFullyAndStartAt: every segment taken out as :meth:`retire_below`
        takes them (renamed ``*.deleted``), and an empty active segment at ``offset``."""
        self._check()
        self._retire_writer()
        retired = self.segments
        for seg in retired:
            deleted = seg.path.with_name(seg.path.name + DELETED_SUFFIX)
            os.replace(seg.path, deleted)
            seg.path = deleted
        self.segments = []
        self._new_segment(offset)
        return retired

    @staticmethod
    def delete_retired(segments: list[Segment]) -> None:
        """Close and delete segments :meth:`retire_below` took out."""
        for seg in segments:
            seg.close_reader()
            seg.path.unlink(missing_ok=True)

    def close(self) -> None:
        for seg in self.segments:
            seg.close_reader()
        self._close_retired()
        if self._fd is not None:
            try:
                if self.failed is None:
                    os.fsync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None

    # -- reading --------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int) -> bytes:
        """Kafka's LocalLog.read with minOneMessage: the bytes from the batch holding ``offset``
        on, within one segment, at most ``max_bytes`` but at least that whole batch. Like Kafka's
        file slice, the end may cut a batch short; readers drop such a partial batch. Empty at or
        past the log end."""
        found = self._locate(offset, max_bytes)
        if found is None:
            return b""
        fd, pos, n = found
        return os.pread(fd, n, pos)

    def read_slice(self, offset: int, max_bytes: int) -> FileSlice | bytes:
        """What :meth:`read` returns, as a slice of the segment file (not read yet); ``b""``
        when there is nothing to serve."""
        found = self._locate(offset, max_bytes)
        if found is None:
            return b""
        fd, pos, n = found
        return FileSlice(fd, pos, n) if n else b""

    def _locate(self, offset: int, max_bytes: int) -> tuple[int, int, int] | None:
        """(file descriptor, position, byte count) of what :meth:`read` returns."""
        segments = self.segments
        i = bisect.bisect_right([s.base_offset for s in segments], offset) - 1 if len(segments) > 1 else 0
        if i < 0 or offset >= self.end_offset:
            return None
        seg = segments[i]
        if offset >= seg.next_offset:  # an offset an empty segment was rolled past: the next one
            if i + 1 >= len(segments):
                return None
            seg = segments[i + 1]
        if seg.read_fd is None:
            seg.read_fd = os.open(seg.path, os.O_RDONLY)
        fd = seg.read_fd
        if seg.index is None:
            seg.index = _build_index(fd, seg.size)
        pos = seg.index.floor(offset)
        size = seg.size
        while pos < size:
            head = os.pread(fd, _HEAD.size, pos)
            if len(head) < _HEAD.size:
                return None
            base, length, _, _, _, _, last_delta = _HEAD.unpack(head)
            if base + last_delta >= offset:
                return fd, pos, min(size - pos, max(max_bytes, LOG_OVERHEAD + length))
            pos += LOG_OVERHEAD + length
        return None

    def batches(self, from_offset: int = 0, verify_crc: bool = True) -> Iterator[Batch]:
        """Every batch holding offsets ≥ ``from_offset`` (whole batches: the first may start earlier)."""
        for i, seg in enumerate(self.segments):
            if seg.next_offset <= from_offset:
                continue
            if i + 1 < len(self.segments) and self.segments[i + 1].base_offset <= from_offset:
                continue
            expected = None
            try:
                for _, batch in iter_file_batches(seg.path, verify_crc=verify_crc, end=seg.size):
                    expected = batch.last_offset + 1
                    if batch.last_offset >= from_offset:
                        yield batch
            except BatchError as e:
                raise CorruptLogError(seg.path, e.position or 0, seg.base_offset if expected is None else expected,
                                      str(e)) from e


def _index_batches(index: OffsetIndex, data: bytes | bytearray | memoryview, at: int) -> None:
    """Index the batches of ``data`` (whole batches) written at file position ``at``."""
    pos, n = 0, len(data)
    while pos + LOG_OVERHEAD <= n:
        base, length = _PREFIX12.unpack_from(data, pos)
        index.add(base, at + pos)
        pos += LOG_OVERHEAD + length


def _build_index(fd: int, size: int) -> OffsetIndex:
    """The index of a segment nobody has read yet, from its batch headers (12 bytes each)."""
    index = OffsetIndex()
    pos = 0
    while pos + LOG_OVERHEAD <= size:
        base, length = _PREFIX12.unpack(os.pread(fd, LOG_OVERHEAD, pos))
        index.add(base, pos)
        pos += LOG_OVERHEAD + length
    return index


_PREFIX12 = struct.Struct(">qi")  # BaseOffset, BatchLength


def _valid_batch_after(path: Path, bad_at: int) -> int | None:
    """The position of a valid batch after the damage at ``bad_at``, if the damaged batch's
    length still points at one (a bit flip in a body leaves the length intact), else None."""
    with open(path, "rb") as f:
        f.seek(bad_at)
        head = f.read(LOG_OVERHEAD)
        if len(head) < LOG_OVERHEAD:
            return None
        _, length = _PREFIX12.unpack(head)
        if length < 0 or length > MAX_BATCH_BYTES:
            return None
        nxt = bad_at + LOG_OVERHEAD + length
        f.seek(nxt)
        data = f.read(MAX_BATCH_BYTES + LOG_OVERHEAD)
    try:
        read_batch(data, 0, verify_crc=True, max_batch_size=MAX_BATCH_BYTES)
    except BatchError:
        return None
    return nxt

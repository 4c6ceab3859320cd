"""Where the records are on disk, and how a read is cut into splits that executors decode alone.

Free of Spark on purpose: the planner runs in Spark's Python planning worker, the streaming
reader in a long-lived driver-side worker, and the tests and the CLI call it directly.

A split is a batch-aligned byte range ``[start, end)`` of one file. The planner walks only the
61-byte batch headers (hopping by BatchLength through a memory map, so a 1 GiB segment costs a
few pages per batch, not a read of the whole file) and records each batch's offsets; executors
then read their range with one ``read`` and decode it with :mod:`kraftsim.metadata.batch`.
Aligning on the driver rather than letting each executor scan from the file start for the first
batch boundary keeps the total work linear, and makes from/to-offset pruning exact.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kraftsim.metadata import files
from kraftsim.metadata.batch import BATCH_OVERHEAD, CONTROL_MASK, LOG_OVERHEAD, MAGIC, MIN_BATCH_LENGTH
from kraftsim.metadata.segments import MAX_BATCH_BYTES, parse_segment_name
from kraftsim.metadata.snapshots import SnapshotId, list_snapshots

_HEAD = struct.Struct(">qi")  # BaseOffset, BatchLength
_ATTRS_DELTA = struct.Struct(">hi")  # Attributes (21), LastOffsetDelta (23)

DEFAULT_SPLIT_BYTES = 4 * 1024 * 1024  # ~60k records: enough tasks to keep every core busy to the end


class LayoutError(Exception):
    """The directory is not a metadata log, or its files cannot be planned (one line for users)."""


class DataLossError(LayoutError):
    """Offsets a reader still needs are no longer on disk (segments deleted after a snapshot)."""


@dataclass(frozen=True, slots=True)
class BatchPos:
    """One batch as the header walk saw it."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    is_control: bool


@dataclass(frozen=True, slots=True)
class Split:
    """A batch-aligned byte range of one file: what one Spark task reads.

    ``offset_shift`` is how snapshot records are placed in the log's offset space: a snapshot's
    records take effect at its last contained offset, so every row of a checkpoint gets
    ``offset = end_offset - 1`` and keeps its local offset in ``source_offset``. Segments have
    ``offset_shift = None``: a row's offset is its own.
    """

    path: str
    start: int
    end: int
    first_offset: int
    last_offset: int
    snapshot_offset: int | None = None
    min_offset: int | None = None  # rows below are dropped (fromOffset, streaming start)
    max_offset: int | None = None  # rows above are dropped (toOffset, streaming end - 1)

    @property
    def name(self) -> str:
        return Path(self.path).name


def partition_dir(path: str | Path) -> Path:
    """``__cluster_metadata-0`` from either it or the ``metadata.log.dir`` holding it."""
    p = Path(path)
    if not p.exists():
        raise LayoutError(f"{p}: no such directory")
    if not p.is_dir():
        raise LayoutError(f"{p}: not a directory (give a metadata.log.dir or its {files.METADATA_TOPIC_DIR})")
    inner = p / files.METADATA_TOPIC_DIR
    if inner.is_dir():
        return inner
    if any(parse_segment_name(c.name) is not None for c in p.iterdir()) or list_snapshots(p):
        return p
    raise LayoutError(f"{p}: neither a metadata.log.dir nor a {files.METADATA_TOPIC_DIR} directory "
                      f"(no .log segments or .checkpoint snapshots in it)")


def segments(directory: Path) -> list[tuple[int, Path]]:
    """(base offset, path) of every ``.log`` segment, oldest first."""
    found = []
    for p in directory.iterdir():
        base = parse_segment_name(p.name)
        if base is not None:
            found.append((base, p))
    return sorted(found)


def snapshots(directory: Path) -> list[SnapshotId]:
    return list_snapshots(directory)


def choose_snapshot(directory: Path, which: str) -> SnapshotId | None:
    """The snapshot named by the ``snapshot`` option: ``latest``, ``none``, an end offset, or a
    file name; LayoutError naming what exists when it does not match."""
    which = which.strip()
    if which.lower() in ("", "none", "false"):
        return None
    snaps = snapshots(directory)
    if which.lower() == "latest":
        if not snaps:
            raise LayoutError(f"{directory}: snapshot=latest but there is no .checkpoint snapshot")
        return snaps[-1]
    for s in snaps:
        if which == s.file_name or (which.isdigit() and int(which) == s.end_offset):
            return s
    have = ", ".join(s.file_name for s in snaps) or "none"
    raise LayoutError(f"{directory}: no snapshot {which!r} (snapshots: {have})")


def walk_headers(path: Path, start: int = 0, stop_at_offset: int | None = None) -> Iterator[BatchPos]:
    """Every complete batch from byte ``start``, by its header only; a torn tail ends the walk
    quietly (a live log's active segment), a damaged header raises LayoutError.

    ``stop_at_offset`` ends the walk at the first batch whose base offset is beyond it."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise DataLossError(f"{path.name} was deleted while it was being read") from None
    if size <= start:
        return
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        pos = start
        while pos + BATCH_OVERHEAD <= size:
            base, length = _HEAD.unpack_from(m, pos)
            if length < MIN_BATCH_LENGTH or length + LOG_OVERHEAD > MAX_BATCH_BYTES or m[pos + 16] != MAGIC:
                raise LayoutError(f"{path.name}: damaged batch header at byte {pos} "
                                  f"(BatchLength {length}, magic {m[pos + 16]})")
            total = length + LOG_OVERHEAD
            if pos + total > size:
                return  # torn tail, or a batch still being written
            if stop_at_offset is not None and base > stop_at_offset:
                return
            attrs, delta = _ATTRS_DELTA.unpack_from(m, pos + 21)
            yield BatchPos(pos, total, base, base + delta, bool(attrs & CONTROL_MASK))
            pos += total


def _group(path: Path, batches: Iterator[BatchPos], max_bytes: int, snapshot_offset: int | None,
           min_offset: int | None, max_offset: int | None) -> Iterator[Split]:
    """Runs of consecutive batches of at most ``max_bytes`` (one bigger batch stands alone)."""
    run: list[BatchPos] = []
    run_bytes = 0

    def cut() -> Split:
        return Split(str(path), run[0].position, run[-1].position + run[-1].size, run[0].base_offset,
                     run[-1].last_offset, snapshot_offset, min_offset, max_offset)

    for b in batches:
        if run and run_bytes + b.size > max_bytes:
            yield cut()
            run, run_bytes = [], 0
        run.append(b)
        run_bytes += b.size
    if run:
        yield cut()


def plan_segments(directory: Path, *, from_offset: int | None = None, to_offset: int | None = None,
                  max_bytes: int = DEFAULT_SPLIT_BYTES) -> list[Split]:
    """Splits covering every log record with ``from_offset <= offset <= to_offset``."""
    segs = segments(directory)
    out: list[Split] = []
    for i, (base, path) in enumerate(segs):
        next_base = segs[i + 1][0] if i + 1 < len(segs) else None
        if to_offset is not None and base > to_offset:
            break
        if from_offset is not None and next_base is not None and next_base <= from_offset:
            continue
        wanted = (b for b in walk_headers(path, stop_at_offset=to_offset)
                  if from_offset is None or b.last_offset >= from_offset)
        out.extend(_group(path, wanted, max_bytes, None, from_offset, to_offset))
    return out


def plan_snapshot(directory: Path, sid: SnapshotId, max_bytes: int = DEFAULT_SPLIT_BYTES) -> list[Split]:
    """Splits of one checkpoint, checked to start and end with a control batch (header, footer)
    and to run without gaps, so a torn or half-copied snapshot fails here rather than halfway."""
    path = directory / sid.file_name
    batches = list(walk_headers(path))
    expected = 0
    for b in batches:
        if b.base_offset != expected:
            raise LayoutError(f"{sid.file_name}: batch at byte {b.position} has offset {b.base_offset}, "
                              f"expected {expected}")
        expected = b.last_offset + 1
    if not batches or not batches[0].is_control or not batches[-1].is_control \
            or batches[-1].position + batches[-1].size != path.stat().st_size:
        raise LayoutError(f"{sid.file_name}: incomplete snapshot (no header or footer batch)")
    return list(_group(path, iter(batches), max_bytes, sid.end_offset - 1, None, None))


def log_start_offset(directory: Path) -> int:
    """The first offset still in the segments (0 for an empty directory)."""
    segs = segments(directory)
    return segs[0][0] if segs else 0


def log_end_offset(directory: Path) -> int:
    """One past the last offset of a complete batch on disk."""
    segs = segments(directory)
    for base, path in reversed(segs):
        last = None
        for b in walk_headers(path):
            last = b
        if last is not None:
            return last.last_offset + 1
        if base > 0:
            return base  # an empty active segment right after a roll
    return 0


class HeaderCache:
    """The header walk of each segment, kept between the micro-batches of a stream.

    A live log only grows at its end, so each poll walks just the bytes appended since the last
    one. A file that shrank or was replaced (same name, other inode: a truncation by recovery)
    is walked again from the start; entries of deleted segments are dropped.
    """

    def __init__(self) -> None:
        self._walked: dict[str, tuple[int, int, list[BatchPos]]] = {}  # path -> (inode, end, batches)

    def batches(self, path: Path) -> list[BatchPos]:
        key = str(path)
        try:
            st = path.stat()
        except FileNotFoundError:
            self._walked.pop(key, None)
            raise DataLossError(f"{path.name} was deleted while it was being read") from None
        inode, end, found = self._walked.get(key, (st.st_ino, 0, []))
        if inode != st.st_ino or st.st_size < end:
            end, found = 0, []
        if st.st_size > end:
            more = list(walk_headers(path, end))
            if more:
                found = found + more
                end = more[-1].position + more[-1].size
        self._walked[key] = (st.st_ino, end, found)
        return found

    def end_offset(self, directory: Path) -> int:
        segs = segments(directory)
        live = {str(p) for _, p in segs}
        for k in [k for k in self._walked if k not in live]:
            del self._walked[k]
        for base, path in reversed(segs):
            try:
                found = self.batches(path)
            except DataLossError:
                continue
            if found:
                return found[-1].last_offset + 1
            if base > 0:
                return base
        return 0

    def plan(self, directory: Path, from_offset: int, to_offset: int, max_bytes: int) -> list[Split]:
        """Splits covering ``from_offset..to_offset`` (inclusive); DataLossError when a needed
        offset is not on disk any more."""
        segs = segments(directory)
        out: list[Split] = []
        covered = from_offset
        for i, (base, path) in enumerate(segs):
            next_base = segs[i + 1][0] if i + 1 < len(segs) else None
            if base > to_offset:
                break
            if next_base is not None and next_base <= from_offset:
                continue
            wanted = [b for b in self.batches(path) if b.last_offset >= from_offset and b.base_offset <= to_offset]
            if wanted:
                if wanted[0].base_offset > covered:
                    break
                covered = wanted[-1].last_offset + 1
            out.extend(_group(path, iter(wanted), max_bytes, None, from_offset, to_offset))
        if covered <= to_offset:
            raise DataLossError(f"offsets {covered}..{to_offset} are not in {directory} any more "
                                f"(the log starts at {segs[0][0] if segs else 0})")
        return out

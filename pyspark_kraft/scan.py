"""The records of uncompressed data batches as KRaft writes them, read a column at a time.

:meth:`kraftsim.metadata.batch.Batch.records` reads a record at a time and builds a
``LogRecord`` for each (~1 µs); the Spark reader needs only three things of each record: its
value, its offset and its timestamp. Here Python only hops from record to record by the length
prefix (:func:`walk`, a few operations a record); everything else about a run of such batches
is read and checked with numpy over all their records at once (:func:`plain_columns`): the
attributes byte, the timestamp delta (one byte), the offset delta (``0..count-1``, one or two
bytes), the null key, the value's length and position, and the empty header count.

Only the layout KRaft writes passes: offset deltas ``0..count-1``, one-byte timestamp deltas,
null keys, no headers, one- or two-byte canonical varints. Anything else, or a check that fails
anywhere in the run, returns None, and the caller reads those batches with ``Batch.records``:
the same rows, or its error, so nothing the careful reader refuses gets through here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kraftsim.metadata.batch import BATCH_OVERHEAD, MIN_RECORD_SIZE

MAX_RECORDS = 8192  # two-byte offset deltas at most: KRaft batches stay far below this


def walk(data: bytes, pos: int, end: int, count: int, starts: list[int]) -> bool:
    """Append the start of each of the ``count`` records in ``data[pos:end]`` to ``starts``,
    hopping by each one- or two-byte length prefix; False when they do not end exactly at
    ``end`` (then the batch is not one to read here; its prefixes are checked later)."""
    append = starts.append
    try:
        for _ in range(count):
            append(pos)
            b = data[pos]
            if b < 0x80:
                pos += (b >> 1) + 1
            else:
                pos += (((b & 0x7F) | (data[pos + 1] << 7)) >> 1) + 2
    except IndexError:
        return False
    return pos == end


@dataclass(slots=True)
class PlainBatch:
    """What a run needs of one batch header (its records' starts are in the run's list)."""

    base_offset: int
    base_timestamp: int
    epoch: int
    count: int


def _uvarint12(arr: Any, at: Any) -> tuple[Any, Any, Any]:
    """(value, width, ok) of the zig-zag varint at each position ``at``, for the one- and
    two-byte non-negative canonical forms only (``ok`` False for any other)."""
    top = len(arr) - 1
    b0 = arr[np.minimum(at, top)].astype(np.int64)
    b1 = arr[np.minimum(at + 1, top)].astype(np.int64)
    two = b0 >= 0x80
    ok = (b0 & 1) == 0
    ok &= ~two | ((b1 < 0x80) & (b1 != 0))
    value = np.where(two, ((b0 & 0x7F) | (b1 << 7)) >> 1, b0 >> 1)
    return value, np.where(two, 2, 1), ok


def plain_columns(data: bytes, starts: list[int], batches: list[PlainBatch]) -> tuple[Any, ...] | None:
    """(offsets, timestamps in ms, base offsets, epochs, value starts, value ends) of every
    record of ``batches``, whose record starts :func:`walk` gathered into ``starts``; None
    when any record is not laid out as KRaft writes one."""
    arr = np.frombuffer(data, dtype=np.uint8)
    top = len(arr) - 1
    s = np.asarray(starts, dtype=np.int64)
    counts = np.fromiter((b.count for b in batches), dtype=np.int64, count=len(batches))
    if int(counts.max()) > MAX_RECORDS:
        return None
    first = np.cumsum(counts) - counts
    i = np.arange(len(s), dtype=np.int64) - np.repeat(first, counts)  # each record's offset delta
    length, lw, ok = _uvarint12(arr, s)
    ok &= length >= MIN_RECORD_SIZE - 1
    a = s + lw  # the attributes byte: any value, as Batch.records reads it
    t = arr[np.minimum(a + 1, top)].astype(np.int64)
    ok &= t < 0x80  # a one-byte timestamp delta
    zz = i << 1
    one = zz < 0x80
    d0 = arr[np.minimum(a + 2, top)].astype(np.int64)
    d1 = arr[np.minimum(a + 3, top)].astype(np.int64)
    ok &= np.where(one, d0 == zz, (d0 == ((zz & 0x7F) | 0x80)) & (d1 == (zz >> 7)))
    k = a + 2 + np.where(one, 1, 2)
    ok &= arr[np.minimum(k, top)] == 1  # a null key
    vlen, vw, vok = _uvarint12(arr, k + 1)
    ok &= vok
    vs = k + 1 + vw
    ve = vs + vlen
    ok &= ve + 1 == s + lw + length  # the value ends one byte before the record does
    ok &= arr[np.minimum(ve, top)] == 0  # no headers
    if not ok.all():
        return None
    bases = np.repeat(np.fromiter((b.base_offset for b in batches), dtype=np.int64, count=len(batches)), counts)
    ts = np.repeat(np.fromiter((b.base_timestamp for b in batches), dtype=np.int64, count=len(batches)), counts)
    if t.any():
        ts = ts + ((t >> 1) ^ -(t & 1))
    epochs = np.repeat(np.fromiter((b.epoch for b in batches), dtype=np.int32, count=len(batches)), counts)
    return bases + i, ts, bases, epochs, vs, ve


__all__ = ["BATCH_OVERHEAD", "PlainBatch", "plain_columns", "walk"]

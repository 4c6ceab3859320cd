"""RecordBatch magic v2 (``DefaultRecordBatch``), sans-I/O.

The metadata log, snapshots and bootstrap.checkpoint are plain concatenations of these batches,
so the same code serves appends (hot: hundreds of thousands of records per second), Fetch
responses and crash recovery. Recovery needs to tell a torn tail (:class:`IncompleteBatchError`)
from damage (:class:`CorruptBatchError`), so the readers raise only :class:`BatchError` subclasses
on any input bytes.

Layout (offsets from the batch start)::

    0 BaseOffset i64 | 8 BatchLength i32 | 12 PartitionLeaderEpoch i32 | 16 Magic i8 | 17 CRC u32
    21 Attributes i16 | 23 LastOffsetDelta i32 | 27 BaseTimestamp i64 | 35 MaxTimestamp i64
    43 ProducerId i64 | 51 ProducerEpoch i16 | 53 BaseSequence i32 | 57 RecordsCount i32 | 61 records

The CRC-32C covers bytes [21, end). Records use zig-zag varints (see :func:`_decode_records`).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from kraftsim.metadata.crc import crc32c
from kraftsim.rpc._runtime import read_varint, read_varlong
from kraftsim.rpc.codec_errors import DecodeError
from kraftsim.rpc.message import Message

__all__ = [
    "BATCH_OVERHEAD",
    "Batch",
    "BatchError",
    "ControlRecordType",
    "CorruptBatchError",
    "IncompleteBatchError",
    "LogRecord",
    "UnsupportedCompression",
    "control_key",
    "decode_control_record",
    "encode_batch",
    "encode_batch_into",
    "encode_control_batch",
    "parse_control_key",
    "read_batch",
    "read_batches",
]

MAGIC = 2
BATCH_OVERHEAD = 61  # bytes before the first record (RECORD_BATCH_OVERHEAD)
LOG_OVERHEAD = 12  # BaseOffset + BatchLength: BatchLength counts the bytes after these
MIN_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD  # 49
CRC_START = 21
MIN_RECORD_SIZE = 7  # length varint + attrs + ts + offset + key + value + header count, 1 byte each
MAX_DECOMPRESSED = 256 * 1024 * 1024  # refuse gzip bombs; KRaft batches are <= 8 MiB anyway

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

_HEADER = struct.Struct(">qiibIhiqqqhii")  # all 61 header bytes, fields in Batch order
_PREFIX = struct.Struct(">qiibI")  # the 21 bytes outside the CRC
_TAIL = struct.Struct(">hiqqqhii")  # the 40 CRC-covered header bytes
_LENGTH = struct.Struct(">i")
assert _HEADER.size == BATCH_OVERHEAD and _PREFIX.size == CRC_START


# --------------------------------------------------------------------------------------------
# errors


class BatchError(Exception):
    """Base of everything the batch readers raise; ``position`` is the batch's start in the buffer."""

    def __init__(self, message: str, position: int = 0) -> None:
        super().__init__(f"{message} (batch at byte {position})")
        self.position = position


class IncompleteBatchError(BatchError):
    """Fewer bytes than the header or than BatchLength says: a torn tail, not damage."""


class CorruptBatchError(BatchError):
    """Bytes that cannot be a valid v2 batch (bad magic/length/CRC/records)."""


class UnsupportedCompression(BatchError):
    """A well-formed batch compressed with a codec we cannot decompress (snappy, lz4, zstd).

    Not a :class:`CorruptBatchError`: recovery must not truncate the log at a valid batch.
    """


# --------------------------------------------------------------------------------------------
# data classes


@dataclass(slots=True)
class LogRecord:
    """One record of a batch, with offset and timestamp already made absolute."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(slots=True)
class Batch:
    """A v2 batch header plus its raw bytes; records are decoded only on demand (:meth:`records`)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    raw: bytes | memoryview = field(repr=False)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def compression(self) -> int:
        """Codec id from attribute bits 0-2 (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)."""
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    def crc_valid(self) -> bool:
        """Whether the stored CRC matches CRC-32C of bytes [21, end)."""
        return crc32c(self.raw[CRC_START:]) == self.crc

    def records(self) -> list[LogRecord]:
        """Decode every record (gunzipping first if needed); CorruptBatchError on malformed ones."""
        return self._decode(False)  # type: ignore[return-value]

    def values(self) -> list[bytes | None]:
        """Only the records' values, checked exactly as :meth:`records` checks them: what a
        snapshot load replays, without a record object per value."""
        return self._decode(True)  # type: ignore[return-value]

    def _decode(self, values_only: bool) -> list[LogRecord] | list[bytes | None]:
        comp = self.attributes & COMPRESSION_MASK
        raw = self.raw
        if type(raw) is not bytes:
            raw = bytes(raw)
        if comp == 0:
            data, pos = raw, BATCH_OVERHEAD
        elif comp == 1:
            data, pos = _gunzip(raw, BATCH_OVERHEAD), 0
        elif comp in COMPRESSION_NAMES:
            raise UnsupportedCompression(f"{COMPRESSION_NAMES[comp]} compression is not supported")
        else:
            raise CorruptBatchError(f"invalid compression codec id {comp}")
        if values_only and self.records_count == self.last_offset_delta + 1:
            plain = _plain_values(data, pos, self.records_count)
            if plain is not None:
                return plain
        ts_override = self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else None
        return _decode_records(
            data, pos, self.records_count, self.base_offset, self.base_timestamp, ts_override, self.last_offset_delta,
            values_only,
        )


# --------------------------------------------------------------------------------------------
# reading


def read_batch(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, verify_crc: bool = True, max_batch_size: int | None = None
) -> Batch:
    """The batch starting at ``buf[pos]``; its ``raw`` is a slice of ``buf`` (bytes in, bytes out).

    Checks: BatchLength >= 49 (and <= ``max_batch_size`` total if given, as Kafka's
    FileLogInputStream does before looking for the bytes); magic as soon as byte 16 is present
    (so a damaged header is not mistaken for a torn tail); enough bytes; CRC; then that
    RecordsCount/LastOffsetDelta/size are mutually consistent.
    Records themselves are parsed by :meth:`Batch.records`.
    """
    n = len(buf)
    if not 0 <= pos <= n:
        raise ValueError(f"position {pos} outside buffer of {n} bytes")
    avail = n - pos
    if avail < LOG_OVERHEAD:
        raise IncompleteBatchError(f"only {avail} bytes, fewer than a batch's length prefix", pos)
    (length,) = _LENGTH.unpack_from(buf, pos + 8)
    if length < MIN_BATCH_LENGTH:
        raise CorruptBatchError(f"BatchLength {length} < {MIN_BATCH_LENGTH}", pos)
    if max_batch_size is not None and length + LOG_OVERHEAD > max_batch_size:
        raise CorruptBatchError(f"batch of {length + LOG_OVERHEAD} bytes exceeds maximum {max_batch_size}", pos)
    if avail > 16 and buf[pos + 16] != MAGIC:
        raise CorruptBatchError(f"magic {buf[pos + 16]} is not 2", pos)
    end = pos + LOG_OVERHEAD + length
    if end > n:
        raise IncompleteBatchError(f"BatchLength says {length + LOG_OVERHEAD} bytes, only {avail} present", pos)
    fields = _HEADER.unpack_from(buf, pos)
    if type(buf) is bytes:
        raw: bytes | memoryview = buf[pos:end]
    elif type(buf) is memoryview:
        raw = buf[pos:end]
    else:  # a bytearray: copy, a memoryview would pin it and make the writer's next += fail
        raw = bytes(memoryview(buf)[pos:end])
    if verify_crc:
        actual = crc32c(raw[CRC_START:])
        if actual != fields[4]:
            raise CorruptBatchError(f"CRC mismatch: stored {fields[4]:#010x}, computed {actual:#010x}", pos)
    count = fields[12]
    last_delta = fields[6]
    if count < 0 or last_delta < 0:
        raise CorruptBatchError(f"negative RecordsCount {count} or LastOffsetDelta {last_delta}", pos)
    if count > last_delta + 1:
        raise CorruptBatchError(f"{count} records cannot fit in offset delta range 0..{last_delta}", pos)
    if not fields[5] & COMPRESSION_MASK and count * MIN_RECORD_SIZE > length - MIN_BATCH_LENGTH:
        raise CorruptBatchError(f"{count} records cannot fit in {length - MIN_BATCH_LENGTH} bytes", pos)
    return Batch(*fields, raw)  # type: ignore[call-arg]  # fields is the 13-tuple of _HEADER


def read_batches(
    buf: bytes | bytearray | memoryview, pos: int = 0, *, verify_crc: bool = True, max_batch_size: int | None = None
) -> Iterator[Batch]:
    """Every batch from ``pos`` to the end of ``buf``.

    Stops cleanly at the exact end; raises IncompleteBatchError at a torn tail and
    CorruptBatchError at damage (``error.position`` is where the bad batch starts, i.e. the
    length of the valid prefix when reading from 0).
    """
    if type(buf) is bytearray:
        buf = bytes(buf)  # one copy up front instead of one per batch
    n = len(buf)
    while pos < n:
        batch = read_batch(buf, pos, verify_crc=verify_crc, max_batch_size=max_batch_size)
        yield batch
        pos += batch.batch_length + LOG_OVERHEAD


def _gunzip(raw: bytes, pos: int) -> bytes:
    """All gzip members of raw[pos:] (Java's GZIPInputStream reads concatenated members too)."""
    data = memoryview(raw)[pos:]
    out: list[bytes] = []
    total = 0
    try:
        while True:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            chunk = d.decompress(data, MAX_DECOMPRESSED - total + 1)
            total += len(chunk)
            out.append(chunk)
            if total > MAX_DECOMPRESSED or d.unconsumed_tail:
                raise CorruptBatchError(f"gzip payload inflates beyond {MAX_DECOMPRESSED} bytes")
            if not d.eof:
                raise CorruptBatchError("truncated gzip payload")
            if not d.unused_data:
                break
            data = memoryview(d.unused_data)
    except zlib.error as e:
        raise CorruptBatchError(f"bad gzip payload: {e}") from e
    return b"".join(out)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag varint (int32) — the slow path for values outside -64..63."""
    try:
        return read_varint(data, pos)
    except DecodeError as e:
        raise CorruptBatchError(str(e)) from e


def _varlong(data: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag varlong (int64)."""
    try:
        return read_varlong(data, pos)
    except DecodeError as e:
        raise CorruptBatchError(str(e)) from e


def _nullable_bytes(data: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _varint(data, pos)
    if n < 0:
        if n == -1:
            return None, pos
        raise CorruptBatchError(f"negative length {n}")
    end = pos + n
    if end > len(data):
        raise CorruptBatchError("field runs past the end of the records")
    return data[pos:end], end


# The zig-zag varint bytes of offset deltas 64..8191 (two bytes each), by column: a run of
# records is checked against a slice of these (see _plain_run).
_OD1 = bytes(range(0, 128, 2))
_OD2_LOW = bytes(((i << 1) & 0x7F) | 0x80 for i in range(64, 8192))
_OD2_HIGH = bytes((i << 1) >> 7 for i in range(64, 8192))
_RUN_MIN = 4  # fewer records than this after a template: one at a time is as cheap


def _plain_values(data: bytes, pos: int, count: int) -> list[bytes | None] | None:
    """The values of a batch written as KRaft writes one - offset deltas 0..count-1, one-byte
    timestamp deltas, null keys, no headers, canonical varints - or None for anything else,
    which ``_decode_records`` then reads (and judges) from the start: the same values or error.

    With as many records as offsets, strictly increasing deltas can only be 0..count-1, so
    each record's offset delta is known before it is read: comparing its bytes replaces
    decoding and checking it. And records of one size (a snapshot's PartitionRecords of one
    replication factor) sit at a fixed stride: after one is read, the run of those like it is
    checked a column of bytes at a time (``_plain_run``), not a record at a time.
    """
    n = len(data)
    out: list[bytes | None] = []
    append = out.append
    i = 0
    try:
        while i < count:
            start = pos
            b = data[pos]
            if b < 0x80:
                if b & 1:
                    return None
                length = b >> 1
                pos += 1
            else:
                b2 = data[pos + 1]
                if b2 >= 0x80 or b & 1 or not b2:
                    return None
                length = ((b & 0x7F) | (b2 << 7)) >> 1
                pos += 2
            end = pos + length
            if length < MIN_RECORD_SIZE - 1 or end > n or data[pos + 1] >= 0x80:  # one-byte timestamp delta
                return None
            zz = i << 1  # the zig-zag varint of the offset delta i
            if zz < 0x80:
                if data[pos + 2] != zz:
                    return None
                pos += 3
            elif zz < 0x4000:
                if data[pos + 2] != (zz & 0x7F) | 0x80 or data[pos + 3] != zz >> 7:
                    return None
                pos += 4
            elif zz < 0x200000:
                if data[pos + 2] != (zz & 0x7F) | 0x80 or data[pos + 3] != ((zz >> 7) & 0x7F) | 0x80 \
                        or data[pos + 4] != zz >> 14:
                    return None
                pos += 5
            else:
                return None
            if data[pos] != 1:  # a key
                return None
            b = data[pos + 1]
            if b < 0x80:
                if b & 1:
                    return None
                vlen = b >> 1
                pos += 2
            else:
                b2 = data[pos + 2]
                if b2 >= 0x80 or b & 1 or not b2:
                    return None
                vlen = ((b & 0x7F) | (b2 << 7)) >> 1
                pos += 3
            vend = pos + vlen
            if vend + 1 != end or data[vend] != 0:  # headers, or a length mismatch
                return None
            append(data[pos:vend])
            i += 1
            if i < 8192 and i != 64 and count - i >= _RUN_MIN:
                ran = _plain_run(data, start, end, pos - start, vlen, i, count, out)
                if ran:
                    i += ran
                    end += ran * (end - start)
            pos = end
    except IndexError:
        return None
    return out if pos == n else None


def _plain_run(data: bytes, start: int, end: int, voff: int, vlen: int, i: int, count: int,
               out: list[bytes | None]) -> int:
    """Append the values of the records from ``i`` on (starting at ``end``) that are laid out as
    the record just read (from ``start`` to ``end``, its value ``voff`` bytes in), and return how
    many there were: those whose length bytes equal its, checked column by column.

    Equal length bytes make equal strides, so each column - timestamp deltas, offset deltas,
    keys, value lengths, header counts - is one strided slice, compared in C. Offset deltas
    below 64 are one byte, below 8192 two: a run stays within one width (the caller's ``i``
    is never 64). Anything unlike the template ends the run, and the caller reads that record
    the careful way."""
    stride = end - start
    lw = 1 if data[start] < 0x80 else 2  # the length varint's bytes
    limit = min(count, 64 if i < 64 else 8192) - i
    limit = min(limit, (len(data) - end) // stride)
    if limit <= 0:
        return 0
    stop = end + stride * limit
    col = data[end:stop:stride]
    run = limit - len(col.lstrip(data[start:start + 1]))
    if lw == 2:
        run = min(run, limit - len(data[end + 1:stop:stride].lstrip(data[start + 1:start + 2])))
    if run < _RUN_MIN:
        return 0
    stop = end + stride * run
    o = end + lw  # each record's attributes byte (any value, as the careful path reads it)
    if not data[o + 1:stop:stride].isascii():  # one-byte timestamp deltas
        return 0
    if i < 64:
        if data[o + 2:stop:stride] != _OD1[i:i + run]:
            return 0
        w = 1
    else:
        if data[o + 2:stop:stride] != _OD2_LOW[i - 64:i - 64 + run] \
                or data[o + 3:stop:stride] != _OD2_HIGH[i - 64:i - 64 + run]:
            return 0
        w = 2
    k = o + 2 + w  # the key's byte, then the value length's (as many as the template's)
    if data[k:stop:stride] != b"\x01" * run:
        return 0
    for j in range(k + 1, end + voff):
        t = j - end + start
        if data[j:stop:stride] != data[t:t + 1] * run:
            return 0
    if data[end + stride - 1:stop:stride] != b"\x00" * run:  # no headers
        return 0
    v = end + voff
    out.extend([data[q:q + vlen] for q in range(v, v + stride * run, stride)])
    return run


def _decode_records(
    data: bytes,
    pos: int,
    count: int,
    base_offset: int,
    base_ts: int,
    ts_override: int | None,
    last_delta: int,
    values_only: bool = False,
) -> list[Any]:
    """Parse ``count`` records from data[pos:], which they must fill exactly: LogRecords, or
    with ``values_only`` just their values (the same checks either way).

    One- and two-byte varints (the overwhelmingly common cases in KRaft records: a
    PartitionRecord's record and value lengths take two) are decoded inline.
    """
    n = len(data)
    out: list[Any] = []
    append = out.append
    prev = -1
    varint = _varint
    try:
        for _ in range(count):
            start = pos
            b = data[pos]
            if b < 0x80:
                length = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:
                raw = (b & 0x7F) | (data[pos + 1] << 7)
                length = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                length, pos = varint(data, pos)
            end = pos + length
            if length < MIN_RECORD_SIZE - 1 or end > n:
                raise CorruptBatchError(f"record at byte {start} has bad length {length}")
            pos += 1  # record attributes: unused
            b = data[pos]
            if b < 0x80:
                ts_delta = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                ts_delta, pos = _varlong(data, pos)
            b = data[pos]
            if b < 0x80:
                od = (b >> 1) ^ -(b & 1)
                pos += 1
            elif data[pos + 1] < 0x80:  # two bytes: offset deltas 64..8191, common in big batches
                raw = (b & 0x7F) | (data[pos + 1] << 7)
                od = (raw >> 1) ^ -(raw & 1)
                pos += 2
            else:
                od, pos = varint(data, pos)
            if od <= prev or od > last_delta:
                raise CorruptBatchError(f"offset delta {od} after {prev} (last offset delta {last_delta})")
            prev = od
            if data[pos] == 1:  # null key, the KRaft data record case
                key = None
                pos += 1
            else:
                key, pos = _nullable_bytes(data, pos)
            b = data[pos]
            if b < 0x80 and not b & 1:  # one-byte, non-negative length
                vlen = b >> 1
                pos += 1
                value: bytes | None = data[pos : pos + vlen]
                pos += vlen
            elif not b & 1 and data[pos + 1] < 0x80:  # two-byte, non-negative length
                vlen = ((b & 0x7F) | (data[pos + 1] << 7)) >> 1
                pos += 2
                if pos + vlen > n:
                    raise CorruptBatchError("field runs past the end of the records")
                value = data[pos : pos + vlen]
                pos += vlen
            else:
                value, pos = _nullable_bytes(data, pos)
            if data[pos] == 0:
                headers: list[tuple[str, bytes | None]] = []
                pos += 1
            else:
                hc, pos = varint(data, pos)
                if hc < 0 or hc * 2 > end - pos:
                    raise CorruptBatchError(f"invalid header count {hc}")
                headers = []
                for _h in range(hc):
                    hk, pos = _nullable_bytes(data, pos)
                    if hk is None:
                        raise CorruptBatchError("null header key")
                    hv, pos = _nullable_bytes(data, pos)
                    headers.append((hk.decode("utf-8"), hv))
            if pos != end:
                raise CorruptBatchError(f"record at byte {start} declares {length} bytes but holds {pos - start}")
            if values_only:
                append(value)
                continue
            append(
                LogRecord(
                    base_offset + od,
                    ts_override if ts_override is not None else base_ts + ts_delta,
                    key,
                    value,
                    headers,
                )
            )
    except IndexError as e:
        raise CorruptBatchError("records run past the end of the batch") from e
    except UnicodeDecodeError as e:
        raise CorruptBatchError(f"header key is not UTF-8: {e}") from e
    if pos != n:
        raise CorruptBatchError(f"{n - pos} bytes left after {count} records")
    return out


# --------------------------------------------------------------------------------------------
# writing


def _zz(value: int) -> bytes:
    """Zig-zag varint bytes of a non-negative or negative int (general path)."""
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_TABLE = 1 << 14
# _ZZ[i]: zig-zag varint of i. _PRE[i]: record attrs 0, timestampDelta 0, offsetDelta i, null key.
# Lookups replace per-record varint loops: encoding is then one tuple + list.extend per record.
_ZZ: list[bytes] = [_zz(i) for i in range(_TABLE)]
_PRE: list[bytes] = [b"\x00\x00" + z + b"\x01" for z in _ZZ]


def _records_fast(values: Sequence[bytes]) -> bytes:
    """Null-key, no-header records: the KRaft data-record path. IndexError if a size is off-table."""
    zz = _ZZ
    parts: list[bytes] = []
    ext = parts.extend
    for p, v in zip(_PRE, values, strict=False):  # caller guarantees len(values) <= len(_PRE)
        lv = len(v)
        zl = zz[lv]
        ext((zz[len(p) + len(zl) + lv + 1], p, zl, v, b"\x00"))
    return b"".join(parts)


def _records_general(values: Sequence[bytes], keys: Sequence[bytes | None] | None) -> bytes:
    parts: list[bytes] = []
    for i, v in enumerate(values):
        k = keys[i] if keys is not None else None
        body = b"".join(
            (b"\x00\x00", _zz(i), b"\x01" if k is None else _zz(len(k)) + bytes(k), _zz(len(v)), bytes(v), b"\x00")
        )
        parts.append(_zz(len(body)))
        parts.append(body)
    return b"".join(parts)


def _encode_parts(
    base_offset: int,
    values: Sequence[bytes],
    epoch: int,
    timestamp: int,
    control: bool,
    keys: Sequence[bytes | None] | None,
) -> tuple[bytes, bytes, bytes]:
    count = len(values)
    if count == 0:
        raise ValueError("a batch needs at least one record")
    if keys is not None and len(keys) != count:
        raise ValueError(f"{len(keys)} keys for {count} values")
    body: bytes | None = None
    if keys is None and count <= _TABLE:
        try:
            body = _records_fast(values)
        except IndexError:  # a value >= 16 KiB: sizes outside the lookup table
            body = None
    if body is None:
        body = _records_general(values, keys)
    try:
        tail = _TAIL.pack(CONTROL_MASK if control else 0, count - 1, timestamp, timestamp, -1, -1, -1, count)
        crc = crc32c(body, crc32c(tail))
        prefix = _PREFIX.pack(base_offset, MIN_BATCH_LENGTH + len(body), epoch, MAGIC, crc)
    except struct.error as e:
        raise ValueError(f"batch field out of range: {e}") from e
    return prefix, tail, body


def encode_batch(
    base_offset: int,
    values: Sequence[bytes],
    *,
    epoch: int,
    timestamp: int,
    control: bool = False,
    keys: Sequence[bytes | None] | None = None,
) -> bytes:
    """One uncompressed batch the way KRaft's BatchBuilder writes it.

    Offsets base_offset.. contiguous, PartitionLeaderEpoch = ``epoch``, base and max timestamp =
    ``timestamp`` with every timestampDelta 0, producer id/epoch/sequence -1, no headers, keys
    null unless ``keys`` is given (control records), attributes 0 or 0x20 for ``control``.
    """
    return b"".join(_encode_parts(base_offset, values, epoch, timestamp, control, keys))


def encode_batch_into(
    out: bytearray,
    base_offset: int,
    values: Sequence[bytes],
    *,
    epoch: int,
    timestamp: int,
    control: bool = False,
    keys: Sequence[bytes | None] | None = None,
) -> int:
    """Append the batch of :func:`encode_batch` to ``out``; returns its size in bytes."""
    prefix, tail, body = _encode_parts(base_offset, values, epoch, timestamp, control, keys)
    out += prefix
    out += tail
    out += body
    return BATCH_OVERHEAD + len(body)


# --------------------------------------------------------------------------------------------
# control records


class ControlRecordType(IntEnum):
    """Control record key types (``ControlRecordType`` in Kafka)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_KEYS: dict[int, bytes] = {t: _CONTROL_KEY.pack(0, t) for t in ControlRecordType}
_CONTROL_TYPES = {int(t): t for t in ControlRecordType}
# Value schema per type; ABORT/COMMIT (EndTxnMarker) belong to transactions, not KRaft.
CONTROL_SCHEMAS: dict[ControlRecordType, str] = {
    ControlRecordType.LEADER_CHANGE: "LeaderChangeMessage",
    ControlRecordType.SNAPSHOT_HEADER: "SnapshotHeaderRecord",
    ControlRecordType.SNAPSHOT_FOOTER: "SnapshotFooterRecord",
    ControlRecordType.KRAFT_VERSION: "KRaftVersionRecord",
    ControlRecordType.KRAFT_VOTERS: "VotersRecord",
}
CONTROL_VALUE_VERSION = 0  # every KRaft control message is written and read at v0 (3.9 / 4.x)


def control_key(type: ControlRecordType | int) -> bytes:
    """The 4-byte control record key: int16 version 0 + int16 type."""
    key = _CONTROL_KEYS.get(type)
    return key if key is not None else _CONTROL_KEY.pack(0, type)


def parse_control_key(key: bytes | None) -> ControlRecordType | None:
    """The type in a control key; None for a type id we do not know (Kafka's UNKNOWN).

    Like ``ControlRecordType.parse``: a null or shorter-than-4-byte key or a negative key
    version is corrupt; later key versions are read as v0 (extra bytes ignored).
    """
    if key is None or len(key) < 4:
        raise CorruptBatchError(f"control record key {key!r} shorter than 4 bytes")
    version, type_id = _CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptBatchError(f"negative control record key version {version}")
    return _CONTROL_TYPES.get(type_id)


def encode_control_batch(
    base_offset: int,
    messages: Sequence[tuple[ControlRecordType, Message]],
    *,
    epoch: int,
    timestamp: int,
) -> bytes:
    """A control batch (attributes 0x20) with one record per (type, message), values at v0."""
    keys = [control_key(t) for t, _ in messages]
    values = [m.encode(CONTROL_VALUE_VERSION) for _, m in messages]
    return encode_batch(base_offset, values, epoch=epoch, timestamp=timestamp, control=True, keys=keys)


def decode_control_record(rec: LogRecord) -> tuple[ControlRecordType, Message] | None:
    """(type, message) of a control record; None for ABORT/COMMIT and unknown types (ignored by KRaft).

    Decoded at v0 without rejecting trailing bytes, as Kafka's ControlRecordUtils does;
    malformed keys or values raise CorruptBatchError.
    """
    t = parse_control_key(rec.key)
    name = CONTROL_SCHEMAS.get(t) if t is not None else None
    if t is None or name is None:
        return None
    if rec.value is None:
        raise CorruptBatchError(f"{t.name} control record at offset {rec.offset} has a null value")
    from kraftsim.metadata.records import data_class  # deferred: builds generated classes on first use

    try:
        msg = data_class(name).decode(rec.value, CONTROL_VALUE_VERSION, strict=False)
    except DecodeError as e:
        raise CorruptBatchError(f"{t.name} control record at offset {rec.offset}: {e}") from e
    return t, msg

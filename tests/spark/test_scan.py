"""The reader's columns straight from batch bytes, without Spark: every batch layout (KRaft's own,
read a run at a time with numpy, and every other one, read a record at a time) gives the rows
that ``Batch.records`` and the project's codec give, in log order, with the memo on and off,
under offset filters, and with a projection that decodes no value."""

from __future__ import annotations

import gzip
import json
import struct
from typing import Any

import pyarrow as pa
import pytest

from kraftsim.metadata import records as recs
from kraftsim.metadata.batch import encode_batch, read_batches
from kraftsim.metadata.crc import crc32c
from kraftsim.metadata.dumplog import message_json
from kraftsim.rpc.codec_errors import DecodeError
from pyspark_kraft.columns import RowBuilder, RowFilter
from pyspark_kraft.scan import PlainBatch, plain_columns, walk


def _zz(n: int) -> bytes:
    """Zig-zag varint."""
    u = (n << 1) ^ (n >> 63)
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def _batch(base: int, recs_: list[tuple[int, int, bytes | None, bytes, list[tuple[str, bytes]]]], *,
           timestamp: int = 1_700_000_000_000, epoch: int = 3, gzipped: bool = False) -> bytes:
    """A v2 batch of (offset delta, timestamp delta, key, value, headers) records, any layout."""
    body = bytearray()
    for od, td, key, value, headers in recs_:
        r = bytearray(b"\x00") + _zz(td) + _zz(od)
        r += _zz(-1) if key is None else _zz(len(key)) + key
        r += _zz(len(value)) + value + _zz(len(headers))
        for hk, hv in headers:
            r += _zz(len(hk)) + hk.encode() + _zz(len(hv)) + hv
        body += _zz(len(r)) + r
    payload = gzip.compress(bytes(body)) if gzipped else bytes(body)
    last = recs_[-1][0]
    tail = struct.pack(">hiqqqhii", 1 if gzipped else 0, last, timestamp,
                       timestamp + max(r[1] for r in recs_), -1, -1, -1, len(recs_)) + payload
    return struct.pack(">qiibI", base, len(tail) + 9, epoch, 2, crc32c(tail)) + tail


def _value(i: int, size: int = 0) -> bytes:
    cr = recs.by_name("ConfigRecord")
    return recs.frame(cr(resource_type=2, resource_name=f"topic-{i % 7}", name="retention.ms",
                         value=str(i % 5) + "x" * size), 0)


def _reference(data: bytes, lo: int = -1, hi: int = 1 << 62) -> list[tuple[Any, ...]]:
    out = []
    for b in read_batches(data):
        for r in b.records():
            if lo <= r.offset <= hi:
                msg, version = recs.unframe(r.value)  # type: ignore[arg-type]
                out.append((r.offset, b.base_offset, b.partition_leader_epoch, r.timestamp, type(msg).__name__,
                            version, message_json(msg, version)))
    return out


def _rows(data: bytes, rf: RowFilter, memo: int, rows_per_batch: int = 50,
          columns: list[str] | None = None) -> pa.Table:
    b = RowBuilder(rf, rows_per_batch, memo, columns)
    got = list(b.batches_of(data, "seg.log", None)) + list(b.flush())
    assert all(x.num_rows <= rows_per_batch for x in got)
    return pa.Table.from_batches(got, schema=b.schema)


def _as_reference(t: pa.Table) -> list[tuple[Any, ...]]:
    return [(r["offset"], r["base_offset"], r["partition_leader_epoch"], int(r["timestamp"].timestamp() * 1000),
             r["record_type"], r["version"], json.loads(r["json"])) for r in t.to_pylist()]


PLAIN = b"".join([
    encode_batch(0, [_value(i) for i in range(3)], epoch=1, timestamp=1_700_000_000_000),
    # 200 records: two-byte offset deltas from 64 on, runs of equal-size records, two-byte lengths
    encode_batch(3, [_value(i, 70 if i % 3 else 0) for i in range(200)], epoch=2, timestamp=1_700_000_000_500),
    encode_batch(203, [_value(i) for i in range(5)], epoch=2, timestamp=1_700_000_001_000),
])
OTHER = [
    _batch(208, [(0, 0, None, _value(1), []), (1, 5, None, _value(2), []), (2, -3, None, _value(3), [])]),  # ts deltas
    _batch(211, [(0, 0, None, _value(4), [("h", b"v")]), (1, 0, None, _value(5), [])]),  # a header
    _batch(213, [(0, 0, b"k", _value(6), []), (1, 0, None, _value(7), [])]),  # a key on a data record
    _batch(215, [(0, 0, None, _value(8), []), (1, 0, None, _value(9), [])], gzipped=True),
    _batch(217, [(0, 0, None, _value(10), []), (2, 0, None, _value(11), [])]),  # an offset gap
    encode_batch(220, [_value(12, 9000), _value(13)], epoch=4, timestamp=1_700_000_002_000),  # 3-byte lengths
    _batch(222, [(0, 0, b"", _value(14), []), (1, 0, None, _value(15), [])]),  # an empty key, not a null one
]
MIXED = PLAIN + b"".join(OTHER) + encode_batch(
    224, [_value(i) for i in range(70)], epoch=4, timestamp=1_700_000_003_000)


def test_walk_and_plain_columns_read_kraft_batches_and_refuse_every_other_layout() -> None:
    for i, data in enumerate([PLAIN, *OTHER]):
        starts: list[int] = []
        run, pos = [], 0
        ok = True
        for b in read_batches(data):
            end = pos + b.batch_length + 12
            ok &= walk(data, pos + 61, end, b.records_count, starts)
            run.append(PlainBatch(b.base_offset, b.base_timestamp, b.partition_leader_epoch, b.records_count))
            pos = end
        cols = plain_columns(data, starts, run) if ok else None
        kraft_layout = i == 0 or i == 1  # KRaft's batches, and one with one-byte timestamp deltas
        assert (cols is not None) == kraft_layout, i
        if cols is not None:
            offs, ts, bases, epochs, vs, ve = cols
            ref = [(r.offset, r.timestamp, r.value) for b in read_batches(data) for r in b.records()]
            assert [(int(o), int(t), data[a:z]) for o, t, a, z in zip(offs, ts, vs, ve, strict=True)] == ref


@pytest.mark.parametrize("memo", [65_536, 0])
def test_rows_of_every_layout_equal_the_projects_reader(memo: int) -> None:
    assert _as_reference(_rows(MIXED, RowFilter(), memo)) == _reference(MIXED)


def test_offset_filters_cut_inside_batches() -> None:
    got = _rows(MIXED, RowFilter(min_offset=100, max_offset=209), 65_536)
    assert _as_reference(got) == _reference(MIXED, 100, 209)


def test_a_projection_without_value_columns_decodes_nothing_and_gives_the_same_rows() -> None:
    garbage = encode_batch(0, [b"\x01\xff\xff\xff", b"not a record"], epoch=1, timestamp=5)
    with pytest.raises(DecodeError):
        _rows(garbage, RowFilter(), 65_536)
    heads = _rows(garbage + PLAIN[len(encode_batch(0, [_value(i) for i in range(3)], epoch=1,
                                                    timestamp=1_700_000_000_000)):],
                  RowFilter(), 65_536, columns=["offset", "timestamp"])
    assert heads.column_names == ["offset", "timestamp"]
    assert heads["offset"].to_pylist() == [0, 1] + list(range(3, 208))

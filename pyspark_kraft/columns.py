"""The rows of the ``kraft`` source: their schema, and turning batches into Arrow record batches.

One row per record, control records included. The typed struct columns are derived from the
same message-spec schemas the project's codec is generated from (``metadata/schemas``), so a
field added there shows up here; field names are Kafka's JSON names (camelCase, as
``kafka-dump-log.sh`` and the ``json`` column print them), and a field the record's version
does not have is null, exactly as it is absent from the JSON. Uuids are Kafka's base64 text.

Batch headers, and the records of any batch not laid out as KRaft writes one, go through
:mod:`kraftsim.metadata.batch`; record values are decoded by :mod:`kraftsim.metadata.records`,
once per distinct value a worker sees. The record headers of KRaft's own batches are read a run
of batches at a time by :mod:`pyspark_kraft.scan`, with the same checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from kraftsim.metadata import records as recs
from kraftsim.metadata.batch import (
    BATCH_OVERHEAD,
    COMPRESSION_MASK,
    CONTROL_SCHEMAS,
    CONTROL_VALUE_VERSION,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    Batch,
    BatchError,
    LogRecord,
    decode_control_record,
    parse_control_key,
    read_batch,
)
from kraftsim.metadata.dumplog import CONTROL_NAMES
from kraftsim.rpc import registry
from kraftsim.rpc.codec_errors import DecodeError
from kraftsim.rpc.schema import FieldSpec, StructSpec
from kraftsim.rpc.values import camel
from pyspark_kraft.convert import converter
from pyspark_kraft.layout import DataLossError, Split
from pyspark_kraft.scan import PlainBatch, plain_columns, walk

# Record types with a typed column, in api-key order, then the Raft control messages.
METADATA_TYPES: list[str] = [recs.RECORD_NAMES[k] for k in sorted(recs.RECORD_NAMES)]
CONTROL_TYPES: list[str] = list(CONTROL_SCHEMAS.values())
# A record type without fields (NoOpRecord, EndTransactionRecord) gets no column: it would carry
# nothing beyond record_type, and Parquet cannot store an empty struct.
TYPED_COLUMNS: list[str] = [n for n in METADATA_TYPES + CONTROL_TYPES
                            if registry.spec(n, recs.SCHEMAS).root.fields]
CONTROL_TYPE_NAMES: dict[int, str] = {int(k): v for k, v in CONTROL_NAMES.items()}

_PRIMITIVE_ARROW: dict[str, Any] = {
    "bool": pa.bool_(), "int8": pa.int8(), "int16": pa.int16(), "uint16": pa.int32(), "int32": pa.int32(),
    "uint32": pa.int64(), "int64": pa.int64(), "float64": pa.float64(), "string": pa.string(),
    "bytes": pa.binary(), "records": pa.binary(), "uuid": pa.string(),
}

# Row columns before and after the typed ones; see docs/spark.md ("The rows") for their meaning.
HEAD_COLUMNS: list[tuple[str, Any]] = [
    ("offset", pa.int64()),
    ("base_offset", pa.int64()),
    ("partition_leader_epoch", pa.int32()),
    ("timestamp", pa.timestamp("us", tz="UTC")),
    ("is_control", pa.bool_()),
    ("control_type", pa.string()),
    ("api_key", pa.int16()),
    ("record_type", pa.string()),
    ("version", pa.int16()),
]
_TS_US = pa.timestamp("us", tz="UTC")
TAIL_COLUMNS: list[tuple[str, Any]] = [
    ("json", pa.string()),
    ("source", pa.string()),
    ("source_offset", pa.int64()),
]


def _field_type(f: FieldSpec) -> Any:
    if f.struct is not None:
        t = _struct_type(f.struct)
    else:
        t = _PRIMITIVE_ARROW[f.element_type]
    return pa.list_(t) if f.is_array else t


def _struct_type(spec: StructSpec) -> Any:
    return pa.struct([pa.field(camel(f.name), _field_type(f)) for f in spec.fields])


@cache
def record_struct(name: str) -> Any:
    """The Arrow struct type of one record type's typed column."""
    return _struct_type(registry.spec(name, recs.SCHEMAS).root)


@cache
def arrow_schema() -> Any:
    fields = [pa.field(n, t) for n, t in HEAD_COLUMNS]
    fields += [pa.field(n, record_struct(n)) for n in TYPED_COLUMNS]
    fields += [pa.field(n, t) for n, t in TAIL_COLUMNS]
    return pa.schema(fields)


def spark_schema() -> Any:
    """The same schema as a Spark StructType (Spark maps each Arrow type to its own)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema())


@dataclass(slots=True)
class RowFilter:
    """Which rows a read keeps; everything here is cheap to test before decoding a value."""

    min_offset: int | None = None
    max_offset: int | None = None
    record_types: frozenset[str] | None = None
    include_control: bool = True
    verify_crc: bool = True


# Framed record values seen by this Python worker, each decoded once. Metadata logs repeat
# themselves byte for byte: NoOpRecords every 500 ms, the same fence and unfence of a broker
# epoch, the same ISR shrinking and expanding. Identical bytes decode identically, so sharing
# the decode changes no row.
DECODE_MEMO_ENTRIES = 65_536
# ... and at most this much JSON text: the dictionary's string arrays stay far below Arrow's
# 2 GiB per string array, and a worker's memory bounded, however big the records.
DECODE_MEMO_BYTES = 256 * 1024 * 1024

# The columns that come from a record's value (or a control record's key): a read that selects
# none of them (``spark.read.schema("offset BIGINT, timestamp TIMESTAMP")``) decodes no value.
VALUE_COLUMNS = frozenset(["control_type", "api_key", "record_type", "version", "json", *TYPED_COLUMNS])
_SLOT: dict[str, int] = {name: i for i, name in enumerate(TYPED_COLUMNS)}


class _Decoded:
    """Every distinct value a worker decoded, as columns: the dictionary rows are ``take``n from.

    An entry is one framed value (or one control record's key and value): its api key, record
    type, version, control type, JSON text, and, for a type with a typed column, its field
    values as the row ``local`` of that type's compact StructArray (``slot``). New entries
    wait in Python lists until :meth:`arrow` turns them into Arrow, once, however many rows
    repeat them; a read then builds every value column of a batch with one ``take`` per column
    from these arrays, in C, instead of converting each row's Python values again.
    """

    def __init__(self) -> None:
        self.index: dict[bytes | tuple[bytes | None, bytes | None], int] = {}
        self.n = 0
        self.text_bytes = 0  # of the JSON texts: what the dictionary's size is mostly made of
        self.done = 0  # entries already in the Arrow arrays below
        self.api_key: list[int | None] = []
        self.record_type: list[str | None] = []
        self.version: list[int | None] = []
        self.control_type: list[str | None] = []
        self.json: list[str | None] = []
        self.slot: list[int] = []  # index in TYPED_COLUMNS, -1 for none
        self.local: list[int] = []
        self.typed: list[list[tuple[Any, ...]]] = [[] for _ in TYPED_COLUMNS]
        self.typed_done = [0] * len(TYPED_COLUMNS)
        self.a_head: dict[str, Any] = {}
        self.a_typed: list[Any] = [None] * len(TYPED_COLUMNS)
        self.np_slot = np.empty(0, dtype=np.int16)
        self.np_local = np.empty(0, dtype=np.int32)

    def _add(self, api_key: int | None, rtype: str | None, version: int | None, ctype: str | None,
             values: tuple[Any, ...] | None, text: str | None) -> int:
        d = self.n
        self.api_key.append(api_key)
        self.record_type.append(rtype)
        self.version.append(version)
        self.control_type.append(ctype)
        self.json.append(text)
        if text is not None:
            self.text_bytes += len(text)
        slot = _SLOT.get(rtype, -1) if values and rtype is not None else -1  # () for a type without fields
        self.slot.append(slot)
        if slot >= 0:
            rows = self.typed[slot]
            self.local.append(self.typed_done[slot] + len(rows))
            rows.append(values)  # type: ignore[arg-type]
        else:
            self.local.append(-1)
        self.n = d + 1
        return d

    def add_value(self, value: bytes) -> int:
        """Decode one framed metadata record value into a new entry."""
        msg, version = recs.unframe(value)
        api_key = msg.api_key()
        rtype = recs.RECORD_NAMES.get(api_key or 0) or f"Unknown({api_key})"
        values, text = converter(rtype, version)(msg)
        return self._add(api_key, rtype, version, None, values, text)

    def add_control(self, rec: LogRecord) -> int:
        kind = parse_control_key(rec.key)
        ctype = CONTROL_TYPE_NAMES.get(int(kind), "Unknown") if kind is not None else "Unknown"
        rtype = CONTROL_SCHEMAS.get(kind) if kind is not None else None
        ctl = decode_control_record(rec)
        version: int | None = None
        values: tuple[Any, ...] | None = None
        text: str | None = None
        if ctl is not None and rtype is not None:
            version = CONTROL_VALUE_VERSION
            values, text = converter(rtype, version)(ctl[1])
        return self._add(None, rtype, version, ctype, values, text)

    def arrow(self) -> None:
        """Turn the entries added since the last call into Arrow (appended to the arrays)."""
        if self.done == self.n:
            return
        lo = self.done
        fresh = {
            "api_key": pa.array(self.api_key[lo:], pa.int16()),
            "record_type": pa.array(self.record_type[lo:], pa.string()),
            "version": pa.array(self.version[lo:], pa.int16()),
            "control_type": pa.array(self.control_type[lo:], pa.string()),
            "json": pa.array(self.json[lo:], pa.string()),
        }
        for k, a in fresh.items():
            old = self.a_head.get(k)
            self.a_head[k] = a if old is None else pa.concat_arrays([old, a])
        self.np_slot = np.concatenate([self.np_slot, np.asarray(self.slot[lo:], dtype=np.int16)])
        self.np_local = np.concatenate([self.np_local, np.asarray(self.local[lo:], dtype=np.int32)])
        schema = arrow_schema()
        for slot, rows in enumerate(self.typed):
            if not rows:
                continue
            t = schema.field(TYPED_COLUMNS[slot]).type
            children = [pa.array(col, type=t.field(i).type) for i, col in enumerate(zip(*rows, strict=True))]
            compact = pa.StructArray.from_arrays(children, fields=list(t))
            old = self.a_typed[slot]
            self.a_typed[slot] = compact if old is None else pa.concat_arrays([old, compact])
            self.typed_done[slot] += len(rows)
            self.typed[slot] = []
        self.done = self.n


_SHARED: list[_Decoded] = [_Decoded()]  # the worker's dictionary; replaced, never cleared, when full


@cache
def _nulls(name: str, n: int) -> Any:
    """An all-null column of ``n`` rows (immutable, so one per size serves every batch)."""
    return pa.nulls(n, type=arrow_schema().field(name).type)


class RowBuilder:
    """Decodes batches into Arrow record batches of at most ``rows_per_batch`` rows.

    Batches laid out as KRaft writes them are read a run at a time (:mod:`pyspark_kraft.scan`):
    Python hops from record to record, numpy reads and checks every record header field of the
    run at once and gives the offsets, timestamps and value positions as arrays. Per record,
    Python then only slices its value and looks it up in the worker's :class:`_Decoded` (a value
    not seen before is decoded there); every column of the value is taken from the
    dictionary's Arrow arrays by those entry numbers. Other batches (control batches,
    compressed ones, any other layout) are read a record at a time with ``Batch.records``.

    ``columns`` names the columns to build (all by default): a read that needs none of the
    value's columns decodes no value.
    """

    def __init__(self, rf: RowFilter, rows_per_batch: int = 8192, memo_entries: int = DECODE_MEMO_ENTRIES,
                 columns: list[str] | None = None) -> None:
        self.rf = rf
        self.memo_entries = memo_entries
        self.rows_per_batch = rows_per_batch
        full = arrow_schema()
        self.columns = list(full.names) if columns is None else list(columns)
        self.schema = full if columns is None else pa.schema([full.field(c) for c in self.columns])
        self.decode = bool(VALUE_COLUMNS.intersection(self.columns)) or rf.record_types is not None
        self.dec = _SHARED[0]
        self.keep: Any = None  # per entry, under a recordTypes filter
        self.source = ""
        self.snapshot_offset: int | None = None
        self.lo, self.hi = -1, 1 << 63  # the offsets kept of the source being read
        # gathered rows not yet emitted, as chunks of numpy arrays:
        # (offsets, timestamps ms, base offsets, epochs, is_control, entry ids or None, source offsets)
        self.chunks: list[tuple[Any, ...]] = []
        self.pending = 0

    def _dictionary(self) -> _Decoded:
        """The entries for the next source: the worker's shared ones, or, with the memo off,
        fresh ones per source (every record decoded, even when its bytes were seen before)."""
        if not self.memo_entries:
            return _Decoded()
        if _SHARED[0].n >= self.memo_entries or _SHARED[0].text_bytes >= DECODE_MEMO_BYTES:
            _SHARED[0] = _Decoded()  # a builder still holding the old one keeps it alive
        return _SHARED[0]

    def batches_of(self, data: bytes | memoryview, source: str, snapshot_offset: int | None) -> Iterator[Any]:
        """Arrow batches for every kept record of the RecordBatch v2 bytes ``data``."""
        if self.pending:
            yield from self.flush()  # rows of another source first: a batch holds one source
        self.source, self.snapshot_offset = source, snapshot_offset
        self.dec = self._dictionary()
        self.keep = None
        rf = self.rf
        lo, hi, want_control = rf.min_offset, rf.max_offset, rf.include_control
        self.lo = -1 if lo is None or snapshot_offset is not None else lo
        self.hi = (1 << 63) if hi is None or snapshot_offset is not None else hi
        lo_, hi_ = self.lo, self.hi
        if type(data) is not bytes:
            data = bytes(data)
        limit = self.rows_per_batch
        starts: list[int] = []
        run: list[PlainBatch] = []
        run_batches: list[Batch] = []
        pos, n = 0, len(data)
        while pos < n:
            batch = read_batch(data, pos, verify_crc=rf.verify_crc)
            at = pos
            pos += batch.batch_length + LOG_OVERHEAD
            control = batch.is_control
            base = batch.base_offset
            last = base + batch.last_offset_delta
            if (control and not want_control) or last < lo_ or base > hi_:
                continue
            count = batch.records_count
            attrs = batch.attributes
            if not control and not attrs & (COMPRESSION_MASK | TIMESTAMP_TYPE_MASK) \
                    and count == batch.last_offset_delta + 1:
                mark = len(starts)
                if walk(data, at + BATCH_OVERHEAD, pos, count, starts):
                    run.append(PlainBatch(base, batch.base_timestamp, batch.partition_leader_epoch, count))
                    run_batches.append(batch)
                    continue
                del starts[mark:]
            if run:
                self._run(data, starts, run, run_batches)
                starts, run, run_batches = [], [], []
            self._careful(batch)
            while self.pending >= limit:
                yield self._emit(limit)
        if run:
            self._run(data, starts, run, run_batches)
        while self.pending >= limit:
            yield self._emit(limit)

    def _run(self, data: bytes, starts: list[int], run: list[PlainBatch], batches: list[Batch]) -> None:
        """Gather the rows of a run of batches in KRaft's layout (or read them the careful way
        when one of them is not, after all)."""
        cols = plain_columns(data, starts, run)
        if cols is None:
            for b in batches:
                self._careful(b)
            return
        offs, ts, bases, epochs, vs, ve = cols
        lo_, hi_ = self.lo, self.hi
        if lo_ > int(offs[0]) or hi_ < int(offs[-1]):
            sel = (offs >= lo_) & (offs <= hi_)
            offs, ts, bases, epochs, vs, ve = (c[sel] for c in (offs, ts, bases, epochs, vs, ve))
        k = len(offs)
        if not k:
            return
        ids = None
        if self.decode:
            dec = self.dec
            values = [data[a:b] for a, b in zip(vs.tolist(), ve.tolist(), strict=True)]
            if self.memo_entries:
                index = dec.index
                got = list(map(index.get, values))
                if None in got:
                    for j, d in enumerate(got):
                        if d is None:
                            v = values[j]
                            d = index.get(v)
                            if d is None:
                                d = index[v] = dec.add_value(v)
                            got[j] = d
            else:
                got = [dec.add_value(v) for v in values]
            ids = np.asarray(got, dtype=np.int64)
        src = None
        if self.snapshot_offset is not None:
            src, offs = offs, np.full(k, self.snapshot_offset, dtype=np.int64)
        self.chunks.append((offs, ts, bases, epochs, np.zeros(k, dtype=bool), ids, src))
        self.pending += k

    def _careful(self, batch: Batch) -> None:
        """Gather the rows of one batch read a record at a time (``Batch.records``)."""
        dec, memo, decode = self.dec, self.memo_entries > 0, self.decode
        lo_, hi_ = self.lo, self.hi
        control = batch.is_control
        offs: list[int] = []
        tss: list[int] = []
        ids: list[int] = []
        index = dec.index
        for rec in batch.records():
            o = rec.offset
            if o < lo_ or o > hi_:
                continue
            if decode:
                if control:
                    key: Any = (rec.key, rec.value)
                    d = index.get(key) if memo else None
                    if d is None:
                        d = dec.add_control(rec)
                        if memo:
                            index[key] = d
                else:
                    value = rec.value
                    if value is None:
                        raise DecodeError(f"record at offset {o} has no value")
                    d = index.get(value) if memo else None
                    if d is None:
                        d = dec.add_value(value)
                        if memo:
                            index[value] = d
                ids.append(d)
            elif control:
                parse_control_key(rec.key)  # a damaged key fails the read, decoded or not
            offs.append(o)
            tss.append(rec.timestamp)
        k = len(offs)
        if not k:
            return
        a_offs = np.asarray(offs, dtype=np.int64)
        src = None
        if self.snapshot_offset is not None:
            src, a_offs = a_offs, np.full(k, self.snapshot_offset, dtype=np.int64)
        self.chunks.append((a_offs, np.asarray(tss, dtype=np.int64), np.full(k, batch.base_offset, dtype=np.int64),
                            np.full(k, batch.partition_leader_epoch, dtype=np.int32), np.full(k, control, dtype=bool),
                            np.asarray(ids, dtype=np.int64) if decode else None, src))
        self.pending += k

    def flush(self) -> Iterator[Any]:
        while self.pending:
            yield self._emit(min(self.pending, self.rows_per_batch))

    def _cut(self, n: int) -> list[Any]:
        """The first ``n`` gathered rows, column by column, removed from the builder."""
        chunks = self.chunks
        if len(chunks) == 1 and len(chunks[0][0]) == n:
            self.chunks, self.pending = [], 0
            return list(chunks[0])
        cols = [None if chunks[0][j] is None else np.concatenate([c[j] for c in chunks]) for j in range(7)]
        rest = len(cols[0]) - n  # type: ignore[arg-type]
        self.chunks = [tuple(None if c is None else c[n:] for c in cols)] if rest else []
        self.pending = rest
        return [None if c is None else c[:n] for c in cols]

    def _emit(self, n: int) -> Any:
        offs, ts, bases, epochs, ctls, index, src = self._cut(n)
        dec = self.dec
        dec.arrow()
        slots: Any = None
        if index is not None:
            slots = dec.np_slot[index]
            if self.rf.record_types is not None:
                keep = self._keep_mask(dec)[index]
                if not keep.all():
                    offs, ts, bases, epochs, ctls, index, slots = (
                        c[keep] for c in (offs, ts, bases, epochs, ctls, index, slots))
                    src = None if src is None else src[keep]
                    n = len(offs)
        present = set(np.unique(slots).tolist()) if slots is not None else set()
        out = []
        a_offs: Any = None
        for name in self.columns:
            if name == "offset" or (name == "source_offset" and src is None):
                if a_offs is None:
                    a_offs = pa.array(offs, pa.int64())
                out.append(a_offs)
            elif name == "source_offset":
                out.append(pa.array(src, pa.int64()))
            elif name == "base_offset":
                out.append(pa.array(bases, pa.int64()))
            elif name == "partition_leader_epoch":
                out.append(pa.array(epochs, pa.int32()))
            elif name == "timestamp":
                out.append(pa.array(ts * 1000, _TS_US))
            elif name == "is_control":
                out.append(pa.array(ctls, pa.bool_()))
            elif name == "source":
                out.append(pa.repeat(pa.scalar(self.source, pa.string()), n))
            elif name in dec.a_head:
                out.append(dec.a_head[name].take(index))
            else:
                slot = _SLOT[name]
                if slot not in present:
                    out.append(_nulls(name, n))
                    continue
                local = dec.np_local[index]
                mine = slots == slot
                taken = local if mine.all() else pa.array(local, mask=~mine)
                out.append(dec.a_typed[slot].take(taken))
        return pa.RecordBatch.from_arrays(out, schema=self.schema)

    def _keep_mask(self, dec: _Decoded) -> Any:
        """Per entry of ``dec``: whether its record type (or control type) is in recordTypes."""
        keep = self.keep
        types = self.rf.record_types
        assert types is not None
        if keep is None or len(keep) < dec.n:
            start = 0 if keep is None else len(keep)
            more = np.fromiter((dec.record_type[d] in types or dec.control_type[d] in types
                                for d in range(start, dec.n)), dtype=bool, count=dec.n - start)
            keep = self.keep = more if keep is None else np.concatenate([keep, more])
        return keep


def read_split(split: Split, rf: RowFilter, rows_per_batch: int = 8192,
               memo_entries: int = DECODE_MEMO_ENTRIES, columns: list[str] | None = None) -> Iterator[Any]:
    """Arrow record batches of one split (of ``columns``, or all), read with one ``read`` of its
    byte range."""
    lo = split.min_offset if rf.min_offset is None else max(rf.min_offset, split.min_offset or rf.min_offset)
    hi = split.max_offset if rf.max_offset is None else min(rf.max_offset, split.max_offset or rf.max_offset)
    eff = RowFilter(lo, hi, rf.record_types, rf.include_control, rf.verify_crc)
    try:
        with open(split.path, "rb") as f:
            f.seek(split.start)
            data = f.read(split.end - split.start)
    except FileNotFoundError:
        raise DataLossError(f"{Path(split.path).name} was deleted before it could be read (offsets "
                            f"{split.first_offset}..{split.last_offset}); the log moved on past a snapshot") from None
    if len(data) != split.end - split.start:
        raise DataLossError(f"{split.name} shrank while it was read (expected bytes {split.start}..{split.end})")
    builder = RowBuilder(eff, rows_per_batch, memo_entries, columns)
    try:
        yield from builder.batches_of(data, split.name, split.snapshot_offset)
    except (BatchError, DecodeError) as e:
        raise DecodeError(f"{split.name}: {e}") from e
    yield from builder.flush()


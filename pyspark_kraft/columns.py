"""The rows of the ``kraft`` source: their schema, and turning batches into Arrow record batches.

One row per record, control records included. The typed struct columns are derived from the
same message-spec schemas the project's codec is generated from (``metadata/schemas``), so a
field added there shows up here; field names are Kafka's JSON names (camelCase, as
``kafka-dump-log.sh`` and the ``json`` column print them), and a field the record's version
does not have is null, exactly as it is absent from the JSON. Uuids are Kafka's base64 text.

Decoding goes through :mod:`kraftsim.metadata.batch` and :mod:`kraftsim.metadata.records`:
there is no second decoder here, only the conversion of decoded messages to columns.
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
    CONTROL_SCHEMAS,
    CONTROL_VALUE_VERSION,
    BatchError,
    decode_control_record,
    parse_control_key,
    read_batches,
)
from kraftsim.metadata.dumplog import CONTROL_NAMES
from kraftsim.rpc import registry
from kraftsim.rpc.codec_errors import DecodeError
from kraftsim.rpc.schema import FieldSpec, StructSpec
from kraftsim.rpc.values import camel
from pyspark_kraft.convert import Converter, converter
from pyspark_kraft.layout import DataLossError, Split

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


class _Columns:
    """Column buffers for one Arrow batch.

    Plain columns go in as one tuple per row (transposed at the end, in C); typed columns are
    kept per record type as (row index, tuple of field values) and become one StructArray per
    type, spread over the batch's rows by a ``take`` that leaves the other rows null (Arrow's
    conversion of one dict per row costs ~12 µs a record).
    """

    __slots__ = ("n", "rows", "typed", "source", "source_offsets")

    def __init__(self, source: str = "", snapshot: bool = False) -> None:
        self.n = 0
        self.rows: list[tuple[Any, ...]] = []
        self.source = source  # one file (or controller) per builder: a constant column
        # a snapshot's rows all sit at its last offset and keep their own; a segment's are the same
        self.source_offsets: list[int] | None = [] if snapshot else None
        self.typed: dict[str, tuple[list[int], list[tuple[Any, ...]]]] = {}

    def to_arrow(self) -> Any:
        schema = arrow_schema()
        n = self.n
        offset, base, epoch, ts, control, ctype, api_key, rtype, version, text = zip(*self.rows, strict=True)
        offsets = pa.array(offset, pa.int64())
        arrays = [
            offsets, pa.array(base, pa.int64()), pa.array(epoch, pa.int32()),
            pa.array(ts, pa.timestamp("ms", tz="UTC")).cast(_TS_US), pa.array(control, pa.bool_()),
            pa.array(ctype, pa.string()), pa.array(api_key, pa.int16()), pa.array(rtype, pa.string()),
            pa.array(version, pa.int16()),
        ]
        for name in TYPED_COLUMNS:
            t = schema.field(name).type
            got = self.typed.get(name)
            if got is None:
                arrays.append(pa.nulls(n, type=t))
                continue
            rows, values = got
            children = [pa.array(col, type=t.field(i).type) for i, col in enumerate(zip(*values, strict=True))]
            compact = pa.StructArray.from_arrays(children, fields=list(t))
            if len(rows) == n:
                arrays.append(compact)
                continue
            index = np.full(n, -1, dtype=np.int32)
            index[np.asarray(rows, dtype=np.int32)] = np.arange(len(rows), dtype=np.int32)
            arrays.append(compact.take(pa.array(index, mask=index < 0)))
        arrays += [pa.array(text, pa.string()), pa.repeat(pa.scalar(self.source, pa.string()), n),
                   offsets if self.source_offsets is None else pa.array(self.source_offsets, pa.int64())]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


# Framed record value -> (api key, type, version, typed column values, JSON), per Python worker.
# Metadata logs repeat themselves byte for byte: NoOpRecords every 500 ms, the same fence and
# unfence of a broker epoch, the same ISR shrinking and expanding; a hit skips decoding and
# conversion (~5 µs of ~8 a record). Identical bytes decode identically, so this changes no row.
DECODE_MEMO_ENTRIES = 65_536
_DECODED: dict[bytes, tuple[Any, str, int, tuple[Any, ...], str]] = {}


class RowBuilder:
    """Decodes batches into Arrow record batches of at most ``rows_per_batch`` rows."""

    def __init__(self, rf: RowFilter, rows_per_batch: int = 8192, memo_entries: int = DECODE_MEMO_ENTRIES) -> None:
        self.rf = rf
        self.memo_entries = memo_entries
        self.rows_per_batch = rows_per_batch
        self.cols = _Columns()
        self._converters: dict[tuple[str, int], Converter] = {}

    def _emit(self) -> Any:
        out = self.cols.to_arrow()
        self.cols = _Columns(self.cols.source, self.cols.source_offsets is not None)
        return out

    def _converter(self, name: str, version: int) -> Converter:
        fn = self._converters.get((name, version))
        if fn is None:
            fn = self._converters[(name, version)] = converter(name, version)
        return fn

    def batches_of(self, data: bytes | memoryview, source: str, snapshot_offset: int | None) -> Iterator[Any]:
        """Arrow batches for every kept record of the RecordBatch v2 bytes ``data``."""
        rf = self.rf
        lo, hi, types, want_control = rf.min_offset, rf.max_offset, rf.record_types, rf.include_control
        lo_ = -1 if lo is None or snapshot_offset is not None else lo
        hi_ = (1 << 63) if hi is None or snapshot_offset is not None else hi
        unframe = recs.unframe
        names = recs.RECORD_NAMES
        convs = self._converters
        limit = self.rows_per_batch
        memo_cap = self.memo_entries
        memo = _DECODED if memo_cap else {}  # off: no lookups either
        if self.cols.n:
            yield self._emit()  # rows of another source first: a batch holds one source
        c = self.cols = _Columns(source, snapshot_offset is not None)
        for batch in read_batches(data, verify_crc=rf.verify_crc):
            control = batch.is_control
            if (control and not want_control) or batch.last_offset < lo_ or batch.base_offset > hi_:
                continue
            epoch = batch.partition_leader_epoch
            base = batch.base_offset
            for rec in batch.records():
                src_off = rec.offset
                if src_off < lo_ or src_off > hi_:
                    continue
                if control:
                    kind = parse_control_key(rec.key)
                    ctype = CONTROL_TYPE_NAMES.get(int(kind), "Unknown") if kind is not None else "Unknown"
                    rtype = CONTROL_SCHEMAS.get(kind) if kind is not None else None
                    if types is not None and rtype not in types and ctype not in types:
                        continue
                    ctl = decode_control_record(rec)
                    api_key = None
                    version: int | None = None
                    values: tuple[Any, ...] | None = None
                    text: str | None = None
                    if ctl is not None and rtype is not None:
                        version = CONTROL_VALUE_VERSION
                        values, text = self._converter(rtype, version)(ctl[1])
                else:
                    value = rec.value
                    if value is None:
                        raise DecodeError(f"record at offset {src_off} has no value")
                    hit = memo.get(value)
                    if hit is None:
                        msg, version = unframe(value)
                        api_key = msg.api_key()
                        rtype = names.get(api_key or 0) or f"Unknown({api_key})"
                        fn = convs.get((rtype, version))
                        if fn is None:
                            fn = self._converter(rtype, version)
                        values, text = fn(msg)
                        if memo_cap:
                            if len(memo) >= memo_cap:
                                memo.clear()
                            memo[value] = (api_key, rtype, version, values, text)
                    else:
                        api_key, rtype, version, values, text = hit
                    ctype = None
                    if types is not None and rtype not in types:
                        continue
                row = c.n
                if values and rtype is not None:  # () for a type without fields: no column
                    got = c.typed.get(rtype)
                    if got is None:
                        got = c.typed[rtype] = ([], [])
                    got[0].append(row)
                    got[1].append(values)
                if snapshot_offset is None:
                    c.rows.append((src_off, base, epoch, rec.timestamp, control, ctype, api_key, rtype, version, text))
                else:
                    c.rows.append((snapshot_offset, base, epoch, rec.timestamp, control, ctype, api_key, rtype,
                                   version, text))
                    c.source_offsets.append(src_off)  # type: ignore[union-attr]
                c.n = row + 1
                if row + 1 >= limit:
                    yield self._emit()
                    c = self.cols

    def flush(self) -> Iterator[Any]:
        if self.cols.n:
            yield self._emit()


def read_split(split: Split, rf: RowFilter, rows_per_batch: int = 8192,
               memo_entries: int = DECODE_MEMO_ENTRIES) -> Iterator[Any]:
    """Arrow record batches of one split, read with one ``read`` of its byte range."""
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
    builder = RowBuilder(eff, rows_per_batch, memo_entries)
    try:
        yield from builder.batches_of(data, split.name, split.snapshot_offset)
    except (BatchError, DecodeError) as e:
        raise DecodeError(f"{split.name}: {e}") from e
    yield from builder.flush()


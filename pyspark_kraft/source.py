"""The ``kraft`` data source: batch and streaming reads of a KRaft metadata log.

``spark.read.format("kraft").load(DIR)`` plans one task per batch-aligned byte range of each
segment (and of the chosen snapshot); ``spark.readStream.format("kraft").load(DIR)`` follows a
live log with the next offset to read as its checkpointed position. With the
``bootstrap.controller`` option instead of a path, both read over the network as a Raft observer
(see :mod:`pyspark_kraft.network`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from pyspark_kraft import layout
from pyspark_kraft.columns import RowFilter, arrow_schema, read_split, spark_schema
from pyspark_kraft.options import OptionError, ReadOptions, parse


class KraftPartition(InputPartition):
    """One split (a byte range of a file, or an offset range fetched over the network)."""

    def __init__(self, split: Any) -> None:
        super().__init__(split)
        self.split = split


def _row_filter(o: ReadOptions) -> RowFilter:
    return RowFilter(o.from_offset, o.to_offset, o.record_types, o.include_control, o.verify_crc)


class _Projection:
    """A user-given schema (``spark.read.schema(...)``) selects columns by name; anything that
    is not one of the source's columns with the same type is refused when the read is planned.

    The file readers build only the selected columns (``names``), and decode no record value
    when none of them comes from one: that is the only column pruning a Python data source
    gets, since Spark (4.3) asks it for every column of its schema, even for ``count()``."""

    def __init__(self, schema: StructType | None) -> None:
        self.names: list[str] | None = None
        if schema is None:
            return
        full = spark_schema()
        by_name = {f.name.lower(): f for f in full.fields}
        names = []
        for f in schema.fields:
            mine = by_name.get(f.name.lower())
            if mine is None:
                raise OptionError(f"the kraft source has no column {f.name!r}")
            if mine.dataType != f.dataType:
                raise OptionError(f"column {f.name!r} is {mine.dataType.simpleString()} in the kraft source, "
                                  f"not {f.dataType.simpleString()}")
            names.append(mine.name)
        if names != [f.name for f in full.fields]:
            self.names = names

    def apply(self, batches: Iterator[Any]) -> Iterator[Any]:
        if self.names is None:
            yield from batches
            return
        for b in batches:
            yield b.select(self.names)


def _local_dir(o: ReadOptions) -> Path:
    if o.path is None:
        raise OptionError("give the metadata log directory: spark.read.format('kraft').load(DIR), "
                          "or option('bootstrap.controller', 'HOST:PORT') to read over the network")
    return layout.partition_dir(o.path)


class DefaultSource(DataSource):
    """Found by Spark through the module name ``pyspark_kraft`` (no registration call)."""

    @classmethod
    def name(cls) -> str:
        return "kraft"

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        o = parse(self.options)
        if o.bootstrap_controller is not None:
            from pyspark_kraft.network import NetworkBatchReader

            return NetworkBatchReader(o, _Projection(schema))
        return KraftBatchReader(o, _Projection(schema))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        o = parse(self.options)
        if o.bootstrap_controller is not None:
            from pyspark_kraft.network import NetworkStreamReader

            return NetworkStreamReader(o, _Projection(schema))
        if o.snapshot.strip().lower() not in ("", "none", "false"):
            raise OptionError("option snapshot is for batch reads; a stream follows the log from startingOffsets")
        return KraftStreamReader(o, _Projection(schema))


class KraftBatchReader(DataSourceReader):
    def __init__(self, o: ReadOptions, projection: _Projection) -> None:
        self.o = o
        self.projection = projection
        self.directory = str(_local_dir(o))

    def partitions(self) -> Sequence[InputPartition]:
        o = self.o
        directory = Path(self.directory)
        splits: list[layout.Split] = []
        from_offset = o.from_offset
        sid = layout.choose_snapshot(directory, o.snapshot)
        if sid is not None:
            if o.to_offset is not None and o.to_offset < sid.end_offset - 1:
                raise OptionError(f"toOffset={o.to_offset} is before snapshot {sid.file_name} "
                                  f"(which holds the state at offset {sid.end_offset - 1})")
            splits += layout.plan_snapshot(directory, sid, o.max_partition_bytes)
            from_offset = max(from_offset or 0, sid.end_offset)
        splits += layout.plan_segments(directory, from_offset=from_offset, to_offset=o.to_offset,
                                       max_bytes=o.max_partition_bytes)
        return [KraftPartition(s) for s in splits]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KraftPartition)
        rf = _row_filter(self.o)
        yield from read_split(partition.split, rf, self.o.rows_per_batch, self.o.decode_memo, self.projection.names)


class KraftStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"offset": N}``: the next log offset to read. Each micro-batch reads
    ``[start, end)`` where ``end`` is one past the last complete batch on disk when planned."""

    def __init__(self, o: ReadOptions, projection: _Projection) -> None:
        self.o = o
        self.projection = projection
        self.directory = _local_dir(o)
        self.cache = layout.HeaderCache()
        self.target: int | None = None  # availableNow: the end fixed when the query started

    def initialOffset(self) -> dict[str, int]:
        s = self.o.starting_offsets
        if s == "earliest":
            return {"offset": layout.log_start_offset(self.directory)}
        if s == "latest":
            return {"offset": self.cache.end_offset(self.directory)}
        return {"offset": int(s)}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.o.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self.cache.end_offset(self.directory)

    def latestOffset(self, start: dict[str, int] | None = None, limit: ReadLimit | None = None) -> dict[str, int]:
        end = self.cache.end_offset(self.directory) if self.target is None else self.target
        if start is not None:
            begin = int(start["offset"])
            end = max(end, begin)
            if isinstance(limit, ReadMaxRows):
                end = min(end, begin + limit.max_rows)
        return {"offset": end}

    def reportLatestOffset(self) -> dict[str, int]:
        return {"offset": self.cache.end_offset(self.directory)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        begin, stop = int(start["offset"]), int(end["offset"])
        if stop <= begin:
            return []
        first = layout.log_start_offset(self.directory)
        if begin < first:
            raise layout.DataLossError(
                f"offsets {begin}..{min(stop, first) - 1} are no longer in {self.directory}: the log now "
                f"starts at {first}, its older segments deleted after a snapshot. Restart the query with a "
                f"new checkpoint location (and startingOffsets={first} or 'earliest'), or read the snapshot "
                f"with a batch read (option snapshot=latest)")
        splits = self.cache.plan(self.directory, begin, stop - 1, self.o.max_partition_bytes)
        return [KraftPartition(s) for s in splits]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KraftPartition)
        rf = RowFilter(None, None, self.o.record_types, self.o.include_control, self.o.verify_crc)
        yield from read_split(partition.split, rf, self.o.rows_per_batch, self.o.decode_memo, self.projection.names)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the log is read-only to us, and retention is the controller's."""


__all__ = ["DefaultSource", "KraftBatchReader", "KraftStreamReader", "arrow_schema"]

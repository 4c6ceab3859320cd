"""Reading ``__cluster_metadata`` from a running controller over the Kafka protocol, as a Raft
observer does: Fetch from the quorum leader, FetchSnapshot when the log starts after a snapshot.

The observer fetches with replica id -1, which Kafka's leader treats as a non-replica (like a
consumer): it is not tracked in the quorum state and cannot move the high watermark. Only
records below the high watermark are kept, since the leader answers Fetch from its uncommitted
log. The last-fetched epoch sent is the current leader epoch: Kafka validates (offset, epoch)
against ``endOffsetForEpoch``, which for the current epoch is the log end, so any committed
offset is a valid place to (re)start, and a read-only observer has nothing to truncate.

Executors read offset ranges in parallel, each over its own connection; a trailing batch cut by
the fetch size is left for the next Fetch. Everything goes through :mod:`kraftsim.rpc.client`
and the schema-generated request classes.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from kraftsim.metadata.batch import LOG_OVERHEAD
from kraftsim.metadata.files import METADATA_TOPIC, METADATA_TOPIC_ID
from kraftsim.rpc import registry
from kraftsim.rpc.client import KafkaClient
from pyspark_kraft.columns import RowBuilder, RowFilter
from pyspark_kraft.layout import DataLossError
from pyspark_kraft.options import OptionError, ReadOptions

FETCH, FETCH_SNAPSHOT = 1, 59
NON_REPLICA = -1
RETRIABLE = {6: "NOT_LEADER_OR_FOLLOWER", 74: "FENCED_LEADER_EPOCH", 75: "UNKNOWN_LEADER_EPOCH",
             8: "BROKER_NOT_AVAILABLE"}
ERRORS = {104: "INCONSISTENT_CLUSTER_ID", 42: "INVALID_REQUEST", 31: "CLUSTER_AUTHORIZATION_FAILED",
          35: "UNSUPPORTED_VERSION", 3: "UNKNOWN_TOPIC_OR_PARTITION", 100: "UNKNOWN_TOPIC_ID",
          98: "SNAPSHOT_NOT_FOUND", 99: "POSITION_OUT_OF_RANGE"}


class FetchError(Exception):
    """The controller refused the fetch for good (one line naming Kafka's error)."""


@dataclass(slots=True)
class FetchResult:
    # Whole batches, as a read-only memoryview of the buffer the response was received into
    # (the records are not copied on their way from the socket; the view keeps that buffer alive)
    records: bytes | memoryview
    high_watermark: int
    log_start_offset: int
    snapshot: tuple[int, int] | None  # (end offset, epoch) when the offset is only in a snapshot


_BATCH_LENGTH = struct.Struct(">i")  # a batch's length, at byte 8


def complete_prefix(data: bytes | memoryview) -> int:
    """Bytes of ``data`` that hold whole batches (a fetch may end inside one)."""
    pos, n = 0, len(data)
    length = _BATCH_LENGTH.unpack_from
    while pos + LOG_OVERHEAD <= n:
        size = length(data, pos + 8)[0] + LOG_OVERHEAD
        if size <= LOG_OVERHEAD or pos + size > n:
            break
        pos += size
    return pos


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise OptionError(f"option bootstrap.controller={text!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


class RaftObserver:
    """One connection to the quorum leader, fetching ``__cluster_metadata-0``."""

    def __init__(self, address: str, cluster_id: str | None = None, max_bytes: int = 8 * 1024 * 1024,
                 timeout_ms: int = 30_000) -> None:
        self.host, self.port = parse_address(address)
        self.cluster_id = cluster_id
        self.max_bytes = max_bytes
        self.timeout = timeout_ms / 1000
        self.client: KafkaClient | None = None
        self.epoch = 0  # the leader epoch we believe current; learnt from errors' CurrentLeader

    async def connect(self) -> None:
        try:
            self.client = await KafkaClient.connect(self.host, self.port, client_id="kraftsim-spark-observer",
                                                    timeout=self.timeout)
            await self.client.negotiate()
        except (OSError, TimeoutError) as e:
            raise FetchError(f"cannot reach the controller at {self.host}:{self.port}: {e}") from e
        for key in (FETCH, FETCH_SNAPSHOT):
            if key not in self.client.versions:
                raise FetchError(f"{self.host}:{self.port} does not serve "
                                 f"{'Fetch' if key == FETCH else 'FetchSnapshot'} (not a KRaft controller?)")

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    async def fetch(self, offset: int, max_wait_ms: int = 0) -> FetchResult:
        """One Fetch at ``offset``; retries while the leader epoch is being learnt."""
        assert self.client is not None
        req_cls = registry.request_class(FETCH)
        version = self.client.pick_version(FETCH, req_cls)
        for _attempt in range(10):
            part = req_cls.FetchPartition(partition=0, current_leader_epoch=self.epoch, fetch_offset=offset,
                                          last_fetched_epoch=self.epoch if offset > 0 else 0, log_start_offset=-1,
                                          partition_max_bytes=self.max_bytes)
            topic = req_cls.FetchTopic(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[part])
            req = req_cls(cluster_id=self.cluster_id, replica_id=NON_REPLICA,
                          replica_state=req_cls.ReplicaState(replica_id=NON_REPLICA, replica_epoch=-1),
                          max_wait_ms=max_wait_ms, min_bytes=0, max_bytes=self.max_bytes, isolation_level=0,
                          session_id=0, session_epoch=-1, topics=[topic])
            resp = await self.client.request(req, version, timeout=self.timeout + max_wait_ms / 1000, views=True)
            if resp.error_code:
                self._raise(resp.error_code, "Fetch")
            p = resp.responses[0].partitions[0]
            if p.error_code in RETRIABLE:
                leader = p.current_leader
                if leader is not None and leader.leader_epoch >= 0 and leader.leader_epoch != self.epoch:
                    self.epoch = leader.leader_epoch
                    continue
                if p.error_code == 6:
                    raise FetchError(f"{self.host}:{self.port} is not the quorum leader (leader id "
                                     f"{leader.leader_id if leader else 'unknown'}): give the active controller")
                await asyncio.sleep(0.2)  # an election in progress: try again shortly
                continue
            if p.error_code:
                self._raise(p.error_code, "Fetch")
            snap = p.snapshot_id
            snapshot = (snap.end_offset, snap.epoch) if snap is not None and snap.end_offset >= 0 else None
            records = p.records if p.records is not None else b""
            return FetchResult(records[:complete_prefix(records)], p.high_watermark, p.log_start_offset, snapshot)
        raise FetchError(f"{self.host}:{self.port}: no stable leader epoch after 10 attempts")

    async def fetch_snapshot(self, end_offset: int, epoch: int) -> bytes | memoryview:
        """The whole snapshot ``end_offset``-``epoch``, in chunks of at most ``max_bytes``
        (joined into bytes; one chunk is the read-only view it was received as)."""
        assert self.client is not None
        if self.epoch == 0:
            # Learn the leader epoch first: Kafka 3.9 answers a FetchSnapshot with a stale epoch
            # with UNKNOWN_SERVER_ERROR (its error response has no records and fails to encode).
            await self.fetch(end_offset)
        req_cls = registry.request_class(FETCH_SNAPSHOT)
        version = self.client.pick_version(FETCH_SNAPSHOT, req_cls)
        chunks: list[bytes | memoryview] = []
        position = 0
        while True:
            part = req_cls.PartitionSnapshot(partition=0, current_leader_epoch=self.epoch,
                                             snapshot_id=req_cls.SnapshotId(end_offset=end_offset, epoch=epoch),
                                             position=position)
            req = req_cls(cluster_id=self.cluster_id, replica_id=NON_REPLICA, max_bytes=self.max_bytes,
                          topics=[req_cls.TopicSnapshot(name=METADATA_TOPIC, partitions=[part])])
            resp = await self.client.request(req, version, timeout=self.timeout, views=True)
            if resp.error_code:
                self._raise(resp.error_code, "FetchSnapshot")
            p = resp.topics[0].partitions[0]
            if p.error_code in RETRIABLE and p.current_leader is not None and p.current_leader.leader_epoch >= 0:
                self.epoch = p.current_leader.leader_epoch
                continue
            if p.error_code:
                self._raise(p.error_code, "FetchSnapshot")
            data = p.unaligned_records if p.unaligned_records is not None else b""
            chunks.append(data)
            position += len(data)
            if position >= p.size or not data:
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _raise(self, code: int, api: str) -> None:
        name = ERRORS.get(code) or RETRIABLE.get(code) or f"error code {code}"
        raise FetchError(f"{api} from {self.host}:{self.port} failed: {name}")


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``start..end - 1`` to fetch (``snapshot``: read that snapshot instead)."""

    start: int
    end: int
    snapshot: tuple[int, int] | None = None


def read_range(o: ReadOptions, r: OffsetRange, rf: RowFilter) -> Iterator[Any]:
    """Arrow batches of one offset range (or snapshot), fetched over one connection."""
    loop = asyncio.new_event_loop()
    obs = RaftObserver(o.bootstrap_controller or "", o.cluster_id, o.fetch_max_bytes, o.request_timeout_ms)
    try:
        loop.run_until_complete(obs.connect())
        builder = RowBuilder(rf, o.rows_per_batch, o.decode_memo)
        if r.snapshot is not None:
            end, epoch = r.snapshot
            data = loop.run_until_complete(obs.fetch_snapshot(end, epoch))
            name = f"{end:020d}-{epoch:010d}.checkpoint"
            yield from builder.batches_of(data[:complete_prefix(data)], name, end - 1)
            yield from builder.flush()
            return
        offset = r.start
        hi = rf.max_offset
        while offset < r.end:
            got = loop.run_until_complete(obs.fetch(offset))
            if got.snapshot is not None and offset > 0:
                raise DataLossError(f"offset {offset} is no longer in the controller's log (it starts at "
                                    f"{got.log_start_offset}, after snapshot {got.snapshot[0]}-{got.snapshot[1]})")
            limit = min(r.end, got.high_watermark) - 1
            if got.snapshot is not None or not got.records:
                if got.high_watermark <= offset:
                    raise DataLossError(f"the controller's high watermark {got.high_watermark} is below offset "
                                        f"{offset}: was the log truncated?")
                raise FetchError(f"no records at offset {offset} below the high watermark {got.high_watermark}")
            builder.rf = RowFilter(max(offset, rf.min_offset or 0), limit if hi is None else min(hi, limit),
                                   rf.record_types, rf.include_control, rf.verify_crc)
            yield from builder.batches_of(got.records, f"{obs.host}:{obs.port}", None)
            last = _last_offset(got.records)
            offset = max(offset, min(last + 1, limit + 1))
        yield from builder.flush()
    finally:
        loop.run_until_complete(obs.close())
        loop.close()


def _last_offset(data: bytes | memoryview) -> int:
    from kraftsim.metadata.batch import read_batches

    last = -1
    for b in read_batches(data, verify_crc=False):
        last = b.last_offset
    return last


def probe(o: ReadOptions, offset: int) -> FetchResult:
    """One Fetch from the driver: the high watermark, log start and snapshot at ``offset``."""
    obs = RaftObserver(o.bootstrap_controller or "", o.cluster_id, 64 * 1024, o.request_timeout_ms)

    async def go() -> FetchResult:
        await obs.connect()
        try:
            return await obs.fetch(offset)
        finally:
            await obs.close()

    result: FetchResult = asyncio.run(go())
    return result


def plan_ranges(start: int, end: int, pieces: int = 8, minimum: int = 20_000) -> list[OffsetRange]:
    """``start..end-1`` cut into at most ``pieces`` ranges of at least ``minimum`` offsets."""
    if end <= start:
        return []
    step = max(minimum, -(-(end - start) // pieces))
    return [OffsetRange(a, min(a + step, end)) for a in range(start, end, step)]


class NetworkPartition(InputPartition):
    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r


class NetworkBatchReader(DataSourceReader):
    """Everything committed when the read is planned: the snapshot a fresh observer would be sent
    (if any), then the log from its end to the high watermark, in parallel offset ranges."""

    def __init__(self, o: ReadOptions, projection: Any) -> None:
        self.o = o
        self.projection = projection

    def partitions(self) -> Sequence[InputPartition]:
        o = self.o
        start = o.from_offset or 0
        first = probe(o, start)
        ranges: list[OffsetRange] = []
        if first.snapshot is not None:
            end_offset, epoch = first.snapshot
            if start == 0 or start < first.log_start_offset:
                ranges.append(OffsetRange(end_offset - 1, end_offset, (end_offset, epoch)))
            start = max(start, end_offset)
        stop = first.high_watermark if o.to_offset is None else min(first.high_watermark, o.to_offset + 1)
        ranges += plan_ranges(start, stop)
        return [NetworkPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, NetworkPartition)
        o = self.o
        rf = RowFilter(o.from_offset, o.to_offset, o.record_types, o.include_control, o.verify_crc)
        yield from self.projection.apply(read_range(o, partition.range, rf))


class NetworkStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"offset": N}`` as for files; the latest offset is the leader's high watermark."""

    def __init__(self, o: ReadOptions, projection: Any) -> None:
        self.o = o
        self.projection = projection
        self.target: int | None = None

    def _high_watermark(self) -> int:
        return probe(self.o, 0).high_watermark

    def initialOffset(self) -> dict[str, int]:
        s = self.o.starting_offsets
        if s == "latest":
            return {"offset": self._high_watermark()}
        if s == "earliest":
            first = probe(self.o, 0)
            return {"offset": first.snapshot[0] if first.snapshot is not None else 0}
        return {"offset": int(s)}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.o.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._high_watermark()

    def latestOffset(self, start: dict[str, int] | None = None, limit: ReadLimit | None = None) -> dict[str, int]:
        end = self._high_watermark() if self.target is None else self.target
        if start is not None:
            begin = int(start["offset"])
            end = max(end, begin)
            if isinstance(limit, ReadMaxRows):
                end = min(end, begin + limit.max_rows)
        return {"offset": end}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return [NetworkPartition(r) for r in plan_ranges(int(start["offset"]), int(end["offset"]))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, NetworkPartition)
        o = self.o
        rf = RowFilter(None, None, o.record_types, o.include_control, o.verify_crc)
        yield from self.projection.apply(read_range(o, partition.range, rf))

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: an observer with replica id -1 holds no state at the leader."""

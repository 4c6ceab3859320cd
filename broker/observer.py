"""The fleet's one Raft observer of ``__cluster_metadata``: it fetches the metadata log from the
controller and replays it into one :class:`MetadataImage` that every simulated broker of the
fleet reads.

It follows a Kafka 3.9 broker's observer (KafkaRaftClient in the observer role, fed to the
MetadataLoader): Fetch long polls of 500 ms at the end of what it has fetched, with the last
fetched epoch, so the leader can answer DivergingEpoch (the uncommitted tail is truncated) or
SnapshotId (the snapshot is fetched in chunks with FetchSnapshot and loaded into a fresh image).
It finds the leader of a quorum as Kafka's observer does: any voter answers a Fetch from a
stale epoch with the leader it knows and its address (FENCED_LEADER_EPOCH or
NOT_LEADER_OR_FOLLOWER), and with none known, or the leader gone, it asks the bootstrap voters
in turn.
Only committed batches, those wholly below the high watermark, are replayed, as Kafka's loader
only ever sees committed batches; the fetched-but-uncommitted tail waits in memory. So the
image never holds a record that can be taken back, and a divergence only ever cuts that tail.

``applied_offset`` is the last offset of the last batch applied, control batches included
(Kafka's ``MetadataLoader.lastAppliedOffset``): it is the offset every broker of the fleet
reports in its heartbeats, the offset the fleet has truly replayed.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kraftsim.metadata import versions
from kraftsim.metadata.batch import Batch, BatchError, IncompleteBatchError, read_batches
from kraftsim.metadata.files import METADATA_PARTITION, METADATA_TOPIC, METADATA_TOPIC_ID
from kraftsim.metadata.image.errors import ReplayError
from kraftsim.metadata.image.fast_replay import replay_framed
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.offset_waiters import OffsetWaiters
from kraftsim.metadata.snapshots import SnapshotError
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.codec_errors import CodecError
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import FetchRequest, FetchSnapshotRequest

log = logging.getLogger("kraftsim.broker.observer")

FETCH_MAX_WAIT_MS = 500  # KafkaRaftClient.MAX_FETCH_WAIT_MS
MAX_FETCH_BYTES = 8 * 1024 * 1024  # KafkaRaftClient.MAX_FETCH_SIZE_BYTES
REQUEST_TIMEOUT_S = 2.0 + FETCH_MAX_WAIT_MS / 1000  # controller.quorum.request.timeout.ms, plus the poll
RETRY_BACKOFF_S = 0.05  # controller.quorum.retry.backoff.ms (20) rounded up to the reconnect backoff
Address = tuple[str, int]


@dataclass(slots=True)
class _Fetched:
    """A fetched batch not yet committed: its bytes wait here until the high watermark passes it."""

    batch: Batch
    epoch: int


@dataclass
class ObserverStats:
    fetches: int = 0
    fetch_errors: int = 0
    snapshots_loaded: int = 0
    truncations: int = 0
    replay_errors: int = 0
    records_replayed: int = 0
    last_error: str = ""
    leader: tuple[int, int] = (-1, -1)  # (id, epoch)


@dataclass
class MetadataObserver:
    """One fetcher and one image for a whole fleet. ``replica_id`` and ``directory_id`` are what
    the controller sees (DescribeQuorum lists the fleet as this one observer)."""

    bootstrap: list[Address]
    cluster_id: str | None
    replica_id: int
    directory_id: uuid.UUID
    supported_features: dict[str, tuple[int, int]] = field(default_factory=dict)
    release: versions.Release = field(default_factory=versions.release)  # the brokers' release
    image: MetadataImage = field(init=False)
    applied_offset: int = -1
    high_watermark: int = 0
    stats: ObserverStats = field(default_factory=ObserverStats)
    on_applied: list[Callable[[], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.image = self._new_image()
        self._fetch_offset = 0
        self._last_fetched_epoch = 0
        self._applied_epoch = 0
        self._tail: list[_Fetched] = []
        self._leader_epoch = 0
        self._leader: Address | None = None
        self._next_bootstrap = 0
        self._client: KafkaClient | None = None
        self._client_addr: Address | None = None
        self._fetch_version = 17
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._waiters = OffsetWaiters()

    def _new_image(self) -> MetadataImage:
        # Accept whatever a controller of the brokers' release may finalize, and the fleet's own
        # ranges: the image is a reader here, the controller already checked the levels against
        # the brokers.
        features = self.release.supported_features(enable_unstable=True)
        for name, (lo, hi) in self.supported_features.items():
            old = features.get(name, (lo, hi))
            features[name] = (min(lo, old[0]), max(hi, old[1]))
        return MetadataImage(features, self.release)

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.create_task(self._run(), name="kraftsim-observer")

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping anyway
                pass
        await self._close()

    def applied(self, offset: int) -> asyncio.Future[None]:
        """A future done once ``applied_offset >= offset`` (for brokers waiting to catch up)."""
        if self.applied_offset >= offset:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            fut.set_result(None)
            return fut
        return self._waiters.wait(offset)

    @property
    def leader_address(self) -> Address | None:
        """The active controller's address as the last fetch response named it."""
        return self._leader

    # ---- the fetch loop ------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            try:
                client = await self._connect()
                await self._fetch_once(client)
            except asyncio.CancelledError:
                raise
            except (OSError, TimeoutError, CodecError, ValueError) as e:
                self.stats.fetch_errors += 1
                self.stats.last_error = f"{type(e).__name__}: {e}"
                await self._close()
                self._leader = None  # ask the bootstrap list again
                await asyncio.sleep(RETRY_BACKOFF_S)

    def _target(self) -> Address:
        if self._leader is not None:
            return self._leader
        addr = self.bootstrap[self._next_bootstrap % len(self.bootstrap)]
        self._next_bootstrap += 1
        return addr

    async def _connect(self) -> KafkaClient:
        target = self._target()
        if self._client is not None and not self._client.closed and self._client_addr == target:
            return self._client
        await self._close()
        client = await KafkaClient.connect(target[0], target[1], client_id=f"raft-observer-{self.replica_id}",
                                           timeout=REQUEST_TIMEOUT_S)
        try:
            await asyncio.wait_for(client.negotiate(), REQUEST_TIMEOUT_S)
        except BaseException:
            await client.close()
            raise
        theirs = client.versions.get(ApiKey.FETCH)
        if theirs is None or theirs[1] < 13:
            await client.close()
            raise ValueError(f"{target[0]}:{target[1]} does not serve Fetch v13+ (the metadata log by topic id)")
        # Kafka 4.1's brokers fetch at v18, telling the leader their high watermark (KIP-1166).
        self._fetch_version = min(self.release.apis[ApiKey.FETCH][1], theirs[1])
        self._client, self._client_addr = client, target
        return client

    async def _close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    def _fetch_request(self) -> FetchRequest:
        v = self._fetch_version
        part = FetchRequest.FetchPartition(partition=METADATA_PARTITION, current_leader_epoch=self._leader_epoch,
                                           fetch_offset=self._fetch_offset, last_fetched_epoch=self._last_fetched_epoch,
                                           partition_max_bytes=MAX_FETCH_BYTES, replica_directory_id=self.directory_id,
                                           high_watermark=self.high_watermark)  # sent from v18
        return FetchRequest(
            cluster_id=self.cluster_id, replica_id=self.replica_id if v < 15 else -1,
            replica_state=FetchRequest.ReplicaState(replica_id=self.replica_id if v >= 15 else -1, replica_epoch=-1),
            max_wait_ms=FETCH_MAX_WAIT_MS, min_bytes=0, max_bytes=MAX_FETCH_BYTES,
            topics=[FetchRequest.FetchTopic(topic=METADATA_TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[part])])

    async def _fetch_once(self, client: KafkaClient) -> None:
        resp = await client.request(self._fetch_request(), self._fetch_version, timeout=REQUEST_TIMEOUT_S)
        self.stats.fetches += 1
        if resp.error_code != ErrorCode.NONE:
            raise ValueError(f"fetch answered {_name(resp.error_code)}")
        pd = resp.responses[0].partitions[0]
        endpoints = {e.node_id: (e.host, e.port) for e in (resp.node_endpoints or [])}
        leader = pd.current_leader
        if leader.leader_id >= 0 and leader.leader_epoch >= 0:
            self.stats.leader = (leader.leader_id, leader.leader_epoch)
            if leader.leader_epoch > self._leader_epoch:
                log.info("following the metadata log leader %d in epoch %d", leader.leader_id, leader.leader_epoch)
            self._leader_epoch = max(self._leader_epoch, leader.leader_epoch)
            if leader.leader_id in endpoints:
                self._leader = endpoints[leader.leader_id]
        error = pd.error_code
        if error in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER):
            if leader.leader_id >= 0 and leader.leader_id in endpoints:
                return  # the leader and epoch above are the new ones: fetch from it at once
            # This voter knows no leader (an election is on) or not its address: ask the next
            # one after a backoff, as Kafka's observer does when no leader is known.
            self._leader = None
            await asyncio.sleep(RETRY_BACKOFF_S)
            return
        if error == ErrorCode.UNKNOWN_LEADER_EPOCH:
            self._leader_epoch = 0  # ours is ahead of the leader's (it restarted from scratch)
            await asyncio.sleep(RETRY_BACKOFF_S)
            return
        if error != ErrorCode.NONE:
            raise ValueError(f"fetch of the metadata log answered {_name(error)}")
        diverging = pd.diverging_epoch
        if diverging.epoch >= 0 or diverging.end_offset >= 0:
            self._truncate(diverging.end_offset, diverging.epoch)
            return
        snapshot = pd.snapshot_id
        if snapshot.epoch >= 0 or snapshot.end_offset >= 0:
            await self._load_snapshot(client, snapshot.end_offset, snapshot.epoch)
            return
        self._append(pd.records or b"")
        self._commit(pd.high_watermark)

    # ---- the fetched log -----------------------------------------------------------------

    def _append(self, records: bytes) -> None:
        try:
            for batch in read_batches(records):
                if batch.last_offset < self._fetch_offset:
                    continue  # a batch we have (the leader serves whole batches from the one holding our offset)
                self._tail.append(_Fetched(batch, batch.partition_leader_epoch))
                self._fetch_offset = batch.next_offset
                self._last_fetched_epoch = batch.partition_leader_epoch
        except IncompleteBatchError:
            pass  # a cut-off last batch: fetched again whole next time, as Kafka does
        except BatchError as e:
            raise ValueError(f"corrupt metadata batch at offset {self._fetch_offset}: {e}") from e

    def _truncate(self, end_offset: int, epoch: int) -> None:
        """DivergingEpoch: the leader's log ends epoch ``epoch`` at ``end_offset``; drop what we
        fetched past it. Only the uncommitted tail can diverge; if the cut reaches below what is
        applied (a leader that lost committed data: a log repaired or reformatted under us),
        start again from nothing."""
        self.stats.truncations += 1
        if end_offset <= self.applied_offset:
            log.warning("the leader's log diverges at offset %d, below the applied offset %d: reloading from scratch",
                        end_offset, self.applied_offset)
            self._reset()
            return
        self._tail = [f for f in self._tail if f.batch.last_offset < end_offset]
        self._fetch_offset = end_offset
        self._last_fetched_epoch = self._tail[-1].epoch if self._tail else self._applied_epoch
        log.info("truncated the fetched metadata log to offset %d (diverging epoch %d)", end_offset, epoch)

    def _reset(self) -> None:
        self.image = self._new_image()
        self.applied_offset = -1
        self._applied_epoch = 0
        self._fetch_offset = 0
        self._last_fetched_epoch = 0
        self._tail = []

    def _commit(self, high_watermark: int) -> None:
        """Apply every fetched batch wholly below the high watermark."""
        self.high_watermark = max(self.high_watermark, high_watermark) if self.applied_offset >= 0 else high_watermark
        n = 0
        tail = self._tail
        while n < len(tail) and tail[n].batch.last_offset < high_watermark:
            self._apply(tail[n].batch)
            self._applied_epoch = tail[n].epoch
            n += 1
        if n:
            del tail[:n]
            for listener in self.on_applied:
                listener()
            self._waiters.advance(self.applied_offset)

    def _apply(self, batch: Batch) -> None:
        if not batch.is_control:
            image = self.image
            ts = batch.max_timestamp
            for rec in batch.records():
                if rec.value is None:
                    continue
                try:
                    replay_framed(image, rec.value, rec.offset, ts)
                    self.stats.records_replayed += 1
                except (ReplayError, CodecError) as e:
                    # Kafka's broker counts a metadata loading fault and goes on.
                    self.stats.replay_errors += 1
                    self.stats.last_error = f"replay at offset {rec.offset}: {e}"
                    log.error("cannot replay the record at offset %d: %s", rec.offset, e)
        self.applied_offset = batch.last_offset

    # ---- snapshots -----------------------------------------------------------------------

    async def _load_snapshot(self, client: KafkaClient, end_offset: int, epoch: int) -> None:
        """FetchSnapshot in chunks by position, then a fresh image from it (Kafka's observer
        does the same when the leader sends it to a snapshot)."""
        data = bytearray()
        size = -1
        while size < 0 or len(data) < size:
            part = FetchSnapshotRequest.PartitionSnapshot(
                partition=METADATA_PARTITION, current_leader_epoch=self._leader_epoch,
                snapshot_id=FetchSnapshotRequest.SnapshotId(end_offset=end_offset, epoch=epoch), position=len(data),
                replica_directory_id=self.directory_id)
            req = FetchSnapshotRequest(cluster_id=self.cluster_id, replica_id=self.replica_id, max_bytes=MAX_FETCH_BYTES,
                                       topics=[FetchSnapshotRequest.TopicSnapshot(name=METADATA_TOPIC, partitions=[part])])
            version = min(1, client.versions.get(ApiKey.FETCH_SNAPSHOT, (0, 0))[1])
            resp = await client.request(req, version, timeout=REQUEST_TIMEOUT_S)
            if resp.error_code != ErrorCode.NONE:
                raise ValueError(f"fetch snapshot answered {_name(resp.error_code)}")
            ps = resp.topics[0].partitions[0]
            if ps.error_code != ErrorCode.NONE:
                raise ValueError(f"fetch snapshot {end_offset}-{epoch} answered {_name(ps.error_code)}")
            chunk = ps.unaligned_records or b""
            size = ps.size
            if ps.position != len(data) or (not chunk and len(data) < size):
                raise ValueError(f"fetch snapshot answered position {ps.position} for {len(data)}")
            data += chunk
        image = self._new_image()
        try:
            values = snapshot_values(bytes(data))
        except SnapshotError as e:
            raise ValueError(str(e)) from e
        _load_values(image, values, end_offset - 1)
        self.image = image
        self.applied_offset = end_offset - 1
        self._applied_epoch = epoch
        self._fetch_offset = end_offset
        self._last_fetched_epoch = epoch
        self._tail = []
        self.stats.snapshots_loaded += 1
        log.info("loaded the metadata snapshot %d-%d (%d bytes)", end_offset, epoch, len(data))
        for listener in self.on_applied:
            listener()
        self._waiters.advance(self.applied_offset)


def _load_values(image: MetadataImage, values: list[bytes], last_offset: int) -> None:
    image._loading_snapshot = True  # transaction records are refused inside a snapshot
    try:
        for value in values:
            replay_framed(image, value, last_offset)
    finally:
        image._loading_snapshot = False
    image.offset = last_offset


def snapshot_values(data: bytes) -> list[bytes]:
    """The framed record values of a snapshot's bytes (header, records, footer)."""
    from kraftsim.metadata.batch import ControlRecordType, decode_control_record

    out: list[bytes] = []
    header = footer = False
    try:
        for batch in read_batches(data):
            if batch.is_control:
                for rec in batch.records():
                    ctl = decode_control_record(rec)
                    if ctl is not None and ctl[0] == ControlRecordType.SNAPSHOT_HEADER:
                        header = True
                    elif ctl is not None and ctl[0] == ControlRecordType.SNAPSHOT_FOOTER:
                        footer = True
                continue
            if not header or footer:
                raise SnapshotError("snapshot records outside its header and footer")
            out.extend(r.value for r in batch.records() if r.value is not None)
    except BatchError as e:
        raise SnapshotError(f"snapshot: {e}") from e
    if not header or not footer:
        raise SnapshotError(f"incomplete snapshot (header {header}, footer {footer})")
    return out


def _name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)

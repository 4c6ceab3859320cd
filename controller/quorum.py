"""The controller core: one event queue, one writer, records as the only state change.

A write operation runs as an event that reads the image and returns (records, response)
without mutating anything. The core then frames the records, replays them into the image at
the offsets the log will give them ("apply at append"), appends them, and answers only when the
batch is durable (fsync), as Kafka's QuorumController answers only after commit. An operation
that writes nothing answers at once, unless earlier writes are still uncommitted, in which case
it waits for them, so nobody is told about state that could still be lost.

This is a single-voter quorum: at start-up the node loads its snapshot and log, bumps the leader
epoch, writes ``quorum-state`` and a LeaderChange control record, and becomes active.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from controller.config import Config
from controller.context import ControllerContext
from controller.events import EventQueue, EventTimeoutError
from controller.metrics import ControllerMetrics
from controller.result import ApiError, ControllerResult, NotControllerError
from metadata import files, versions
from metadata import records as recs
from metadata.batch import ControlRecordType
from metadata.image.image import MetadataImage
from metadata.loader import load_image
from metadata.log import MAX_RECORDS_PER_BATCH, LogConfig, MetadataLog
from metadata.segments import LogFailedError
from metadata.snapshots import SnapshotError, read_snapshot_file
from rpc.clock import Clock, SystemClock
from rpc.error_codes import ErrorCode

log = logging.getLogger("kraftsim.controller")

T = TypeVar("T")


def _fence_text(r: Any) -> str:
    parts = []
    if r.fenced == 1:
        parts.append(f"Fenced broker {r.broker_id}")
    elif r.fenced == -1:
        parts.append(f"Unfenced broker {r.broker_id}")
    if r.in_controlled_shutdown == 1:
        parts.append(f"Broker {r.broker_id} entered controlled shutdown")
    if r.log_dirs:
        parts.append(f"Broker {r.broker_id} now has online log dirs {len(r.log_dirs)}")
    return "; ".join(parts) or f"Updated the registration of broker {r.broker_id}"


# One log line per state change that matters, Kafka-like; keyed by record api key.
_STATE_CHANGE_LOGS: dict[int, Callable[[Any], str]] = {
    0: lambda r: f"Registered broker {r.broker_id} with epoch {r.broker_epoch} and incarnation {r.incarnation_id}"
                 f"{' (fenced)' if r.fenced else ''}",
    1: lambda r: f"Unregistered broker {r.broker_id} (epoch {r.broker_epoch})",
    2: lambda r: f"Created topic {r.name} with topic id {r.topic_id}",
    7: lambda r: f"Fenced broker {r.id}",
    8: lambda r: f"Unfenced broker {r.id}",
    9: lambda r: f"Removed topic with id {r.topic_id}",
    12: lambda r: f"Finalized feature {r.name} at level {r.feature_level}",
    17: _fence_text,
    21: lambda r: f"ZK migration state is now {r.zk_migration_state}",
}


class FatalControllerError(Exception):
    """A fault the controller cannot continue after (replay or log failure)."""


class QuorumController:
    def __init__(self, config: Config, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.node_id = config.node_id
        self.voters = [v[0] for v in config.get("controller.quorum.voters")] or [self.node_id]
        self.image = MetadataImage()
        self.mlog: MetadataLog | None = None
        self.cluster_id = ""
        self.epoch = 0
        self.active = False
        self.fatal: BaseException | None = None
        self.metadata_errors = 0
        self.new_active_controllers = 0
        self.timed_out_heartbeats = 0
        self.timed_out_events = 0
        self.metrics = ControllerMetrics(self._metric_values)
        self.queue = EventQueue(self.clock, self.metrics.queue_time.observe, self.metrics.processing_time.observe,
                                self._on_event_timeout)
        self._tasks: list[asyncio.Task[Any]] = []
        self._snapshot_task: asyncio.Task[None] | None = None
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = 0
        self._stopped = asyncio.Event()
        self.ctx: ControllerContext | None = None
        self.cluster: Any = None
        self.replication: Any = None
        self.features: Any = None
        self.on_fatal: Callable[[BaseException], None] | None = None

    # ==== start-up ======================================================================
    @property
    def metadata_dir(self) -> Path:
        return self.config.metadata_log_dir

    def _read_meta_properties(self) -> files.MetaProperties:
        path = self.metadata_dir / files.META_PROPERTIES
        if not path.exists():
            raise files.StorageError(f"No meta.properties found in {self.metadata_dir} (have you run "
                                     f"`kraftsim format` to format the directory?)")
        mp = files.MetaProperties.read(path)
        if mp.node_id != self.node_id:
            raise files.StorageError(f"Stored node id {mp.node_id} doesn't match previous node id "
                                     f"{self.node_id} in {path}. If you moved your data, make sure your "
                                     f"configured node id matches.")
        return mp

    def _bootstrap_records(self) -> list[tuple[Any, int]]:
        path = self.metadata_dir / files.BOOTSTRAP_CHECKPOINT
        try:
            return list(read_snapshot_file(path))
        except (SnapshotError, OSError) as e:
            raise files.StorageError(f"cannot read {path}: {e}") from e

    async def start(self) -> None:
        mp = self._read_meta_properties()
        self.cluster_id = mp.cluster_id
        cfg = self.config
        seg_bytes = cfg.get("metadata.log.segment.bytes")
        self.mlog = MetadataLog.open(self.metadata_dir, LogConfig(
            segment_bytes=seg_bytes, linger_ms=cfg.get("controller.quorum.append.linger.ms"),
            retention_bytes=cfg.get("metadata.max.retention.bytes"),
            retention_ms=cfg.get("metadata.max.retention.ms")))
        image, result = load_image(self.mlog, MetadataImage)
        assert isinstance(image, MetadataImage)
        self.image = image
        log.info("loaded the metadata log: snapshot %s, %d records replayed, last offset %d",
                 result.snapshot.file_name if result.snapshot else "none", result.records_replayed,
                 result.last_offset)
        qs_path = self.mlog.directory / files.QUORUM_STATE
        prior = 0
        if qs_path.exists():
            prior = files.QuorumState.read(qs_path).leader_epoch
        self.epoch = max(prior, self.mlog.last_epoch) + 1
        files.QuorumState(leader_id=self.node_id, leader_epoch=self.epoch, voted_id=-1,
                          voters=list(self.voters)).write(qs_path)
        lc = recs.data_class("LeaderChangeMessage")
        voters = [lc.Voter(voter_id=v) for v in self.voters]
        last = self.mlog.append_control(
            [(ControlRecordType.LEADER_CHANGE, lc(version=0, leader_id=self.node_id, voters=voters,
                                                  granting_voters=[lc.Voter(voter_id=self.node_id)]))],
            epoch=self.epoch, timestamp=self.clock.wall_ms())
        await self.mlog.wait_committed(last)
        self._last_snapshot_ms = self.clock.monotonic_ms()
        self._build_managers()
        await self._activate()
        log.info("node %d became the active controller in epoch %d at offset %d", self.node_id, self.epoch,
                 self.mlog.end_offset - 1)

    def _build_managers(self) -> None:
        from controller.cluster import ClusterControlManager
        from controller.features import FeatureControlManager
        from controller.heartbeats import BrokerHeartbeatManager
        from controller.replication import ReplicationControlManager

        assert self.mlog is not None
        mlog = self.mlog
        self.ctx = ControllerContext(image=self.image, config=self.config, clock=self.clock, node_id=self.node_id,
                                     cluster_id=self.cluster_id, next_offset=lambda: mlog.end_offset,
                                     voters=list(self.voters))
        self.heartbeats = BrokerHeartbeatManager(self.ctx)
        self.cluster = ClusterControlManager(self.ctx, self.heartbeats)
        hb = self.heartbeats
        self.replication = ReplicationControlManager(
            self.ctx, shutting_down=lambda b: hb.controlled_shutdown_offset(b) is not None)
        self.features = FeatureControlManager(self.ctx)

    async def _activate(self) -> None:
        records = self._activation_records()
        self.active = True
        self.new_active_controllers += 1
        self.cluster.activate()
        if records:
            await self._write_records("completeActivation", records, atomic=False)
        self._start_timers()

    def _activation_records(self) -> list[tuple[Any, int]]:
        img = self.image
        migration_enabled = self.config.get("zookeeper.metadata.migration.enable")
        out: list[tuple[Any, int]] = []
        begin = recs.by_name("BeginTransactionRecord")
        end = recs.by_name("EndTransactionRecord")
        abort = recs.by_name("AbortTransactionRecord")
        zk_state = recs.by_name("ZkMigrationStateRecord")
        txn_open = img.transaction.start_offset != -1 if hasattr(img.transaction, "start_offset") else False
        if img.offset == -1 or "metadata.version" not in img.features.all_levels():
            boot = self._bootstrap_records()
            mv = next((r.feature_level for r, _ in boot if type(r).__name__ == "FeatureLevelRecord"
                       and r.name == "metadata.version"), versions.MINIMUM_BOOTSTRAP)
            txn = versions.metadata_transactions_supported(mv)
            if txn_open and txn:
                out.append((abort(reason="Controller failover"), 0))
            if txn:
                out.append((begin(name="Bootstrap records"), 0))
            out.extend(boot)
            if txn:
                out.append((zk_state(zk_migration_state=2 if migration_enabled else 0), 0))
                out.append((end(), 0))
            elif migration_enabled:
                raise FatalControllerError(f"The bootstrap metadata.version {versions.name(mv)} does not support "
                                           f"ZK migrations. Cannot continue with ZK migrations enabled.")
            log.info("Performing controller activation. The metadata log appears to be empty. Appending %d "
                     "bootstrap record(s) at metadata.version %s.", len(boot), versions.name(mv))
            return out
        mv = img.metadata_version
        if txn_open:
            out.append((abort(reason="Controller failover"), 0))
        state = img.migration.state if hasattr(img.migration, "state") else 0
        if versions.is_migration_supported(mv):
            if state == 0 and migration_enabled:
                raise FatalControllerError("Should not have ZK migrations enabled on a cluster that was created "
                                           "in KRaft mode.")
            if state == 1 and not migration_enabled:
                out.append((zk_state(zk_migration_state=3), 0))
        elif migration_enabled:
            raise FatalControllerError(f"Should not have ZK migrations enabled on a cluster running "
                                       f"metadata.version {versions.name(mv)}")
        return out

    # ==== timers ========================================================================
    def _start_timers(self) -> None:
        idle = self.config.get("metadata.max.idle.interval.ms")
        if idle > 0:
            self._tasks.append(asyncio.create_task(self._periodic(idle, self._noop_tick), name="kraftsim-noop"))
        self._tasks.append(asyncio.create_task(self._fencing_loop(), name="kraftsim-session-timeouts"))
        self._tasks.append(asyncio.create_task(self._periodic(1000, self._snapshot_tick), name="kraftsim-snapshots"))

    async def _periodic(self, period_ms: int, tick: Callable[[], Awaitable[None] | None]) -> None:
        while True:
            await self.clock.sleep_ms(period_ms)
            if not self.active:
                return
            try:
                r = tick()
                if inspect.isawaitable(r):
                    await r
            except (ApiError, EventTimeoutError):
                pass
            except FatalControllerError:
                return
            except Exception as e:  # noqa: BLE001 - a periodic task must not die silently
                log.exception("periodic task failed: %r", e)

    async def _noop_tick(self) -> None:
        if versions.is_noop_supported(self.image.metadata_version):
            await self.write("writeNoOpRecord", lambda: ControllerResult([(recs.by_name("NoOpRecord")(), 0)], None))

    async def _fencing_loop(self) -> None:
        """Fence brokers whose session expired, one per event, in last-contact order."""
        while self.active:
            now = self.clock.monotonic_ms()
            due = self.heartbeats.next_check_time()
            wait = 1000 if due is None else max(0, min(due - now, 1000))
            if wait:
                await self.clock.sleep_ms(wait)
                continue
            try:
                await self.write("maybeFenceReplicas", self._fence_one)
            except (ApiError, EventTimeoutError):
                await self.clock.sleep_ms(10)
            except FatalControllerError:
                return

    def _fence_one(self) -> ControllerResult[None]:
        result = self.cluster.fence_stale_brokers()
        return result if result is not None else ControllerResult([], None)

    def _snapshot_tick(self) -> None:
        if self._snapshot_task is None or self._snapshot_task.done():
            if self._snapshot_due():
                self._snapshot_task = asyncio.create_task(self._write_snapshot(), name="kraftsim-snapshot")

    def _snapshot_due(self, force: bool = False) -> bool:
        mlog = self.mlog
        if mlog is None or self.fatal is not None:
            return False
        if mlog.committed_offset != self.image.offset or self.image.offset < 0:
            return False  # uncommitted records are in the image; try again later
        latest = mlog.latest_snapshot()
        if latest is not None and latest.end_offset > self.image.offset:
            return False
        if getattr(self.image.transaction, "start_offset", -1) != -1:
            return False  # never snapshot inside a metadata transaction
        interval = self.config.get("metadata.log.max.snapshot.interval.ms")
        by_bytes = self._bytes_since_snapshot >= self.config.get("metadata.log.max.record.bytes.between.snapshots")
        by_time = interval > 0 and self._bytes_since_snapshot > 0 and \
            self.clock.monotonic_ms() - self._last_snapshot_ms >= interval
        return force or by_bytes or by_time

    async def _write_snapshot(self) -> None:
        """Snapshot the committed image without stopping the controller: the records are taken
        from a frozen view, then written a batch at a time between events."""
        mlog = self.mlog
        assert mlog is not None
        offset = self.image.offset
        items = self.image.frozen_records()
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self.clock.monotonic_ms()
        t0 = self.clock.monotonic_ms()
        sid = await mlog.write_snapshot_async(items, offset, self.clock.wall_ms(), self.image.last_timestamp_ms)
        mlog.apply_retention(self.clock.wall_ms())
        log.info("generated snapshot %s at offset %d in %d ms", sid.file_name, offset,
                 self.clock.monotonic_ms() - t0)

    def maybe_snapshot(self, force: bool = False) -> bool:
        """Write a snapshot of the committed image now, synchronously, if one is due (tools, tests)."""
        if not self._snapshot_due(force):
            return False
        mlog = self.mlog
        assert mlog is not None
        sid = mlog.write_snapshot(self.image.records(), self.image.offset, self.clock.wall_ms(),
                                  self.image.last_timestamp_ms)
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self.clock.monotonic_ms()
        mlog.apply_retention(self.clock.wall_ms())
        log.info("generated snapshot %s at offset %d", sid.file_name, self.image.offset)
        return True

    # ==== writes =========================================================================
    def _check_active(self) -> None:
        if self.fatal is not None or not self.active:
            raise NotControllerError()

    def submit(self, name: str, op: Callable[[], ControllerResult[T]], deadline_ms: int | None = None,
               on_timeout: Callable[[], None] | None = None) -> T | Awaitable[T]:
        """Run ``op`` as a write event; returns the response now when nothing needs to commit,
        else an awaitable of it. ApiError propagates (now or from the awaitable)."""
        r = self.queue.submit(name, self._run, deadline_ms, on_timeout, op)
        if r.__class__ is asyncio.Future:
            return self._await_nested(r)  # type: ignore[arg-type]
        return r  # type: ignore[return-value]

    async def write(self, name: str, op: Callable[[], ControllerResult[T]], deadline_ms: int | None = None) -> T:
        r = self.submit(name, op, deadline_ms)
        if inspect.isawaitable(r):
            return await r  # type: ignore[no-any-return]
        return r

    @staticmethod
    async def _await_nested(fut: asyncio.Future[Any]) -> Any:
        v = await fut
        if inspect.isawaitable(v):
            v = await v
        return v

    def _run(self, op: Callable[[], ControllerResult[T]]) -> T | Awaitable[T]:
        self._check_active()
        result = op()
        mlog = self.mlog
        assert mlog is not None
        if result.records:
            last = self._append(result.records, result.atomic)
            after = getattr(result, "after_append", None)
            if after is not None:
                after(last)
            return self._reply_after(last, result.response)  # type: ignore[arg-type]
        if mlog.committed_offset < self.image.offset:
            return self._reply_after(self.image.offset, result.response)  # type: ignore[arg-type]
        return result.response  # type: ignore[return-value]

    async def _reply_after(self, offset: int, response: T) -> T:
        mlog = self.mlog
        assert mlog is not None
        try:
            await mlog.wait_committed(offset)
        except LogFailedError as e:
            self._fail(e)
            raise NotControllerError("The controller failed to write the metadata log.") from e
        return response

    async def _write_records(self, name: str, records: list[tuple[Any, int]], atomic: bool = True) -> None:
        await self.write(name, lambda: ControllerResult(records, None, atomic))

    def _append(self, records: list[tuple[Any, int]], atomic: bool) -> int:
        """Frame, replay at the offsets they will get, then append. Returns the last offset."""
        mlog = self.mlog
        assert mlog is not None
        if atomic and len(records) > MAX_RECORDS_PER_BATCH:
            raise ApiError(ErrorCode.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")
        values = [recs.frame(r, v) for r, v in records]
        base = mlog.end_offset
        now = self.clock.wall_ms()
        replay = self.image.replay
        try:
            for i, (r, _) in enumerate(records):
                replay(r, base + i, now)
                describe = _STATE_CHANGE_LOGS.get(r.api_key())
                if describe is not None:
                    log.info("%s (offset %d)", describe(r), base + i)
        except Exception as e:
            self.metadata_errors += 1
            self._fail(e)
            raise FatalControllerError(f"replay of a record at offset {base + i} failed: {e}") from e
        try:
            _, last = mlog.append_values(values, epoch=self.epoch, timestamp=now)
        except LogFailedError as e:
            self._fail(e)
            raise NotControllerError("The controller failed to write the metadata log.") from e
        self._bytes_since_snapshot += sum(len(v) for v in values)
        return last

    def _fail(self, e: BaseException) -> None:
        if self.fatal is None:
            self.fatal = e
            self.active = False
            log.error("fatal controller fault, resigning: %r", e)
            if self.on_fatal is not None:
                self.on_fatal(e)

    def _on_event_timeout(self, name: str) -> None:
        self.timed_out_events += 1

    # ==== reads ==========================================================================
    def finalized_features(self) -> tuple[int, dict[str, int]]:
        return self.features.finalized_features() if self.features is not None else (-1, {})

    def supported_features(self) -> dict[str, tuple[int, int]]:
        return self.features.supported_features() if self.features is not None else versions.supported_features()

    def zk_migration_ready(self) -> bool:
        return bool(self.config.get("zookeeper.metadata.migration.enable"))

    # ==== metrics ========================================================================
    def _metric_values(self) -> dict[str, float]:
        img = self.image
        topics = img.topics
        cluster = img.cluster
        mlog = self.mlog
        now = self.clock.wall_ms()
        return {
            "ActiveBrokerCount": cluster.active_count,
            "ActiveControllerCount": 1 if self.active else 0,
            "FencedBrokerCount": cluster.fenced_count,
            "GlobalTopicCount": topics.topic_count,
            "GlobalPartitionCount": topics.partition_count,
            "OfflinePartitionsCount": topics.offline_partition_count,
            "PreferredReplicaImbalanceCount": topics.preferred_replica_imbalance_count,
            "MetadataErrorCount": self.metadata_errors,
            "LastAppliedRecordOffset": img.offset,
            "LastCommittedRecordOffset": mlog.committed_offset if mlog else -1,
            "LastAppliedRecordTimestamp": img.last_timestamp_ms,
            "LastAppliedRecordLagMs": max(0, now - img.last_timestamp_ms) if img.last_timestamp_ms else 0,
            "TimedOutBrokerHeartbeatCount": self.timed_out_heartbeats,
            "NewActiveControllersCount": self.new_active_controllers,
            "ZkMigrationState": getattr(img.migration, "state", 0),
            "MigratingZkBrokerCount": cluster.migrating_zk_count,
            "EventQueueOperationsTimedOutCount": self.timed_out_events,
        }

    # ==== shutdown =======================================================================
    async def stop(self) -> None:
        self.active = False
        if self._snapshot_task is not None:
            self._tasks.append(self._snapshot_task)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        self.queue.close()
        if self.mlog is not None:
            try:
                if self.fatal is None:
                    self.mlog.commit_now()
            finally:
                self.mlog.close()
        self._stopped.set()

"""The controller core: one event queue, one writer, records as the only state change.

A write operation runs as an event that reads the image and returns (records, response)
without mutating anything. The core hands the records to the write path (frame, cap, replay at
append, append through the Raft leader) and answers only once they are committed, as Kafka's
QuorumController answers after commit. An operation that writes nothing answers at once, unless
earlier writes are still uncommitted, in which case it waits for them, so nobody is told about
state that could still be lost. If a write can no longer commit (the log failed, or this node
stopped leading), the image is reverted to the committed offset: it never serves state that was
not durable.

Start-up: lock the metadata log directory (``metadata.dirlock``, held until stop), load the
newest snapshot and the log (``metadata.loader``), and start the Raft node (``raft.client``)
on ``controller.quorum.voters``. The controller follows what the node reports, as Kafka's
QuorumController follows its Raft listener:

- a standby (any node but the leader) replays the log as it is committed, up to the high
  watermark (and what its disk has flushed); it answers controller requests NOT_CONTROLLER,
  naming the leader, and the read-only ones from what it has replayed, as Kafka's standbys do;
- elected, it becomes the active controller once its replay reaches the start of its epoch
  (the LeaderChange record it opened the epoch with is committed), then appends the activation
  records (``controller.activation``); a lone voter is elected at start-up, and its start-up
  returns once it is active;
- when another node leads, or this one resigned, it renounces: the writes not yet committed are
  taken back out of the image and their requests answered NOT_CONTROLLER; whatever of them the
  new leader has is committed by it, and replayed here like any other committed record.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kraftsim.controller.activation import ActivationError, activation_records
from kraftsim.controller.configs.server_config import Config
from kraftsim.controller.context import ControllerContext
from kraftsim.controller.control_managers import ControlManagers
from kraftsim.controller.errors import FatalControllerError, HandlerFaultError
from kraftsim.controller.event_queue import EventQueue, EventTimeoutError
from kraftsim.controller.leader_balancer import LeaderBalancer
from kraftsim.controller.managers.acls import STANDARD_AUTHORIZER
from kraftsim.controller.managers.controller_registrations import endpoint
from kraftsim.controller.managers.features import java_supported_order
from kraftsim.controller.metrics import ControllerMetrics
from kraftsim.controller.periodic_tasks import PeriodicTasks
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.self_registration import SelfRegistration
from kraftsim.controller.snapshotter import Frozen, Snapshotter
from kraftsim.controller.state_change_log import log_state_changes
from kraftsim.controller.write_path import EmptyAppendError, ReplayFailedError, WritePath
from kraftsim.metadata import files
from kraftsim.metadata.authorizer.standard_authorizer import StandardAuthorizer
from kraftsim.metadata.batch import ControlRecordType
from kraftsim.metadata.dirlock import DirectoryLock, lock_directory
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.image.migration import ZkMigrationState
from kraftsim.metadata.loader import LoadError, LoadResult, load_image, replay_batches
from kraftsim.metadata.log import LogConfig, Marked, MetadataLog
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.metadata.segments import CorruptLogError, LogFailedError
from kraftsim.metadata.snapshots import SnapshotId
from kraftsim.raft.client import NotLeaderError, RaftClient
from kraftsim.raft.core.config import QuorumConfig
from kraftsim.raft.core.events import LeaderChange
from kraftsim.raft.core.state_store import FileQuorumStateStore
from kraftsim.raft.core.voter_history import VoterSetHistory
from kraftsim.raft.core.voters import Address, Endpoints, VoterSet
from kraftsim.raft.dynamic_voters import read_history
from kraftsim.rpc import uuids
from kraftsim.rpc.api_errors import ApiError, NotControllerError
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.clock import Clock, SystemClock
from kraftsim.rpc.dispatch import LaterAnswer, RequestContext
from kraftsim.rpc.loop import ArrivalClock
from kraftsim.rpc.message import Message

log = logging.getLogger("kraftsim.controller")

T = TypeVar("T")
Req = TypeVar("Req", bound=Message)

# KafkaRaftClient's snapshotCleaner: KafkaMetadataLog.maybeClean runs this often, from the start.
LOG_CLEAN_INTERVAL_MS = 60_000

# Kafka's RUNS_IN_PREMIGRATION: while the persisted migration state is PRE_MIGRATION (the
# ZooKeeper metadata is not copied yet), every other write event fails with NOT_CONTROLLER.
RUNS_IN_PREMIGRATION = frozenset({
    "completeActivation", "processBrokerRegistration", "processBrokerHeartbeat", "unregisterBroker",
    "registerController", "writeNoOpRecord",
    "Begin ZK Migration Transaction", "ZK Migration Batch", "Complete ZK Migration",  # the copy
    # Kafka's read events and the requests ControllerApis answers without an event: never gated.
    "describeAcls", "describeCluster", "describeConfigs", "listPartitionReassignments",
})
PRE_MIGRATION_MESSAGE = "The controller is in pre-migration mode."
# Kafka's read events and the requests ControllerApis answers outside the event queue's active
# check: a standby controller answers them too, from what it has replayed.
READS_ON_ANY_CONTROLLER = frozenset({"describeAcls", "describeCluster", "describeConfigs",
                                     "listPartitionReassignments"})
# How long a clean stop waits for another voter to take over (Kafka's Raft client shutdown).
RAFT_SHUTDOWN_TIMEOUT_MS = 5_000


@dataclass(frozen=True, slots=True)
class StartingQuorum:
    """What the Raft node is built with (QuorumController.quorum_from_log)."""

    voters: VoterSet  # the static set (controller.quorum.voters); none for a dynamic quorum
    history: VoterSetHistory  # the voter sets and kraft.version the log holds, seeded from the log
    listeners: Endpoints | None  # this node's own listeners (None: its entry in a static set)
    bootstrap: dict[int, Address] | None  # controller.quorum.bootstrap.servers by Kafka's ids


class MigrationService(Protocol):
    """What the controller needs of the ZooKeeper migration driver (``migration.runner``): a
    task per activation, the batches the write path appends, and its state for metrics and
    ``/migration``. The process that runs the controller hands it a factory when
    ``zookeeper.metadata.migration.enable`` is set."""

    async def run(self) -> None: ...

    def note_batch(self, records: list[RecordAndVersion], base: int) -> None: ...

    def write_behind_lag(self) -> int: ...

    def status(self) -> dict[str, Any]: ...


class QuorumController:
    def __init__(self, config: Config, clock: Clock | None = None,
                 migration: Callable[[QuorumController], MigrationService] | None = None) -> None:
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.node_id = config.node_id
        # Kafka's QuorumFeatures.quorumNodeIds: controller.quorum.voters' ids, fixed at start (none
        # for a dynamic quorum); the voters the Raft layer counts are :attr:`voters`.
        self.quorum_node_ids = [v[0] for v in config.get("controller.quorum.voters")]
        self.release = config.release  # the Kafka release this controller is
        self.image = MetadataImage(release=self.release)
        self.mlog: MetadataLog | None = None
        self.dir_lock: DirectoryLock | None = None
        self.raft: RaftClient | None = None
        self.writer: WritePath | None = None
        self.snapshots: Snapshotter | None = None
        self.cluster_id = ""
        self.directory_id: str | None = None
        self.epoch = 0  # the Raft epoch, as last announced
        self.leader_id: int | None = None  # the Raft leader of that epoch, when known
        self.active = False
        self._stopping = False  # stop() began: nothing replays or activates any more
        # (epoch, its start offset) once this node is elected and until it is active or renounces.
        self._claim: tuple[int, int] | None = None
        # The last log offset (data or control) the image reflects: a standby replays from here.
        self._applied_offset = -1
        self._reload_needed = False  # the log changed under the image (a cut tail, a fetched snapshot)
        self._features_published = False  # the FinalizedFeaturesEpoch of the first activation set
        self._active_once: asyncio.Future[None] | None = None  # start-up of a lone voter waits on it
        self.fatal: BaseException | None = None
        self.fault_reason = ""
        self.metadata_errors = 0
        self.new_active_controllers = 0
        self.timed_out_events = 0
        self.metrics = ControllerMetrics(self._metric_values)
        self.queue = EventQueue(self.clock, self.metrics.queue_time, self.metrics.processing_time,
                                self._on_event_timeout)
        self.arrival = ArrivalClock(self.clock)  # bound to the serving loop in start()
        # Lane answers waiting for a commit: (offset, answer, its frame, the frame if the log fails).
        self._after_commit_answers: deque[tuple[int, LaterAnswer, bytearray, bytearray]] = deque()
        self._tasks: list[asyncio.Task[object]] = []  # cancelled and awaited at stop; results unused
        self._snapshot_task: asyncio.Task[SnapshotId | None] | None = None
        self._cleaner: asyncio.Task[None] | None = None
        self._deletions: list[asyncio.Task[None]] = []
        self.ctx: ControllerContext | None = None
        self._managers: ControlManagers | None = None
        self._new_migration = migration
        self.migration: MigrationService | None = None  # this activation's migration driver, when enabled
        self.registration = SelfRegistration(self)  # this controller's own (KIP-919)
        self.periodic_tasks = PeriodicTasks(self)  # the active controller's timers
        self.on_fatal: Callable[[BaseException], None] | None = None
        # The leader balancer, as Kafka's ControllerServer reads its configs once: the check
        # interval, or None when auto.leader.rebalance.enable=false (no balancing at all).
        self.balancer = LeaderBalancer(self, config.get("leader.imbalance.check.interval.seconds") * 1000
                                       if config.get("auto.leader.rebalance.enable") else None)
        # What ``_finish`` calls after every write event (Kafka reschedules the balancer after
        # each): the balancer's own method, bound once, so the call costs what a method's does.
        self._maybe_schedule_balance: Callable[[], None] = self.balancer.maybe_schedule

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

    def _lock_metadata_dir(self) -> None:
        """Own the metadata log directory before reading or writing anything in it, as Kafka's
        RaftManager locks a controller's metadata.log.dir (its only directory: a controller
        writes no other)."""
        if not self.metadata_dir.is_dir():
            raise files.StorageError(f"No meta.properties found in {self.metadata_dir} (have you run "
                                     f"`kraftsim format` to format the directory?)")
        self.dir_lock = lock_directory(self.metadata_dir)

    def quorum_from_log(self, mlog: MetadataLog) -> StartingQuorum:
        """The quorum this node starts in. A log holding a VotersRecord (a dynamic quorum,
        KIP-853: in the bootstrap snapshot ``format --standalone`` or ``--initial-controllers``
        wrote, a later snapshot, or the log) is the quorum, at the log's kraft.version, and this
        node's listeners are its own controller listeners; otherwise ``controller.quorum.voters``
        at kraft.version 0, or, with only ``controller.quorum.bootstrap.servers`` (a node
        formatted with ``--no-initial-controllers``), no voters: this node is an observer until
        the log it fetches says otherwise. Bootstrap servers get Kafka's ids (-2, -3, ...)."""
        cfg = self.config
        name, host, port = cfg.controller_listener
        servers = cfg.get("controller.quorum.bootstrap.servers")
        bootstrap = {-2 - i: Address(h, p) for i, (h, p) in enumerate(servers)} if servers else None
        static = self.voter_set() if cfg.get("controller.quorum.voters") or not servers else VoterSet(())
        history = read_history(mlog, static)
        own = Endpoints({name: Address(host, port)}) if history.latest_entry() is not None or not static.ids() else None
        return StartingQuorum(static, history, own, bootstrap)

    def voter_set(self) -> VoterSet:
        """``controller.quorum.voters`` (a static quorum); with none (a configuration the
        server.properties checks refuse, built by hand), this node alone at its controller
        listener."""
        listener = self.config.controller_listener
        voters = self.config.get("controller.quorum.voters")
        if not voters:
            return VoterSet.static({self.node_id: Address(listener[1], listener[2])}, listener[0])
        return VoterSet.static({node: Address(host, port) for node, host, port in voters}, listener[0])

    def quorum_config(self) -> QuorumConfig:
        cfg = self.config
        return QuorumConfig(election_timeout_ms=cfg.get("controller.quorum.election.timeout.ms"),
                            fetch_timeout_ms=cfg.get("controller.quorum.fetch.timeout.ms"),
                            election_backoff_max_ms=cfg.get("controller.quorum.election.backoff.max.ms"),
                            request_timeout_ms=cfg.get("controller.quorum.request.timeout.ms"),
                            retry_backoff_ms=cfg.get("controller.quorum.retry.backoff.ms"),
                            append_linger_ms=cfg.get("controller.quorum.append.linger.ms"))

    async def start(self) -> None:
        self._lock_metadata_dir()
        self.arrival = ArrivalClock(self.clock)
        mp = self._read_meta_properties()
        self.cluster_id = mp.cluster_id
        self.directory_id = mp.directory_id
        cfg = self.config
        # The log's own flush does not linger: the Raft node lingers before it writes.
        mlog = self.mlog = MetadataLog.open(self.metadata_dir, LogConfig(
            segment_bytes=cfg.get("metadata.log.segment.bytes"), linger_ms=0,
            retention_bytes=cfg.get("metadata.max.retention.bytes"),
            retention_ms=cfg.get("metadata.max.retention.ms")))
        # An open metadata transaction is kept (journaled): activation aborts it, as Kafka's does.
        # Replay refuses a FeatureLevelRecord outside this node's QuorumFeatures, as Kafka's does:
        # the ranges unstable.feature.versions.enable gives, not what ApiVersions advertises.
        image, result = load_image(mlog, self._new_image, open_transaction="keep")
        self.image = image
        self._applied_offset = result.last_offset
        log.info("loaded the metadata log: snapshot %s, %d records replayed, last offset %d",
                 result.snapshot.file_name if result.snapshot else "none", result.records_replayed,
                 result.last_offset)
        directory = uuids.from_str(mp.directory_id) if mp.directory_id else uuid.UUID(int=0)
        self._active_once = asyncio.get_running_loop().create_future()
        quorum = self.quorum_from_log(mlog)
        raft = self.raft = RaftClient(
            node_id=self.node_id, directory_id=directory, cluster_id=self.cluster_id, voters=quorum.voters,
            listener_name=cfg.controller_listener[0], mlog=mlog,
            store=FileQuorumStateStore(mlog.directory / files.QUORUM_STATE), config=self.quorum_config(),
            clock=self.clock, voter_history=quorum.history,
            listeners=quorum.listeners, bootstrap=quorum.bootstrap,
            supported_kraft_versions=self.release.supported_features().get("kraft.version", (0, 0)),
            # Vote v2 from 4.0 (a pre-vote: such a release asks before it stands); Fetch v18 from
            # 4.1 (the fetcher's high watermark).
            speaks={ApiKey.FETCH: self.release.apis[ApiKey.FETCH], ApiKey.VOTE: self.release.apis[ApiKey.VOTE]},
            pre_vote=self.release.apis[ApiKey.VOTE][1] >= 2,
            candidate_backoff=self.release.line in ("3.9", "4.0"))  # 4.1 dropped it (pre-vote costs no epoch)
        raft.on_leader_change.append(self._on_leader_change)
        raft.on_commit.append(self._on_commit)
        raft.on_resign.append(self._on_resign)
        raft.on_failure.append(self._fail)
        raft.log.on_truncate.append(self._on_log_truncated)
        raft.log.on_snapshot.append(self._on_snapshot_fetched)
        raft.log.on_marked.append(self._delete_marked_later)
        mlog.on_flush.append(self._on_flush)
        writer = self.writer = WritePath(image, raft, self.clock, [log_state_changes])
        # The snapshots' byte count starts after what the log holds now (the election's
        # LeaderChange included, for a lone voter).
        self.snapshots = Snapshotter(image, mlog, self.clock, cfg.get("metadata.log.max.record.bytes.between.snapshots"),
                                     cfg.get("metadata.log.max.snapshot.interval.ms"), mlog.end_offset - 1)
        # Kafka's Raft client cleans its log every minute from its start, leader or not.
        self._cleaner = asyncio.create_task(self._clean_log_every_minute(), name="kraftsim-log-cleaner")
        if mlog.marked_at_open:
            self._delete_marked_later(mlog.marked_at_open)
        self.snapshots.on_fault = self._count_fault
        self._build_managers()
        writer.listeners.append(self.managers.features.note_batch)
        raft.start()
        if raft.is_only_voter:
            # A lone voter has elected itself: it serves once it is active, as before any request.
            await asyncio.shield(self._active_once)
            if self.fatal is not None:
                raise FatalControllerError(str(self.fatal))

    def _new_image(self) -> MetadataImage:
        release = self.release
        return MetadataImage(release.supported_features(bool(self.config.get("unstable.feature.versions.enable"))),
                             release)

    def _build_managers(self) -> None:
        raft = self.raft
        assert raft is not None
        self.ctx = ControllerContext(image=self.image, config=self.config, clock=self.clock, node_id=self.node_id,
                                     cluster_id=self.cluster_id, next_offset=lambda: raft.end_offset,
                                     voters=list(self.quorum_node_ids), voter_ids=lambda: self.voters,
                                     leader_id=lambda: self.leader_id, kraft_version=lambda: self.kraft_version,
                                     kraft_upgrade_records=self._kraft_upgrade_records)
        if self.config.get("authorizer.class.name").strip() == STANDARD_AUTHORIZER:
            ctx = self.ctx
            self.ctx.authorizer = StandardAuthorizer(lambda: ctx.image.acls, self.config.get("super.users"),
                                                     self.config.get("allow.everyone.if.no.acl.found"))
        self._managers = ControlManagers.build(self.ctx, self.zk_migration_ready())

    def _kraft_upgrade_records(self, level: int) -> list[tuple[ControlRecordType, Message]]:
        """What Kafka's Raft client writes when kraft.version is upgraded (4.1+): the new level,
        then the voter set, until now static, as a VotersRecord (this voter: its directory id,
        its listeners, the kraft.version range its software supports)."""
        from kraftsim.metadata.messages import KRaftVersionRecord, VotersRecord
        from kraftsim.rpc import uuids

        lo, hi = self.release.supported_features().get("kraft.version", (0, 0))
        voter = VotersRecord.Voter(
            voter_id=self.node_id,
            voter_directory_id=uuids.from_str(self.directory_id) if self.directory_id else uuids.ZERO,
            endpoints=[VotersRecord.Endpoint(name=e.name, host=e.host, port=e.port)
                       for e in self.managers.controllers.local.listeners],
            kraft_version_feature=VotersRecord.KRaftVersionFeature(min_supported_version=lo, max_supported_version=hi))
        return [(ControlRecordType.KRAFT_VERSION, KRaftVersionRecord(version=0, kraft_version=level)),
                (ControlRecordType.KRAFT_VOTERS, VotersRecord(version=0, voters=[voter]))]

    @property
    def voters(self) -> list[int]:
        """The voter ids the Raft layer counts now: the latest set of its voter-set history (the
        one owner of the quorum's voters), following an add or remove as soon as it is in the
        log; ``controller.quorum.voters`` before the Raft layer starts."""
        raft = self.raft
        return sorted(raft.node.history.latest().ids()) if raft is not None else list(self.quorum_node_ids)

    @property
    def kraft_version(self) -> int:
        """The finalized kraft.version, the Raft layer's (its history's latest KRaftVersionRecord,
        committed or not, as Kafka's RaftClient.kraftVersion() that ApiVersions, DescribeFeatures
        and BrokerRegistration read); 0 before the Raft layer starts."""
        raft = self.raft
        return raft.node.history.kraft_version() if raft is not None else 0

    @property
    def managers(self) -> ControlManagers:
        """The control managers, from start-up on."""
        m = self._managers
        if m is None:
            raise RuntimeError("the controller has not started")
        return m

    # ==== following the Raft node ========================================================
    def _on_leader_change(self, change: LeaderChange) -> None:
        """QuorumMetaLogListener.handleLeaderChange, told of every new epoch at once (Kafka tells
        the new leader only once its replay reached the epoch start: :meth:`_maybe_activate`
        waits for that here)."""
        self.epoch = change.epoch
        self.leader_id = change.leader_id
        if change.leader_id is not None:
            self.new_active_controllers += 1
        if change.leader_id == self.node_id:
            assert change.epoch_start_offset is not None
            if self.active:
                log.warning("we were the leader in epoch %d, and are still the leader in the new epoch %d",
                            self.epoch, change.epoch)
            self._claim = (change.epoch, change.epoch_start_offset)
            self._maybe_activate()
            return
        if self.active or self._claim is not None:
            log.warning("renouncing the leadership due to a metadata log event: in the new epoch %d, the leader "
                        "is %s; reverting to the last committed offset %d", change.epoch,
                        "(none)" if change.leader_id is None else change.leader_id, self._committed_offset())
            self._deactivate()
        else:
            log.info("in the new epoch %d, the leader is %s", change.epoch,
                     "(none)" if change.leader_id is None else change.leader_id)
        self.registration.maybe_register()

    def _on_resign(self) -> None:
        """The Raft node no longer leads its epoch (it resigned: a fault, a shutdown, or a
        majority that stopped fetching) and no new leader is known yet."""
        if self.active or self._claim is not None:
            log.warning("renouncing the leadership: this node resigned from epoch %d; reverting to the last "
                        "committed offset %d", self.epoch, self._committed_offset())
            self._deactivate()

    def _on_commit(self, offset: int) -> None:
        if self.active:
            self.image.commit(offset)
            self._after_commit(offset)
            return
        self._catch_up()
        self._maybe_activate()

    def _on_flush(self, offset: int) -> None:
        """A standby replays only what its own disk holds; a flush may release more."""
        if not self.active and self.raft is not None and self.raft.committed_offset > self._applied_offset:
            self._catch_up()
            self._maybe_activate()

    def _on_log_truncated(self, end: int) -> None:
        """A divergent tail was cut: if the image holds any of it (this node loaded its whole log
        at start-up), it is rebuilt from what is committed."""
        if end <= self._applied_offset:
            log.warning("the log was cut at offset %d, below what the image holds (%d): reloading it", end,
                        self._applied_offset)
            self._reload_needed = True

    def _on_snapshot_fetched(self, sid: SnapshotId) -> None:
        log.info("the log now starts at the fetched snapshot %s: reloading the image from it", sid.file_name)
        self._reload_needed = True

    def _committed_offset(self) -> int:
        return self.raft.committed_offset if self.raft is not None else -1

    def _catch_up(self) -> None:
        """A standby's replay: every batch committed and flushed here, from where the image is."""
        mlog, raft = self.mlog, self.raft
        if mlog is None or raft is None or self.fatal is not None or self.active or self._stopping:
            return
        target = min(raft.committed_offset, mlog.flushed_offset)
        if self._reload_needed:
            self._reload(target)
            # A fetched snapshot's metadata.version may allow the registration, and nothing may be
            # committed after it: Kafka's registration manager is told of a snapshot load too.
            self.registration.maybe_register()
            return
        if target <= self._applied_offset:
            return
        result = LoadResult(None, self._applied_offset, 0, kraft_version=self.kraft_version)
        try:
            replay_batches(self.image, mlog.batches_between(self._applied_offset + 1, target), self._applied_offset + 1,
                           result)
        except (LoadError, CorruptLogError, OSError) as e:
            # Kafka halts on a replay that fails, on a standby as on the leader.
            self._fail(FatalControllerError(f"replaying the committed log failed: {e}"))
            return
        self._applied_offset = result.last_offset
        self._published(result.last_offset)
        self.registration.maybe_register()  # metadata.version may just allow it, or our record be in

    def _reload(self, target: int) -> None:
        """The image again, from the latest snapshot and the log up to ``target``."""
        mlog = self.mlog
        assert mlog is not None
        self._reload_needed = False
        try:
            image, result = load_image(mlog, self._new_image, open_transaction="keep", last_offset=target)
        except (LoadError, CorruptLogError, OSError) as e:
            self._fail(FatalControllerError(f"reloading the metadata image failed: {e}"))
            return
        self._set_image(image)
        self._applied_offset = result.last_offset
        log.info("reloaded the metadata image: snapshot %s, %d records replayed, last offset %d",
                 result.snapshot.file_name if result.snapshot else "none", result.records_replayed,
                 result.last_offset)

    def _set_image(self, image: MetadataImage) -> None:
        self.image = image
        if self.ctx is not None:
            self.ctx.image = image
        if self.writer is not None:
            self.writer.image = image
        if self.snapshots is not None:
            self.snapshots.image = image

    def _published(self, offset: int) -> None:
        """What Kafka's metadata loader publishes to its SnapshotGenerator, on every node."""
        snaps = self.snapshots
        if snaps is not None and self.fatal is None:
            reason = snaps.published(offset)
            if reason is not None:
                log.info("creating a new snapshot at offset %d because %s", self.image.offset, reason)
                self._write_snapshot(snaps.freeze())

    def _maybe_activate(self) -> None:
        """Claim the epoch this node was elected for once its LeaderChange record is committed
        and the image has replayed everything before it (Kafka's listener catching up to the
        epoch start before handleLeaderChange names this node)."""
        claim, raft = self._claim, self.raft
        if claim is None or self.active or self.fatal is not None or raft is None or self._stopping:
            return
        epoch, start = claim
        if raft.committed_offset < start:
            return
        self._catch_up()
        if self._applied_offset < start or self._claim != claim:
            return
        self._claim = None
        self.epoch = epoch
        log.info("becoming the active controller at epoch %d, next write offset %d", epoch, raft.end_offset)
        try:
            records = activation_records(self.image, self.metadata_dir,
                                         self.config.get("zookeeper.metadata.migration.enable"))
        except (ActivationError, files.StorageError) as e:  # the latter: a bootstrap this release cannot run
            self._fail(FatalControllerError(str(e)))
            return
        if not self._features_published:
            # Kafka's first publish after a restart covers the log up to the new epoch's
            # LeaderChange: that is the FinalizedFeaturesEpoch until features change again (on an
            # empty log, the bootstrap records' batch). A later leader change in the same process
            # publishes no features: the epoch stays.
            self._features_published = True
            if self.image.features.metadata_version is not None:
                self.managers.features.epoch = start
        # Active from here (Kafka's claim), so that a renouncement from now on undoes it.
        self.active = True
        self.managers.cluster.activate()
        self._tasks.append(asyncio.create_task(self._activate(records), name="kraftsim-activation"))

    async def _activate(self, records: list[RecordAndVersion]) -> None:
        """Kafka's completeActivation event: the activation records, then the periodic work."""
        if records:
            try:
                await self.write("completeActivation", lambda: ControllerResult(records, None, False))
            except (ApiError, HandlerFaultError, FatalControllerError, EventTimeoutError) as e:
                log.warning("the activation records were not committed (%s): not the active controller", e)
                return
        if not self.active:
            return
        # CompleteActivationEvent.processBatchEndOffset: the periodic work is scheduled afresh,
        # the leader balancer first (an imbalance loaded from the log waits one interval).
        self.balancer.maybe_schedule()
        self._tasks += self.periodic_tasks.start()
        self.registration.maybe_register()
        self._start_migration()
        log.info("node %d became the active controller in epoch %d at offset %d", self.node_id, self.epoch,
                 self.image.offset)
        if self._active_once is not None and not self._active_once.done():
            self._active_once.set_result(None)

    def _deactivate(self) -> None:
        """Kafka's renounce, but for the Raft resignation (the caller's, when it is to be):
        every write waiting for its commit is answered NOT_CONTROLLER, what was applied and not
        committed is taken back out of the image, the soft state and the periodic work go. The
        image then follows the committed log like any standby's."""
        self._claim = None
        if not self.active:
            return
        self.active = False
        self.managers.cluster.deactivate()
        self.balancer.cancel()
        current = asyncio.current_task()
        for t in self._tasks:
            if t is not current:
                t.cancel()
        self._tasks = [t for t in self._tasks if t is current]
        self.migration = None
        waiting = self._after_commit_answers
        while waiting:
            _, answer, _, failed = waiting.popleft()
            answer.ready(failed)
        raft = self.raft
        assert raft is not None
        raft.abandon_waiters()
        committed = raft.committed_offset
        if self.image.journaling:
            try:
                self.image.revert_to(max(committed, self.image.revertible_from()))
            except ValueError as e:
                self._fail(FatalControllerError(f"could not revert the image to the committed offset: {e}"))
                return
        self._applied_offset = committed
        self._catch_up()

    def _start_migration(self) -> None:
        """With zookeeper.metadata.migration.enable, each activation runs a migration driver
        (Kafka's KRaftMigrationDriver on the active controller)."""
        if self._new_migration is None:
            return
        self.migration = self._new_migration(self)
        if self.writer is not None and self._note_migration_batch not in self.writer.listeners:
            self.writer.listeners.append(self._note_migration_batch)
        self._tasks.append(asyncio.create_task(self.migration.run(), name="kraftsim-migration-driver"))

    def _note_migration_batch(self, records: list[RecordAndVersion], base: int) -> None:
        if self.migration is not None:
            self.migration.note_batch(records, base)

    # ==== what this controller's own registration hears of (``self_registration.py``) ==========
    def set_listeners(self, listeners: list[tuple[str, str, int, str]]) -> None:
        """The bound listeners (name, host, port, security protocol), once the server listens:
        the registration carries the real port, as Kafka corrects ephemeral ports."""
        self.managers.controllers.local.listeners = [endpoint(*lst) for lst in listeners]
        self.registration.maybe_register()

    def _after_commit(self, offset: int) -> None:
        waiting = self._after_commit_answers
        while waiting and waiting[0][0] <= offset:
            _, answer, data, _ = waiting.popleft()
            answer.ready(data)
        self.registration.maybe_register()  # metadata.version may just have reached 3.7-IV0
        self._published(offset)  # the loader publishes each commit to the SnapshotGenerator

    # ==== snapshots and the log's retention =============================================
    def snapshot(self, force: bool = True) -> asyncio.Task[SnapshotId | None] | None:
        """Start writing a snapshot of the committed image if one is due (always when forced
        and possible); returns the task writing it, or None."""
        snaps = self.snapshots
        if snaps is None or self.raft is None or self.fatal is not None:
            return None
        if self._snapshot_task is not None and not self._snapshot_task.done():
            return None
        if not snaps.due(force):
            return None
        return self._write_snapshot(snaps.freeze())

    def _write_snapshot(self, frozen: Frozen | None) -> asyncio.Task[Any] | None:
        snaps, raft = self.snapshots, self.raft
        if snaps is None or raft is None:
            return None
        snaps.writing = True  # from now, not only once the task runs: no second one is scheduled meanwhile
        self._snapshot_task = asyncio.create_task(snaps.write(self.queue, raft, frozen), name="kraftsim-snapshot")
        return self._snapshot_task

    async def _clean_log_every_minute(self) -> None:
        """Kafka's RaftMetadataLogCleanerManager: a minute after start and every minute after,
        KafkaMetadataLog.maybeClean; what it marked is deleted after the file delete delay."""
        while True:
            await self.clock.sleep_ms(LOG_CLEAN_INTERVAL_MS)
            self.clean_log()

    def clean_log(self) -> asyncio.Task[None] | None:
        """One pass of the log's retention; returns the task that deletes what it marked."""
        mlog, raft = self.mlog, self.raft
        if mlog is None or raft is None or mlog.failed is not None:
            return None
        try:
            marked = mlog.maybe_clean(self.clock.wall_ms(), raft.high_watermark)
        except OSError as e:  # Kafka's cleaner logs it and tries again in a minute
            log.error("had an error during log cleaning: %s", e)
            return None
        if not marked:
            return None
        task = asyncio.create_task(self._delete_later(mlog, marked), name="kraftsim-delete-marked-files")
        self._deletions.append(task)
        return task

    def _delete_marked_later(self, marked: Marked) -> None:
        mlog = self.mlog
        assert mlog is not None
        self._deletions.append(asyncio.create_task(self._delete_later(mlog, marked), name="kraftsim-delete-marked-files"))

    async def _delete_later(self, mlog: MetadataLog, marked: Marked) -> None:
        await self.clock.sleep_ms(mlog.config.file_delete_delay_ms)
        try:
            mlog.delete_marked(marked)
        except OSError as e:  # what is left is deleted at the next start
            log.error("could not delete %s: %s", marked, e)
        finally:
            self._deletions.remove(asyncio.current_task())  # type: ignore[arg-type]

    # ==== writes =========================================================================
    def submit(self, name: str, op: Callable[[], ControllerResult[T]], deadline_ms: int | None = None,
               on_timeout: Callable[[], None] | None = None) -> T | Awaitable[T]:
        """Run ``op`` as a write event; returns the response now when nothing needs to commit,
        else an awaitable of it. ApiError propagates (now or from the awaitable)."""
        if name not in RUNS_IN_PREMIGRATION:
            op = self._unless_pre_migration(op)
        r = self.queue.submit(name, self._run, deadline_ms, on_timeout, op)
        if r.__class__ is asyncio.Future:
            return self.await_nested(r)
        return r  # type: ignore[return-value]

    async def write(self, name: str, op: Callable[[], ControllerResult[T]], deadline_ms: int | None = None) -> T:
        r = self.submit(name, op, deadline_ms)
        if inspect.isawaitable(r):
            return await r
        return r

    async def write_records(self, name: str, records: list[RecordAndVersion]) -> int:
        """Append ``records`` in one write event, not atomic (the ZooKeeper migration's copy,
        Kafka's ZkRecordConsumer.acceptBatch); the offset of the last, once committed."""
        raft = self.raft
        assert raft is not None
        last: list[int] = []

        def op() -> ControllerResult[None]:
            last.append(raft.end_offset + len(records) - 1)  # where the write path will put them
            return ControllerResult(list(records), None, atomic=False)

        await self.write(name, op)
        return last[0]

    def _unless_pre_migration(self, op: Callable[[], ControllerResult[T]]) -> Callable[[], ControllerResult[T]]:
        """The pre-migration check, made when the event runs (after the active-controller check)."""
        def gated() -> ControllerResult[T]:
            if self.image.migration.state == ZkMigrationState.PRE_MIGRATION:
                raise NotControllerError(PRE_MIGRATION_MESSAGE)
            return op()
        return gated

    @staticmethod
    async def await_nested(fut: Awaitable[T | Awaitable[T]]) -> T:
        """The answer of a queued event: its future's value, or what that value (a reply
        after commit) gives when awaited."""
        v = await fut
        if inspect.isawaitable(v):
            v = await v
        return v

    def not_controller(self) -> NotControllerError:
        """What a write to a controller that is not active gets: Kafka's message naming the
        leader (newWrongControllerException)."""
        leader = self.leader_id
        if leader is None or leader == self.node_id:
            return NotControllerError()
        return NotControllerError(f"The active controller appears to be node {leader}.")

    def _run(self, op: Callable[[], ControllerResult[T]]) -> T | Awaitable[T]:
        if self.fatal is not None or not self.active:
            raise self.not_controller()
        try:
            result = op()
        except ApiError:
            raise
        except Exception as e:
            self._handler_fault(e)
            raise HandlerFaultError(str(e)) from e
        return self._finish(result)

    def run_request(self, handler: Callable[[Req, RequestContext], ControllerResult[T]], request: Req,
                    ctx: RequestContext, gated: bool) -> T | Awaitable[T]:
        """``_run`` of ``handler(request, ctx)`` (a route's event, see ``controller_apis.py``), with the
        pre-migration gate when ``gated``: the request path submits this with its arguments,
        building no closure, and when it writes nothing and waits for no commit the answer is
        returned inline (no future, no task)."""
        if self.fatal is not None or not self.active:
            raise self.not_controller()
        try:
            if gated and self.image.migration.state == ZkMigrationState.PRE_MIGRATION:
                raise NotControllerError(PRE_MIGRATION_MESSAGE)
            result = handler(request, ctx)
        except ApiError:
            raise
        except Exception as e:
            self._handler_fault(e)
            raise HandlerFaultError(str(e)) from e
        if result.records:
            return self._finish(result)
        raft = self.raft
        assert raft is not None
        if raft.committed_offset < self.image.offset:
            return self._reply_after(self.image.offset, result.response)  # type: ignore[arg-type]
        return result.response  # type: ignore[return-value]

    def run_read(self, handler: Callable[[Req, RequestContext], ControllerResult[T]], request: Req,
                 ctx: RequestContext, gated: bool) -> T | Awaitable[T]:
        """A read event (``READS_ON_ANY_CONTROLLER``): :meth:`run_request` on the active
        controller; on a standby, answered from what it has replayed (committed), as Kafka's
        read events run on any controller."""
        if self.active or self.fatal is not None:
            return self.run_request(handler, request, ctx, gated)
        try:
            result = handler(request, ctx)
        except ApiError:
            raise
        except Exception as e:
            self.metadata_errors += 1
            log.error("read event failed with %s on a standby controller: %s", type(e).__name__, e)
            raise HandlerFaultError(str(e)) from e
        return result.response  # type: ignore[return-value]

    def answer_after_commit(self, data: bytearray, if_failed: bytearray) -> LaterAnswer:
        """What :meth:`run_request` does with an answer while records before it are uncommitted
        (``_reply_after``), for a lane: ``data`` goes out once everything written so far is
        committed, ``if_failed`` (NOT_CONTROLLER) if the log fails first. No future or task:
        one tuple in a queue the commit listener drains in order (offsets only grow between
        reverts; an answer behind a higher offset waits for it, never leaves early)."""
        raft = self.raft
        assert raft is not None
        answer = LaterAnswer()
        self._after_commit_answers.append((self.image.offset, answer, data, if_failed))
        return answer

    def waits_for_commit(self, gated: bool) -> bool:
        """Whether :meth:`run_request` would run a handler now but answer only after a commit:
        as :meth:`answers_now`, but for records written and not yet committed."""
        raft = self.raft
        return (self.fatal is None and self.active and raft is not None
                and raft.committed_offset < self.image.offset
                and not (gated and self.image.migration.state == ZkMigrationState.PRE_MIGRATION))

    def answers_now(self, gated: bool) -> bool:
        """Whether :meth:`run_request` would run a handler now and, if it wrote nothing, answer
        at once: active, not failed, past the pre-migration gate when ``gated``, and every
        record written already committed. A lane (``controller_apis.py``) answers only then."""
        raft = self.raft
        return (self.fatal is None and self.active and raft is not None
                and raft.committed_offset >= self.image.offset
                and not (gated and self.image.migration.state == ZkMigrationState.PRE_MIGRATION))

    def _finish(self, result: ControllerResult[T]) -> T | Awaitable[T]:
        """Append the result's records (if any) and answer now or after their commit."""
        raft = self.raft
        assert raft is not None and self.writer is not None
        if result.records:
            try:
                last = self.writer.append(result)  # type: ignore[arg-type]
            except ReplayFailedError as e:
                self._fail(e)
                raise FatalControllerError(str(e)) from e
            except LogFailedError as e:
                self._fail(e)
                raise NotControllerError("The controller failed to write the metadata log.") from e
            except NotLeaderError as e:  # the Raft node resigned under us: nothing was appended
                log.warning("renouncing the leadership: the Raft node refused an append (%s)", e)
                self._deactivate()
                raise NotControllerError() from e
            except EmptyAppendError as e:  # the records are appended; the event fails as Kafka's does
                self._handler_fault(e)
                raise HandlerFaultError(str(e)) from e
            self._maybe_schedule_balance()
            return self._reply_after(last, result.response)  # type: ignore[arg-type]
        # An event that wrote nothing changed no partition, but it may be the balancing run that
        # found nothing to elect: Kafka reschedules after every write event.
        self._maybe_schedule_balance()
        if raft.committed_offset < self.image.offset:
            return self._reply_after(self.image.offset, result.response)  # type: ignore[arg-type]
        return result.response  # type: ignore[return-value]

    async def _reply_after(self, offset: int, response: T) -> T:
        raft = self.raft
        assert raft is not None
        try:
            await raft.wait_committed(offset)
        except LogFailedError as e:
            self._fail(e)
            raise NotControllerError("The controller failed to write the metadata log.") from e
        except NotLeaderError as e:  # renounced: the write may still be committed by the next leader
            raise NotControllerError() from e
        return response

    def _count_fault(self, e: BaseException) -> None:
        """A fault the controller survives (a failed snapshot): Kafka's MetadataErrorCount."""
        self.metadata_errors += 1

    def _handler_fault(self, e: BaseException) -> None:
        """Kafka's catch-all for an event that throws something other than an ApiException: a
        non-fatal fault (MetadataErrorCount) and a failover. The client sees
        UNKNOWN_SERVER_ERROR; this node resigns its epoch (a lone voter is elected again after
        an election timeout)."""
        self.metadata_errors += 1
        log.error("event failed with %s (treated as UnknownServerException) at epoch %d: %s; renouncing",
                  type(e).__name__, self.epoch, e)
        self._renounce()

    def resign(self) -> bool:
        """Give up leadership now (an injected fault, ``kraftsim.faults``' resign), as after a
        fault in an event: another voter, or this lone one after its election timeout, wins the next. False when
        it is not the active controller."""
        if not self.active or self.fatal is not None:
            return False
        log.warning("resigning as the active controller in epoch %d, as asked", self.epoch)
        self._renounce()
        return True

    def _renounce(self) -> None:
        """Kafka's renounce after a fault: resign the Raft epoch, and stop being active."""
        if not self.active:
            return
        self._deactivate()
        if self.raft is not None:
            self.raft.resign()

    def _fail(self, e: BaseException) -> None:
        """Resign after a fault: first take back whatever was applied but never committed."""
        if self.fatal is not None:
            return
        self.fatal = e
        self.fault_reason = f"{type(e).__name__}: {e}"
        waiting = self._after_commit_answers
        while waiting:  # _reply_after's NotControllerError: these will never be committed
            _, answer, _, failed = waiting.popleft()
            answer.ready(failed)
        self.metadata_errors += 1  # Kafka's fatal fault handler counts it too
        self.active = False
        if self.raft is not None and self.image.journaling:
            try:
                self.image.revert_to(max(self.raft.committed_offset, self.image.revertible_from()))
            except ValueError as err:  # noqa: PERF203 - nothing better to do while failing
                log.error("could not revert the image to the committed offset: %s", err)
        if self.raft is not None:
            self.raft.abandon_waiters()
        log.error("fatal controller fault, resigning: %r", e)
        if self._active_once is not None and not self._active_once.done():
            self._active_once.set_result(None)
        if self.on_fatal is not None:
            self.on_fatal(e)

    def fatal_fault(self, e: BaseException) -> None:
        """Kafka's fatal fault handler, for parts outside the event queue (the migration driver
        aborting its copy): resign for good; the process exits 1."""
        self._fail(e)

    def _on_event_timeout(self, name: str) -> None:
        self.timed_out_events += 1

    # ==== reads ==========================================================================
    def finalized_features(self) -> tuple[int, dict[str, int]]:
        return self._managers.features.finalized_features() if self._managers is not None else (-1, {})

    def supported_features(self) -> dict[str, tuple[int, int]]:
        """ApiVersions' SupportedFeatures. A Kafka 3.9 controller's ApiVersionManager takes them
        from ``unstable.api.versions.enable`` (BrokerFeatures.defaultSupportedFeatures), while what
        it accepts in UpdateFeatures and replay, and registers itself with, follows
        ``unstable.feature.versions.enable`` (QuorumFeatures): the two flags widen different ranges."""
        return java_supported_order(self.release.supported_features(bool(self.config.get("unstable.api.versions.enable"))))

    def zk_migration_ready(self) -> bool:
        return bool(self.config.get("zookeeper.metadata.migration.enable"))

    # ==== health =========================================================================
    def health(self) -> tuple[bool, dict[str, object]]:
        """``/healthz``: whether this node serves its role, and a small document naming it. The
        active controller serves; so does a standby that follows a known leader and has replayed
        what it knows to be committed. Not before (starting, an election), nor after a fatal
        fault."""
        raft, mlog = self.raft, self.mlog
        leader = self.leader_id
        role = raft.node.role if raft is not None else "starting"
        committed = raft.committed_offset if raft is not None else -1
        if self.fatal is not None:
            status, serving = "failed", False
        elif self.active:
            status, serving = "active", True
        elif (raft is not None and role == "follower" and leader is not None and committed >= 0
              and self._applied_offset >= min(committed, mlog.flushed_offset if mlog else -1)):
            status, serving = "following", True
        else:
            status, serving = "starting", False
        doc: dict[str, object] = {
            "status": status,
            "role": "active controller" if self.active else ("voter" if raft is not None and raft.is_voter
                                                              else "observer"),
            "raftState": role,
            "nodeId": self.node_id,
            "leaderId": -1 if leader is None else leader,
            "clusterId": self.cluster_id,
            "leaderEpoch": self.epoch,
            "committedOffset": committed,
        }
        if self.fatal is not None:
            doc["reason"] = self.fault_reason
        return serving, doc

    # ==== metrics ========================================================================
    def _metric_values(self) -> dict[str, float]:
        img = self.image
        topics = img.topics
        cluster = img.cluster
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
            "LastCommittedRecordOffset": self.raft.committed_offset if self.raft else -1,
            "LastAppliedRecordTimestamp": img.last_timestamp_ms,
            "LastAppliedRecordLagMs": max(0, now - img.last_timestamp_ms) if img.last_timestamp_ms else 0,
            "TimedOutBrokerHeartbeatCount": self._managers.cluster.timed_out_heartbeats if self._managers else 0,
            "NewActiveControllersCount": self.new_active_controllers,
            "ZkMigrationState": int(img.migration.state),
            "MigratingZkBrokerCount": cluster.migrating_zk_count,
            "ZkWriteBehindLag": self.migration.write_behind_lag() if self.migration is not None else 0,
            "EventQueueOperationsTimedOutCount": self.timed_out_events,
        }

    # ==== shutdown =======================================================================
    async def shutdown_raft(self) -> bool:
        """Kafka's graceful Raft shutdown, while the server still answers: a leader resigns and
        tells the voters, so another takes over at once; done once someone else leads (or there
        is no one to hand over to). Whether that happened within the time allowed."""
        raft = self.raft
        if raft is None or self.fatal is not None:
            return False
        return await raft.shutdown(RAFT_SHUTDOWN_TIMEOUT_MS)

    async def stop(self) -> None:
        # Stopping, not renouncing: the image stays as it is. A commit or flush the Raft client
        # reports while the tasks below wind down must not set a standby's catch-up going from
        # where the (active) image last loaded: it would replay what the image already holds.
        self._stopping = True
        self.active = False
        if self._snapshot_task is not None:
            self._tasks.append(self._snapshot_task)
        self._tasks += self.balancer.writes
        self._tasks += self.registration.tasks
        if self._cleaner is not None:  # files marked for deletion and not deleted yet go at the next start
            self._tasks += [self._cleaner, *self._deletions]
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        self.queue.close()
        if self.raft is not None:
            await self.raft.close()
        try:
            if self.mlog is not None:
                try:
                    if self.fatal is None:
                        self.mlog.flush_now()
                finally:
                    self.mlog.close()
        finally:
            if self.dir_lock is not None:
                self.dir_lock.release()  # last: the directory is another process's from here on

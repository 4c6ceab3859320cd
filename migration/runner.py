"""The migration driver at work on the active controller: ZooKeeper and the log, asyncio side.

One task per activation (a resignation cancels it; the next activation starts a new one, which
re-reads /migration and starts over from INACTIVE, as Kafka's driver does on a new leader). Each
poll runs the current state's step, then waits the driver's backoff. ZooKeeper calls run in a
worker thread; records go through the controller's normal write path as write events, and the
copy waits for each batch to commit before sending the next (reading the batches after it
meanwhile).

The copy: BeginTransactionRecord("ZK Migration") alone, then ZooKeeper's metadata in merged
batches, then ZkMigrationStateRecord(MIGRATION) with EndTransactionRecord; /migration then gets
the offset and epoch of that last record. If the controller dies before the EndTransaction, its
next activation aborts the open transaction (activation's AbortTransactionRecord) and, since
/migration still shows the copy as not done, the copy runs again from scratch.

After the copy: SYNC_KRAFT_TO_ZK reconciles ZooKeeper with the whole image, then
KRAFT_CONTROLLER_TO_BROKER_COMM sends every ZooKeeper-mode broker the full UpdateMetadata and
LeaderAndIsr (migration.propagator computes them, migration.broker_channels sends them), and
DUAL_WRITE mirrors each committed change to ZooKeeper and then to the brokers. The write path's
listener notes which topics and entities the appended records touch; a Raft commit wakes the driver, which writes
those whose records are committed, as the image holds them, each multi fenced by the zkVersions
of /controller_epoch and /migration and moving /migration to the committed offset. A fenced
write means another controller owns ZooKeeper: the driver stops for good.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, Protocol

from kraftsim.metadata import versions
from kraftsim.metadata.authorizer.acl_bindings import PatternType
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.image.migration import ZkMigrationState
from kraftsim.metadata.image.quotas import entity_of
from kraftsim.metadata.messages import BeginTransactionRecord, EndTransactionRecord, ZkMigrationStateRecord
from kraftsim.metadata.records import RecordAndVersion, record_name
from kraftsim.migration import zk_copy, zk_writer
from kraftsim.migration import zk_layout as L
from kraftsim.migration.broker_channels import Address, BrokerChannels
from kraftsim.migration.driver import BACKOFF_MAX_MS, BrokerView, DriverState, MigrationDriver
from kraftsim.migration.passwords import NoOpCodec, PasswordCodec, PasswordError, codec_from
from kraftsim.migration.propagator import ControlRequest, Propagator, Snapshot
from kraftsim.migration.zk_client import (
    ClaimFailedError,
    ControllerMovedError,
    MigrationFencedError,
    ZkOp,
    ZkSession,
    ZkWriteError,
    ZooKeeperUnavailableError,
)
from kraftsim.raft.client import RaftClient
from kraftsim.rpc.clock import Clock

log = logging.getLogger("kraftsim.migration")
TRANSACTION_NAME = "ZK Migration"
# Records of Kafka's ClusterDelta: brokers and controllers registering, fenced, unfenced, changed.
CLUSTER_RECORDS = frozenset({"RegisterBrokerRecord", "UnregisterBrokerRecord", "FenceBrokerRecord",
                             "UnfenceBrokerRecord", "BrokerRegistrationChangeRecord", "RegisterControllerRecord"})
PROGRESS_EVERY_S = 5.0
READ_AHEAD = 8  # merged batches the copy reads while the previous ones commit
# Records of Kafka's TopicsDelta: what the dual-write mirrors to /brokers/topics.
TOPIC_RECORDS = frozenset({"TopicRecord", "PartitionRecord", "PartitionChangeRecord", "RemoveTopicRecord"})
# Records whose entity has one znode under /config or /kafka-acl*.
ENTITY_RECORDS = frozenset({"ConfigRecord", "ClientQuotaRecord", "UserScramCredentialRecord",
                            "RemoveUserScramCredentialRecord", "AccessControlEntryRecord",
                            "RemoveAccessControlEntryRecord", "ProducerIdsRecord", "DelegationTokenRecord",
                            "RemoveDelegationTokenRecord"})
ENTITY_OPS_PER_MULTI = 100
SCRAM_NAMES = {code: name for name, code in L.SCRAM_MECHANISMS.items()}
# ("config", type, name) | ("quota", entity) | ("user", name) | ("acl", type, name, pattern)
# | ("producer_ids",) | ("token", id)
EntityKey = tuple[Any, ...]


class _Settings(Protocol):
    def get(self, key: str) -> Any: ...


class _Timer(Protocol):
    def observe(self, value: float) -> None: ...


class _Metrics(Protocol):
    @property
    def zk_write_snapshot_time(self) -> _Timer: ...

    @property
    def zk_write_delta_time(self) -> _Timer: ...


class MigrationHost(Protocol):
    """What the driver needs of the active controller it runs on (Kafka's ZkRecordConsumer, and
    the controller state its driver reads). The controller satisfies it; the migration imports
    nothing of the controller, which is handed this driver by the process that wires them."""

    @property
    def config(self) -> _Settings: ...

    @property
    def node_id(self) -> int: ...

    @property
    def image(self) -> MetadataImage: ...

    @property
    def raft(self) -> RaftClient | None: ...

    @property
    def active(self) -> bool: ...

    @property
    def epoch(self) -> int: ...

    @property
    def voters(self) -> list[int]: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def metrics(self) -> _Metrics: ...

    def fatal_fault(self, e: BaseException) -> None: ...

    async def write_records(self, name: str, records: list[RecordAndVersion]) -> int:
        """Append ``records`` in one write event (not atomic: batched as the write path cuts
        them); the offset of the last, once committed."""
        ...


class MigrationRunner:
    def __init__(self, controller: MigrationHost) -> None:
        self.controller = controller
        cfg = controller.config
        self.hosts: str = cfg.get("zookeeper.connect")
        self.connect_timeout_ms: int = cfg.get("zookeeper.connection.timeout.ms")
        self.session_timeout_ms: int = cfg.get("zookeeper.session.timeout.ms")
        self.min_batch: int = cfg.get("zookeeper.metadata.migration.min.batch.size")
        self.stopped_reason = ""
        # Kafka's passwordEncoder: ZooKeeper's dynamic passwords are decrypted by the copy and
        # encrypted by the dual-write with password.encoder.secret (no secret: stored as they are).
        self.passwords: PasswordCodec = NoOpCodec()
        try:
            self.passwords = codec_from(cfg.get("password.encoder.secret"), cfg.get("password.encoder.keyfactory.algorithm"),
                                        cfg.get("password.encoder.cipher.algorithm"),
                                        cfg.get("password.encoder.key.length"), cfg.get("password.encoder.iterations"))
        except PasswordError as e:
            self.stopped_reason = str(e)  # the driver does not start (run() says why)
        self.driver = MigrationDriver(controller.node_id)
        self.zk: ZkSession | None = None
        self.manifest: zk_copy.Manifest | None = None
        self._wake = asyncio.Event()
        # Dual-write: from SYNC_KRAFT_TO_ZK on, each appended topic change is noted as (offset,
        # topic name, partitions or None for the whole topic) and written once committed.
        self.collecting = False
        self.topic_names: dict[uuid.UUID, str] = {}  # names of deleted topics are looked up here
        self.pending: list[tuple[int, str, set[int] | None]] = []
        self.acl_patterns: dict[uuid.UUID, tuple[int, str, int]] = {}  # for RemoveAccessControlEntryRecord
        self.pending_entities: list[tuple[int, EntityKey]] = []
        self.zk_writes = 0  # fenced multi-ops applied (for tests and `migration status`)
        # The ZooKeeper-mode brokers: what to tell them, and the connections that tell them.
        self.listener: str = cfg.get("inter.broker.listener.name") or cfg.get("security.inter.broker.protocol")
        self.propagator = Propagator(controller.node_id, self.listener)
        self.channels = BrokerChannels(controller.node_id)
        self.dual_write_offset = 0  # the committed offset ZooKeeper last caught up with (Kafka's metric)
        self.brokers_sent = 0  # requests handed to the broker channels

    def note_batch(self, records: list[RecordAndVersion], base: int) -> None:
        """A write-path listener: a change to the brokers or controllers wakes the driver at once
        (Kafka's driver polls again when a metadata delta touches the cluster before dual-write),
        rather than at the end of its backoff."""
        if not self.driver.state.allows_dual_write and any(record_name(r) in CLUSTER_RECORDS for r, _ in records):
            self._wake.set()
        if not self.collecting:
            return
        for i, (rec, _) in enumerate(records):
            r: Any = rec
            kind = record_name(r)  # a FramedRecord (CreateTopics' PartitionRecords) by what it frames
            if kind in ENTITY_RECORDS:
                key = self._entity_key(kind, r)
                if key is not None:
                    self.pending_entities.append((base + i, key))
                continue
            if kind not in TOPIC_RECORDS:
                continue
            if kind == "TopicRecord":
                self.topic_names[r.topic_id] = r.name
            name = self.topic_names.get(r.topic_id)
            if name is not None:
                self.pending.append((base + i, name, {r.partition_id} if kind == "PartitionChangeRecord" else None))

    def _entity_key(self, kind: str, r: Any) -> EntityKey | None:
        if kind == "ConfigRecord":
            return ("config", r.resource_type, r.resource_name) \
                if r.resource_type in zk_writer.CONFIG_TYPE_OF_RESOURCE else None
        if kind == "ClientQuotaRecord":
            entity = entity_of(r.entity)
            entries = dict(entity)
            return ("user", entries["user"]) if set(entries) == {"user"} else ("quota", entity)
        if kind in ("UserScramCredentialRecord", "RemoveUserScramCredentialRecord"):
            return ("user", r.name)
        if kind == "ProducerIdsRecord":
            return ("producer_ids",)
        if kind in ("DelegationTokenRecord", "RemoveDelegationTokenRecord"):
            return ("token", r.token_id)
        if kind == "AccessControlEntryRecord":
            self.acl_patterns[r.id] = (r.resource_type, r.resource_name, r.pattern_type)
            return ("acl", r.resource_type, r.resource_name, r.pattern_type)
        pattern = self.acl_patterns.get(r.id)
        return None if pattern is None else ("acl", *pattern)

    def _entity_znode(self, key: EntityKey) -> zk_writer.EntityZNode | None:
        """What the image says the entity's znode holds."""
        image = self.controller.image
        kind = key[0]
        if kind == "config":
            return zk_writer.config_znode(key[1], key[2], image.configs.resources.get((key[1], key[2]), {}),
                                          self.passwords)
        if kind == "quota":
            return zk_writer.quota_znode(dict(key[1]), image.quotas.entities.get(key[1], {}))
        if kind == "user":
            name = key[1]
            scram = {SCRAM_NAMES[m]: L.ScramCredential(c.salt, c.stored_key, c.server_key, c.iterations).encode()
                     for (user, m), c in image.scram.credentials.items() if user == name and m in SCRAM_NAMES}
            return zk_writer.quota_znode({"user": name}, image.quotas.entities.get((("user", name),), {}), scram)
        if kind == "producer_ids":
            return zk_writer.producer_id_znode(image.producer_ids.next_producer_id)
        if kind == "token":
            t = image.tokens.tokens.get(key[1])
            return zk_writer.token_znode(key[1], None if t is None else L.TokenZNode(
                key[1], t.owner, t.requester, tuple(t.renewers), t.issue_timestamp, t.max_timestamp,
                t.expiration_timestamp))
        _, rt, name, pattern = key
        entries = [L.AclEntry(a.principal, a.permission_type, a.operation, a.host)
                   for a in image.acls.by_name.get(name, {}).values()
                   if a.resource_type == rt and a.pattern_type == pattern]
        return zk_writer.acl_znode(rt, name, pattern, entries)

    def _all_entity_keys(self) -> list[EntityKey]:
        """Every configs, quota, SCRAM and ACL entity of the image (the reconcile's list)."""
        image = self.controller.image
        keys: dict[EntityKey, None] = {}
        for rt, name in image.configs.resources:
            if rt in zk_writer.CONFIG_TYPE_OF_RESOURCE:
                keys[("config", rt, name)] = None
        for entity in image.quotas.entities:
            entries = dict(entity)
            keys[("user", entries["user"]) if set(entries) == {"user"} else ("quota", entity)] = None
        for user, _ in image.scram.credentials:
            keys[("user", user)] = None
        for acl_id, a in image.acls.by_id.items():
            self.acl_patterns[acl_id] = (a.resource_type, a.resource_name, a.pattern_type)
            keys[("acl", a.resource_type, a.resource_name, a.pattern_type)] = None
        keys[("producer_ids",)] = None
        for token_id in image.tokens.tokens:
            keys[("token", token_id)] = None
        return list(keys)

    def _committed(self, offset: int) -> None:
        """A Raft commit listener: in dual-write every commit is mirrored (and /migration advanced)."""
        if self.driver.state == DriverState.DUAL_WRITE:
            self._wake.set()

    # ---- the loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        steps: dict[DriverState, Callable[[], Awaitable[None]]] = {
            DriverState.UNINITIALIZED: self._recover,
            DriverState.INACTIVE: self._become_leader,
            DriverState.WAIT_FOR_CONTROLLER_QUORUM: self._check_quorum,
            DriverState.WAIT_FOR_BROKERS: self._check_brokers,
            DriverState.BECOME_CONTROLLER: self._claim,
            DriverState.ZK_MIGRATION: self._copy,
            DriverState.SYNC_KRAFT_TO_ZK: self._sync,
            DriverState.KRAFT_CONTROLLER_TO_BROKER_COMM: self._broker_comm,
            DriverState.DUAL_WRITE: self._dual_write,
        }
        if self.stopped_reason:
            log.error("Migration driver does not start: %s", self.stopped_reason)
            return
        raft = self.controller.raft
        if raft is not None:
            raft.on_commit.append(self._committed)
        try:
            while self.controller.active:
                self._wake.clear()
                state = self.driver.state
                step = steps.get(state)
                if step is None:
                    self.stopped_reason = f"{state.name}: no step for this state"
                    log.info("Migration driver reached %s; %s", state.name, self.stopped_reason)
                    return
                try:
                    await step()
                except (ZooKeeperUnavailableError, ClaimFailedError, ZkWriteError) as e:
                    self.driver.waiting_for = str(e)
                    log.info("Migration driver in %s: %s", state.name, e)
                except (ControllerMovedError, MigrationFencedError) as e:
                    # Another controller owns ZooKeeper now: stop writing to it.
                    self.stopped_reason = str(e)
                    log.error("Migration driver stops writing to ZooKeeper: %s", e)
                    return
                except CopyAbortedError:
                    return  # the controller has failed (Kafka's fatal fault handler)
                except Exception as e:  # noqa: BLE001 - Kafka's driver logs and polls again
                    if _is_zookeeper_error(e):
                        self.driver.waiting_for = f"ZooKeeper ({type(e).__name__})"
                        log.info("Encountered ZooKeeper error during %s. Will retry.", state.name, exc_info=e)
                    else:
                        log.error("Unhandled error in %s", state.name, exc_info=e)
                if self.driver.state == DriverState.DUAL_WRITE and state == DriverState.DUAL_WRITE \
                        and not self.driver.waiting_for:
                    await self._backoff(BACKOFF_MAX_MS)  # each commit wakes it
                elif self.driver.state == state and self.controller.active:
                    await self._backoff(self.driver.next_poll_ms())
                elif self.driver.state == DriverState.INACTIVE and state != DriverState.UNINITIALIZED:
                    log.info("Migration driver is inactive: %s", self.driver.waiting_for)
                    return
        finally:
            self.collecting = False  # a stopped driver notes nothing more
            self.pending.clear()
            self.pending_entities.clear()
            if raft is not None and self._committed in raft.on_commit:
                raft.on_commit.remove(self._committed)
            await self.channels.close()
            await self.close()

    async def _backoff(self, delay_ms: int) -> None:
        """Until the next poll: the backoff's delay, or less if something wakes the driver."""
        if self._wake.is_set():
            return
        sleeper = asyncio.ensure_future(self.controller.clock.sleep_ms(delay_ms))
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            woken.cancel()

    async def close(self) -> None:
        zk, self.zk = self.zk, None
        if zk is not None:
            await zk.close_async()

    async def _session(self) -> ZkSession:
        if self.zk is None:
            self.zk = await ZkSession.connect_async(self.hosts, self.connect_timeout_ms, self.session_timeout_ms)
        return self.zk

    # ---- the states ---------------------------------------------------------------------------
    async def _recover(self) -> None:
        zk = await self._session()

        def read() -> tuple[L.MigrationZNode, int]:
            zk.ensure_paths(L.PERSISTENT_PATHS)
            return zk.get_or_create_migration()

        znode, version = await asyncio.to_thread(read)
        self.driver.recovered(znode, version)
        log.info("Recovered migration state from ZK: %s (zkVersion %d). Initial migration of ZK metadata is %s.",
                 znode, version, "done" if self.driver.leadership.initial_copy_done else "not done")

    async def _become_leader(self) -> None:
        zk = await self._session()
        znode, version = await asyncio.to_thread(zk.get_or_create_migration)
        self.driver.became_leader(self.controller.epoch, znode, version)

    def _quorum_ready(self) -> bool:
        """Kafka's isControllerQuorumReadyForMigration: MV 3.4+, and from 3.7-IV0 every voter's
        registration says ZkMigrationReady."""
        image = self.controller.image
        mv = image.metadata_version
        if not image.release.is_migration_supported(mv):
            return False
        if mv < versions.IBP_3_7_IV0:
            return True
        regs = image.cluster.controllers
        return all(v in regs and regs[v].zk_migration_ready for v in self.controller.voters)

    async def _check_quorum(self) -> None:
        raft = self.controller.raft
        if raft is None or raft.committed_offset < self.controller.image.offset:
            self.driver.waiting_for = "the first committed metadata image"
            return
        self.driver.quorum_checked(ZkMigrationState(self.controller.image.migration.state), self._quorum_ready())

    async def _check_brokers(self) -> None:
        zk = await self._session()
        brokers = {b: BrokerView(b, reg.is_migrating_zk_broker)
                   for b, reg in self.controller.image.cluster.brokers.items()}
        zk_ids = await asyncio.to_thread(zk_copy.registered_broker_ids, zk)
        if not zk_ids or any(not (b in brokers and brokers[b].migrating_zk_broker) for b in zk_ids):
            self.driver.brokers_ready(brokers, zk_ids, None)  # records what is missing
            return
        assigned = await asyncio.to_thread(zk_copy.assigned_broker_ids, zk)
        if self.driver.brokers_ready(brokers, zk_ids, assigned):
            log.info("All ZK brokers %s and those in topic assignments are registered with KRaft.", sorted(zk_ids))

    async def _claim(self) -> None:
        zk = await self._session()
        lead = self.driver.leadership
        now = self.controller.clock.wall_ms()
        try:
            epoch, epoch_version = await asyncio.to_thread(
                zk.claim_controller, lead.kraft_controller_id, lead.kraft_controller_epoch, now)
        except ClaimFailedError as e:
            self.driver.claim_failed(str(e))
            raise
        self.driver.claimed(epoch, epoch_version)
        log.info("Claimed ZK controller leadership with ZK controller epoch %d", epoch)
        # Learn /migration's current zkVersion with an unconditional write (KAFKA-16171).
        version = await asyncio.to_thread(zk.set_migration, self.driver.leadership.znode(), -1)
        self.driver.migration_written(version)

    async def _copy(self) -> None:
        """ZK_MIGRATION. Any failure once it began is fatal, as in Kafka (abortMigration): the
        next activation aborts the open transaction and the copy starts over."""
        try:
            await self._copy_all()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - every failure aborts the same way
            log.error("Aborting the metadata migration from ZooKeeper to KRaft. %s.", self.manifest, exc_info=e)
            self.controller.fatal_fault(e)
            raise CopyAbortedError(str(e)) from e

    async def _copy_all(self) -> None:
        zk = await self._session()
        controller = self.controller
        mv = controller.image.metadata_version
        txn = controller.image.release.metadata_transactions_supported(mv)
        manifest = self.manifest = zk_copy.Manifest()
        started = time.monotonic()
        log.info("Starting ZK migration")
        if txn:
            await self._write("Begin ZK Migration Transaction", [(BeginTransactionRecord(name=TRANSACTION_NAME), 0)])
        else:
            log.warning("Starting ZK Migration without metadata transactions enabled. This is not safe since a "
                        "controller failover or processing error may lead to partially migrated metadata.")
        batches = zk_copy.merged(zk_copy.read_all_metadata(zk_copy.CountingReader(zk, manifest), self.passwords),
                                 self.min_batch)
        last_progress = time.monotonic()
        # The next batches are read (in a worker thread) while these commit: the reads wait on
        # ZooKeeper and the commits on the log's fsync, so the two overlap instead of adding up.
        # The batches, their order and the wait for each one's commit are the same as without it.
        read_wait = commit_wait = 0.0  # how long the copy waited for each side, for the final log
        ahead = asyncio.ensure_future(asyncio.to_thread(_take, batches, READ_AHEAD))
        try:
            while True:
                t0 = time.monotonic()
                chunk = await ahead
                read_wait += time.monotonic() - t0
                if not chunk:
                    break
                ahead = asyncio.ensure_future(asyncio.to_thread(_take, batches, READ_AHEAD))
                for batch in chunk:
                    t0 = time.monotonic()
                    await self._write("ZK Migration Batch", batch)
                    commit_wait += time.monotonic() - t0
                    manifest.batches += 1
                    manifest.count(batch)
                    if time.monotonic() - last_progress >= PROGRESS_EVERY_S:
                        last_progress = time.monotonic()
                        log.info("ZK migration in progress: %s", manifest)
        finally:
            ahead.cancel()  # a failed write or a resignation: the read under way is not wanted
        final: list[RecordAndVersion] = [(ZkMigrationStateRecord(zk_migration_state=int(ZkMigrationState.MIGRATION)), 0)]
        if txn:
            final.append((EndTransactionRecord(), 0))
        self.collecting = True  # what commits from here on is dual-written (or covered by the reconcile)
        offset = await self._write("Complete ZK Migration", final)
        new_state = self.driver.copied(offset, controller.epoch)
        version = await asyncio.to_thread(zk.set_migration, new_state.znode(), new_state.migration_zk_version)
        self.driver.copy_recorded(new_state, version)
        log.info("Completed migration of metadata from ZooKeeper to KRaft in %.0f ms: %s. The current metadata "
                 "offset is now %d with an epoch of %d. The copy waited %.0f ms for reads from ZooKeeper and %.0f "
                 "ms for its batches to commit.", (time.monotonic() - started) * 1000, manifest, offset,
                 controller.epoch, read_wait * 1000, commit_wait * 1000)

    # ---- SYNC_KRAFT_TO_ZK and DUAL_WRITE -------------------------------------------------------
    async def _sync(self) -> None:
        """SYNC_KRAFT_TO_ZK (Kafka's snapshot reconcile): make ZooKeeper's topics what the image
        holds, writing only what differs (nothing right after a copy). Changes appended from now
        on are noted for the dual-write, so none falls between the reconcile and DUAL_WRITE."""
        zk = await self._session()
        self.collecting = True
        image = self.controller.image
        self.topic_names.update({t.id: t.name for t in image.topics.by_id.values()})
        pending_deletions = await asyncio.to_thread(zk.children, L.DELETE_TOPICS)
        if pending_deletions:  # Kafka clears them: the topics themselves go below, being absent from KRaft
            await self._fenced([ZkOp("delete", f"{L.DELETE_TOPICS}/{t}") for t in sorted(pending_deletions)],
                               self.driver.leadership.kraft_metadata_offset)
        names = set(image.topics.by_name) | set(await asyncio.to_thread(zk.children, L.TOPICS))
        started = time.monotonic()
        keys = self._all_entity_keys()
        keys += await asyncio.to_thread(_zk_only_keys, zk, set(keys))
        await self._mirror({n: None for n in sorted(names)}, self._committed_offset(), keys)
        self.controller.metrics.zk_write_snapshot_time.observe((time.monotonic() - started) * 1000)
        self.driver.synced()

    async def _broker_comm(self) -> None:
        """KRAFT_CONTROLLER_TO_BROKER_COMM: full UpdateMetadata and LeaderAndIsr to every
        ZooKeeper-mode broker, once the image holds what ZooKeeper was last synced to."""
        image = self.controller.image
        if image.offset < self.driver.leadership.kraft_metadata_offset:
            self.driver.waiting_for = "the image to reach the offset last written to ZooKeeper"
            return
        log.info("Sending RPCs to broker before moving to dual-write mode using at offset %d", image.offset)
        # A copy of what the full sync reads, so that it is computed in a worker thread (a second
        # or more at 100,000 partitions) while the controller goes on serving.
        snapshot = Snapshot(image)
        await self._propagate(await asyncio.to_thread(self.propagator.full, snapshot, self.controller.epoch,
                                                      self.driver.leadership.zk_controller_epoch))
        self.driver.brokers_told()

    async def _propagate(self, requests: list[ControlRequest]) -> None:
        """The channels follow the image's unfenced ZooKeeper-mode brokers, then take the requests."""
        brokers: dict[int, Address] = {}
        for b in self.controller.image.cluster.brokers.values():
            ep = b.listeners.get(self.listener)
            if b.is_migrating_zk_broker and not b.fenced and ep is not None:
                brokers[b.id] = (ep[0], ep[1])
        await self.channels.update(brokers)
        self.channels.send(requests)
        self.brokers_sent += len(requests)

    async def _dual_write(self) -> None:
        """DUAL_WRITE: mirror every committed topic change, then advance /migration to the
        committed offset (on every commit, as Kafka's driver does on every published delta)."""
        committed = self._committed_offset()
        if committed <= self.driver.leadership.kraft_metadata_offset and self.driver.leadership.kraft_metadata_epoch \
                == self.controller.epoch:
            return
        due = [p for p in self.pending if p[0] <= committed]
        dirty: dict[str, set[int] | None] = {}
        for _, name, parts in due:
            if name in dirty and dirty[name] is None:
                continue
            dirty[name] = None if parts is None else (dirty.get(name) or set()) | parts
        entities = list(dict.fromkeys(k for o, k in self.pending_entities if o <= committed))
        started = time.monotonic()
        if await self._mirror(dirty, committed, entities):  # as Kafka: only deltas that wrote something
            self.controller.metrics.zk_write_delta_time.observe((time.monotonic() - started) * 1000)
        # Then the brokers (Kafka propagates each delta after its ZooKeeper writes), computed in a
        # worker thread from a copy: a broker newly unfenced is told about every partition.
        await self._propagate(await asyncio.to_thread(self.propagator.incremental, Snapshot(self.controller.image),
                                                      self.controller.epoch,
                                                      self.driver.leadership.zk_controller_epoch, list(dirty)))
        self.pending = [p for p in self.pending if p[0] > committed]
        self.pending_entities = [p for p in self.pending_entities if p[0] > committed]
        self.driver.waiting_for = ""
        self.driver.attempts = 0

    def _committed_offset(self) -> int:
        raft = self.controller.raft
        return raft.committed_offset if raft is not None else self.controller.image.offset

    async def _mirror(self, dirty: dict[str, set[int] | None], offset: int, entities: list[EntityKey]) -> bool:
        """Write ``dirty`` topics and ``entities`` as the image holds them (absent: deleted), each
        topic one fenced multi, the entities in multis of up to ENTITY_OPS_PER_MULTI operations,
        /migration advanced to ``offset`` by each (alone if nothing differs). True if anything
        besides /migration was written."""
        zk = await self._session()
        image = self.controller.image
        lead = self.driver.leadership
        epoch = self.controller.epoch
        writes: list[list[ZkOp]] = []
        for name, parts in dirty.items():
            topic = image.topics.by_name.get(name)
            if topic is not None:
                view = await asyncio.to_thread(_read_topic, zk, name, topic.partitions.keys(), parts)
                ops = zk_writer.topic_ops(topic, view, lead.kraft_controller_epoch, parts)
            else:  # deleted (or never in KRaft): whatever its znodes hold, they go
                got, config = await asyncio.to_thread(zk.get_many, [L.topic_path(name),
                                                                    L.config_path(L.TOPIC_CONFIG, name)])
                subtree = await asyncio.to_thread(zk.subtree, L.topic_path(name)) if got is not None else []
                ops = zk_writer.delete_topic_ops(name, subtree, config is not None) if got is not None else []
            if ops:
                writes.append(ops)
        for ops in writes:  # topics first: a new topic's config znode is theirs to create
            await self._fenced(ops, offset)
        wants = [w for w in map(self._entity_znode, entities) if w is not None]
        entity_ops, notifications = await asyncio.to_thread(_entity_ops, zk, wants, self.passwords)
        for start in range(0, len(entity_ops), ENTITY_OPS_PER_MULTI):
            await self._fenced(entity_ops[start:start + ENTITY_OPS_PER_MULTI], offset)
        moved = (self.driver.leadership.kraft_metadata_offset, self.driver.leadership.kraft_metadata_epoch)
        if moved != (offset, epoch):  # nothing to write: /migration alone moves on
            await self._fenced([], offset)
        if notifications:
            await asyncio.to_thread(zk.notify, notifications)
        self.dual_write_offset = offset
        return bool(writes or entity_ops)

    async def _fenced(self, ops: list[ZkOp], offset: int) -> None:
        """One multi fenced by /controller_epoch's and /migration's zkVersions, /migration set to
        ``offset`` in this epoch."""
        zk = await self._session()
        lead = self.driver.leadership
        target = lead.with_offset(offset, self.controller.epoch)
        version = await asyncio.to_thread(zk.fenced_write, ops, target.znode(), lead.migration_zk_version,
                                          lead.zk_controller_epoch_zk_version)
        self.driver.leadership = target.with_migration_zk_version(version)
        self.zk_writes += 1

    async def _write(self, name: str, records: list[RecordAndVersion]) -> int:
        """One write event; returns the offset of its last record once committed."""
        return await self.controller.write_records(name, records)

    # ---- for `migration status` and metrics ---------------------------------------------------
    def write_behind_lag(self) -> int:
        """Kafka's ZkWriteBehindLag: the committed offset minus the one last written to
        ZooKeeper; 0 before the first write and on an inactive controller."""
        if self.dual_write_offset == 0 or not self.controller.active:
            return 0
        return max(0, self._committed_offset() - self.dual_write_offset)

    def status(self) -> dict[str, Any]:
        """The driver's state, what it waits for, /migration as it last wrote or read it, and the
        write-behind lag (Kafka's ZkWriteBehindLag)."""
        lead = self.driver.leadership
        z = lead.znode()
        return {"driverState": self.driver.state.name, "waitingFor": self.driver.waiting_for,
                "stopped": self.stopped_reason,
                "migration": {"kraft_controller_id": z.kraft_controller_id,
                              "kraft_controller_epoch": z.kraft_controller_epoch,
                              "kraft_metadata_offset": z.kraft_metadata_offset,
                              "kraft_metadata_epoch": z.kraft_metadata_epoch},
                "migrationZkVersion": lead.migration_zk_version, "zkControllerEpoch": lead.zk_controller_epoch,
                "zkWriteBehindLag": self.write_behind_lag(), "copy": str(self.manifest) if self.manifest else None,
                "brokerRequests": self.brokers_sent,
                "brokerChannels": {str(b): s for b, s in self.channels.stats().items()}}


class CopyAbortedError(Exception):
    """The copy failed and took the controller down with it."""


def _is_zookeeper_error(e: BaseException) -> bool:
    """kazoo's errors (connection loss, session expiry, ...): Kafka's MigrationClientException."""
    return type(e).__module__.startswith("kazoo.")


def _read_topic(zk: ZkSession, name: str, in_image: Iterable[int], only: set[int] | None) -> zk_writer.ZkTopicView:
    """One topic's znodes, pipelined: the topic, its config, its partitions, then the states of
    the partitions asked for (all the image's and ZooKeeper's when ``only`` is None)."""
    topic_got, config_got = zk.get_many([L.topic_path(name), L.config_path(L.TOPIC_CONFIG, name)])
    if topic_got is None:
        return zk_writer.ZkTopicView(None, config_got is not None)
    children = zk.children(L.partitions_path(name))
    has_partitions = bool(children) or zk.get(L.partitions_path(name)) is not None
    ids = {int(c) for c in children if c.isdigit()}
    wanted = sorted((ids | set(in_image)) if only is None else only)
    states: dict[int, L.PartitionState] = {}
    for pid, got in zip(wanted, zk.get_many([L.partition_state_path(name, p) for p in wanted]), strict=True):
        if got is not None:
            states[pid] = L.PartitionState.decode(L.partition_state_path(name, pid), got[0])
    return zk_writer.ZkTopicView(L.TopicZNode.decode(name, topic_got[0]), config_got is not None, has_partitions,
                                 ids, states)


def _zk_only_keys(zk: ZkSession, known: set[EntityKey]) -> list[EntityKey]:
    """Topic and broker configs, client quota entities (with users' SCRAM credentials) and ACL
    resources ZooKeeper holds and the image does not: the reconcile empties them (a znode only if
    it holds something, as Kafka compares)."""
    out: list[EntityKey] = []
    out += _zk_only_quota_keys(zk, known)
    for rt, config_type in zk_writer.CONFIG_TYPE_OF_RESOURCE.items():
        parent = f"{L.CONFIG}/{config_type}"
        names = [n for n in zk.children(parent)
                 if ("config", rt, "" if n == L.DEFAULT_ENTITY else n) not in known]
        for n, got in zip(names, zk.get_many([f"{parent}/{n}" for n in names]), strict=True):
            if got is not None and L.decode_config(f"{parent}/{n}", got[0]):
                out.append(("config", rt, "" if n == L.DEFAULT_ENTITY else n))
    for pattern in (PatternType.LITERAL, PatternType.PREFIXED):
        root = L.acl_root(pattern)
        for type_name in zk.children(root):
            rt = L.resource_type_code(type_name, root)
            for name in zk.children(f"{root}/{type_name}"):
                key = ("acl", rt, name, int(pattern))
                if key not in known:
                    out.append(key)
    return out


def _zk_only_quota_keys(zk: ZkSession, known: set[EntityKey]) -> list[EntityKey]:
    """Kafka's reconcile visits every user, client id, user and client id, and ip entity under
    /config and rewrites, as the image holds it (nothing), each that has quotas or SCRAM
    credentials the image lacks."""

    def name(znode: str) -> str | None:
        return None if znode == L.DEFAULT_ENTITY else L.desanitize(znode)

    candidates: list[tuple[str, EntityKey]] = []
    users = zk.children(f"{L.CONFIG}/{L.USER_CONFIG}")
    for u in users:
        candidates.append((L.config_path(L.USER_CONFIG, u), ("user", name(u))))
    for u in users:
        for c in zk.children(f"{L.CONFIG}/{L.USER_CONFIG}/{u}/clients"):
            entity = tuple(sorted({"user": name(u), "client-id": name(c)}.items()))
            candidates.append((L.config_path(L.USER_CONFIG, f"{u}/clients/{c}"), ("quota", entity)))
    for config_type, kind in ((L.CLIENT_CONFIG, "client-id"), (L.IP_CONFIG, "ip")):
        for z in zk.children(f"{L.CONFIG}/{config_type}"):
            candidates.append((L.config_path(config_type, z), ("quota", ((kind, name(z)),))))
    unknown = [(path, key) for path, key in candidates if key not in known]
    got = zk.get_many([path for path, _ in unknown])
    return [key for (path, key), data in zip(unknown, got, strict=True)
            if data is not None and L.decode_config(path, data[0])]


def _entity_ops(zk: ZkSession, wants: list[zk_writer.EntityZNode],
                codec: PasswordCodec) -> tuple[list[ZkOp], list[tuple[str, bytes]]]:
    """The entities' znodes read (pipelined) and compared; the operations that make them what
    the image says, and the change notifications to create once they are applied."""
    for parent in dict.fromkeys(p for w in wants for p in w.parents):
        zk.client.ensure_path(parent)
    ops: list[ZkOp] = []
    notifications: list[tuple[str, bytes]] = []
    for want, got in zip(wants, zk.get_many([w.path for w in wants]), strict=True):
        op = zk_writer.entity_op(want, got[0] if got else None, got is not None, codec)
        if op is not None:
            ops.append(op)
            if want.notification is not None:
                notifications.append(want.notification)
    return ops, notifications


def _take(it: Iterator[list[RecordAndVersion]], n: int) -> list[list[RecordAndVersion]]:
    """The iterator's next ``n`` batches (fewer at its end, none once it is done)."""
    return list(itertools.islice(it, n))

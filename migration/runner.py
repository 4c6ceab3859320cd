"""The migration driver at work on the active controller: ZooKeeper and the log, asyncio side.

One task per activation (a resignation cancels it; the next activation starts a new one, which
re-reads /migration and starts over from INACTIVE, as Kafka's driver does on a new leader). Each
poll runs the current state's step, then waits the driver's backoff. ZooKeeper calls run in a
worker thread; records go through the controller's normal write path as write events, and the
copy waits for each batch to commit before sending the next.

The copy: BeginTransactionRecord("ZK Migration") alone, then ZooKeeper's metadata in merged
batches, then ZkMigrationStateRecord(MIGRATION) with EndTransactionRecord; /migration then gets
the offset and epoch of that last record. If the controller dies before the EndTransaction, its
next activation aborts the open transaction (activation's AbortTransactionRecord) and, since
/migration still shows the copy as not done, the copy runs again from scratch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from kraftsim.controller.result import ControllerResult, RecordAndVersion
from kraftsim.metadata import versions
from kraftsim.metadata.image.migration import ZkMigrationState
from kraftsim.metadata.messages import BeginTransactionRecord, EndTransactionRecord, ZkMigrationStateRecord
from kraftsim.migration import zk_copy
from kraftsim.migration import zk_layout as L
from kraftsim.migration.driver import BrokerView, DriverState, MigrationDriver
from kraftsim.migration.zk_client import (
    ClaimFailedError,
    ControllerMovedError,
    MigrationFencedError,
    ZkSession,
    ZooKeeperUnavailableError,
)

if TYPE_CHECKING:
    from kraftsim.controller.quorum import QuorumController

log = logging.getLogger("kraftsim.migration")
TRANSACTION_NAME = "ZK Migration"
# Records of Kafka's ClusterDelta: brokers and controllers registering, fenced, unfenced, changed.
CLUSTER_RECORDS = frozenset({"RegisterBrokerRecord", "UnregisterBrokerRecord", "FenceBrokerRecord",
                             "UnfenceBrokerRecord", "BrokerRegistrationChangeRecord", "RegisterControllerRecord"})
PROGRESS_EVERY_S = 5.0


class MigrationRunner:
    def __init__(self, controller: QuorumController) -> None:
        self.controller = controller
        cfg = controller.config
        self.hosts: str = cfg.get("zookeeper.connect")
        self.connect_timeout_ms: int = cfg.get("zookeeper.connection.timeout.ms")
        self.session_timeout_ms: int = cfg.get("zookeeper.session.timeout.ms")
        self.min_batch: int = cfg.get("zookeeper.metadata.migration.min.batch.size")
        self.driver = MigrationDriver(controller.node_id)
        self.zk: ZkSession | None = None
        self.manifest: zk_copy.Manifest | None = None
        self.stopped_reason = ""
        # Called after each copy batch commits, with the batch count so far (tests: a kill mid-copy).
        self.after_batch: Callable[[int], Awaitable[None]] | None = None
        self._wake = asyncio.Event()

    def note_batch(self, records: list[RecordAndVersion], base: int) -> None:
        """A write-path listener: a change to the brokers or controllers wakes the driver at once
        (Kafka's driver polls again when a metadata delta touches the cluster before dual-write),
        rather than at the end of its backoff."""
        if not self.driver.state.allows_dual_write and any(type(r).__name__ in CLUSTER_RECORDS for r, _ in records):
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
        }
        try:
            while self.controller.active:
                self._wake.clear()
                state = self.driver.state
                step = steps.get(state)
                if step is None:
                    self.stopped_reason = (f"{state.name}: the ZooKeeper sync, broker RPCs and dual-write are not "
                                           f"simulated yet")
                    log.info("Migration driver reached %s; %s", state.name, self.stopped_reason)
                    return
                try:
                    await step()
                except (ZooKeeperUnavailableError, ClaimFailedError) as e:
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
                if self.driver.state == state and self.controller.active:
                    await self._backoff(self.driver.next_poll_ms())
                elif self.driver.state == DriverState.INACTIVE and state != DriverState.UNINITIALIZED:
                    log.info("Migration driver is inactive: %s", self.driver.waiting_for)
                    return
        finally:
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
            await asyncio.to_thread(zk.close)

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
        if not versions.is_migration_supported(mv):
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
        txn = versions.metadata_transactions_supported(mv)
        manifest = self.manifest = zk_copy.Manifest()
        started = time.monotonic()
        log.info("Starting ZK migration")
        if txn:
            await self._write("Begin ZK Migration Transaction", [(BeginTransactionRecord(name=TRANSACTION_NAME), 0)])
        else:
            log.warning("Starting ZK Migration without metadata transactions enabled. This is not safe since a "
                        "controller failover or processing error may lead to partially migrated metadata.")
        batches = zk_copy.merged(zk_copy.read_all_metadata(zk_copy.CountingReader(zk, manifest)), self.min_batch)
        last_progress = time.monotonic()
        while True:
            batch = await asyncio.to_thread(_next, batches)
            if batch is None:
                break
            await self._write("ZK Migration Batch", batch)
            manifest.batches += 1
            manifest.count(batch)
            if self.after_batch is not None:
                await self.after_batch(manifest.batches)
            if time.monotonic() - last_progress >= PROGRESS_EVERY_S:
                last_progress = time.monotonic()
                log.info("ZK migration in progress: %s", manifest)
        final: list[RecordAndVersion] = [(ZkMigrationStateRecord(zk_migration_state=int(ZkMigrationState.MIGRATION)), 0)]
        if txn:
            final.append((EndTransactionRecord(), 0))
        offset = await self._write("Complete ZK Migration", final)
        new_state = self.driver.copied(offset, controller.epoch)
        version = await asyncio.to_thread(zk.set_migration, new_state.znode(), new_state.migration_zk_version)
        self.driver.copy_recorded(new_state, version)
        log.info("Completed migration of metadata from ZooKeeper to KRaft in %.0f ms: %s. The current metadata "
                 "offset is now %d with an epoch of %d.", (time.monotonic() - started) * 1000, manifest, offset,
                 controller.epoch)

    async def _write(self, name: str, records: list[RecordAndVersion]) -> int:
        """One write event; returns the offset of its last record once committed."""
        controller = self.controller
        raft = controller.raft
        assert raft is not None
        last: list[int] = []

        def op() -> ControllerResult[None]:
            last.append(raft.end_offset + len(records) - 1)  # where the write path will put them
            return ControllerResult(list(records), None, atomic=False)

        await controller.write(name, op)
        return last[0]

    # ---- for `migration status` and metrics ---------------------------------------------------
    def status(self) -> dict[str, Any]:
        """The driver's state, what it waits for, /migration as it last wrote or read it, and the
        write-behind lag (Kafka's ZkWriteBehindLag: 0 unless dual-writing, which is not done yet)."""
        lead = self.driver.leadership
        z = lead.znode()
        return {"driverState": self.driver.state.name, "waitingFor": self.driver.waiting_for,
                "stopped": self.stopped_reason,
                "migration": {"kraft_controller_id": z.kraft_controller_id,
                              "kraft_controller_epoch": z.kraft_controller_epoch,
                              "kraft_metadata_offset": z.kraft_metadata_offset,
                              "kraft_metadata_epoch": z.kraft_metadata_epoch},
                "migrationZkVersion": lead.migration_zk_version, "zkControllerEpoch": lead.zk_controller_epoch,
                "zkWriteBehindLag": 0, "copy": str(self.manifest) if self.manifest else None}


class CopyAbortedError(Exception):
    """The copy failed and took the controller down with it."""


def _is_zookeeper_error(e: BaseException) -> bool:
    """kazoo's errors (connection loss, session expiry, ...): Kafka's MigrationClientException."""
    return type(e).__module__.startswith("kazoo.")


def _next(it: Iterator[list[RecordAndVersion]]) -> list[RecordAndVersion] | None:
    return next(it, None)

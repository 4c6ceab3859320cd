"""The migration driver's state machine (Kafka's KRaftMigrationDriver), without any I/O.

The driver is soft state on the active controller: it claims the ZooKeeper controller role, copies
ZooKeeper's metadata into the log once, and then keeps ZooKeeper in step. This module decides;
``migration.runner`` reads ZooKeeper and the image, writes, and reports back through the methods
here. Each transition is checked against Kafka's table and resets the poll backoff (100 ms × 2^n,
at most 60 s, 2 % jitter), as Kafka's driver does.

``LeadershipState`` is Kafka's ZkMigrationLeadershipState: what /migration holds (the KRaft
controller and the offset ZooKeeper is in sync with) plus the two zkVersions every fenced write
checks, those of /migration and /controller_epoch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from enum import Enum
from typing import Final

from kraftsim.metadata.image.migration import ZkMigrationState
from kraftsim.migration.zk_layout import MigrationZNode

UNKNOWN_ZK_VERSION: Final = -2
BACKOFF_INITIAL_MS: Final = 100
BACKOFF_MAX_MS: Final = 60_000
BACKOFF_JITTER: Final = 0.02


class DriverState(Enum):
    UNINITIALIZED = 0
    INACTIVE = 1
    WAIT_FOR_CONTROLLER_QUORUM = 2
    WAIT_FOR_BROKERS = 3
    BECOME_CONTROLLER = 4
    ZK_MIGRATION = 5
    SYNC_KRAFT_TO_ZK = 6
    KRAFT_CONTROLLER_TO_BROKER_COMM = 7
    DUAL_WRITE = 8

    @property
    def allows_dual_write(self) -> bool:
        return self in (DriverState.KRAFT_CONTROLLER_TO_BROKER_COMM, DriverState.DUAL_WRITE)


S = DriverState
# MigrationDriverState's valid transitions (besides staying put); any state may go INACTIVE.
TRANSITIONS: Final[dict[DriverState, frozenset[DriverState]]] = {
    S.UNINITIALIZED: frozenset({S.INACTIVE}),
    S.INACTIVE: frozenset({S.WAIT_FOR_CONTROLLER_QUORUM}),
    S.WAIT_FOR_CONTROLLER_QUORUM: frozenset({S.INACTIVE, S.BECOME_CONTROLLER, S.WAIT_FOR_BROKERS}),
    S.WAIT_FOR_BROKERS: frozenset({S.INACTIVE, S.BECOME_CONTROLLER}),
    S.BECOME_CONTROLLER: frozenset({S.INACTIVE, S.ZK_MIGRATION, S.SYNC_KRAFT_TO_ZK}),
    S.ZK_MIGRATION: frozenset({S.INACTIVE, S.SYNC_KRAFT_TO_ZK}),
    S.SYNC_KRAFT_TO_ZK: frozenset({S.INACTIVE, S.KRAFT_CONTROLLER_TO_BROKER_COMM}),
    S.KRAFT_CONTROLLER_TO_BROKER_COMM: frozenset({S.INACTIVE, S.DUAL_WRITE}),
    S.DUAL_WRITE: frozenset({S.INACTIVE}),
}


class IllegalTransitionError(RuntimeError):
    pass


@dataclass(frozen=True)
class LeadershipState:
    kraft_controller_id: int = -1
    kraft_controller_epoch: int = -1
    kraft_metadata_offset: int = -1
    kraft_metadata_epoch: int = -1
    migration_zk_version: int = UNKNOWN_ZK_VERSION
    zk_controller_epoch: int = -1
    zk_controller_epoch_zk_version: int = UNKNOWN_ZK_VERSION

    @property
    def initial_copy_done(self) -> bool:
        """Kafka's initialZkMigrationComplete: /migration holds a positive offset."""
        return self.kraft_metadata_offset > 0

    def znode(self) -> MigrationZNode:
        return MigrationZNode(self.kraft_controller_id, self.kraft_controller_epoch, self.kraft_metadata_offset,
                              self.kraft_metadata_epoch)

    @staticmethod
    def from_znode(z: MigrationZNode, zk_version: int) -> LeadershipState:
        return LeadershipState(z.kraft_controller_id, z.kraft_controller_epoch, z.kraft_metadata_offset,
                               z.kraft_metadata_epoch, zk_version)

    def with_kraft_controller(self, node_id: int, epoch: int) -> LeadershipState:
        return replace(self, kraft_controller_id=node_id, kraft_controller_epoch=epoch,
                       zk_controller_epoch=-1, zk_controller_epoch_zk_version=UNKNOWN_ZK_VERSION)

    def with_zk_controller(self, epoch: int, zk_version: int) -> LeadershipState:
        return replace(self, zk_controller_epoch=epoch, zk_controller_epoch_zk_version=zk_version)

    def with_migration_zk_version(self, zk_version: int) -> LeadershipState:
        return replace(self, migration_zk_version=zk_version)

    def with_offset(self, offset: int, epoch: int) -> LeadershipState:
        return replace(self, kraft_metadata_offset=offset, kraft_metadata_epoch=epoch)


@dataclass(frozen=True)
class BrokerView:
    """A broker as the image holds it: enough to judge readiness."""
    broker_id: int
    migrating_zk_broker: bool


class MigrationDriver:
    """Decisions only. Every method is called by the runner with what it has just observed."""

    def __init__(self, node_id: int, rng: random.Random | None = None) -> None:
        self.node_id = node_id
        self.state = S.UNINITIALIZED
        self.leadership = LeadershipState()
        self.attempts = 0  # polls since the last transition (the backoff's exponent)
        self.waiting_for = ""  # why the driver is not moving: for logs and `migration status`
        self._rng = rng or random.Random()

    def transition(self, to: DriverState) -> None:
        if to == self.state:
            return
        if to not in TRANSITIONS[self.state]:
            raise IllegalTransitionError(f"invalid transition in migration driver from {self.state.name} "
                                         f"to {to.name}")
        self.state = to
        self.attempts = 0
        self.waiting_for = ""

    def next_poll_ms(self) -> int:
        """Exponential backoff with jitter; each call counts one more attempt."""
        base = min(BACKOFF_MAX_MS, BACKOFF_INITIAL_MS * (2 ** min(self.attempts, 20)))
        self.attempts += 1
        jitter = 1 + self._rng.uniform(-BACKOFF_JITTER, BACKOFF_JITTER)
        return max(1, int(base * jitter))

    # ---- observations --------------------------------------------------------------------
    def recovered(self, znode: MigrationZNode, zk_version: int) -> None:
        """/migration read (or created): UNINITIALIZED -> INACTIVE."""
        self.leadership = LeadershipState.from_znode(znode, zk_version)
        self.transition(S.INACTIVE)

    def became_leader(self, epoch: int, znode: MigrationZNode, zk_version: int) -> None:
        """This node leads the KRaft quorum: take /migration as it is now, with our id and epoch."""
        self.leadership = LeadershipState.from_znode(znode, zk_version).with_kraft_controller(self.node_id, epoch)
        self.transition(S.WAIT_FOR_CONTROLLER_QUORUM)

    def quorum_checked(self, persisted: ZkMigrationState, quorum_ready: bool) -> None:
        """WAIT_FOR_CONTROLLER_QUORUM: where the persisted state says to go."""
        if persisted == ZkMigrationState.PRE_MIGRATION:
            if quorum_ready:
                self.transition(S.WAIT_FOR_BROKERS)
            else:
                self.waiting_for = "controllers ready for the migration (ZkMigrationReady)"
        elif persisted == ZkMigrationState.MIGRATION:
            if self.leadership.initial_copy_done:
                self.transition(S.BECOME_CONTROLLER)
            else:
                self.waiting_for = "KRaft controller indicates an active migration, but the ZK state does not"
                self.transition(S.INACTIVE)
        else:  # NONE (never migrate) or POST_MIGRATION (done): the driver has nothing to do
            self.waiting_for = f"the migration state is {persisted.name}"
            self.transition(S.INACTIVE)

    def brokers_ready(self, image_brokers: dict[int, BrokerView], zk_ids: set[int],
                      assigned_ids: set[int] | None) -> bool:
        """WAIT_FOR_BROKERS: every broker in /brokers/ids, and then every broker in an assignment,
        registered with IsMigratingZkBroker. ``assigned_ids`` is read only once the first check
        passes (it is the expensive one): None asks for it."""
        self.waiting_for = ""
        if not image_brokers:
            self.waiting_for = "brokers to register with KRaft"
            return False
        if not zk_ids:
            self.waiting_for = "brokers to register in ZooKeeper"
            return False
        missing = sorted(b for b in zk_ids if not _migrating(image_brokers, b))
        if missing:
            self.waiting_for = f"ZK brokers {missing} to register with KRaft"
            return False
        if assigned_ids is None:
            self.waiting_for = "the brokers named in topic assignments to be checked"
            return False
        missing = sorted(b for b in assigned_ids if not _migrating(image_brokers, b))
        if missing:
            self.waiting_for = f"ZK brokers {missing} found in metadata to register with KRaft"
            return False
        self.transition(S.BECOME_CONTROLLER)
        return True

    def claimed(self, zk_controller_epoch: int, epoch_zk_version: int) -> None:
        self.leadership = self.leadership.with_zk_controller(zk_controller_epoch, epoch_zk_version)

    def claim_failed(self, why: str) -> None:
        self.leadership = self.leadership.with_zk_controller(-1, UNKNOWN_ZK_VERSION)
        self.waiting_for = f"ZooKeeper controllership ({why})"

    def migration_written(self, zk_version: int) -> None:
        """/migration updated (after the claim): copy or resync depending on what it says."""
        self.leadership = self.leadership.with_migration_zk_version(zk_version)
        if self.state == S.BECOME_CONTROLLER:
            self.transition(S.SYNC_KRAFT_TO_ZK if self.leadership.initial_copy_done else S.ZK_MIGRATION)

    def copied(self, offset: int, epoch: int) -> LeadershipState:
        """The copy committed up to ``offset``: the state /migration must now hold."""
        return self.leadership.with_offset(offset, epoch)

    def copy_recorded(self, new_state: LeadershipState, zk_version: int) -> None:
        self.leadership = new_state.with_migration_zk_version(zk_version)
        self.transition(S.SYNC_KRAFT_TO_ZK)


    def synced(self) -> None:
        """SYNC_KRAFT_TO_ZK done: ZooKeeper holds the image."""
        self.transition(S.KRAFT_CONTROLLER_TO_BROKER_COMM)

    def brokers_told(self) -> None:
        self.transition(S.DUAL_WRITE)


def _migrating(brokers: dict[int, BrokerView], broker_id: int) -> bool:
    b = brokers.get(broker_id)
    return b is not None and b.migrating_zk_broker

"""The persisted ZooKeeper-migration state (ZkMigrationStateRecord, KIP-866).

The numbering is Kafka 3.5+'s: PRE_MIGRATION and MIGRATION were swapped after 3.4, so the values
are not in lifecycle order. ZK (4) is never persisted; it exists for the ZK controller's metric.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import IntEnum
from typing import Any

from kraftsim.metadata import versions
from kraftsim.metadata.image.errors import ReplayError, UnwritableMetadataError
from kraftsim.metadata.messages import ZkMigrationStateRecord
from kraftsim.rpc.message import Message


class ZkMigrationState(IntEnum):
    NONE = 0
    MIGRATION = 1
    PRE_MIGRATION = 2
    POST_MIGRATION = 3
    ZK = 4

    def in_progress(self) -> bool:
        """Pre-migration or migration: metadata.version changes are refused meanwhile."""
        return self in (ZkMigrationState.PRE_MIGRATION, ZkMigrationState.MIGRATION)


class MigrationImage:
    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = ZkMigrationState.NONE

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MigrationImage):
            return NotImplemented
        return self.state == other.state

    def __repr__(self) -> str:
        return f"MigrationImage({self.state.name})"

    def records(self, mv: int, release: versions.Release) -> Iterator[tuple[Message, int]]:
        """Written whenever the MV can hold it, even NONE, as 3.9's FeaturesImage.write does;
        never from 4.0, whose images keep no migration state."""
        if not release.is_3x:
            return
        if release.is_migration_supported(mv):
            yield ZkMigrationStateRecord(zk_migration_state=int(self.state)), 0
        elif self.state != ZkMigrationState.NONE:
            raise UnwritableMetadataError(f"the ZK Migration state which was {self.state.name}")

    # --- the only mutator (see journal.py) ---------------------------------------------------

    def get_migration_state(self, _key: None) -> ZkMigrationState:
        return self.state

    def swap_migration_state(self, _key: None, state: ZkMigrationState) -> ZkMigrationState:
        old, self.state = self.state, state
        return old


def replay_zk_migration_state(image: MigrationImage, record: Any, undo: list | None) -> None:
    try:
        state = ZkMigrationState(record.zk_migration_state)
    except ValueError:
        raise ReplayError(f"Value {record.zk_migration_state} is not a valid Zk migration state") from None
    old = image.swap_migration_state(None, state)
    if undo is not None:
        undo.append((image.swap_migration_state, None, old))

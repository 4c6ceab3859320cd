"""The records a controller appends when it becomes active (Kafka's ActivationRecordsGenerator).

On an empty log: the bootstrap records from ``bootstrap.checkpoint`` (metadata.version), inside
a metadata transaction when that version has them, with the initial ZooKeeper migration state.
On an existing log: abort a metadata transaction a previous leader left open, and move an
unfinished migration on when migration was switched off. Some combinations Kafka refuses to
start with; so does this, with Kafka's message.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from kraftsim.metadata import files, versions
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.image.migration import ZkMigrationState
from kraftsim.metadata.messages import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    ZkMigrationStateRecord,
)
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.metadata.snapshots import SnapshotError, read_snapshot_file

log = logging.getLogger("kraftsim.controller")


class ActivationError(Exception):
    """A state Kafka's controller refuses to become active in (fatal at start-up)."""


def bootstrap_records(metadata_dir: Path) -> list[tuple[Any, int]]:
    path = metadata_dir / files.BOOTSTRAP_CHECKPOINT
    try:
        return list(read_snapshot_file(path))
    except (SnapshotError, OSError) as e:
        raise files.StorageError(f"cannot read {path}: {e}") from e


def _migration_record(state: ZkMigrationState) -> RecordAndVersion:
    return ZkMigrationStateRecord(zk_migration_state=int(state)), 0


def activation_records(image: MetadataImage, metadata_dir: Path, migration_enabled: bool) -> list[RecordAndVersion]:
    out: list[RecordAndVersion] = []
    txn_open = image.transaction.open
    if image.offset == -1 or image.features.metadata_version is None:
        boot = bootstrap_records(metadata_dir)
        mv = next((r.feature_level for r, _ in boot if type(r).__name__ == "FeatureLevelRecord"
                   and r.name == versions.FEATURE_NAME), versions.MINIMUM_BOOTSTRAP)
        txn = versions.metadata_transactions_supported(mv)
        if txn_open and txn:
            out.append((AbortTransactionRecord(reason="Controller failover"), 0))
        if txn:
            out.append((BeginTransactionRecord(name="Bootstrap records"), 0))
        out.extend(boot)
        if txn:
            initial = ZkMigrationState.PRE_MIGRATION if migration_enabled else ZkMigrationState.NONE
            out.append(_migration_record(initial))
            out.append((EndTransactionRecord(), 0))
        elif migration_enabled:
            raise ActivationError(f"The bootstrap metadata.version {versions.name(mv)} does not support "
                                  f"ZK migrations. Cannot continue with ZK migrations enabled.")
        log.info("Performing controller activation. The metadata log appears to be empty. Appending %d "
                 "bootstrap record(s) at metadata.version %s.", len(boot), versions.name(mv))
        return out
    mv = image.metadata_version
    if txn_open:
        out.append((AbortTransactionRecord(reason="Controller failover"), 0))
    state = image.migration.state
    if versions.is_migration_supported(mv):
        if state == ZkMigrationState.NONE and migration_enabled:
            raise ActivationError("Should not have ZK migrations enabled on a cluster that was created "
                                  "in KRaft mode.")
        if state == ZkMigrationState.MIGRATION and not migration_enabled:
            out.append(_migration_record(ZkMigrationState.POST_MIGRATION))
    elif migration_enabled:
        raise ActivationError(f"Should not have ZK migrations enabled on a cluster running "
                              f"metadata.version {versions.name(mv)}")
    return out

"""The records a controller appends when it becomes active (Kafka's ActivationRecordsGenerator).

On an empty log: the bootstrap records from ``bootstrap.checkpoint`` (metadata.version), inside
a metadata transaction when that version has them, with the initial ZooKeeper migration state
(3.9) or, when the bootstrap turns ELR on, a cluster-level min.insync.replicas (4.x).
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
    ConfigRecord,
    EndTransactionRecord,
    ZkMigrationStateRecord,
)
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.metadata.snapshots import SnapshotError, read_snapshot_file

log = logging.getLogger("kraftsim.controller")
BROKER_RESOURCE = 4  # ConfigResource.Type.BROKER


class ActivationError(Exception):
    """A state Kafka's controller refuses to become active in (fatal at start-up)."""


def bootstrap_path(metadata_dir: Path) -> Path:
    """Where ``format`` left the bootstrap records: ``bootstrap.checkpoint``, or (a 4.4 format)
    the metadata partition's first checkpoint, which holds them and no log state."""
    path = metadata_dir / files.BOOTSTRAP_CHECKPOINT
    in_log = metadata_dir / files.METADATA_TOPIC_DIR / files.BOOTSTRAP_SNAPSHOT
    return in_log if not path.exists() and in_log.exists() else path


def bootstrap_records(metadata_dir: Path) -> list[tuple[Any, int]]:
    path = bootstrap_path(metadata_dir)
    try:
        return list(read_snapshot_file(path))
    except (SnapshotError, OSError) as e:
        raise files.StorageError(f"cannot read {path}: {e}") from e


def _level_name(level: int) -> str:
    """A level by the name the releases that know it give it."""
    for line in reversed(versions.release_lines()):
        r = versions.release(line)
        if r.is_known(level):
            return f"{r.name(level)} (level {level})"
    return f"level {level}"


def _migration_record(state: ZkMigrationState) -> RecordAndVersion:
    return ZkMigrationStateRecord(zk_migration_state=int(state)), 0


def activation_records(image: MetadataImage, metadata_dir: Path, migration_enabled: bool,
                       min_insync_replicas: int = 1) -> list[RecordAndVersion]:
    """``min_insync_replicas``: the controller's own (static) min.insync.replicas, which a 4.x
    bootstrap that turns ELR on writes as the cluster-level value."""
    out: list[RecordAndVersion] = []
    release = image.release
    txn_open = image.transaction.open
    if image.offset == -1 or image.features.metadata_version is None:
        boot = bootstrap_records(metadata_dir)
        mv = next((r.feature_level for r, _ in boot if type(r).__name__ == "FeatureLevelRecord"
                   and r.name == versions.FEATURE_NAME), release.minimum_bootstrap)
        lo, hi = image.supported_features.get(versions.FEATURE_NAME, (release.minimum, release.latest_production))
        if not lo <= mv <= hi or not release.is_known(mv):
            # A directory formatted for another release (a 4.4 format started as 3.9, say).
            raise files.StorageError(
                f"Cannot run the bootstrap metadata.version {_level_name(mv)} of {bootstrap_path(metadata_dir)}: "
                f"a Kafka {release} controller runs {release.name(lo)} to {release.name(hi)}")
        txn = release.metadata_transactions_supported(mv)
        if txn_open and txn:
            out.append((AbortTransactionRecord(reason="Controller failover"), 0))
        if txn:
            out.append((BeginTransactionRecord(name="Bootstrap records"), 0))
        out.extend(boot)
        if not release.is_3x:
            # 4.x: no migration state; ELR on from the start needs a cluster-level min.insync.replicas.
            if any(type(r).__name__ == "FeatureLevelRecord" and r.name == versions.ELR_VERSION and r.feature_level > 0
                   for r, _ in boot):
                out.append((ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name="min.insync.replicas",
                                         value=str(min_insync_replicas)), 0))
            if txn:
                out.append((EndTransactionRecord(), 0))
        elif txn:
            initial = ZkMigrationState.PRE_MIGRATION if migration_enabled else ZkMigrationState.NONE
            out.append(_migration_record(initial))
            out.append((EndTransactionRecord(), 0))
        elif migration_enabled:
            raise ActivationError(f"The bootstrap metadata.version {release.name(mv)} does not support "
                                  f"ZK migrations. Cannot continue with ZK migrations enabled.")
        log.info("Performing controller activation. The metadata log appears to be empty. Appending %d "
                 "bootstrap record(s) at metadata.version %s.", len(boot), release.name(mv))
        return out
    mv = image.metadata_version
    if txn_open:
        out.append((AbortTransactionRecord(reason="Controller failover"), 0))
    if not release.is_3x:
        return out  # 4.x keeps no migration state, and has no migration to move on
    state = image.migration.state
    if release.is_migration_supported(mv):
        if state == ZkMigrationState.NONE and migration_enabled:
            raise ActivationError("Should not have ZK migrations enabled on a cluster that was created "
                                  "in KRaft mode.")
        if state == ZkMigrationState.MIGRATION and not migration_enabled:
            out.append(_migration_record(ZkMigrationState.POST_MIGRATION))
    elif migration_enabled:
        raise ActivationError(f"Should not have ZK migrations enabled on a cluster running "
                              f"metadata.version {release.name(mv)}")
    return out

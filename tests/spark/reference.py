"""What the project's own single-process reader says about a log: the reference for Spark."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraftsim.metadata import records as recs
from kraftsim.metadata import versions
from kraftsim.metadata.batch import decode_control_record
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.metadata.snapshots import SnapshotId, read_snapshot_file
from kraftsim.rpc import uuids
from kraftsim.rpc.message import Message
from pyspark_kraft.image import MV, config_key, entity_key, partition_dict


@dataclass
class Rec:
    offset: int
    base_offset: int
    epoch: int
    timestamp: int
    is_control: bool
    record_type: str | None
    version: int | None
    msg: Message | None


def read_log(directory: Path) -> list[Rec]:
    """Every record of the segments, control records included, decoded by the project's code."""
    mlog = MetadataLog.open(directory, LogConfig(linger_ms=0))
    out = []
    try:
        for b in mlog.batches(mlog.start_offset):
            for r in b.records():
                if b.is_control:
                    ctl = decode_control_record(r)
                    name = None
                    if ctl is not None:
                        name = type(ctl[1]).__name__
                    out.append(Rec(r.offset, b.base_offset, b.partition_leader_epoch, r.timestamp, True, name,
                                   0 if ctl else None, ctl[1] if ctl else None))
                else:
                    assert r.value is not None
                    msg, version = recs.unframe(r.value)
                    out.append(Rec(r.offset, b.base_offset, b.partition_leader_epoch, r.timestamp, False,
                                   type(msg).__name__, version, msg))
    finally:
        mlog.close()
    return out


def python_image(directory: Path, offset: int, snapshot: SnapshotId | None = None,
                 release: versions.Release | None = None) -> dict[str, Any]:
    """The Python MetadataImage of ``release`` (default 3.9) replayed to ``offset`` (from
    ``snapshot`` if given), plain form."""
    img = MetadataImage(release=release)
    start = 0
    part = directory / "__cluster_metadata-0"
    if snapshot is not None:
        img.load_snapshot(read_snapshot_file(part / snapshot.file_name), snapshot.end_offset - 1)
        start = snapshot.end_offset
    for r in read_log(directory):
        if r.offset < start or r.is_control or r.offset > offset:
            continue
        img.replay(r.msg, r.offset, r.timestamp)
    return from_metadata_image(img)


def from_metadata_image(img: Any) -> dict[str, Any]:
    """The plain form of a :class:`kraftsim.metadata.image.image.MetadataImage`."""
    s = uuids.to_str
    brokers = {}
    for b in img.cluster.brokers.values():
        brokers[b.id] = {
            "epoch": b.epoch, "incarnationId": s(b.incarnation_id), "fenced": b.fenced,
            "inControlledShutdown": b.in_controlled_shutdown, "isMigratingZkBroker": b.is_migrating_zk_broker,
            "rack": b.rack, "listeners": {n: [h, p, sp] for n, (h, p, sp) in b.listeners.items()},
        }
    controllers = {c.id: {"incarnationId": s(c.incarnation_id), "zkMigrationReady": c.zk_migration_ready,
                          "listeners": {n: [h, p, sp] for n, (h, p, sp) in c.listeners.items()}}
                   for c in img.cluster.controllers.values()}
    topics = {}
    for t in img.topics.by_id.values():
        topics[t.name] = {"id": s(t.id), "partitions": {
            pid: partition_dict(p.leader, p.leader_epoch, p.partition_epoch, p.replicas, p.isr, p.removing_replicas,
                                 p.adding_replicas, p.elr, p.last_known_elr, p.leader_recovery_state)
            for pid, p in t.partitions.items()}}
    configs = {config_key(rt, rn): dict(kv) for (rt, rn), kv in img.configs.resources.items()}
    features = dict(img.features.finalized)
    if img.features.metadata_version is not None:
        features[MV] = img.features.metadata_version
    acls = {s(i): {"resourceType": a.resource_type, "resourceName": a.resource_name, "patternType": a.pattern_type,
                   "principal": a.principal, "host": a.host, "operation": a.operation,
                   "permissionType": a.permission_type} for i, a in img.acls.by_id.items()}
    quotas = {entity_key(list(e)): dict(kv) for e, kv in img.quotas.entities.items()}
    return {"offset": img.offset, "features": features, "migration": img.migration.state.name,
            "brokers": brokers, "controllers": controllers, "topics": topics, "configs": configs,
            "acls": acls, "quotas": quotas}

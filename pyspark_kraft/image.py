"""The metadata image at an offset, computed in Spark as the latest state per entity.

Each slice is a group-by over the records up to the offset: a broker is its last
RegisterBrokerRecord plus the fence/unfence/controlled-shutdown changes after it, unless an
UnregisterBrokerRecord came later (a controller likewise, with UnregisterControllerRecord, Kafka
4.4); a partition is its last PartitionRecord with every
PartitionChangeRecord after it folded in field by field (the latest non-"unchanged" value wins;
each change bumps the partition epoch, each leader change the leader epoch), as Kafka's
PartitionRegistration.merge does; configs, features, ACLs and quotas are the latest value per
key, deletions included. Records of a metadata transaction that was aborted, or is still open at
the offset, are left out, as Kafka's metadata loader does.

The tests give the Python :class:`MetadataImage` the same plain form (``config_key``,
``entity_key``, ``partition_dict``), which is how they hold the two to each other.
"""

from __future__ import annotations

from typing import Any

from kraftsim.metadata.image.migration import ZkMigrationState

CONFIG_TYPES = {2: "topic", 4: "broker", 8: "broker-logger", 16: "client-metrics", 32: "group"}
MV = "metadata.version"
# The typed columns the image reads (the cached frame keeps only these).
IMAGE_TYPES = ["RegisterBrokerRecord", "UnregisterBrokerRecord", "FenceBrokerRecord", "UnfenceBrokerRecord",
               "BrokerRegistrationChangeRecord", "RegisterControllerRecord", "UnregisterControllerRecord", "TopicRecord",
               "RemoveTopicRecord", "PartitionRecord", "PartitionChangeRecord", "ConfigRecord", "FeatureLevelRecord",
               "ZkMigrationStateRecord", "AccessControlEntryRecord", "RemoveAccessControlEntryRecord",
               "ClientQuotaRecord"]


class ImageError(Exception):
    """The image cannot be computed at that offset from what is on disk."""


def config_key(rtype: int, name: str) -> str:
    return f"{CONFIG_TYPES.get(rtype, str(rtype))}:{name}"


def entity_key(pairs: list[tuple[str, str | None]]) -> str:
    """A client-quota entity as text: ``user=alice,client-id=<default>``."""
    return ",".join(f"{t}={'<default>' if n is None else n}" for t, n in sorted(pairs, key=lambda p: p[0]))


def partition_dict(leader: int, leader_epoch: int, partition_epoch: int, replicas: list[int], isr: list[int],
                    removing: list[int], adding: list[int], elr: list[int], last_known_elr: list[int],
                    lrs: int) -> dict[str, Any]:
    return {"leader": leader, "leaderEpoch": leader_epoch, "partitionEpoch": partition_epoch,
            "replicas": list(replicas), "isr": list(isr), "removingReplicas": list(removing),
            "addingReplicas": list(adding), "eligibleLeaderReplicas": list(elr), "lastKnownElr": list(last_known_elr),
            "leaderRecoveryState": lrs}


# ---- the image in Spark -------------------------------------------------------------------------

_LISTS = ["replicas", "isr", "removingReplicas", "addingReplicas", "eligibleLeaderReplicas", "lastKnownElr"]
_ACL_FIELDS = ["resourceType", "resourceName", "patternType", "principal", "host", "operation", "permissionType"]


def _records_upto(df: Any, offset: int) -> tuple[Any, Any]:
    """(the cached frame, the records to fold): data records at or below ``offset`` with only
    the columns the image reads, without the records of aborted or still-open transactions."""
    from pyspark.sql import functions as F

    d = (df.where((F.col("offset") <= offset) & ~F.col("is_control"))
         .select("offset", "record_type", *IMAGE_TYPES).cache())
    marks = (d.where(F.col("record_type").isin("BeginTransactionRecord", "EndTransactionRecord",
                                               "AbortTransactionRecord"))
             .select("offset", "record_type").orderBy("offset").collect())
    dropped: list[tuple[int, int]] = []
    begin: int | None = None
    for r in marks:
        if r["record_type"] == "BeginTransactionRecord":
            begin = r["offset"]
        elif begin is not None:
            if r["record_type"] == "AbortTransactionRecord":
                dropped.append((begin, r["offset"]))
            begin = None
    if begin is not None:
        dropped.append((begin, offset))
    out = d
    for lo, hi in dropped:
        out = out.where(~F.col("offset").between(lo, hi))
    return d, out


def _events(d: Any) -> Any:
    """Every record that changes an entity, as (kind, k, offset, full, present, fields...).

    ``full`` marks a record that states the whole entity (RegisterBrokerRecord, PartitionRecord,
    and every record of the kinds whose state is just the latest value); ``present`` is false for
    the records that delete it.
    """
    from pyspark.sql import functions as F

    def of(rtype: str) -> Any:
        return d.where(F.col("record_type") == rtype).select("offset", f"{rtype}.*")

    def head(kind: str, key: Any, full: bool, present: Any) -> list[Any]:
        return [F.lit(kind).alias("kind"), key.alias("k"), "offset", F.lit(full).alias("full"),
                (F.lit(present) if isinstance(present, bool) else present).alias("present")]

    s = F.col
    part_key = F.concat_ws(":", "topicId", "partitionId")
    parts = [
        of("RegisterBrokerRecord").select(
            *head("broker", s("brokerId").cast("string"), True, True), "brokerEpoch", "incarnationId", "fenced",
            s("inControlledShutdown").alias("ics"), "isMigratingZkBroker", "rack", "endPoints"),
        of("FenceBrokerRecord").select(*head("broker", s("id").cast("string"), False, True),
                                       F.lit(True).alias("fenced")),
        of("UnfenceBrokerRecord").select(*head("broker", s("id").cast("string"), False, True),
                                         F.lit(False).alias("fenced")),
        of("BrokerRegistrationChangeRecord").select(
            *head("broker", s("brokerId").cast("string"), False, True),
            F.when(s("fenced") == 1, True).when(s("fenced") == -1, False).alias("fenced"),
            F.when(s("inControlledShutdown") == 1, True).alias("ics")),
        of("UnregisterBrokerRecord").select(*head("broker", s("brokerId").cast("string"), False, False)),
        of("RegisterControllerRecord").select(
            *head("controller", s("controllerId").cast("string"), True, True), "incarnationId", "zkMigrationReady",
            "endPoints"),
        of("UnregisterControllerRecord").select(*head("controller", s("controllerId").cast("string"), False, False)),
        of("TopicRecord").select(*head("topic", s("topicId"), True, True), "name", "topicId"),
        of("RemoveTopicRecord").select(*head("topic", s("topicId"), False, False), "topicId"),
        of("PartitionRecord").select(
            *head("partition", part_key, True, True), "topicId", "partitionId", *_LISTS, "leader",
            "leaderRecoveryState", "leaderEpoch", "partitionEpoch"),
        of("PartitionChangeRecord").select(
            *head("partition", part_key, False, True), "topicId", "partitionId", *_LISTS,
            F.when(s("leader") != -2, s("leader")).alias("leader"),
            F.when(s("leaderRecoveryState") != -1, s("leaderRecoveryState")).alias("leaderRecoveryState")),
        of("ConfigRecord").select(
            *head("config", F.to_json(F.array(s("resourceType").cast("string"), "resourceName", "name")), True,
                  s("value").isNotNull()), "resourceType", "resourceName", "name", "value"),
        of("FeatureLevelRecord").select(*head("feature", s("name"), True, True), "name", "featureLevel"),
        of("ZkMigrationStateRecord").select(*head("migration", F.lit(""), True, True), "zkMigrationState"),
        of("AccessControlEntryRecord").select(*head("acl", s("id"), True, True), *_ACL_FIELDS),
        of("RemoveAccessControlEntryRecord").select(*head("acl", s("id"), True, False)),
        of("ClientQuotaRecord").select(
            *head("quota", F.to_json(F.struct(F.array_sort(s("entity")).alias("e"), s("key").alias("q"))), True,
                  ~s("remove")), "entity", s("key").alias("quotaKey"), s("value").alias("quotaValue")),
    ]
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p, allowMissingColumns=True)
    return out


def _states(events: Any) -> Any:
    """One row per entity: its events from the last ``full`` one on, folded field by field (the
    latest non-null value wins), in one shuffle; Spark's higher-order functions do the folding."""
    from pyspark.sql import functions as F

    cols = [c for c in events.columns if c not in ("kind", "k")]
    grouped = events.groupBy("kind", "k").agg(
        F.array_sort(F.collect_list(F.struct(*cols))).alias("evs"),  # offset first: sorted by offset
        F.max(F.when(F.col("full"), F.col("offset"))).alias("base"))
    after = F.filter("evs", lambda e: e["offset"] >= F.coalesce(F.col("base"), F.lit(-1)))
    def is_set(c: str) -> Any:  # a factory: Spark reads a lambda's parameters as its arguments
        return lambda e: e[c].isNotNull()

    folded = [F.try_element_at(F.filter(after, is_set(c)), F.lit(-1))[c].alias(c)
              for c in cols if c not in ("offset", "full", "present")]
    last = F.try_element_at(after, F.lit(-1))
    return grouped.select(
        "kind", "k", *folded,
        last["offset"].alias("last_offset"), last["present"].alias("present"),
        F.exists(after, lambda e: ~e["present"]).alias("deleted"),
        F.exists(after, lambda e: F.coalesce(e["ics"], F.lit(False))).alias("ics_any"),
        F.size(F.filter(after, lambda e: ~e["full"] & e["leader"].isNotNull())).alias("leaderBumps"),
        F.size(F.filter(after, lambda e: ~e["full"])).alias("changes"),
        F.try_element_at(F.filter("evs", lambda e: e["full"] & (e["offset"] == F.col("base"))),
                         F.lit(1)).alias("first"))


def _assemble(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Entity states (from Spark) into the image: partitions under their live topic, a removed
    topic's configs dropped with it."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["kind"], []).append(r)

    def listeners(r: dict[str, Any]) -> dict[str, list[Any]]:
        return {e["name"]: [e["host"], e["port"], e["securityProtocol"]] for e in r.get("endPoints") or []}

    brokers = {}
    for r in by.get("broker", []):
        first = r.get("first")
        if first is None or r["deleted"]:  # never registered, or unregistered since
            continue
        brokers[int(r["k"])] = {
            "epoch": first["brokerEpoch"], "incarnationId": first["incarnationId"], "fenced": r["fenced"],
            "inControlledShutdown": bool(r["ics_any"]), "isMigratingZkBroker": bool(first.get("isMigratingZkBroker")),
            "rack": first.get("rack"), "listeners": listeners(first)}
    controllers = {int(r["k"]): {"incarnationId": r["incarnationId"],
                                 "zkMigrationReady": bool(r.get("zkMigrationReady")), "listeners": listeners(r)}
                   for r in by.get("controller", []) if r.get("first") is not None and not r["deleted"]}
    live_topics: dict[str, str] = {}
    removed_at: dict[str, int] = {}
    names = {r["k"]: r.get("name") for r in by.get("topic", [])}
    for r in by.get("topic", []):
        if r["deleted"]:
            name = names.get(r["k"])
            if name is not None:
                removed_at[name] = max(removed_at.get(name, -1), r["last_offset"])
        elif r.get("name") is not None:
            live_topics[r["k"]] = r["name"]
    topics: dict[str, Any] = {name: {"id": tid, "partitions": {}} for tid, name in live_topics.items()}
    for r in by.get("partition", []):
        first = r.get("first")
        name = live_topics.get(r["topicId"])
        if first is None or name is None:
            continue
        lists = [r.get(c) or [] for c in _LISTS]
        topics[name]["partitions"][r["partitionId"]] = partition_dict(
            r["leader"], first["leaderEpoch"] + r["leaderBumps"], first["partitionEpoch"] + r["changes"],
            lists[0], lists[1], lists[2], lists[3], lists[4], lists[5], r["leaderRecoveryState"])
    configs: dict[str, dict[str, str]] = {}
    for r in by.get("config", []):
        if not r["present"]:
            continue
        if r["resourceType"] == 2 and removed_at.get(r["resourceName"], -1) > r["last_offset"]:
            continue
        configs.setdefault(config_key(r["resourceType"], r["resourceName"]), {})[r["name"]] = r["value"]
    features = {r["name"]: r["featureLevel"] for r in by.get("feature", [])
                if r["featureLevel"] != 0 or r["name"] == MV}
    mig = by.get("migration")
    migration = ZkMigrationState(mig[0]["zkMigrationState"]).name if mig else ZkMigrationState.NONE.name
    acls = {r["k"]: {c: r.get(c) for c in _ACL_FIELDS} for r in by.get("acl", []) if r["present"]}
    quotas: dict[str, dict[str, float]] = {}
    for r in by.get("quota", []):
        if r["present"]:
            pairs = [(e["entityType"], e.get("entityName")) for e in r["entity"]]
            quotas.setdefault(entity_key(pairs), {})[r["quotaKey"]] = float(r["quotaValue"])
    return {"features": features, "migration": migration, "brokers": brokers, "controllers": controllers,
            "topics": topics, "configs": configs, "acls": acls, "quotas": quotas}


def entity_states(df: Any, offset: int) -> tuple[Any, Any]:
    """(cached frame to unpersist, one row per entity at ``offset``) as DataFrames: the Spark half
    of the image, for callers that want to keep it in Spark (the report writes it to Parquet)."""
    cached, d = _records_upto(df, offset)
    return cached, _states(_events(d))


def spark_image(df: Any, offset: int) -> dict[str, Any]:
    """The image at ``offset`` (inclusive) from a ``kraft`` DataFrame, in the plain form."""
    import json

    from pyspark.sql import functions as F

    cached, states = entity_states(df, offset)
    try:
        rows = [json.loads(r[0]) for r in states.select(F.to_json(F.struct("*"))).collect()]
        last = cached.agg(F.max("offset")).collect()[0][0]
    finally:
        cached.unpersist()
    return {"offset": offset if last is None else last, **_assemble(rows)}


def image_at(spark: Any, directory: str, offset: int, *, snapshot: str = "auto") -> dict[str, Any]:
    """The image at ``offset`` from the log in ``directory``, starting from a snapshot when the
    segments no longer reach back to offset 0 (``snapshot="auto"``: the newest one at or before
    the offset)."""
    from pathlib import Path

    from pyspark_kraft import layout

    part = layout.partition_dir(directory)
    start = layout.log_start_offset(part)
    end = layout.log_end_offset(part)
    if offset < 0:
        raise ImageError(f"offset {offset} is negative")
    if offset >= end and end > 0:
        raise ImageError(f"offset {offset} is beyond the end of the log (last offset {end - 1})")
    chosen = None
    if snapshot == "auto":
        if start > 0:
            usable = [s for s in layout.snapshots(part) if start <= s.end_offset and s.end_offset - 1 <= offset]
            if not usable:
                raise ImageError(f"the log starts at offset {start} and no snapshot covers the offsets before "
                                 f"{offset + 1}; the image at {offset} is not on disk any more")
            chosen = usable[-1].file_name
    elif snapshot.lower() not in ("none", ""):
        chosen = snapshot
    reader = spark.read.format("kraft")
    if chosen is not None:
        reader = reader.option("snapshot", chosen)
    df = reader.option("toOffset", str(offset)).load(str(Path(directory)))
    return spark_image(df, offset)


"""``kraftsim spark report``: the log's history as Parquet tables, PNG plots and one HTML page.

Every table is computed in Spark from the ``kraft`` source, then brought to the driver as Arrow
and written there with pyarrow, so the report works the same on ``local[*]`` and on a cluster
whose executors cannot see the output directory. The questions it answers are the ones Kafka's
tools cannot: when did a broker flap, which partitions lost their leader and for how long, how
leadership and ISRs moved, how feature levels and the ZooKeeper migration state changed.

Partition history is a window over each partition's records in offset order: the leader after a
record is the record's leader unless it says "unchanged" (-2), and the same for the ISR; a
partition's history ends when its topic is removed.

Beside a log that ``kraftsim scenario run`` wrote, its timeline (``kraftsim-timeline.jsonl``, in
the metadata.log.dir or up to two directories above it) adds a section: the injected faults as
shaded spans over the brokers' fences, the controller's elections and the leadership moves, and
a table of what happened in the log during each fault.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraftsim.metadata.image.migration import ZkMigrationState

PARTITION_TYPES = ["TopicRecord", "RemoveTopicRecord", "PartitionRecord", "PartitionChangeRecord"]
BROKER_TYPES = ["RegisterBrokerRecord", "UnregisterBrokerRecord", "FenceBrokerRecord", "UnfenceBrokerRecord",
                "BrokerRegistrationChangeRecord"]
OTHER_TYPES = ["FeatureLevelRecord", "ZkMigrationStateRecord"]
MIGRATION_STATES = {s.value: s.name for s in ZkMigrationState}
STATE_COLORS = {"unfenced": "#2e7d32", "fenced": "#c62828", "controlled_shutdown": "#ef6c00"}
TIMELINE = "kraftsim-timeline.jsonl"  # written by kraftsim scenario run (kraftsim.faults.scenario)
FAULT_COLORS = {"request": "#1565c0", "network": "#6a1b9a", "stall": "#424242", "resign": "#00838f",
                "disk": "#8d6e63", "clock-jump": "#f9a825", "voter-partition": "#ad1457", "silence": "#e65100",
                "flap": "#d84315", "restart": "#5d4037", "lag": "#558b2f", "features": "#283593",
                "controller down": "#9e9e9e"}


class ReportError(Exception):
    """The report cannot be made from this directory."""


@dataclass
class Section:
    title: str
    text: str
    table: str | None = None  # the Parquet table shown
    image: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)  # a preview for the page


def _bucket_ms(span_ms: int) -> int:
    """A round bucket giving at most ~120 points over the span."""
    for b in (1_000, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000, 1_800_000, 3_600_000, 21_600_000,
              86_400_000, 7 * 86_400_000):
        if span_ms / b <= 120:
            return b
    return 30 * 86_400_000


def _load(spark: Any, directory: str) -> tuple[Any, dict[str, Any]]:
    """The records to analyse (cached) and facts about the log; a log that starts after a
    snapshot is read from that snapshot on, so partitions and brokers have a known start."""
    from pyspark_kraft import layout

    part = layout.partition_dir(directory)
    start = layout.log_start_offset(part)
    reader = spark.read.format("kraft").option("includeControl", "false")
    snap = None
    if start > 0:
        usable = [s for s in layout.snapshots(part) if s.end_offset >= start]
        if not usable:
            raise ReportError(f"the log starts at offset {start} and no snapshot covers the offsets before it")
        snap = usable[0]
        reader = reader.option("snapshot", snap.file_name)
    df = reader.load(directory)
    cols = ["offset", "timestamp", "partition_leader_epoch", "record_type", *BROKER_TYPES, *PARTITION_TYPES,
            *OTHER_TYPES]
    base = df.select(*cols).cache()
    facts = {"directory": str(part), "log_start": start, "snapshot": snap.file_name if snap else None,
             "segments": len(layout.segments(part))}
    return base, facts


def _utc(ms: int) -> Any:
    """Naive UTC datetime of epoch millis (what the plots use on their time axes)."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)


def _to_arrow(frame: Any) -> Any:
    return frame.toArrow()


@dataclass
class Timeline:
    """A scenario's timeline (``kraftsim.faults.scenario``), as spans in epoch milliseconds."""

    path: Path
    scenario: dict[str, Any]
    spans: list[dict[str, Any]]  # faults, and the controller's outages (killed until started again)
    checks: list[dict[str, Any]]
    start_ms: int | None  # the scenario's t = 0
    end_ms: int | None


def find_timeline(directory: str) -> Path | None:
    """A scenario's timeline beside the log: in the metadata.log.dir, or one or two levels above it."""
    from pyspark_kraft import layout

    part = layout.partition_dir(directory)
    for d in (part.parent, part.parent.parent, part.parent.parent.parent):
        if (d / TIMELINE).is_file():
            return d / TIMELINE
    return None


def read_timeline(path: Path) -> Timeline:
    """The spans of a scenario's timeline: each fault from its start to its end (an instant one,
    such as a resignation, is a moment), and each time the controller was killed, until it was
    started again. ReportError if the file is not a timeline."""
    try:
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError) as err:
        raise ReportError(f"{path}: not a scenario timeline ({err})") from None
    if not events or not all(isinstance(e, dict) and "event" in e for e in events):
        raise ReportError(f"{path}: not a scenario timeline")
    scenario: dict[str, Any] = next((e for e in events if e["event"] == "scenario"), {})
    spans: list[dict[str, Any]] = []
    ended = {(e["process"], e["id"]) for e in events if e["event"] == "fault"}
    for e in events:
        if e["event"] == "fault":
            spans.append({"label": f"{e['id']} {e['kind']}", "kind": e["kind"], "process": e["process"],
                          "description": e["description"], "start_ms": e["start_wall_ms"],
                          "end_ms": e["end_wall_ms"], "hits": e.get("hits", 0), "reason": e.get("reason", "")})
        elif e["event"] == "fault-start" and (e["process"], e["id"]) not in ended:  # a run cut short
            spans.append({"label": f"{e['id']} {e['kind']}", "kind": e["kind"], "process": e["process"],
                          "description": e["description"], "start_ms": e["wall_ms"], "end_ms": None, "hits": 0,
                          "reason": "unknown"})
    down: int | None = None
    for e in events:
        if e["event"] == "controller-killed":
            down = e["wall_ms"]
        elif e["event"] == "controller-started" and down is not None:
            spans.append({"label": "controller down", "kind": "controller down", "process": "controller",
                          "description": "the controller process killed, until it was started again",
                          "start_ms": down, "end_ms": e["wall_ms"], "hits": 0, "reason": "restarted"})
            down = None
    spans.sort(key=lambda sp: sp["start_ms"])
    checks = [e for e in events if e["event"] == "check"]
    ready = next((e["wall_ms"] for e in events if e["event"] == "ready"), None)
    end = next((e["wall_ms"] for e in events if e["event"] == "end"), None)
    return Timeline(path, scenario, spans, checks, ready, end)


def write_report(spark: Any, directory: str, out: Path, *,
                 progress: Callable[[str], None] = lambda _m: None, timeline: Path | None = None) -> Path:
    """Compute every table, write ``out/tables/*.parquet``, ``out/*.png`` and ``out/index.html``;
    returns the HTML page's path. ``timeline``: a scenario's, drawn beside the log's history (by
    default the one :func:`find_timeline` finds, if any)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import pyarrow.parquet as pq
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    tl_path = timeline if timeline is not None else find_timeline(directory)
    tl = read_timeline(tl_path) if tl_path is not None else None
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    steps = 9 if tl is not None else 8

    def step(i: int, what: str) -> None:
        progress(f"kraftsim spark report: [{i}/{steps}] {what} ({time.monotonic() - t0:.1f}s)")

    def save(name: str, frame: Any) -> Any:
        table = _to_arrow(frame)
        pq.write_table(table, out / "tables" / f"{name}.parquet")
        return table

    step(1, "reading and decoding the log")
    base, facts = _load(spark, directory)
    row = base.agg(F.count("*").alias("records"), F.min("offset").alias("first"),
                   F.max("offset").alias("last"), F.min(F.unix_millis("timestamp")).alias("ms_first"),
                   F.max(F.unix_millis("timestamp")).alias("ms_last")).collect()[0]
    if row["records"] == 0:
        base.unpersist()
        raise ReportError(f"{directory}: the log holds no metadata records")
    # Epoch millis from Spark, so no local time zone of the driver's Python gets involved.
    summary = {**row.asDict(), "t_first": _utc(row["ms_first"]), "t_last": _utc(row["ms_last"])}
    facts.update(summary)
    bucket = _bucket_ms(row["ms_last"] - row["ms_first"])
    end_ms = F.lit(row["ms_last"])
    sections: list[Section] = []

    # 1. records per type over time -------------------------------------------------------------
    step(2, "records per type over time")
    per_type = save("records_per_type", base.groupBy(
        (F.floor(F.unix_millis("timestamp") / bucket) * bucket).alias("bucket_ms"), "record_type")
        .count().orderBy("bucket_ms", "record_type")
        .withColumn("bucket_start", F.timestamp_millis("bucket_ms")).drop("bucket_ms"))
    totals = base.groupBy("record_type").count().orderBy(F.desc("count"))
    totals_t = save("records_by_type", totals)
    _plot_per_type(per_type, out / "records_per_type.png", bucket)
    sections.append(Section("Records per type over time",
                            f"{summary['records']:,} records, offsets {summary['first']}..{summary['last']}, "
                            f"in buckets of {bucket // 1000:,} s.", "records_by_type", "records_per_type.png",
                            totals_t.to_pylist()))

    # 2. broker timeline ------------------------------------------------------------------------
    step(3, "broker timeline")
    def ev(rtype: str, bid: str, event: Any, epoch: Any, registered_as: Any = None) -> Any:
        return (base.where(F.col("record_type") == rtype)
                .select("offset", "timestamp", F.col(f"{rtype}.{bid}").alias("broker_id"),
                        event.alias("event"), epoch.alias("broker_epoch"),
                        (F.lit(None).cast("string") if registered_as is None else registered_as).alias("registered_as")))
    change = "BrokerRegistrationChangeRecord"
    # A registration is fenced, but one of the same incarnation again (after a controller restart)
    # keeps the state the broker had: the record says which.
    registered_as = F.when(F.col("RegisterBrokerRecord.fenced") == F.lit(False), "unfenced").otherwise("fenced")
    brk = (ev("RegisterBrokerRecord", "brokerId", F.lit("registered"), F.col("RegisterBrokerRecord.brokerEpoch"),
              registered_as)
           .unionByName(ev("FenceBrokerRecord", "id", F.lit("fenced"), F.col("FenceBrokerRecord.epoch")))
           .unionByName(ev("UnfenceBrokerRecord", "id", F.lit("unfenced"), F.col("UnfenceBrokerRecord.epoch")))
           .unionByName(ev(change, "brokerId", F.when(F.col(f"{change}.fenced") == 1, "fenced")
                           .when(F.col(f"{change}.fenced") == -1, "unfenced"), F.col(f"{change}.brokerEpoch")))
           .unionByName(ev(change, "brokerId", F.when(F.col(f"{change}.inControlledShutdown") == 1,
                                                      "controlled_shutdown"), F.col(f"{change}.brokerEpoch")))
           .unionByName(ev("UnregisterBrokerRecord", "brokerId", F.lit("unregistered"),
                           F.col("UnregisterBrokerRecord.brokerEpoch")))
           .where(F.col("event").isNotNull()).orderBy("offset", "event"))
    broker_events = save("broker_events", brk)
    flaps = save("broker_flaps", brk.groupBy("broker_id").agg(
        F.sum(F.when(F.col("event") == "fenced", 1).otherwise(0)).alias("fenced"),
        F.sum(F.when(F.col("event") == "unfenced", 1).otherwise(0)).alias("unfenced"),
        F.sum(F.when(F.col("event") == "registered", 1).otherwise(0)).alias("registrations"),
        F.sum(F.when(F.col("event") == "controlled_shutdown", 1).otherwise(0)).alias("controlled_shutdowns"),
        F.sum(F.when(F.col("event") == "unregistered", 1).otherwise(0)).alias("unregistrations"),
        F.min(F.when(F.col("event") == "fenced", F.col("timestamp"))).alias("first_fenced"),
        F.max(F.when(F.col("event") == "fenced", F.col("timestamp"))).alias("last_fenced"))
        .orderBy(F.desc("fenced"), "broker_id"))
    _plot_brokers(broker_events, out / "broker_timeline.png", summary["t_last"])
    sections.append(Section("Broker timeline",
                            "Registered, fenced, unfenced, controlled shutdown and unregistered, per broker "
                            "(green: unfenced, red: fenced, orange: in controlled shutdown; ▲ registration, "
                            "✕ unregistration). The table counts each broker's events: its flaps.",
                            "broker_flaps", "broker_timeline.png", flaps.to_pylist()))

    # 3. partition history: leaders ------------------------------------------------------------
    step(4, "partitions without a leader")
    topics = base.where(F.col("record_type") == "TopicRecord").select(
        F.col("TopicRecord.topicId").alias("topic_id"), F.col("TopicRecord.name").alias("topic"))
    removals = base.where(F.col("record_type") == "RemoveTopicRecord").select(
        F.col("RemoveTopicRecord.topicId").alias("topic_id"), F.col("timestamp").alias("removed_at"),
        F.col("offset").alias("removed_offset"))
    pr, pc = "PartitionRecord", "PartitionChangeRecord"
    hist = (base.where(F.col("record_type") == pr).select(
        "offset", "timestamp", F.col(f"{pr}.topicId").alias("topic_id"), F.col(f"{pr}.partitionId").alias("partition"),
        F.col(f"{pr}.leader").alias("leader_set"), F.col(f"{pr}.isr").alias("isr_set"), F.lit(True).alias("created"))
        .unionByName(base.where(F.col("record_type") == pc).select(
            "offset", "timestamp", F.col(f"{pc}.topicId").alias("topic_id"),
            F.col(f"{pc}.partitionId").alias("partition"),
            F.when(F.col(f"{pc}.leader") != -2, F.col(f"{pc}.leader")).alias("leader_set"),
            F.col(f"{pc}.isr").alias("isr_set"), F.lit(False).alias("created"))))
    w = Window.partitionBy("topic_id", "partition").orderBy("offset")
    upto = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    hist = (hist.withColumn("leader", F.last("leader_set", ignorenulls=True).over(upto))
            .withColumn("isr", F.last("isr_set", ignorenulls=True).over(upto))
            .withColumn("prev_leader", F.lag("leader").over(w))
            .withColumn("prev_isr", F.lag("isr").over(w))
            .join(topics, "topic_id", "left").join(removals, "topic_id", "left")
            .where(F.col("removed_offset").isNull() | (F.col("offset") < F.col("removed_offset")))
            .cache())
    # An outage starts where the leader becomes -1 and ends at the next record that sets one,
    # or at the topic's removal; one still open at the end of the log is "ongoing".
    leader_moves = hist.where(F.col("created") | (F.col("leader_set").isNotNull()
                                                  & (F.col("leader") != F.col("prev_leader"))))
    wl = Window.partitionBy("topic_id", "partition").orderBy("offset")
    outages = (leader_moves.withColumn("next_ts", F.lead("timestamp").over(wl))
               .where(F.col("leader") == -1)
               .select("topic", "topic_id", "partition", F.col("offset").alias("start_offset"),
                       F.col("timestamp").alias("start"),
                       F.coalesce("next_ts", "removed_at").alias("end"),
                       (F.col("next_ts").isNull() & F.col("removed_at").isNull()).alias("ongoing"))
               .withColumn("duration_s", (F.coalesce(F.unix_millis("end"), end_ms) - F.unix_millis("start")) / 1000.0)
               .orderBy(F.desc("duration_s"), "start_offset"))
    outages_t = save("leaderless_outages", outages)
    steps_df = (outages.select(F.col("start").alias("t"), F.lit(1).alias("d"))
                .unionByName(outages.where(F.col("end").isNotNull()).select(F.col("end").alias("t"),
                                                                             F.lit(-1).alias("d"))))
    over_time = save("leaderless_over_time", steps_df.groupBy("t").agg(F.sum("d").alias("delta")).withColumn(
        "leaderless", F.sum("delta").over(Window.orderBy("t").rowsBetween(Window.unboundedPreceding, 0)))
        .orderBy("t"))
    _plot_leaderless(over_time, out / "leaderless_partitions.png", summary["t_first"], summary["t_last"])
    longest = outages_t.slice(0, 20).to_pylist()
    sections.append(Section("Partitions without a leader",
                            f"{outages_t.num_rows:,} outages (a partition's leader set to none until the next "
                            f"election or its topic's deletion); the longest first.",
                            "leaderless_outages", "leaderless_partitions.png", longest))

    # 4. leadership moves per broker -----------------------------------------------------------
    step(5, "leadership moves")
    moves = leader_moves.where(~F.col("created")).select(
        "offset", "timestamp", "topic", "partition", "prev_leader", "leader")
    moves_t = save("leadership_moves", moves.orderBy("offset"))
    per_broker = save("leadership_by_broker", moves.where(F.col("leader") != -1)
                      .groupBy(F.col("leader").alias("broker_id")).agg(F.count("*").alias("gained"))
                      .join(moves.where(F.col("prev_leader") != -1).groupBy(F.col("prev_leader").alias("broker_id"))
                            .agg(F.count("*").alias("lost")), "broker_id", "full")
                      .fillna(0).orderBy("broker_id"))
    _plot_bars(per_broker, "broker_id", ["gained", "lost"], out / "leadership_moves.png",
               "Leadership moves per broker", "broker")
    sections.append(Section("Leadership moves per broker",
                            "Leaders elected onto (gained) and away from (lost) each broker, initial assignments "
                            "at partition creation not counted.", "leadership_by_broker", "leadership_moves.png",
                            per_broker.to_pylist()))

    # 5. ISR shrinks and expands ------------------------------------------------------------------
    step(6, "ISR shrinks and expands")
    isr = (hist.where(F.col("isr_set").isNotNull() & ~F.col("created") & F.col("prev_isr").isNotNull())
           .select("offset", "timestamp", "topic", "partition",
                   F.array_except("prev_isr", "isr").alias("removed"), F.array_except("isr", "prev_isr").alias("added")))
    isr_events = (isr.select("offset", "timestamp", "topic", "partition", F.explode("removed").alias("broker_id"),
                             F.lit("shrink").alias("change"))
                  .unionByName(isr.select("offset", "timestamp", "topic", "partition",
                                          F.explode("added").alias("broker_id"), F.lit("expand").alias("change"))))
    save("isr_changes", isr_events.orderBy("offset", "change", "broker_id"))
    isr_time = save("isr_changes_over_time", isr_events.groupBy(
        (F.floor(F.unix_millis("timestamp") / bucket) * bucket).alias("bucket_ms"))
        .agg(F.sum(F.when(F.col("change") == "shrink", 1).otherwise(0)).alias("shrinks"),
             F.sum(F.when(F.col("change") == "expand", 1).otherwise(0)).alias("expands"))
        .withColumn("bucket_start", F.timestamp_millis("bucket_ms")).drop("bucket_ms").orderBy("bucket_start"))
    isr_broker = save("isr_changes_by_broker", isr_events.groupBy("broker_id").agg(
        F.sum(F.when(F.col("change") == "shrink", 1).otherwise(0)).alias("shrinks"),
        F.sum(F.when(F.col("change") == "expand", 1).otherwise(0)).alias("expands")).orderBy("broker_id"))
    _plot_isr(isr_time, out / "isr_changes.png")
    sections.append(Section("ISR shrinks and expands",
                            "A broker leaving (shrink) or joining (expand) a partition's ISR, per time bucket; "
                            "the table counts them per broker.", "isr_changes_by_broker", "isr_changes.png",
                            isr_broker.to_pylist()))
    if tl is not None:
        step(7, f"the scenario's faults ({tl.path.name})")
        sections.append(_faults_section(spark, tl, base, brk, moves, broker_events, moves_t, save, out))
    hist.unpersist()

    # 6. feature levels, 7. migration ------------------------------------------------------------
    step(steps - 1, "feature levels and the ZooKeeper migration")
    feats = save("feature_levels", base.where(F.col("record_type") == "FeatureLevelRecord").select(
        "offset", "timestamp", F.col("FeatureLevelRecord.name").alias("feature"),
        F.col("FeatureLevelRecord.featureLevel").alias("level")).orderBy("offset"))
    _plot_steps(feats, "feature", "level", out / "feature_levels.png", "Finalized feature levels",
                summary["t_last"])
    sections.append(Section("Feature-level history", "Every FeatureLevelRecord: metadata.version and the other "
                            "finalized features.", "feature_levels", "feature_levels.png", feats.to_pylist()))
    state_name = F.create_map(*[x for k, v in MIGRATION_STATES.items() for x in (F.lit(k), F.lit(v))])
    mig = save("migration_states", base.where(F.col("record_type") == "ZkMigrationStateRecord").select(
        "offset", "timestamp", F.col("ZkMigrationStateRecord.zkMigrationState").alias("state_id"))
        .withColumn("state", state_name[F.col("state_id")]).orderBy("offset"))
    _plot_migration(mig, out / "migration_timeline.png", summary["t_last"])
    sections.append(Section("ZooKeeper migration timeline", "Every ZkMigrationStateRecord (NONE on a cluster "
                            "that never used ZooKeeper).", "migration_states", "migration_timeline.png",
                            mig.to_pylist()))
    base.unpersist()

    step(steps, "writing the HTML page")
    index = out / "index.html"
    index.write_text(_html(facts, sections, time.monotonic() - t0))
    return index


def _faults_section(spark: Any, tl: Timeline, base: Any, brk: Any, moves: Any, broker_events: Any, moves_t: Any,
                    save: Callable[[str, Any], Any], out: Path) -> Section:
    """The scenario's faults beside the log: per fault (and controller outage), what the log
    records during it, computed in Spark by joining the spans to the log's events; and the plot."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    # A controller's elections: the first record of each leader epoch (each epoch starts with one).
    elections = base.groupBy(F.col("partition_leader_epoch").alias("epoch")).agg(
        F.min("timestamp").alias("timestamp"), F.min("offset").alias("offset"))
    elections_t = save("controller_elections", elections.orderBy("epoch"))
    last_ms = F.max(F.unix_millis("timestamp"))
    horizon = base.agg(last_ms.alias("m")).collect()[0]["m"]
    rows = [(i, sp["label"], sp["kind"], sp["process"], sp["description"], int(sp["start_ms"]),
             int(sp["end_ms"] if sp["end_ms"] is not None else horizon), int(sp["hits"]), sp["reason"])
            for i, sp in enumerate(tl.spans)]
    schema = T.StructType([T.StructField(n, t) for n, t in (
        ("span", T.IntegerType()), ("fault", T.StringType()), ("kind", T.StringType()), ("process", T.StringType()),
        ("description", T.StringType()), ("start_ms", T.LongType()), ("end_ms", T.LongType()),
        ("acted", T.LongType()), ("ended", T.StringType()))])
    spans = F.broadcast(spark.createDataFrame(rows, schema))

    def during(events: Any, name: str, where: Any = None) -> Any:
        e = events if where is None else events.where(where)
        ms = F.unix_millis("timestamp")
        # An instant fault (a resignation) counts what its moment led to: the second after it.
        hit = e.join(spans, (ms >= F.col("start_ms"))
                     & (ms < F.greatest(F.col("end_ms"), F.col("start_ms") + F.lit(1000))))
        return hit.groupBy("span").agg(F.count("*").alias(name))

    table = spans
    for counts in (during(brk, "fences", F.col("event") == "fenced"),
                   during(brk, "unfences", F.col("event") == "unfenced"),
                   during(brk, "registrations", F.col("event") == "registered"),
                   during(elections, "elections"),
                   during(moves, "leadership_moves"),
                   during(moves, "leaders_lost", F.col("leader") == -1)):
        table = table.join(counts, "span", "left")
    table = (table.fillna(0).withColumn("start", F.timestamp_millis("start_ms"))
             .withColumn("end", F.timestamp_millis("end_ms"))
             .withColumn("seconds", (F.col("end_ms") - F.col("start_ms")) / 1000.0)
             .drop("start_ms", "end_ms").orderBy("span"))
    faults_t = save("injected_faults", table)
    _plot_faults(tl, broker_events, moves_t, elections_t, out / "faults_timeline.png")
    sc = tl.scenario
    passed = sum(1 for c in tl.checks if c.get("result") == "pass")
    text = (f"Scenario {sc.get('name', '?')} (seed {sc.get('seed', '?')}, {sc.get('file') or 'inline'}): "
            f"{len([s for s in tl.spans if s['kind'] != 'controller down'])} injected fault(s), "
            f"{passed} of {len(tl.checks)} checks passed. The faults (and the controller's outages, grey) as "
            f"shaded spans over the brokers' states and the leadership moves, the controller's elections as "
            f"vertical lines; the table counts what the log records during each span (an instant fault: in the "
            f"second after it).")
    return Section("Injected faults", text, "injected_faults", "faults_timeline.png", faults_t.to_pylist())


def _plot_faults(tl: Timeline, broker_events: Any, moves_t: Any, elections: Any, path: Path) -> None:
    import matplotlib.pyplot as plt
    from matplotlib import dates
    from matplotlib.patches import Patch

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.4), dpi=100, sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    top.set_title("Injected faults over the brokers' states, elections and leadership moves")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    ev = _rows(broker_events)
    times = [r["timestamp"] for r in ev] + ([_utc(tl.end_ms)] if tl.end_ms else [])
    t_end = max(times) if times else _utc(0)
    brokers = sorted({r["broker_id"] for r in ev})
    end = dates.date2num(_naive(t_end))
    for lane, b in enumerate(brokers):
        state: str | None = None
        since = 0.0
        for r in (x for x in ev if x["broker_id"] == b):
            ts = dates.date2num(_naive(r["timestamp"]))
            if state is not None:
                top.broken_barh([(since, ts - since)], (lane - 0.35, 0.7), color=STATE_COLORS[state])
            e = r["event"]
            state = None if e == "unregistered" else (r.get("registered_as") or "fenced" if e == "registered" else e)
            since = ts
        if state is not None and end > since:
            top.broken_barh([(since, end - since)], (lane - 0.35, 0.7), color=STATE_COLORS[state])
    top.set_yticks(range(len(brokers)), [str(b) for b in brokers])
    top.set_ylabel("broker")
    mv = _rows(moves_t)
    if mv:
        xs = [r["timestamp"] for r in mv]
        bottom.plot(xs, range(1, len(xs) + 1), drawstyle="steps-post", color="#1565c0", label="leadership moves")
    bottom.set_ylabel("leadership moves (cumulative)")
    for r in _rows(elections):
        for ax in (top, bottom):
            ax.axvline(r["timestamp"], color="#00838f", linestyle="--", linewidth=0.8)
        bottom.annotate(f"epoch {r['epoch']}", (dates.date2num(_naive(r["timestamp"])), 0), xytext=(2, 2),
                        textcoords="offset points", fontsize=7, color="#00838f", rotation=90, va="bottom")
    kinds: dict[str, str] = {}
    for sp in tl.spans:
        color = FAULT_COLORS.get(sp["kind"], "#757575")
        kinds[sp["kind"]] = color
        start = dates.date2num(_naive(_utc(sp["start_ms"])))
        stop = dates.date2num(_naive(_utc(sp["end_ms"]))) if sp["end_ms"] is not None else end
        width = max(stop - start, 0.2 / 86400)  # an instant fault: a sliver, to be seen
        for ax in (top, bottom):
            ax.axvspan(start, start + width, color=color, alpha=0.18, hatch="//" if sp["kind"] == "controller down"
                       else None, linewidth=0)
        top.annotate(sp["label"], (start, 1.0), xycoords=("data", "axes fraction"), xytext=(1, -2),
                     textcoords="offset points", fontsize=7, color=color, rotation=90, va="top")
    if tl.start_ms is not None:
        lo = dates.date2num(_naive(_utc(tl.start_ms - 1000)))
        hi = dates.date2num(_naive(_utc((tl.end_ms or tl.start_ms) + 1000)))
        bottom.set_xlim(lo, hi)
    bottom.xaxis_date()
    handles = [Patch(color=c, alpha=0.35, label=k) for k, c in kinds.items()]
    handles += [Patch(color=STATE_COLORS[k], label=k) for k in ("unfenced", "fenced")]
    top.legend(handles=handles, fontsize=7, loc="lower right", ncol=4)
    if not brokers and not mv:
        _empty(top, "no broker or leadership records")
    _done(fig, path)


# ---- plots -----------------------------------------------------------------------------------------

def _rows(t: Any) -> list[dict[str, Any]]:
    """A table's rows with UTC wall-clock datetimes (matplotlib warns on timezone-aware ones)."""
    return [{k: _naive(v) for k, v in r.items()} for r in t.to_pylist()]


def _fig(title: str) -> tuple[Any, Any]:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.2), dpi=100)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _done(fig: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666")


def _plot_per_type(t: Any, path: Path, bucket: int) -> None:
    fig, ax = _fig(f"Records per type ({bucket // 1000:,} s buckets)")
    rows = _rows(t)
    series: dict[str, dict[Any, int]] = {}
    for r in rows:
        series.setdefault(r["record_type"], {})[r["bucket_start"]] = r["count"]
    xs = sorted({r["bucket_start"] for r in rows})
    for name in sorted(series, key=lambda n: -sum(series[n].values()))[:10]:
        ax.plot(xs, [series[name].get(x, 0) for x in xs], label=name, linewidth=1.2)
    if rows:
        ax.set_yscale("symlog")
        ax.legend(fontsize=7, ncol=2)
    else:
        _empty(ax, "no records")
    ax.set_ylabel("records")
    _done(fig, path)


def _naive(ts: Any) -> Any:
    """UTC wall time without tzinfo (matplotlib's date2num warns on aware datetimes)."""
    return ts.replace(tzinfo=None) if getattr(ts, "tzinfo", None) is not None else ts


def _plot_brokers(t: Any, path: Path, t_last: Any) -> None:
    from matplotlib import dates

    fig, ax = _fig("Broker timeline")
    rows = _rows(t)
    brokers = sorted({r["broker_id"] for r in rows})
    end = dates.date2num(_naive(t_last))
    for lane, b in enumerate(brokers):
        state: str | None = None
        since = 0.0
        for r in (x for x in rows if x["broker_id"] == b):
            ts = dates.date2num(_naive(r["timestamp"]))
            if state is not None:
                ax.broken_barh([(since, ts - since)], (lane - 0.35, 0.7), color=STATE_COLORS[state])
            e = r["event"]
            if e == "registered":
                ax.plot([ts], [lane], marker="^", color="black", markersize=5)
                state, since = r.get("registered_as") or "fenced", ts
            elif e == "unregistered":
                ax.plot([ts], [lane], marker="x", color="black", markersize=6)
                state = None
            else:
                state, since = e, ts
        if state is not None and end > since:
            ax.broken_barh([(since, end - since)], (lane - 0.35, 0.7), color=STATE_COLORS[state])
    ax.xaxis_date()
    ax.set_yticks(range(len(brokers)), [str(b) for b in brokers])
    ax.set_ylabel("broker")
    if not brokers:
        _empty(ax, "no broker records")
    _done(fig, path)


def _plot_leaderless(t: Any, path: Path, t_first: Any, t_last: Any) -> None:
    fig, ax = _fig("Partitions without a leader")
    rows = _rows(t)
    xs = [_naive(t_first)] + [r["t"] for r in rows] + [_naive(t_last)]
    ys = [0] + [r["leaderless"] for r in rows]
    ys.append(ys[-1])
    ax.step(xs, ys, where="post", color="#c62828")
    ax.fill_between(xs, ys, step="post", alpha=0.2, color="#c62828")
    ax.set_ylabel("partitions")
    _done(fig, path)


def _plot_bars(t: Any, key: str, cols: list[str], path: Path, title: str, xlabel: str) -> None:
    fig, ax = _fig(title)
    rows = _rows(t)
    n = len(cols)
    for i, c in enumerate(cols):
        ax.bar([j + (i - (n - 1) / 2) * 0.8 / n for j in range(len(rows))], [r[c] for r in rows], width=0.8 / n,
               label=c)
    ax.set_xticks(range(len(rows)), [str(r[key]) for r in rows])
    ax.set_xlabel(xlabel)
    if rows:
        ax.legend()
    else:
        _empty(ax, "none")
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_isr(t: Any, path: Path) -> None:
    fig, ax = _fig("ISR shrinks and expands")
    rows = _rows(t)
    xs = [r["bucket_start"] for r in rows]
    ax.plot(xs, [r["shrinks"] for r in rows], label="shrinks", color="#c62828")
    ax.plot(xs, [r["expands"] for r in rows], label="expands", color="#2e7d32")
    ax.set_ylabel("ISR changes per bucket")
    if rows:
        ax.legend()
    else:
        _empty(ax, "no ISR changes")
    _done(fig, path)


def _plot_steps(t: Any, key: str, value: str, path: Path, title: str, t_last: Any) -> None:
    fig, ax = _fig(title)
    rows = _rows(t)
    for name in sorted({r[key] for r in rows}):
        pts = [(r["timestamp"], r[value]) for r in rows if r[key] == name]
        ax.step([p[0] for p in pts] + [_naive(t_last)], [p[1] for p in pts] + [pts[-1][1]], where="post", label=name,
                marker="o", markersize=3)
    if rows:
        ax.legend()
    else:
        _empty(ax, "no feature-level records")
    ax.set_ylabel("level")
    _done(fig, path)


def _plot_migration(t: Any, path: Path, t_last: Any) -> None:
    fig, ax = _fig("ZooKeeper migration state")
    rows = _rows(t)
    order = ["NONE", "PRE_MIGRATION", "MIGRATION", "POST_MIGRATION", "ZK"]
    if rows:
        ax.step([r["timestamp"] for r in rows] + [_naive(t_last)],
                [order.index(r["state"]) for r in rows] + [order.index(rows[-1]["state"])], where="post",
                marker="o", color="#1565c0")
    else:
        _empty(ax, "no ZkMigrationStateRecord")
    ax.set_yticks(range(len(order)), order)
    _done(fig, path)


# ---- the page ------------------------------------------------------------------------------------

def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.3f}"
    if isinstance(v, list):
        return html.escape(",".join(map(str, v)))
    return html.escape("" if v is None else str(v))


def _table(rows: list[dict[str, Any]], limit: int = 25) -> str:
    if not rows:
        return "<p><em>none</em></p>"
    cols = list(rows[0])
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r[c])}</td>" for c in cols) + "</tr>" for r in rows[:limit])
    more = f"<p><em>{len(rows) - limit:,} more rows in the Parquet table</em></p>" if len(rows) > limit else ""
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def _html(facts: dict[str, Any], sections: list[Section], seconds: float) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>KRaft metadata log report</title><style>"
        "body{font-family:sans-serif;margin:2em;max-width:1100px}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#eee}"
        "img{max-width:100%;border:1px solid #ddd}code{background:#f4f4f4}</style></head><body>",
        "<h1>KRaft metadata log report</h1>",
        f"<p>Directory <code>{html.escape(facts['directory'])}</code>: {facts['records']:,} metadata records, "
        f"offsets {facts['first']}..{facts['last']}, from {facts['t_first']} to {facts['t_last']} (UTC), "
        f"{facts['segments']} segment(s)"
        + (f", starting from snapshot <code>{html.escape(facts['snapshot'])}</code>" if facts["snapshot"] else "")
        + f". Computed in Spark in {seconds:.1f} s; every table is in <code>tables/</code> as Parquet.</p>",
        "<ul>" + "".join(f"<li><a href='#s{i}'>{html.escape(s.title)}</a></li>" for i, s in enumerate(sections))
        + "</ul>",
    ]
    for i, s in enumerate(sections):
        parts.append(f"<h2 id='s{i}'>{html.escape(s.title)}</h2><p>{html.escape(s.text)}</p>")
        if s.image:
            parts.append(f"<img src='{s.image}' alt='{html.escape(s.title)}'>")
        if s.table:
            parts.append(f"<p>Table <code>tables/{s.table}.parquet</code>:</p>")
        parts.append(_table(s.rows))
    parts.append("</body></html>")
    return "\n".join(parts)

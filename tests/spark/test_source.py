"""spark.read.format("kraft"): discovery, rows and typed columns against the project's own reader,
options, splits, snapshots, projection and errors."""

from __future__ import annotations

import collections
import json
import pkgutil
from pathlib import Path
from typing import Any

import pytest

from kraftsim.metadata import files
from kraftsim.metadata.dumplog import message_json
from kraftsim.rpc import uuids
from kraftsim.rpc.values import camel, to_dict
from pyspark_kraft import layout
from tests.spark.reference import read_log


def test_spark_finds_the_source_by_its_module_name_without_registration(spark: Any, small_log: Path) -> None:
    # Spark's lookup imports every top-level pyspark_* module that pkgutil finds on the workers'
    # path and registers its DefaultSource under DefaultSource.name(): no register() call here.
    import pyspark_kraft
    from pyspark_kraft.session import package_root

    assert "pyspark_kraft" in [m.name for m in pkgutil.iter_modules([package_root()])]
    assert pyspark_kraft.DefaultSource.name() == "kraft"
    assert spark.read.format("kraft").load(str(small_log)).count() > 0


def test_rows_and_per_type_counts_equal_the_projects_reader(spark: Any, small_log: Path) -> None:
    ref = read_log(small_log)
    df = spark.read.format("kraft").load(str(small_log))
    assert df.rdd.getNumPartitions() >= 2  # several segments, each its own split at least
    rows = df.select("offset", "base_offset", "partition_leader_epoch", "timestamp", "is_control",
                     "record_type", "version", "api_key").orderBy("offset").collect()
    assert [r["offset"] for r in rows] == [r.offset for r in ref]
    assert [r["base_offset"] for r in rows] == [r.base_offset for r in ref]
    assert [r["partition_leader_epoch"] for r in rows] == [r.epoch for r in ref]
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == [r.timestamp for r in ref]
    assert [r["is_control"] for r in rows] == [r.is_control for r in ref]
    assert [r["version"] for r in rows] == [r.version for r in ref]
    assert all((r["api_key"] is None) == r["is_control"] for r in rows)
    counts = {r["record_type"]: r["count"] for r in df.groupBy("record_type").count().collect()}
    assert counts == dict(collections.Counter(r.record_type for r in ref))
    assert counts["LeaderChangeMessage"] == 1 and counts["PartitionChangeRecord"] > 1000


def _present(typed: Any, want: Any) -> Any:
    """``typed`` restricted to the fields ``want`` has, after checking that every other field is
    null: a field the record's version lacks is null in its typed column (and absent from JSON)."""
    if isinstance(typed, dict) and isinstance(want, dict):
        assert all(v is None for k, v in typed.items() if k not in want), (typed, want)
        return {k: _present(typed[k], w) for k, w in want.items()}
    if isinstance(typed, list) and isinstance(want, list) and len(typed) == len(want):
        return [_present(t, w) for t, w in zip(typed, want, strict=True)]
    return typed


def test_typed_columns_and_json_match_the_decoded_records(spark: Any, small_log: Path) -> None:
    ref = {r.offset: r for r in read_log(small_log)}
    kinds = ["RegisterBrokerRecord", "PartitionRecord", "PartitionChangeRecord", "ConfigRecord", "ClientQuotaRecord",
             "AccessControlEntryRecord", "BrokerRegistrationChangeRecord", "FeatureLevelRecord", "LeaderChangeMessage"]
    df = spark.read.format("kraft").load(str(small_log))
    rows = df.where(df.record_type.isin(kinds)).select("offset", "version", "record_type", "json", *kinds).collect()
    assert {r["record_type"] for r in rows} == set(kinds)
    for row in rows:
        kind = row["record_type"]
        rec = ref[row["offset"]]
        want = to_dict(rec.msg, rec.version, key=camel, uuid_fn=uuids.to_str)  # type: ignore[arg-type]
        assert _present(row[kind].asDict(recursive=True), want) == want, (kind, row["offset"])
        assert json.loads(row["json"]) == message_json(rec.msg, rec.version)  # type: ignore[arg-type]
        assert all(row[other] is None for other in kinds if other != kind)  # one typed column per row


def test_options_offsets_types_and_control_records(spark: Any, small_log: Path) -> None:
    ref = read_log(small_log)
    path = str(small_log)
    df = spark.read.format("kraft").option("fromOffset", "100").option("toOffset", "1999").load(path)
    assert sorted(r[0] for r in df.select("offset").collect()) == [r.offset for r in ref if 100 <= r.offset <= 1999]
    df = spark.read.format("kraft").option("recordTypes", "FenceBrokerRecord,UnfenceBrokerRecord").load(path)
    want = sorted(r.offset for r in ref if r.record_type in ("FenceBrokerRecord", "UnfenceBrokerRecord"))
    assert want and sorted(r[0] for r in df.select("offset").collect()) == want
    df = spark.read.format("kraft").option("includeControl", "false").load(path)
    assert df.where("is_control").count() == 0
    assert df.count() == sum(1 for r in ref if not r.is_control)
    ctl = spark.read.format("kraft").option("recordTypes", "LeaderChange").load(path).collect()
    assert [(r["control_type"], r["record_type"], r["LeaderChangeMessage"]["leaderId"]) for r in ctl] == \
        [("LeaderChange", "LeaderChangeMessage", 3000)]


def test_byte_range_splits_give_the_same_rows(spark: Any, small_log: Path) -> None:
    part = layout.partition_dir(small_log)
    splits = layout.plan_segments(part, max_bytes=4096)
    segs = layout.segments(part)
    assert len(splits) > 3 * len(segs)  # segments really are cut into byte ranges
    for a, b in zip(splits, splits[1:], strict=False):  # batch-aligned and gapless
        assert b.first_offset == a.last_offset + 1
        if a.path == b.path:
            assert b.start == a.end
    df = spark.read.format("kraft").option("maxPartitionBytes", "4096").load(str(small_log))
    assert df.rdd.getNumPartitions() == len(splits)
    whole = spark.read.format("kraft").load(str(small_log))
    assert df.select("offset", "json").subtract(whole.select("offset", "json")).count() == 0
    assert df.count() == whole.count()


def test_the_partition_directory_itself_works_too(spark: Any, small_log: Path) -> None:
    a = spark.read.format("kraft").load(str(small_log)).count()
    b = spark.read.format("kraft").load(str(small_log / files.METADATA_TOPIC_DIR)).count()
    assert a == b > 0


def test_a_chosen_snapshot_then_the_log_after_it(spark: Any, snapshotted_log: tuple[Path, int]) -> None:
    d, end = snapshotted_log
    df = spark.read.format("kraft").option("snapshot", "latest").load(str(d))
    snap = df.where(df.source.endswith(".checkpoint"))
    assert {r[0] for r in snap.select("offset").distinct().collect()} == {end - 1}
    kinds = {r[0] for r in snap.where("NOT is_control").select("record_type").distinct().collect()}
    assert {"FeatureLevelRecord", "RegisterBrokerRecord", "TopicRecord", "PartitionRecord"} <= kinds
    assert [r[0] for r in snap.where("is_control").orderBy("source_offset").select("control_type").collect()] == \
        ["SnapshotHeader", "SnapshotFooter"]
    tail = df.where(~df.source.endswith(".checkpoint"))
    assert tail.agg({"offset": "min"}).collect()[0][0] == end
    log_rows = spark.read.format("kraft").load(str(d))
    assert tail.count() == log_rows.where(log_rows["offset"] >= end).count()
    by_name = spark.read.format("kraft").option("snapshot", f"{end:020d}").load(str(d)).count()
    assert by_name == df.count()


def test_user_schema_selects_columns(spark: Any, small_log: Path) -> None:
    df = spark.read.format("kraft").schema("offset BIGINT, record_type STRING").load(str(small_log))
    assert df.columns == ["offset", "record_type"]
    assert df.count() == len(read_log(small_log))


@pytest.mark.parametrize("options, message", [
    ({"fromOffset": "x"}, "fromOffset"),
    ({"recordTypes": "NoSuchRecord"}, "NoSuchRecord"),
    ({"snapshot": "latest"}, "no .checkpoint snapshot"),
    ({"colour": "blue"}, "unknown option"),
])
def test_bad_options_fail_with_a_clear_message(spark: Any, small_log: Path, options: dict[str, str],
                                               message: str) -> None:
    with pytest.raises(Exception, match=message):
        spark.read.format("kraft").options(**options).load(str(small_log)).count()


def test_a_directory_that_is_not_a_log(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="neither a metadata.log.dir"):
        spark.read.format("kraft").load(str(tmp_path)).count()

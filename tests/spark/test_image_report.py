"""The image at an offset computed in Spark against the Python MetadataImage replayed to the same
offset; ``kraftsim spark image`` and ``kraftsim spark report`` end to end."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from kraftsim.metadata import records as recs
from kraftsim.metadata import versions
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.metadata.snapshots import list_snapshots
from pyspark_kraft.image import image_at
from pyspark_kraft.report import write_report
from pyspark_kraft.synthetic import Workload
from tests import harness
from tests.spark.reference import python_image, read_log
from tests.spark.test_fault_report import check_faults_section, made_up_timeline


def _normalise(img: dict[str, Any]) -> dict[str, Any]:
    """JSON round trip: int keys become strings, as in ``kraftsim spark image --json``."""
    return json.loads(json.dumps(img, sort_keys=True))


def test_spark_image_equals_the_python_image_at_several_offsets(spark: Any, small_log: Path) -> None:
    last = read_log(small_log)[-1].offset
    for at in (700, last):
        got = image_at(spark, str(small_log), at)
        want = python_image(small_log, at)
        assert got == want, at
    assert got["brokers"] and got["topics"] and got["configs"] and got["acls"] and got["quotas"]
    assert any(p["leader"] == -1 for t in got["topics"].values() for p in t["partitions"].values())
    assert any(b["fenced"] for b in got["brokers"].values()) or any(not b["fenced"] for b in got["brokers"].values())


def test_an_unregistered_controller_leaves_the_image(spark: Any, tmp_path: Path) -> None:
    """UnregisterControllerRecord (Kafka 4.4) ends a controller's registration, as it ends it in
    the Python image; a controller that registers again is back."""
    d = tmp_path / "meta"
    mlog = MetadataLog.open(d, LogConfig(linger_ms=0))
    w = Workload(mlog, seed=3)
    w.bootstrap()
    reg = recs.by_name("RegisterControllerRecord")
    for cid in (3000, 3001, 3002):
        w.emit(reg(controller_id=cid, incarnation_id=uuid.UUID(int=cid), zk_migration_ready=False, end_points=[
            reg.ControllerEndpoint(name="CONTROLLER", host="localhost", port=cid, security_protocol=0)]))
    w.flush()
    registered = mlog.end_offset - 1
    w.emit(recs.by_name("UnregisterControllerRecord")(controller_id=3001))
    w.emit(recs.by_name("UnregisterControllerRecord")(controller_id=3002))
    w.flush()
    unregistered = mlog.end_offset - 1
    w.emit(reg(controller_id=3002, incarnation_id=uuid.UUID(int=9), zk_migration_ready=False, end_points=[]))
    w.flush()
    mlog.flush_now()
    mlog.close()
    for at, want in ((registered, {3000, 3001, 3002}), (unregistered, {3000}), (unregistered + 1, {3000, 3002})):
        got = image_at(spark, str(d), at)
        assert got == python_image(d, at, release=versions.release("4.4")), at
        assert set(got["controllers"]) == want, at


def test_image_from_a_snapshot_when_old_segments_are_gone(spark: Any, snapshotted_log: tuple[Path, int]) -> None:
    d, end = snapshotted_log
    sid = next(s for s in list_snapshots(d / "__cluster_metadata-0") if s.end_offset == end)
    last = read_log(d)[-1].offset
    for at in (end - 1, end + 300, last):
        assert image_at(spark, str(d), at) == python_image(d, at, sid), at
    with pytest.raises(Exception, match="not on disk any more"):
        image_at(spark, str(d), 10)


@pytest.mark.slow  # a Spark of its own, in the CLI's process
def test_the_image_cli_prints_json_and_text(small_log: Path) -> None:
    at = 1500
    r = harness.kraftsim("spark", "image", str(small_log), "--at", str(at), "--master", "local[1]", "--json",
                         timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout) == _normalise(python_image(small_log, at))
    r = harness.kraftsim("spark", "image", str(small_log), "--at", "-5")
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0 and "not in the log" in r.stderr
    r = harness.kraftsim("spark", "report", str(small_log / "nope"), "--out", str(small_log / "r"))
    assert r.returncode == 1 and r.stderr.strip() == f"kraftsim spark report: {small_log / 'nope'}: no such directory"


def test_render_image_text_lists_every_slice(spark: Any, small_log: Path) -> None:
    from pyspark_kraft.cli import render_image

    text = render_image(image_at(spark, str(small_log), 1500))
    assert text.startswith("Metadata image at offset ")
    for part in ("Brokers (", "Topic: topic-", "\tPartition: 0\tLeader: ", "ACLs (", "Client quotas (",
                 "metadata.version 2"):
        assert part in text


def test_the_report_renders_and_its_figures_agree_with_the_log(spark: Any, small_log: Path, tmp_path: Path) -> None:
    ref = [r for r in read_log(small_log) if not r.is_control]
    out = tmp_path / "report"
    # With a scenario's timeline beside it: the faults' section is checked by test_fault_report.py.
    index = write_report(spark, str(small_log), out, timeline=made_up_timeline(ref, tmp_path))
    page = index.read_text()
    for png in ("records_per_type", "broker_timeline", "leaderless_partitions", "leadership_moves", "isr_changes",
                "feature_levels", "migration_timeline"):
        assert (out / f"{png}.png").stat().st_size > 5000 and f"src='{png}.png'" in page
    check_faults_section(ref, out, page)

    def table(name: str) -> list[dict[str, Any]]:
        return pq.read_table(out / "tables" / f"{name}.parquet").to_pylist()

    # records per type
    assert {r["record_type"]: r["count"] for r in table("records_by_type")} == \
        dict(collections.Counter(r.record_type for r in ref))
    assert sum(r["count"] for r in table("records_per_type")) == len(ref)
    # broker flaps: fences per broker, as FenceBrokerRecord + BrokerRegistrationChangeRecord(fenced=1)
    fences: collections.Counter[int] = collections.Counter()
    for r in ref:
        if r.record_type == "FenceBrokerRecord":
            fences[r.msg.id] += 1  # type: ignore[union-attr]
        elif r.record_type == "BrokerRegistrationChangeRecord" and r.msg.fenced == 1:  # type: ignore[union-attr]
            fences[r.msg.broker_id] += 1  # type: ignore[union-attr]
    assert {r["broker_id"]: r["fenced"] for r in table("broker_flaps") if r["fenced"]} == dict(fences)
    # feature levels and migration states, in log order
    assert [(r["feature"], r["level"]) for r in table("feature_levels")] == \
        [(r.msg.name, r.msg.feature_level) for r in ref if r.record_type == "FeatureLevelRecord"]  # type: ignore[union-attr]
    assert [r["state_id"] for r in table("migration_states")] == \
        [r.msg.zk_migration_state for r in ref if r.record_type == "ZkMigrationStateRecord"]  # type: ignore[union-attr]
    # leaderless partitions: replay the leader of every partition in Python and count outages
    leaders: dict[tuple[Any, int], int] = {}
    removed: set[Any] = set()
    outages = 0
    isr: dict[tuple[Any, int], list[int]] = {}
    shrinks = expands = 0
    for r in ref:
        m: Any = r.msg
        if r.record_type == "RemoveTopicRecord":
            removed.add(m.topic_id)
        elif r.record_type == "PartitionRecord":
            leaders[(m.topic_id, m.partition_id)] = m.leader
            isr[(m.topic_id, m.partition_id)] = list(m.isr)
            outages += m.leader == -1
        elif r.record_type == "PartitionChangeRecord":
            key = (m.topic_id, m.partition_id)
            if m.leader != -2 and m.leader != leaders[key]:
                outages += m.leader == -1
                leaders[key] = m.leader
            if m.isr is not None:
                shrinks += len(set(isr[key]) - set(m.isr))
                expands += len(set(m.isr) - set(isr[key]))
                isr[key] = list(m.isr)
    got = table("leaderless_outages")
    assert len(got) == outages > 0
    assert all(o["duration_s"] >= 0 for o in got) and got == sorted(got, key=lambda o: -o["duration_s"])
    assert sum(r["shrinks"] for r in table("isr_changes_by_broker")) == shrinks > 0
    assert sum(r["expands"] for r in table("isr_changes_by_broker")) == expands > 0
    final_leaderless = sum(1 for (tid, _), ld in leaders.items() if ld == -1 and tid not in removed)
    assert table("leaderless_over_time")[-1]["leaderless"] == final_leaderless


def test_report_cli_without_a_log_is_one_line(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "kraftsim", "spark", "report", str(tmp_path), "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().endswith("(no .log segments or .checkpoint snapshots in it)")
    assert "Traceback" not in r.stderr

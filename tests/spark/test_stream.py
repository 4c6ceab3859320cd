"""spark.readStream.format("kraft"): new records in the next micro-batch, checkpointed offsets
across restarts, availableNow, segment rolls, and a clear error when needed segments are gone."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kraftsim.metadata.log import LogConfig, MetadataLog
from pyspark_kraft.synthetic import Workload
from tests.spark.reference import read_log


class Collector:
    """A foreachBatch sink that keeps every offset it was given (the memory sink cannot restart
    from a checkpoint; foreachBatch can)."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, batch: Any, batch_id: int) -> None:
        got = [r[0] for r in batch.select("offset").collect()]
        with self.lock:
            self.offsets.extend(got)

    def snapshot(self) -> list[int]:
        with self.lock:
            return list(self.offsets)


def _run_available_now(spark: Any, directory: Path, checkpoint: Path, **options: str) -> list[int]:
    sink = Collector()
    q = (spark.readStream.format("kraft").options(**options).load(str(directory)).writeStream
         .foreachBatch(sink).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert not q.isActive
    return sink.snapshot()


def _log(tmp_path: Path, segment_bytes: int = 1 << 30, **cfg: Any) -> tuple[MetadataLog, Workload]:
    mlog = MetadataLog.open(tmp_path / "meta", LogConfig(linger_ms=0, segment_bytes=segment_bytes, **cfg))
    return mlog, Workload(mlog, seed=3, check=True)


def test_available_now_then_exactly_the_new_records_after_a_restart(spark: Any, tmp_path: Path) -> None:
    mlog, w = _log(tmp_path, segment_bytes=16 * 1024)  # small segments: appends roll them
    w.run(400)
    mlog.flush_now()
    ck = tmp_path / "ck"
    first = _run_available_now(spark, tmp_path / "meta", ck)
    assert sorted(first) == list(range(mlog.end_offset))
    assert len(first) == len(set(first))
    before = mlog.end_offset
    segments_before = len(mlog.segments.segments)
    w.run(600)
    mlog.flush_now()
    assert len(mlog.segments.segments) > segments_before  # the stream crosses a segment roll
    second = _run_available_now(spark, tmp_path / "meta", ck)
    assert sorted(second) == list(range(before, mlog.end_offset))  # exactly the new ones, once
    assert _run_available_now(spark, tmp_path / "meta", ck) == []  # nothing new: nothing read
    mlog.close()


def test_a_running_query_sees_appends_in_its_next_micro_batch(spark: Any, tmp_path: Path) -> None:
    mlog, w = _log(tmp_path)
    w.run(200)
    mlog.flush_now()
    sink = Collector()
    q = (spark.readStream.format("kraft").option("startingOffsets", "latest").load(str(tmp_path / "meta"))
         .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while q.lastProgress is None and time.monotonic() < deadline:  # the first (empty) batch ran
            time.sleep(0.1)
        start = mlog.end_offset
        w.run(150)
        mlog.flush_now()
        want = list(range(start, mlog.end_offset))
        while sorted(sink.snapshot()) != want and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sorted(sink.snapshot()) == want  # the new records, and none of the 200 before
        rows = read_log(tmp_path / "meta")
        assert len(rows) == mlog.end_offset
    finally:
        q.stop()
        mlog.close()


def test_segments_deleted_after_a_snapshot_fail_the_stream_clearly(spark: Any, tmp_path: Path) -> None:
    mlog, w = _log(tmp_path, segment_bytes=8 * 1024, retention_bytes=1)
    w.run(200)
    mlog.flush_now()
    ck = tmp_path / "ck"
    assert len(_run_available_now(spark, tmp_path / "meta", ck)) == mlog.end_offset
    read_up_to = mlog.end_offset
    assert w.image is not None
    mlog.write_snapshot(w.image.records(), mlog.end_offset - 1, w.now, w.now)  # retention drops it
    w.run(1500)
    mlog.flush_now()
    mlog.write_snapshot(w.image.records(), mlog.end_offset - 1, w.now, w.now)
    w.run(100)
    mlog.flush_now()
    mlog.delete_marked(mlog.maybe_clean(w.now, mlog.end_offset))  # and a minute later, what it marked
    assert mlog.segments.start_offset > read_up_to  # what the stream still needs is gone
    with pytest.raises(Exception, match=f"offsets {read_up_to}\\.\\.[0-9]+ are no longer in .* snapshot"):
        _run_available_now(spark, tmp_path / "meta", ck)
    # a new query from the earliest offset still on disk reads the rest
    fresh = _run_available_now(spark, tmp_path / "meta", tmp_path / "ck2")
    assert sorted(fresh) == list(range(mlog.segments.start_offset, mlog.end_offset))  # the first on disk
    mlog.close()

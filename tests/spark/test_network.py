"""The kraft source over the network, as a Raft observer of a real Apache Kafka 3.9 controller and
of a kraftsim one: what it reads by Fetch and FetchSnapshot equals what that controller wrote to
its own disk."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from pyspark_kraft.image import spark_image
from pyspark_kraft.network import RaftObserver, complete_prefix, plan_ranges
from tests.spark import peers
from tests.spark.reference import python_image
from tests.spark.test_stream import Collector

COLUMNS = ["offset", "base_offset", "partition_leader_epoch", "timestamp", "is_control", "control_type", "api_key",
           "record_type", "version", "json"]


def test_offset_ranges_and_partial_batches() -> None:
    assert plan_ranges(0, 0) == []
    rs = plan_ranges(10, 100_000, pieces=4, minimum=1000)
    assert rs[0].start == 10 and rs[-1].end == 100_000 and len(rs) == 4
    assert all(a.end == b.start for a, b in zip(rs, rs[1:], strict=False))
    from kraftsim.metadata.batch import encode_batch

    one = encode_batch(5, [b"\x01\x14\x00\x00"], epoch=1, timestamp=1)
    assert complete_prefix(one + one[:20]) == len(one)  # a batch cut by the fetch size waits
    assert complete_prefix(one * 2) == 2 * len(one)


def _wait_for(observer_addr: str, offset: int, timeout: float = 60) -> int:
    async def hw() -> int:
        o = RaftObserver(observer_addr)
        await o.connect()
        try:
            deadline = time.monotonic() + timeout
            while True:
                r = await o.fetch(0)
                if r.high_watermark > offset or time.monotonic() > deadline:
                    return r.high_watermark
                await asyncio.sleep(0.1)
        finally:
            await o.close()

    return asyncio.run(hw())


@pytest.mark.slow
@pytest.mark.parametrize("kind", peers.KINDS)
def test_observer_of_a_controller(spark: Any, tmp_path: Path, kind: str) -> None:
    with peers.controller(kind, tmp_path) as (addr, data):
        assert _wait_for(addr, 30) > 30
        # A read that lands just as a snapshot reaches the high watermark has no log after it (about
        # one read in 25 here: the log moves every 50 ms, a snapshot comes every second), so ask
        # again for one that has both. Bounded by reads, not time: a first read slowed by a cold
        # Spark must not use up the retries. Each read is a new DataFrame: Spark plans a Python
        # source's partitions once per DataFrame, so collecting the same one again repeats its plan.
        reads = 0
        while reads < 20:
            reads += 1
            net = spark.read.format("kraft").option("bootstrap.controller", addr).load()
            rows = net.select("source", *COLUMNS).orderBy("offset", "source_offset").collect()
            snap_rows = [r for r in rows if r["source"].endswith(".checkpoint")]
            log_rows = [r for r in rows if not r["source"].endswith(".checkpoint")]
            if log_rows:
                break
        assert log_rows, f"each of {reads} reads was a snapshot at the high watermark"
        # the log part is exactly what the controller wrote to its own segments
        disk = spark.read.format("kraft").load(str(data))
        want = disk.where(disk["offset"].between(log_rows[0]["offset"], log_rows[-1]["offset"])) \
            .select(*COLUMNS).orderBy("offset").collect()
        assert [r.asDict() for r in want] == [{c: r[c] for c in COLUMNS} for r in log_rows]
        assert [r["offset"] for r in log_rows] == list(range(log_rows[0]["offset"], log_rows[-1]["offset"] + 1))
        assert snap_rows  # a snapshot every second here: a fresh observer is sent the latest one
        if snap_rows:
            name = snap_rows[0]["source"]
            file_snap = spark.read.format("kraft").option("snapshot", name).load(str(data))
            file_snap = file_snap.where(file_snap.source == name).select(*COLUMNS).orderBy("source_offset").collect()
            assert [r.asDict() for r in file_snap] == [{c: r[c] for c in COLUMNS} for r in snap_rows]
            assert log_rows[0]["offset"] == int(name[:20])
        # the image from the network, checked against Kafka's own files once Kafka has stopped
        at = log_rows[-1]["offset"]
        got = spark_image(net, at)
        # a stream over the network: everything committed, then exactly what came after
        sink = Collector()
        ck = tmp_path / "ck"
        start = log_rows[0]["offset"]

        def run_stream() -> None:
            q = (spark.readStream.format("kraft").option("bootstrap.controller", addr)
                 .option("startingOffsets", str(start)).load()
                 .writeStream.foreachBatch(sink).option("checkpointLocation", str(ck))
                 .trigger(availableNow=True).start())
            q.awaitTermination(120)
            assert not q.isActive

        run_stream()
        first = sink.snapshot()
        assert first and first == list(range(start, max(first) + 1))
        _wait_for(addr, max(first) + 5)
        run_stream()  # restarts from the checkpoint
        both = sink.snapshot()
        assert both == list(range(start, max(both) + 1))  # no gap, no duplicate
        assert max(both) > max(first)
    from kraftsim.metadata.snapshots import list_snapshots

    sid = next((s for s in list_snapshots(data / "__cluster_metadata-0")
                if snap_rows and s.file_name == snap_rows[0]["source"]), None)
    assert got == python_image(data, at, sid)
    assert got["features"]["metadata.version"] == 21 and got["controllers"]

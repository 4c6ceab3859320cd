"""Loading an image from snapshot + log with fallbacks; the event queue's deadlines;
dump-log on live segments."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from kraftsim.controller.event_queue import EventQueue, EventTimeoutError
from kraftsim.metadata import records as recs
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.loader import LoadError, load_image
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.rpc.clock import ManualClock
from tests import harness

FEATURE = recs.by_name("FeatureLevelRecord")
TOPIC = recs.by_name("TopicRecord")


def _log_with_topics(tmp: Path, n: int) -> MetadataLog:
    mlog = MetadataLog.open(tmp, LogConfig(linger_ms=0, segment_bytes=600, retention_bytes=0))
    mlog.append_records([(FEATURE(name="metadata.version", feature_level=21), 0)], epoch=1, timestamp=1)
    for i in range(n):
        mlog.append_records([(TOPIC(name=f"t{i}", topic_id=uuid.UUID(int=i + 10)), 0)], epoch=1, timestamp=1)
    mlog.flush_now()
    return mlog


def _snapshot_now(mlog: MetadataLog) -> None:
    image, _ = load_image(mlog, MetadataImage)
    mlog.write_snapshot(image.records(), image.offset, 1, 1)


def test_a_corrupt_newest_snapshot_falls_back_to_an_older_one(tmp_path: Path) -> None:
    mlog = _log_with_topics(tmp_path, 5)
    _snapshot_now(mlog)
    for i in range(5, 8):
        mlog.append_records([(TOPIC(name=f"t{i}", topic_id=uuid.UUID(int=i + 10)), 0)], epoch=1, timestamp=1)
    mlog.flush_now()
    _snapshot_now(mlog)
    newest = mlog.latest_snapshot()
    assert newest is not None and len(mlog.snapshots()) == 2
    path = mlog.snapshot_path(newest)
    path.write_bytes(path.read_bytes()[:-30])
    image, result = load_image(mlog, MetadataImage)
    assert result.snapshot == mlog.snapshots()[0]
    assert set(image.topics.by_name) == {f"t{i}" for i in range(8)}


def test_no_readable_snapshot_and_a_truncated_log_start_is_a_load_error(tmp_path: Path) -> None:
    mlog = _log_with_topics(tmp_path, 10)
    _snapshot_now(mlog)
    for i in range(10, 20):
        mlog.append_records([(TOPIC(name=f"t{i}", topic_id=uuid.UUID(int=i + 10)), 0)], epoch=1, timestamp=1)
    mlog.flush_now()
    _snapshot_now(mlog)
    mlog.append_records([(TOPIC(name="late", topic_id=uuid.UUID(int=999)), 0)], epoch=1, timestamp=1)
    mlog.flush_now()
    assert mlog.maybe_clean(now_ms=10**12, high_watermark=mlog.end_offset).segments
    mlog.close()
    mlog = MetadataLog.open(tmp_path, LogConfig(linger_ms=0, segment_bytes=600))
    assert mlog.start_offset > 0  # its first segment's base, after the segments below the snapshot went
    for sid in mlog.snapshots():
        mlog.snapshot_path(sid).write_bytes(b"garbage")
    with pytest.raises(LoadError):
        load_image(mlog, MetadataImage)


def test_a_bad_record_inside_a_batch_is_named_by_its_offset(tmp_path: Path) -> None:
    """The loader replays a gapless data batch in bulk; a record in it that does not decode,
    or does not replay, is still named by its own offset, and one without a value too."""
    noop = b"\x01\x14\x00\x00"  # a framed NoOpRecord
    unknown_topic = recs.frame(recs.by_name("PartitionRecord")(topic_id=uuid.UUID(int=9), partition_id=0,
                                                              replicas=[1], isr=[1], leader=1), 0)
    for bad, why in ((b"\x01\x02\x00\xff\xff", "does not decode"), (unknown_topic, "does not replay")):
        d = tmp_path / why.replace(" ", "-")
        mlog = MetadataLog.open(d, LogConfig(linger_ms=0))
        mlog.append_values([noop] * 3, epoch=1, timestamp=1)
        first, _ = mlog.append_values([noop, noop, bad, noop], epoch=1, timestamp=2)
        mlog.flush_now()
        with pytest.raises(LoadError, match=f"record at offset {first + 2} {why}"):
            load_image(mlog, MetadataImage)
        mlog.close()


def test_snapshot_ahead_of_the_log_truncates_the_log_to_it(tmp_path: Path) -> None:
    """The log on disk is shorter than the newest snapshot (a follower that fetched a snapshot
    does this): opening it starts the log at the snapshot, as Kafka's KafkaMetadataLog does,
    instead of replaying the stale head and then appending after it; the old segment is marked
    for deletion."""
    mlog = MetadataLog.open(tmp_path, LogConfig(linger_ms=0))
    mlog.append_records([(FEATURE(name="metadata.version", feature_level=21), 0)], epoch=1, timestamp=1)
    mlog.append_records([(TOPIC(name="t0", topic_id=uuid.UUID(int=10)), 0)], epoch=1, timestamp=1)
    mlog.flush_now()
    segment = next((tmp_path / "__cluster_metadata-0").glob("*.log"))
    short = segment.stat().st_size  # the log as it will be left: offsets 0-1
    for i in range(1, 6):
        mlog.append_records([(TOPIC(name=f"t{i}", topic_id=uuid.UUID(int=i + 10)), 0)], epoch=1, timestamp=1)
    mlog.flush_now()
    _snapshot_now(mlog)
    sid = mlog.latest_snapshot()
    assert sid is not None and sid.end_offset == 7
    mlog.close()
    with segment.open("r+b") as f:
        f.truncate(short)
    reopened = MetadataLog.open(tmp_path, LogConfig(linger_ms=0))  # the log ended before the snapshot
    assert [s.path.name for s in reopened.marked_at_open.segments] == [segment.name + ".deleted"]
    image, result = load_image(reopened, MetadataImage)
    assert (reopened.start_offset, reopened.end_offset, reopened.flushed_offset) == (7, 7, 6)
    assert result.snapshot == sid and result.records_replayed == 0
    assert set(image.topics.by_name) == {f"t{i}" for i in range(6)}
    assert reopened.append_records([(TOPIC(name="next", topic_id=uuid.UUID(int=99)), 0)], epoch=1,
                                   timestamp=1) == (7, 7)


async def test_queued_events_past_their_deadline_time_out() -> None:
    clock = ManualClock()
    timeouts: list[str] = []
    q = EventQueue(clock, on_timeout=timeouts.append)
    queued: dict[str, object] = {}

    def long_event() -> str:
        # While this event runs, two more arrive and must wait; time passes meanwhile.
        queued["late"] = q.submit("late", lambda: "never", deadline_ms=clock.monotonic_ms() + 100)
        queued["ok"] = q.submit("ok", lambda: "fine")
        clock.advance(500)
        return "inline"

    assert q.submit("first", long_event) == "inline"  # an idle queue runs the event in the caller's stack
    with pytest.raises(EventTimeoutError):
        await queued["late"]  # type: ignore[misc]
    assert await queued["ok"] == "fine"  # type: ignore[misc]
    assert timeouts == ["late"]


async def test_call_runs_inline_when_idle_else_queues_and_both_are_counted() -> None:
    """``call`` (the request path): inline with its arguments when the queue is idle, queued
    behind a running event otherwise; every event lands in both histograms (the inline ones'
    zero queue time in the first bucket once merged on scrape)."""
    q = EventQueue(ManualClock())
    got: dict[str, object] = {}

    def outer(a: int, b: int) -> int:
        got["nested"] = q.call("nested", lambda x: x * 10, (a,))  # the queue is busy: a future
        return a + b

    assert q.call("outer", outer, (2, 3)) == 5
    assert isinstance(got["nested"], asyncio.Future)
    assert await got["nested"] == 20  # type: ignore[misc]
    assert q.queue_time.zeros == 1 and q.queue_time.n == 1  # one inline, one queued
    first_bucket, *_, (inf_label, inf_count) = q.queue_time.cumulative()
    assert first_bucket[1] >= 1 and inf_label == "+Inf" and inf_count == 2
    assert q.processing_time.cumulative()[-1] == ("+Inf", 2)


def test_dump_log_reads_a_live_controllers_segment(tmp_path: Path) -> None:
    cfg = harness.write_config(tmp_path)
    harness.format_dir(cfg)

    async def run() -> None:
        running = await harness.start_controller(cfg)
        await running.stop()

    asyncio.run(run())
    seg = tmp_path / "data" / "__cluster_metadata-0" / "00000000000000000000.log"
    r = harness.kraftsim("dump-log", "--json", str(seg))
    assert r.returncode == 0, r.stderr
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    kinds = [d["record"].get("recordType") or d["record"].get("controlType") for d in docs if "record" in d]
    assert kinds[:5] == ["LeaderChange", "BeginTransactionRecord", "FeatureLevelRecord", "ZkMigrationStateRecord",
                         "EndTransactionRecord"]
    text = harness.kraftsim("dump-log", str(seg))
    assert text.returncode == 0 and text.stdout.startswith(f"Dumping {seg}\nLog starting offset: 0\nbaseOffset: 0")


def test_frozen_records_do_not_see_later_replays(tmp_path: Path) -> None:
    part = recs.by_name("PartitionRecord")
    change = recs.by_name("PartitionChangeRecord")
    image = MetadataImage()
    image.replay(FEATURE(name="metadata.version", feature_level=21), 0)
    tid = uuid.UUID(int=77)
    image.replay(TOPIC(name="t", topic_id=tid), 1)
    for p in range(3):
        image.replay(part(partition_id=p, topic_id=tid, replicas=[1, 2], isr=[1, 2], leader=1), 2 + p)
    expected = list(image.records())
    frozen = image.frozen_records()
    image.replay(change(partition_id=0, topic_id=tid, isr=[2], leader=2), 10)
    image.replay(TOPIC(name="u", topic_id=uuid.UUID(int=78)), 11)
    got = list(frozen)
    assert [(type(r).__name__, r.encode(v)) for r, v in got] == [(type(r).__name__, r.encode(v)) for r, v in expected]


async def test_the_controller_snapshots_in_the_background_while_serving(tmp_path: Path) -> None:
    from tests.test_controller import CT, HB, Cluster

    c = Cluster(tmp_path, **{"metadata_log_max_record_bytes_between_snapshots": "1"})
    await c.start()
    try:
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        r = await c.req(CT(topics=[CT.CreatableTopic(name=f"t{i}", num_partitions=10, replication_factor=1)
                                   for i in range(50)], timeout_ms=5000), 7)
        assert all(t.error_code == 0 for t in r.topics)
        mlog = c.controller.mlog
        await harness.poll_until(lambda: mlog.latest_snapshot() is not None, timeout=15)
        r = await c.req(HB(broker_id=1, broker_epoch=epoch, current_metadata_offset=mlog.end_offset), 1)
        assert r.error_code == 0 and r.is_fenced is False
        sid = mlog.latest_snapshot()
        assert sid is not None
        from kraftsim.metadata.snapshots import load_snapshot

        names = [type(rec).__name__ for rec, _ in load_snapshot(mlog.snapshot_path(sid))]
        assert names.count("TopicRecord") == 50 and names.count("PartitionRecord") == 500
    finally:
        await c.stop()

"""The metadata log on real files: append, group commit, recovery of torn and corrupt tails,
rolling, snapshots and retention."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from kraftsim.metadata import files
from kraftsim.metadata import records as recs
from kraftsim.metadata.batch import ControlRecordType, read_batches
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.metadata.segments import CorruptLogError, LogFailedError, SegmentedLog, iter_file_batches
from kraftsim.metadata.snapshots import (
    SnapshotError,
    SnapshotId,
    last_contained_timestamp,
    list_snapshots,
    load_snapshot,
)

NOOP = recs.by_name("NoOpRecord")
TOPIC = recs.by_name("TopicRecord")
FEATURE = recs.by_name("FeatureLevelRecord")


def topic(i: int) -> tuple[object, int]:
    return TOPIC(name=f"t{i}", topic_id=uuid.UUID(int=i + 100)), 0


def open_log(tmp_path: Path, **kw: int) -> MetadataLog:
    cfg = LogConfig(linger_ms=0, **kw)
    return MetadataLog.open(tmp_path, cfg)


def all_offsets(log: MetadataLog) -> list[int]:
    return [r.offset for b in log.batches(0, flushed_only=False) for r in b.records()]


def test_layout_matches_kafka(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_records([topic(0)], epoch=1, timestamp=1000)
    log.flush_now()
    d = tmp_path / "__cluster_metadata-0"
    assert (d / "00000000000000000000.log").exists()
    assert (d / "partition.metadata").read_text() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ"
    assert (d / "leader-epoch-checkpoint").read_text() == "0\n1\n1 0\n"
    log.close()


def test_append_assigns_offsets_and_splits_batches_at_eight_mib(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first, last = log.append_records([topic(i) for i in range(25_000)], epoch=3, timestamp=5)
    assert (first, last) == (0, 24_999)
    assert log.flushed_offset == -1  # appended is not flushed
    big = [bytes([i]) * (3 * 1024 * 1024) for i in range(5)]  # 15 MiB: 2 + 2 + 1 values per batch
    assert log.append_values(big, epoch=3, timestamp=5) == (25_000, 25_004)
    log.flush_now()
    batches = list(log.batches(0))
    assert [b.records_count for b in batches] == [25_000, 2, 2, 1]
    assert [r.value for b in batches[1:] for r in b.records()] == big
    assert {b.partition_leader_epoch for b in batches} == {3}
    assert all(b.crc_valid() for b in batches)
    log.close()


async def test_group_commit_wakes_waiters_only_after_fsync(tmp_path: Path) -> None:
    log = MetadataLog.open(tmp_path, LogConfig(linger_ms=5))
    syncs = []
    real_sync = log.segments.sync

    def counting_sync() -> None:
        syncs.append(log.end_offset)
        real_sync()

    log.segments.sync = counting_sync  # type: ignore[method-assign]
    offsets = [log.append_records([topic(i)], epoch=1, timestamp=1)[1] for i in range(50)]
    assert log.flushed_offset == -1
    await asyncio.wait_for(asyncio.gather(*(log.wait_flushed(o) for o in offsets)), 10)
    assert log.flushed_offset == 49
    assert len(syncs) < 5  # one fsync covered many appends
    log.close()


async def test_fsync_failure_fails_closed(tmp_path: Path) -> None:
    log = MetadataLog.open(tmp_path, LogConfig(linger_ms=0))
    _, ok = log.append_records([topic(0)], epoch=1, timestamp=1)
    await log.wait_flushed(ok)

    def broken() -> None:
        raise LogFailedError("injected fsync failure")

    log.segments.sync = broken  # type: ignore[method-assign]
    log.segments.failed = None
    _, bad = log.append_records([topic(1)], epoch=1, timestamp=1)
    with pytest.raises(LogFailedError):
        await asyncio.wait_for(log.wait_flushed(bad), 5)
    assert log.flushed_offset == ok
    with pytest.raises(LogFailedError):
        log.append_records([topic(2)], epoch=1, timestamp=1)


def test_write_error_fails_closed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_records([topic(0)], epoch=1, timestamp=1)
    log.flush_now()
    os.close(log.segments.fileno())  # the next write hits EBADF
    with pytest.raises(LogFailedError):
        log.append_records([topic(1)], epoch=1, timestamp=1)
    with pytest.raises(LogFailedError):
        log.append_records([topic(2)], epoch=1, timestamp=1)
    log.segments._fd = None
    reopened = open_log(tmp_path)
    assert all_offsets(reopened) == [0]
    reopened.close()


def _three_batch_log(tmp_path: Path, recovery_point: int = 6) -> tuple[Path, list[int]]:
    """Three batches of three records; the recovery point says the first two were fsynced and
    the third was not (so the third may be a torn tail), unless told otherwise."""
    log = open_log(tmp_path)
    ends = []
    for i in range(3):
        log.append_records([topic(10 * i + j) for j in range(3)], epoch=1, timestamp=1)
        ends.append(log.segments.segments[-1].size)
    log.close()
    files.write_recovery_point(tmp_path / "__cluster_metadata-0" / files.RECOVERY_POINT_CHECKPOINT,
                               recovery_point, durable=True)
    return tmp_path / "__cluster_metadata-0" / "00000000000000000000.log", ends


def test_every_cut_inside_the_last_batch_keeps_exactly_the_earlier_batches(tmp_path: Path) -> None:
    seg, ends = _three_batch_log(tmp_path)
    original = seg.read_bytes()
    for cut in range(ends[1], ends[2]):
        seg.write_bytes(original[:cut])
        files.write_recovery_point(seg.parent / files.RECOVERY_POINT_CHECKPOINT, 6, durable=True)
        log = open_log(tmp_path)
        assert all_offsets(log) == list(range(6)), cut
        assert seg.stat().st_size == ends[1]
        assert log.end_offset == 6
        log.close()


def test_every_byte_flip_inside_the_last_batch_keeps_exactly_the_earlier_batches(tmp_path: Path) -> None:
    seg, ends = _three_batch_log(tmp_path)
    original = seg.read_bytes()
    for pos in range(ends[1], ends[2]):
        if pos - ends[1] in range(0, 8) or pos - ends[1] in range(12, 16):
            continue  # base offset and leader epoch are outside the CRC (checked separately below)
        data = bytearray(original)
        data[pos] ^= 0x5A
        seg.write_bytes(bytes(data))
        files.write_recovery_point(seg.parent / files.RECOVERY_POINT_CHECKPOINT, 6, durable=True)
        log = open_log(tmp_path)
        assert all_offsets(log) == list(range(6)), pos
        log.close()


def test_a_flip_in_fsynced_data_is_refused_with_one_line_naming_where(tmp_path: Path) -> None:
    seg, ends = _three_batch_log(tmp_path, recovery_point=9)  # all three batches were fsynced
    data = bytearray(seg.read_bytes())
    data[ends[1] + 40] ^= 0x5A  # inside the third batch's CRC-covered header
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError) as e:
        open_log(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "00000000000000000000.log" in msg and f"at byte {ends[1]}" in msg
    assert "(offset 6)" in msg and "below the recovery point 9" in msg and "--truncate-at 6" in msg
    assert seg.stat().st_size == ends[2]  # nothing was cut


def test_a_flip_followed_by_valid_batches_is_refused_even_after_the_recovery_point(tmp_path: Path) -> None:
    seg, ends = _three_batch_log(tmp_path, recovery_point=0)
    data = bytearray(seg.read_bytes())
    data[ends[0] + 30] ^= 0x01  # the middle batch; the third is intact behind it
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError, match=f"followed by a valid batch at position {ends[1]}"):
        open_log(tmp_path)
    assert seg.stat().st_size == ends[2]


def test_garbage_appended_after_the_last_fsync_is_a_torn_tail(tmp_path: Path) -> None:
    seg, ends = _three_batch_log(tmp_path, recovery_point=9)
    with open(seg, "ab") as f:
        f.write(os.urandom(300))
    log = open_log(tmp_path)
    assert all_offsets(log) == list(range(9)) and seg.stat().st_size == ends[2]
    log.close()


def test_a_corrupt_batch_in_an_older_segment_is_one_line_when_read(tmp_path: Path) -> None:
    log = MetadataLog.open(tmp_path, LogConfig(linger_ms=0, segment_bytes=200))
    for i in range(6):
        log.append_records([topic(i)], epoch=1, timestamp=1)
    log.close()
    segs = sorted((tmp_path / "__cluster_metadata-0").glob("*.log"))
    assert len(segs) > 2
    data = bytearray(segs[0].read_bytes())
    data[30] ^= 0xFF
    segs[0].write_bytes(bytes(data))
    log = MetadataLog.open(tmp_path, LogConfig(linger_ms=0, segment_bytes=200))
    with pytest.raises(CorruptLogError, match=f"{segs[0].name} at byte 0 \\(offset 0\\)"):
        list(log.batches(0))
    log.close()


def test_wrong_base_offset_in_the_tail_is_truncated(tmp_path: Path) -> None:
    seg, ends = _three_batch_log(tmp_path)
    data = bytearray(seg.read_bytes())
    data[ends[1] + 7] ^= 0x01  # base offset of the third batch: 6 -> 7
    seg.write_bytes(bytes(data))
    log = open_log(tmp_path)
    assert all_offsets(log) == list(range(6))
    log.close()


def test_recovery_logs_what_it_truncated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    seg, ends = _three_batch_log(tmp_path)
    with open(seg, "r+b") as f:
        f.truncate(ends[2] - 5)
    with caplog.at_level("WARNING"):
        open_log(tmp_path).close()
    assert any("truncating" in r.message and "last valid offset 5" in r.message for r in caplog.records)


def test_segments_roll_and_reading_spans_them(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500)
    for i in range(40):
        log.append_records([topic(i)], epoch=1, timestamp=1)
    log.flush_now()
    names = sorted(p.name for p in (tmp_path / "__cluster_metadata-0").glob("*.log"))
    assert len(names) > 3
    assert names[0] == "00000000000000000000.log"
    assert all(len(n) == 24 for n in names)
    assert all_offsets(log) == list(range(40))
    assert [r.offset for b in log.batches(17) for r in b.records()][0] == 17
    log.close()
    again = open_log(tmp_path, segment_bytes=500)
    assert again.end_offset == 40 and all_offsets(again) == list(range(40))
    again.close()


def test_control_batches_are_kept_apart(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    lc = recs.data_class("LeaderChangeMessage")
    voter = lc.Voter(voter_id=1)
    off = log.append_control([(ControlRecordType.LEADER_CHANGE,
                               lc(version=0, leader_id=1, voters=[voter], granting_voters=[voter]))],
                             epoch=1, timestamp=1)
    log.append_records([topic(0)], epoch=1, timestamp=1)
    log.flush_now()
    batches = list(log.batches(0))
    assert off == 0 and [b.is_control for b in batches] == [True, False]
    log.close()


def test_snapshot_write_and_read(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=1500)
    for i in range(60):
        log.append_records([topic(i)], epoch=2, timestamp=1_000 + i)
    log.flush_now()
    items = [(FEATURE(name="metadata.version", feature_level=21), 0)] + [topic(i) for i in range(30)]
    sid = log.write_snapshot(items, last_offset=29, timestamp=5, last_contained_timestamp=1_029)
    assert sid == SnapshotId(30, 2)
    path = log.snapshot_path(sid)
    assert path.name == "00000000000000000030-0000000002.checkpoint"
    back = load_snapshot(path)
    assert [(type(r).__name__, v) for r, v in back][:2] == [("FeatureLevelRecord", 0), ("TopicRecord", 0)]
    assert back == items
    raw = path.read_bytes()
    batches = list(read_batches(raw))
    assert batches[0].is_control and batches[-1].is_control and batches[0].base_offset == 0
    assert last_contained_timestamp(path) == 1_029
    log.close()


def log_with_snapshots(tmp_path: Path, *ends: int, **cfg: int) -> MetadataLog:
    """60 one-record batches in epochs 1 (offsets 0-29) and 2, segments of 1500 bytes, and a
    snapshot ending at each of ``ends`` whose last contained timestamp is 1,000 + its last offset."""
    log = open_log(tmp_path, segment_bytes=1500, **cfg)
    for i in range(60):
        log.append_records([topic(i)], epoch=1 if i < 30 else 2, timestamp=1_000 + i)
    log.flush_now()
    for end in ends:
        log.write_snapshot([topic(i) for i in range(end)], last_offset=end - 1, timestamp=5,
                           last_contained_timestamp=1_000 + end - 1)
    return log


def names(log: MetadataLog) -> list[str]:
    return sorted(p.name for p in log.directory.iterdir() if ".log" in p.name or ".checkpoint" in p.name)


def test_the_snapshot_listing_is_kept_and_follows_the_logs_own_changes(tmp_path: Path) -> None:
    """As Kafka's KafkaMetadataLog keeps its set of snapshots, the log lists its directory once
    and then follows what it does itself: a snapshot it writes is listed at once, one retention
    renames away is gone at once; a file put there behind its back is seen only once told."""
    log = log_with_snapshots(tmp_path, 10, 30)
    assert log.snapshots() == [SnapshotId(10, 1), SnapshotId(30, 1)]
    sid = log.write_snapshot([topic(i) for i in range(45)], last_offset=44, timestamp=5, last_contained_timestamp=1_044)
    assert log.latest_snapshot() == sid == SnapshotId(45, 2)
    outsider = log.snapshot_path(SnapshotId(50, 2))
    outsider.write_bytes(log.snapshot_path(sid).read_bytes())
    assert log.latest_snapshot() == sid  # kept: not listed again
    log.snapshots_changed()
    assert log.latest_snapshot() == SnapshotId(50, 2)
    outsider.unlink()
    log.snapshots_changed()
    log.config.retention_bytes = 0
    log.maybe_clean(now_ms=0, high_watermark=60)
    assert log.snapshots() == [SnapshotId(45, 2)]  # the older ones renamed *.deleted, at once
    assert log.earliest_snapshot() == log.latest_snapshot() == SnapshotId(45, 2)
    log.close()


def test_retention_by_size_moves_the_log_start_to_the_latest_snapshot_and_marks_the_rest(tmp_path: Path) -> None:
    """KafkaMetadataLog.maybeClean: over metadata.max.retention.bytes, each snapshot but the
    latest goes, the log start moving to the next one; whole segments below it are renamed
    *.deleted with the snapshots, and deleted after the file delete delay."""
    log = log_with_snapshots(tmp_path, 20, 40, 50, retention_bytes=1, retention_ms=-1)
    bases = [s.base_offset for s in log.segments.segments]
    assert log.start_offset == 0 and len(bases) > 3
    marked = log.maybe_clean(now_ms=2_000, high_watermark=60)
    assert log.start_offset == 50 and log.snapshots() == [SnapshotId(50, 2)]
    kept = [b for i, b in enumerate(bases) if i + 1 == len(bases) or bases[i + 1] > 50]
    assert [s.base_offset for s in log.segments.segments] == kept and kept[0] <= 50
    gone = [f"{b:020d}.log" for b in bases if b not in kept] + [SnapshotId(20, 1).file_name, SnapshotId(40, 2).file_name]
    assert sorted(p.name for p in marked.snapshots) == sorted(g + ".deleted" for g in gone if "checkpoint" in g)
    assert names(log) == sorted([*(g + ".deleted" for g in gone), *(f"{b:020d}.log" for b in kept),
                                 SnapshotId(50, 2).file_name])
    assert log.epoch_entries == [(2, 50)]  # the epoch cache is cut at the log start, as Kafka's
    assert (log.directory / "leader-epoch-checkpoint").read_text() == "0\n1\n2 50\n"
    assert not log.maybe_clean(now_ms=2_000, high_watermark=60)  # one snapshot left: nothing more
    log.delete_marked(marked)
    assert names(log) == sorted([*(f"{b:020d}.log" for b in kept), SnapshotId(50, 2).file_name])
    log.close()
    reopened = open_log(tmp_path, segment_bytes=1500)
    assert reopened.start_offset == kept[0] and reopened.snapshots() == [SnapshotId(50, 2)]  # the first segment's
    reopened.close()


def test_retention_by_size_stops_once_under_the_limit(tmp_path: Path) -> None:
    log = log_with_snapshots(tmp_path, 20, 40, 50, retention_bytes=-1, retention_ms=-1)
    assert not log.maybe_clean(now_ms=10**12, high_watermark=60) and log.start_offset == 0
    log.close()
    # Room for the log and the two newest snapshots only: the oldest goes, and nothing else.
    log = log_with_snapshots(tmp_path / "b", 20, 40, 50, retention_ms=-1)
    sizes = [log.snapshot_path(s).stat().st_size for s in log.snapshots()]
    log.config.retention_bytes = log.segments.size_in_bytes + sizes[1] + sizes[2]
    marked = log.maybe_clean(now_ms=10**12, high_watermark=60)
    assert log.start_offset == 40 and [p.name for p in marked.snapshots] == [SnapshotId(20, 1).file_name + ".deleted"]
    log.close()


def test_retention_by_time_goes_by_the_snapshots_last_contained_timestamp(tmp_path: Path) -> None:
    log = log_with_snapshots(tmp_path, 20, 40, 50, retention_bytes=-1, retention_ms=1_000)
    # Snapshot 20 contains up to 1,019, snapshot 40 up to 1,039: only the first is over a second old.
    assert not log.maybe_clean(now_ms=2_019, high_watermark=60) and log.start_offset == 0
    log.maybe_clean(now_ms=2_020, high_watermark=60)
    assert log.start_offset == 40 and log.snapshots() == [SnapshotId(40, 2), SnapshotId(50, 2)]
    log.maybe_clean(now_ms=10_000, high_watermark=60)
    assert log.start_offset == 50 and log.snapshots() == [SnapshotId(50, 2)]
    log.close()


def test_the_log_start_never_passes_the_high_watermark(tmp_path: Path) -> None:
    log = log_with_snapshots(tmp_path, 20, 40, retention_bytes=1, retention_ms=-1)
    assert not log.maybe_clean(now_ms=2_000, high_watermark=39)
    assert log.start_offset == 0 and log.snapshots() == [SnapshotId(20, 1), SnapshotId(40, 2)]
    log.close()


def test_a_log_cleaned_up_to_its_end_starts_over_at_the_snapshot_when_reopened(tmp_path: Path) -> None:
    """Retention moved the log start to the log end (the latest snapshot covers everything):
    the epoch cache's one entry starts there, which reopening drops (Kafka's load truncates the
    cache from the log end), so the snapshot's epoch is ahead of the log's and the log is
    truncated fully to the snapshot, its segments marked for deletion."""
    log = log_with_snapshots(tmp_path, 40, 60, retention_bytes=1, retention_ms=-1)
    log.delete_marked(log.maybe_clean(now_ms=2_000, high_watermark=60))
    assert log.start_offset == 60 == log.end_offset and log.epoch_entries == [(2, 60)]
    first = log.segments.start_offset
    log.close()
    reopened = open_log(tmp_path, segment_bytes=1500)
    assert reopened.start_offset == reopened.end_offset == 60 and reopened.epoch_entries == []
    assert [s.path.name for s in reopened.marked_at_open.segments][0] == f"{first:020d}.log.deleted"
    assert names(reopened)[-2:] == [SnapshotId(60, 2).file_name, f"{60:020d}.log"]
    reopened.delete_marked(reopened.marked_at_open)
    assert names(reopened) == [SnapshotId(60, 2).file_name, f"{60:020d}.log"]
    reopened.close()
    # With records after the snapshot the cache keeps its entry, and nothing is truncated.
    log = log_with_snapshots(tmp_path / "b", 40, 50, retention_bytes=1, retention_ms=-1)
    log.delete_marked(log.maybe_clean(now_ms=2_000, high_watermark=60))
    log.close()
    reopened = open_log(tmp_path / "b", segment_bytes=1500)
    assert not reopened.marked_at_open and reopened.end_offset == 60 and reopened.start_offset <= 50
    reopened.close()


def test_batch_bytes_are_counted_per_append(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_records([topic(0), topic(1)], epoch=1, timestamp=1)
    log.append_records([topic(2)], epoch=1, timestamp=1)
    sizes = [b.size_in_bytes for b in log.batches(0, flushed_only=False)]
    assert log.bytes_through(1) == sizes[0] and log.bytes_through(2) == sum(sizes) == log.appended_bytes
    log.close()


def test_snapshot_files_are_atomic_and_validated(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_records([topic(0)], epoch=1, timestamp=1)
    log.flush_now()
    sid = log.write_snapshot([topic(0)], last_offset=0, timestamp=1, last_contained_timestamp=1)
    d = tmp_path / "__cluster_metadata-0"
    assert not list(d.glob("*.part"))
    path = log.snapshot_path(sid)
    good = path.read_bytes()
    path.write_bytes(good[:-20])  # lost its footer
    with pytest.raises(SnapshotError):
        load_snapshot(path)
    path.write_bytes(good[:30] + bytes([good[30] ^ 1]) + good[31:])
    with pytest.raises(SnapshotError):
        load_snapshot(path)
    (d / "00000000000000000001-0000000001-123.checkpoint.part").write_bytes(b"junk")
    log.close()
    MetadataLog.open(tmp_path, LogConfig(linger_ms=0)).close()
    assert not list(d.glob("*.part"))
    assert list_snapshots(d) == [sid]


def test_quorum_state_and_meta_properties_formats(tmp_path: Path) -> None:
    qs = files.QuorumState(leader_id=3000, leader_epoch=5, voters=[3000])
    qs.write(tmp_path / "quorum-state")
    assert (tmp_path / "quorum-state").read_text() == (
        '{"clusterId":"","leaderId":3000,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":3000}],"data_version":0}')
    assert files.QuorumState.read(tmp_path / "quorum-state") == qs
    mp = files.MetaProperties("MkU3OEVBNTcwNTJENDM2Qk", 3000, files.new_directory_id())
    mp.write(tmp_path / "meta.properties")
    text = (tmp_path / "meta.properties").read_text().splitlines()
    assert text[0] == "#" and text[1].startswith("#")
    assert sorted(text[2:]) == sorted(["node.id=3000", f"directory.id={mp.directory_id}", "version=1",
                                       "cluster.id=MkU3OEVBNTcwNTJENDM2Qk"])
    assert files.MetaProperties.read(tmp_path / "meta.properties") == mp


def test_segmented_log_refuses_out_of_order_appends(tmp_path: Path) -> None:
    seg = SegmentedLog.open(tmp_path, 1 << 20)
    with pytest.raises(ValueError):
        seg.append(b"x", 5, 6, 0)
    seg.close()
    assert list(iter_file_batches(tmp_path / "00000000000000000000.log")) == []


def test_the_write_path_leaves_the_image_as_it_was_when_storage_refuses(tmp_path: Path) -> None:
    from kraftsim.controller.result import ControllerResult
    from kraftsim.metadata.segments import LogFailedError
    from tests.controller_harness import WriteHarness

    h = WriteHarness(directory=tmp_path)
    before = (h.image.offset, dict(h.image.topics.by_name))
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, h.mlog.segments.fileno())
    os.close(full)
    with pytest.raises(LogFailedError):
        h.writer.append(ControllerResult([(topic(1)[0], 0)], None))
    assert (h.image.offset, dict(h.image.topics.by_name)) == before


def test_the_write_path_appends_a_large_result_as_batches_of_ten_thousand(tmp_path: Path) -> None:
    """Kafka's QuorumController.MAX_RECORDS_PER_BATCH, for results that need not be atomic."""
    from kraftsim.controller.result import ControllerResult
    from tests.controller_harness import WriteHarness

    h = WriteHarness(directory=tmp_path)
    start = h.next_offset
    last = h.writer.append(ControllerResult([topic(i) for i in range(25_000)], None, atomic=False))
    h.mlog.flush_now()
    assert last == start + 24_999
    sizes = [b.records_count for b in h.mlog.batches(start)]
    assert sizes == [10_000, 10_000, 5_000] and len(h.image.topics.by_name) == 25_000

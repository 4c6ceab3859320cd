"""Metadata log benchmark (run by hand):

  (a) records appended and committed per second, one fsync per commit of 10,000 records,
      beside raw ``os.write`` + ``os.fsync`` of the very same bytes in the same run;
  (b) replay rate of 1M PartitionRecords (decode + image replay);
  (c) snapshot write and load of a 1M-partition image (10,000 topics x 100, RF 3), with RSS.

    .venv/bin/python benchmarks/log.py [--only a|b|c] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kraftsim.metadata import records as recs  # noqa: E402
from kraftsim.metadata.batch import read_batches  # noqa: E402
from kraftsim.metadata.log import LogConfig, MetadataLog  # noqa: E402

PER_COMMIT = 10_000


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def partition_records(n_topics: int, per_topic: int, brokers: int = 30) -> list[tuple[object, int]]:
    part = recs.by_name("PartitionRecord")
    topic = recs.by_name("TopicRecord")
    dirs = [uuid.UUID(int=(b + 1) << 64 | 7) for b in range(brokers)]
    out: list[tuple[object, int]] = []
    for t in range(n_topics):
        tid = uuid.UUID(int=(t + 1) << 32 | 99)
        out.append((topic(name=f"topic-{t:05d}", topic_id=tid), 0))
        for p in range(per_topic):
            reps = [(t + p + i) % brokers for i in range(3)]
            out.append((part(partition_id=p, topic_id=tid, replicas=reps, isr=list(reps), leader=reps[0],
                             leader_epoch=0, partition_epoch=0, directories=[dirs[r] for r in reps]), 1))
    return out


async def bench_append(directory: Path, total: int) -> None:
    items = partition_records(total // 100, 99)[:total]
    values = [recs.frame(r, v) for r, v in items]  # type: ignore[arg-type]
    chunks = [values[i:i + PER_COMMIT] for i in range(0, len(values), PER_COMMIT)]

    # Strict: append one commit's batch, wait for its own fsync, repeat.
    log = MetadataLog.open(directory / "log", LogConfig(linger_ms=0))
    t0 = time.perf_counter()
    for chunk in chunks:
        _, last = log.append_values(chunk, epoch=1, timestamp=1)
        await log.wait_flushed(last)
    t_log = time.perf_counter() - t0
    log.close()

    # Group commit, as under load in the controller: the next batch is encoded and written
    # while the previous fsync runs in its thread; an fsync covers whatever was appended.
    glog = MetadataLog.open(directory / "glog", LogConfig(linger_ms=0))
    syncs = 0
    real_sync = glog.segments.sync

    def counting_sync() -> None:
        nonlocal syncs
        syncs += 1
        real_sync()

    glog.segments.sync = counting_sync  # type: ignore[method-assign]
    t0 = time.perf_counter()
    in_flight: list[asyncio.Future[None]] = []
    for chunk in chunks:
        _, last = glog.append_values(chunk, epoch=1, timestamp=1)
        in_flight.append(asyncio.ensure_future(glog.wait_flushed(last)))
        await asyncio.sleep(0)
        if len(in_flight) > 1:
            await in_flight.pop(0)
    await asyncio.gather(*in_flight)
    t_group = time.perf_counter() - t0
    glog.close()

    # Raw: the same batch bytes the log wrote, written and fsynced per commit.
    seg = directory / "log" / "__cluster_metadata-0" / "00000000000000000000.log"
    raw_batches = [bytes(b.raw) for b in read_batches(seg.read_bytes())]
    fd = os.open(directory / "raw.bin", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    t0 = time.perf_counter()
    for b in raw_batches:
        os.write(fd, b)
        os.fsync(fd)
    t_raw = time.perf_counter() - t0
    os.close(fd)

    # With framing: record objects in, as the controller appends them.
    log = MetadataLog.open(directory / "log2", LogConfig(linger_ms=0))
    obj_chunks = [items[i:i + PER_COMMIT] for i in range(0, len(items), PER_COMMIT)]
    t0 = time.perf_counter()
    for chunk in obj_chunks:
        _, last = log.append_records(chunk, epoch=1, timestamp=1)  # type: ignore[arg-type]
        await log.wait_flushed(last)
    t_obj = time.perf_counter() - t0
    log.close()

    print(f"(a) {total:,} framed records in commits of {PER_COMMIT:,}; raw write+fsync of the same bytes: "
          f"{total / t_raw:,.0f} records/s")
    print(f"    strict, one fsync per commit: {total / t_log:,.0f} records/s, {t_raw / t_log:.2f} of raw")
    print(f"    group commit under load: {total / t_group:,.0f} records/s, {t_raw / t_group:.2f} of raw "
          f"({syncs} fsyncs for {len(chunks)} commits)")
    print(f"    from record objects (framing included): {total / t_obj:,.0f} records/s")


def bench_replay(total: int, directory: Path) -> None:
    from kraftsim.metadata.image import MetadataImage  # type: ignore[attr-defined]
    from kraftsim.metadata.image.fast_replay import replay_framed, replay_framed_all, replay_snapshot_values
    from kraftsim.metadata.loader import load_image

    items = partition_records(total // 100, 100)
    values = [recs.frame(r, v) for r, v in items]  # type: ignore[arg-type]

    image = MetadataImage()
    t0 = time.perf_counter()
    for i, v in enumerate(values):
        replay_framed(image, v, i)
    dt = time.perf_counter() - t0

    # The log loader's path for a data batch (_replay_bulk): its values at consecutive offsets.
    image = MetadataImage()
    t0 = time.perf_counter()
    for i in range(0, len(values), PER_COMMIT):
        replay_framed_all(image, values[i:i + PER_COMMIT], i, 1, 1)
    dt_batches = time.perf_counter() - t0

    image = MetadataImage()
    t0 = time.perf_counter()
    replay_snapshot_values(image, values, 1)
    dt_all = time.perf_counter() - t0
    # A bulk load defers the ISR index's entries (a controller writes them once active): the
    # same figure with them written, as the first read of the index would.
    image.topics.settle_isr_index()
    dt_indexed = time.perf_counter() - t0

    # The whole loader on a log of those records (read, CRC, Batch.values(), replay).
    log = MetadataLog.open(directory / "replay", LogConfig(linger_ms=0))
    for i in range(0, len(values), PER_COMMIT):
        log.append_values(values[i:i + PER_COMMIT], epoch=1, timestamp=1)
    log.flush_now()
    t0 = time.perf_counter()
    loaded, _ = load_image(log, MetadataImage)
    dt_load = time.perf_counter() - t0
    assert loaded.topics.partition_count == total  # type: ignore[attr-defined]
    log.close()

    image = MetadataImage()
    t0 = time.perf_counter()
    unframe = recs.unframe
    replay = image.replay
    for i, v in enumerate(values):
        rec, _ = unframe(v)
        replay(rec, i)
    dt_slow = time.perf_counter() - t0
    n_parts = sum(1 for r, _ in items if type(r).__name__ == "PartitionRecord")
    print(f"(b) replay of {len(values):,} framed records ({n_parts:,} PartitionRecords), records/s: "
          f"{len(values) / dt_batches:,.0f} in batches of {PER_COMMIT:,} as the log loader does it "
          f"(replay_framed_all); {len(values) / dt_all:,.0f} in bulk as a snapshot load does it "
          f"(replay_snapshot_values), {len(values) / dt_indexed:,.0f} with its deferred ISR index written; "
          f"{len(values) / dt_load:,.0f} through load_image on a log of them "
          f"(reading and CRC included); {len(values) / dt:,.0f} one by one (replay_framed); "
          f"{len(values) / dt_slow:,.0f} through unframe() + replay()")


def bench_snapshot(directory: Path) -> None:
    from kraftsim.metadata.image import MetadataImage  # type: ignore[attr-defined]

    base = rss_mib()
    image = MetadataImage()
    feature = recs.by_name("FeatureLevelRecord")
    image.replay(feature(name="metadata.version", feature_level=21), 0)
    reg = recs.by_name("RegisterBrokerRecord")
    for b in range(30):
        image.replay(reg(broker_id=b, incarnation_id=uuid.UUID(int=b + 1), broker_epoch=b + 1,
                         log_dirs=[uuid.UUID(int=(b + 1) << 64 | 7)]), b + 1)
    off = 100
    for r, _ in partition_records(10_000, 100):
        image.replay(r, off)
        off += 1
    built = rss_mib()
    log = MetadataLog.open(directory / "snap", LogConfig(linger_ms=0))
    log.append_records([(recs.by_name("NoOpRecord")(), 0)] * 1, epoch=1, timestamp=1)
    log.flush_now()
    t0 = time.perf_counter()
    sid = log.write_snapshot(image.records(), last_offset=0, timestamp=1, last_contained_timestamp=1)
    t_write = time.perf_counter() - t0
    size = log.snapshot_path(sid).stat().st_size
    del image
    from kraftsim.metadata.loader import load_image

    t0 = time.perf_counter()
    fresh, _ = load_image(log, MetadataImage)
    t_load = time.perf_counter() - t0
    assert fresh.topics.partition_count == 1_000_000  # type: ignore[attr-defined]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"(c) 1M-partition image: built in memory +{built - base:,.0f} MiB RSS; snapshot write {t_write:.1f} s "
          f"({size / 2**20:,.0f} MiB), load {t_load:.1f} s; RSS after load {rss_mib():,.0f} MiB, peak {peak:,.0f} MiB")
    log.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=["a", "b", "c"])
    ap.add_argument("--dir", help="where to write (default: a temporary directory)")
    ap.add_argument("--records", type=int, default=500_000)
    args = ap.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        if args.only in (None, "a"):
            asyncio.run(bench_append(Path(d), args.records))
        if args.only in (None, "b"):
            bench_replay(1_000_000, Path(d))
        if args.only in (None, "c"):
            bench_snapshot(Path(d))


if __name__ == "__main__":
    main()

"""Memory per partition and replay rate of the metadata image.

Builds the framed records of a cluster (30 brokers with one log dir each, 10,000 topics x 100
partitions, RF 3, directories set, metadata.version 3.9-IV0), then replays them through
``unframe()`` into a fresh MetadataImage. Reports the RSS growth caused by the image (the framed
input is built before the first RSS reading), bytes per partition, and records/s.

    .venv/bin/python benchmarks/image_memory.py [--topics N] [--partitions N] [--brokers N]
"""

from __future__ import annotations

import argparse
import gc
import time
import uuid

from kraftsim.metadata import versions
from kraftsim.metadata.image import MetadataImage
from kraftsim.metadata.image.fast_replay import replay_framed
from kraftsim.metadata.records import by_name, frame, unframe


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def build(topics: int, partitions: int, brokers: int, rf: int) -> tuple[list[bytes], list[bytes]]:
    """(setup records, partition records), all framed at the versions 3.9-IV0 writes."""
    mv = versions.release().latest_production
    setup: list[bytes] = [frame(by_name("FeatureLevelRecord")(name="metadata.version", feature_level=mv), 0)]
    reg = by_name("RegisterBrokerRecord")
    dirs = [uuid.UUID(int=(b + 1) << 64 | 7) for b in range(brokers)]
    for b in range(brokers):
        setup.append(frame(reg(broker_id=b, incarnation_id=uuid.uuid4(), broker_epoch=b + 1, fenced=False,
                               end_points=[reg.BrokerEndpoint(name="PLAINTEXT", host=f"b{b}", port=9092)],
                               log_dirs=[dirs[b]]), versions.release().register_broker_record_version(mv)))
    topic_rec = by_name("TopicRecord")
    part_rec = by_name("PartitionRecord")
    pv = versions.release().partition_record_version(mv)
    parts: list[bytes] = []
    for t in range(topics):
        tid = uuid.uuid4()
        parts.append(frame(topic_rec(name=f"topic-{t}", topic_id=tid), 0))
        for p in range(partitions):
            replicas = [(t + p + i) % brokers for i in range(rf)]
            parts.append(frame(part_rec(partition_id=p, topic_id=tid, replicas=replicas, isr=replicas,
                                        leader=replicas[0], leader_epoch=0, partition_epoch=0,
                                        directories=[dirs[r] for r in replicas]), pv))
    return setup, parts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--brokers", type=int, default=30)
    ap.add_argument("--rf", type=int, default=3)
    args = ap.parse_args()

    t0 = time.perf_counter()
    setup, parts = build(args.topics, args.partitions, args.brokers, args.rf)
    print(f"built {len(setup) + len(parts):,} framed records in {time.perf_counter() - t0:.1f}s")

    gc.collect()
    gc.disable()  # as a long-lived controller would tune it; the image makes no cycles
    base = rss_bytes()
    img = MetadataImage()
    offset = 0
    for value in setup:
        img.replay(unframe(value)[0], offset)
        offset += 1
    t0 = time.perf_counter()
    for value in parts:
        replay_framed(img, value, offset)
        offset += 1
    elapsed = time.perf_counter() - t0
    gc.enable()
    gc.collect()
    grown = rss_bytes() - base

    n = img.topics.partition_count
    print(f"partitions: {n:,}  topics: {img.topics.topic_count:,}  brokers: {len(img.cluster.brokers)}")
    print(f"RSS growth: {grown / 2**20:,.1f} MiB  = {grown / n:,.0f} bytes/partition")
    print(f"replay_framed (bytes -> image): {len(parts) / elapsed:,.0f} records/s ({elapsed:.2f}s for {len(parts):,})")

    # Replay alone (records already decoded), to separate codec cost from image cost.
    gc.disable()
    decoded = [unframe(v)[0] for v in parts[: min(len(parts), 200_000)]]
    img2 = MetadataImage()
    for value in setup:
        img2.replay(unframe(value)[0], 0)
    t0 = time.perf_counter()
    for i, rec in enumerate(decoded):
        img2.replay(rec, i)
    elapsed = time.perf_counter() - t0
    print(f"replay of already-decoded records: {len(decoded) / elapsed:,.0f} records/s")
    img3 = MetadataImage()
    for value in setup:
        img3.replay(unframe(value)[0], 0)
    t0 = time.perf_counter()
    for i, v in enumerate(parts[: len(decoded)]):
        img3.replay(unframe(v)[0], i)
    elapsed = time.perf_counter() - t0
    print(f"general path, unframe() + replay(): {len(decoded) / elapsed:,.0f} records/s")
    t0 = time.perf_counter()
    for v in parts[: len(decoded)]:
        unframe(v)
    elapsed = time.perf_counter() - t0
    print(f"unframe alone: {len(decoded) / elapsed:,.0f} records/s")
    gc.enable()


if __name__ == "__main__":
    main()

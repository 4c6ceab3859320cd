"""Real Kafka 3.9 brokers on kraftsim and on a real Kafka 3.9 controller, in one run (by hand).

For each controller, the same steps:

* brokers start to topic writable: spawn a formatted Kafka broker against the running
  controller, then create a topic through it and produce one message with acks=all, retrying
  until both succeed. Cold by nature: a cluster that has just started;
* 30 placement brokers registered over the wire, then CreateTopics to --partitions partitions
  (RF 3 on them, so the real broker only replays metadata): the total from a fresh start, and
  the rate once steady by benchmarks/steady.py's rule applied to windows of it after the fact
  (vs_kafka.py's ``Creation``);
* the log served to an observer: pyspark_kraft's RaftObserver (8 MiB per fetch, one
  connection) from the log start to the high watermark, pass after pass, warmed up until
  steady by benchmarks/steady.py's rule and then measured (vs_kafka.py's), in MB/s, beside
  reading the same segment files from disk (page cache warm: the ratio is the serving overhead);
* a late broker catching up on that log: spawn a second formatted broker and time until it
  logs that it is unfenced (it must replay the whole log first). Cold by nature for the broker,
  a new JVM against either controller.

    .venv/bin/python benchmarks/real_brokers.py [--partitions 100000] [--kafka-heap 1G] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.steady import Rule, combined, load_average  # noqa: E402
from benchmarks.vs_kafka import (  # noqa: E402
    active,
    controller_pair,
    create_partitions,
    register_placement_brokers,
    serve_rate,
)
from tests.kafka.harness import KafkaNode, Node  # noqa: E402

CONFIG = {"broker.session.timeout.ms": "3600000"}
UNFENCED = "The broker has been unfenced."


def broker(tmp: Path, node: Node, node_id: int) -> KafkaNode:
    b = KafkaNode(tmp / f"{node.kind}-broker-{node_id}", role="broker", node_id=node_id, cluster_id=node.cluster_id,
                  voters=f"{node.node_id}@{node.bootstrap}", overrides={"offsets.topic.replication.factor": "1"})
    b.format()
    return b


def writable(b: KafkaNode, timeout: float = 300) -> float:
    """Seconds from spawning ``b`` to one message acknowledged (acks=all) on a new topic."""
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    t0 = time.perf_counter()
    b.start(wait=False)
    deadline = time.monotonic() + timeout
    created = False
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{b}: topic not writable within {timeout}s\n{b.log_tail()}")
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap, "socket.connection.setup.timeout.ms": 1000})
            if not created:
                fut = admin.create_topics([NewTopic("writable", 1, 1)], operation_timeout=10)["writable"]
                try:
                    fut.result(10)
                except KafkaException as e:
                    if "TOPIC_ALREADY_EXISTS" not in str(e):
                        raise
                created = True
            acked: list[Any] = []
            p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "message.timeout.ms": 5000})
            p.produce("writable", b"x", on_delivery=lambda err, _m, acked=acked: acked.append(err))
            p.flush(10)
            if acked and acked[0] is None:
                return time.perf_counter() - t0
        except Exception:  # noqa: BLE001 - the broker is still starting: retry
            pass
        time.sleep(0.05)


def disk_rate(node: Node) -> float:
    """MB/s reading the partition's segment files, 8 MiB at a time."""
    files = sorted((node.metadata_dir / "__cluster_metadata-0").glob("*.log"))
    total = 0
    t0 = time.perf_counter()
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            while chunk := os.read(fd, 8 << 20):
                total += len(chunk)
        finally:
            os.close(fd)
    return total / 1e6 / (time.perf_counter() - t0)


def catch_up(b: KafkaNode, timeout: float = 600) -> float:
    t0 = time.perf_counter()
    b.start(wait=False)
    b.wait_log(UNFENCED, timeout)
    return time.perf_counter() - t0


def measure(tmp: Path, node: Node, partitions: int, rule: Rule, seconds: float) -> dict[str, float]:
    out: dict[str, float] = {}
    node.format()
    node.start(wait=False)
    asyncio.run(active(node))
    first = broker(tmp, node, 1)
    late = broker(tmp, node, 2)
    try:
        out["broker start to topic writable (s)"] = writable(first)
        asyncio.run(register_placement_brokers(node))
        created = asyncio.run(create_partitions(node, partitions))
        out[f"CreateTopics to {partitions:,} partitions, from a fresh start (s)"] = created.seconds
        steady_rate, st = created.steady(rule)
        out["CreateTopics, steady (partitions/s)"] = steady_rate
        print(f"  {node.kind}, CreateTopics in windows: {st.summary()}; partitions/s by window: {st.trace()}",
              flush=True)
        size, st, windows = asyncio.run(serve_rate(node, rule, seconds))
        rate = combined(windows).rate / 1e6
        print(f"  {node.kind}, the log served: warm-up {st.summary()}; MB/s by window: "
              f"{st.trace(1e-6, 1e6, 'µs/MB')}; load {load_average():.2f}", flush=True)
        disk = disk_rate(node)
        out["log served to one observer (MB)"] = size / 1e6
        out["observer fetch rate (MB/s)"] = rate
        out["reading the same segments from disk (MB/s)"] = disk
        out["fetch / disk"] = rate / disk
        out[f"late broker caught up on {partitions:,} partitions (s)"] = catch_up(late)
    finally:
        for b in (late, first):
            b.kill()
        node.kill()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--kafka-heap", default="1G", help="the Kafka controller's -Xmx/-Xms (kafka-server-start.sh: 1G)")
    ap.add_argument("--seconds", type=float, default=10.0, help="the observer's measurement after its warm-up")
    ap.add_argument("--tolerance", type=float, default=0.05, help="steady: the last 3 windows within this")
    ap.add_argument("--max-warmup", type=float, default=120.0, help="seconds of warm-up at most")
    args = ap.parse_args()
    rule = Rule(tolerance=args.tolerance, cap_s=args.max_warmup)
    print(f"{os.cpu_count()} cores, load average {load_average():.2f}; warm-up: {rule.describe()}", flush=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        nodes = controller_pair(tmp, CONFIG, args.kafka_heap)
        results = []
        for node in nodes:
            results.append(measure(tmp, node, args.partitions, rule, args.seconds))
            print(f"{node.kind}: {results[-1]}", flush=True)
    print()
    print(f"| measure ({os.cpu_count()} cores) | kraftsim | Kafka 3.9 controller |")
    print("|---|---:|---:|")
    for key, a in results[0].items():
        print(f"| {key} | {a:,.2f} | {results[1][key]:,.2f} |")


if __name__ == "__main__":
    main()

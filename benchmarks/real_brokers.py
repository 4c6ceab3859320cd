"""Real Kafka 3.9 brokers on kraftsim and on a real Kafka 3.9 controller, in one run (by hand).

For each controller, the same steps:

* brokers start to topic writable: spawn a formatted Kafka broker against the running
  controller, then create a topic through it and produce one message with acks=all, retrying
  until both succeed;
* 30 placement brokers registered over the wire, then CreateTopics to --partitions partitions
  (RF 3 on them, so the real broker only replays metadata);
* the log served to an observer: a Raft Fetch loop (8 MiB per fetch, one connection) from the
  log start to the high watermark, in MB/s, beside reading the same segment files from disk
  (page cache warm: the ratio is the serving overhead);
* a late broker catching up on that log: spawn a second formatted broker and time until it
  logs that it is unfenced (it must replay the whole log first).

    .venv/bin/python benchmarks/real_brokers.py [--partitions 100000] [--kafka-heap 1G]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.vs_kafka import (  # noqa: E402
    active,
    controller_pair,
    create_partitions,
    register_placement_brokers,
)
from kraftsim.metadata.batch import IncompleteBatchError, read_batches  # noqa: E402
from kraftsim.metadata.files import METADATA_TOPIC_ID  # noqa: E402
from kraftsim.rpc.client import KafkaClient  # noqa: E402
from kraftsim.rpc.messages import DescribeQuorumRequest, FetchRequest  # noqa: E402
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


async def serve_rate(node: Node) -> tuple[float, float, float]:
    """(MB fetched, s, MB/s) for one observer fetching the whole log."""
    host, port = node.bootstrap.rsplit(":", 1)
    c = await KafkaClient.connect(host, int(port))
    offset, epoch, total = 0, 0, 0
    directory = uuid.uuid4()

    described = await c.request(DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])]), 1)
    leader_epoch = described.topics[0].partitions[0].leader_epoch

    def request(offset: int, epoch: int) -> Any:
        return FetchRequest(cluster_id=node.cluster_id, replica_id=-1, max_wait_ms=0, min_bytes=0,
                            max_bytes=8 << 20, replica_state=FetchRequest.ReplicaState(replica_id=9999, replica_epoch=-1),
                            topics=[FetchRequest.FetchTopic(topic="__cluster_metadata", topic_id=METADATA_TOPIC_ID,
                                                            partitions=[FetchRequest.FetchPartition(
                                partition=0, current_leader_epoch=leader_epoch, fetch_offset=offset, last_fetched_epoch=epoch,
                                partition_max_bytes=8 << 20, replica_directory_id=directory)])])

    try:
        t0 = time.perf_counter()
        while True:
            r = await c.request(request(offset, epoch), 17, timeout=60)
            p = r.responses[0].partitions[0]
            if r.error_code or p.error_code:
                raise RuntimeError(f"fetch at {offset} failed: {r.error_code} {p.error_code}")
            if p.snapshot_id.end_offset >= 0:  # the log starts after a snapshot: serve the log from there
                offset, epoch = p.snapshot_id.end_offset, p.snapshot_id.epoch
                continue
            data = p.records or b""
            total += len(data)
            try:
                for batch in read_batches(data):
                    offset, epoch = batch.last_offset + 1, batch.partition_leader_epoch
            except IncompleteBatchError:
                pass
            if offset >= p.high_watermark:
                break
        dt = time.perf_counter() - t0
    finally:
        await c.close()
    return total / 1e6, dt, total / 1e6 / dt


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


def measure(tmp: Path, node: Node, partitions: int) -> dict[str, float]:
    out: dict[str, float] = {}
    node.format()
    node.start(wait=False)
    asyncio.run(active(node))
    first = broker(tmp, node, 1)
    late = broker(tmp, node, 2)
    try:
        out["broker start to topic writable (s)"] = writable(first)
        asyncio.run(register_placement_brokers(node))
        out[f"CreateTopics to {partitions:,} partitions (s)"] = asyncio.run(create_partitions(node, partitions))
        mb, _, rate = asyncio.run(serve_rate(node))
        disk = disk_rate(node)
        out["log served to one observer (MB)"] = mb
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        nodes = controller_pair(tmp, CONFIG, args.kafka_heap)
        results = []
        for node in nodes:
            results.append(measure(tmp, node, args.partitions))
            print(f"{node.kind}: {results[-1]}", flush=True)
    print()
    print(f"| measure ({os.cpu_count()} cores) | kraftsim | Kafka 3.9 controller |")
    print("|---|---:|---:|")
    for key, a in results[0].items():
        print(f"| {key} | {a:,.2f} | {results[1][key]:,.2f} |")


if __name__ == "__main__":
    main()

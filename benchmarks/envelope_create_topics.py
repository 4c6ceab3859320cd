"""CreateTopics through an Envelope, kraftsim beside a real Kafka 3.9 controller (run by hand).

What a broker does when its clients create topics: each client's CreateTopics reaches the
controller inside an Envelope (KIP-590), and the broker waits for the answer, which comes after
the records commit. For each controller (a ``kraftsim controller`` process and a ``kafka.Kafka``
JVM with ``process.roles=controller``, formatted alike, same config, both at Kafka's default
``controller.quorum.append.linger.ms`` of 25 ms), 30 brokers are registered and unfenced, then
16 connections (16 forwarding brokers) each send one forwarded request at a time. One at a time,
because a Kafka controller serves a connection's requests one after another (its socket server
mutes a connection while a request is in progress), so pipelining on one connection would
measure that rule, not the controller:

* one topic of one partition per request (RF 3): topics/s;
* one topic of 100 partitions per request (RF 3): partitions/s.

Every answer is checked (error 0 inside the Envelope). Kafka runs with kafka-server-start.sh's
JVM options (-Xmx1G -Xms1G, G1).

    .venv/bin/python benchmarks/envelope_create_topics.py [--topics 3000] [--big-topics 300] [--connections 16]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.forwarding import forwarded  # noqa: E402
from benchmarks.vs_kafka import CONFIG, active, controller_pair, register_placement_brokers  # noqa: E402
from kraftsim.rpc.client import KafkaClient  # noqa: E402
from kraftsim.rpc.frames import decode_response  # noqa: E402
from kraftsim.rpc.messages import CreateTopicsRequest as CT  # noqa: E402
from tests.kafka.harness import Node  # noqa: E402

CT_VERSION = 7


def inner_errors(envelope_response: Any) -> list[tuple[str, int]]:
    assert envelope_response.error_code == 0, envelope_response
    _, body = decode_response(envelope_response.response_data, 19, CT_VERSION)
    return [(t.name, t.error_code) for t in body.topics if t.error_code]


async def create(node: Node, prefix: str, topics: int, partitions: int, connections: int) -> float:
    """Seconds to create ``topics`` topics, one per forwarded request, one request at a time on
    each of ``connections`` connections (as that many brokers forward)."""
    host, port = node.bootstrap.rsplit(":", 1)
    clients = [await KafkaClient.connect(host, int(port)) for _ in range(connections)]
    names = iter(range(topics))

    async def forwarder(client: KafkaClient) -> None:
        for n in names:
            body = CT(topics=[CT.CreatableTopic(name=f"{prefix}-{n:06d}", num_partitions=partitions,
                                                replication_factor=3)], timeout_ms=60_000)
            errors = inner_errors(await client.request(forwarded(body, CT_VERSION, n), 0, timeout=120))
            assert not errors, errors

    start = time.perf_counter()
    try:
        await asyncio.gather(*(forwarder(c) for c in clients))
        return time.perf_counter() - start
    finally:
        for c in clients:
            await c.close()


def measure(node: Node, topics: int, big_topics: int, connections: int) -> dict[str, float]:
    node.format()
    node.start(wait=False)
    asyncio.run(active(node))
    asyncio.run(register_placement_brokers(node))
    small = asyncio.run(create(node, "small", topics, 1, connections))
    big = asyncio.run(create(node, "big", big_topics, 100, connections))
    node.stop(timeout=120)
    return {"topics/s (1 partition each)": topics / small, "partitions/s (100 per topic)": big_topics * 100 / big}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=3000)
    ap.add_argument("--big-topics", type=int, default=300)
    ap.add_argument("--connections", type=int, default=16, help="forwarding brokers, one request each at a time")
    ap.add_argument("--kafka-heap", default="1G")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        nodes = controller_pair(tmp, CONFIG, args.kafka_heap)
        results = []
        for node in nodes:
            try:
                results.append(measure(node, args.topics, args.big_topics, args.connections))
            finally:
                node.kill()
            print(f"{node.kind}: {results[-1]}", flush=True)
    ours, theirs = results
    print(f"\n| CreateTopics in an Envelope, RF 3 over 30 brokers, {args.connections} connections x 1 | "
          "kraftsim | Kafka 3.9 | ratio |")
    print("|---|---:|---:|---:|")
    for key, a in ours.items():
        print(f"| {key} | {a:,.0f} | {theirs[key]:,.0f} | {a / theirs[key]:.2f} |")


if __name__ == "__main__":
    main()

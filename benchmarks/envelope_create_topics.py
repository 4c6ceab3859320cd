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

Each is measured warm: before it, the same forwarded load of the same shape runs in windows
(benchmarks/steady.py's rule: windows of 2 s until the last 3 agree within 5% in the
controller's CPU per topic, at least 10 s, at most 120 s), and the topics each window
created are deleted after it, untimed, so that the warm-up leaves no partitions behind (a JVM
measured cold would be measured compiling; kraftsim goes through the same warm-up). How each
side's warm-up ended is printed.

Every answer is checked (error 0 inside the Envelope). Kafka runs with kafka-server-start.sh's
JVM options (-Xmx1G -Xms1G, G1).

    .venv/bin/python benchmarks/envelope_create_topics.py [--topics 3000] [--big-topics 300] [--connections 16]
        [--tolerance 0.05] [--max-warmup 120]
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
from benchmarks.steady import Rule, Window, cpu_seconds, load_average, warm_up  # noqa: E402
from benchmarks.vs_kafka import CONFIG, active, controller_pair, register_placement_brokers  # noqa: E402
from kraftsim.rpc.client import KafkaClient  # noqa: E402
from kraftsim.rpc.frames import decode_response  # noqa: E402
from kraftsim.rpc.messages import CreateTopicsRequest as CT  # noqa: E402
from kraftsim.rpc.messages import DeleteTopicsRequest  # noqa: E402
from tests.kafka.harness import Node  # noqa: E402

CT_VERSION = 7


def inner_errors(envelope_response: Any) -> list[tuple[str, int]]:
    assert envelope_response.error_code == 0, envelope_response
    _, body = decode_response(envelope_response.response_data, 19, CT_VERSION)
    return [(t.name, t.error_code) for t in body.topics if t.error_code]


class Forwarders:
    """``connections`` connections, each a broker forwarding one CreateTopics at a time."""

    def __init__(self, node: Node, clients: list[KafkaClient], partitions: int) -> None:
        self.node = node
        self.clients = clients
        self.partitions = partitions
        self.correlation = 0

    @classmethod
    async def open(cls, node: Node, connections: int, partitions: int) -> Forwarders:
        host, port = node.bootstrap.rsplit(":", 1)
        return cls(node, [await KafkaClient.connect(host, int(port)) for _ in range(connections)], partitions)

    async def forward(self, client: KafkaClient, name: str) -> None:
        self.correlation += 1
        body = CT(topics=[CT.CreatableTopic(name=name, num_partitions=self.partitions, replication_factor=3)],
                  timeout_ms=60_000)
        errors = inner_errors(await client.request(forwarded(body, CT_VERSION, self.correlation), 0, timeout=120))
        assert not errors, errors

    async def create(self, names: list[str]) -> float:
        """Seconds to create ``names``, one topic per forwarded request."""
        queue = iter(names)

        async def forwarder(client: KafkaClient) -> None:
            for name in queue:
                await self.forward(client, name)

        start = time.perf_counter()
        await asyncio.gather(*(forwarder(c) for c in self.clients))
        return time.perf_counter() - start

    async def window(self, prefix: str, seconds: float) -> Window:
        """Topics created in ``seconds`` (each connection finishing its request in flight), and
        the controller's CPU over them; then those topics are deleted, untimed."""
        assert self.node.proc is not None
        made: list[str] = []
        deadline = time.perf_counter() + seconds

        async def forwarder(client: KafkaClient) -> None:
            while time.perf_counter() < deadline:
                name = f"{prefix}-{self.correlation:07d}"
                await self.forward(client, name)
                made.append(name)

        cpu0, t0 = cpu_seconds(self.node.proc.pid), time.perf_counter()
        await asyncio.gather(*(forwarder(c) for c in self.clients))
        w = Window(time.perf_counter() - t0, len(made), cpu_seconds(self.node.proc.pid) - cpu0)
        for i in range(0, len(made), 1000):
            r = await self.clients[0].request(DeleteTopicsRequest(topic_names=made[i:i + 1000], timeout_ms=60_000), 5,
                                              timeout=120)
            bad = [(t.name, t.error_code) for t in r.responses if t.error_code]
            assert not bad, bad[:3]
        return w

    async def close(self) -> None:
        for c in self.clients:
            await c.close()


async def warm_then_create(node: Node, prefix: str, topics: int, partitions: int, connections: int,
                           rule: Rule) -> float:
    """Warm up on the load of this shape by ``rule`` (printing how it ended), then the seconds
    to create ``topics`` topics of ``partitions`` partitions."""
    f = await Forwarders.open(node, connections, partitions)
    try:
        st = await warm_up(lambda s: f.window(f"warm-{prefix}", s), rule)
        print(f"  {node.kind}, {prefix}: warm-up {st.summary()}; topics/s by window: {st.trace()}", flush=True)
        return await f.create([f"{prefix}-{n:06d}" for n in range(topics)])
    finally:
        await f.close()


def measure(node: Node, topics: int, big_topics: int, connections: int, rule: Rule) -> dict[str, float]:
    node.format()
    node.start(wait=False)
    asyncio.run(active(node))
    asyncio.run(register_placement_brokers(node))
    small = asyncio.run(warm_then_create(node, "small", topics, 1, connections, rule))
    big = asyncio.run(warm_then_create(node, "big", big_topics, 100, connections, rule))
    node.stop(timeout=120)
    return {"topics/s (1 partition each)": topics / small, "partitions/s (100 per topic)": big_topics * 100 / big}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=3000)
    ap.add_argument("--big-topics", type=int, default=300)
    ap.add_argument("--connections", type=int, default=16, help="forwarding brokers, one request each at a time")
    ap.add_argument("--kafka-heap", default="1G")
    ap.add_argument("--tolerance", type=float, default=0.05, help="steady: the last 3 windows within this")
    ap.add_argument("--max-warmup", type=float, default=120.0, help="seconds of warm-up at most, per phase")
    args = ap.parse_args()
    rule = Rule(tolerance=args.tolerance, cap_s=args.max_warmup)
    print(f"warm-up before each phase: {rule.describe()}; load average {load_average():.2f}", flush=True)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        nodes = controller_pair(tmp, CONFIG, args.kafka_heap)
        results = []
        for node in nodes:
            try:
                results.append(measure(node, args.topics, args.big_topics, args.connections, rule))
            finally:
                node.kill()
            print(f"{node.kind}: {results[-1]}; load average {load_average():.2f}", flush=True)
    ours, theirs = results
    print(f"\n| CreateTopics in an Envelope, RF 3 over 30 brokers, {args.connections} connections x 1 | "
          "kraftsim | Kafka 3.9 | ratio |")
    print("|---|---:|---:|---:|")
    for key, a in ours.items():
        print(f"| {key} | {a:,.0f} | {theirs[key]:,.0f} | {a / theirs[key]:.2f} |")


if __name__ == "__main__":
    main()

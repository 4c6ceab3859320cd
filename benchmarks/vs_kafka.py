"""kraftsim beside a real Apache Kafka 3.9 controller (run by hand): the same measurements, the
same client, the same machine, in one run.

For each controller (a ``kraftsim controller`` process and a ``kafka.Kafka`` JVM with
``process.roles=controller``, both formatted alike and with the same config):

* start to ready: from spawning the process to the first answer of an active controller (a
  validate-only CreateTopics that is not NOT_CONTROLLER), polled every 10 ms;
* resident memory when idle, a few seconds after ready;
* CreateTopics until 100,000 partitions exist (RF 3 over 30 brokers, 99 topics of 100
  partitions per request, 2 connections x 2 in flight), and the resident memory then;
* heartbeats/s: 200 more brokers registered and unfenced, BrokerHeartbeat v1 pipelined over 4
  connections x 16 in flight (benchmarks/heartbeats.py's driver);
* the log served to a Raft observer: pyspark_kraft's RaftObserver fetching the log from its
  start (the log start offset, where older segments were cleaned after a snapshot) to the high
  watermark, 8 MiB per Fetch (benchmarks/fetch_serving.py's client);
* restart to active on that log: SIGTERM, start again on the same directory, time to ready.

Kafka runs with kafka-server-start.sh's JVM options (-Xmx1G -Xms1G, G1) unless --kafka-heap
says otherwise; both log at INFO to a file, as they would in production.

    .venv/bin/python benchmarks/vs_kafka.py [--partitions 100000] [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import heartbeats  # noqa: E402
from kraftsim.rpc import registry  # noqa: E402
from kraftsim.rpc.client import KafkaClient  # noqa: E402
from tests.kafka.harness import KafkaNode, KraftsimNode, Node, random_cluster_id  # noqa: E402

CT = registry.request_class(19)
REG = registry.request_class(62)
HB = registry.request_class(63)
NOT_CONTROLLER = 41
PLACEMENT_BROKERS = 30
TOPICS_PER_REQUEST = 99  # 99 x (1 + 100) records: under Kafka's 10,000 records per request
CONFIG = {
    "broker.session.timeout.ms": "3600000",  # no broker is fenced by the clock during the run
}


def kafka_jvm_opts(heap: str) -> tuple[str, ...]:
    """kafka-server-start.sh / kafka-run-class.sh defaults."""
    return (f"-Xmx{heap}", f"-Xms{heap}", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15",
            "-Djava.awt.headless=true")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def active(node: Node, timeout: float = 600) -> None:
    """Poll (10 ms) until the controller answers a write-path request as the active one."""
    host, port = node.bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    probe = CT(topics=[CT.CreatableTopic(name="ready-probe", num_partitions=1, replication_factor=1)],
               timeout_ms=5000, validate_only=True)
    while True:
        try:
            c = await KafkaClient.connect(host, int(port), timeout=2)
            try:
                r = await c.request(probe, 7, timeout=5)
                if r.topics[0].error_code != NOT_CONTROLLER:
                    return
            finally:
                await c.close()
        except (OSError, TimeoutError, ConnectionError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{node} not active within {timeout}s")
        if node.proc is not None and node.proc.poll() is not None:
            raise RuntimeError(f"{node} exited:\n{node.log_tail()}")
        await asyncio.sleep(0.01)


def controller_pair(tmp: Path, config: dict[str, str], kafka_heap: str) -> list[Node]:
    """A kraftsim controller and a Kafka 3.9 controller, formatted alike with ``config``, Kafka
    with kafka-server-start's JVM options at ``kafka_heap``; in the order the benchmarks run them."""
    cid = random_cluster_id()
    return [KraftsimNode(tmp / "kraftsim", cluster_id=cid, overrides=dict(config)),
            KafkaNode(tmp / "kafka", cluster_id=cid, overrides=dict(config), jvm_opts=kafka_jvm_opts(kafka_heap))]


def start_timed(node: Node) -> float:
    t0 = time.perf_counter()
    node.start(wait=False)
    asyncio.run(active(node))
    return time.perf_counter() - t0


async def register_placement_brokers(node: Node) -> None:
    host, port = node.bootstrap.rsplit(":", 1)
    c = await KafkaClient.connect(host, int(port))
    try:
        for b in range(1000, 1000 + PLACEMENT_BROKERS):
            r = await c.request(REG(broker_id=b, cluster_id=node.cluster_id, incarnation_id=uuid.uuid4(),
                                    listeners=[REG.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
                                    features=[REG.Feature(name="metadata.version", min_supported_version=7,
                                                          max_supported_version=21)],
                                    rack=f"rack-{b % 3}", log_dirs=[uuid.uuid4()]), 3)
            assert r.error_code == 0, r
            r = await c.request(HB(broker_id=b, broker_epoch=r.broker_epoch, current_metadata_offset=10**9), 1)
            assert not r.is_fenced, r
    finally:
        await c.close()


async def create_partitions(node: Node, partitions: int, per_topic: int = 100) -> float:
    host, port = node.bootstrap.rsplit(":", 1)
    names = [f"topic-{i:06d}" for i in range(partitions // per_topic)]
    queue: asyncio.Queue[list[str]] = asyncio.Queue()
    for i in range(0, len(names), TOPICS_PER_REQUEST):
        queue.put_nowait(names[i:i + TOPICS_PER_REQUEST])
    clients = [await KafkaClient.connect(host, int(port)) for _ in range(2)]

    async def worker(c: KafkaClient) -> None:
        while not queue.empty():
            chunk = queue.get_nowait()
            r = await c.request(CT(topics=[CT.CreatableTopic(name=n, num_partitions=per_topic, replication_factor=3)
                                           for n in chunk], timeout_ms=300_000), 7, timeout=600)
            bad = [(t.name, t.error_code, t.error_message) for t in r.topics if t.error_code]
            assert not bad, bad[:3]

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in clients for _ in range(2)))
    dt = time.perf_counter() - t0
    for c in clients:
        await c.close()
    return dt


async def observer_fetch(node: Node) -> tuple[int, float]:
    """(bytes, s) for one Raft observer (pyspark_kraft's, 8 MiB per Fetch) fetching the log from
    its start to the high watermark. A fetch at offset 0 is sent to the newest snapshot once
    there is one, so the log is then read from its start offset (or offset 1), or, where that
    too is only in the snapshot, from the snapshot's end."""
    from benchmarks.fetch_serving import last_offset
    from pyspark_kraft.network import RaftObserver

    obs = RaftObserver(node.bootstrap, node.cluster_id, max_bytes=8 << 20)
    await obs.connect()
    try:
        r = await obs.fetch(0)  # learns the leader epoch; not timed
        offset = 0
        if r.snapshot is not None:  # an empty fetcher is sent to the snapshot: start past it
            offset = max(r.log_start_offset, 1)
            r = await obs.fetch(offset)
            if r.snapshot is not None:  # not in the log either: what follows the snapshot
                offset = r.snapshot[0]
        total = 0
        t0 = time.perf_counter()
        while True:
            r = await obs.fetch(offset)
            if r.snapshot is not None:
                raise RuntimeError(f"{node}: sent to snapshot {r.snapshot} at {offset}")
            total += len(r.records)
            if r.records:
                offset = last_offset(bytes(r.records)) + 1
            if offset >= r.high_watermark:
                return total, time.perf_counter() - t0
    finally:
        await obs.close()


@dataclass
class Result:
    name: str
    figures: dict[str, float] = field(default_factory=dict)


def measure(node: Node, partitions: int, seconds: float, idle_s: float) -> Result:
    res = Result(node.kind)
    node.format()
    res.figures["start to ready (s)"] = start_timed(node)
    assert node.proc is not None
    time.sleep(idle_s)  # a measurement window, not synchronisation
    res.figures["idle RSS (MiB)"] = rss_mib(node.proc.pid)
    asyncio.run(register_placement_brokers(node))
    dt = asyncio.run(create_partitions(node, partitions))
    res.figures[f"CreateTopics to {partitions:,} partitions (s)"] = dt
    res.figures[f"RSS with {partitions:,} partitions (MiB)"] = rss_mib(node.proc.pid)
    host, port = node.bootstrap.rsplit(":", 1)
    frames = asyncio.run(heartbeats.setup_brokers(int(port), node.cluster_id))
    rate, _, cpu_us = asyncio.run(heartbeats.drive(int(port), frames, seconds, node.proc.pid))
    res.figures["heartbeats/s (200 brokers, 4 x 16 in flight)"] = rate
    assert cpu_us is not None
    res.figures["controller CPU per heartbeat (µs)"] = cpu_us
    size, dt = asyncio.run(observer_fetch(node))
    res.figures["the log served to a Raft observer (MB/s)"] = size / dt / 1e6
    res.figures["the log served (MB)"] = size / 1e6
    node.stop(timeout=120)
    res.figures["restart to active on that log (s)"] = start_timed(node)
    node.stop(timeout=120)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=5.0, help="heartbeat measurement window")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds idle before the idle RSS")
    ap.add_argument("--kafka-heap", default="1G", help="Kafka's -Xmx/-Xms (kafka-server-start.sh: 1G)")
    args = ap.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    with tempfile.TemporaryDirectory() as d:
        results = []
        for node in controller_pair(Path(d), CONFIG, args.kafka_heap):
            try:
                results.append(measure(node, args.partitions, args.seconds, args.idle))
            finally:
                node.kill()
            print(f"{node.kind}: {results[-1].figures}", flush=True)
    ours, theirs = results
    print()
    print("| measure | kraftsim | Kafka 3.9 | kraftsim vs Kafka |")
    print("|---|---:|---:|---:|")
    for key, a in ours.figures.items():
        b = theirs.figures[key]
        higher_is_better = key.startswith("heartbeats") or "(MB/s)" in key
        timed = "(s)" in key or "(µs)" in key or higher_is_better
        ratio = a / b if higher_is_better else b / a
        verdict = f"{ratio:.1f}x {'faster' if timed else 'less'}" if ratio >= 1 \
            else f"{1 / ratio:.1f}x {'slower' if timed else 'more'}"
        print(f"| {key} | {a:,.1f} | {b:,.1f} | {verdict} |")


if __name__ == "__main__":
    main()

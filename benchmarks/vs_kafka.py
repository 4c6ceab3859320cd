"""kraftsim beside a real Apache Kafka 3.9 controller (run by hand): the same measurements, the
same client, the same machine, in one run.

For each controller (a ``kraftsim controller`` process and a ``kafka.Kafka`` JVM with
``process.roles=controller``, both formatted alike and with the same config):

* start to ready: from spawning the process to the first answer of an active controller (a
  validate-only CreateTopics that is not NOT_CONTROLLER), polled every 10 ms. Cold by nature: a
  process that has just started is what the row measures (a JVM's start includes its JIT's);
* resident memory when idle, a few seconds after ready;
* CreateTopics until 100,000 partitions exist (RF 3 over 30 brokers, 99 topics of 100
  partitions per request, 2 connections x 2 in flight), and the resident memory then. The
  total is a bulk load on a controller that has just started, so it includes the JVM's warm-up;
  the creation is also cut into up to ten windows of equal numbers of requests (at least 4, the
  requests in flight, each) and the warm-up rule (benchmarks/steady.py) applied to them after
  the fact, giving the rate from the first steady run of windows to the end. A creation of
  100,000 partitions is 11 requests, 2 windows: too short for the rule to hold, and reported
  so. (CreateTopics cannot be paused for a warm-up before it: warm-up topics, deleted or not,
  would stay in the log that the last two rows serve and replay, more of them on the side that
  takes longer to settle);
* heartbeats/s: 200 more brokers registered and unfenced, BrokerHeartbeat v1 pipelined over 4
  connections x 16 in flight (benchmarks/heartbeats.py's driver), warmed up until steady
  (benchmarks/steady.py's rule: windows of 2 s until the last 3 agree within 5% in the
  controller's CPU per heartbeat, at least 10 s, at most 120 s), then measured for
  ``--seconds``; the controller's CPU per heartbeat over the same window;
* the log served to a Raft observer: pyspark_kraft's RaftObserver fetching the log from its
  start (the log start offset, where older segments were cleaned after a snapshot) to the high
  watermark, 8 MiB per Fetch (benchmarks/fetch_serving.py's client), pass after pass on one
  connection: warmed up by the same rule, then measured for ``--seconds``;
* restart to active on that log: SIGTERM, start again on the same directory, time to ready.
  Cold by nature: a restart is a new process (for Kafka a new JVM, whose replay of the log runs
  while its JIT compiles), and that is what an operator waits for.

Each side's warm-up is reported: how long it took, whether the rule held or the cap ended it,
how far apart its last windows were, and every window's rate and CPU per operation. A figure
measured after a warm-up the cap ended is marked † in the table. With ``--rounds N`` the pair is
run N times, kraftsim first in odd rounds and Kafka first in even ones, each round on fresh
directories; the table gives each figure's median and range.

Kafka runs with kafka-server-start.sh's JVM options (-Xmx1G -Xms1G, G1) unless --kafka-heap
says otherwise; both log at INFO to a file, as they would in production.

    .venv/bin/python benchmarks/vs_kafka.py [--partitions 100000] [--seconds 10] [--rounds 1]
        [--tolerance 0.05] [--window 2] [--min-warmup 10] [--max-warmup 120] [--rate-too]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import heartbeats  # noqa: E402
from benchmarks.steady import (  # noqa: E402
    Rule,
    Steadiness,
    Window,
    combined,
    cpu_seconds,
    load_average,
    spread,
    steady_run,
    warm_then_measure,
)
from kraftsim.rpc import registry  # noqa: E402
from kraftsim.rpc.client import KafkaClient  # noqa: E402
from tests.kafka.harness import KafkaNode, KraftsimNode, Node, random_cluster_id  # noqa: E402

CT = registry.request_class(19)
REG = registry.request_class(62)
HB = registry.request_class(63)
NOT_CONTROLLER = 41
PLACEMENT_BROKERS = 30
IN_FLIGHT = 4  # CreateTopics requests in flight: 2 connections x 2
TOPICS_PER_REQUEST = 99  # 99 x (1 + 100) records: under Kafka's 10,000 records per request
CONFIG = {
    "broker.session.timeout.ms": "3600000",  # no broker is fenced by the clock during the run
    # The log stays whole on both sides: the observer's passes (warm-up included) read it from
    # its start, which retention would move past once a snapshot is taken (over 100 MiB at 1M
    # partitions) while they run.
    "metadata.max.retention.bytes": "-1",
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


@dataclass
class Creation:
    """A bulk CreateTopics: its total seconds, and for each answer, in the order they came, the
    moment (from the start), the partitions its request created and the controller's CPU
    seconds so far (from the start)."""

    seconds: float
    answers: list[tuple[float, int, float]]

    def windows(self, count: int = 10) -> list[Window]:
        """The answers cut into ``count`` windows of (as nearly as they divide) equal numbers of
        requests, each at least IN_FLIGHT requests (answers come in bursts of up to that many):
        each window's partitions and controller CPU since the previous window ended."""
        n = len(self.answers)
        count = max(1, min(count, n // IN_FLIGHT))
        bounds = sorted({round(i * n / count) for i in range(count + 1)})
        out: list[Window] = []
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            t0, _, cpu0 = self.answers[lo - 1] if lo else (0.0, 0, 0.0)
            t1, _, cpu1 = self.answers[hi - 1]
            out.append(Window(t1 - t0, sum(k for _, k, _ in self.answers[lo:hi]), cpu1 - cpu0))
        return out

    def steady(self, rule: Rule) -> tuple[float, Steadiness]:
        """(partitions/s from the first steady run of windows to the end, how steady it was), by
        ``rule``'s tolerance and count (its window length and time limits do not apply: the
        windows are the creation's tenths); where the rule never holds, the rate of the last
        ``rule.count`` windows."""
        st = steady_run(self.windows(), replace(rule, window_s=0, min_s=0, cap_s=float("inf")))
        tail = st.windows[st.steady_from:] if st.steady_from is not None else st.windows[-rule.count:]
        return combined(tail).rate, st


async def create_partitions(node: Node, partitions: int, per_topic: int = 100) -> Creation:
    assert node.proc is not None
    pid = node.proc.pid
    host, port = node.bootstrap.rsplit(":", 1)
    names = [f"topic-{i:06d}" for i in range(partitions // per_topic)]
    queue: asyncio.Queue[list[str]] = asyncio.Queue()
    for i in range(0, len(names), TOPICS_PER_REQUEST):
        queue.put_nowait(names[i:i + TOPICS_PER_REQUEST])
    clients = [await KafkaClient.connect(host, int(port)) for _ in range(2)]
    answers: list[tuple[float, int, float]] = []

    async def worker(c: KafkaClient) -> None:
        while not queue.empty():
            chunk = queue.get_nowait()
            r = await c.request(CT(topics=[CT.CreatableTopic(name=n, num_partitions=per_topic, replication_factor=3)
                                           for n in chunk], timeout_ms=300_000), 7, timeout=600)
            answers.append((time.perf_counter() - t0, len(chunk) * per_topic, cpu_seconds(pid) - cpu0))
            bad = [(t.name, t.error_code, t.error_message) for t in r.topics if t.error_code]
            assert not bad, bad[:3]

    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    await asyncio.gather(*(worker(c) for c in clients for _ in range(IN_FLIGHT // len(clients))))
    dt = time.perf_counter() - t0
    for c in clients:
        await c.close()
    return Creation(dt, answers)


class LogReader:
    """pyspark_kraft's RaftObserver (8 MiB per Fetch) reading the log from its start to the high
    watermark, pass after pass on one connection. A fetch at offset 0 is sent to the newest
    snapshot once there is one, so the log is then read from its start offset (or offset 1),
    or, where that too is only in the snapshot, from the snapshot's end."""

    def __init__(self, node: Node) -> None:
        from pyspark_kraft.network import RaftObserver

        self.node = node
        self.obs = RaftObserver(node.bootstrap, node.cluster_id, max_bytes=8 << 20)
        self.start = 0
        assert node.proc is not None
        self.pid = node.proc.pid

    async def open(self) -> None:
        await self.obs.connect()
        r = await self.obs.fetch(0)  # learns the leader epoch; not timed
        if r.snapshot is not None:  # an empty fetcher is sent to the snapshot: start past it
            self.start = max(r.log_start_offset, 1)
            r = await self.obs.fetch(self.start)
            if r.snapshot is not None:  # not in the log either: what follows the snapshot
                self.start = r.snapshot[0]

    async def read_all(self) -> int:
        """One pass: the bytes of records fetched from the start to the high watermark."""
        from benchmarks.fetch_serving import last_offset

        offset, total = self.start, 0
        while True:
            r = await self.obs.fetch(offset)
            if r.snapshot is not None:
                raise RuntimeError(f"{self.node}: sent to snapshot {r.snapshot} at {offset}")
            total += len(r.records)
            if r.records:
                offset = last_offset(bytes(r.records)) + 1
            if offset >= r.high_watermark:
                return total

    async def window(self, seconds: float) -> Window:
        """Whole passes until ``seconds`` have passed: bytes, and the controller's CPU."""
        cpu0, t0, total = cpu_seconds(self.pid), time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            total += await self.read_all()
        return Window(time.perf_counter() - t0, total, cpu_seconds(self.pid) - cpu0)

    async def close(self) -> None:
        await self.obs.close()


async def heartbeat_rate(node: Node, rule: Rule, seconds: float) -> tuple[Steadiness, list[Window]]:
    assert node.proc is not None
    host, port = node.bootstrap.rsplit(":", 1)
    frames = await heartbeats.setup_brokers(int(port), node.cluster_id)
    load = await heartbeats.Pipelined.open(int(port), frames, node.proc.pid)
    try:
        return await warm_then_measure(load.window, rule, seconds)
    finally:
        load.close()


async def serve_rate(node: Node, rule: Rule, seconds: float) -> tuple[int, Steadiness, list[Window]]:
    """(bytes of one pass, the warm-up, the measured windows) for the log served to an observer,
    warmed up by ``rule``."""
    reader = LogReader(node)
    await reader.open()
    try:
        size = await reader.read_all()
        st, windows = await warm_then_measure(reader.window, rule, seconds)
        return size, st, windows
    finally:
        await reader.close()


@dataclass
class Result:
    name: str
    figures: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    unsteady: set[str] = field(default_factory=set)  # figures measured after a warm-up the cap ended

    def warmed(self, key: str, st: Steadiness) -> None:
        if not st.steady:
            self.unsteady.add(key)


def measure(node: Node, partitions: int, seconds: float, idle_s: float, rule: Rule) -> Result:
    res = Result(node.kind)
    res.notes.append(f"load average {load_average():.2f} at the start")
    node.format()
    res.figures["start to ready, cold (s)"] = start_timed(node)
    assert node.proc is not None
    time.sleep(idle_s)  # a measurement window, not synchronisation
    res.figures["idle RSS (MiB)"] = rss_mib(node.proc.pid)
    asyncio.run(register_placement_brokers(node))
    created = asyncio.run(create_partitions(node, partitions))
    res.figures[f"CreateTopics to {partitions:,} partitions, from a fresh start (s)"] = created.seconds
    rate, st = created.steady(rule)
    res.figures["CreateTopics, steady (partitions/s)"] = rate
    res.warmed("CreateTopics, steady (partitions/s)", st)
    res.notes.append(f"CreateTopics in windows of equal numbers of requests: {st.summary()}; "
                     f"partitions/s by window: {st.trace()}; load {load_average():.2f}")
    res.figures[f"RSS with {partitions:,} partitions (MiB)"] = rss_mib(node.proc.pid)
    st, windows = asyncio.run(heartbeat_rate(node, rule, seconds))
    hb = combined(windows)
    res.figures["heartbeats/s (200 brokers, 4 x 16 in flight)"] = hb.rate
    assert hb.cpu_per_op_us is not None
    res.figures["controller CPU per heartbeat (µs)"] = hb.cpu_per_op_us
    res.figures["heartbeat warm-up (s)"] = st.seconds
    for key in ("heartbeats/s (200 brokers, 4 x 16 in flight)", "controller CPU per heartbeat (µs)"):
        res.warmed(key, st)
    res.notes.append(f"heartbeats: warm-up {st.summary()}; heartbeats/s by window: {st.trace()}; measured "
                     f"{hb.seconds:.1f} s in windows {spread([w.rate for w in windows]):.1%} apart in rate; "
                     f"load {load_average():.2f}")
    size, st, windows = asyncio.run(serve_rate(node, rule, seconds))
    served = combined(windows)
    res.figures["the log served to a Raft observer (MB/s)"] = served.rate / 1e6
    res.figures["the log served (MB)"] = size / 1e6
    res.figures["observer warm-up (s)"] = st.seconds
    res.warmed("the log served to a Raft observer (MB/s)", st)
    res.notes.append(f"the log served: warm-up {st.summary()}; MB/s by window (controller CPU per MB): "
                     f"{st.trace(1e-6, 1e6, 'µs/MB')}; measured {served.seconds:.1f} s in windows "
                     f"{spread([w.rate for w in windows]):.1%} apart in rate; load {load_average():.2f}")
    node.stop(timeout=120)
    res.figures["restart to active on that log, cold (s)"] = start_timed(node)
    node.stop(timeout=120)
    res.notes.append(f"load average {load_average():.2f} at the end")
    return res


def verdict(key: str, a: float, b: float) -> str:
    """kraftsim against Kafka, said the way the row reads ("faster", "less", "more")."""
    if "warm-up" in key or "(MB)" in key or not a or not b:
        return ""
    higher_is_better = "/s" in key and "(s)" not in key
    timed = "(s)" in key or higher_is_better
    ratio = a / b if higher_is_better else b / a
    if ratio >= 1:
        return f"{ratio:.1f}x {'faster' if timed else 'less'}"
    return f"{1 / ratio:.1f}x {'slower' if timed else 'more'}"


def number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}"


def figure(results: list[Result], key: str) -> str:
    """One figure, or over rounds their median with the range; marked † where a warm-up's
    rule did not hold (the cap ended it) in any round."""
    values = [r.figures[key] for r in results]
    med = statistics.median(values)
    text = number(med) if len(values) == 1 else f"{number(med)} ({number(min(values))}–{number(max(values))})"
    return text + (" †" if any(key in r.unsteady for r in results) else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=10.0, help="measurement window after each warm-up")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds idle before the idle RSS")
    ap.add_argument("--kafka-heap", default="1G", help="Kafka's -Xmx/-Xms (kafka-server-start.sh: 1G)")
    ap.add_argument("--rounds", type=int, default=1, help="run the pair this many times, alternating which goes first")
    ap.add_argument("--tolerance", type=float, default=0.05, help="steady: the last windows within this of each other")
    ap.add_argument("--count", type=int, default=3, help="steady: this many windows in a row")
    ap.add_argument("--window", type=float, default=2.0, help="seconds per warm-up window")
    ap.add_argument("--min-warmup", type=float, default=10.0, help="seconds of warm-up at least")
    ap.add_argument("--max-warmup", type=float, default=120.0, help="seconds of warm-up at most")
    ap.add_argument("--rate-too", action="store_true", help="steady in rate as well as in CPU per operation")
    args = ap.parse_args()
    rule = Rule(args.tolerance, args.count, args.window, args.min_warmup, args.max_warmup, args.rate_too)
    print(f"{os.cpu_count()} cores, load average {load_average():.2f} at the start; warm-up: {rule.describe()}",
          flush=True)
    results: dict[str, list[Result]] = {"kraftsim": [], "kafka": []}
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as d:
            pair = controller_pair(Path(d), CONFIG, args.kafka_heap)
            for node in pair if r % 2 == 0 else reversed(pair):
                try:
                    res = measure(node, args.partitions, args.seconds, args.idle, rule)
                finally:
                    node.kill()
                results[node.kind].append(res)
                print(f"round {r + 1}, {node.kind}: {res.figures}", flush=True)
                for note in res.notes:
                    print(f"  {note}", flush=True)
    ours, theirs = results["kraftsim"], results["kafka"]
    print()
    print("| measure | kraftsim | Kafka 3.9 | kraftsim vs Kafka |")
    print("|---|---:|---:|---:|")
    for key in ours[0].figures:
        a = statistics.median(x.figures[key] for x in ours)
        b = statistics.median(x.figures[key] for x in theirs)
        print(f"| {key} | {figure(ours, key)} | {figure(theirs, key)} | {verdict(key, a, b)} |")
    if any(r.unsteady for r in ours + theirs):
        print("\n† measured after a warm-up that the cap ended, the rule not holding (see the notes above)")


if __name__ == "__main__":
    main()

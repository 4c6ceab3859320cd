"""A quorum of three kraftsim controllers beside a quorum of three Kafka 3.9.2 controllers (run by
hand): start, failover after kill -9 of the leader, and what replication costs, in one run.

Both quorums are static (``controller.quorum.voters``, kraft.version 0), each directory formatted
beforehand by its own side's format tool (not timed), every node on this machine's two cores,
both with the same Raft timings and the same config:

* start to ready: from launching the three processes to the first answer of an active controller
  (a validate-only CreateTopics that is not NOT_CONTROLLER), every node polled. Cold by nature;
* failover: three brokers registered and unfenced, ``--warm`` seconds (10) of sequential
  CreateTopics and heartbeats on the leader (a JVM's paths compiled on the leader and, replicating
  and replaying, on the followers, as in a quorum that has run a while), every voter caught up
  (the leader's DescribeQuorum) and ``--idle`` seconds (2) of quiet, then kill -9 of the leader
  (for Kafka, SIGKILL of the JVM). From the signal, the time until a surviving node answers
  DescribeQuorum as the leader, until a registered broker's BrokerHeartbeat (its epoch from
  before) is accepted (error 0), and until a CreateTopics (one partition, RF 3) succeeds: each
  polled on both survivors every ``--poll-ms``, all three at once. With Kafka's default timeouts
  (election 1000 ms, fetch 2000 ms), or with ``--short-timeouts`` (election 200 ms, fetch 750 ms: a
  follower's fetch long-polls for up to 500 ms, KafkaRaftClient's MAX_FETCH_WAIT_MS, so a fetch
  timeout of 500 ms would make an idle follower stand for election between two polls). The
  election backoff is the default (1000 ms) on both sides. ``--repeat`` times per side,
  alternating which side goes first, each time on fresh directories;
* what replication costs: a quorum of one voter against one of three, kraftsim and (unless
  ``--no-kafka-cost``) Kafka. 200 brokers registered and unfenced (benchmarks/heartbeats.py's
  setup); sequential CreateTopics of one topic (one partition, RF 3) on one connection, warmed up
  by benchmarks/steady.py's rule (the leader's CPU per request steady), then ``--requests``
  timed one by one: median and p99 latency and the leader's CPU per request; then
  BrokerHeartbeat v1 pipelined over 4 connections x 16 in flight (benchmarks/heartbeats.py's
  driver), warmed up by the same rule and measured for ``--seconds``: heartbeats/s and the
  leader's CPU per heartbeat. The followers' CPU is not counted in either.

Both sides run with ``controller.quorum.append.linger.ms=0`` (Kafka's default is 25 ms, which
holds a lone write that long before it is appended, and would hide the replication behind it) and a broker
session of an hour (no broker is fenced by the clock while the failover runs or the load
pauses). Kafka runs with kafka-server-start.sh's JVM options (``--kafka-heap``, 1 GiB by default,
G1), three JVMs on two cores.

    .venv/bin/python benchmarks/quorum.py [--repeat 5] [--short-timeouts] [--markdown]
        [--only failover|cost] [--no-kafka-cost] [--requests 200] [--seconds 5] [--rate-too]
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import heartbeats  # noqa: E402
from benchmarks.steady import Rule, Window, combined, cpu_seconds, load_average, warm_then_measure, warm_up  # noqa: E402
from benchmarks.vs_kafka import kafka_jvm_opts  # noqa: E402
from kraftsim.rpc.client import KafkaClient  # noqa: E402
from kraftsim.rpc.messages import (  # noqa: E402
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreateTopicsRequest,
    DescribeQuorumRequest,
)
from tests.harness import free_port  # noqa: E402
from tests.kafka.harness import KafkaNode, KraftsimNode, Node, random_cluster_id  # noqa: E402

CT = CreateTopicsRequest
HB = BrokerHeartbeatRequest
REG = BrokerRegistrationRequest
NOT_CONTROLLER = 41
FIRST_ID = 3001  # controller ids apart from the brokers' (0..199)
BROKERS = (1, 2, 3)
KINDS = ("kraftsim", "kafka")
DEFAULT_RAFT = (1000, 2000)  # Kafka's defaults: election, fetch timeout (ms)
SHORT_RAFT = (200, 750)
COMMON = {
    "controller.quorum.append.linger.ms": "0",
    "broker.session.timeout.ms": "3600000",
}
Attempt = Callable[[KafkaClient, Node], Awaitable[bool]]


def raft_config(election_ms: int, fetch_ms: int) -> dict[str, str]:
    return {"controller.quorum.election.timeout.ms": str(election_ms),
            "controller.quorum.fetch.timeout.ms": str(fetch_ms)}


class Quorum:
    """``voters`` controllers of one kind (``kraftsim`` or ``kafka``), ids ``FIRST_ID..``, every one
    naming all of them in ``controller.quorum.voters``, formatted with one cluster id."""

    def __init__(self, kind: str, tmp: Path, voters: int, config: dict[str, str], kafka_heap: str) -> None:
        self.kind = kind
        self.cluster_id = random_cluster_id()
        ports = {FIRST_ID + i: free_port() for i in range(voters)}
        cfg = {**COMMON, **config, "controller.quorum.voters": ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())}
        self.nodes: dict[int, Node] = {}
        for node_id, port in ports.items():
            node: Node
            if kind == "kraftsim":
                node = KraftsimNode(tmp / f"{kind}-{node_id}", node_id=node_id, cluster_id=self.cluster_id, port=port,
                                    overrides=dict(cfg))
            else:
                node = KafkaNode(tmp / f"{kind}-{node_id}", node_id=node_id, cluster_id=self.cluster_id, port=port,
                                 overrides=dict(cfg), jvm_opts=kafka_jvm_opts(kafka_heap))
            node.format()
            self.nodes[node_id] = node

    def start(self) -> tuple[float, int]:
        """Launch every node; (seconds to the first answer of an active controller, its id)."""
        t0 = time.perf_counter()
        for node in self.nodes.values():
            node.start(wait=False)
        at, node = asyncio.run(first_success(list(self.nodes.values()), answers_as_active, 300, 0.01))
        return at - t0, node.node_id

    def kill_all(self) -> None:
        for node in self.nodes.values():
            node.kill()


# ---- probes -------------------------------------------------------------------------------------

async def first_success(nodes: list[Node], attempt: Attempt, timeout: float, interval: float) -> tuple[float, Node]:
    """(perf_counter when it happened, the node) of the first ``attempt`` to succeed on any of
    ``nodes``, each polled on a connection of its own every ``interval`` seconds (a new
    connection after a failed one)."""
    done: asyncio.Future[tuple[float, Node]] = asyncio.get_running_loop().create_future()

    async def probe(node: Node) -> None:
        host, port = node.bootstrap.rsplit(":", 1)
        client: KafkaClient | None = None
        try:
            while not done.done():
                try:
                    if client is None or client.closed:
                        client = await KafkaClient.connect(host, int(port), client_id="quorum-bench", timeout=1)
                    if await attempt(client, node):
                        if not done.done():
                            done.set_result((time.perf_counter(), node))
                        return
                except (OSError, TimeoutError, ConnectionError):
                    if client is not None:
                        client.abort()
                    client = None
                except Exception as e:  # a bad answer: the run is wrong, not slow
                    if not done.done():
                        done.set_exception(e)
                    return
                if node.proc is not None and node.proc.poll() is not None and not done.done():
                    done.set_exception(RuntimeError(f"{node} exited:\n{node.log_tail()}"))
                await asyncio.sleep(interval)
        finally:
            if client is not None:
                client.abort()

    tasks = [asyncio.create_task(probe(n)) for n in nodes]
    try:
        return await asyncio.wait_for(asyncio.shield(done), timeout)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


READY_PROBE = CT(topics=[CT.CreatableTopic(name="ready-probe", num_partitions=1, replication_factor=1)],
                 timeout_ms=5000, validate_only=True)


async def answers_as_active(client: KafkaClient, node: Node) -> bool:
    r = await client.request(READY_PROBE, 7, timeout=10)
    return r.topics[0].error_code != NOT_CONTROLLER


def describe_quorum() -> DescribeQuorumRequest:
    return DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])


async def answers_as_leader(client: KafkaClient, node: Node) -> bool:
    r = await client.request(describe_quorum(), 1, timeout=10)
    if r.error_code or not r.topics or r.topics[0].partitions[0].error_code:
        return False
    return r.topics[0].partitions[0].leader_id == node.node_id


def heartbeat_accepted(broker: int, epoch: int) -> Attempt:
    async def attempt(client: KafkaClient, node: Node) -> bool:
        r = await client.request(HB(broker_id=broker, broker_epoch=epoch, current_metadata_offset=10**9), 1, timeout=10)
        return r.error_code == 0
    return attempt


def topic_created(prefix: str) -> Attempt:
    names = (f"{prefix}-{i}" for i in range(10**9))  # each attempt a new name: a late success cannot collide

    async def attempt(client: KafkaClient, node: Node) -> bool:
        r = await client.request(CT(topics=[CT.CreatableTopic(name=next(names), num_partitions=1, replication_factor=3)],
                                    timeout_ms=30_000), 7, timeout=30)
        return r.topics[0].error_code == 0
    return attempt


async def connect(node: Node) -> KafkaClient:
    host, port = node.bootstrap.rsplit(":", 1)
    return await KafkaClient.connect(host, int(port), client_id="quorum-bench")


async def register_and_unfence(node: Node, cluster_id: str) -> dict[int, int]:
    """BROKERS registered and unfenced on the active ``node``: their epochs."""
    c = await connect(node)
    epochs = {}
    try:
        for b in BROKERS:
            r = await c.request(REG(broker_id=b, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
                                    listeners=[REG.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
                                    features=[REG.Feature(name="metadata.version", min_supported_version=7,
                                                          max_supported_version=21)],
                                    log_dirs=[uuid.uuid4()]), 3)
            assert r.error_code == 0, r
            epochs[b] = r.broker_epoch
        for b, epoch in epochs.items():
            hb = await c.request(HB(broker_id=b, broker_epoch=epoch, current_metadata_offset=10**9), 1)
            assert hb.error_code == 0 and not hb.is_fenced, hb
        ct = await c.request(CT(topics=[CT.CreatableTopic(name="before", num_partitions=3, replication_factor=3)],
                                timeout_ms=30_000), 7)
        assert ct.topics[0].error_code == 0, ct
    finally:
        await c.close()
    return epochs


async def caught_up(leader: Node, timeout: float = 60) -> None:
    """Poll the leader's DescribeQuorum until every voter's log ends where the leader's does,
    at the high watermark."""
    deadline = time.monotonic() + timeout
    c = await connect(leader)
    try:
        while True:
            r = await c.request(describe_quorum(), 1)
            p = r.topics[0].partitions[0] if r.topics else None
            if p is not None and not p.error_code and p.leader_id == leader.node_id:
                ends = {v.log_end_offset for v in p.current_voters}
                if ends == {p.high_watermark}:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{leader}: the voters not caught up within {timeout}s: {r}")
            await asyncio.sleep(0.05)
    finally:
        await c.close()


async def busy(leader: Node, seconds: float, epochs: dict[int, int]) -> None:
    """Sequential CreateTopics (one partition, RF 3) and the brokers' heartbeats on the leader for
    ``seconds``: a JVM's code paths compiled before the kill, on the leader and, replicating and
    replaying, on the followers, as on a quorum that has run for a while."""
    c = await connect(leader)
    try:
        t0, i = time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            r = await c.request(CT(topics=[CT.CreatableTopic(name=f"busy-{i}", num_partitions=1, replication_factor=3)],
                                   timeout_ms=30_000), 7)
            assert r.topics[0].error_code == 0, r
            i += 1
            if i % 10 == 0:
                for b, epoch in epochs.items():
                    hb = await c.request(HB(broker_id=b, broker_epoch=epoch, current_metadata_offset=10**9), 1)
                    assert hb.error_code == 0, hb
    finally:
        await c.close()


# ---- failover -----------------------------------------------------------------------------------

FAILOVER_ROWS = ("start to ready (s)", "kill -9 of the leader to a new leader (s)",
                 "... to a broker's heartbeat accepted (s)", "... to a CreateTopics succeeded (s)")


def failover(kind: str, tmp: Path, config: dict[str, str], args: argparse.Namespace, rep: int) -> dict[str, float]:
    q = Quorum(kind, tmp, 3, config, args.kafka_heap)
    try:
        ready, leader_id = q.start()
        leader = q.nodes[leader_id]
        epochs = asyncio.run(register_and_unfence(leader, q.cluster_id))
        asyncio.run(busy(leader, args.warm, epochs))
        asyncio.run(caught_up(leader))
        time.sleep(args.idle)  # a quiet quorum before the kill: a measurement condition, not synchronisation
        survivors = [n for i, n in q.nodes.items() if i != leader_id]
        broker, epoch = next(iter(epochs.items()))
        interval = args.poll_ms / 1000

        async def after_kill() -> list[float]:
            """Seconds from the kill to each of the three."""
            t0 = time.perf_counter()
            leader.kill()
            (t_leader, new), (t_hb, _), (t_ct, _) = await asyncio.gather(
                first_success(survivors, answers_as_leader, 120, interval),
                first_success(survivors, heartbeat_accepted(broker, epoch), 120, interval),
                first_success(survivors, topic_created(f"after-{rep}"), 120, interval))
            assert new.node_id != leader_id
            return [t_leader - t0, t_hb - t0, t_ct - t0]

        return dict(zip(FAILOVER_ROWS, [ready, *asyncio.run(after_kill())], strict=True))
    finally:
        q.kill_all()


# ---- the cost of replication ---------------------------------------------------------------------

@dataclass
class Cost:
    figures: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


COST_ROWS = ("CreateTopics latency, median (ms)", "CreateTopics latency, p99 (ms)",
             "leader CPU per CreateTopics (µs)", "heartbeats/s (200 brokers, 4 x 16 in flight)",
             "leader CPU per heartbeat (µs)")


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def cost(kind: str, voters: int, tmp: Path, config: dict[str, str], args: argparse.Namespace, rule: Rule) -> Cost:
    q = Quorum(kind, tmp, voters, config, args.kafka_heap)
    out = Cost()
    try:
        _, leader_id = q.start()
        leader = q.nodes[leader_id]
        assert leader.proc is not None
        pid = leader.proc.pid
        host, port = leader.bootstrap.rsplit(":", 1)

        async def run() -> None:
            frames = await heartbeats.setup_brokers(int(port), q.cluster_id)
            await caught_up(leader)
            c = await connect(leader)
            names = (f"t-{i}" for i in range(10**9))

            async def create() -> None:
                r = await c.request(CT(topics=[CT.CreatableTopic(name=next(names), num_partitions=1,
                                                                 replication_factor=3)], timeout_ms=30_000), 7)
                assert r.topics[0].error_code == 0, r

            async def window(seconds: float) -> Window:
                cpu0, t0, n = cpu_seconds(pid), time.perf_counter(), 0
                while time.perf_counter() - t0 < seconds:
                    await create()
                    n += 1
                return Window(time.perf_counter() - t0, n, cpu_seconds(pid) - cpu0)

            try:
                st = await warm_up(window, rule)
                out.notes.append(f"CreateTopics warm-up {st.summary()}; requests/s by window: {st.trace()}")
                latencies = []
                cpu0 = cpu_seconds(pid)
                for _ in range(args.requests):
                    t = time.perf_counter()
                    await create()
                    latencies.append(time.perf_counter() - t)
                cpu = cpu_seconds(pid) - cpu0
            finally:
                await c.close()
            latencies.sort()
            out.figures[COST_ROWS[0]] = statistics.median(latencies) * 1e3
            out.figures[COST_ROWS[1]] = percentile(latencies, 0.99) * 1e3
            out.figures[COST_ROWS[2]] = cpu / args.requests * 1e6
            load = await heartbeats.Pipelined.open(int(port), frames, pid)
            try:
                st, windows = await warm_then_measure(load.window, rule, args.seconds)
            finally:
                load.close()
            hb = combined(windows)
            out.figures[COST_ROWS[3]] = hb.rate
            out.figures[COST_ROWS[4]] = hb.cpu_per_op_us or 0.0
            out.notes.append(f"heartbeat warm-up {st.summary()}; heartbeats/s by window: {st.trace()}")

        asyncio.run(run())
        out.notes.append(f"load {load_average():.2f} at the end")
        return out
    finally:
        q.kill_all()


# ---- the tables ---------------------------------------------------------------------------------

def number(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}"


def spread_of(values: list[float]) -> str:
    med = statistics.median(values)
    return number(med) if len(values) == 1 else f"{number(med)} ({number(min(values))}–{number(max(values))})"


def ratio(a: float, b: float, key: str) -> str:
    """``a`` against ``b``, said the way the row ``key`` reads: a time "faster" or "slower", CPU
    "less" or "more", a rate "more" or "fewer"."""
    if not a or not b:
        return ""
    if "/s" in key:
        r, words = a / b, ("more", "fewer")
    elif "CPU" in key:
        r, words = b / a, ("less", "more")
    else:
        r, words = b / a, ("faster", "slower")
    if round(r, 1) == 1.0 or round(1 / r, 1) == 1.0:
        return "1.0x"
    return f"{r:.1f}x {words[0]}" if r >= 1 else f"{1 / r:.1f}x {words[1]}"


def table(header: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=True)]
    fmt = [f"{{:<{widths[0]}}}", *(f"{{:>{w}}}" for w in widths[1:])]
    return "\n".join("  ".join(f.format(x) for f, x in zip(fmt, r, strict=True)) for r in [header, *rows])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5, help="failovers per side")
    ap.add_argument("--short-timeouts", action="store_true",
                    help=f"election {SHORT_RAFT[0]} ms, fetch {SHORT_RAFT[1]} ms (else Kafka's defaults, "
                         f"{DEFAULT_RAFT[0]} and {DEFAULT_RAFT[1]})")
    ap.add_argument("--only", choices=("failover", "cost"), help="run one part only")
    ap.add_argument("--no-kafka-cost", action="store_true", help="the cost of replication for kraftsim only")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--kafka-heap", default="1G", help="each Kafka JVM's -Xmx/-Xms (kafka-server-start.sh: 1G)")
    ap.add_argument("--poll-ms", type=float, default=20, help="how often each survivor is probed after the kill")
    ap.add_argument("--warm", type=float, default=10.0, help="seconds of CreateTopics and heartbeats before the kill")
    ap.add_argument("--idle", type=float, default=2.0, help="seconds of quiet before the kill")
    ap.add_argument("--requests", type=int, default=200, help="CreateTopics timed after the warm-up")
    ap.add_argument("--seconds", type=float, default=5.0, help="heartbeats measured after the warm-up")
    ap.add_argument("--tolerance", type=float, default=0.10, help="steady: the last windows within this")
    ap.add_argument("--window", type=float, default=1.0, help="seconds per warm-up window")
    ap.add_argument("--min-warmup", type=float, default=5.0)
    ap.add_argument("--max-warmup", type=float, default=60.0)
    ap.add_argument("--rate-too", action="store_true",
                    help="steady in rate as well as in CPU per operation (a JVM's rate can climb while its CPU holds)")
    args = ap.parse_args()
    election, fetch = SHORT_RAFT if args.short_timeouts else DEFAULT_RAFT
    config = raft_config(election, fetch)
    rule = Rule(args.tolerance, 3, args.window, args.min_warmup, args.max_warmup, args.rate_too)
    setting = f"election {election} ms, fetch {fetch} ms"
    print(f"{os.cpu_count()} cores, load average {load_average():.2f} at the start; {setting}; "
          f"warm-up: {rule.describe()}", flush=True)
    out: list[str] = []
    if args.only != "cost":
        results: dict[str, list[dict[str, float]]] = {k: [] for k in KINDS}
        for rep in range(args.repeat):
            for kind in KINDS if rep % 2 == 0 else tuple(reversed(KINDS)):
                with tempfile.TemporaryDirectory() as d:
                    res = failover(kind, Path(d), config, args, rep)
                results[kind].append(res)
                print(f"failover {rep + 1}, {kind}: " + ", ".join(f"{k} {v:.3f}" for k, v in res.items())
                      + f"; load {load_average():.2f}", flush=True)
        rows = []
        for key in FAILOVER_ROWS:
            a = [r[key] for r in results["kraftsim"]]
            b = [r[key] for r in results["kafka"]]
            rows.append([key, spread_of(a), spread_of(b), ratio(statistics.median(a), statistics.median(b), key)])
        out += [f"3 voters, {setting}, {args.repeat} runs per side: median (range)", "",
                table(["measure", "kraftsim", "Kafka 3.9.2", "kraftsim vs Kafka"], rows, args.markdown), ""]
    if args.only != "failover":
        kinds = ("kraftsim",) if args.no_kafka_cost else KINDS
        costs: dict[tuple[str, int], Cost] = {}
        for kind in kinds:
            for voters in (1, 3):
                with tempfile.TemporaryDirectory() as d:
                    c = cost(kind, voters, Path(d), config, args, rule)
                costs[kind, voters] = c
                print(f"cost, {kind}, {voters} voter(s): "
                      + ", ".join(f"{k} {number(v)}" for k, v in c.figures.items()), flush=True)
                for note in c.notes:
                    print(f"  {note}", flush=True)
        header = ["measure"]
        for kind in kinds:
            header += [f"{kind} 1 voter", f"{kind} 3 voters", "3 against 1"]
        rows = []
        for key in COST_ROWS:
            row = [key]
            for kind in kinds:
                one, three = costs[kind, 1].figures[key], costs[kind, 3].figures[key]
                row += [number(one), number(three), ratio(three, one, key)]
            rows.append(row)
        out += [f"the cost of replication, {setting}", "", table(header, rows, args.markdown), ""]
    print()
    print("\n".join(out))
    print(f"load average {load_average():.2f} at the end")


if __name__ == "__main__":
    main()

"""Simulated broker fleets at scale (run by hand; never part of the test suite).

    .venv/bin/python benchmarks/fleet.py --count 10000 --duration 300            # against kraftsim
    .venv/bin/python benchmarks/fleet.py --count 10000 --duration 300 --kafka    # ... and a real Kafka 3.9 controller
    .venv/bin/python benchmarks/fleet.py --find-max --duration 60                # the largest fleet kraftsim holds

For each controller: a fresh controller process, then ``kraftsim brokers --count N`` as its own
process, each broker on its own connection at the default 2 s heartbeat interval. Once every
broker is unfenced, a steady phase of ``--duration`` seconds, after which the benchmark reports:

* spurious fences: fence records (BrokerRegistrationChangeRecord fenced=1, FenceBrokerRecord)
  the controller wrote for any broker during the steady phase (no broker is killed, so every
  one is spurious), read back from the controller's own log files;
* heartbeat latency: p50/p99 of the round trips the brokers measure (the fleet's status lines,
  each over the latest 65,536 heartbeats), and for kraftsim also the controller's own event
  processing time (its EventQueueProcessingTimeMs histogram, nearly all heartbeats here);
* fleet CPU (share of one core) and resident memory, in total and per broker; the controller's.

``--find-max`` doubles the fleet from ``--count`` until a steady phase sees a spurious fence or
the fleet never gets all its brokers unfenced, then bisects between the last good and first bad
size (a process holds at most ``ulimit -n`` connections, 20,000 here).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kraftsim.metadata.log import MetadataLog  # noqa: E402
from kraftsim.metadata.records import unframe  # noqa: E402
from tests.fleet_harness import ClusterView, FleetProcess  # noqa: E402
from tests.kafka.harness import KafkaNode, KraftsimNode, random_cluster_id  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


@dataclass
class Result:
    controller: str
    count: int
    unfenced_after_s: float = float("nan")
    all_unfenced: bool = False
    spurious_fences: int = -1
    fleet_p50_ms: list[float] = field(default_factory=list)
    fleet_p99_ms: list[float] = field(default_factory=list)
    controller_p99_ms: float = float("nan")
    controller_queue_p99_ms: float = float("nan")
    fleet_cpu: float = float("nan")
    fleet_rss_mb: float = float("nan")
    controller_cpu: float = float("nan")
    controller_rss_mb: float = float("nan")
    heartbeats: int = 0
    load: str = ""  # the machine's 5-minute load average at the end (other work shares the cores)
    exit_code: int | None = None

    def row(self) -> str:
        p50 = sorted(self.fleet_p50_ms)[len(self.fleet_p50_ms) // 2] if self.fleet_p50_ms else float("nan")
        p99 = max(self.fleet_p99_ms) if self.fleet_p99_ms else float("nan")
        return (f"| {self.controller} | {self.count:,} | {self.unfenced_after_s:.1f} s | {self.spurious_fences} | "
                f"{p50:.2f} / {p99:.2f} ms | {self.controller_p99_ms:.2f} / {self.controller_queue_p99_ms:.2f} ms | "
                f"{self.fleet_cpu * 100:.0f}% ({self.fleet_cpu * 1e6 / max(self.count, 1):.0f} µ-core/broker) | "
                f"{self.fleet_rss_mb:.0f} MiB ({self.fleet_rss_mb * 1024 / max(self.count, 1):.1f} KiB/broker) | "
                f"{self.controller_cpu * 100:.0f}%, {self.controller_rss_mb:.0f} MiB | {self.load} |")


HEADER = ("| controller | brokers | all unfenced after | spurious fences | heartbeat p50 / p99 (fleet, worst window) "
          "| controller event processing / queue p99 | fleet CPU | fleet RSS | controller CPU, RSS | load avg |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fences_since(metadata_dir: Path, start_offset: int, ids: range) -> int:
    mlog = MetadataLog.open(metadata_dir)
    n = 0
    try:
        for batch in mlog.batches(0, flushed_only=False):
            if batch.is_control or batch.last_offset < start_offset:
                continue
            for rec in batch.records():
                if rec.offset < start_offset or rec.value is None:
                    continue
                msg, _ = unframe(rec.value)
                name = type(msg).__name__
                if name == "BrokerRegistrationChangeRecord" and getattr(msg, "fenced", 0) == 1 and msg.broker_id in ids:
                    n += 1
                elif name == "FenceBrokerRecord" and msg.id in ids:
                    n += 1
    finally:
        mlog.close()
    return n


def event_p99_ms(http_port: int, metric: str = "eventqueueprocessingtimems") -> float:
    """p99 (the upper bound of its bucket) of one of kraftsim's event histograms, cumulative
    since the controller started: EventQueueProcessingTimeMs or EventQueueTimeMs."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=10).read().decode()
    buckets = []
    for line in text.splitlines():
        m = re.match(rf'kafka_controller_controllereventmanager_{metric}_bucket\{{le="([^"]+)"\}} (\S+)', line)
        if m:
            buckets.append((float(m.group(1)), float(m.group(2))))
    if not buckets:
        return float("nan")
    total = buckets[-1][1]
    for le, count in buckets:
        if count >= 0.99 * total:
            return le
    return float("nan")


async def run_one(kind: str, count: int, duration: float, work: Path, start_rate: float) -> Result:
    res = Result(kind, count)
    d = work / f"{kind}-{count}"
    shutil.rmtree(d, ignore_errors=True)
    config = {"metadata.max.idle.interval.ms": "500"}
    node: Any
    if kind == "kafka":
        node = KafkaNode(d / "controller", overrides=config,
                         jvm_opts=("-Xmx2g", "-Xms512m", "-XX:+UseG1GC", "-Djava.awt.headless=true"))
    else:
        node = KraftsimNode(d / "controller", cluster_id=random_cluster_id(), overrides=config)
    node.format()
    node.start(timeout=120)
    ids = range(1, count + 1)
    view = ClusterView(node.bootstrap, node.cluster_id).start()
    began = time.monotonic()
    fleet = FleetProcess(d / "fleet", node.bootstrap, count, "--cluster-id", node.cluster_id, "--status-interval", "5",
                         "--start-rate", str(start_rate))
    try:
        try:
            await view.until(lambda img: len(view.unfenced(ids)) == count, max(120.0, count / start_rate * 4),
                             "all unfenced")
            res.all_unfenced = True
            res.unfenced_after_s = time.monotonic() - began
        except AssertionError as e:
            print(f"  {kind} {count}: {e}"[:300], flush=True)
            return res
        steady_offset = view.observer.applied_offset + 1
        fleet_pid, ctl_pid = fleet.proc.pid, node.proc.pid
        mark = len(fleet.output())
        c0, k0, t0 = cpu_seconds(fleet_pid), cpu_seconds(ctl_pid), time.monotonic()
        await asyncio.sleep(duration)
        t1 = time.monotonic()
        res.fleet_cpu = (cpu_seconds(fleet_pid) - c0) / (t1 - t0)
        res.controller_cpu = (cpu_seconds(ctl_pid) - k0) / (t1 - t0)
        res.fleet_rss_mb, res.controller_rss_mb = rss_mb(fleet_pid), rss_mb(ctl_pid)
        for m in re.finditer(r"heartbeat p50 ([0-9.]+) ms p99 ([0-9.]+) ms", fleet.output()[mark:]):
            res.fleet_p50_ms.append(float(m.group(1)))
            res.fleet_p99_ms.append(float(m.group(2)))
        if kind == "kraftsim":
            res.controller_p99_ms = event_p99_ms(node.http_port)
            res.controller_queue_p99_ms = event_p99_ms(node.http_port, "eventqueuetimems")
        res.spurious_fences = fences_since(node.metadata_dir, steady_offset, ids)
        res.load = open("/proc/loadavg").read().split()[1]
        fleet.signal(signal.SIGTERM)
        res.exit_code = await fleet.wait_exit(600)
        m = re.search(r"heartbeats (\d+)", fleet.output())
        res.heartbeats = int(m.group(1)) if m else 0
        return res
    finally:
        fleet.kill()
        await view.stop()
        node.stop()


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=10_000)
    p.add_argument("--duration", type=float, default=300.0, help="steady phase, seconds")
    p.add_argument("--kafka", action="store_true", help="also against a real Kafka 3.9 controller")
    p.add_argument("--kafka-only", action="store_true")
    p.add_argument("--find-max", action="store_true")
    p.add_argument("--start-rate", type=float, default=200.0, help="brokers started per second (default 200)")
    p.add_argument("--work", type=Path, default=None)
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    work = args.work or Path(tempfile.mkdtemp(prefix="kraftsim-fleet-bench-"))
    results: list[Result] = []
    kinds = (["kafka"] if args.kafka_only else ["kraftsim"] + (["kafka"] if args.kafka else []))
    print(f"fleet benchmark in {work}; {os.cpu_count()} cores; steady {args.duration:.0f} s", flush=True)
    if args.find_max:
        good, bad, n = 0, 0, args.count
        limit = hard - 500
        while n <= limit and not bad:
            r = await run_one("kraftsim", n, args.duration, work, args.start_rate)
            results.append(r)
            print(r.row(), flush=True)
            if r.all_unfenced and r.spurious_fences == 0:
                good, n = n, min(n * 2, limit) if n < limit else limit + 1
            else:
                bad = n
        while bad and bad - good > max(1000, good // 10):
            n = (good + bad) // 2
            r = await run_one("kraftsim", n, args.duration, work, args.start_rate)
            results.append(r)
            print(r.row(), flush=True)
            if r.all_unfenced and r.spurious_fences == 0:
                good = n
            else:
                bad = n
        print(f"largest fleet with 0 spurious fences: {good:,} brokers" + (f" (first failure at {bad:,})" if bad
                                                                            else f" (the fd limit {hard} stopped it)"))
    else:
        for kind in kinds:
            r = await run_one(kind, args.count, args.duration, work, args.start_rate)
            results.append(r)
            print(r.row(), flush=True)
    print()
    print(HEADER)
    for r in results:
        print(r.row())
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())

"""Simulated broker fleets at scale (run by hand; never part of the test suite).

    .venv/bin/python benchmarks/fleet.py --count 10000 --duration 300            # against kraftsim
    .venv/bin/python benchmarks/fleet.py --count 10000 --duration 300 --kafka    # ... and a real Kafka 3.9 controller
    .venv/bin/python benchmarks/fleet.py --find-max --duration 60                # the largest fleet kraftsim holds
    .venv/bin/python benchmarks/fleet.py --count 20000 --start-rate 1000 --kafka --rounds 2 --duration 60
                                          # a start storm, kraftsim and Kafka in turn, twice

For each controller: a fresh controller process, a warm-up fleet (``--warmup`` brokers of ids
from 100,001, until all are unfenced, then heartbeating until the controller's CPU is steady by
benchmarks/steady.py's rule: windows of 5 s until the last 3 agree within ``--warmup-tolerance``
(10%), at least 10 s, at most ``--warmup-max`` (120 s), the same rule for both controllers and
reported for each; then shut down through controlled shutdown: a JVM measured cold would be
measured compiling). The warm-up fleet's heartbeats are paced (each broker every 2 s), so a
window's rate is the pace and the controller's CPU per window is its CPU per heartbeat, which a
JIT changes; at that pace the controller's own timers are a good part of its CPU, hence 10%
rather than the 5% the benchmarks that drive a controller flat out use. Then ``kraftsim brokers`` for the N measured
brokers, split over processes of at most ``--per-process`` brokers each (a process holds at
most ``ulimit -n`` connections), all started together at ``--start-rate`` brokers a second in
all, each broker on its own connection at the default 2 s heartbeat interval. The start phase
lasts until every measured broker is unfenced (the time is reported, with the controller's and
the fleet's CPU over it, and the fence records written for measured brokers meanwhile: none is
killed, so each is spurious). Then a steady phase of ``--duration`` seconds, after which the
benchmark reports:

* spurious fences: fence records (BrokerRegistrationChangeRecord fenced=1, FenceBrokerRecord)
  the controller wrote for any broker during the steady phase (no broker is killed, so every
  one is spurious), read back from the controller's own log files;
* heartbeat latency: p50/p99 of the round trips the brokers measure (the fleet's status lines,
  each over the latest 65,536 heartbeats), and for kraftsim also the controller's own event
  processing time (its EventQueueProcessingTimeMs histogram, nearly all heartbeats here);
* fleet CPU (share of one core) and resident memory, in total and per broker; the controller's;
* the requests the controller shed (failed with a timeout rather than done late): kraftsim's
  EventQueueOperationsTimedOutCount, or the TimeoutException lines in Kafka's log.

A controller holds one connection per broker and ``ulimit -n`` (20,000 here, hard limit too,
and root lacks CAP_SYS_RESOURCE to raise it) is per process: the benchmark prints how many
descriptors each controller holds before the fleet comes (about 10 for kraftsim, which keeps
64 more for its own files, and 130 for Kafka), and with ``--cap`` runs no more brokers than the
controller can take connections for.

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

from benchmarks.steady import Rule, Window, cpu_seconds, warm_up  # noqa: E402
from kraftsim.metadata.log import MetadataLog  # noqa: E402
from kraftsim.metadata.records import unframe  # noqa: E402
from kraftsim.rpc.server import DESCRIPTOR_RESERVE  # noqa: E402
from tests.fleet_harness import ClusterView, FleetProcess  # noqa: E402
from tests.kafka.harness import KafkaNode, KraftsimNode, random_cluster_id  # noqa: E402

HEARTBEAT_INTERVAL_S = 2.0  # kraftsim brokers' default broker.heartbeat.interval.ms


@dataclass
class Result:
    controller: str
    count: int
    unfenced_after_s: float = float("nan")
    all_unfenced: bool = False
    start_fences: int = -1  # fence records for measured brokers during the start phase
    start_controller_cpu: float = float("nan")
    start_fleet_cpu: float = float("nan")
    start_load: str = ""
    shed: int = -1  # requests failed with a timeout rather than done late (whole run)
    controller_fds: int = 0  # descriptors the controller held once started, before any broker came
    warmup: str = ""  # how the warm-up fleet's steady phase ended
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

    def start_row(self) -> str:
        done = f"{self.unfenced_after_s:.1f} s" if self.all_unfenced else "never (see the log)"
        return (f"| {self.controller} | {self.count:,} | {done} | {self.start_fences} | "
                f"{self.start_controller_cpu * 100:.0f}% | {self.start_fleet_cpu * 100:.0f}% | {self.shed:,} | "
                f"{self.spurious_fences} | {self.start_load} |")

    def row(self) -> str:
        p50 = sorted(self.fleet_p50_ms)[len(self.fleet_p50_ms) // 2] if self.fleet_p50_ms else float("nan")
        p99 = max(self.fleet_p99_ms) if self.fleet_p99_ms else float("nan")
        return (f"| {self.controller} | {self.count:,} | {self.unfenced_after_s:.1f} s | {self.spurious_fences} | "
                f"{p50:.2f} / {p99:.2f} ms | {self.controller_p99_ms:.2f} / {self.controller_queue_p99_ms:.2f} ms | "
                f"{self.fleet_cpu * 100:.0f}% ({self.fleet_cpu * 1e6 / max(self.count, 1):.0f} µ-core/broker) | "
                f"{self.fleet_rss_mb:.0f} MiB ({self.fleet_rss_mb * 1024 / max(self.count, 1):.1f} KiB/broker) | "
                f"{self.controller_cpu * 100:.0f}%, {self.controller_rss_mb:.0f} MiB | {self.load} |")


START_HEADER = ("| controller | brokers | all unfenced after | fences during the start | controller CPU (start) "
                "| fleet CPU (start) | requests shed | spurious fences after (steady) | load avg |\n"
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
WARMUP_FIRST_ID = 100_001

HEADER = ("| controller | brokers | all unfenced after | spurious fences | heartbeat p50 / p99 (fleet, worst window) "
          "| controller event processing / queue p99 | fleet CPU | fleet RSS | controller CPU, RSS | load avg |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


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


def shed_count(kind: str, node: Any) -> int:
    """Requests the controller failed with a timeout instead of doing them late."""
    if kind == "kraftsim":
        text = urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/metrics", timeout=30).read().decode()
        m = re.search(r"^kafka_controller_kafkacontroller_eventqueueoperationstimedoutcount (\S+)$", text, re.M)
        return int(float(m.group(1))) if m else -1
    # QuorumController.handleEventException logs each at INFO ("event unable to start processing
    # because of TimeoutException").
    return node.log_path.read_text(errors="replace").count("because of TimeoutException")


def start_fleets(d: Path, node: Any, first: int, count: int, per_process: int, start_rate: float,
                 *extra: str) -> list[FleetProcess]:
    """``count`` brokers from id ``first``, over processes of at most ``per_process`` each, all
    started together at ``start_rate`` a second in all."""
    n = max(1, -(-count // per_process))
    fleets = []
    for i in range(n):
        lo, hi = first + count * i // n, first + count * (i + 1) // n
        fleets.append(FleetProcess(d / f"fleet-{first}-{i}", node.bootstrap, hi - lo, "--first-id", str(lo),
                                   "--cluster-id", node.cluster_id, "--status-interval", "5",
                                   "--start-rate", str(start_rate / n), *extra))
    return fleets


async def stop_fleets(fleets: list[FleetProcess]) -> list[int | None]:
    for f in fleets:
        f.signal(signal.SIGTERM)
    codes: list[int | None] = []
    for f in fleets:
        try:
            codes.append(await f.wait_exit(600))
        except AssertionError:
            codes.append(None)
    return codes


async def run_one(kind: str, count: int, duration: float, work: Path, start_rate: float,
                  per_process: int = 10_000, warmup: int = 0, cap: bool = False, tag: str = "",
                  shutdown: bool = True, start_timeout: float | None = None, warmup_rule: Rule | None = None) -> Result:
    res = Result(kind, count)
    d = work / f"{kind}-{count}{tag}"
    shutil.rmtree(d, ignore_errors=True)
    config = {"metadata.max.idle.interval.ms": "500"}
    node: Any
    if kind == "kafka":
        # Kafka's own defaults for its threads (the test harness runs fewer).
        node = KafkaNode(d / "controller", overrides={**config, "num.network.threads": "3", "num.io.threads": "8"},
                         jvm_opts=("-Xmx2g", "-Xms512m", "-XX:+UseG1GC", "-Djava.awt.headless=true"))
    else:
        node = KraftsimNode(d / "controller", cluster_id=random_cluster_id(), overrides=config)
    node.format()
    node.start(timeout=120)
    ctl_pid = node.proc.pid
    res.controller_fds = len(os.listdir(f"/proc/{ctl_pid}/fd"))  # before any broker (warm-up sockets linger)
    view = ClusterView(node.bootstrap, node.cluster_id).start()
    fleets: list[FleetProcess] = []
    try:
        if warmup:
            wids = range(WARMUP_FIRST_ID, WARMUP_FIRST_ID + warmup)
            warm = start_fleets(d, node, WARMUP_FIRST_ID, warmup, per_process, start_rate or 1000)
            try:
                await view.until(lambda img: len(view.unfenced(wids)) == warmup, 300, "the warm-up fleet unfenced")

                async def window(seconds: float) -> Window:
                    c0, t0 = cpu_seconds(ctl_pid), time.monotonic()
                    await asyncio.sleep(seconds)  # the window: the warm-up fleet heartbeats meanwhile
                    dt = time.monotonic() - t0
                    return Window(dt, warmup * dt / HEARTBEAT_INTERVAL_S, cpu_seconds(ctl_pid) - c0)

                st = await warm_up(window, warmup_rule or Rule(window_s=5.0))
                res.warmup = f"{st.summary()}; controller CPU per heartbeat by window: {st.trace()}"
                print(f"  {kind}: warm-up fleet of {warmup:,}: {res.warmup}", flush=True)
            finally:
                await stop_fleets(warm)
                for f in warm:
                    f.kill()
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        # Less the fleets' observers, this view, a margin; kraftsim's server keeps DESCRIPTOR_RESERVE
        # for its own files and closes connections past that at once (rpc/server.py).
        room = soft - res.controller_fds - 8 - (DESCRIPTOR_RESERVE if kind == "kraftsim" else 0)
        print(f"  {kind}: the controller holds {res.controller_fds} descriptors of {soft}: room for {room:,} brokers",
              flush=True)
        if cap and count > room:
            count = res.count = room
        ids = range(1, count + 1)
        start_offset = view.observer.applied_offset + 1
        c0, t0 = cpu_seconds(ctl_pid), time.monotonic()
        fleets = start_fleets(d, node, 1, count, per_process, start_rate)
        f0 = [cpu_seconds(f.proc.pid) for f in fleets]
        last_print = 0.0
        deadline = t0 + (start_timeout or max(600.0, count / (start_rate or count) * 10))
        while True:
            unfenced = len(view.unfenced(ids))
            now = time.monotonic()
            if unfenced == count:
                res.all_unfenced = True
                res.unfenced_after_s = now - t0
                break
            if now - last_print >= 10:
                last_print = now
                print(f"  {kind} {now - t0:5.0f} s: {unfenced:,} unfenced, {len(view.fenced(ids)):,} fenced, "
                      f"controller CPU {(cpu_seconds(ctl_pid) - c0) / (now - t0) * 100:.0f}%, "
                      f"load {open('/proc/loadavg').read().split()[0]}", flush=True)
            if now > deadline or any(f.proc.poll() is not None for f in fleets):
                print(f"  {kind} {count}: not all unfenced after {now - t0:.0f} s", flush=True)
                break
            await asyncio.sleep(0.2)
        t1 = time.monotonic()
        res.start_controller_cpu = (cpu_seconds(ctl_pid) - c0) / (t1 - t0)
        res.start_fleet_cpu = sum(cpu_seconds(f.proc.pid) - c for f, c in zip(fleets, f0, strict=True)) / (t1 - t0)
        res.start_load = open("/proc/loadavg").read().split()[0]
        res.start_fences = fences_since(node.metadata_dir, start_offset, ids)
        if not res.all_unfenced:
            res.shed = shed_count(kind, node)
            return res
        steady_offset = view.observer.applied_offset + 1
        marks = [len(f.output()) for f in fleets]
        c0, k0, t0 = sum(cpu_seconds(f.proc.pid) for f in fleets), cpu_seconds(ctl_pid), time.monotonic()
        await asyncio.sleep(duration)
        t1 = time.monotonic()
        res.fleet_cpu = (sum(cpu_seconds(f.proc.pid) for f in fleets) - c0) / (t1 - t0)
        res.controller_cpu = (cpu_seconds(ctl_pid) - k0) / (t1 - t0)
        res.fleet_rss_mb, res.controller_rss_mb = sum(rss_mb(f.proc.pid) for f in fleets), rss_mb(ctl_pid)
        for f, mark in zip(fleets, marks, strict=True):
            for m in re.finditer(r"heartbeat p50 ([0-9.]+) ms p99 ([0-9.]+) ms", f.output()[mark:]):
                res.fleet_p50_ms.append(float(m.group(1)))
                res.fleet_p99_ms.append(float(m.group(2)))
        if kind == "kraftsim":
            res.controller_p99_ms = event_p99_ms(node.http_port)
            res.controller_queue_p99_ms = event_p99_ms(node.http_port, "eventqueuetimems")
        res.spurious_fences = fences_since(node.metadata_dir, steady_offset, ids)
        res.shed = shed_count(kind, node)
        res.load = open("/proc/loadavg").read().split()[1]
        if shutdown:  # a controlled shutdown of every broker: minutes for a fleet of 20,000
            codes = await stop_fleets(fleets)
            res.exit_code = max((c for c in codes if c is not None), default=None) if None not in codes else None
            for f in fleets:
                hb = re.search(r"heartbeats (\d+)", f.output())
                res.heartbeats += int(hb.group(1)) if hb else 0
        return res
    finally:
        for f in fleets:
            f.kill()
        await view.stop()
        node.stop()


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=10_000)
    p.add_argument("--duration", type=float, default=300.0, help="steady phase, seconds")
    p.add_argument("--kafka", action="store_true", help="also against a real Kafka 3.9 controller")
    p.add_argument("--kafka-only", action="store_true")
    p.add_argument("--find-max", action="store_true")
    p.add_argument("--start-rate", type=float, default=200.0,
                   help="brokers started per second (default 200; 0: all at once; the warm-up at 1,000 then)")
    p.add_argument("--per-process", type=int, default=10_000, help="brokers per fleet process (default 10,000)")
    p.add_argument("--warmup", type=int, default=2000, help="warm-up brokers before measuring (default 2,000; 0: none)")
    p.add_argument("--warmup-tolerance", type=float, default=0.10,
                   help="the warm-up fleet heartbeats until the controller's CPU in the last 3 windows of 5 s is "
                        "within this (default 10%%)")
    p.add_argument("--warmup-max", type=float, default=120.0, help="seconds the warm-up fleet heartbeats at most")
    p.add_argument("--rounds", type=int, default=1, help="each controller this many times, in turn")
    p.add_argument("--cap", action="store_true", help="no more brokers than the controller has descriptors for")
    p.add_argument("--start-timeout", type=float, default=None,
                   help="seconds the start phase may take (default: 10x the start's pace, at least 600)")
    p.add_argument("--no-shutdown", action="store_true",
                   help="kill the measured fleet at the end rather than shut it down through controlled shutdown")
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
        for i in range(args.rounds):
            for kind in kinds:
                print(f"{kind}, round {i + 1}: {args.count:,} brokers at {args.start_rate:g}/s; "
                      f"load {open('/proc/loadavg').read().strip()}", flush=True)
                r = await run_one(kind, args.count, args.duration, work, args.start_rate, args.per_process,
                                  args.warmup, args.cap, f"-{i}", not args.no_shutdown, args.start_timeout,
                                  Rule(tolerance=args.warmup_tolerance, window_s=5.0, cap_s=args.warmup_max))
                results.append(r)
                print(r.start_row(), flush=True)
                print(r.row(), flush=True)
    print()
    print(START_HEADER)
    for r in results:
        print(r.start_row())
    print()
    print(HEADER)
    for r in results:
        print(r.row())
    for r in results:
        if r.warmup:
            print(f"warm-up, {r.controller} ({r.count:,}): {r.warmup}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())

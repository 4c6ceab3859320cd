"""Scale benchmark (run by hand): 30 brokers, then 1M partitions (10,000 topics x 100, RF 3)
created through CreateTopics against a ``kraftsim controller`` process; then the time from a
restart to an active controller (snapshot + log), and the controller's resident memory.

    .venv/bin/python benchmarks/scale.py [--topics 10000] [--partitions 100] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kraftsim.rpc import registry  # noqa: E402
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import KafkaClient  # noqa: E402
from tests import harness  # noqa: E402

BROKERS = 30
TOPICS_PER_REQUEST = 99  # 99 x 101 records fits Kafka's 10,000-record limit per request
CONNECTIONS = 2
IN_FLIGHT = 2


def rss_mib(pid: int) -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def register(port: int, cluster_id: str) -> None:
    reg = registry.request_class(ApiKey.BROKER_REGISTRATION)
    hb = registry.request_class(ApiKey.BROKER_HEARTBEAT)
    c = await KafkaClient.connect("127.0.0.1", port)
    for b in range(BROKERS):
        r = await c.request(reg(broker_id=b, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
                                listeners=[reg.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
                                features=[reg.Feature(name="metadata.version", min_supported_version=7,
                                                      max_supported_version=21)],
                                rack=f"rack-{b % 3}", log_dirs=[uuid.uuid4()]), 3)
        assert r.error_code == 0, r
        r = await c.request(hb(broker_id=b, broker_epoch=r.broker_epoch, current_metadata_offset=10**9), 1)
        assert not r.is_fenced
    await c.close()


async def create(port: int, topics: int, partitions: int) -> float:
    ct = registry.request_class(ApiKey.CREATE_TOPICS)
    names = [f"topic-{i:05d}" for i in range(topics)]
    chunks = [names[i:i + TOPICS_PER_REQUEST] for i in range(0, len(names), TOPICS_PER_REQUEST)]
    clients = [await KafkaClient.connect("127.0.0.1", port) for _ in range(CONNECTIONS)]
    queue: asyncio.Queue[list[str]] = asyncio.Queue()
    for ch in chunks:
        queue.put_nowait(ch)

    async def worker(c: KafkaClient) -> None:
        while not queue.empty():
            ch = queue.get_nowait()
            r = await c.request(ct(topics=[ct.CreatableTopic(name=n, num_partitions=partitions, replication_factor=3)
                                           for n in ch], timeout_ms=120_000), 7, timeout=300)
            bad = [t for t in r.topics if t.error_code]
            assert not bad, bad[:3]

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in clients for _ in range(IN_FLIGHT)))
    dt = time.perf_counter() - t0
    for c in clients:
        await c.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--dir", help="an empty directory to build in and keep (to profile restarts by hand: "
                                  "kraftsim controller DIR/<config>); default: a temporary one")
    args = ap.parse_args()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    total = args.topics * args.partitions
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(args.dir or d)
        tmp.mkdir(parents=True, exist_ok=True)
        port, http_port = harness.free_port(), harness.free_port()
        cfg = harness.write_config(tmp, port=port, http_port=http_port, **{
            "metadata_max_idle_interval_ms": "500", "broker_session_timeout_ms": "3600000"})
        cid = harness.format_dir(cfg)
        proc = harness.spawn_controller(cfg)
        try:
            harness.wait_http(http_port)
            asyncio.run(register(port, cid))
            dt = asyncio.run(create(port, args.topics, args.partitions))
            rss, peak = rss_mib(proc.pid)
            import json

            loaded_to = json.loads(harness.wait_http(http_port))["committedOffset"]
            snap_dir = tmp / "data" / "__cluster_metadata-0"

            def covering() -> bool:
                return any(int(p.name[:20]) > loaded_to for p in snap_dir.glob("*.checkpoint"))

            # A snapshot is due by bytes (20 MiB by default): whether one covers the very end
            # depends on where the last 20 MiB fell. Wait for one a while; the restart below
            # replays whatever the newest snapshot leaves in the log either way.
            t_snap = time.perf_counter()
            while not covering() and time.perf_counter() - t_snap < 30:
                time.sleep(0.2)  # polling with a deadline: the controller writes it in the background
            t_snap = time.perf_counter() - t_snap
            snapshot = (f"a snapshot covering everything on disk {t_snap:.1f} s later" if covering() else
                        "no snapshot covering the last records within 30 s (fewer than "
                        "metadata.log.max.record.bytes.between.snapshots since the last one)")
            print(f"created {args.topics:,} topics x {args.partitions} partitions (RF 3, {BROKERS} brokers) = "
                  f"{total:,} partitions in {dt:.1f} s ({total / dt:,.0f} partitions/s); "
                  f"controller RSS {rss:,.0f} MiB (peak {peak:,.0f} MiB); {snapshot}")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=120)
        snaps = sorted((tmp / "data" / "__cluster_metadata-0").glob("*.checkpoint"))
        log_mib = sum(p.stat().st_size for p in (tmp / "data" / "__cluster_metadata-0").glob("*.log")) / 2**20
        t0 = time.perf_counter()
        proc = harness.spawn_controller(cfg)
        try:
            harness.wait_http(http_port, timeout=600)
            dt = time.perf_counter() - t0
            rss, peak = rss_mib(proc.pid)
            print(f"restart to active: {dt:.1f} s (snapshots: {[p.name for p in snaps][-1:]}, log {log_mib:,.0f} MiB); "
                  f"RSS {rss:,.0f} MiB (peak {peak:,.0f} MiB); Kafka's KRaft preview: ~2M partitions in 37 s "
                  f"= {2_000_000 / 37:,.0f} partitions/s, here {total / dt:,.0f} partitions/s")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=120)


if __name__ == "__main__":
    main()

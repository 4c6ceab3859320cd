"""How long one request takes to be answered, and what it costs in memory (run by hand; docs/reliability.md).

Two kinds of request against a controller process with three unfenced brokers:
- small requests whose work would grow with a number in them (2^31-1 partitions): answered
  by arithmetic on the request, so their time should not depend on the number;
- large frames, up to socket.request.max.bytes, of many small topics (validateOnly): their
  time and memory grow with their size, which shows what one such client can cost the others.
  The time here includes this client's encoding and decoding of the frames; large_requests.py
  times the same frames from the first byte sent, beside Kafka 3.9.2 with ``--kafka``.

    .venv/bin/python benchmarks/bounded_work.py [--max-mib 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kraftsim.rpc.client import KafkaClient  # noqa: E402
from kraftsim.rpc.messages import CreateTopicsRequest  # noqa: E402
from tests import harness  # noqa: E402
from tests.hostile_clients import MIB, amplifying_requests, bystander, peak_rss_kib, reset_peak_rss  # noqa: E402
from tests.test_bounded_work import three_unfenced_brokers  # noqa: E402


def many_topics(size: int) -> CreateTopicsRequest:
    ct = CreateTopicsRequest
    n = size // 27  # about 27 bytes per topic of this shape at v7
    return ct(topics=[ct.CreatableTopic(name=f"t{i:09d}", num_partitions=1, replication_factor=1)
                      for i in range(n)], timeout_ms=600_000, validate_only=True)


async def timed(c: KafkaClient, pid: int, request: CreateTopicsRequest) -> tuple[float, float, int]:
    reset_peak_rss(pid)
    idle = peak_rss_kib(pid)
    t0 = time.perf_counter()
    r = await c.request(request, 7, timeout=600)
    took = time.perf_counter() - t0
    return took * 1000, (peak_rss_kib(pid) - idle) / 1024, len(r.topics)


async def run(port: int, pid: int, cluster_id: str, max_mib: int) -> None:
    await three_unfenced_brokers(port, cluster_id)
    await bystander("127.0.0.1", port, 20)
    c = await KafkaClient.connect("127.0.0.1", port, max_response_size=1 << 30)
    print(f"cpus={os.cpu_count()}")
    print("| request | answered in ms | peak RSS growth MiB |")
    print("|---|---:|---:|")
    for label, request, _ in amplifying_requests():
        ms, mib, _ = await timed(c, pid, request)
        print(f"| {label} | {ms:.1f} | {mib:.0f} |")
    size = 1
    while size <= max_mib:
        req = many_topics(size * MIB)
        ms, mib, n = await timed(c, pid, req)
        print(f"| CreateTopics validateOnly, {size} MiB frame ({n:,} topics) | {ms:.0f} | {mib:.0f} |")
        size *= 10
    await c.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-mib", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        port, http_port = harness.free_port(), harness.free_port()
        cfg = harness.write_config(Path(d), port=port, http_port=http_port)
        cid = harness.format_dir(cfg)
        proc = harness.spawn_controller(cfg)
        try:
            harness.wait_http(http_port)
            asyncio.run(run(port, proc.pid, cid, args.max_mib))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=60)


if __name__ == "__main__":
    main()

"""The bystander's latency while hostile clients are attached (run by hand; docs/reliability.md).

Starts a controller process, measures a well-behaved client (ApiVersions and CreateTopics
validateOnly, one at a time) alone, then again while 8 pipeliners that never read, 4 clients
that sent 99 MiB of a 100 MiB frame and 1,000 idle connections are attached.

    .venv/bin/python benchmarks/hostile.py [--requests 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import harness  # noqa: E402
from tests.hostile_clients import MIB, attach, bystander, rss_kib  # noqa: E402


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * p))] * 1000


async def run(port: int, pid: int, requests: int) -> None:
    alone = await bystander("127.0.0.1", port, requests)
    idle_rss = rss_kib(pid)
    h = await attach("127.0.0.1", port, idle=1000)
    try:
        await harness.poll_until(lambda: h.frames_sent >= 8 * 64 * 4, timeout=30)
        await harness.poll_until(lambda: max(h.half_sent) >= 98 * MIB, timeout=60)
        loaded = await bystander("127.0.0.1", port, requests)
        grown = (rss_kib(pid) - idle_rss) / 1024
    finally:
        await h.close()
    print(f"cpus={os.cpu_count()}, {requests} bystander requests each run")
    print(f"alone:          p50 {pct(alone, .5):.2f} ms, p99 {pct(alone, .99):.2f} ms")
    print(f"under hostiles: p50 {pct(loaded, .5):.2f} ms, p99 {pct(loaded, .99):.2f} ms "
          f"(8 non-reading pipeliners, 4 half-sent 100 MiB frames, 1,000 idle connections)")
    print(f"controller RSS growth under hostiles: {grown:.0f} MiB (queued.max.request.bytes 16 MiB)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        port, http_port = harness.free_port(), harness.free_port()
        cfg = harness.write_config(Path(d), port=port, http_port=http_port, queued_max_request_bytes=str(16 * MIB))
        harness.format_dir(cfg)
        proc = harness.spawn_controller(cfg)
        try:
            harness.wait_http(http_port)
            asyncio.run(run(port, proc.pid, args.requests))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()

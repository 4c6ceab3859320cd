"""Migration benchmark (run by hand): a ZooKeeper-mode cluster seeded by ``kraftsim zk seed``
(default 1,000 topics x 100 partitions, RF 3), then migrated by a ``kraftsim controller``
process: from the ZooKeeper-mode brokers' registration to ``/migration`` holding the copy's
offset. Reports the seed's znodes/s and the copy's znodes/s and records/s (the controller's own
``Completed migration`` line), and the end-to-end time (target: 60 s at 100k partitions).

    .venv/bin/python benchmarks/migration.py [--topics 1000] [--partitions 100]

Needs Debian's zookeeper package (and java) and the kazoo test extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kraftsim.rpc.client import KafkaClient  # noqa: E402
from tests import harness  # noqa: E402
from tests.test_controller import registration  # noqa: E402
from tests.zookeeper import ZooKeeper, missing  # noqa: E402

BROKERS = 3


async def register(port: int, cluster_id: str) -> None:
    client = await KafkaClient.connect("127.0.0.1", port, client_id="zk-brokers")
    try:
        for b in range(1, BROKERS + 1):
            reg = registration(b, cluster_id)
            reg.is_migrating_zk_broker = True
            r = await client.request(reg, 3)
            assert r.error_code == 0, r
    finally:
        await client.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=100)
    args = ap.parse_args()
    why = missing()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="kraftsim-migration-") as tmp:
        tmpdir = Path(tmp)
        zk = ZooKeeper(tmpdir / "zk")
        zk.start()
        proc = None
        try:
            t0 = time.monotonic()
            seeded = harness.kraftsim("zk", "seed", "--zookeeper", zk.connect, "--brokers", str(BROKERS),
                                      "--replication-factor", str(BROKERS), "--topics", str(args.topics),
                                      "--partitions", str(args.partitions), timeout=1800)
            seed_s = time.monotonic() - t0
            if seeded.returncode != 0:
                print(seeded.stderr, file=sys.stderr)
                return 1
            znodes = int(re.search(r"(\d+) znodes", seeded.stdout).group(1))  # type: ignore[union-attr]
            print(f"seed: {znodes} znodes in {seed_s:.1f} s ({znodes / seed_s:,.0f} znodes/s)")

            port, http = harness.free_port(), harness.free_port()
            config = harness.write_config(tmpdir, port=port, http_port=http, zookeeper_connect=zk.connect,
                                          zookeeper_metadata_migration_enable="true")
            cluster_id = harness.format_dir(config)
            proc = harness.spawn_controller(config)
            harness.wait_http(http)
            client = zk.client()
            t1 = time.monotonic()
            asyncio.run(register(port, cluster_id))
            deadline = time.monotonic() + 1800
            while True:
                stat = client.exists("/migration")  # type: ignore[attr-defined]
                if stat is not None and json.loads(client.get("/migration")[0])["kraft_metadata_offset"] > 0:  # type: ignore[attr-defined]
                    break
                if time.monotonic() > deadline or proc.poll() is not None:
                    print("the migration did not complete", file=sys.stderr)
                    print(harness.controller_output(config)[0][-3000:], file=sys.stderr)
                    return 1
                time.sleep(0.05)
            copy_s = time.monotonic() - t1
            out = harness.controller_output(config)[0]
            done = re.search(r"Completed migration of metadata from ZooKeeper to KRaft in (\d+) ms: (\d+) znodes "
                             r"read, (\d+) records in (\d+) batches", out)
            assert done is not None, out[-2000:]
            ms, read, records, batches = (int(g) for g in done.groups())
            print(f"copy: {read} znodes read, {records} records in {batches} batches, {ms / 1000:.1f} s "
                  f"({read / (ms / 1000):,.0f} znodes/s, {records / (ms / 1000):,.0f} records/s)")
            print(f"end to end (registration to /migration updated): {copy_s:.1f} s "
                  f"for {args.topics * args.partitions:,} partitions")
        finally:
            if proc is not None:
                harness.stop(proc)
            zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

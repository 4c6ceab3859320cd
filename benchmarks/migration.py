"""Migration benchmark (run by hand): a ZooKeeper-mode cluster seeded by ``kraftsim zk seed``
(default 1,000 topics x 100 partitions, RF 3), then migrated by a ``kraftsim controller``
process: from the ZooKeeper-mode brokers' registration to ``/migration`` holding the copy's
offset. Reports the seed's znodes/s and the copy's znodes/s and records/s (the controller's own
``Completed migration`` line), and the end-to-end time (target: 60 s at 100k partitions).

    .venv/bin/python benchmarks/migration.py [--topics 1000] [--partitions 100] [--kafka]

With ``--kafka``, the same shape is seeded again under a second chroot and migrated by a real
Kafka 3.9.2 KRaft controller (tests/kafka's harness), timed the same way.

Both copies are measured cold, and that is the honest measure here: a migration runs once, on
a controller started for it, so a warm-up would have to be some other workload (which would warm
other code), and every real migration by a Kafka controller runs while its JIT compiles the
copy's code. The benchmarks that measure a rate beside Kafka warm both sides up first
(benchmarks/steady.py); this one reports the cold copy on both sides.

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


def wait_copied(client: object, chroot: str, alive: object, timeout: float = 1800) -> bool:
    """Poll /migration until it holds the copy's offset (False if the controller died first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.exists(f"{chroot}/migration") is not None:  # type: ignore[attr-defined]
            data = client.get(f"{chroot}/migration")[0]  # type: ignore[attr-defined]
            if json.loads(data)["kraft_metadata_offset"] > 0:
                return True
        if not alive():  # type: ignore[operator]
            return False
        time.sleep(0.05)
    return False


def against_kafka(zk: ZooKeeper, tmpdir: Path, args: argparse.Namespace) -> None:
    """The same shape, migrated by a Kafka 3.9.2 controller (-Xmx2g)."""
    from tests.kafka.conftest import PAIR_CONFIG
    from tests.kafka.harness import KafkaNode, random_cluster_id

    client = zk.client()
    client.ensure_path("/kafka")  # type: ignore[attr-defined]
    seeded = harness.kraftsim("zk", "seed", "--zookeeper", zk.connect + "/kafka", "--brokers", str(BROKERS),
                              "--replication-factor", str(BROKERS), "--topics", str(args.topics),
                              "--partitions", str(args.partitions), timeout=1800)
    assert seeded.returncode == 0, seeded.stderr
    node = KafkaNode(tmpdir / "kafka", cluster_id=random_cluster_id(), jvm_opts=("-Xmx2g", "-Xms512m"),
                     overrides={**PAIR_CONFIG, "zookeeper.metadata.migration.enable": "true",
                                "zookeeper.connect": zk.connect + "/kafka"})
    node.format()
    node.start()
    try:
        port = int(node.bootstrap.rsplit(":", 1)[1])
        t1 = time.monotonic()
        asyncio.run(register(port, node.cluster_id))
        ok = wait_copied(client, "/kafka", lambda: node.running)
        copy_s = time.monotonic() - t1
    finally:
        node.stop()
    if not ok:
        print("Kafka: the migration did not complete", file=sys.stderr)
        return
    done = re.search(r"Completed migration of metadata from ZooKeeper to KRaft\. (\d+) records were generated in "
                     r"(\d+) ms across (\d+) batches", node.log_path.read_text(errors="replace"))
    if done:
        records, ms, batches = (int(g) for g in done.groups())
        print(f"Kafka copy: {records} records in {batches} batches, {ms / 1000:.1f} s "
              f"({records / (ms / 1000):,.0f} records/s)")
    print(f"Kafka end to end (registration to /migration updated): {copy_s:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--kafka", action="store_true", help="also migrate the same shape with a Kafka 3.9.2 controller")
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
            if not wait_copied(client, "", lambda: proc is not None and proc.poll() is None):
                print("the migration did not complete", file=sys.stderr)
                print(harness.controller_output(config)[0][-3000:], file=sys.stderr)
                return 1
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
            harness.stop(proc)
            proc = None
            if args.kafka:
                against_kafka(zk, tmpdir, args)
        finally:
            if proc is not None:
                harness.stop(proc)
            zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Migration benchmark (run by hand): a ZooKeeper-mode cluster seeded by ``kraftsim zk seed``
(default 1,000 topics x 100 partitions, RF 3), then migrated by a ``kraftsim controller``
process: from the ZooKeeper-mode brokers' registration to ``/migration`` holding the copy's
offset. Reports the seed's znodes/s and the copy's znodes/s and records/s (the controller's own
``Completed migration`` line), and the end-to-end time; the seeding is not timed with the copy.

    .venv/bin/python benchmarks/migration.py [--topics 1000] [--partitions 100] [--kafka]
        [--kafka-first] [--repeat N] [--py-spy FILE] [--zk-heap 2g]

With ``--kafka``, the same shape is seeded under a second chroot before either copy starts and
migrated by a real Kafka 3.9.2 KRaft controller (tests/kafka's harness), timed the same way;
``--kafka-first`` runs Kafka's copy first, and ``--repeat N`` copies N times each (the chroots
reset in between), alternating which side goes first, and prints the medians. Each copy
line carries the load average when it started. ``--py-spy FILE`` samples kraftsim's controller
during its copy (py-spy on PATH or beside this Python: ``pip install py-spy``) and prints the
functions where its time went. A million partitions (``--topics 10000``) needs ``--zk-heap 2g``
or more (two copies of 2 million znodes; 2g once left ZooKeeper unresponsive at a load average
of 8, 3g did not).

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
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from statistics import median

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


def seed(zk: ZooKeeper, chroot: str, args: argparse.Namespace) -> bytes:
    """``kraftsim zk seed`` under ``chroot`` (not part of any timed copy); returns the seeded
    /controller, which ``reset`` puts back."""
    client = zk.client()
    try:
        client.ensure_path(chroot)  # type: ignore[attr-defined]
    finally:
        client.stop()  # type: ignore[attr-defined]
        client.close()  # type: ignore[attr-defined]
    t0 = time.monotonic()
    seeded = harness.kraftsim("zk", "seed", "--zookeeper", zk.connect + chroot, "--brokers", str(BROKERS),
                              "--replication-factor", str(BROKERS), "--topics", str(args.topics),
                              "--partitions", str(args.partitions), timeout=3600)
    seed_s = time.monotonic() - t0
    if seeded.returncode != 0:
        raise SystemExit(f"seed failed: {seeded.stderr}")
    znodes = int(re.search(r"(\d+) znodes", seeded.stdout).group(1))  # type: ignore[union-attr]
    print(f"seed {chroot}: {znodes} znodes in {seed_s:.1f} s ({znodes / seed_s:,.0f} znodes/s)", flush=True)
    client = zk.client()
    try:
        return bytes(client.get(f"{chroot}/controller")[0])  # type: ignore[attr-defined]
    finally:
        client.stop()  # type: ignore[attr-defined]
        client.close()  # type: ignore[attr-defined]


def reset(zk: ZooKeeper, chroot: str, controller: bytes) -> None:
    """A migrated chroot as seeded again, for another copy: no /migration, the ZooKeeper-mode
    /controller back (a KRaft controller's would make the next one, in the same epoch, stop)."""
    client = zk.client()
    try:
        client.delete(f"{chroot}/migration")  # type: ignore[attr-defined]
        client.delete(f"{chroot}/controller")  # type: ignore[attr-defined]
        client.create(f"{chroot}/controller", controller)  # type: ignore[attr-defined]
    finally:
        client.stop()  # type: ignore[attr-defined]
        client.close()  # type: ignore[attr-defined]


def load() -> str:
    return "load average {:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())


def py_spy_binary() -> str:
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("--py-spy: no py-spy beside this Python nor on PATH (pip install py-spy)")
    return found


def top_functions(raw: Path, n: int = 25) -> None:
    """py-spy's collapsed stacks (``--threads``: each led by its thread) as the threads' shares
    and the functions holding the most samples, by themselves (self) and with what they call
    (total), lines folded into their function. A sample is a thread not idle in a system call:
    one waiting for the GIL counts where it waits."""
    threads: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        k = int(count)
        samples += k
        thread, *frames = stack.split(";")
        threads[re.sub(r"^thread \(\d+\): ", "", thread)] += k
        frames = [re.sub(r":\d+\)$", ")", f) for f in frames] or ["(no Python frame)"]
        own[frames[-1]] += k
        for f in set(frames):
            total[f] += k
    print(f"py-spy: {samples} samples of kraftsim's controller during the copy")
    for title, table in (("thread", threads), ("self", own), ("total", total)):
        print(f"  by {title}:")
        for f, k in table.most_common(n):
            print(f"    {100 * k / samples:5.1f}%  {f}")


def start_controller(tmpdir: Path, connect: str) -> tuple[int, Path, str, subprocess.Popen[str]]:
    """A formatted kraftsim controller with migration on, serving: (port, config, cluster id,
    process). Other sessions on the machine hand out ports from the same range as
    ``harness.free_port``: one already taken is tried again with others."""
    for attempt in range(5):
        directory = tmpdir / f"try-{attempt}"
        directory.mkdir(parents=True)
        port, http = harness.free_port(), harness.free_port()
        config = harness.write_config(directory, port=port, http_port=http, zookeeper_connect=connect,
                                      zookeeper_metadata_migration_enable="true")
        cluster_id = harness.format_dir(config)
        proc = harness.spawn_controller(config)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                harness.wait_http(http, timeout=0.5)
                return port, config, cluster_id, proc
            except AssertionError:
                continue
        harness.stop(proc)
        err = harness.controller_output(config)[1]
        if "address already in use" not in err:
            raise SystemExit(f"the controller did not start: {err[-2000:]}")
    raise SystemExit("no free ports for the controller")


def run_kraftsim(zk: ZooKeeper, tmpdir: Path, args: argparse.Namespace) -> tuple[float, float]:
    """One copy by a fresh kraftsim controller: (the copy's own time, end to end), seconds."""
    chroot = "/kraftsim"
    port, config, cluster_id, proc = start_controller(tmpdir, zk.connect + chroot)
    client = zk.client()
    spy = None
    try:
        if args.py_spy:
            spy = subprocess.Popen([py_spy_binary(), "record", "--pid", str(proc.pid), "--format", "raw",
                                    "--output", args.py_spy, "--rate", "200", "--nonblocking", "--threads"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"kraftsim: {load()}", flush=True)
        t1 = time.monotonic()
        asyncio.run(register(port, cluster_id))
        ok = wait_copied(client, chroot, lambda: proc.poll() is None)
        copy_s = time.monotonic() - t1
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        if not ok:
            print("the migration did not complete", file=sys.stderr)
            print(harness.controller_output(config)[0][-3000:], file=sys.stderr)
            raise SystemExit(1)
        completed = re.compile(r"Completed migration of metadata from ZooKeeper to KRaft in (\d+) ms: (\d+) znodes "
                               r"read, (\d+) records in (\d+) batches")
        deadline = time.monotonic() + 30  # the controller logs the line just after it writes /migration
        while (done := completed.search(out := harness.controller_output(config)[0])) is None:
            assert time.monotonic() < deadline, out[-2000:]
            time.sleep(0.05)
        ms, read, records, batches = (int(g) for g in done.groups())
        print(f"kraftsim copy: {read} znodes read, {records} records in {batches} batches, {ms / 1000:.1f} s "
              f"({read / (ms / 1000):,.0f} znodes/s, {records / (ms / 1000):,.0f} records/s)")
        waited = re.search(r"The copy waited (\d+) ms for reads from ZooKeeper and (\d+) ms for its batches to commit",
                           out)
        if waited is not None:
            print(f"kraftsim copy waited {int(waited.group(1)) / 1000:.1f} s for ZooKeeper reads and "
                  f"{int(waited.group(2)) / 1000:.1f} s for commits ({int(waited.group(2)) / batches:.1f} ms a batch)")
        print(f"kraftsim end to end (registration to /migration updated): {copy_s:.1f} s "
              f"for {args.topics * args.partitions:,} partitions", flush=True)
        if spy is not None:
            top_functions(Path(args.py_spy))
        return ms / 1000, copy_s
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
            spy.wait()
        client.stop()  # type: ignore[attr-defined]
        client.close()  # type: ignore[attr-defined]
        harness.stop(proc)


def run_kafka(zk: ZooKeeper, tmpdir: Path, args: argparse.Namespace) -> tuple[float, float]:
    """The same shape, migrated by a Kafka 3.9.2 controller (-Xmx2g, or --kafka-heap)."""
    from tests.kafka.conftest import PAIR_CONFIG
    from tests.kafka.harness import KafkaNode, random_cluster_id

    client = zk.client()
    node = KafkaNode(tmpdir / "kafka", cluster_id=random_cluster_id(), jvm_opts=(f"-Xmx{args.kafka_heap}", "-Xms512m"),
                     overrides={**PAIR_CONFIG, "zookeeper.metadata.migration.enable": "true",
                                "zookeeper.connect": zk.connect + "/kafka"})
    node.format()
    node.start()
    try:
        port = int(node.bootstrap.rsplit(":", 1)[1])
        print(f"Kafka: {load()}", flush=True)
        t1 = time.monotonic()
        asyncio.run(register(port, node.cluster_id))
        ok = wait_copied(client, "/kafka", lambda: node.running)
        copy_s = time.monotonic() - t1
    finally:
        node.stop()
        client.stop()  # type: ignore[attr-defined]
        client.close()  # type: ignore[attr-defined]
    if not ok:
        raise SystemExit("Kafka: the migration did not complete")
    done = re.search(r"Completed migration of metadata from ZooKeeper to KRaft\. (\d+) records were generated in "
                     r"(\d+) ms across (\d+) batches", node.log_path.read_text(errors="replace"))
    assert done is not None
    records, ms, batches = (int(g) for g in done.groups())
    print(f"Kafka copy: {records} records in {batches} batches, {ms / 1000:.1f} s "
          f"({records / (ms / 1000):,.0f} records/s)")
    print(f"Kafka end to end (registration to /migration updated): {copy_s:.1f} s", flush=True)
    return ms / 1000, copy_s


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--kafka", action="store_true", help="also migrate the same shape with a Kafka 3.9.2 controller")
    ap.add_argument("--kafka-first", action="store_true", help="with --kafka: Kafka's copy runs first")
    ap.add_argument("--kafka-heap", default="2g", help="the Kafka controller's -Xmx")
    ap.add_argument("--zk-heap", default="512m", help="ZooKeeper's -Xmx")
    ap.add_argument("--py-spy", metavar="FILE", help="sample kraftsim's controller during its (first) copy into FILE")
    ap.add_argument("--repeat", type=int, default=1, help="copies per side, alternating which goes first")
    args = ap.parse_args()
    why = missing()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="kraftsim-migration-") as tmp:
        tmpdir = Path(tmp)
        zk = ZooKeeper(tmpdir / "zk", heap=args.zk_heap)
        zk.start()
        try:
            seeded = {"/kraftsim": seed(zk, "/kraftsim", args)}
            if args.kafka:
                seeded["/kafka"] = seed(zk, "/kafka", args)
            times: dict[str, list[tuple[float, float]]] = {"kraftsim": [], "Kafka": []}
            for i in range(args.repeat):
                sides = ["kraftsim", "Kafka"] if args.kafka else ["kraftsim"]
                if args.kafka_first != (i % 2 == 1):
                    sides.reverse()
                for side in sides:
                    chroot = "/kraftsim" if side == "kraftsim" else "/kafka"
                    if i > 0:
                        reset(zk, chroot, seeded[chroot])
                    run = run_kraftsim if side == "kraftsim" else run_kafka
                    times[side].append(run(zk, tmpdir / f"{side}-{i}", args))
                    args.py_spy = None  # one profile
            if args.repeat > 1 or args.kafka:
                print(f"\n{args.topics * args.partitions:,} partitions, {args.repeat} run(s) each "
                      f"(copy / end to end, seconds; median):")
                for side, runs in times.items():
                    if runs:
                        copies = ", ".join(f"{c:.1f}/{e:.1f}" for c, e in runs)
                        print(f"  {side:8} {copies}   median {median(c for c, _ in runs):.1f}/"
                              f"{median(e for _, e in runs):.1f}")
                if times["Kafka"]:
                    k = median(e for _, e in times["Kafka"])
                    ours = median(e for _, e in times["kraftsim"])
                    print(f"  end to end, kraftsim / Kafka: {ours / k:.2f}")
        finally:
            zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

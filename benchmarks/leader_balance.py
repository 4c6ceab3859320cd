"""The leader balancer's runs at a million partitions (run by hand).

An image of 1M partitions (10,000 topics x 100, RF 3, three brokers, leaders spread), replayed
in-process from records; then the balancing run (``LeaderElectionManager.balance_partition_leaders``,
the work of one ``maybeBalancePartitionLeaders`` event on the controller's event loop) timed in
the cases that matter:

- balanced: nothing to look at;
- broker 3 fenced: its third of the partitions are imbalanced and their preferred replica is
  out of the ISR, so every run looks at all of them and elects nothing (the run Kafka repeats
  every check interval while a broker is down);
- broker 3 back in every ISR: the same partitions, each run elects the capped 1000;
- the whole sequence of capped runs until balanced, replayed as the controller would.

    .venv/bin/python benchmarks/leader_balance.py [--topics 10000] [--partitions 100]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kraftsim.controller.configs.server_config import Config  # noqa: E402
from kraftsim.controller.context import ControllerContext  # noqa: E402
from kraftsim.controller.managers.cluster import ClusterControlManager  # noqa: E402
from kraftsim.controller.managers.elections import LeaderElectionManager  # noqa: E402
from kraftsim.metadata.image.image import MetadataImage  # noqa: E402
from kraftsim.metadata.messages import (  # noqa: E402
    BrokerRegistrationChangeRecord,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from kraftsim.rpc.clock import ManualClock  # noqa: E402

BROKERS = (1, 2, 3)


class Image:
    def __init__(self) -> None:
        self.image = MetadataImage()
        self.offset = 0

    def replay(self, record: object) -> None:
        self.image.replay(record, self.offset)
        self.offset += 1


def build(topics: int, partitions: int) -> tuple[Image, LeaderElectionManager]:
    img = Image()
    img.replay(FeatureLevelRecord(name="metadata.version", feature_level=21))
    dirs = {b: uuid.uuid4() for b in BROKERS}
    for b in BROKERS:
        img.replay(RegisterBrokerRecord(broker_id=b, broker_epoch=b, incarnation_id=uuid.uuid4(), fenced=True,
                                        log_dirs=[dirs[b]]))
        img.replay(BrokerRegistrationChangeRecord(broker_id=b, broker_epoch=b, fenced=-1))
    n = len(BROKERS)
    for t in range(topics):
        tid = uuid.uuid4()
        img.replay(TopicRecord(name=f"topic-{t:05d}", topic_id=tid))
        for p in range(partitions):
            replicas = [BROKERS[(t + p + i) % n] for i in range(n)]
            img.replay(PartitionRecord(partition_id=p, topic_id=tid, replicas=replicas, isr=replicas,
                                       leader=replicas[0], directories=[dirs[r] for r in replicas]))
    raw = {"process.roles": "controller", "node.id": "3000", "controller.quorum.voters": "3000@127.0.0.1:9093"}
    ctx = ControllerContext(image=img.image, config=Config(raw), clock=ManualClock(), node_id=3000, cluster_id="c")
    return img, LeaderElectionManager(ctx, ClusterControlManager(ctx))


def timed(elections: LeaderElectionManager, repeat: int = 5) -> tuple[float, int]:
    """The best of ``repeat`` runs (nothing is replayed in between: each finds the same), so a
    busy machine's pauses show less."""
    best, n = float("inf"), 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = elections.balance_partition_leaders()
        best = min(best, (time.perf_counter() - t0) * 1000)
        n = len(result.records)
    return best, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=100)
    args = ap.parse_args()
    t0 = time.perf_counter()
    img, elections = build(args.topics, args.partitions)
    topics = img.image.topics
    print(f"cpus={os.cpu_count()} load={os.getloadavg()[0]:.1f}; {topics.partition_count:,} partitions "
          f"replayed in {time.perf_counter() - t0:.0f} s")
    print("| case | imbalanced | records | run ms (best of 5) |")
    print("|---|---:|---:|---:|")

    def row(label: str) -> None:
        ms, n = timed(elections)
        print(f"| {label} | {topics.preferred_replica_imbalance_count:,} | {n:,} | {ms:.1f} |")

    row("balanced")
    # Broker 3 is fenced: out of every ISR, its leaderships to the next replica in the ISR.
    for t, pid, p in list(topics.partitions_with_isr_member(3)):
        isr = [b for b in p.isr if b != 3]
        img.replay(PartitionChangeRecord(topic_id=t.id, partition_id=pid, isr=isr,
                                         leader=isr[0] if p.leader == 3 else -2))
    img.replay(BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=3, fenced=1))
    row("broker 3 fenced (nothing electable)")
    img.replay(BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=3, fenced=-1))
    row("broker 3 unfenced, out of the ISRs")
    for t, pid, p in list(topics.imbalanced_partitions()):
        img.replay(PartitionChangeRecord(topic_id=t.id, partition_id=pid, isr=[*p.isr, 3]))
    row("broker 3 back in every ISR (capped)")
    runs, total_ms, t0 = 0, 0.0, time.perf_counter()
    while True:
        start = time.perf_counter()
        result = elections.balance_partition_leaders()
        total_ms += (time.perf_counter() - start) * 1000
        runs += 1
        for record, _ in result.records:
            img.replay(record)
        if not result.response:
            break
    print(f"\nuntil balanced: {runs} runs, {total_ms:.0f} ms electing ({total_ms / runs:.1f} ms a run), "
          f"{(time.perf_counter() - t0):.0f} s with replay; imbalanced left: {topics.preferred_replica_imbalance_count}")


if __name__ == "__main__":
    main()

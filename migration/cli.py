"""``kraftsim zk seed``: a ZooKeeper-mode cluster for migration rehearsals and benchmarks."""

from __future__ import annotations

import argparse
import time


def _seed(args: argparse.Namespace) -> int:
    from kraftsim.controller.cli import CommandError
    from kraftsim.migration.seed import SeedError, SeedSpec, seed
    from kraftsim.migration.zk_client import ZkSession, ZooKeeperUnavailableError

    spec = SeedSpec(brokers=args.brokers, topics=args.topics, partitions=args.partitions,
                    replication_factor=args.replication_factor, users=args.users, topic_prefix=args.topic_prefix,
                    first_broker_id=args.first_broker_id)
    try:
        spec.check()
    except ValueError as e:
        raise CommandError(f"kraftsim zk seed: {e}") from e
    try:
        session = ZkSession.connect(args.zookeeper, int(args.timeout * 1000))
    except ZooKeeperUnavailableError as e:
        raise CommandError(f"kraftsim zk seed: {e}") from e
    started = time.monotonic()
    try:
        count = seed(session.client, spec, int(time.time() * 1000))
    except SeedError as e:
        raise CommandError(f"kraftsim zk seed: {e}") from e
    finally:
        session.close()
    elapsed = time.monotonic() - started
    print(f"seeded {args.zookeeper}: {spec.brokers} brokers, {spec.topics} topics x {spec.partitions} partitions "
          f"(RF {spec.replication_factor}), {spec.users} SCRAM users; {count} znodes in {elapsed:.1f} s")
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from kraftsim.controller.cli import _Parser

    zk = subparsers.add_parser("zk", help="ZooKeeper tools for migration rehearsals")
    zk_sub = zk.add_subparsers(dest="zk_command", required=True, parser_class=_Parser)
    s = zk_sub.add_parser("seed", help="write a ZooKeeper-mode cluster into ZooKeeper, in Kafka's layout",
                          description="Brokers, topics (ids, assignments, partition states, configs), broker "
                                      "configs, client quotas, SCRAM users, ACLs, the producer id block and "
                                      "/controller_epoch, into an empty ZooKeeper.")
    s.add_argument("--zookeeper", required=True, metavar="HOST:PORT", help="the ZooKeeper connect string")
    s.add_argument("--brokers", type=int, default=3, metavar="N", help="registered brokers (default 3)")
    s.add_argument("--first-broker-id", type=int, default=1, metavar="ID", help="the first broker id (default 1)")
    s.add_argument("--topics", type=int, default=10, metavar="N", help="topics (default 10)")
    s.add_argument("--partitions", type=int, default=3, metavar="N", help="partitions per topic (default 3)")
    s.add_argument("--replication-factor", type=int, default=2, metavar="N", help="replicas per partition (default 2)")
    s.add_argument("--users", type=int, default=2, metavar="N",
                   help="users with SCRAM credentials, quotas and ACLs (default 2)")
    s.add_argument("--topic-prefix", default="topic-", metavar="PREFIX", help="topic names (default topic-N)")
    s.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS", help="to connect (default 15)")
    s.set_defaults(func=_seed)
    return zk

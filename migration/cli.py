"""``kraftsim zk seed`` (a ZooKeeper-mode cluster for migration rehearsals and benchmarks) and
``kraftsim migration status``."""

from __future__ import annotations

import argparse
import time

from kraftsim.cli.common import CommandError, Parser


def _seed(args: argparse.Namespace) -> int:
    from kraftsim.migration.seed import SeedError, SeedSpec, seed
    from kraftsim.migration.zk_client import ZkSession, ZooKeeperUnavailableError

    spec = SeedSpec(brokers=args.brokers, topics=args.topics, partitions=args.partitions,
                    replication_factor=args.replication_factor, users=args.users, topic_prefix=args.topic_prefix,
                    first_broker_id=args.first_broker_id, cluster_id=args.cluster_id)
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


def _status(args: argparse.Namespace) -> int:
    import json
    import urllib.error
    import urllib.request

    url = f"http://{args.http}/migration"
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as r:
            doc = json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise CommandError(f"kraftsim migration status: cannot read {url}: {getattr(e, 'reason', e)}") from e
    if args.json:
        print(json.dumps(doc))
        return 0
    if not doc.get("enabled"):
        print(f"ZkMigrationState: {doc.get('zkMigrationState')} (zookeeper.metadata.migration.enable is off)")
        return 0
    m = doc["migration"]
    lines = [f"ZkMigrationState: {doc['zkMigrationState']}", f"DriverState: {doc['driverState']}"]
    if doc.get("waitingFor"):
        lines.append(f"WaitingFor: {doc['waitingFor']}")
    if doc.get("stopped"):
        lines.append(f"Stopped: {doc['stopped']}")
    lines += [f"/migration: kraft_controller_id={m['kraft_controller_id']} "
              f"kraft_controller_epoch={m['kraft_controller_epoch']} kraft_metadata_offset={m['kraft_metadata_offset']} "
              f"kraft_metadata_epoch={m['kraft_metadata_epoch']} (zkVersion {doc['migrationZkVersion']})",
              f"ZkControllerEpoch: {doc['zkControllerEpoch']}",
              f"LastCommittedOffset: {doc['lastCommittedOffset']}", f"ZkWriteBehindLag: {doc['zkWriteBehindLag']}"]
    if doc.get("copy"):
        lines.append(f"Copy: {doc['copy']}")
    for b, st in sorted((doc.get("brokerChannels") or {}).items(), key=lambda kv: int(kv[0])):
        lines.append(f"Broker {b}: sent {st['sent']} requests ({st['errors']} answered with errors), "
                     f"{st['queued']} queued, {st['dropped']} dropped, {st['retries']} attempts retried")
    print("\n".join(lines))
    return 0


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    zk = subparsers.add_parser("zk", help="ZooKeeper tools for migration rehearsals")
    zk_sub = zk.add_subparsers(dest="zk_command", required=True, parser_class=Parser)
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
    s.add_argument("--cluster-id", metavar="ID",
                   help="write /cluster/id: the id to format the KRaft controller with (kraftsim random-uuid)")
    s.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS", help="to connect (default 15)")
    s.set_defaults(func=_seed)

    m = subparsers.add_parser("migration", help="the ZooKeeper migration on a running controller")
    m_sub = m.add_subparsers(dest="migration_command", required=True, parser_class=Parser)
    st = m_sub.add_parser("status", help="the migration driver's state, /migration and the write-behind lag",
                          description="Read from the controller's HTTP endpoint (kraftsim.http.listen): no Kafka "
                                      "RPC carries the driver's state.")
    st.add_argument("--http", default="127.0.0.1:9464", metavar="HOST:PORT",
                    help="the controller's kraftsim.http.listen (default 127.0.0.1:9464)")
    st.add_argument("--json", action="store_true", help="the JSON document as the controller serves it")
    st.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS")
    st.set_defaults(func=_status)
    return zk

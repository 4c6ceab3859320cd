"""The ZooKeeper-to-KRaft migration rehearsed end to end on real parts, as an operator runs it.

A real ZooKeeper and three real Kafka 3.9 brokers in ZooKeeper mode make the cluster; Kafka's
own tools fill it (topics with configs, client quotas, SCRAM users, ACLs) and an idempotent
producer writes messages. The brokers are rolled with the migration configs, kraftsim is started
as the KRaft controller with migration on, and it copies ZooKeeper into its log and dual-writes;
the brokers are rolled again, to KRaft mode, and the messages are consumed; kraftsim is
restarted without the flag and finalizes.

Each step is a method of :class:`Rehearsal`, so that ``tests/kafka/test_migration_rehearsal.py``
asserts on it and ``make run-migration`` (``python -m tests.kafka.rehearsal``) plays it for
anyone to watch, printing what each step saw.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.kafka.harness import KafkaNode, KraftsimNode, kraftsim_cli, run_tools
from tests.zookeeper import ZooKeeper

T = TypeVar("T")
BROKER_IDS = (1, 2, 3)
TOPICS = [f"orders-{i}" for i in range(20)]
MESSAGE_TOPICS = TOPICS[:3]
MESSAGES = 200  # per topic
CONTROLLER_ID = 3000
TOPIC_TOOL = "org.apache.kafka.tools.TopicCommand"
CONFIG_TOOL = "kafka.admin.ConfigCommand"
ACL_TOOL = "kafka.admin.AclCommand"


def until(what: str, probe: Callable[[], T | None], timeout: float = 90, every: float = 0.2) -> T:
    """Poll ``probe`` until it returns something truthy, with a deadline (a probe that raises is
    not there yet: the cluster moves under it)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except Exception as e:  # noqa: BLE001 - a client may fail while the cluster moves
            last = e
        if last and not isinstance(last, Exception):
            return last  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")
        time.sleep(every)  # the poll's pace; the loop waits on the probe


class ZkModeBroker(KafkaNode):
    """A real Kafka 3.9 broker in ZooKeeper mode (no process.roles), with Kafka's ZooKeeper-era
    authorizer; ANONYMOUS (the PLAINTEXT principal of the tools and clients) is a super user."""

    def properties(self) -> dict[str, str]:
        return {
            "broker.id": str(self.node_id), "zookeeper.connect": self.overrides["zookeeper.connect"],
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": str(self.data_dir),
            "offsets.topic.replication.factor": "1", "num.network.threads": "2", "num.io.threads": "2",
            "background.threads": "2", "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS", "group.initial.rebalance.delay.ms": "0",
            "inter.broker.protocol.version": "3.9",
        }

    def ready_lines(self) -> list[str]:
        return ["started (kafka.server.KafkaServer)"]


class MigratingZkBroker(ZkModeBroker):
    """The same broker rolled with the migration configs: it registers with the KRaft controller
    (IsMigratingZkBroker) and keeps ZooKeeper for its metadata until the controller drives it."""

    controller: str = ""

    def properties(self) -> dict[str, str]:
        props = super().properties()
        props.update({"zookeeper.metadata.migration.enable": "true",
                      "controller.quorum.voters": f"{CONTROLLER_ID}@{self.controller}",
                      "controller.listener.names": "CONTROLLER",
                      "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                      # Under a KRaft controller a ZooKeeper-mode broker's ControlledShutdown finds no
                      # ZooKeeper controller and is retried, 5 s apart by default, before the broker
                      # goes on with its shutdown: the rehearsal retries sooner.
                      "controlled.shutdown.retry.backoff.ms": "200"})
        return props


class Rehearsal:
    """One rehearsal's parts: ZooKeeper (under a chroot), the brokers (the same ids, ports and
    log directories in each of their three lives) and the kraftsim controller."""

    def __init__(self, directory: Path, zookeeper: ZooKeeper, chroot: str = "/rehearsal",
                 say: Callable[[str], None] = lambda line: None) -> None:
        self.directory = directory
        self.chroot = chroot
        self.connect = zookeeper.connect + chroot
        self.zk: Any = zookeeper.client()
        self.zk.ensure_path(chroot)
        self.say = say
        self.brokers: dict[int, KafkaNode] = {
            b: ZkModeBroker(directory / f"broker-{b}", role="broker", node_id=b, voters="-",
                            overrides={"zookeeper.connect": self.connect}) for b in BROKER_IDS}
        self.controller: KraftsimNode | None = None
        self.sent: dict[str, list[str]] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def close(self) -> None:
        for b in self.brokers.values():
            b.stop()
        if self.controller is not None:
            self.controller.stop()
        self.zk.stop()
        self.zk.close()

    # ---- ZooKeeper -------------------------------------------------------------------------
    def znode(self, path: str) -> Any:
        return json.loads(self.zk.get(self.chroot + path)[0])

    def exists(self, path: str) -> bool:
        return self.zk.exists(self.chroot + path) is not None

    def cluster_id(self) -> str:
        return str(self.znode("/cluster/id")["id"])

    def partition_states(self) -> dict[tuple[str, int], Any]:
        out = {}
        for t in self.zk.get_children(f"{self.chroot}/brokers/topics"):
            for p in self.zk.get_children(f"{self.chroot}/brokers/topics/{t}/partitions"):
                out[(t, int(p))] = self.znode(f"/brokers/topics/{t}/partitions/{p}/state")
        return out

    def in_sync(self) -> bool:
        """Every partition led, with its whole assignment in sync: the cluster after a roll."""
        states = self.partition_states()
        for (t, p), state in states.items():
            replicas = self.znode(f"/brokers/topics/{t}")["partitions"][str(p)]
            if state["leader"] < 0 or sorted(state["isr"]) != sorted(replicas):
                return False
        return bool(states)

    # ---- step 1: the ZooKeeper-mode cluster ----------------------------------------------
    def start_zk_cluster(self) -> None:
        for b in self.brokers.values():
            b.start(wait=False)
        for b in self.brokers.values():
            b.wait_ready(180)
        ids = until("three brokers in /brokers/ids",
                    lambda: (ids := sorted(int(i) for i in self.zk.get_children(f"{self.chroot}/brokers/ids")))
                    == list(BROKER_IDS) and ids)
        self.say(f"ZooKeeper-mode cluster {self.cluster_id()}: brokers {ids}, controller "
                 f"{self.znode('/controller')['brokerid']}")

    def fill(self) -> None:
        """Kafka's tools fill the cluster (in a warm JVM: ``tool_server``)."""
        bs = ("--bootstrap-server", self.brokers[1].bootstrap)
        commands: list[tuple[str, ...]] = []
        for i, t in enumerate(TOPICS):
            extra = ("--config", f"retention.ms={3_600_000 + i}") if i % 2 else ()
            commands.append((TOPIC_TOOL, *bs, "--create", "--topic", t, "--partitions", "2",
                             "--replication-factor", "3", *extra))
        alter = (CONFIG_TOOL, *bs, "--alter")
        commands += [
            (*alter, "--entity-type", "topics", "--entity-name", TOPICS[0], "--add-config",
             "cleanup.policy=compact,segment.ms=100000"),
            (*alter, "--entity-type", "brokers", "--entity-default", "--add-config", "log.cleaner.threads=2"),
            (*alter, "--entity-type", "brokers", "--entity-name", "1", "--add-config",
             "log.cleaner.io.buffer.size=1048576"),
            (*alter, "--entity-type", "users", "--entity-name", "alice", "--add-config", "producer_byte_rate=1048576"),
            (*alter, "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
             "--entity-name", "app", "--add-config", "request_percentage=50"),
            (*alter, "--entity-type", "clients", "--entity-default", "--add-config", "consumer_byte_rate=2097152"),
            (*alter, "--entity-type", "ips", "--entity-name", "127.0.0.2", "--add-config",
             "connection_creation_rate=10"),
            (*alter, "--entity-type", "users", "--entity-name", "alice", "--add-config",
             "SCRAM-SHA-256=[iterations=8192,password=alice-secret]"),
            (*alter, "--entity-type", "users", "--entity-name", "bob", "--add-config",
             "SCRAM-SHA-512=[password=bob-secret]"),
            (ACL_TOOL, *bs, "--add", "--allow-principal", "User:alice", "--operation", "Read",
             "--operation", "Describe", "--topic", TOPICS[1]),
            (ACL_TOOL, *bs, "--add", "--allow-principal", "User:bob", "--operation", "Read", "--group", "g-",
             "--resource-pattern-type", "prefixed"),
            (ACL_TOOL, *bs, "--add", "--deny-principal", "User:eve", "--operation", "All", "--cluster"),
        ]
        results = run_tools(commands)
        failed = [(c, r.stdout, r.stderr[-2000:]) for c, r in zip(commands, results, strict=True) if r.returncode != 0]
        assert not failed, f"tools failed: {failed[:3]}"
        self.say(f"Kafka's tools ran {len(commands)} commands: {len(TOPICS)} topics, configs, quotas, "
                 "SCRAM users, ACLs")

    def produce(self) -> None:
        """An idempotent producer (acks=all) writes to three topics; what was acknowledged is kept
        to be consumed after the migration."""
        import confluent_kafka as ck

        errors: list[str] = []
        p = ck.Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 60_000})

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                self.sent.setdefault(msg.topic(), []).append(msg.value().decode())
            else:
                errors.append(str(err))

        for t in MESSAGE_TOPICS:
            for i in range(MESSAGES):
                p.produce(t, value=f"{t}-{i}".encode(), key=str(i).encode(), on_delivery=delivered)
            p.poll(0)
        assert p.flush(90) == 0, "messages still in flight after 90 s"
        assert not errors, errors[:3]
        self.say(f"produced {sum(map(len, self.sent.values()))} messages to {', '.join(MESSAGE_TOPICS)}")

    # ---- step 2: migrate -----------------------------------------------------------------
    def start_controller(self, overrides: dict[str, str] | None = None) -> KraftsimNode:
        s = KraftsimNode(self.directory / "kraftsim", node_id=CONTROLLER_ID, cluster_id=self.cluster_id(),
                         overrides={"zookeeper.metadata.migration.enable": "true", "zookeeper.connect": self.connect,
                                    **(overrides or {})})
        s.format()
        s.start()
        self.controller = s
        self.say(f"kraftsim controller {s.bootstrap} started with migration on: {self.migration_state()}")
        return s

    def roll(self, make: Callable[[KafkaNode], KafkaNode], what: str) -> None:
        """Restart each broker in turn as ``make`` builds it (same id, port and log directory),
        waiting for each to be up before the next goes down."""
        for b in BROKER_IDS:
            t0 = time.monotonic()
            self.brokers[b].stop(timeout=120)
            t1 = time.monotonic()
            self.brokers[b] = make(self.brokers[b])
            self.brokers[b].start(timeout=180)
            self.say(f"broker {b} rolled {what}: stopped in {t1 - t0:.1f} s, up in {time.monotonic() - t1:.1f} s")

    def roll_with_migration_configs(self) -> None:
        assert self.controller is not None

        def make(old: KafkaNode) -> KafkaNode:
            node = MigratingZkBroker(old.directory, role="broker", node_id=old.node_id, port=old.port, voters="-",
                                     overrides=dict(old.overrides))
            node.controller = self.controller.bootstrap  # type: ignore[union-attr]
            return node

        self.roll(make, "with the migration configs")

    def migration_state(self) -> dict[str, Any]:
        """kraftsim's ``/migration`` page (what ``kraftsim migration status`` prints)."""
        assert self.controller is not None
        with urllib.request.urlopen(f"http://127.0.0.1:{self.controller.http_port}/migration", timeout=10) as r:
            got: dict[str, Any] = json.loads(r.read())
            return got

    def wait_dual_write(self, timeout: float = 120) -> dict[str, Any]:
        state = until("kraftsim in DUAL_WRITE",
                      lambda: (s := self.migration_state())["driverState"] == "DUAL_WRITE" and s, timeout)
        self.say(f"migrated: driver {state['driverState']}, /migration {self.znode('/migration')}")
        return state

    def told_by_kraftsim(self) -> bool:
        """Every broker took an UpdateMetadata from kraftsim (the line a ZooKeeper-mode broker's
        state-change log writes for it names the sending controller)."""
        return all(f"in response to UpdateMetadata request sent by controller {CONTROLLER_ID}" in b.log_tail(100_000)
                   for b in self.brokers.values())

    def dump_log(self) -> str:
        assert self.controller is not None
        segments = sorted((self.controller.metadata_dir / "__cluster_metadata-0").glob("*.log"))
        r = kraftsim_cli("dump-log", "--json", *map(str, segments))
        assert r.returncode == 0, r.stderr
        return r.stdout

    # ---- step 3: roll to KRaft -----------------------------------------------------------
    def roll_to_kraft(self) -> None:
        assert self.controller is not None
        voters = f"{CONTROLLER_ID}@{self.controller.bootstrap}"

        def make(old: KafkaNode) -> KafkaNode:
            return KafkaNode(old.directory, role="broker", node_id=old.node_id, port=old.port, voters=voters)

        self.roll(make, "to KRaft mode (process.roles=broker)")

    def consume(self, timeout: float = 90) -> dict[str, list[str]]:
        """Every message of the message topics, read from the beginning (no group: assigned
        partitions)."""
        import confluent_kafka as ck

        c = ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "rehearsal", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
        got: dict[str, list[str]] = {}
        try:
            c.assign([ck.TopicPartition(t, p, ck.OFFSET_BEGINNING) for t in MESSAGE_TOPICS for p in (0, 1)])
            want = sum(map(len, self.sent.values()))
            deadline = time.monotonic() + timeout
            while sum(map(len, got.values())) < want and time.monotonic() < deadline:
                for m in c.consume(1000, 1.0):
                    if m.error() is None:
                        got.setdefault(m.topic(), []).append(m.value().decode())
        finally:
            c.close()
        self.say(f"consumed {sum(map(len, got.values()))} messages after the roll")
        return got

    # ---- step 4: finalize ----------------------------------------------------------------
    def finalize(self) -> dict[str, Any]:
        """kraftsim restarted without the migration flag (nor zookeeper.connect)."""
        s = self.controller
        assert s is not None
        s.stop()
        s.overrides.pop("zookeeper.metadata.migration.enable")
        s.overrides.pop("zookeeper.connect")
        s.start()
        state = self.migration_state()
        self.say(f"kraftsim restarted without the flag: {state}")
        return state


def create_topic(bootstrap: str, name: str) -> None:
    """A topic created through the brokers (which forward it to the controller), as an
    application's admin client would."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=3)], request_timeout=60)
    futures[name].result(timeout=90)


def main() -> int:
    """``make run-migration``: the rehearsal played once, in a temporary directory."""
    from tests.zookeeper import missing

    why = missing()
    if why:
        print(f"cannot rehearse: {why}", file=sys.stderr)
        return 2

    def say(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)

    d = tempfile.mkdtemp(prefix="kraftsim-rehearsal-")
    say(f"in {d}")
    zk = ZooKeeper(Path(d) / "zookeeper")
    zk.start()
    r = Rehearsal(Path(d), zk, say=say)
    try:
        r.start_zk_cluster()
        r.fill()
        r.produce()
        r.start_controller()
        r.roll_with_migration_configs()
        r.wait_dual_write()
        until("every broker told by kraftsim", r.told_by_kraftsim, 60)
        say("every ZooKeeper-mode broker took UpdateMetadata and LeaderAndIsr from kraftsim")
        create_topic(r.bootstrap, "during-dual-write")
        until("the topic dual-written", lambda: r.exists("/brokers/topics/during-dual-write"), 60)
        say("a topic created through the brokers is in ZooKeeper: /brokers/topics/during-dual-write")
        r.roll_to_kraft()
        got = r.consume()
        lost = {t: len(set(v) - set(got.get(t, []))) for t, v in r.sent.items()}
        say(f"messages lost: {lost}")
        r.finalize()
    finally:
        r.close()
        zk.stop()
        if "--keep" not in sys.argv:
            shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

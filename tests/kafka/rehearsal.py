"""The ZooKeeper-to-KRaft migration rehearsed end to end on real parts, as an operator runs it.

A real ZooKeeper and three real Kafka 3.9 brokers in ZooKeeper mode make the cluster; Kafka's
own tools fill it (topics with configs, client quotas, SCRAM users, ACLs) and an idempotent
producer writes messages. The brokers are rolled with the migration configs, kraftsim is started
as the KRaft controller with migration on, and it copies ZooKeeper into its log and dual-writes;
the brokers are rolled again, to KRaft mode, and the messages are consumed; kraftsim is
restarted without the flag and finalizes. The road goes on to Kafka 4 (``--to 4.4``): kraftsim is
restarted as a controller of the new release on the same log, the brokers are rolled to that
release's jars, and the release's own ``kafka-features upgrade --release-version`` raises
metadata.version. A producer and a consumer run across every step (:class:`Traffic`), and what was
acknowledged is read back at the end.

Each step is a method of :class:`Rehearsal`, so that ``tests/kafka/test_migration_rehearsal.py``
asserts on it and ``make run-migration`` (``python -m tests.kafka.rehearsal``) plays it for
anyone to watch, printing what each step saw.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from tests.kafka.harness import KafkaNode, KraftsimNode, kafka_features, kraftsim_cli, run_tools, tool_class
from tests.zookeeper import ZooKeeper

T = TypeVar("T")
BROKER_IDS = (1, 2, 3)
TOPICS = [f"orders-{i}" for i in range(20)]
MESSAGE_TOPICS = TOPICS[:3]
TRAFFIC_TOPIC = TOPICS[-1]  # what Traffic writes and reads across every step
OFFSETS_PARTITIONS = 3  # __consumer_offsets, created in ZooKeeper mode by the traffic's consumer
MESSAGES = 200  # per topic
CONTROLLER_ID = 3000
# The rehearsal is Kafka 3.9's (the last release with ZooKeeper): its tools' classes, from harness.MOVED.
TOPIC_TOOL = tool_class("TopicCommand")
CONFIG_TOOL = tool_class("ConfigCommand")
ACL_TOOL = tool_class("AclCommand")


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


class Traffic:
    """An idempotent producer (acks=all) and a consumer, each on its own thread, running while
    the cluster moves under them: the producer writes a message every ``pace`` seconds to
    :data:`TRAFFIC_TOPIC`, the consumer reads that topic from its start (assigned partitions, no
    group, so that no coordinator move stalls it). :meth:`step` notes how far each got in a step,
    :meth:`finish` stops the producer and waits until everything acknowledged has been read."""

    def __init__(self, bootstrap: str, pace: float = 0.02) -> None:
        self.bootstrap = bootstrap
        self.pace = pace
        self.acked: set[str] = set()
        self.seen: set[str] = set()
        self.errors: list[str] = []
        self.steps: list[tuple[str, int, int]] = []  # (step, acked during it, read during it)
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._produce, name="traffic-producer", daemon=True),
                         threading.Thread(target=self._consume, name="traffic-consumer", daemon=True)]
        self._mark = (0, 0)

    def start(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def _produce(self) -> None:
        import confluent_kafka as ck

        p = ck.Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 300_000, "log_level": 4})

        def delivered(err: Any, msg: Any) -> None:
            with self._lock:
                if err is None:
                    self.acked.add(msg.value().decode())
                else:
                    self.errors.append(str(err))

        i = 0
        while not self._stop_producing.is_set():
            try:
                p.produce(TRAFFIC_TOPIC, value=f"traffic-{i}".encode(), key=str(i).encode(), on_delivery=delivered)
                i += 1
            except BufferError:
                pass  # the queue is full while a broker is away: poll, and try again
            p.poll(self.pace)  # the pace of the traffic, and the delivery reports
        left = p.flush(300)
        if left:
            with self._lock:
                self.errors.append(f"{left} messages still in flight after 300 s")

    def _consume(self) -> None:
        import confluent_kafka as ck

        c = ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "traffic", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "log_level": 4})  # (a broker's restart is no news)
        try:
            c.assign([ck.TopicPartition(TRAFFIC_TOPIC, p, ck.OFFSET_BEGINNING) for p in (0, 1)])
            while not self._stop_consuming.is_set():
                for m in c.consume(500, 0.5):
                    if m.error() is None:
                        with self._lock:
                            self.seen.add(m.value().decode())
        finally:
            c.close()

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return len(self.acked), len(self.seen)

    def step(self, name: str) -> tuple[int, int]:
        """What was acknowledged and read since the last step."""
        acked, seen = self.counts()
        during = (acked - self._mark[0], seen - self._mark[1])
        self._mark = (acked, seen)
        self.steps.append((name, *during))
        return during

    def finish(self, timeout: float = 120) -> tuple[set[str], set[str]]:
        """Stop producing, then wait until the consumer has read what was acknowledged (or the
        deadline passes): (acknowledged, acknowledged and never read)."""
        self._stop_producing.set()
        self._threads[0].join(330)
        try:
            until("every acknowledged message read", lambda: self.counts() and self.acked <= self.seen, timeout)
        except AssertionError:
            pass  # what was lost is the answer
        finally:
            self._stop_consuming.set()
            self._threads[1].join(30)
        with self._lock:
            return set(self.acked), self.acked - self.seen


class ZkModeBroker(KafkaNode):
    """A real Kafka 3.9 broker in ZooKeeper mode (no process.roles), with Kafka's ZooKeeper-era
    authorizer; ANONYMOUS (the PLAINTEXT principal of the tools and clients) is a super user."""

    def properties(self) -> dict[str, str]:
        return {
            "broker.id": str(self.node_id), "zookeeper.connect": self.overrides["zookeeper.connect"],
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": str(self.data_dir),
            "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "num.network.threads": "2", "num.io.threads": "2",
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

    def roll(self, make: Callable[[KafkaNode], KafkaNode], what: str, settle: bool = False) -> None:
        """Restart each broker in turn as ``make`` builds it (same id, port and log directory),
        waiting for each to be up (and with ``settle``, back in every ISR: a rolling restart
        that keeps min.insync.replicas) before the next goes down."""
        for b in BROKER_IDS:
            t0 = time.monotonic()
            self.brokers[b].stop(timeout=120)
            t1 = time.monotonic()
            self.brokers[b] = make(self.brokers[b])
            self.brokers[b].start(timeout=180)
            if settle:
                until(f"broker {b} back in every ISR", self.brokers_in_sync, 120)
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

    # ---- step 5: the road to Kafka 4 --------------------------------------------------------
    def upgrade_controller(self, release: str) -> str:
        """kraftsim restarted as a controller of ``release`` on the same log: the controller's
        part of a rolling upgrade. Its start-up line says which release it speaks."""
        s = self.controller
        assert s is not None
        s.stop()
        s.overrides["kraftsim.release"] = release
        s.start()
        line = next(line for line in reversed(s.log_path.read_text().splitlines()) if " is a Kafka " in line)
        self.say(f"kraftsim restarted as a Kafka {release} controller: {line.split('INFO ', 1)[-1]}")
        return line

    def roll_to_release(self, kafka_version: str) -> None:
        """The KRaft-mode brokers rolled to Kafka ``kafka_version``'s jars (the same ids, ports and
        log directories; nothing reformatted), each back in every ISR before the next goes."""
        assert self.controller is not None
        voters = f"{CONTROLLER_ID}@{self.controller.bootstrap}"

        def make(old: KafkaNode) -> KafkaNode:
            return KafkaNode(old.directory, role="broker", node_id=old.node_id, port=old.port, voters=voters,
                             kafka_version=kafka_version)

        self.roll(make, f"to Kafka {kafka_version}", settle=True)

    def upgrade_features(self, release: str, kafka_version: str) -> str:
        """The release's own ``kafka-features upgrade --release-version``, against kraftsim;
        returns metadata.version's finalized level as the same tool then describes it."""
        assert self.controller is not None
        bc = ("--bootstrap-controller", self.controller.bootstrap)
        upgraded = kafka_features(*bc, "upgrade", "--release-version", release, version=kafka_version).check()
        described = kafka_features(*bc, "describe", version=kafka_version).check().stdout
        level = re.search(r"Feature: metadata\.version\s.*?FinalizedVersionLevel: (\S+)", described)
        assert level, described
        raised = ", ".join(f"{name} {to}" for name, to in re.findall(r"(\S+) was upgraded to (\d+)", upgraded.stdout))
        self.say(f"kafka-features {kafka_version} upgrade --release-version {release} raised {raised}; "
                 f"metadata.version is now {level.group(1)}")
        return level.group(1)

    def brokers_in_sync(self) -> bool:
        """Every partition of every topic led, with its whole assignment in sync, as the brokers'
        metadata says (the KRaft-mode cluster's :meth:`in_sync`)."""
        from confluent_kafka.admin import AdminClient

        md = AdminClient({"bootstrap.servers": self.bootstrap}).list_topics(timeout=10)
        parts = [p for t in md.topics.values() for p in t.partitions.values()]
        return bool(parts) and all(p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas) for p in parts)


def create_topic(bootstrap: str, name: str) -> None:
    """A topic created through the brokers (which forward it to the controller), as an
    application's admin client would."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=3)], request_timeout=60)
    futures[name].result(timeout=90)


class Steps:
    """The rehearsal's steps, each timed, with what the traffic did during it."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.traffic: Traffic | None = None
        self.times: list[tuple[str, float]] = []

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self.say(f"== {len(self.times) + 1}. {name}")
        t0 = time.monotonic()
        yield
        took = time.monotonic() - t0
        self.times.append((name, took))
        during = ""
        if self.traffic is not None:
            acked, read = self.traffic.step(name)
            during = f"; traffic: {acked} acknowledged, {read} read"
        self.say(f"   {name}: {took:.1f} s{during}")

    def summary(self) -> None:
        width = max(len(n) for n, _ in self.times)
        for i, (name, took) in enumerate(self.times, 1):
            self.say(f"{i:>2}. {name:<{width}} {took:6.1f} s")
        self.say(f"    {'total':<{width}} {sum(t for _, t in self.times):6.1f} s")


def main(argv: list[str] | None = None) -> int:
    """``make run-migration``: the rehearsal played once, in a temporary directory; with ``--to
    4.4`` (``make run-road``) the road goes on to that Kafka release."""
    from tests.kafka.provision import RELEASES
    from tests.zookeeper import missing

    parser = argparse.ArgumentParser(prog="python -m tests.kafka.rehearsal",
                                     description="The ZooKeeper-to-KRaft migration on real parts, step by step.")
    parser.add_argument("--keep", action="store_true", help="keep the directory with every node's log")
    parser.add_argument("--to", metavar="RELEASE", choices=[r for r in RELEASES if r != "3.9"],
                        help="after finalizing, go on to this Kafka release (controller, brokers, metadata.version)")
    args = parser.parse_args(argv)
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
    step = Steps(say)
    lost: set[str] = set()
    try:
        with step("a ZooKeeper-mode Kafka 3.9 cluster, filled by Kafka's tools"):
            r.start_zk_cluster()
            r.fill()
            r.produce()
        step.traffic = Traffic(r.bootstrap).start()
        with step("kraftsim started with migration on; brokers rolled with the migration configs"):
            r.start_controller()
            r.roll_with_migration_configs()
        with step("the copy, and dual-write"):
            r.wait_dual_write()
            until("every broker told by kraftsim", r.told_by_kraftsim, 60)
            say("every ZooKeeper-mode broker took UpdateMetadata and LeaderAndIsr from kraftsim")
            create_topic(r.bootstrap, "during-dual-write")
            until("the topic dual-written", lambda: r.exists("/brokers/topics/during-dual-write"), 60)
            say("a topic created through the brokers is in ZooKeeper: /brokers/topics/during-dual-write")
        with step("brokers rolled to KRaft mode"):
            r.roll_to_kraft()
            got = r.consume()
            say(f"messages lost: { {t: len(set(v) - set(got.get(t, []))) for t, v in r.sent.items()} }")
        with step("finalized: kraftsim restarted without the migration flag"):
            r.finalize()
        if args.to:
            version = RELEASES[args.to]
            with step(f"kraftsim restarted as a Kafka {args.to} controller"):
                r.upgrade_controller(args.to)
            with step(f"brokers rolled to Kafka {version}"):
                r.roll_to_release(version)
            with step(f"metadata.version upgraded to {args.to}"):
                r.upgrade_features(args.to, version)
        with step("the traffic stopped, and read back"):
            acked, lost = step.traffic.finish()
            say(f"{len(acked)} messages acknowledged across the steps, {len(lost)} of them lost")
        step.summary()
    finally:
        if step.traffic is not None:
            step.traffic.finish(timeout=0)
        r.close()
        zk.stop()
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())

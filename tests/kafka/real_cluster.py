"""A real-broker cluster for tests: one kraftsim controller and real Kafka brokers of one
release, their only controller, and the idempotent producer and consumer the real-broker tests
carry messages with. Shared by the 3.9 story (test_real_brokers.py) and the 4.x one
(test_real_brokers_4x.py)."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.kafka.harness import KAFKA_VERSION, KafkaNode, KraftsimNode, random_cluster_id

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient  # noqa: E402

T = TypeVar("T")


def until(what: str, probe: Callable[[], T | None], timeout: float = 90, every: float = 0.2) -> T:
    """Poll ``probe`` until it returns something truthy, with a deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            got = probe()
        except Exception as e:  # noqa: BLE001 - a tool or client may fail while the cluster moves
            last = e  # (and is asked again: an exception is no answer)
        else:
            if got:
                return got
            last = got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")
        time.sleep(every)


class Cluster:
    """``brokers`` real Kafka brokers of ``kafka_version`` on one kraftsim controller speaking
    ``release`` (the release line of ``kafka_version`` unless given)."""

    def __init__(self, directory: Path, broker_ids: Iterable[int], *, controller_config: Mapping[str, str],
                 broker_config: Mapping[str, str], kafka_version: str = KAFKA_VERSION) -> None:
        self.directory = directory
        self.kafka_version = kafka_version
        self.release = ".".join(kafka_version.split(".")[:2])
        self.broker_config = dict(broker_config)
        cid = random_cluster_id()
        overrides = dict(controller_config)
        if self.release != "3.9":
            overrides["kraftsim.release"] = self.release
        self.controller = KraftsimNode(directory / "controller", cluster_id=cid, release_version=self.release,
                                       overrides=overrides)
        self.voters = f"{self.controller.node_id}@{self.controller.bootstrap}"
        self.brokers = {i: self.new_broker(i) for i in broker_ids}

    def new_broker(self, node_id: int) -> KafkaNode:
        return KafkaNode(self.directory / f"broker-{node_id}", role="broker", node_id=node_id,
                         cluster_id=self.controller.cluster_id, voters=self.voters, release_version=self.release,
                         overrides=dict(self.broker_config), kafka_version=self.kafka_version)

    def start(self) -> None:
        self.controller.format()
        self.controller.start()
        for b in self.brokers.values():
            b.format()
            b.start(wait=False)
        for b in self.brokers.values():
            b.wait_ready(120)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.running)

    def metrics(self) -> dict[str, float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.controller.http_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(kafka_controller_\w+) (\S+)$", text, re.M)}

    def broker_counts(self) -> tuple[int, int]:
        m = self.metrics()
        return int(m["kafka_controller_kafkacontroller_activebrokercount"]), \
            int(m["kafka_controller_kafkacontroller_fencedbrokercount"])

    def admin(self) -> Any:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def partitions(self, topic: str) -> dict[int, tuple[int, list[int], list[int]]] | None:
        """{partition: (leader, replicas in order, sorted isr)} as a broker's metadata cache has it."""
        md = self.admin().list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            return None
        return {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in t.partitions.values()}

    def all_unfenced(self) -> bool:
        return self.broker_counts() == (len(self.brokers), 0)

    def stop(self) -> None:
        for b in self.brokers.values():
            b.kill()
        self.controller.stop()


def produce(c: Cluster, topic: str, count: int, prefix: str) -> set[str]:
    """Idempotent producer, acks=all: the values every broker acknowledged."""
    acked: set[str] = set()
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.add(msg.value().decode())
        else:
            errors.append(str(err))

    p = ck.Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "acks": "all",
                     "linger.ms": 5, "message.timeout.ms": 60_000})
    for i in range(count):
        while True:
            try:
                p.produce(topic, value=f"{prefix}-{i}".encode(), key=str(i).encode(), on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(90) == 0, "messages still in flight after 90 s"
    assert not errors, errors[:3]
    return acked


def consume(c: Cluster, topic: str, group: str, expected: int, **config: str) -> list[str]:
    """``config``: more consumer settings (``group_protocol="consumer"`` for KIP-848's protocol)."""
    consumer = ck.Consumer({"bootstrap.servers": c.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                            "enable.auto.commit": True, **{k.replace("_", "."): v for k, v in config.items()}})
    consumer.subscribe([topic])
    seen: list[str] = []
    deadline = time.monotonic() + 120
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            for m in consumer.consume(1000, 1.0):
                if m.error() is None:
                    seen.append(m.value().decode())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return seen

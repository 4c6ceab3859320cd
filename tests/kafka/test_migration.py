"""The ZooKeeper copy against Kafka 3.9.2: one seeded ZooKeeper cluster, migrated twice.

``kraftsim zk seed``'s code writes a ZooKeeper-mode cluster under one chroot, which is then
copied znode for znode (same data, same zkVersions) under a second. A real Kafka 3.9.2 KRaft
controller migrates the first and kraftsim the second, each after the same three ZooKeeper-mode
brokers registered with IsMigratingZkBroker. The records each wrote for the copy are compared by
type and field (ACL ids are random on both sides, and the order of topics and resources is that
of Kafka's hash sets, so the records are compared as multisets), along with the transaction
markers, the merged batches and what each wrote to /controller, /controller_epoch and /migration.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftsim.migration.seed import SeedSpec, seed
from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import KafkaClient
from tests.harness import poll_until
from tests.kafka.conftest import PAIR_CONFIG, PairNodes
from tests.kafka.harness import KafkaNode, KraftsimNode, random_cluster_id
from tests.test_controller import registration
from tests.zookeeper import ZooKeeper, batches, record_versions, running

pytestmark = pytest.mark.kafka

CT = registry.request_class(ApiKey.CREATE_TOPICS)
IAC = registry.request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS)
SPEC = SeedSpec(brokers=3, topics=60, partitions=3, replication_factor=2, users=3)
NO_ID = uuid.UUID(int=0)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    yield from running(tmp_path_factory.mktemp("zookeeper"))


def copy_tree(client: Any, src: str, dst: str) -> None:
    """Every znode under ``src`` recreated under ``dst``, parents first: the same data, and the
    same zkVersions where the source never changed (as a fresh seed's znodes)."""
    data, _ = client.get(src)
    client.create(dst, data)
    for child in sorted(client.get_children(src)):
        copy_tree(client, f"{src}/{child}", f"{dst}/{child}")


def zk_json(client: Any, path: str) -> Any:
    return json.loads(client.get(path)[0])


def copied(client: Any, chroot: str) -> bool:
    """/migration says the copy is done (the controller creates /migration when its driver starts)."""
    got = client.exists(f"{chroot}/migration")
    return got is not None and zk_json(client, f"{chroot}/migration")["kraft_metadata_offset"] > 0


async def pre_migration_answers(bootstrap: str) -> list[tuple[int, str | None]]:
    """What a write outside the pre-migration set gets before the copy: CreateTopics and
    IncrementalAlterConfigs."""
    host, port = bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port), client_id="admin")
    try:
        ct = await client.request(CT(topics=[CT.CreatableTopic(name="early", num_partitions=1, replication_factor=1)],
                                     timeout_ms=30000), 7)
        iac = await client.request(IAC(resources=[IAC.AlterConfigsResource(
            resource_type=4, resource_name="", configs=[IAC.AlterableConfig(
                name="log.retention.ms", config_operation=0, value="1000")])]), 1)
        return [(ct.topics[0].error_code, ct.topics[0].error_message),
                (iac.responses[0].error_code, iac.responses[0].error_message)]
    finally:
        await client.close()


async def register_zk_brokers(bootstrap: str, cluster_id: str) -> None:
    host, port = bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port), client_id="zk-brokers")
    try:
        for b in SPEC.broker_ids:
            reg = registration(b, cluster_id)
            reg.is_migrating_zk_broker = True
            r = await client.request(reg, 3)
            assert r.error_code == 0, r
    finally:
        await client.close()


def migration_section(metadata_dir: Path) -> list[list[tuple[int, str, Any]]]:
    log = batches(metadata_dir)
    start = next(i for i, b in enumerate(log) if b[0][1] == "BeginTransactionRecord" and b[0][2].name == "ZK Migration")
    end = next(i for i in range(start, len(log)) if log[i][-1][1] == "EndTransactionRecord")
    return log[start:end + 1]


def normalised(section: list[list[tuple[int, str, Any]]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for batch in section:
        for _, name, record in batch:
            if name == "AccessControlEntryRecord":
                record.id = NO_ID
            out[f"{name} {record!r}"] += 1
    return out


async def test_kafka_and_kraftsim_copy_the_same_zookeeper_alike(tmp_path: Path, zookeeper: ZooKeeper) -> None:
    root: Any = zookeeper.client()
    try:
        root.ensure_path("/seed")
        from kazoo.client import KazooClient

        seeder = KazooClient(hosts=zookeeper.connect + "/seed", timeout=10)
        seeder.start(timeout=10)
        try:
            seed(seeder, SPEC, 1_700_000_000_000)
        finally:
            seeder.stop()
            seeder.close()
        copy_tree(root, "/seed", "/for-kafka")
        copy_tree(root, "/seed", "/for-kraftsim")

        cid = random_cluster_id()
        common = {**PAIR_CONFIG, "zookeeper.metadata.migration.enable": "true"}
        k = KafkaNode(tmp_path / "kafka", cluster_id=cid,
                      overrides={**common, "zookeeper.connect": zookeeper.connect + "/for-kafka"})
        s = KraftsimNode(tmp_path / "kraftsim", cluster_id=cid,
                         overrides={**common, "zookeeper.connect": zookeeper.connect + "/for-kraftsim"})
        k.format()
        s.format()
        nodes = PairNodes(k, s).start()
        try:
            before = [await pre_migration_answers(node.bootstrap) for node in nodes.nodes]
            assert before[1] == before[0] == [(41, "The controller is in pre-migration mode.")] * 2
            for node in nodes.nodes:
                await register_zk_brokers(node.bootstrap, cid)
            for chroot in ("/for-kafka", "/for-kraftsim"):
                await poll_until(lambda c=chroot: copied(root, c), 90, interval=0.1)
        finally:
            nodes.stop()

        kafka_copy, ours = migration_section(k.metadata_dir), migration_section(s.metadata_dir)
        for section in (kafka_copy, ours):
            assert [n for _, n, _ in section[0]] == ["BeginTransactionRecord"]
            assert [n for _, n, _ in section[-1]] == ["ZkMigrationStateRecord", "EndTransactionRecord"]
            assert all(len(b) >= 200 for b in section[1:-2])  # merged, at least 200 records a batch
        assert normalised(ours) == normalised(kafka_copy)
        assert len(ours) == len(kafka_copy)  # as many batches
        assert record_versions(s.metadata_dir, ours[0][0][0], ours[-1][-1][0]) == \
            record_versions(k.metadata_dir, kafka_copy[0][0][0], kafka_copy[-1][-1][0])  # framed alike

        for side, section in (("/for-kafka", kafka_copy), ("/for-kraftsim", ours)):
            migration = zk_json(root, f"{side}/migration")
            assert migration["kraft_metadata_offset"] == section[-1][-1][0]
            assert (migration["version"], migration["kraft_controller_id"]) == (0, 3000)
            assert root.get(f"{side}/controller_epoch")[0] == b"2"
        assert zk_json(root, "/for-kraftsim/migration").keys() == zk_json(root, "/for-kafka/migration").keys()
        ours_ctl, kafka_ctl = zk_json(root, "/for-kraftsim/controller"), zk_json(root, "/for-kafka/controller")
        assert {k: v for k, v in ours_ctl.items() if k != "timestamp"} == \
            {k: v for k, v in kafka_ctl.items() if k != "timestamp"}

        # Restarted in MIGRATION, both claim ZooKeeper again (a new KRaft epoch, /controller_epoch
        # bumped) without waiting for brokers, and neither copies again.
        nodes.start()
        try:
            for chroot in ("/for-kafka", "/for-kraftsim"):
                await poll_until(lambda c=chroot: root.get(f"{c}/controller_epoch")[0] == b"3", 60, interval=0.1)
                await poll_until(lambda c=chroot: zk_json(root, f"{c}/migration")["kraft_controller_epoch"]
                                 == zk_json(root, f"{c}/controller")["kraftControllerEpoch"], 30, interval=0.1)
        finally:
            nodes.stop()
        for chroot in ("/for-kafka", "/for-kraftsim"):
            assert zk_json(root, f"{chroot}/controller")["kraftControllerEpoch"] == \
                zk_json(root, "/for-kafka/controller")["kraftControllerEpoch"]
        for node in nodes.nodes:
            begins = [r for b in batches(node.metadata_dir) for _, n, r in b if n == "BeginTransactionRecord"]
            assert [r.name for r in begins if r.name == "ZK Migration"] == ["ZK Migration"]
    finally:
        root.stop()
        root.close()

"""The ZooKeeper copy against Kafka 3.9.2: one ZooKeeper cluster, migrated twice.

The cluster is written under one chroot either by ``kraftsim zk seed``'s code or by a real
ZooKeeper-mode Kafka 3.9.2 broker (asked through Kafka's admin APIs, so Kafka itself writes
its layout), then copied znode for znode (same data, same zkVersions) under two more. A real
Kafka 3.9.2 KRaft controller migrates one copy and kraftsim the other, each after the same three
ZooKeeper-mode brokers registered with IsMigratingZkBroker. The records each wrote for the copy are compared by
type and field (ACL ids are random on both sides, and the order of topics and resources is that
of Kafka's hash sets, so the records are compared as multisets), along with the transaction
markers, the merged batches and what each wrote to /controller, /controller_epoch and /migration.
After the copy, a topic created through each controller is dual-written by each to the same znodes.
A real ZooKeeper-mode broker rolled onto kraftsim takes kraftsim's UpdateMetadata and LeaderAndIsr.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftsim.migration import zk_layout as L
from kraftsim.migration.seed import SeedSpec, seed
from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.uuids import from_str
from tests.harness import poll_until
from tests.kafka.conftest import PAIR_CONFIG, PairNodes
from tests.kafka.harness import KafkaNode, KraftsimNode, random_cluster_id
from tests.kafka.rehearsal import MigratingZkBroker, ZkModeBroker
from tests.test_controller import registration
from tests.zookeeper import ZooKeeper, batches, record_versions, running

pytestmark = pytest.mark.kafka

CT = registry.request_class(ApiKey.CREATE_TOPICS)
IAC = registry.request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS)
ACQ = registry.request_class(ApiKey.ALTER_CLIENT_QUOTAS)
AUSC = registry.request_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
CA = registry.request_class(ApiKey.CREATE_ACLS)
SPEC = SeedSpec(brokers=3, topics=60, partitions=3, replication_factor=2, users=3)
NO_ID = uuid.UUID(int=0)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    yield from running(tmp_path_factory.mktemp("zookeeper"))


def seed_under(connect: str, spec: SeedSpec) -> None:
    """``kraftsim zk seed``'s cluster written under a chroot (``connect`` names it)."""
    from kazoo.client import KazooClient

    seeder = KazooClient(hosts=connect, timeout=10)
    seeder.start(timeout=10)
    try:
        seed(seeder, spec, 1_700_000_000_000)
    finally:
        seeder.stop()
        seeder.close()


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


async def register_zk_brokers(bootstrap: str, cluster_id: str, unfence: bool = False) -> None:
    """The three ZooKeeper-mode brokers registered (IsMigratingZkBroker); with ``unfence``, each
    then heartbeats until it is unfenced."""
    host, port = bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port), client_id="zk-brokers")
    try:
        for b in SPEC.broker_ids:
            reg = registration(b, cluster_id)
            reg.is_migrating_zk_broker = True
            r = await client.request(reg, 3)
            assert r.error_code == 0, r
            if not unfence:
                continue
            epoch = r.broker_epoch
            deadline = time.monotonic() + 30
            while True:
                hb = await client.request(HB(broker_id=b, broker_epoch=epoch, current_metadata_offset=1 << 40,
                                             want_fence=False), 1)
                assert hb.error_code == 0, hb
                if not hb.is_fenced:
                    break
                assert time.monotonic() < deadline, f"broker {b} stays fenced"
                await asyncio.sleep(0.05)  # the heartbeat interval a broker keeps
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


async def build_with_a_kafka_zk_broker(tmp_path: Path, connect: str) -> None:
    """Topics with configs, broker configs, quotas, SCRAM users and ACLs, asked of a real
    ZooKeeper-mode broker (Kafka's admin APIs, the requests its tools send), which writes them
    into ZooKeeper in its own layout; the broker is then stopped."""
    import hashlib

    broker = ZkModeBroker(tmp_path / "zk-broker", role="broker", node_id=1, voters="-",
                          overrides={"zookeeper.connect": connect})
    broker.start()
    host, port = broker.bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port), client_id="admin")
    try:
        created: set[str] = set()

        async def create() -> bool:
            """The broker knows no brokers until its own controller has sent it metadata: ask again."""
            ct = await client.request(CT(topics=[
                CT.CreatableTopic(name=f"real-{i}", num_partitions=i + 1, replication_factor=1,
                                  configs=[CT.CreatableTopicConfig(name="retention.ms", value="60000")] if i else [])
                for i in range(3) if f"real-{i}" not in created], timeout_ms=30000), 7)
            created.update(t.name for t in ct.topics if t.error_code == 0)
            assert all(t.error_code in (0, 38) for t in ct.topics), ct  # 38: no live broker yet
            return len(created) == 3

        deadline = time.monotonic() + 30
        while not await create():
            assert time.monotonic() < deadline, "the ZooKeeper-mode broker never saw itself"
            await asyncio.sleep(0.1)  # a retry's pace, not synchronisation: the loop waits on create()
        op = IAC.AlterableConfig
        iac = await client.request(IAC(resources=[
            IAC.AlterConfigsResource(resource_type=2, resource_name="real-0", configs=[
                op(name="cleanup.policy", config_operation=0, value="compact"),
                op(name="segment.ms", config_operation=0, value="100000")]),
            IAC.AlterConfigsResource(resource_type=4, resource_name="", configs=[
                op(name="log.cleaner.threads", config_operation=0, value="2")]),
            IAC.AlterConfigsResource(resource_type=4, resource_name="1", configs=[
                op(name="log.cleaner.io.buffer.size", config_operation=0, value="1048576")])]), 1)
        assert all(r.error_code == 0 for r in iac.responses), iac
        e, o = ACQ.EntityData, ACQ.OpData
        acq = await client.request(ACQ(entries=[
            ACQ.EntryData(entity=[e(entity_type="user", entity_name="alice@example")],
                          ops=[o(key="producer_byte_rate", value=1024.0)]),
            ACQ.EntryData(entity=[e(entity_type="user", entity_name=None)], ops=[o(key="consumer_byte_rate", value=2048.0)]),
            ACQ.EntryData(entity=[e(entity_type="user", entity_name="alice@example"),
                                  e(entity_type="client-id", entity_name="app")],
                          ops=[o(key="request_percentage", value=50.0)]),
            ACQ.EntryData(entity=[e(entity_type="client-id", entity_name=None)],
                          ops=[o(key="producer_byte_rate", value=4096.0)]),
            ACQ.EntryData(entity=[e(entity_type="ip", entity_name="127.0.0.1")],
                          ops=[o(key="connection_creation_rate", value=10.0)])]), 1)
        assert all(r.error_code == 0 for r in acq.entries), acq
        upserts = []
        for name, mechanism, digest, iterations in (("alice@example", 1, "sha256", 8192), ("bob", 2, "sha512", 4096)):
            salt = hashlib.sha256(name.encode()).digest()[:16]
            salted = hashlib.pbkdf2_hmac(digest, f"{name}-secret".encode(), salt, iterations)
            upserts.append(AUSC.ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations,
                                                         salt=salt, salted_password=salted))
        ausc = await client.request(AUSC(upsertions=upserts), 0)
        assert all(r.error_code == 0 for r in ausc.results), ausc
        acl = CA.AclCreation
        ca = await client.request(CA(creations=[
            acl(resource_type=2, resource_name="real-1", resource_pattern_type=3, principal="User:alice@example",
                host="*", operation=3, permission_type=3),
            acl(resource_type=2, resource_name="real-1", resource_pattern_type=3, principal="User:alice@example",
                host="*", operation=8, permission_type=3),
            acl(resource_type=3, resource_name="g-", resource_pattern_type=4, principal="User:bob",
                host="*", operation=3, permission_type=2)]), 3)
        assert all(r.error_code == 0 for r in ca.results), ca
    finally:
        await client.close()
        broker.stop()


@pytest.mark.parametrize("source", ["seed", "kafka-zk-broker"])
async def test_kafka_and_kraftsim_copy_the_same_zookeeper_alike(tmp_path: Path, zookeeper: ZooKeeper,
                                                                source: str) -> None:
    root: Any = zookeeper.client()
    try:
        base = f"/{source}"
        root.ensure_path(f"{base}/seed")
        if source == "seed":
            seed_under(zookeeper.connect + f"{base}/seed", SPEC)
        else:
            await build_with_a_kafka_zk_broker(tmp_path, zookeeper.connect + f"{base}/seed")
            # Its registration went with its session: put back one for each broker the test
            # registers, so both drivers wait for all three before copying. With only broker 1 in
            # /brokers/ids a driver may start after broker 1's registration, and 2's and 3's then
            # land between its batches (a busy CI machine saw one).
            for b in SPEC.broker_ids:
                root.create(f"{base}/seed/brokers/ids/{b}", L.BrokerZNode(b, "127.0.0.1", 9093).encode())
        copy_tree(root, f"{base}/seed", f"{base}/for-kafka")
        copy_tree(root, f"{base}/seed", f"{base}/for-kraftsim")

        cid = random_cluster_id()
        common = {**PAIR_CONFIG, "zookeeper.metadata.migration.enable": "true"}
        k = KafkaNode(tmp_path / "kafka", cluster_id=cid,
                      overrides={**common, "zookeeper.connect": zookeeper.connect + f"{base}/for-kafka"})
        s = KraftsimNode(tmp_path / "kraftsim", cluster_id=cid,
                         overrides={**common, "zookeeper.connect": zookeeper.connect + f"{base}/for-kraftsim"})
        k.format()
        s.format()
        nodes = PairNodes(k, s).start()
        try:
            before = [await pre_migration_answers(node.bootstrap) for node in nodes.nodes]
            assert before[1] == before[0] == [(41, "The controller is in pre-migration mode.")] * 2
            for node in nodes.nodes:
                await register_zk_brokers(node.bootstrap, cid)
            for chroot in (f"{base}/for-kafka", f"{base}/for-kraftsim"):
                await poll_until(lambda c=chroot: copied(root, c), 90, interval=0.1)
        finally:
            nodes.stop()

        kafka_copy, ours = migration_section(k.metadata_dir), migration_section(s.metadata_dir)
        for side, section in (("kafka", kafka_copy), ("kraftsim", ours)):
            assert [n for _, n, _ in section[0]] == ["BeginTransactionRecord"]
            assert [n for _, n, _ in section[-1]] == ["ZkMigrationStateRecord", "EndTransactionRecord"]
            small = [(b[0][0], len(b), sorted({n for _, n, _ in b})) for b in section[1:-2] if len(b) < 200]
            assert not small, f"{side}: batches under 200 records (offset, size, kinds): {small}"  # merged
        assert normalised(ours) == normalised(kafka_copy)
        kinds = {n for b in ours for _, n, _ in b}
        assert {"TopicRecord", "PartitionRecord", "ConfigRecord", "ClientQuotaRecord", "UserScramCredentialRecord",
                "AccessControlEntryRecord"} <= kinds  # every source had something to copy
        assert "RegisterBrokerRecord" not in kinds  # every broker registered before the copy began
        if source == "seed":
            assert {"ProducerIdsRecord", "DelegationTokenRecord"} <= kinds
        assert len(ours) == len(kafka_copy)  # as many batches
        assert record_versions(s.metadata_dir, ours[0][0][0], ours[-1][-1][0]) == \
            record_versions(k.metadata_dir, kafka_copy[0][0][0], kafka_copy[-1][-1][0])  # framed alike

        for side, section in ((f"{base}/for-kafka", kafka_copy), (f"{base}/for-kraftsim", ours)):
            migration = zk_json(root, f"{side}/migration")
            assert migration["kraft_metadata_offset"] == section[-1][-1][0]
            assert (migration["version"], migration["kraft_controller_id"]) == (0, 3000)
            assert root.get(f"{side}/controller_epoch")[0] == b"2"
        assert zk_json(root, f"{base}/for-kraftsim/migration").keys() == zk_json(root, f"{base}/for-kafka/migration").keys()
        ours_ctl, kafka_ctl = zk_json(root, f"{base}/for-kraftsim/controller"), zk_json(root, f"{base}/for-kafka/controller")
        assert {k: v for k, v in ours_ctl.items() if k != "timestamp"} == \
            {k: v for k, v in kafka_ctl.items() if k != "timestamp"}

        # Restarted in MIGRATION, both claim ZooKeeper again (a new KRaft epoch, /controller_epoch
        # bumped) without waiting for brokers, and neither copies again.
        nodes.start()
        try:
            for chroot in (f"{base}/for-kafka", f"{base}/for-kraftsim"):
                await poll_until(lambda c=chroot: root.get(f"{c}/controller_epoch")[0] == b"3", 60, interval=0.1)
                await poll_until(lambda c=chroot: zk_json(root, f"{c}/migration")["kraft_controller_epoch"]
                                 == zk_json(root, f"{c}/controller")["kraftControllerEpoch"], 30, interval=0.1)
        finally:
            nodes.stop()
        for chroot in (f"{base}/for-kafka", f"{base}/for-kraftsim"):
            assert zk_json(root, f"{chroot}/controller")["kraftControllerEpoch"] == \
                zk_json(root, f"{base}/for-kafka/controller")["kraftControllerEpoch"]
        for node in nodes.nodes:
            begins = [r for b in batches(node.metadata_dir) for _, n, r in b if n == "BeginTransactionRecord"]
            assert [r.name for r in begins if r.name == "ZK Migration"] == ["ZK Migration"]
    finally:
        root.stop()
        root.close()


async def test_a_real_zk_mode_broker_rolled_with_the_migration_configs_is_migrated(
        tmp_path: Path, zookeeper: ZooKeeper) -> None:
    """The operator's procedure with a real Kafka 3.9.2 broker: a ZooKeeper-mode cluster (the
    broker is its ZooKeeper controller), a kraftsim controller started with migration on and the
    cluster's id, then the broker rolled with the migration configs. It registers with kraftsim
    over its controller channel, kraftsim takes the ZooKeeper controllership over and copies what
    the broker had written; then it drives the broker: a topic created through kraftsim is in the
    broker's Metadata and led by it."""
    root: Any = zookeeper.client()
    try:
        base = "/rolled"
        cid = random_cluster_id()
        root.create(f"{base}/cluster/id", json.dumps({"version": "1", "id": cid}).encode(), makepath=True)
        connect = zookeeper.connect + base
        await build_with_a_kafka_zk_broker(tmp_path, connect)
        assert root.get(f"{base}/controller_epoch")[0] == b"1"  # the broker was the ZooKeeper controller
        s = KraftsimNode(tmp_path / "kraftsim", cluster_id=cid, overrides={
            **PAIR_CONFIG, "zookeeper.metadata.migration.enable": "true", "zookeeper.connect": connect})
        s.format()
        s.start()
        broker = MigratingZkBroker(tmp_path / "zk-broker", role="broker", node_id=1, voters="-",
                                   overrides={"zookeeper.connect": connect})
        broker.controller = s.bootstrap
        try:
            broker.start()
            await poll_until(lambda: copied(root, base), 90, interval=0.1)
            # After the copy kraftsim drives the broker: a topic created through kraftsim reaches it
            # by UpdateMetadata (its Metadata names the topic) and LeaderAndIsr (it leads it).
            await create_led_topic(s.bootstrap)
            deadline = time.monotonic() + 60
            while not await broker_leads(broker.bootstrap):
                assert time.monotonic() < deadline, "the broker never led the topic created through kraftsim"
                await asyncio.sleep(0.2)  # the pace of the checks: each loop asks the broker again
        finally:
            broker.stop()
            s.stop()
        flat = [(n, r) for b in batches(s.metadata_dir) for _, n, r in b]
        regs = [r for n, r in flat if n == "RegisterBrokerRecord" and r.broker_id == 1]
        assert regs and all(r.is_migrating_zk_broker for r in regs)
        topics = {r.name: r.topic_id for n, r in flat if n == "TopicRecord"}
        assert topics == {t: from_str(zk_json(root, f"{base}/brokers/topics/{t}")["topic_id"])
                          for t in ("real-0", "real-1", "real-2", "driven")}  # driven: dual-written
        section = migration_section(s.metadata_dir)
        kinds = {n for b in section for _, n, _ in b}
        assert {"ConfigRecord", "ClientQuotaRecord", "UserScramCredentialRecord", "AccessControlEntryRecord"} <= kinds
        controller = zk_json(root, f"{base}/controller")
        assert (controller["brokerid"], controller["kraftControllerEpoch"]) == (3000, 1)
        # The rolled broker may have been ZooKeeper's controller again (epoch 2) before kraftsim's claim.
        assert int(root.get(f"{base}/controller_epoch")[0]) in (2, 3)
        # The copy's offset, or a later one: the dual-write moves /migration on with every commit.
        assert zk_json(root, f"{base}/migration")["kraft_metadata_offset"] >= section[-1][-1][0]
    finally:
        root.stop()
        root.close()


HB = registry.request_class(ApiKey.BROKER_HEARTBEAT)
MD = registry.request_class(ApiKey.METADATA)
LO = registry.request_class(ApiKey.LIST_OFFSETS)


async def create_led_topic(bootstrap: str) -> None:
    """"driven" (one partition, one replica) created through kraftsim, once the migrating broker is
    unfenced (until then there is no broker to place it on: INVALID_REPLICATION_FACTOR)."""
    host, port = bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port), client_id="admin")
    try:
        deadline = time.monotonic() + 60
        while True:
            r = await client.request(CT(topics=[CT.CreatableTopic(name="driven", num_partitions=1,
                                                                  replication_factor=1)], timeout_ms=30000), 7)
            if r.topics[0].error_code == 0:
                return
            assert r.topics[0].error_code == 38 and time.monotonic() < deadline, r
            await asyncio.sleep(0.2)  # the broker's next heartbeat, not synchronisation: the loop asks again
    finally:
        await client.close()


async def broker_leads(bootstrap: str) -> bool:
    """The real broker's own answers: Metadata lists "driven" led by broker 1 (UpdateMetadata
    accepted), and ListOffsets on it succeeds, which only the partition's leader answers
    (LeaderAndIsr accepted: the broker made itself leader)."""
    host, port = bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port), client_id="check")
    try:
        md = await client.request(MD(topics=[MD.MetadataRequestTopic(name="driven")],
                                     allow_auto_topic_creation=False), 12)
        (t,) = md.topics
        if t.error_code != 0 or [p.leader_id for p in t.partitions] != [1]:
            return False
        lo = await client.request(LO(replica_id=-1, isolation_level=0, topics=[LO.ListOffsetsTopic(
            name="driven", partitions=[LO.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                               timestamp=-1)])]), 8)
        return bool(lo.topics[0].partitions[0].error_code == 0 and lo.topics[0].partitions[0].offset == 0)
    finally:
        await client.close()


DUAL_SPEC = SeedSpec(brokers=3, topics=4, partitions=2, replication_factor=2, users=1)


def topic_znodes(client: Any, chroot: str, topic: str) -> dict[str, Any]:
    """A topic's znodes as JSON (null data as None), with its id normalised, and its config."""
    out: dict[str, Any] = {}

    def walk(path: str) -> None:
        data, _ = client.get(path)
        out[path[len(chroot):]] = json.loads(data) if data else None
        for child in sorted(client.get_children(path)):
            walk(f"{path}/{child}")

    walk(f"{chroot}/brokers/topics/{topic}")
    out[f"/brokers/topics/{topic}"]["topic_id"] = "normalised"
    out[f"/config/topics/{topic}"] = zk_json(client, f"{chroot}/config/topics/{topic}")
    return out


async def in_dual_write(node: KafkaNode | KraftsimNode) -> None:
    """Kafka's driver logs its move to DUAL_WRITE; kraftsim's shows it on its /migration page."""
    if isinstance(node, KafkaNode):
        await asyncio.to_thread(node.wait_log, "to DUAL_WRITE state", 60)
        return
    import urllib.request

    def state() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/migration", timeout=5) as r:
            return str(json.loads(r.read())["driverState"])

    await poll_until(lambda: state() == "DUAL_WRITE", 60, interval=0.1)


async def create_topic(bootstrap: str) -> Any:
    host, port = bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port), client_id="admin")
    try:
        topic = CT.CreatableTopic(name="dual", num_partitions=-1, replication_factor=-1, assignments=[
            CT.CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2]),
            CT.CreatableReplicaAssignment(partition_index=1, broker_ids=[3, 1])])
        r = await client.request(CT(topics=[topic], timeout_ms=30000), 7)
        assert r.topics[0].error_code == 0, r
        return r.topics[0].topic_id
    finally:
        await client.close()


async def test_a_topic_created_after_the_copy_is_dual_written_alike(tmp_path: Path, zookeeper: ZooKeeper) -> None:
    """DUAL_WRITE on both controllers: a topic created through each after the copy reaches its
    ZooKeeper as the same znodes (topic with its assignment, partitions, states, config), and
    each /migration moves past the copy."""
    root: Any = zookeeper.client()
    try:

        base = "/dual"
        root.ensure_path(f"{base}/seed")
        seed_under(zookeeper.connect + f"{base}/seed", DUAL_SPEC)
        sides = (f"{base}/for-kafka", f"{base}/for-kraftsim")
        for side in sides:
            copy_tree(root, f"{base}/seed", side)
        cid = random_cluster_id()
        common = {**PAIR_CONFIG, "zookeeper.metadata.migration.enable": "true"}
        k = KafkaNode(tmp_path / "kafka", cluster_id=cid,
                      overrides={**common, "zookeeper.connect": zookeeper.connect + sides[0]})
        s = KraftsimNode(tmp_path / "kraftsim", cluster_id=cid,
                         overrides={**common, "zookeeper.connect": zookeeper.connect + sides[1]})
        k.format()
        s.format()
        nodes = PairNodes(k, s).start()
        try:
            copy_end = {}
            for node, side in zip(nodes.nodes, sides, strict=True):
                await register_zk_brokers(node.bootstrap, cid, unfence=True)
                await poll_until(lambda c=side: copied(root, c), 90, interval=0.1)
                copy_end[side] = zk_json(root, f"{side}/migration")["kraft_metadata_offset"]
            for node in nodes.nodes:  # a topic created before DUAL_WRITE is the reconcile's, not a delta
                await in_dual_write(node)
            ids = {}
            for node, side in zip(nodes.nodes, sides, strict=True):
                ids[side] = await create_topic(node.bootstrap)
                await poll_until(lambda c=side: root.exists(f"{c}/brokers/topics/dual/partitions/1/state")
                                 and root.exists(f"{c}/config/topics/dual"), 30, interval=0.05)
                try:
                    await poll_until(lambda c=side: zk_json(root, f"{c}/migration")["kraft_metadata_offset"]
                                     > copy_end[c], 30, interval=0.05)
                except AssertionError as e:
                    raise AssertionError(f"{side}: /migration {zk_json(root, f'{side}/migration')} still at the "
                                         f"copy's offset {copy_end[side]}") from e
        finally:
            nodes.stop()
        kafka_side, ours = (topic_znodes(root, side, "dual") for side in sides)
        assert ours == kafka_side
        for side in sides:
            assert from_str(zk_json(root, f"{side}/brokers/topics/dual")["topic_id"]) == ids[side]
    finally:
        root.stop()
        root.close()

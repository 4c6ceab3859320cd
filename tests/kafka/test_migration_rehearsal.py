"""The road from ZooKeeper to Kafka 4.4 rehearsed end to end (tests/kafka/rehearsal.py plays it):
a real ZooKeeper, three real Kafka 3.9.2 brokers in ZooKeeper mode filled by Kafka's tools and a
producer, rolled with the migration configs onto kraftsim, rolled again to KRaft mode, their
messages consumed, and kraftsim finalized; then kraftsim restarted as a Kafka 4.4 controller, the
brokers rolled to Kafka 4.4.0 and metadata.version raised to 4.4 by Kafka 4.4's own tool, with a
producer and a consumer running across every step and nothing acknowledged lost. The oracle for
the migration: a real Kafka 3.9.2 KRaft controller migrates a copy of the same ZooKeeper content,
and the records it writes for the copy are those kraftsim wrote."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import poll_until
from tests.kafka.conftest import PAIR_CONFIG
from tests.kafka.harness import KafkaNode
from tests.kafka.provision import RELEASES
from tests.kafka.rehearsal import (
    BROKER_IDS,
    MESSAGE_TOPICS,
    OFFSETS_PARTITIONS,
    TOPICS,
    Rehearsal,
    Traffic,
    create_topic,
    until,
)
from tests.kafka.test_migration import copied, copy_tree, migration_section, normalised, register_zk_brokers
from tests.zookeeper import ZooKeeper, running

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.story]
log = logging.getLogger("rehearsal")


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    yield from running(tmp_path_factory.mktemp("zookeeper"))


def settled(section: list[list[tuple[int, str, Any]]]) -> Any:
    """The copy's records with what the roll moves left out: partition leaders, ISRs and their
    epochs (the ZooKeeper controller elects as brokers restart; the oracle's copy is taken a moment
    later than kraftsim's read) and partition epochs (zkVersions, which a copied znode restarts);
    and NoOpRecords, which a controller writes on a timer, between the copy's batches too."""
    for batch in section:
        for _, name, record in batch:
            if name == "PartitionRecord":
                record.leader, record.isr, record.leader_epoch, record.partition_epoch = -1, [], 0, 0
    return normalised([[r for r in batch if r[1] != "NoOpRecord"] for batch in section])


def records(dump: str) -> list[tuple[str, dict[str, Any]]]:
    """``kraftsim dump-log --json`` output as (record type, fields)."""
    out = []
    for line in dump.splitlines():
        r = json.loads(line).get("record", {})
        if "recordType" in r:
            out.append((r["recordType"], r["data"]))
    return out


def copy_for_the_oracle(r: Rehearsal) -> None:
    """The rehearsal's ZooKeeper copied under /oracle, without what the controllers own
    (/controller, /migration)."""
    copy_tree(r.zk, r.chroot, "/oracle")
    for owned in ("/oracle/controller", "/oracle/migration"):
        r.zk.delete(owned)


async def oracle_copy(r: Rehearsal, tmp_path: Path, zookeeper: ZooKeeper) -> KafkaNode:
    """A real Kafka 3.9.2 KRaft controller migrates the copy, after the same three brokers
    registered with it as migrating ZooKeeper brokers."""
    cid = r.cluster_id()
    k = KafkaNode(tmp_path / "oracle", cluster_id=cid, overrides={
        **PAIR_CONFIG, "zookeeper.metadata.migration.enable": "true", "zookeeper.connect": zookeeper.connect + "/oracle"})
    k.format()
    k.start()
    try:
        await register_zk_brokers(k.bootstrap, cid)
        await poll_until(lambda: copied(r.zk, "/oracle"), 90, interval=0.1)
    finally:
        k.stop()
    return k


async def test_the_rehearsal_from_zookeeper_to_kraft(tmp_path: Path, zookeeper: ZooKeeper) -> None:
    r = Rehearsal(tmp_path, zookeeper, say=log.info)
    traffic: Traffic | None = None
    try:
        # 1. The ZooKeeper-mode cluster, filled by Kafka's tools, with messages; from here on a
        # producer and a consumer run across every step.
        r.start_zk_cluster()
        r.fill()
        r.produce()
        assert sorted(r.zk.get_children(f"{r.chroot}/brokers/topics")) == sorted(TOPICS)
        topic_names = {*TOPICS, "__consumer_offsets"}
        traffic = Traffic(r.bootstrap).start()
        until("the traffic flowing", lambda: traffic is not None and min(traffic.counts()) > 0, 60)
        # (Its consumer's group made the brokers create __consumer_offsets, as any group does.)
        until("__consumer_offsets created", lambda: r.exists("/brokers/topics/__consumer_offsets"), 60)
        traffic.step("ZooKeeper mode")

        # 2. kraftsim with migration on; the brokers rolled with the migration configs.
        r.start_controller()
        # (PRE_MIGRATION is in the activation records, committed a moment after /healthz says active.)
        until("PRE_MIGRATION", lambda: r.migration_state()["zkMigrationState"] == "PRE_MIGRATION", 30)
        r.roll_with_migration_configs()
        state = r.wait_dual_write()
        assert state["zkMigrationState"] == "MIGRATION"
        assert r.znode("/controller")["brokerid"] == 3000 and r.znode("/migration")["kraft_controller_id"] == 3000

        # Every ZooKeeper entity is a record (as `kraftsim dump-log` shows them).
        got = records(r.dump_log())
        topics = {d["name"]: d["topicId"] for t, d in got if t == "TopicRecord"}
        assert set(topics) == topic_names
        for t in TOPICS:  # the ids ZooKeeper-mode Kafka gave them
            assert r.znode(f"/brokers/topics/{t}")["topic_id"] == topics[t]
        assert sum(t == "PartitionRecord" for t, _ in got) == 2 * len(TOPICS) + OFFSETS_PARTITIONS
        configs = {(d["resourceType"], d["resourceName"], d["name"]): d["value"] for t, d in got if t == "ConfigRecord"}
        assert configs[(2, TOPICS[0], "cleanup.policy")] == "compact"
        assert configs[(2, TOPICS[1], "retention.ms")] == "3600001"
        assert configs[(4, "", "log.cleaner.threads")] == "2"
        assert configs[(4, "1", "log.cleaner.io.buffer.size")] == "1048576"
        quotas = {tuple((e["entityType"], e["entityName"]) for e in d["entity"]): (d["key"], d["value"])
                  for t, d in got if t == "ClientQuotaRecord"}
        assert quotas == {(("user", "alice"),): ("producer_byte_rate", 1048576.0),
                          (("user", "alice"), ("client-id", "app")): ("request_percentage", 50.0),
                          (("client-id", None),): ("consumer_byte_rate", 2097152.0),
                          (("ip", "127.0.0.2"),): ("connection_creation_rate", 10.0)}
        assert sorted((d["name"], d["mechanism"], d["iterations"]) for t, d in got
                      if t == "UserScramCredentialRecord") == [("alice", 1, 8192), ("bob", 2, 4096)]
        assert sorted((d["principal"], d["resourceName"], d["operation"], d["permissionType"]) for t, d in got
                      if t == "AccessControlEntryRecord") == [
            ("User:alice", "orders-1", 3, 3), ("User:alice", "orders-1", 8, 3), ("User:bob", "g-", 3, 3),
            ("User:eve", "kafka-cluster", 2, 2)]
        pids = [d for t, d in got if t == "ProducerIdsRecord"]  # the idempotent producer's block
        assert pids and pids[-1]["nextProducerId"] == int(r.znode("/latest_producer_id_block")["block_end"]) + 1
        assert [d["zkMigrationState"] for t, d in got if t == "ZkMigrationStateRecord"] == [2, 1]  # PRE, then MIGRATION

        copy_for_the_oracle(r)  # ZooKeeper as kraftsim copied it, for the oracle below

        # The brokers are driven by kraftsim (UpdateMetadata v8 naming it, LeaderAndIsr), so a topic
        # created through them is forwarded to kraftsim, which dual-writes it to ZooKeeper.
        until("every broker told by kraftsim", r.told_by_kraftsim, 60)
        assert r.migration_state()["brokerRequests"] >= 2 * len(BROKER_IDS)
        create_topic(r.bootstrap, "during-dual-write")
        until("the topic dual-written", lambda: r.exists("/brokers/topics/during-dual-write"), 60)
        assert r.znode("/brokers/topics/during-dual-write")["topic_id"] == next(
            d["topicId"] for t, d in records(r.dump_log()) if t == "TopicRecord" and d["name"] == "during-dual-write")

        # 3. Rolled to KRaft mode, the brokers serve what was written before the migration. Meanwhile
        # the oracle: Kafka's controller copies the same content into the same records.
        oracle, _ = await asyncio.gather(oracle_copy(r, tmp_path, zookeeper), asyncio.to_thread(r.roll_to_kraft))
        assert r.controller is not None
        assert settled(migration_section(r.controller.metadata_dir)) == settled(migration_section(oracle.metadata_dir))
        consumed = r.consume()
        for t in MESSAGE_TOPICS:
            assert sorted(consumed.get(t, [])) == sorted(r.sent[t]), t

        traffic.step("migration")

        # 4. Finalized: POST_MIGRATION, and ZooKeeper is written no more.
        assert r.finalize() == {"enabled": False, "zkMigrationState": "POST_MIGRATION"}
        create_topic(r.bootstrap, "after-finalization")
        assert r.controller is not None
        assert "after-finalization" in {d["name"] for t, d in records(r.dump_log()) if t == "TopicRecord"}
        assert not r.exists("/brokers/topics/after-finalization")
        traffic.step("finalized")

        # 5. On to Kafka 4.4: kraftsim speaks 4.4 on the 3.9-IV0 log (the middle of a rolling
        # upgrade), the brokers are rolled to 4.4.0's jars, and 4.4's kafka-features finishes it.
        assert "is a Kafka 4.4 controller" in r.upgrade_controller("4.4")
        r.roll_to_release(RELEASES["4.4"])
        assert all(b.kafka_version == RELEASES["4.4"] and "Kafka version: 4.4.0" in b.log_tail(100_000)
                   for b in r.brokers.values())
        assert r.upgrade_features("4.4", RELEASES["4.4"]) == "4.4-IV2"
        create_topic(r.bootstrap, "on-4.4")  # forwarded by a 4.4 broker, at 4.4-IV2
        until("on-4.4 led and in sync", r.brokers_in_sync, 60)
        traffic.step("Kafka 4.4")

        # Nothing the producer was told was written is lost, and it wrote throughout.
        acked, lost = traffic.finish()
        assert not lost, f"{len(lost)} of {len(acked)} acknowledged messages lost"
        assert not traffic.errors, traffic.errors[:3]
        assert all(during[0] > 0 for during in (s[1:] for s in traffic.steps)), traffic.steps
    finally:
        if traffic is not None:
            traffic.finish(timeout=0)
        r.close()

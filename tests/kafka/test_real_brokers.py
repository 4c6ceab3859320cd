"""Real Kafka 3.9 brokers whose only controller is kraftsim: they fetch and replay the metadata
log, register and are unfenced, forward admin requests in an Envelope, take producer id blocks,
move ISRs through AlterPartition, get their preferred leaderships back from the leader balancer,
and carry real messages through kill -9, SIGTERM, a controller restart and a late start from a
snapshot.

One module-scoped cluster (a kraftsim controller and three brokers); the tests run in file order
and each leaves the cluster whole (all brokers running and unfenced) for the next."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraftsim.faults.client import FaultClient
from tests.kafka.harness import kafka_metadata_quorum, kafka_reassign_partitions, kafka_topics
from tests.kafka.real_cluster import AdminClient, Cluster, consume, produce, until

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.story]

BROKER_IDS = (1, 2, 3)
SESSION_TIMEOUT_MS = 6000

# Snapshots every second and segments of 4 KiB kept only until a snapshot covers them, so that a
# broker that starts late finds the log start past offset 0 and must fetch a snapshot.
CONTROLLER_CONFIG = {
    "metadata.max.idle.interval.ms": "500",
    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "metadata.log.max.snapshot.interval.ms": "1000",
    "metadata.log.segment.bytes": "4096",
    "metadata.log.segment.min.bytes": "4096",
    "metadata.max.retention.bytes": "0",
    # The leader balancer checks every 2 s (Kafka's default is 300 s), so a broker that rejoins
    # gets its preferred leaderships back within the test.
    "leader.imbalance.check.interval.seconds": "2",
    "kraftsim.faults.enable": "true",  # the injected faults the brokers ride out (kraftsim.faults)
}
IMBALANCE = "kafka_controller_kafkacontroller_preferredreplicaimbalancecount"
BROKER_CONFIG = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": "5000",
    "default.replication.factor": "3",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("real-brokers"), BROKER_IDS, controller_config=CONTROLLER_CONFIG,
                broker_config=BROKER_CONFIG)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_brokers_register_fetch_and_are_unfenced(cluster: Cluster) -> None:
    c = cluster
    until("three brokers active, none fenced", c.all_unfenced, 60)
    status = kafka_metadata_quorum("--bootstrap-controller", c.controller.bootstrap, "describe", "--status").check()
    assert re.search(rf"LeaderId:\s+{c.controller.node_id}\b", status.stdout), status.stdout
    for i in BROKER_IDS:
        assert f'"id": {i},' in status.stdout, status.stdout  # every broker is an observer
    replication = kafka_metadata_quorum("--bootstrap-controller", c.controller.bootstrap,
                                        "describe", "--replication").check()
    observers = [line for line in replication.stdout.splitlines() if line.rstrip().endswith("Observer")]
    assert sorted(int(line.split()[0]) for line in observers) == list(BROKER_IDS), replication.stdout


def test_topics_created_described_and_altered_through_a_broker(cluster: Cluster) -> None:
    c = cluster
    bs = ("--bootstrap-server", c.brokers[1].bootstrap)
    kafka_topics(*bs, "--create", "--topic", "orders", "--partitions", "3", "--replication-factor", "3").check()
    parts = until("orders has leaders and full ISRs",
                  lambda: (p := c.partitions("orders")) and len(p) == 3
                  and all(leader in BROKER_IDS and isr == list(BROKER_IDS) for leader, _, isr in p.values()) and p)
    assert {leader for leader, _, _ in parts.values()} == set(BROKER_IDS)  # leaders spread over the brokers
    described = kafka_topics(*bs, "--describe", "--topic", "orders").check().stdout
    assert "PartitionCount: 3" in described and "ReplicationFactor: 3" in described, described
    kafka_topics(*bs, "--alter", "--topic", "orders", "--partitions", "4").check()
    until("orders has 4 partitions", lambda: (p := c.partitions("orders")) and len(p) == 4)
    again = kafka_topics(*bs, "--create", "--topic", "orders", "--partitions", "1")
    assert again.returncode != 0 and "already exists" in again.stdout + again.stderr


def test_ten_thousand_idempotent_messages_and_a_consumer_group(cluster: Cluster) -> None:
    c = cluster
    kafka_topics("--bootstrap-server", c.bootstrap.split(",")[0], "--create", "--topic", "messages",
                 "--partitions", "3", "--replication-factor", "3").check()
    until("messages has leaders", lambda: (p := c.partitions("messages")) and all(v[0] >= 0 for v in p.values()))
    acked = produce(c, "messages", 10_000, "m")
    assert len(acked) == 10_000
    seen = consume(c, "messages", "readers", 10_000)
    assert sorted(seen) == sorted(acked)
    # The group's offsets live in __consumer_offsets, created through the controller.
    offsets = until("__consumer_offsets exists", lambda: c.partitions("__consumer_offsets"))
    assert len(offsets) == 3 and all(len(r) == 3 for _, r, _ in offsets.values())


def test_kill_9_fences_moves_leaders_shrinks_isrs_and_the_broker_rejoins(cluster: Cluster) -> None:
    c = cluster
    victim = c.brokers[3]
    before = until("orders' leaders", lambda: c.partitions("orders"))
    victim.kill()
    t0 = time.monotonic()
    until("broker 3 fenced", lambda: c.broker_counts() == (2, 1), SESSION_TIMEOUT_MS / 1000 + 30)
    assert time.monotonic() - t0 >= SESSION_TIMEOUT_MS / 1000 * 0.5  # by the session timeout, not at once
    after = until("no leader or ISR on broker 3",
                  lambda: (p := c.partitions("orders")) and all(
                      leader != 3 and 3 not in isr for leader, _, isr in p.values()) and p)
    assert {pid for pid, (leader, _, _) in before.items() if leader == 3}, "broker 3 led something before"
    assert all(sorted(r) == list(BROKER_IDS) for _, r, _ in after.values())  # replicas stay, ISRs shrank
    # Its partitions are led by others meanwhile: imbalanced, and no check can elect broker 3.
    assert c.metrics()[IMBALANCE] > 0
    acked = produce(c, "orders", 500, "while-down")  # min.insync.replicas=2 still holds
    victim.start(timeout=120)
    until("broker 3 unfenced again", c.all_unfenced, 60)
    until("broker 3 back in every ISR",
          lambda: (p := c.partitions("orders")) and all(isr == list(BROKER_IDS) for _, _, isr in p.values()), 90)
    seen = consume(c, "orders", "after-kill", len(acked))
    assert acked <= set(seen)
    # Back in the ISRs, broker 3 gets the leaderships it lost from the leader balancer, with no
    # ElectLeaders: every partition of every topic is led by its preferred replica again.
    until("no partition imbalanced (PreferredReplicaImbalanceCount 0)", lambda: c.metrics()[IMBALANCE] == 0, 60)
    until("every orders partition led by its preferred replica",
          lambda: (p := c.partitions("orders")) and all(leader == replicas[0] for leader, replicas, _ in p.values()))


def test_kafka_reassign_partitions_moves_a_replica(cluster: Cluster, tmp_path: Path) -> None:
    """kafka-reassign-partitions --execute, then --verify until done: broker 2 copies the
    partition from broker 1, joins the ISR (AlterPartition), and the controller completes the
    move by dropping broker 1."""
    c = cluster
    bs = ("--bootstrap-server", c.bootstrap)
    kafka_topics(*bs, "--create", "--topic", "moving", "--replica-assignment", "1").check()
    until("moving has its leader", lambda: (p := c.partitions("moving")) and p[0][0] == 1)
    acked = produce(c, "moving", 1_000, "moved")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "moving", "partition": 0, "replicas": [2]}]}))
    started = kafka_reassign_partitions(*bs, "--reassignment-json-file", str(plan), "--execute").check()
    assert "Successfully started partition reassignment" in started.stdout, started.stdout
    until("the reassignment verified complete",
          lambda: "Reassignment of partition moving-0 is completed" in kafka_reassign_partitions(
              *bs, "--reassignment-json-file", str(plan), "--verify").stdout, 120, every=1)
    assert c.partitions("moving") == {0: (2, [2], [2])}
    assert set(consume(c, "moving", "after-move", len(acked))) == acked


def test_sigterm_is_a_controlled_shutdown(cluster: Cluster) -> None:
    c = cluster
    broker = c.brokers[2]
    code = broker.stop(timeout=60)
    assert code in (0, 143), broker.log_tail()
    text = broker.log_path.read_text()
    # The broker asks through its heartbeats, and kraftsim lets it go once it leads nothing.
    begun = text.rfind("Beginning controlled shutdown.")
    assert begun >= 0, broker.log_tail()
    assert text.find("The controller has asked us to exit controlled shutdown.", begun) > begun, broker.log_tail()
    assert text.find("[BrokerServer id=2] shut down completed", begun) > begun, broker.log_tail()
    until("broker 2 fenced after shutting down", lambda: c.broker_counts() == (2, 1), 30)
    broker.start(timeout=120)
    until("broker 2 unfenced again", c.all_unfenced, 60)


def test_a_controller_restart_loses_no_acknowledged_message(cluster: Cluster) -> None:
    c = cluster
    kafka_topics("--bootstrap-server", c.bootstrap.split(",")[0], "--create", "--topic", "restart",
                 "--partitions", "3", "--replication-factor", "3").check()
    until("restart has leaders", lambda: (p := c.partitions("restart")) and all(v[0] >= 0 for v in p.values()))
    acked = produce(c, "restart", 2_000, "before")
    assert c.controller.stop() == 0
    c.controller.start()
    until("the brokers back and unfenced after the controller restart", c.all_unfenced, 90)
    acked |= produce(c, "restart", 2_000, "after")
    kafka_topics("--bootstrap-server", c.bootstrap.split(",")[0], "--create", "--topic", "after-restart",
                 "--partitions", "1", "--replication-factor", "3").check()  # forwarding works again
    seen = consume(c, "restart", "restart-readers", len(acked))
    assert set(seen) == acked and len(acked) == 4_000


def faults(c: Cluster) -> FaultClient:
    return FaultClient(f"127.0.0.1:{c.controller.http_port}")


def test_heartbeats_refused_for_half_a_session_make_the_brokers_retry_and_fence_nobody(cluster: Cluster) -> None:
    """NOT_CONTROLLER for every heartbeat, for half the session timeout: the brokers' channel
    drops the connection, finds the controller again and retries until the fault ends; no broker
    is fenced (one fenced meanwhile would stay fenced until the fault ends: every heartbeat that
    could unfence it is refused too, so sampling through the fault sees it)."""
    c = cluster
    until("every broker unfenced", c.all_unfenced, 60)
    api = faults(c)
    fault = api.add("request", api="BrokerHeartbeat", error="NOT_CONTROLLER", duration_ms=SESSION_TIMEOUT_MS // 2)
    deadline = time.monotonic() + SESSION_TIMEOUT_MS / 1000 + 30
    while any(f["id"] == fault["id"] for f in api.active()):
        assert c.broker_counts() == (3, 0)
        assert time.monotonic() < deadline, "the fault never ended"
        time.sleep(0.2)
    end = next(e for e in api.timeline() if e["id"] == fault["id"] and e["event"] == "end")
    assert end["reason"] == "expired" and end["hits"] >= len(BROKER_IDS)  # each broker heard it, and retried
    assert c.broker_counts() == (3, 0)
    acked = produce(c, "orders", 200, "after-refusals")  # the cluster works on as before
    assert len(acked) == 200


def test_a_partitioned_broker_is_fenced_alone_and_rejoins_when_it_heals(cluster: Cluster) -> None:
    """Broker 2's connections to the controller (its heartbeat and Raft channels, known by their
    client ids) stop carrying anything, both ways: it alone is fenced when its session runs out,
    and once the partition heals it reconnects and is unfenced again, without a restart."""
    c = cluster
    until("every broker unfenced", c.all_unfenced, 60)
    api = faults(c)
    fault = api.add("network", partition=True, brokers=[2], duration_ms=SESSION_TIMEOUT_MS + 4000)
    until("broker 2 fenced, alone", lambda: c.broker_counts() == (2, 1), SESSION_TIMEOUT_MS / 1000 + 10)
    brokers = json.loads(urllib.request.urlopen(  # noqa: S310 - the controller's own loopback listener
        f"http://127.0.0.1:{c.controller.http_port}/faults", timeout=5).read())["faults"]
    assert [(f["id"], f["hits"] >= 1) for f in brokers] == [(fault["id"], True)]  # its connections were cut
    until("the partition healed", lambda: not api.active(), SESSION_TIMEOUT_MS / 1000 + 10)
    until("broker 2 unfenced again", c.all_unfenced, 60)
    acked = produce(c, "orders", 200, "after-partition")
    assert len(acked) == 200


def test_a_late_broker_catches_up_through_a_snapshot(cluster: Cluster) -> None:
    c = cluster
    pdir = c.controller.metadata_dir / "__cluster_metadata-0"
    start = until("the log start moved past 0 (snapshot + retention)",
                  lambda: (s := sorted(pdir.glob("*.log"))) and int(s[0].stem) > 0 and int(s[0].stem))
    assert list(pdir.glob("*.checkpoint")), "a snapshot exists"
    late = c.new_broker(4)
    late.format()
    late.start(timeout=120)
    try:
        until("broker 4 unfenced", lambda: c.broker_counts() == (4, 0), 60)
        fetched = sorted((late.metadata_dir / "__cluster_metadata-0").glob("*.checkpoint"))
        assert fetched and int(fetched[0].name.split("-")[0]) >= start, fetched  # FetchSnapshot, not the log
        md = AdminClient({"bootstrap.servers": late.bootstrap}).list_topics(timeout=10)
        assert {"orders", "messages", "restart"} <= set(md.topics)
    finally:
        late.stop(timeout=60)

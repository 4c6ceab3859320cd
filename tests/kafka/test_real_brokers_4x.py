"""Real Kafka 4.0 and 4.4 brokers whose only controller is kraftsim speaking the same release
(``kraftsim.release``): they register and are unfenced at the release's metadata.version, carry
idempotent messages to a consumer of KIP-848's group protocol (``group.protocol=consumer``, the
default protocol of Kafka 4), and ride out a broker's kill -9 and a controller restart with
nothing acknowledged lost. The release's own tools (kafka-topics, kafka-configs,
kafka-metadata-quorum, kafka-dump-log, and 4.3.1's metadata shell, the newest this registry
serves) work against that cluster and read kraftsim's files. (Compared line for line with a real
4.4 controller's cluster: the controller-facing tools in test_tools_44.py, the admin tools through a
broker in test_admin_tools.py.)

The 3.9 story (test_real_brokers.py) is longer; this one is the same road in fewer steps, once
per release, with two brokers, so that it costs little of the suite's budget. The tests run in
file order and each leaves the cluster whole for the next."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraftsim.metadata import versions
from kraftsim.metadata.files import METADATA_TOPIC_DIR
from kraftsim.metadata.image import MetadataImage
from kraftsim.metadata.snapshots import load_snapshot
from tests.kafka.harness import ToolResult, kafka_features, run_tool, tool_class
from tests.kafka.real_cluster import Cluster, ck, consume, produce, until

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.story]

from confluent_kafka.admin import NewTopic  # noqa: E402

BROKER_IDS = (1, 2)
SESSION_TIMEOUT_MS = 6000
CONTROLLER_CONFIG = {
    "metadata.max.idle.interval.ms": "500",
    "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "metadata.log.max.snapshot.interval.ms": "1000",  # a snapshot for the tools to read
}
SHELL_VERSION = "4.3.1"  # the newest kafka-shell Maven Central serves here (none for 4.4.0)
BROKER_CONFIG = {
    "offsets.topic.replication.factor": "2",
    "offsets.topic.num.partitions": "2",
    "transaction.state.log.replication.factor": "2",
    "min.insync.replicas": "1",
    "replica.lag.time.max.ms": "5000",
    "default.replication.factor": "2",
}


@pytest.fixture(scope="module", params=["4.0.2", "4.4.0"], ids=["4.0", "4.4"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    version: str = request.param
    c = Cluster(tmp_path_factory.mktemp(f"real-brokers-{version}"), BROKER_IDS, controller_config=CONTROLLER_CONFIG,
                broker_config=BROKER_CONFIG, kafka_version=version)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def create_topic(c: Cluster, name: str, partitions: int = 3) -> None:
    admin = c.admin()
    futures = admin.create_topics([NewTopic(name, partitions, len(BROKER_IDS))], operation_timeout=30)
    for f in futures.values():
        f.result(60)
    until(f"{name} has leaders and full ISRs",
          lambda: (p := c.partitions(name)) and len(p) == partitions
          and all(leader in BROKER_IDS and isr == list(BROKER_IDS) for leader, _, isr in p.values()))


def test_brokers_register_at_the_release_and_are_unfenced(cluster: Cluster) -> None:
    c = cluster
    until("both brokers active, none fenced", c.all_unfenced, 60)
    # The release's own tool, pointed at kraftsim, sees the release's metadata.version finalized.
    described = kafka_features("--bootstrap-controller", c.controller.bootstrap, "describe",
                               version=c.kafka_version).check().stdout
    level = re.search(r"Feature: metadata\.version\s+SupportedMinVersion: \S+\s+SupportedMaxVersion: \S+\s+"
                      r"FinalizedVersionLevel: (\S+)", described)
    assert level and level.group(1).startswith(f"{c.release}-IV"), described
    admin = c.admin()  # (kept: a client handle collected before its future resolves cancels it)
    nodes = admin.describe_cluster(request_timeout=10).result(30).nodes
    assert sorted(n.id for n in nodes) == list(BROKER_IDS)


def test_idempotent_messages_reach_a_consumer_of_the_new_group_protocol(cluster: Cluster) -> None:
    c = cluster
    create_topic(c, "orders")
    acked = produce(c, "orders", 2_000, "m")
    assert len(acked) == 2_000
    seen = consume(c, "orders", "readers", len(acked), group_protocol="consumer")
    assert sorted(seen) == sorted(acked)
    # A KIP-848 group: its coordinator runs it with the consumer protocol, its offsets are kept.
    admin = c.admin()
    group = admin.describe_consumer_groups(["readers"], request_timeout=10)["readers"].result(30)
    assert group.type == ck.ConsumerGroupType.CONSUMER, group
    offsets = until("__consumer_offsets exists", lambda: c.partitions("__consumer_offsets"))
    assert len(offsets) == 2 and all(sorted(r) == list(BROKER_IDS) for _, r, _ in offsets.values())


def test_kill_9_of_a_broker_fences_it_and_it_rejoins(cluster: Cluster) -> None:
    c = cluster
    victim = c.brokers[2]
    victim.kill()
    until("broker 2 fenced", lambda: c.broker_counts() == (1, 1), SESSION_TIMEOUT_MS / 1000 + 30)
    until("no leader or ISR on broker 2",
          lambda: (p := c.partitions("orders")) and all(leader == 1 and isr == [1] for leader, _, isr in p.values()))
    acked = produce(c, "orders", 500, "while-down")
    victim.start(timeout=120)
    until("broker 2 unfenced again", c.all_unfenced, 60)
    until("broker 2 back in every ISR",
          lambda: (p := c.partitions("orders")) and all(isr == list(BROKER_IDS) for _, _, isr in p.values()), 90)
    assert acked <= set(consume(c, "orders", "after-kill", 2_500, group_protocol="consumer"))


def test_a_controller_restart_loses_no_acknowledged_message(cluster: Cluster) -> None:
    c = cluster
    create_topic(c, "restart")
    acked = produce(c, "restart", 1_000, "before")
    assert c.controller.stop() == 0
    c.controller.start()
    until("the brokers back and unfenced after the controller restart", c.all_unfenced, 90)
    acked |= produce(c, "restart", 1_000, "after")
    create_topic(c, "after-restart", 1)  # forwarding to the controller works again
    seen = consume(c, "restart", "restart-readers", len(acked), group_protocol="consumer")
    assert set(seen) == acked and len(acked) == 2_000


def tool(c: Cluster, name: str, *args: str) -> ToolResult:
    """The release's tool ``name``, wherever that release keeps it (harness.MOVED)."""
    return run_tool(tool_class(name, c.kafka_version), *args, version=c.kafka_version).check()


def test_the_releases_tools_drive_kraftsim_and_read_its_files(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    bs = ("--bootstrap-server", c.brokers[1].bootstrap)
    # kafka-topics and kafka-configs through a broker, which forwards to kraftsim.
    tool(c, "TopicCommand", *bs, "--create", "--topic", "tooled", "--partitions", "2",
         "--replication-factor", "2", "--config", "retention.ms=3600000")
    tool(c, "ConfigCommand", *bs,
         "--alter", "--entity-type", "topics", "--entity-name", "tooled", "--add-config", "cleanup.policy=compact")
    described = until("tooled described with both configs", lambda: (out := tool(
        c, "TopicCommand", *bs, "--describe", "--topic", "tooled").stdout)
        and "cleanup.policy=compact" in out and out)
    assert "PartitionCount: 2" in described and "retention.ms=3600000" in described, described
    # kafka-metadata-quorum against the controller: kraftsim leads, both brokers observe.
    bc = ("--bootstrap-controller", c.controller.bootstrap)
    status = tool(c, "MetadataQuorumCommand", *bc, "describe", "--status").stdout
    assert re.search(rf"LeaderId:\s+{c.controller.node_id}\b", status), status
    replication = tool(c, "MetadataQuorumCommand", *bc, "describe", "--replication").stdout
    rows = [line.split() for line in replication.splitlines()[1:] if line.strip()]
    assert sorted((int(r[0]), r[-1]) for r in rows) == [(1, "Observer"), (2, "Observer"),
                                                         (c.controller.node_id, "Leader")], replication
    # kafka-dump-log reads kraftsim's segments and its latest snapshot, record for record.
    pdir = c.controller.metadata_dir / METADATA_TOPIC_DIR
    snapshot = until("a snapshot written", lambda: sorted(pdir.glob("*.checkpoint"))[-1:], 30)[0]
    segment = sorted(pdir.glob("*.log"))[0]
    dumped = tool(c, "DumpLogSegments", "--cluster-metadata-decoder", "--files",
                  f"{segment},{snapshot}").stdout
    assert "Exception" not in dumped and "Error" not in dumped, dumped[-2000:]
    image = MetadataImage(release=versions.release(c.release))
    for i, (rec, _) in enumerate(load_snapshot(snapshot)):
        image.replay(rec, i, 0)
    assert dumped.count('"type":"TOPIC_RECORD"') >= len(image.topics.by_name), dumped[-2000:]
    assert '"type":"FEATURE_LEVEL_RECORD"' in dumped and '"type":"REGISTER_BROKER_RECORD"' in dumped
    # The metadata shell loads the snapshot into Kafka's own image (a copy: the shell, as Kafka's
    # tools do, refuses a directory a running controller has locked).
    copy = tmp_path / snapshot.name
    shutil.copyfile(snapshot, copy)
    def shell() -> ToolResult:
        r = run_tool("org.apache.kafka.shell.MetadataShell", "--snapshot", str(copy), "ls", "/image/topics/byName",
                     version=SHELL_VERSION)
        assert r.returncode == 0, r.stderr
        return r

    level = image.features.metadata_version
    if level is not None and not versions.release("4.3").is_known(level):
        # A 4.4 snapshot (4.4-IV2) is past what 4.3.1's shell knows, as Kafka 4.4's own would be.
        refused = shell()
        assert f"No MetadataVersion with feature level {level}." in refused.stderr, refused.stderr
    else:
        # The shell runs a one-shot command once its loader has applied *some* offset, which can
        # be before the whole snapshot is published (test_files.shell_tree): asked again until
        # it lists the topics, with a deadline.
        listed = until("the shell lists the snapshot's topics",
                       lambda: (r := shell()) and sorted(r.stdout.split()) == sorted(image.topics.by_name) and r, 60)
        assert sorted(listed.stdout.split()) == sorted(image.topics.by_name)

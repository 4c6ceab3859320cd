"""Files, both ways: Kafka 3.9's tools on kraftsim's log, segments and snapshots; kraftsim on
directories Kafka formatted and wrote; controllers swapped on the same directory and node id;
and golden record bytes from Kafka's own serializer.

Each workload runs once per module on one controller with tiny segments and a tiny snapshot
threshold, so its directory holds several segments and at least one snapshot; tests that write
to a directory work on a copy.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kraftsim.metadata.files import METADATA_TOPIC_DIR
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.segments import iter_file_batches
from kraftsim.metadata.snapshots import SnapshotId, load_snapshot
from kraftsim.rpc import uuids
from kraftsim.rpc.client import KafkaClient
from tests.kafka import differential as d
from tests.kafka import normalise as norm
from tests.kafka.conftest import PAIR_CONFIG, PairNodes, close, connect
from tests.kafka.differential import Call, Side, TopicSpec
from tests.kafka.golden import assert_golden
from tests.kafka.harness import (
    KafkaNode,
    KraftsimNode,
    Node,
    dump_log,
    kafka_storage,
    kraftsim_cli,
    metadata_shell,
    random_cluster_id,
)

pytestmark = pytest.mark.kafka

# Several segments and several snapshots from a few hundred records, on both controllers.
SMALL_FILES = {**PAIR_CONFIG,
               "metadata.log.max.record.bytes.between.snapshots": "3000",
               "metadata.log.segment.min.bytes": "1024",
               "metadata.log.segment.bytes": "4096"}


def workload() -> list[d.Step]:
    """Something of everything the controllers write: registrations, (un)fencing, topics with
    configs, deletions, a controlled shutdown, a feature change, client quotas, SCRAM credentials."""
    steps: list[d.Step] = [Call(f"register {b}", d.register(b, rack=f"rack-{b % 2}")) for b in (1, 2, 3)]
    steps += [Call(f"unfence {b}", d.heartbeat(b)) for b in (1, 2, 3)]
    steps += [Call(f"topic {i}", d.create_topics(TopicSpec(
        f"topic-{i}", assignments={p: [1 + (i + p) % 3, 1 + (i + p + 1) % 3] for p in range(3)},
        configs={"retention.ms": str(1000 * (i + 1)), "cleanup.policy": "compact"}))) for i in range(10)]
    steps += [
        Call("auto-placed topic", d.create_topics(TopicSpec("placed", 4, 3))),
        Call("delete two", d.delete_topics("topic-0", "topic-1", version=5), 5),
        Call("fence 2", d.heartbeat(2, want_fence=True)),
        Call("controlled shutdown of 3", d.heartbeat(3, want_shutdown=True)),
        Call("metadata.version 3.8", d.update_features(("metadata.version", 20, 2)), 1),
        Call("metadata.version 3.9", d.update_features(("metadata.version", 21, 1)), 1),
        Call("register 4", d.register(4)),
        Call("unfence 4", d.heartbeat(4)),
        Call("unregister 4", d.unregister(4)),
        Call("quotas", d.alter_client_quotas(
            (d.user_entity("alice"), [("producer_byte_rate", 1024.0), ("request_percentage", 50.0)]),
            # Named both: Kafka 3.9's metadata shell fails to print an entity with a default name.
            ([("user", "carol"), ("client-id", "app")], [("consumer_byte_rate", 2048.0)]),
            ([("ip", "192.0.2.1")], [("connection_creation_rate", 10.0)]))),
        Call("a quota removed", d.alter_client_quotas((d.user_entity("alice"), [("request_percentage", None)]))),
        Call("credentials", d.alter_scram(upsertions=[d.scram_upsertion("alice"), d.scram_upsertion("alice2", 2),
                                                      d.scram_upsertion("bob")])),
        Call("a credential deleted", d.alter_scram(deletions=[d.scram_deletion("bob")])),
        # One batch over the snapshot threshold (within a segment): whatever each controller counted
        # before, it cuts a snapshot of everything above right after it.
        Call("last topic", d.create_topics(TopicSpec("last", assignments={p: [1] for p in range(45)}))),
    ]
    return steps


def snapshots(node: Node) -> list[Path]:
    return sorted((node.metadata_dir / METADATA_TOPIC_DIR).glob("*.checkpoint"))


def segments(node: Node) -> list[Path]:
    return sorted((node.metadata_dir / METADATA_TOPIC_DIR).glob("*.log"))


async def run_workload(node: Node) -> None:
    host, port = node.bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port))
    try:
        t = await d.play(Side(node, client), workload())
        bad = [e for e in t if isinstance(e["response"], str)]
        assert not bad, bad
    finally:
        await client.close()


def wait_for_snapshot(node: Node, timeout: float = 60) -> None:
    """Until the node has written a snapshot of its whole log (the workload's last step makes one due)."""
    deadline = time.monotonic() + timeout
    end = d.log_end(node.metadata_dir)
    while not any(SnapshotId.parse(p.name) == SnapshotId(end, 1) for p in snapshots(node)):
        assert time.monotonic() < deadline, f"{node} wrote no snapshot at {end} within {timeout}s:\n{node.log_tail()}"
        time.sleep(0.05)


@dataclass
class Written:
    node: Node
    cluster_id: str


def write_with(node: Node) -> Written:
    node.format()
    node.start()
    try:
        asyncio.run(run_workload(node))
        wait_for_snapshot(node)
    finally:
        assert node.stop() in (0, 143), f"{node} did not stop cleanly:\n{node.log_tail()}"  # 143: JVM on SIGTERM
    return Written(node, node.cluster_id)


@pytest.fixture(scope="module")
def kraftsim_written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    return write_with(KraftsimNode(tmp_path_factory.mktemp("kraftsim-written"), cluster_id=random_cluster_id(),
                                   overrides=dict(SMALL_FILES)))


@pytest.fixture(scope="module")
def kafka_written(tmp_path_factory: pytest.TempPathFactory) -> Written:
    return write_with(KafkaNode(tmp_path_factory.mktemp("kafka-written"), cluster_id=random_cluster_id(),
                                overrides=dict(SMALL_FILES)))


# -- Kafka's tools on kraftsim's files -----------------------------------------------------------

_PAYLOAD = re.compile(r"^\| offset: (\d+) .*? payload: (\{.*\})$")
_CONTROL = re.compile(r"^\| offset: (\d+) .*? (?:controlType: ([A-Z_]+)\(\d+\)|(SnapshotHeader|SnapshotFooter|"
                      r"LeaderChange|KRaftVersion|KRaftVoters) (\{.*\}))$")


def camel_type(kafka_name: str) -> str:
    """REGISTER_BROKER_RECORD -> RegisterBrokerRecord (MetadataRecordType's JSON name)."""
    return "".join(w.capitalize() for w in kafka_name.split("_"))


def kafka_dump(paths: list[Path]) -> dict[str, list[Any]]:
    """DumpLogSegments' records per file: (offset, type, version, data) or (offset, control type)."""
    r = dump_log(*paths)
    assert r.returncode == 0, r.stderr
    assert "Exception" not in r.stdout + r.stderr and "error" not in r.stdout.lower(), r.stdout + r.stderr
    out: dict[str, list[Any]] = {}
    current = ""
    for line in r.stdout.splitlines():
        if line.startswith("Dumping "):
            current = line.removeprefix("Dumping ").strip()
            out[current] = []
        elif line.startswith("| offset:"):
            m = _PAYLOAD.match(line)
            if m:
                p = json.loads(m.group(2))
                out[current].append((int(m.group(1)), camel_type(p["type"]), p["version"], p["data"]))
                continue
            c = _CONTROL.match(line)
            assert c, f"unparsed DumpLogSegments line: {line}"
            out[current].append((int(c.group(1)), "control"))
    return out


def kraftsim_dump(paths: list[Path]) -> dict[str, list[Any]]:
    r = kraftsim_cli("dump-log", "--json", *map(str, paths))
    assert r.returncode == 0, r.stderr
    out: dict[str, list[Any]] = {str(p): [] for p in paths}
    for line in r.stdout.splitlines():
        doc = json.loads(line)
        rec = doc.get("record")
        if rec is None:
            continue
        if "controlType" in rec:
            out[doc["file"]].append((rec["offset"], "control"))
        else:
            out[doc["file"]].append((rec["offset"], rec["recordType"], rec["version"],
                                     norm.kafka_json(rec["recordType"], rec["version"], rec["data"])))
    return out


def test_dump_log_segments_reads_kraftsim_segments_and_snapshots(kraftsim_written: Written) -> None:
    node = kraftsim_written.node
    files = segments(node) + snapshots(node)
    assert len(segments(node)) >= 2 and snapshots(node), files
    theirs, ours = kafka_dump(files), kraftsim_dump(files)
    assert set(theirs) == {str(p) for p in files}
    for f in files:
        assert theirs[str(f)] == ours[str(f)], f
    kinds = {r[1] for rs in theirs.values() for r in rs}
    assert {"RegisterBrokerRecord", "PartitionRecord", "PartitionChangeRecord", "ConfigRecord",
            "RemoveTopicRecord", "FeatureLevelRecord", "BrokerRegistrationChangeRecord",
            "UnregisterBrokerRecord", "control"} <= kinds


def shell_tree(snapshot: Path, timeout: float = 60) -> dict[str, Any]:
    """``kafka-metadata-shell --snapshot FILE tree /image`` as nested dicts (leaves: text).

    The 3.9 shell runs a one-shot command once the loader has applied *some* offset
    (MetadataShell.waitUntilCaughtUp: lastAppliedOffset > 0), which can be before the whole
    file is published; so the command is repeated, with a deadline, until the image's
    provenance has reached the snapshot's last record."""
    last = max(r.offset for _, b in iter_file_batches(snapshot) if not b.is_control for r in b.records())
    deadline = time.monotonic() + timeout
    while True:
        r = metadata_shell("--snapshot", str(snapshot), "tree", "/image")
        assert r.returncode == 0, r.stderr
        # The 3.9 shell logs the snapshot's header and footer at ERROR while skipping them, for
        # Kafka's own snapshots too; anything else on stderr is a problem.
        noise = [ln for ln in r.stderr.splitlines()
                 if ln.strip() and "Ignoring control record with type SNAPSHOT_" not in ln]
        assert not noise, r.stderr
        tree = parse_tree(r.stdout)
        m = re.match(r"offset (\d+),", next(iter(tree.get("provenance", {})), ""))
        if m and int(m.group(1)) >= last:
            return tree
        assert time.monotonic() < deadline, f"the shell never caught up with {snapshot}:\n{r.stdout[-2000:]}"


def parse_tree(text: str) -> dict[str, Any]:
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    for line in text.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        while stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1]
        name = line.strip()
        if name.endswith(":") and not name.startswith(("BrokerRegistration(", "PartitionRegistration(")):
            child: dict[str, Any] = {}
            parent[name[:-1]] = child
            stack.append((depth, child))
        else:
            parent[name] = {}
    return root


def leaf(node: dict[str, Any]) -> str:
    assert len(node) == 1, node
    return next(iter(node))


def test_metadata_shell_reads_kraftsim_snapshot(kraftsim_written: Written) -> None:
    snap = snapshots(kraftsim_written.node)[-1]
    image = MetadataImage()
    for i, (rec, _) in enumerate(load_snapshot(snap)):
        image.replay(rec, i, 0)
    tree = shell_tree(snap)
    brokers = tree["cluster"]["brokers"]
    assert sorted(map(int, brokers)) == sorted(image.cluster.brokers)
    for b, reg in image.cluster.brokers.items():
        text = leaf(brokers[str(b)])
        assert f"epoch={reg.epoch}," in text and f"fenced={str(reg.fenced).lower()}," in text, text
        assert f"inControlledShutdown={str(reg.in_controlled_shutdown).lower()}," in text, text
    by_name = tree["topics"]["byName"]
    assert sorted(by_name) == sorted(image.topics.by_name)
    for name, topic in image.topics.by_name.items():
        assert leaf(by_name[name]["id"]) == uuids.to_str(topic.id)
        for pid, part in topic.partitions.items():
            text = leaf(by_name[name][str(pid)])
            assert f"replicas={list(part.replicas)}," in text and f"isr={list(part.isr)}," in text, text
            assert f"leader={part.leader}," in text and f"leaderEpoch={part.leader_epoch}," in text, text
    configs = {k.removeprefix("TOPIC:"): {n: leaf(v) for n, v in c.items()} for k, c in tree["configs"].items()}
    assert configs["topic-5"] == {"cleanup.policy": "compact", "retention.ms": "6000"}
    assert sorted(configs) == sorted(n for n in image.topics.by_name if n.startswith("topic-"))
    assert leaf(tree["features"]["metadataVersion"]) == "3.9-IV0"
    quotas = tree["clientQuotas"]
    assert len(quotas) == len(image.quotas.entities) == 3
    assert {k: leaf(v) for k, v in quotas["user(alice)"].items()} == {"producer_byte_rate": "1024.0"}
    assert leaf(quotas["clientId(app)_user(carol)"]["consumer_byte_rate"]) == "2048.0"
    assert leaf(quotas["ip(192.0.2.1)"]["connection_creation_rate"]) == "10.0"
    scram = {mech: sorted(users) for mech, users in tree["scram"].items()}
    assert scram == {"SCRAM-SHA-256": ["alice"], "SCRAM-SHA-512": ["alice2"]}  # bob was deleted
    cred = image.scram.credentials[("alice", 1)]
    text = leaf(tree["scram"]["SCRAM-SHA-256"]["alice"])
    assert f"storedKey={cred.stored_key.hex()}," in text and f"serverKey={cred.server_key.hex()}," in text, text


# -- golden bytes from Kafka's serializer -------------------------------------------------------

def test_golden_record_bytes_from_kafkas_serializer(kafka_written: Written) -> None:
    """Kafka 3.9's segments and snapshots, record for record."""
    node = kafka_written.node
    assert snapshots(node)
    seen = assert_golden(segments(node) + snapshots(node))
    assert {"PartitionRecord", "PartitionChangeRecord", "RegisterBrokerRecord", "BrokerRegistrationChangeRecord",
            "ConfigRecord", "RemoveTopicRecord", "UnregisterBrokerRecord", "ClientQuotaRecord",
            "UserScramCredentialRecord", "RemoveUserScramCredentialRecord"} <= set(seen), seen
    assert seen["RegisterBrokerRecord"] == {3} and seen["BrokerRegistrationChangeRecord"] == {0, 1}


# -- formats and swaps --------------------------------------------------------------------------

def activation(node: Node) -> list[Any]:
    """The records a controller wrote before it was ready, normalised (offsets from 0)."""
    view = norm.SideView(0)
    out = []
    for r in d.read_log(node.metadata_dir):
        if r.type in norm.DROPPED_RECORDS:
            view.drop(r.offset)
        out.append(r)
    return d.records_view(out, view)


def test_activation_records(pair_factory: Callable[..., PairNodes]) -> None:
    nodes = pair_factory("activation")
    assert activation(nodes.kafka) == activation(nodes.kraftsim)
    assert [r["type"] for r in activation(nodes.kraftsim)] == [
        "LeaderChangeMessage", "BeginTransactionRecord", "FeatureLevelRecord", "ZkMigrationStateRecord",
        "EndTransactionRecord"]


def test_activation_records_with_controller_registration(pair_factory: Callable[..., PairNodes]) -> None:
    nodes = pair_factory("activation")
    types = [[r.type for r in d.read_log(n.metadata_dir)] for n in nodes.nodes]
    assert types[0] == types[1]


def assert_serves(node: Node, cluster_id: str) -> None:
    """A controller that is active: it registers a broker in this cluster."""
    async def go() -> None:
        host, port = node.bootstrap.rsplit(":", 1)
        client = await KafkaClient.connect(host, int(port))
        try:
            resp = await client.request(d.REG(broker_id=77, cluster_id=cluster_id, incarnation_id=d.scenario_uuid(77),
                                              listeners=d.listeners(77), features=d.mv_feature(),
                                              log_dirs=[d.scenario_uuid(7700)]), 2)
            assert resp.error_code == 0, resp
        finally:
            await client.close()
    asyncio.run(go())


def test_kraftsim_starts_on_a_directory_kafka_formatted(tmp_path: Path) -> None:
    node = KraftsimNode(tmp_path / "kraftsim", cluster_id=random_cluster_id(), overrides=dict(PAIR_CONFIG))
    node.write_properties()
    r = kafka_storage("format", "-t", node.cluster_id, "-c", str(node.properties_path), "--release-version", "3.9")
    assert r.returncode == 0, r.stdout + r.stderr
    node.start()
    try:
        assert_serves(node, node.cluster_id)
    finally:
        node.stop()
    assert [r.type for r in d.read_log(node.metadata_dir)][:5] == [
        "LeaderChangeMessage", "BeginTransactionRecord", "FeatureLevelRecord", "ZkMigrationStateRecord",
        "EndTransactionRecord"]


def test_kafka_starts_on_a_directory_kraftsim_formatted(tmp_path: Path) -> None:
    node = KafkaNode(tmp_path / "kafka", cluster_id=random_cluster_id(), overrides=dict(PAIR_CONFIG))
    node.write_properties()
    r = kraftsim_cli("format", "-t", node.cluster_id, "-c", str(node.properties_path), "--release-version", "3.9")
    assert r.returncode == 0, r.stderr
    node.start()
    try:
        assert_serves(node, node.cluster_id)
    finally:
        node.stop()


def continuation() -> list[d.Step]:
    """What follows the workload after a restart: each step's outcome depends on the state the
    restarted controller loaded (registrations, epochs, fencing, topics, configs, features)."""
    return [
        Call("ApiVersions", d.api_versions(), 4),
        *(Call(f"heartbeat {b}", d.heartbeat(b)) for b in (1, 2, 3)),
        Call("heartbeat of the unregistered 4", d.heartbeat(4, epoch=0)),
        Call("a second incarnation of 1", d.register(1, incarnation=5)),
        Call("an existing topic", d.create_topics(TopicSpec("topic-5", 1, 1))),
        Call("a deleted topic again", d.create_topics(TopicSpec("topic-0", assignments={0: [1, 2]}))),
        Call("a new topic on every broker", d.create_topics(TopicSpec("after-swap", 2, 3))),
        # Deleted again before fencing: its leaders were placed at random (normalise.PLACEMENT).
        Call("delete by id", d.delete_topics("topic-6", "after-swap", by_id=True), 6),
        Call("fence 1", d.heartbeat(1, want_fence=True)),
        Call("controlled shutdown of 2", d.heartbeat(2, want_shutdown=True)),
        Call("unregister 3", d.unregister(3)),
        Call("downgrade (validate only)", d.update_features(("metadata.version", 20, 2), validate_only=True), 1),
        # Quotas and credentials: a record only where the loaded state differs.
        Call("the same quotas again", d.alter_client_quotas(
            (d.user_entity("alice"), [("producer_byte_rate", 1024.0), ("request_percentage", None)]),
            ([("client-id", "app"), ("user", "carol")], [("consumer_byte_rate", 4096.0)]))),
        Call("delete loaded credentials", d.alter_scram(deletions=[d.scram_deletion("alice"),
                                                                   d.scram_deletion("alice2", 2)])),
        Call("delete a credential deleted before", d.alter_scram(deletions=[d.scram_deletion("bob")])),
    ]


def restart_pair(written: Written, tmp: Path) -> PairNodes:
    """A Kafka controller and kraftsim, each on its own copy of ``written``'s directory, same node id."""
    cfg = dict(PAIR_CONFIG)
    k = KafkaNode(tmp / "kafka", cluster_id=written.cluster_id, overrides=dict(cfg))
    s = KraftsimNode(tmp / "kraftsim", cluster_id=written.cluster_id, overrides=dict(cfg))
    for n in (k, s):
        shutil.copytree(written.node.data_dir, n.data_dir)
    return PairNodes(k, s).start()


async def swap_check(written: Written, tmp: Path) -> d.Transcript:
    nodes = restart_pair(written, tmp)
    try:
        pair = await connect(nodes)
        try:
            for side in pair.sides:
                side.adopt_log()
            return await d.check(pair, continuation())
        finally:
            await close(pair)
    finally:
        nodes.stop()


@pytest.mark.slow
async def test_swap_kafka_to_kraftsim(kafka_written: Written, tmp_path: Path) -> None:
    """Kafka wrote the log (segments, snapshots); kraftsim, started on it with the same node
    id, serves the same state: the continuation goes exactly as on Kafka restarted on it."""
    t = await swap_check(kafka_written, tmp_path)
    assert t.response("heartbeat 1")["error_code"] == 0
    assert t.response("an existing topic")["topics"][0]["error_code"] == 36
    assert t.record_types("the same quotas again") == ["ClientQuotaRecord"]  # only the changed value
    assert [r["error_code"] for r in t.response("delete loaded credentials")["results"]] == [0, 0]
    assert t.response("delete a credential deleted before")["results"][0]["error_code"] == 91


@pytest.mark.slow
async def test_swap_kraftsim_to_kafka(kraftsim_written: Written, tmp_path: Path) -> None:
    """kraftsim wrote the log; a real Kafka controller starts on it (reading kraftsim's
    quorum-state, snapshots and segments) and serves the same state as kraftsim restarted."""
    t = await swap_check(kraftsim_written, tmp_path)
    assert t.response("heartbeat 1")["error_code"] == 0
    assert t.response("an existing topic")["topics"][0]["error_code"] == 36
    assert t.record_types("the same quotas again") == ["ClientQuotaRecord"]  # only the changed value
    assert [r["error_code"] for r in t.response("delete loaded credentials")["results"]] == [0, 0]
    assert t.response("delete a credential deleted before")["results"][0]["error_code"] == 91

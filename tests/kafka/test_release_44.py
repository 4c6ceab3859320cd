"""kraftsim with ``kraftsim.release=4.4`` beside a real Kafka 4.4.0 controller (differential), both
formatted at 4.4: ApiVersions at every version, features and upgrades, format, broker
registration and heartbeats, topics, configs, eligible leader replicas, controller registration,
AddRaftVoter v1. One scenario against a real Kafka 4.0 controller: ApiVersions and features,
where 4.0 differs from 4.4."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kraftsim.metadata import versions
from tests.kafka import differential as d
from tests.kafka.conftest import PairNodes, close, connect
from tests.kafka.differential import REG, Call, Raw, TopicSpec
from tests.kafka.test_api_versions import APIVERSIONS_V4_BODY, raw_request

pytestmark = pytest.mark.kafka

UPGRADE, SAFE, UNSAFE = 1, 2, 3
MV = "metadata.version"
ELR = "eligible.leader.replicas.version"
R44 = versions.release("4.4")


def features_of(release: versions.Release) -> list[Any]:
    """What a broker of ``release`` registers: its supported ranges (BrokerFeatures)."""
    return [REG.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
            for n, (lo, hi) in release.supported_features().items()]


def register44(broker_id: int, **kw: Any) -> d.Builder:
    return d.register(broker_id, features=features_of(R44), **kw)


def api_versions_v5(cluster_id: str | None, node_id: int) -> d.Builder:
    return lambda side: d.AV(client_software_name="kraftsim-tests", client_software_version="1.0",
                             cluster_id=cluster_id, node_id=node_id)


async def test_api_versions_every_version(shared_pair_44: d.Pair) -> None:
    steps: list[d.Step] = [Call(f"ApiVersions v{v}", d.api_versions(), v) for v in range(6)]
    steps += [
        Call("v5 with a cluster id and no node id", api_versions_v5("abc", -1), 5),
        Call("v5 with a node id and no cluster id", api_versions_v5(None, 7), 5),
        Call("v5 with both", api_versions_v5("abc", 7), 5),
        Call("v3 with an invalid software name", d.api_versions(software="-bad name-"), 3),
        Raw("v6 (unknown to 4.4)", raw_request(18, 6, APIVERSIONS_V4_BODY)),
        Raw("ControlledShutdown v3 (gone in 4.0)", raw_request(7, 3, b"\x00" * 16)),
        # KIP-896: versions 4.0 removed, and the ZooKeeper-era APIs no release of 4.x defines
        *(Raw(f"api {key} v{v} (removed in 4.0)", raw_request(key, v, b"\x00" * 16, flexible_header=False))
          for key, v in ((19, 1), (20, 0), (29, 0), (32, 0), (1, 3), (38, 0))),
        Raw("AlterPartition v1 (removed in 4.0)", raw_request(56, 1, b"\x00" * 16)),
        *(Raw(f"api {key} (ZooKeeper era)", raw_request(key, v, b"\x00" * 16)) for key, v in ((4, 7), (5, 4), (6, 8))),
    ]
    t = await d.check(shared_pair_44, steps)
    v5 = t.response("ApiVersions v5")
    assert t.error("ApiVersions v5") == 0 and {k["api_key"] for k in v5["api_keys"]}.isdisjoint({7})
    assert (18, 0, 5) in {(k["api_key"], k["min_version"], k["max_version"]) for k in v5["api_keys"]}
    assert {f["name"] for f in v5["finalized_features"]} == {MV, ELR, "group.version", "share.version",
                                                             "streams.version", "transaction.version"}
    assert t.error("v5 with a cluster id and no node id") == 42  # INVALID_REQUEST
    assert t.error("v5 with both") == 0
    assert t.response("v6 (unknown to 4.4)").startswith("0023")  # UNSUPPORTED_VERSION
    assert t.response("api 19 v1 (removed in 4.0)").startswith("<closed") and t.response("api 4 (ZooKeeper era)") \
        .startswith("<closed")  # the connection closed, unanswered


async def test_api_versions_lists_every_44_controller_api(shared_pair_44: d.Pair) -> None:
    a, b = await d.run(shared_pair_44, [Call("ApiVersions v5", d.api_versions(), 5)], mask=False)
    assert b[0]["response"]["api_keys"] == a[0]["response"]["api_keys"]


async def test_add_raft_voter_v1_to_a_static_quorum(shared_pair_44: d.Pair) -> None:
    """AddRaftVoter v1 (4.2+, AckWhenCommitted either way) to a static quorum's leader: decoded and
    refused as Kafka 4.4 refuses it, checks in the same order."""
    import uuid

    from kraftsim.rpc.messages import AddRaftVoterRequest

    directory = uuid.UUID("6f2b8a1e-4c1d-4e55-9a0f-2d3c4b5a6978")

    def add(ack: bool, directory: uuid.UUID = directory) -> d.Builder:
        return lambda side: AddRaftVoterRequest(
            cluster_id=side.cluster_id, timeout_ms=5000, voter_id=4000, voter_directory_id=directory,
            listeners=[AddRaftVoterRequest.Listener(name="CONTROLLER", host="localhost", port=9999)],
            ack_when_committed=ack)

    t = await d.check(shared_pair_44, [Call("acked when written", add(False), 1),
                                        Call("acked when committed", add(True), 1),
                                        Call("without a directory", add(False, uuid.UUID(int=0)), 1)])
    assert t.error("acked when written") == t.error("acked when committed") == 35  # UNSUPPORTED_VERSION
    assert t.error("without a directory") == 42  # INVALID_REQUEST


async def test_broker_registration_and_heartbeats(shared_pair_44: d.Pair) -> None:
    steps: list[d.Step] = [Call(f"register v{v}", register44(4400 + v), v) for v in range(5)]
    steps += [
        Call("a broker without 4.4's features", d.register(4410)),
        Call("a broker that supports share.version 1 only", d.register(4411, features=[
            f if f.name != "share.version" else REG.Feature(name=f.name, min_supported_version=0,
                                                             max_supported_version=1) for f in features_of(R44)])),
        Call("heartbeat v0", d.heartbeat(4400), 0),
        Call("heartbeat v1", d.heartbeat(4401), 1),
        Call("fenced, wants to stay fenced", d.heartbeat(4402, want_fence=True)),
        Call("unfenced -> controlled shutdown", d.heartbeat(4400, want_shutdown=True)),
        Call("unregister", d.unregister(4403)),
    ]
    t = await d.check(shared_pair_44, steps)
    assert t.error("register v4") == 0 and t.record_types("register v4") == ["RegisterBrokerRecord"]
    assert t["register v4"]["records"][0]["version"] == 4  # 4.3-IV0 and later
    assert t.error("a broker without 4.4's features") == 35  # UNSUPPORTED_VERSION


async def test_topics_and_configs(shared_pair_44: d.Pair) -> None:
    steps: list[d.Step] = [
        *(Call(f"register {b}", register44(b)) for b in (4420, 4421, 4422)),
        *(Call(f"unfence {b}", d.heartbeat(b)) for b in (4420, 4421, 4422)),
        Call("create", d.create_topics(TopicSpec("t44-a", partitions=3, rf=2),
                                       TopicSpec("t44-b", assignments={0: [4420, 4421], 1: [4421, 4422]},
                                                 configs={"cleanup.policy": "compact"}))),
        Call("create again", d.create_topics(TopicSpec("t44-a"))),
        Call("alter a topic config", _incremental_alter(2, "t44-b", "retention.ms", "1000")),
        Call("alter a broker config", _incremental_alter(4, "4420", "log.cleaner.threads", "2")),
        Call("delete", d.delete_topics("t44-a", "t44-b")),
    ]
    t = await d.check(shared_pair_44, steps)
    assert set(t.record_types("create")) == {"TopicRecord", "PartitionRecord", "ConfigRecord"}
    assert {r["version"] for r in t["create"]["records"] if r["type"] == "PartitionRecord"} == {2}


async def test_cordoned_log_dirs(shared_pair_44: d.Pair) -> None:
    """BrokerHeartbeat v2 (KIP-1066, 4.3+): the CordonedLogDirs a heartbeat reports are recorded
    when they change, and placement leaves out a broker whose every directory is cordoned."""
    check_cordoned_log_dirs(await d.check(shared_pair_44, cordoned_log_dirs(R44)))


async def test_cordoned_log_dirs_43(pair_factory: Callable[..., PairNodes]) -> None:
    """test_cordoned_log_dirs against Kafka 4.3.1, the first release that has them (a pair of its
    own, formatted at 4.3's latest production metadata.version)."""
    pair = await connect(pair_factory("cordoned-43", release="4.3", kafka_release="4.3"))
    try:
        check_cordoned_log_dirs(await d.check(pair, cordoned_log_dirs(versions.release("4.3"))))
    finally:
        await close(pair)


def cordoned_log_dirs(release: versions.Release) -> list[d.Step]:
    a, b = d.scenario_uuid(44601), d.scenario_uuid(44602)
    too_many = TopicSpec("t44-cordoned", partitions=1, rf=1000)
    return [
        Call("register", d.register(4460, features=features_of(release), log_dirs=[a, b])),
        Call("unfence", d.heartbeat(4460), 2),
        Call("null: not caught up, says nothing", d.heartbeat(4460, cordoned_dirs=None), 2),
        Call("none cordoned", d.heartbeat(4460, cordoned_dirs=[]), 2),
        Call("none cordoned, again", d.heartbeat(4460, cordoned_dirs=[]), 2),
        Call("one cordoned", d.heartbeat(4460, cordoned_dirs=[a]), 2),
        Call("placement counts it", d.create_topics(too_many, validate_only=True)),
        Call("both cordoned, in another order", d.heartbeat(4460, cordoned_dirs=[b, a]), 2),
        Call("the same set", d.heartbeat(4460, cordoned_dirs=[a, b]), 2),
        Call("placement leaves it out", d.create_topics(too_many, validate_only=True)),
        Call("v1 says nothing of them", d.heartbeat(4460), 1),
        Call("with an offline directory", d.heartbeat(4460, offline_dirs=[b], cordoned_dirs=[]), 2),
        Call("config: set on the controller, not a subset", _incremental_alter(4, "4460", CORDONED, "/a")),
        Call("config: set, forwarded by a broker", forwarded(_incremental_alter(4, "4460", CORDONED, "/a, /b"), 1)),
        Call("config: a subset, on the controller", _incremental_alter(4, "4460", CORDONED, "/b ,/a")),
        Call("config: a smaller one", _incremental_alter(4, "4460", CORDONED, "/a")),
        Call("config: more again", _incremental_alter(4, "4460", CORDONED, "/a,/c")),
        Call("config: empty", _incremental_alter(4, "4460", CORDONED, " ")),
        Call("config: deleted", _incremental_alter(4, "4460", CORDONED, None, op=1)),
        Call("unregister", d.unregister(4460)),
    ]


def check_cordoned_log_dirs(t: d.Transcript) -> None:
    assert t.record_types("null: not caught up, says nothing") == []
    assert [(r["type"], r["version"]) for r in t["none cordoned"]["records"]] == [
        ("BrokerRegistrationChangeRecord", 3)]
    assert t.record_types("none cordoned, again") == t.record_types("the same set") == []
    counted, left_out = (t.response(s)["topics"][0]["error_message"] for s in ("placement counts it",
                                                                               "placement leaves it out"))
    assert counted != left_out and "log directories cordoned" in left_out
    assert t.record_types("with an offline directory") == ["BrokerRegistrationChangeRecord"] * 2
    assert [t.response(s)["responses"][0]["error_code"] for s in (
        "config: set on the controller, not a subset", "config: a subset, on the controller",
        "config: more again")] == [40, 0, 40]  # INVALID_CONFIG


CORDONED = "cordoned.log.dirs"


def _incremental_alter(resource_type: int, name: str, key: str, value: str | None, op: int = 0) -> d.Builder:
    from kraftsim.rpc.messages import IncrementalAlterConfigsRequest as IAC

    return lambda side: IAC(validate_only=False, resources=[IAC.AlterConfigsResource(
        resource_type=resource_type, resource_name=name,
        configs=[IAC.AlterableConfig(name=key, config_operation=op, value=value)])])


def forwarded(build: d.Builder, version: int, principal: str = "User:ANONYMOUS") -> d.Builder:
    """``build``'s request at ``version`` inside an Envelope, as a broker forwards it."""
    from kraftsim.controller.envelope import serialize_principal
    from kraftsim.rpc import frames
    from kraftsim.rpc.messages import EnvelopeRequest

    def envelope(side: d.Side) -> Any:
        data = frames.encode_request(build(side), version, 77, "the-client")[4:]
        return EnvelopeRequest(request_data=data, request_principal=serialize_principal(principal),
                               client_host_address=b"\x0a\x01\x02\x03")
    return envelope


async def test_eligible_leader_replicas(shared_pair_44: d.Pair) -> None:
    """KIP-966 with ELR on (a 4.4 format): RF 3 and min.insync.replicas 2; the leader shrinks the
    ISR to itself (the others enter the ELR, in Java's HashSet order: 4448 hashes to bucket 0,
    4446 and 4447 to 14 and 15), the brokers are fenced one by one until the partition is
    leaderless with an empty ISR, an ELR member is unfenced and elected, min.insync.replicas
    changes (ClearElrRecord, which bumps the partition epoch the next AlterPartition names), the
    ISR grows again, and a broker left in the ELR registers again after an unclean shutdown."""
    topic = "t44-elr"
    steps: list[d.Step] = [
        *(Call(f"register {b}", register44(b)) for b in (4446, 4447, 4448)),
        *(Call(f"unfence {b}", d.heartbeat(b)) for b in (4446, 4447, 4448)),
        Call("create", d.create_topics(TopicSpec(topic, assignments={0: [4446, 4447, 4448]},
                                                 configs={"min.insync.replicas": "2"}))),
        Call("the leader shrinks the ISR to itself", d.leader_sets_isr(topic, 0, lambda isr: [4446])),
        Call("fence 4448", d.heartbeat(4448, want_fence=True)),
        Call("fence 4447", d.heartbeat(4447, want_fence=True)),
        Call("fence the leader", d.heartbeat(4446, want_fence=True)),
        Call("unfence 4447 (in the ELR)", d.heartbeat(4447)),
        Call("min.insync.replicas 1", _incremental_alter(2, topic, "min.insync.replicas", "1")),
        Call("unfence 4448", d.heartbeat(4448)),
        Call("the leader adds 4448", d.leader_sets_isr(topic, 0, lambda isr: [*isr, 4448])),
        Call("a broker-level min.insync.replicas", _incremental_alter(4, "4446", "min.insync.replicas", "2")),
        Call("the cluster-level one removed", _incremental_delete(4, "", "min.insync.replicas")),
        # Before the topic goes: Kafka's replay of ClearElrRecord leaves the cleared members in
        # its broker-to-ELR index, and unregistering such a broker once the topic is deleted
        # faults its controller (docs/differences.md). These ids are this test's alone.
        *(Call(f"unregister {b}", d.unregister(b)) for b in (4446, 4447, 4448)),
        # Unregistered, 4448 stays in the ELR; registering again without a previous epoch is an
        # unclean shutdown: out of the ELR, before the RegisterBrokerRecord. (Its index entry is
        # now there twice: cleared, never removed, then added again.)
        Call("4448 registers again", register44(4448, incarnation=1)),
        Call("4448 unregistered again", d.unregister(4448)),  # before the delete, for the reason above
        Call("delete", d.delete_topics(topic)),
    ]
    t = await d.check(shared_pair_44, steps)

    def change(label: str) -> list[Any]:
        return [(r["fields"]["leader"], r["fields"]["isr"], r["fields"]["eligible_leader_replicas"],
                 r["fields"]["last_known_elr"]) for r in t[label]["records"] if r["type"] == "PartitionChangeRecord"]
    assert t.record_types("create") == ["TopicRecord", "ConfigRecord", "ClearElrRecord", "PartitionRecord"]
    assert change("the leader shrinks the ISR to itself") == [(-2, [4446], [4448, 4447], None)]
    assert change("fence 4447") == []
    assert change("fence the leader") == [(-1, [], [4448, 4446, 4447], [4446])]
    assert change("unfence 4447 (in the ELR)") == [(4447, [4447], [4448, 4446], [])]
    assert t.record_types("min.insync.replicas 1") == ["ConfigRecord", "ClearElrRecord"]
    assert t.error("the leader adds 4448") == 0
    assert t.response("a broker-level min.insync.replicas")["responses"][0]["error_code"] == 40  # INVALID_CONFIG
    # 4448's ELR entry outlived the ClearElrRecord: the ELR pass writes the ISR pass's change again.
    assert change("unregister 4448") == [(-1, [], [4448], [4448])] * 2
    # ... and re-entering the ELR listed it a second time: the clean-up is written twice too.
    assert change("4448 registers again") == [(-2, None, [], None)] * 2
    assert t.record_types("4448 registers again")[-1] == "RegisterBrokerRecord"


def _incremental_delete(resource_type: int, name: str, key: str) -> d.Builder:
    from kraftsim.rpc.messages import IncrementalAlterConfigsRequest as IAC

    return lambda side: IAC(validate_only=False, resources=[IAC.AlterConfigsResource(
        resource_type=resource_type, resource_name=name,
        configs=[IAC.AlterableConfig(name=key, config_operation=1, value=None)])])


async def test_update_features_every_version(shared_pair_44: d.Pair) -> None:
    """Nothing here changes a level (the pair is shared): refusals, validate-only and the same levels."""
    steps: list[d.Step] = []
    for v in range(3):
        steps += [
            Call(f"v{v}: the same level", d.update_features((MV, 33, UPGRADE)), v),
            Call(f"v{v}: an unknown feature", d.update_features(("acme.feature", 1, UPGRADE)), v),
            Call(f"v{v}: downgrade without saying so", d.update_features((MV, 32, UPGRADE)), v),
        ]
    steps += [
        Call("no updates", d.update_features(), 2),
        Call("metadata.version above the supported range", d.update_features((MV, 34, UPGRADE)), 2),
        Call("metadata.version 4.5-IV0 unknown level", d.update_features((MV, 99, UPGRADE)), 2),
        Call("downgrade across a metadata change", d.update_features((MV, 31, SAFE), validate_only=True), 2),
        Call("unsafe downgrade", d.update_features((MV, 31, UNSAFE), validate_only=True), 1),
        Call("downgrade with no metadata change (validate only)", d.update_features((MV, 32, SAFE),
                                                                                     validate_only=True), 1),
        Call("ELR off (validate only)", d.update_features((ELR, 0, SAFE), validate_only=True), 2),
        Call("an unknown upgrade type", d.update_features((MV, 33, 9)), 2),
        Call("two refusals: which one is named", d.update_features(("zz.feature", 1, UPGRADE),
                                                                    ("aa.feature", 1, UPGRADE)), 2),
        Call("an unknown feature at level 0", d.update_features(("acme.feature", 0, SAFE)), 2),
        Call("kraft.version downgrade", d.update_features(("kraft.version", 0, SAFE)), 2),
        Call("ApiVersions after", d.api_versions(), 4),
    ]
    t = await d.check(shared_pair_44, steps)
    assert t.response("v2: an unknown feature")["error_code"] == 95  # INVALID_UPDATE_VERSION
    assert t.response("v1: the same level")["results"][0]["error_message"] == "NONE"


def features_tools(nodes: PairNodes, *commands: list[str]) -> list[Any]:
    """``kafka-features`` of Kafka 4.4 against the real controller and ``kraftsim features``
    against kraftsim, command for command (output, exit status, records), as test_tools.py
    compares them for 3.9."""
    from tests.kafka.harness import kafka_features, kraftsim_cli
    from tests.kafka.provision import RELEASES
    from tests.kafka.test_tools import Runner

    kafka_side = Runner(lambda *a: kafka_features(*a, version=RELEASES["4.4"]), nodes.kafka)
    ours = Runner(lambda *a: kraftsim_cli("features", *a), nodes.kraftsim)
    out = []
    for cmd in commands:
        x, y = kafka_side.run(cmd), ours.run(cmd)
        assert x == y, f"kafka-features {' '.join(cmd)}:\nKafka:    {x}\nkraftsim: {y}"
        out.append(x)
    return out


async def test_rolling_upgrade_from_39(pair_factory: Callable[..., PairNodes]) -> None:
    """A 4.4 controller on a 3.9-IV0 log is the middle of a rolling upgrade: UpdateFeatures
    finishes it (what ``kafka-features upgrade --release-version 4.4`` sends), and the tools
    of 4.4 say the same before and after."""
    nodes = pair_factory("upgrade-44", release="3.9-IV0", kafka_release="4.4")
    before = await asyncio.to_thread(features_tools, nodes, ["describe"],
                                     ["upgrade", "--release-version", "4.5", "--dry-run"],
                                     ["upgrade", "--release-version", "4.4", "--dry-run"])
    assert before[1].returncode == 1 and before[2].returncode == 0
    pair = await connect(nodes)
    everything = tuple((n, R44.default_level(n, 33) if n != MV else 33, UPGRADE)
                       for n in (MV, *R44.production_features))
    try:
        t = await d.check(pair, [
            Call("ApiVersions before", d.api_versions(), 4),
            Call("a broker of 4.4", register44(4430)),
            Call("UnregisterController below 4.4-IV2", unregister_controller(4431)),
            Call("the active controller below 4.4-IV2", unregister_controller(3000)),
            Call("cordoned.log.dirs below 4.3-IV0", _incremental_alter(4, "4430", CORDONED, "")),
            Call("upgrade (validate only)", d.update_features(*everything, validate_only=True), 2),
            Call("upgrade", d.update_features(*everything), 2),
            Call("ApiVersions after", d.api_versions(), 4),
            Call("downgrade to 3.9", d.update_features(*((n, lvl, SAFE) for n, lvl, _ in (
                (n, R44.default_level(n, 21) if n != MV else 21, 0) for n in (MV, *R44.production_features)))), 2),
        ])
        assert t.error("upgrade") == 0 and t.error("UnregisterController below 4.4-IV2") == 35
        assert t.response("cordoned.log.dirs below 4.3-IV0")["responses"][0]["error_code"] == 40
        assert t.record_types("upgrade")[:3] == ["KRaftVersionRecord", "VotersRecord", "ConfigRecord"]
    finally:
        await close(pair)
    after = await asyncio.to_thread(features_tools, nodes, ["describe"],
                                    ["downgrade", "--release-version", "3.9", "--dry-run"])
    assert "FinalizedVersionLevel: 4.4-IV2" in after[0].stdout and after[1].returncode == 1


def test_format_writes_what_44_writes(tmp_path: Path) -> None:
    """Both formatted at 4.0 by their own tools (nothing started): the bootstrap checkpoint in
    the metadata partition, and the records in it."""
    from tests.kafka.harness import KafkaNode, KraftsimNode, random_cluster_id
    from tests.kafka.provision import RELEASES
    from tests.kafka.releases import read_bootstrap

    cid = random_cluster_id()
    nodes = (KafkaNode(tmp_path / "kafka", cluster_id=cid, release_version="4.0", kafka_version=RELEASES["4.4"]),
             KraftsimNode(tmp_path / "kraftsim", cluster_id=cid, release_version="4.0",
                          overrides={"kraftsim.release": "4.4"}))
    outputs = [n.format().stdout.replace(str(n.data_dir), "<dir>").strip().splitlines()[-1] for n in nodes]
    assert outputs[0] == outputs[1] == "Formatting metadata directory <dir> with metadata.version 4.0-IV3."
    a, b = (read_bootstrap(n.data_dir) for n in nodes)
    assert a == b and a["files"] == ["__cluster_metadata-0/00000000000000000000-0000000000.checkpoint"]
    assert a["levels"] == {MV: 25, "group.version": 1, "transaction.version": 2}


async def test_describe_broker_configs(shared_pair_44: d.Pair) -> None:
    """DescribeConfigs of this node, the cluster default and a topic: 4.4's definitions (names,
    types, defaults, which are dynamic), listed as a 4.4 node lists them (a Java stream of its
    originals then its values, not a Scala map), before and after dynamic configs are set."""
    from tests.kafka.test_describe_configs import describe_configs_4x

    await d.check(shared_pair_44, describe_configs_4x("4.4", 4444, "dconf44"))


def register_controller(cid: int) -> d.Builder:
    from kraftsim.rpc.messages import ControllerRegistrationRequest as CR

    return lambda side: CR(controller_id=cid, incarnation_id=d.scenario_uuid(cid), zk_migration_ready=False,
                           listeners=[CR.Listener(name="CONTROLLER", host="localhost", port=19093,
                                                  security_protocol=0)],
                           features=[CR.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                                     for n, (lo, hi) in R44.supported_features().items()])


def unregister_controller(cid: int) -> d.Builder:
    from kraftsim.rpc.messages import UnregisterControllerRequest

    return lambda side: UnregisterControllerRequest(controller_id=cid)


def _own_port(pair: d.Pair, transcripts: tuple[list[Any], list[Any]]) -> None:
    """DescribeCluster lists each controller on its own port: compared as 'own port'."""
    for side, transcript in zip((pair.kafka, pair.kraftsim), transcripts, strict=True):
        own = int(side.node.bootstrap.rsplit(":", 1)[1])
        for step in transcript:
            if isinstance(step["response"], dict):
                for b in step["response"].get("brokers", []):
                    b["port"] = "own port" if b["port"] == own else b["port"]


async def test_unregister_controller(shared_pair_44: d.Pair) -> None:
    """UnregisterController (4.4, KIP-1312): one UnregisterControllerRecord, after which
    DescribeCluster no longer lists the controller; the refusals in Kafka's order."""
    from kraftsim.rpc.messages import DescribeClusterRequest as DCR

    def dc() -> d.Builder:
        return lambda side: DCR(include_cluster_authorized_operations=False, endpoint_type=2)
    steps = [
        Call("register", register_controller(4470)),
        Call("described", dc(), 2),
        Call("unregister", unregister_controller(4470)),
        Call("described after", dc(), 2),
        Call("again", unregister_controller(4470)),
        Call("the active controller", unregister_controller(3000)),
        Call("an id never registered", unregister_controller(-1)),
        Call("register again", register_controller(4470)),
    ]
    transcripts = await d.run(shared_pair_44, steps)
    _own_port(shared_pair_44, transcripts)
    d.assert_same(*transcripts)
    t = d.Transcript(transcripts[0])
    assert t.record_types("unregister") == ["UnregisterControllerRecord"] and t.error("unregister") == 0
    assert 4470 in {b["broker_id"] for b in t.response("described")["brokers"]}
    assert 4470 not in {b["broker_id"] for b in t.response("described after")["brokers"]}
    assert (t.error("again"), t.error("the active controller")) == (136, 42)  # CONTROLLER_ID_NOT_REGISTERED


async def test_controller_registration(shared_pair_44: d.Pair) -> None:
    """After test_unregister_controller: registering 3000 anew makes each side register itself
    again a moment later, a record no scenario can place."""
    t = await d.check(shared_pair_44, [Call("a controller that is not a voter", register_controller(4440)),
                                        Call("the voter itself, again", register_controller(3000))])
    assert t.error("a controller that is not a voter") == 0


async def test_unregister_controller_authorized_and_forwarded(pair_factory: Callable[..., PairNodes]) -> None:
    """ALTER on the cluster, asked before anything else; a broker may forward it (Envelope)."""
    from kraftsim.controller.managers.acls import STANDARD_AUTHORIZER

    nodes = pair_factory("unregister-controller-authz", release="4.4", kafka_release="4.4",
                         authorizer_class_name=STANDARD_AUTHORIZER, super_users="User:ANONYMOUS",
                         allow_everyone_if_no_acl_found="false")
    pair = await connect(nodes)
    try:
        t = await d.check(pair, [
            Call("register", register_controller(4471)),
            Call("not allowed, an id never registered", forwarded(unregister_controller(-1), 0, "User:alice")),
            Call("not allowed, the active controller", forwarded(unregister_controller(3000), 0, "User:alice")),
            Call("forwarded for a super user", forwarded(unregister_controller(4471), 0)),
        ])
    finally:
        await close(pair)
    assert t.record_types("forwarded for a super user") == ["UnregisterControllerRecord"]


async def test_describe_cluster_v2(shared_pair_44: d.Pair) -> None:
    """DescribeCluster v2 (KIP-1073) on a controller: IncludeFencedBrokers changes nothing there,
    IsFenced is false (the controllers listed are never fenced)."""
    from kraftsim.rpc.messages import DescribeClusterRequest as DCR

    def dc(endpoint_type: int, fenced: bool) -> d.Builder:
        return lambda side: DCR(include_cluster_authorized_operations=True, endpoint_type=endpoint_type,
                                include_fenced_brokers=fenced)
    steps = [Call("v1", dc(2, False), 1), Call("v2", dc(2, False), 2),
             Call("v2 with fenced brokers", dc(2, True), 2), Call("v2 for broker endpoints", dc(1, True), 2)]
    transcripts = await d.run(shared_pair_44, steps)
    _own_port(shared_pair_44, transcripts)
    d.assert_same(*transcripts)
    t = d.Transcript(transcripts[0])
    assert t.error("v2 with fenced brokers") == 0
    listed = t.response("v2 with fenced brokers")["brokers"]
    assert listed and not any(b["is_fenced"] for b in listed)


async def test_40_api_versions_and_features(pair_factory: Callable[..., PairNodes]) -> None:
    """Kafka 4.0: no ApiVersions v5, UpdateFeatures v2, and kraft.version written as a
    FeatureLevelRecord that its replay skips."""
    nodes = pair_factory("r40", release="4.0", kafka_release="4.0")
    pair = await connect(nodes)
    try:
        t = await d.check(pair, [
            *(Call(f"ApiVersions v{v}", d.api_versions(), v) for v in range(5)),
            Raw("v5 (unknown to 4.0)", raw_request(18, 5, APIVERSIONS_V4_BODY)),
            Call("ELR 1 (validate only)", d.update_features((ELR, 1, UPGRADE), validate_only=True), 2),
            Call("an unknown feature", d.update_features(("acme.feature", 1, UPGRADE)), 1),
            Call("downgrade refused (4.0's words)", d.update_features((MV, 22, SAFE), validate_only=True), 2),
            Call("kraft.version 1", d.update_features(("kraft.version", 1, UPGRADE)), 2),
            Call("ApiVersions after", d.api_versions(), 4),
        ])
        assert t.record_types("kraft.version 1") == ["FeatureLevelRecord"]
        assert "kraft.version" not in {f["name"] for f in t.response("ApiVersions after")["finalized_features"]}
    finally:
        await close(pair)

"""The migration's pure parts, without ZooKeeper: Kafka's znode JSON both ways, the copy's
batching, and the driver's transitions and backoff (tests/test_migration.py runs them for real)."""

from __future__ import annotations

import json
import random
import uuid

import pytest

from kraftsim.metadata.image.migration import ZkMigrationState
from kraftsim.migration import zk_copy
from kraftsim.migration import zk_layout as L
from kraftsim.migration.driver import (
    BACKOFF_MAX_MS,
    BrokerView,
    DriverState,
    IllegalTransitionError,
    MigrationDriver,
)
from kraftsim.migration.seed import SeedSpec, scram_credential, znodes


def test_topic_znode_is_kafkas_json_both_ways() -> None:
    tid = uuid.UUID(int=0x1234)
    t = L.TopicZNode(tid, {0: [1, 2], 1: [2, 3]}, adding={1: [3]}, removing={})
    js = json.loads(t.encode())
    assert js == {"version": 3, "partitions": {"0": [1, 2], "1": [2, 3]}, "adding_replicas": {"1": [3]},
                  "removing_replicas": {}, "topic_id": "AAAAAAAAAAAAAAAAAAASNA"}
    assert L.TopicZNode.decode("t", t.encode()) == t
    with pytest.raises(L.LayoutError):
        L.TopicZNode.decode("t", b'{"partitions":{"x":[1]}}')


def test_partition_state_writes_the_recovery_state_only_when_not_recovered() -> None:
    s = L.PartitionState(1, 4, 7, [1, 2])
    assert json.loads(s.encode()) == {"version": 1, "leader": 1, "leader_epoch": 4, "controller_epoch": 7,
                                      "isr": [1, 2]}
    r = L.PartitionState(1, 4, 7, [1], leader_recovery_state=1)
    assert json.loads(r.encode())["leader_recovery_state"] == 1
    assert L.PartitionState.decode("p", r.encode()) == r


@pytest.mark.parametrize("data", [
    b'{"leader":1}', b'{"leader":1}  \n', b'{"leader":1} x', b'{"leader":1}{}', b'  {"leader":1}', b'{"leader":',
    b'["leader"]', b"", b"{\xff}", '{"leader":1}'.encode("utf-16-le"), '{"leader":1}'.encode("utf-32-le"),
    '{"leader":1}'.encode("utf-8-sig"), '{"name":"\u00e9"}'.encode()])
def test_znode_json_is_read_as_json_loads_reads_it(data: bytes) -> None:
    """The JSON reader's quick path for UTF-8 objects accepts and refuses what ``json.loads`` does."""
    try:
        expected = json.loads(data)
    except ValueError:
        expected = None
    if not isinstance(expected, dict):
        with pytest.raises(L.LayoutError):
            L.loads(data, "/p")
    else:
        assert L.loads(data, "/p") == expected


def test_controller_migration_and_producer_id_znodes() -> None:
    c = L.ControllerZNode(3000, 12, 5)
    assert json.loads(c.encode()) == {"version": 2, "brokerid": 3000, "timestamp": "12", "kraftControllerEpoch": 5}
    assert L.ControllerZNode.decode(c.encode()) == c
    assert L.ControllerZNode.decode(b'{"version":1,"brokerid":2,"timestamp":"9"}').kraft_controller_epoch == -1
    m = L.MigrationZNode(3000, 2, 77, 2)
    assert json.loads(m.encode()) == {"version": 0, "kraft_controller_id": 3000, "kraft_controller_epoch": 2,
                                      "kraft_metadata_offset": 77, "kraft_metadata_epoch": 2}
    assert L.MigrationZNode.decode(m.encode()) == m
    with pytest.raises(L.LayoutError, match="unknown version 1"):
        L.MigrationZNode.decode(b'{"version":1}')
    p = L.ProducerIdBlock(2, 1000, 1999)
    assert json.loads(p.encode()) == {"version": 1, "broker": 2, "block_start": "1000", "block_end": "1999"}
    assert L.ProducerIdBlock.decode(p.encode()) == p
    assert L.decode_controller_epoch(L.encode_controller_epoch(41)) == 41


def test_acl_znodes_use_kafkas_names() -> None:
    e = L.AclEntry("User:a", 3, 12, "*")  # ALLOW IDEMPOTENT_WRITE
    assert json.loads(L.encode_acls([e])) == {"version": 1, "acls": [
        {"principal": "User:a", "permissionType": "Allow", "operation": "IdempotentWrite", "host": "*"}]}
    assert L.decode_acls("x", L.encode_acls([e])) == [e]
    assert L.acl_path(3, 5, "tx") == "/kafka-acl/TransactionalId/tx"
    assert L.acl_path(4, 3, "g-") == "/kafka-acl-extended/prefixed/Group/g-"
    with pytest.raises(L.LayoutError):
        L.decode_acls("x", b'{"version":1,"acls":[{"principal":"User:a","permissionType":"Maybe",'
                           b'"operation":"Read","host":"*"}]}')


def test_names_are_sanitized_as_kafka_does() -> None:
    assert L.sanitize("user@example.com") == "user%40example.com"
    assert L.sanitize("a b*c~") == "a%20b%2Ac%7E"
    assert L.desanitize(L.sanitize("ü ser/*@")) == "ü ser/*@"


def test_token_znodes_sanitize_principals() -> None:
    t = L.TokenZNode("tok", "User:a b", "User:req", ("User:x@y",), 1, 3, 2)
    js = json.loads(t.encode())
    assert js == {"version": 3, "owner": "User%3Aa%20b", "tokenRequester": "User%3Areq", "renewers": ["User%3Ax%40y"],
                  "issueTimestamp": 1, "maxTimestamp": 3, "expiryTimestamp": 2, "tokenId": "tok"}
    assert L.TokenZNode.decode("p", t.encode()) == t
    v2 = {k: v for k, v in js.items() if k != "tokenRequester"} | {"version": 2}
    assert L.TokenZNode.decode("p", json.dumps(v2).encode()).requester == "User:a b"  # the owner, before v3
    assert L.TokenZNode.decode("p", b"") is None
    with pytest.raises(L.LayoutError, match="principalType:principalName"):
        L.TokenZNode.decode("p", json.dumps(js | {"owner": "nobody"}).encode())


def test_scram_text_round_trip() -> None:
    c = scram_credential("SCRAM-SHA-512", "pw", salt=b"salt", iterations=4096)
    assert len(c.stored_key) == len(c.server_key) == 64
    assert L.ScramCredential.decode(c.encode()) == c
    with pytest.raises(L.LayoutError, match="Invalid credential format"):
        L.ScramCredential.decode("salt=AA==")


class FakeZk:
    """A dict-backed ZkReader: paths to (data, zkVersion)."""

    def __init__(self, nodes: dict[str, tuple[bytes, int]]) -> None:
        self.nodes = nodes

    def get(self, path: str) -> tuple[bytes, int] | None:
        return self.nodes.get(path)

    def children(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix):].split("/")[0] for p in self.nodes if p.startswith(prefix)})


def test_the_copy_of_a_seed_follows_kafkas_order_and_rules() -> None:
    spec = SeedSpec(brokers=2, topics=3, partitions=2, replication_factor=2, users=1)
    nodes = {path: (data, 0) for path, data in znodes(spec)}
    nodes[L.partition_state_path("topic-1", 1)] = (nodes[L.partition_state_path("topic-1", 1)][0], 6)
    del nodes[L.partition_state_path("topic-2", 0)]  # no state znode: ISR = replicas, epochs 0
    nodes[L.DELETE_TOPICS + "/topic-0"] = (b"", 0)  # pending deletion: not migrated
    batches = list(zk_copy.read_all_metadata(FakeZk(nodes)))
    kinds = [[type(r).__name__ for r, _ in b] for b in batches]
    assert kinds[0] == ["TopicRecord", "PartitionRecord", "PartitionRecord"]  # topic-1 has no configs
    assert kinds[1][:2] == ["TopicRecord", "ConfigRecord"]
    assert [b[0][0].name for b in batches[:2]] == ["topic-1", "topic-2"]
    p11 = batches[0][2][0]
    assert (p11.partition_id, p11.partition_epoch) == (1, 6)  # the state znode's zkVersion
    p20 = next(r for r, _ in batches[1] if type(r).__name__ == "PartitionRecord" and r.partition_id == 0)
    assert (p20.isr, p20.leader, p20.leader_epoch, p20.partition_epoch) == (p20.replicas, p20.replicas[0], 0, 0)
    flat = [type(r).__name__ for b in batches for r, _ in b]
    order = ["TopicRecord", "ConfigRecord", "ClientQuotaRecord", "ProducerIdsRecord", "AccessControlEntryRecord",
             "DelegationTokenRecord"]
    firsts = [flat.index(k) for k in order]
    assert firsts == sorted(firsts)
    assert flat.index("UserScramCredentialRecord") < flat.index("ProducerIdsRecord")


def test_the_brokers_named_by_assignments_are_those_of_the_topics_to_migrate() -> None:
    spec = SeedSpec(brokers=3, topics=3, partitions=2, replication_factor=1, users=0)
    nodes = {path: (data, 0) for path, data in znodes(spec)}
    tid = uuid.UUID(int=7)
    nodes[L.topic_path("moving")] = (L.TopicZNode(tid, {0: [7, 1], 1: [8]}, adding={0: [7]}).encode(), 0)
    nodes[L.topic_path("doomed")] = (L.TopicZNode(tid, {0: [9]}).encode(), 0)
    nodes[L.DELETE_TOPICS + "/doomed"] = (b"", 0)  # pending deletion: not migrated, not waited for
    assert zk_copy.assigned_broker_ids(FakeZk(nodes)) == {1, 2, 3, 7, 8}
    nodes[L.topic_path("moving")] = (b'{"version":3,"partitions":{"0":["x"]}}', 0)
    with pytest.raises(L.LayoutError):
        zk_copy.assigned_broker_ids(FakeZk(nodes))
    nodes[L.topic_path("moving")] = (b'{"version":3,"partitions":{"0":3}}', 0)
    with pytest.raises(L.LayoutError):
        zk_copy.assigned_broker_ids(FakeZk(nodes))


def test_merging_never_splits_a_batch() -> None:
    batches = [[(object(), 0)] * n for n in (150, 30, 40, 500, 10)]
    merged = list(zk_copy.merged(batches, 200))  # type: ignore[arg-type]
    assert [len(b) for b in merged] == [220, 500, 10]


def test_driver_transitions_are_kafkas() -> None:
    d = MigrationDriver(3000, random.Random(1))
    with pytest.raises(IllegalTransitionError):
        d.transition(DriverState.ZK_MIGRATION)
    d.recovered(L.MigrationZNode(), 0)
    d.became_leader(4, L.MigrationZNode(), 0)
    assert (d.state, d.leadership.kraft_controller_id, d.leadership.kraft_controller_epoch) == \
        (DriverState.WAIT_FOR_CONTROLLER_QUORUM, 3000, 4)
    d.quorum_checked(ZkMigrationState.PRE_MIGRATION, quorum_ready=False)
    assert d.state == DriverState.WAIT_FOR_CONTROLLER_QUORUM
    d.quorum_checked(ZkMigrationState.PRE_MIGRATION, quorum_ready=True)
    assert d.state == DriverState.WAIT_FOR_BROKERS
    brokers = {1: BrokerView(1, True), 2: BrokerView(2, False)}
    assert not d.brokers_ready({}, {1}, None) and "register with KRaft" in d.waiting_for
    assert not d.brokers_ready(brokers, set(), None)
    assert not d.brokers_ready(brokers, {1, 2}, None) and "[2]" in d.waiting_for  # not migrating
    assert not d.brokers_ready(brokers, {1}, {1, 3}) and "[3]" in d.waiting_for  # in an assignment only
    assert d.brokers_ready(brokers, {1}, {1}) and d.state == DriverState.BECOME_CONTROLLER
    d.claimed(2, 1)
    d.migration_written(5)
    assert d.state == DriverState.ZK_MIGRATION and d.leadership.migration_zk_version == 5
    new = d.copied(120, 4)
    d.copy_recorded(new, 6)
    assert d.state == DriverState.SYNC_KRAFT_TO_ZK and d.leadership.initial_copy_done


def test_a_restart_in_migration_skips_the_copy_only_if_zookeeper_says_it_is_done() -> None:
    done = MigrationDriver(1)
    done.recovered(L.MigrationZNode(1, 1, 50, 1), 3)
    done.became_leader(2, L.MigrationZNode(1, 1, 50, 1), 3)
    done.quorum_checked(ZkMigrationState.MIGRATION, quorum_ready=True)
    assert done.state == DriverState.BECOME_CONTROLLER
    done.migration_written(4)
    assert done.state == DriverState.SYNC_KRAFT_TO_ZK
    lost = MigrationDriver(1)
    lost.recovered(L.MigrationZNode(), 0)
    lost.became_leader(2, L.MigrationZNode(), 0)
    lost.quorum_checked(ZkMigrationState.MIGRATION, quorum_ready=True)
    assert lost.state == DriverState.INACTIVE  # Kafka refuses to go on: KRaft and ZK disagree
    for state in (ZkMigrationState.NONE, ZkMigrationState.POST_MIGRATION):
        d = MigrationDriver(1)
        d.recovered(L.MigrationZNode(), 0)
        d.became_leader(2, L.MigrationZNode(), 0)
        d.quorum_checked(state, quorum_ready=True)
        assert d.state == DriverState.INACTIVE


def test_backoff_doubles_from_100_ms_to_a_minute_with_2_percent_jitter() -> None:
    d = MigrationDriver(1, random.Random(7))
    delays = [d.next_poll_ms() for _ in range(14)]
    for n, delay in enumerate(delays):
        want = min(100 * 2 ** n, BACKOFF_MAX_MS)
        assert want * 0.98 <= delay <= want * 1.02
    d.recovered(L.MigrationZNode(), 0)  # a transition resets it
    assert 98 <= d.next_poll_ms() <= 102


def test_quota_values_are_written_as_kafka_writes_them() -> None:
    """Integral quota keys as whole numbers; DOUBLE ones as Java's Double.toString."""
    from kraftsim.migration.zk_writer import java_double, quota_props

    assert [java_double(v) for v in (12.5, 1024.0, 0.0, 1e7, 1.5e-4, 123456789.0)] == \
        ["12.5", "1024.0", "0.0", "1.0E7", "1.5E-4", "1.23456789E8"]
    assert quota_props({"producer_byte_rate": 1024.0, "request_percentage": 50.0,
                        "connection_creation_rate": 9.9999999}) == \
        {"producer_byte_rate": "1024", "request_percentage": "50.0", "connection_creation_rate": "10"}

"""Replay semantics of the metadata image, record type by record type."""

from __future__ import annotations

import uuid

import pytest

from kraftsim.metadata import versions
from kraftsim.metadata.directories import MIGRATING
from kraftsim.metadata.image import MetadataImage, ReplayError, UnwritableMetadataError
from kraftsim.metadata.image.configs import TOPIC
from kraftsim.metadata.image.migration import ZkMigrationState
from kraftsim.metadata.records import by_name

R = by_name
T1 = uuid.UUID(int=0x1111)
T2 = uuid.UUID(int=0x2222)
D = [uuid.UUID(int=(i + 1) << 64) for i in range(8)]


def mv(level: int = 21) -> object:
    return R("FeatureLevelRecord")(name="metadata.version", feature_level=level)


def broker(bid: int, epoch: int = 10, inc: uuid.UUID | None = None, fenced: bool = True, **kw: object) -> object:
    return R("RegisterBrokerRecord")(broker_id=bid, broker_epoch=epoch,
                                     incarnation_id=inc or uuid.UUID(int=100 + bid), fenced=fenced, **kw)


def topic(name: str = "foo", tid: uuid.UUID = T1) -> object:
    return R("TopicRecord")(name=name, topic_id=tid)


def part(pid: int = 0, tid: uuid.UUID = T1, replicas: list[int] | None = None, isr: list[int] | None = None,
         leader: int = 1, **kw: object) -> object:
    replicas = [1, 2, 3] if replicas is None else replicas
    return R("PartitionRecord")(partition_id=pid, topic_id=tid, replicas=replicas,
                                isr=list(replicas) if isr is None else isr, leader=leader,
                                leader_epoch=0, partition_epoch=0, **kw)


def change(pid: int = 0, tid: uuid.UUID = T1, **kw: object) -> object:
    return R("PartitionChangeRecord")(partition_id=pid, topic_id=tid, **kw)


def image(*records: object, level: int = 21) -> MetadataImage:
    img = MetadataImage()
    img.replay(mv(level), 0)
    for i, r in enumerate(records, start=1):
        img.replay(r, i)
    return img


def roundtrip(img: MetadataImage) -> MetadataImage:
    loaded = MetadataImage(img.supported_features)
    loaded.load_snapshot(list(img.records()), img.offset)
    return loaded


# ----- features -----------------------------------------------------------------------------

def test_feature_level_zero_removes_and_mv_is_tracked() -> None:
    img = MetadataImage(versions.release().supported_features(enable_unstable=True))
    img.replay(mv(21), 0)
    img.replay(R("FeatureLevelRecord")(name="transaction.version", feature_level=2), 1)
    assert img.features.finalized == {"transaction.version": 2}
    assert img.features.all_levels() == {"metadata.version": 21, "transaction.version": 2}
    img.replay(R("FeatureLevelRecord")(name="transaction.version", feature_level=0), 2)
    assert img.features.finalized == {}
    assert img.metadata_version == 21


def test_feature_level_outside_supported_range_is_fatal() -> None:
    img = image()
    with pytest.raises(ReplayError, match="only supports versions 0-0"):
        img.replay(R("FeatureLevelRecord")(name="transaction.version", feature_level=1), 5)
    with pytest.raises(ReplayError):
        img.replay(mv(22), 5)  # unstable level, not supported by default
    with pytest.raises(ReplayError):
        img.replay(mv(0), 5)  # metadata.version is never removed
    assert img.metadata_version == 21 and img.offset == 0


# ----- cluster ------------------------------------------------------------------------------

def test_register_broker_records_offset_and_counts() -> None:
    img = image(broker(1), broker(2, fenced=False))
    b1 = img.cluster.brokers[1]
    assert b1.fenced and b1.registration_offset == 1 and b1.epoch == 10
    assert img.cluster.registration_offset(2) == 2
    assert img.cluster.fenced_count == 1 and img.cluster.active_count == 1


def test_fence_unfence_via_registration_change_record() -> None:
    img = image(broker(1))
    brc = R("BrokerRegistrationChangeRecord")
    img.replay(brc(broker_id=1, broker_epoch=10, fenced=-1), 2)
    assert not img.cluster.brokers[1].fenced and img.cluster.active_count == 1
    img.replay(brc(broker_id=1, broker_epoch=10, in_controlled_shutdown=1), 3)
    b = img.cluster.brokers[1]
    assert b.in_controlled_shutdown and not b.fenced and not b.active
    img.replay(brc(broker_id=1, broker_epoch=10, fenced=1), 4)
    assert img.cluster.brokers[1].fenced and img.cluster.fenced_count == 1
    # Kafka does not clear InControlledShutdown on fencing; only re-registration resets it.
    assert img.cluster.brokers[1].in_controlled_shutdown
    img.replay(brc(broker_id=1, broker_epoch=10, log_dirs=[D[1], D[0]]), 5)
    assert img.cluster.brokers[1].directories == (D[0], D[1])  # kept sorted, as Kafka does


def test_legacy_fence_and_unfence_records() -> None:
    img = image(broker(1))
    img.replay(R("UnfenceBrokerRecord")(id=1, epoch=10), 2)
    assert not img.cluster.brokers[1].fenced
    img.replay(R("FenceBrokerRecord")(id=1, epoch=10), 3)
    assert img.cluster.brokers[1].fenced


@pytest.mark.parametrize("rec", [
    R("BrokerRegistrationChangeRecord")(broker_id=1, broker_epoch=11, fenced=-1),
    R("BrokerRegistrationChangeRecord")(broker_id=9, broker_epoch=10, fenced=-1),
    R("BrokerRegistrationChangeRecord")(broker_id=1, broker_epoch=10, fenced=2),
    R("BrokerRegistrationChangeRecord")(broker_id=1, broker_epoch=10, in_controlled_shutdown=-1),
    R("UnfenceBrokerRecord")(id=1, epoch=9),
    R("UnregisterBrokerRecord")(broker_id=1, broker_epoch=9),
    R("UnregisterBrokerRecord")(broker_id=2, broker_epoch=10),
])
def test_bad_broker_changes_are_fatal_and_change_nothing(rec: object) -> None:
    img = image(broker(1))
    before = list(img.records())
    with pytest.raises(ReplayError):
        img.replay(rec, 9)
    assert list(img.records()) == before and img.offset == 1
    assert img.cluster.fenced_count == 1


def test_unregister_broker_needs_matching_epoch() -> None:
    img = image(broker(1), broker(2))
    img.replay(R("UnregisterBrokerRecord")(broker_id=1, broker_epoch=10), 3)
    assert set(img.cluster.brokers) == {2} and img.cluster.fenced_count == 1


def test_reregistration_same_incarnation_replaces_fields() -> None:
    inc = uuid.UUID(int=77)
    img = image(broker(1, inc=inc, fenced=False, rack="r1"))
    img.replay(broker(1, inc=inc, fenced=False, rack="r2",
                      end_points=[R("RegisterBrokerRecord").BrokerEndpoint(name="EXT", host="h", port=1)]), 2)
    b = img.cluster.brokers[1]
    assert b.rack == "r2" and b.listeners == {"EXT": ("h", 1, 0)} and b.registration_offset == 2
    assert not b.fenced and img.cluster.fenced_count == 0
    # a new incarnation with a new epoch, fenced (the schema default)
    img.replay(broker(1, epoch=50, inc=uuid.UUID(int=78)), 3)
    assert img.cluster.brokers[1].epoch == 50 and img.cluster.fenced_count == 1


def test_unknown_security_protocol_is_fatal() -> None:
    ep = R("RegisterBrokerRecord").BrokerEndpoint(name="X", host="h", port=1, security_protocol=9)
    img = image()
    with pytest.raises(ReplayError, match="security protocol"):
        img.replay(broker(1, end_points=[ep]), 1)
    assert not img.cluster.brokers


def test_register_controller() -> None:
    rc = R("RegisterControllerRecord")
    img = image(rc(controller_id=3000, incarnation_id=T2, zk_migration_ready=True,
                   end_points=[rc.ControllerEndpoint(name="CONTROLLER", host="c", port=9093)],
                   features=[rc.ControllerFeature(name="metadata.version", min_supported_version=1,
                                                  max_supported_version=21)]))
    c = img.cluster.controllers[3000]
    assert c.zk_migration_ready and c.supported_features == {"metadata.version": (1, 21)}
    assert roundtrip(img) == img


# ----- topics -------------------------------------------------------------------------------

def test_partition_epoch_bumps_on_every_change_and_leader_minus_two_keeps_leader() -> None:
    img = image(topic(), part())
    img.replay(change(isr=[1, 2]), 3)
    p = img.topics.partition(T1, 0)
    assert (p.leader, p.leader_epoch, p.partition_epoch, p.isr) == (1, 0, 1, (1, 2))
    img.replay(change(), 4)  # an empty change still bumps the partition epoch
    p = img.topics.partition(T1, 0)
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (1, 0, 2)
    img.replay(change(leader=1), 5)  # same leader: still a leader-epoch bump
    p = img.topics.partition(T1, 0)
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (1, 1, 3)
    img.replay(change(leader=-1), 6)
    p = img.topics.partition(T1, 0)
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (-1, 2, 4)


def test_isr_index_follows_isr_changes() -> None:
    img = image(topic(), part(0), part(1, replicas=[2, 3, 4]))
    members = lambda b: sorted(pid for _, pid, _ in img.topics.partitions_with_isr_member(b))  # noqa: E731
    assert members(1) == [0] and members(2) == [0, 1] and members(4) == [1]
    img.replay(change(0, isr=[2, 3]), 4)
    assert members(1) == [] and members(2) == [0, 1]
    assert 1 not in img.topics.isr_index  # an emptied per-broker set disappears
    img.replay(change(1, isr=[4, 1]), 5)
    assert members(1) == [1] and members(2) == [0] and len(img.topics.partitions_with_isr_member(3)) == 1


def test_leaderless_and_imbalance_indexes() -> None:
    img = image(topic(), part(0), part(1, leader=2))
    assert img.topics.offline_partition_count == 0
    assert img.topics.preferred_replica_imbalance_count == 1
    img.replay(change(0, leader=-1), 4)
    assert img.topics.offline_partition_count == 1
    assert [pid for _, pid, _ in img.topics.leaderless_partitions()] == [0]
    assert img.topics.preferred_replica_imbalance_count == 2  # -1 != replicas[0]
    img.replay(change(1, leader=1), 5)
    img.replay(change(0, leader=1), 6)
    assert img.topics.offline_partition_count == 0 and img.topics.preferred_replica_imbalance_count == 0


def test_reassignment_fields_and_index() -> None:
    img = image(topic(), part(0))
    img.replay(change(0, replicas=[1, 2, 3, 4], adding_replicas=[4], removing_replicas=[1]), 3)
    p = img.topics.partition(T1, 0)
    assert p.replicas == (1, 2, 3, 4) and p.adding_replicas == (4,) and p.removing_replicas == (1,)
    assert p.directories == (MIGRATING,) * 4
    assert len(img.topics.reassigning) == 1
    img.replay(change(0, replicas=[2, 3, 4], adding_replicas=[], removing_replicas=[], leader=2), 4)
    assert len(img.topics.reassigning) == 0 and img.topics.partition(T1, 0).leader_epoch == 1


def test_leader_recovery_state() -> None:
    img = image(topic(), part(0))
    img.replay(change(0, leader=2, isr=[2], leader_recovery_state=1), 3)
    assert img.topics.partition(T1, 0).leader_recovery_state == 1
    img.replay(change(0, isr=[2, 3]), 4)
    assert img.topics.partition(T1, 0).leader_recovery_state == 1  # -1 = unchanged
    with pytest.raises(ReplayError):
        img.replay(change(0, leader_recovery_state=5), 5)


def test_directories() -> None:
    img = image(topic(), part(0, directories=D[:3]), part(1, directories=[MIGRATING] * 3))
    assert img.topics.partition(T1, 0).directories == tuple(D[:3])
    assert img.topics.partition(T1, 1).directories == (MIGRATING,) * 3
    img.replay(change(0, directories=[D[4], D[5], D[6]]), 4)
    assert img.topics.partition(T1, 0).directories == tuple(D[4:7])
    with pytest.raises(ReplayError):  # replicas change but the real directories would not fit
        img.replay(change(0, replicas=[1, 2]), 5)
    with pytest.raises(ReplayError):
        img.replay(change(0, replicas=[1, 2], directories=D[:3]), 5)
    with pytest.raises(ReplayError):
        img.replay(part(2, directories=D[:2]), 5)
    # two partitions with the same assignment share the tuples
    img.replay(part(3, directories=D[:3]), 6)
    a, b = img.topics.partition(T1, 0), img.topics.partition(T1, 3)
    assert b.replicas is img.topics.partition(T1, 1).replicas and b.directories is not a.directories


def test_partition_record_for_existing_partition_replaces_it() -> None:
    img = image(topic(), part(0))
    img.replay(part(0, replicas=[4, 5], leader=5), 3)
    p = img.topics.partition(T1, 0)
    assert p.replicas == (4, 5) and img.topics.partition_count == 1
    assert len(img.topics.partitions_with_isr_member(1)) == 0 and len(img.topics.partitions_with_isr_member(4)) == 1
    assert img.topics.preferred_replica_imbalance_count == 1


def test_topic_errors_leave_image_unchanged() -> None:
    img = image(topic(), part(0))
    before = list(img.records())
    for bad in (topic("foo", T2), topic("foo", T1), topic("bar", T1), part(0, tid=T2), change(1),
                change(0, tid=T2), part(-1), R("RemoveTopicRecord")(topic_id=T2)):
        with pytest.raises(ReplayError):
            img.replay(bad, 9)
    assert list(img.records()) == before and img.offset == 2
    assert img.topics.partition_count == 1 and img.topics.topic_count == 1


def test_remove_topic_drops_partitions_configs_and_index_entries() -> None:
    cfg = R("ConfigRecord")
    img = image(topic("a.b"), part(0, leader=-1), part(1, leader=2), topic("other", T2), part(0, tid=T2),
                cfg(resource_type=2, resource_name="a.b", name="retention.ms", value="1"),
                cfg(resource_type=2, resource_name="other", name="retention.ms", value="2"))
    assert img.topics.colliding == {"a_b": {"a.b"}}
    img.replay(R("RemoveTopicRecord")(topic_id=T1), 8)
    assert img.topics.topic_count == 1 and img.topics.partition_count == 1
    assert img.configs.get(TOPIC, "a.b") == {} and img.configs.get(TOPIC, "other") == {"retention.ms": "2"}
    assert img.topics.offline_partition_count == 0 and img.topics.preferred_replica_imbalance_count == 0
    assert len(img.topics.partitions_with_isr_member(1)) == 1  # only the other topic's partition
    assert "a.b" not in img.topics.by_name and img.topics.colliding == {}
    img.replay(topic("a.b", uuid.UUID(int=5)), 9)  # the name can be reused afterwards
    assert img.topics.by_name["a.b"].id == uuid.UUID(int=5)


# ----- configs, quotas, acls, scram, tokens, producer ids -----------------------------------

def test_config_null_deletes_and_empty_resource_disappears() -> None:
    cfg = R("ConfigRecord")
    img = image(cfg(resource_type=4, resource_name="", name="a", value="1"),
                cfg(resource_type=4, resource_name="", name="b", value="2"))
    img.replay(cfg(resource_type=4, resource_name="", name="a", value=None), 3)
    assert img.configs.get(4, "") == {"b": "2"}
    img.replay(cfg(resource_type=4, resource_name="", name="b", value=None), 4)
    assert (4, "") not in img.configs.resources
    img.replay(cfg(resource_type=4, resource_name="1", name="zz", value=None), 5)  # deleting nothing
    assert img.configs.resources == {}


def test_client_quotas() -> None:
    q = R("ClientQuotaRecord")
    E = q.EntityData
    img = image(q(entity=[E(entity_type="user", entity_name="u"), E(entity_type="client-id", entity_name=None)],
                  key="producer_byte_rate", value=100.0))
    entity = (("client-id", None), ("user", "u"))
    assert img.quotas.get(entity) == {"producer_byte_rate": 100.0}
    # entity order in the record does not matter
    img.replay(q(entity=[E(entity_type="client-id", entity_name=None), E(entity_type="user", entity_name="u")],
                 key="producer_byte_rate", remove=True), 2)
    assert img.quotas.entities == {}


def test_acls() -> None:
    a = R("AccessControlEntryRecord")(id=T1, resource_type=2, resource_name="t", pattern_type=3,
                                      principal="User:x", host="*", operation=3, permission_type=3)
    img = image(a)
    assert img.acls.by_id[T1].principal == "User:x"
    with pytest.raises(ReplayError):
        img.replay(R("RemoveAccessControlEntryRecord")(id=T2), 2)
    img.replay(R("RemoveAccessControlEntryRecord")(id=T1), 2)
    assert img.acls.by_id == {}


def test_scram_and_tokens() -> None:
    s = R("UserScramCredentialRecord")(name="alice", mechanism=1, salt=b"s", stored_key=b"k",
                                       server_key=b"v", iterations=4096)
    tok = R("DelegationTokenRecord")(owner="User:a", requester="User:a", renewers=["User:b"],
                                     issue_timestamp=1, max_timestamp=3, expiration_timestamp=2, token_id="t1")
    img = image(s, tok)
    assert img.scram.credentials[("alice", 1)].iterations == 4096
    assert img.tokens.tokens["t1"].renewers == ("User:b",)
    assert roundtrip(img) == img
    with pytest.raises(ReplayError):
        img.replay(R("RemoveUserScramCredentialRecord")(name="alice", mechanism=2), 3)
    img.replay(R("RemoveUserScramCredentialRecord")(name="alice", mechanism=1), 3)
    img.replay(R("RemoveDelegationTokenRecord")(token_id="t1"), 4)
    img.replay(R("RemoveDelegationTokenRecord")(token_id="nope"), 5)  # not an error in Kafka
    assert not img.scram.credentials and not img.tokens.tokens


def test_scram_and_tokens_unwritable_at_old_mv() -> None:
    s = R("UserScramCredentialRecord")(name="alice", mechanism=1, salt=b"s", stored_key=b"k",
                                       server_key=b"v", iterations=4096)
    img = image(s, level=10)
    with pytest.raises(UnwritableMetadataError):
        list(img.records())


def test_producer_ids_must_grow() -> None:
    p = R("ProducerIdsRecord")
    img = image(p(broker_id=1, broker_epoch=5, next_producer_id=1000))
    assert img.producer_ids.next_producer_id == 1000 and img.producer_ids.broker_id == 1
    with pytest.raises(ReplayError):
        img.replay(p(broker_id=2, broker_epoch=5, next_producer_id=1000), 2)
    img.replay(p(broker_id=2, broker_epoch=5, next_producer_id=2000), 2)
    rebuilt = roundtrip(img)
    assert rebuilt == img and rebuilt.producer_ids.broker_id == -1  # snapshots write -1/-1


# ----- migration, transactions, no-op, unknown ----------------------------------------------

def test_zk_migration_state() -> None:
    img = image()
    assert img.migration.state is ZkMigrationState.NONE
    img.replay(R("ZkMigrationStateRecord")(zk_migration_state=2), 1)
    assert img.migration.state is ZkMigrationState.PRE_MIGRATION and img.migration.state.in_progress()
    with pytest.raises(ReplayError):
        img.replay(R("ZkMigrationStateRecord")(zk_migration_state=7), 2)
    assert roundtrip(img).migration.state is ZkMigrationState.PRE_MIGRATION


def test_transactions() -> None:
    img = image()
    img.replay(R("BeginTransactionRecord")(name="Bootstrap records"), 5)
    assert img.transaction.open and img.transaction.name == "Bootstrap records"
    assert img.transaction.start_offset == 5
    with pytest.raises(ReplayError):
        img.replay(R("BeginTransactionRecord")(), 6)
    img.replay(R("EndTransactionRecord")(), 7)
    assert not img.transaction.open
    with pytest.raises(ReplayError):
        img.replay(R("AbortTransactionRecord")(), 8)
    img.replay(R("BeginTransactionRecord")(), 9)
    img.replay(R("AbortTransactionRecord")(reason="Controller failover"), 10)
    assert not img.transaction.open and img.offset == 10
    with pytest.raises(ReplayError, match="snapshot"):
        MetadataImage().load_snapshot([mv(), R("BeginTransactionRecord")()], 3)


def test_noop_advances_offset_only() -> None:
    img = image()
    before = list(img.records())
    img.replay(R("NoOpRecord")(), 42, timestamp_ms=1234)
    assert img.offset == 42 and img.last_timestamp_ms == 1234 and list(img.records()) == before


def test_unhandled_record_type() -> None:
    from kraftsim.metadata.records import data_class
    img = image()
    with pytest.raises(ReplayError, match="Unhandled"):
        img.replay(data_class("LeaderChangeMessage")(), 3)
    assert img.offset == 0


# ----- snapshot records ---------------------------------------------------------------------

def test_records_order_and_versions() -> None:
    cfg = R("ConfigRecord")(resource_type=2, resource_name="foo", name="x", value="y")
    img = MetadataImage(versions.release().supported_features(enable_unstable=True))
    img.replay(mv(17), 0)
    img.replay(R("FeatureLevelRecord")(name="transaction.version", feature_level=1), 1)
    for i, r in enumerate([broker(1, log_dirs=[D[0]]), topic(), part(0, directories=D[:3]), cfg,
                           R("ProducerIdsRecord")(broker_id=1, broker_epoch=1, next_producer_id=5)], 2):
        img.replay(r, i)
    out = [(type(r).__name__, v) for r, v in img.records()]
    assert out == [("FeatureLevelRecord", 0), ("FeatureLevelRecord", 0), ("ZkMigrationStateRecord", 0),
                   ("RegisterBrokerRecord", 3), ("TopicRecord", 0), ("PartitionRecord", 1),
                   ("ConfigRecord", 0), ("ProducerIdsRecord", 0)]
    assert next(iter(img.records()))[0].name == "metadata.version"
    assert roundtrip(img) == img


def test_records_at_old_mv_lose_nothing_silently() -> None:
    img = image(broker(1, log_dirs=[D[0]]), level=14)
    with pytest.raises(UnwritableMetadataError):
        list(img.records())
    img = image(topic(), part(0), level=7)
    recs = list(img.records())
    assert [v for r, v in recs if type(r).__name__ == "PartitionRecord"] == [0]
    assert not any(type(r).__name__ == "ZkMigrationStateRecord" for r, _ in recs)  # MV < 3.4-IV0
    assert roundtrip(img) == img


def test_equality_ignores_offsets_and_registration_offsets() -> None:
    a = image(broker(1), topic(), part(0))
    b = MetadataImage()
    for i, r in enumerate([mv(), broker(1), topic(), part(0)]):
        b.replay(r, 100 + i)
    assert a == b and a.cluster.brokers[1].registration_offset != b.cluster.brokers[1].registration_offset
    b.replay(change(isr=[1, 2]), 200)
    assert a != b


def test_cordoned_directories() -> None:
    """4.3+ (KIP-1066): RegisterBrokerRecord v4 and BrokerRegistrationChangeRecord v3 carry the
    cordoned directories (null: not reported, or no change), which a snapshot keeps."""
    r44 = versions.release("4.4")
    img = MetadataImage(release=r44)
    img.replay(mv(33), 0)
    img.replay(broker(1, log_dirs=D[:2]), 1)
    reg = img.cluster.brokers[1]
    assert reg.cordoned_directories is None and reg.has_uncordoned_dirs
    brc = R("BrokerRegistrationChangeRecord")
    img.replay(brc(broker_id=1, broker_epoch=10, cordoned_log_dirs=[D[1]]), 2)
    img.replay(brc(broker_id=1, broker_epoch=10, fenced=-1), 3)  # null: no change
    reg = img.cluster.brokers[1]
    assert reg.cordoned_directories == (D[1],) and reg.has_uncordoned_dirs and not reg.fenced
    img.replay(brc(broker_id=1, broker_epoch=10, cordoned_log_dirs=[D[1], D[0]]), 4)
    assert not img.cluster.brokers[1].has_uncordoned_dirs
    loaded = MetadataImage(img.supported_features, r44)
    loaded.load_snapshot(list(img.records()), img.offset)
    assert loaded.cluster.brokers[1] == img.cluster.brokers[1]
    img.replay(mv(29), 5)  # below 4.3-IV0 the field cannot be written
    with pytest.raises(UnwritableMetadataError):
        list(img.records())

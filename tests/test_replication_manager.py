"""CreateTopics / DeleteTopics through ReplicationControlManager, replayed into a real image."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable
from typing import Any

import pytest

from kraftsim.controller.managers.replication import ReplicationControlManager
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.write_path import EXCESSIVE_BATCH_MESSAGE as EXCESSIVE_BATCH
from kraftsim.metadata import versions
from kraftsim.metadata.config_defs.topic import (
    DEFAULT_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    TOPIC_CONFIGS,
)
from kraftsim.metadata.directories import MIGRATING, UNASSIGNED
from kraftsim.metadata.image.configs import TOPIC
from kraftsim.metadata.records import FramedRecord, by_name, frame, record_name, type_name, unframe
from kraftsim.rpc import registry
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.error_codes import ErrorCode as E
from kraftsim.rpc.uuids import ZERO
from tests.controller_harness import WriteHarness, request_context

R = by_name
CreateReq = registry.request_class(ApiKey.CREATE_TOPICS)
DeleteReq = registry.request_class(ApiKey.DELETE_TOPICS)
DIR = [uuid.UUID(int=(i + 7) << 64) for i in range(64)]


# ----- harness --------------------------------------------------------------------------------

class Cluster(WriteHarness):
    """Registered (and by default unfenced) brokers, and the manager, over the write path."""

    def __init__(self, brokers: Iterable[int] = (1, 2, 3), *, racks: dict[int, str] | None = None,
                 fenced: Iterable[int] = (), shutdown: Iterable[int] = (), level: int = 21,
                 dirs: dict[int, list[uuid.UUID]] | None = None, seed: int = 7,
                 config: dict[str, str] | None = None) -> None:
        super().__init__(level, config, supported_features=versions.release().supported_features(enable_unstable=level > 21))
        brc = R("BrokerRegistrationChangeRecord")
        for b in brokers:
            d = (dirs or {}).get(b, [DIR[b]])
            self.replay(R("RegisterBrokerRecord")(broker_id=b, broker_epoch=100 + b,
                                                  incarnation_id=uuid.UUID(int=1000 + b), fenced=True,
                                                  rack=(racks or {}).get(b), log_dirs=d if level >= 17 else []))
            if b not in set(fenced):
                self.replay(brc(broker_id=b, broker_epoch=100 + b, fenced=-1))
            if b in set(shutdown):
                self.replay(brc(broker_id=b, broker_epoch=100 + b, in_controlled_shutdown=1))
        ids = iter(range(1, 1 << 30))
        self.mgr = ReplicationControlManager(self.ctx, random.Random(seed),
                                             new_topic_id=lambda: uuid.UUID(int=next(ids) << 64 | 5))

    def apply(self, result: ControllerResult[Any] | None) -> Any:
        assert result is not None and result.atomic
        return super().apply(result)

    def create(self, *topics: Any, version: int = 7, validate_only: bool = False, **kw: Any) -> Any:
        req = CreateReq(topics=list(topics), timeout_ms=1000, validate_only=validate_only)
        return self.mgr.create_topics(req, request_context(ApiKey.CREATE_TOPICS, version), **kw)

    def delete(self, names: Iterable[str] = (), ids: Iterable[uuid.UUID] = (), version: int = 6,
               states: Iterable[Any] = (), **kw: Any) -> Any:
        if version >= 6:
            topics = [DeleteReq.DeleteTopicState(name=n, topic_id=ZERO) for n in names]
            topics += [DeleteReq.DeleteTopicState(name=None, topic_id=i) for i in ids] + list(states)
            req = DeleteReq(topics=topics, timeout_ms=1000)
        else:
            req = DeleteReq(topic_names=list(names), timeout_ms=1000)
        return self.mgr.delete_topics(req, request_context(ApiKey.DELETE_TOPICS, version), **kw)


def topic(name: str, partitions: int = 1, rf: int = 1, configs: dict[str, str | None] | None = None,
          assignments: dict[int, list[int]] | None = None) -> Any:
    t = CreateReq.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf)
    t.configs = [CreateReq.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()]
    t.assignments = [CreateReq.CreatableReplicaAssignment(partition_index=p, broker_ids=b)
                     for p, b in (assignments or {}).items()]
    return t


def by_name_(resp: Any) -> dict[str, Any]:
    return {t.name: t for t in resp.topics}


def err(result: ControllerResult[Any], name: str) -> tuple[int, str | None]:
    t = by_name_(result.response)[name]
    return t.error_code, t.error_message


# ----- success path, replay -------------------------------------------------------------------

def test_create_replays_into_image_with_leaders_isr_and_directories() -> None:
    c = Cluster([1, 2, 3])
    res = c.create(topic("foo", 6, 3))
    assert [type_name(r.api_key()) for r, _ in res.records] == ["TopicRecord"] + ["PartitionRecord"] * 6
    assert all(v == 1 for r, v in res.records if type_name(r.api_key()) == "PartitionRecord")  # MV 3.9: v1
    resp = c.apply(res)
    t = resp.topics[0]
    assert (t.error_code, t.error_message, t.num_partitions, t.replication_factor) == (0, None, 6, 3)
    assert t.topic_config_error_code == 0
    img = c.image.topics.by_name["foo"]
    assert img.id == t.topic_id and len(img.partitions) == 6
    for p in img.partitions.values():
        assert sorted(p.replicas) == [1, 2, 3]
        assert p.isr == p.replicas and p.leader == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch, p.leader_recovery_state) == (0, 0, 0)
        assert p.directories == tuple(DIR[b] for b in p.replicas)  # each broker's single dir
    assert {p.leader for p in img.partitions.values()} == {1, 2, 3}


def test_fenced_broker_is_a_follower_outside_the_isr_and_never_leader() -> None:
    c = Cluster([1, 2, 3], fenced=[3])
    c.apply(c.create(topic("foo", 30, 3)))
    for p in c.image.topics.by_name["foo"].partitions.values():
        assert 3 in p.replicas and 3 not in p.isr and p.leader in (1, 2) and p.replicas[0] != 3


def test_controlled_shutdown_broker_is_not_used() -> None:
    c = Cluster([1, 2, 3, 4], shutdown=[4])
    c.apply(c.create(topic("foo", 20, 3)))
    assert all(4 not in p.replicas for p in c.image.topics.by_name["foo"].partitions.values())
    r = c.create(topic("bar", 1, 4))
    assert err(r, "bar") == (E.INVALID_REPLICATION_FACTOR, "Unable to replicate the partition 4 time(s): The "
                             "target replication factor of 4 cannot be reached because only 3 broker(s) are registered.")


def test_directories_by_metadata_version() -> None:
    c = Cluster([1, 2], dirs={1: [DIR[1], DIR[9]], 2: []})
    c.apply(c.create(topic("foo", 2, 2)))
    for p in c.image.topics.by_name["foo"].partitions.values():
        assert dict(zip(p.replicas, p.directories, strict=True)) == {1: UNASSIGNED, 2: MIGRATING}
    old = Cluster([1, 2], level=14)  # 3.6-IV2: no directory assignment, PartitionRecord v0
    res = old.create(topic("foo", 1, 2))
    assert [v for r, v in res.records if type_name(r.api_key()) == "PartitionRecord"] == [0]
    old.apply(res)
    assert old.image.topics.by_name["foo"].partitions[0].directories == (MIGRATING, MIGRATING)


def test_defaults_from_config_for_minus_one() -> None:
    c = Cluster([1, 2, 3], config={"num.partitions": "4", "default.replication.factor": "2"})
    resp = c.apply(c.create(topic("foo", -1, -1)))
    assert (resp.topics[0].num_partitions, resp.topics[0].replication_factor) == (4, 2)
    assert all(len(p.replicas) == 2 for p in c.image.topics.by_name["foo"].partitions.values())


def test_configs_become_config_records_and_effective_configs_are_reported() -> None:
    c = Cluster([1], config={"log.retention.hours": "5"})
    c.replay(R("ConfigRecord")(resource_type=4, resource_name="", name="compression.type", value="lz4"))
    res = c.create(topic("foo", configs={"cleanup.policy": "compact", "segment.ms": "1000"}))
    kinds = [type_name(r.api_key()) for r, _ in res.records]
    assert kinds == ["TopicRecord", "ConfigRecord", "ConfigRecord", "PartitionRecord"]
    resp = c.apply(res)
    assert c.image.configs.get(TOPIC, "foo") == {"cleanup.policy": "compact", "segment.ms": "1000"}
    cfg = {e.name: e for e in resp.topics[0].configs}
    assert [e.name for e in resp.topics[0].configs] == sorted(TOPIC_CONFIGS)
    assert (cfg["cleanup.policy"].value, cfg["cleanup.policy"].config_source) == ("compact", DYNAMIC_TOPIC_CONFIG)
    assert (cfg["compression.type"].value, cfg["compression.type"].config_source) == \
        ("lz4", DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert (cfg["retention.ms"].value, cfg["retention.ms"].config_source) == ("18000000", STATIC_BROKER_CONFIG)
    assert (cfg["max.message.bytes"].value, cfg["max.message.bytes"].config_source) == ("1048588", DEFAULT_CONFIG)
    assert cfg["min.cleanable.dirty.ratio"].value == "0.5" and cfg["flush.ms"].value == "9223372036854775807"
    assert not any(e.read_only or e.is_sensitive for e in resp.topics[0].configs)


def test_not_describable_hides_configs() -> None:
    c = Cluster([1])
    resp = c.apply(c.create(topic("foo"), topic("bar"), describable={"bar"}))
    foo, bar = by_name_(resp)["foo"], by_name_(resp)["bar"]
    assert foo.error_code == 0 and foo.topic_config_error_code == E.TOPIC_AUTHORIZATION_FAILED
    assert (foo.num_partitions, foo.replication_factor, foo.configs) == (-1, -1, [])
    assert bar.topic_config_error_code == 0 and bar.configs


def test_manual_assignment() -> None:
    c = Cluster([1, 2, 3], fenced=[1])
    resp = c.apply(c.create(topic("foo", -1, -1, assignments={1: [2, 3], 0: [1, 3]})))
    assert (resp.topics[0].num_partitions, resp.topics[0].replication_factor) == (2, 2)
    parts = c.image.topics.by_name["foo"].partitions
    assert (parts[0].replicas, parts[0].isr, parts[0].leader) == ((1, 3), (3,), 3)
    assert (parts[1].replicas, parts[1].isr, parts[1].leader) == ((2, 3), (2, 3), 2)


def test_validate_only_writes_nothing_but_reports_everything() -> None:
    c = Cluster([1, 2])
    res = c.create(topic("foo", 3, 2), topic("bad!"), validate_only=True)
    assert res.records == []
    assert err(res, "foo") == (0, None) and by_name_(res.response)["foo"].num_partitions == 3
    assert err(res, "bad!")[0] == E.INVALID_TOPIC_EXCEPTION
    c.apply(res)
    assert "foo" not in c.image.topics.by_name


def test_partial_success_keeps_request_order_and_one_atomic_batch() -> None:
    c = Cluster([1, 2])
    c.apply(c.create(topic("exists")))
    res = c.create(topic("a", 2, 1), topic("exists"), topic("b", 1, 5), topic("c", 1, 2))
    assert [t.name for t in res.response.topics] == ["a", "exists", "b", "c"]
    assert [t.error_code for t in res.response.topics] == [0, E.TOPIC_ALREADY_EXISTS, E.INVALID_REPLICATION_FACTOR, 0]
    assert res.atomic
    c.apply(res)
    assert set(c.image.topics.by_name) == {"exists", "a", "c"}


# ----- CreateTopics errors ----------------------------------------------------------------------

@pytest.mark.parametrize("name,message", [
    ("", "Topic name is invalid: the empty string is not allowed"),
    (".", "Topic name is invalid: '.' is not allowed"),
    ("..", "Topic name is invalid: '..' is not allowed"),
    ("x" * 250, f"Topic name is invalid: the length of '{'x' * 250}' is longer than the max allowed length 249"),
    ("a b", "Topic name is invalid: 'a b' contains one or more characters other than ASCII alphanumerics, "
            "'.', '_' and '-'"),
])
def test_invalid_topic_names(name: str, message: str) -> None:
    c = Cluster([1])
    assert err(c.create(topic(name)), name) == (E.INVALID_TOPIC_EXCEPTION, message)


def test_name_of_249_chars_is_fine() -> None:
    c = Cluster([1])
    assert err(c.create(topic("x" * 249)), "x" * 249) == (0, None)


def test_collision_and_already_exists() -> None:
    c = Cluster([1])
    c.apply(c.create(topic("a.b")))
    r = c.create(topic("a_b"), topic("a.b"))
    assert err(r, "a_b") == (E.INVALID_TOPIC_EXCEPTION, "Topic 'a_b' collides with existing topic: a.b")
    assert err(r, "a.b") == (E.TOPIC_ALREADY_EXISTS, "Topic 'a.b' already exists.")


def test_duplicates_cluster_metadata_and_authorization() -> None:
    c = Cluster([1])
    r = c.create(topic("d"), topic("ok"), topic("d"), topic("__cluster_metadata"), topic("secret"),
                 creatable=lambda n: n != "secret")
    assert [t.name for t in r.response.topics] == ["ok", "d", "__cluster_metadata", "secret"]
    assert err(r, "d") == (E.INVALID_REQUEST, "Duplicate topic name.")
    assert err(r, "__cluster_metadata") == (E.INVALID_REQUEST,
                                            "Creation of internal topic __cluster_metadata is prohibited.")
    assert err(r, "secret") == (E.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
    c.apply(r)
    assert set(c.image.topics.by_name) == {"ok"}


@pytest.mark.parametrize("partitions,rf,code,message", [
    (1, 0, E.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, or -1 to use the default value."),
    (1, -2, E.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0, or -1 to use the default value."),
    (0, 1, E.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."),
    (-5, 1, E.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."),
    (1, 4, E.INVALID_REPLICATION_FACTOR, "Unable to replicate the partition 4 time(s): The target replication "
                                         "factor of 4 cannot be reached because only 3 broker(s) are registered."),
])
def test_counts(partitions: int, rf: int, code: int, message: str) -> None:
    c = Cluster([1, 2, 3])
    assert err(c.create(topic("t", partitions, rf)), "t") == (code, message)


def test_all_brokers_fenced_and_no_brokers() -> None:
    c = Cluster([1, 2], fenced=[1, 2])
    assert err(c.create(topic("t")), "t") == (E.INVALID_REPLICATION_FACTOR,
                                               "Unable to replicate the partition 1 time(s): All brokers are "
                                               "currently fenced.")
    c = Cluster([])
    assert err(c.create(topic("t")), "t")[0] == E.INVALID_REPLICATION_FACTOR


@pytest.mark.parametrize("assignments,rf,np,code,message", [
    ({0: [1]}, 1, -1, E.INVALID_REQUEST,
     "A manual partition assignment was specified, but replication factor was not set to -1."),
    ({0: [1]}, -1, 1, E.INVALID_REQUEST,
     "A manual partition assignment was specified, but numPartitions was not set to -1."),
    ({0: []}, -1, -1, E.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
    ({0: [1, 9]}, -1, -1, E.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes broker 9, but no such broker is registered."),
    ({0: [2, 1, 2]}, -1, -1, E.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes the broker 2 more than once."),
    ({0: [1, 2], 1: [1]}, -1, -1, E.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with "
     "previous partitions, which have 2 replica(s)."),
    ({0: [1], 2: [2]}, -1, -1, E.INVALID_REPLICA_ASSIGNMENT,
     "partitions should be a consecutive 0-based integer sequence"),
    ({0: [3]}, -1, -1, E.INVALID_REPLICA_ASSIGNMENT,
     "All brokers specified in the manual partition assignment for partition 0 are fenced or in controlled "
     "shutdown."),
])
def test_manual_assignment_errors(assignments: dict[int, list[int]], rf: int, np: int, code: int,
                                  message: str) -> None:
    c = Cluster([1, 2, 3], fenced=[3])
    assert err(c.create(topic("t", np, rf, assignments=assignments)), "t") == (code, message)


def test_duplicate_partition_in_manual_assignment() -> None:
    c = Cluster([1, 2])
    t = topic("t", -1, -1, assignments={0: [1]})
    t.assignments.append(CreateReq.CreatableReplicaAssignment(partition_index=0, broker_ids=[2]))
    assert err(c.create(t), "t") == (E.INVALID_REPLICA_ASSIGNMENT,
                                      "Found multiple manual partition assignments for partition 0")


@pytest.mark.parametrize("configs,message", [
    ({"a": None, "retention.ms": "1", "b": None}, "Null value not supported for topic configs: a,b"),
    ({"no.such.config": "1"}, "Unknown topic config name: no.such.config"),
    ({"segment.bytes": "abc"}, "Invalid value abc for configuration segment.bytes: Not a number of type INT"),
    ({"segment.bytes": "10"}, "Invalid value 10 for configuration segment.bytes: Value must be at least 14"),
    ({"min.cleanable.dirty.ratio": "1.5"},
     "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
    ({"preallocate": "yes"}, "Invalid value yes for configuration preallocate: Expected value to be either true "
                             "or false"),
    ({"cleanup.policy": "compact,zap"}, "Invalid value zap for configuration cleanup.policy: String must be one "
                                         "of: compact, delete"),
    ({"compression.type": "brotli"}, "Invalid value brotli for configuration compression.type: String must be "
                                     "one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ({"compression.gzip.level": "0"}, "Invalid value 0 for configuration compression.gzip.level: Value must be "
                                      "between 1 and 9 or equal to -1"),
    ({"message.format.version": "9.9"}, "Invalid value 9.9 for configuration message.format.version: Version "
                                        "9.9 is not a valid version"),
    ({"leader.replication.throttled.replicas": "0:1,x"},
     "Invalid value [0:1, x] for configuration leader.replication.throttled.replicas: "
     "leader.replication.throttled.replicas must be the literal '*' or a list of replicas in the following "
     "format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
     "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
    ({"remote.storage.enable": "true"}, "Tiered Storage functionality is disabled in the broker. Topic cannot "
                                        "be configured with remote log storage."),
])
def test_invalid_configs(configs: dict[str, str | None], message: str) -> None:
    c = Cluster([1])
    r = c.create(topic("t", configs=configs), topic("fine"))
    assert err(r, "t") == (E.INVALID_CONFIG, message)
    assert err(r, "fine") == (0, None)


def test_valid_config_values_are_accepted() -> None:
    c = Cluster([1])
    good = {"message.format.version": "2.8-IV1", "leader.replication.throttled.replicas": "*",
            "follower.replication.throttled.replicas": "0:1,1:2", "compression.zstd.level": "-5",
            "retention.ms": " -1 ", "cleanup.policy": "compact, delete"}
    assert err(c.create(topic("t", configs=good)), "t") == (0, None)


def test_more_than_10000_records_is_policy_violation_even_validate_only() -> None:
    c = Cluster([1])
    ok = c.create(topic("t", 9999))  # 1 TopicRecord + 9,999 PartitionRecords = 10,000
    assert len(ok.records) == 10_000
    for vo in (False, True):
        with pytest.raises(ApiError) as e:
            c.create(topic("t", 10_000), validate_only=vo)
        assert (e.value.code, e.value.message) == (E.POLICY_VIOLATION, EXCESSIVE_BATCH)


def test_empty_request() -> None:
    c = Cluster([1])
    r = c.create()
    assert r.records == [] and r.response.topics == []


def test_quota_hook_marks_topic() -> None:
    c = Cluster([1])

    def quota(n: int) -> None:
        if n > 2:
            raise ApiError(E.THROTTLING_QUOTA_EXCEEDED, "quota")

    r = c.create(topic("small", 2), topic("big", 3), partition_quota=quota)
    assert err(r, "small") == (0, None) and err(r, "big") == (E.THROTTLING_QUOTA_EXCEEDED, "quota")


def test_response_encodes_at_every_version() -> None:
    c = Cluster([1])
    resp = c.create(topic("a"), topic("b c")).response
    cls = type(resp)
    for v in range(0, 8):
        back = cls.decode(resp.encode(v), v)
        assert [(t.name, t.error_code) for t in back.topics] == [("a", 0), ("b c", E.INVALID_TOPIC_EXCEPTION)]
        # v1+ carries messages, v5+ the partition count and effective configs, as the schema says.
        absent = cls.CreatableTopicResult().error_message
        assert back.topics[1].error_message == (resp.topics[1].error_message if v >= 1 else absent)
        assert back.topics[0].num_partitions == (1 if v >= 5 else -1)
        assert bool(back.topics[0].configs) == (v >= 5)


# ----- DeleteTopics -----------------------------------------------------------------------------

def _setup_topics(c: Cluster, *names: str, configs: dict[str, str] | None = None) -> dict[str, uuid.UUID]:
    resp = c.apply(c.create(*(topic(n, 2, 1, configs=configs) for n in names)))
    return {t.name: t.topic_id for t in resp.topics}


def _results(res: ControllerResult[Any]) -> dict[Any, tuple[Any, int, str | None]]:
    return {(r.name, r.topic_id): (r.error_code, r.error_message) for r in res.response.responses}


def test_delete_by_name_and_id_removes_topics_and_configs() -> None:
    c = Cluster([1, 2])
    ids = _setup_topics(c, "a", "b", "keep", configs={"retention.ms": "10"})
    res = c.delete(names=["a"], ids=[ids["b"]])
    assert sorted(type_name(r.api_key()) for r, _ in res.records) == ["RemoveTopicRecord"] * 2
    assert _results(res) == {("a", ids["a"]): (0, None), ("b", ids["b"]): (0, None)}
    c.apply(res)
    assert set(c.image.topics.by_name) == {"keep"}
    assert c.image.configs.get(TOPIC, "a") == {} and c.image.configs.get(TOPIC, "keep") == {"retention.ms": "10"}
    assert c.image.topics.partition_count == 2


def test_delete_v5_by_names_and_unknown() -> None:
    c = Cluster([1])
    ids = _setup_topics(c, "a")
    res = c.delete(names=["a", "nope"], version=5)
    assert _results(res) == {("a", ids["a"]): (0, None),
                             ("nope", ZERO): (E.UNKNOWN_TOPIC_OR_PARTITION,
                                              "This server does not host this topic-partition.")}


def test_delete_request_errors() -> None:
    c = Cluster([1])
    ids = _setup_topics(c, "a", "b")
    unknown = uuid.UUID(int=99)
    states = [DeleteReq.DeleteTopicState(name="a", topic_id=ids["a"]),
              DeleteReq.DeleteTopicState(name=None, topic_id=ZERO)]
    res = c.delete(names=["dup", "dup", "b"], ids=[unknown, ids["b"]], states=states)
    assert _results(res) == {
        ("a", ids["a"]): (E.INVALID_REQUEST, "You may not specify both topic name and topic id."),
        (None, ZERO): (E.INVALID_REQUEST, "Neither topic name nor id were specified."),
        ("dup", ZERO): (E.INVALID_REQUEST, "Duplicate topic name."),
        (None, unknown): (E.UNKNOWN_TOPIC_ID, "This server does not host this topic ID."),
        ("b", ids["b"]): (E.INVALID_REQUEST, "The provided topic name maps to an ID that was already supplied."),
    }
    assert res.records == []
    res = c.delete(ids=[ids["a"], ids["a"]])
    assert _results(res) == {(None, ids["a"]): (E.INVALID_REQUEST, "Duplicate topic id.")}


def test_delete_authorization() -> None:
    c = Cluster([1])
    ids = _setup_topics(c, "seen", "hidden", "ok")
    res = c.delete(names=["seen", "hidden", "ok"], deletable=lambda n: n == "ok", describable=lambda n: n != "hidden")
    assert _results(res) == {("seen", ZERO): (E.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."),
                             ("hidden", ZERO): (E.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."),
                             ("ok", ids["ok"]): (0, None)}
    res = c.delete(ids=[ids["seen"], ids["hidden"]], deletable=lambda n: False, describable=lambda n: n != "hidden")
    assert _results(res) == {("seen", ids["seen"]): (E.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."),
                             (None, ids["hidden"]): (E.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")}


def test_delete_disabled() -> None:
    c = Cluster([1], config={"delete.topic.enable": "false"})
    _setup_topics(c, "a")
    with pytest.raises(ApiError) as e:
        c.delete(names=["a"])
    assert e.value.code == E.TOPIC_DELETION_DISABLED
    with pytest.raises(ApiError) as e:
        c.delete(names=["a"], version=2)
    assert (e.value.code, e.value.message) == (E.INVALID_REQUEST, "Topic deletion is disabled.")


def test_delete_over_the_record_cap_deletes_the_first_ten_thousand_in_kafkas_order() -> None:
    """10,001 topics in one DeleteTopics: the first 10,000 in the order of Kafka's idToName
    HashMap (by Uuid.hashCode, a table of 16,384 buckets) are deleted, the last is answered
    UNKNOWN_SERVER_ERROR without a message, and the request is not refused whole."""
    from kraftsim.controller.java.hash_order import spread

    c = Cluster()
    names = [f"t{i}" for i in range(10_001)]
    for i in range(0, len(names), 4_000):
        c.apply(c.create(*(topic(n, 1, 1) for n in names[i:i + 4_000])))
    ids = {t.name: t.id for t in c.image.topics.by_id.values()}
    res = c.delete(names)
    c.apply(res)
    refused = [r for r in res.response.responses if r.error_code != 0]
    assert [(r.error_code, r.error_message) for r in refused] == [(E.UNKNOWN_SERVER_ERROR, None)]
    assert len(res.records) == 10_000 and list(c.image.topics.by_id) == [refused[0].topic_id]

    def bucket(u: uuid.UUID) -> int:
        x = (u.int >> 64) ^ (u.int & (1 << 64) - 1)
        return spread((x >> 32) ^ x) & (16_384 - 1)

    deleted = [bucket(r.topic_id) for r, _ in res.records]
    assert deleted == sorted(deleted) and deleted[-1] <= bucket(ids[refused[0].name])


def test_delete_results_are_shuffled() -> None:
    c = Cluster([1])
    names = [f"t{i}" for i in range(30)]
    _setup_topics(c, *names)
    res = c.delete(names=names)
    assert sorted(r.name for r in res.response.responses) == sorted(names)
    assert [r.name for r in res.response.responses] != names
    for v in (1, 5, 6):
        assert res.response.encode(v)


def test_the_write_path_image_equals_the_image_replayed_from_its_log() -> None:
    """The write path replays a plain PartitionRecord from the bytes it has just framed, anything
    else from the record object: what it builds must be what the loader builds from the log
    (bytes) and what replaying the log's records as objects builds; and a revert takes it back."""
    from kraftsim.metadata.image import MetadataImage
    from kraftsim.metadata.loader import load_image

    c = Cluster([1, 2, 3, 4], fenced=[4], racks={1: "a", 2: "b", 3: "a", 4: "b"})
    c.apply(c.create(topic("a", 6, 3), topic("b", 3, 2, configs={"cleanup.policy": "compact"})))
    c.apply(c.create(topic("m", -1, -1, assignments={0: [4, 1], 1: [2, 3]})))  # 4 is fenced: led by 1, imbalanced
    t = c.image.topics
    assert t.partition_count == 11 and len(set(t.imbalanced)) == 1
    for legacy in (False, True):
        loaded, _ = load_image(c.mlog, MetadataImage, legacy=legacy)
        assert list(loaded.records()) == list(c.image.records())
        o = loaded.topics
        assert o.partition_count == t.partition_count
        assert set(o.leaderless) == set(t.leaderless) and set(o.imbalanced) == set(t.imbalanced)
        assert {b: set(m) for b, m in o.isr_index.items()} == {b: set(m) for b, m in t.isr_index.items()}

    before, isr_before = list(c.image.records()), {b: set(m) for b, m in t.isr_index.items()}
    mark = c.image.offset
    c.image.mark(mark)
    c.writer.append(c.create(topic("gone", 2, 2)))
    assert t.by_name.get("gone") is not None and t.partition_count == 13
    c.image.revert_to(mark)
    assert list(c.image.records()) == before and t.partition_count == 11
    assert {b: set(m) for b, m in t.isr_index.items()} == isr_before


@pytest.mark.parametrize("level", [7, 14, 17, 21, 22])  # PartitionRecord v0, v0, v1, v1, v2 (ELR)
def test_framed_partition_records_are_the_general_encoders_bytes(level: int) -> None:
    """CreateTopics and CreatePartitions frame new PartitionRecords from cached tails
    (FramedRecord): each must be byte for byte what the general encoder writes for the record
    object the placement describes, read back as that record, and replay to the image the
    objects build. Fenced brokers (ISR shorter than replicas), racks, manual assignments, a
    second request that hits the cache, and a directory that changes between requests."""
    from kraftsim.metadata.image import MetadataImage
    from kraftsim.metadata.loader import load_image

    c = Cluster(range(1, 8), fenced=[6], racks={b: f"r{b % 3}" for b in range(1, 8)}, level=level)
    cp = registry.request_class(ApiKey.CREATE_PARTITIONS)
    results: list[tuple[ControllerResult[Any], Any]] = []  # with the placement each was made with

    def made(res: ControllerResult[Any]) -> None:
        results.append((res, c.mgr._placement()))
        c.apply(res)

    made(c.create(topic("a", 40, 3), topic("b", 7, 2), topic("m", -1, -1, assignments={0: [6, 1], 1: [2, 3]})))
    made(c.create(topic("c", 40, 3)))
    if level >= 17:  # broker 2 moves to another directory: the tails of its replicas change
        c.replay(R("BrokerRegistrationChangeRecord")(broker_id=2, broker_epoch=102, log_dirs=[DIR[40]]))
    made(c.create(topic("d", 20, 3)))
    made(c.mgr.create_partitions(
        cp(topics=[cp.CreatePartitionsTopic(name="d", count=30, assignments=None)], timeout_ms=1000,
           validate_only=False), request_context(ApiKey.CREATE_PARTITIONS, 3)))
    version = versions.release().partition_record_version(level)
    framed = shorter_isr = 0
    for res, placement in results:
        for r, v in res.records:
            if not isinstance(r, FramedRecord):
                continue
            framed += 1
            rec = r.record()
            assert v == version and type_name(r.api_key()) == record_name(r) == record_name(rec) == "PartitionRecord"
            general = placement.partition_record(rec.topic_id, rec.partition_id, rec.replicas, rec.isr)
            assert r.value == frame(general, v) and unframe(r.value) == (general, v) and r == general
            assert (rec.leader, rec.leader_epoch, rec.partition_epoch) == (rec.isr[0], 0, 0)
            shorter_isr += len(rec.isr) < len(rec.replicas)
    assert framed == 40 + 7 + 2 + 40 + 20 + 10 and shorter_isr
    for legacy in (False, True):  # the log's records as bytes and as objects
        loaded, _ = load_image(c.mlog, lambda: MetadataImage(versions.release().supported_features(True)), legacy=legacy)
        assert list(loaded.records()) == list(c.image.records())


def test_a_refused_record_names_its_offset_and_leaves_the_image_as_it_was() -> None:
    """The write path replays a batch in one go (fast_replay.replay_at_append): a record the
    image refuses still fails the whole batch with its own offset, and nothing of it stays."""
    from kraftsim.controller.write_path import ReplayFailedError

    c = Cluster([1, 2])
    before = list(c.image.records())
    tid = uuid.UUID(int=77 << 64)
    part = R("PartitionRecord")(partition_id=0, topic_id=tid, replicas=[1], isr=[1], leader=1, leader_epoch=0,
                                partition_epoch=0)
    good = [(R("TopicRecord")(name="t", topic_id=tid), 0), (part, 0), (FramedRecord(frame(part.replace(
        partition_id=1), 0)), 0)]
    for bad_at in (0, 1, 3):
        records = list(good)
        records.insert(bad_at, (R("RemoveTopicRecord")(topic_id=uuid.UUID(int=78 << 64)), 0))  # no such topic
        base = c.next_offset
        with pytest.raises(ReplayFailedError) as e:
            c.writer.append(ControllerResult(records, None))
        assert e.value.offset == base + bad_at
        assert list(c.image.records()) == before and c.image.topics.partition_count == 0
        assert not c.image.topics.isr_index.get(1) and c.next_offset == base

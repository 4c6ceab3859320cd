"""CreateTopics and DeleteTopics against a real Kafka 3.9 controller (differential)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from tests.kafka import differential as d
from tests.kafka.conftest import PairNodes, close, connect
from tests.kafka.differential import Call, TopicSpec

pytestmark = pytest.mark.kafka

T = TopicSpec


def brokers(*ids: int, unfence: bool = True) -> list[d.Step]:
    steps: list[d.Step] = [Call(f"register {b}", d.register(b)) for b in ids]
    if unfence:
        steps += [Call(f"unfence {b}", d.heartbeat(b)) for b in ids]
    return steps


async def test_create_topics_names_counts_and_factors(shared_pair: d.Pair) -> None:
    steps = [
        Call("no broker registered yet", d.create_topics(T("lonely", 1, 1))),
        *brokers(101, 102, 103),
        Call("defaults (-1, -1)", d.create_topics(T("t-defaults"))),
        Call("3 partitions, RF 3", d.create_topics(T("t-3x3", 3, 3))),
        Call("already exists", d.create_topics(T("t-3x3", 1, 1))),
        Call("same name twice in one request", d.create_topics(T("t-dup", 1, 1), T("t-dup", 2, 1))),
        Call("empty name", d.create_topics(T("", 1, 1))),
        Call("dot", d.create_topics(T(".", 1, 1))),
        Call("dot dot", d.create_topics(T("..", 1, 1))),
        Call("too long", d.create_topics(T("x" * 250, 1, 1))),
        Call("longest legal", d.create_topics(T("y" * 249, 1, 3))),
        Call("illegal characters", d.create_topics(T("bad/name", 1, 1), T("with space", 1, 1), T("ünï", 1, 1))),
        Call("dot-underscore collision", d.create_topics(T("col.lide", 1, 3))),
        Call("colliding name", d.create_topics(T("col_lide", 1, 3))),
        Call("the metadata topic", d.create_topics(T("__cluster_metadata", 1, 1))),
        Call("an internal topic name", d.create_topics(T("__consumer_offsets", 1, 3))),
        Call("zero partitions", d.create_topics(T("t-p0", 0, 1))),
        Call("negative partitions", d.create_topics(T("t-pneg", -2, 1))),
        Call("zero replication factor", d.create_topics(T("t-rf0", 1, 0))),
        Call("negative replication factor", d.create_topics(T("t-rfneg", 1, -2))),
        Call("more replicas than brokers", d.create_topics(T("t-rf4", 1, 4))),
        Call("good and bad in one request", d.create_topics(T("t-good", 2, 3), T("t-bad", 1, 9))),
        Call("over 10,000 records in one request", d.create_topics(T("t-huge", 10_000, 1))),
        Call("a million partitions", d.create_topics(T("t-million", 1_000_000, 3))),
        Call("over the cap in two topics", d.create_topics(T("t-half-a", 5_000, 3), T("t-half-b", 5_000, 3))),
        Call("over the cap, and a bad factor", d.create_topics(T("t-over", 10_000, 1), T("t-bad-rf", 10_000, 9))),
        Call("a refused topic's partitions count too",
             d.create_topics(T("t-fits", 4_000, 1), T("t-bad-rf2", 10_000, 9))),
        Call("partitions under the cap, records over it",
             d.create_topics(T("t-configs", 9_999, 1, configs={"retention.ms": "1000", "cleanup.policy": "compact"}))),
        Call("10,001 manual assignments",
             d.create_topics(T("t-manual-huge", assignments={i: [101] for i in range(10_001)}))),
        Call("validate only: over the cap", d.create_topics(T("t-vo-huge", 20_000, 1), validate_only=True)),
        Call("exactly 10,000 records", d.create_topics(T("t-at-cap", 9_999, 1))),
        Call("validate only: good", d.create_topics(T("t-vo", 4, 3), validate_only=True)),
        Call("validate only: bad factor", d.create_topics(T("t-vo-bad", 4, 7), validate_only=True)),
        Call("validate only: exists", d.create_topics(T("t-3x3", 4, 3), validate_only=True)),
    ]
    t = await d.check(shared_pair, steps)
    assert t.response("no broker registered yet")["topics"][0]["error_code"] == 38  # INVALID_REPLICATION_FACTOR
    assert t.response("already exists")["topics"][0]["error_code"] == 36  # TOPIC_ALREADY_EXISTS
    assert t.response("colliding name")["topics"][0]["error_code"] == 17  # INVALID_TOPIC_EXCEPTION
    assert t.response("over 10,000 records in one request")["topics"][0]["error_code"] == 44  # POLICY_VIOLATION
    assert t.response("a million partitions")["topics"][0]["error_code"] == 44
    assert [x["error_code"] for x in t.response("over the cap, and a bad factor")["topics"]] == [44, 44]
    assert [x["error_code"] for x in t.response("a refused topic's partitions count too")["topics"]] == [44, 44]
    assert t.response("partitions under the cap, records over it")["topics"][0]["error_message"] == \
        "Unable to perform excessively large batch operation."
    assert t.response("10,001 manual assignments")["topics"][0]["error_message"] == \
        "Excessively large number of partitions per request."
    assert t.response("validate only: over the cap")["topics"][0]["error_code"] == 44
    assert t.response("exactly 10,000 records")["topics"][0]["error_code"] == 0
    assert t["validate only: good"]["records"] == []
    assert t.record_types("3 partitions, RF 3") == ["TopicRecord"] + ["PartitionRecord"] * 3


async def test_create_topics_manual_assignments(shared_pair: d.Pair) -> None:
    steps = [
        *brokers(111, 112, 113),
        *brokers(114, unfence=False),
        Call("assignments", d.create_topics(T("m-ok", assignments={0: [111, 112], 1: [112, 113], 2: [113, 111]}))),
        Call("a fenced broker first", d.create_topics(T("m-fenced-first", assignments={0: [114, 111]}))),
        Call("only a fenced broker", d.create_topics(T("m-fenced-only", assignments={0: [114]}))),
        Call("with a partition count too", d.create_topics(T("m-count", 2, -1, assignments={0: [111], 1: [112]}))),
        Call("with a replication factor too", d.create_topics(T("m-rf", -1, 1, assignments={0: [111]}))),
        Call("indices not from 0", d.create_topics(T("m-gap", assignments={1: [111], 2: [112]}))),
        Call("indices with a gap", d.create_topics(T("m-gap2", assignments={0: [111], 2: [112]}))),
        Call("a broker twice", d.create_topics(T("m-twice", assignments={0: [111, 111]}))),
        Call("an unregistered broker", d.create_topics(T("m-unknown", assignments={0: [111, 999]}))),
        Call("an empty replica list", d.create_topics(T("m-empty", assignments={0: []}))),
        Call("uneven replication factors", d.create_topics(T("m-uneven", assignments={0: [111, 112], 1: [113]}))),
        Call("a negative partition index", d.create_topics(T("m-neg", assignments={-1: [111]}))),
        Call("validate only", d.create_topics(T("m-vo", assignments={0: [111, 112]}), validate_only=True)),
    ]
    t = await d.check(shared_pair, steps)
    assert t.response("assignments")["topics"][0]["error_code"] == 0
    assert t.response("a broker twice")["topics"][0]["error_code"] == 39  # INVALID_REPLICA_ASSIGNMENT


async def test_create_topics_configs(shared_pair: d.Pair) -> None:
    steps = [
        *brokers(121, 122),
        Call("valid configs", d.create_topics(T("c-ok", 1, 2, configs={
            "cleanup.policy": "compact", "retention.ms": "1000", "min.insync.replicas": "2",
            "compression.type": "zstd", "max.message.bytes": "2000000"}))),
        Call("invalid value", d.create_topics(T("c-bad-value", 1, 1, configs={"retention.ms": "soon"}))),
        Call("out of range", d.create_topics(T("c-range", 1, 1, configs={"min.insync.replicas": "0"}))),
        Call("invalid enum", d.create_topics(T("c-enum", 1, 1, configs={"cleanup.policy": "shred"}))),
        Call("unknown key", d.create_topics(T("c-unknown", 1, 1, configs={"no.such.config": "1"}))),
        Call("null value", d.create_topics(T("c-null", 1, 1, configs={"retention.ms": None}))),
        Call("a broker-only key", d.create_topics(T("c-broker", 1, 1, configs={"log.retention.ms": "5"}))),
        Call("validate only with configs", d.create_topics(T("c-vo", 3, 2, configs={"retention.bytes": "10"}),
                                                           validate_only=True)),
        Call("below a minimum", d.create_topics(T("c-min", 1, 1, configs={"segment.bytes": "10"}))),
        # 14 configs: Kafka's HashMap grows past 12 entries, which reorders its ConfigRecords.
        Call("many configs", d.create_topics(T("c-many", 1, 1, configs={
            "segment.ms": "100000", "segment.bytes": "1048576", "retention.bytes": "100", "flush.ms": "1000",
            "flush.messages": "10", "index.interval.bytes": "4096", "min.cleanable.dirty.ratio": "0.6",
            "unclean.leader.election.enable": "true", "message.timestamp.type": "LogAppendTime",
            "preallocate": "true", "segment.jitter.ms": "5", "max.compaction.lag.ms": "100000",
            "message.downconversion.enable": "false", "local.retention.ms": "-2"}))),
    ]
    t = await d.check(shared_pair, steps)
    assert t.response("invalid value")["topics"][0]["error_code"] == 40  # INVALID_CONFIG


@pytest.mark.parametrize("version", range(8))
async def test_create_topics_every_version(shared_pair: d.Pair, version: int) -> None:
    steps = [
        *brokers(131, 132),
        Call("create", d.create_topics(T(f"v{version}-a", 2, 2, configs={"retention.ms": "60000"})), version),
        Call("defaults", d.create_topics(T(f"v{version}-b")), version),
        Call("exists", d.create_topics(T(f"v{version}-a", 1, 1)), version),
    ]
    if version >= 1:  # ValidateOnly is a field from v1
        steps.append(Call("validate only", d.create_topics(T(f"v{version}-c", 1, 2), validate_only=True), version))
    await d.check(shared_pair, steps)


async def test_requests_whose_timeout_has_passed(shared_pair: d.Pair) -> None:
    t = await d.check(shared_pair, [
        *brokers(161),
        Call("create, timeout 0", d.create_topics(T("to-0", 1, 1), timeout_ms=0)),
        Call("create, timeout -1", d.create_topics(T("to-neg", 1, 1), timeout_ms=-1)),
        Call("create to delete", d.create_topics(T("to-del", 1, 1))),
        Call("delete, timeout 0", d.delete_topics("to-del", version=5, timeout_ms=0), 5),
    ])
    assert t.response("create, timeout 0")["topics"][0]["error_code"] == 7  # REQUEST_TIMED_OUT


async def test_delete_topics(shared_pair: d.Pair) -> None:
    steps = [
        *brokers(141, 142),
        Call("create five", d.create_topics(*(T(f"del-{i}", 2, 2) for i in range(5)))),
        Call("v0 by name", d.delete_topics("del-0", version=0), 0),
        Call("v3 unknown name", d.delete_topics("del-nope", version=3), 3),
        Call("v4 one known, one unknown", d.delete_topics("del-1", "del-nope", version=4), 4),
        Call("v5 the same name twice", d.delete_topics("del-2", "del-2", version=5), 5),
        Call("v6 by id", d.delete_topics("del-3", by_id=True, version=6), 6),
        Call("v6 by name", d.delete_topics("del-4", version=6), 6),
        Call("v6 an unknown id", d.delete_topics(unknown_ids=[uuid.UUID(int=0x1234)]), 6),
        Call("v6 a deleted topic again", d.delete_topics("del-4", version=6), 6),
        Call("v6 the zero id", d.delete_topics(unknown_ids=[uuid.UUID(int=0)]), 6),
        Call("v5 the metadata topic", d.delete_topics("__cluster_metadata", version=5), 5),
        Call("v6 nothing", d.delete_topics(version=6), 6),
    ]
    t = await d.check(shared_pair, steps)
    assert t.record_types("v0 by name") == ["RemoveTopicRecord"]
    assert t.response("v3 unknown name")["responses"][0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION


async def test_delete_topics_over_the_record_cap(shared_pair: d.Pair) -> None:
    """10,001 topics in one DeleteTopics: one RemoveTopicRecord each, in a list bounded at
    10,000, so one topic is answered UNKNOWN_SERVER_ERROR and the others are deleted
    (normalise.CAPPED_DELETION: which one follows Kafka's hash order of the random ids)."""
    names = [f"dcap-{i}" for i in range(10_001)]
    t = await d.check(shared_pair, [
        *brokers(151),
        *(Call(f"create {i}-{min(i + 2_500, len(names)) - 1}", d.create_topics(*(T(n, 1, 1) for n in names[i:i + 2_500])))
          for i in range(0, len(names), 2_500)),
        Call("delete 10,001 topics", d.delete_topics(*names, version=6), 6),
    ])
    errors = [r["error_code"] for r in t.response("delete 10,001 topics")["responses"]]
    assert sorted(errors) == [-1] + [0] * 10_000
    assert t.record_types("delete 10,001 topics") == ["RemoveTopicRecord"] * 10_000


async def test_topic_defaults_and_deletion_disabled(pair_factory: Callable[..., PairNodes]) -> None:
    # Config both sides share but the shared pair does not have: defaults for -1, deletion off.
    nodes = pair_factory("topic-config", num_partitions="3", default_replication_factor="2",
                         delete_topic_enable="false")
    pair = await connect(nodes)
    try:
        t = await d.check(pair, [
            *brokers(1, 2),
            Call("defaults from the config", d.create_topics(T("cfg-defaults"))),
            Call("delete by name", d.delete_topics("cfg-defaults", version=5), 5),
            Call("delete by id", d.delete_topics("cfg-defaults", by_id=True, version=6), 6),
        ])
        assert t.response("defaults from the config")["topics"][0]["num_partitions"] == 3
        assert t.response("delete by name")["responses"][0]["error_code"] == 73  # TOPIC_DELETION_DISABLED
    finally:
        await close(pair)

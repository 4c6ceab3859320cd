"""CreatePartitions through ReplicationControlManager over the real write path (reference §6.3).

Error messages and result order were checked against a real Kafka 3.9.2 controller given the
same requests."""

from __future__ import annotations

from typing import Any

import pytest

from kraftsim.controller.write_path import EXCESSIVE_BATCH_MESSAGE
from kraftsim.metadata.directories import UNASSIGNED
from kraftsim.metadata.records import by_name, type_name
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.error_codes import ErrorCode as E
from kraftsim.rpc.messages import CreatePartitionsRequest as CP
from tests.controller_harness import request_context
from tests.test_replication_manager import DIR, Cluster, topic


def add(c: Cluster, *topics: Any, validate_only: bool = False, version: int = 3, **kw: Any) -> Any:
    req = CP(topics=list(topics), timeout_ms=5000, validate_only=validate_only)
    return c.mgr.create_partitions(req, request_context(ApiKey.CREATE_PARTITIONS, version), **kw)


def grow(name: str, count: int, assignments: list[list[int]] | None = None) -> Any:
    return CP.CreatePartitionsTopic(name=name, count=count, assignments=None if assignments is None else [
        CP.CreatePartitionsAssignment(broker_ids=a) for a in assignments])


def results(resp: Any) -> list[tuple[str, int, str | None]]:
    return [(r.name, r.error_code, r.error_message) for r in resp.results]


@pytest.fixture
def c() -> Any:
    cluster = Cluster([1, 2, 3], fenced=[3])
    cluster.apply(cluster.create(topic("t", 2, 2, assignments=None), topic("u", 1, 1)))
    yield cluster
    cluster.close()


def test_new_partitions_are_placed_after_the_existing_ones(c: Cluster) -> None:
    res = add(c, grow("t", 5))
    assert res.atomic and [type_name(r.api_key()) for r, _ in res.records] == ["PartitionRecord"] * 3
    assert results(c.apply(res)) == [("t", 0, None)]
    parts = c.image.topics.by_name["t"].partitions
    assert sorted(parts) == [0, 1, 2, 3, 4]
    for pid in (2, 3, 4):
        p = parts[pid]
        assert len(p.replicas) == 2 and p.leader in (1, 2) and 3 not in p.isr  # RF of partition 0; 3 is fenced
        assert p.directories == tuple(DIR[b] for b in p.replicas)
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)


def test_manual_assignment_and_its_isr(c: Cluster) -> None:
    assert results(c.apply(add(c, grow("t", 4, [[3, 1], [2, 3]])))) == [("t", 0, None)]
    parts = c.image.topics.by_name["t"].partitions
    assert (parts[2].replicas, parts[2].isr, parts[2].leader) == ((3, 1), (1,), 1)
    assert (parts[3].replicas, parts[3].isr, parts[3].leader) == ((2, 3), (2,), 2)


@pytest.mark.parametrize("t,code,message", [
    (grow("t", 2), E.INVALID_PARTITIONS, "Topic already has 2 partition(s)."),
    (grow("t", 1), E.INVALID_PARTITIONS, "The topic t currently has 2 partition(s); 1 would not be an increase."),
    (grow("nope", 3), E.UNKNOWN_TOPIC_OR_PARTITION, None),  # Kafka throws it without a message
    (grow("t", 4, [[1, 2]]), E.INVALID_REPLICA_ASSIGNMENT,
     "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
    (grow("t", 4, []), E.INVALID_REPLICA_ASSIGNMENT,
     "Attempted to add 2 additional partition(s), but only 0 assignment(s) were specified."),
    (grow("t", 3, [[9, 1]]), E.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes broker 9, but no such broker is registered."),
    (grow("t", 3, [[1]]), E.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes a partition with 1 "
     "replica(s), but this is not consistent with previous partitions, which have 2 replica(s)."),
    (grow("t", 3, [[1, 1]]), E.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes the broker 1 more than once."),
    (grow("t", 3, [[]]), E.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."),
    (grow("t", 4, [[1, 2], [3, 3]]), E.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes the broker 3 more than once."),
    # The placer's message is not prefixed here, unlike CreateTopics' "Unable to replicate ..."
    (grow("u", 2), 0, None),
])
def test_topic_errors(c: Cluster, t: Any, code: int, message: str | None) -> None:
    res = add(c, t)
    assert results(res.response) == [(t.name, code, message)]
    assert (res.records == []) == (code != 0)


def test_all_listed_brokers_fenced_and_placer_refusals() -> None:
    c = Cluster([1, 2, 3], fenced=[2, 3])
    c.apply(c.create(topic("t", 1, 2)))
    r = add(c, grow("t", 2, [[2, 3]]))
    assert results(r.response) == [("t", E.INVALID_REPLICA_ASSIGNMENT, "All brokers specified in the manual partition "
                                    "assignment for partition 1 are fenced or in controlled shutdown.")]
    c.replay(by_name("BrokerRegistrationChangeRecord")(broker_id=1, broker_epoch=101, fenced=1))
    r = add(c, grow("t", 2))
    assert results(r.response) == [("t", E.INVALID_REPLICATION_FACTOR, "All brokers are currently fenced.")]


def test_results_come_in_kafkas_order_duplicates_first(c: Cluster) -> None:
    """Duplicates, then unauthorized, then the rest: each group in Java HashSet order of the
    names (a real 3.9 controller answered this request in this order)."""
    names = ["zeta", "alpha", "beta", "alpha", "gamma", "delta", "epsilon", "beta"]
    r = add(c, *[grow(n, 2) for n in names])
    assert results(r.response) == [
        ("alpha", E.INVALID_REQUEST, "Duplicate topic name."), ("beta", E.INVALID_REQUEST, "Duplicate topic name."),
        ("zeta", E.UNKNOWN_TOPIC_OR_PARTITION, None), ("epsilon", E.UNKNOWN_TOPIC_OR_PARTITION, None),
        ("delta", E.UNKNOWN_TOPIC_OR_PARTITION, None), ("gamma", E.UNKNOWN_TOPIC_OR_PARTITION, None)]
    r = add(c, grow("t", 3), grow("u", 2), alterable=lambda n: n == "u")
    assert results(r.response) == [("t", E.TOPIC_AUTHORIZATION_FAILED, None), ("u", 0, None)]


def test_one_atomic_batch_and_validate_only(c: Cluster) -> None:
    r = add(c, grow("t", 3), grow("u", 3), validate_only=True)
    assert r.records == [] and results(r.response) == [("t", 0, None), ("u", 0, None)]
    end = c.next_offset
    r = add(c, grow("t", 3), grow("u", 3), grow("nope", 2))
    assert r.atomic and len(r.records) == 3
    c.apply(r)
    assert c.next_offset == end + 3 and len(c.image.topics.by_name["u"].partitions) == 3


def test_more_than_10000_records_is_refused_before_placement(c: Cluster) -> None:
    """Kafka's BoundedList would overflow while adding records; we refuse the whole request up
    front with POLICY_VIOLATION, as for CreateTopics (Kafka itself reports UNKNOWN_SERVER_ERROR
    for that topic and keeps the records added so far)."""
    placed: list[int] = []
    real_place = c.mgr.placer.place

    def place(n: int, rf: int, usable: Any) -> Any:
        placed.append(n)
        return real_place(n, rf, usable)

    c.mgr.placer.place = place  # type: ignore[method-assign]
    for validate_only in (False, True):
        with pytest.raises(ApiError) as e:
            add(c, grow("u", 6000), grow("t", 6000), validate_only=validate_only)
        assert (e.value.code, e.value.message) == (E.POLICY_VIOLATION, EXCESSIVE_BATCH_MESSAGE)
    # "t" comes first (HashSet order) and is placed; "u" would overflow and never is.
    assert placed == [5998, 5998]


def test_new_partition_of_a_jbod_broker_is_unassigned() -> None:
    c = Cluster([1], dirs={1: [DIR[1], DIR[2]]})
    c.apply(c.create(topic("t", 1, 1)))
    c.apply(add(c, grow("t", 2)))
    assert c.image.topics.by_name["t"].partitions[1].directories == (UNASSIGNED,)

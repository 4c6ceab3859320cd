"""Broker registration, heartbeats and unregistration against a real Kafka 3.9 controller
(differential): every response field and every record each side appends must agree."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import pytest

from tests.kafka import differential as d
from tests.kafka import normalise as norm
from tests.kafka.conftest import PairNodes, close, connect
from tests.kafka.differential import REG, AwaitRecord, Call, TopicSpec

pytestmark = pytest.mark.kafka

U = d.scenario_uuid


async def test_registration_every_version(shared_pair: d.Pair) -> None:
    # At metadata.version 3.9 (JBOD, 3.7-IV2+) a registration must name its log dirs, which v0
    # and v1 cannot carry: those are refused, v2 and later register.
    steps = [Call(f"register v{v}", d.register(10 + v), v) for v in range(5)]
    t = await d.check(shared_pair, steps)
    assert [t.error(f"register v{v}") for v in range(5)] == [119, 119, 0, 0, 0]  # INVALID_REGISTRATION
    assert t.record_types("register v4") == ["RegisterBrokerRecord"]


async def test_registration_error_paths(shared_pair: d.Pair) -> None:
    other_cluster = "AAAAAAAAAAAAAAAAAAAAAA"
    steps = [
        Call("wrong cluster id", d.register(20, cluster_id=other_cluster)),
        Call("register", d.register(20)),
        Call("unfence", d.heartbeat(20)),
        Call("second incarnation while live", d.register(20, incarnation=1)),
        Call("same incarnation again (amended rack)", d.register(20, rack="r1")),
        Call("metadata.version max below 3.9", d.register(21, features=d.mv_feature(1, 20))),
        Call("metadata.version min above 3.9", d.register(21, features=d.mv_feature(22, 23))),
        Call("no metadata.version listed", d.register(21, features=[])),
        Call("an unknown feature is recorded",
             d.register(21, features=[*d.mv_feature(), REG.Feature(name="acme.feature", min_supported_version=1,
                                                                   max_supported_version=3)])),
        Call("kraft.version 0-1 listed at v3 (min 0 left out on the wire)",
             d.register(22, features=[*d.mv_feature(), REG.Feature(name="kraft.version", min_supported_version=0,
                                                                   max_supported_version=1)]), 3),
        Call("kraft.version 0-1 listed at v4",
             d.register(23, features=[*d.mv_feature(), REG.Feature(name="kraft.version", min_supported_version=0,
                                                                   max_supported_version=1)]), 4),
        Call("a migrating ZK broker", d.register(24, migrating=True)),
        Call("no log dirs", d.register(24, log_dirs=[])),
        Call("a reserved log dir (unassigned)", d.register(24, log_dirs=[uuid.UUID(int=0)])),
        Call("a reserved log dir (lost)", d.register(24, log_dirs=[uuid.UUID(int=1)])),
        Call("a reserved log dir (migrating)", d.register(24, log_dirs=[uuid.UUID(int=2)])),
        Call("duplicate log dirs", d.register(24, log_dirs=[U(5), U(5)])),
        Call("a log dir another broker owns", d.register(24, log_dirs=[norm.default_dir(20)])),
        Call("previous broker epoch is ignored", d.register(25, previous_epoch=12345)),
        Call("two listeners and a rack", d.register(26, rack="rack-a", listener_list=[
            REG.Listener(name="PLAINTEXT", host="h1", port=1, security_protocol=0),
            REG.Listener(name="SSL", host="h1", port=2, security_protocol=1)])),
    ]
    t = await d.check(shared_pair, steps)
    assert t.error("wrong cluster id") == 104  # INCONSISTENT_CLUSTER_ID
    assert t.error("second incarnation while live") == 101  # DUPLICATE_BROKER_REGISTRATION
    assert t.error("same incarnation again (amended rack)") == 0
    assert t.error("metadata.version max below 3.9") == 35  # UNSUPPORTED_VERSION
    assert t.error("a migrating ZK broker") == 102  # BROKER_ID_NOT_REGISTERED
    assert t.error("a log dir another broker owns") == 119


async def test_reregistration_replaces_fenced_or_shut_down_broker(shared_pair: d.Pair) -> None:
    steps = [
        Call("register", d.register(30)),
        Call("new incarnation while fenced", d.register(30, incarnation=1)),
        Call("unfence", d.heartbeat(30)),
        Call("fence on request", d.heartbeat(30, want_fence=True)),
        Call("new incarnation after fencing", d.register(30, incarnation=2)),
        Call("unfence again", d.heartbeat(30)),
        Call("shut down (leads nothing)", d.heartbeat(30, want_shutdown=True)),
        Call("new incarnation after shutdown", d.register(30, incarnation=3)),
    ]
    t = await d.check(shared_pair, steps)
    assert t.error("new incarnation while fenced") == 0
    assert t.error("new incarnation after shutdown") == 0


async def test_heartbeat_state_table(shared_pair: d.Pair) -> None:
    steps = [
        Call("before registration", d.heartbeat(40, epoch=0)),
        Call("register 40", d.register(40)),
        Call("register 41", d.register(41)),
        Call("stale epoch", d.heartbeat(40, epoch_delta=-1)),
        Call("future epoch", d.heartbeat(40, epoch_delta=+7)),
        Call("fenced, not caught up", d.heartbeat(40, offset=-1)),
        Call("fenced, wants to stay fenced", d.heartbeat(40, want_fence=True)),
        Call("fenced -> unfenced", d.heartbeat(40)),
        Call("unfenced, again", d.heartbeat(40)),
        Call("unfenced, behind (still unfenced)", d.heartbeat(40, offset=0)),
        Call("unfenced -> fenced (WantFence)", d.heartbeat(40, want_fence=True)),
        Call("fenced -> unfenced again", d.heartbeat(40)),
        Call("unfenced, WantFence and WantShutDown -> shutdown now", d.heartbeat(40, want_fence=True,
                                                                             want_shutdown=True)),
        Call("after shutdown", d.heartbeat(40)),
        Call("fenced 41, WantShutDown -> shutdown now", d.heartbeat(41, want_shutdown=True)),
        Call("heartbeat v0", d.heartbeat(41), 0),
        Call("unregister 40", d.unregister(40)),
        Call("heartbeat after unregistration", d.heartbeat(40, epoch=0)),
    ]
    t = await d.check(shared_pair, steps)
    assert t.error("before registration") == 77  # STALE_BROKER_EPOCH
    assert t.error("stale epoch") == 77
    assert t.response("fenced, not caught up")["is_caught_up"] is False
    assert t.response("fenced -> unfenced")["is_fenced"] is False
    assert t.response("unfenced -> fenced (WantFence)")["is_fenced"] is True
    assert t.response("unfenced, WantFence and WantShutDown -> shutdown now")["should_shut_down"] is True


async def test_controlled_shutdown_of_a_leader(shared_pair: d.Pair) -> None:
    # 50 leads both partitions; its controlled shutdown moves leadership to 51 and 52, and it may
    # shut down once the remaining active brokers have caught up past its shutdown offset.
    steps = [
        *(Call(f"register {b}", d.register(b)) for b in (50, 51, 52)),
        *(Call(f"unfence {b}", d.heartbeat(b)) for b in (50, 51, 52)),
        Call("topic led by 50", d.create_topics(TopicSpec("cs-topic", assignments={0: [50, 51, 52],
                                                                                   1: [50, 52, 51]}))),
        Call("50 wants to shut down", d.heartbeat(50, want_shutdown=True)),
        Call("50 again, others behind", d.heartbeat(50, want_shutdown=True)),
        Call("51 behind the shutdown", d.heartbeat(51, offset=0)),
        Call("50 still waiting", d.heartbeat(50, want_shutdown=True)),
        Call("51 caught up", d.heartbeat(51)),
        Call("52 caught up", d.heartbeat(52)),
        Call("50 may shut down", d.heartbeat(50, want_shutdown=True)),
        Call("50 re-registers", d.register(50, incarnation=1)),
        Call("50 unfenced", d.heartbeat(50)),
    ]
    t = await d.check(shared_pair, steps)
    assert t.response("50 wants to shut down")["should_shut_down"] is False
    assert "PartitionChangeRecord" in t.record_types("50 wants to shut down")
    assert t.response("50 may shut down")["should_shut_down"] is True


async def test_controlled_shutdown_of_the_only_isr_member(shared_pair: d.Pair) -> None:
    # Replication factor 2 on 80 and 81. 81 shuts down first and hands its leadership to 80;
    # then 80, the only member left in both ISRs, has nobody to hand its leadership to: its
    # partitions go offline (leader -1, ISR kept as [80]) and it is let go all the same.
    steps = [
        *(Call(f"register {b}", d.register(b)) for b in (80, 81)),
        *(Call(f"unfence {b}", d.heartbeat(b)) for b in (80, 81)),
        Call("topic on 80 and 81", d.create_topics(TopicSpec("sole-isr-topic", assignments={0: [80, 81],
                                                                                            1: [81, 80]}))),
        Call("81 wants to shut down", d.heartbeat(81, want_shutdown=True)),
        Call("80 caught up", d.heartbeat(80)),
        Call("81 may shut down", d.heartbeat(81, want_shutdown=True)),
        Call("80 wants to shut down, the only ISR member", d.heartbeat(80, want_shutdown=True)),
        Call("80 again", d.heartbeat(80, want_shutdown=True)),
        Call("80 once more after its shutdown", d.heartbeat(80, want_shutdown=True)),
    ]
    t = await d.check(shared_pair, steps)
    assert t.response("81 may shut down")["should_shut_down"] is True
    first = t.response("80 wants to shut down, the only ISR member")
    assert (first["is_fenced"], first["should_shut_down"]) == (False, False)
    assert "PartitionChangeRecord" in t.record_types("80 wants to shut down, the only ISR member")
    assert t.response("80 again")["should_shut_down"] is True


async def test_offline_log_dirs(shared_pair: d.Pair) -> None:
    steps = [
        Call("register 60 with two dirs", d.register(60, log_dirs=[U(600), U(601)])),
        Call("register 61", d.register(61)),
        Call("unfence 60", d.heartbeat(60)),
        Call("unfence 61", d.heartbeat(61)),
        Call("topic on 60 and 61", d.create_topics(TopicSpec("dirs-topic", assignments={0: [60, 61], 1: [61, 60]}))),
        Call("a dir goes offline", d.heartbeat(60, offline_dirs=[U(600)])),
        Call("the same dir again", d.heartbeat(60, offline_dirs=[U(600)])),
        Call("heartbeat v0 cannot carry it", d.heartbeat(60), 0),
        Call("an unknown dir goes offline", d.heartbeat(60, offline_dirs=[U(699)])),
        Call("every dir offline", d.heartbeat(60, offline_dirs=[U(600), U(601)])),
    ]
    await d.check(shared_pair, steps)


async def test_unregister_broker(shared_pair: d.Pair) -> None:
    steps = [
        Call("register 70", d.register(70)),
        Call("register 71", d.register(71)),
        Call("unfence 70", d.heartbeat(70)),
        Call("unfence 71", d.heartbeat(71)),
        Call("topic on 70 and 71", d.create_topics(TopicSpec("unreg-topic", assignments={0: [70, 71], 1: [71, 70]}))),
        Call("unregister a live leader", d.unregister(70)),
        Call("re-register", d.register(70, incarnation=1)),
        Call("unregister a fenced broker", d.unregister(70)),
        Call("heartbeat of the unregistered", d.heartbeat(70, epoch=0)),
    ]
    t = await d.check(shared_pair, steps)
    assert t.response("unregister a live leader") == {"throttle_time_ms": 0, "error_code": 0, "error_message": ""}
    assert t.record_types("unregister a live leader") == ["PartitionChangeRecord", "PartitionChangeRecord",
                                                          "UnregisterBrokerRecord"]


async def test_unregister_over_the_record_cap(shared_pair: d.Pair) -> None:
    """UnregisterBroker writes a PartitionChangeRecord for each ISR the broker is in, then its
    UnregisterBrokerRecord, into a list bounded at 10,000: in 10,000 ISRs it is refused whole.
    In 9,999 ISRs its 10,000 records are one full batch of a non-atomic result, and Kafka 3.9
    then asks Raft to append the empty rest: written, yet UNKNOWN_SERVER_ERROR and a failover."""
    t = await d.check(shared_pair, [
        Call("register 75", d.register(75)),
        Call("unfence 75", d.heartbeat(75)),
        Call("5,000 partitions on 75", d.create_topics(TopicSpec("unreg-cap-a", 5_000, 1))),
        Call("5,000 more", d.create_topics(TopicSpec("unreg-cap-b", 5_000, 1))),
        Call("unregister: 10,001 records", d.unregister(75)),
        Call("4,999 partitions instead", d.delete_topics("unreg-cap-b", version=6), 6),
        Call("recreated smaller", d.create_topics(TopicSpec("unreg-cap-c", 4_999, 1))),
    ])
    assert t.response("unregister: 10,001 records") == {"throttle_time_ms": 0, "error_code": 44, "error_message": ""}
    assert t["unregister: 10,001 records"]["records"] == []
    # The failover's LeaderChange comes at a moment of each side's own (Kafka waits out an election
    # timeout): the step is compared without control records, and each side waits for its new epoch.
    a, b = await d.run(shared_pair, [Call("unregister: 10,000 records", d.unregister(75))])
    for side, transcript in zip(shared_pair.sides, (a, b), strict=True):
        await active_again(side)
        # Kafka answers before its Raft thread has written the batch: what reaches the log once
        # the controller is active again belongs to the step too.
        late = d.records_view(side.new_records(), side.view)
        transcript[0]["records"] = [r for r in norm.order_records(transcript[0]["records"] + late)
                                    if not r["control"]]
    d.assert_same(a, b)
    assert a[0]["response"] == {"throttle_time_ms": 0, "error_code": -1, "error_message": ""}
    assert [r["type"] for r in a[0]["records"]] == ["PartitionChangeRecord"] * 9_999 + ["UnregisterBrokerRecord"]
    await d.check(shared_pair, [Call("75 is gone", d.unregister(75)), Call("register 75 again", d.register(75))])


async def active_again(side: d.Side, timeout: float = 60) -> None:
    """Poll, with a deadline, until the controller answers again after a failover: an
    unregistration of a broker nobody registered gets BROKER_ID_NOT_REGISTERED, not NOT_CONTROLLER."""
    deadline = time.monotonic() + timeout
    while True:
        resp = await side.client.request(d.UNREG(broker_id=74), 0, timeout=60)
        if resp.error_code != 41:  # NOT_CONTROLLER
            return
        assert time.monotonic() < deadline, f"{side.name} is not active again after {timeout}s"
        await asyncio.sleep(0.05)


async def test_unregister_unknown_broker(shared_pair: d.Pair) -> None:
    steps = [Call("unknown id", d.unregister(79)), Call("register 79", d.register(79)),
             Call("unregister", d.unregister(79)), Call("again", d.unregister(79))]
    a, b = await d.run(shared_pair, steps, mask=False)
    assert a[0]["response"]["error_code"] == 102  # BROKER_ID_NOT_REGISTERED
    d.assert_same(a, b)


async def test_session_timeout_fencing(pair_factory: Callable[..., PairNodes]) -> None:
    # A pair of its own, with a short session: the clock fences the brokers that stop
    # heartbeating, one event per broker in last-contact order, moving leadership each time.
    pair = await connect(pair_factory("fencing", broker_session_timeout_ms="1500"))
    try:
        t = await d.check(pair, [
            *(Call(f"register {b}", d.register(b)) for b in (1, 2, 3)),
            *(Call(f"unfence {b}", d.heartbeat(b)) for b in (1, 2, 3)),
            Call("topic", d.create_topics(TopicSpec("fenced-topic", assignments={0: [1, 2], 1: [2, 1], 2: [3, 1]}))),
            AwaitRecord("all three are fenced by the clock", d.fenced(1, 2, 3)),
        ])
        assert "timeout" not in t["all three are fenced by the clock"]
    finally:
        await close(pair)

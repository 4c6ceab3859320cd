"""The leader balancer against a real Kafka 3.9 controller (differential): with a short
``leader.imbalance.check.interval.seconds`` on both, leadership moves back to the preferred
replica by itself, with the records compared. The balancer's records are the controller's own,
so the scenario waits for them (AwaitRecord); when each run comes is checked on kraftsim's
clock by tests/test_leader_balancing.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.kafka import differential as d
from tests.kafka.conftest import PairNodes, close, connect
from tests.kafka.differential import AwaitRecord, Call, LoggedRecord, TopicSpec, leader_adds_to_isr, reassign

pytestmark = pytest.mark.kafka

# Long enough that the steps between an imbalance and the balancer's run (a few requests) are
# done well before it, short enough to keep the test quick.
INTERVAL_S = "3"


def leaders(*wanted: tuple[int, int]) -> Callable[[list[LoggedRecord]], bool]:
    """Records that make each (partition, broker) named its leader: the balancer's elections."""
    def done(records: list[LoggedRecord]) -> bool:
        got = {(r.message.partition_id, r.message.leader) for r in records  # type: ignore[union-attr]
               if r.type == "PartitionChangeRecord"}
        return set(wanted) <= got
    return done


async def test_leaders_move_back_to_their_preferred_replicas(pair_factory: Callable[..., PairNodes]) -> None:
    pair = await connect(pair_factory("balancing", leader_imbalance_check_interval_seconds=INTERVAL_S))
    try:
        t = await d.check(pair, [
            *(Call(f"register {b}", d.register(b)) for b in (1, 2, 3)),
            *(Call(f"unfence {b}", d.heartbeat(b)) for b in (1, 2, 3)),
            Call("topic", d.create_topics(TopicSpec("lb", assignments={0: [1, 2], 1: [2, 3], 2: [3, 1]}))),
            # Broker 2 goes: lb-1 ([2, 3]) is led by 3, imbalanced, and the first check is due
            # an interval from now. Broker 2 comes back and 3 takes it into the ISR before then.
            Call("fence 2", d.heartbeat(2, want_fence=True)),
            Call("unfence 2", d.heartbeat(2)),
            Call("3 takes 2 back into the ISR of lb-1", leader_adds_to_isr("lb", 1, 2), 3),
            AwaitRecord("the balancer gives lb-1 back to 2", leaders((1, 2))),
            # Nothing is imbalanced now. Reordering replica lists (complete at once: every
            # replica is in the ISR) makes three partitions imbalanced with their new first
            # replica electable: one run an interval later elects all three.
            Call("topic two", d.create_topics(TopicSpec("lc", assignments={0: [1, 3], 1: [3, 1]}))),
            Call("reorder three replica lists", reassign({"lb": {2: [1, 3]}, "lc": {0: [3, 1], 1: [1, 3]}})),
            AwaitRecord("the balancer elects the three new first replicas", leaders((2, 1), (0, 3), (1, 1))),
        ])
    finally:
        await close(pair)
    [balanced] = t["the balancer gives lb-1 back to 2"]["records"]
    assert (balanced["type"], balanced["fields"]["leader"], balanced["fields"]["isr"]) == (
        "PartitionChangeRecord", 2, None)
    assert t.record_types("reorder three replica lists") == ["PartitionChangeRecord"] * 3
    assert t.record_types("the balancer elects the three new first replicas") == ["PartitionChangeRecord"] * 3

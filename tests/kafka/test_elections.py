"""ElectLeaders against a real Kafka 3.9 controller (differential): preferred and unclean
elections, their refusals, and the all-partitions form, with responses and records compared."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kraftsim.rpc.messages import ElectLeadersRequest as EL
from tests.kafka import differential as d
from tests.kafka.conftest import PairNodes, close, connect
from tests.kafka.differential import Call, TopicSpec

pytestmark = pytest.mark.kafka

PREFERRED, UNCLEAN = 0, 1


def elect(election: int, partitions: dict[str, list[int]] | None, timeout_ms: int = 30_000) -> d.Builder:
    def build(side: d.Side) -> Any:
        return EL(election_type=election, timeout_ms=timeout_ms, topic_partitions=None if partitions is None else [
            EL.TopicPartitions(topic=t, partitions=list(ps)) for t, ps in partitions.items()])
    return build


async def test_elect_leaders(pair_factory: Callable[..., PairNodes]) -> None:
    pair = await connect(pair_factory("elections"))
    try:
        t = await d.check(pair, [
            *(Call(f"register {b}", d.register(b)) for b in (1, 2, 3)),
            *(Call(f"unfence {b}", d.heartbeat(b)) for b in (1, 2, 3)),
            Call("topic", d.create_topics(TopicSpec("el", assignments={0: [1, 2], 1: [2, 3], 2: [3, 1]}))),
            Call("preferred: all in place", elect(PREFERRED, {"el": [0, 1, 2]})),
            Call("unclean: all have leaders", elect(UNCLEAN, {"el": [0]})),
            Call("unknown topic and partition", elect(PREFERRED, {"nope": [0], "el": [7]})),
            Call("unknown election type", elect(5, {"el": [0]})),
            Call("v0 (preferred, no type field)", elect(PREFERRED, {"el": [1]}), 0),
            # Broker 2 asks to be fenced: it leaves the ISRs and partition 1 moves to broker 3.
            Call("fence 2", d.heartbeat(2, want_fence=True)),
            Call("preferred: 2 is not in the ISR", elect(PREFERRED, {"el": [1]})),
            # Then 3 too: partition 1 ([2, 3]) is left with no leader and ISR [3].
            Call("fence 3", d.heartbeat(3, want_fence=True)),
            Call("unclean: no active replica", elect(UNCLEAN, {"el": [1]})),
            Call("unfence 2", d.heartbeat(2)),
            Call("preferred: the leaderless one", elect(PREFERRED, {"el": [1]})),
            Call("unclean: 2 outside the ISR", elect(UNCLEAN, {"el": [1]})),
            Call("the same partition twice", elect(UNCLEAN, {"el": [1, 1]})),
            Call("all partitions (null), preferred", elect(PREFERRED, None)),
            Call("all partitions (null), unclean", elect(UNCLEAN, None)),
        ])
    finally:
        await close(pair)
    first = t.response("unknown topic and partition")["replica_election_results"]
    assert [p["error_code"] for r in first for p in r["partition_result"]] == [3, 3]
    assert t.response("preferred: all in place")["replica_election_results"][0]["partition_result"][0][
        "error_code"] == 84  # ELECTION_NOT_NEEDED
    assert t.record_types("unclean: 2 outside the ISR") == ["PartitionChangeRecord"]
    assert t.record_types("preferred: all in place") == []

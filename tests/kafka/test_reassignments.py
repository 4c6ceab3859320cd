"""AlterPartitionReassignments and ListPartitionReassignments against a real Kafka 3.9
controller (differential): a move started, listed, completed by the leader's AlterPartition,
a reorder, a cancellation, and every refusal, with responses and records compared."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kraftsim.rpc.messages import ListPartitionReassignmentsRequest as LPR
from tests.kafka import differential as d
from tests.kafka.conftest import PairNodes, close, connect
from tests.kafka.differential import Call, TopicSpec, leader_adds_to_isr, reassign

pytestmark = pytest.mark.kafka


def listed(topics: dict[str, list[int]] | None) -> d.Builder:
    def build(side: d.Side) -> Any:
        return LPR(timeout_ms=30_000, topics=None if topics is None else [
            LPR.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps) for t, ps in topics.items()])
    return build


async def test_partition_reassignments(pair_factory: Callable[..., PairNodes]) -> None:
    pair = await connect(pair_factory("reassignments"))
    try:
        t = await d.check(pair, [
            *(Call(f"register {b}", d.register(b)) for b in (1, 2, 3, 4)),
            *(Call(f"unfence {b}", d.heartbeat(b)) for b in (1, 2, 3, 4)),
            Call("topic", d.create_topics(TopicSpec("ra", assignments={0: [1, 2], 1: [2, 3], 2: [3, 4]}))),
            Call("nothing to list", listed(None)),
            Call("reorder (completes at once)", reassign({"ra": {0: [2, 1]}})),
            Call("move 1 from [2, 3] to [3, 4]", reassign({"ra": {1: [3, 4]}})),
            Call("list all", listed(None)),
            Call("list named", listed({"ra": [0, 1, 2, 9], "nope": [0]})),
            Call("unknown topic and partition", reassign({"nope": {0: [1]}, "ra": {7: [1]}})),
            Call("an empty target", reassign({"ra": {2: []}})),
            Call("an unregistered broker", reassign({"ra": {2: [3, 9]}})),
            Call("a duplicate broker", reassign({"ra": {2: [3, 3]}})),
            Call("cancel with nothing in progress", reassign({"ra": {2: None}})),
            Call("the same target again (nothing changes)", reassign({"ra": {1: [3, 4]}})),
            Call("4 caught up: the leader adds it, the move completes", leader_adds_to_isr("ra", 1, 4), 3),
            Call("nothing left to list", listed(None)),
            Call("move 2 from [3, 4] to [1, 2]", reassign({"ra": {2: [1, 2]}})),
            Call("cancel it", reassign({"ra": {2: None}})),
            Call("two partitions, one request", reassign({"ra": {0: [1, 2, 3], 2: [4, 3]}})),
            Call("list after", listed({"ra": [0, 2]})),
            Call("cancel one of them", reassign({"ra": {0: None}})),
            # A revert that would leave no ISR member: partition 3 moves from [1] to [3, 4], 3
            # joins the ISR, then 1 is fenced; undoing the move would leave the ISR empty.
            Call("topic two", d.create_topics(TopicSpec("rb", assignments={0: [1]}))),
            Call("move rb-0 from [1] to [3, 4]", reassign({"rb": {0: [3, 4]}})),
            Call("3 caught up", leader_adds_to_isr("rb", 0, 3), 3),
            Call("fence 1", d.heartbeat(1, want_fence=True)),
            Call("cancel: would need an unclean election", reassign({"rb": {0: None}})),
        ])
    finally:
        await close(pair)
    errs = [p["error_code"] for r in t.response("unknown topic and partition")["responses"] for p in r["partitions"]]
    assert errs == [3, 3]
    assert t.response("cancel with nothing in progress")["responses"][0]["partitions"][0]["error_code"] == 85
    assert t.response("list all")["topics"][0]["partitions"][0]["adding_replicas"] == [4]
    assert t.record_types("4 caught up: the leader adds it, the move completes") == ["PartitionChangeRecord"]
    assert t.response("nothing left to list")["topics"] == []
    done = t.response("4 caught up: the leader adds it, the move completes")["topics"][0]["partitions"][0]
    # The leader (2) was being removed: the completing record elects 3, and 2 is told so.
    assert done["error_code"] == 108, done  # NEW_LEADER_ELECTED
    [change] = t["4 caught up: the leader adds it, the move completes"]["records"]
    assert (change["fields"]["replicas"], change["fields"]["isr"], change["fields"]["leader"]) == ([3, 4], [3, 4], 3)
    assert change["fields"]["adding_replicas"] == [] and change["fields"]["removing_replicas"] == []
    unclean = t.response("cancel: would need an unclean election")["responses"][0]["partitions"][0]
    assert unclean["error_code"] == 39 and "unclean leader election" in unclean["error_message"], unclean

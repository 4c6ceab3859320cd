"""The leader balancer (auto.leader.rebalance.enable), end to end on a running controller in
virtual time: a partition whose preferred replica is back in its ISR gets it back as leader one
check interval after the imbalance began, with the record Kafka writes; runs are capped at 1000
elections and follow each other 10 ms apart while they reach the cap (and, as in Kafka, a run
that reached it leaves the next imbalance balanced 10 ms after it begins); a renouncement drops
the scheduled run; with the balancer disabled, leadership stays where it is. And the run's
shortcut (partitions it need not build an election for) changes none of its records.

When each run happened is read from the timestamps of the batches it wrote (the controller's
clock stamps every batch), so the pace is checked to the millisecond."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftsim.controller.configs.server_config import Config
from kraftsim.controller.context import ControllerContext
from kraftsim.controller.managers.cluster import ClusterControlManager
from kraftsim.controller.managers.elections import LeaderElectionManager
from kraftsim.controller.managers.partition_change import Election
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.legacy import decode_value
from kraftsim.metadata.messages import (
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from kraftsim.rpc.clock import ManualClock
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import AlterPartitionReassignmentsRequest as APR
from kraftsim.rpc.messages import AlterPartitionRequest as AP
from tests import harness
from tests.test_controller import CT, HB, REG, Cluster, registration

INTERVAL_S = 60
INTERVAL_MS = INTERVAL_S * 1000
# No session expires in these tests, however far the clock moves.
NO_SESSION_TIMEOUT = 10**12


@dataclass(frozen=True)
class Logged:
    timestamp: int  # the batch's, from the controller's clock
    record: Any
    version: int


def logged(c: Cluster, since: int) -> list[Logged]:
    """The metadata records at or after offset ``since``, with their batch's timestamp."""
    out = []
    for batch in c.controller.mlog.batches(0, flushed_only=False):
        if batch.is_control or batch.next_offset <= since:
            continue
        for rec in batch.records():
            if rec.offset >= since:
                msg, version = decode_value(rec.value, False)
                out.append(Logged(batch.max_timestamp, msg, version))
    return out


def leader_changes(c: Cluster, since: int) -> list[Logged]:
    return [r for r in logged(c, since) if isinstance(r.record, PartitionChangeRecord)]


async def start(tmp_path: Path, clock: ManualClock, **cfg: object) -> Cluster:
    c = Cluster(tmp_path, clock, broker_session_timeout_ms=NO_SESSION_TIMEOUT, **cfg)
    await c.start()
    return c


async def brokers(c: Cluster, *ids: int) -> dict[int, int]:
    epochs = {}
    for b in ids:
        epochs[b], _ = await c.register(b)
        await c.unfence(b, epochs[b])
    return epochs


async def create(c: Cluster, name: str, assignments: dict[int, list[int]]) -> uuid.UUID:
    r = await c.req(CT(topics=[CT.CreatableTopic(
        name=name, num_partitions=-1, replication_factor=-1,
        assignments=[CT.CreatableReplicaAssignment(partition_index=p, broker_ids=b) for p, b in assignments.items()])],
        timeout_ms=5000), 7)
    assert r.topics[0].error_code == 0, r
    return r.topics[0].topic_id  # type: ignore[no-any-return]


async def heartbeat(c: Cluster, broker: int, epoch: int, *, want_fence: bool = False) -> Any:
    r = await c.req(HB(broker_id=broker, broker_epoch=epoch, current_metadata_offset=c.controller.mlog.end_offset,
                       want_fence=want_fence), 1)
    assert r.error_code == 0 and r.is_fenced is want_fence, r
    return r


async def add_to_isr(c: Cluster, epochs: dict[int, int], topic: str, pid: int, broker: int) -> None:
    """The partition's leader adds ``broker`` back to the ISR (AlterPartition), as a real leader
    does once the replica has caught up."""
    t = c.controller.image.topics.by_name[topic]
    p = t.partitions[pid]
    isr = [*p.isr, broker]
    r = await c.req(AP(broker_id=p.leader, broker_epoch=epochs[p.leader], topics=[AP.TopicData(
        topic_id=t.id, partitions=[AP.PartitionData(
            partition_index=pid, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
            leader_recovery_state=0,
            new_isr_with_epochs=[AP.BrokerState(broker_id=b, broker_epoch=epochs[b]) for b in isr])])]), 3)
    assert r.error_code == 0 and r.topics[0].partitions[0].error_code == 0, r


def imbalance(c: Cluster) -> int:
    return c.controller.image.topics.preferred_replica_imbalance_count  # type: ignore[no-any-return]


async def barrier(c: Cluster) -> None:
    """A request through the controller's event queue: whatever a timer woken before it
    submitted has run by the time it is answered."""
    r = await c.req(HB(broker_id=1, broker_epoch=c.controller.image.cluster.brokers[1].epoch,
                       current_metadata_offset=c.controller.mlog.end_offset), 1)
    assert r.error_code == 0, r


async def broker_returns(c: Cluster, clock: ManualClock) -> tuple[uuid.UUID, int, int]:
    """Broker 2 is fenced (its partition 1 moves to 3), unfenced, and put back in the ISR by 3.
    Returns the topic id, the log end before the fence and the clock when the imbalance began."""
    epochs = await brokers(c, 1, 2, 3)
    tid = await create(c, "t", {0: [1, 2], 1: [2, 3], 2: [3, 1]})
    assert imbalance(c) == 0
    since = c.controller.mlog.end_offset
    await heartbeat(c, 2, epochs[2], want_fence=True)
    began = clock.wall_ms()
    p1 = c.controller.image.topics.by_name["t"].partitions[1]
    assert (p1.leader, p1.isr, imbalance(c)) == (3, (3,), 1)
    # Half an interval later broker 2 is back, and its leader takes it into the ISR again.
    clock.advance(INTERVAL_MS // 2)
    await heartbeat(c, 2, epochs[2])
    await add_to_isr(c, epochs, "t", 1, 2)
    assert c.controller.image.topics.by_name["t"].partitions[1].isr == (3, 2)
    return tid, since, began


async def test_leadership_returns_one_interval_after_the_imbalance_began(tmp_path: Path) -> None:
    clock = ManualClock()
    c = await start(tmp_path, clock, leader_imbalance_check_interval_seconds=INTERVAL_S)
    try:
        tid, since, began = await broker_returns(c, clock)
        clock.advance(INTERVAL_MS // 2 - 1)
        clock.advance(1)
        await harness.poll_until(lambda: imbalance(c) == 0)
        assert c.controller.image.topics.by_name["t"].partitions[1].leader == 2
        changes = leader_changes(c, since)
        balanced = changes[-1]
        # Kafka's record for a preferred election that leaves the ISR alone: the leader, nothing
        # else (PartitionChangeRecord v1 at metadata.version 3.9-IV0), one interval after the
        # fence made the imbalance, not after the ISR came back.
        assert balanced.record == PartitionChangeRecord(topic_id=tid, partition_id=1, leader=2)
        assert balanced.version == 1
        assert balanced.timestamp == began + INTERVAL_MS
        # Before it: the fence's two (partitions 0 and 1 leave broker 2) and the AlterPartition.
        assert [r.timestamp for r in changes[:-1]] == [began, began, began + INTERVAL_MS // 2]
        # Nothing is left to balance: no run is scheduled.
        await barrier(c)
        assert c.controller.balancer.due is None
    finally:
        await c.stop()


async def test_a_run_that_finds_nothing_to_elect_tries_again_an_interval_later(tmp_path: Path) -> None:
    """The preferred replica is not in the ISR at the first check: that run writes nothing, and
    the next comes a whole interval after it."""
    clock = ManualClock()
    c = await start(tmp_path, clock, leader_imbalance_check_interval_seconds=INTERVAL_S)
    try:
        epochs = await brokers(c, 1, 2, 3)
        await create(c, "t", {0: [1, 2], 1: [2, 3], 2: [3, 1]})
        since = c.controller.mlog.end_offset
        await heartbeat(c, 2, epochs[2], want_fence=True)
        began = clock.wall_ms()
        clock.advance(INTERVAL_MS)
        ran = began + INTERVAL_MS
        await harness.poll_until(lambda: c.controller.balancer.due == clock.monotonic_ms() + INTERVAL_MS)
        assert [r.timestamp for r in logged(c, since)] == [began] * 3  # the fence's records only
        await heartbeat(c, 2, epochs[2])
        await add_to_isr(c, epochs, "t", 1, 2)
        clock.advance(INTERVAL_MS)
        await harness.poll_until(lambda: imbalance(c) == 0)
        assert leader_changes(c, since)[-1].timestamp == ran + INTERVAL_MS
    finally:
        await c.stop()


async def reorder(c: Cluster, topic: str, targets: dict[int, list[int]]) -> None:
    r = await c.req(APR(timeout_ms=5000, topics=[APR.ReassignableTopic(name=topic, partitions=[
        APR.ReassignablePartition(partition_index=p, replicas=r) for p, r in targets.items()])]), 0)
    assert all(p.error_code == 0 for t in r.responses for p in t.partitions), r


async def test_runs_are_capped_at_1000_elections_and_follow_10_ms_apart(tmp_path: Path) -> None:
    clock = ManualClock()
    c = await start(tmp_path, clock, leader_imbalance_check_interval_seconds=INTERVAL_S)
    try:
        await brokers(c, 1, 2)
        n = 2000
        await create(c, "big", {p: [1, 2] for p in range(n)})
        # Reorder every replica list (complete at once: both replicas are in the ISR): 2 becomes
        # preferred while 1 keeps leading.
        await reorder(c, "big", {p: [2, 1] for p in range(n)})
        assert imbalance(c) == n
        since = c.controller.mlog.end_offset
        began = clock.wall_ms()
        clock.advance(INTERVAL_MS)
        await harness.poll_until(lambda: imbalance(c) == n - 1000)
        clock.advance(9)
        clock.advance(1)
        await harness.poll_until(lambda: imbalance(c) == 0)
        runs: dict[int, int] = {}
        for rec in leader_changes(c, since):
            assert rec.record.leader == 2 and rec.record.isr is None
            runs[rec.timestamp - began] = runs.get(rec.timestamp - began, 0) + 1
        assert runs == {INTERVAL_MS: 1000, INTERVAL_MS + 10: 1000}
        # The last run reached the cap and left nothing: as in Kafka, the schedule stays
        # "immediately", so the next imbalance is balanced 10 ms after it began, not an interval.
        since = c.controller.mlog.end_offset
        await reorder(c, "big", {0: [1, 2]})
        again = clock.wall_ms()
        clock.advance(10)
        await harness.poll_until(lambda: imbalance(c) == 0)
        assert [(r.timestamp - again, r.record.leader) for r in leader_changes(c, since)] == [(0, -2), (10, 1)]
    finally:
        await c.stop()


async def test_a_renouncement_drops_the_scheduled_run_and_activation_schedules_afresh(tmp_path: Path) -> None:
    clock = ManualClock()
    c = await start(tmp_path, clock, leader_imbalance_check_interval_seconds=INTERVAL_S)
    try:
        _, since, began = await broker_returns(c, clock)  # half an interval after the imbalance
        ctl = c.controller
        epoch = ctl.epoch
        bad = registration(9, c.cluster_id)
        bad.listeners = [REG.Listener(name="X", host="h", port=1, security_protocol=9)]  # a handler fault
        assert (await c.req(bad, 3)).error_code == ErrorCode.UNKNOWN_SERVER_ERROR

        def reelected() -> bool:  # the lone voter stands again after its election timeout
            if ctl.active and ctl.epoch == epoch + 1:
                return True
            clock.advance(10)
            return False

        await harness.poll_until(reelected)
        reactivated = clock.wall_ms()
        assert reactivated < began + INTERVAL_MS  # the dropped run is still ahead
        clock.advance(began + INTERVAL_MS - reactivated)  # when the dropped run was due
        await barrier(c)
        assert imbalance(c) == 1
        clock.advance(reactivated + INTERVAL_MS - clock.wall_ms())
        await harness.poll_until(lambda: imbalance(c) == 0)
        assert leader_changes(c, since)[-1].timestamp == reactivated + INTERVAL_MS
    finally:
        await c.stop()


@pytest.mark.parametrize("enable", ["true", "false"])
async def test_auto_leader_rebalance_enable(tmp_path: Path, enable: str) -> None:
    """Disabled, nothing is ever scheduled: the imbalance stays (the control case for the same
    sequence enabled)."""
    clock = ManualClock()
    c = await start(tmp_path, clock, auto_leader_rebalance_enable=enable,
                    leader_imbalance_check_interval_seconds=INTERVAL_S)
    try:
        await broker_returns(c, clock)
        clock.advance(INTERVAL_MS * 10)
        if enable == "true":
            await harness.poll_until(lambda: imbalance(c) == 0)
        else:
            await barrier(c)
            assert imbalance(c) == 1
            assert c.controller.image.topics.by_name["t"].partitions[1].leader == 3
    finally:
        await c.stop()


# ----- the balancing run's shortcut ----------------------------------------------------------------

BROKER_IDS = (1, 2, 3, 4)
OWN_DIR = {b: uuid.UUID(int=100 + b) for b in BROKER_IDS}
OTHER_DIR = uuid.UUID(int=99)  # a directory no broker has online
LOST, MIGRATING, UNASSIGNED = uuid.UUID(int=2), uuid.UUID(int=0), uuid.UUID(int=1)


def sometimes(p: int) -> st.SearchStrategy[bool]:
    """True one time in ``p``."""
    return st.integers(0, p - 1).map(lambda n: n == 0)


@st.composite
def partition_states(draw: st.DrawFn) -> dict[str, Any]:
    replicas = draw(st.permutations(BROKER_IDS).map(list))[:draw(st.integers(1, 3))]
    isr = [r for r in replicas if draw(st.booleans())] or replicas[-1:]
    leader = draw(st.sampled_from([-1, *replicas]))
    dirs = [draw(st.sampled_from([OWN_DIR[r], OWN_DIR[r], OTHER_DIR, LOST, MIGRATING, UNASSIGNED])) for r in replicas]
    # A reassignment in progress (its first replica being removed, or its last being added),
    # and ELR left by an older metadata.version: the builder writes a record for those even
    # where it keeps the leader.
    removing = replicas[:1] if len(replicas) > 1 and draw(sometimes(2)) else []
    adding = replicas[-1:] if len(replicas) > 1 and not removing and draw(sometimes(3)) else []
    elr = [r for r in replicas if r not in isr][:1] if draw(sometimes(3)) else []
    return {"replicas": replicas, "isr": isr, "leader": leader, "directories": dirs, "removing_replicas": removing,
            "adding_replicas": adding, "eligible_leader_replicas": elr}


@given(brokers=st.lists(st.tuples(sometimes(4), sometimes(4)), min_size=4, max_size=4),
       parts=st.lists(partition_states(), min_size=10, max_size=30))
@settings(max_examples=80, deadline=None)
def test_a_run_writes_what_a_preferred_election_of_every_imbalanced_partition_writes(
        brokers: list[tuple[bool, bool]], parts: list[dict[str, Any]]) -> None:
    """The run skips the partitions whose preferred election would certainly write nothing
    without building it; whatever the brokers' states and the partitions' shapes, its records
    are those of building every imbalanced partition's election."""
    image = MetadataImage()
    offset = iter(range(10**6))
    image.replay(FeatureLevelRecord(name="metadata.version", feature_level=21), next(offset))
    for b, (fenced, shutting_down) in zip(BROKER_IDS, brokers, strict=True):
        image.replay(RegisterBrokerRecord(broker_id=b, broker_epoch=b, incarnation_id=uuid.UUID(int=b),
                                          fenced=fenced, in_controlled_shutdown=shutting_down,
                                          log_dirs=[OWN_DIR[b]]), next(offset))
    tid = uuid.UUID(int=7)
    image.replay(TopicRecord(name="t", topic_id=tid), next(offset))
    for pid, state in enumerate(parts):
        image.replay(PartitionRecord(partition_id=pid, topic_id=tid, **state), next(offset))
    ctx = ControllerContext(image=image, config=Config({"process.roles": "controller", "node.id": "1",
                                                        "controller.quorum.voters": "1@127.0.0.1:9093"}),
                            clock=ManualClock(), node_id=1, cluster_id="c")
    elections = LeaderElectionManager(ctx, ClusterControlManager(ctx))
    topic = image.topics.by_name["t"]
    every = [r for _, pid, p in image.topics.imbalanced_partitions()
             if (r := elections._build(topic, pid, p, Election.PREFERRED)) is not None]
    assert elections.balance_partition_leaders(max_elections=len(parts) + 1).records == every

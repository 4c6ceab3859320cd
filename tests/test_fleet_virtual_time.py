"""The fleet and a kraftsim controller in one event loop on one virtual clock: brokers heartbeat
only when the test moves time, so "a killed broker is fenced when, and only when, its session
runs out, and nobody else is" is checked to the millisecond of the controller's own clock."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kraftsim.broker.fleet import Fleet, FleetOptions
from kraftsim.broker.lifecycle import BrokerState
from kraftsim.rpc.clock import ManualClock
from tests import harness
from tests.test_controller import CT, Cluster

SESSION_MS = 9000
INTERVAL_MS = 2000
IDS = range(1, 6)


async def settle(fleet: Fleet, c: Cluster) -> None:
    """Let woken brokers run, then wait until the fleet has applied all the controller has
    committed and each broker is waiting for its next communication."""
    for _ in range(5):
        await asyncio.sleep(0)
    obs = fleet.observer
    assert obs is not None
    await harness.poll_until(lambda: obs.applied_offset >= c.controller.raft.committed_offset
                             and all(b.idle for b in fleet.live()), timeout=10)


async def advance(clock: ManualClock, fleet: Fleet, c: Cluster, ms: int, step: int) -> None:
    for _ in range(ms // step):
        clock.advance(step)
        await settle(fleet, c)


def fenced(c: Cluster) -> set[int]:
    return {i for i in IDS if c.controller.image.cluster.brokers[i].fenced}


async def test_a_killed_broker_is_fenced_exactly_when_its_session_runs_out(tmp_path: Path) -> None:
    clock = ManualClock()
    c = Cluster(tmp_path, clock=clock, broker_session_timeout_ms=str(SESSION_MS))
    await c.start()
    fleet = Fleet(FleetOptions(bootstrap=[("127.0.0.1", c.running.server.port)], count=len(IDS),
                               cluster_id=c.cluster_id, start_rate=0, status_interval_s=3600,
                               heartbeat_interval_ms=INTERVAL_MS, session_timeout_ms=SESSION_MS), clock=clock)
    try:
        await fleet.start()
        await harness.poll_until(lambda: len(fleet.live()) == len(IDS) and all(b.registered for b in fleet.live()),
                                 timeout=20)
        for _ in range(50):  # STARTING heartbeats every 10 ms, then RECOVERY -> RUNNING
            if all(b.state == BrokerState.RUNNING for b in fleet.live()):
                break
            await advance(clock, fleet, c, 10, 10)
        assert fenced(c) == set()
        r: Any = await c.req(CT(topics=[CT.CreatableTopic(name="t", num_partitions=10, replication_factor=3)],
                                timeout_ms=5000), 7)
        assert r.topics[0].error_code == 0
        led = {pid for pid, p in c.controller.image.topics.by_name["t"].partitions.items() if p.leader == 3}
        assert led
        await advance(clock, fleet, c, INTERVAL_MS, 100)  # everyone has heartbeaten since
        victim = fleet.brokers[3]
        last = victim.last_heartbeat_ms
        victim.kill()
        # Up to 100 ms before its session ends it is not fenced, nor is anybody else ...
        await advance(clock, fleet, c, last + SESSION_MS - 100 - clock.monotonic_ms(), 100)
        assert fenced(c) == set()
        # ... and once it has ended, it is, alone, and its partitions have other leaders.
        await advance(clock, fleet, c, 200, 100)
        await harness.poll_until(lambda: fenced(c) == {3}, timeout=10)
        await advance(clock, fleet, c, 3 * INTERVAL_MS, 100)
        assert fenced(c) == {3}
        partitions = c.controller.image.topics.by_name["t"].partitions
        assert all(partitions[pid].leader not in (3, -1) for pid in led)
    finally:
        fleet.request_stop()
        stop = asyncio.ensure_future(fleet.shutdown(timeout_s=5))
        while not stop.done():
            clock.advance(50)
            await asyncio.sleep(0.01)
        await stop
        await c.stop()

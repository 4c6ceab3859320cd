"""Injected faults on a simulated fleet (kraftsim.faults.fleet), through the fleet's own HTTP API,
against a real kraftsim controller, both in this event loop: what the controller decides (its
image) shows each fault took: a silenced broker is fenced and comes back, a restarted one is a new
incarnation, one registering unsupported features is refused until the fault ends, a flapping one
goes and comes back, a lagging one's reported offset stops; and a request fault on the fleet's
client listener answers its clients with the error."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from kraftsim.broker.fleet import Fleet, FleetOptions
from kraftsim.faults.client import FaultApiError, FaultClient
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import MetadataRequest
from tests import harness
from tests.test_controller import CT, Cluster

IDS = (1, 2, 3, 4)
SESSION_MS = 1500


class Setup:
    def __init__(self, controller: Cluster, fleet: Fleet, http_port: int) -> None:
        self.c = controller
        self.fleet = fleet
        self.http_port = http_port
        self.api = FaultClient(f"127.0.0.1:{http_port}")

    async def call(self, method: str, *args: Any, **kw: Any) -> Any:
        return await asyncio.to_thread(getattr(self.api, method), *args, **kw)

    @property
    def brokers(self) -> Any:
        return self.c.controller.image.cluster.brokers

    def fenced(self) -> set[int]:
        return {b for b in IDS if b in self.brokers and self.brokers[b].fenced}

    async def all_unfenced(self, timeout: float = 20) -> None:
        await harness.poll_until(lambda: all(b in self.brokers for b in IDS) and not self.fenced(), timeout)


@pytest.fixture
async def setup(tmp_path: Path) -> Any:
    c = Cluster(tmp_path, broker_session_timeout_ms=str(SESSION_MS))
    await c.start()
    http_port = harness.free_port()
    fleet = Fleet(FleetOptions(bootstrap=[("127.0.0.1", c.running.server.port)], count=len(IDS),
                               cluster_id=c.cluster_id, start_rate=0, status_interval_s=3600, seed=5,
                               heartbeat_interval_ms=200, session_timeout_ms=1000, listen=("127.0.0.1", 0),
                               http_listen=("127.0.0.1", http_port), faults_enable=True))
    s = Setup(c, fleet, http_port)
    try:
        await fleet.start()
        await s.all_unfenced()
        yield s
    finally:
        fleet.request_stop()
        await fleet.shutdown(timeout_s=10)
        await c.stop()


async def test_a_silenced_broker_is_fenced_then_comes_back(setup: Setup) -> None:
    fault = await setup.call("add", "silence", brokers=[2], duration="2500ms")
    assert fault["decisions"] == {"brokers": [2]}
    await harness.poll_until(lambda: setup.fenced() == {2}, 10)
    await harness.poll_until(lambda: not setup.fenced(), 15)  # the fault ended: it heartbeats again
    assert setup.brokers[2].incarnation_id == setup.fleet.brokers[2].incarnation_id  # the same process


async def test_restart_and_flap_bring_new_incarnations(setup: Setup) -> None:
    before = setup.brokers[3].incarnation_id
    await setup.call("add", "restart", brokers=[3])
    await harness.poll_until(lambda: setup.brokers[3].incarnation_id != before and not setup.brokers[3].fenced, 20)
    seen = {setup.brokers[4].incarnation_id}
    fault = await setup.call("add", "flap", brokers=[4], period="600ms")
    await harness.poll_until(lambda: seen.add(setup.brokers[4].incarnation_id) or len(seen) >= 3, 30)
    await setup.call("remove", fault["id"])
    await setup.all_unfenced()


async def test_unsupported_features_are_refused_until_the_fault_ends(setup: Setup) -> None:
    before = setup.brokers[1].incarnation_id
    errors = setup.fleet.shared.counters.get("registration_errors", 0)  # type: ignore[union-attr]
    fault = await setup.call("add", "features", brokers=[1], features={"metadata.version": [1, 7]})
    await harness.poll_until(lambda: setup.fleet.shared.counters.get("registration_errors", 0) > errors + 1, 20)
    assert setup.brokers[1].incarnation_id == before  # refused: the controller still has the old one
    await setup.call("remove", fault["id"])
    await harness.poll_until(lambda: setup.brokers[1].incarnation_id != before and not setup.brokers[1].fenced, 20)


async def test_a_lagging_broker_reports_a_stopped_offset(setup: Setup) -> None:
    fault = await setup.call("add", "lag", pick=1)
    (victim,) = fault["decisions"]["brokers"]
    frozen = setup.fleet.shared.lagging[victim]  # type: ignore[union-attr]
    await setup.c.req(CT(timeout_ms=5000, topics=[CT.CreatableTopic(name="moves", num_partitions=1,
                                                                    replication_factor=1)]), 7)
    tracker = setup.c.controller.managers.cluster.heartbeats

    def apart() -> bool:
        offsets = {b: tracker.get(b).metadata_offset for b in IDS}
        return offsets[victim] == frozen and all(o > frozen for b, o in offsets.items() if b != victim)

    await harness.poll_until(apart, 10)
    await setup.call("clear")
    await harness.poll_until(lambda: tracker.get(victim).metadata_offset > frozen, 10)


async def test_the_fleets_http_api_and_its_listener(setup: Setup) -> None:
    with pytest.raises(FaultApiError, match="a fleet cannot take a resign fault"):
        await setup.call("add", "resign")
    with pytest.raises(FaultApiError, match="no broker 9"):
        await setup.call("add", "silence", brokers=[9], duration="1s")
    port = setup.fleet.listeners.servers[-1].port  # type: ignore[union-attr]
    await setup.call("add", "request", api="Metadata", error="LEADER_NOT_AVAILABLE", topics=["t"], count=1)
    client = await KafkaClient.connect("127.0.0.1", port, client_id="app")
    try:
        await client.negotiate()
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")],
                              allow_auto_topic_creation=False)
        first = await client.request(req, 9)
        second = await client.request(req, 9)
    finally:
        await client.close()
    assert [t.error_code for t in first.topics] == [ErrorCode.LEADER_NOT_AVAILABLE]
    assert [t.error_code for t in second.topics] == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]

    async def health() -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(await asyncio.to_thread(harness.wait_http, setup.http_port, "/healthz"))
        return doc

    await setup.call("add", "silence", brokers=[1], duration="30s")
    doc = await health()
    assert doc["injectedFaults"] == {"active": 1, "kinds": ["silence"], "ids": ["f2"]}
    await setup.call("clear")
    for _ in range(100):  # as the fleet's observer has replayed it, a moment after the controller
        doc = await health()
        if doc["brokers"]["unfenced"] == len(IDS):
            break
        await asyncio.sleep(0.1)
    assert doc["brokers"]["unfenced"] == len(IDS) and doc["injectedFaults"]["active"] == 0
    metrics = await asyncio.to_thread(harness.wait_http, setup.http_port, "/metrics")
    assert re.search(r'^kraftsim_faults_injected_total\{kind="request"\} 1\.0$', metrics, re.M)
    assert re.search(r'^kraftsim_fleet_events_total\{event="heartbeats"\} [1-9]', metrics, re.M)

"""``kraftsim brokers`` against a kraftsim controller: the simulated brokers' fleet proof (see
tests/fleet_scenario.py), the command line's refusals, and the client listener's own APIs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import fleet_scenario
from tests.kafka.harness import KraftsimNode, random_cluster_id

pytestmark = pytest.mark.slow


def kraftsim_node(directory: Path, **config: str) -> KraftsimNode:
    node = KraftsimNode(directory, cluster_id=random_cluster_id(), overrides=dict(config))
    node.format()
    return node.start()


async def test_fifty_brokers_against_kraftsim(tmp_path: Path) -> None:
    node = kraftsim_node(tmp_path / "controller", **fleet_scenario.CONTROLLER_CONFIG)
    try:
        await fleet_scenario.play(node, tmp_path)
    finally:
        node.stop()


async def test_a_flapping_broker_comes_back_as_a_new_incarnation(tmp_path: Path) -> None:
    import uuid

    from tests.fleet_harness import ClusterView, FleetProcess

    node = kraftsim_node(tmp_path / "controller", **{"broker.session.timeout.ms": "3000"})
    view = ClusterView(node.bootstrap, node.cluster_id).start()
    fleet = FleetProcess(tmp_path / "fleet", node.bootstrap, 3, "--cluster-id", node.cluster_id, "--flap", "2",
                         "--override", "broker.heartbeat.interval.ms=500", "--override",
                         "broker.session.timeout.ms=2000", "--seed", "3")
    try:
        gone = await fleet.wait_log(r"flap: broker (\d+) goes away")
        broker = int(gone.group(1))
        before = view.image.cluster.brokers[broker].incarnation_id
        back = await fleet.wait_log(rf"flap: broker {broker} is back as incarnation (\S+)")
        incarnation = uuid.UUID(back.group(1))
        assert incarnation != before
        # The old incarnation is fenced when its session runs out; the new one then registers
        # (DUPLICATE_BROKER_REGISTRATION until then) and is unfenced.
        await view.until(lambda img: img.cluster.brokers[broker].incarnation_id == incarnation
                         and not img.cluster.brokers[broker].fenced, 30, f"broker {broker} back and unfenced")
    finally:
        fleet.kill()
        await view.stop()
        node.stop()

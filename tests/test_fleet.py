"""``kraftsim brokers`` against a kraftsim controller: the simulated brokers' fleet proof (see
tests/fleet_scenario.py), the command line's refusals, and the client listener's own APIs."""

from __future__ import annotations

import asyncio
import random
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.messages import CreateTopicsRequest
from tests import fleet_scenario
from tests.fleet_harness import ClusterView, FleetProcess
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


# SIGTERM at a random moment of a fleet's start: each run picks a moment (the fleet has just
# begun, k brokers registered, k unfenced, a topic of replication factor 2 just created on the
# first ones unfenced, or all running with that topic) and a start rate, then asserts a bounded
# exit 0 and that every broker the controller registered was let go through its own controlled
# shutdown. The controller's session outlasts the whole test, so no broker is fenced by the
# clock: one left unfenced is one the fleet abandoned, and the run fails at its deadline.
SIGTERM_RUNS = 30
SIGTERM_SEED = 20_241
SIGTERM_COUNT = 20
SIGTERM_MOMENTS = ("begun", "registered", "unfenced", "topic created", "running")
EXIT_DEADLINE_S = 20.0
SUMMARY = re.compile(r"kraftsim brokers: (\d+) brokers shut down in [0-9.]+ s: (\d+) through controlled shutdown, "
                     r"(\d+) not yet registered, (\d+) not let go by the controller")


async def create_topic(bootstrap: str, name: str, replication_factor: int) -> None:
    host, port = bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port), client_id="sigterm-test")
    try:
        await client.negotiate()
        resp: Any = await client.request(CreateTopicsRequest(timeout_ms=30_000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name=name, num_partitions=10,
                                               replication_factor=replication_factor)]), 7)
        assert resp.topics[0].error_code == 0, resp
    finally:
        await client.close()


async def test_sigterm_at_any_moment_of_the_start_ends_in_controlled_shutdowns(tmp_path: Path) -> None:
    node = kraftsim_node(tmp_path / "controller", **{"broker.session.timeout.ms": "600000"})
    view = ClusterView(node.bootstrap, node.cluster_id).start()
    rng = random.Random(SIGTERM_SEED)
    try:
        for run in range(SIGTERM_RUNS):
            await sigterm_once(run, rng, node, view, tmp_path / f"fleet-{run}")
    finally:
        await view.stop()
        node.stop()


async def sigterm_once(run: int, rng: random.Random, node: KraftsimNode, view: ClusterView, directory: Path) -> None:
    first = 1 + run * SIGTERM_COUNT
    ids = range(first, first + SIGTERM_COUNT)
    moment = rng.choice(SIGTERM_MOMENTS)
    k = rng.randint(1, SIGTERM_COUNT)
    start_rate = rng.choice(("50", "200", "0"))  # 0: every broker at once
    what = f"run {run}: SIGTERM when {moment} (k={k}, --start-rate {start_rate})"
    fleet = FleetProcess(directory, node.bootstrap, SIGTERM_COUNT, "--cluster-id", node.cluster_id,
                         "--first-id", str(first), "--start-rate", start_rate,
                         "--override", "broker.heartbeat.interval.ms=100",
                         "--override", "broker.session.timeout.ms=2000", "--status-interval", "1")
    try:
        if moment == "begun":
            await fleet.wait_log(r"following the metadata log leader")
        elif moment == "registered":
            await view.until(lambda img: sum(i in img.cluster.brokers for i in ids) >= k, 30, what)
        elif moment == "unfenced":
            await view.until(lambda img: len(view.unfenced(ids)) >= k, 30, what)
        else:
            need = max(k, 2) if moment == "topic created" else SIGTERM_COUNT
            await view.until(lambda img: len(view.unfenced(ids)) >= need, 30, what)
            await create_topic(node.bootstrap, f"sigterm-{run}", 2)
        await asyncio.sleep(rng.uniform(0, 0.05))  # not a synchronisation: a moment within the phase
        fleet.signal(signal.SIGTERM)
        assert await fleet.wait_exit(EXIT_DEADLINE_S) == 0, f"{what}:\n{fleet.output()[-3000:]}"
    finally:
        fleet.kill()
    # Each broker the controller registered was let go by it: fenced at the broker's own request
    # (the controller's session would take minutes), and counted as such in the summary.
    await view.until(lambda img: not view.unfenced(ids), 10, f"{what}: every broker fenced")
    registered = [i for i in ids if i in view.image.cluster.brokers]
    m = SUMMARY.search(fleet.output())
    assert m, f"{what}: no summary:\n{fleet.output()[-2000:]}"
    shut_down, controlled, not_registered, unfinished = map(int, m.groups())
    assert (shut_down, unfinished) == (SIGTERM_COUNT, 0), f"{what}: {m.group(0)}"
    assert (controlled, not_registered) == (len(registered), SIGTERM_COUNT - len(registered)), \
        f"{what}: {m.group(0)}; registered with the controller: {registered}"

"""The simulated brokers' fleet proof, played against any controller node with KafkaNode's face (a
kraftsim controller, or a real Kafka 3.9 one): 50 simulated brokers register and are unfenced,
topics get leaders on them, killing 5 fences exactly those 5 and moves their leadership, a
controller restart is ridden through, and SIGTERM shuts the rest down through controlled
shutdown with exit status 0."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.messages import CreateTopicsRequest
from tests.fleet_harness import ClusterView, FleetProcess

COUNT = 50
KILL = 5
IDS = range(1, COUNT + 1)
TOPICS = [f"fleet-{i}" for i in range(8)]
PARTITIONS = 10
# The controller fences after 6 s of silence; the brokers heartbeat every 500 ms, and their own
# broker.session.timeout.ms (which caps their retry backoff at 2 s) lets them come back quickly
# after the controller restart.
CONTROLLER_CONFIG = {"broker.session.timeout.ms": "6000"}
FLEET_ARGS = ("--override", "broker.heartbeat.interval.ms=500", "--override", "broker.session.timeout.ms=2000",
              "--kill", str(KILL), "--kill-after", "3600", "--status-interval", "1", "--seed", "11")


async def create_topics(bootstrap: str) -> None:
    host, port = bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port), client_id="fleet-test")
    try:
        await client.negotiate()
        req = CreateTopicsRequest(timeout_ms=30_000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name=t, num_partitions=PARTITIONS, replication_factor=3)
            for t in TOPICS])
        resp: Any = await client.request(req, min(7, client.versions[19][1]))
        assert [(t.name, t.error_code) for t in resp.topics] == [(t, 0) for t in TOPICS], resp
    finally:
        await client.close()


async def play(node: Any, tmp: Path) -> None:
    view = ClusterView(node.bootstrap, node.cluster_id).start()
    fleet = FleetProcess(tmp / "fleet", node.bootstrap, COUNT, "--cluster-id", node.cluster_id, *FLEET_ARGS)
    try:
        # 50 brokers register and are unfenced.
        await view.until(lambda img: view.unfenced(IDS) == set(IDS), 60, "all 50 brokers unfenced")
        # Topics get leaders on them.
        await create_topics(node.bootstrap)
        leaders = await view.until(lambda img: (ls := view.leaders()) and len(ls) == len(TOPICS) * PARTITIONS and ls,
                                   30, "the topics' partitions")
        assert set(leaders.values()) <= set(IDS) and len(set(leaders.values())) > COUNT // 2

        # Killing 5 fences exactly those 5 within the session timeout, and moves their leadership.
        fleet.signal(signal.SIGUSR1)
        m = await fleet.wait_log(r"killed brokers ([0-9,]+): they stop heartbeating")
        killed = {int(x) for x in m.group(1).split(",")}
        assert len(killed) == KILL and killed <= set(IDS)
        led_by_killed = {tp for tp, leader in leaders.items() if leader in killed}
        assert led_by_killed, "the killed brokers led nothing: the test proves nothing about leadership"
        await view.until(lambda img: view.fenced(IDS) == killed, 60, f"brokers {sorted(killed)} fenced")
        assert view.unfenced(IDS) == set(IDS) - killed
        now = view.leaders()
        assert not {tp for tp, leader in now.items() if leader in killed}
        assert all(now[tp] in set(IDS) - killed for tp in led_by_killed), {tp: now[tp] for tp in led_by_killed}

        # A controller restart under the fleet is ridden through: every live broker registers
        # again (same incarnation, same epoch) and nobody alive is fenced, even a whole session
        # timeout later by the controller's own clock (the timestamps of its records).
        alive = set(IDS) - killed
        epochs = {i: view.image.cluster.brokers[i].epoch for i in alive}
        before = view.observer.applied_offset
        node.stop()
        restarted_ms = int(time.time() * 1000)
        node.start()
        await view.until(lambda img: all(img.cluster.brokers[i].registration_offset > before for i in alive), 60,
                         "every live broker registered again after the restart")
        assert {i: view.image.cluster.brokers[i].epoch for i in alive} == epochs
        session_ms = int(CONTROLLER_CONFIG["broker.session.timeout.ms"])
        await view.until(lambda img: img.last_timestamp_ms > restarted_ms + session_ms + 1000, 60,
                         "a session timeout of the controller's time after the restart")
        assert view.unfenced(IDS) == alive and view.fenced(IDS) == killed

        # SIGTERM: controlled shutdown of every live broker, then exit 0 with a summary.
        fleet.signal(signal.SIGTERM)
        assert await fleet.wait_exit(120) == 0, fleet.output()[-3000:]
        summary = re.search(r"kraftsim brokers: (\d+) brokers shut down in [0-9.]+ s: (\d+) through controlled "
                            r"shutdown", fleet.output())
        assert summary and summary.groups() == ("45", "45"), fleet.output()[-2000:]
        await view.until(lambda img: view.fenced(IDS) == set(IDS), 30, "every broker fenced after the shutdown")
    finally:
        fleet.kill()
        await view.stop()

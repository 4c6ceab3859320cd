"""A fleet storm that overloads the controller: it sheds the requests that waited past their
deadline, as Kafka's event queue does, and the fleet still settles with nobody fenced.

The controller is made slow on purpose, so that a few hundred brokers starting at once are a
storm on any machine: ``broker.heartbeat.interval.ms=2`` gives its heartbeats a deadline of 1 ms
(Kafka's interval / 2) counted from when the event loop found them readable, and one turn of the
loop that serves a few hundred sockets takes longer than that anywhere. What the test asserts
does not depend on how long anything took: heartbeats were shed (EventQueueOperationsTimedOutCount
and TimedOutBrokerHeartbeatCount above zero), every broker ends unfenced, and the controller's
log holds no fence record at all (nobody was killed, so any fence would be spurious).
"""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest

from kraftsim.metadata.log import MetadataLog
from kraftsim.metadata.records import unframe
from tests.fleet_harness import ClusterView, FleetProcess
from tests.kafka.harness import KraftsimNode, random_cluster_id

pytestmark = pytest.mark.slow

COUNT = 400
IDS = range(1, COUNT + 1)


def metrics(node: KraftsimNode) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/metrics", timeout=10).read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^kafka_controller_kafkacontroller_(\w+) (\S+)$",
                                                               text, re.M)}


def fence_records(metadata_dir: Path) -> list[str]:
    mlog = MetadataLog.open(metadata_dir)
    found = []
    try:
        for batch in mlog.batches(0, flushed_only=False):
            if batch.is_control:
                continue
            for rec in batch.records():
                if rec.value is None:
                    continue
                msg, _ = unframe(rec.value)
                if (type(msg).__name__ == "BrokerRegistrationChangeRecord" and getattr(msg, "fenced", 0) == 1) \
                        or type(msg).__name__ == "FenceBrokerRecord":
                    found.append(repr(msg))
    finally:
        mlog.close()
    return found


async def test_a_storm_is_shed_and_the_fleet_settles_with_nobody_fenced(tmp_path: Path) -> None:
    node = KraftsimNode(tmp_path / "controller", cluster_id=random_cluster_id(),
                        overrides={"broker.heartbeat.interval.ms": "2", "broker.session.timeout.ms": "9000"})
    node.format()
    node.start()
    view = ClusterView(node.bootstrap, node.cluster_id).start()
    # Every broker at once; they heartbeat every 200 ms and give up on a request after 1 s.
    fleet = FleetProcess(tmp_path / "fleet", node.bootstrap, COUNT, "--cluster-id", node.cluster_id,
                         "--start-rate", "0", "--status-interval", "1",
                         "--override", "broker.heartbeat.interval.ms=200",
                         "--override", "broker.session.timeout.ms=2000")
    try:
        await view.until(lambda img: view.unfenced(IDS) == set(IDS), 60, f"all {COUNT} brokers unfenced")
        m = metrics(node)
        assert m["eventqueueoperationstimedoutcount"] > 0, m
        assert m["timedoutbrokerheartbeatcount"] > 0, m
        assert m["fencedbrokercount"] == 0 and m["activebrokercount"] == COUNT, m
        assert fence_records(node.metadata_dir) == []
    finally:
        fleet.kill()
        await view.stop()
        node.stop()

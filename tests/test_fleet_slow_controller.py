"""A simulated broker against a controller that does not answer, as Kafka's
BrokerLifecycleManager behaves: one communication at a time, given up after the channel's
retry timeout (broker.session.timeout.ms / 2) with the connection dropped, sent again after an
exponential backoff, and registered once the controller answers again. The controller is a
real one whose event queue is held, so the registrations it is sent wait there unanswered."""

from __future__ import annotations

from pathlib import Path

from kraftsim.broker.fleet import Fleet, FleetOptions
from kraftsim.broker.lifecycle import BrokerState
from tests import harness
from tests.test_controller import Cluster


async def test_a_broker_gives_up_on_a_silent_controller_and_tries_again_one_request_at_a_time(tmp_path: Path) -> None:
    c = Cluster(tmp_path, metadata_max_idle_interval_ms="0")  # no NoOp writes: the held queue has only the broker's
    await c.start()
    queue = c.controller.queue
    server = c.running.server
    fleet = Fleet(FleetOptions(bootstrap=[("127.0.0.1", server.port)], count=1, cluster_id=c.cluster_id,
                               start_rate=0, status_interval_s=3600, heartbeat_interval_ms=100,
                               session_timeout_ms=400))  # a request is given up after 200 ms
    queue.pause()
    before = len(server.connections)  # the test's own client
    try:
        await fleet.start()
        broker = fleet.brokers[1]
        assert fleet.shared is not None
        counters = fleet.shared.counters
        most_connections = 0

        def three_timeouts() -> bool:
            nonlocal most_connections
            # The fleet's observer and at most one connection of the broker, never more.
            most_connections = max(most_connections, len(server.connections))
            return counters.get("failures", 0) >= 3

        await harness.poll_until(three_timeouts, timeout=20, interval=0.005)
        assert most_connections <= before + 2
        assert not broker.registered and broker.failed_attempts >= 3
        assert broker.last_error.startswith("registration: ")  # the channel's timeout
        # One registration per attempt waits in the held queue (registrations have no deadline,
        # as in Kafka): each sent after the last was given up on, none beside it.
        waiting = len(queue)
        assert counters["failures"] <= waiting <= counters["failures"] + 1
        queue.resume()
        await harness.poll_until(lambda: broker.state == BrokerState.RUNNING, timeout=20)
        reg = c.controller.image.cluster.brokers[1]
        assert not reg.fenced and reg.epoch == broker.broker_epoch  # the duplicates amended one registration
    finally:
        queue.resume()
        fleet.request_stop()
        await fleet.shutdown(timeout_s=5)
        await c.stop()


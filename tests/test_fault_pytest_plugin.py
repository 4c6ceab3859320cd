"""The worked test of docs/faults.md, as a user copies it: kraftsim's pytest fixtures start a
controller and a fleet as processes, and a fault injected through them does what the page says."""

from __future__ import annotations

import time

import pytest

from kraftsim.faults.client import FaultClient
from kraftsim.faults.processes import Controller, Fleet

pytest_plugins = ["kraftsim.faults.pytest_plugin"]


# --- from docs/faults.md -------------------------------------------------------------------------
@pytest.mark.kraftsim_config({"broker.session.timeout.ms": "6000"})
@pytest.mark.kraftsim_brokers(3)
def test_brokers_ride_out_refused_heartbeats(kraftsim_controller: Controller, kraftsim_fleet: Fleet,
                                             kraftsim_faults: FaultClient) -> None:
    # Half a session of NOT_CONTROLLER: the brokers retry, and nobody is fenced.
    with kraftsim_faults.inject("request", api="BrokerHeartbeat", error="NOT_CONTROLLER", duration="3s") as fault:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert kraftsim_controller.brokers() == (3, 0)  # (unfenced, fenced)
            time.sleep(0.2)
    timeline = kraftsim_faults.timeline()
    ended = [e for e in timeline if e["id"] == fault["id"] and e["event"] == "end"]
    assert ended and ended[0]["hits"] > 0  # the brokers did hear NOT_CONTROLLER
    assert kraftsim_controller.metrics()['kraftsim_faults_injected_total{kind="request"}'] == 1
# ---------------------------------------------------------------------------------------------------

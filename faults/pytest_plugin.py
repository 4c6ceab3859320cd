"""pytest fixtures for testing against a controller that misbehaves on cue (docs/faults.md).

Turn them on in a ``conftest.py``::

    pytest_plugins = ["kraftsim.faults.pytest_plugin"]

and ask for them by name:

- ``kraftsim_controller``: a ``kraftsim controller`` process with fault injection on, formatted
  in the test's temporary directory, on loopback ports of its own; stopped after the test.
- ``kraftsim_fleet``: ``kraftsim brokers`` against it (3 brokers, or
  ``@pytest.mark.kraftsim_brokers(N)``), with a client listener (``fleet.bootstrap``), waited for
  until every broker is registered and unfenced.
- ``kraftsim_faults``: the controller's :class:`~kraftsim.faults.client.FaultClient`; every fault
  still active is cleared after the test.

``@pytest.mark.kraftsim_config({"broker.session.timeout.ms": "6000"})`` adds controller config.
The processes are the console script's (the ``kraftsim`` beside the running Python), as a user
runs them; their output is in the temporary directory (``controller.out``, ``fleet.out``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kraftsim.faults.client import FaultClient
from kraftsim.faults.processes import Controller, Fleet


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kraftsim_config(dict): controller config for the kraftsim_controller fixture")
    config.addinivalue_line("markers", "kraftsim_brokers(n): how many brokers the kraftsim_fleet fixture runs")


@pytest.fixture
def kraftsim_controller(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Controller]:
    marker = request.node.get_closest_marker("kraftsim_config")
    controller = Controller(tmp_path / "kraftsim-controller", dict(marker.args[0]) if marker else None)
    try:
        yield controller.start()
    finally:
        controller.stop()


@pytest.fixture
def kraftsim_fleet(kraftsim_controller: Controller, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Fleet]:
    marker = request.node.get_closest_marker("kraftsim_brokers")
    fleet = Fleet(kraftsim_controller, tmp_path / "kraftsim-fleet", int(marker.args[0]) if marker else 3)
    try:
        yield fleet.start()
    finally:
        fleet.stop()


@pytest.fixture
def kraftsim_faults(kraftsim_controller: Controller) -> Iterator[FaultClient]:
    try:
        yield kraftsim_controller.faults
    finally:
        if kraftsim_controller.proc is not None and kraftsim_controller.proc.poll() is None:
            kraftsim_controller.faults.clear()

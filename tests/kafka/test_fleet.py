"""The simulated brokers' fleet proof against a real Kafka 3.9 controller: the simulated brokers speak
Kafka, not only kraftsim (the same scenario as tests/test_fleet.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import fleet_scenario
from tests.kafka.harness import KafkaNode

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


async def test_fifty_brokers_against_kafka(tmp_path: Path) -> None:
    node = KafkaNode(tmp_path / "controller", overrides=dict(fleet_scenario.CONTROLLER_CONFIG))
    node.format()
    node.start()
    try:
        await fleet_scenario.play(node, tmp_path)
    finally:
        node.stop()

"""The fleet's clients proof: kafka-python, aiokafka and confluent-kafka create, describe and
delete topics, add partitions, and alter and describe configs through a fleet's client listener,
in front of a real Kafka 3.9 controller (which takes the forwarded Envelopes); every change is
checked in the controller's log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import fleet_clients
from tests.fleet_harness import ClusterView, FleetProcess
from tests.kafka.harness import KafkaNode

pytestmark = pytest.mark.kafka

FLEET_IDS = range(1, 4)


@pytest.fixture(scope="module")
def kafka_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaNode, FleetProcess, int]]:
    d = tmp_path_factory.mktemp("fleet-clients-kafka")
    node = KafkaNode(d / "controller", overrides={"controller.quorum.append.linger.ms": "0"})
    node.format()
    node.start()
    fleet = FleetProcess(d / "fleet", node.bootstrap, len(FLEET_IDS), "--listen", "127.0.0.1:0",
                         "--override", "broker.heartbeat.interval.ms=500")
    try:
        yield node, fleet, fleet.listener_port_blocking()
    finally:
        fleet.kill()
        node.stop()


@pytest.mark.parametrize("client", sorted(fleet_clients.CLIENTS))
async def test_admin_client_through_the_fleet(kafka_fleet: tuple[KafkaNode, FleetProcess, int], client: str,
                                              tmp_path: Path) -> None:
    node, fleet, port = kafka_fleet
    view = ClusterView(node.bootstrap, node.cluster_id).start()
    await view.until(lambda img: all(i in img.cluster.brokers and not img.cluster.brokers[i].fenced
                                     for i in FLEET_IDS), 60, "the fleet unfenced")
    admin = fleet_clients.CLIENTS[client](f"127.0.0.1:{port}")
    try:
        await fleet_clients.admin_round_trip(admin, view, f"through-{client}", FLEET_IDS)
    finally:
        await admin.close()
        await view.stop()


async def test_api_versions_offer_the_controllers_forwardable_apis(
        kafka_fleet: tuple[KafkaNode, FleetProcess, int]) -> None:
    from kraftsim.rpc.api_keys import ApiKey
    from kraftsim.rpc.client import KafkaClient

    node, _, port = kafka_fleet
    host, cport = node.bootstrap.rsplit(":", 1)
    controller = await KafkaClient.connect(host, int(cport))
    listener = await KafkaClient.connect("127.0.0.1", port)
    try:
        await controller.negotiate()
        await listener.negotiate()
        theirs, ours = controller.versions, listener.versions
        for key in (ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS,
                    ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_CONFIGS):
            assert ours[key] == theirs[key], key  # the controller's range, within 3.9's
        assert ApiKey.ENVELOPE not in ours and ApiKey.BROKER_HEARTBEAT not in ours  # not a client's to call
        assert ours[ApiKey.METADATA] == (0, 12)
    finally:
        await controller.close()
        await listener.close()


async def test_describe_configs_agrees_with_the_kafka_controllers_own_answer(
        kafka_fleet: tuple[KafkaNode, FleetProcess, int]) -> None:
    """A topic's configs as the fleet's listener describes them (from the replayed log) and as
    the Kafka controller describes them itself: the same values and sources, a topic override
    and a dynamic cluster default included (the controller applies the default to itself a
    little after it is committed, so its answer is polled for)."""
    from typing import Any

    from kraftsim.rpc.client import KafkaClient
    from kraftsim.rpc.messages import (
        CreateTopicsRequest,
        DescribeConfigsRequest,
        IncrementalAlterConfigsRequest,
    )

    node, _, port = kafka_fleet
    host, cport = node.bootstrap.rsplit(":", 1)
    view = ClusterView(node.bootstrap, node.cluster_id).start()
    controller = await KafkaClient.connect(host, int(cport))
    listener = await KafkaClient.connect("127.0.0.1", port)
    IAC = IncrementalAlterConfigsRequest
    try:
        await controller.negotiate()
        await listener.negotiate()
        r: Any = await listener.request(CreateTopicsRequest(timeout_ms=30_000, topics=[
            CreateTopicsRequest.CreatableTopic(name="described-configs", num_partitions=1, replication_factor=1,
                                               configs=[CreateTopicsRequest.CreatableTopicConfig(
                                                   name="cleanup.policy", value="compact")])]), 7)
        assert r.topics[0].error_code == 0, r
        r = await listener.request(IAC(resources=[IAC.AlterConfigsResource(resource_type=4, resource_name="", configs=[
            IAC.AlterableConfig(name="log.retention.ms", config_operation=0, value="3600000")])]), 1)
        assert r.responses[0].error_code == 0, r
        await view.until(lambda img: img.configs.get(4, "").get("log.retention.ms") == "3600000", 30, "the default")
        await fleet_clients.until(lambda: _fleet_has(listener), what="the fleet's image has the default")
        req = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=2, resource_name="described-configs", configuration_keys=None)], include_synonyms=True)
        ours: Any = await listener.request(req, 4)

        async def controller_applied() -> Any:
            r: Any = await controller.request(req, 4)
            return r if any(c.name == "retention.ms" and c.value == "3600000" for c in r.results[0].configs) else None

        theirs: Any = await fleet_clients.until(controller_applied, what="the Kafka controller applied the default")
        assert ours.results[0].error_code == theirs.results[0].error_code == 0
        mine = {c.name: (c.value, c.config_source, c.config_type) for c in ours.results[0].configs}
        kafka = {c.name: (c.value, c.config_source, c.config_type) for c in theirs.results[0].configs}
        assert mine == kafka and len(mine) > 30
        # Synonyms: Kafka's, less the trailing broker default that kraftsim does not know.
        syn_ours = {c.name: [(y.name, y.value, y.source) for y in c.synonyms] for c in ours.results[0].configs}
        syn_kafka = {c.name: [(y.name, y.value, y.source) for y in c.synonyms if y.source != 5]
                     for c in theirs.results[0].configs}
        assert syn_ours == syn_kafka
        assert syn_ours["retention.ms"] == [("log.retention.ms", "3600000", 3)]
        assert mine["retention.ms"] == ("3600000", 3, 5) and mine["cleanup.policy"] == ("compact", 1, 7)
    finally:
        await controller.close()
        await listener.close()
        await view.stop()


async def _fleet_has(listener: object) -> bool:
    from typing import Any

    from kraftsim.rpc.messages import DescribeConfigsRequest

    client: Any = listener
    r: Any = await client.request(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=4, resource_name="", configuration_keys=None)]), 4)
    return any(c.name == "log.retention.ms" and c.value == "3600000" for c in r.results[0].configs)

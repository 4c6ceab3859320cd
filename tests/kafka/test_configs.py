"""AlterConfigs (the legacy, whole-set API) against a real Kafka 3.9 controller (differential):
responses and the ConfigRecords each side appends must agree.

Each request names one resource that reaches the controller's judgement, because Kafka answers
those in HashMap order of ConfigResource, which is not reproducible run to run."""

from __future__ import annotations

from typing import Any

import pytest

from kraftsim.rpc.messages import AlterConfigsRequest as AC
from tests.kafka import differential as d
from tests.kafka.differential import Call, TopicSpec

pytestmark = pytest.mark.kafka

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS = 2, 4, 8, 16


def alter(*resources: tuple[int, str, dict[str, str | None]], validate_only: bool = False) -> d.Builder:
    def build(side: d.Side) -> Any:
        return AC(validate_only=validate_only, resources=[
            AC.AlterConfigsResource(resource_type=t, resource_name=n, configs=[
                AC.AlterableConfig(name=k, value=v) for k, v in configs.items()])
            for t, n, configs in resources])
    return build


async def test_legacy_alter_configs_replaces_the_whole_set(shared_pair: d.Pair) -> None:
    steps = [
        Call("register 201", d.register(201)),
        Call("unfence 201", d.heartbeat(201)),
        Call("create", d.create_topics(TopicSpec("legacy", 1, 1))),
        Call("set two keys", alter((TOPIC, "legacy", {"retention.ms": "1000", "cleanup.policy": "compact"}))),
        Call("the same again (no records)", alter((TOPIC, "legacy", {"retention.ms": "1000",
                                                                     "cleanup.policy": "compact"}))),
        Call("one key: the other is deleted", alter((TOPIC, "legacy", {"retention.ms": "2000"}))),
        Call("a null value", alter((TOPIC, "legacy", {"retention.ms": None, "segment.ms": "3600000"}))),
        Call("validate only", alter((TOPIC, "legacy", {"retention.ms": "5"}), validate_only=True)),
        Call("an invalid value", alter((TOPIC, "legacy", {"retention.ms": "soon"}))),
        Call("an unknown topic config", alter((TOPIC, "legacy", {"no.such.config": "1"}))),
        Call("an unknown topic", alter((TOPIC, "missing", {"retention.ms": "1"}))),
        Call("an illegal topic name", alter((TOPIC, "bad/name", {"retention.ms": "1"}))),
        Call("the topic default", alter((TOPIC, "", {"retention.ms": "1"}))),
        Call("the cluster default", alter((BROKER, "", {"log.retention.ms": "123", "num.io.threads": "4"}))),
        Call("the cluster default, unchanged (records again)", alter((BROKER, "", {"log.retention.ms": "123"}))),
        Call("a registered broker", alter((BROKER, "201", {"log.cleaner.threads": "2"}))),
        Call("an unknown broker", alter((BROKER, "999", {"log.cleaner.threads": "2"}))),
        Call("a broker name that is not a number", alter((BROKER, "x", {"log.cleaner.threads": "2"}))),
        Call("a negative broker id", alter((BROKER, "-1", {"log.cleaner.threads": "2"}))),
        Call("a client-metrics subscription", alter((CLIENT_METRICS, "sub", {"metrics": "org.apache",
                                                                             "interval.ms": "1000"}))),
        Call("a bad client-metrics interval", alter((CLIENT_METRICS, "sub", {"interval.ms": "5"}))),
        Call("BROKER_LOGGER is not for this API", alter((BROKER_LOGGER, "3000", {"kafka": "DEBUG"}))),
        Call("an unknown resource type", alter((99, "x", {"a": "b"}))),
        Call("a duplicate resource", alter((TOPIC, "legacy", {"retention.ms": "7"}),
                                           (TOPIC, "legacy", {"retention.ms": "8"}))),
        Call("three mentions", alter((TOPIC, "legacy", {"retention.ms": "7"}), (TOPIC, "legacy", {}),
                                     (TOPIC, "legacy", {"retention.ms": "9"}))),
        Call("refusals first, then the judged resource", alter((99, "x", {}), (BROKER_LOGGER, "1", {}),
                                                               (TOPIC, "legacy", {"retention.ms": "11"}))),
        Call("an empty set deletes everything", alter((TOPIC, "legacy", {}))),
        Call("no resources", alter()),
    ]
    for v in (0, 1, 2):
        steps.append(Call(f"version {v}", alter((TOPIC, "legacy", {"retention.ms": str(100 + v)})), v))
    t = await d.check(shared_pair, steps)
    codes = {label: [r["error_code"] for r in t.response(label)["responses"]]
             for label in ("set two keys", "an invalid value", "an unknown topic", "BROKER_LOGGER is not for this API",
                           "an unknown resource type", "a duplicate resource")}
    assert codes == {"set two keys": [0], "an invalid value": [40], "an unknown topic": [3],
                     "BROKER_LOGGER is not for this API": [42], "an unknown resource type": [35],
                     "a duplicate resource": [42]}
    assert t.record_types("one key: the other is deleted") == ["ConfigRecord", "ConfigRecord"]
    assert t.record_types("the same again (no records)") == []
    assert t.record_types("validate only") == []

"""DescribeConfigs (api 32) against a real Kafka 3.9 controller (differential): whole responses
compared, every version, topics and this node's broker config, with and without synonyms."""

from __future__ import annotations

from typing import Any

import pytest

from kraftsim.rpc.messages import DescribeConfigsRequest as DC
from kraftsim.rpc.messages import IncrementalAlterConfigsRequest as IAC
from tests.kafka import differential as d
from tests.kafka.differential import Call, TopicSpec
from tests.kafka.harness import NODE_ID

pytestmark = pytest.mark.kafka

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS = 2, 4, 8, 16
SET, DELETE = 0, 1
NODE = str(NODE_ID)


def describe(*resources: tuple[int, str] | tuple[int, str, list[str] | None], synonyms: bool = False,
             docs: bool = False) -> d.Builder:
    def build(side: d.Side) -> Any:
        return DC(include_synonyms=synonyms, include_documentation=docs, resources=[
            DC.DescribeConfigsResource(resource_type=r[0], resource_name=r[1],
                                       configuration_keys=r[2] if len(r) > 2 else None)  # type: ignore[misc]
            for r in resources])
    return build


def alter(rtype: int, name: str, **configs: str | None) -> d.Builder:
    def build(side: d.Side) -> Any:
        return IAC(resources=[IAC.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=[
            IAC.AlterableConfig(name=k.replace("_", "."), config_operation=SET if v is not None else DELETE, value=v)
            for k, v in configs.items()])])
    return build


async def test_describe_topic_configs(shared_pair: d.Pair) -> None:
    steps = [
        Call("register 301", d.register(301)),
        Call("unfence 301", d.heartbeat(301)),
        Call("create", d.create_topics(TopicSpec("dconf", 1, 1, configs={"retention.ms": "1000"}))),
        Call("defaults and one set", describe((TOPIC, "dconf"))),
        Call("with synonyms", describe((TOPIC, "dconf"), synonyms=True)),
        Call("some keys", describe((TOPIC, "dconf", ["retention.ms", "cleanup.policy", "nope"]), synonyms=True)),
        Call("alter the topic", alter(TOPIC, "dconf", cleanup_policy="compact, delete", segment_ms="5000")),
        Call("alter the cluster default", alter(BROKER, "", log_retention_hours="5", log_segment_bytes="2000000",
                                                log_roll_ms="7777")),
        Call("after the changes", describe((TOPIC, "dconf"), synonyms=True)),
        Call("an unknown topic", describe((TOPIC, "missing"))),
        Call("an illegal name", describe((TOPIC, "bad/name"))),
        Call("empty name", describe((TOPIC, ""))),
        Call("undo the cluster default", alter(BROKER, "", log_retention_hours=None, log_segment_bytes=None,
                                               log_roll_ms=None)),
    ]
    for v in range(5):
        steps.append(Call(f"version {v}", describe((TOPIC, "dconf", ["retention.ms", "segment.bytes"]),
                                                   synonyms=v > 0, docs=v > 2), v))
    await d.check(shared_pair, steps)

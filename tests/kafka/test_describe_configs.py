"""DescribeConfigs (api 32) against a real Kafka 3.9 controller (differential): whole responses
compared, every version, topics and this node's broker config, with and without synonyms."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest

from kraftsim.rpc.messages import DescribeConfigsRequest as DC
from kraftsim.rpc.messages import IncrementalAlterConfigsRequest as IAC
from tests.kafka import differential as d
from tests.kafka import normalise as norm
from tests.kafka.conftest import PairNodes, close, connect
from tests.kafka.differential import Call, TopicSpec
from tests.kafka.harness import NODE_ID, kafka_configs

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


async def test_describe_broker_configs(shared_pair: d.Pair) -> None:
    steps = [
        Call("this node", describe((BROKER, NODE))),
        Call("this node, synonyms", describe((BROKER, NODE), synonyms=True)),
        Call("the cluster default, empty", describe((BROKER, ""), synonyms=True)),
        Call("set defaults", alter(BROKER, "", log_retention_ms="5000", log_retention_hours="3",
                                   num_io_threads="4", max_connections="100", ssl_keystore_password="secret",
                                   listener_name_controller_ssl_keystore_password="hush",
                                   listener_name_controller_max_connections="7", custom_key="x",
                                   leader_replication_throttled_rate="1000", log_cleaner_threads="oops")),
        Call("set this node", alter(BROKER, NODE, log_retention_ms="6000", log_segment_bytes="3000000",
                                    listener_name_controller_ssl_keystore_password="hush", message_max_bytes="-",
                                    max_connections="50", other_custom="y", log_roll_hours="2")),
        Call("the cluster default", describe((BROKER, ""), synonyms=True)),
        Call("this node after", describe((BROKER, NODE), synonyms=True)),
        Call("some keys", describe((BROKER, NODE, ["log.retention.ms", "custom_key", "max.connections",
                                                   "listener.name.controller.ssl.keystore.password"]),
                                   synonyms=True)),
        Call("a topic after", describe((TOPIC, "dconf2"), synonyms=True)),
        Call("another broker id", describe((BROKER, "1"))),
        Call("not a number", describe((BROKER, "x"))),
        Call("loggers", describe((BROKER_LOGGER, NODE))),
        Call("logger keys", describe((BROKER_LOGGER, NODE, ["root"]))),
        Call("loggers of another node", describe((BROKER_LOGGER, "1"))),
        Call("loggers without a node", describe((BROKER_LOGGER, ""))),
        Call("loggers of no number", describe((BROKER_LOGGER, "x"))),
        Call("client metrics", alter(CLIENT_METRICS, "sub", metrics="org.apache", interval_ms="1000")),
        Call("a subscription", describe((CLIENT_METRICS, "sub"), (CLIENT_METRICS, "nosuch"),
                                        (CLIENT_METRICS, "sub", ["metrics"]))),
        Call("no subscription name", describe((CLIENT_METRICS, ""))),
        Call("many at once", describe((TOPIC, "missing"), (BROKER, ""), (CLIENT_METRICS, ""), (TOPIC, "x/y"))),
        Call("an unknown resource type", describe((TOPIC, "dconf2"), (99, "x"))),
        Call("no resources", describe()),
        Call("undo this node", alter(BROKER, NODE, log_retention_ms=None, log_segment_bytes=None,
                                     listener_name_controller_ssl_keystore_password=None, message_max_bytes=None,
                                     max_connections=None, other_custom=None, log_roll_hours=None)),
        Call("undo defaults", alter(BROKER, "", log_retention_ms=None, log_retention_hours=None, num_io_threads=None,
                                    max_connections=None, ssl_keystore_password=None,
                                    listener_name_controller_ssl_keystore_password=None,
                                    listener_name_controller_max_connections=None, custom_key=None,
                                    leader_replication_throttled_rate=None, log_cleaner_threads=None)),
        Call("undo the subscription", alter(CLIENT_METRICS, "sub", metrics=None, interval_ms=None)),
    ]
    steps.insert(0, Call("create", d.create_topics(TopicSpec("dconf2", 1, 1))))
    steps[0:0] = [Call("register 302", d.register(302)), Call("unfence 302", d.heartbeat(302))]
    for v in range(5):
        steps.append(Call(f"version {v}", describe((BROKER, NODE, ["log.retention.hours", "ssl.key.password"]),
                                                   synonyms=v > 0, docs=v > 2), v))
    await d.check(shared_pair, steps)


def tool_output(side: d.Side, *args: str) -> list[str]:
    """kafka-configs --bootstrap-controller against one side, its output with that side's port
    and directory written as placeholders and the harness's one-sided settings left out
    (normalise.NODE_CONFIG)."""
    r = kafka_configs("--bootstrap-controller", side.node.bootstrap, *args).check()
    # The port as a number on its own (not inside another, as in 1.7976931348623157E308).
    port = side.node.bootstrap.rsplit(":", 1)[1]
    text = re.sub(rf"(?<![0-9.]){port}(?![0-9])", "<port>", r.stdout + r.stderr)
    text = text.replace(str(side.node.data_dir), "<dir>")
    return [ln for ln in norm.tool_lines(text)
            if not any(ln.strip().startswith(f"{name}=") for name in norm.ONE_SIDED_CONFIGS)]


async def test_kafka_configs_describe_against_both(shared_pair: d.Pair) -> None:
    """kafka-configs --describe (topic, topic --all, this node --all, the cluster default) prints
    the same for both controllers."""
    await d.check(shared_pair, [
        Call("register 303", d.register(303)),
        Call("unfence 303", d.heartbeat(303)),
        Call("create", d.create_topics(TopicSpec("dconf3", 1, 1, configs={"retention.ms": "1000"}))),
        Call("set defaults", alter(BROKER, "", log_retention_ms="5000", max_connections="100")),
        Call("settle", describe((TOPIC, "dconf3"), (BROKER, ""))),
    ])
    commands = [
        ("--describe", "--entity-type", "topics", "--entity-name", "dconf3"),
        ("--describe", "--all", "--entity-type", "topics", "--entity-name", "dconf3"),
        ("--describe", "--all", "--entity-type", "brokers", "--entity-name", NODE),
        ("--describe", "--entity-type", "brokers", "--entity-default"),
    ]
    try:
        for args in commands:
            kafka_out, kraftsim_out = (await asyncio.gather(*(asyncio.to_thread(tool_output, side, *args)
                                                               for side in shared_pair.sides)))
            assert kraftsim_out == kafka_out, args
            assert len(kafka_out) > 1, (args, kafka_out)
    finally:
        await d.check(shared_pair, [Call("undo defaults", alter(BROKER, "", log_retention_ms=None,
                                                                max_connections=None))])


async def test_static_configs(pair_factory: Callable[..., PairNodes]) -> None:
    """What server.properties sets: STATIC_BROKER_CONFIG values and synonyms, a topic's values
    through them (hours to ms, a list), a password, an internal and an unknown config."""
    pair = await connect(pair_factory("dconf-static", log_retention_hours="5", log_segment_bytes="2000000",
                                      log_cleanup_policy="compact, delete", ssl_key_password="pw",
                                      log_initial_task_delay_ms="100", custom_static_key="x",
                                      message_max_bytes="2000000", log_message_format_version="2.8"))
    try:
        await d.check(pair, [
            Call("register 1", d.register(1)),
            Call("unfence 1", d.heartbeat(1)),
            Call("create", d.create_topics(TopicSpec("st", 1, 1, configs={"segment.bytes": "3000000"}))),
            Call("the topic", describe((TOPIC, "st"), synonyms=True)),
            Call("this node", describe((BROKER, NODE), synonyms=True)),
            Call("the cluster default", describe((BROKER, ""), synonyms=True)),
            Call("a dynamic hour", alter(BROKER, NODE, log_retention_minutes="7", log_retention_ms=None)),
            Call("after it", describe((TOPIC, "st", ["retention.ms"]), (BROKER, NODE, [
                "log.retention.ms", "log.retention.minutes", "log.retention.hours"]), synonyms=True)),
        ])
    finally:
        await close(pair)


def describe_configs_4x(release: str, broker_id: int, topic: str) -> list[Call]:
    """DescribeConfigs of this node, the cluster default and a topic on a 4.x controller, before
    and after dynamic configs 4.x defines differently from 3.9 (advertised.listeners is no longer
    dynamic, log.message.downconversion.enable is gone, log.message.timestamp.after.max.ms has a
    default of an hour) and configs no release defines (listed first from 4.2), undone after."""
    from kraftsim.metadata import versions
    from tests.kafka.differential import REG

    features = [REG.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                for n, (lo, hi) in versions.release(release).supported_features().items()]
    node_configs = {"advertised_listeners": "PLAINTEXT://h:1", "log_roll_hours": "2", "max_connections": "50",
                    "log_message_downconversion_enable": "false", "compression_type": "zstd", "other_custom": "y",
                    "custom_key": "z"}
    default_configs = {"log_retention_hours": "3", "log_segment_bytes": "2000000", "max_connections": "100",
                       "advertised_listeners": "PLAINTEXT://h:2", "log_message_timestamp_after_max_ms": "5000",
                       "custom_key": "x"}
    return [
        Call("this node", describe((BROKER, NODE))),
        Call("this node, synonyms", describe((BROKER, NODE), synonyms=True)),
        Call("register", d.register(broker_id, features=features)),
        Call("unfence", d.heartbeat(broker_id)),
        Call("create", d.create_topics(TopicSpec(topic, 1, 1, configs={"retention.ms": "1000"}))),
        Call("the topic", describe((TOPIC, topic), synonyms=True)),
        Call("set defaults", alter(BROKER, "", **default_configs)),
        Call("set this node", alter(BROKER, NODE, **node_configs)),
        Call("the cluster default", describe((BROKER, ""), synonyms=True)),
        Call("this node after", describe((BROKER, NODE), synonyms=True)),
        Call("some keys", describe((BROKER, NODE, ["max.connections", "log.retention.ms", "advertised.listeners",
                                                   "log.message.timestamp.after.max.ms", "nope"]), synonyms=True)),
        Call("the topic after", describe((TOPIC, topic), synonyms=True)),
        Call("some of the topic's keys", describe((TOPIC, topic, ["segment.bytes", "retention.ms",
                                                                  "message.timestamp.after.max.ms"]))),
        Call("undo this node", alter(BROKER, NODE, **dict.fromkeys(node_configs))),
        Call("undo defaults", alter(BROKER, "", **dict.fromkeys(default_configs))),
    ]


async def test_describe_configs_40(pair_factory: Callable[..., PairNodes]) -> None:
    """As test_release_44.py's test_describe_broker_configs, against Kafka 4.0.2: 4.0's definitions
    (3.9's without ZooKeeper's and the old message formats', with 4.0's defaults), listed in a
    Scala map's order as 3.9 lists them."""
    pair = await connect(pair_factory("describe-configs-40", release="4.0", kafka_release="4.0"))
    try:
        await d.check(pair, describe_configs_4x("4.0", 4040, "dconf40"))
    finally:
        await close(pair)

"""DescribeConfigs (api 32) over real sockets: topics, this node's broker config, the cluster
default, loggers, client-metrics subscriptions, errors, versions and authorization.

The values and orders asserted here are what a real Kafka 3.9.2 controller answered for the
same requests (tests/kafka/test_describe_configs.py compares the two directly)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kraftsim.controller.managers.acls import STANDARD_AUTHORIZER
from kraftsim.metadata.config_defs.broker import BROKER_CONFIGS
from kraftsim.metadata.config_defs.topic import TOPIC_CONFIGS
from kraftsim.rpc.error_codes import ErrorCode as E
from kraftsim.rpc.error_codes import generic_message
from kraftsim.rpc.messages import CreateTopicsRequest as CT
from kraftsim.rpc.messages import DescribeConfigsRequest as DC
from kraftsim.rpc.messages import IncrementalAlterConfigsRequest as IAC
from tests.acl_requests import CLUSTER, acl
from tests.harness import NODE_ID
from tests.test_authorization import grant
from tests.test_controller import Cluster

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS = 2, 4, 8, 16
SET, DELETE = 0, 1
DESCRIBE_CONFIGS_OP = 10
NODE = str(NODE_ID)
# ConfigSource
TOPIC_CONFIG, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT, LOGGER = 1, 2, 3, 4, 5, 6


def describe(*resources: tuple[Any, ...], synonyms: bool = False, docs: bool = False) -> Any:
    return DC(include_synonyms=synonyms, include_documentation=docs, resources=[
        DC.DescribeConfigsResource(resource_type=r[0], resource_name=r[1],
                                   configuration_keys=r[2] if len(r) > 2 else None) for r in resources])


def alter(rtype: int, name: str, **configs: str | None) -> Any:
    return IAC(resources=[IAC.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=[
        IAC.AlterableConfig(name=k.replace("_", "."), config_operation=SET if v is not None else DELETE, value=v)
        for k, v in configs.items()])])


async def altered(c: Cluster, rtype: int, name: str, **configs: str | None) -> None:
    r = await c.req(alter(rtype, name, **configs), 1)
    assert [x.error_code for x in r.responses] == [0], r


def by_name(result: Any) -> dict[str, Any]:
    return {e.name: e for e in result.configs}


def synonyms(entry: Any) -> list[tuple[str, str | None, int]]:
    return [(s.name, s.value, s.source) for s in entry.synonyms]


async def topic(c: Cluster, name: str, **configs: str) -> None:
    if 1 not in c.controller.image.cluster.brokers:
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
    r = await c.req(CT(topics=[CT.CreatableTopic(name=name, num_partitions=1, replication_factor=1, configs=[
        CT.CreatableTopicConfig(name=k.replace("_", "."), value=v) for k, v in configs.items()])], timeout_ms=5000), 7)
    assert r.topics[0].error_code == 0, r


async def test_topic_lists_every_topic_config_in_kafkas_order(c: Cluster) -> None:
    await topic(c, "t", retention_ms="1000")
    [r] = (await c.req(describe((TOPIC, "t")), 4)).results
    assert (r.error_code, r.error_message, r.resource_type, r.resource_name) == (0, "", TOPIC, "t")
    names = [e.name for e in r.configs]
    assert sorted(names) == sorted(TOPIC_CONFIGS)
    # The order of the Scala HashMap Kafka collects them in, as Kafka 3.9.2 answered.
    assert names[:6] == ["compression.type", "remote.log.delete.on.disable", "leader.replication.throttled.replicas",
                         "remote.storage.enable", "message.downconversion.enable", "min.insync.replicas"]
    e = by_name(r)
    assert (e["retention.ms"].value, e["retention.ms"].config_source) == ("1000", TOPIC_CONFIG)
    assert (e["segment.bytes"].value, e["segment.bytes"].config_source, e["segment.bytes"].config_type) == (
        "1073741824", DEFAULT, 3)
    assert (e["cleanup.policy"].value, e["cleanup.policy"].config_type) == ("delete", 7)
    assert all(not x.read_only and not x.is_sensitive and x.documentation is None and x.synonyms == []
               for x in r.configs)


async def test_topic_synonyms_after_topic_and_cluster_changes(c: Cluster) -> None:
    await topic(c, "t", retention_ms="1000")
    await altered(c, TOPIC, "t", cleanup_policy="compact, delete")
    await altered(c, BROKER, "", log_segment_bytes="2000000", log_retention_hours="5", log_roll_ms="7777")
    [r] = (await c.req(describe((TOPIC, "t"), synonyms=True), 4)).results
    e = by_name(r)
    assert (e["cleanup.policy"].value, synonyms(e["cleanup.policy"])) == (
        "compact,delete", [("cleanup.policy", "compact,delete", TOPIC_CONFIG), ("log.cleanup.policy", "delete", DEFAULT)])
    assert (e["segment.bytes"].value, e["segment.bytes"].config_source, synonyms(e["segment.bytes"])) == (
        "2000000", DYNAMIC_DEFAULT, [("log.segment.bytes", "2000000", DYNAMIC_DEFAULT),
                                     ("log.segment.bytes", "1073741824", DEFAULT)])
    # log.retention.hours is not dynamic: the node ignores it.
    assert synonyms(e["retention.ms"]) == [("retention.ms", "1000", TOPIC_CONFIG)]
    assert (e["segment.ms"].value, synonyms(e["segment.ms"])) == (
        "7777", [("log.roll.ms", "7777", DYNAMIC_DEFAULT), ("log.roll.hours", "168", DEFAULT)])
    # Only the keys asked for; synonyms off.
    [r] = (await c.req(describe((TOPIC, "t", ["segment.ms", "nope"])), 4)).results
    assert [(x.name, x.value, x.config_source, x.synonyms) for x in r.configs] == [
        ("segment.ms", "7777", DYNAMIC_DEFAULT, [])]


async def test_topic_errors(c: Cluster) -> None:
    r = await c.req(describe((TOPIC, "missing"), (TOPIC, "bad/name"), (TOPIC, "")), 4)
    assert [(x.resource_name, x.error_code, x.error_message, x.configs) for x in r.results] == [
        ("missing", E.UNKNOWN_TOPIC_OR_PARTITION, "", []),
        ("bad/name", E.INVALID_TOPIC_EXCEPTION, "Topic name is invalid: 'bad/name' contains one or more characters "
                                                "other than ASCII alphanumerics, '.', '_' and '-'", []),
        ("", E.INVALID_TOPIC_EXCEPTION, "Topic name is invalid: the empty string is not allowed", [])]


async def test_broker_lists_this_nodes_config(c: Cluster) -> None:
    [r] = (await c.req(describe((BROKER, NODE), synonyms=True), 4)).results
    assert r.error_code == 0
    e = by_name(r)
    public = {n for n, d in BROKER_CONFIGS.items() if not d.internal}
    assert public <= set(e) and "kraftsim.http.listen" in set(e) - public
    assert (e["node.id"].value, e["node.id"].config_source, e["node.id"].read_only) == (NODE, STATIC, True)
    assert synonyms(e["broker.id"]) == [("broker.id", NODE, STATIC), ("broker.id", "-1", DEFAULT)]
    assert (e["num.io.threads"].value, e["num.io.threads"].config_source, e["num.io.threads"].read_only) == (
        "8", DEFAULT, False)
    assert (e["ssl.key.password"].value, e["ssl.key.password"].is_sensitive, e["ssl.key.password"].config_type) == (
        None, True, 9)
    # Not a config Kafka knows: of unknown type, so sensitive.
    http = e["kraftsim.http.listen"]
    assert (http.value, http.is_sensitive, http.read_only, http.config_type) == (None, True, True, 0)
    [r] = (await c.req(describe((BROKER, ""), synonyms=True), 4)).results
    assert (r.error_code, r.configs) == (0, [])


async def test_broker_dynamic_configs_as_the_node_keeps_them(c: Cluster) -> None:
    await altered(c, BROKER, "", log_retention_ms="5000", log_retention_hours="3", max_connections="100",
                  ssl_keystore_password="secret", listener_name_controller_ssl_keystore_password="hush",
                  log_cleaner_threads="oops")
    await altered(c, BROKER, NODE, log_retention_ms="6000", listener_name_controller_ssl_keystore_password="hush",
                  max_connections="50")
    [default, own] = (await c.req(describe((BROKER, ""), (BROKER, NODE), synonyms=True), 4)).results
    # Non-dynamic, unprefixed security, per-broker-only and unparsable values are dropped.
    assert sorted((x.name, x.value, x.config_source) for x in default.configs) == [
        ("log.retention.ms", "5000", DYNAMIC_DEFAULT), ("max.connections", "100", DYNAMIC_DEFAULT)]
    e = by_name(own)
    assert (e["log.retention.ms"].value, synonyms(e["log.retention.ms"])) == (
        "6000", [("log.retention.ms", "6000", DYNAMIC_BROKER), ("log.retention.ms", "5000", DYNAMIC_DEFAULT),
                 ("log.retention.hours", "168", DEFAULT)])
    hidden = e["listener.name.controller.ssl.keystore.password"]
    assert (hidden.value, hidden.is_sensitive, hidden.config_source, synonyms(hidden)) == (
        None, True, DYNAMIC_BROKER, [("listener.name.controller.ssl.keystore.password", None, DYNAMIC_BROKER)])
    assert e["max.connections"].value == "50" and not e["max.connections"].read_only


async def test_broker_errors_and_other_types(c: Cluster) -> None:
    r = await c.req(describe((BROKER, "1"), (BROKER, "x"), (BROKER_LOGGER, ""), (BROKER_LOGGER, "1"),
                             (CLIENT_METRICS, "")), 4)
    assert [(x.resource_type, x.error_code, x.error_message) for x in r.results] == [
        (BROKER, E.INVALID_REQUEST, f"Unexpected broker id, expected {NODE} or empty string, but received 1"),
        (BROKER, E.INVALID_REQUEST, "Broker id must be an integer, but it is: x"),
        (BROKER_LOGGER, E.INVALID_REQUEST, "Broker id must not be empty"),
        (BROKER_LOGGER, E.INVALID_REQUEST, f"Unexpected broker id, expected {NODE} but received 1"),
        (CLIENT_METRICS, E.INVALID_REQUEST, "Client metrics subscription name must not be empty")]


async def test_loggers_and_client_metrics(c: Cluster) -> None:
    [r] = (await c.req(describe((BROKER_LOGGER, NODE, ["root", "kraftsim.controller"])), 4)).results
    assert sorted((x.name, x.config_source, x.read_only) for x in r.configs) == [
        ("kraftsim.controller", LOGGER, False), ("root", LOGGER, False)]
    assert all(x.value in ("FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE") for x in r.configs)
    await altered(c, CLIENT_METRICS, "sub", metrics="org.apache", interval_ms="1000")
    r = await c.req(describe((CLIENT_METRICS, "sub", ["metrics"]), (CLIENT_METRICS, "none")), 4)
    # All of a subscription's configs, whatever the keys asked, in Kafka's order.
    assert [[(x.name, x.value, x.config_source) for x in res.configs] for res in r.results] == [
        [("interval.ms", "1000", 7), ("metrics", "org.apache", 7)], []]


async def test_an_unknown_resource_type_fails_the_whole_request(c: Cluster) -> None:
    r = await c.req(describe((TOPIC, "t"), (99, "x")), 4)
    assert [(x.resource_type, x.error_code, x.error_message) for x in r.results] == [
        (TOPIC, E.INVALID_REQUEST, generic_message(E.INVALID_REQUEST)),
        (99, E.INVALID_REQUEST, generic_message(E.INVALID_REQUEST))]


async def test_a_resource_named_again_is_answered_again(c: Cluster) -> None:
    await topic(c, "t", retention_ms="1000")
    r = await c.req(describe(*[(TOPIC, "t", ["retention.ms"])] * 5000, (TOPIC, "t", ["segment.ms"])), 4)
    assert len(r.results) == 5001
    assert {(x.resource_name, tuple((e.name, e.value) for e in x.configs)) for x in r.results[:5000]} == {
        ("t", (("retention.ms", "1000"),))}
    assert [e.name for e in r.results[-1].configs] == ["segment.ms"]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
async def test_every_version(c: Cluster, version: int) -> None:
    await topic(c, "t")
    [r] = (await c.req(describe((TOPIC, "t", ["retention.ms"]), synonyms=version > 0, docs=version > 2),
                       version)).results
    [e] = r.configs
    assert (e.name, e.value, e.read_only, e.is_sensitive) == ("retention.ms", "604800000", False, False)
    # ConfigSource from v1, ConfigType from v3: older versions read their defaults.
    assert e.config_source == (DEFAULT if version >= 1 else -1)
    assert e.config_type == (5 if version >= 3 else 0)
    assert e.documentation == (None if version >= 3 else "")  # not on the wire before v3: the schema default


@pytest.fixture
async def acl_decides(tmp_path: Path) -> Any:
    """The StandardAuthorizer, User:ANONYMOUS not a super user, allowed where no ACL names the
    resource: an ACL for someone else shuts it out."""
    c = Cluster(tmp_path, authorizer_class_name=STANDARD_AUTHORIZER, super_users="User:admin",
                allow_everyone_if_no_acl_found="true")
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


async def test_describe_configs_on_the_topic_or_the_cluster(acl_decides: Any) -> None:
    c = acl_decides
    await topic(c, "mine")
    await topic(c, "theirs")
    both = describe((BROKER, NODE, ["node.id"]), (TOPIC, "theirs"), (BROKER_LOGGER, NODE, ["root"]),
                    (TOPIC, "mine", ["retention.ms"]))
    r = await c.req(both, 4)
    assert [(x.resource_name, x.error_code, len(x.configs)) for x in r.results] == [
        (NODE, 0, 1), ("theirs", 0, len(TOPIC_CONFIGS)), (NODE, 0, 1), ("mine", 0, 1)]
    await grant(c, acl("theirs", principal="User:bob", op=DESCRIBE_CONFIGS_OP))
    await grant(c, acl("kafka-cluster", rtype=CLUSTER, principal="User:bob", op=DESCRIBE_CONFIGS_OP))
    r = await c.req(both, 4)
    # Refused resources come last, in request order, with the error's default message.
    assert [(x.resource_type, x.resource_name, x.error_code, x.error_message, len(x.configs)) for x in r.results] == [
        (TOPIC, "mine", 0, "", 1),
        (BROKER, NODE, E.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", 0),
        (TOPIC, "theirs", E.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.", 0),
        (BROKER_LOGGER, NODE, E.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", 0)]


def test_defaults_of_kraftsims_own_are_the_ones_shown() -> None:
    """A config server.properties leaves out shows the default in force: Kafka's, except where
    kraftsim runs with one of its own (a controller listener rather than a broker's)."""
    from kraftsim.controller.configs.dynamic_broker_config import BrokerConfigView
    from kraftsim.controller.configs.server_config import Config
    from tests.controller_harness import WriteHarness

    h = WriteHarness()
    h.ctx.config = Config({"process.roles": "controller", "node.id": "21", "controller.quorum.voters": "21@127.0.0.1:9093"})
    view = BrokerConfigView(h.ctx)
    assert view.value("listeners") == "CONTROLLER://127.0.0.1:9093"
    assert view.synonyms("controller.listener.names", False) == [("controller.listener.names", "CONTROLLER", DEFAULT)]
    assert (view.value("num.io.threads"), view.value("broker.id"), view.value("log.dirs")) == ("8", "21", None)


async def test_a_44_controller_lists_44s_broker_configs(tmp_path: Path) -> None:
    """kraftsim.release=4.4: 4.4's definitions (no ZooKeeper configs, cordoned.log.dirs, 4.x's
    defaults, advertised.listeners no longer dynamic), in the order a Kafka 4.4.0 node answered
    (its first names; tests/kafka/test_release_44.py compares the whole answer)."""
    c = Cluster(tmp_path, kraftsim_release="4.4")
    await c.start()
    try:
        [r] = (await c.req(describe((BROKER, NODE)), 4)).results
    finally:
        await c.stop()
    e = by_name(r)
    assert "zookeeper.connect" not in e and "inter.broker.protocol.version" not in e
    assert (e["cordoned.log.dirs"].value, e["cordoned.log.dirs"].read_only) == ("", False)
    assert (e["group.coordinator.threads"].value, e["advertised.listeners"].read_only) == ("4", True)
    defined = [x.name for x in r.configs if not x.name.startswith("kraftsim.")]
    assert defined[:8] == ["log.cleaner.min.compaction.lag.ms", "offsets.topic.num.partitions",
                           "sasl.oauthbearer.jwks.endpoint.refresh.ms", "remote.log.metadata.manager.listener.name",
                           "log.flush.interval.messages", "controller.socket.timeout.ms", "log.flush.interval.ms",
                           "principal.builder.class"]

"""Authorization where Kafka 3.9's ControllerApis asks for it, against a real Kafka 3.9
controller (differential), both sides with the StandardAuthorizer and the same config.

The client is User:ANONYMOUS and not a super user; ``allow.everyone.if.no.acl.found=true``
lets it set the scene (a broker, topics), then one CreateAcls leaves it DESCRIBE on the cluster
and nothing else there, DESCRIBE on topic ``seen``, CREATE on topic ``made``, and topic
``kept`` with an ACL for someone else. (Kafka's controller must first register itself over its
own listener as User:ANONYMOUS, so a pair that refuses everything from the start would never
come up.) Every refusal is compared whole; "Request ... is not authorized." messages after the
REQUEST_TEXT normalisation."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kraftsim.controller.envelope import serialize_principal
from kraftsim.controller.managers.acls import STANDARD_AUTHORIZER
from kraftsim.rpc import frames
from kraftsim.rpc.messages import (
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    AssignReplicasToDirsRequest,
    BeginQuorumEpochRequest,
    ControllerRegistrationRequest,
    CreatePartitionsRequest,
    DescribeClusterRequest,
    EndQuorumEpochRequest,
    EnvelopeRequest,
    VoteRequest,
)
from kraftsim.rpc.messages import CreateAclsRequest as CA
from kraftsim.rpc.messages import IncrementalAlterConfigsRequest as IAC
from tests.acl_requests import ALLOW, ALTER, CLUSTER, CREATE, DESCRIBE, READ, acl, describe_request
from tests.kafka import differential as d
from tests.kafka.conftest import PairNodes, close, connect
from tests.kafka.differential import Call, TopicSpec
from tests.kafka.test_configs import alter
from tests.kafka.test_describe_configs import describe as describe_configs
from tests.kafka.test_elections import elect
from tests.kafka.test_raft_rpcs import describe_quorum, fetch, fetch_snapshot
from tests.kafka.test_reassignments import listed, reassign

pytestmark = pytest.mark.kafka

ANONYMOUS = "User:ANONYMOUS"
METADATA = "__cluster_metadata"
DELETE = 6  # AclOperation.DELETE


def grants() -> d.Builder:
    return lambda side: CA(creations=[
        acl("kafka-cluster", rtype=CLUSTER, op=DESCRIBE, principal=ANONYMOUS, perm=ALLOW),
        acl("seen", op=DESCRIBE, principal=ANONYMOUS),
        acl("made", op=CREATE, principal=ANONYMOUS),
        acl("kept", op=READ, principal="User:bob"),
    ])


def grow(*names: str, count: int = 2) -> d.Builder:
    return lambda side: CreatePartitionsRequest(timeout_ms=30_000, topics=[
        CreatePartitionsRequest.CreatePartitionsTopic(name=n, count=count, assignments=None) for n in names])


def allocate_producer_ids(broker_id: int) -> d.Builder:
    return lambda side: AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=side.epochs.get(broker_id, -1))


def alter_partition(broker_id: int) -> d.Builder:
    return lambda side: AlterPartitionRequest(broker_id=broker_id, broker_epoch=side.epochs.get(broker_id, -1),
                                              topics=[])


def assign_dirs(broker_id: int) -> d.Builder:
    return lambda side: AssignReplicasToDirsRequest(broker_id=broker_id,
                                                    broker_epoch=side.epochs.get(broker_id, -1), directories=[])


def register_controller() -> d.Builder:
    return lambda side: ControllerRegistrationRequest(
        controller_id=3001, incarnation_id=uuid.UUID(int=3001), zk_migration_ready=False,
        listeners=[ControllerRegistrationRequest.Listener(name="CONTROLLER", host="localhost", port=9999,
                                                          security_protocol=0)], features=[])


def vote() -> d.Builder:
    return lambda side: VoteRequest(cluster_id=side.cluster_id, voter_id=3000, topics=[VoteRequest.TopicData(
        topic_name=METADATA, partitions=[VoteRequest.PartitionData(partition_index=0, candidate_epoch=1,
                                                                   candidate_id=3001, last_offset_epoch=0,
                                                                   last_offset=0)])])


def begin_epoch() -> d.Builder:
    return lambda side: BeginQuorumEpochRequest(cluster_id=side.cluster_id, topics=[
        BeginQuorumEpochRequest.TopicData(topic_name=METADATA, partitions=[
            BeginQuorumEpochRequest.PartitionData(partition_index=0, leader_id=3001, leader_epoch=1)])])


def end_epoch() -> d.Builder:
    return lambda side: EndQuorumEpochRequest(cluster_id=side.cluster_id, topics=[])


async def test_authorization(pair_factory: Callable[..., PairNodes]) -> None:
    pair = await connect(pair_factory("authz", authorizer_class_name=STANDARD_AUTHORIZER, super_users="User:admin",
                                      allow_everyone_if_no_acl_found="true"))
    try:
        t = await d.check(pair, [
            Call("register 1", d.register(1)),
            Call("unfence 1", d.heartbeat(1)),
            Call("topics", d.create_topics(TopicSpec("seen", 1, 1), TopicSpec("kept", 1, 1),
                                           TopicSpec("free", 1, 1))),
            Call("the grants", grants()),
            Call("the ACLs", lambda side: describe_request()),
            # DESCRIBE_CONFIGS: on the cluster (which now has ACLs) or on each topic.
            Call("describe configs", describe_configs((2, "seen"), (2, "free", ["retention.ms"]), (4, "3000"),
                                                      (2, "kept"), (8, "3000"), (16, "x"), (2, "missing"))),
            # The cluster now has ACLs, none allowing anything but DESCRIBE.
            Call("register 2", d.register(2)),
            Call("heartbeat 1", d.heartbeat(1)),
            Call("unregister 1", d.unregister(1)),
            Call("producer ids", allocate_producer_ids(1)),
            Call("alter partition", alter_partition(1)),
            Call("assign directories", assign_dirs(1)),
            Call("register a controller", register_controller()),
            Call("update features", d.update_features(("metadata.version", 21, 1))),
            Call("fetch", fetch(0)),
            Call("fetch v12", fetch(0, version=12), 12),
            Call("fetch a snapshot", fetch_snapshot(1, 1)),
            Call("vote", vote(), 1),
            Call("begin an epoch", begin_epoch(), 1),
            Call("end an epoch", end_epoch(), 1),
            Call("describe the quorum (DESCRIBE is allowed)", describe_quorum(), 2),
            # Topics: CREATE on the cluster is gone, so each topic is asked.
            Call("create", d.create_topics(TopicSpec("made", 1, 1), TopicSpec("kept", 1, 1),
                                           TopicSpec("other", 1, 1))),
            Call("grow", grow("seen", "kept", "free")),
            Call("delete by name", d.delete_topics("seen", "kept", "missing")),
            Call("delete by id", d.delete_topics("seen", "kept", by_id=True)),
            Call("delete free", d.delete_topics("free")),
        ])
    finally:
        await close(pair)

    assert {t.error(label) for label in ("register 2", "heartbeat 1", "unregister 1", "producer ids",
                                         "alter partition", "assign directories", "register a controller",
                                         "update features", "fetch", "fetch v12", "fetch a snapshot", "vote",
                                         "begin an epoch", "end an epoch")} == {31}  # CLUSTER_AUTHORIZATION_FAILED
    assert t.response("update features")["error_message"] == "Request <request> is not authorized."
    assert t.error("describe the quorum (DESCRIBE is allowed)") == 0

    def by_name(label: str, field: str) -> dict[str, int]:
        return {r["name"]: r["error_code"] for r in t.response(label)[field]}

    assert by_name("create", "topics") == {"made": 0, "kept": 29, "other": 0}  # TOPIC_AUTHORIZATION_FAILED
    assert by_name("grow", "results") == {"seen": 29, "kept": 29, "free": 0}
    assert by_name("delete by name", "responses") == {"seen": 29, "kept": 29, "missing": 3}
    refused_ids = t.response("delete by id")["responses"]
    assert sorted(str(r["name"]) for r in refused_ids) == ["None", "seen"]  # kept is not describable
    assert t.record_types("delete free") == ["RemoveTopicRecord"]
    # Allowed resources first, then the refused ones, each in request order.
    assert [(r["resource_name"], r["error_code"]) for r in t.response("describe configs")["results"]] == [
        ("free", 0), ("missing", 3), ("seen", 29), ("3000", 31), ("kept", 29), ("3000", 31), ("x", 31)]


async def test_the_cluster_checks_other_apis_already_had(pair_factory: Callable[..., PairNodes]) -> None:
    """The same ACLs in front of the APIs kraftsim checked before: ElectLeaders, the
    reassignment APIs, the config and quota APIs, SCRAM and DescribeCluster."""
    pair = await connect(pair_factory("authz-more", authorizer_class_name=STANDARD_AUTHORIZER,
                                      super_users="User:admin", allow_everyone_if_no_acl_found="true"))
    try:
        t = await d.check(pair, [
            Call("register 1", d.register(1)),
            Call("unfence 1", d.heartbeat(1)),
            Call("topics", d.create_topics(TopicSpec("seen", 1, 1))),
            Call("the grants", grants()),
            Call("the ACLs", lambda side: describe_request()),
            # DESCRIBE_CONFIGS: on the cluster (which now has ACLs) or on each topic.
            Call("describe configs", describe_configs((2, "seen"), (2, "free", ["retention.ms"]), (4, "3000"),
                                                      (2, "kept"), (8, "3000"), (16, "x"), (2, "missing"))),
            Call("elect", elect(0, {"seen": [0]})),
            Call("elect everything", elect(0, None)),
            Call("reassign", reassign({"seen": {0: [1]}})),
            Call("list reassignments (DESCRIBE is allowed)", listed(None)),
            Call("alter a topic's configs", alter((2, "seen", {"retention.ms": "1"}))),
            Call("alter the brokers' configs", alter((4, "", {"log.retention.ms": "1"}))),
            Call("incrementally", lambda side: IAC(resources=[IAC.AlterConfigsResource(
                resource_type=2, resource_name="seen", configs=[IAC.AlterableConfig(
                    name="retention.ms", config_operation=0, value="1")])])),
            Call("quotas", d.alter_client_quotas((d.user_entity("u"), [("producer_byte_rate", 1.0)]))),
            Call("scram", d.alter_scram(upsertions=[d.scram_upsertion("u")])),
            Call("describe the cluster", lambda side: DescribeClusterRequest(
                include_cluster_authorized_operations=True, endpoint_type=2), 1),
        ])
    finally:
        await close(pair)
    assert t.error("elect everything") == 31 and t.error("reassign") == 31
    assert t.response("quotas")["entries"][0]["error_code"] == 31
    assert t.response("reassign")["responses"][0]["partitions"][0]["error_message"] == \
        "Request <request> is not authorized."
    assert t.error("list reassignments (DESCRIBE is allowed)") == 0


def as_alice(build: d.Builder, version: int) -> d.Builder:
    """``build``'s request inside an Envelope from the super user, for User:alice."""
    def envelope(side: d.Side) -> Any:
        data = frames.encode_request(build(side), version, 77, "the-client")[4:]
        return EnvelopeRequest(request_data=data, request_principal=serialize_principal("User:alice"),
                               client_host_address=b"\x0a\x01\x02\x03")
    return envelope


async def test_grants_on_the_cluster_for_a_forwarded_principal(pair_factory: Callable[..., PairNodes]) -> None:
    """CREATE, DELETE and ALTER on the cluster stand for every topic; without them alice is
    asked topic by topic (and has nothing)."""
    pair = await connect(pair_factory("authz-forwarded", authorizer_class_name=STANDARD_AUTHORIZER,
                                      super_users=ANONYMOUS, allow_everyone_if_no_acl_found="false"))
    alice = "User:alice"
    try:
        t = await d.check(pair, [
            Call("register 1", d.register(1)),
            Call("unfence 1", d.heartbeat(1)),
            Call("topics", d.create_topics(TopicSpec("a", 1, 1), TopicSpec("b", 1, 1))),
            Call("alice may not create", as_alice(d.create_topics(TopicSpec("c", 1, 1)), 7)),
            Call("nor delete", as_alice(d.delete_topics("a", by_id=True), 6)),
            Call("nor grow", as_alice(grow("b"), 3)),
            Call("nor update features", as_alice(d.update_features(("metadata.version", 21, 1)), 1)),
            Call("nor unregister", as_alice(d.unregister(1), 0)),
            Call("grant on the cluster", lambda side: CA(creations=[
                acl("kafka-cluster", rtype=CLUSTER, op=op, principal=alice) for op in (CREATE, DELETE, ALTER)])),
            Call("the ACLs", lambda side: describe_request()),
            # DESCRIBE_CONFIGS: on the cluster (which now has ACLs) or on each topic.
            Call("describe configs", describe_configs((2, "seen"), (2, "free", ["retention.ms"]), (4, "3000"),
                                                      (2, "kept"), (8, "3000"), (16, "x"), (2, "missing"))),
            Call("alice creates", as_alice(d.create_topics(TopicSpec("c", 1, 1), TopicSpec("a", 1, 1)), 7)),
            Call("alice deletes", as_alice(d.delete_topics("a", "missing"), 6)),
            Call("alice deletes by id", as_alice(d.delete_topics("b", by_id=True), 6)),
            Call("alice still may not grow (ALTER per topic)", as_alice(grow("c"), 3)),
            Call("alice updates features", as_alice(d.update_features(("metadata.version", 21, 1)), 1)),
        ])
    finally:
        await close(pair)
    inner = {e["step"]: e["response"]["response_data"]["inner"] for e in t if e["step"].startswith("alice")}
    assert {r["name"]: r["error_code"] for r in inner["alice creates"]["topics"]} == {"c": 0, "a": 36}
    assert {r["name"]: r["error_code"] for r in inner["alice deletes"]["responses"]} == {"a": 0, "missing": 3}
    assert inner["alice still may not grow (ALTER per topic)"]["results"][0]["error_code"] == 29
    assert t.record_types("alice deletes by id") == ["RemoveTopicRecord"]

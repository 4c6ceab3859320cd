"""The APIs a KRaft broker needs, end to end over a real socket: each one routed, answered after
commit, and failing whole with the error response its Kafka request class builds; ApiVersions
with exactly what is served; the controller's own registration and DescribeCluster."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

from kraftsim.metadata.image.configs import TOPIC
from kraftsim.raft.apis import RaftApis
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.error_codes import ErrorCode as E
from kraftsim.rpc.messages import (
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    AssignReplicasToDirsRequest,
    ControllerRegistrationRequest,
    CreatePartitionsRequest,
    DescribeClusterRequest,
    IncrementalAlterConfigsRequest,
    UpdateFeaturesRequest,
)
from tests import harness
from tests.test_controller import CT, Cluster, log_records

CP = CreatePartitionsRequest
IAC = IncrementalAlterConfigsRequest
AP = AlterPartitionRequest
AR = AssignReplicasToDirsRequest
NODE = harness.NODE_ID

# What a real Kafka 3.9.2 controller advertises on its controller listener (ApiVersions v4).
KAFKA_39_CONTROLLER_APIS = {
    1: (0, 17), 7: (0, 3), 17: (0, 1), 18: (0, 4), 19: (0, 7), 20: (0, 6), 29: (0, 3), 30: (0, 3), 31: (0, 3),
    32: (0, 4), 33: (0, 2), 36: (0, 2), 37: (0, 3), 38: (0, 3), 39: (0, 2), 40: (0, 2), 41: (0, 3), 43: (0, 2),
    44: (0, 1), 45: (0, 0), 46: (0, 0), 49: (0, 1), 50: (0, 0), 51: (0, 0), 52: (0, 1), 53: (0, 1), 54: (0, 1),
    55: (0, 2), 56: (0, 3), 57: (0, 1), 58: (0, 0), 59: (0, 1), 60: (0, 1), 62: (0, 4), 63: (0, 1), 64: (0, 0),
    67: (0, 0), 70: (0, 0), 73: (0, 0), 80: (0, 0), 81: (0, 0), 82: (0, 0),
}
RUNNING_CLUSTER_APIS = {ApiKey.ENVELOPE, ApiKey.CREATE_PARTITIONS, ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALLOCATE_PRODUCER_IDS,
              ApiKey.ALTER_PARTITION, ApiKey.ASSIGN_REPLICAS_TO_DIRS, ApiKey.DESCRIBE_CLUSTER,
              ApiKey.CONTROLLER_REGISTRATION}


async def test_api_versions_lists_exactly_what_is_served_with_kafkas_ranges(c: Cluster) -> None:
    assert c.client is not None
    resp = await c.client.negotiate()
    advertised = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    served = set(c.running.server.dispatcher.routes) | {ApiKey.API_VERSIONS}
    assert set(advertised) == served
    assert RUNNING_CLUSTER_APIS <= served
    for key, rng in advertised.items():
        assert KAFKA_39_CONTROLLER_APIS.get(key) == rng, key
    # Besides the routes: Envelope, ApiVersions, the Raft APIs, DescribeUserScramCredentials,
    # DescribeDelegationToken and ControlledShutdown, which a Kafka controller lists but answers
    # with an error without an event (scram_credentials.py, delegation_tokens.py,
    # controlled_shutdown.py), and the SASL APIs (sasl.py).
    assert {r.api_key for r in c.controller.managers.routes()} | {ApiKey.ENVELOPE, ApiKey.API_VERSIONS} | \
        set(RaftApis.API_KEYS) | {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_DELEGATION_TOKEN,
                                  ApiKey.CONTROLLED_SHUTDOWN, ApiKey.SASL_HANDSHAKE,
                                  ApiKey.SASL_AUTHENTICATE} == served


async def test_create_partitions_and_incremental_alter_configs(c: Cluster) -> None:
    epoch, _ = await c.register(1)
    await c.unfence(1, epoch)
    r = await c.req(CT(topics=[CT.CreatableTopic(name="t", num_partitions=1, replication_factor=1)], timeout_ms=5000), 7)
    assert r.topics[0].error_code == 0
    r = await c.req(CP(topics=[CP.CreatePartitionsTopic(name="t", count=3, assignments=None)], timeout_ms=5000), 3)
    assert [(x.name, x.error_code) for x in r.results] == [("t", 0)]
    assert len(c.controller.image.topics.by_name["t"].partitions) == 3
    r = await c.req(IAC(resources=[IAC.AlterConfigsResource(resource_type=2, resource_name="t", configs=[
        IAC.AlterableConfig(name="retention.ms", config_operation=0, value="60000")])]), 1)
    assert [(x.resource_name, x.error_code) for x in r.responses] == [("t", 0)]
    assert c.controller.image.configs.get(TOPIC, "t") == {"retention.ms": "60000"}


async def test_whole_request_failures_are_each_apis_error_response(c: Cluster) -> None:
    """POLICY_VIOLATION for an operation over 10,000 records, as Kafka's getErrorResponse of
    each API shapes it: one result per requested topic or resource, names echoed."""
    epoch, _ = await c.register(1)
    await c.unfence(1, epoch)
    await c.req(CT(topics=[CT.CreatableTopic(name=n, num_partitions=1, replication_factor=1) for n in "ab"],
                   timeout_ms=5000), 7)
    r = await c.req(CP(topics=[CP.CreatePartitionsTopic(name=n, count=6000, assignments=None) for n in "ab"],
                       timeout_ms=5000), 3)
    assert [(x.name, x.error_code, x.error_message) for x in r.results] == [
        (n, E.POLICY_VIOLATION, "Unable to perform excessively large batch operation.") for n in "ab"]
    big = IAC.AlterConfigsResource(resource_type=4, resource_name="", configs=[
        IAC.AlterableConfig(name=f"k{i}", config_operation=0, value="v") for i in range(10_001)])
    r = await c.req(IAC(resources=[big, IAC.AlterConfigsResource(resource_type=8, resource_name="x")]), 1)
    assert [(x.resource_type, x.resource_name, x.error_code) for x in r.responses] == [
        (4, "", E.POLICY_VIOLATION), (8, "x", E.POLICY_VIOLATION)]
    assert c.controller.image.configs.get(4, "") == {}


async def test_allocate_producer_ids_alter_partition_and_assign_replicas(c: Cluster) -> None:
    d1 = uuid.uuid4()
    epoch, _ = await c.register(1, log_dir=d1)
    await c.unfence(1, epoch)
    r = await c.req(AllocateProducerIdsRequest(broker_id=1, broker_epoch=epoch), 0)
    assert (r.error_code, r.producer_id_start, r.producer_id_len) == (0, 0, 1000)
    r = await c.req(AllocateProducerIdsRequest(broker_id=1, broker_epoch=epoch), 0)
    assert r.producer_id_start == 1000
    r = await c.req(AllocateProducerIdsRequest(broker_id=1, broker_epoch=epoch + 1), 0)
    assert (r.error_code, r.producer_id_start, r.producer_id_len) == (E.STALE_BROKER_EPOCH, 0, 0)

    r = await c.req(CT(topics=[CT.CreatableTopic(name="t", num_partitions=1, replication_factor=1)], timeout_ms=5000), 7)
    tid = r.topics[0].topic_id
    parts = [AP.PartitionData(partition_index=0, leader_epoch=0, partition_epoch=0,
                              new_isr_with_epochs=[AP.BrokerState(broker_id=1, broker_epoch=epoch)])]
    r = await c.req(AP(broker_id=1, broker_epoch=epoch, topics=[AP.TopicData(topic_id=tid, partitions=parts)]), 3)
    assert [(p.error_code, p.leader_id, p.isr, p.partition_epoch) for p in r.topics[0].partitions] == [(0, 1, [1], 0)]
    r = await c.req(AP(broker_id=1, broker_epoch=epoch + 5, topics=[AP.TopicData(topic_id=tid, partitions=parts)]), 3)
    assert (r.error_code, r.topics) == (E.STALE_BROKER_EPOCH, [])  # AlterPartitionRequest.getErrorResponse

    r = await c.req(AR(broker_id=1, broker_epoch=epoch, directories=[AR.DirectoryData(id=d1, topics=[
        AR.TopicData(topic_id=tid, partitions=[AR.PartitionData(partition_index=0)])])]), 0)
    assert (r.error_code, r.directories[0].topics[0].partitions[0].error_code) == (0, 0)
    r = await c.req(AR(broker_id=1, broker_epoch=epoch + 5, directories=[]), 0)
    assert (r.error_code, r.directories) == (E.STALE_BROKER_EPOCH, [])


# ----- the controller's own registration (KIP-919) and DescribeCluster -------------------------

async def test_the_controller_registers_itself_with_its_bound_listener(c: Cluster) -> None:
    reg = c.controller.image.cluster.controllers[NODE]
    assert reg.listeners == {"CONTROLLER": ("127.0.0.1", c.running.server.port, 0)}
    assert reg.supported_features == {"kraft.version": (0, 1), "metadata.version": (1, 21)}
    assert reg.zk_migration_ready is False
    first = reg.incarnation_id
    await c.restart()
    await c.stop()
    regs = [(o, r) for o, n, r in log_records(c.tmp / "data") if n == "RegisterControllerRecord"]
    # Right after the bootstrap records, as a real 3.9 controller writes it; a new incarnation per start.
    assert regs[0][0] == 5 and len(regs) == 2 and regs[0][1].incarnation_id == first
    assert regs[1][1].incarnation_id != first
    assert [f.name for f in regs[0][1].features] == ["kraft.version", "metadata.version"]  # Java HashMap order
    assert [(e.name, e.host, e.port, e.security_protocol) for e in regs[1][1].end_points] == [
        ("CONTROLLER", "127.0.0.1", regs[1][1].end_points[0].port, 0)]


async def test_describe_cluster_on_a_controller(c: Cluster) -> None:
    r = await c.req(DescribeClusterRequest(include_cluster_authorized_operations=True, endpoint_type=2), 1)
    assert (r.error_code, r.error_message, r.endpoint_type, r.cluster_id, r.controller_id) == \
        (0, None, 2, c.cluster_id, NODE)
    assert [(b.broker_id, b.host, b.port, b.rack) for b in r.brokers] == [(NODE, "127.0.0.1", c.running.server.port,
                                                                           None)]
    assert r.cluster_authorized_operations == 8096  # CREATE..DESCRIBE, IDEMPOTENT_WRITE: as Kafka's reports
    r = await c.req(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=2), 1)
    assert r.cluster_authorized_operations == -(1 << 31)
    r = await c.req(DescribeClusterRequest(endpoint_type=1), 1)
    assert (r.error_code, r.error_message) == (E.MISMATCHED_ENDPOINT_TYPE, "The request was sent to an endpoint of "
                                              "type CONTROLLER, but we wanted an endpoint of type BROKER")
    r = await c.req(DescribeClusterRequest(endpoint_type=7), 1)
    assert (r.error_code, r.error_message, r.cluster_id) == (E.UNSUPPORTED_ENDPOINT_TYPE, "Unsupported endpoint type 7", "")
    r = await c.req(DescribeClusterRequest(), 0)  # v0 always means BROKER endpoints: never served by a controller
    assert (r.error_code, r.error_message) == (E.INVALID_REQUEST, "The request was sent to an endpoint of type "
                                               "CONTROLLER, but we wanted an endpoint of type BROKER")


async def test_controller_registration_rpc_writes_register_controller_record(c: Cluster) -> None:
    req = ControllerRegistrationRequest
    r = await c.req(req(controller_id=3001, incarnation_id=uuid.UUID(int=9), zk_migration_ready=True,
                        listeners=[req.Listener(name="CONTROLLER", host="h", port=9095, security_protocol=1)],
                        features=[req.Feature(name="metadata.version", min_supported_version=1,
                                              max_supported_version=21)]), 0)
    assert (r.error_code, r.error_message) == (0, "")
    reg = c.controller.image.cluster.controllers[3001]
    assert (reg.zk_migration_ready, reg.listeners) == (True, {"CONTROLLER": ("h", 9095, 1)})
    r = await c.req(DescribeClusterRequest(endpoint_type=2), 1)
    assert [b.broker_id for b in r.brokers] == [NODE, 3001]


async def test_below_37iv0_no_registration_until_metadata_version_allows_it(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    shutil.rmtree(tmp_path / "data")
    c.cluster_id = harness.format_dir(c.config, release="3.6", cluster_id=c.cluster_id)
    await c.start()
    try:
        ctl = c.controller
        assert NODE not in ctl.image.cluster.controllers
        req = ControllerRegistrationRequest
        r = await c.req(req(controller_id=3001, incarnation_id=uuid.UUID(int=9)), 0)
        # ControllerRegistrationRequest.getErrorResponse: the code's generic message
        assert (r.error_code, r.error_message) == (E.UNSUPPORTED_VERSION, "The version of API is not supported.")
        r = await c.req(DescribeClusterRequest(endpoint_type=2), 1)
        assert (r.error_code, r.error_message) == (E.UNSUPPORTED_VERSION, "Direct-to-controller communication is "
                                                   "not supported with the current MetadataVersion.")
        uf = UpdateFeaturesRequest
        r = await c.req(uf(feature_updates=[uf.FeatureUpdateKey(feature="metadata.version", max_version_level=15,
                                                                upgrade_type=1)], timeout_ms=5000), 1)
        assert r.results[0].error_code == 0
        await harness.poll_until(lambda: NODE in ctl.image.cluster.controllers)  # registers once it may
    finally:
        await c.stop()


async def test_a_failed_self_registration_is_retried_after_a_backoff(tmp_path: Path, monkeypatch: Any) -> None:
    """Kafka's ControllerRegistrationManager backs off (100 ms, doubling) and sends again."""
    from kraftsim.controller.managers.controller_registrations import ControllerRegistrations
    from kraftsim.rpc.api_errors import ApiError
    from kraftsim.rpc.clock import ManualClock

    real = ControllerRegistrations.register_controller
    calls: list[int] = []

    def flaky(self: Any, request: Any, context: Any) -> Any:
        calls.append(1)
        if len(calls) <= 2:
            raise ApiError(E.REQUEST_TIMED_OUT, "try again")
        return real(self, request, context)

    monkeypatch.setattr(ControllerRegistrations, "register_controller", flaky)
    clock = ManualClock()
    c = Cluster(tmp_path, clock)
    running = await harness.start_controller(c.config, clock=clock)
    try:
        ctl = running.controller

        def wakeups() -> list[int]:
            return sorted(t for t, _, f in clock._sleepers if not f.done())

        await harness.poll_until(lambda: len(calls) == 1 and 100 in wakeups())  # retry in 100 ms
        assert NODE not in ctl.image.cluster.controllers
        clock.advance(100)
        await harness.poll_until(lambda: len(calls) == 2 and 300 in wakeups())  # then 200 ms later
        clock.advance(200)
        await harness.poll_until(lambda: NODE in ctl.image.cluster.controllers)
        assert len(calls) == 3
    finally:
        await running.stop()


async def test_controlled_shutdown_is_listed_but_fails_as_on_a_kafka_controller(c: Cluster) -> None:
    from kraftsim.rpc.messages import ControlledShutdownRequest

    for version in range(4):
        r = await c.req(ControlledShutdownRequest(broker_id=1, broker_epoch=2), version)
        assert (r.error_code, r.remaining_partitions) == (E.UNKNOWN_SERVER_ERROR, [])


def test_an_elect_leaders_error_answer_at_v0_carries_its_code_on_the_partitions() -> None:
    """ElectLeaders v0 has no top-level error code: Kafka sets it from v1 on, so a v0 error answer
    (a fuzzed request found one that did not encode) has it on the partitions alone."""
    from kraftsim.controller.managers.elections import error_response
    from kraftsim.rpc import frames
    from kraftsim.rpc.messages import ElectLeadersRequest as EL

    req = EL(topic_partitions=[EL.TopicPartitions(topic="t", partitions=[0, 1])], timeout_ms=1000)
    for version in (0, 1):
        answer = error_response(req, version, int(E.CLUSTER_AUTHORIZATION_FAILED), "denied")
        _, body = frames.decode_response(frames.encode_response(answer, version, 7)[4:], 43, version)
        assert body.error_code == (int(E.CLUSTER_AUTHORIZATION_FAILED) if version else 0)
        assert [(p.partition_id, p.error_code) for p in body.replica_election_results[0].partition_result] == [
            (0, E.CLUSTER_AUTHORIZATION_FAILED), (1, E.CLUSTER_AUTHORIZATION_FAILED)]


def test_error_counts_reads_what_every_slot_would_give() -> None:
    """audit._count reads only the schema's error code and struct fields of a struct: the same
    counts, first seen in the same order, as looking at every slot of every struct."""
    from collections import Counter

    from kraftsim.controller import audit
    from kraftsim.rpc.message import Struct
    from kraftsim.rpc.messages import AlterPartitionResponse, CreateTopicsResponse, DeleteTopicsResponse

    def every_slot(obj: Any, counts: Counter[int]) -> None:
        for attr in obj.__slots__:
            value = getattr(obj, attr, None)
            if attr == "error_code" and isinstance(value, int):
                counts[value] += 1
            elif isinstance(value, list):
                for item in value:
                    if isinstance(item, Struct):
                        every_slot(item, counts)
            elif isinstance(value, Struct):
                every_slot(value, counts)

    ct, ap = CreateTopicsResponse, AlterPartitionResponse
    responses = [
        ct(topics=[ct.CreatableTopicResult(name=f"t{i}", error_code=i % 3, topic_config_error_code=29,
                                           configs=[ct.CreatableTopicConfigs(name="a", value="b")])
                   for i in range(7)]),
        DeleteTopicsResponse(responses=[DeleteTopicsResponse.DeletableTopicResult(name="x", error_code=3)]),
        ap(error_code=41, topics=[ap.TopicData(partitions=[ap.PartitionData(error_code=c) for c in (0, 6, 6)])]),
        ct(),
    ]
    for r in responses:
        expected: Counter[int] = Counter()
        every_slot(r, expected)
        assert list(audit.error_counts(r).items()) == list(expected.items())


def test_whole_request_error_responses_mirror_every_element() -> None:
    """rpc.error_response's rule, on the arrays it builds one constructor call per element: one
    result per request element in order, the error's code (and message, where the API carries
    one) set and the identifying fields copied, everything else at its default; bare-string
    elements (DeleteTopics v0-5's names) take the general path alike."""
    from kraftsim.rpc.error_response import error_response
    from kraftsim.rpc.messages import (
        CreateTopicsResponse,
        DeleteTopicsRequest,
        DeleteTopicsResponse,
    )

    ct, dt = CreateTopicsResponse, DeleteTopicsResponse
    msg = "Excessively large number of partitions per request."
    req = CT(topics=[CT.CreatableTopic(name=n, num_partitions=3, replication_factor=2, configs=[
        CT.CreatableTopicConfig(name="cleanup.policy", value="compact")]) for n in ("b", "a", "b")])
    assert error_response(req, 7, E.POLICY_VIOLATION, msg) == ct(topics=[
        ct.CreatableTopicResult(name=n, error_code=E.POLICY_VIOLATION, error_message=msg) for n in ("b", "a", "b")])
    assert error_response(CT(), 7, E.POLICY_VIOLATION, msg) == ct(topics=[])
    ids = [uuid.uuid4(), uuid.uuid4()]
    d6 = DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=i) for i in ids])
    assert error_response(d6, 6, E.NOT_CONTROLLER, "gone", messages=False) == dt(responses=[
        dt.DeletableTopicResult(name=None, topic_id=i, error_code=E.NOT_CONTROLLER) for i in ids])
    d5 = DeleteTopicsRequest(topic_names=["x", "y"])
    assert error_response(d5, 5, E.NOT_CONTROLLER, None) == dt(responses=[
        dt.DeletableTopicResult(name=n, error_code=E.NOT_CONTROLLER) for n in ("x", "y")])

"""Envelope (api 58) end to end over a real socket, as a forwarding broker would send it: each
envelope error in Kafka's order, forwarded requests whose records carry through, NOT_CONTROLLER
hoisted to the envelope, and the audit line of a forwarded request.

Every envelope error code below is what a real Kafka 3.9.2 controller answered to the same
bytes (and a forwarded CreateTopics/IncrementalAlterConfigs/CreatePartitions/
AllocateProducerIds got byte-identical ResponseData)."""

from __future__ import annotations

import json
import logging
import struct
from typing import Any

import pytest

from kraftsim.controller.envelope import EnvelopeHandler, parse_principal, serialize_principal
from kraftsim.rpc import frames, registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.error_codes import ErrorCode as E
from kraftsim.rpc.messages import (
    AllocateProducerIdsRequest,
    ApiVersionsRequest,
    CreateTopicsRequest,
    EnvelopeRequest,
    IncrementalAlterConfigsRequest,
)
from tests.test_controller import CT, Cluster, log_records

CLIENT = b"\x0a\x01\x02\x03"  # 10.1.2.3


def envelope(inner: Any, version: int, correlation_id: int = 4242, *, principal: bytes | None | str = "User:alice",
             address: bytes = CLIENT, raw: bytes | None = None) -> Any:
    data = raw if raw is not None else frames.encode_request(inner, version, correlation_id, "the-client")[4:]
    p = serialize_principal(principal) if isinstance(principal, str) else principal
    return EnvelopeRequest(request_data=data, request_principal=p, client_host_address=address)


def unwrap(resp: Any, api_key: int, version: int) -> tuple[int, Any]:
    """(inner correlation id, inner response) from an EnvelopeResponse's ResponseData."""
    assert resp.error_code == 0 and resp.response_data is not None
    return frames.decode_response(resp.response_data, api_key, version)


def topic(name: str, partitions: int = 1) -> Any:
    return CT.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)


async def test_a_forwarded_create_topics_is_served_and_its_records_carry_through(c: Cluster,
                                                                               caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="kraftsim.audit")
    epoch, _ = await c.register(1)
    await c.unfence(1, epoch)
    resp = await c.req(envelope(CT(topics=[topic("fwd", 2)], timeout_ms=5000), 7, correlation_id=77))
    corr, inner = unwrap(resp, ApiKey.CREATE_TOPICS, 7)
    assert corr == 77  # the inner request's correlation id, at the inner version
    assert [(t.name, t.error_code, t.num_partitions) for t in inner.topics] == [("fwd", 0, 2)]
    await c.stop()
    names = [n for _, n, _ in log_records(c.tmp / "data") if n in ("TopicRecord", "PartitionRecord")]
    assert names == ["TopicRecord", "PartitionRecord", "PartitionRecord"]
    # One audit line for the forwarded request, naming the original client, not the broker.
    lines = [json.loads(r.getMessage().split(":", 1)[1]) for r in caplog.records if r.name == "kraftsim.audit"]
    fwd = [d for d in lines if d["requestHeader"]["requestApiKeyName"] == "CREATE_TOPICS"]
    assert len(fwd) == 1
    assert fwd[0]["isForwarded"] is True and fwd[0]["principal"] == "User:alice"
    assert fwd[0]["clientAddress"] == "10.1.2.3" and fwd[0]["requestHeader"]["clientId"] == "the-client"
    assert fwd[0]["requestHeader"]["correlationId"] == 77 and fwd[0]["outcome"] == {"NONE": 1}
    direct = [d for d in lines if d["requestHeader"]["requestApiKeyName"] == "BROKER_REGISTRATION"]
    assert len(direct) == 1 and direct[0]["isForwarded"] is False and direct[0]["principal"] == "User:ANONYMOUS"
    assert not any(d["requestHeader"]["requestApiKeyName"] == "BROKER_HEARTBEAT" for d in lines)


async def test_forwarded_admin_requests_get_their_own_error_responses(c: Cluster) -> None:
    """A forwarded request that fails is answered inside the envelope (ErrorCode NONE)."""
    r = await c.req(envelope(AllocateProducerIdsRequest(broker_id=5, broker_epoch=9), 0))
    assert unwrap(r, ApiKey.ALLOCATE_PRODUCER_IDS, 0)[1].error_code == E.STALE_BROKER_EPOCH
    iac = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=2, resource_name="nope", configs=[])])
    _, inner = unwrap(await c.req(envelope(iac, 1)), ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)
    assert [(x.error_code, x.error_message) for x in inner.responses] == [
        (E.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nope' does not exist.")]


ENVELOPE_ERRORS = [
    ("no principal", dict(principal=None), E.PRINCIPAL_DESERIALIZATION_FAILURE),
    ("bad principal version", dict(principal=b"\x00\x05zz"), E.PRINCIPAL_DESERIALIZATION_FAILURE),
    ("truncated principal", dict(principal=serialize_principal("User:bob")[:5]), E.PRINCIPAL_DESERIALIZATION_FAILURE),
    ("3-byte address", dict(address=b"\x01\x02\x03"), E.INVALID_REQUEST),
    ("principal checked before address", dict(principal=None, address=b""), E.PRINCIPAL_DESERIALIZATION_FAILURE),
    ("empty request data", dict(raw=b""), E.UNSUPPORTED_VERSION),
    ("unknown api key", dict(raw=b"\x03\xe7\x00\x00\x00\x00\x00\x01\x00\x00"), E.UNSUPPORTED_VERSION),
    ("not forwardable: Produce", dict(raw=b"\x00\x00\x00\x03\x00\x00\x00\x01\x00\x00"), E.INVALID_REQUEST),
    ("CreateTopics v99", dict(raw=b"\x00\x13\x00\x63\x00\x00\x00\x01\x00\x00\x00"), E.UNSUPPORTED_VERSION),
    ("truncated body", dict(raw=frames.encode_request(CreateTopicsRequest(topics=[topic("x")]), 7, 5, "c")[4:-3]),
     E.UNSUPPORTED_VERSION),
    # AddRaftVoter v0 (api 80, header v2: correlation id 5, client id "c", no tags), and no body.
    ("forwardable, its body missing: AddRaftVoter", dict(raw=b"\x00\x50\x00\x00\x00\x00\x00\x05\x00\x01c\x00"),
     E.UNSUPPORTED_VERSION),
]


@pytest.mark.parametrize("what,kw,code", ENVELOPE_ERRORS, ids=[e[0] for e in ENVELOPE_ERRORS])
async def test_envelope_errors(c: Cluster, what: str, kw: dict[str, Any], code: int) -> None:
    r = await c.req(envelope(CreateTopicsRequest(topics=[], timeout_ms=1), 7, **kw))
    assert (r.error_code, r.response_data) == (code, None)


async def test_apiversions_and_nested_envelopes_are_not_forwardable(c: Cluster) -> None:
    r = await c.req(envelope(ApiVersionsRequest(), 0))
    assert (r.error_code, r.response_data) == (E.INVALID_REQUEST, None)
    r = await c.req(envelope(envelope(CreateTopicsRequest(topics=[]), 7), 0))
    assert (r.error_code, r.response_data) == (E.INVALID_REQUEST, None)


async def test_trailing_bytes_and_a_null_client_id_are_accepted_as_kafka_does(c: Cluster) -> None:
    ct = CreateTopicsRequest(topics=[], timeout_ms=1)
    raw = frames.encode_request(ct, 7, 5, "x")[4:] + b"\x00\x01"
    assert unwrap(await c.req(envelope(ct, 7, raw=raw)), ApiKey.CREATE_TOPICS, 7)[0] == 5
    raw = struct.pack(">hhih", ApiKey.CREATE_TOPICS, 7, 9, -1) + b"\x00" + ct.encode(7)  # client id null
    assert unwrap(await c.req(envelope(ct, 7, raw=raw)), ApiKey.CREATE_TOPICS, 7)[0] == 9


async def test_not_controller_inside_becomes_the_envelopes_error(c: Cluster) -> None:
    """The broker's forwarding channel reacts to NOT_CONTROLLER on the envelope by looking for
    the new controller; a NOT_CONTROLLER buried in the inner response would not make it."""
    ctl = c.controller
    ctl.active = False  # what a controller that lost the leadership answers
    try:
        r = await c.req(envelope(CT(topics=[topic("x")], timeout_ms=5000), 7))
        assert (r.error_code, r.response_data) == (E.NOT_CONTROLLER, None)
        direct = await c.req(CT(topics=[topic("x")], timeout_ms=5000), 7)
        assert direct.topics[0].error_code == E.NOT_CONTROLLER
    finally:
        ctl.active = True


async def test_the_senders_cluster_action_is_checked_first(c: Cluster, caplog: Any) -> None:
    class DenyEnvelopes:
        def authorize(self, context: Any, operation: Any, resource_type: Any, name: str) -> bool:
            return context.api_key != ApiKey.ENVELOPE

    handler = c.running.server.dispatcher.routes[ApiKey.ENVELOPE].handler
    assert isinstance(handler, EnvelopeHandler)
    handler.authorizer = DenyEnvelopes()
    caplog.set_level(logging.INFO, logger="kraftsim.audit")
    r = await c.req(envelope(CreateTopicsRequest(topics=[]), 7, principal=None))  # bad principal too: not reached
    assert (r.error_code, r.response_data) == (E.CLUSTER_AUTHORIZATION_FAILED, None)
    lines = [r.getMessage() for r in caplog.records if r.name == "kraftsim.audit"]
    assert len(lines) == 1 and '"requestApiKeyName":"ENVELOPE"' in lines[0]
    assert '"outcome":{"CLUSTER_AUTHORIZATION_FAILED":1}' in lines[0]


def test_principal_serde_is_kafkas_default_principal_data() -> None:
    """DefaultKafkaPrincipalBuilder: an int16 version, then DefaultPrincipalData v0 (flexible)."""
    data = serialize_principal("User:alice", token_authenticated=True)
    assert data == b"\x00\x00" + b"\x05User" + b"\x06alice" + b"\x01" + b"\x00"
    assert parse_principal(data) == ("User:alice", True)
    assert parse_principal(data + b"junk") == ("User:alice", True)  # Kafka ignores what follows


def test_describe_quorum_hoists_not_leader_or_follower() -> None:
    """For DescribeQuorum the controller's "wrong node" error is NOT_LEADER_OR_FOLLOWER."""
    from kraftsim.rpc.dispatch import RequestContext
    from kraftsim.rpc.messages import DescribeQuorumResponse

    inner = RequestContext(ApiKey.DESCRIBE_QUORUM, 1, 3, "c", from_envelope=True)
    resp = DescribeQuorumResponse(error_code=E.NOT_LEADER_OR_FOLLOWER)
    assert EnvelopeHandler.wrap(inner, resp).error_code == E.NOT_CONTROLLER
    ok = EnvelopeHandler.wrap(inner, DescribeQuorumResponse(error_code=E.NOT_CONTROLLER))
    assert ok.error_code == 0 and ok.response_data is not None


async def test_every_forwardable_api_served_is_accepted_inside_an_envelope(c: Cluster) -> None:
    from kraftsim.rpc.forwardable import FORWARDABLE

    routes = c.running.server.dispatcher.routes
    served = sorted(k for k in FORWARDABLE if k in routes)
    assert {ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.INCREMENTAL_ALTER_CONFIGS,
            ApiKey.UPDATE_FEATURES, ApiKey.UNREGISTER_BROKER, ApiKey.ALLOCATE_PRODUCER_IDS} <= set(served)
    for key in served:
        for version in (routes[key].min_version, routes[key].max_version):
            body = registry.request_class(key)()
            r = await c.req(envelope(body, version, correlation_id=key * 100 + version))
            corr, inner = unwrap(r, key, version)
            assert corr == key * 100 + version and type(inner) is registry.response_class(key), (key, version)


async def test_forwarded_responses_are_byte_identical_to_kafkas(c: Cluster) -> None:
    """ResponseData a real Kafka 3.9.2 controller sent for the same forwarded requests
    (correlation id 77): response header v1, then the body at the inner version."""
    from kraftsim.rpc.messages import CreatePartitionsRequest as CP

    cp = CP(topics=[CP.CreatePartitionsTopic(name="nope", count=3)], timeout_ms=1000)
    r = await c.req(envelope(cp, 3, correlation_id=77))
    assert (r.error_code, r.response_data) == (0, b"\x00\x00\x00M\x00\x00\x00\x00\x00\x02\x05nope\x00\x03\x00\x00\x00")
    iac = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=4, resource_name="", configs=[IncrementalAlterConfigsRequest.AlterableConfig(
            name="log.retention.ms", config_operation=0, value="1000")])])
    r = await c.req(envelope(iac, 1, correlation_id=77))
    assert (r.error_code, r.response_data) == (0, b"\x00\x00\x00M\x00\x00\x00\x00\x00\x02\x00\x00\x00\x04\x01\x00\x00")
    r = await c.req(envelope(AllocateProducerIdsRequest(broker_id=1, broker_epoch=5), 0, correlation_id=77))
    assert (r.error_code, r.response_data) == (0, b"\x00\x00\x00M\x00\x00\x00\x00\x00\x00M" + b"\x00" * 12 + b"\x00")

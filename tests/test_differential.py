"""Our bytes against two independent codecs: kio 0.5.0 (generated from Kafka 3.9's schemas)
and kafka-python 3's schema-driven engine. For every (api key, version, direction) a peer
supports, random valid messages must encode byte-identically, and each side must decode the
other's bytes to the same value."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings

from kraftsim.metadata import records, versions
from kraftsim.rpc import frames, registry
from kraftsim.rpc.values import from_dict, to_dict
from tests.peers import (
    PeerCannotExpress,
    entity_schema,
    iter_message_versions,
    kio_peer,
    kp_peer,
    message_schema,
    normalize,
)
from tests.peers.strategies import neutral_values

CASES = list(iter_message_versions())
PEERS = {"kio": kio_peer, "kafka-python": kp_peer}


def _ours(api_key: int, is_request: bool) -> type:
    return registry.request_class(api_key) if is_request else registry.response_class(api_key)


def _neutral(obj: Any, version: int) -> Any:
    return normalize(to_dict(obj, version))


def _check_against(peer: Any, api_key: int, version: int, is_request: bool, value: dict[str, Any]) -> None:
    cls = _ours(api_key, is_request)
    ours = from_dict(cls, value, version).encode(version)
    try:
        theirs = peer.encode_body(api_key, version, is_request, value)
    except PeerCannotExpress:
        assume(False)
    assert ours == theirs, f"bytes differ for {cls.__name__} v{version}"
    assert _neutral(cls.decode(theirs, version), version) == normalize(value)
    expected = (peer.expected_decode(api_key, version, is_request, value)
                if hasattr(peer, "expected_decode") else value)
    assert normalize(peer.decode_body(api_key, version, is_request, ours)) == normalize(expected)


def _cases_for(peer: Any) -> list[tuple[int, int, bool]]:
    return [(k, v, r) for k, v, r in CASES if v in peer.supported_versions(k, r)]


def _id(c: tuple[int, int, bool]) -> str:
    return f"{_ours(c[0], c[2]).__name__}-v{c[1]}"


def _make_test(peer_name: str):  # type: ignore[no-untyped-def]
    peer = PEERS[peer_name]
    cases = _cases_for(peer)

    @pytest.mark.parametrize("api_key,version,is_request", cases, ids=[_id(c) for c in cases])
    @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=__import__("hypothesis").strategies.data())
    def test(api_key: int, version: int, is_request: bool, data: Any) -> None:
        value = data.draw(neutral_values(message_schema(api_key, is_request), version))
        _check_against(peer, api_key, version, is_request, value)

    return test


test_bodies_match_kio = _make_test("kio")
test_bodies_match_kafka_python = _make_test("kafka-python")


def test_kio_covers_every_api_version_we_define() -> None:
    """kio 0.5.0 is the Kafka 3.9 message set: the versions of our schemas that Kafka 3.9 has
    must be its versions (our schemas also have 4.x's: tests/kafka/test_release_schemas.py)."""
    r39 = versions.release("3.9").apis
    keys = [k for k in registry.api_keys() if k in r39]
    for api_key in keys:
        for is_request in (True, False):
            lo, hi = r39[api_key]
            assert set(range(lo, hi + 1)) <= set(_ours(api_key, is_request)._spec.versions())
            assert kio_peer.supported_versions(api_key, is_request) == list(range(lo, hi + 1)), (api_key, is_request)
    assert sorted(kio_peer.supported_api_keys()) == keys


@pytest.mark.parametrize("peer_name", sorted(PEERS))
@pytest.mark.parametrize("client_id", [None, "", "broker-1", "é"])
def test_request_headers_match(peer_name: str, client_id: str | None) -> None:
    peer = PEERS[peer_name]
    for api_key, version, is_request in _cases_for(peer):
        if not is_request:
            continue
        req = registry.request_class(api_key)()
        codec = frames.api_codec(api_key, version)
        out = bytearray()
        codec.enc_req_hdr(out, api_key, version, 2**31 - 1, client_id)
        assert bytes(out) == peer.encode_request_header(api_key, version, 2**31 - 1, client_id), (api_key, version)
        hdr, pos = peer.decode_request_header(bytes(out))
        assert pos == len(out) and hdr["CorrelationId"] == 2**31 - 1
        del req


@pytest.mark.parametrize("peer_name", sorted(PEERS))
def test_response_headers_match(peer_name: str) -> None:
    peer = PEERS[peer_name]
    for api_key, version, is_request in _cases_for(peer):
        if is_request or (peer is kp_peer and api_key == 18 and version >= 5):
            # kafka-python 3.0.12 gives ApiVersions v5 a flexible response header; Kafka 4.4
            # answers every ApiVersions version with header v0 (ApiMessageType.responseHeaderVersion).
            continue
        codec = frames.api_codec(api_key, version)
        out = bytearray()
        codec.enc_resp_hdr(out, -7)
        assert bytes(out) == peer.encode_response_header(api_key, version, -7), (api_key, version)


def _tags_declared_out_of_order(fields: list[dict[str, Any]]) -> bool:
    tags = [int(f["tag"]) for f in fields if "tag" in f]
    return tags != sorted(tags) or any(_tags_declared_out_of_order(f.get("fields", [])) for f in fields)


ENTITY_CASES = [(name, v) for name, vs in sorted(kp_peer.supported_entities().items()) for v in vs]


@pytest.mark.parametrize("name,version", ENTITY_CASES, ids=[f"{n}-v{v}" for n, v in ENTITY_CASES])
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=__import__("hypothesis").strategies.data())
def test_metadata_and_control_records_match_kafka_python(name: str, version: int, data: Any) -> None:
    """Metadata records have no kio classes; kafka-python's engine driven by the same schema
    facts is the reference. Raft control records are also checked against kio."""
    value = data.draw(neutral_values(entity_schema(name), version))
    cls = records.data_class(name) if name != "DefaultPrincipalData" else registry.message_class(name)
    ours = from_dict(cls, value, version).encode(version)
    theirs = kp_peer.encode_entity(name, version, value)
    if _tags_declared_out_of_order(entity_schema(name)["fields"]):
        # kafka-python writes tagged fields in declaration order; Kafka's generator (a TreeMap
        # by tag) in ascending tag order, which is what we do. Same fields, other order.
        assert normalize(kp_peer.decode_entity(name, version, theirs)) == normalize(value)
    else:
        assert ours == theirs
    assert _neutral(cls.decode(ours, version), version) == normalize(value)
    assert normalize(kp_peer.decode_entity(name, version, ours)) == normalize(value)
    if version in kio_peer.supported_entities().get(name, []):
        try:
            assert ours == kio_peer.encode_entity(name, version, value)
        except PeerCannotExpress:
            pass

"""Known bytes: Kafka's own test vectors (ByteUtilsTest, RequestHeaderTest) and the worked
examples of the protocol digest, checked against the generated codec."""

from __future__ import annotations

import uuid

import pytest

from kraftsim.rpc import _runtime, frames, registry, uuids
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.codec_errors import DecodeError, EncodeError, UnsupportedVersionError

UVARINT = [(0, "00"), (1, "01"), (63, "3f"), (64, "40"), (8191, "ff3f"), (8192, "8040"),
           (1048575, "ffff3f"), (1048576, "808040"), (2**31 - 1, "ffffffff07"),
           (-1, "ffffffff0f"), (-(2**31), "8080808008")]
VARINT = [(0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (-65, "8101"),
          (8191, "fe7f"), (-8192, "ff7f"), (8192, "808001"), (2**31 - 1, "feffffff0f"), (-(2**31), "ffffffff0f")]
VARLONG = [(2**63 - 1, "feffffffffffffffff01"), (-(2**63), "ffffffffffffffffff01"),
           (4611686018427387904, "80808080808080808001")]


@pytest.mark.parametrize("value,hexed", UVARINT)
def test_unsigned_varint(value: int, hexed: str) -> None:
    out = bytearray()
    _runtime.write_uvarint(out, value)
    assert out.hex() == hexed
    got, pos = _runtime.read_uvarint(bytes(out), 0)
    assert got == value & 0xFFFFFFFF and pos == len(out)


def write_varint(out: bytearray, value: int) -> None:
    """Kafka's ByteUtils.writeVarint: zigzag, then an unsigned varint (the reference the readers
    are held to; the package writes varints inline where it frames records)."""
    _runtime.write_uvarint(out, ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF)


def write_varlong(out: bytearray, value: int) -> None:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


@pytest.mark.parametrize("value,hexed", VARINT)
def test_varint(value: int, hexed: str) -> None:
    out = bytearray()
    write_varint(out, value)
    assert out.hex() == hexed
    assert _runtime.read_varint(bytes(out), 0) == (value, len(out))


@pytest.mark.parametrize("value,hexed", VARLONG + [(v, h) for v, h in VARINT])
def test_varlong(value: int, hexed: str) -> None:
    out = bytearray()
    write_varlong(out, value)
    assert out.hex() == hexed
    assert _runtime.read_varlong(bytes(out), 0) == (value, len(out))


def test_varint_longer_than_five_bytes_is_rejected() -> None:
    with pytest.raises(DecodeError):
        _runtime.read_uvarint(bytes.fromhex("ffffffffff01"), 0)


def test_request_header_sizes_match_kafka() -> None:
    hdr = registry.message_class("RequestHeader")(request_api_key=18, request_api_version=0,
                                                   correlation_id=1, client_id="")
    assert len(hdr.encode(1)) == 10
    assert len(hdr.encode(2)) == 11


def test_api_versions_v3_request_frame() -> None:
    req = registry.request_class(ApiKey.API_VERSIONS)(client_software_name="n", client_software_version="v")
    frame = frames.encode_request(req, 3, 1, "c")
    assert frame.hex() == "00000011" "0012" "0003" "00000001" "000163" "00" "026e" "0276" "00"
    hdr, body = frames.decode_request(frame[4:])
    assert (hdr.request_api_key, hdr.request_api_version, hdr.correlation_id, hdr.client_id) == (18, 3, 1, "c")
    assert body == req


def test_api_versions_v0_request_frame() -> None:
    frame = frames.encode_request(registry.request_class(ApiKey.API_VERSIONS)(), 0, 1, "c")
    assert frame.hex() == "0000000b" "0012" "0000" "00000001" "000163"


def test_api_versions_v3_response_uses_header_v0() -> None:
    cls = registry.response_class(ApiKey.API_VERSIONS)
    resp = cls(error_code=0, api_keys=[cls.ApiVersion(api_key=18, min_version=0, max_version=4)])
    frame = frames.encode_response(resp, 3, 1)
    assert frame.hex() == "00000013" "00000001" "0000" "02" "0012000000040" "0" "00000000" "00"
    corr, back = frames.decode_response(frame[4:], 18, 3)
    assert corr == 1 and back == resp


def test_header_versions_follow_flexibility() -> None:
    assert frames.request_header_version(63, 0) == 2
    assert frames.request_header_version(19, 4) == 1
    assert frames.request_header_version(19, 5) == 2
    assert frames.request_header_version(7, 0) == 0
    assert frames.response_header_version(18, 4) == 0
    assert frames.response_header_version(19, 5) == 1
    assert frames.response_header_version(19, 4) == 0


def test_controlled_shutdown_v0_uses_header_v0() -> None:
    req = registry.request_class(ApiKey.CONTROLLED_SHUTDOWN)(broker_id=3)
    frame = frames.encode_request(req, 0, 9, "ignored")
    assert frame.hex() == "0000000c" "0007" "0000" "00000009" "00000003"
    hdr, body = frames.decode_request(frame[4:])
    assert hdr.correlation_id == 9 and body.broker_id == 3


def test_tagged_field_omitted_at_default_and_written_otherwise() -> None:
    cls = registry.request_class(ApiKey.BROKER_HEARTBEAT)
    base = cls(broker_id=1, broker_epoch=5, current_metadata_offset=7)
    assert base.encode(1) == base.encode(0)
    d = uuid.UUID(int=0x0102030405060708090A0B0C0D0E0F10)
    with_dirs = cls(broker_id=1, broker_epoch=5, current_metadata_offset=7, offline_log_dirs=[d])
    raw = with_dirs.encode(1)
    assert raw.endswith(bytes.fromhex("01" "00" "11" "02") + d.bytes)
    assert cls.decode(raw, 1) == with_dirs
    with pytest.raises(UnsupportedVersionError):
        with_dirs.encode(0)


def test_unknown_tagged_fields_survive_a_round_trip() -> None:
    cls = registry.request_class(ApiKey.BROKER_HEARTBEAT)
    raw = cls(broker_id=1).encode(1)
    # Replace the empty tag section by one holding an unknown tag 7 and the known tag 0 (empty list).
    tampered = raw[:-1] + bytes.fromhex("02" "00" "01" "01" "07" "03" "aabbcc")
    msg = cls.decode(tampered, 1)
    assert msg.unknown_tagged_fields == [(7, b"\xaa\xbb\xcc")]
    assert msg.encode(1) == raw[:-1] + bytes.fromhex("01" "07" "03" "aabbcc")


def test_non_nullable_null_is_rejected_both_ways() -> None:
    cls = registry.request_class(ApiKey.BROKER_REGISTRATION)
    with pytest.raises(EncodeError):
        cls(cluster_id=None).encode(0)
    # BrokerRegistration v0: BrokerId then a compact string ClusterId; 0 means null.
    raw = bytes.fromhex("00000001" "00")
    with pytest.raises(DecodeError):
        cls.decode(raw + bytes(40), 0)


def test_schema_defaults_apply() -> None:
    hb = registry.request_class(ApiKey.BROKER_HEARTBEAT)()
    assert hb.broker_epoch == -1
    resp = registry.response_class(ApiKey.BROKER_HEARTBEAT)()
    assert resp.is_fenced is True and resp.is_caught_up is False
    uf = registry.request_class(ApiKey.UPDATE_FEATURES)()
    assert uf.timeout_ms == 60000
    up = registry.request_class(ApiKey.UPDATE_FEATURES).FeatureUpdateKey()
    assert up.upgrade_type == 1


def test_kafka_uuid_text_form() -> None:
    assert uuids.to_str(uuids.ZERO) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert uuids.to_str(uuids.ONE) == "AAAAAAAAAAAAAAAAAAAAAQ"
    u = uuids.random_uuid()
    assert uuids.from_str(uuids.to_str(u)) == u
    with pytest.raises(ValueError):
        uuids.from_str("short")


def test_every_schema_compiles_and_round_trips_its_defaults() -> None:
    for name in registry.names():
        cls = registry.message_class(name)
        for v in cls._spec.versions():
            obj = cls()
            try:
                raw = obj.encode(v)
            except EncodeError:
                continue  # e.g. a field with no default that a version requires non-null
            assert cls.decode(raw, v) == obj, (name, v)


@pytest.mark.parametrize("n", [0, 1, 63, 64, 1000])
def test_fixed_width_arrays_of_any_length(n: int) -> None:
    from kraftsim.metadata import records

    part = records.by_name("PartitionRecord")
    rec = part(partition_id=1, topic_id=uuid.uuid4(), replicas=list(range(n)), isr=list(range(n)))
    raw = rec.encode(1)
    assert part.decode(raw, 1) == rec
    # The compact array count (n + 1 as an unsigned varint, written out by hand) after id + uuid.
    count = bytes([n + 1]) if n + 1 < 128 else bytes([((n + 1) & 0x7F) | 0x80, (n + 1) >> 7])
    assert raw[20:20 + len(count)] == count
    replicas = b"".join(i.to_bytes(4, "big") for i in range(n))
    assert raw[20 + len(count):20 + len(count) + 4 * n] == replicas

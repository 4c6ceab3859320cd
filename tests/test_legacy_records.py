"""Reading Kafka 2.8 early-access metadata records (frame version 0) and converting them.

The hand-checked examples build their bytes field by field with ``struct`` and local varint
helpers, never through kraftsim's codec, so a codec bug and a schema mistake cannot cancel out.
The property tests then cover the rest of each record's value space through frame_legacy, with
the expected conversion written out here again rather than borrowed from metadata.legacy.
"""

from __future__ import annotations

import json
import struct
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftsim.metadata import legacy, records
from kraftsim.rpc import _runtime, uuids
from kraftsim.rpc.codec_errors import DecodeError

# ---- independent byte builders (Kafka's non-flexible and flexible primitives) ---------------


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def i8(n: int) -> bytes:
    return struct.pack(">b", n)


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def u16(n: int) -> bytes:
    return struct.pack(">H", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


def f64(x: float) -> bytes:
    return struct.pack(">d", x)


def boolean(b: bool) -> bytes:
    return b"\x01" if b else b"\x00"


def string(s: str | None) -> bytes:
    """Non-flexible (nullable) string: int16 length, -1 for null."""
    if s is None:
        return i16(-1)
    raw = s.encode()
    return i16(len(raw)) + raw


def compact_string(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    raw = s.encode()
    return uvarint(len(raw) + 1) + raw


def blob(b: bytes) -> bytes:
    return i32(len(b)) + b


def array(items: list[bytes] | None) -> bytes:
    """Non-flexible (nullable) array: int32 count, -1 for null, then the encoded elements."""
    if items is None:
        return i32(-1)
    return i32(len(items)) + b"".join(items)


def compact_array(items: list[bytes] | None) -> bytes:
    if items is None:
        return uvarint(0)
    return uvarint(len(items) + 1) + b"".join(items)


def tagged(fields: dict[int, bytes]) -> bytes:
    out = uvarint(len(fields))
    for tag in sorted(fields):
        out += uvarint(tag) + uvarint(len(fields[tag])) + fields[tag]
    return out


def frame0(api_key: int, body: bytes, version: int = 0) -> bytes:
    """Kafka 2.8's MetadataRecordSerde framing: frame version 0, api key, version, body."""
    return uvarint(0) + uvarint(api_key) + uvarint(version) + body


def cls(name: str) -> Any:
    """A current record class, typed Any because generated fields are invisible to mypy."""
    return records.by_name(name)


def current(_record_name: str, /, **fields: Any) -> Any:
    return cls(_record_name)(**fields)


TOPIC = uuid.UUID("6a1c27e4-0b9e-4f1f-9a43-1d2e3f405162")
INCARNATION = uuid.UUID("0f0e0d0c-0b0a-0908-0706-050403020100")

# ---- one hand-checked example per 2.8 record type -----------------------------------------------

EXAMPLES: list[tuple[str, bytes, Any]] = [
    (
        "RegisterBrokerRecord",
        frame0(0, i32(3) + INCARNATION.bytes + i64(42)
               + array([string("PLAINTEXT") + string("b3.local") + u16(9092) + i16(0),
                        string("SSL") + string("b3.local") + u16(65535) + i16(1)])
               + array([string("metadata.version") + i16(1) + i16(1)])
               + string("rack-a")),
        current("RegisterBrokerRecord", broker_id=3, incarnation_id=INCARNATION, broker_epoch=42,
                end_points=[
                    cls("RegisterBrokerRecord").BrokerEndpoint(
                        name="PLAINTEXT", host="b3.local", port=9092, security_protocol=0),
                    cls("RegisterBrokerRecord").BrokerEndpoint(
                        name="SSL", host="b3.local", port=65535, security_protocol=1)],
                features=[cls("RegisterBrokerRecord").BrokerFeature(
                    name="metadata.version", min_supported_version=1, max_supported_version=1)],
                rack="rack-a", fenced=True),
    ),
    (
        "RegisterBrokerRecord, null rack, no endpoints",
        frame0(0, i32(0) + INCARNATION.bytes + i64(-1) + array([]) + array([]) + string(None)),
        current("RegisterBrokerRecord", broker_id=0, incarnation_id=INCARNATION, broker_epoch=-1, rack=None,
                fenced=True),
    ),
    (
        "UnregisterBrokerRecord",
        frame0(1, i32(7) + i64(99)),
        current("UnregisterBrokerRecord", broker_id=7, broker_epoch=99),
    ),
    (
        "TopicRecord",
        frame0(2, string("orders") + TOPIC.bytes),
        current("TopicRecord", name="orders", topic_id=TOPIC),
    ),
    (
        "PartitionRecord",
        frame0(3, i32(2) + TOPIC.bytes + array([i32(1), i32(2), i32(3)]) + array([i32(1), i32(2)])
               + array(None) + array([i32(4)]) + i32(1) + i32(5) + i32(6)),
        current("PartitionRecord", partition_id=2, topic_id=TOPIC, replicas=[1, 2, 3], isr=[1, 2],
                removing_replicas=[], adding_replicas=[4], leader=1, leader_recovery_state=0,
                leader_epoch=5, partition_epoch=6),
    ),
    (
        "ConfigRecord",
        frame0(4, i8(2) + string("orders") + string("retention.ms") + string("1000")),
        current("ConfigRecord", resource_type=2, resource_name="orders", name="retention.ms", value="1000"),
    ),
    (
        "PartitionChangeRecord, both tags",
        frame0(5, i32(0) + TOPIC.bytes + tagged({0: compact_array([i32(1), i32(3)]), 1: i32(3)})),
        current("PartitionChangeRecord", partition_id=0, topic_id=TOPIC, isr=[1, 3], leader=3),
    ),
    (
        "PartitionChangeRecord, no tags",
        frame0(5, i32(9) + TOPIC.bytes + tagged({})),
        current("PartitionChangeRecord", partition_id=9, topic_id=TOPIC, isr=None, leader=-2),
    ),
    (
        "PartitionChangeRecord, a tag 2.8 did not know is dropped",
        frame0(5, i32(1) + TOPIC.bytes + tagged({1: i32(-1), 2: compact_array([i32(8)])})),
        current("PartitionChangeRecord", partition_id=1, topic_id=TOPIC, leader=-1, replicas=None),
    ),
    (
        "AccessControlRecord",
        frame0(6, i8(2) + compact_string("t") + i8(3) + compact_string("User:a") + compact_string("*")
               + i8(3) + i8(3) + tagged({})),
        current("AccessControlEntryRecord",
                # Pinned: the derived id is part of what a converted log means; it must not drift.
                id=uuid.UUID("7abced02-2c01-5256-8ae0-0a8474310812"),
                resource_type=2, resource_name="t", pattern_type=3, principal="User:a", host="*",
                operation=3, permission_type=3),
    ),
    (
        "FenceBrokerRecord",
        frame0(7, i32(4) + i64(1234567890123)),
        current("FenceBrokerRecord", id=4, epoch=1234567890123),
    ),
    (
        "UnfenceBrokerRecord",
        frame0(8, i32(4) + i64(-5)),
        current("UnfenceBrokerRecord", id=4, epoch=-5),
    ),
    (
        "RemoveTopicRecord",
        frame0(9, TOPIC.bytes),
        current("RemoveTopicRecord", topic_id=TOPIC),
    ),
    (
        "DelegationTokenRecord",
        frame0(10, string("User:alice") + array([string("User:bob"), string("User:carol")])
               + i64(1000) + i64(3000) + i64(2000) + string("tok-1")),
        current("DelegationTokenRecord", owner="User:alice", requester="User:alice",
                renewers=["User:bob", "User:carol"], issue_timestamp=1000, max_timestamp=3000,
                expiration_timestamp=2000, token_id="tok-1"),
    ),
    (
        "FeatureLevelRecord",
        frame0(12, string("metadata.version") + i16(1) + i16(3)),
        current("FeatureLevelRecord", name="metadata.version", feature_level=3),
    ),
    (
        "QuotaRecord",
        frame0(14, array([string("user") + string("alice"), string("client-id") + string(None)])
               + string("producer_byte_rate") + f64(1024.5) + boolean(False)),
        current("ClientQuotaRecord",
                entity=[cls("ClientQuotaRecord").EntityData(entity_type="user", entity_name="alice"),
                        cls("ClientQuotaRecord").EntityData(entity_type="client-id", entity_name=None)],
                key="producer_byte_rate", value=1024.5, remove=False),
    ),
]

UNCONVERTIBLE: list[tuple[str, bytes, str]] = [
    (
        "UserScramCredentialRecord",
        frame0(11, string("alice") + array([i8(1) + blob(b"salt") + blob(b"\x01" * 32) + i32(4096)])),
        "LegacyUserScramCredentialRecord",
    ),
    (
        "AccessControlRecord with null resource name",
        frame0(6, i8(4) + compact_string(None) + i8(3) + compact_string("User:a") + compact_string("*")
               + i8(2) + i8(3) + tagged({})),
        "LegacyAccessControlRecord",
    ),
    ("FeatureLevelRecord with max 0", frame0(12, string("f") + i16(0) + i16(0)), "LegacyFeatureLevelRecord"),
    ("FeatureLevelRecord with min > max", frame0(12, string("f") + i16(3) + i16(2)), "LegacyFeatureLevelRecord"),
]


@pytest.mark.parametrize(("label", "value", "expected"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_hand_checked_example_converts(label: str, value: bytes, expected: Any) -> None:
    rec, version = legacy.unframe_legacy(value)
    assert type(rec) is type(expected)
    assert rec == expected
    assert version == 0
    assert legacy.decode_value(value, legacy=True) == (expected, 0)
    # The conversion is a real 3.9 record: it survives the 3.9 codec unchanged.
    assert records.unframe(records.frame(rec, version)) == (expected, 0)


@pytest.mark.parametrize(("label", "value", "legacy_name"), UNCONVERTIBLE, ids=[e[0] for e in UNCONVERTIBLE])
def test_records_without_current_meaning_are_a_decode_error(label: str, value: bytes, legacy_name: str) -> None:
    with pytest.raises(legacy.LegacyConversionError) as info:
        legacy.unframe_legacy(value)
    assert isinstance(info.value, DecodeError)
    assert type(info.value.legacy_record).__name__ == legacy_name
    assert info.value.reason and info.value.reason in str(info.value)


def test_every_legacy_type_has_an_example() -> None:
    covered = {_api_key(value) for _, value, _ in EXAMPLES + UNCONVERTIBLE}
    assert covered == set(legacy.LEGACY_NAMES)


def _api_key(value: bytes) -> int:
    assert value[0] == 0 and value[1] < 0x80
    return value[1]


@pytest.mark.parametrize(("label", "value", "expected"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_frame_version_0_needs_the_legacy_option(label: str, value: bytes, expected: Any) -> None:
    with pytest.raises(DecodeError, match="legacy=True"):
        records.unframe(value)
    with pytest.raises(DecodeError, match="legacy=True"):
        legacy.decode_value(value)
    with pytest.raises(DecodeError, match="legacy=True"):
        legacy.decode_value(value, legacy=False)


def test_acl_id_is_uuid5_of_the_fields_and_never_reserved() -> None:
    ns = uuid.uuid5(uuid.NAMESPACE_URL, "kraftsim:legacy:AccessControlRecord")
    assert legacy.ACL_ID_NAMESPACE == ns
    assert legacy.legacy_acl_id(2, "t", 3, "User:a", "*", 3, 3) == uuid.uuid5(ns, '[2,"t",3,"User:a","*",3,3]')
    # Field boundaries matter: moving a character between fields gives another id.
    assert legacy.legacy_acl_id(2, "ab", 3, "c", "*", 3, 3) != legacy.legacy_acl_id(2, "a", 3, "bc", "*", 3, 3)


def test_acl_id_rehashes_an_id_rendering_with_a_leading_dash() -> None:
    ns = legacy.ACL_ID_NAMESPACE
    # Find fields whose first candidate renders with '-' (1 in 64), independently of the code.
    name = next(f"r{i}" for i in range(10_000)
                if uuids.to_str(uuid.uuid5(ns, f'[2,"r{i}",3,"User:a","*",3,3]')).startswith("-"))
    key = f'[2,"{name}",3,"User:a","*",3,3]'
    salt = next(n for n in range(1, 100) if not uuids.to_str(uuid.uuid5(ns, f"{key}#{n}")).startswith("-"))
    assert legacy.legacy_acl_id(2, name, 3, "User:a", "*", 3, 3) == uuid.uuid5(ns, f"{key}#{salt}")


@given(st.tuples(st.integers(-128, 127), st.text(max_size=20), st.integers(-128, 127), st.text(max_size=20),
                 st.text(max_size=20), st.integers(-128, 127), st.integers(-128, 127)))
def test_acl_id_properties(fields: tuple[Any, ...]) -> None:
    u = legacy.legacy_acl_id(*fields)
    assert u == legacy.legacy_acl_id(*fields)
    assert u not in (uuids.ZERO, uuids.ONE)
    assert not uuids.to_str(u).startswith("-")


def test_mixed_log_reads_with_legacy_option() -> None:
    """A log a 2.8 cluster started and a 3.9 one continued: both framings in one read."""
    newer = current("RegisterControllerRecord", controller_id=1, incarnation_id=INCARNATION)
    values = [EXAMPLES[0][1], records.frame(newer, 0), EXAMPLES[3][1], records.frame(EXAMPLES[3][2], 0)]
    got = [legacy.decode_value(v, legacy=True) for v in values]
    assert got == [(EXAMPLES[0][2], 0), (newer, 0), (EXAMPLES[3][2], 0), (EXAMPLES[3][2], 0)]


@pytest.mark.parametrize("value", [
    b"",
    b"\x00",
    b"\x00\x00",
    frame0(13, b""),  # no record 13 in 2.8
    frame0(15, i64(0)),  # ProducerIdsRecord is 3.x only
    frame0(18, b""),  # AccessControlEntryRecord is 3.x only
    frame0(2, string("orders") + TOPIC.bytes, version=1),  # 2.8 records only had version 0
    frame0(2, string("orders") + TOPIC.bytes + b"\x00"),  # trailing garbage
    frame0(2, string("orders") + TOPIC.bytes[:8]),  # truncated
    frame0(3, i32(0) + TOPIC.bytes + i32(-1)),  # null non-nullable array
    b"\x02\x02\x00",  # unknown frame version
    b"\x80\x80\x80\x80\x80\x80",  # over-long varint
], ids=lambda v: v.hex() or "empty")
def test_malformed_values_are_decode_errors(value: bytes) -> None:
    with pytest.raises(DecodeError):
        legacy.unframe_legacy(value)


def frame_legacy(record: Any, version: int = legacy.LEGACY_RECORD_VERSION) -> bytes:
    """2.8-format bytes of a ``Legacy*`` record (kraftsim itself never writes 2.8 logs)."""
    api_key = record.api_key()
    if api_key not in legacy.LEGACY_NAMES or type(record) is not legacy.legacy_class(api_key):
        raise TypeError(f"frame_legacy takes a Legacy* record, not {type(record).__name__}")
    out = bytearray()
    for n in (legacy.LEGACY_FRAME_VERSION, api_key, version):
        _runtime.write_uvarint(out, n)
    record.encode_into(out, version)
    return bytes(out)


def test_only_legacy_records_convert() -> None:
    with pytest.raises(TypeError):
        frame_legacy(EXAMPLES[3][2])
    with pytest.raises(TypeError):
        legacy.convert(EXAMPLES[3][2])


# ---- random legacy values: frame_legacy -> unframe_legacy -> the expected conversion -------------

def L(api_key: int) -> Any:  # noqa: N802 - reads as a type in the strategies below
    return legacy.legacy_class(api_key)


int8s, int16s, int32s, int64s = (st.integers(-(1 << (n - 1)), (1 << (n - 1)) - 1) for n in (8, 16, 32, 64))
texts = st.text(max_size=12)
ids = st.uuids() | st.sampled_from([uuids.ZERO, uuids.ONE])
int32_lists = st.lists(int32s, max_size=5)


def _expected(rec: Any) -> Any:
    """What each 2.8 record must become, restated from the conversion table."""
    key = rec.api_key()
    if key == 0:
        rb = cls("RegisterBrokerRecord")
        return current("RegisterBrokerRecord", broker_id=rec.broker_id, incarnation_id=rec.incarnation_id,
                       broker_epoch=rec.broker_epoch,
                       end_points=[rb.BrokerEndpoint(name=e.name, host=e.host, port=e.port,
                                                      security_protocol=e.security_protocol)
                                   for e in rec.end_points],
                       features=[rb.BrokerFeature(name=f.name, min_supported_version=f.min_supported_version,
                                                   max_supported_version=f.max_supported_version)
                                 for f in rec.features],
                       rack=rec.rack, fenced=True)
    if key == 3:
        return current("PartitionRecord", partition_id=rec.partition_id, topic_id=rec.topic_id,
                       replicas=rec.replicas, isr=rec.isr, removing_replicas=rec.removing_replicas or [],
                       adding_replicas=rec.adding_replicas or [], leader=rec.leader,
                       leader_epoch=rec.leader_epoch, partition_epoch=rec.partition_epoch)
    if key == 5:
        return current("PartitionChangeRecord", partition_id=rec.partition_id, topic_id=rec.topic_id,
                       isr=rec.isr, leader=rec.leader)
    if key == 6:
        if rec.resource_name is None:
            return legacy.LegacyConversionError
        f = dict(resource_type=rec.resource_type, resource_name=rec.resource_name, pattern_type=rec.pattern_type,
                 principal=rec.principal, host=rec.host, operation=rec.operation,
                 permission_type=rec.permission_type)
        return current("AccessControlEntryRecord", id=legacy.legacy_acl_id(**f), **f)
    if key == 10:
        return current("DelegationTokenRecord", owner=rec.owner, requester=rec.owner, renewers=rec.renewers,
                       issue_timestamp=rec.issue_timestamp, max_timestamp=rec.max_timestamp,
                       expiration_timestamp=rec.expiration_timestamp, token_id=rec.token_id)
    if key == 11:
        return legacy.LegacyConversionError
    if key == 12:
        if rec.max_feature_level < 1 or rec.min_feature_level > rec.max_feature_level:
            return legacy.LegacyConversionError
        return current("FeatureLevelRecord", name=rec.name, feature_level=rec.max_feature_level)
    if key == 14:
        cq = cls("ClientQuotaRecord")
        return current("ClientQuotaRecord",
                       entity=[cq.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                               for e in rec.entity],
                       key=rec.key, value=rec.value, remove=rec.remove)
    same = {1: "UnregisterBrokerRecord", 2: "TopicRecord", 4: "ConfigRecord", 7: "FenceBrokerRecord",
            8: "UnfenceBrokerRecord", 9: "RemoveTopicRecord"}[key]
    return current(same, **{a: getattr(rec, a) for a in rec.__slots__ if a != "unknown_tagged_fields"})


def _build(api_key: int, /, **strategies: st.SearchStrategy) -> st.SearchStrategy:
    return st.builds(L(api_key), **strategies)


LEGACY_RECORDS: dict[int, st.SearchStrategy] = {
    0: _build(0, broker_id=int32s, incarnation_id=ids, broker_epoch=int64s,
              end_points=st.lists(st.builds(L(0).BrokerEndpoint, name=texts, host=texts,
                                            port=st.integers(0, 65535), security_protocol=int16s), max_size=3),
              features=st.lists(st.builds(L(0).BrokerFeature, name=texts, min_supported_version=int16s,
                                          max_supported_version=int16s), max_size=3),
              rack=st.none() | texts),
    1: _build(1, broker_id=int32s, broker_epoch=int64s),
    2: _build(2, name=texts, topic_id=ids),
    3: _build(3, partition_id=int32s, topic_id=ids, replicas=int32_lists, isr=int32_lists,
              removing_replicas=st.none() | int32_lists, adding_replicas=st.none() | int32_lists,
              leader=int32s, leader_epoch=int32s, partition_epoch=int32s),
    4: _build(4, resource_type=int8s, resource_name=texts, name=texts, value=texts),
    5: _build(5, partition_id=int32s, topic_id=ids, isr=st.none() | int32_lists, leader=int32s),
    6: _build(6, resource_type=int8s, resource_name=st.none() | texts, pattern_type=int8s, principal=texts,
              host=texts, operation=int8s, permission_type=int8s),
    7: _build(7, id=int32s, epoch=int64s),
    8: _build(8, id=int32s, epoch=int64s),
    9: _build(9, topic_id=ids),
    10: _build(10, owner=texts, renewers=st.lists(texts, max_size=3), issue_timestamp=int64s,
               max_timestamp=int64s, expiration_timestamp=int64s, token_id=texts),
    11: _build(11, name=texts, credential_infos=st.lists(st.builds(
        L(11).CredentialInfo, mechanism=int8s, salt=st.binary(max_size=8), salted_password=st.binary(max_size=8),
        iterations=int32s), max_size=2)),
    12: _build(12, name=texts, min_feature_level=int16s, max_feature_level=int16s),
    14: _build(14, entity=st.lists(st.builds(L(14).EntityData, entity_type=texts, entity_name=st.none() | texts),
                                   max_size=3),
               key=texts, value=st.floats(allow_nan=False), remove=st.booleans()),
}


def test_strategies_cover_every_legacy_type() -> None:
    assert set(LEGACY_RECORDS) == set(legacy.LEGACY_NAMES)


@given(st.one_of(*LEGACY_RECORDS.values()))
def test_random_legacy_records_convert(rec: Any) -> None:
    value = frame_legacy(rec)
    assert value[0] == 0
    assert legacy.decode_legacy(value) == (rec, 0)
    expected = _expected(rec)
    if expected is legacy.LegacyConversionError:
        with pytest.raises(legacy.LegacyConversionError):
            legacy.unframe_legacy(value)
        return
    assert legacy.unframe_legacy(value) == (expected, 0)
    assert legacy.convert(rec) == (expected, 0)
    with pytest.raises(DecodeError, match="legacy=True"):
        records.unframe(value)


@given(st.one_of(*LEGACY_RECORDS.values()), st.data())
def test_damaged_legacy_values_give_decode_error_only(rec: Any, data: st.DataObject) -> None:
    value = bytearray(frame_legacy(rec))
    cut = data.draw(st.integers(0, len(value)))
    if data.draw(st.booleans()):
        del value[cut:]
    elif cut < len(value):
        value[cut] = data.draw(st.integers(0, 255))
    _decodes_or_decode_error(bytes(value))


@given(st.binary(max_size=64) | st.binary(max_size=64).map(lambda b: b"\x00" + b))
def test_garbage_gives_decode_error_only(value: bytes) -> None:
    _decodes_or_decode_error(value)


def _decodes_or_decode_error(value: bytes) -> None:
    for decode in (legacy.unframe_legacy, lambda v: legacy.decode_value(v, legacy=False)):
        try:
            rec, version = decode(value)
        except DecodeError:
            continue
        assert type(rec) is records.by_name(type(rec).__name__)  # always a current record, never Legacy*
        assert isinstance(version, int)


# ---- the schema files themselves ---------------------------------------------------------------

STRUCTURAL = ("name", "type", "apiKey", "validVersions", "flexibleVersions", "fields", "commonStructs",
              "versions", "nullableVersions", "taggedVersions", "tag", "default", "ignorable", "mapKey", "about")


def _legacy_files() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(legacy.LEGACY_SCHEMAS.glob("*.json"))}


def test_legacy_schemas_are_plain_renamed_and_structural() -> None:
    files = _legacy_files()
    assert {d["name"] for d in files.values()} == set(legacy.LEGACY_NAMES.values())

    def walk(fields: list[dict]) -> None:
        for f in fields:
            assert set(f) <= set(STRUCTURAL) - {"about"}, f  # no prose on fields
            walk(f.get("fields", []))

    for name, d in files.items():
        assert name == d["name"] + ".json" and d["name"].startswith("Legacy")
        assert set(d) <= set(STRUCTURAL)
        assert "2.8 early-access" in d["about"]
        walk(d["fields"])
    flexible = sorted(d["name"] for d in files.values() if d["flexibleVersions"] != "none")
    assert flexible == ["LegacyAccessControlRecord", "LegacyPartitionChangeRecord"]

"""RecordBatch v2: exact bytes, round trips, hostile input, and agreement with two independent codecs.

kafka-python (``kafka.record``) and kio (``kio.records``) each implement the v2 batch format
on their own; batches we write must be accepted by both, and batches they write (including
gzip ones from kafka-python and control batches from kio) must read back identically here.
"""

from __future__ import annotations

import datetime
import gzip
import io
import random
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record._crc32c import crc as kp_pure_crc32c
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kio.records.readers import read_batch as kio_read_batch
from kio.records.schema import NewRecordBatch, Record, RecordHeader
from kio.records.writers import write_batch as kio_write_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from kraftsim.metadata.batch import (
    BATCH_OVERHEAD,
    Batch,
    BatchError,
    ControlRecordType,
    CorruptBatchError,
    IncompleteBatchError,
    LogRecord,
    UnsupportedCompression,
    control_key,
    decode_control_record,
    encode_batch,
    encode_batch_into,
    encode_control_batch,
    parse_control_key,
    read_batch,
    read_batches,
)
from kraftsim.metadata.crc import crc32c
from kraftsim.metadata.records import data_class

TS = 1_700_000_000_000
NOOP_VALUE = bytes.fromhex("01140000")  # framed NoOpRecord v0 (digest §4.1)
DIGEST_BATCH = bytes.fromhex(
    "0000000000000005"
    "0000003c"
    "00000003"
    "02"
    "b03bfe3d"
    "0000"
    "00000000"
    "0000018bcfe56800"
    "0000018bcfe56800"
    "ffffffffffffffff"
    "ffff"
    "ffffffff"
    "00000001"
    "1400000001080114000000"
)

LeaderChange = data_class("LeaderChangeMessage")
SnapshotHeader = data_class("SnapshotHeaderRecord")
SnapshotFooter = data_class("SnapshotFooterRecord")
KRaftVersion = data_class("KRaftVersionRecord")
Voters = data_class("VotersRecord")

values_st = st.lists(st.binary(max_size=300), min_size=1, max_size=40)
int64 = st.integers(-(2**63), 2**63 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reseal(raw: bytes | bytearray) -> bytes:
    """Fix BatchLength and CRC after a deliberate edit, so deeper checks (not the CRC) must catch it."""
    b = bytearray(raw)
    struct.pack_into(">i", b, 8, len(b) - 12)
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


def consume(buf: bytes | bytearray | memoryview, verify_crc: bool = True) -> list[Batch]:
    """Read everything the way recovery/replay would: headers, records, control payloads."""
    out = []
    for b in read_batches(buf, verify_crc=verify_crc):
        try:
            recs = b.records()
        except UnsupportedCompression:
            recs = []
        if b.is_control:
            for r in recs:
                decode_control_record(r)
        out.append(b)
    return out


def three_batches() -> tuple[bytes, list[int]]:
    """A data batch, a control batch and a bigger data batch, plus each batch's end position."""
    parts = [
        encode_batch(0, [NOOP_VALUE, b"second"], epoch=1, timestamp=TS),
        encode_control_batch(
            2,
            [(ControlRecordType.LEADER_CHANGE, LeaderChange(leader_id=1, voters=[], granting_voters=[]))],
            epoch=2,
            timestamp=TS + 1,
        ),
        encode_batch(3, [bytes([i]) * i for i in range(1, 8)], epoch=2, timestamp=TS + 2),
    ]
    ends, pos = [], 0
    for p in parts:
        pos += len(p)
        ends.append(pos)
    return b"".join(parts), ends


# ----------------------------------------------------------------------------------------------
# CRC-32C


def test_crc32c_matches_the_standard_check_vectors() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"Some String") == 608512271
    assert crc32c(b"") == 0


@given(a=st.binary(max_size=500), b=st.binary(max_size=500))
def test_crc32c_agrees_with_kafka_pythons_pure_python_table_and_chains(a: bytes, b: bytes) -> None:
    assert crc32c(a + b) == kp_pure_crc32c(a + b)
    assert crc32c(b, crc32c(a)) == crc32c(a + b)
    assert crc32c(memoryview(a + b)) == crc32c(bytearray(a + b)) == crc32c(a + b)


def test_crc32c_falls_back_to_the_crc32c_package_without_google_crc32cs_c_extension(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib
    import sys
    import types

    import kraftsim.metadata.crc as crc_module

    fake = types.ModuleType("google_crc32c")
    fake.implementation = "python"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "google_crc32c", fake)
    try:
        reloaded = importlib.reload(crc_module)
        assert reloaded.IMPLEMENTATION == "crc32c package (C)"
        assert reloaded.crc32c(b"123456789") == 0xE3069283
        assert reloaded.crc32c(memoryview(b"Some String")) == 608512271
        assert reloaded.crc32c(b"456789", reloaded.crc32c(b"123")) == 0xE3069283
    finally:
        monkeypatch.undo()
        assert importlib.reload(crc_module).IMPLEMENTATION == "google_crc32c (C)"


# ----------------------------------------------------------------------------------------------
# exact bytes and round trips


def test_digest_example_noop_batch_is_exactly_the_72_derived_bytes() -> None:
    data = encode_batch(5, [NOOP_VALUE], epoch=3, timestamp=TS)
    assert data == DIGEST_BATCH
    assert len(data) == 72
    b = read_batch(data)
    assert (b.base_offset, b.batch_length, b.partition_leader_epoch, b.magic, b.crc) == (5, 60, 3, 2, 0xB03BFE3D)
    assert (b.attributes, b.last_offset_delta, b.base_timestamp, b.max_timestamp) == (0, 0, TS, TS)
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.records_count) == (-1, -1, -1, 1)
    assert (b.last_offset, b.next_offset, b.size_in_bytes) == (5, 6, 72)
    assert not b.is_control and not b.is_transactional and b.compression == 0 and b.crc_valid()
    assert b.records() == [LogRecord(5, TS, None, NOOP_VALUE, [])]


@given(values=values_st, base=st.integers(0, 2**62), epoch=int32, ts=int64, control=st.booleans(), data=st.data())
def test_encode_then_read_round_trips_every_field_and_record(
    values: list[bytes], base: int, epoch: int, ts: int, control: bool, data: st.DataObject
) -> None:
    keys = data.draw(
        st.none() | st.lists(st.none() | st.binary(max_size=20), min_size=len(values), max_size=len(values))
    )
    raw = encode_batch(base, values, epoch=epoch, timestamp=ts, control=control, keys=keys)
    b = read_batch(raw)
    assert b.size_in_bytes == len(raw) == BATCH_OVERHEAD + b.batch_length - 49
    assert (b.base_offset, b.partition_leader_epoch, b.base_timestamp, b.max_timestamp) == (base, epoch, ts, ts)
    assert b.attributes == (0x20 if control else 0) and b.is_control == control
    assert b.records_count == len(values) and b.next_offset == base + len(values)
    want_keys = keys or [None] * len(values)
    assert b.records() == [
        LogRecord(base + i, ts, k, v, []) for i, (k, v) in enumerate(zip(want_keys, values, strict=True))
    ]


@given(values=values_st, prefix=st.binary(max_size=50))
def test_encode_batch_into_appends_the_same_bytes_as_encode_batch(values: list[bytes], prefix: bytes) -> None:
    out = bytearray(prefix)
    n = encode_batch_into(out, 7, values, epoch=2, timestamp=TS)
    whole = encode_batch(7, values, epoch=2, timestamp=TS)
    assert bytes(out) == prefix + whole and n == len(whole)


def test_values_and_batches_beyond_the_lookup_tables_use_the_general_path_correctly() -> None:
    """>16 KiB values and >16384 records fall off the precomputed varint tables."""
    big = [b"x" * 20_000, b"", b"y" * 70_000]
    many = [b"%d" % i for i in range(20_000)]
    for values in (big, many):
        raw = encode_batch(100, values, epoch=1, timestamp=TS)
        assert [r.value for r in read_batch(raw).records()] == values
        (kb,) = list(MemoryRecords(raw))
        assert kb.validate_crc() and [r.value for r in kb] == values


def test_encode_rejects_empty_batches_mismatched_keys_and_out_of_range_fields() -> None:
    with pytest.raises(ValueError):
        encode_batch(0, [], epoch=0, timestamp=0)
    with pytest.raises(ValueError):
        encode_batch(0, [b"a"], epoch=0, timestamp=0, keys=[None, None])
    with pytest.raises(ValueError):
        encode_batch(0, [b"a"], epoch=2**31, timestamp=0)


def test_read_batches_yields_every_batch_and_stops_cleanly_at_the_end() -> None:
    buf, ends = three_batches()
    batches = consume(buf)
    assert [b.base_offset for b in batches] == [0, 2, 3]
    assert [b.next_offset for b in batches] == [2, 3, 10]
    assert list(read_batches(buf, ends[0]))[0].base_offset == 2
    assert list(read_batches(b"")) == []


def test_raw_is_a_zero_copy_slice_for_memoryview_and_a_copy_for_bytearray() -> None:
    """A memoryview into a bytearray would pin it: the log writer's next ``+=`` would fail."""
    buf, _ = three_batches()
    assert all(type(b.raw) is bytes for b in read_batches(buf))
    assert all(type(b.raw) is memoryview for b in read_batches(memoryview(buf)))
    ba = bytearray(buf)
    batches = list(read_batches(ba)) + [read_batch(ba, 0)]
    ba += b"more"  # would raise BufferError if any batch still held an export of ba
    assert [r.value for r in batches[0].records()] == [NOOP_VALUE, b"second"]


# ----------------------------------------------------------------------------------------------
# control records


def test_control_keys_are_version_0_plus_type_and_parse_like_kafka() -> None:
    assert control_key(ControlRecordType.SNAPSHOT_HEADER) == bytes.fromhex("00000003")
    assert control_key(ControlRecordType.LEADER_CHANGE) == bytes.fromhex("00000002")
    assert control_key(ControlRecordType.KRAFT_VERSION) == bytes.fromhex("00000005")
    assert control_key(ControlRecordType.KRAFT_VOTERS) == bytes.fromhex("00000006")
    for t in ControlRecordType:
        assert parse_control_key(control_key(t)) is t
    assert parse_control_key(bytes.fromhex("0000 0063")) is None  # unknown type: ignored, not corrupt
    assert parse_control_key(bytes.fromhex("0005 0004 ffff")) is ControlRecordType.SNAPSHOT_FOOTER  # newer key version
    for bad in (None, b"", b"\x00\x00\x00", bytes.fromhex("ffff0002")):
        with pytest.raises(CorruptBatchError):
            parse_control_key(bad)


def test_control_batch_carries_every_kraft_control_message_and_decodes_it_back() -> None:
    voters = Voters(
        version=0,
        voters=[
            Voters.Voter(
                voter_id=1,
                voter_directory_id=uuid.UUID(int=0x1234),
                endpoints=[Voters.Endpoint(name="CONTROLLER", host="c1", port=9093)],
                kraft_version_feature=Voters.KRaftVersionFeature(min_supported_version=0, max_supported_version=1),
            )
        ],
    )
    msgs = [
        (ControlRecordType.SNAPSHOT_HEADER, SnapshotHeader(version=0, last_contained_log_timestamp=TS)),
        (
            ControlRecordType.LEADER_CHANGE,
            LeaderChange(
                leader_id=2,
                voters=[LeaderChange.Voter(voter_id=i) for i in (1, 2, 3)],
                granting_voters=[LeaderChange.Voter(voter_id=2)],
            ),
        ),
        (ControlRecordType.KRAFT_VERSION, KRaftVersion(version=0, kraft_version=1)),
        (ControlRecordType.KRAFT_VOTERS, voters),
        (ControlRecordType.SNAPSHOT_FOOTER, SnapshotFooter(version=0)),
    ]
    raw = encode_control_batch(0, msgs, epoch=4, timestamp=TS)
    b = read_batch(raw)
    assert b.is_control and b.attributes == 0x20 and b.records_count == 5
    recs = b.records()
    assert [r.key for r in recs] == [control_key(t) for t, _ in msgs]
    assert [r.value for r in recs] == [m.encode(0) for _, m in msgs]
    assert [decode_control_record(r) for r in recs] == msgs


def test_decode_control_record_ignores_transaction_markers_and_unknown_types_but_rejects_bad_values() -> None:
    assert (
        decode_control_record(LogRecord(0, 0, control_key(ControlRecordType.COMMIT), b"\x00\x00\x00\x00\x00\x00", []))
        is None
    )
    assert decode_control_record(LogRecord(0, 0, bytes.fromhex("00000063"), b"junk", [])) is None
    with pytest.raises(CorruptBatchError):
        decode_control_record(LogRecord(0, 0, control_key(ControlRecordType.LEADER_CHANGE), b"\x00", []))
    with pytest.raises(CorruptBatchError):
        decode_control_record(LogRecord(0, 0, control_key(ControlRecordType.SNAPSHOT_FOOTER), None, []))


# ----------------------------------------------------------------------------------------------
# torn tails and damage


def test_every_prefix_yields_the_complete_batches_then_incomplete_batch_error() -> None:
    buf, ends = three_batches()
    for k in range(len(buf) + 1):
        for verify in (True, False):
            got: list[int] = []
            try:
                for b in read_batches(buf[:k], verify_crc=verify):
                    got.append(b.base_offset)
                    b.records()
                err = None
            except IncompleteBatchError as e:
                err = e
            complete = sum(1 for e in ends if e <= k)
            assert got == [0, 2, 3][:complete]
            if k in ends or k == 0:
                assert err is None
            else:
                assert err is not None and err.position == ([0] + ends)[complete]


def test_every_single_byte_flip_is_detected_or_only_changes_unchecked_header_fields() -> None:
    buf, ends = three_batches()
    starts = [0] + ends[:-1]
    original = [(b.base_offset, b.partition_leader_epoch) for b in read_batches(buf)]
    for i in range(len(buf)):
        start = max(s for s in starts if s <= i)
        rel = i - start
        for mask in (0x01, 0x80, 0xFF):
            flipped = bytearray(buf)
            flipped[i] ^= mask
            try:
                batches = consume(bytes(flipped))
            except CorruptBatchError:
                continue
            except IncompleteBatchError:
                assert 8 <= rel < 12, f"torn tail reported for a flip at {i} outside a BatchLength"
                continue
            # Not detected: only BaseOffset and PartitionLeaderEpoch sit outside the CRC and checks.
            assert rel < 8 or 12 <= rel < 16, f"undetected flip at byte {i} (batch offset {rel})"
            assert [(b.base_offset, b.partition_leader_epoch) for b in batches] != original


def test_corruption_inside_a_resealed_batch_is_caught_by_the_structural_checks() -> None:
    good = bytearray(encode_batch(0, [b"abc", b"defg"], epoch=1, timestamp=TS))

    def expect_corrupt(raw: bytes, in_records: bool = False) -> None:
        with pytest.raises(CorruptBatchError):
            read_batch(raw).records() if in_records else read_batch(raw)

    bad = bytearray(good)
    struct.pack_into(">i", bad, 57, 5)  # 5 records claimed, offsets 0..1 only
    expect_corrupt(reseal(bad))
    struct.pack_into(">i", bad, 57, -1)
    expect_corrupt(reseal(bad))
    bad = bytearray(good)
    struct.pack_into(">i", bad, 23, 0)  # two records but LastOffsetDelta 0
    expect_corrupt(reseal(bad))
    bad = bytearray(good)
    struct.pack_into(">i", bad, 23, -1)  # negative LastOffsetDelta
    expect_corrupt(reseal(bad))
    bad = bytearray(good)
    struct.pack_into(">i", bad, 57, 1)  # one record claimed, two present: trailing bytes
    expect_corrupt(reseal(bad), in_records=True)
    dup = encode_batch(0, [b"abc", b"defg"], epoch=1, timestamp=TS)
    dup = reseal(dup[:61] + dup[61:].replace(b"\x00\x00\x02\x01", b"\x00\x00\x00\x01"))  # offset delta 1 -> 0
    expect_corrupt(dup, in_records=True)
    bad = bytearray(good)
    bad[16] = 1
    expect_corrupt(bytes(bad))  # magic 1
    bad = bytearray(good)
    struct.pack_into(">i", bad, 8, 48)
    expect_corrupt(bytes(bad))  # BatchLength below the 49-byte minimum
    with pytest.raises(CorruptBatchError):
        read_batch(bytes(good), max_batch_size=len(good) - 1)
    assert read_batch(bytes(good), max_batch_size=len(good)).records_count == 2


def test_a_wrong_magic_is_corrupt_even_when_the_tail_is_torn() -> None:
    raw = bytearray(DIGEST_BATCH[:30])
    raw[16] = 0
    with pytest.raises(CorruptBatchError):
        read_batch(bytes(raw))
    with pytest.raises(IncompleteBatchError):
        read_batch(DIGEST_BATCH[:30])


def test_error_position_is_the_start_of_the_bad_batch() -> None:
    buf, ends = three_batches()
    bad = bytearray(buf)
    bad[ends[0] + 40] ^= 1
    with pytest.raises(CorruptBatchError) as ei:
        list(read_batches(bytes(bad)))
    assert ei.value.position == ends[0]


@FUZZ
@given(data=st.binary(max_size=400), verify=st.booleans())
def test_random_bytes_raise_only_batch_errors(data: bytes, verify: bool) -> None:
    try:
        consume(data, verify_crc=verify)
    except BatchError:
        pass


@FUZZ
@given(
    payload=st.binary(max_size=300),
    count=st.integers(-3, 40),
    attrs=st.sampled_from([0, 0x20, 0x08, 1, 2, 7]),
    last=st.integers(-2, 50),
)
def test_random_records_behind_a_valid_header_and_crc_raise_only_batch_errors(
    payload: bytes, count: int, attrs: int, last: int
) -> None:
    """The CRC normally hides record-parsing paths; resealing exposes them to arbitrary bytes."""
    header = struct.pack(">qiibIhiqqqhii", 0, 0, 0, 2, 0, attrs, last, TS, TS, -1, -1, -1, count)
    try:
        consume(reseal(header + payload))
    except BatchError:
        pass


@FUZZ
@given(values=values_st, pos=st.integers(0, 10_000), byte=st.integers(0, 255), control=st.booleans())
def test_mutated_then_resealed_batches_raise_only_batch_errors(
    values: list[bytes], pos: int, byte: int, control: bool
) -> None:
    keys = [control_key(random.choice(list(ControlRecordType)))] * len(values) if control else None
    raw = bytearray(encode_batch(0, values, epoch=0, timestamp=TS, control=control, keys=keys))
    i = BATCH_OVERHEAD + pos % (len(raw) - BATCH_OVERHEAD)
    raw[i] = byte
    try:
        consume(reseal(raw))
    except BatchError:
        pass


# ----------------------------------------------------------------------------------------------
# compression


def _gzip_batch_from_kafka_python(n: int) -> tuple[bytes, list[tuple[int, bytes | None, bytes, list]]]:
    bld = MemoryRecordsBuilder(magic=2, compression_type=1, batch_size=1 << 20)
    want = []
    for i in range(n):
        key = None if i % 2 else b"key-%d" % i
        headers = [("h", b"x"), ("n", None)] if i % 3 == 0 else []
        value = b"metadata " * 8 + bytes([i % 256])
        assert bld.append(timestamp=TS + i, key=key, value=value, headers=headers) is not None
        want.append((TS + i, key, value, headers))
    bld.close()
    return bytes(bld.buffer()), want


def test_gzip_batches_written_by_kafka_python_decode_to_the_same_records() -> None:
    raw, want = _gzip_batch_from_kafka_python(200)
    b = read_batch(raw)
    assert b.compression == 1 and b.records_count == 200
    assert b.max_timestamp == TS + 199
    assert [(r.timestamp, r.key, r.value, r.headers) for r in b.records()] == want
    assert [r.offset for r in b.records()] == list(range(200))


def test_corrupt_gzip_payload_and_unsupported_codecs_raise_batch_errors() -> None:
    raw, _ = _gzip_batch_from_kafka_python(50)
    with pytest.raises(CorruptBatchError):
        read_batch(reseal(raw[:-8])).records()  # gzip trailer cut off
    with pytest.raises(CorruptBatchError):
        read_batch(reseal(raw[:61] + b"\x1f\x8b" + bytes(40))).records()
    # two gzip members concatenated are one stream, as Java's GZIPInputStream reads them
    plain = encode_batch(0, [b"a", b"b"], epoch=0, timestamp=TS)
    header, body = bytearray(plain[:61]), plain[61:]
    header[22] |= 1  # gzip
    two_members = reseal(bytes(header) + gzip.compress(body[:4]) + gzip.compress(body[4:]))
    assert [r.value for r in read_batch(two_members).records()] == [b"a", b"b"]
    for codec, exc in (
        (2, UnsupportedCompression),
        (3, UnsupportedCompression),
        (4, UnsupportedCompression),
        (5, CorruptBatchError),
        (7, CorruptBatchError),
    ):
        hdr = bytearray(encode_batch(0, [b"a"], epoch=0, timestamp=TS))
        hdr[22] |= codec
        with pytest.raises(exc):
            read_batch(reseal(hdr)).records()
    assert not issubclass(UnsupportedCompression, CorruptBatchError)  # recovery must not truncate at it


def test_log_append_time_batches_give_every_record_the_max_timestamp() -> None:
    raw = bytearray(encode_batch(0, [b"a", b"b"], epoch=0, timestamp=TS))
    raw[22] |= 0x08
    struct.pack_into(">q", raw, 35, TS + 99)
    assert [r.timestamp for r in read_batch(reseal(raw)).records()] == [TS + 99, TS + 99]


# ----------------------------------------------------------------------------------------------
# independent codecs: kafka-python


def _kp_batches(buf: bytes) -> list[DefaultRecordBatch]:
    return list(MemoryRecords(buf))


@given(
    values=values_st,
    base=st.integers(0, 2**40),
    epoch=st.integers(0, 2**31 - 1),
    ts=st.integers(0, 2**45),
    control=st.booleans(),
)
def test_kafka_python_accepts_our_batches_and_reads_the_same_records(
    values: list[bytes], base: int, epoch: int, ts: int, control: bool
) -> None:
    keys = [control_key(ControlRecordType.LEADER_CHANGE)] * len(values) if control else None
    raw = encode_batch(base, values, epoch=epoch, timestamp=ts, control=control, keys=keys)
    (kb,) = _kp_batches(raw)
    assert kb.validate_crc()
    assert (kb.base_offset, kb.leader_epoch, kb.crc, kb.attributes) == (
        base,
        epoch,
        read_batch(raw).crc,
        0x20 if control else 0,
    )
    assert (kb.last_offset_delta, kb.first_timestamp, kb.max_timestamp, kb.records_count) == (
        len(values) - 1,
        ts,
        ts,
        len(values),
    )
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (-1, -1, -1)
    assert kb.is_control_batch == control and kb.size_in_bytes == len(raw)
    recs = list(kb)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == [
        (base + i, ts, keys[i] if keys else None, v, []) for i, v in enumerate(values)
    ]
    if control:
        assert all(r.type == ControlRecordType.LEADER_CHANGE and r.version == 0 for r in recs)


def test_kafka_python_iterates_our_concatenated_log_batch_by_batch() -> None:
    buf, _ = three_batches()
    kbs = _kp_batches(buf)
    assert [b.base_offset for b in kbs] == [0, 2, 3]
    assert all(b.validate_crc() for b in kbs)
    assert [b.is_control_batch for b in kbs] == [False, True, False]


record_st = st.tuples(
    st.integers(0, 10_000),  # timestamp delta
    st.none() | st.binary(max_size=30),
    st.none() | st.binary(max_size=200),
    st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3),
)


@given(records=st.lists(record_st, min_size=1, max_size=30), codec=st.sampled_from([0, 1]))
def test_we_read_kafka_python_batches_exactly_as_kafka_python_does(records: list, codec: int) -> None:
    bld = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 20)
    for d, k, v, h in records:
        bld.append(timestamp=TS + d, key=k, value=v, headers=h)
    bld.close()
    raw = bytes(bld.buffer())
    (kb,) = _kp_batches(raw)
    ours = read_batch(raw)
    assert (ours.crc, ours.attributes, ours.base_timestamp, ours.max_timestamp, ours.records_count) == (
        kb.crc,
        kb.attributes,
        kb.first_timestamp,
        kb.max_timestamp,
        kb.records_count,
    )
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in ours.records()] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in kb
    ]


# ----------------------------------------------------------------------------------------------
# independent codecs: kio


def _kio_ts(ms: int) -> TZAwareMicros:
    return TZAwareMicros.parse(datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC))


@given(
    values=values_st,
    base=st.integers(0, 2**40),
    epoch=st.integers(0, 2**31 - 1),
    seconds=st.integers(0, 2**32),
    control=st.booleans(),
)
def test_kio_accepts_our_batches_and_reads_the_same_records(
    values: list[bytes], base: int, epoch: int, seconds: int, control: bool
) -> None:
    ts = seconds * 1000  # kio keeps record timestamps at whole-second precision
    keys = [control_key(ControlRecordType.KRAFT_VERSION)] * len(values) if control else None
    raw = encode_batch(base, values, epoch=epoch, timestamp=ts, control=control, keys=keys)
    kb, size = kio_read_batch(raw + b"\x00" * 3, 0)  # kio validates the CRC and sizes itself
    ours = read_batch(raw)
    assert size == len(raw)
    assert (kb.base_offset, kb.batch_length, kb.partition_leader_epoch, kb.crc, kb.attributes) == (
        base,
        ours.batch_length,
        epoch,
        ours.crc,
        ours.attributes,
    )
    assert (kb.last_offset_delta, kb.base_timestamp, kb.max_timestamp) == (len(values) - 1, ts, ts)
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (-1, -1, -1)
    assert [(r.offset, r.key, r.value, r.headers, int(r.timestamp.timestamp() * 1000)) for r in kb.records] == [
        (base + i, keys[i] if keys else None, v, (), ts) for i, v in enumerate(values)
    ]


kio_record_st = st.tuples(
    st.integers(0, 1000),  # seconds after the first record
    st.none() | st.binary(max_size=30),
    st.none() | st.binary(max_size=200),
    st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3),
)


@given(
    records=st.lists(kio_record_st, min_size=1, max_size=20),
    base=st.integers(0, 2**40),
    epoch=st.integers(0, 2**31 - 1),
    control=st.booleans(),
)
def test_we_read_kio_written_batches_including_control_batches(
    records: list, base: int, epoch: int, control: bool
) -> None:
    first = TS // 1000 * 1000
    kio_records = tuple(
        Record(
            attributes=i8(0),
            timestamp=_kio_ts(first + (0 if i == 0 else d * 1000)),
            offset=i64(base + i),
            key=k,
            value=v,
            headers=tuple(RecordHeader(key=hk.encode(), value=hv) for hk, hv in h),
        )
        for i, (d, k, v, h) in enumerate(records)
    )
    nb = NewRecordBatch(
        producer_id=i64(-1),
        producer_epoch=i16(-1),
        base_sequence=i32(-1),
        partition_leader_epoch=i32(epoch),
        attributes=i16(0x20 if control else 0),
        records=kio_records,
    )
    f = io.BytesIO()
    kio_write_batch(f, nb)
    ours = read_batch(f.getvalue())
    assert ours.is_control == control and ours.partition_leader_epoch == epoch and ours.base_offset == base
    assert ours.max_timestamp == max([first] + [first + d * 1000 for d, *_ in records[1:]])
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in ours.records()] == [
        (base + i, first + (0 if i == 0 else d * 1000), k, v, h) for i, (d, k, v, h) in enumerate(records)
    ]


def test_kio_written_leader_change_control_batch_decodes_to_the_message() -> None:
    msg = LeaderChange(leader_id=3, voters=[LeaderChange.Voter(voter_id=3)], granting_voters=[])
    nb = NewRecordBatch(
        producer_id=i64(-1),
        producer_epoch=i16(-1),
        base_sequence=i32(-1),
        partition_leader_epoch=i32(9),
        attributes=i16(0x20),
        records=(
            Record(
                attributes=i8(0),
                timestamp=_kio_ts(TS),
                offset=i64(40),
                key=bytes.fromhex("00000002"),
                value=msg.encode(0),
                headers=(),
            ),
        ),
    )
    f = io.BytesIO()
    kio_write_batch(f, nb)
    raw = f.getvalue()
    assert raw == encode_control_batch(40, [(ControlRecordType.LEADER_CHANGE, msg)], epoch=9, timestamp=TS)
    (rec,) = read_batch(raw).records()
    assert decode_control_record(rec) == (ControlRecordType.LEADER_CHANGE, msg)


def assert_values_as_records(batch: Any, where: object = None) -> None:
    """Batch.values() gives what records() gives, or fails with the same CorruptBatchError."""

    def outcome(f: Any) -> Any:
        try:
            return f()
        except CorruptBatchError as e:
            return str(e)
    assert outcome(batch.values) == outcome(lambda: [r.value for r in batch.records()]), where


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(st.binary(max_size=300), min_size=1, max_size=40), data=st.data())
def test_values_equal_the_records_values_even_on_corrupt_records(values: list[bytes], data: st.DataObject) -> None:
    """Batch.values() has a fast path for batches as KRaft writes them; it must give what
    records() gives, or the same error, whatever the record bytes."""
    import dataclasses

    batch = read_batch(encode_batch(7, values, epoch=1, timestamp=5))
    raw = bytearray(batch.raw)
    if data.draw(st.booleans()):
        i = data.draw(st.integers(BATCH_OVERHEAD, len(raw) - 1))
        raw[i] ^= data.draw(st.integers(1, 255))
    corrupt = dataclasses.replace(batch, raw=bytes(raw))
    assert_values_as_records(corrupt)


def test_values_of_a_big_batch_use_two_and_three_byte_offset_deltas() -> None:
    values = [bytes([i % 251]) * (i % 200) for i in range(10_000)]
    batch = read_batch(encode_batch(0, values, epoch=1, timestamp=5))
    assert batch.values() == values == [r.value for r in batch.records()]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 120)), min_size=1, max_size=6),
       flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(-2, 8), st.integers(1, 255)),
                      max_size=3))
def test_values_of_runs_of_one_size_equal_the_records_values_even_when_corrupt(runs: list, flips: list) -> None:
    """Records of one size are read a column at a time after the first of them: across the
    offset deltas' one- to two-byte boundary, at value lengths whose varint takes one or two
    bytes, and with bytes flipped anywhere (a flip must be caught, or read, as records() does)."""
    import dataclasses

    values = [bytes([n % 251]) * size for k, (size, count) in enumerate(runs) for n in range(k, k + count)]
    batch = read_batch(encode_batch(7, values, epoch=1, timestamp=5))
    assert batch.values() == values == [r.value for r in batch.records()]
    def varint_size(v: int) -> int:
        return 1 if v < 0x80 else 2 if v < 0x4000 else 3

    starts, at = [], BATCH_OVERHEAD  # where each record begins: a flip goes near one, in its header
    for n, v in enumerate(values):
        body = 4 + varint_size(n << 1) + varint_size(len(v) << 1) + len(v)
        starts.append(at)
        at += varint_size(body << 1) + body
    assert at == len(batch.raw)
    raw = bytearray(batch.raw)
    for which, offset, x in flips:
        raw[max(BATCH_OVERHEAD, min(starts[int(which * len(starts))] + offset, len(raw) - 1))] ^= x
    corrupt = dataclasses.replace(batch, raw=bytes(raw))
    assert_values_as_records(corrupt)


def test_values_of_a_big_batch_of_one_size_cross_every_offset_delta_width() -> None:
    values = [bytes([i % 251]) * 90 for i in range(9_000)]
    batch = read_batch(encode_batch(0, values, epoch=1, timestamp=5))
    assert batch.values() == values == [r.value for r in batch.records()]


@pytest.mark.parametrize("size", [10, 70])  # a value length of one varint byte, of two
@pytest.mark.parametrize("record", [10, 70])  # an offset delta of one varint byte, of two
def test_every_byte_of_a_record_inside_a_run_is_checked_as_records_checks_it(size: int, record: int) -> None:
    """Each byte of a record read a column at a time, flipped to each kind of value, gives what
    records() gives: the same values or the same error."""
    import dataclasses

    values = [bytes([n % 251]) * size for n in range(100)]
    batch = read_batch(encode_batch(7, values, epoch=1, timestamp=5))
    stride = (len(batch.raw) - BATCH_OVERHEAD - 64) // 100  # records 64..99 are a byte longer
    start = BATCH_OVERHEAD + record * stride + max(0, record - 64)

    for at in range(start, start + stride + (record >= 64)):
        for x in (0x01, 0x02, 0x7F, 0x80, 0xFF):
            raw = bytearray(batch.raw)
            raw[at] ^= x
            assert_values_as_records(dataclasses.replace(batch, raw=bytes(raw)), (at - start, x))

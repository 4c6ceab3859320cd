"""View decoders: a message's ``records`` fields as read-only memoryviews of the frame (what
the client asks for when it reads a Fetch response), everything else as the bytes decoder reads
it; hostile bytes fail in the one decoder exactly when they fail in the other."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftsim.rpc import frames, registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.codec_errors import DecodeError
from tests.message_strategies import message_strategy

VIEW_MESSAGES = [(name, v) for name in ("FetchResponse", "FetchSnapshotResponse", "ProduceRequest")
                 for v in registry.message_class(name)._spec.versions()]


def records_of(msg: Any) -> list[Any]:
    """Every records field's value in a Fetch/FetchSnapshot response or a Produce request."""
    name = type(msg).__name__
    if name == "FetchResponse":
        return [p.records for t in msg.responses for p in t.partitions]
    if name == "FetchSnapshotResponse":
        return [p.unaligned_records for t in msg.topics for p in t.partitions]
    return [p.records for t in msg.topic_data for p in t.partition_data]


@pytest.mark.parametrize("name,version", VIEW_MESSAGES, ids=[f"{n}-v{v}" for n, v in VIEW_MESSAGES])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), big=st.sampled_from([0, 200, 70_000]))
def test_view_decoder_equals_bytes_decoder(name: str, version: int, data: st.DataObject, big: int) -> None:
    cls = registry.message_class(name)
    msg = data.draw(message_strategy(cls, version))
    for i, r in enumerate(records_of(msg)):  # longer records too: a multi-byte length
        if big and r is not None:
            owner = _owner_of_records(msg, i)
            setattr(owner, "unaligned_records" if name == "FetchSnapshotResponse" else "records", bytes([i]) * big)
    wire = msg.encode(version)
    plain = cls.decode(wire, version)
    for buffer in (wire, bytearray(wire)):
        viewed = cls.decode(buffer, version, views=True)
        assert viewed == plain
        for r in records_of(viewed):
            assert r is None or (type(r) is memoryview and r.readonly)
    assert all(r is None or type(r) is bytes for r in records_of(plain))


def _owner_of_records(msg: Any, i: int) -> Any:
    name = type(msg).__name__
    if name == "FetchResponse":
        owners = [p for t in msg.responses for p in t.partitions]
    elif name == "FetchSnapshotResponse":
        owners = [p for t in msg.topics for p in t.partitions]
    else:
        owners = [p for t in msg.topic_data for p in t.partition_data]
    return owners[i]


def _fetch_frames() -> list[bytes]:
    resp = registry.response_class(ApiKey.FETCH)
    out = []
    for v in resp._spec.versions():
        part = resp.PartitionData(partition_index=0, high_watermark=10, records=b"r" * 300)
        body = resp(responses=[resp.FetchableTopicResponse(topic="t", partitions=[part])])
        try:
            out.append((v, bytes(frames.encode_response(body, v, 7))[4:]))
        except Exception:  # noqa: BLE001 - a topic name or id is not in every version
            continue
    return out


FETCH_FRAMES = _fetch_frames()


@settings(max_examples=1500, deadline=None)
@given(idx=st.integers(0, len(FETCH_FRAMES) - 1), cut=st.integers(0, 400),
       flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4))
def test_view_decoder_on_hostile_bytes(idx: int, cut: int, flips: list[tuple[int, int]]) -> None:
    """Truncated and mutated Fetch responses: the view decoder fails (with DecodeError) exactly
    when the bytes decoder does, and otherwise reads the same values."""
    version, frame = FETCH_FRAMES[idx]
    bad = bytearray(frame)
    for pos, val in flips:
        if pos < len(bad):
            bad[pos] = val
    bad = bad[:cut] if cut < len(bad) else bad
    codec = frames.api_codec(ApiKey.FETCH, version)
    results = []
    for views in (False, True):
        try:
            results.append(codec.decode_response(bytes(bad), views))
        except DecodeError as e:
            results.append(type(e))
    assert results[0] == results[1]




def test_views_of_a_message_without_records_decode_as_bytes() -> None:
    """Asking for views where there are no records fields changes nothing (no view decoders)."""
    cls = registry.response_class(ApiKey.API_VERSIONS)
    msg = cls(api_keys=[cls.ApiVersion(api_key=1, min_version=0, max_version=17)])
    wire = msg.encode(3)
    assert cls._view_decoders is None
    assert cls.decode(bytearray(wire), 3, views=True) == msg
    codec = frames.api_codec(ApiKey.API_VERSIONS, 3)
    assert codec.dec_resp_view is None
    assert codec.decode_response(memoryview(bytes(codec.encode_response(msg, 5))[4:]), True) == (5, msg)

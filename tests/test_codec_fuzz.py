"""Hostile bytes: whatever arrives, decoding ends in a value or a DecodeError, quickly."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftsim.rpc import frames, registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.codec_errors import DecodeError

MESSAGES = [(name, v) for name in registry.names() for v in registry.message_class(name)._spec.versions()]


@pytest.mark.parametrize("name,version", MESSAGES, ids=[f"{n}-v{v}" for n, v in MESSAGES])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200))
def test_random_bytes_decode_or_raise_decode_error(name: str, version: int, data: bytes) -> None:
    cls = registry.message_class(name)
    try:
        cls.decode(data, version)
    except DecodeError:
        pass


def _sample_frames() -> list[bytes]:
    out = []
    for key in registry.api_keys():
        req = registry.request_class(key)
        for v in req._spec.versions():
            try:
                out.append(frames.encode_request(req(), v, 7, "fuzz")[4:])
            except Exception:  # noqa: BLE001 - some defaults are not encodable in some versions
                continue
    return out


SAMPLES = _sample_frames()


@settings(max_examples=2000, deadline=None)
@given(idx=st.integers(0, len(SAMPLES) - 1), cut=st.integers(0, 400),
       flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4))
def test_truncated_and_mutated_frames(idx: int, cut: int, flips: list[tuple[int, int]]) -> None:
    frame = bytearray(SAMPLES[idx])
    for pos, val in flips:
        if pos < len(frame):
            frame[pos] = val
    frame = frame[: min(cut, len(frame))] if cut < len(frame) else frame
    try:
        frames.decode_request(bytes(frame))
    except DecodeError:
        pass


def test_huge_claimed_counts_fail_fast() -> None:
    # CreateTopics v7 (flexible): compact array count near 2^32 then nothing.
    frame = frames.encode_request(registry.request_class(ApiKey.CREATE_TOPICS)(), 7, 1, "x")[4:]
    hdr_len = 4 + 4 + 2 + 1 + 1  # key, version, correlation, client id "x", tag section
    evil = frame[:hdr_len] + bytes.fromhex("ffffffff0f")
    with pytest.raises(DecodeError):
        frames.decode_request(evil)
    # Classic (v4) int32 count of 2^31-1.
    frame = frames.encode_request(registry.request_class(ApiKey.CREATE_TOPICS)(), 4, 1, "x")[4:]
    evil = frame[: 4 + 4 + 3] + bytes.fromhex("7fffffff")
    with pytest.raises(DecodeError):
        frames.decode_request(evil)

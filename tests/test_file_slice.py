"""Records served from a segment file (rpc/file_slice.py) frame to the very bytes the same
records would as an in-memory value, whichever way they are written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kraftsim.rpc import frames
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.file_slice import FileSlice, SplitFrame
from kraftsim.rpc.messages import FetchResponse

PAYLOAD = bytes(range(256)) * 1000  # 256,000 bytes: past the one-byte varint length


def _response(records: object, version: int = 17) -> FetchResponse:
    pd = FetchResponse.PartitionData(partition_index=0, high_watermark=7, records=records)
    if version >= 12:
        pd.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=1, leader_epoch=3)
    topic = FetchResponse.FetchableTopicResponse(topic="__cluster_metadata", partitions=[pd])
    endpoints = [FetchResponse.NodeEndpoint(node_id=1, host="h", port=9)] if version >= 16 else []
    return FetchResponse(responses=[topic], node_endpoints=endpoints)


def _slice(tmp_path: Path, skip: int = 100) -> FileSlice:
    path = tmp_path / "segment.log"
    path.write_bytes(b"x" * skip + PAYLOAD + b"y" * 50)
    fd = os.open(path, os.O_RDONLY)
    try:
        return FileSlice(fd, skip, len(PAYLOAD))  # holds its own descriptor
    finally:
        os.close(fd)


def test_a_slice_frames_as_its_bytes_would_at_every_fetch_version(tmp_path: Path) -> None:
    for version in (4, 11, 12, 13, 16, 17):
        codec = frames.api_codec(ApiKey.FETCH, version)
        assert codec.response_slices
        expected = codec.encode_response(_response(PAYLOAD, version), 5)
        split = codec.encode_response(_response(_slice(tmp_path), version), 5)
        assert isinstance(split, SplitFrame)
        assert [type(p) for p in split.parts] == [bytes, FileSlice, bytes]
        assert len(split) == len(expected)
        assert bytes(split) == expected
        _, body = codec.decode_response(bytes(expected)[4:])
        assert bytes(body.responses[0].partitions[0].records) == PAYLOAD


def test_a_slice_in_a_plain_buffer_is_read_in_place(tmp_path: Path) -> None:
    out = bytearray()
    _response(_slice(tmp_path)).encode_into(out, 16)
    plain = _response(PAYLOAD).encode(16)
    assert bytes(out) == plain


def test_apis_without_records_never_split() -> None:
    assert not frames.api_codec(ApiKey.BROKER_HEARTBEAT, 1).response_slices
    assert frames.api_codec(ApiKey.FETCH_SNAPSHOT, 1).response_slices


def test_a_slice_closes_its_descriptor_once_read(tmp_path: Path) -> None:
    s = _slice(tmp_path)
    assert s.fd >= 0
    assert s.read(10) == PAYLOAD[10:]
    assert s.fd == -1
    with pytest.raises(OSError):
        s.read()

"""The client's receive path: responses read straight into memory (FrameReceiver), and the view
decoders that leave a Fetch response's records where they were received. Whatever way the
bytes arrive, what comes out equals what the bytes decoder makes of the same frame."""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftsim.metadata.batch import encode_batch
from kraftsim.rpc import frames, registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import ConnectionClosed, KafkaClient
from kraftsim.rpc.frame_reader import FrameError, FrameReader, FrameReceiver
from pyspark_kraft.network import RaftObserver, complete_prefix

LARGE = FrameReceiver.LARGE
_SIZE = struct.Struct(">i")


def prefixed(frames_: list[bytes]) -> bytes:
    return b"".join(_SIZE.pack(len(f)) + f for f in frames_)


def receive(rx: FrameReceiver, stream: bytes, reads: list[int]) -> list[bytes | bytearray]:
    """``stream`` through ``rx`` as a transport would: each read at most the next of ``reads``
    bytes (cycled) and at most what get_buffer offers, written into that buffer."""
    out: list[bytes | bytearray] = []
    pos, i = 0, 0
    while pos < len(stream):
        buf = rx.get_buffer()
        assert len(buf) > 0  # asyncio refuses an empty buffer
        n = min(len(buf), reads[i % len(reads)], len(stream) - pos)
        i += 1
        buf[:n] = stream[pos:pos + n]
        pos += n
        out += rx.updated(n)
    return out


_frame_sizes = st.one_of(st.integers(1, 64), st.integers(LARGE - 8, LARGE + 8), st.integers(LARGE + 9, 3 * LARGE))


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(_frame_sizes, min_size=1, max_size=8),
       reads=st.lists(st.one_of(st.integers(1, 7), st.integers(1, 3 * LARGE)), min_size=1, max_size=10),
       seed=st.integers(0, 255))
def test_frames_split_across_reads_come_out_whole(sizes: list[int], reads: list[int], seed: int) -> None:
    want = [bytes((seed + i + j) % 256 for j in range(n)) for i, n in enumerate(sizes)]
    stream = prefixed(want)
    got = receive(FrameReceiver(4 * LARGE), stream, reads)
    assert [bytes(f) for f in got] == want
    assert [bytes(f) for f in FrameReader(4 * LARGE).feed(stream)] == want  # as the server's reader frames them
    # small frames are bytes copied out of the scratch buffer, large ones a bytearray of their own
    assert [type(f) for f in got] == [bytearray if n > LARGE else bytes for n in sizes]


def test_one_byte_reads() -> None:
    want = [b"a" * 5, b"b" * (LARGE + 1), b"c", b"d" * (2 * LARGE)]
    got = receive(FrameReceiver(1 << 20), prefixed(want), [1])
    assert [bytes(f) for f in got] == want


def test_large_frames_are_never_reused() -> None:
    """A view into one large frame still reads the same bytes after the next is received."""
    rx = FrameReceiver(1 << 20)
    first = receive(rx, prefixed([b"x" * (LARGE + 100)]), [1000])[0]
    held = memoryview(first)[10:20]
    second = receive(rx, prefixed([b"y" * (LARGE + 100)]), [1000])[0]
    assert second is not first and bytes(held) == b"x" * 10
    assert rx.buffered == 0


@pytest.mark.parametrize("size", [0, -1, -(2**31), 100_001, 2**31 - 1])
@pytest.mark.parametrize("read", [1, 4, 64])
def test_hostile_size_prefix_refused(size: int, read: int) -> None:
    """Refused on the prefix alone, before a buffer for it exists (as FrameReader does)."""
    rx = FrameReceiver(100_000)
    stream = _SIZE.pack(size) + b"z" * 60
    with pytest.raises(FrameError):
        receive(rx, stream, [read])
    assert rx._big is None
    with pytest.raises(FrameError):
        FrameReader(100_000).feed(stream)


def test_frame_of_max_size_accepted() -> None:
    got = receive(FrameReceiver(100_000), prefixed([b"m" * 100_000]), [4096])
    assert [bytes(f) for f in got] == [b"m" * 100_000]


# -- through a socket --------------------------------------------------------------------------

Handler = Callable[[Any, Any], Awaitable[None]]


async def serve(handle: Handler) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def read_request(reader: asyncio.StreamReader) -> tuple[Any, Any]:
    size = _SIZE.unpack(await reader.readexactly(4))[0]
    return frames.decode_request(await reader.readexactly(size))


async def write_in_pieces(writer: asyncio.StreamWriter, data: bytes, piece: int) -> None:
    for i in range(0, len(data), piece):
        writer.write(data[i:i + piece])
        await writer.drain()


def fetch_response(records: bytes) -> Any:
    """A Fetch response of the highest version (the one these tests' clients speak)."""
    resp = registry.response_class(ApiKey.FETCH)
    part = resp.PartitionData(partition_index=0, high_watermark=100, records=records)
    return resp(responses=[resp.FetchableTopicResponse(topic_id=uuid.UUID(int=1), partitions=[part])])


async def test_large_response_through_a_socket_equals_the_bytes_decode() -> None:
    """An 8 MiB Fetch response written in 1000-byte pieces, then in one: with views its records
    are a read-only view equal to what the bytes decoder reads from the same frame."""
    records = bytes(range(256)) * (8 * 4096)
    version = registry.request_class(ApiKey.FETCH).highest_version()
    codec = frames.api_codec(ApiKey.FETCH, version)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for piece in (1000, 1 << 24, 1000):
            hdr, _ = await read_request(reader)
            frame = bytes(codec.encode_response(fetch_response(records), hdr.correlation_id))
            await write_in_pieces(writer, frame, piece)
        writer.close()

    server, port = await serve(handle)
    async with server:
        client = await KafkaClient.connect("127.0.0.1", port)
        try:
            req = registry.request_class(ApiKey.FETCH)()
            frame = bytes(codec.encode_response(fetch_response(records), 2))[4:]
            _, want = codec.decode_response(frame)
            for views in (True, True, False):
                got = await client.request(req, version, views=views)
                assert got == want
                r = got.responses[0].partitions[0].records
                assert bytes(r) == records
                assert (type(r), getattr(r, "readonly", None)) == ((memoryview, True) if views else (bytes, None))
        finally:
            await client.close()


async def test_small_pipelined_responses() -> None:
    """Many small responses in one read each way: every one matched to its request."""
    codec = frames.api_codec(ApiKey.API_VERSIONS, 3)
    resp_cls = registry.response_class(ApiKey.API_VERSIONS)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        out = bytearray()
        for _ in range(200):
            hdr, _ = await read_request(reader)
            out += codec.encode_response(resp_cls(throttle_time_ms=hdr.correlation_id), hdr.correlation_id)
        await write_in_pieces(writer, bytes(out), 777)
        writer.close()

    server, port = await serve(handle)
    async with server:
        client = await KafkaClient.connect("127.0.0.1", port)
        try:
            futs = [client.send(registry.request_class(ApiKey.API_VERSIONS)(), 3, correlation_id=i) for i in range(200)]
            got = await asyncio.gather(*futs)
            assert [r.throttle_time_ms for r in got] == list(range(200))
        finally:
            await client.close()


async def test_oversized_response_prefix_closes_the_connection() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(_SIZE.pack(2**31 - 1) + b"\0" * 100)
        await writer.drain()
        await reader.read()  # until the client hangs up

    server, port = await serve(handle)
    async with server:
        client = await KafkaClient.connect("127.0.0.1", port, max_response_size=1 << 20)
        with pytest.raises(ConnectionClosed, match="frame size"):
            await client.request(registry.request_class(ApiKey.API_VERSIONS)(), 3)
        await client.wait_closed()


async def test_raft_observer_gets_whole_batches_as_a_view() -> None:
    """RaftObserver.fetch over the view path: the records are the whole batches of the response
    (a batch cut by the fetch size is left), as a view, equal to the bytes path's."""
    batches = b"".join(encode_batch(i * 10, [bytes([i]) * 5000] * 10, epoch=1, timestamp=1) for i in range(200))
    cut = batches + batches[:100]  # a torn batch at the end
    api_codec = frames.api_codec

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                hdr, body = await read_request(reader)
            except asyncio.IncompleteReadError:
                break
            codec = api_codec(hdr.request_api_key, hdr.request_api_version)
            if hdr.request_api_key == ApiKey.API_VERSIONS:
                rc = registry.response_class(ApiKey.API_VERSIONS)
                keys = [rc.ApiVersion(api_key=k, min_version=0,
                                      max_version=registry.request_class(k).highest_version())
                        for k in (ApiKey.FETCH, ApiKey.FETCH_SNAPSHOT)]
                resp = rc(api_keys=keys)
            else:
                resp = fetch_response(cut)
            await write_in_pieces(writer, bytes(codec.encode_response(resp, hdr.correlation_id)), 65536)
        writer.close()

    server, port = await serve(handle)
    async with server:
        obs = RaftObserver(f"127.0.0.1:{port}")
        await obs.connect()
        try:
            got = await obs.fetch(0)
        finally:
            await obs.close()
    assert type(got.records) is memoryview and got.records.readonly
    assert got.records == batches and complete_prefix(cut) == len(batches)
    assert got.high_watermark == 100

"""A Fetch answer larger than the socket takes at once: its file slice goes out with ``sendfile``
as far as the socket takes it and the rest is read and queued (``rpc/server.py``), and every
answer pipelined behind it waits its turn. Through a real socket whose reader holds a small
receive buffer, so the server's first ``sendfile`` can never finish."""

from __future__ import annotations

import asyncio
import socket
import struct
from pathlib import Path

from kraftsim.metadata import records as recs
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.rpc import frames
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.messages import ApiVersionsRequest
from tests import harness
from tests.test_controller import Cluster
from tests.test_raft import fetch_request, partition

MB = 1 << 20


def grow(c: Cluster, megabytes: int) -> None:
    """Fill the stopped controller's log with ConfigRecords of 1 KiB values."""
    data = c.config.parent / "data"
    log = MetadataLog.open(data, LogConfig(segment_bytes=64 * MB, linger_ms=0))
    try:
        config = recs.by_name("ConfigRecord")
        values = [recs.frame(config(resource_type=4, resource_name="", name=f"f{i}", value="x" * 1024))
                  for i in range(1000)]
        epoch = max(log.last_epoch, 1)
        for _ in range(megabytes):
            log.append_values(values, epoch=epoch, timestamp=1)
        log.flush_now()
    finally:
        log.close()


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (n,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 30))
    return await asyncio.wait_for(reader.readexactly(n), 30)


async def small_window(c: Cluster) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = c.running.server.address
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    return await asyncio.open_connection(sock=sock, limit=MB)


async def test_answers_pipelined_behind_a_large_fetch_come_whole_and_in_order(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    grow(c, 20)  # about 21 MB: three full 8 MiB answers
    await c.start()
    try:
        fetch_codec = frames.api_codec(ApiKey.FETCH, 17)
        versions_codec = frames.api_codec(ApiKey.API_VERSIONS, 3)
        mlog = c.controller.mlog
        reader, writer = await small_window(c)
        sent = []
        for corr in range(1, 9):
            if corr % 2:
                writer.write(fetch_codec.encode_request(fetch_request(c, 0, 0), corr))
            else:
                writer.write(versions_codec.encode_request(ApiVersionsRequest(client_software_name="t",
                                                                              client_software_version="1"), corr))
            sent.append(corr)
        await writer.drain()
        expected = mlog.read(0, 8 * MB)
        assert len(expected) > 4 * MB  # more than any socket here takes in one sendfile
        for corr in sent:
            frame = await read_frame(reader)
            codec = fetch_codec if corr % 2 else versions_codec
            got_corr, body = codec.decode_response(frame)
            assert got_corr == corr
            if corr % 2:
                assert bytes(partition(body).records) == expected, partition(body)
            else:
                assert body.error_code == 0
        writer.close()
    finally:
        await c.stop()


async def test_a_reader_gone_mid_slice_costs_the_others_nothing(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    grow(c, 12)
    await c.start()
    try:
        reader, writer = await small_window(c)
        writer.write(frames.api_codec(ApiKey.FETCH, 17).encode_request(fetch_request(c, 0, 0), 1))
        await writer.drain()
        first = await asyncio.wait_for(reader.readexactly(64 * 1024), 30)  # the answer has begun
        assert struct.unpack(">i", first[:4])[0] > 4 * MB
        writer.transport.abort()  # gone with most of the slice unsent
        server = c.running.server
        await harness.poll_until(lambda: len(server.connections) == 1, 30)  # only c.client's is left
        r = await c.req(fetch_request(c, 0, 0), 17)  # another client is served, whole
        assert bytes(partition(r).records) == c.controller.mlog.read(0, 8 * MB)
    finally:
        await c.stop()

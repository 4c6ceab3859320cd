"""The server over real loopback sockets: ApiVersions, pipelining, framing and bad input."""

from __future__ import annotations

import asyncio
import gc
import random
import struct

import pytest

from kraftsim.rpc import frames, registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.clock import ManualClock
from kraftsim.rpc.dispatch import Dispatcher
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.server import GC_PAUSE_BYTES, KafkaServer
from tests import harness
from tests.conftest import assert_closed, read_frame

HB_REQ = registry.request_class(ApiKey.BROKER_HEARTBEAT)
HB_RESP = registry.response_class(ApiKey.BROKER_HEARTBEAT)
AV_REQ = registry.request_class(ApiKey.API_VERSIONS)


class Features:
    def supported_features(self) -> dict[str, tuple[int, int]]:
        return {"metadata.version": (7, 21), "kraft.version": (0, 1)}

    def finalized_features(self) -> tuple[int, dict[str, int]]:
        return 42, {"metadata.version": 21, "kraft.version": 0}

    def zk_migration_ready(self) -> bool:
        return True


def heartbeat_handler(ctx, req):  # type: ignore[no-untyped-def]
    return HB_RESP(is_caught_up=True, is_fenced=req.broker_id % 2 == 0)


async def open_raw(server: KafkaServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*server.address)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
async def test_api_versions_every_version(server: KafkaServer, version: int) -> None:
    server.dispatcher.features = Features()
    server.dispatcher.register(63, heartbeat_handler)
    r, w = await open_raw(server)
    body = AV_REQ(client_software_name="kraftsim-test", client_software_version="1.0") if version >= 3 else AV_REQ()
    w.write(frames.encode_request(body, version, 77, "t"))
    frame = await read_frame(r)
    # Response header is v0 for every ApiVersions version: the body starts right after the id.
    corr, resp = frames.decode_response(frame, 18, version)
    assert corr == 77
    assert resp.error_code == 0
    assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [(18, 0, 4), (63, 0, 1)]
    if version >= 3:
        assert resp.finalized_features_epoch == 42
        assert [(f.name, f.min_version_level, f.max_version_level) for f in resp.finalized_features] == [
            ("metadata.version", 21, 21)]  # level 0 is never listed
        supported = [(f.name, f.min_version, f.max_version) for f in resp.supported_features]
        if version >= 4:
            assert supported == [("metadata.version", 7, 21), ("kraft.version", 0, 1)]  # the source's order
        else:
            assert supported == [("metadata.version", 7, 21)]  # min 0 hidden before v4
        assert resp.zk_migration_ready is True
    w.close()


async def test_api_versions_too_new_gets_v0_unsupported_version(server: KafkaServer) -> None:
    r, w = await open_raw(server)
    # A v5 request: header v2, an unknown body the server must not parse.
    w.write(struct.pack(">ihhi", 4 + 4 + 2 + 1 + 3, 18, 5, 99) + b"\x00\x00" + b"\x00" + b"\x01\x02\x03")
    frame = await read_frame(r)
    corr, resp = frames.decode_response(frame, 18, 0)
    assert corr == 99
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [(18, 0, 4)]
    # The connection stays usable for a retry at a supported version.
    w.write(frames.encode_request(AV_REQ(), 0, 100, "t"))
    corr, resp = frames.decode_response(await read_frame(r), 18, 0)
    assert corr == 100 and resp.error_code == 0


async def test_api_versions_bad_software_name_is_invalid_request(server: KafkaServer) -> None:
    c = await KafkaClient.connect(*server.address)
    resp = await c.request(AV_REQ(client_software_name="-bad name", client_software_version="1"), 3)
    assert resp.error_code == ErrorCode.INVALID_REQUEST
    await c.close()


async def test_pipelined_requests_answer_in_order_even_when_handlers_finish_out_of_order(server: KafkaServer) -> None:
    async def slow(ctx, req):  # type: ignore[no-untyped-def]
        await asyncio.sleep(random.random() / 100)
        return HB_RESP(is_caught_up=True, is_fenced=req.broker_id % 2 == 0)

    server.dispatcher.register(63, slow)
    r, w = await open_raw(server)
    blob = b"".join(frames.encode_request(HB_REQ(broker_id=i), 1, 1000 + i, "p") for i in range(200))
    w.write(blob)
    for i in range(200):
        corr, resp = frames.decode_response(await read_frame(r), 63, 1)
        assert corr == 1000 + i
        assert resp.is_fenced == (i % 2 == 0)
    w.close()


async def test_sync_and_async_handlers_interleave_in_order(server: KafkaServer) -> None:
    async def slow(ctx, req):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.02)
        return HB_RESP(error_code=0)

    server.dispatcher.register(63, slow)
    r, w = await open_raw(server)
    w.write(frames.encode_request(HB_REQ(), 1, 1, "x") + frames.encode_request(AV_REQ(), 0, 2, "x"))
    assert frames.decode_response(await read_frame(r), 63, 1)[0] == 1
    assert frames.decode_response(await read_frame(r), 18, 0)[0] == 2
    w.close()


async def test_frame_split_across_many_writes(server: KafkaServer) -> None:
    server.dispatcher.register(63, heartbeat_handler)
    r, w = await open_raw(server)
    blob = frames.encode_request(HB_REQ(broker_id=3), 1, 5, "split") * 3
    for i in range(len(blob)):
        w.write(blob[i:i + 1])
        await w.drain()
    for _ in range(3):
        corr, resp = frames.decode_response(await read_frame(r), 63, 1)
        assert corr == 5 and resp.is_fenced is False
    w.close()


async def _still_serving(server: KafkaServer) -> None:
    c = await KafkaClient.connect(*server.address)
    resp = await c.request(AV_REQ(), 0, timeout=5)
    assert resp.error_code == 0
    await c.close()


@pytest.mark.parametrize("garbage", [
    b"\x00\x00\x00\x08" + b"\xde\xad\xbe\xef\x00\x00\x00\x01",      # unknown api key 0xdead
    b"\x00\x00\x00\x03abc",                                          # shorter than a header
    b"\x00\x00\x00\x00",                                             # zero length
    b"\xff\xff\xff\xf0",                                             # negative length
    b"\x7f\xff\xff\xff",                                             # 2 GiB claimed: refused before any read
    struct.pack(">ihhi", 8, 63, 9, 1),                               # heartbeat v9 does not exist
    struct.pack(">ihhi", 8, 3, 12, 1),                               # Metadata: not served here
])
async def test_bad_frames_close_only_that_connection(server: KafkaServer, garbage: bytes) -> None:
    server.dispatcher.register(63, heartbeat_handler)
    bystander = await KafkaClient.connect(*server.address)
    r, w = await open_raw(server)
    w.write(garbage)
    await assert_closed(r)
    resp = await bystander.request(HB_REQ(broker_id=1), 1, timeout=5)
    assert resp.is_caught_up is True
    await bystander.close()
    await _still_serving(server)


async def test_malformed_body_closes_connection(server: KafkaServer) -> None:
    server.dispatcher.register(63, heartbeat_handler)
    good = frames.encode_request(HB_REQ(broker_id=3), 1, 5, "t")
    truncated_body = good[4:-10]
    r, w = await open_raw(server)
    w.write(struct.pack(">i", len(truncated_body)) + truncated_body)
    await assert_closed(r)
    await _still_serving(server)


async def test_truncated_frame_then_disconnect_leaves_server_healthy(server: KafkaServer) -> None:
    r, w = await open_raw(server)
    w.write(struct.pack(">i", 1000) + b"\x00\x12\x00\x00")
    await w.drain()
    w.close()
    await _still_serving(server)


async def test_max_request_size_is_enforced_on_the_prefix() -> None:
    s = KafkaServer(Dispatcher(), max_request_size=1024)
    await s.start()
    try:
        r, w = await asyncio.open_connection(*s.address)
        w.write(struct.pack(">i", 1025))  # no body follows: the prefix alone must close it
        await assert_closed(r)
        c = await KafkaClient.connect(*s.address)
        assert (await c.request(AV_REQ(), 0)).error_code == 0
        await c.close()
    finally:
        await s.stop()


async def test_handler_exception_becomes_unknown_server_error(server: KafkaServer) -> None:
    def broken(ctx, req):  # type: ignore[no-untyped-def]
        raise RuntimeError("bug")

    server.dispatcher.register(63, broken)
    c = await KafkaClient.connect(*server.address)
    resp = await c.request(HB_REQ(), 1)
    assert resp.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert (await c.request(AV_REQ(), 0)).error_code == 0  # the connection survives
    await c.close()


async def test_a_large_request_is_handled_with_the_cyclic_collector_paused(server: KafkaServer) -> None:
    """Decoding a request of many elements allocates objects by the hundred thousand; the
    collections that would trigger walk them again and again, so a frame of GC_PAUSE_BYTES or
    more is handled with the collector paused, and it runs again for the next request."""
    ct_req, ct_resp = registry.request_class(ApiKey.CREATE_TOPICS), registry.response_class(ApiKey.CREATE_TOPICS)
    seen: list[tuple[int, bool]] = []

    def spy(ctx, req):  # type: ignore[no-untyped-def]
        seen.append((len(req.topics), gc.isenabled()))
        return ct_resp()

    server.dispatcher.register(ApiKey.CREATE_TOPICS, spy)
    topic = ct_req.CreatableTopic
    big = ct_req(topics=[topic(name=f"t{i:09d}", num_partitions=1, replication_factor=1) for i in range(14_000)])
    assert len(frames.encode_request(big, 7, 0, "t")) >= GC_PAUSE_BYTES
    c = await KafkaClient.connect(*server.address)
    await c.request(big, 7)
    await c.request(ct_req(topics=[topic(name="small", num_partitions=1, replication_factor=1)]), 7)
    await c.close()
    assert seen == [(14_000, False), (1, True)]
    assert gc.isenabled()


async def test_request_context_carries_client_id_and_address(server: KafkaServer) -> None:
    seen = []

    def spy(ctx, req):  # type: ignore[no-untyped-def]
        seen.append(ctx)
        return HB_RESP()

    server.dispatcher.register(63, spy)
    c = await KafkaClient.connect(*server.address, client_id="broker-7")
    await c.request(HB_REQ(), 0)
    await c.close()
    (ctx,) = seen
    assert ctx.client_id == "broker-7" and ctx.client_address == "127.0.0.1"
    assert ctx.principal == "User:ANONYMOUS" and ctx.listener == "CONTROLLER" and ctx.api_version == 0


async def test_five_hundred_concurrent_connections(server: KafkaServer) -> None:
    server.dispatcher.register(63, heartbeat_handler)
    clients = await asyncio.gather(*(KafkaClient.connect(*server.address, client_id=f"c{i}") for i in range(500)))
    assert len(server.connections) == 500
    resps = await asyncio.gather(*(c.request(HB_REQ(broker_id=i), 1, timeout=30) for i, c in enumerate(clients)))
    assert [r.is_fenced for r in resps] == [i % 2 == 0 for i in range(500)]
    await asyncio.gather(*(c.close() for c in clients))


async def test_idle_connections_are_reaped_in_virtual_time() -> None:
    clock = ManualClock()
    s = KafkaServer(Dispatcher(), connections_max_idle_ms=60_000, clock=clock)
    await s.start()
    try:
        idle = await KafkaClient.connect(*s.address)
        busy = await KafkaClient.connect(*s.address)
        await idle.request(AV_REQ(), 0)
        clock.advance(40_000)
        await busy.request(AV_REQ(), 0)
        clock.advance(30_000)  # idle: 70 s quiet, busy: 30 s quiet
        assert s.reap_idle() == 1
        await idle.wait_closed()
        assert (await busy.request(AV_REQ(), 0)).error_code == 0
        await busy.close()
    finally:
        await s.stop()


async def test_past_the_descriptor_limit_new_connections_are_closed_at_once_and_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    """Room for 5 connections under a (pretended) descriptor limit: those 5 are served, the
    others are closed at once rather than left in the backlog with accept() failing, and the
    refusals make one log line, not one each; a connection closed frees room for the next."""
    import os

    from kraftsim.rpc.server import DESCRIPTOR_RESERVE

    open_now = len(os.listdir("/proc/self/fd"))
    s = KafkaServer(Dispatcher(), max_descriptors=open_now + 1 + DESCRIPTOR_RESERVE + 5)
    await s.start()
    try:
        served = [await KafkaClient.connect(*s.address) for _ in range(5)]
        for c in served:
            assert (await c.request(AV_REQ(), 0)).error_code == 0
        with caplog.at_level("WARNING", logger="kraftsim.network"):
            refused = []
            for _ in range(20):
                r, w = await asyncio.open_connection(*s.address)
                await assert_closed(r)
                refused.append(w)
        assert len(s.connections) == 5
        lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert len(lines) == 1 and lines[0].startswith("refused 1 connection(s): 5 are open"), lines
        await served[0].close()
        await served[0].wait_closed()
        await harness.poll_until(lambda: len(s.connections) == 4)
        again = await KafkaClient.connect(*s.address)
        assert (await again.request(AV_REQ(), 0)).error_code == 0
        await again.close()
        for c in served[1:]:
            await c.close()
        for w in refused:
            w.close()
    finally:
        await s.stop()

"""The broker heartbeat's lane (``ControllerApis.lane``): a steady heartbeat answered straight
from its frame. Each answer it gives must be the general path's, byte for byte, with the same
session touched and the same queue metrics; every case it does not own it must hand back (None),
and the general path then answers as before, over the real socket."""

from __future__ import annotations

import asyncio
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest

from kraftsim.controller.managers.cluster import STEADY_RESPONSES
from kraftsim.controller.result import ControllerResult
from kraftsim.metadata.messages import NoOpRecord
from kraftsim.rpc import frames, registry, uuids
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.clock import ManualClock
from kraftsim.rpc.dispatch import ANONYMOUS, LaterAnswer, RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.server import Connection
from tests import harness
from tests.test_controller import HB, Cluster, registration
from tests.test_controller_errors import started

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def frame_of(request: Any, version: int, correlation_id: int = 42, client_id: str | None = "broker-1") -> bytes:
    """The request's frame as the server hands it over: without its size prefix."""
    return frames.api_codec(ApiKey.BROKER_HEARTBEAT, version).encode_request(request, correlation_id, client_id)[4:]


def lane_of(c: Cluster) -> Any:
    lane = c.running.server.dispatcher.routes[ApiKey.BROKER_HEARTBEAT].lane
    assert lane is not None
    return lane


def general(c: Cluster, frame: bytes) -> bytes:
    """The general path on the same frame: header and body decoded, RequestContext, the route's
    handler, the response encoded."""
    hdr, body = frames.decode_request(frame)
    route = c.running.server.dispatcher.routes[ApiKey.BROKER_HEARTBEAT]
    ctx = RequestContext(ApiKey.BROKER_HEARTBEAT, hdr.request_api_version, hdr.correlation_id, hdr.client_id or "",
                         ANONYMOUS)
    response = route.handler(ctx, body)
    assert isinstance(response, registry.response_class(ApiKey.BROKER_HEARTBEAT)), response
    return frames.api_codec(ApiKey.BROKER_HEARTBEAT, hdr.request_api_version).encode_response(response,
                                                                                          hdr.correlation_id)


def session(c: Cluster, broker_id: int) -> tuple[int, int, bool]:
    st = c.controller.managers.heartbeats.get(broker_id)
    return st.last_contact_ms, st.metadata_offset, st.fenced


async def brokers(c: Cluster) -> dict[str, tuple[int, int]]:
    """Brokers in each steady state: (id, epoch)."""
    unfenced_epoch, _ = await c.register(1)
    await c.unfence(1, unfenced_epoch)
    fenced_epoch, _ = await c.register(2)
    return {"unfenced": (1, unfenced_epoch), "fenced": (2, fenced_epoch)}


# ----- what it answers --------------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("case", ["unfenced, caught up", "unfenced, behind its registration",
                                  "fenced, asking to stay fenced", "fenced, behind its registration",
                                  "fenced, caught up, asking to stay fenced"])
async def test_a_steady_heartbeat_gets_the_general_paths_bytes_and_touches_the_session_alike(
        tmp_path: Path, version: int, case: str) -> None:
    clock = ManualClock()  # the session's last contact is the clock's now: compared exactly
    c = await started(tmp_path, clock)
    try:
        ids = await brokers(c)
        broker_id, epoch = ids[case.split(",")[0]]
        end = c.controller.mlog.end_offset
        offset = end if "caught up" in case else 0
        fenced = broker_id == 2
        request = HB(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=offset,
                     want_fence="stay fenced" in case)
        frame = frame_of(request, version)
        q = c.controller.queue
        ran, zeros = q.processing_time.n, q.queue_time.zeros
        clock.advance(5)
        answered = lane_of(c)(frame, version, 42)
        assert answered is not None, "the lane handed a steady heartbeat to the general path"
        assert (q.processing_time.n, q.queue_time.zeros) == (ran + 1, zeros + 1)  # one event, run at once
        assert session(c, broker_id) == (clock.monotonic_ms(), offset, fenced)
        clock.advance(5)
        assert bytes(answered) == general(c, frame)
        assert session(c, broker_id) == (clock.monotonic_ms(), offset, fenced)  # touched alike
        _, response = frames.decode_response(bytes(answered)[4:], ApiKey.BROKER_HEARTBEAT, version)
        assert (response.is_fenced, response.is_caught_up) == (fenced, offset >= 1)
    finally:
        await c.stop()


async def test_over_the_socket_the_correlation_ids_and_order_of_pipelined_heartbeats_hold(c: Cluster) -> None:
    ids = await brokers(c)
    assert c.client is not None
    sent = []
    for i in range(40):
        broker_id, epoch = ids["unfenced" if i % 2 else "fenced"]
        sent.append(c.client.send(HB(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=i,
                                           want_fence=broker_id == 2), 1))
    answers = await asyncio.gather(*sent)
    assert [(r.error_code, r.is_fenced) for r in answers] == [(0, i % 2 == 0) for i in range(40)]
    assert session(c, 1)[1] == 39 and session(c, 2)[1] == 38


def test_every_steady_answer_is_a_heartbeat_response_the_codec_can_frame() -> None:
    for k, r in enumerate(STEADY_RESPONSES):
        assert (r.is_fenced, r.is_caught_up, r.should_shut_down, r.error_code) == (bool(k & 1), k >= 2, False, 0)


# ----- what it hands back -----------------------------------------------------------------------

async def test_a_state_change_is_handed_back_and_answered_by_the_general_path(c: Cluster) -> None:
    epoch, _ = await c.register(3)
    request = HB(broker_id=3, broker_epoch=epoch, current_metadata_offset=c.controller.mlog.end_offset,
                 want_fence=False)
    before = session(c, 3)
    assert lane_of(c)(frame_of(request, 1), 1, 42) is None
    assert session(c, 3) == before  # handed back untouched
    r = await c.req(request, 1)
    assert (r.error_code, r.is_fenced) == (0, False)  # unfenced: a record, through the general path


@pytest.mark.parametrize("change", ["unknown broker", "stale epoch", "offline log dir", "shutting down"])
async def test_errors_directories_and_shutdowns_are_handed_back(c: Cluster, change: str) -> None:
    ids = await brokers(c)
    broker_id, epoch = ids["unfenced"]
    fields: dict[str, Any] = {"broker_id": broker_id, "broker_epoch": epoch, "current_metadata_offset": 1,
                              "want_fence": False}
    if change == "unknown broker":
        fields["broker_id"] = 99
    elif change == "stale epoch":
        fields["broker_epoch"] = epoch + 1
    elif change == "offline log dir":
        fields["offline_log_dirs"] = [uuids.random_uuid()]
    else:
        fields["want_shut_down"] = True
    request = HB(**fields)
    assert lane_of(c)(frame_of(request, 1), 1, 42) is None
    r = await c.req(request, 1)
    expected = ErrorCode.STALE_BROKER_EPOCH if change in ("unknown broker", "stale epoch") else 0
    assert r.error_code == expected, r


async def test_a_header_with_tagged_fields_is_handed_back_and_still_answered(c: Cluster) -> None:
    ids = await brokers(c)
    broker_id, epoch = ids["unfenced"]
    frame = frame_of(HB(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=1), 1, client_id="b")
    at = 10 + 1  # the header's tagged-field count, after key, version, correlation id and "b"
    assert frame[at] == 0
    tagged = frame[:at] + bytes([1, 5, 1, 7]) + frame[at + 1:]  # one unknown tag (5), one byte long
    assert lane_of(c)(tagged, 1, 42) is None
    assert bytes(lane_of(c)(frame, 1, 42)) == general(c, tagged)  # same answer either way


@pytest.mark.parametrize("cut", [1, 5, 23])
async def test_a_truncated_body_is_handed_back_and_the_general_path_closes_the_connection(
        c: Cluster, cut: int) -> None:
    ids = await brokers(c)
    broker_id, epoch = ids["unfenced"]
    frame = frame_of(HB(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=1), 1)
    assert lane_of(c)(frame[:-cut], 1, 42) is None
    host, port = c.running.server.address
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(struct.pack(">i", len(frame) - cut) + frame[:-cut])
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, no answer: as the general path does
    finally:
        writer.close()


async def test_a_busy_queue_hands_back_and_the_heartbeat_waits_its_turn(c: Cluster) -> None:
    ids = await brokers(c)
    broker_id, epoch = ids["unfenced"]
    frame = frame_of(HB(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=1), 1)
    q = c.controller.queue
    q.pause()
    ahead = q.submit("ahead", lambda: "ran")  # queued behind the pause
    try:
        assert lane_of(c)(frame, 1, 42) is None
    finally:
        q.resume()
    assert await ahead == "ran"  # type: ignore[misc]
    assert lane_of(c)(frame, 1, 42) is not None


async def test_uncommitted_records_hold_the_answer_until_their_commit(c: Cluster) -> None:
    """A record written and replayed, its commit still to come: the lane runs the heartbeat now
    (its session touched) but its answer, the one it would give once committed, goes out only
    after that commit, as run_request's does; a log that fails first answers NOT_CONTROLLER."""
    ids = await brokers(c)
    broker_id, epoch = ids["unfenced"]
    frame = frame_of(HB(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=1), 1)
    ctl = c.controller
    now_answer = lane_of(c)(frame, 1, 42)
    assert ctl.answers_now(True) and isinstance(now_answer, bytearray)
    last = ctl.writer.append(ControllerResult([(NoOpRecord(), 0)], None))  # the log is flushed after this turn
    assert ctl.image.offset == last > ctl.raft.committed_offset
    assert not ctl.answers_now(True) and ctl.waits_for_commit(True)
    later = lane_of(c)(frame, 1, 42)
    assert isinstance(later, LaterAnswer) and later.data is None
    assert ctl.raft.committed_offset < last
    await harness.poll_until(lambda: later.data is not None)
    assert ctl.raft.committed_offset >= last and later.data is not None and bytes(later.data) == bytes(now_answer)

    ctl.writer.append(ControllerResult([(NoOpRecord(), 0)], None))
    doomed = lane_of(c)(frame, 1, 43)
    assert isinstance(doomed, LaterAnswer) and doomed.data is None
    ctl._fail(RuntimeError("the disk went away"))  # what the log's failure listener does
    assert doomed.data is not None
    corr, response = frames.api_codec(ApiKey.BROKER_HEARTBEAT, 1).decode_response(bytes(doomed.data)[4:])
    assert (corr, response.error_code) == (43, ErrorCode.NOT_CONTROLLER)  # type: ignore[attr-defined]


async def test_over_the_socket_an_answer_held_for_a_commit_keeps_the_connections_order(c: Cluster) -> None:
    """Pipelined heartbeats while records wait for their commit: each is answered in order."""
    ids = await brokers(c)
    broker_id, epoch = ids["unfenced"]
    assert c.client is not None
    sent = []
    for i in range(20):
        if i % 5 == 0:  # a record before every fifth: answers wait for different commits
            c.controller.writer.append(ControllerResult([(NoOpRecord(), 0)], None))
        sent.append(c.client.send(HB(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=i), 1))
    answers = await asyncio.gather(*sent)
    assert [r.error_code for r in answers] == [0] * 20
    assert session(c, 1)[1] == 19


class KeptTransport:
    """What a connection writes, kept (a transport without a socket, to look between turns)."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def get_extra_info(self, key: str) -> object:
        return ("127.0.0.1", 5555)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass


async def test_heartbeats_behind_an_answer_held_for_a_commit_still_take_the_lane(c: Cluster) -> None:
    """While a connection holds an answer for a commit, the heartbeats read after it take the
    lane too (each a LaterAnswer behind it, no task), and all go out in order once committed."""
    ids = await brokers(c)
    broker_id, epoch = ids["unfenced"]
    conn = Connection(c.running.server)
    transport = KeptTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    try:
        c.controller.writer.append(ControllerResult([(NoOpRecord(), 0)], None))  # committed after this turn
        codec = frames.api_codec(ApiKey.BROKER_HEARTBEAT, 1)
        conn.data_received(b"".join(codec.encode_request(HB(broker_id=broker_id, broker_epoch=epoch,
                                                            current_metadata_offset=i), 100 + i, "b")
                                    for i in range(8)))
        assert [p.__class__ for p in conn.pending] == [LaterAnswer] * 8 and not conn._tasks
        await harness.poll_until(lambda: not conn.pending)
        data = b"".join(transport.written)
        corrs = [struct.unpack_from(">i", data, at + 4)[0] for at in range(0, len(data), len(data) // 8)]
        assert corrs == list(range(100, 108))
    finally:
        conn.connection_lost(None)


async def test_an_authorizer_other_than_allow_all_hands_back_to_the_authorizing_path(tmp_path: Path) -> None:
    c = Cluster(tmp_path, authorizer_class_name=STANDARD_AUTHORIZER, allow_everyone_if_no_acl_found="true")
    await c.start()
    try:
        ids = await brokers(c)
        broker_id, epoch = ids["unfenced"]
        request = HB(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=1)
        assert lane_of(c)(frame_of(request, 1), 1, 42) is None
        r = await c.req(request, 1)
        assert (r.error_code, r.is_fenced) == (0, False)
    finally:
        await c.stop()


# ----- the frame reading it rests on ------------------------------------------------------------

def test_the_fixed_fields_come_from_the_schema() -> None:
    hb = registry.request_class(ApiKey.BROKER_HEARTBEAT)
    names = ("broker_id", "broker_epoch", "current_metadata_offset", "want_fence", "want_shut_down")
    for v in (0, 1):
        fixed = frames.fixed_fields(hb, v)
        assert fixed is not None and fixed[1] == names and fixed[0].format == ">iqq??"
        body = hb(broker_id=7, broker_epoch=9, current_metadata_offset=11, want_fence=True)
        frame = frame_of(body, v)
        pos = frames.body_offset(frame, 2)
        assert fixed[0].unpack_from(frame, pos) == (7, 9, 11, True, False)
        assert len(frame) == pos + fixed[0].size + 1 and frame[-1] == 0
    assert frames.fixed_fields(registry.request_class(ApiKey.BROKER_REGISTRATION), 3) is None  # strings, arrays
    assert frames.fixed_fields(registry.request_class(ApiKey.CREATE_TOPICS), 4) is None  # not flexible


@pytest.mark.parametrize("client_id", [None, "", "b", "broker-1" * 40, "é"])
@pytest.mark.parametrize("api_key, version", [(ApiKey.BROKER_HEARTBEAT, 1), (ApiKey.CREATE_TOPICS, 4),
                                               (ApiKey.CREATE_TOPICS, 5), (ApiKey.CONTROLLED_SHUTDOWN, 0)])
def test_body_offset_is_where_the_header_decoder_stops(client_id: str | None, api_key: int, version: int) -> None:
    body = registry.request_class(api_key)()
    codec = frames.api_codec(api_key, version)
    frame = codec.encode_request(body, 3, client_id)[4:]
    _, pos = codec.dec_req_hdr(frame, 0)
    assert frames.body_offset(frame, codec.request_header_version) == pos


def test_body_offset_hands_back_what_only_the_decoder_can_read() -> None:
    frame = frame_of(HB(broker_id=1), 1, client_id="b")
    assert frames.body_offset(frame[:10], 2) == -1  # shorter than a header
    assert frames.body_offset(frame[:8] + struct.pack(">h", -2) + frame[10:], 2) == -1  # a bad length
    assert frames.body_offset(frame[:8] + struct.pack(">h", 500) + frame[10:], 2) == -1  # past the end
    assert frames.body_offset(frame[:11] + b"\x01" + frame[12:], 2) == -1  # header tagged fields


async def test_a_heartbeat_readable_for_longer_than_its_deadline_is_shed_not_answered_late(c: Cluster) -> None:
    """Kafka's deadline (broker.heartbeat.interval.ms / 2) counts from when the request was
    readable (``RequestContext.arrived_ms``): past it the heartbeat is not run but failed with
    REQUEST_TIMED_OUT, its session refreshed (Kafka's processExpiredBrokerHeartbeat), counted in
    both timed-out metrics; the lane does it as the general path does, to the byte."""
    ids = await brokers(c)
    broker_id, epoch = ids["unfenced"]
    ctl = c.controller
    route = c.running.server.dispatcher.routes[ApiKey.BROKER_HEARTBEAT]
    half = ctl.config.get("broker.heartbeat.interval.ms") // 2
    request = HB(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=7, want_shut_down=True)
    frame = frame_of(request, 1)
    steady = frame_of(HB(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=1), 1)
    now = ctl.clock.monotonic_ms()
    assert lane_of(c)(steady, 1, 42, now - half + 1) is not None  # not late yet: answered
    answers = []
    for path in ("lane", "general"):
        before = ctl._metric_values()
        now = ctl.clock.monotonic_ms()
        if path == "lane":
            answers.append(bytes(lane_of(c)(frame, 1, 42, now - half)))
        else:
            ctx = RequestContext(ApiKey.BROKER_HEARTBEAT, 1, 42, "broker-1", ANONYMOUS, arrived_ms=now - half)
            response: Any = route.handler(ctx, request)
            assert response.error_code == ErrorCode.REQUEST_TIMED_OUT
            answers.append(frames.api_codec(ApiKey.BROKER_HEARTBEAT, 1).encode_response(response, 42))
        last_contact, offset, fenced = session(c, broker_id)
        assert last_contact >= now and (offset, fenced) == (7, False)  # touched, not run: no shutdown begun
        assert ctl.managers.heartbeats.controlled_shutdown_offset(broker_id) is None
        after = ctl._metric_values()
        assert after["EventQueueOperationsTimedOutCount"] == before["EventQueueOperationsTimedOutCount"] + 1
        assert after["TimedOutBrokerHeartbeatCount"] == before["TimedOutBrokerHeartbeatCount"] + 1
    assert answers[0] == answers[1]


# ----- a 4.3+ broker's cordoned log directories (a tagged field) ---------------------------------

async def started_44(tmp_path: Path, clock: ManualClock | None = None, formatted: str = "4.4") -> Cluster:
    """A controller of Kafka 4.4, its metadata.version that of release ``formatted``."""
    return await started(tmp_path, clock, release=formatted, kraftsim_release="4.4")


async def registered_44(c: Cluster, broker_id: int, cordoned: list[uuid.UUID] | None) -> int:
    """A broker of 4.4 registered and unfenced, its cordoned directories ``cordoned`` recorded
    by its first heartbeat (None: none recorded); its epoch."""
    req = registration(broker_id, c.cluster_id, max_mv=c.controller.image.metadata_version)
    req.features += [type(req.features[0])(name=k, min_supported_version=0, max_supported_version=v)
                     for k, v in c.controller.image.features.finalized.items()]
    r = await c.req(req, 3)
    assert r.error_code == 0, r
    h = await c.req(HB(broker_id=broker_id, broker_epoch=r.broker_epoch, current_metadata_offset=c.controller.mlog.end_offset,
                       want_fence=False, cordoned_log_dirs=cordoned), 2)
    assert (h.error_code, h.is_fenced) == (0, False), h
    assert c.controller.image.cluster.brokers[broker_id].cordoned_directories == (
        None if cordoned is None or c.controller.image.metadata_version < 30 else tuple(cordoned))
    return int(r.broker_epoch)


D1, D2 = uuid.UUID(int=1), uuid.UUID(int=2)


@pytest.mark.parametrize(("recorded", "sent", "formatted"), [
    ([], [], "4.4"),  # a 4.3+ broker cordoning nothing: every heartbeat once caught up
    ([D1, D2], [D2, D1], "4.4"),  # the same set, another order
    ([D1], None, "4.4"),  # null says nothing (a broker not caught up yet)
    (None, [D1], "3.9"),  # a metadata.version before 4.3-IV0 records no cordoned directories
])
async def test_a_steady_heartbeat_of_a_43_broker_gets_the_general_paths_bytes(
        tmp_path: Path, recorded: list[uuid.UUID] | None, sent: list[uuid.UUID] | None, formatted: str) -> None:
    clock = ManualClock()
    c = await started_44(tmp_path, clock, formatted)
    try:
        epoch = await registered_44(c, 1, recorded)
        end = c.controller.mlog.end_offset
        frame = frame_of(HB(broker_id=1, broker_epoch=epoch, current_metadata_offset=end, cordoned_log_dirs=sent), 2)
        assert frame[-1] != 0 or sent is None  # the tagged field is there
        clock.advance(5)
        answered = lane_of(c)(frame, 2, 42)
        assert answered is not None, "the lane handed a steady 4.3+ heartbeat to the general path"
        assert session(c, 1) == (clock.monotonic_ms(), end, False)
        clock.advance(5)
        assert bytes(answered) == general(c, frame)
        assert session(c, 1) == (clock.monotonic_ms(), end, False)  # touched alike
        assert c.controller.mlog.end_offset == end  # no record either way
    finally:
        await c.stop()


def tagged_frame(frame: bytes, section: bytes) -> bytes:
    """``frame`` (a body with no tagged field) with its tag section replaced by ``section``."""
    assert frame[-1] == 0
    return frame[:-1] + section


@pytest.mark.parametrize("case", ["cordoned changed", "cordoned not recorded yet", "offline log dir and cordoned"])
async def test_a_43_heartbeat_that_needs_a_record_is_handed_back_and_recorded(tmp_path: Path, case: str) -> None:
    c = await started_44(tmp_path)
    try:
        epoch = await registered_44(c, 1, None if case == "cordoned not recorded yet" else [])
        reg = c.controller.image.cluster.brokers[1]
        fields: dict[str, Any] = {"broker_id": 1, "broker_epoch": epoch,
                                  "current_metadata_offset": c.controller.mlog.end_offset,
                                  "cordoned_log_dirs": [reg.directories[0]] if case == "cordoned changed" else []}
        if case == "offline log dir and cordoned":
            fields["offline_log_dirs"] = [reg.directories[0]]
        request = HB(**fields)
        before, end = session(c, 1), c.controller.mlog.end_offset
        assert lane_of(c)(frame_of(request, 2), 2, 42) is None
        assert session(c, 1) == before  # handed back untouched
        r = await c.req(request, 2)
        assert r.error_code == 0, r
        assert c.controller.mlog.end_offset > end  # the general path wrote the record
    finally:
        await c.stop()


async def test_a_43_tag_section_not_plainly_framed_is_handed_back(tmp_path: Path) -> None:
    """Only the decoder judges an unknown tag, tags out of order or twice, a size that is not
    the value's, or a multi-byte count; the lane takes an empty OfflineLogDirs beside an
    unchanged CordonedLogDirs (a frame Kafka's writer does not send, as it omits the empty list)."""
    c = await started_44(tmp_path)
    try:
        epoch = await registered_44(c, 1, [])
        end = c.controller.mlog.end_offset
        plain = frame_of(HB(broker_id=1, broker_epoch=epoch, current_metadata_offset=end), 2)
        lane = lane_of(c)
        for section in (bytes([1, 5, 1, 7]),  # an unknown tag
                        bytes([2, 1, 1, 1, 0, 1, 1]),  # tags out of order
                        bytes([2, 1, 1, 1, 1, 1, 1]),  # a tag twice
                        bytes([1, 1, 2, 1, 0]),  # a size that is not the value's
                        bytes([1, 1, 1, 2]),  # an array's length past its value
                        bytes([1, 1, 1, 1, 0]),  # a byte past the section
                        bytes([0x81, 0, 1, 1, 1])):  # a two-byte count
            assert lane(tagged_frame(plain, section), 2, 42) is None, section.hex()
        # Late, a value the decoder refuses (an array's length past its value) is still handed
        # back: the general path closes the connection rather than shed the request.
        late = c.controller.clock.monotonic_ms() - c.controller.config.get("broker.heartbeat.interval.ms")
        assert lane(tagged_frame(plain, bytes([1, 1, 1, 2])), 2, 42, late) is None
        assert lane(tagged_frame(plain, bytes([1, 1, 1, 1])), 2, 42, late) is not None  # well formed: shed
        # Tag 1 at v1 is no field of v1: the decoder keeps it as an unknown tag.
        v1 = frame_of(HB(broker_id=1, broker_epoch=epoch, current_metadata_offset=end), 1)
        assert lane(tagged_frame(v1, bytes([1, 1, 1, 1])), 1, 42) is None
        both = tagged_frame(plain, bytes([2, 0, 1, 1, 1, 1, 1]))
        answered = lane(both, 2, 42)
        assert answered is not None and bytes(answered) == general(c, both)
        assert c.controller.mlog.end_offset == end
    finally:
        await c.stop()

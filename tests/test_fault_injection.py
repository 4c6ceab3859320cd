"""Injected faults on a real controller (kraftsim.faults), through its HTTP API and real sockets:
each kind of fault does what it says while it is active, is counted and reported, and leaves
the controller as it was (the heartbeat's lane back, the disk's calls back) when it ends. The
fault endpoint itself: off unless enabled, loopback only, a token when one is set."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest

from kraftsim.faults.client import FaultApiError, FaultClient
from kraftsim.metadata import fileio
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import ConnectionClosed, KafkaClient
from kraftsim.rpc.error_codes import ErrorCode
from tests import harness
from tests.test_controller import CT, HB, Cluster


class Faulty(Cluster):
    """A controller with fault injection on, and a client of its fault API."""

    def __init__(self, tmp: Path, **cfg: object) -> None:
        self.http_port = harness.free_port()
        super().__init__(tmp, http_port=self.http_port, kraftsim_faults_enable="true", **cfg)
        self.api = FaultClient(f"127.0.0.1:{self.http_port}")

    async def call(self, method: str, *args: Any, **kw: Any) -> Any:
        return await asyncio.to_thread(getattr(self.api, method), *args, **kw)

    async def metrics(self) -> dict[str, float]:
        body = await asyncio.to_thread(harness.wait_http, self.http_port, "/metrics")
        return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(kraftsim_\w+(?:\{[^}]*\})?) (\S+)$", body, re.M)}

    async def heartbeat(self, broker: int, epoch: int, client: KafkaClient | None = None) -> Any:
        body = HB(broker_id=broker, broker_epoch=epoch, current_metadata_offset=self.controller.mlog.end_offset,
                  want_fence=False)
        return await (client or self.client).request(body, 1)  # type: ignore[union-attr]


@pytest.fixture
async def faulty(tmp_path: Path) -> Any:
    c = Faulty(tmp_path)
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


async def test_the_fault_api_is_off_unless_enabled_and_needs_its_token(tmp_path: Path) -> None:
    (tmp_path / "off").mkdir()
    (tmp_path / "token").mkdir()
    off = Cluster(tmp_path / "off", http_port=(port := harness.free_port()))
    await off.start()
    try:
        with pytest.raises(FaultApiError, match=r"fault injection is off \(set kraftsim.faults.enable=true") as e:
            await asyncio.to_thread(FaultClient(f"127.0.0.1:{port}").active)
        assert e.value.status == 404
    finally:
        await off.stop()
    guarded = Faulty(tmp_path / "token", kraftsim_faults_token="s3cret")
    await guarded.start()
    try:
        with pytest.raises(FaultApiError, match="needs its token") as e:
            await guarded.call("active")
        assert e.value.status == 401
        ok = FaultClient(f"127.0.0.1:{guarded.http_port}", token="s3cret")
        assert await asyncio.to_thread(ok.active) == []
    finally:
        await guarded.stop()


async def test_a_bad_fault_is_one_line_and_installs_nothing(faulty: Faulty) -> None:
    for doc, message in [({"kind": "request", "api": "NoSuchApi", "error": "NOT_CONTROLLER"}, "unknown API"),
                         ({"kind": "request", "api": "Produce", "error": "NOT_CONTROLLER"}, "does not serve Produce"),
                         ({"kind": "request", "api": "BrokerHeartbeat"}, "exactly one of error, delay"),
                         ({"kind": "silence", "pick": 1}, "a controller cannot take a silence fault"),
                         ({"kind": "voter-partition", "voter": 3000}, "no other voter"),
                         ({"kind": "bogus"}, "kind: expected one of")]:
        with pytest.raises(FaultApiError, match=message) as e:
            await faulty.call("add", doc)
        assert e.value.status == 400
    assert await faulty.call("active") == []


async def test_heartbeats_answered_with_an_error_n_times_then_the_lane_is_back(faulty: Faulty) -> None:
    epoch, _ = await faulty.register(1)
    await faulty.unfence(1, epoch)
    routes = faulty.running.server.dispatcher.routes
    assert routes[ApiKey.BROKER_HEARTBEAT].lane is not None
    fault = await faulty.call("add", "request", api="BrokerHeartbeat", error="NOT_CONTROLLER", brokers=[1], count=2)
    assert fault["id"] == "f1" and fault["remaining"] == 2
    assert routes[ApiKey.BROKER_HEARTBEAT].lane is None  # the general path meanwhile
    answers = [await faulty.heartbeat(1, epoch) for _ in range(3)]
    assert [a.error_code for a in answers] == [ErrorCode.NOT_CONTROLLER, ErrorCode.NOT_CONTROLLER, ErrorCode.NONE]
    await harness.poll_until(lambda: routes[ApiKey.BROKER_HEARTBEAT].lane is not None)  # used up: put back
    assert await faulty.call("active") == []
    m = await faulty.metrics()
    assert m['kraftsim_faults_injected_total{kind="request"}'] == 1
    assert m['kraftsim_fault_actions_total{kind="request"}'] == 2
    timeline = await faulty.call("timeline")
    assert [(e["event"], e["id"], e.get("reason")) for e in timeline] == [("start", "f1", None),
                                                                          ("end", "f1", "used up")]


async def test_a_fraction_follows_its_seed(faulty: Faulty) -> None:
    epoch, _ = await faulty.register(1)
    await faulty.unfence(1, epoch)

    async def pattern() -> list[int]:
        fault = await faulty.call("add", "request", api="BrokerHeartbeat", error="NOT_CONTROLLER", fraction=0.5,
                                  seed=42)
        out = [(await faulty.heartbeat(1, epoch)).error_code for _ in range(16)]
        await faulty.call("remove", fault["id"])
        return out

    first = await pattern()
    assert 0 < first.count(ErrorCode.NOT_CONTROLLER) < 16
    assert await pattern() == first


async def test_delay_drop_and_close(faulty: Faulty) -> None:
    epoch, _ = await faulty.register(1)
    await faulty.unfence(1, epoch)
    await faulty.call("add", "request", api="BrokerHeartbeat", delay="300ms", count=1)
    t0 = time.monotonic()
    assert (await faulty.heartbeat(1, epoch)).error_code == ErrorCode.NONE
    assert time.monotonic() - t0 >= 0.3
    # Left unanswered: the client's own timeout is all it gets; the next one is answered.
    dropped = await faulty.call("add", "request", api="BrokerHeartbeat", drop=True, count=1)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(faulty.heartbeat(1, epoch), 1.0)
    assert (await faulty.call("timeline"))[-1]["id"] == dropped["id"]
    await faulty.client.close()  # type: ignore[union-attr]
    faulty.client = await harness.connect(faulty.running)
    await faulty.call("add", "request", api="BrokerHeartbeat", close=True, count=1)
    with pytest.raises(ConnectionClosed):
        await faulty.heartbeat(1, epoch)
    other = await harness.connect(faulty.running)
    try:
        assert (await faulty.heartbeat(1, epoch, other)).error_code == ErrorCode.NONE
    finally:
        await other.close()


async def test_create_topics_fail_for_the_topics_named(faulty: Faulty) -> None:
    epoch, _ = await faulty.register(1)
    await faulty.unfence(1, epoch)
    await faulty.call("add", "request", api="CreateTopics", error="POLICY_VIOLATION", message="no", topics=["bad"])
    req = CT(timeout_ms=5000, topics=[CT.CreatableTopic(name=n, num_partitions=1, replication_factor=1)
                                      for n in ("bad", "good")])
    resp = await faulty.req(req, 7)
    # The whole request fails, as a request failing whole does: each topic gets the error.
    assert [(t.name, t.error_code) for t in resp.topics] == [("bad", ErrorCode.POLICY_VIOLATION),
                                                             ("good", ErrorCode.POLICY_VIOLATION)]
    resp = await faulty.req(CT(timeout_ms=5000, topics=[CT.CreatableTopic(name="good", num_partitions=1,
                                                                          replication_factor=1)]), 7)
    assert [(t.name, t.error_code) for t in resp.topics] == [("good", ErrorCode.NONE)]


async def test_resign_moves_to_a_new_epoch_and_keeps_serving(faulty: Faulty) -> None:
    epoch0 = faulty.controller.epoch
    fault = await faulty.call("add", "resign")
    assert fault["state"] == "done" and fault["decisions"] == {"resigned_epoch": epoch0}
    await harness.poll_until(lambda: faulty.controller.active and faulty.controller.epoch == epoch0 + 1)
    m = await faulty.metrics()
    assert m['kraftsim_faults_injected_total{kind="resign"}'] == 1


async def test_a_clock_jump_fences_the_silent_brokers(faulty: Faulty) -> None:
    epochs = {b: (await faulty.register(b))[0] for b in (1, 2)}
    for b, e in epochs.items():
        await faulty.unfence(b, e)
    brokers = faulty.controller.image.cluster.brokers
    await faulty.call("add", "clock-jump", by="60s")
    await harness.poll_until(lambda: brokers[1].fenced and brokers[2].fenced, 5)


async def test_a_stall_stops_the_controller_and_it_resumes(faulty: Faulty) -> None:
    epoch, _ = await faulty.register(1)
    await faulty.unfence(1, epoch)
    t0 = time.monotonic()
    await faulty.call("add", "stall", duration="700ms")
    # The controller runs on this test's event loop: everything here stops with it.
    await harness.poll_until(lambda: not faulty.running.faults.active())
    assert time.monotonic() - t0 >= 0.7
    assert (await faulty.heartbeat(1, epoch)).error_code == ErrorCode.NONE
    m = await faulty.metrics()
    assert m['kraftsim_fault_actions_total{kind="stall"}'] == 1


async def test_slow_fsync_delays_commits_and_its_end_puts_the_disk_back(faulty: Faulty) -> None:
    epoch, _ = await faulty.register(1)
    await faulty.unfence(1, epoch)
    real = fileio.fsync
    await faulty.call("add", "disk", op="fsync", files="log", delay="400ms", duration="20s")
    assert fileio.fsync is not real
    t0 = time.monotonic()
    resp = await faulty.req(CT(timeout_ms=30000, topics=[CT.CreatableTopic(name="t", num_partitions=1,
                                                                           replication_factor=1)]), 7)
    assert resp.topics[0].error_code == ErrorCode.NONE
    assert time.monotonic() - t0 >= 0.4  # answered after its commit, after the slow fsync
    m = await faulty.metrics()
    assert m['kraftsim_fault_actions_total{kind="disk"}'] >= 1
    await faulty.call("clear")
    assert fileio.fsync is real


async def test_a_failing_snapshot_write_is_counted_and_survived(faulty: Faulty) -> None:
    await faulty.call("add", "disk", op="write", files="snapshot", error="ENOSPC", count=1)
    task = faulty.controller.snapshot(force=True)
    assert task is not None
    assert await task is None  # failed, survived
    assert faulty.controller.active and faulty.controller.fatal is None
    assert faulty.controller.metadata_errors == 1
    assert await faulty.call("active") == []  # used up


async def test_healthz_names_the_active_faults(faulty: Faulty) -> None:
    import json

    await faulty.call("add", "network", latency="5ms", duration="30s", note="slow link")
    doc = json.loads(await asyncio.to_thread(harness.wait_http, faulty.http_port, "/healthz"))
    assert doc["status"] == "active"
    assert doc["injectedFaults"] == {"active": 1, "kinds": ["network"], "ids": ["f1"]}
    await faulty.call("clear")
    doc = json.loads(await asyncio.to_thread(harness.wait_http, faulty.http_port, "/healthz"))
    assert doc["injectedFaults"]["active"] == 0


async def test_a_partition_cuts_one_brokers_connection_and_heals(faulty: Faulty) -> None:
    e1, _ = await faulty.register(1)
    e2, _ = await faulty.register(2)
    b1 = await KafkaClient.connect("127.0.0.1", faulty.running.server.port, client_id="broker-1-heartbeat")
    b2 = await KafkaClient.connect("127.0.0.1", faulty.running.server.port, client_id="broker-2-heartbeat")
    try:
        for b, e, cl in ((1, e1, b1), (2, e2, b2)):
            assert (await faulty.heartbeat(b, e, cl)).error_code == ErrorCode.NONE
        fault = await faulty.call("add", "network", partition=True, brokers=[2])
        with pytest.raises(TimeoutError):  # the request that identifies it is lost too
            await asyncio.wait_for(faulty.heartbeat(2, e2, b2), 1.0)
        assert (await faulty.heartbeat(1, e1, b1)).error_code == ErrorCode.NONE
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(faulty.heartbeat(2, e2, b2), 0.5)
        assert (await faulty.call("active"))[0]["hits"] == 1  # one connection cut
        await faulty.call("remove", fault["id"])
        # Healed: what was lost stays lost (the client gives up on that connection), a new one is served.
        fresh = await KafkaClient.connect("127.0.0.1", faulty.running.server.port, client_id="broker-2-heartbeat")
        try:
            assert (await faulty.heartbeat(2, e2, fresh)).error_code == ErrorCode.NONE
        finally:
            await fresh.close()
    finally:
        await b1.close()
        await b2.close()


async def test_latency_and_bandwidth_slow_the_answers(faulty: Faulty) -> None:
    epoch, _ = await faulty.register(1)
    await faulty.unfence(1, epoch)
    await faulty.call("add", "network", latency="150ms", direction="out", duration="30s")
    t0 = time.monotonic()
    assert (await faulty.heartbeat(1, epoch)).error_code == ErrorCode.NONE  # an existing connection
    assert time.monotonic() - t0 >= 0.15
    fresh = await harness.connect(faulty.running)  # and a new one
    try:
        t0 = time.monotonic()
        assert (await faulty.heartbeat(1, epoch, fresh)).error_code == ErrorCode.NONE
        assert time.monotonic() - t0 >= 0.15
        await faulty.call("clear")
        t0 = time.monotonic()
        assert (await faulty.heartbeat(1, epoch, fresh)).error_code == ErrorCode.NONE
        assert time.monotonic() - t0 < 0.15
    finally:
        await fresh.close()


async def test_a_pause_holds_requests_and_delivers_them_after(faulty: Faulty) -> None:
    epoch, _ = await faulty.register(1)
    await faulty.unfence(1, epoch)
    await faulty.call("add", "network", pause=True, duration="600ms")
    t0 = time.monotonic()
    assert (await faulty.heartbeat(1, epoch)).error_code == ErrorCode.NONE
    assert time.monotonic() - t0 >= 0.5


async def test_a_reset_closes_the_connections_now(faulty: Faulty) -> None:
    epoch, _ = await faulty.register(1)
    await faulty.unfence(1, epoch)
    await faulty.call("add", "network", reset=True)
    with pytest.raises((ConnectionClosed, ConnectionError)):
        await faulty.heartbeat(1, epoch)
    await faulty.call("clear")
    fresh = await harness.connect(faulty.running)
    try:
        assert (await faulty.heartbeat(1, epoch, fresh)).error_code == ErrorCode.NONE
    finally:
        await fresh.close()



def test_kraftsim_fault_against_a_controller_process(tmp_path: Path) -> None:
    import json

    http = harness.free_port()
    config = harness.write_config(tmp_path, port=harness.free_port(), http_port=http,
                                  kraftsim_faults_enable="true")
    harness.format_dir(config)
    proc = harness.spawn_controller(config)
    try:
        harness.wait_http(http)
        target = ("--http", f"127.0.0.1:{http}")
        r = harness.kraftsim("fault", *target, "add", "request", "api=BrokerHeartbeat", "error=NOT_CONTROLLER",
                             "brokers=1,2", "duration=30s")
        assert r.returncode == 0, r.stderr
        assert re.fullmatch(r"f1\trequest BrokerHeartbeat answered NOT_CONTROLLER brokers 1,2 for 30000 ms\t"
                            r"acted 0 time\(s\)\t\d+\.\d s left\tseed \d+\n", r.stdout), r.stdout
        r = harness.kraftsim("fault", *target, "add", "network", "partition", "direction=sideways")
        assert (r.returncode, r.stdout) == (1, "")
        assert r.stderr == (f"kraftsim fault: http://127.0.0.1:{http}: direction: expected one of both, in, out, "
                            f"got 'sideways'\n")
        listed = json.loads(harness.kraftsim("fault", *target, "list", "--json").stdout)
        assert [(f["id"], f["kind"], f["brokers"]) for f in listed] == [("f1", "request", [1, 2])]
        r = harness.kraftsim("fault", *target, "clear", "f1")
        assert r.returncode == 0 and r.stdout.startswith("f1\tremoved after acting 0 time(s)")
        r = harness.kraftsim("fault", *target, "clear", "f1")
        assert (r.returncode, r.stderr) == (1, f"kraftsim fault: http://127.0.0.1:{http}: no active fault f1\n")
        assert harness.kraftsim("fault", *target, "list").stdout == ""
    finally:
        assert harness.stop(proc) == 0
    out, _ = harness.controller_output(config)
    warnings = [ln for ln in out.splitlines() if "This is an injected fault, not a real one." in ln]
    assert len(warnings) == 1 and " WARNING injected fault f1 on this controller: " in warnings[0]


def non_loopback_address() -> str | None:
    """An address of this machine that is not loopback (the default route's source), if any."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.123", 9))  # no packet is sent: this only picks the route
            addr = str(s.getsockname()[0])
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


async def test_from_another_address_the_fault_api_is_refused_unless_it_carries_the_token(tmp_path: Path) -> None:
    from kraftsim.faults.http import is_loopback

    assert [is_loopback(a) for a in ("127.0.0.1", "::1", "::ffff:127.0.0.1", "10.1.2.3", "::ffff:10.1.2.3", None)] \
        == [True, True, True, False, False, False]
    addr = non_loopback_address()
    if addr is None:
        pytest.skip("this machine has no address but loopback")
    for sub, token in (("open", ""), ("token", "s3cret")):
        (tmp_path / sub).mkdir()
        port = harness.free_port()
        c = Cluster(tmp_path / sub, kraftsim_faults_enable="true", kraftsim_faults_token=token)
        c.config.write_text(c.config.read_text().replace("kraftsim.http.listen=127.0.0.1:0",
                                                         f"kraftsim.http.listen=0.0.0.0:{port}"))
        await c.start()
        try:
            remote = FaultClient(f"{addr}:{port}")
            if not token:
                with pytest.raises(FaultApiError, match="accepted from loopback only") as e:
                    await asyncio.to_thread(remote.add, "stall", duration="10ms")
                assert e.value.status == 403
                assert await asyncio.to_thread(FaultClient(f"127.0.0.1:{port}").active) == []
            else:
                with pytest.raises(FaultApiError, match="needs its token") as e:
                    await asyncio.to_thread(remote.active)
                assert e.value.status == 401
                with pytest.raises(FaultApiError, match="needs its token"):
                    await asyncio.to_thread(FaultClient(f"{addr}:{port}", token="wrong").active)
                fault = await asyncio.to_thread(FaultClient(f"{addr}:{port}", token=token).add, "resign")
                assert fault["state"] == "done"
        finally:
            await c.stop()


async def test_a_partition_drops_one_direction_or_the_other(faulty: Faulty) -> None:
    epoch, _ = await faulty.register(1)
    await faulty.unfence(1, epoch)
    tracker = faulty.controller.managers.cluster.heartbeats
    for direction, reaches_the_controller in (("in", False), ("out", True)):
        fault = await faulty.call("add", "network", partition=True, direction=direction)
        client = await harness.connect(faulty.running)  # a new connection: taken as it is accepted
        try:
            before = tracker.get(1).last_contact_ms
            await asyncio.sleep(0.01)
            with pytest.raises(TimeoutError):  # no answer either way
                await asyncio.wait_for(faulty.heartbeat(1, epoch, client), 0.5)
            assert (tracker.get(1).last_contact_ms > before) is reaches_the_controller, direction
        finally:
            client.abort()
        await faulty.call("remove", fault["id"])
    fresh = await harness.connect(faulty.running)
    try:
        assert (await faulty.heartbeat(1, epoch, fresh)).error_code == ErrorCode.NONE
    finally:
        await fresh.close()

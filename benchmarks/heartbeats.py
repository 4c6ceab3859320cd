"""Heartbeat benchmark (run by hand).

Starts a controller (``kraftsim controller`` in its own process), registers and unfences 200
brokers, then drives pipelined BrokerHeartbeat v1 requests over 4 connections with 16 in flight
each for a few seconds. In the same run, a bare asyncio server (its own process) echoes the very
same frames, which is the ceiling of this client and of Python sockets on this machine. Then a
paced run at 5,000 heartbeats/s (10,000 brokers at the default 2 s interval) measures latency.

    .venv/bin/python benchmarks/heartbeats.py [--seconds 5] [--override K=V]... [--fault JSON]

``--fault`` injects a fault (kraftsim.faults; it turns fault injection on) before the runs: the
cost of a fault that is active, on the heartbeat or on another API, against the same runs without.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.steady import Window, cpu_seconds  # noqa: E402
from kraftsim.rpc import frames, registry  # noqa: E402
from kraftsim.rpc.api_keys import ApiKey  # noqa: E402
from kraftsim.rpc.client import KafkaClient  # noqa: E402
from tests import harness  # noqa: E402

BROKERS = 200
CONNECTIONS = 4
IN_FLIGHT = 16

ECHO_SERVER = textwrap.dedent("""
    import asyncio, struct, sys
    class Echo(asyncio.Protocol):
        def connection_made(self, t): self.t = t; self.buf = bytearray()
        def data_received(self, data):
            self.buf += data
            out = []
            pos = 0
            while len(self.buf) - pos >= 4:
                n = struct.unpack_from(">i", self.buf, pos)[0]
                if len(self.buf) - pos - 4 < n: break
                out.append(bytes(self.buf[pos:pos + 4 + n])); pos += 4 + n
            del self.buf[:pos]
            if out: self.t.write(b"".join(out))
    async def main():
        srv = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", int(sys.argv[1]))
        print("ready", flush=True)
        await srv.serve_forever()
    asyncio.run(main())
""")


class Driver(asyncio.Protocol):
    """Keeps a fixed number of pre-encoded frames in flight and counts the answers."""

    def __init__(self, frames_: list[bytes], in_flight: int, paced: bool = False) -> None:
        self.frames = frames_
        self.in_flight = in_flight
        self.buf = bytearray()
        self.done = 0
        self.i = 0
        self.sent_at: deque[float] = deque()
        self.latencies: list[float] = []
        self.paced = paced
        self.transport: asyncio.Transport | None = None
        self.sample: bytes | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.paced:
            self.send(self.in_flight)

    def send(self, n: int) -> None:
        assert self.transport is not None
        out = []
        now = time.perf_counter()
        for _ in range(n):
            out.append(self.frames[self.i % len(self.frames)])
            self.i += 1
            self.sent_at.append(now)
        self.transport.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        self.buf += data
        pos = 0
        got = 0
        now = time.perf_counter()
        while len(self.buf) - pos >= 4:
            n = struct.unpack_from(">i", self.buf, pos)[0]
            if len(self.buf) - pos - 4 < n:
                break
            if self.sample is None:
                self.sample = bytes(self.buf[pos + 4:pos + 4 + n])
            pos += 4 + n
            got += 1
            self.latencies.append(now - self.sent_at.popleft())
        del self.buf[:pos]
        self.done += got
        if got and not self.paced:
            self.send(got)


class Pipelined:
    """The pipelined load held open (CONNECTIONS connections, IN_FLIGHT heartbeats in flight on
    each), measured in windows: a warm-up runs it until it is steady without reconnecting."""

    def __init__(self, drivers: list[Driver], pid: int | None) -> None:
        self.drivers = drivers
        self.pid = pid

    @classmethod
    async def open(cls, port: int, frames_: list[bytes], pid: int | None = None) -> Pipelined:
        loop = asyncio.get_running_loop()
        drivers = []
        per = len(frames_) // CONNECTIONS
        for c in range(CONNECTIONS):
            _, d = await loop.create_connection(lambda c=c: Driver(frames_[c * per:(c + 1) * per], IN_FLIGHT),
                                                "127.0.0.1", port)
            drivers.append(d)
        return cls(drivers, pid)

    def done(self) -> int:
        return sum(d.done for d in self.drivers)

    async def window(self, seconds: float) -> Window:
        """Heartbeats answered over ``seconds``, and the server's CPU over them."""
        done0 = self.done()
        cpu0 = None if self.pid is None else cpu_seconds(self.pid)
        t0 = time.perf_counter()
        await asyncio.sleep(seconds)  # the measurement window: the drivers answer meanwhile
        cpu = None if self.pid is None or cpu0 is None else cpu_seconds(self.pid) - cpu0
        return Window(time.perf_counter() - t0, self.done() - done0, cpu)

    @property
    def sample(self) -> bytes | None:
        return self.drivers[0].sample

    def close(self) -> None:
        for d in self.drivers:
            assert d.transport is not None
            d.transport.close()


async def drive(port: int, frames_: list[bytes], seconds: float,
                pid: int | None = None) -> tuple[float, bytes | None, float | None]:
    """(heartbeats/s, a response, the server's CPU µs per heartbeat) over ``seconds`` after half
    a second of warm-up: enough for two Python processes, not for a JVM (vs_kafka.py warms both
    up with benchmarks/steady.py instead)."""
    load = await Pipelined.open(port, frames_, pid)
    try:
        await asyncio.sleep(0.5)  # warm up
        w = await load.window(seconds)
    finally:
        load.close()
    return w.rate, load.sample, w.cpu_per_op_us


async def paced(port: int, frames_: list[bytes], rate: int, seconds: float) -> list[float]:
    loop = asyncio.get_running_loop()
    drivers = []
    per = len(frames_) // CONNECTIONS
    for c in range(CONNECTIONS):
        _, d = await loop.create_connection(lambda c=c: Driver(frames_[c * per:(c + 1) * per], 0, paced=True),
                                            "127.0.0.1", port)
        drivers.append(d)
    tick = 0.002
    per_tick = rate * tick / CONNECTIONS
    owed = [0.0] * CONNECTIONS
    t0 = time.perf_counter()
    next_t = t0
    while time.perf_counter() - t0 < seconds:
        for i, d in enumerate(drivers):
            owed[i] += per_tick
            n = int(owed[i])
            if n:
                owed[i] -= n
                d.send(n)
        next_t += tick
        await asyncio.sleep(max(0.0, next_t - time.perf_counter()))
    await asyncio.sleep(0.5)
    lat = sorted(x for d in drivers for x in d.latencies[len(d.latencies) // 10:])  # skip warm-up
    for d in drivers:
        assert d.transport is not None
        d.transport.close()
    return lat


async def setup_brokers(port: int, cluster_id: str, timing: list[float] | None = None,
                        features: dict[str, int] | None = None) -> list[bytes]:
    """Register and unfence BROKERS brokers, one request at a time; the heartbeat frames to
    drive them with. ``timing`` gets the registrations' seconds (each waits for its commit).
    ``features`` (a 4.3+ controller's finalized levels, metadata.version among them): brokers
    of that release, supporting those levels, their heartbeats v2 with the cordoned log
    directories (none) a caught-up 4.3+ broker reports; without, 3.9's (v1, no tagged field)."""
    reg = registry.request_class(ApiKey.BROKER_REGISTRATION)
    hb = registry.request_class(ApiKey.BROKER_HEARTBEAT)
    supported = [reg.Feature(name="metadata.version", min_supported_version=7,
                             max_supported_version=21 if features is None else features["metadata.version"])]
    supported += [reg.Feature(name=k, min_supported_version=0, max_supported_version=v)
                  for k, v in (features or {}).items() if k != "metadata.version"]
    version, extra = (1, {}) if features is None else (2, {"cordoned_log_dirs": []})
    c = await KafkaClient.connect("127.0.0.1", port)
    epochs = {}
    t0 = time.perf_counter()
    for b in range(BROKERS):
        r = await c.request(reg(broker_id=b, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
                                listeners=[reg.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
                                features=supported, log_dirs=[uuid.uuid4()]), 3)
        assert r.error_code == 0, r
        epochs[b] = r.broker_epoch
    if timing is not None:
        timing.append(time.perf_counter() - t0)
    for b in range(BROKERS):
        r = await c.request(hb(broker_id=b, broker_epoch=epochs[b], current_metadata_offset=10**9, **extra), version)
        assert r.is_fenced is False, r
    await c.close()
    codec = frames.api_codec(63, version)
    return [codec.encode_request(hb(broker_id=b, broker_epoch=epochs[b], current_metadata_offset=10**9, **extra), 7,
                                 f"broker-{b}") for b in range(BROKERS)]


def handler_only() -> float:
    """µs per no-change heartbeat in ClusterControlManager.heartbeat alone (no socket, no queue):
    the floor under the end-to-end figure."""
    import timeit

    from kraftsim.controller.managers.cluster import ClusterControlManager
    from tests.controller_harness import WriteHarness, request_context

    h = WriteHarness()
    cm = ClusterControlManager(h.ctx)
    cm.activate()
    reg_cls, hb_cls = registry.request_class(ApiKey.BROKER_REGISTRATION), registry.request_class(ApiKey.BROKER_HEARTBEAT)
    reg_ctx, hb_ctx = request_context(ApiKey.BROKER_REGISTRATION, 3), request_context(ApiKey.BROKER_HEARTBEAT, 1)
    for b in range(1, 101):
        req = reg_cls(broker_id=b, cluster_id=h.ctx.cluster_id, incarnation_id=uuid.uuid4(),
                      listeners=[reg_cls.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
                      features=[reg_cls.Feature(name="metadata.version", min_supported_version=7,
                                                max_supported_version=21)], log_dirs=[uuid.uuid4()])
        epoch = h.apply(cm.register_broker(req, reg_ctx)).broker_epoch
        h.apply(cm.heartbeat(hb_cls(broker_id=b, broker_epoch=epoch, current_metadata_offset=h.next_offset), hb_ctx))
    reqs = [hb_cls(broker_id=b, broker_epoch=h.image.cluster.brokers[b].epoch, current_metadata_offset=h.next_offset)
            for b in range(1, 101)]
    hb = cm.heartbeat

    def run() -> None:
        for r in reqs:
            hb(r, hb_ctx)

    n = 50_000
    return min(timeit.repeat(run, number=n // 100, repeat=5)) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--py-spy", metavar="FILE", help="sample the controller with py-spy (beside this python, or on PATH) during "
                    "the pipelined run and write its top functions to FILE")
    ap.add_argument("--override", action="append", default=[], metavar="K=V", help="a controller config line")
    ap.add_argument("--fault", metavar="JSON", help="a fault to inject before the runs (docs/faults.md)")
    args = ap.parse_args()
    overrides = dict(o.split("=", 1) for o in args.override)
    if args.fault:
        overrides["kraftsim.faults.enable"] = "true"
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        port, http_port, echo_port = harness.free_port(), harness.free_port(), harness.free_port()
        cfg = harness.write_config(tmp, port=port, http_port=http_port, **{
            "metadata_max_idle_interval_ms": "500", "broker_session_timeout_ms": "600000",
            **{k.replace(".", "_"): v for k, v in overrides.items()}})
        cid = harness.format_dir(cfg)
        ctl = harness.spawn_controller(cfg)
        echo = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, str(echo_port)], stdout=subprocess.PIPE, text=True)
        try:
            harness.wait_http(http_port)
            assert echo.stdout is not None and echo.stdout.readline().strip() == "ready"
            reg_s: list[float] = []
            hb_frames = asyncio.run(setup_brokers(port, cid, reg_s))
            if args.fault:
                from kraftsim.faults.client import FaultClient

                fault = FaultClient(f"127.0.0.1:{http_port}").add(json.loads(args.fault))
                print(f"with fault {fault['id']}: {fault['description']}")
            spy = None
            if args.py_spy:
                beside = Path(sys.executable).parent / "py-spy"  # else the one on PATH
                spy = subprocess.Popen([str(beside) if beside.exists() else "py-spy", "record", "--pid", str(ctl.pid),
                                        "--format", "raw", "--output", args.py_spy, "--rate", "500",
                                        "--duration", str(int(args.seconds) + 1), "--nonblocking"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            rate, sample, cpu_us = asyncio.run(drive(port, hb_frames, args.seconds, ctl.pid))
            if spy is not None:
                spy.wait()
            assert sample is not None
            _, resp = frames.decode_response(sample, ApiKey.BROKER_HEARTBEAT, 1)
            assert resp.error_code == 0 and resp.is_fenced is False, resp
            echo_rate, _, echo_cpu_us = asyncio.run(drive(echo_port, hb_frames, args.seconds, echo.pid))
            lat = asyncio.run(paced(port, hb_frames, 5000, args.seconds))
            p50 = lat[len(lat) // 2] * 1000
            p99 = lat[int(len(lat) * 0.99)] * 1000
            print(f"{BROKERS} unfenced brokers, {CONNECTIONS} connections x {IN_FLIGHT} in flight, "
                  f"{args.seconds:.0f} s per run, cpus={os.cpu_count()}")
            print(f"controller: {rate:,.0f} heartbeats/s; echo server: {echo_rate:,.0f} frames/s; "
                  f"ratio {rate / echo_rate:.2f}")
            assert cpu_us is not None and echo_cpu_us is not None
            print(f"server CPU per frame: controller {cpu_us:.2f} µs, echo {echo_cpu_us:.2f} µs; "
                  f"ratio {echo_cpu_us / cpu_us:.2f}; load average {os.getloadavg()[0]:.2f}")
            print(f"registrations, one at a time, each answered after its commit: {BROKERS / reg_s[0]:,.0f}/s")
            print(f"paced at 5,000 heartbeats/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms ({len(lat):,} samples)")
            print(f"the handler alone (no socket, no queue): {handler_only():.2f} µs per no-change heartbeat")
        finally:
            ctl.send_signal(signal.SIGTERM)
            echo.kill()
            ctl.communicate(timeout=30)
            echo.communicate(timeout=30)


if __name__ == "__main__":
    main()

"""``kraftsim brokers``: N simulated brokers in one asyncio process.

The fleet owns what its brokers share (one metadata observer and image, the client listeners,
the counters) and what happens to them as a group: staggered start, ``--kill``, ``--flap``,
the status line, and on SIGTERM a controlled shutdown of every broker the controller has
registered (whatever its state: see lifecycle.py), then a summary and exit 0 when all of them
were let go by the controller; a broker not yet registered just stops.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import random
import signal
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kraftsim.broker.latency import LatencyRecorder
from kraftsim.broker.lifecycle import BrokerLifecycle, BrokerSpec, BrokerState, Shared
from kraftsim.broker.observer import MetadataObserver
from kraftsim.broker.status import StatusReporter
from kraftsim.broker.zk_control import ZkControlState
from kraftsim.metadata import versions
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.clock import Clock
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import DescribeClusterRequest
from kraftsim.rpc.security import SecurityProtocol

if TYPE_CHECKING:
    from aiohttp import web

    from kraftsim.broker.listener import ClientListeners
    from kraftsim.faults.registry import FaultRegistry
    from kraftsim.migration.zk_client import ZkSession

log = logging.getLogger("kraftsim.broker")

LISTENER_NAME = "PLAINTEXT"
NO_LISTENER_PORT = 9092  # advertised when the fleet has no client listener (nobody listens there)
DIRECTORY_NAMESPACE = uuid.UUID("6f1ee7c5-50f4-4d0c-9a5a-6b726166747e")  # kraftsim's, for log dir ids
CONTROLLED_SHUTDOWN_TIMEOUT_S = 300.0  # a Kafka broker waits up to 5 minutes for its controlled shutdown
Address = tuple[str, int]


class FleetError(Exception):
    """The fleet cannot start (one line for the user)."""


@dataclass
class FleetOptions:
    bootstrap: list[Address]
    count: int
    first_id: int = 1
    racks: list[str] = field(default_factory=list)
    features: dict[str, tuple[int, int]] = field(default_factory=dict)
    log_dirs: int = 1
    kill: int = 0
    kill_after_s: float = 10.0
    flap_period_s: float | None = None
    listen: Address | None = None
    listen_per_broker: bool = False
    advertised_host: str | None = None
    cluster_id: str | None = None
    heartbeat_interval_ms: int = 2000
    session_timeout_ms: int = 9000
    status_interval_s: float = 10.0
    start_rate: float = 200.0  # brokers started per second (a real fleet does not start in one instant)
    seed: int | None = None
    tty: bool = False
    zookeeper: str | None = None  # --zk-mode: ZooKeeper-mode brokers, registered in this ZooKeeper
    http_listen: Address | None = None  # kraftsim.http.listen: /healthz, /metrics, /faults (none by default)
    faults_enable: bool = False  # kraftsim.faults.enable: /faults takes faults (docs/faults.md)
    faults_token: str = ""  # kraftsim.faults.token
    release: str | None = None  # the Kafka release the brokers are; None: the controller's


def log_dir_ids(cluster_id: str, broker_id: int, n: int) -> list[uuid.UUID]:
    """A broker's log directory ids: stable per (cluster, broker), like the ids in the
    meta.properties of a real broker's directories, so a restarted fleet registers the same."""
    return [uuid.uuid5(DIRECTORY_NAMESPACE, f"{cluster_id}/{broker_id}/{i}") for i in range(n)]


def default_features(release: versions.Release | None = None) -> dict[str, tuple[int, int]]:
    """What a broker of ``release`` (3.9 unless given) registers (BrokerFeatures
    .defaultSupportedFeatures)."""
    return (release or versions.release()).supported_features()


class Fleet:
    def __init__(self, options: FleetOptions, clock: Clock | None = None) -> None:
        """``clock``: the brokers' timers run on it (tests pass a ManualClock); by default on
        the event loop's time."""
        self.options = options
        self.clock = clock
        self.rng = random.Random(options.seed)
        self.brokers: dict[int, BrokerLifecycle] = {}
        self.killed: set[int] = set()
        self.latencies = LatencyRecorder()
        self.release = versions.release(options.release) if options.release else versions.release()
        self.features = {**default_features(self.release), **options.features}
        self.cluster_id = options.cluster_id or ""
        self.observer: MetadataObserver | None = None
        self.shared: Shared | None = None
        self.listeners: ClientListeners | None = None  # when --listen
        self.ports: dict[int, int] = {}  # broker id -> its listener port
        self.status: StatusReporter | None = None
        self.started_at = time.monotonic()
        self._stop = asyncio.Event()
        self._kill_signal = asyncio.Event()
        self._signals = 0
        self._tasks: list[asyncio.Task[None]] = []
        self.zk: ZkSession | None = None  # the --zk-mode ZooKeeper session holding the brokers' /brokers/ids znodes
        self.zk_control: dict[int, ZkControlState] = {}  # --zk-mode: what each broker's controller told it
        self.faults: FaultRegistry | None = None  # kraftsim.faults.enable
        self.http: web.AppRunner | None = None  # kraftsim.http.listen

    @property
    def ids(self) -> range:
        o = self.options
        return range(o.first_id, o.first_id + o.count)

    def controller_address(self) -> Address:
        obs = self.observer
        if obs is not None and obs.leader_address is not None:
            return obs.leader_address
        return self.options.bootstrap[0]

    # ---- start ---------------------------------------------------------------------------

    async def start(self) -> None:
        o = self.options
        if not self.cluster_id or o.release is None:
            cluster_id, release = await discover_controller(o.bootstrap, need_cluster_id=not self.cluster_id)
            self.cluster_id = self.cluster_id or cluster_id
            if o.release is None:  # brokers of the controller's release, as in a real cluster
                self.release = release
                self.features = {**default_features(release), **o.features}
        log.info("brokers of Kafka %s", self.release)
        first = o.first_id
        self.observer = MetadataObserver(o.bootstrap, self.cluster_id, first,
                                         log_dir_ids(self.cluster_id, first, 1)[0], self.features,
                                         release=self.release)
        self.observer.start()
        self.shared = Shared(self.cluster_id, o.heartbeat_interval_ms, o.session_timeout_ms,
                             lambda: self.observer.applied_offset if self.observer else -1,
                             self.observer.applied, self.controller_address, self.latencies, clock=self.clock)
        release, observer = self.release, self.observer
        self.shared.heartbeat_version = release.apis[ApiKey.BROKER_HEARTBEAT][1]
        if release.knows_cordoned_log_dirs:
            self.shared.cordoned_log_dirs_supported = \
                lambda: release.cordoned_log_dirs_supported(observer.image.metadata_version)
        if o.listen is not None:
            from kraftsim.broker.listener import ClientListeners

            self.listeners = ClientListeners(self)
            self.ports = await self.listeners.start(o.listen, o.listen_per_broker)
        for bid in self.ids:
            self.brokers[bid] = BrokerLifecycle(self.spec(bid), self.shared)
        if o.zookeeper:
            await self._register_in_zookeeper(o.zookeeper)
        self.status = StatusReporter(self, tty=o.tty, interval_s=o.status_interval_s)
        self._tasks.append(asyncio.create_task(self._start_brokers(), name="fleet-start"))
        self._tasks.append(asyncio.create_task(self.status.run(), name="fleet-status"))
        if o.kill:
            self._tasks.append(asyncio.create_task(self._kill_later(), name="fleet-kill"))
        if o.flap_period_s:
            self._tasks.append(asyncio.create_task(self._flap(o.flap_period_s), name="fleet-flap"))
        if o.faults_enable:
            from kraftsim.faults.fleet import fleet_faults

            self.faults = fleet_faults(self)
        if o.http_listen is not None:
            from kraftsim.broker.http import start_http

            try:
                self.http = await start_http(self, *o.http_listen)
            except OSError as e:
                raise FleetError(f"cannot listen for HTTP on {o.http_listen[0]}:{o.http_listen[1]}: "
                                 f"{e.strerror or e}") from e
            host, port = self.http.addresses[0][:2]
            log.info("HTTP on %s:%d (/healthz, /metrics, /faults)", host, port)
        if self.faults is not None:
            log.warning("fault injection is on (kraftsim.faults.enable): /faults %s", "with its token"
                        if o.faults_token else "from loopback only")

    def spec(self, broker_id: int) -> BrokerSpec:
        o = self.options
        racks = o.racks
        rack = racks[(broker_id - o.first_id) % len(racks)] if racks else None
        host = o.advertised_host or (o.listen[0] if o.listen else "127.0.0.1")
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        port = self.ports.get(broker_id, NO_LISTENER_PORT)
        return BrokerSpec(broker_id, rack, [(LISTENER_NAME, host, port, int(SecurityProtocol.PLAINTEXT))],
                          dict(self.features), log_dir_ids(self.cluster_id, broker_id, o.log_dirs),
                          zk_mode=o.zookeeper is not None)

    async def _register_in_zookeeper(self, hosts: str) -> None:
        """--zk-mode: each broker's /brokers/ids/<id>, ephemeral on the fleet's one session, as a
        ZooKeeper-mode broker registers (a registration already there, e.g. ``kraftsim zk seed``'s,
        is left as it is). The brokers then register with the KRaft controller as migrating."""
        from kraftsim.migration import zk_layout as L
        from kraftsim.migration.zk_client import ZkSession, ZooKeeperUnavailableError

        try:
            self.zk = await ZkSession.connect_async(hosts, 15_000)
        except ZooKeeperUnavailableError as e:
            raise FleetError(str(e)) from e
        now = int(time.time() * 1000)
        znodes = []
        for bid in self.ids:
            _, host, port, _ = self.brokers[bid].spec.listeners[0]
            znodes.append((L.broker_path(bid), L.BrokerZNode(
                bid, host, port, (f"{LISTENER_NAME}://{host}:{port}",), {LISTENER_NAME: LISTENER_NAME},
                rack=self.brokers[bid].spec.rack, timestamp_ms=now).encode()))
        created = await asyncio.to_thread(self.zk.register_ephemeral, L.BROKER_IDS, znodes)
        log.info("registered %d ZooKeeper-mode brokers in %s%s (%d were there already)", created, hosts,
                 L.BROKER_IDS, len(znodes) - created)

    async def _start_brokers(self) -> None:
        """At most ``start_rate`` brokers a second, in small steps; after a stall of the loop the
        pace resumes from now rather than catching up in one burst."""
        rate = self.options.start_rate
        step = max(1, int(rate / 20)) if rate > 0 else len(self.brokers)
        pending = list(self.brokers.values())
        for i in range(0, len(pending), step):
            if self._stop.is_set():
                return
            for broker in pending[i:i + step]:
                if broker.state == BrokerState.NOT_RUNNING:
                    broker.start()
            if rate > 0:
                await asyncio.sleep(step / rate)
        # Tens of thousands of long-lived objects (brokers, connections, the image) would be
        # scanned by every full garbage collection, a pause of ~100 ms at 10,000 brokers that
        # every heartbeat in flight waits out: move them out of the collector's sight.
        gc.collect()
        gc.freeze()
        log.info("started %d brokers (ids %d-%d) against %s", len(self.brokers), self.ids[0], self.ids[-1],
                 ",".join(f"{h}:{p}" for h, p in self.options.bootstrap))

    # ---- faults --------------------------------------------------------------------------

    def running(self) -> list[BrokerLifecycle]:
        return [b for b in self.brokers.values() if b.state == BrokerState.RUNNING]

    def kill_now(self) -> None:
        """SIGUSR1: the --kill K brokers stop heartbeating now rather than after --kill-after."""
        self._kill_signal.set()

    async def _kill_later(self) -> None:
        o = self.options
        while len(self.running()) < len(self.brokers) - len(self.killed) and not self._kill_signal.is_set():
            await asyncio.sleep(0.1)
        try:
            await asyncio.wait_for(self._kill_signal.wait(), o.kill_after_s)
        except TimeoutError:
            pass
        victims = sorted(self.rng.sample(sorted(self.running(), key=lambda b: b.broker_id),
                                         min(o.kill, len(self.running()))), key=lambda b: b.broker_id)
        for b in victims:
            b.kill()
            self.killed.add(b.broker_id)
            if self.listeners is not None:
                await self.listeners.stop_broker(b.broker_id)
        log.info("killed brokers %s: they stop heartbeating", ",".join(str(b.broker_id) for b in victims))

    async def _flap(self, period: float) -> None:
        """Every ``period`` seconds one running broker crashes, and comes back ``period``
        seconds later as a new incarnation (a restarted process)."""
        while True:
            await asyncio.sleep(period)
            candidates = [b for b in self.running() if b.broker_id not in self.killed]
            if not candidates:
                continue
            victim = self.rng.choice(candidates)
            victim.kill()
            log.info("flap: broker %d goes away; back in %.0f s", victim.broker_id, period)
            self._tasks.append(asyncio.create_task(self._come_back(victim.broker_id, period)))

    async def _come_back(self, broker_id: int, after: float) -> None:
        await asyncio.sleep(after)
        broker = self.restart(broker_id)
        if broker is not None:
            log.info("flap: broker %d is back as incarnation %s", broker_id, broker.incarnation_id)

    def restart(self, broker_id: int, features: dict[str, tuple[int, int]] | None = None) -> BrokerLifecycle | None:
        """The broker's process starts again, as a new incarnation (killed first if it runs),
        registering ``features`` instead of the fleet's when given; None once the fleet stops."""
        if self._stop.is_set() or self.shared is None:
            return None
        old = self.brokers.get(broker_id)
        if old is not None:
            old.kill()
        spec = self.spec(broker_id)
        if features is not None:
            spec = dataclasses.replace(spec, features=dict(features))
        broker = BrokerLifecycle(spec, self.shared)
        self.brokers[broker_id] = broker
        broker.start()
        self.shared.count("restarts")
        return broker

    # ---- stop ----------------------------------------------------------------------------

    def request_stop(self) -> None:
        self._signals += 1
        if self._signals == 1:
            log.info("shutting down %d brokers through controlled shutdown", len(self.live()))
            self._stop.set()
        else:
            log.warning("second signal: stopping at once")
            for b in self.brokers.values():
                b.kill()

    def live(self) -> list[BrokerLifecycle]:
        return [b for b in self.brokers.values() if b.state not in (BrokerState.KILLED, BrokerState.SHUTTING_DOWN)]

    async def wait_stop_requested(self) -> None:
        await self._stop.wait()

    async def shutdown(self, timeout_s: float = CONTROLLED_SHUTDOWN_TIMEOUT_S) -> dict[str, Any]:
        began = time.monotonic()
        if self.faults is not None:
            self.faults.clear()  # silenced brokers speak again, and shut down through the controller
        for t in self._tasks:
            if t.get_name() != "fleet-status":
                t.cancel()
        live = self.live()
        for b in live:
            b.begin_controlled_shutdown()
        pending = [b.done for b in live]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        controlled = sum(1 for b in live if b.controlled_shutdown_done)
        unfinished = [b.broker_id for b in live if not b.done.done()]
        for b in live:
            if not b.done.done():
                b.kill()
        elapsed = time.monotonic() - began
        if self.status is not None:
            self.status.stop()
        for t in self._tasks:
            t.cancel()
        if self.listeners is not None:
            await self.listeners.stop()
        if self.observer is not None:
            await self.observer.stop()
        if self.zk is not None:  # the brokers' ZooKeeper registrations go with the session
            zk, self.zk = self.zk, None
            await zk.close_async()
        if self.shared is not None:
            self.shared.sweeper.stop()
        if self.http is not None:
            await self.http.cleanup()
        p50, p99 = self.latencies.percentiles_ms(50, 99)
        counters = dict(self.shared.counters) if self.shared else {}
        return {"brokers": len(self.brokers), "shut_down": len(live), "controlled": controlled,
                "skipped": len(live) - controlled - len(unfinished), "unfinished": unfinished,
                "killed": sorted(self.killed), "seconds": elapsed, "p50_ms": p50, "p99_ms": p99,
                "applied_offset": self.observer.applied_offset if self.observer else -1, **counters}


async def discover_controller(bootstrap: list[Address], need_cluster_id: bool = True) -> tuple[str, versions.Release]:
    """The cluster id (DescribeCluster on the controller listener, KIP-919, when
    ``need_cluster_id``) and the release the controller is (its ApiVersions' SupportedFeatures)."""
    last = "no address tried"
    for host, port in bootstrap:
        try:
            client = await KafkaClient.connect(host, port, client_id="kraftsim-brokers", timeout=10)
        except (OSError, TimeoutError) as e:
            last = f"cannot connect to {host}:{port}: {e.strerror if isinstance(e, OSError) and e.strerror else e}"
            continue
        try:
            hello = await asyncio.wait_for(client.negotiate(), 10)
            release = versions.release_advertising(
                {f.name: (f.min_version, f.max_version) for f in hello.supported_features or []})
            if not need_cluster_id:
                return "", release
            if ApiKey.DESCRIBE_CLUSTER not in client.versions:
                raise FleetError(f"the controller at {host}:{port} does not serve DescribeCluster: "
                                 f"pass --cluster-id")
            version = min(1, client.versions[ApiKey.DESCRIBE_CLUSTER][1])
            resp = await client.request(DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                               endpoint_type=2), version, timeout=10)
            if resp.error_code != ErrorCode.NONE:
                last = f"DescribeCluster at {host}:{port} answered {resp.error_code}: {resp.error_message}"
                continue
            return str(resp.cluster_id), release
        except (OSError, TimeoutError) as e:
            last = f"{host}:{port}: {e}"
        finally:
            await client.close()
    raise FleetError(last)


async def run(options: FleetOptions) -> int:
    fleet = Fleet(options)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, fleet.request_stop)
    loop.add_signal_handler(signal.SIGUSR1, fleet.kill_now)
    try:
        await fleet.start()
    except FleetError:
        if fleet.observer is not None:
            await fleet.observer.stop()
        raise
    await fleet.wait_stop_requested()
    summary = await fleet.shutdown()
    for line in summary_lines(summary):
        print(line, flush=True)
    ok = not summary["unfinished"] and summary["controlled"] + summary["skipped"] == summary["shut_down"]
    return 0 if ok else 1


def summary_lines(s: dict[str, Any]) -> list[str]:
    lines = [
        f"kraftsim brokers: {s['shut_down']} brokers shut down in {s['seconds']:.1f} s: {s['controlled']} through "
        f"controlled shutdown, {s['skipped']} not yet registered, {len(s['unfinished'])} not let go by the controller; "
        f"{len(s['killed'])} killed before",
        f"heartbeats {s.get('heartbeats', 0)} (p50 {s['p50_ms']:.2f} ms, p99 {s['p99_ms']:.2f} ms), errors "
        f"{s.get('heartbeat_errors', 0)}, failed exchanges {s.get('failures', 0)}, registrations "
        f"{s.get('registrations', 0)} (again after a controller restart: {s.get('reregistrations', 0)}), "
        f"metadata offset {s['applied_offset']}",
    ]
    if s["unfinished"]:
        lines.append("not shut down: " + ",".join(str(i) for i in s["unfinished"]))
    return lines


"""One simulated broker's life with its controller, as Kafka 3.9's BrokerLifecycleManager leads it.

STARTING: register with a fresh incarnation id, then heartbeat every 10 ms until the controller
says the broker has caught up (its reported metadata offset reached its registration) ->
RECOVERY: heartbeat every ``broker.heartbeat.interval.ms`` until unfenced -> RUNNING. A failed
exchange (an error, or no answer within the channel's retry timeout) is retried after Kafka's
exponential backoff (100 ms doubling up to the session timeout, 2% jitter).
PENDING_CONTROLLED_SHUTDOWN (on SIGTERM): heartbeats with WantShutDown, the first reply answered
50 ms later, until ShouldShutDown -> SHUTTING_DOWN. A response is read in the state the broker is
in when it arrives, not the one it was in when the request left: a SIGTERM between the two is
never undone by the answer to an earlier heartbeat, and a broker already SHUTTING_DOWN ignores it.

Where this differs from Kafka 3.9 on SIGTERM: Kafka's broker enters controlled shutdown only from
RUNNING; in STARTING or RECOVERY it stops heartbeating at once, and one the controller had just
unfenced (its answer still on the way) holds its leaderships, and every other broker's controlled
shutdown behind the lowest active offset, until its session expires. Here every broker the
controller has registered, or may be registering (a registration in flight), shuts down through
the controller: it heartbeats with WantShutDown until ShouldShutDown, which a fenced broker gets
at once. Only a broker that never sent a registration, or whose registration failed, stops at once.

Where kraftsim's brokers do more than Kafka 3.9's, so that a fleet survives a controller whose
log was replaced: a broker whose registration the controller no longer knows
(STALE_BROKER_EPOCH: it was unregistered, or the controller lost its log) registers again, with
the same incarnation, and goes through STARTING again; and a broker whose connection to the
controller was lost and came back (a controller restart) sends its registration again, with the
same incarnation (which keeps its epoch and fenced state), before its next heartbeat (not after
a connection it dropped itself on a timeout: see channel.py). A Kafka 3.9 broker keeps
heartbeating in both cases.

The reported metadata offset is the fleet observer's applied offset: what was truly replayed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kraftsim.broker.channel import Address, ChannelTimeout, ControllerChannel, TimeoutSweeper
from kraftsim.broker.latency import LatencyRecorder
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import ConnectionClosed
from kraftsim.rpc.clock import Clock
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest

log = logging.getLogger("kraftsim.broker")

STARTING_HEARTBEAT_MS = 10  # BrokerLifecycleManager: the next heartbeat while STARTING
SHUTDOWN_FIRST_REPLY_MS = 50  # ... after the first reply in PENDING_CONTROLLED_SHUTDOWN
BACKOFF_INITIAL_MS = 100
BACKOFF_MULTIPLIER = 2
BACKOFF_JITTER = 0.02


class BrokerState(enum.Enum):
    """Kafka's BrokerState, plus KILLED: a simulated crash (no controlled shutdown)."""

    NOT_RUNNING = 0
    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7
    KILLED = 100


@dataclass(frozen=True, slots=True)
class BrokerSpec:
    """What a broker tells the controller about itself when it registers."""

    broker_id: int
    rack: str | None
    listeners: list[tuple[str, str, int, int]]  # (name, host, port, security protocol id)
    features: dict[str, tuple[int, int]]
    log_dirs: list[uuid.UUID]
    zk_mode: bool = False  # a ZooKeeper-mode broker taking part in a migration (IsMigratingZkBroker)


@dataclass
class Shared:
    """What every broker of a fleet shares: the cluster, the timings, the observer's applied
    offset, the controller's address, and the fleet-wide counters."""

    cluster_id: str
    heartbeat_interval_ms: int
    session_timeout_ms: int
    applied_offset: Callable[[], int]
    applied: Callable[[int], asyncio.Future[None]]  # done once the fleet has applied that offset
    controller_address: Callable[[], Address]
    latencies: LatencyRecorder
    counters: dict[str, int] = field(default_factory=dict)
    sweeper: TimeoutSweeper = field(default_factory=TimeoutSweeper)
    clock: Clock | None = None  # None: the event loop's own time
    # Injected faults (kraftsim.faults.fleet), by broker id, whatever its incarnation: a silenced
    # broker sends nothing (a hung process); a lagging one reports this metadata offset, whatever
    # the fleet has applied (its replay has stopped).
    silenced: set[int] = field(default_factory=set)
    lagging: dict[int, int] = field(default_factory=dict)
    # The highest BrokerHeartbeat version the brokers' release speaks (v2 from 4.3), and whether
    # they report cordoned log directories: a 4.3+ release on a metadata.version that records them.
    heartbeat_version: int = 1
    cordoned_log_dirs_supported: Callable[[], bool] = lambda: False

    def loop_future(self) -> asyncio.Future[None]:
        return asyncio.get_running_loop().create_future()

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n


class BrokerLifecycle:
    def __init__(self, spec: BrokerSpec, shared: Shared, incarnation_id: uuid.UUID | None = None) -> None:
        self.spec = spec
        self.shared = shared
        self.incarnation_id = incarnation_id or uuid.uuid4()
        self.state = BrokerState.NOT_RUNNING
        self.broker_epoch = -1
        self.registered = False
        self.ready_to_unfence = True  # no log recovery to wait for in a simulated broker
        self.initial_catch_up = False  # a heartbeat has said it caught up (its first time only)
        self.failed_attempts = 0
        self.got_controlled_shutdown_response = False
        self.controlled_shutdown_done = False
        self.last_error = ""
        self.channel = ControllerChannel(shared.controller_address, f"broker-{spec.broker_id}-heartbeat",
                                         shared.session_timeout_ms / 2000, shared.sweeper)
        self._losses_seen = 0
        self._registering = False  # a registration request is in flight
        self._wake: asyncio.Future[None] | None = None
        self.idle = False  # waiting for its next communication (tests in virtual time wait for this)
        self.last_heartbeat_ms = -1  # when the latest heartbeat was sent, on the fleet's clock
        self._immediate = False
        self._task: asyncio.Task[None] | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def broker_id(self) -> int:
        return self.spec.broker_id

    # ---- control from the fleet ----------------------------------------------------------

    def start(self) -> None:
        self.state = BrokerState.STARTING
        self._task = asyncio.create_task(self._run(), name=f"broker-{self.broker_id}")

    def begin_controlled_shutdown(self) -> None:
        state = self.state
        if state in (BrokerState.PENDING_CONTROLLED_SHUTDOWN, BrokerState.KILLED, BrokerState.SHUTTING_DOWN):
            return
        if state == BrokerState.NOT_RUNNING or not (self.registered or self._registering):
            log.debug("[broker %d] skipping controlled shutdown: not registered (state %s)", self.broker_id,
                      state.name)
            self._shut_down()
            return
        log.debug("[broker %d] beginning controlled shutdown in state %s", self.broker_id, state.name)
        self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        self._wake_now()  # the next heartbeat goes at once

    def kill(self) -> None:
        """Stop at once, as a killed process would: no more heartbeats, connection dropped."""
        if self.state in (BrokerState.KILLED, BrokerState.SHUTTING_DOWN):
            return
        self.state = BrokerState.KILLED
        self.channel.close()
        if self._task is not None:
            self._task.cancel()
        self._finish()

    def _shut_down(self) -> None:
        self.state = BrokerState.SHUTTING_DOWN
        self.channel.close()
        self._wake_now()
        self._finish()

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)

    def wake(self) -> None:
        """The next communication goes now (a silenced broker spoken again: kraftsim.faults)."""
        self._wake_now()

    def _wake_now(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)
        else:
            self._immediate = True  # a communication is in flight: the next one goes at once

    # ---- the communication loop ----------------------------------------------------------

    async def _sleep(self, ms: float) -> None:
        if self._immediate:
            self._immediate = False
            return
        if ms <= 0:
            return
        await self._wait(self.shared.loop_future(), ms)

    async def _wait(self, fut: asyncio.Future[None], ms: float) -> None:
        """Wait for ``fut`` (woken early by :meth:`_wake_now`) at most ``ms``: on the event
        loop's timers, or on the fleet's clock when it has one (virtual time in tests)."""
        self._wake = fut
        self.idle = True
        clock = self.shared.clock
        if clock is None:
            handle: asyncio.TimerHandle | asyncio.Task[None] = asyncio.get_running_loop().call_later(
                ms / 1000, _resolve, fut)
        else:
            handle = asyncio.ensure_future(clock.sleep_ms(int(ms)))
            handle.add_done_callback(lambda _: _resolve(fut))
        try:
            await fut
        finally:
            handle.cancel()
            self._wake = None
            self.idle = False

    async def _run(self) -> None:
        delay = 0.0
        try:
            while self.state not in (BrokerState.SHUTTING_DOWN, BrokerState.KILLED):
                await self._sleep(delay)
                if self.state in (BrokerState.SHUTTING_DOWN, BrokerState.KILLED):
                    break
                if self.spec.broker_id in self.shared.silenced:
                    delay = self.shared.heartbeat_interval_ms
                    continue
                reconnected = self.channel.peer_losses != self._losses_seen
                if (self.registered and reconnected
                        and self.state not in (BrokerState.STARTING, BrokerState.PENDING_CONTROLLED_SHUTDOWN)):
                    self.registered = False  # the controller went away: tell it again who we are
                    self.shared.count("reregistrations")
                if not self.registered:
                    delay = await self._register()
                else:
                    delay = await self._heartbeat()
        except asyncio.CancelledError:
            pass
        except Exception as e:  # noqa: BLE001 - one broker's bug must not stop the fleet
            log.exception("[broker %d] stopped by an unexpected error", self.broker_id)
            self.last_error = repr(e)
            self.state = BrokerState.KILLED
        finally:
            self.channel.close()
            self._finish()

    async def _until_applied(self, offset: int, timeout_ms: int) -> None:
        fut = self.shared.applied(offset)
        if not fut.done():
            await self._wait(fut, timeout_ms)

    def _after_failure(self, why: str) -> float:
        """scheduleNextCommunicationAfterFailure: ExponentialBackoff(100, 2, session, 0.02)."""
        self.last_error = why
        self.shared.count("failures")
        exp = min(self.failed_attempts, 32)
        term: int = BACKOFF_INITIAL_MS * BACKOFF_MULTIPLIER ** exp  # a non-negative power: an int
        base = min(term, self.shared.session_timeout_ms)
        self.failed_attempts += 1
        self._immediate = False  # never immediately after a failure
        return base * (1 + random.uniform(-BACKOFF_JITTER, BACKOFF_JITTER))

    async def _register(self) -> float:
        spec = self.spec
        req = BrokerRegistrationRequest(
            broker_id=spec.broker_id, cluster_id=self.shared.cluster_id, incarnation_id=self.incarnation_id,
            listeners=[BrokerRegistrationRequest.Listener(name=n, host=h, port=p, security_protocol=s)
                       for n, h, p, s in spec.listeners],
            features=[BrokerRegistrationRequest.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                      for n, (lo, hi) in sorted(spec.features.items())],
            rack=spec.rack, is_migrating_zk_broker=spec.zk_mode, log_dirs=sorted(spec.log_dirs, key=_java_uuid_order),
            previous_broker_epoch=-1)
        self._registering = True
        try:
            resp = await self.channel.request(req, _registration_version)
        except (ChannelTimeout, ConnectionClosed) as e:
            return self._registration_failed(f"registration: {e}")
        finally:
            self._registering = False
        if self.state == BrokerState.SHUTTING_DOWN:
            return 0
        self._losses_seen = self.channel.peer_losses
        if resp.error_code != ErrorCode.NONE:
            self.shared.count("registration_errors")
            why = f"registration answered {_name(resp.error_code)}"
            if self.failed_attempts == 0:
                log.debug("[broker %d] unable to register: the controller returned %s", self.broker_id,
                         _name(resp.error_code))
            return self._registration_failed(why)
        self.failed_attempts = 0
        if (self.broker_epoch not in (-1, resp.broker_epoch)
                and self.state not in (BrokerState.STARTING, BrokerState.PENDING_CONTROLLED_SHUTDOWN)):
            # A new registration, not ours amended: catch up and be unfenced again.
            self.state = BrokerState.STARTING
        self.broker_epoch = resp.broker_epoch
        self.registered = True
        self.shared.count("registrations")
        log.debug("[broker %d] registered with broker epoch %d", self.broker_id, self.broker_epoch)
        return 0  # heartbeat at once

    def _heartbeat_version(self, channel: ControllerChannel) -> int:
        return channel.version(ApiKey.BROKER_HEARTBEAT, self.shared.heartbeat_version)

    def _registration_failed(self, why: str) -> float:
        """Retry later; but a broker told to shut down while its registration was in flight
        stops now: the controller does not have it (or has it fenced, which holds nothing)."""
        if self.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN and not self.registered:
            self.last_error = why
            log.debug("[broker %d] not registered (%s): shutting down without the controller", self.broker_id, why)
            self._shut_down()
            return 0
        return self._after_failure(why)

    async def _heartbeat(self) -> float:
        sent_state = self.state
        offset = self.shared.lagging.get(self.spec.broker_id)
        if offset is None:
            offset = self.shared.applied_offset()
        req = BrokerHeartbeatRequest(broker_id=self.spec.broker_id, broker_epoch=self.broker_epoch,
                                     current_metadata_offset=offset,
                                     want_fence=not self.ready_to_unfence,
                                     want_shut_down=sent_state == BrokerState.PENDING_CONTROLLED_SHUTDOWN)
        if self.initial_catch_up and self.shared.cordoned_log_dirs_supported():
            # A 4.3+ broker reports its cordoned directories (cordoned.log.dirs) once it has
            # caught up; a simulated broker cordons none.
            req.cordoned_log_dirs = []
        t0 = time.perf_counter()
        clock = self.shared.clock
        self.last_heartbeat_ms = clock.monotonic_ms() if clock is not None else int(time.monotonic() * 1000)
        try:
            resp = await self.channel.request(req, self._heartbeat_version)
        except (ChannelTimeout, ConnectionClosed) as e:
            return self._after_failure(f"heartbeat: {e}")
        self.shared.latencies.add(time.perf_counter() - t0)
        self.shared.count("heartbeats")
        # Kafka's handler reads the state when the response is processed: a controlled shutdown
        # begun while this heartbeat was in flight is not undone by its answer.
        state = self.state
        if state in (BrokerState.SHUTTING_DOWN, BrokerState.KILLED):
            return 0
        error = resp.error_code
        if error == ErrorCode.STALE_BROKER_EPOCH and state != BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            log.debug("[broker %d] the controller does not know broker epoch %d: registering again", self.broker_id,
                     self.broker_epoch)
            self.registered = False
            self.state = BrokerState.STARTING
            self.shared.count("stale_epochs")
            return self._after_failure("heartbeat answered STALE_BROKER_EPOCH")
        if error != ErrorCode.NONE:
            self.shared.count("heartbeat_errors")
            return self._after_failure(f"heartbeat answered {_name(error)}")
        self.failed_attempts = 0
        interval = self.shared.heartbeat_interval_ms
        if state == BrokerState.STARTING:
            if resp.is_caught_up:
                self.state = BrokerState.RECOVERY
                self.initial_catch_up = True
            elif self.shared.applied_offset() < self.broker_epoch:
                # Kafka heartbeats every 10 ms until caught up; a heartbeat before the fleet has
                # applied this broker's registration (at offset = its new epoch) could only say
                # "not yet", so the next one waits for that (a heartbeat interval at most).
                await self._until_applied(self.broker_epoch, interval)
            return STARTING_HEARTBEAT_MS
        if state == BrokerState.RECOVERY:
            if not resp.is_fenced:
                self.state = BrokerState.RUNNING
                log.debug("[broker %d] unfenced: RUNNING", self.broker_id)
            return interval
        if state == BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            if sent_state != state:
                return 0  # that heartbeat did not ask to shut down: the one that does goes now
            if resp.should_shut_down:
                self.controlled_shutdown_done = True
                log.debug("[broker %d] the controller has asked us to exit controlled shutdown", self.broker_id)
                self._shut_down()
                return 0
            first = not self.got_controlled_shutdown_response
            self.got_controlled_shutdown_response = True
            return SHUTDOWN_FIRST_REPLY_MS if first else interval
        return interval


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _registration_version(channel: ControllerChannel) -> int:
    return channel.version(ApiKey.BROKER_REGISTRATION, 4)




def _java_uuid_order(u: uuid.UUID) -> tuple[int, int]:
    """Uuid.compareTo: signed most- then least-significant halves (the order Kafka sends dirs in)."""
    msb, lsb = u.int >> 64, u.int & 0xFFFFFFFFFFFFFFFF
    return (msb - (1 << 64) if msb >> 63 else msb, lsb - (1 << 64) if lsb >> 63 else lsb)


def _name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)

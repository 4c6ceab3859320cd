"""The active controller's periodic work, Kafka's PeriodicTaskControlManager: the no-op record
that keeps the log moving when idle, the fencing of brokers whose session ran out, the sweep
of expired delegation tokens, the leader balancer's loop (``leader_balancer.py``), and, after a
snapshot load that deferred it, the writing of the ISR index.

A small object the QuorumController owns: on each activation (Kafka's completeActivation) the
controller asks it for a fresh set of tasks (:meth:`PeriodicTasks.start`) and keeps them with
its other per-activation tasks, cancelled when it renounces; each task also ends by itself once
the controller is no longer active. Every change a task makes is a write event through
``QuorumController.write``, queued and gated like a request's."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from kraftsim.controller.errors import FatalControllerError, HandlerFaultError
from kraftsim.controller.event_queue import EventTimeoutError
from kraftsim.controller.result import ControllerResult
from kraftsim.metadata.image.migration import ZkMigrationState
from kraftsim.metadata.messages import NoOpRecord
from kraftsim.rpc.api_errors import ApiError

if TYPE_CHECKING:
    from kraftsim.controller.quorum_controller import QuorumController

# The controller's logger: what the tasks log reads as it did when they were part of the core.
log = logging.getLogger("kraftsim.controller")

# Partitions' deferred ISR index entries written per slice: about a millisecond.
_ISR_INDEX_SLICE = 4_000


class PeriodicTasks:
    """The periodic work of one controller; it holds no state of its own between activations
    (what each task decides from is the image, the managers and the configs)."""

    def __init__(self, controller: QuorumController) -> None:
        self._controller = controller

    def start(self) -> list[asyncio.Task[object]]:
        """The tasks of one activation, created in this order (the order they first run in)."""
        qc = self._controller
        tasks: list[asyncio.Task[object]] = []
        idle = qc.config.get("metadata.max.idle.interval.ms")
        if idle > 0:
            tasks.append(asyncio.create_task(self._periodic(idle, self._noop_tick), name="kraftsim-noop"))
        tasks.append(asyncio.create_task(self._fencing_loop(), name="kraftsim-session-timeouts"))
        if qc.managers.tokens.sweep_enabled():  # decided at activation, as Kafka schedules it
            tasks.append(asyncio.create_task(self._token_sweeps(), name="kraftsim-token-sweep"))
        if qc.image.topics.defer_isr:
            tasks.append(asyncio.create_task(self._settle_isr_index(), name="kraftsim-isr-index"))
        if qc.balancer.interval_ms is not None:
            tasks.append(asyncio.create_task(qc.balancer.run(), name="kraftsim-leader-balance"))
        return tasks

    async def _settle_isr_index(self) -> None:
        """Write the ISR index entries a snapshot load deferred (a second's work for a million
        partitions) in slices of about a millisecond, between requests: the controller is active
        and answering meanwhile, and whatever needs the index first writes the rest at once."""
        qc = self._controller
        topics = qc.image.topics
        entries, slices, t0 = len(topics.defer_isr), 1, qc.clock.monotonic_ms()
        while not topics.settle_isr_index(_ISR_INDEX_SLICE):
            slices += 1
            await asyncio.sleep(0)
        log.info("wrote the ISR index the load deferred (%d entries) in %d ms, %d slices", entries,
                 qc.clock.monotonic_ms() - t0, slices)

    async def _periodic(self, period_ms: int, tick: Callable[[], Awaitable[None] | None]) -> None:
        qc = self._controller
        while True:
            await qc.clock.sleep_ms(period_ms)
            if not qc.active:
                return
            try:
                r = tick()
                if inspect.isawaitable(r):
                    await r
            except (ApiError, EventTimeoutError):
                pass
            except FatalControllerError:
                return
            except Exception as e:  # noqa: BLE001 - a periodic task must not die silently
                log.exception("periodic task failed: %r", e)

    async def _noop_tick(self) -> None:
        """Kafka's maybeScheduleNextWriteNoOpRecord: the log moves even when idle, so brokers
        see the high watermark advance."""
        qc = self._controller
        if qc.image.release.is_noop_supported(qc.image.metadata_version):
            await qc.write("writeNoOpRecord", lambda: ControllerResult([(NoOpRecord(), 0)], None))

    async def _token_sweeps(self) -> None:
        """maybeScheduleNextExpiredDelegationTokenSweep: every expiry check interval, while
        tokens stay enabled and supported, remove the expired ones."""
        qc = self._controller
        while qc.active and qc.managers.tokens.sweep_enabled():
            await qc.clock.sleep_ms(qc.managers.tokens.check_interval_ms)
            if not qc.active:
                return
            try:
                await qc.write("sweepExpiredDelegationTokens", qc.managers.tokens.sweep_expired)
            except (ApiError, EventTimeoutError):
                pass
            except (FatalControllerError, HandlerFaultError):
                return

    async def _fencing_loop(self) -> None:
        """Fence brokers whose session expired, one per event, in last-contact order."""
        qc = self._controller
        while qc.active:
            # Judged on what has been read (``rpc/loop.py``): while the event loop is behind, a
            # session that ran out after that may still be saved by a heartbeat waiting unread.
            now = min(qc.clock.monotonic_ms(), qc.arrival.heard_until_ms())
            due = qc.managers.cluster.next_fence_check_ms()
            wait = 1000 if due is None else max(0, min(due - now, 1000))
            if wait:
                await qc.clock.sleep_ms(wait)
                continue
            try:
                await qc.write("maybeFenceReplicas", self._fence_one)
            except (ApiError, EventTimeoutError):
                # Refused in pre-migration (as in Kafka): look again in a second, not at once.
                pre = qc.image.migration.state == ZkMigrationState.PRE_MIGRATION
                await qc.clock.sleep_ms(1000 if pre else 10)
            except (FatalControllerError, HandlerFaultError):
                return  # failed for good, or renounced: the next activation starts its own loop

    def _fence_one(self) -> ControllerResult[None]:
        # On what has been read: a controller that is behind has not heard what waits unread.
        qc = self._controller
        result = qc.managers.cluster.fence_stale_brokers(qc.arrival.heard_until_ms())
        return result if result is not None else ControllerResult([], None)

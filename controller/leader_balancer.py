"""The leader balancer (``auto.leader.rebalance.enable``): Kafka's QuorumController schedules
maybeBalancePartitionLeaders as a deferred write event while some partition is led by another
replica than its preferred one; here a small object the QuorumController owns does the same.

It keeps where the next run stands (Kafka's ImbalanceSchedule and the run's due time) and, on
the active controller, one task that starts each run when due. The controller tells it when to
look (:meth:`LeaderBalancer.maybe_schedule`: after every write event and on activation) and when
to forget (:meth:`LeaderBalancer.cancel`: on renouncing); the run itself is a write event like
any other, through ``QuorumController.write``, so it is queued, gated and answered after commit
the same way. The elections are the elections manager's
(``LeaderElectionManager.balance_partition_leaders``)."""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from typing import TYPE_CHECKING

from kraftsim.controller.errors import FatalControllerError, HandlerFaultError
from kraftsim.controller.event_queue import EventTimeoutError
from kraftsim.controller.result import ControllerResult
from kraftsim.rpc.api_errors import ApiError

if TYPE_CHECKING:
    from kraftsim.controller.quorum_controller import QuorumController

# The controller's logger: what the balancer logs reads as it did when it was part of the core.
log = logging.getLogger("kraftsim.controller")

MAYBE_BALANCE_PARTITION_LEADERS = "maybeBalancePartitionLeaders"
# A balancing run that reached its cap runs again this much later, not at once: Kafka's event
# queue takes due deferred events before queued ones, so it leaves the queue a moment.
_BALANCE_AGAIN_MS = 10


class ImbalanceSchedule(enum.Enum):
    """Kafka's QuorumController.ImbalanceSchedule: where the leader balancer stands."""

    SCHEDULED = "scheduled"  # a run is due at LeaderBalancer.due
    DEFERRED = "deferred"  # none is; the next waits a whole check interval
    IMMEDIATELY = "immediately"  # none is; the last reached its cap, so the next comes at once


class LeaderBalancer:
    """The balancer of one controller. Its check interval is read once, as Kafka's
    ControllerServer reads the configs: None when auto.leader.rebalance.enable=false (no
    balancing at all). Its state outlives activations; :meth:`cancel` resets it."""

    def __init__(self, controller: QuorumController, interval_ms: int | None) -> None:
        self._controller = controller
        self.interval_ms = interval_ms
        self.schedule = ImbalanceSchedule.DEFERRED
        self.due: int | None = None  # the clock's monotonic ms of the scheduled run
        self._armed = asyncio.Event()  # set when a run is scheduled
        self.writes: set[asyncio.Task[None]] = set()  # runs whose records are not committed yet

    def maybe_schedule(self) -> None:
        """Kafka's maybeScheduleNextBalancePartitionLeaders, called where Kafka calls it: after
        every write event (``QuorumController._finish``) and on activation. While some partition
        is led by another replica than its preferred one and no run is scheduled, schedule one a
        check interval from now, or 10 ms from now when the last run reached its cap. A run
        already scheduled keeps its time, so the first check comes one interval after the write
        that made the first imbalance, and then one interval after each run that left some."""
        interval = self.interval_ms
        qc = self._controller
        if (interval is None or self.schedule is ImbalanceSchedule.SCHEDULED or not qc.active
                or not qc.image.topics.imbalanced):
            return
        delay = interval if self.schedule is ImbalanceSchedule.DEFERRED else _BALANCE_AGAIN_MS
        self.due = qc.clock.monotonic_ms() + delay
        self.schedule = ImbalanceSchedule.SCHEDULED
        self._armed.set()

    def cancel(self) -> None:
        """cancelMaybeBalancePartitionLeaders: on resigning, the scheduled run is dropped and the
        next activation schedules afresh, a whole interval later."""
        self.schedule = ImbalanceSchedule.DEFERRED
        self.due = None

    async def run(self) -> None:
        """Start each scheduled run when it is due, on the controller's clock. One task per
        activation, cancelled with the controller's other periodic work. It does not wait for a
        run's records to commit before the next run (Kafka's deferred events do not either): the
        next is scheduled by the run itself, once its records are appended."""
        qc = self._controller
        while qc.active:
            due = self.due
            if due is None:
                self._armed.clear()
                await self._armed.wait()
                continue
            wait = due - qc.clock.monotonic_ms()
            if wait > 0:
                await qc.clock.sleep_ms(wait)
                continue
            self.due = None
            task = asyncio.create_task(self._write(), name="kraftsim-leader-balance-write")
            self.writes.add(task)
            task.add_done_callback(self.writes.discard)

    async def _write(self) -> None:
        try:
            await self._controller.write(MAYBE_BALANCE_PARTITION_LEADERS, self._balance_partition_leaders)
        except (ApiError, EventTimeoutError, HandlerFaultError, FatalControllerError):
            # Refused before it ran (not active, or pre-migration), faulted, or its records were
            # never committed: the controller has resigned or failed, or (pre-migration) the run
            # stays scheduled and never comes, as Kafka's does, until a renouncement resets it.
            pass

    def _balance_partition_leaders(self) -> ControllerResult[bool]:
        """The balancing write event: preferred elections up to the cap (the elections
        manager), then where the next run stands: at once if the cap was reached, else after an
        interval (scheduled once the records are appended, if some imbalance is left)."""
        t0 = time.perf_counter()
        result = self._controller.managers.elections.balance_partition_leaders()
        self.schedule = ImbalanceSchedule.IMMEDIATELY if result.response else ImbalanceSchedule.DEFERRED
        if result.records:
            log.info("maybeBalancePartitionLeaders: generated %d records in %d microseconds.%s",
                     len(result.records), (time.perf_counter() - t0) * 1e6,
                     " Rescheduling immediately." if result.response else "")
        return result

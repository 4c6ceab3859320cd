"""The controller's single event queue (Kafka's ``KafkaEventQueue``): one writer, FIFO.

Every operation is an event run to completion on the event loop thread, one at a time, in
arrival order. When the queue is idle an event runs inline, in the caller's stack, so a request
that writes nothing (most heartbeats) can be answered without a task switch; otherwise it waits
its turn. Events carry an optional deadline: one whose deadline has passed when its turn comes,
inline or queued, fails with a timeout and is not run, as Kafka's does. A request's deadline
counts from when the request was readable (``rpc/loop.py``): under a storm the event loop
itself is where requests wait, so a request can reach an idle queue already late. Queue time
and processing time feed the two event-queue histograms, counted in place (no call per
observation): this runs for every heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar, TypeVarTuple, overload

from kraftsim.controller.metrics import FastHistogram
from kraftsim.rpc.clock import Clock

log = logging.getLogger("kraftsim.controller")

T = TypeVar("T")
A = TypeVar("A")
Ts = TypeVarTuple("Ts")
_NO_ARG: Final = object()


class EventTimeoutError(Exception):
    """An event whose deadline passed while it waited in the queue (REQUEST_TIMED_OUT)."""


@dataclass(slots=True)
class Event(Generic[T]):
    name: str
    run: Callable[[], T]
    deadline_ms: int | None
    enqueued_ms: float
    future: asyncio.Future[T] | None = None
    on_timeout: Callable[[], None] | None = None


class EventQueue:
    def __init__(self, clock: Clock, queue_time: FastHistogram | None = None,
                 processing_time: FastHistogram | None = None,
                 on_timeout: Callable[[str], None] | None = None) -> None:
        self.clock = clock
        self._queue: deque[Event[Any]] = deque()
        self._scheduled = False
        self._running = False
        self.queue_time = queue_time if queue_time is not None else FastHistogram()
        self.processing_time = processing_time if processing_time is not None else FastHistogram()
        self._observe_queue = self.queue_time.observe
        self._observe_processing = self.processing_time.observe
        self._on_timeout = on_timeout or (lambda name: None)
        self.closed = False
        self._paused = False
        self._now = time.perf_counter

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def idle(self) -> bool:
        """Nothing queued or running: the next event runs inline and cannot time out."""
        return not self._queue and not self._running and not self._paused

    def pause(self) -> None:
        """Hold every event until :meth:`resume` (they queue; deadlines keep running)."""
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        if self._queue:
            self._schedule()

    # ``run()``, or ``run(arg)``: the argument saves the caller a closure when the event runs inline.
    @overload
    def submit(self, name: str, run: Callable[[], T], deadline_ms: int | None = None,
               on_timeout: Callable[[], None] | None = None) -> T | asyncio.Future[T]: ...

    @overload
    def submit(self, name: str, run: Callable[[A], T], deadline_ms: int | None,
               on_timeout: Callable[[], None] | None, arg: A) -> T | asyncio.Future[T]: ...

    def submit(self, name: str, run: Callable[..., T], deadline_ms: int | None = None,
               on_timeout: Callable[[], None] | None = None, arg: object = _NO_ARG) -> T | asyncio.Future[T]:
        """Run ``run`` (or ``run(arg)``) as the next event: inline, returning its value, when
        nothing is queued or running; else queued, returning a future."""
        if self.closed:
            raise EventTimeoutError("the controller is shutting down")
        if not self._queue and not self._running and not self._paused:
            return self.call(name, run, () if arg is _NO_ARG else (arg,))
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        if arg is not _NO_ARG:
            bound = run
            run = lambda: bound(arg)  # noqa: E731
        self._queue.append(Event(name, run, deadline_ms, self._now(), fut, on_timeout))
        self._schedule()
        return fut

    # ``on_timeout(timeout_arg)``: the argument saves the caller a closure when the event runs inline.
    @overload
    def call(self, name: str, run: Callable[[*Ts], T], args: tuple[*Ts],
             deadline_ms: int | None = None) -> T | asyncio.Future[T]: ...

    @overload
    def call(self, name: str, run: Callable[[*Ts], T], args: tuple[*Ts], deadline_ms: int | None,
             on_timeout: Callable[[A], None] | None, timeout_arg: A) -> T | asyncio.Future[T]: ...

    def call(self, name: str, run: Callable[[*Ts], T], args: tuple[*Ts], deadline_ms: int | None = None,
             on_timeout: Callable[[Any], None] | None = None, timeout_arg: object = None) -> T | asyncio.Future[T]:
        """``submit(name, lambda: run(*args), ...)`` without building the lambda when the event
        runs inline (the request path: most heartbeats). ``deadline_ms`` (monotonic) has been
        checked by the caller: the event runs inline when the queue is idle, else it waits with
        that deadline and ``on_timeout(timeout_arg)`` as its callback."""
        if self._queue or self._running or self._paused or self.closed:
            told = None if on_timeout is None else lambda: on_timeout(timeout_arg)
            return self.submit(name, lambda: run(*args), deadline_ms, told)
        t0 = self._now()
        self._running = True
        try:
            return run(*args)
        finally:
            self._running = False
            self._ran_at_once(t0)

    def run_if_idle(self, run: Callable[[*Ts], T | None], args: tuple[*Ts]) -> T | None:
        """``run(*args)`` at once if nothing is queued or running (a route's lane, ``controller_apis.py``),
        accounted as an event that waited for nothing, as :meth:`call` accounts one run inline.
        None, because the queue is busy or because ``run`` returned None, means nothing was
        answered or accounted: the caller's general path submits and counts the event."""
        if self._queue or self._running or self._paused or self.closed:
            return None
        t0 = self._now()
        self._running = True
        try:
            r = run(*args)
        finally:
            self._running = False
        if r is not None:
            self._ran_at_once(t0)
        return r

    def _ran_at_once(self, t0: float) -> None:
        """Kafka's EventQueueTimeMs (no time queued) and EventQueueProcessingTimeMs of an event
        run at once, started at ``t0``."""
        self.queue_time.zeros += 1
        ms = (self._now() - t0) * 1000
        h = self.processing_time
        h.counts[bisect_left(h.buckets, ms)] += 1
        h.total += ms
        h.n += 1
        if self._queue:
            self._schedule()

    def expired(self, name: str) -> None:
        """An event whose deadline had passed before it could be queued (or run inline): not
        run, and counted as timed out (EventQueueOperationsTimedOutCount)."""
        self._on_timeout(name)

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        if self._paused:
            return
        budget = 256  # then yield to I/O so sockets keep being served
        while self._queue and budget:
            budget -= 1
            ev = self._queue.popleft()
            fut = ev.future
            assert fut is not None
            if fut.done():
                continue
            start = self._now()
            self._observe_queue((start - ev.enqueued_ms) * 1000)
            if ev.deadline_ms is not None and self.clock.monotonic_ms() >= ev.deadline_ms:
                self._on_timeout(ev.name)
                if ev.on_timeout is not None:
                    ev.on_timeout()
                fut.set_exception(EventTimeoutError(f"{ev.name} timed out in the controller queue"))
                continue
            self._running = True
            try:
                fut.set_result(ev.run())
            except BaseException as e:  # noqa: BLE001 - delivered to the waiter
                fut.set_exception(e)
            finally:
                self._running = False
                self._observe_processing((self._now() - start) * 1000)
        if self._queue and not self._paused:
            self._schedule()

    def close(self) -> None:
        self.closed = True
        while self._queue:
            ev = self._queue.popleft()
            if ev.future is not None and not ev.future.done():
                ev.future.set_exception(EventTimeoutError("the controller is shutting down"))

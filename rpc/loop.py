"""When the event loop learned that a request was there: the controller's queue time.

A Kafka controller reads requests on network threads and hands them to one event-queue thread;
a request waits in that queue, and one whose deadline passes there fails with a timeout rather
than being done late. kraftsim reads and handles requests on one thread: each turn of the event
loop asks the selector which sockets are ready, then runs every one of their callbacks in turn,
so the controller's real queue is the loop itself, and a request's wait is the time from the
selector's answer to its own callback (a lower bound: it may have been readable longer). Under
a storm one turn can take seconds, and the sockets served last in it waited that long.

:class:`StampingSelector` notes the time of each answer; the controller's loop is built on it
(:func:`new_event_loop`), and the server stamps each read with :meth:`ArrivalClock.arrived_ms`.
A loop on any other selector (a test's) gives the time of the read itself, so nothing looks
late there.

It also knows up to when everything that arrived has been read
(:meth:`ArrivalClock.heard_until_ms`): what was readable at one answer has been read once the
next turn starts, so a controller that is behind does not take a broker whose heartbeat sits
unread in its socket for silent. (A connection whose reading is paused, a client pipelining
past its limit, is not watched meanwhile; a broker never is one.)
"""

from __future__ import annotations

import asyncio
import selectors
import time
import weakref

from kraftsim.rpc.clock import Clock, SystemClock


class StampingSelector(selectors.DefaultSelector):
    """The platform's default selector, noting the (monotonic, ms) time of each answer."""

    def __init__(self) -> None:
        super().__init__()
        now = time.monotonic_ns() // 1_000_000
        self.ready_ms = now  # when the last answer came: what it named was readable by then
        self.heard_until_ms = now  # everything that arrived before this has been read

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(timeout)
        now = time.monotonic_ns() // 1_000_000
        # The previous answer's callbacks have all run by now; an empty answer means nothing
        # arrived since the previous one.
        self.heard_until_ms = self.ready_ms if events else now
        self.ready_ms = now
        return events


_SELECTORS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, StampingSelector] = weakref.WeakKeyDictionary()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """An event loop on a :class:`StampingSelector` (for ``asyncio.Runner(loop_factory=...)``)."""
    selector = StampingSelector()
    loop = asyncio.SelectorEventLoop(selector)
    _SELECTORS[loop] = selector
    return loop


def _stamping() -> StampingSelector | None:
    try:
        return _SELECTORS.get(asyncio.get_running_loop())
    except RuntimeError:
        return None


class ArrivalClock:
    """The two times above for one server on one clock. Only a loop on a StampingSelector and a
    SystemClock (the same monotonic time) give the selector's times; otherwise both are the
    clock's now."""

    __slots__ = ("clock", "_selector")

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._selector = _stamping() if isinstance(clock, SystemClock) else None

    def arrived_ms(self) -> int:
        """When the request being read now was readable at the latest."""
        s = self._selector
        return self.clock.monotonic_ms() if s is None else s.ready_ms

    def heard_until_ms(self) -> int:
        """Up to when every request that arrived has been read."""
        s = self._selector
        return self.clock.monotonic_ms() if s is None else s.heard_until_ms

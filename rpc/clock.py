"""Injectable time. Every timer in kraftsim reads a :class:`Clock`, so tests of session
timeouts and idle reaping advance a :class:`ManualClock` instead of sleeping."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic_ms(self) -> int: ...

    def wall_ms(self) -> int: ...

    async def sleep_ms(self, ms: int) -> None: ...


class SystemClock:
    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep_ms(self, ms: int) -> None:
        await asyncio.sleep(max(ms, 0) / 1000)


class ManualClock:
    """Virtual time: sleepers wake only when a test calls :meth:`advance`."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._mono = 0
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def monotonic_ms(self) -> int:
        return self._mono

    def wall_ms(self) -> int:
        return self._now

    async def sleep_ms(self, ms: int) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._mono + max(ms, 0), next(self._seq), fut))
        await fut

    def sleeping_until(self, deadline_ms: int) -> bool:
        """Whether some task sleeps until exactly ``deadline_ms`` (monotonic): a test that is
        about to advance past a timer first waits for the timer to be armed."""
        return any(d == deadline_ms and not fut.done() for d, _, fut in self._sleepers)

    def advance(self, ms: int) -> None:
        """Move time forward and wake every sleeper whose deadline has passed."""
        self._mono += ms
        self._now += ms
        while self._sleepers and self._sleepers[0][0] <= self._mono:
            _, _, fut = heapq.heappop(self._sleepers)
            if not fut.done():
                fut.set_result(None)

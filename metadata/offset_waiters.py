"""Futures waiting for an offset to be reached (flushed by storage, committed by Raft).

A heap ordered by offset, so that advancing wakes exactly the waiters at or below the new
offset, in offset order, in O(k log n) for k woken.
"""

from __future__ import annotations

import asyncio
import heapq


class OffsetWaiters:
    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = 0

    def wait(self, offset: int) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._seq += 1
        heapq.heappush(self._heap, (offset, self._seq, fut))
        return fut

    def advance(self, offset: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= offset:
            fut = heapq.heappop(heap)[2]
            if not fut.done():
                fut.set_result(None)

    def fail(self, exc: BaseException) -> None:
        """Every waiter gets ``exc``: the offset will never be reached."""
        while self._heap:
            fut = heapq.heappop(self._heap)[2]
            if not fut.done():
                fut.set_exception(exc)

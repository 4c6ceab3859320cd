"""Kafka's ``queued.max.request.bytes``: one pool of bytes for every request being read.

A connection that starts receiving a request of S bytes takes S from the pool (Kafka's
SimpleMemoryPool, not strict: any positive balance lets an allocation through, which may then
overdraw); when the pool is exhausted, reading from that connection pauses, and nobody is
disconnected for it. The bytes come back when the request has been handled, and the paused
connections read again. -1 (Kafka's default) is no pool at all.
"""

from __future__ import annotations

from collections.abc import Callable


class MemoryPool:
    __slots__ = ("capacity", "available", "_waiting")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.available = capacity
        self._waiting: list[Callable[[], None]] = []

    @property
    def unbounded(self) -> bool:
        return self.capacity < 0

    def try_allocate(self, size: int) -> bool:
        if self.capacity < 0:
            return True
        if self.available <= 0:
            return False
        self.available -= size
        return True

    def release(self, size: int) -> None:
        if self.capacity < 0 or size <= 0:
            return
        self.available += size
        if self.available > 0 and self._waiting:
            waiting, self._waiting = self._waiting, []
            for wake in waiting:
                wake()

    def wait(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` once memory has been released."""
        self._waiting.append(wake)

    def forget(self, wake: Callable[[], None]) -> None:
        if wake in self._waiting:
            self._waiting.remove(wake)

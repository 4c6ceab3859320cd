"""Virtual time and the order of events: a heap keyed by time, with ties broken by the seeded
random generator, so that events due at the same millisecond happen in an order the seed picks
(and the same seed picks again)."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

# (time, tiebreak, sequence number, label, action): plain tuples, compared in C; the sequence
# number is unique, so the label and action are never compared.
_Entry = tuple[int, float, int, str, Callable[[], None]]


class Scheduler:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.now_ms = 0
        self.steps = 0
        self._heap: list[_Entry] = []
        self._seq = 0

    def at(self, time_ms: int, label: str, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (max(time_ms, self.now_ms), self.rng.random(), self._seq, label, action))

    def after(self, delay_ms: int, label: str, action: Callable[[], None]) -> None:
        self.at(self.now_ms + delay_ms, label, action)

    def pending(self) -> int:
        return len(self._heap)

    def next_time_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def step(self) -> str:
        """Run the next event; its label."""
        time_ms, _, _, label, action = heapq.heappop(self._heap)
        self.now_ms = time_ms
        self.steps += 1
        action()
        return label

"""Heartbeat round trips of the whole fleet, for the status line and the summary.

A fixed ring of the latest samples (as seconds), so memory stays flat however long the fleet
runs; percentiles are computed over the ring when asked (once a second at most).
"""

from __future__ import annotations

from array import array

RING = 1 << 16


class LatencyRecorder:
    __slots__ = ("_ring", "_n", "_mark", "count", "total")

    def __init__(self) -> None:
        self._ring = array("d", bytes(8 * RING))
        self._n = 0
        self._mark = 0
        self.count = 0
        self.total = 0.0

    def add(self, seconds: float) -> None:
        self._ring[self._n & (RING - 1)] = seconds
        self._n += 1
        self.count += 1
        self.total += seconds

    def percentiles_ms(self, *ps: float) -> list[float]:
        """The given percentiles (0-100) of the samples in the ring, in ms; NaN with none."""
        n = min(self._n, RING)
        if not n:
            return [float("nan")] * len(ps)
        data = sorted(self._ring[:n])
        return [data[min(n - 1, int(p / 100 * n))] * 1000 for p in ps]

    def window_ms(self, *ps: float) -> list[float]:
        """Percentiles of the samples since the previous call (at most the ring's), in ms: what
        the status line shows, so each line tells about its own interval."""
        n = min(self._n - self._mark, RING)
        self._mark = self._n
        if not n:
            return [float("nan")] * len(ps)
        end = self._n & (RING - 1)
        ring = self._ring
        data = sorted(ring[end - n:end] if n <= end else ring[end - n:] + ring[:end])
        return [data[min(n - 1, int(p / 100 * n))] * 1000 for p in ps]

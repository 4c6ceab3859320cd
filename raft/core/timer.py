"""Deadlines on the caller's clock. The node never reads a clock: every call passes ``now_ms``,
so a simulator's virtual time and a server's monotonic time drive the same code."""

from __future__ import annotations

NEVER = 1 << 62  # a deadline that never comes (Kafka's timers of Long.MAX_VALUE)


class Timer:
    """Expires ``timeout_ms`` after it was (re)started; a timeout of NEVER never expires."""

    __slots__ = ("deadline_ms",)

    def __init__(self, now_ms: int, timeout_ms: int) -> None:
        self.deadline_ms = NEVER
        self.reset(now_ms, timeout_ms)

    def reset(self, now_ms: int, timeout_ms: int) -> None:
        self.deadline_ms = NEVER if timeout_ms >= NEVER else now_ms + timeout_ms

    def remaining_ms(self, now_ms: int) -> int:
        if self.deadline_ms >= NEVER:
            return NEVER
        return max(0, self.deadline_ms - now_ms)

    def expired(self, now_ms: int) -> bool:
        return now_ms >= self.deadline_ms

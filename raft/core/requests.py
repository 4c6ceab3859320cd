"""One request in flight per peer, with a timeout and a backoff after failures (Kafka's
RequestManager).

A replica never has two requests out to one peer: a follower with two Fetches in flight could
append the same offsets twice. A request that is not answered within the request timeout frees
the peer again; one answered with an error holds it back for the retry backoff. Responses that
are no longer awaited (a later request replaced them, or the node changed state and forgot its
peers) are dropped.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Sequence
from dataclasses import dataclass


class _Phase(enum.Enum):
    AWAITING_RESPONSE = 1
    BACKING_OFF = 2
    READY = 3


@dataclass(slots=True)
class _Connection:
    phase: _Phase = _Phase.READY
    last_send_ms: int = 0
    last_fail_ms: int = 0
    in_flight: int | None = None  # correlation id


class RequestManager:
    def __init__(self, bootstrap: Sequence[int], retry_backoff_ms: int, request_timeout_ms: int,
                 rng: random.Random) -> None:
        self.bootstrap = list(bootstrap)  # the peers an observer may ask for the leader
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.rng = rng
        self._connections: dict[int, _Connection] = {}

    def _backoff_complete(self, c: _Connection, now_ms: int) -> bool:
        return c.phase is _Phase.BACKING_OFF and now_ms >= c.last_fail_ms + self.retry_backoff_ms

    def _timed_out(self, c: _Connection, now_ms: int) -> bool:
        return c.phase is _Phase.AWAITING_RESPONSE and now_ms >= c.last_send_ms + self.request_timeout_ms

    def _in_flight(self, c: _Connection, now_ms: int) -> bool:
        return c.phase is _Phase.AWAITING_RESPONSE and not self._timed_out(c, now_ms)

    def _backing_off(self, c: _Connection, now_ms: int) -> bool:
        return c.phase is _Phase.BACKING_OFF and not self._backoff_complete(c, now_ms)

    def has_any_in_flight(self, now_ms: int) -> bool:
        for peer, c in list(self._connections.items()):
            if self._timed_out(c, now_ms) or self._backoff_complete(c, now_ms):
                del self._connections[peer]
            elif self._in_flight(c, now_ms):
                return True
        return False

    def find_ready_bootstrap(self, now_ms: int) -> int | None:
        """A random ready bootstrap peer, but none while any request is in flight (an observer
        has at most one Fetch out, wherever it went)."""
        if self.has_any_in_flight(now_ms) or not self.bootstrap:
            return None
        start = self.rng.randrange(len(self.bootstrap))
        for i in range(len(self.bootstrap)):
            peer = self.bootstrap[(start + i) % len(self.bootstrap)]
            if self.is_ready(peer, now_ms):
                return peer
        return None

    def backoff_before_bootstrap_ready(self, now_ms: int) -> int:
        wait = self.retry_backoff_ms
        for peer, c in list(self._connections.items()):
            if self._timed_out(c, now_ms) or self._backoff_complete(c, now_ms):
                del self._connections[peer]
            elif self._in_flight(c, now_ms):
                return c.last_send_ms + self.request_timeout_ms - now_ms
            elif self._backing_off(c, now_ms):
                wait = min(wait, c.last_fail_ms + self.retry_backoff_ms - now_ms)
        if any(self.is_ready(p, now_ms) for p in self.bootstrap):
            return 0
        return wait

    def has_timed_out(self, peer: int, now_ms: int) -> bool:
        c = self._connections.get(peer)
        return c is not None and self._timed_out(c, now_ms)

    def is_ready(self, peer: int, now_ms: int) -> bool:
        c = self._connections.get(peer)
        if c is None:
            return True
        if self._backoff_complete(c, now_ms) or self._timed_out(c, now_ms):
            c.phase = _Phase.READY
        if c.phase is _Phase.READY:
            del self._connections[peer]
            return True
        return False

    def is_backing_off(self, peer: int, now_ms: int) -> bool:
        c = self._connections.get(peer)
        return c is not None and self._backing_off(c, now_ms)

    def remaining_request_ms(self, peer: int, now_ms: int) -> int:
        c = self._connections.get(peer)
        if c is None or not self._in_flight(c, now_ms):
            return 0
        return c.last_send_ms + self.request_timeout_ms - now_ms

    def remaining_backoff_ms(self, peer: int, now_ms: int) -> int:
        c = self._connections.get(peer)
        if c is None or not self._backing_off(c, now_ms):
            return 0
        return c.last_fail_ms + self.retry_backoff_ms - now_ms

    def is_response_expected(self, peer: int, correlation_id: int) -> bool:
        c = self._connections.get(peer)
        return c is not None and c.in_flight == correlation_id

    def on_response(self, peer: int, correlation_id: int, success: bool, now_ms: int) -> None:
        if not self.is_response_expected(peer, correlation_id):
            return
        if success:
            del self._connections[peer]
        else:
            c = self._connections[peer]
            c.last_fail_ms = now_ms
            c.phase = _Phase.BACKING_OFF
            c.in_flight = None

    def on_request_sent(self, peer: int, correlation_id: int, now_ms: int) -> None:
        c = self._connections.setdefault(peer, _Connection())
        c.last_send_ms = now_ms
        c.in_flight = correlation_id
        c.phase = _Phase.AWAITING_RESPONSE

    def reset(self, peer: int) -> None:
        self._connections.pop(peer, None)

    def reset_all(self) -> None:
        self._connections.clear()


"""Fetches waiting for data (Kafka's fetch purgatory), without threads or futures.

A Fetch that finds nothing new is parked with the answer it would get now. It is answered again,
freshly, as soon as the leader's log end moves past its fetch offset, or the high watermark
reaches records the fetcher holds beyond the high watermark its first answer gave (it fetched
them before they were committed: now it may apply them); with that first answer when its
MaxWaitMs runs out; and with an error when this node stops leading. The node does all of this
inside its own calls (append, poll, transitions), so a driver only ever sees the answer appear in
the outbox, possibly long after the request went in.

For a fetch below v18 the second rule is kraftsim's: Kafka 3.9's purgatory completes on the log
end alone, so a fetcher holding uncommitted records learns of their commit only with the next
record or at its MaxWaitMs. A leader whose flush completes after its appends (kraftsim's, in the
background) would otherwise keep every observer half a second behind each commit. A Fetch v18
(Kafka 4.1) is answered at any move of the high watermark past the one its first answer gave, as
Kafka 4.1's leader completes its whole purgatory when the high watermark moves.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from kraftsim.raft.core.keys import ReplicaKey
from kraftsim.raft.core.timer import NEVER
from kraftsim.rpc.messages import FetchRequest, FetchResponse


@dataclass(slots=True)
class ParkedFetch:
    request: FetchRequest
    api_version: int
    reply_to: Hashable
    listener: str
    replica: ReplicaKey
    fetch_offset: int
    deadline_ms: int
    first_answer: FetchResponse
    known_high_watermark: int = -1  # the high watermark the first answer gave
    # A Fetch v18 (Kafka 4.1): the fetcher said which high watermark it holds, and Kafka 4.1's
    # leader answers every parked fetch once the high watermark moves.
    on_any_high_watermark: bool = False


class FetchPurgatory:
    def __init__(self) -> None:
        self._parked: list[ParkedFetch] = []

    def __len__(self) -> int:
        return len(self._parked)

    def park(self, fetch: ParkedFetch) -> None:
        self._parked.append(fetch)

    def next_deadline_ms(self) -> int:
        return min((p.deadline_ms for p in self._parked), default=NEVER)

    def take_expired(self, now_ms: int) -> list[ParkedFetch]:
        expired = [p for p in self._parked if p.deadline_ms <= now_ms]
        if expired:
            self._parked = [p for p in self._parked if p.deadline_ms > now_ms]
        return expired

    def take_ready(self, end_offset: int, high_watermark: int | None = None) -> list[ParkedFetch]:
        """Those with something new: the log end has moved past their fetch offset, or the high
        watermark has reached records they hold beyond the one they were told (a v18 fetch: has
        moved at all)."""
        hw = -1 if high_watermark is None else high_watermark

        def ready(p: ParkedFetch) -> bool:
            if p.fetch_offset < end_offset:
                return True
            if p.on_any_high_watermark:
                return hw > p.known_high_watermark
            return p.known_high_watermark < p.fetch_offset <= hw

        ready_now = [p for p in self._parked if ready(p)]
        if ready_now:
            self._parked = [p for p in self._parked if not ready(p)]
        return ready_now

    def take_all(self) -> list[ParkedFetch]:
        parked, self._parked = self._parked, []
        return parked

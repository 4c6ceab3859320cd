"""Fetches waiting for data (Kafka's fetch purgatory), without threads or futures.

A Fetch that finds nothing new is parked with the answer it would get now. It is answered again,
freshly, as soon as the leader's log end moves past its fetch offset; with that first answer when
its MaxWaitMs runs out; and with an error when this node stops leading. The node does all three
inside its own calls (append, poll, transitions), so a driver only ever sees the answer appear in
the outbox, possibly long after the request went in.
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

    def take_ready(self, end_offset: int) -> list[ParkedFetch]:
        """Those the log end has moved past: there is something new for them to read."""
        ready = [p for p in self._parked if p.fetch_offset < end_offset]
        if ready:
            self._parked = [p for p in self._parked if p.fetch_offset >= end_offset]
        return ready

    def take_all(self) -> list[ParkedFetch]:
        parked, self._parked = self._parked, []
        return parked

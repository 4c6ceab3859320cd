"""The one registry of active faults in a process (a controller, a fleet, a scenario's runner).

A fault is added with its spec (``spec.py``), handed to the injector of its kind, which breaks
the thing at the hook in the module that owns it, and taken back by the same injector when it
ends: when its duration has passed, its count is used up, it is removed by id, or all are
cleared. The registry itself is never on a hot path: an injector installs its hook when its
first fault starts and takes it out when its last one ends, so a process with no active fault
runs the code it runs without this package.

Every fault is logged at WARN once when it starts, saying it is injected, and counted by kind
in ``/metrics`` (``kraftsim_faults_injected_total``, and ``kraftsim_fault_actions_total`` for
each time one acted: a request answered with its error, an fsync delayed, a connection cut).
The registry also keeps a timeline of starts and ends, with wall-clock times, which
``kraftsim scenario run`` and ``kraftsim spark report`` draw beside the metadata log.

Randomness (which requests of a fraction, which brokers of a pick) comes from the fault's own
``random.Random``, seeded from the fault's ``seed`` or, without one, from the registry's seed
and the fault's number: the same seed and the same requests give the same decisions.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kraftsim.faults.spec import INSTANT, KINDS, FaultError, FaultSpec, parse

log = logging.getLogger("kraftsim.faults")

TIMELINE_LIMIT = 10_000  # events kept; a long soak drops its oldest


class Injector(Protocol):
    """Breaks one or more kinds of thing: ``start`` installs the fault (or does it, for an
    instant kind), ``stop`` takes it back. ``start`` raises FaultError when this process cannot
    inject it as given (an API it does not serve, a broker it does not run)."""

    kinds: frozenset[str]

    def start(self, fault: Fault) -> None: ...

    def stop(self, fault: Fault) -> None: ...


@dataclass(eq=False)
class Fault:
    id: str
    spec: FaultSpec
    seed: int
    rng: random.Random
    started_wall_ms: int
    started_mono: float
    remaining: int | None  # what is left of the spec's count
    hits: int = 0
    state: str = "active"  # then "expired", "removed", "cleared", "used up", "done" (an instant kind)
    ended_wall_ms: int | None = None
    # What the injector decided when the fault started (the brokers a pick chose, the connections
    # cut): reported with the fault and on the timeline, so a replay can be compared.
    decisions: dict[str, Any] = field(default_factory=dict)
    _timer: asyncio.TimerHandle | None = None

    @property
    def kind(self) -> str:
        return self.spec.kind

    def expires_wall_ms(self) -> int | None:
        d = self.spec.duration_ms
        return None if d is None or self.spec.kind in INSTANT else self.started_wall_ms + d

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"id": self.id, **self.spec.to_json(), "seed": self.seed, "state": self.state,
                               "description": self.spec.describe(), "started_ms": self.started_wall_ms,
                               "expires_ms": self.expires_wall_ms(), "hits": self.hits}
        if self.remaining is not None:
            doc["remaining"] = self.remaining
        if self.ended_wall_ms is not None:
            doc["ended_ms"] = self.ended_wall_ms
        if self.decisions:
            doc["decisions"] = self.decisions
        return doc


class FaultRegistry:
    """The active faults of one process, and the injectors that carry them out."""

    def __init__(self, process: str, seed: int | None = None) -> None:
        self.process = process  # "controller", "fleet": in messages and /healthz
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        self.injectors: dict[str, Injector] = {}
        self.faults: dict[str, Fault] = {}
        self.injected: dict[str, int] = {}
        self.actions: dict[str, int] = {}
        self.timeline: deque[dict[str, Any]] = deque(maxlen=TIMELINE_LIMIT)
        self._number = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # hit() also runs on the threads that fsync (disk faults)
        self.listeners: list[Callable[[dict[str, Any]], None]] = []  # told of each timeline event

    def bind(self, injector: Injector) -> None:
        for kind in injector.kinds:
            self.injectors[kind] = injector

    # ---- adding and ending ---------------------------------------------------------------
    def add(self, doc: dict[str, Any] | FaultSpec) -> Fault:
        """Start a fault; FaultError if it is invalid or this process cannot inject it."""
        spec = doc if isinstance(doc, FaultSpec) else parse(doc)
        self._loop = asyncio.get_running_loop()
        injector = self.injectors.get(spec.kind)
        if injector is None:
            served = ", ".join(sorted(self.injectors)) or "none"
            raise FaultError(f"a {self.process} cannot take a {spec.kind} fault ({KINDS[spec.kind][0]}); "
                             f"it takes: {served}")
        number = self._number + 1
        seed = spec.seed if spec.seed is not None else (self.seed * 1_000_003 + number) % 2**31
        fault = Fault(f"f{number}", spec, seed, random.Random(seed), _wall_ms(), time.monotonic(), spec.count)
        injector.start(fault)  # may raise FaultError: then nothing was installed, no number taken
        self._number = number
        self.injected[spec.kind] = self.injected.get(spec.kind, 0) + 1
        log.warning("injected fault %s on this %s: %s (seed %d). This is an injected fault, not a real one.",
                    fault.id, self.process, spec.describe(), seed)
        self._event("start", fault)
        if spec.kind in INSTANT:
            fault.state = "done"
            fault.ended_wall_ms = fault.started_wall_ms
            self._event("end", fault)
            return fault
        self.faults[fault.id] = fault
        if spec.duration_ms is not None:
            fault._timer = self._loop.call_later(spec.duration_ms / 1000, self._end, fault, "expired")
        return fault

    def hit(self, fault: Fault, n: int = 1) -> None:
        """The fault acted (once, or ``n`` times). A counted fault that is used up ends, after
        the act that used it up. Safe from any thread."""
        with self._lock:
            self._hit(fault, n)

    def _hit(self, fault: Fault, n: int) -> None:
        fault.hits += n
        self.actions[fault.kind] = self.actions.get(fault.kind, 0) + n
        if fault.remaining is not None:
            fault.remaining = max(0, fault.remaining - n)
            if fault.remaining == 0 and fault.state == "active":
                fault.state = "ending"
                assert self._loop is not None
                self._loop.call_soon_threadsafe(self._end, fault, "used up")

    def take(self, fault: Fault) -> bool:
        """Whether the fault may act once more (active, its count not used up), counting the
        act if so. Safe from any thread."""
        with self._lock:
            if fault.state != "active":
                return False
            self._hit(fault, 1)
            return True

    def remove(self, fault_id: str) -> Fault | None:
        fault = self.faults.get(fault_id)
        if fault is None:
            return None
        self._end(fault, "removed")
        return fault

    def clear(self) -> list[Fault]:
        ended = list(self.faults.values())
        for fault in ended:
            self._end(fault, "cleared")
        return ended

    def _end(self, fault: Fault, why: str) -> None:
        if self.faults.pop(fault.id, None) is None:
            return
        if fault._timer is not None:
            fault._timer.cancel()
        try:
            self.injectors[fault.kind].stop(fault)
        finally:
            fault.state = why
            fault.ended_wall_ms = _wall_ms()
            log.info("fault %s ended (%s) after acting %d time(s): %s", fault.id, why, fault.hits,
                     fault.spec.describe())
            self._event("end", fault)

    # ---- what is going on ------------------------------------------------------------------
    def active(self) -> list[Fault]:
        return list(self.faults.values())

    def health(self) -> dict[str, Any]:
        """What ``/healthz`` says: how many faults are active, and of which kinds."""
        kinds = sorted({f.kind for f in self.faults.values()})
        return {"active": len(self.faults), "kinds": kinds, "ids": sorted(self.faults, key=lambda i: int(i[1:]))}

    def _event(self, what: str, fault: Fault) -> None:
        ev: dict[str, Any] = {"event": what, "wall_ms": fault.started_wall_ms if what == "start" else fault.ended_wall_ms,
                              "process": self.process, "id": fault.id, "kind": fault.kind,
                              "description": fault.spec.describe(), "spec": fault.spec.to_json(), "seed": fault.seed}
        if what == "end":
            ev["reason"] = fault.state
            ev["hits"] = fault.hits
        if fault.decisions:
            ev["decisions"] = fault.decisions
        self.timeline.append(ev)
        for listener in self.listeners:
            listener(ev)

    def collector(self) -> Collector:
        return _FaultCollector(self)


class _FaultCollector(Collector):
    def __init__(self, registry: FaultRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        r = self.registry
        injected = CounterMetricFamily("kraftsim_faults_injected", "Faults injected (kraftsim.faults), by kind",
                                       labels=["kind"])
        actions = CounterMetricFamily("kraftsim_fault_actions",
                                      "Times an injected fault acted (a request failed, an fsync delayed, ...), by kind",
                                      labels=["kind"])
        active = GaugeMetricFamily("kraftsim_faults_active", "Injected faults active now, by kind", labels=["kind"])
        now: dict[str, int] = {}
        for f in r.faults.values():
            now[f.kind] = now.get(f.kind, 0) + 1
        for kind in KINDS:
            if kind in r.injectors:
                injected.add_metric([kind], r.injected.get(kind, 0))
                actions.add_metric([kind], r.actions.get(kind, 0))
                active.add_metric([kind], now.get(kind, 0))
        yield injected
        yield actions
        yield active


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000

"""One seeded run: start the cluster, let the workload and the nemesis loose for the configured
time with every invariant checked after every step, then heal everything and require the cluster
to converge (one leader, every node committing new records) within the settle time.

The same seed and configuration replay the same run event for event: every random choice comes
from generators seeded by the seed, and the trace digest proves it.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from kraftsim.raft.core.node import RaftNode
from kraftsim.raft.sim.cluster import Cluster, NodeFactory
from kraftsim.raft.sim.config import SimConfig
from kraftsim.raft.sim.faults import Nemesis
from kraftsim.raft.sim.invariants import InvariantChecker
from kraftsim.raft.sim.network import NetworkStats

CONVERGE_RECORDS = 5  # after healing, this many more offsets must commit on every node
LIVELOCK_STEPS = 20_000  # this many events without time moving: a node polling itself in a loop


class SimulationFailure(Exception):
    """A broken invariant, a node that hit an impossible state, or a cluster that never
    converged; with what it takes to replay it."""

    def __init__(self, seed: int, step: int, now_ms: int, reason: str) -> None:
        super().__init__(f"seed {seed}, step {step}, t={now_ms / 1000:.3f}s: {reason}")
        self.seed = seed
        self.step = step
        self.now_ms = now_ms
        self.reason = reason


@dataclass(slots=True)
class SimResult:
    seed: int
    steps: int
    virtual_ms: int
    elections: int
    leaders: dict[int, int]
    max_epoch: int
    appended: int
    committed_records: int
    committed_end: int
    snapshots: int
    snapshots_fetched: int
    truncations: int
    faults: Counter[str]
    voter_changes: Counter[tuple[str, str]]
    committed_changes: list[str]
    invariant_checks: int
    network: NetworkStats
    digest: str
    trace: list[str] = field(default_factory=list)


class Simulation:
    def __init__(self, config: SimConfig, seed: int, *, node_factory: NodeFactory = RaftNode,
                 keep_trace: bool = False) -> None:
        self.config = config
        self.seed = seed
        self.cluster = Cluster(config, seed, node_factory)
        self.checker = InvariantChecker(config.voters)
        self.nemesis = Nemesis(self.cluster, random.Random(f"{seed}:faults"))
        self.keep_trace = keep_trace
        self.trace: list[str] = []
        self._digest = hashlib.blake2b(digest_size=16)
        self.healed_at_ms: int | None = None
        self._last_fingerprint: tuple[tuple[object, ...], ...] = ()
        self.steps_checked = 0
        self._target: int | None = None

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> SimResult:
        """The whole run: faults for ``config.seconds``, then heal, then converge."""
        self.start()
        self.run_until(lambda: False, int(self.config.seconds * 1000), None)
        self.heal()
        self.run_until(self._converged, int(self.config.settle_seconds * 1000),
                       f"no convergence within {self.config.settle_seconds:g}s of healing")
        return self._result()

    def start(self) -> None:
        """Start every node, the workload and (if configured) the nemesis."""
        with self._failures():
            for node_id in self.cluster.nodes:
                self.cluster.start(node_id)
            self._after_step("start")
        self._workload()
        self.nemesis.schedule()

    def run_until(self, done: Callable[[], bool], within_ms: int, failure: str | None) -> None:
        """Run events, checking the invariants after each, until ``done()`` holds, or for
        ``within_ms`` of virtual time: then fail with ``failure`` (None: just stop there)."""
        scheduler = self.cluster.scheduler
        deadline = scheduler.now_ms + within_ms
        same_time = 0
        with self._failures():
            while not done():
                next_time = scheduler.next_time_ms()
                if next_time is None or next_time > deadline:
                    scheduler.now_ms = max(scheduler.now_ms, deadline)
                    if failure is None:
                        return
                    raise AssertionError(f"{failure}: {self._describe()}")
                same_time = same_time + 1 if next_time == scheduler.now_ms else 0
                if same_time > LIVELOCK_STEPS:
                    raise AssertionError(f"livelock: {same_time} events at one instant, the last {self.trace[-1:]}")
                self._after_step(scheduler.step())

    @contextmanager
    def _failures(self) -> Iterator[None]:
        """Anything that goes wrong inside becomes a SimulationFailure naming the seed and step."""
        scheduler = self.cluster.scheduler
        try:
            yield
        except SimulationFailure:
            raise
        except AssertionError as e:  # InvariantViolation is one
            raise SimulationFailure(self.seed, scheduler.steps, scheduler.now_ms, str(e)) from e
        except Exception as e:  # noqa: BLE001 - whatever a node raised is a bug to report with the seed
            raise SimulationFailure(self.seed, scheduler.steps, scheduler.now_ms,
                                    f"{type(e).__name__}: {e}") from e

    def _workload(self) -> None:
        cluster = self.cluster
        config = self.config

        def append() -> None:
            cluster.append()
            i = config.append_interval_ms
            cluster.scheduler.after(cluster.rng.randint(i // 2, i * 3 // 2), "append", append)

        def snapshot() -> None:
            cluster.snapshot()
            i = config.snapshot_interval_ms
            cluster.scheduler.after(cluster.rng.randint(i // 2, i * 3 // 2), "snapshot", snapshot)

        cluster.scheduler.after(config.append_interval_ms, "append", append)
        if config.snapshot_interval_ms > 0:
            cluster.scheduler.after(config.snapshot_interval_ms, "snapshot", snapshot)

        def voter_change() -> None:
            if self.nemesis.active:  # the changes stop with the faults, so the cluster can settle
                cluster.voter_change()
            i = config.voter_change_interval_ms
            cluster.scheduler.after(cluster.rng.randint(i // 2, i * 3 // 2), "voter change", voter_change)

        if config.voter_changes:
            cluster.scheduler.after(config.voter_change_interval_ms, "voter change", voter_change)

    def _after_step(self, label: str) -> None:
        """Check the invariants (unless no node changed in a way they can see) and extend the
        trace, whose digest identifies the run."""
        fingerprint = self.cluster.fingerprint()
        digest = self._digest
        digest.update(f"{self.cluster.now_ms} {label}".encode())
        if fingerprint != self._last_fingerprint:
            self._last_fingerprint = fingerprint
            digest.update(repr(fingerprint).encode())
            self.checker.check(self.cluster.views())
        self.steps_checked += 1
        if self.keep_trace:
            self.trace.append(f"{self.cluster.now_ms} {label} | " + " ".join(
                f"{v.node_id}:{v.role[0]}{v.epoch}/{v.high_watermark}/{v.log.end_offset}" for v in self.cluster.views()))

    def heal(self) -> None:
        """End of the faults: the network heals and loses nothing more, every node comes back."""
        cluster = self.cluster
        self.nemesis.active = False
        cluster.network.heal()
        cluster.network.loss = cluster.network.duplicate = 0.0
        with self._failures():
            for node_id, sn in cluster.nodes.items():
                if sn.raft is None:
                    cluster.start(node_id)
            self._after_step("heal")
        self.healed_at_ms = cluster.now_ms

    def _converged(self) -> bool:
        """Every node up, one leader, and every node's high watermark past what was committed at
        the heal by CONVERGE_RECORDS: the cluster elects and commits again, everywhere."""
        cluster = self.cluster
        if self._target is None:
            self._target = self.checker.committed_end + CONVERGE_RECORDS
        nodes = cluster.nodes.values()
        if any(sn.raft is None for sn in nodes):
            return False
        if sum(1 for sn in nodes if sn.raft is not None and sn.raft.is_leader()) != 1:
            return False
        return all(sn.raft is not None and (sn.raft.high_watermark or 0) >= self._target for sn in nodes)

    def _describe(self) -> str:
        return "; ".join(repr(sn.raft) if sn.raft is not None else f"node {i} down"
                         for i, sn in self.cluster.nodes.items())

    def _result(self) -> SimResult:
        cluster = self.cluster
        raft_stats = [sn.raft.stats for sn in cluster.nodes.values() if sn.raft is not None]
        return SimResult(
            seed=self.seed, steps=cluster.scheduler.steps, virtual_ms=cluster.now_ms,
            elections=len(cluster.stats.leaders), leaders=dict(sorted(self.checker.leaders.items())),
            max_epoch=max((v.epoch for v in cluster.views()), default=0), appended=cluster.stats.appended,
            committed_records=self.checker.committed_records, committed_end=self.checker.committed_end,
            snapshots=cluster.stats.snapshots, snapshots_fetched=sum(s.snapshots_fetched for s in raft_stats),
            truncations=sum(sn.log.truncations for sn in cluster.nodes.values()),
            faults=cluster.stats.faults, voter_changes=cluster.stats.voter_changes,
            committed_changes=cluster.stats.committed_changes, invariant_checks=self.steps_checked, network=cluster.network.stats,
            digest=self._digest.hexdigest(), trace=self.trace)


def simulate(config: SimConfig, seed: int, *, node_factory: NodeFactory = RaftNode,
             keep_trace: bool = False) -> SimResult:
    return Simulation(config, seed, node_factory=node_factory, keep_trace=keep_trace).run()

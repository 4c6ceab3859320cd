"""The nemesis: at random times, one fault from those the configuration allows, which ends by
itself after a random while. Crashes lose unflushed writes; a leader may be killed outright or
shut down gracefully (it resigns and tells the voters); the network may isolate a node, split
the cluster in two, or drop one direction of one link.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

from kraftsim.raft.sim.cluster import Cluster
from kraftsim.raft.sim.network import isolation, split


class Nemesis:
    def __init__(self, cluster: Cluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.config = cluster.config
        self.active = True
        self._cut_ids = itertools.count(1)
        self.kinds: list[tuple[str, Callable[[], None]]] = []
        if self.config.crashes:
            self.kinds += [("crash", self.crash), ("kill-leader", self.kill_leader),
                           ("shutdown-leader", self.shutdown_leader)]
        if self.config.partitions:
            self.kinds += [("isolate", self.isolate), ("split", self.split), ("one-way", self.one_way)]

    def schedule(self) -> None:
        if not self.kinds or not self.config.faults:
            return
        interval = self.config.fault_interval_ms
        self.cluster.scheduler.after(self.rng.randint(interval // 2, interval * 3 // 2), "fault", self.strike)

    def strike(self) -> None:
        if not self.active:
            return
        name, fault = self.rng.choice(self.kinds)
        fault()
        self.schedule()

    def _duration(self) -> int:
        d = self.config.fault_duration_ms
        return self.rng.randint(d // 4, d)

    def _count(self, name: str) -> None:
        self.cluster.stats.faults[name] += 1

    # -- processes ------------------------------------------------------------------------------
    def _up(self) -> list[int]:
        return [i for i, sn in self.cluster.nodes.items() if sn.raft is not None and not sn.stopping]

    def _leader(self) -> int | None:
        leaders = [i for i in self._up() if self.cluster.nodes[i].raft.is_leader()]  # type: ignore[union-attr]
        return self.rng.choice(leaders) if leaders else None

    def _kill(self, node_id: int, name: str) -> None:
        self.cluster.crash(node_id)
        self.cluster.schedule_restart(node_id, self._duration())
        self._count(name)

    def crash(self) -> None:
        up = self._up()
        if up:
            self._kill(self.rng.choice(up), "crash")

    def kill_leader(self) -> None:
        leader = self._leader()
        if leader is not None:
            self._kill(leader, "kill-leader")

    def shutdown_leader(self) -> None:
        leader = self._leader()
        if leader is not None:
            self.cluster.shutdown(leader)
            self._count("shutdown-leader")

    # -- the network --------------------------------------------------------------------------------
    def _cut(self, links: set[tuple[int, int]], name: str) -> None:
        cut_id = next(self._cut_ids)
        network = self.cluster.network
        network.cut(cut_id, links)
        self.cluster.scheduler.after(self._duration(), f"mend {name}", lambda: network.mend(cut_id))
        self._count(name)

    def isolate(self) -> None:
        ids = list(self.cluster.nodes)
        self._cut(isolation(self.rng.choice(ids), ids), "isolate")

    def split(self) -> None:
        ids = list(self.cluster.nodes)
        if len(ids) < 2:
            return
        self.rng.shuffle(ids)
        k = self.rng.randint(1, len(ids) - 1)
        self._cut(split(sorted(ids[:k]), sorted(ids[k:])), "split")

    def one_way(self) -> None:
        ids = list(self.cluster.nodes)
        if len(ids) < 2:
            return
        a, b = self.rng.sample(ids, 2)
        self._cut({(a, b)}, "one-way")

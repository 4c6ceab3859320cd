"""The faults of a simulated fleet (``kraftsim brokers``): brokers that stop heartbeating, flap,
restart as new incarnations, fall behind on the metadata log, or register with features the
cluster does not support; and, on its client listeners (``--listen``), the request and network
faults a controller takes.

The brokers a fault acts on are given (``brokers: [3, 4]``) or picked (``pick: 2``): chosen from
the running brokers, in id order, by the fault's seeded random generator, so the same seed picks
the same brokers from the same fleet. What was picked is in the fault's ``decisions``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kraftsim.faults.network import NetworkFaults
from kraftsim.faults.process import StallFaults
from kraftsim.faults.registry import Fault, FaultRegistry
from kraftsim.faults.requests import RequestFaults, RouteTaps
from kraftsim.faults.spec import FaultError

if TYPE_CHECKING:
    from kraftsim.broker.fleet import Fleet

log = logging.getLogger("kraftsim.faults")


class BrokerFaults:
    kinds = frozenset({"silence", "flap", "restart", "lag", "features"})

    def __init__(self, registry: FaultRegistry, fleet: Fleet) -> None:
        self.registry = registry
        self.fleet = fleet
        self._flaps: dict[str, asyncio.Task[None]] = {}

    def _targets(self, fault: Fault) -> list[int]:
        fleet = self.fleet
        given = fault.spec.get("brokers")
        if given:
            unknown = sorted(set(given) - set(fleet.ids))
            if unknown:
                raise FaultError(f"this fleet runs brokers {fleet.ids[0]}-{fleet.ids[-1]}: no broker "
                                 f"{', '.join(map(str, unknown))}")
            return sorted(set(given))
        running = sorted(b.broker_id for b in fleet.live() if b.broker_id not in fleet.killed)
        pick = fault.spec.get("pick")
        if pick > len(running):
            raise FaultError(f"pick: {pick} brokers asked for, {len(running)} running")
        return sorted(fault.rng.sample(running, pick))

    def start(self, fault: Fault) -> None:
        targets = self._targets(fault)
        fault.decisions["brokers"] = targets
        fleet, kind = self.fleet, fault.kind
        shared = fleet.shared
        assert shared is not None  # the fleet has started
        for bid in targets:
            if kind == "silence":
                shared.silenced.add(bid)
            elif kind == "lag":
                shared.lagging[bid] = shared.applied_offset()
            elif kind == "restart":
                fleet.restart(bid)
            elif kind == "features":
                fleet.restart(bid, fault.spec.get("features"))
        if kind == "flap":
            self._flaps[fault.id] = asyncio.create_task(self._flap(fault, targets), name=f"fault-{fault.id}")
        else:
            self.registry.hit(fault, len(targets))

    async def _flap(self, fault: Fault, targets: list[int]) -> None:
        period = fault.spec.get("period_ms") / 1000
        while True:
            for bid in targets:
                self.fleet.brokers[bid].kill()
            self.registry.hit(fault, len(targets))
            log.info("fault %s: brokers %s go away; back in %g s", fault.id, ",".join(map(str, targets)), period)
            await asyncio.sleep(period)
            for bid in targets:
                self.fleet.restart(bid)
            await asyncio.sleep(period)

    def stop(self, fault: Fault) -> None:
        fleet, kind = self.fleet, fault.kind
        targets = fault.decisions.get("brokers", [])
        task = self._flaps.pop(fault.id, None)
        if task is not None:
            task.cancel()
        shared = fleet.shared
        assert shared is not None
        for bid in targets:
            broker = fleet.brokers.get(bid)
            if kind == "silence":
                shared.silenced.discard(bid)
                if broker is not None:
                    broker.wake()
            elif kind == "lag":
                shared.lagging.pop(bid, None)
            elif broker is not None and (kind == "features" or (kind == "flap" and broker.done.done()
                                                                 and bid not in fleet.killed)):
                fleet.restart(bid)  # back with the fleet's own features; a flapped broker that is down comes back


def fleet_faults(fleet: Fleet) -> FaultRegistry:
    """The fault registry of a fleet (``kraftsim.faults.enable=true``), seeded from ``--seed``."""
    registry = FaultRegistry("fleet", fleet.options.seed)
    registry.bind(BrokerFaults(registry, fleet))
    registry.bind(StallFaults(registry))
    if fleet.listeners is not None:  # --listen: the clients' requests and connections
        taps = RouteTaps()
        network = NetworkFaults(registry, taps)
        for server in fleet.listeners.servers.values():
            taps.attach(server.dispatcher)
            network.attach(server)
        registry.bind(RequestFaults(registry, taps))
        registry.bind(network)
    return registry

"""The faults of a controller process, wired to its parts: requests and connections on its
listener, its event loop, its disk, its leadership and its clock for broker sessions.

Leadership is reached through :class:`QuorumFaults`, the one interface the quorum offers these
faults: resign now, and cut one voter off from the others. :class:`SingleVoter` is that
interface for kraftsim's single-voter quorum, where resigning means winning the next election at
once (a new epoch), and there is no other voter to cut one off from; a quorum of several voters
provides its own implementation, and the ``resign`` and ``voter-partition`` faults act through it
unchanged.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from kraftsim.faults.network import NetworkFaults
from kraftsim.faults.process import DiskFaults, StallFaults
from kraftsim.faults.registry import Fault, FaultRegistry
from kraftsim.faults.requests import RequestFaults, RouteTaps
from kraftsim.faults.spec import FaultError

if TYPE_CHECKING:
    from kraftsim.controller.quorum_controller import QuorumController
    from kraftsim.rpc.dispatch import Dispatcher
    from kraftsim.rpc.server import KafkaServer

log = logging.getLogger("kraftsim.faults")


class QuorumFaults(Protocol):
    def resign(self) -> None:
        """Give up leadership now (FaultError if this node does not lead)."""

    def partition_voter(self, fault_id: str, voter: int, peers: tuple[int, ...], direction: str) -> None:
        """Cut ``voter`` off from ``peers`` (all other voters when empty) in ``direction``
        (``in``: it hears nothing from them, ``out``: they hear nothing from it, ``both``)
        until :meth:`heal_voter` with the same id; FaultError if that cannot be done here."""

    def heal_voter(self, fault_id: str) -> None: ...


class SingleVoter:
    """:class:`QuorumFaults` of a controller that is its quorum's only voter."""

    def __init__(self, controller: QuorumController) -> None:
        self.controller = controller

    def resign(self) -> None:
        c = self.controller
        if not c.resign():
            raise FaultError(f"controller {c.node_id} is not the active controller: nothing to resign")

    def partition_voter(self, fault_id: str, voter: int, peers: tuple[int, ...], direction: str) -> None:
        voters = self.controller.voters
        raise FaultError(f"the quorum has one voter ({', '.join(map(str, voters))}): there is no other voter "
                         f"to cut voter {voter} off from")

    def heal_voter(self, fault_id: str) -> None:
        pass


class LeadershipFaults:
    """``resign``, ``voter-partition`` and ``clock-jump``."""

    kinds = frozenset({"resign", "voter-partition", "clock-jump"})

    def __init__(self, registry: FaultRegistry, controller: QuorumController, quorum: QuorumFaults) -> None:
        self.registry = registry
        self.controller = controller
        self.quorum = quorum

    def start(self, fault: Fault) -> None:
        kind, f = fault.kind, fault.spec.fields
        if kind == "resign":
            epoch = self.controller.epoch
            self.quorum.resign()
            fault.decisions["resigned_epoch"] = epoch
        elif kind == "voter-partition":
            self.quorum.partition_voter(fault.id, f["voter"], tuple(f.get("peers") or ()), f["direction"])
        else:
            c = self.controller
            if not c.active:
                raise FaultError(f"controller {c.node_id} is not the active controller: it keeps no broker sessions")
            fault.decisions["sessions"] = c.managers.cluster.heartbeats.jump(f["by_ms"])
        self.registry.hit(fault)

    def stop(self, fault: Fault) -> None:
        if fault.kind == "voter-partition":
            self.quorum.heal_voter(fault.id)


def controller_faults(controller: QuorumController, dispatcher: Dispatcher, server: KafkaServer,
                      quorum: QuorumFaults | None = None) -> FaultRegistry:
    """The fault registry of a controller process (``kraftsim.faults.enable=true``), its
    injectors bound, counted in the controller's ``/metrics``."""
    registry = FaultRegistry("controller")
    taps = RouteTaps()
    taps.attach(dispatcher)
    network = NetworkFaults(registry, taps)
    network.attach(server)
    for injector in (RequestFaults(registry, taps), network, StallFaults(registry), DiskFaults(registry),
                     LeadershipFaults(registry, controller, quorum or SingleVoter(controller))):
        registry.bind(injector)
    controller.metrics.registry.register(registry.collector())
    return registry

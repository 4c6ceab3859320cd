"""The faults of a controller process, wired to its parts: requests and connections on its
listener, its event loop, its disk, its leadership and its clock for broker sessions.

Leadership is reached through :class:`QuorumFaults`, the one interface the quorum offers these
faults: resign now, and cut one voter off from the others. :class:`ControllerQuorum` is that
interface for a kraftsim controller process: a lone voter that resigns wins the next election
(a new epoch); in a quorum of several, another voter may.
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


class ControllerQuorum:
    """:class:`QuorumFaults` of a controller process: it resigns through the controller, and cuts
    its own links to other voters in its Raft client (raft/cuts.py). A partition is injected on
    the voter it cuts off (its links to the peers) or on a peer (its link to that voter): a
    process can only cut what passes through it."""

    def __init__(self, controller: QuorumController) -> None:
        self.controller = controller

    def resign(self) -> None:
        c = self.controller
        if not c.resign():
            raise FaultError(f"controller {c.node_id} is not the active controller: nothing to resign")

    def partition_voter(self, fault_id: str, voter: int, peers: tuple[int, ...], direction: str) -> None:
        c = self.controller
        me, voters = c.node_id, frozenset(c.voters)
        named = ", ".join(map(str, sorted(voters)))
        if len(voters) == 1:
            raise FaultError(f"the quorum has one voter ({named}): there is no other voter to cut voter {voter} off from")
        strangers = sorted({voter, *peers} - voters)
        if strangers:
            raise FaultError(f"not a voter of the quorum ({named}): {', '.join(map(str, strangers))}")
        hears_nothing, heard_by_none = direction in ("in", "both"), direction in ("out", "both")
        if voter == me:
            links = frozenset(peers or voters) - {me}
            deaf, mute = hears_nothing, heard_by_none
        elif not peers or me in peers:
            links = frozenset({voter})
            deaf, mute = heard_by_none, hears_nothing  # the same cut, seen from the other end
        else:
            raise FaultError(f"voter {me} is neither voter {voter} nor one of its peers: inject the partition "
                             f"on voter {voter} or on a peer")
        raft = c.raft
        if raft is None:
            raise FaultError(f"controller {me} has not started its Raft client")
        raft.network.cuts.cut(fault_id, links, deaf=deaf, mute=mute)
        log.warning("voter %d: links to voter(s) %s cut (%s)", me, ", ".join(map(str, sorted(links))),
                    "both ways" if deaf and mute else ("nothing heard from them" if deaf else "nothing heard by them"))

    def heal_voter(self, fault_id: str) -> None:
        raft = self.controller.raft
        if raft is not None:
            raft.network.cuts.heal(fault_id)


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
                     LeadershipFaults(registry, controller, quorum or ControllerQuorum(controller))):
        registry.bind(injector)
    controller.metrics.registry.register(registry.collector())
    return registry

"""Broker and controller registrations, and the records that change them.

Replay follows Kafka 3.9's ClusterControlManager (the controller side, which is stricter than the
broker-side ClusterDelta): fence/unfence/change and unregister records must name a registered
broker *and its current epoch*, otherwise the record is a fatal replay error. Fencing does not
clear InControlledShutdown: only a new RegisterBrokerRecord resets it, as in Kafka.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kraftsim.metadata import versions
from kraftsim.metadata.directories import MIGRATING, UNASSIGNED
from kraftsim.metadata.image import interning
from kraftsim.metadata.image.errors import ReplayError, UnwritableMetadataError
from kraftsim.metadata.messages import RegisterBrokerRecord, RegisterControllerRecord
from kraftsim.rpc.message import Message
from kraftsim.rpc.security import SECURITY_PROTOCOL_IDS

FENCE = 1
UNFENCE = -1
NO_CHANGE = 0
IN_CONTROLLED_SHUTDOWN = 1

Endpoint = tuple[str, int, int]
"""(host, port, security protocol id); the listener name is the key of the map holding it."""


def _uuid_order(u: uuid.UUID) -> tuple[int, int]:
    """Java Uuid.compareTo: signed most- then least-significant 64 bits."""
    msb, lsb = u.int >> 64, u.int & 0xFFFFFFFFFFFFFFFF
    return (msb - (1 << 64) if msb >> 63 else msb, lsb - (1 << 64) if lsb >> 63 else lsb)


def sorted_dirs(dirs: list[uuid.UUID] | tuple[uuid.UUID, ...]) -> tuple[uuid.UUID, ...]:
    """Kafka keeps a broker's log dirs sorted, so the order in the record does not matter."""
    return interning.uuids(sorted(dirs, key=_uuid_order))


@dataclass(slots=True, frozen=True)
class BrokerRegistration:
    """One registered broker. ``registration_offset`` is the offset of the RegisterBrokerRecord
    that created this registration: a heartbeat's metadata offset must reach it before the broker
    can be unfenced. It is bookkeeping, not state a snapshot carries, so equality ignores it."""

    id: int
    epoch: int
    incarnation_id: uuid.UUID
    listeners: dict[str, Endpoint]
    supported_features: dict[str, tuple[int, int]]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    is_migrating_zk_broker: bool
    directories: tuple[uuid.UUID, ...]
    # The directories the broker reports cordoned (KIP-1066, 4.3+), as its last heartbeat listed
    # them; None until a heartbeat has said (a broker reports them once caught up).
    cordoned_directories: tuple[uuid.UUID, ...] | None = None
    registration_offset: int = field(default=-1, compare=False)

    @property
    def has_uncordoned_dirs(self) -> bool:
        """Whether placement may put replicas here (BrokerRegistration.hasUncordonedDirs): true
        unless the broker lists directories and has cordoned every one of them."""
        cordoned = self.cordoned_directories
        if not self.directories or cordoned is None:
            return True
        return any(d not in cordoned for d in self.directories)

    @property
    def active(self) -> bool:
        """Usable as a leader: unfenced and not shutting down (ClusterControlManager.isActive).
        The one place this rule is written."""
        return not self.fenced and not self.in_controlled_shutdown

    def to_record(self, mv: int, release: versions.Release) -> tuple[Message, int]:
        rec = RegisterBrokerRecord(broker_id=self.id, incarnation_id=self.incarnation_id,
                                   broker_epoch=self.epoch, rack=self.rack, fenced=self.fenced)
        if self.in_controlled_shutdown:
            if not release.is_in_controlled_shutdown_supported(mv):
                raise UnwritableMetadataError("the inControlledShutdown state of one or more brokers")
            rec.in_controlled_shutdown = True
        if self.is_migrating_zk_broker:
            if not release.is_migration_supported(mv):
                raise UnwritableMetadataError("the isMigratingZkBroker state of one or more brokers")
            rec.is_migrating_zk_broker = True
        if self.directories:
            if not release.directory_assignment_supported(mv):
                raise UnwritableMetadataError("the online log directories of one or more brokers")
            rec.log_dirs = list(self.directories)
        if self.cordoned_directories is not None:
            if not release.cordoned_log_dirs_supported(mv):
                raise UnwritableMetadataError("the cordoned log directories of one or more brokers")
            rec.cordoned_log_dirs = list(self.cordoned_directories)
        rec.end_points = [RegisterBrokerRecord.BrokerEndpoint(name=n, host=h, port=p, security_protocol=s)
                          for n, (h, p, s) in self.listeners.items()]
        rec.features = [RegisterBrokerRecord.BrokerFeature(name=n, min_supported_version=lo, max_supported_version=hi)
                        for n, (lo, hi) in self.supported_features.items()]
        return rec, release.register_broker_record_version(mv)


@dataclass(slots=True)
class ControllerRegistration:
    id: int
    incarnation_id: uuid.UUID
    zk_migration_ready: bool
    listeners: dict[str, Endpoint]
    supported_features: dict[str, tuple[int, int]]

    def to_record(self, mv: int, release: versions.Release) -> tuple[Message, int]:
        rec = RegisterControllerRecord(
            controller_id=self.id, incarnation_id=self.incarnation_id,
            zk_migration_ready=self.zk_migration_ready,
            end_points=[RegisterControllerRecord.ControllerEndpoint(name=n, host=h, port=p, security_protocol=s)
                        for n, (h, p, s) in self.listeners.items()],
            features=[RegisterControllerRecord.ControllerFeature(name=n, min_supported_version=lo, max_supported_version=hi)
                      for n, (lo, hi) in self.supported_features.items()])
        return rec, release.register_controller_record_version(mv)


class ClusterImage:
    """Registrations plus O(1) broker counts for the controller metrics, and which broker
    registered each log directory.

    ``fenced_count``/``active_count`` follow Kafka's FencedBrokerCount/ActiveBrokerCount:
    "active" there means merely unfenced (a broker in controlled shutdown still counts).
    ``directory_owners`` is Kafka's directoryToBroker: a registration asks who owns each of its
    directories, and answering that by scanning every broker made a fleet's registrations
    quadratic (20,000 brokers registering scanned 200 million directories).
    """

    __slots__ = ("brokers", "controllers", "fenced_count", "migrating_zk_count", "directory_owners")

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerRegistration] = {}
        self.controllers: dict[int, ControllerRegistration] = {}
        self.fenced_count = 0
        self.migrating_zk_count = 0
        self.directory_owners: dict[uuid.UUID, int] = {}

    @property
    def active_count(self) -> int:
        return len(self.brokers) - self.fenced_count

    def default_dir(self, broker_id: int) -> uuid.UUID:
        """The directory a replica newly placed on the broker gets (ClusterControlManager.defaultDir):
        its only directory; MIGRATING if it registered none; UNASSIGNED if it has several (it
        picks one and says so with AssignReplicasToDirs) or is not registered. Whether the
        metadata.version writes directories at all is the writer's decision."""
        reg = self.brokers.get(broker_id)
        if reg is None:
            return UNASSIGNED
        dirs = reg.directories
        if not dirs:
            return MIGRATING
        return dirs[0] if len(dirs) == 1 else UNASSIGNED

    def registration_offset(self, broker_id: int) -> int | None:
        b = self.brokers.get(broker_id)
        return None if b is None else b.registration_offset

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClusterImage):
            return NotImplemented
        return self.brokers == other.brokers and self.controllers == other.controllers

    def __repr__(self) -> str:
        return f"ClusterImage(brokers={self.brokers}, controllers={self.controllers})"

    def records(self, mv: int, release: versions.Release) -> Iterator[tuple[Message, int]]:
        for broker_id in sorted(self.brokers):
            yield self.brokers[broker_id].to_record(mv, release)
        if self.controllers:
            if not release.controller_registration_supported(mv):
                raise UnwritableMetadataError("controller registration data")
            for controller_id in sorted(self.controllers):
                yield self.controllers[controller_id].to_record(mv, release)

    # --- the only mutators (see journal.py): counters kept in step with the maps -------------

    def get_broker(self, broker_id: int) -> BrokerRegistration | None:
        return self.brokers.get(broker_id)

    def swap_broker(self, broker_id: int, reg: BrokerRegistration | None) -> BrokerRegistration | None:
        prev = self.brokers.pop(broker_id, None) if reg is None else self.brokers.get(broker_id)
        owners = self.directory_owners
        if prev is not None:
            self.fenced_count -= prev.fenced
            self.migrating_zk_count -= prev.is_migrating_zk_broker
            if reg is None or prev.directories is not reg.directories:
                for d in prev.directories:
                    if owners.get(d) == broker_id:
                        del owners[d]
        if reg is not None:
            self.brokers[broker_id] = reg
            self.fenced_count += reg.fenced
            self.migrating_zk_count += reg.is_migrating_zk_broker
            if prev is None or prev.directories is not reg.directories:
                for d in reg.directories:
                    owners[d] = broker_id
        return prev

    def get_controller(self, controller_id: int) -> ControllerRegistration | None:
        return self.controllers.get(controller_id)

    def swap_controller(self, controller_id: int,
                        reg: ControllerRegistration | None) -> ControllerRegistration | None:
        prev = self.controllers.pop(controller_id, None) if reg is None else self.controllers.get(controller_id)
        if reg is not None:
            self.controllers[controller_id] = reg
        return prev


def _put_broker(cluster: ClusterImage, broker_id: int, reg: BrokerRegistration | None, undo: list | None) -> None:
    old = cluster.swap_broker(broker_id, reg)
    if undo is not None:
        undo.append((cluster.swap_broker, broker_id, old))


def _listeners(end_points: list, what: str) -> dict[str, Endpoint]:
    out: dict[str, Endpoint] = {}
    for ep in end_points:
        if ep.security_protocol not in SECURITY_PROTOCOL_IDS:
            raise ReplayError(f"Unknown security protocol {ep.security_protocol} in listener {ep.name} of {what}")
        out[ep.name] = (ep.host, ep.port, ep.security_protocol)
    return out


def _features(features: list) -> dict[str, tuple[int, int]]:
    return {f.name: (f.min_supported_version, f.max_supported_version) for f in features}


def replay_register_broker(cluster: ClusterImage, record: Any, offset: int, undo: list | None) -> None:
    """A new incarnation or an amended one: either way the record replaces the registration."""
    reg = BrokerRegistration(
        id=record.broker_id, epoch=record.broker_epoch, incarnation_id=record.incarnation_id,
        listeners=_listeners(record.end_points, f"broker {record.broker_id}"),
        supported_features=_features(record.features), rack=record.rack, fenced=record.fenced,
        in_controlled_shutdown=record.in_controlled_shutdown,
        is_migrating_zk_broker=record.is_migrating_zk_broker,
        directories=sorted_dirs(record.log_dirs),
        cordoned_directories=None if record.cordoned_log_dirs is None else tuple(record.cordoned_log_dirs),
        registration_offset=offset)
    _put_broker(cluster, reg.id, reg, undo)


def _current(cluster: ClusterImage, broker_id: int, epoch: int, record: Any) -> BrokerRegistration:
    reg = cluster.brokers.get(broker_id)
    if reg is None:
        raise ReplayError(f"Unable to replay {record}: no broker registration found for that id")
    if reg.epoch != epoch:
        raise ReplayError(f"Unable to replay {record}: no broker registration with that epoch found")
    return reg


def replay_unregister_broker(cluster: ClusterImage, record: Any, undo: list | None) -> None:
    _current(cluster, record.broker_id, record.broker_epoch, record)
    _put_broker(cluster, record.broker_id, None, undo)


def _change(cluster: ClusterImage, reg: BrokerRegistration, fenced: bool | None,
            in_controlled_shutdown: bool | None, directories: tuple[uuid.UUID, ...] | None,
            undo: list | None, cordoned: tuple[uuid.UUID, ...] | None = None) -> None:
    """A changed copy replaces the registration: registrations are never mutated in place, so
    the journal (and a frozen snapshot view) can keep the old one."""
    new = dataclasses.replace(
        reg, fenced=reg.fenced if fenced is None else fenced,
        in_controlled_shutdown=reg.in_controlled_shutdown if in_controlled_shutdown is None else in_controlled_shutdown,
        directories=reg.directories if directories is None else directories,
        cordoned_directories=reg.cordoned_directories if cordoned is None else cordoned)
    _put_broker(cluster, reg.id, new, undo)


def replay_fence_broker(cluster: ClusterImage, record: Any, undo: list | None) -> None:
    _change(cluster, _current(cluster, record.id, record.epoch, record), True, None, None, undo)


def replay_unfence_broker(cluster: ClusterImage, record: Any, undo: list | None) -> None:
    _change(cluster, _current(cluster, record.id, record.epoch, record), False, None, None, undo)


def replay_broker_registration_change(cluster: ClusterImage, record: Any, undo: list | None) -> None:
    reg = _current(cluster, record.broker_id, record.broker_epoch, record)
    f = record.fenced
    if f == FENCE:
        fenced: bool | None = True
    elif f == UNFENCE:
        fenced = False
    elif f == NO_CHANGE:
        fenced = None
    else:
        raise ReplayError(f"Unable to replay {record}: unknown value for fenced field: {f}")
    c = record.in_controlled_shutdown
    if c == IN_CONTROLLED_SHUTDOWN:
        ics: bool | None = True
    elif c == NO_CHANGE:
        ics = None
    else:
        raise ReplayError(f"Unable to replay {record}: unknown value for inControlledShutdown field: {c}")
    dirs = sorted_dirs(record.log_dirs) if record.log_dirs else None  # empty list = no change
    # CordonedLogDirs (v3): null is no change; an empty list is a change (none cordoned).
    cordoned = None if record.cordoned_log_dirs is None else tuple(record.cordoned_log_dirs)
    _change(cluster, reg, fenced, ics, dirs, undo, cordoned)


def replay_register_controller(cluster: ClusterImage, record: Any, undo: list | None) -> None:
    old = cluster.swap_controller(record.controller_id, ControllerRegistration(
        id=record.controller_id, incarnation_id=record.incarnation_id,
        zk_migration_ready=record.zk_migration_ready,
        listeners=_listeners(record.end_points, f"controller {record.controller_id}"),
        supported_features=_features(record.features)))
    if undo is not None:
        undo.append((cluster.swap_controller, record.controller_id, old))

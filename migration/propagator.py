"""What the KRaft controller tells the ZooKeeper-mode brokers during a migration (Kafka's
MigrationPropagator and the request batch it shares with the ZooKeeper controller), without I/O.

ZooKeeper-mode brokers learn metadata only from controller requests: UpdateMetadata (the brokers
and partition states), LeaderAndIsr (the partitions a broker hosts, and who leads them) and
StopReplica (replicas to drop). Kafka's migration driver sends them twice over: once from the
whole image before dual-write begins, then for every committed delta. This module computes those
requests from an image (:meth:`Propagator.full`) or from what changed since the last call
(:meth:`Propagator.incremental`); ``migration.broker_channels`` sends them.

Rules kept from Kafka 3.9.2, so the brokers see what a Kafka controller would send them:
- The request's ControllerEpoch is the ZooKeeper controller epoch the driver claimed; each
  partition state's ControllerEpoch is the KRaft epoch of the image. isKRaftController is set.
- Versions follow metadata.version (3.4-IV0 and later: LeaderAndIsr 7, UpdateMetadata 8,
  StopReplica 4), as the migration's batch reads the image's metadata.version, not the IBP.
- UpdateMetadata's LiveBrokers lists every registered broker, fenced ones and KRaft brokers
  included (MigrationControllerChannelContext does not filter them); requests go only to
  migrating ZooKeeper-mode brokers that are unfenced (the only ones the channel manager keeps a
  connection to: a request for any other broker is dropped, as Kafka logs "since it is offline").
- A full sync is an UpdateMetadata (type unset) with every partition, then LeaderAndIsr (type
  FULL) to every replica, each LeaderAndIsr partition also going in a second UpdateMetadata
  (type FULL) to every broker. A delta sends brokers new or changed in the cluster everything,
  and for topics what changed: LeaderAndIsr to the replicas of each changed partition,
  StopReplica (delete) to replicas removed or of deleted topics, UpdateMetadata to the others.
- A deleted topic's partitions go in UpdateMetadata with leader -2 (LeaderDuringDelete), leader
  epoch 0 and zkVersion 0, and as "offline replicas" the replicas whose broker is registered
  (Kafka's filter keeps the online ones there); StopReplica's leader epoch is -2 for a topic no
  longer in the image.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from kraftsim.metadata import versions
from kraftsim.metadata.image.cluster import BrokerRegistration
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.image.topics import Partition, Topic
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.message import Message
from kraftsim.rpc.messages import LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest

TYPE_UNKNOWN: Final = 0  # AbstractControlRequest.Type
TYPE_INCREMENTAL: Final = 1
TYPE_FULL: Final = 2
LEADER_DURING_DELETE: Final = -2
EPOCH_DURING_DELETE: Final = -2
NO_EPOCH: Final = -1
NO_TOPIC_ID: Final = uuid.UUID(int=0)

LISR = LeaderAndIsrRequest
UMR = UpdateMetadataRequest
SR = StopReplicaRequest
TP = tuple[str, int]


def request_versions(mv: int) -> tuple[int, int, int]:
    """(LeaderAndIsr, UpdateMetadata, StopReplica) versions for a metadata.version."""
    if mv >= versions.IBP_3_4_IV0:
        return 7, 8, 4
    if mv >= versions.IBP_3_2_IV0:
        return 6, 7, 3
    return 5, 7, 3


@dataclass(frozen=True, slots=True)
class ControlRequest:
    """One request for one broker, in the order it must be sent."""

    broker_id: int
    api_key: int
    version: int
    body: Message


@dataclass
class View:
    """The part of an image the last propagation was computed from: brokers, and each topic's
    name and partitions (Partition objects are replaced, never changed, by replay)."""

    brokers: dict[int, BrokerRegistration] = field(default_factory=dict)
    topics: dict[uuid.UUID, tuple[str, dict[int, Partition]]] = field(default_factory=dict)
    ids_by_name: dict[str, uuid.UUID] = field(default_factory=dict)

    def set_topic(self, topic_id: uuid.UUID, name: str, partitions: dict[int, Partition] | None) -> None:
        if partitions is None:
            old = self.topics.pop(topic_id, None)
            if old is not None and self.ids_by_name.get(old[0]) == topic_id:
                del self.ids_by_name[old[0]]
            return
        self.topics[topic_id] = (name, dict(partitions))
        self.ids_by_name[name] = topic_id


class Snapshot:
    """The parts of an image the propagator reads. ``Snapshot(image)`` copies them, so that a
    worker thread can compute a full sync while the event loop replays more records;
    ``Snapshot.live(image)`` only points at them (a delta, computed on the event loop)."""

    __slots__ = ("brokers", "by_name", "by_id", "metadata_version")

    def __init__(self, image: MetadataImage | None = None) -> None:
        self.brokers: dict[int, BrokerRegistration] = {}
        self.by_name: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self.metadata_version = 0
        if image is not None:
            self.metadata_version = image.metadata_version
            self.brokers = dict(image.cluster.brokers)
            self.by_name = {n: Topic(t.id, t.name, t.key, dict(t.partitions)) for n, t in image.topics.by_name.items()}
            self.by_id = {t.id: t for t in self.by_name.values()}

    @staticmethod
    def live(image: MetadataImage) -> Snapshot:
        snap = Snapshot()
        snap.metadata_version = image.metadata_version
        snap.brokers, snap.by_name, snap.by_id = image.cluster.brokers, image.topics.by_name, image.topics.by_id
        return snap


class _Context:
    """MigrationControllerChannelContext: the image seen as the ZooKeeper controller's context."""

    def __init__(self, image: Snapshot, kraft_epoch: int) -> None:
        self.image = image
        self.kraft_epoch = kraft_epoch
        self.brokers = image.brokers

    def partition(self, tp: TP) -> Partition | None:
        t = self.image.by_name.get(tp[0])
        return None if t is None else t.partitions.get(tp[1])

    def topic_id(self, name: str) -> uuid.UUID | None:
        t = self.image.by_name.get(name)
        return None if t is None else t.id

    def leader_epoch(self, tp: TP) -> int:
        t = self.image.by_name.get(tp[0])
        if t is None:
            return EPOCH_DURING_DELETE
        p = t.partitions.get(tp[1])
        return NO_EPOCH if p is None else p.leader_epoch


class _Batch:
    """AbstractControllerBrokerRequestBatch: requests accumulated, then built per broker."""

    def __init__(self, ctx: _Context, controller_id: int, targets: set[int], listener: str,
                 update_type: int = TYPE_UNKNOWN) -> None:
        self.ctx = ctx
        self.controller_id = controller_id
        self.targets = targets
        self.listener = listener
        self.update_type = update_type
        self.lisr: dict[int, dict[TP, Any]] = {}
        self.stop: dict[int, dict[TP, Any]] = {}
        self.umr_brokers: dict[int, None] = {}
        self.umr_states: dict[TP, Any] = {}

    def add_leader_and_isr(self, brokers: Iterable[int], tp: TP, p: Partition) -> None:
        for b in brokers:
            if b < 0:
                continue
            states = self.lisr.setdefault(b, {})
            states[tp] = LISR.LeaderAndIsrPartitionState(
                topic_name=tp[0], partition_index=tp[1], controller_epoch=self.ctx.kraft_epoch, leader=p.leader,
                leader_epoch=p.leader_epoch, isr=list(p.isr), partition_epoch=p.partition_epoch,
                replicas=list(p.replicas), adding_replicas=list(p.adding_replicas),
                removing_replicas=list(p.removing_replicas), is_new=True,
                leader_recovery_state=p.leader_recovery_state)
        self.add_update_metadata(list(self.ctx.brokers), [tp])

    def add_stop_replica(self, brokers: Iterable[int], tp: TP) -> None:
        epoch = self.ctx.leader_epoch(tp)
        for b in brokers:
            if b >= 0:
                self.stop.setdefault(b, {})[tp] = SR.StopReplicaPartitionState(
                    partition_index=tp[1], leader_epoch=epoch, delete_partition=True)

    def add_update_metadata(self, brokers: Iterable[int], partitions: Iterable[TP] = ()) -> None:
        for b in brokers:
            if b >= 0:
                self.umr_brokers[b] = None
        brokers_img = self.ctx.brokers
        for tp in partitions:
            p = self.ctx.partition(tp)
            if p is None:
                continue  # "Leader not yet assigned": nothing to say about it
            offline = [r for r in p.replicas if r not in brokers_img]
            self.add_update_metadata_state([], self.ctx.kraft_epoch, tp, p.leader, p.leader_epoch,
                                           p.partition_epoch, p.isr, p.replicas, offline)

    def add_update_metadata_state(self, brokers: Iterable[int], controller_epoch: int, tp: TP, leader: int,
                                  leader_epoch: int, partition_epoch: int, isr: Iterable[int],
                                  replicas: Iterable[int], offline: Iterable[int]) -> None:
        for b in brokers:
            if b >= 0:
                self.umr_brokers[b] = None
        self.umr_states[tp] = UMR.UpdateMetadataPartitionState(
            topic_name=tp[0], partition_index=tp[1], controller_epoch=controller_epoch, leader=leader,
            leader_epoch=leader_epoch, isr=list(isr), zk_version=partition_epoch, replicas=list(replicas),
            offline_replicas=list(offline))

    # ---- building ---------------------------------------------------------------------------
    def build(self, zk_controller_epoch: int) -> list[ControlRequest]:
        """LeaderAndIsr, then UpdateMetadata, then StopReplica (sendRequestsToBrokers' order);
        requests for brokers without a channel are left out."""
        lisr_v, umr_v, sr_v = request_versions(self.ctx.image.metadata_version)
        out: list[ControlRequest] = []
        brokers = self.ctx.brokers
        for b, states in self.lisr.items():
            if b not in brokers or b not in self.targets:
                continue
            out.append(ControlRequest(b, ApiKey.LEADER_AND_ISR, lisr_v,
                                      self._leader_and_isr(brokers[b].epoch, states, zk_controller_epoch)))
        if self.umr_brokers:
            live = self._live_brokers(umr_v)
            topic_states = self._umr_topic_states()
            for b in self.umr_brokers:
                if b not in brokers or b not in self.targets:
                    continue
                out.append(ControlRequest(b, ApiKey.UPDATE_METADATA, umr_v, UMR(
                    controller_id=self.controller_id, is_kraft_controller=True, type_=self.update_type,
                    controller_epoch=zk_controller_epoch, broker_epoch=brokers[b].epoch,
                    topic_states=topic_states, live_brokers=live)))
        for b, states in self.stop.items():
            if b not in brokers or b not in self.targets:
                continue
            by_topic: dict[str, list[Any]] = {}
            for (name, _), st in states.items():
                by_topic.setdefault(name, []).append(st)
            out.append(ControlRequest(b, ApiKey.STOP_REPLICA, sr_v, SR(
                controller_id=self.controller_id, is_kraft_controller=True, controller_epoch=zk_controller_epoch,
                broker_epoch=brokers[b].epoch, delete_partitions=False,
                topic_states=[SR.StopReplicaTopicState(topic_name=n, partition_states=s)
                              for n, s in by_topic.items()])))
        return out

    def _leader_and_isr(self, broker_epoch: int, states: dict[TP, Any], zk_epoch: int) -> LeaderAndIsrRequest:
        by_topic: dict[str, list[Any]] = {}
        leader_ids: set[int] = set()
        for (name, _), st in states.items():
            by_topic.setdefault(name, []).append(st)
            leader_ids.add(st.leader)
        leaders = []
        for bid in sorted(leader_ids):
            reg = self.ctx.brokers.get(bid)
            ep = reg.listeners.get(self.listener) if reg is not None else None
            if ep is not None:
                leaders.append(LISR.LeaderAndIsrLiveLeader(broker_id=bid, host_name=ep[0], port=ep[1]))
        return LISR(controller_id=self.controller_id, is_kraft_controller=True, controller_epoch=zk_epoch,
                    broker_epoch=broker_epoch, type_=self.update_type,
                    topic_states=[LISR.LeaderAndIsrTopicState(topic_name=n, topic_id=self.ctx.topic_id(n) or NO_TOPIC_ID,
                                                              partition_states=s) for n, s in by_topic.items()],
                    live_leaders=leaders)

    def _live_brokers(self, version: int) -> list[Any]:
        out = []
        for reg in self.ctx.brokers.values():
            eps = [UMR.UpdateMetadataEndpoint(port=ep[1], host=ep[0], listener=name, security_protocol=ep[2])
                   for name, ep in reg.listeners.items()]
            out.append(UMR.UpdateMetadataBroker(id=reg.id, endpoints=eps, rack=reg.rack))
        return out

    def _umr_topic_states(self) -> list[Any]:
        by_topic: dict[str, list[Any]] = {}
        for (name, _), st in self.umr_states.items():
            by_topic.setdefault(name, []).append(st)
        return [UMR.UpdateMetadataTopicState(topic_name=n, topic_id=self.ctx.topic_id(n) or NO_TOPIC_ID,
                                             partition_states=s) for n, s in by_topic.items()]


def _all_partitions(image: Snapshot) -> list[tuple[TP, Partition]]:
    return [((t.name, pid), t.partitions[pid])
            for t in sorted(image.by_name.values(), key=lambda t: t.name) for pid in sorted(t.partitions)]


def _targets(image: Snapshot) -> set[int]:
    """The brokers Kafka's channel manager has a connection to: migrating and unfenced."""
    return {b.id for b in image.brokers.values() if b.is_migrating_zk_broker and not b.fenced}


class Propagator:
    """Keeps the view the last requests were computed from, so a delta can be computed from it."""

    def __init__(self, controller_id: int, listener: str = "PLAINTEXT") -> None:
        self.controller_id = controller_id
        self.listener = listener
        self.view = View()

    def _batch(self, ctx: _Context, update_type: int = TYPE_UNKNOWN) -> _Batch:
        return _Batch(ctx, self.controller_id, _targets(ctx.image), self.listener, update_type)

    def full(self, source: MetadataImage | Snapshot, kraft_epoch: int, zk_controller_epoch: int) -> list[ControlRequest]:
        """sendRPCsToBrokersFromMetadataImage (from a Snapshot: safe in a worker thread)."""
        image = source if isinstance(source, Snapshot) else Snapshot(source)
        ctx = _Context(image, kraft_epoch)
        zk_brokers = [b.id for b in image.brokers.values() if b.is_migrating_zk_broker]
        partitions = _all_partitions(image)
        first = self._batch(ctx)
        first.add_update_metadata(zk_brokers, [tp for tp, _ in partitions])
        out = first.build(zk_controller_epoch)
        second = self._batch(ctx, TYPE_FULL)
        for tp, p in partitions:
            second.add_leader_and_isr(p.replicas, tp, p)
        out += second.build(zk_controller_epoch)
        self.view = View(dict(image.brokers))
        for t in image.by_id.values():
            self.view.set_topic(t.id, t.name, t.partitions)
        return out

    def incremental(self, source: MetadataImage | Snapshot, kraft_epoch: int, zk_controller_epoch: int,
                    touched_topics: Iterable[str]) -> list[ControlRequest]:
        """sendRPCsToBrokersFromMetadataDelta, the delta being what differs from the view for the
        brokers and for the topics named in ``touched_topics`` (the names of topics whose records
        were committed since the last call). From a Snapshot it is safe in a worker thread."""
        image = source if isinstance(source, Snapshot) else Snapshot.live(source)
        ctx = _Context(image, kraft_epoch)
        prev = self.view
        now_brokers = image.brokers
        changed = [b for b in sorted(set(prev.brokers) | set(now_brokers))
                   if prev.brokers.get(b) != now_brokers.get(b)]
        changed_zk = {b for b in changed if (r := now_brokers.get(b)) is not None
                      and r.is_migrating_zk_broker and not r.fenced}
        zk_brokers = [b.id for b in now_brokers.values() if b.is_migrating_zk_broker]
        old_zk = [b for b in zk_brokers if b not in changed_zk]

        # The topics that changed: those deleted (by id) and the partitions changed or new.
        by_name = image.by_name
        deleted: list[tuple[uuid.UUID, str, dict[int, Partition]]] = []
        changed_parts: list[tuple[uuid.UUID, str, int, Partition, Partition | None]] = []
        for name in sorted(set(touched_topics)):
            old_id = prev.ids_by_name.get(name)
            now = by_name.get(name)
            if old_id is not None and (now is None or now.id != old_id):
                deleted.append((old_id, name, prev.topics[old_id][1]))
            if now is None:
                continue
            old_parts = prev.topics[now.id][1] if now.id in prev.topics else {}
            for pid in sorted(now.partitions):
                p = now.partitions[pid]
                before = old_parts.get(pid)
                if before is not p and before != p:
                    changed_parts.append((now.id, name, pid, p, before))

        out: list[ControlRequest] = []
        first = self._batch(ctx)
        if changed_zk:
            first.add_update_metadata(sorted(changed_zk), [tp for tp, _ in _all_partitions(image)])
        if changed:
            first.add_update_metadata(old_zk)
        out += first.build(zk_controller_epoch)

        second = self._batch(ctx, TYPE_INCREMENTAL)
        if changed_zk:
            for tp, p in _all_partitions(image):
                new_brokers = [r for r in p.replicas if r in changed_zk]
                if new_brokers:
                    second.add_leader_and_isr(new_brokers, tp, p)
        if deleted or changed_parts:
            second.add_update_metadata(old_zk)
        for _, name, parts in deleted:
            for pid in sorted(parts):
                p = parts[pid]
                tp = (name, pid)
                online = [r for r in p.replicas if r in now_brokers]
                second.add_stop_replica(p.replicas, tp)
                second.add_update_metadata_state(old_zk, zk_controller_epoch, tp, LEADER_DURING_DELETE, 0, 0,
                                                 p.isr, p.replicas, online)
        for _, name, pid, p, before in changed_parts:
            tp = (name, pid)
            second.add_leader_and_isr(p.replicas, tp, p)
            removed = [r for r in (before.replicas if before is not None else ()) if r not in p.replicas]
            if removed:
                second.add_stop_replica(removed, tp)
        out += second.build(zk_controller_epoch)

        # The view moves on to what was just told.
        prev.brokers = dict(now_brokers)
        for old_id, _, _ in deleted:
            old_name = prev.topics[old_id][0]
            prev.set_topic(old_id, old_name, None)
        for name in set(touched_topics):
            now = by_name.get(name)
            if now is not None:
                prev.set_topic(now.id, now.name, now.partitions)
        return out

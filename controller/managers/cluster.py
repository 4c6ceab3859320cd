"""Broker registration, heartbeats, fencing and controlled shutdown (Kafka 3.9's
``ClusterControlManager`` plus the broker-lifecycle half of ``ReplicationControlManager``).

Contract with the controller core
---------------------------------
Handlers are sans-I/O and never mutate the image. Each returns a :class:`ControllerResult`
whose records the core appends and replays (``image.replay``), replying once they commit.
Request-level failures are raised as :class:`ApiError` (Kafka's ApiExceptions: the API layer
puts ``code``/``message`` in the response); anything else raised (RuntimeError) is a Kafka
"fault": UNKNOWN_SERVER_ERROR to the client and the controller resigns.

The only state handlers change is the soft heartbeat tracker (:mod:`controller.managers.heartbeats`).
Kafka changes it in two places: in the handler, and again when the active controller replays
its own registration records (ClusterControlManager.replay re-registers the broker, which resets
its session and reported metadata offset, and drops it on UnregisterBrokerRecord). Records are
replayed in the same event right after generation, so the handlers here apply *both* effects at
generation time and the tracker ends each event exactly as Kafka's does, without the core having
to call back for every record.

The core must:

1. call :meth:`ClusterControlManager.activate` when this node becomes active (every registered
   broker gets last contact = now) and :meth:`deactivate` when it renounces;
2. after appending a heartbeat's records, call ``result.after_append(last_offset)`` when it is
   not None (:class:`HeartbeatResult`), with the offset of the last record of the result's last
   batch. That is how the controlled-shutdown offset reaches the tracker (Kafka's
   processBatchEndOffset). Kafka also calls it for a result without records (with
   ``next_offset() - 1``), but such a result never carries a first controlled-shutdown offset
   (entering controlled shutdown always moves a leadership), so skipping it changes nothing;
3. schedule :meth:`fence_stale_brokers` at :meth:`next_fence_check_ms`: re-read it after every
   registration, heartbeat and fence run; None means "nobody can expire, cancel". Each run
   fences at most one broker;
4. for a heartbeat that expired in the queue, reply REQUEST_TIMED_OUT, call
   :meth:`timed_out_heartbeat` (refreshes the session, no transition, nothing to append) and
   increment TimedOutBrokerHeartbeatCount.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final, Protocol

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.managers.elr import elr_on, elr_targets
from kraftsim.controller.managers.heartbeats import (
    CONTROLLED_SHUTDOWN,
    FENCED,
    SHUTDOWN_NOW,
    STATE_FENCED,
    UNFENCED,
    BrokerHeartbeatManager,
    BrokerHeartbeatState,
)
from kraftsim.controller.managers.partition_change import Election, ElrTargets, PartitionChangeBuilder
from kraftsim.controller.result import ControllerResult, HeartbeatResult
from kraftsim.controller.routes import Route
from kraftsim.controller.write_path import check_record_count
from kraftsim.metadata import directories, versions
from kraftsim.metadata.authorizer.authorizer import AclOperation
from kraftsim.metadata.image.configs import BROKER, TOPIC
from kraftsim.metadata.image.migration import ZkMigrationState
from kraftsim.metadata.image.topics import NO_LEADER, Partition, Topic
from kraftsim.metadata.messages import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.error_response import error_response
from kraftsim.rpc.messages import BrokerHeartbeatResponse, BrokerRegistrationResponse, UnregisterBrokerResponse
from kraftsim.rpc.security import SECURITY_PROTOCOL_IDS

if TYPE_CHECKING:
    from kraftsim.metadata.image.cluster import BrokerRegistration
    from kraftsim.rpc.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest, UnregisterBrokerRequest

FENCE: Final = 1
UNFENCE: Final = -1
IN_CONTROLLED_SHUTDOWN: Final = 1


UNCLEAN_LEADER_ELECTION_ENABLE: Final = "unclean.leader.election.enable"

# The answers to a heartbeat that changes nothing (ClusterControlManager.steady_heartbeat), by index:
# FENCED_BIT set when the broker stays fenced, CAUGHT_UP added when it has caught up with its
# registration. The heartbeat route's lane frames each once per version (controller_apis.py).
FENCED_BIT: Final = 1
CAUGHT_UP: Final = 2
STEADY_RESPONSES: Final = tuple(BrokerHeartbeatResponse(is_caught_up=k >= CAUGHT_UP, is_fenced=bool(k & FENCED_BIT),
                                                        should_shut_down=False) for k in range(4))


def _not_shut_down(accept: Callable[[int], bool], broker_id: int, replica: int) -> bool:
    """The acceptor of a pass that handles ``broker_id``'s unclean shutdown: never that broker."""
    return replica != broker_id and accept(replica)


class HeartbeatFields(Protocol):
    """What a heartbeat that expired in the queue is judged on (:meth:`ClusterControlManager
    .timed_out_heartbeat`): the request, or, from the heartbeat lane, its fixed fields by name
    (``controller_apis.py``), which decodes no request object."""

    @property
    def broker_id(self) -> int: ...

    @property
    def broker_epoch(self) -> int: ...

    @property
    def current_metadata_offset(self) -> int: ...


class ClusterControlManager:
    """Registrations and the broker lifecycle on the active controller. See the module doc."""

    __slots__ = ("ctx", "heartbeats", "active", "timed_out_heartbeats")

    def __init__(self, ctx: ControllerContext, heartbeats: BrokerHeartbeatManager | None = None) -> None:
        self.ctx = ctx
        self.heartbeats = heartbeats if heartbeats is not None else BrokerHeartbeatManager.from_context(ctx)
        self.active = False
        self.timed_out_heartbeats = 0  # Kafka's TimedOutBrokerHeartbeatCount

    def routes(self) -> list[Route]:
        # A heartbeat still queued after half an interval is answered REQUEST_TIMED_OUT (the
        # broker sends the next one anyway) and refreshes the session (Kafka's
        # processExpiredBrokerHeartbeat).
        half_interval = self.ctx.config.get("broker.heartbeat.interval.ms") // 2
        return [
            Route(Api.BROKER_REGISTRATION, "processBrokerRegistration", self.register_broker,
                  cluster_operation=AclOperation.CLUSTER_ACTION),
            Route(Api.BROKER_HEARTBEAT, "processBrokerHeartbeat", self.heartbeat,
                  timeout_ms=half_interval, on_timeout=self._heartbeat_timed_out,
                  cluster_operation=AclOperation.CLUSTER_ACTION,
                  mutating=False,  # every 2 s per broker: the broker's own lifecycle, not an audit event
                  steady=self.steady_heartbeat, steady_responses=STEADY_RESPONSES,
                  steady_tag=self.steady_heartbeat_tag),
            # ControllerApis.handleUnregisterBroker sets the error code only; ErrorMessage keeps its
            # schema default, "", on success and on failure alike.
            Route(Api.UNREGISTER_BROKER, "unregisterBroker", self.unregister_broker,
                  error=lambda req, v, code, msg: error_response(req, v, code, msg, messages=False),
                  cluster_operation=AclOperation.ALTER),
        ]

    def _heartbeat_timed_out(self, request: HeartbeatFields) -> None:
        self.timed_out_heartbeats += 1
        self.timed_out_heartbeat(request)

    # ----- activation and the replay hook -------------------------------------------------

    def activate(self) -> None:
        """Becoming active: a fresh tracker where every registered broker was just heard from
        (ascending id order, which is the order they will be fenced in if all are dead)."""
        hb = self.heartbeats
        hb.reset()
        brokers = self.ctx.image.cluster.brokers
        for broker_id in sorted(brokers):
            hb.register(broker_id, brokers[broker_id].fenced)
        self.active = True

    def deactivate(self) -> None:
        """Renouncing: the soft state goes away with the leadership."""
        self.heartbeats.reset()
        self.active = False

    def _require_active(self) -> BrokerHeartbeatManager:
        if not self.active:
            raise RuntimeError("ClusterControlManager is not active.")
        return self.heartbeats

    # ----- simple reads -------------------------------------------------------------------

    def zk_registration_allowed(self) -> bool:
        """Migration enabled and the metadata.version can carry ZK brokers."""
        return (bool(self.ctx.config.get("zookeeper.metadata.migration.enable"))
                and self.ctx.release.is_migration_supported(self.ctx.image.metadata_version))

    def inter_broker_listener_name(self) -> str:
        """Kafka's static inter.broker.listener.name, else the listener named after
        security.inter.broker.protocol (PLAINTEXT by default)."""
        raw = self.ctx.config.raw
        name = raw.get("inter.broker.listener.name")
        if name:
            return name.strip()
        return raw.get("security.inter.broker.protocol", "PLAINTEXT").strip().upper()

    def check_broker_epoch(self, broker_id: int, broker_epoch: int) -> None:
        reg = self.ctx.image.cluster.brokers.get(broker_id)
        if reg is None:
            raise ApiError(ErrorCode.STALE_BROKER_EPOCH, f"No broker registration found for broker id {broker_id}")
        if reg.epoch != broker_epoch:
            raise ApiError(ErrorCode.STALE_BROKER_EPOCH,
                           f"Expected broker epoch {reg.epoch}, but got broker epoch {broker_epoch}")

    def unclean_election_enabled(self, topic_name: str) -> bool:
        """unclean.leader.election.enable resolved as Kafka's getTopicConfig does: topic, this
        controller's dynamic config, the cluster default, then the static config."""
        configs = self.ctx.image.configs
        for resource in ((TOPIC, topic_name), (BROKER, str(self.ctx.node_id)), (BROKER, "")):
            value = configs.get(*resource).get(UNCLEAN_LEADER_ELECTION_ENABLE)
            if value is not None:
                return value.strip().lower() == "true"
        return bool(self.ctx.config.get(UNCLEAN_LEADER_ELECTION_ENABLE))

    def leader_acceptor(self, partition: Partition, broker_to_remove: int = NO_LEADER,
                        broker_to_add: int = NO_LEADER) -> Callable[[int], bool]:
        """Kafka's LeaderAcceptor: active (or the broker being unfenced), not the broker being
        removed, and the replica's directory online on that broker."""
        brokers = self.ctx.image.cluster.brokers

        def accept(r: int) -> bool:
            if r == broker_to_remove:
                return False
            reg = brokers.get(r)
            if reg is None:
                return False
            if r != broker_to_add and not reg.active:
                return False
            return directories.is_online(partition.directories[partition.replicas.index(r)], reg.directories)

        return accept

    # ----- shared record generation -------------------------------------------------------

    def generate_leader_and_isr_updates(self, broker_to_remove: int, broker_to_add: int,
                                        partitions: Iterable[tuple[Topic, int, Partition]],
                                        records: list[RecordAndVersion],
                                        unclean_shutdown_broker: int = NO_LEADER) -> None:
        """PartitionChangeRecords for ``partitions`` with ``broker_to_remove`` out of the ISR and
        leadership, and ``broker_to_add`` acceptable as leader even though the registry still
        says fenced. Topics with unclean election enabled elect UNCLEAN. ``unclean_shutdown_broker``
        (4.x, ELR on) leaves the ISR and leadership too, and does not enter the ELR."""
        image = self.ctx.image
        mv = image.metadata_version
        zk = self.zk_registration_allowed()
        unclean_by_topic: dict[str, bool] = {}
        elr_by_topic: dict[str, ElrTargets] = {}
        default_dir = image.cluster.default_dir
        gone = (broker_to_remove, unclean_shutdown_broker)
        shut_down = (unclean_shutdown_broker,) if unclean_shutdown_broker != NO_LEADER else ()
        for topic, pid, p in partitions:
            unclean = unclean_by_topic.get(topic.name)
            if unclean is None:
                unclean = unclean_by_topic[topic.name] = self.unclean_election_enabled(topic.name)
            elr = elr_by_topic.get(topic.name)
            if elr is None:
                elr = elr_by_topic[topic.name] = elr_targets(self.ctx, topic)
            isr = p.isr
            target_isr = isr if gone[0] not in isr and gone[1] not in isr else tuple(b for b in isr if b not in gone)
            accept = self.leader_acceptor(p, broker_to_remove, broker_to_add)
            if shut_down:
                accept = functools.partial(_not_shut_down, accept, unclean_shutdown_broker)
            rec = PartitionChangeBuilder(
                p, topic.id, pid, accept, mv,
                target_isr=target_isr, election=Election.UNCLEAN if unclean else Election.ONLINE,
                zk_migration_enabled=zk, default_dir=default_dir, release=self.ctx.release,
                unclean_shutdown_replicas=shut_down, **elr).build()
            if rec is not None:
                records.append(rec)

    def _fence_records(self, broker_id: int, records: list[RecordAndVersion]) -> None:
        """handleBrokerFenced: out of every ISR, then the fence record."""
        image = self.ctx.image
        reg = image.cluster.brokers.get(broker_id)
        if reg is None:
            raise RuntimeError(f"Can't find broker registration for broker {broker_id}")
        self.generate_leader_and_isr_updates(broker_id, NO_LEADER,
                                             image.topics.partitions_with_isr_member(broker_id), records)
        if self.ctx.release.is_broker_registration_change_record_supported(image.metadata_version):
            records.append((BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch,
                                                           fenced=FENCE),
                            self.ctx.release.broker_registration_change_record_version()))
        else:
            records.append((FenceBrokerRecord(id=broker_id, epoch=reg.epoch), 0))

    def _unfence_records(self, broker_id: int, broker_epoch: int, records: list[RecordAndVersion]) -> None:
        """handleBrokerUnfenced: the unfence record, then leaders for leaderless partitions."""
        image = self.ctx.image
        if self.ctx.release.is_broker_registration_change_record_supported(image.metadata_version):
            records.append((BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                                           fenced=UNFENCE),
                            self.ctx.release.broker_registration_change_record_version()))
        else:
            records.append((UnfenceBrokerRecord(id=broker_id, epoch=broker_epoch), 0))
        self.generate_leader_and_isr_updates(NO_LEADER, broker_id, image.topics.leaderless_partitions(), records)

    def _controlled_shutdown_records(self, broker_id: int, broker_epoch: int,
                                     records: list[RecordAndVersion]) -> None:
        """handleBrokerInControlledShutdown: mark it (once, MV >= 3.3-IV3), then move it out of
        every ISR and leadership."""
        image = self.ctx.image
        reg = image.cluster.brokers.get(broker_id)
        if (self.ctx.release.is_in_controlled_shutdown_supported(image.metadata_version)
                and not (reg is not None and reg.in_controlled_shutdown)):
            records.append((BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                                           in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN),
                            self.ctx.release.broker_registration_change_record_version(in_controlled_shutdown=True)))
        self.generate_leader_and_isr_updates(broker_id, NO_LEADER,
                                             image.topics.partitions_with_isr_member(broker_id), records)

    def broker_shutdown_records(self, broker_id: int, clean: bool, records: list[RecordAndVersion]) -> None:
        """handleBrokerShutdown (4.x): after an unclean shutdown with ELR on, the broker leaves
        the ISR and the ELR of its partitions and enters no ELR; otherwise it is handled as if
        fenced (out of every ISR and leadership)."""
        topics = self.ctx.image.topics
        if elr_on(self.ctx) and not clean:
            self.generate_leader_and_isr_updates(NO_LEADER, NO_LEADER, topics.partitions_with_isr_member(broker_id),
                                                 records, unclean_shutdown_broker=broker_id)
            self.generate_leader_and_isr_updates(NO_LEADER, NO_LEADER, topics.partitions_with_elr_member(broker_id),
                                                 records, unclean_shutdown_broker=broker_id)
        else:
            self.generate_leader_and_isr_updates(broker_id, NO_LEADER, topics.partitions_with_isr_member(broker_id),
                                                 records)

    def has_leaderships(self, broker_id: int) -> bool:
        """Leads at least one partition (a leader is always in its ISR, so scan the broker's ISR
        memberships and stop at the first it leads)."""
        topics = self.ctx.image.topics
        s = topics.isr_index.get(broker_id)
        if not s:
            return False
        by_key = topics.by_key
        for key, pid in s:
            if by_key[key].partitions[pid].leader == broker_id:
                return True
        return False

    # ----- BrokerRegistration (api 62) -----------------------------------------------------

    def register_broker(self, request: BrokerRegistrationRequest, context: RequestContext, *,
                        finalized_features: dict[str, int] | None = None
                        ) -> ControllerResult[BrokerRegistrationResponse]:
        """Validate in Kafka's order (first failure wins) and write one RegisterBrokerRecord
        (under 4.x a new incarnation's shutdown clean-up before it).

        ``finalized_features``: what Kafka captures outside the event (the finalized levels incl.
        metadata.version, plus kraft.version from Raft); default: the image's finalized levels
        with kraft.version 0. ``context``: only its API version is read (4.x detects a clean
        shutdown from v3 on); authorization (CLUSTER_ACTION) is the API layer's job.
        """
        hb = self._require_active()
        ctx = self.ctx
        image = ctx.image
        mv = image.metadata_version
        if request.cluster_id != ctx.cluster_id:
            raise ApiError(ErrorCode.INCONSISTENT_CLUSTER_ID,
                           f"Expected cluster ID {ctx.cluster_id}, but got cluster ID {request.cluster_id}")
        broker_id = request.broker_id
        existing = image.cluster.brokers.get(broker_id)
        prev_incarnation = existing.incarnation_id if existing is not None else None
        if existing is not None and hb.has_valid_session(broker_id) \
                and request.incarnation_id != prev_incarnation:
            raise ApiError(ErrorCode.DUPLICATE_BROKER_REGISTRATION, "Another broker is registered with that broker id.")

        zk_broker = request.is_migrating_zk_broker
        if zk_broker and not self.zk_registration_allowed():
            raise ApiError(ErrorCode.BROKER_ID_NOT_REGISTERED, "Controller does not support registering ZK brokers.")
        if not zk_broker and image.migration.state == ZkMigrationState.PRE_MIGRATION:
            raise ApiError(ErrorCode.BROKER_ID_NOT_REGISTERED,
                           "Controller is in pre-migration mode and cannot register KRaft brokers until "
                           "the metadata migration is complete.")
        if zk_broker:
            listener = self.inter_broker_listener_name()
            if not any(lst.name == listener for lst in request.listeners):
                raise ApiError(ErrorCode.INVALID_REGISTRATION,
                               f"Broker does not have the current inter.broker.listener {listener}")

        dir_assignment = self.ctx.release.directory_assignment_supported(mv)
        if dir_assignment:
            log_dirs = request.log_dirs
            if not log_dirs:
                raise ApiError(ErrorCode.INVALID_REGISTRATION, "No directories specified in request")
            if any(directories.is_reserved(d) for d in log_dirs):
                raise ApiError(ErrorCode.INVALID_REGISTRATION, "Reserved directory ID in request")
            if len(set(log_dirs)) != len(log_dirs):
                raise ApiError(ErrorCode.INVALID_REGISTRATION, "Duplicate directory ID in request")
            owners = image.cluster.directory_owners
            for d in log_dirs:
                owner = owners.get(d)
                if owner is not None and owner != broker_id:
                    raise ApiError(ErrorCode.INVALID_REGISTRATION,
                                   f"Broker {owner} is already registered with directory {d}")

        # ListenerInfo: last listener of a name wins; unknown protocols and unserializable
        # ports are RuntimeExceptions (faults) in Kafka too.
        endpoints: dict[str, RegisterBrokerRecord.BrokerEndpoint] = {}
        for lst in request.listeners:
            if lst.security_protocol not in SECURITY_PROTOCOL_IDS:
                raise RuntimeError(f"Unknown security protocol {lst.security_protocol} in listener {lst.name}")
            if not 0 <= lst.port <= 65535:
                raise RuntimeError(f"Invalid port {lst.port}")
            endpoints[lst.name] = RegisterBrokerRecord.BrokerEndpoint(
                name=lst.name, host=lst.host, port=lst.port, security_protocol=lst.security_protocol)

        if finalized_features is None:
            finalized = image.features.all_levels()
            # Kafka overwrites kraft.version with the Raft client's own (QuorumController
            # .registerBroker): 0 for a static quorum, even after a 3.9 or 4.0 UpdateFeatures
            # wrote a kraft.version FeatureLevelRecord; 1 once 4.1+ upgraded it.
            finalized[versions.KRAFT_VERSION] = self.ctx.kraft_version()
        else:
            finalized = dict(finalized_features)
        unverified = dict(finalized)
        features: list[RegisterBrokerRecord.BrokerFeature] = []
        listed: set[str] = set()
        for f in request.features:
            features.append(self._check_feature(finalized, f.name, f.min_supported_version, f.max_supported_version))
            unverified.pop(f.name, None)
            listed.add(f.name)
        if versions.FEATURE_NAME not in listed:
            lvl = self.ctx.release.minimum
            features.append(self._check_feature(finalized, versions.FEATURE_NAME, lvl, lvl))
            unverified.pop(versions.FEATURE_NAME, None)
        for name, level in unverified.items():
            if level != 0 and name not in listed:
                self._check_feature(finalized, name, 0, 0)

        rec = RegisterBrokerRecord(
            broker_id=broker_id, is_migrating_zk_broker=zk_broker, incarnation_id=request.incarnation_id,
            rack=request.rack, end_points=list(endpoints.values()), features=features)
        if dir_assignment:
            rec.log_dirs = list(request.log_dirs)
        new_incarnation = request.incarnation_id != prev_incarnation
        records: list[RecordAndVersion] = []
        if new_incarnation:
            if not ctx.release.is_3x:
                # 4.x: a new incarnation first cleans up after the previous one (3.9 only does
                # from its unstable 4.0-IV0). Clean when a v3+ request names the stored epoch.
                stored_epoch = existing.epoch if existing is not None else -2
                clean = context.api_version >= 3 and stored_epoch == request.previous_broker_epoch
                self.broker_shutdown_records(broker_id, clean, records)
            # The epoch is the batch's first offset, whatever records precede the registration.
            rec.broker_epoch = ctx.next_offset()
            rec.fenced = True
            rec.in_controlled_shutdown = False
        else:
            assert existing is not None
            rec.fenced = existing.fenced
            rec.in_controlled_shutdown = existing.in_controlled_shutdown
            rec.broker_epoch = existing.epoch
        records.append((rec, self.ctx.release.register_broker_record_version(mv)))
        # Kafka: the handler drops a replaced incarnation's session and registers the broker;
        # replaying the record then removes and registers it again, so after the event the
        # broker always has a fresh session (metadata offset -1, no controlled-shutdown offset).
        hb.remove(broker_id)
        hb.register(broker_id, rec.fenced)
        # 4.x returns the shutdown clean-up and the registration as a non-atomic batch.
        return ControllerResult(records, BrokerRegistrationResponse(error_code=0, broker_epoch=rec.broker_epoch),
                                ctx.release.is_3x)

    @staticmethod
    def _check_feature(finalized: dict[str, int], name: str, lo: int, hi: int) -> RegisterBrokerRecord.BrokerFeature:
        level = finalized.get(name, 1 if name == versions.FEATURE_NAME else 0)
        if not lo <= level <= hi:
            raise ApiError(ErrorCode.UNSUPPORTED_VERSION,
                           f"Unable to register because the broker does not support finalized version "
                           f"{level} of {name}. The broker wants a version between {lo} and {hi}, inclusive.")
        return RegisterBrokerRecord.BrokerFeature(name=name, min_supported_version=lo, max_supported_version=hi)

    # ----- BrokerHeartbeat (api 63): the hot path ------------------------------------------

    def heartbeat(self, request: BrokerHeartbeatRequest, context: RequestContext) -> HeartbeatResult:
        """One heartbeat (Kafka's processBrokerHeartbeat). Records only on a state change.

        The common case (an unfenced broker staying unfenced, or a fenced one staying fenced)
        is :meth:`steady_heartbeat`'s: a few dict lookups, a move_to_end, one response object.
        """
        if not self.active:
            raise RuntimeError("ClusterControlManager is not active.")
        broker_id = request.broker_id
        image = self.ctx.image
        reg = image.cluster.brokers.get(broker_id)
        if reg is None:
            raise ApiError(ErrorCode.STALE_BROKER_EPOCH, f"Receive a heartbeat from broker {broker_id} before registration")
        epoch = request.broker_epoch
        if reg.epoch != epoch:
            raise ApiError(ErrorCode.STALE_BROKER_EPOCH, f"Expected broker epoch {reg.epoch}, but got broker epoch {epoch}")
        hb = self.heartbeats
        st = hb.brokers.get(broker_id)
        if st is None:
            # Registered by a record these handlers did not generate (Kafka's replay would have
            # tracked it): track it now, as that replay would have.
            hb.register(broker_id, reg.fenced)
            st = hb.brokers[broker_id]
        k = self.steady_heartbeat(broker_id, epoch, request.current_metadata_offset, request.want_fence,
                                  request.want_shut_down)
        if k is None:
            return self._heartbeat_transition(request, reg, st)
        if request.offline_log_dirs:
            return self._heartbeat_dirs(request, reg, [], k >= CAUGHT_UP, bool(k & FENCED_BIT), False)
        if request.cordoned_log_dirs is not None:
            result = self._heartbeat_dirs(request, reg, [], k >= CAUGHT_UP, bool(k & FENCED_BIT), False)
            if result.records:  # replaying the change re-registers the broker with the tracker
                self._after_registration_changes(broker_id, result.records)
            return result
        return HeartbeatResult([], BrokerHeartbeatResponse(
            is_caught_up=k >= CAUGHT_UP, is_fenced=bool(k & FENCED_BIT), should_shut_down=False), False)

    def steady_heartbeat(self, broker_id: int, broker_epoch: int, current_metadata_offset: int, want_fence: bool,
                         want_shut_down: bool) -> int | None:
        """A heartbeat that changes no state: FENCED stays FENCED, or UNFENCED stays UNFENCED,
        with no controlled shutdown asked or under way, so no record. The session is touched and
        the index of the answer in STEADY_RESPONSES returned (CAUGHT_UP added when caught up,
        FENCED_BIT set when fenced). None, touching nothing, for anything else: an unknown
        broker or epoch, a broker not tracked yet, a transition. :meth:`heartbeat` runs it for
        the common case; as the route's ``steady``, the lane runs it alone, for a request with
        no tagged fields (so no offline log directories)."""
        if not self.active:
            return None
        reg = self.ctx.image.cluster.brokers.get(broker_id)
        if reg is None or reg.epoch != broker_epoch:
            return None
        hb = self.heartbeats
        st = hb.brokers.get(broker_id)
        if st is None or st.controlled_shutdown_offset >= 0 or want_shut_down:
            return None
        registration_offset = reg.registration_offset
        if st.fenced:
            if not (want_fence or current_metadata_offset < registration_offset):
                return None
            k = FENCED_BIT
        elif want_fence:
            return None
        else:
            hb.unfenced.move_to_end(broker_id)
            k = 0
        st.last_contact_ms = hb.clock.monotonic_ms()
        st.metadata_offset = current_metadata_offset
        return k + CAUGHT_UP if current_metadata_offset >= registration_offset else k

    def steady_heartbeat_tag(self, fixed: tuple[int, int, int, bool, bool], tag: int, frame: bytes,
                             start: int, end: int) -> bool:
        """Whether one tagged field of a heartbeat, its value in ``frame[start:end]``, leaves
        :meth:`steady_heartbeat`'s answer whole, so the lane may take the frame (the route's
        ``steady_tag``): :meth:`heartbeat` would write no record for it and answer alike. An
        empty OfflineLogDirs (tag 0) says nothing; CordonedLogDirs (tag 1, v2) says nothing
        when null or when the metadata.version records no cordoned directories, and changes
        nothing when it lists, as a set, what the registration holds already
        (:meth:`_heartbeat_cordoned`: a registration that has none recorded yet gets a record).
        Everything else, and any value not plainly framed, is the general path's."""
        if tag == 0:
            return end - start == 1 and frame[start] == 1  # a compact array of none
        if tag != 1 or end <= start:
            return False
        n = frame[start] - 1  # compact nullable array of uuids: length + 1, 0 for null
        if n < 0:
            return end == start + 1
        if n >= 0x7F or end != start + 1 + 16 * n:  # a one-byte length and exactly its uuids
            return False
        image = self.ctx.image
        # The registration's set first (the common case, and true under any metadata.version:
        # one that records no cordoned directories ignores the list); the metadata.version only
        # when it differs.
        reg = image.cluster.brokers.get(fixed[0])  # BrokerId, the first fixed field
        now = None if reg is None else reg.cordoned_directories
        if now is not None and (not now if n == 0 else set(now) == {
                uuid.UUID(bytes=bytes(frame[p:p + 16])) for p in range(start + 1, end, 16)}):
            return True
        return not self.ctx.release.cordoned_log_dirs_supported(image.metadata_version)

    def _heartbeat_transition(self, request: BrokerHeartbeatRequest, reg: BrokerRegistration,
                              st: BrokerHeartbeatState) -> HeartbeatResult:
        """Everything but the steady states: the full state table and its records."""
        hb = self.heartbeats
        broker_id = reg.id
        epoch = request.broker_epoch
        offset = request.current_metadata_offset
        reg_offset = reg.registration_offset
        cur, nxt = hb.calculate_next_state(st, request.want_fence, request.want_shut_down, offset, reg_offset,
                                           lambda: self.has_leaderships(broker_id))
        records: list[RecordAndVersion] = []
        if cur != nxt:
            if nxt == FENCED or nxt == SHUTDOWN_NOW:
                self._fence_records(broker_id, records)
            elif nxt == UNFENCED:
                self._unfence_records(broker_id, epoch, records)
            elif nxt == CONTROLLED_SHUTDOWN:
                self._controlled_shutdown_records(broker_id, epoch, records)
        fenced = STATE_FENCED[nxt]
        hb.touch(broker_id, fenced, offset)
        result = self._heartbeat_dirs(request, reg, records, offset >= reg_offset, fenced, nxt == SHUTDOWN_NOW)
        self._after_registration_changes(broker_id, result.records)
        if nxt == CONTROLLED_SHUTDOWN:
            result.after_append = functools.partial(self.note_controlled_shutdown_offset, broker_id)
        return result

    def _heartbeat_dirs(self, request: BrokerHeartbeatRequest, reg: BrokerRegistration,
                        records: list[RecordAndVersion], caught_up: bool,
                        fenced: bool, shut_down: bool) -> HeartbeatResult:
        """handleDirectoriesOffline (MV >= 3.7-IV2), handleDirectoriesCordoned (4.3-IV0+), then
        the reply."""
        offline = request.offline_log_dirs
        image = self.ctx.image
        if offline and self.ctx.release.directory_assignment_supported(image.metadata_version):
            newly_offline = [d for d in reg.directories if d in offline]
            if newly_offline:
                broker_id = reg.id
                for d in newly_offline:
                    # Kafka walks its directory->partitions index; only partitions where the
                    # broker is in the ISR can change when it is removed, so walk those.
                    affected = [(t, pid, p) for t, pid, p in image.topics.partitions_with_isr_member(broker_id)
                                if p.directories[p.replicas.index(broker_id)] == d]
                    self.generate_leader_and_isr_updates(broker_id, NO_LEADER, affected, records)
                remaining = [d for d in reg.directories if d not in offline]
                records.append((BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch,
                                                               log_dirs=remaining),
                                self.ctx.release.broker_registration_change_record_version(log_dirs=True)))
        self._heartbeat_cordoned(request, reg, records)
        return HeartbeatResult(records, BrokerHeartbeatResponse(
            is_caught_up=caught_up, is_fenced=fenced, should_shut_down=shut_down), False)

    def _heartbeat_cordoned(self, request: BrokerHeartbeatRequest, reg: BrokerRegistration,
                            records: list[RecordAndVersion]) -> None:
        """A BrokerRegistrationChangeRecord v3 when the heartbeat's CordonedLogDirs (v2) differ,
        as a set, from the registration's; recorded even when empty if the registration has
        none yet. A null list (a broker not caught up yet) says nothing."""
        cordoned = request.cordoned_log_dirs
        if cordoned is None or not self.ctx.release.cordoned_log_dirs_supported(self.ctx.image.metadata_version):
            return
        now = reg.cordoned_directories
        if now is None or set(now) != set(cordoned):
            records.append((BrokerRegistrationChangeRecord(broker_id=reg.id, broker_epoch=request.broker_epoch,
                                                           cordoned_log_dirs=list(cordoned)), 3))

    def _after_registration_changes(self, broker_id: int, records: list[RecordAndVersion]) -> None:
        """What replaying our own fence/unfence/registration-change records does to the tracker:
        re-register the broker with its post-record fencing state. Kafka quirk kept on purpose:
        that resets its reported metadata offset to -1 (so a just-unfenced broker holds the lowest
        active offset at -1 until its next heartbeat) and clears a controlled-shutdown offset of
        a fenced broker."""
        fenced: bool | None = None
        for rec, _ in records:
            if type(rec) is BrokerRegistrationChangeRecord:
                if rec.fenced == FENCE:
                    fenced = True
                elif rec.fenced == UNFENCE:
                    fenced = False
                elif fenced is None:
                    reg = self.ctx.image.cluster.brokers.get(broker_id)
                    fenced = reg.fenced if reg is not None else True
            elif type(rec) is FenceBrokerRecord:
                fenced = True
            elif type(rec) is UnfenceBrokerRecord:
                fenced = False
        if fenced is not None:
            self.heartbeats.register(broker_id, fenced)

    def note_controlled_shutdown_offset(self, broker_id: int, offset: int) -> None:
        """The end offset of a heartbeat batch that left the broker in controlled shutdown
        (normally reached through ``HeartbeatResult.after_append``). First one sticks."""
        if self.active:
            self.heartbeats.maybe_update_controlled_shutdown_offset(broker_id, offset)

    def timed_out_heartbeat(self, request: HeartbeatFields | int) -> bool:
        """A heartbeat whose queue deadline passed (processExpiredBrokerHeartbeat): refresh the
        session with the registry's fencing state and the reported offset; no transition, no
        records. Returns False (and does nothing) for a stale epoch or an untracked broker,
        where Kafka's callback throws into a future nobody reads.

        Pass the request (Kafka checks its epoch and records its CurrentMetadataOffset). A bare
        broker id is accepted too: then the epoch is not checked and the tracker keeps the
        broker's previously reported offset.
        """
        if not self.active:
            return False
        hb = self.heartbeats
        if isinstance(request, int):
            broker_id, epoch, offset = request, None, None
        else:
            broker_id, epoch, offset = request.broker_id, request.broker_epoch, request.current_metadata_offset
        reg = self.ctx.image.cluster.brokers.get(broker_id)
        st = hb.brokers.get(broker_id)
        if reg is None or st is None or (epoch is not None and reg.epoch != epoch):
            return False
        hb.touch(broker_id, reg.fenced, st.metadata_offset if offset is None else offset)
        return True

    # ----- session expiry ------------------------------------------------------------------

    def next_fence_check_ms(self) -> int | None:
        """When to run :meth:`fence_stale_brokers` next (monotonic ms), None if nobody can expire."""
        if not self.active:
            return None
        return self.heartbeats.next_check_time()

    def fence_stale_brokers(self, heard_until_ms: int | None = None) -> ControllerResult[None] | None:
        """Fence at most one broker whose session expired, the one heard from longest ago
        (maybeFenceOneStaleBroker), judged on what was heard until ``heard_until_ms`` (see
        ``BrokerHeartbeatManager.find_one_stale``). None when nobody is stale; the core
        reschedules either way."""
        hb = self._require_active()
        brokers = self.ctx.image.cluster.brokers
        while True:
            broker_id = hb.find_one_stale(heard_until_ms)
            if broker_id is None:
                return None
            if broker_id in brokers:
                break
            hb.remove(broker_id)  # unregistered by a record we did not generate: nothing to fence
        records: list[RecordAndVersion] = []
        self._fence_records(broker_id, records)
        hb.fence(broker_id)
        hb.register(broker_id, True)  # what replaying the fence record does (clears a CS offset)
        return ControllerResult(records, None, False)

    # ----- UnregisterBroker (api 64) ------------------------------------------------------

    def unregister_broker(self, request: UnregisterBrokerRequest,
                          context: RequestContext) -> ControllerResult[UnregisterBrokerResponse]:
        """ISR removals (and ELR, none below 4.0-IV0), then UnregisterBrokerRecord."""
        broker_id = request.broker_id
        image = self.ctx.image
        reg = image.cluster.brokers.get(broker_id)
        if reg is None:
            raise ApiError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker ID {broker_id} is not currently registered")
        records: list[RecordAndVersion] = []
        self.generate_leader_and_isr_updates(broker_id, NO_LEADER,
                                             image.topics.partitions_with_isr_member(broker_id), records)
        self.generate_leader_and_isr_updates(broker_id, NO_LEADER,
                                             image.topics.partitions_with_elr_member(broker_id), records)
        records.append((UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=reg.epoch), 0))
        # Kafka collects these in a BoundedList: a broker in more ISRs than the cap allows is
        # refused whole (POLICY_VIOLATION) and stays registered.
        check_record_count(len(records))
        if self.active:
            self.heartbeats.remove(broker_id)  # what replaying UnregisterBrokerRecord does
        # Kafka answers success with the schema defaults: ErrorMessage "" (not null).
        return ControllerResult(records, UnregisterBrokerResponse(error_code=0), False)


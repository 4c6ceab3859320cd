"""The controller requests a ZooKeeper-mode broker takes (``kraftsim brokers --zk-mode``):
LeaderAndIsr v0-7, UpdateMetadata v0-8 and StopReplica v0-4, answered as a Kafka 3.9 broker in
ZooKeeper mode answers them (KafkaApis and ReplicaManager), and remembered, so that the fleet's
status shows which controller drives each broker and the partitions it leads.

The checks kept, in Kafka's order: a request carrying a broker epoch older than the broker's
current one (its KRaft registration's when the request comes from a KRaft controller) gets
STALE_BROKER_EPOCH; one whose controller epoch is older than the newest seen gets
STALE_CONTROLLER_EPOCH (for LeaderAndIsr on every partition, as its error response lists them);
then per partition, LeaderAndIsr is refused (STALE_CONTROLLER_EPOCH) for an older leader epoch,
or an equal one from a ZooKeeper controller, and answers UNKNOWN_TOPIC_OR_PARTITION where the
broker is not a replica. A simulated broker has no logs, so nothing fails for storage reasons.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import Dispatcher, RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)

# The three requests a ZooKeeper-mode broker takes from its controller.
ZkControlRequest = LeaderAndIsrRequest | UpdateMetadataRequest | StopReplicaRequest

INITIAL_CONTROLLER_EPOCH: Final = 0  # KafkaController.InitialControllerEpoch
UNKNOWN_BROKER_EPOCH: Final = -1
NO_TOPIC_ID: Final = uuid.UUID(int=0)


@dataclass
class HostedPartition:
    leader: int
    leader_epoch: int
    replicas: list[int]
    topic_id: uuid.UUID


@dataclass
class ZkControlState:
    """What one ZooKeeper-mode broker has been told by controllers."""

    broker_id: int
    controller_id: int = -1
    kraft_controller: bool = False
    controller_epoch: int = INITIAL_CONTROLLER_EPOCH
    partitions: dict[tuple[str, int], HostedPartition] = field(default_factory=dict)
    metadata: dict[tuple[str, int], int] = field(default_factory=dict)  # partition -> leader, from UpdateMetadata
    live_brokers: list[int] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)  # api name -> count answered
    types: dict[str, set[int]] = field(default_factory=dict)  # api name -> the Types seen (FULL = 2)
    versions: dict[str, set[int]] = field(default_factory=dict)  # api name -> the versions seen

    def led(self) -> list[tuple[str, int]]:
        return sorted(tp for tp, p in self.partitions.items() if p.leader == self.broker_id)

    def summary(self) -> dict[str, Any]:
        return {"controllerId": self.controller_id, "kraftController": self.kraft_controller,
                "controllerEpoch": self.controller_epoch, "hosted": len(self.partitions),
                "leads": [f"{t}-{p}" for t, p in self.led()], "requests": dict(self.requests)}

    def _count(self, name: str, version: int, type_: int | None = None) -> None:
        self.requests[name] = self.requests.get(name, 0) + 1
        self.versions.setdefault(name, set()).add(version)
        if type_ is not None:
            self.types.setdefault(name, set()).add(type_)

    # ---- LeaderAndIsr ----------------------------------------------------------------------
    def leader_and_isr(self, req: LeaderAndIsrRequest, version: int, stale_broker_epoch: bool) -> LeaderAndIsrResponse:
        states = list(_lisr_states(req, version))
        topic_ids = {t.topic_name: t.topic_id for t in req.topic_states} if version >= 2 else {}
        if stale_broker_epoch:
            return _lisr_error(req, version, states, ErrorCode.STALE_BROKER_EPOCH)
        if req.controller_epoch < self.controller_epoch:
            return _lisr_error(req, version, states, ErrorCode.STALE_CONTROLLER_EPOCH)
        self._took(req, version >= 7 and req.is_kraft_controller)
        self._count("LeaderAndIsr", version, req.type_ if version >= 5 else None)
        errors: dict[tuple[str, int], int] = {}
        for name, st in states:
            tp = (name, st.partition_index)
            current = self.partitions.get(tp)
            epoch = current.leader_epoch if current is not None else -1
            if st.leader_epoch > epoch or (st.leader_epoch == epoch and self.kraft_controller):
                if self.broker_id in st.replicas:
                    self.partitions[tp] = HostedPartition(st.leader, st.leader_epoch, list(st.replicas),
                                                          topic_ids.get(name, NO_TOPIC_ID))
                    errors[tp] = ErrorCode.NONE
                else:
                    errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                errors[tp] = ErrorCode.STALE_CONTROLLER_EPOCH
        resp = LeaderAndIsrResponse(error_code=ErrorCode.NONE)
        if version < 5:
            resp.partition_errors = [LeaderAndIsrResponse.LeaderAndIsrPartitionError(
                topic_name=t, partition_index=p, error_code=e) for (t, p), e in errors.items()]
        else:
            by_id: dict[uuid.UUID, list[LeaderAndIsrResponse.LeaderAndIsrPartitionError]] = {}
            for (t, p), e in errors.items():
                by_id.setdefault(topic_ids.get(t, NO_TOPIC_ID), []).append(
                    LeaderAndIsrResponse.LeaderAndIsrPartitionError(partition_index=p, error_code=e))
            resp.topics = [LeaderAndIsrResponse.LeaderAndIsrTopicError(topic_id=i, partition_errors=errs)
                           for i, errs in by_id.items()]
        return resp

    def _took(self, req: ZkControlRequest, kraft: bool) -> None:
        self.controller_epoch = req.controller_epoch
        self.controller_id = req.controller_id
        self.kraft_controller = kraft

    # ---- UpdateMetadata --------------------------------------------------------------------
    def update_metadata(self, req: UpdateMetadataRequest, version: int, stale_broker_epoch: bool) -> UpdateMetadataResponse:
        if stale_broker_epoch:
            return UpdateMetadataResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        if req.controller_epoch < self.controller_epoch:  # ControllerMovedException
            return UpdateMetadataResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        self._took(req, version >= 8 and req.is_kraft_controller)
        self._count("UpdateMetadata", version, req.type_ if version >= 8 else None)
        self.live_brokers = sorted(b.id for b in req.live_brokers)
        states = req.ungrouped_partition_states if version < 5 else \
            [st for t in req.topic_states for st in _named(t.partition_states, t.topic_name)]
        for st in states:
            tp = (st.topic_name, st.partition_index)
            if st.leader == -2:  # LeaderDuringDelete: the partition goes from the cache
                self.metadata.pop(tp, None)
            else:
                self.metadata[tp] = st.leader
        return UpdateMetadataResponse(error_code=ErrorCode.NONE)

    # ---- StopReplica -----------------------------------------------------------------------
    def stop_replica(self, req: StopReplicaRequest, version: int, stale_broker_epoch: bool) -> StopReplicaResponse:
        if stale_broker_epoch:
            return StopReplicaResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
        if req.controller_epoch < self.controller_epoch:
            return StopReplicaResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
        self._took(req, version >= 4 and req.is_kraft_controller)
        self._count("StopReplica", version)
        errors = []
        for name, pid, leader_epoch, delete in _stop_states(req, version):
            tp = (name, pid)
            hosted = self.partitions.get(tp)
            if hosted is not None and leader_epoch not in (-1, -2) and leader_epoch < hosted.leader_epoch:
                code = ErrorCode.FENCED_LEADER_EPOCH
            else:
                code = ErrorCode.NONE
                if delete or hosted is not None:
                    self.partitions.pop(tp, None)
            errors.append(StopReplicaResponse.StopReplicaPartitionError(topic_name=name, partition_index=pid,
                                                                        error_code=code))
        return StopReplicaResponse(error_code=ErrorCode.NONE, partition_errors=errors)


def _named(states: list[UpdateMetadataRequest.UpdateMetadataPartitionState],
           name: str) -> Iterator[UpdateMetadataRequest.UpdateMetadataPartitionState]:
    for st in states:
        st.topic_name = name
        yield st


def _lisr_states(req: LeaderAndIsrRequest,
                 version: int) -> Iterator[tuple[str, LeaderAndIsrRequest.LeaderAndIsrPartitionState]]:
    if version < 2:
        for st in req.ungrouped_partition_states:
            yield st.topic_name, st
    else:
        for t in req.topic_states:
            for st in t.partition_states:
                yield t.topic_name, st


def _lisr_error(req: LeaderAndIsrRequest, version: int,
                states: list[tuple[str, LeaderAndIsrRequest.LeaderAndIsrPartitionState]],
                error: int) -> LeaderAndIsrResponse:
    """LeaderAndIsrRequest.getErrorResponse: the error at the top and on every partition."""
    resp = LeaderAndIsrResponse(error_code=error)
    if version < 5:
        resp.partition_errors = [LeaderAndIsrResponse.LeaderAndIsrPartitionError(
            topic_name=n, partition_index=st.partition_index, error_code=error) for n, st in states]
    else:
        resp.topics = [LeaderAndIsrResponse.LeaderAndIsrTopicError(topic_id=t.topic_id, partition_errors=[
            LeaderAndIsrResponse.LeaderAndIsrPartitionError(partition_index=st.partition_index, error_code=error)
            for st in t.partition_states]) for t in req.topic_states]
    return resp


def _stop_states(req: StopReplicaRequest, version: int) -> Iterator[tuple[str, int, int, bool]]:
    if version == 0:
        for p in req.ungrouped_partitions:
            yield p.topic_name, p.partition_index, -1, req.delete_partitions
    elif version <= 2:
        for t in req.topics:
            for pid in t.partition_indexes:
                yield t.name, pid, -1, req.delete_partitions
    else:
        for ts in req.topic_states:
            for st in ts.partition_states:
                yield ts.topic_name, st.partition_index, st.leader_epoch, st.delete_partition


class ZkControlApis:
    """The three handlers on a listener; ``resolve`` names the broker a request is for (a
    listener shared by the fleet tells them apart by the broker epoch the controller sent)."""

    def __init__(self, states: dict[int, ZkControlState], resolve: Callable[[int], int | None],
                 current_epoch: Callable[[int], int]) -> None:
        self.states = states
        self.resolve = resolve
        self.current_epoch = current_epoch

    def install(self, d: Dispatcher) -> None:
        d.register(Api.LEADER_AND_ISR, self.leader_and_isr)
        d.register(Api.UPDATE_METADATA, self.update_metadata)
        d.register(Api.STOP_REPLICA, self.stop_replica)

    def leader_and_isr(self, ctx: RequestContext, req: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        state, stale = self._addressee(ctx, req)
        return state.leader_and_isr(req, ctx.api_version, stale)

    def update_metadata(self, ctx: RequestContext, req: UpdateMetadataRequest) -> UpdateMetadataResponse:
        state, stale = self._addressee(ctx, req)
        return state.update_metadata(req, ctx.api_version, stale)

    def stop_replica(self, ctx: RequestContext, req: StopReplicaRequest) -> StopReplicaResponse:
        state, stale = self._addressee(ctx, req)
        return state.stop_replica(req, ctx.api_version, stale)

    def _addressee(self, ctx: RequestContext, req: ZkControlRequest) -> tuple[ZkControlState, bool]:
        """The broker a request is for, and whether its broker epoch is stale."""
        request_epoch = req.broker_epoch if ctx.api_version >= _EPOCH_SINCE[ctx.api_key] else UNKNOWN_BROKER_EPOCH
        broker_id = self.resolve(request_epoch)
        if broker_id is None:  # no broker of the fleet has this epoch: one that restarted since
            return ZkControlState(-1), True
        state = self.states.setdefault(broker_id, ZkControlState(broker_id))
        return state, request_epoch != UNKNOWN_BROKER_EPOCH and self.current_epoch(broker_id) > request_epoch


# The first version carrying BrokerEpoch, per api.
_EPOCH_SINCE: Final[dict[int, int]] = {ApiKey.LEADER_AND_ISR: 2, ApiKey.UPDATE_METADATA: 5, ApiKey.STOP_REPLICA: 1}

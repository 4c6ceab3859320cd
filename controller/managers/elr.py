"""What a Kafka 4.x controller tells every PartitionChangeBuilder about eligible leader replicas
(KIP-966): whether ELR is on (eligible.leader.replicas.version >= 1 finalized) and, when it is,
the topic's min ISR (ReplicationControlManager.getTopicEffectiveMinIsr).

The effective min.insync.replicas is resolved as the controller's getTopicConfig does: the
topic's own config, then this controller's dynamic broker config, the cluster default, the
static configuration, and the schema default (1). It is capped at the replication factor of the
topic's partition 0, so a topic with fewer replicas than min.insync.replicas still gets an ELR
only when its ISR falls below its replica count.
"""

from __future__ import annotations

from collections.abc import Iterable

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.managers.partition_change import ElrTargets
from kraftsim.metadata.image.configs import BROKER, TOPIC
from kraftsim.metadata.image.topics import Topic
from kraftsim.metadata.messages import ClearElrRecord, ConfigRecord
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.error_codes import ErrorCode

MIN_ISR = "min.insync.replicas"


def topic_min_isr(ctx: ControllerContext, topic_name: str) -> int:
    """The topic's effective min.insync.replicas (not capped)."""
    configs = ctx.image.configs
    for resource in ((TOPIC, topic_name), (BROKER, str(ctx.node_id)), (BROKER, "")):
        value = configs.get(*resource).get(MIN_ISR)
        if value is not None:
            return int(value)
    return int(ctx.config.get(MIN_ISR))


def elr_targets(ctx: ControllerContext, topic: Topic) -> ElrTargets:
    """The builder keywords for ``topic``: nothing with ELR off (and always under 3.9)."""
    if not elr_on(ctx):
        return {}
    p0 = topic.partitions.get(0)
    rf = len(p0.replicas) if p0 is not None else 0
    return {"eligible_leader_replicas_enabled": True, "min_isr": min(topic_min_isr(ctx, topic.name), rf)}


def elr_on(ctx: ControllerContext) -> bool:
    """FeatureControlManager.isElrFeatureEnabled: never under 3.9 (its ELR is not modelled)."""
    return ctx.image.elr_enabled and not ctx.release.is_3x


def clear_elr_records(ctx: ControllerContext, records: Iterable[RecordAndVersion]) -> list[RecordAndVersion]:
    """createClearElrRecordsAsNeeded: with ELR on, a ClearElrRecord after each min.insync.replicas
    ConfigRecord among ``records`` (a changed min ISR invalidates the ELR built under the old
    one): for that topic, or every topic for a BROKER resource. Set, changed or deleted alike."""
    if not elr_on(ctx):
        return []
    out: list[RecordAndVersion] = []
    for rec, _ in records:
        if isinstance(rec, ConfigRecord) and rec.name == MIN_ISR:
            out.append((ClearElrRecord(topic_name=rec.resource_name if rec.resource_type == TOPIC else ""), 0))
    return out


def disallowed_min_isr_change(ctx: ControllerContext, rec: ConfigRecord) -> ApiError | None:
    """validateAlterConfig with ELR on: a broker-level min.insync.replicas may not be set or
    removed, nor the cluster-level one removed."""
    if rec.name != MIN_ISR or rec.resource_type != BROKER or not elr_on(ctx):
        return None
    if rec.resource_name:
        return ApiError(ErrorCode.INVALID_CONFIG,
                        f"Broker-level {MIN_ISR} cannot be altered while ELR is enabled.")
    if rec.value is None:
        return ApiError(ErrorCode.INVALID_CONFIG,
                        f"Cluster-level {MIN_ISR} cannot be removed while ELR is enabled.")
    return None

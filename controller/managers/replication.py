"""ReplicationControlManager: CreateTopics (api 19), DeleteTopics (api 20) and CreatePartitions
(api 37), as Kafka 3.9 does them.

Handlers read the image and return a :class:`ControllerResult`; the image changes only when the
controller core replays the returned records. Each handler also does the request-shaping work
Kafka's ``ControllerApis`` does before and after calling the controller (duplicate names,
``__cluster_metadata``, authorization results, delete-by-id resolution, shuffling), because in
kraftsim both run inside one write event.

What is deliberately Kafka's, even where it surprises:

* All records of a request go in one atomic batch. More than 10,000 records for one request
  (Kafka's BoundedList cap, ``write_path.check_record_count``) fails the whole request with
  POLICY_VIOLATION "Unable to perform excessively large batch operation.", raised as ApiError so
  the API layer builds the per-topic error response (CreateTopicsRequest.getErrorResponse). It
  applies to validateOnly too: Kafka builds the records and then drops them. Before that, and
  before any other check, Kafka 3.9.1+ refuses more than 10,000 partitions asked for in the
  whole request ("Excessively large number of partitions per request."). Both are arithmetic
  on the request here, so no request is placed only to be refused.
* Topic '.'/'_' collisions are checked against existing topics only, not within the request.
* DeleteTopics results are shuffled (Kafka does it so positions leak nothing).

Topic-config validation and the effective configs a v5+ response carries are in
``configs/topic_config_resolver.py``.
"""

from __future__ import annotations

import logging
import random
import struct
import uuid
from collections.abc import Callable, Container
from typing import TYPE_CHECKING, TypeVar

from kraftsim.controller.configs.topic_config_resolver import TopicConfigResolver
from kraftsim.controller.context import ControllerContext
from kraftsim.controller.java.hash_order import (
    capacity_for,
    hash_map_order,
    hash_order,
    hashmap_capacity,
    order_by_hash,
    string_hash,
)
from kraftsim.controller.managers.elr import MIN_ISR, clear_elr_records, elr_on
from kraftsim.controller.managers.placement import (
    InvalidReplicationFactor,
    StripedReplicaPlacer,
    UsableBroker,
    check_replication_factor,
    usable_brokers,
)
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.controller.topic_authorization import TopicAuthorization
from kraftsim.controller.write_path import EXCESSIVE_BATCH_MESSAGE, MAX_RECORDS_PER_USER_OP, check_record_count
from kraftsim.metadata import topic_names
from kraftsim.metadata.image.configs import TOPIC
from kraftsim.metadata.messages import ConfigRecord, PartitionRecord, RemoveTopicRecord, TopicRecord
from kraftsim.metadata.record_types import RecordType
from kraftsim.metadata.records import FRAME_VERSION, FramedRecord, RecordAndVersion, frame
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.error_response import error_response
from kraftsim.rpc.messages import CreatePartitionsResponse, CreateTopicsResponse, DeleteTopicsResponse
from kraftsim.rpc.uuids import ZERO, random_uuid

if TYPE_CHECKING:
    from kraftsim.metadata.image.cluster import BrokerRegistration
    from kraftsim.metadata.image.image import MetadataImage
    from kraftsim.rpc.messages import CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest

    CreatableTopic = CreateTopicsRequest.CreatableTopic
    CreatePartitionsTopic = CreatePartitionsRequest.CreatePartitionsTopic

log = logging.getLogger("kraftsim.controller.managers.replication")

# ReplicationControlManager.MAX_PARTITIONS_PER_BATCH, the same number as the record cap.
MAX_PARTITIONS_PER_REQUEST = MAX_RECORDS_PER_USER_OP

CreatableTopicResult = CreateTopicsResponse.CreatableTopicResult
DeletableTopicResult = DeleteTopicsResponse.DeletableTopicResult
CreatePartitionsTopicResult = CreatePartitionsResponse.CreatePartitionsTopicResult

RECOVERED = 0

# Errors.X.message() for errors Kafka builds with new ApiError(X) (no explicit message).
MSG_UNKNOWN_TOPIC_OR_PARTITION = "This server does not host this topic-partition."
MSG_UNKNOWN_TOPIC_ID = "This server does not host this topic ID."
MSG_TOPIC_AUTHORIZATION_FAILED = "Topic authorization failed."

NamePredicate = Callable[[str], bool]
PartitionQuota = Callable[[int], None]
Parts = list[tuple[list[int], list[int]]]
"""(replicas, ISR) of each new partition, in partition id order."""
K = TypeVar("K")


class ReplicationControlManager:
    """Topic creation and deletion. ``rng`` drives replica placement and the DeleteTopics
    shuffle; ``new_topic_id`` makes topic ids reproducible in tests; ``shutting_down`` adds the
    heartbeat manager's controlled-shutdown soft state to the image's."""

    def __init__(self, ctx: ControllerContext, rng: random.Random | None = None, *,
                 new_topic_id: Callable[[], uuid.UUID] = random_uuid,
                 shutting_down: Callable[[int], bool] | None = None) -> None:
        self.ctx = ctx
        self.rng = rng if rng is not None else random.Random()
        self.placer = StripedReplicaPlacer(self.rng, ctx.release.knows_cordoned_log_dirs)
        self.new_topic_id = new_topic_id
        self.shutting_down = shutting_down
        self._tails: tuple[TailsContext, Tails] | None = None  # PartitionRecord tails (see _Placement)

    def routes(self) -> list[Route]:
        return [
            Route(Api.CREATE_TOPICS, "createTopics", self.serve_create_topics, timeout_ms=lambda r: r.timeout_ms),
            # Kafka's DeleteTopicsRequest.getErrorResponse carries codes only.
            Route(Api.DELETE_TOPICS, "deleteTopics", self.serve_delete_topics, timeout_ms=lambda r: r.timeout_ms,
                  error=lambda req, v, code, msg: error_response(req, v, code, msg, messages=False)),
            Route(Api.CREATE_PARTITIONS, "createPartitions", self.serve_create_partitions,
                  timeout_ms=lambda r: r.timeout_ms),
        ]

    # The routes ask the authorizer what Kafka's ControllerApis asks (``topic_authorization``)
    # and hand the answers to the handlers below, which shape the refusals.

    def serve_create_topics(self, request: CreateTopicsRequest,
                            context: RequestContext) -> ControllerResult[CreateTopicsResponse]:
        auth = TopicAuthorization(self.ctx.authorizer, context)
        names = (t.name for t in request.topics if t.name != topic_names.CLUSTER_METADATA_TOPIC_NAME)
        return self.create_topics(request, context, creatable=auth.creatable(),
                                  describable=auth.describable_configs(names))

    def serve_delete_topics(self, request: DeleteTopicsRequest,
                            context: RequestContext) -> ControllerResult[DeleteTopicsResponse]:
        deletable, describable = TopicAuthorization(self.ctx.authorizer, context).deletion()
        return self.delete_topics(request, context, deletable=deletable, describable=describable)

    def serve_create_partitions(self, request: CreatePartitionsRequest,
                                context: RequestContext) -> ControllerResult[CreatePartitionsResponse]:
        return self.create_partitions(request, context,
                                      alterable=TopicAuthorization(self.ctx.authorizer, context).alterable())

    # ==== CreateTopics ====================================================================

    def create_topics(self, request: CreateTopicsRequest, context: RequestContext, *,
                      describable: set[str] | None = None,
                      creatable: NamePredicate | None = None,
                      partition_quota: PartitionQuota | None = None) -> ControllerResult[CreateTopicsResponse]:
        """CreateTopics v0-7. ``describable`` (None: all) are the names whose effective configs
        may be returned (DESCRIBE_CONFIGS); ``creatable`` (None: all) is the CREATE check the API
        layer does (cluster or topic); ``partition_quota`` charges the controller mutation quota
        and raises ApiError(THROTTLING_QUOTA_EXCEEDED) when it is exhausted."""
        topics = list(request.topics)
        # --- ControllerApis.createTopics: duplicates, __cluster_metadata, CREATE authorization
        seen: dict[str, None] = dict.fromkeys([t.name for t in topics])
        duplicates: dict[str, None] = {}
        if len(seen) < len(topics):  # some name repeats: walked again, one topic at a time
            seen = {}
            for t in topics:
                if t.name in duplicates:
                    continue
                if t.name in seen:
                    del seen[t.name]
                    duplicates[t.name] = None
                else:
                    seen[t.name] = None
        if not duplicates and creatable is None and topic_names.CLUSTER_METADATA_TOPIC_NAME not in seen:
            # Every topic goes on (the common case, and a large request's): no set of names.
            authorized: Container[str] = seen
            effective = topics
        else:
            allowed = [n for n in seen if n != topic_names.CLUSTER_METADATA_TOPIC_NAME]
            authorized = set(allowed) if creatable is None else {n for n in allowed if creatable(n)}
            effective = [t for t in topics if t.name not in duplicates and t.name in authorized]

        results, records = self._create(effective, bool(request.validate_only),
                                        describable, partition_quota)
        for name in duplicates:
            results.append(CreatableTopicResult(name=name, error_code=ErrorCode.INVALID_REQUEST,
                                                error_message="Duplicate topic name."))
        for name in seen:
            if name == topic_names.CLUSTER_METADATA_TOPIC_NAME:
                results.append(CreatableTopicResult(
                    name=name, error_code=ErrorCode.INVALID_REQUEST,
                    error_message=f"Creation of internal topic {topic_names.CLUSTER_METADATA_TOPIC_NAME} is prohibited."))
            elif name not in authorized:
                results.append(CreatableTopicResult(name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                    error_message="Authorization failed."))
        return ControllerResult(records, CreateTopicsResponse(topics=results), atomic=True)

    def _create(self, topics: list[CreatableTopic], validate_only: bool, describable: set[str] | None,
                partition_quota: PartitionQuota | None
                ) -> tuple[list[CreateTopicsResponse.CreatableTopicResult], list[RecordAndVersion]]:
        """ReplicationControlManager.createTopics on the filtered request."""
        _check_total_partitions(topics, self.ctx.config.get("num.partitions"))
        image = self.ctx.image
        by_name_ = image.topics.by_name
        errors: dict[str, ApiError] = {}
        for t in topics:  # validateNewTopicNames
            reason = topic_names.invalid_reason(t.name)
            if reason is not None:
                errors[t.name] = ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")
            if topic_names.has_collision_chars(t.name):
                colliding = image.topics.colliding.get(topic_names.unify_collision_chars(t.name))
                if colliding:
                    errors[t.name] = ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                                              f"Topic '{t.name}' collides with existing topic: {min(colliding)}")
        for t in topics:
            if t.name in by_name_:
                errors[t.name] = ApiError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
        for t in topics:  # computeConfigChanges: null values first
            if t.name in errors:
                continue
            nulls = [c.name for c in t.configs if c.value is None]
            if nulls:
                errors[t.name] = ApiError(ErrorCode.INVALID_CONFIG,
                                          "Null value not supported for topic configs: " + ",".join(nulls))

        schema = TopicConfigResolver(self.ctx)
        placement = self._placement()
        usable, active = placement.usable, placement.active
        num_unfenced = sum(1 for b in usable if not b.fenced)
        # First every refusal and the record count, then the work: the cap is arithmetic on the
        # request (Kafka's list would overflow at the same total), so a 40-byte request for
        # 2^31-1 partitions, or a 40,000-topic one, is refused before anything is placed.
        planned: list[tuple[CreatableTopic, dict[str, str], int, int, Parts | None]] = []
        total = 0
        with_elr = elr_on(self.ctx)
        for t in topics:
            if t.name in errors:
                continue
            creation = {c.name: c.value for c in t.configs if c.value is not None}  # a None was refused above
            manual: Parts | None = None
            rf = 0
            try:
                schema.validate(t.name, creation)
                if t.assignments:
                    manual = self._manual(t, active)
                    count = len(manual)
                else:
                    count, rf = self._counts(t, len(usable), num_unfenced)
            except ApiError as e:
                errors[t.name] = e
                continue
            if partition_quota is not None:
                try:
                    partition_quota(count)
                except ApiError as e:
                    errors[t.name] = e
                    continue
            total += 1 + len(creation) + count + (1 if with_elr and MIN_ISR in creation else 0)
            planned.append((t, creation, count, rf, manual))
        check_record_count(total)

        records: list[RecordAndVersion] = []
        successes: dict[str, CreateTopicsResponse.CreatableTopicResult] = {}
        for t, creation, count, rf, manual in planned:
            parts = manual if manual is not None else self._place(count, rf, usable, active)
            topic_id = self.new_topic_id()
            result = CreatableTopicResult(name=t.name, topic_id=topic_id, error_code=0, error_message=None)
            if describable is None or t.name in describable:
                result.configs = schema.effective_configs(creation)
                result.num_partitions = len(parts)
                result.replication_factor = len(parts[0][0])
                result.topic_config_error_code = 0
            else:
                result.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            successes[t.name] = result
            records.append((TopicRecord(name=t.name, topic_id=topic_id), 0))
            # ConfigRecords between TopicRecord and PartitionRecords, in the order Kafka walks the
            # HashMap it collected them in (computeConfigChanges), not the request's order.
            for key in hash_map_order(creation):
                records.append((ConfigRecord(resource_type=TOPIC, resource_name=t.name, name=key,
                                             value=creation[key]), 0))
            records.extend(clear_elr_records(self.ctx, records[-len(creation):] if creation else ()))
            placement.partition_records(topic_id, 0, parts, records)

        results: list[CreateTopicsResponse.CreatableTopicResult] = []
        for t in topics:
            err = errors.get(t.name)
            if err is not None:
                results.append(CreatableTopicResult(name=t.name, error_code=int(err.code), error_message=err.message))
            else:
                results.append(successes[t.name])
        return results, ([] if validate_only else records)

    def _counts(self, t: CreatableTopic, num_usable: int, num_unfenced: int) -> tuple[int, int]:
        """(partitions, replication factor) of a placed topic, with every refusal the placer
        would give, and no placement yet."""
        rf, np = t.replication_factor, t.num_partitions
        if rf < -1 or rf == 0:
            raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                           "Replication factor must be larger than 0, or -1 to use the default value.")
        if np < -1 or np == 0:
            raise ApiError(ErrorCode.INVALID_PARTITIONS,
                           "Number of partitions was set to an invalid non-positive value.")
        if np == -1:
            np = self.ctx.config.get("num.partitions")
        if rf == -1:
            rf = self.ctx.config.get("default.replication.factor")
        try:
            check_replication_factor(rf, num_usable, num_unfenced, self.placer.cordoned_words)
        except InvalidReplicationFactor as e:
            raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                           f"Unable to replicate the partition {rf} time(s): {e.message}") from None
        return np, rf

    def _place(self, np: int, rf: int, usable: list[UsableBroker], active: Callable[[int], bool]) -> Parts:
        """(replicas, isr) per partition id 0..np-1, from the placer."""
        try:
            placed = self.placer.place(np, rf, usable)
        except InvalidReplicationFactor as e:
            raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                           f"Unable to replicate the partition {rf} time(s): {e.message}") from None
        if all(active(b.id) for b in usable):  # every replica in the ISR: the same list serves as both
            return [(replicas, replicas) for replicas in placed]
        out: Parts = []
        for replicas in placed:
            isr = [b for b in replicas if active(b)]
            if not isr:  # unreachable with the placer's unfenced leader, kept as Kafka keeps it
                raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                               f"Unable to replicate the partition {rf} time(s): All brokers are "
                               f"currently fenced or in controlled shutdown.")
            out.append((replicas, isr))
        return out

    def _manual(self, t: CreatableTopic, active: Callable[[int], bool]) -> Parts:
        if t.replication_factor != -1:
            raise ApiError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                                                      "but replication factor was not set to -1.")
        if t.num_partitions != -1:
            raise ApiError(ErrorCode.INVALID_REQUEST, "A manual partition assignment was specified, "
                                                      "but numPartitions was not set to -1.")
        brokers = self.ctx.image.cluster.brokers
        parts: dict[int, tuple[list[int], list[int]]] = {}
        rf: int | None = None
        for a in t.assignments:
            if a.partition_index in parts:
                raise _bad_assignment(f"Found multiple manual partition assignments for partition "
                                      f"{a.partition_index}")
            replicas = list(a.broker_ids)
            validate_manual_assignment(replicas, rf, brokers)
            rf = len(replicas)
            isr = [b for b in replicas if active(b)]
            if not isr:
                raise _bad_assignment(f"All brokers specified in the manual partition assignment for partition "
                                      f"{a.partition_index} are fenced or in controlled shutdown.")
            parts[a.partition_index] = (replicas, isr)
        for i in range(len(parts)):
            if i not in parts:
                raise _bad_assignment("partitions should be a consecutive 0-based integer sequence")
        return [parts[i] for i in range(len(parts))]

    def _placement(self) -> _Placement:
        """Per request, not per replica: the brokers placement may use (the heartbeat manager's
        usable brokers), which may be in an ISR (ClusterControlManager.isActive: the image's
        fenced and in-controlled-shutdown flags only), and how PartitionRecords are written."""
        image = self.ctx.image
        shutting = self.shutting_down
        active_ids = frozenset(b.id for b in image.cluster.brokers.values() if b.active)
        placement = _Placement(image, list(usable_brokers(image, shutting)), active_ids.__contains__, self._tails)
        self._tails = (placement.context, placement.tails)
        return placement

    # ==== CreatePartitions ================================================================

    def create_partitions(self, request: CreatePartitionsRequest, context: RequestContext, *,
                          alterable: NamePredicate | None = None,
                          partition_quota: PartitionQuota | None = None
                          ) -> ControllerResult[CreatePartitionsResponse]:
        """CreatePartitions v0-3 (ControllerApis.createPartitions + ReplicationControlManager).

        ``alterable`` (None: all) is the ALTER topic check. Results come back as Kafka's do:
        duplicate names first, then unauthorized names, then the rest, each group in Java
        HashSet order of the names. All PartitionRecords go in one atomic batch."""
        names: dict[str, None] = {}
        duplicates: dict[str, None] = {}
        for t in request.topics:
            if t.name in names:
                duplicates[t.name] = None
            else:
                names[t.name] = None
        results: list[CreatePartitionsResponse.CreatePartitionsTopicResult] = [
            CreatePartitionsTopicResult(name=n, error_code=ErrorCode.INVALID_REQUEST, error_message="Duplicate topic name.")
            for n in hash_order(duplicates)]
        capacity = capacity_for(len(names))  # the HashSet had every name before duplicates left it
        by_name = {t.name: t for t in reversed(request.topics)}  # find(): the first with that name
        todo: list[CreatePartitionsTopic] = []
        for name in hash_order((n for n in names if n not in duplicates), capacity):
            if alterable is None or alterable(name):
                todo.append(by_name[name])
            else:
                results.append(CreatePartitionsTopicResult(name=name, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                                           error_message=None))
        records: list[RecordAndVersion] = []
        placement = self._placement() if todo else None
        for t in todo:
            assert placement is not None
            try:
                self._add_partitions(t, placement, records, partition_quota)
                results.append(CreatePartitionsTopicResult(name=t.name, error_code=0, error_message=None))
            except ApiError as e:
                if e.code == ErrorCode.POLICY_VIOLATION and e.message == EXCESSIVE_BATCH_MESSAGE:
                    raise  # the whole request fails (see _add_partitions)
                results.append(CreatePartitionsTopicResult(name=t.name, error_code=int(e.code), error_message=e.message))
        return ControllerResult([] if request.validate_only else records,
                                CreatePartitionsResponse(results=results), atomic=True)

    def _add_partitions(self, t: CreatePartitionsTopic, placement: _Placement, records: list[RecordAndVersion],
                        partition_quota: PartitionQuota | None) -> None:
        """One topic's new partitions, appended to ``records`` only if all of them can be made."""
        topic = self.ctx.image.topics.by_name.get(t.name)
        if topic is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # Kafka: no message
        current = len(topic.partitions)
        if t.count == current:
            raise ApiError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        if t.count < current:
            raise ApiError(ErrorCode.INVALID_PARTITIONS, f"The topic {t.name} currently has {current} partition(s); "
                                                         f"{t.count} would not be an increase.")
        additional = t.count - current
        if t.assignments is not None and len(t.assignments) != additional:
            raise _bad_assignment(f"Attempted to add {additional} additional partition(s), but only "
                                  f"{len(t.assignments)} assignment(s) were specified.")
        if partition_quota is not None:
            partition_quota(additional)
        # Kafka's BoundedList overflows while these records are added, and its createPartitions
        # catches that per topic (UNKNOWN_SERVER_ERROR) yet keeps the records added so far. We
        # refuse the whole request up front instead, as CreateTopics does: POLICY_VIOLATION.
        check_record_count(len(records) + additional)
        rf = len(topic.partitions[min(topic.partitions)].replicas)
        start = current
        parts: Parts = []
        if t.assignments is not None:
            brokers = self.ctx.image.cluster.brokers
            for i, a in enumerate(t.assignments):
                replicas = list(a.broker_ids)
                validate_manual_assignment(replicas, rf, brokers)
                isr = [b for b in replicas if placement.active(b)]
                if not isr:
                    raise _bad_assignment(f"All brokers specified in the manual partition assignment for partition "
                                          f"{start + i} are fenced or in controlled shutdown.")
                parts.append((replicas, isr))
        else:
            # The placer's own message, without CreateTopics' "Unable to replicate..." prefix.
            for replicas in self.placer.place(additional, rf, placement.usable):
                isr = [b for b in replicas if placement.active(b)]
                if not isr:  # unreachable with the placer's unfenced leader, kept as Kafka keeps it
                    raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                   f"Unable to replicate the partition {rf} time(s): All brokers are currently "
                                   f"fenced or in controlled shutdown.")
                parts.append((replicas, isr))
        placement.partition_records(topic.id, start, parts, records)

    # ==== DeleteTopics ====================================================================

    def delete_topics(self, request: DeleteTopicsRequest, context: RequestContext, *,
                      deletable: NamePredicate | None = None,
                      describable: NamePredicate | None = None,
                      partition_quota: PartitionQuota | None = None) -> ControllerResult[DeleteTopicsResponse]:
        """DeleteTopics v0-6 (ControllerApis.deleteTopics + ReplicationControlManager.deleteTopics).

        ``deletable``/``describable`` (None: all) are the DELETE and DESCRIBE topic checks; the
        API layer passes None for both when the principal may DELETE the cluster. Raises
        ApiError for every topic when delete.topic.enable=false, as Kafka throws there."""
        version = context.api_version
        if not self.ctx.config.get("delete.topic.enable"):
            if version < 3:
                raise ApiError(ErrorCode.INVALID_REQUEST, "Topic deletion is disabled.")
            raise ApiError(ErrorCode.TOPIC_DELETION_DISABLED)
        topics_image = self.ctx.image.topics
        responses: list[DeleteTopicsResponse.DeletableTopicResult] = []

        def respond(name: str | None, tid: uuid.UUID, code: int, message: str | None) -> None:
            responses.append(DeletableTopicResult(name=name, topic_id=tid, error_code=int(code),
                                                  error_message=message))

        names: dict[str, None] = {}
        dup_names: dict[str, None] = {}
        ids: dict[uuid.UUID, None] = {}
        dup_ids: dict[uuid.UUID, None] = {}

        def add_name(name: str) -> None:
            if name in dup_names or name in names:
                dup_names[name] = None
                names.pop(name, None)
            else:
                names[name] = None

        for name in request.topic_names:  # v0-5
            add_name(name)
        for t in request.topics:  # v6+
            if t.name is None:
                if t.topic_id == ZERO:
                    respond(None, ZERO, ErrorCode.INVALID_REQUEST, "Neither topic name nor id were specified.")
                elif t.topic_id in dup_ids or t.topic_id in ids:
                    dup_ids[t.topic_id] = None
                    ids.pop(t.topic_id, None)
                else:
                    ids[t.topic_id] = None
            elif t.topic_id == ZERO:
                add_name(t.name)
            else:
                respond(t.name, t.topic_id, ErrorCode.INVALID_REQUEST,
                        "You may not specify both topic name and topic id.")
        for name in dup_names:
            respond(name, ZERO, ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
        for tid in dup_ids:
            respond(None, tid, ErrorCode.INVALID_REQUEST, "Duplicate topic id.")

        # Resolve ids to names (the authorizer works on names). Kafka fills its idToName HashMap
        # in the order of the maps findTopicNames and findTopicIds answer, and deletes in the
        # order of idToName: which topics a request over the record cap deletes follows from it.
        id_to_name: dict[uuid.UUID, str] = {}
        peak = 0  # the most entries idToName held: its table never shrinks
        for tid in _java_lookup_order(list(ids), _uuid_hash):
            topic = topics_image.by_id.get(tid)
            if topic is None:
                respond(None, tid, ErrorCode.UNKNOWN_TOPIC_ID, MSG_UNKNOWN_TOPIC_ID)
            else:
                id_to_name[tid] = topic.name
        peak = len(id_to_name)

        def can_delete(n: str) -> bool:
            return deletable is None or deletable(n)

        def can_describe(n: str) -> bool:
            return describable is None or describable(n)

        for tid, name in list(id_to_name.items()):
            if not can_delete(name):
                respond(name if can_describe(name) else None, tid, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        MSG_TOPIC_AUTHORIZATION_FAILED)
                del id_to_name[tid]
        for name in _java_lookup_order(list(names), string_hash):
            topic = topics_image.by_name.get(name)
            if not can_describe(name):
                respond(name, ZERO, ErrorCode.TOPIC_AUTHORIZATION_FAILED, MSG_TOPIC_AUTHORIZATION_FAILED)
            elif topic is None:
                respond(name, ZERO, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, MSG_UNKNOWN_TOPIC_OR_PARTITION)
            elif can_delete(name):
                if topic.id in dup_ids or topic.id in id_to_name:
                    # A name that maps to an id also given: refused, but only once authorized,
                    # so the response reveals no id mapping to an unauthorized caller.
                    dup_ids[topic.id] = None
                    id_to_name.pop(topic.id, None)
                    respond(name, topic.id, ErrorCode.INVALID_REQUEST,
                            "The provided topic name maps to an ID that was already supplied.")
                else:
                    id_to_name[topic.id] = name
                    peak = max(peak, len(id_to_name))
            else:
                respond(name, ZERO, ErrorCode.TOPIC_AUTHORIZATION_FAILED, MSG_TOPIC_AUTHORIZATION_FAILED)

        records: list[RecordAndVersion] = []
        over_cap = 0
        for tid in order_by_hash(id_to_name, _uuid_hash, hashmap_capacity(peak)):
            name = id_to_name[tid]
            topic = topics_image.by_id.get(tid)
            if topic is None:
                respond(name, tid, ErrorCode.UNKNOWN_TOPIC_ID, MSG_UNKNOWN_TOPIC_ID)
                continue
            if partition_quota is not None:
                try:
                    partition_quota(len(topic.partitions))
                except ApiError as e:
                    respond(name, tid, e.code, e.message)
                    continue
            if len(records) >= MAX_RECORDS_PER_USER_OP:
                # Kafka's BoundedList refuses the record and its per-topic catch answers the
                # exception as UNKNOWN_SERVER_ERROR (no message): the topics before the cap are
                # deleted, the rest are not.
                respond(name, tid, ErrorCode.UNKNOWN_SERVER_ERROR, None)
                over_cap += 1
                continue
            records.append((RemoveTopicRecord(topic_id=tid), 0))
            respond(name, tid, ErrorCode.NONE, None)
        if over_cap:
            log.error("deleteTopics: %d topic(s) not deleted: the request would write more than %d records",
                      over_cap, MAX_RECORDS_PER_USER_OP)
        self.rng.shuffle(responses)
        return ControllerResult(records, DeleteTopicsResponse(responses=responses), atomic=True)


def _uuid_hash(u: uuid.UUID) -> int:
    """Kafka's Uuid.hashCode: the two halves XORed, then the two 32-bit halves of that."""
    x = (u.int >> 64) ^ (u.int & 0xFFFFFFFFFFFFFFFF)
    return ((x >> 32) ^ x) & 0xFFFFFFFF


def _java_lookup_order(keys: list[K], hash_of: Callable[[K], int]) -> list[K]:
    """The order of the map ControllerApis.deleteTopics gets back for ``keys`` (distinct, in
    request order): put into a default HashSet, then looked up into a ``new HashMap<>(size)``
    (findTopicNames, findTopicIds)."""
    in_set = order_by_hash(keys, hash_of, capacity_for(len(keys)))
    return order_by_hash(in_set, hash_of, hashmap_capacity(len(keys), initial=len(keys)))


def _check_total_partitions(topics: list[CreatableTopic], default_partitions: int) -> None:
    """Kafka 3.9.1+'s first look at a CreateTopics (validateTotalNumberOfPartitions): more
    than 10,000 partitions asked for in all, counted before any other check, fail the whole
    request. The sum is a Java int, so it wraps as Kafka's does; a request that slips through
    by wrapping meets the record-count arithmetic below instead (where Kafka would place it)."""
    total = sum(len(t.assignments) if t.assignments
                else default_partitions if t.num_partitions == -1 else max(t.num_partitions, 0)
                for t in topics)
    # Java's int wraps at each addition; two's complement sums wrap alike all at once.
    if (total + 2**31) % 2**32 - 2**31 > MAX_PARTITIONS_PER_REQUEST:
        raise ApiError(ErrorCode.POLICY_VIOLATION, "Excessively large number of partitions per request.")


def _bad_assignment(message: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)


def validate_manual_assignment(replicas: list[int], replication_factor: int | None,
                               brokers: dict[int, BrokerRegistration]) -> None:
    """validateManualPartitionAssignment: non-empty, registered, no duplicates, same length as
    the previous partitions. Brokers are checked in ascending id order, as Kafka sorts first."""
    if not replicas:
        raise _bad_assignment("The manual partition assignment includes an empty replica list.")
    prev: int | None = None
    for b in sorted(replicas):
        if b not in brokers:
            raise _bad_assignment(f"The manual partition assignment includes broker {b}, but no such "
                                  f"broker is registered.")
        if b == prev:
            raise _bad_assignment(f"The manual partition assignment includes the broker {prev} more than once.")
        prev = b
    if replication_factor is not None and len(replicas) != replication_factor:
        raise _bad_assignment(f"The manual partition assignment includes a partition with {len(replicas)} "
                              f"replica(s), but this is not consistent with previous partitions, which have "
                              f"{replication_factor} replica(s).")


# A PartitionRecord's framed value: the 3-byte frame header, partition id, topic id, then a tail
# (replicas, ISR, leader, epochs, directories, tagged fields) that a new partition's replicas and
# ISR decide once the request's metadata.version and the brokers' directories are known.
_I32 = struct.Struct(">i")
_TAIL_OFFSET = 3 + 4 + 16
_TAILS_MAX = 1 << 16
Tails = dict[tuple[tuple[int, ...], tuple[int, ...]], bytes]
TailsContext = tuple[int, bool, bool, tuple[tuple[int, uuid.UUID], ...]]
"""What a tail depends on besides (replicas, ISR): the record version, ELR and directories
supported, and each broker's default directory."""


class _Placement:
    """What one request's replica placement needs, computed once: usable brokers, the ISR test,
    and the image's metadata.version rules for PartitionRecords (directories, ELR fields).

    ``tails`` caches the framed tail of a new partition's PartitionRecord by (replicas, ISR):
    a million partitions over 30 brokers have a few thousand of them, so each record is its
    header, ids and a cached tail (``FramedRecord``), not an object encoded and dropped. The
    tail comes from the general encoder the first time, so the bytes are the same by
    construction; ``context`` says what a tail depends on besides (replicas, ISR), and the
    manager keeps ``tails`` across requests only while that is unchanged."""

    __slots__ = ("image", "usable", "active", "_dirs", "_version", "_elr", "_with_dirs", "_head", "context",
                 "tails")

    def __init__(self, image: MetadataImage, usable: list[UsableBroker], active: Callable[[int], bool],
                 tails: tuple[TailsContext, Tails] | None = None) -> None:
        self.image = image
        self.usable = usable
        self.active = active
        mv = image.metadata_version
        release = image.release
        self._version = release.partition_record_version(mv)
        # A new partition's empty ELR lists: 3.9 writes them from its 4.0-IV0; 4.x sets the fields
        # only when they have members (PartitionRegistration.toRecord), so never here.
        self._elr = release.is_elr_supported(mv) and release.is_3x
        self._with_dirs = release.directory_assignment_supported(mv)
        cluster = image.cluster
        self._dirs: dict[int, uuid.UUID] = {b: cluster.default_dir(b) for b in cluster.brokers} if self._with_dirs else {}
        self._head = bytes((FRAME_VERSION, RecordType.PARTITION_RECORD, self._version))
        self.context: TailsContext = (self._version, self._elr, self._with_dirs, tuple(self._dirs.items()))
        self.tails: Tails = tails[1] if tails is not None and tails[0] == self.context else {}

    def partition_records(self, topic_id: uuid.UUID, start: int, parts: Parts,
                          records: list[RecordAndVersion]) -> None:
        """PartitionRecords for partitions start, start+1, ...: leader the first ISR member,
        epochs 0, RECOVERED, each replica in its broker's default directory; framed (see the
        class)."""
        tails, version, append = self.tails, self._version, records.append
        prefix = self._head
        tid = topic_id.bytes
        pack = _I32.pack
        for pid, (replicas, isr) in enumerate(parts, start):
            r = tuple(replicas)
            key = (r, r) if isr is replicas else (r, tuple(isr))
            tail = tails.get(key)
            if tail is None:
                rec = self.partition_record(topic_id, pid, replicas, isr)
                value = frame(rec, version)
                if value[:_TAIL_OFFSET] != prefix + pack(pid) + tid:  # not the layout above: as it is
                    append((rec, version))
                    continue
                if len(tails) >= _TAILS_MAX:
                    tails.clear()
                tail = tails[key] = value[_TAIL_OFFSET:]
            append((FramedRecord(prefix + pack(pid) + tid + tail), version))

    def partition_record(self, topic_id: uuid.UUID, pid: int, replicas: list[int], isr: list[int]) -> PartitionRecord:
        """One new partition's PartitionRecord as an object, from which the tails are framed."""
        rec = PartitionRecord(partition_id=pid, topic_id=topic_id, replicas=replicas, isr=isr,
                              removing_replicas=[], adding_replicas=[], leader=isr[0],
                              leader_recovery_state=RECOVERED, leader_epoch=0, partition_epoch=0)
        if self._with_dirs:
            dirs = self._dirs
            rec.directories = [dirs[b] if b in dirs else self.image.cluster.default_dir(b) for b in replicas]
        if self._elr:
            rec.eligible_leader_replicas = []
            rec.last_known_elr = []
        return rec

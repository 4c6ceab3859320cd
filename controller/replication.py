"""ReplicationControlManager: CreateTopics (api 19) and DeleteTopics (api 20), as Kafka 3.9 does them.

Handlers read the image and return a :class:`ControllerResult`; the image changes only when the
controller core replays the returned records. Each handler also does the request-shaping work
Kafka's ``ControllerApis`` does before and after calling the controller (duplicate names,
``__cluster_metadata``, authorization results, delete-by-id resolution, shuffling), because in
kraftsim both run inside one write event.

What is deliberately Kafka's, even where it surprises:

* All records of a request go in one atomic batch. More than 10,000 records for one request
  (Kafka's BoundedList cap, ``MAX_RECORDS_PER_USER_OP``) fails the whole request with
  POLICY_VIOLATION "Unable to perform excessively large batch operation.", raised as ApiError so
  the API layer builds the per-topic error response (CreateTopicsRequest.getErrorResponse). It
  applies to validateOnly too: Kafka builds the records and then drops them. 3.9 has no other
  limit on NumPartitions.
* Topic '.'/'_' collisions are checked against existing topics only, not within the request.
* DeleteTopics results are shuffled (Kafka does it so positions leak nothing).

Topic-config validation (LogConfig's names, types and validators) and the effective configs a
v5+ response carries are the section at the bottom of this module; they belong in a module of
their own shared with IncrementalAlterConfigs (kept here only because of file ownership).
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller import topic_names
from controller.context import ControllerContext
from controller.placement import InvalidReplicationFactor, StripedReplicaPlacer, default_dir, usable_brokers
from controller.result import ApiError, ControllerResult, RecordAndVersion
from metadata import versions
from metadata.image.configs import BROKER, TOPIC
from metadata.records import by_name
from rpc import registry
from rpc.error_codes import ErrorCode
from rpc.uuids import ZERO, random_uuid

TopicRecord: Any = by_name("TopicRecord")
PartitionRecord: Any = by_name("PartitionRecord")
ConfigRecord: Any = by_name("ConfigRecord")
RemoveTopicRecord: Any = by_name("RemoveTopicRecord")
CreateTopicsResponse: Any = registry.response_class(19)
DeleteTopicsResponse: Any = registry.response_class(20)
CreatableTopicResult: Any = CreateTopicsResponse.CreatableTopicResult
CreatableTopicConfigs: Any = CreateTopicsResponse.CreatableTopicConfigs
DeletableTopicResult: Any = DeleteTopicsResponse.DeletableTopicResult

MAX_RECORDS_PER_USER_OP = 10_000
EXCESSIVE_BATCH = "Unable to perform excessively large batch operation."
RECOVERED = 0

# Errors.X.message() for errors Kafka builds with new ApiError(X) (no explicit message).
MSG_UNKNOWN_TOPIC_OR_PARTITION = "This server does not host this topic-partition."
MSG_UNKNOWN_TOPIC_ID = "This server does not host this topic ID."
MSG_TOPIC_AUTHORIZATION_FAILED = "Topic authorization failed."

# Generated message classes carry their fields dynamically, so they are typed Any here.
Message = Any
NamePredicate = Callable[[str], bool]
PartitionQuota = Callable[[int], None]


class ReplicationControlManager:
    """Topic creation and deletion. ``rng`` drives replica placement and the DeleteTopics
    shuffle; ``new_topic_id`` makes topic ids reproducible in tests; ``shutting_down`` adds the
    heartbeat manager's controlled-shutdown soft state to the image's."""

    def __init__(self, ctx: ControllerContext, rng: random.Random | None = None, *,
                 new_topic_id: Callable[[], uuid.UUID] = random_uuid,
                 shutting_down: Callable[[int], bool] | None = None) -> None:
        self.ctx = ctx
        self.rng = rng if rng is not None else random.Random()
        self.placer = StripedReplicaPlacer(self.rng)
        self.new_topic_id = new_topic_id
        self.shutting_down = shutting_down

    # ==== CreateTopics ====================================================================

    def create_topics(self, request: Message, version: int, context: Any = None,
                      describable: set[str] | None = None, *,
                      creatable: NamePredicate | None = None,
                      partition_quota: PartitionQuota | None = None) -> ControllerResult[Message]:
        """CreateTopics v0-7. ``describable`` (None: all) are the names whose effective configs
        may be returned (DESCRIBE_CONFIGS); ``creatable`` (None: all) is the CREATE check the API
        layer does (cluster or topic); ``partition_quota`` charges the controller mutation quota
        and raises ApiError(THROTTLING_QUOTA_EXCEEDED) when it is exhausted."""
        topics = list(request.topics)
        # --- ControllerApis.createTopics: duplicates, __cluster_metadata, CREATE authorization
        seen: dict[str, None] = {}
        duplicates: dict[str, None] = {}
        for t in topics:
            if t.name in duplicates:
                continue
            if t.name in seen:
                del seen[t.name]
                duplicates[t.name] = None
            else:
                seen[t.name] = None
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

    def _create(self, topics: list[Message], validate_only: bool, describable: set[str] | None,
                partition_quota: PartitionQuota | None) -> tuple[list[Message], list[RecordAndVersion]]:
        """ReplicationControlManager.createTopics on the filtered request."""
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
                    errors[t.name] = topic_names.collision_error(t.name, min(colliding))
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
        mv = image.metadata_version
        pr_version = versions.partition_record_version(mv)
        elr = versions.is_elr_supported(mv)
        with_dirs = versions.directory_assignment_supported(mv)
        shutting = self.shutting_down
        # Per request, not per replica: which brokers may be in an ISR, and each one's default dir.
        active_ids = frozenset(b.id for b in image.cluster.brokers.values()
                               if not b.fenced and not b.in_controlled_shutdown
                               and (shutting is None or not shutting(b.id)))
        active = active_ids.__contains__
        dirs: dict[int, uuid.UUID] = {b: default_dir(image, b) for b in image.cluster.brokers} if with_dirs else {}

        usable = list(usable_brokers(image, shutting))
        records: list[RecordAndVersion] = []
        successes: dict[str, Message] = {}
        for t in topics:
            if t.name in errors:
                continue
            creation = {c.name: c.value for c in t.configs}
            try:
                schema.validate(t.name, creation)
                parts = self._assign(t, usable, active)
            except ApiError as e:
                errors[t.name] = e
                continue
            if partition_quota is not None:
                try:
                    partition_quota(len(parts))
                except ApiError as e:
                    errors[t.name] = e
                    continue
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
            if len(records) + 1 + len(creation) + len(parts) > MAX_RECORDS_PER_USER_OP:
                raise ApiError(ErrorCode.POLICY_VIOLATION, EXCESSIVE_BATCH)
            records.append((TopicRecord(name=t.name, topic_id=topic_id), 0))
            for key, value in creation.items():  # ConfigRecords between TopicRecord and PartitionRecords
                records.append((ConfigRecord(resource_type=TOPIC, resource_name=t.name, name=key, value=value), 0))
            for pid, (replicas, isr) in enumerate(parts):
                rec = PartitionRecord(partition_id=pid, topic_id=topic_id, replicas=replicas, isr=isr,
                                      removing_replicas=[], adding_replicas=[], leader=isr[0],
                                      leader_recovery_state=RECOVERED, leader_epoch=0, partition_epoch=0)
                if with_dirs:
                    rec.directories = [dirs[b] if b in dirs else default_dir(image, b) for b in replicas]
                if elr:
                    rec.eligible_leader_replicas = []
                    rec.last_known_elr = []
                records.append((rec, pr_version))

        results: list[Message] = []
        for t in topics:
            err = errors.get(t.name)
            if err is not None:
                results.append(CreatableTopicResult(name=t.name, error_code=int(err.code), error_message=err.message))
            else:
                results.append(successes[t.name])
        return results, ([] if validate_only else records)

    def _assign(self, t: Message, usable: list[Any],
                active: Callable[[int], bool]) -> list[tuple[list[int], list[int]]]:
        """(replicas, isr) per partition id 0..n-1, from the manual assignment or the placer."""
        if t.assignments:
            return self._manual(t, active)
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
            placed = self.placer.place(np, rf, usable)
        except InvalidReplicationFactor as e:
            raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                           f"Unable to replicate the partition {rf} time(s): {e.message}") from None
        out = []
        for replicas in placed:
            isr = [b for b in replicas if active(b)]
            if not isr:  # unreachable with the placer's unfenced leader, kept as Kafka keeps it
                raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR,
                               f"Unable to replicate the partition {rf} time(s): All brokers are "
                               f"currently fenced or in controlled shutdown.")
            out.append((replicas, isr))
        return out

    def _manual(self, t: Message, active: Callable[[int], bool]) -> list[tuple[list[int], list[int]]]:
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

    # ==== DeleteTopics ====================================================================

    def delete_topics(self, request: Message, version: int, context: Any = None, *,
                      deletable: NamePredicate | None = None,
                      describable: NamePredicate | None = None,
                      partition_quota: PartitionQuota | None = None) -> ControllerResult[Message]:
        """DeleteTopics v0-6 (ControllerApis.deleteTopics + ReplicationControlManager.deleteTopics).

        ``deletable``/``describable`` (None: all) are the DELETE and DESCRIBE topic checks; the
        API layer passes None for both when the principal may DELETE the cluster. Raises
        ApiError for every topic when delete.topic.enable=false, as Kafka throws there."""
        if not self.ctx.config.get("delete.topic.enable"):
            if version < 3:
                raise ApiError(ErrorCode.INVALID_REQUEST, "Topic deletion is disabled.")
            raise ApiError(ErrorCode.TOPIC_DELETION_DISABLED)
        topics_image = self.ctx.image.topics
        responses: list[Message] = []

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

        for name in getattr(request, "topic_names", None) or []:
            add_name(name)
        for t in getattr(request, "topics", None) or []:
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

        # Resolve ids to names (the authorizer works on names).
        id_to_name: dict[uuid.UUID, str] = {}
        for tid in ids:
            topic = topics_image.by_id.get(tid)
            if topic is None:
                respond(None, tid, ErrorCode.UNKNOWN_TOPIC_ID, MSG_UNKNOWN_TOPIC_ID)
            else:
                id_to_name[tid] = topic.name

        def can_delete(n: str) -> bool:
            return deletable is None or deletable(n)

        def can_describe(n: str) -> bool:
            return describable is None or describable(n)

        for tid, name in list(id_to_name.items()):
            if not can_delete(name):
                respond(name if can_describe(name) else None, tid, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        MSG_TOPIC_AUTHORIZATION_FAILED)
                del id_to_name[tid]
        for name in names:
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
            else:
                respond(name, ZERO, ErrorCode.TOPIC_AUTHORIZATION_FAILED, MSG_TOPIC_AUTHORIZATION_FAILED)

        records: list[RecordAndVersion] = []
        for tid, name in id_to_name.items():
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
                raise ApiError(ErrorCode.POLICY_VIOLATION, EXCESSIVE_BATCH)
            records.append((RemoveTopicRecord(topic_id=tid), 0))
            respond(name, tid, ErrorCode.NONE, None)
        self.rng.shuffle(responses)
        return ControllerResult(records, DeleteTopicsResponse(responses=responses), atomic=True)


def _bad_assignment(message: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message)


def validate_manual_assignment(replicas: list[int], replication_factor: int | None,
                               brokers: dict[int, Any]) -> None:
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


# ==== Topic configs (LogConfig / KafkaConfigSchema) ==========================================
# Kept in this module only because this change may touch no other file; it belongs in a
# controller/topic_configs.py shared with IncrementalAlterConfigs.

class ConfigError(ApiError):
    """ConfigException: "Invalid value V for configuration N: message" -> INVALID_CONFIG."""

    def __init__(self, name: str, value: object, message: str | None) -> None:
        super().__init__(ErrorCode.INVALID_CONFIG,
                         f"Invalid value {value} for configuration {name}" + ("" if message is None else f": {message}"))


def _java_double(x: float) -> str:
    """Double.toString for the values a user types (decimal between 1e-3 and 1e7, else E form)."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        return repr(float(x))
    mantissa, exp = f"{x:.17e}".split("e")
    m = repr(float(mantissa))
    return f"{m}E{int(exp)}"


def _show(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return _java_double(v)
    if isinstance(v, list):
        return "[" + ", ".join(str(x) for x in v) + "]"
    return str(v)


_JAVA_INT = re.compile(r"[+-]?[0-9]+")
_JAVA_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)")
_COMMA = re.compile(r"\s*,\s*")


def _parse(name: str, ctype: str, raw: str) -> object:
    """ConfigDef.parseType for a string value."""
    s = raw.strip()
    if ctype in ("INT", "LONG"):
        bits = 31 if ctype == "INT" else 63
        if _JAVA_INT.fullmatch(s):
            n = int(s)
            if -(1 << bits) <= n < (1 << bits):
                return n
        raise ConfigError(name, raw, f"Not a number of type {ctype}")
    if ctype == "DOUBLE":
        if _JAVA_DOUBLE.fullmatch(s):
            return float(s.rstrip("fFdD").replace("Infinity", "inf"))
        raise ConfigError(name, raw, "Not a number of type DOUBLE")
    if ctype == "BOOLEAN":
        low = s.lower()
        if low in ("true", "false"):
            return low == "true"
        raise ConfigError(name, raw, "Expected value to be either true or false")
    if ctype == "LIST":
        return [] if not s else _COMMA.split(s)
    return s


Validator = Callable[[str, Any], None]


def _at_least(lo: int) -> Validator:
    def check(name: str, v: Any) -> None:
        if v < lo:
            raise ConfigError(name, _show(v), f"Value must be at least {lo}")
    return check


def _between(lo: int, hi: int) -> Validator:
    def check(name: str, v: Any) -> None:
        if v < lo:
            raise ConfigError(name, _show(v), f"Value must be at least {lo}")
        if v > hi:
            raise ConfigError(name, _show(v), f"Value must be no more than {hi}")
    return check


def _one_of(*allowed: str) -> Validator:
    def check(name: str, v: Any) -> None:
        if v not in allowed:
            raise ConfigError(name, v, "String must be one of: " + ", ".join(allowed))
    return check


def _list_of(*allowed: str) -> Validator:
    one = _one_of(*allowed)

    def check(name: str, v: Any) -> None:
        for item in v:
            one(name, item)
    return check


def _gzip_level(name: str, v: Any) -> None:
    if v > 9 or (v < 1 and v != -1):
        raise ConfigError(name, v, "Value must be between 1 and 9 or equal to -1")


def _ibp_versions() -> frozenset[str]:
    """MetadataVersion's IBP_VERSIONS keys (3.9): every "x.y-IVn" plus each bare "x.y"."""
    subs = {"0.8.0": [""], "0.8.1": [""], "0.8.2": [""], "0.9.0": [""], "0.10.0": ["IV0", "IV1"],
            "0.10.1": ["IV0", "IV1", "IV2"], "0.10.2": ["IV0"], "0.11.0": ["IV0", "IV1", "IV2"],
            "1.0": ["IV0"], "1.1": ["IV0"], "2.0": ["IV0", "IV1"], "2.1": ["IV0", "IV1", "IV2"],
            "2.2": ["IV0", "IV1"], "2.3": ["IV0", "IV1"], "2.4": ["IV0", "IV1"], "2.5": ["IV0"], "2.6": ["IV0"],
            "2.7": ["IV0", "IV1", "IV2"], "2.8": ["IV0", "IV1"], "3.0": ["IV0", "IV1"], "3.1": ["IV0"],
            "3.2": ["IV0"], "3.3": ["IV0", "IV1", "IV2", "IV3"], "3.4": ["IV0"], "3.5": ["IV0", "IV1", "IV2"],
            "3.6": ["IV0", "IV1", "IV2"], "3.7": ["IV0", "IV1", "IV2", "IV3", "IV4"], "3.8": ["IV0"],
            "3.9": ["IV0"], "4.0": ["IV0", "IV1"]}
    out = set(subs)
    out.update(f"{v}-{s}" for v, ss in subs.items() for s in ss if s)
    return frozenset(out)


_IBP = _ibp_versions()


def _metadata_version(name: str, v: Any) -> None:
    segs = v.split(".")
    n = 3 if v.startswith("0.") else 2
    key = v if n >= len(segs) else ".".join(segs[:n])
    if key not in _IBP:
        raise ConfigError(name, v, f"Version {v} is not a valid version")


_THROTTLED = re.compile(r"([0-9]+:[0-9]+)?")


def _throttled(name: str, v: Any) -> None:
    items = [x.strip() for x in v]
    if not (all(_THROTTLED.fullmatch(x) for x in items) or "".join(items) == "*"):
        raise ConfigError(name, _show(v), f"{name} must be the literal '*' or a list of replicas in the following "
                                          f"format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


@dataclass(frozen=True, slots=True)
class TopicConfigKey:
    name: str
    type: str
    default: str  # ConfigDef.convertToString of the default
    validator: Validator | None
    synonyms: tuple[tuple[str, int], ...]  # (broker config, multiplier to ms; 1 = as is)


_H, _M = 3_600_000, 60_000
_LMAX = "9223372036854775807"


def _k(name: str, ctype: str, default: str, validator: Validator | None, *synonyms: str | tuple[str, int]) -> TopicConfigKey:
    syn = tuple(s if isinstance(s, tuple) else (s, 1) for s in synonyms)
    return TopicConfigKey(name, ctype, default, validator, syn)


# LogConfig's definition order (ConfigDef.parse reports the first bad key in this order), with
# ServerTopicConfigSynonyms (the broker configs a topic config falls back to, highest first).
TOPIC_CONFIGS: dict[str, TopicConfigKey] = {k.name: k for k in [
    _k("segment.bytes", "INT", "1073741824", _at_least(14), "log.segment.bytes"),
    _k("segment.ms", "LONG", "604800000", _at_least(1), "log.roll.ms", ("log.roll.hours", _H)),
    _k("segment.jitter.ms", "LONG", "0", _at_least(0), "log.roll.jitter.ms", ("log.roll.jitter.hours", _H)),
    _k("segment.index.bytes", "INT", "10485760", _at_least(4), "log.index.size.max.bytes"),
    _k("flush.messages", "LONG", _LMAX, _at_least(1), "log.flush.interval.messages"),
    _k("flush.ms", "LONG", _LMAX, _at_least(0), "log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    _k("retention.bytes", "LONG", "-1", None, "log.retention.bytes"),
    _k("retention.ms", "LONG", "604800000", _at_least(-1), "log.retention.ms",
       ("log.retention.minutes", _M), ("log.retention.hours", _H)),
    _k("max.message.bytes", "INT", "1048588", _at_least(0), "message.max.bytes"),
    _k("index.interval.bytes", "INT", "4096", _at_least(0), "log.index.interval.bytes"),
    _k("delete.retention.ms", "LONG", "86400000", _at_least(0), "log.cleaner.delete.retention.ms"),
    _k("min.compaction.lag.ms", "LONG", "0", _at_least(0), "log.cleaner.min.compaction.lag.ms"),
    _k("max.compaction.lag.ms", "LONG", _LMAX, _at_least(1), "log.cleaner.max.compaction.lag.ms"),
    _k("file.delete.delay.ms", "LONG", "60000", _at_least(0), "log.segment.delete.delay.ms"),
    _k("min.cleanable.dirty.ratio", "DOUBLE", "0.5", _between(0, 1), "log.cleaner.min.cleanable.ratio"),
    _k("cleanup.policy", "LIST", "delete", _list_of("compact", "delete"), "log.cleanup.policy"),
    _k("unclean.leader.election.enable", "BOOLEAN", "false", None, "unclean.leader.election.enable"),
    _k("min.insync.replicas", "INT", "1", _at_least(1), "min.insync.replicas"),
    _k("compression.type", "STRING", "producer",
       _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), "compression.type"),
    _k("compression.gzip.level", "INT", "-1", _gzip_level, "compression.gzip.level"),
    _k("compression.lz4.level", "INT", "9", _between(1, 17), "compression.lz4.level"),
    _k("compression.zstd.level", "INT", "3", _between(-131072, 22), "compression.zstd.level"),
    _k("preallocate", "BOOLEAN", "false", None, "log.preallocate"),
    _k("message.format.version", "STRING", "3.0-IV1", _metadata_version, "log.message.format.version"),
    _k("message.timestamp.type", "STRING", "CreateTime", _one_of("CreateTime", "LogAppendTime"),
       "log.message.timestamp.type"),
    _k("message.timestamp.difference.max.ms", "LONG", _LMAX, _at_least(0),
       "log.message.timestamp.difference.max.ms"),
    _k("message.timestamp.before.max.ms", "LONG", _LMAX, _at_least(0), "log.message.timestamp.before.max.ms"),
    _k("message.timestamp.after.max.ms", "LONG", _LMAX, _at_least(0), "log.message.timestamp.after.max.ms"),
    _k("leader.replication.throttled.replicas", "LIST", "", _throttled),
    _k("follower.replication.throttled.replicas", "LIST", "", _throttled),
    _k("message.downconversion.enable", "BOOLEAN", "true", None, "log.message.downconversion.enable"),
    _k("remote.storage.enable", "BOOLEAN", "false", None),
    _k("local.retention.ms", "LONG", "-2", _at_least(-2), "log.local.retention.ms"),
    _k("local.retention.bytes", "LONG", "-2", _at_least(-2), "log.local.retention.bytes"),
    _k("remote.log.copy.disable", "BOOLEAN", "false", None),
    _k("remote.log.delete.on.disable", "BOOLEAN", "false", None),
]}
_SORTED_NAMES = sorted(TOPIC_CONFIGS)

# DescribeConfigsResponse.ConfigSource ids (KafkaConfigSchema.translateConfigSource).
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5


def _convert(value: str, multiplier: int) -> str:
    """ConfigSynonym.HOURS/MINUTES_TO_MILLISECONDS: an unparsable number counts as 0."""
    if multiplier == 1:
        return value
    s = value.strip()
    n = int(s) if _JAVA_INT.fullmatch(s) and -(1 << 31) <= int(s) < (1 << 31) else 0
    return str(n * multiplier)


class TopicConfigResolver:
    """Validates creation configs (LogConfig.validate as ControllerConfigurationValidator calls
    it) and resolves effective topic configs (KafkaConfigSchema.resolveEffectiveTopicConfigs)
    against the controller's static config, dynamic cluster default and dynamic node config."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.static: dict[str, str] = dict(getattr(ctx.config, "raw", {}) or {})
        configs = ctx.image.configs
        self.cluster = configs.get(BROKER, "")
        self.node = configs.get(BROKER, str(ctx.node_id))
        self._base: list[tuple[str, str, int]] | None = None
        self._base_entries: dict[str, Message] = {}

    def broker_value(self, key: TopicConfigKey) -> tuple[str, int]:
        """The value and source a topic config has when the topic does not set it."""
        for source, layer in ((DYNAMIC_BROKER_CONFIG, self.node), (DYNAMIC_DEFAULT_BROKER_CONFIG, self.cluster),
                              (STATIC_BROKER_CONFIG, self.static)):
            for syn, mult in key.synonyms:
                if syn in layer:
                    return _convert(layer[syn], mult), source
        return key.default, DEFAULT_CONFIG

    def validate(self, topic: str, configs: dict[str, str]) -> None:
        """Only configs the request sets are checked (Kafka skips validation without any)."""
        if not configs:
            return
        for name in configs:
            if name not in TOPIC_CONFIGS:
                raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        parsed: dict[str, object] = {}
        for key in TOPIC_CONFIGS.values():
            if key.name in configs:
                v = _parse(key.name, key.type, configs[key.name])
                if key.validator is not None:
                    key.validator(key.name, v)
                parsed[key.name] = v

        def value(name: str) -> object:
            if name in parsed:
                return parsed[name]
            key = TOPIC_CONFIGS[name]
            try:
                return _parse(name, key.type, self.broker_value(key)[0])
            except ApiError:
                return _parse(name, key.type, key.default)

        lo, hi = value("min.compaction.lag.ms"), value("max.compaction.lag.ms")
        if lo > hi:  # type: ignore[operator]
            raise ApiError(ErrorCode.INVALID_CONFIG, f"conflict topic config setting min.compaction.lag.ms ({lo}) > "
                                                     f"max.compaction.lag.ms ({hi})")
        if value("remote.storage.enable"):
            if str(self.static.get("remote.log.storage.system.enable", "false")).strip().lower() != "true":
                raise ApiError(ErrorCode.INVALID_CONFIG, "Tiered Storage functionality is disabled in the broker. "
                                                         "Topic cannot be configured with remote log storage.")
            if "compact" in str(value("cleanup.policy")).lower():
                raise ApiError(ErrorCode.INVALID_CONFIG, "Remote log storage is unsupported for the compacted topics")

    def effective_configs(self, creation: dict[str, str]) -> list[Message]:
        """The v5+ response's Configs: every topic config sorted by name, readOnly false, none
        sensitive (no topic config is a PASSWORD). Entries not set by the topic are shared."""
        if self._base is None:
            self._base = [(n, *self.broker_value(TOPIC_CONFIGS[n])) for n in _SORTED_NAMES]
            for n, v, src in self._base:
                self._base_entries[n] = CreatableTopicConfigs(name=n, value=v, read_only=False, config_source=src,
                                                              is_sensitive=False)
        if not creation:
            return [self._base_entries[n] for n in _SORTED_NAMES]
        out = []
        for n in _SORTED_NAMES:
            if n in creation:
                out.append(CreatableTopicConfigs(name=n, value=creation[n], read_only=False,
                                                 config_source=DYNAMIC_TOPIC_CONFIG, is_sensitive=False))
            else:
                out.append(self._base_entries[n])
        return out


"""ConfigurationControlManager: IncrementalAlterConfigs (api 44) and the legacy AlterConfigs
(api 33), as a Kafka 3.9 controller does them.

The request-shaping half of Kafka's ``ControllerApis.handleIncrementalAlterConfigs`` and the
controller half (``ConfigurationControlManager.incrementalAlterConfigs`` with the controller's
``ControllerConfigurationValidator`` and existence checker) run here in one event:

* BROKER_LOGGER resources change this process's log levels (``runtime_loggers.py``), never the
  log. Unknown resource types get UNSUPPORTED_VERSION "Unknown resource type N.". A resource named
  twice gets one INVALID_REQUEST "Duplicate resource." (a third mention adds nothing).
* The rest are authorized (ALTER_CONFIGS: on the cluster for BROKER and CLIENT_METRICS, on the
  topic for TOPIC) and then judged one by one, all or nothing per resource: SET, DELETE, and for
  LIST-typed keys APPEND/SUBTRACT against the current value or the schema default; the resulting
  config set is validated (topic name and LogConfig rules for topics, a broker name that is ""
  or a non-negative integer for brokers, KIP-714's rules for client-metrics subscriptions), then
  the resource must exist (a topic, a registered broker or a controller).
* Broker configs are not validated on the controller: a forwarding broker validates them before
  forwarding, and Kafka's controller only checks the broker name. Neither do we.
* A ConfigRecord is written for every changed key, and for every key of a BROKER resource even
  when unchanged (KAFKA-14136: brokers reload on it). Within a resource the records follow Java's
  HashMap order of the config names, as Kafka's do. Resources are answered in request order
  after the request-level refusals (Kafka's order there is HashMap order of ConfigResource, which
  depends on Java identity hash codes, i.e. it is not reproducible even run to run).
* One atomic batch; more than 10,000 records fails the whole request with POLICY_VIOLATION.
* With ELR on (4.x), a ClearElrRecord follows the batch's records for each min.insync.replicas
  record (the topic's, or every topic's for a BROKER resource), and a broker-level
  min.insync.replicas, or removing the cluster-level one, is INVALID_CONFIG (managers/elr.py).

AlterConfigs (legacy) replaces a resource's whole config set: every key it names is SET (a null
value removes it), and every current key it does not name is deleted. It shares the rest, with
two differences Kafka has: BROKER_LOGGER is not special (INVALID_REQUEST "Unexpected resource
type BROKER_LOGGER." at authorization), and the implicit deletions follow the explicit records.
Kafka orders those deletions by its timeline hash table, whose layout depends on the history of
the resource's keys; kraftsim writes them in the image's order (docs/differences.md).

An unknown ConfigOperation code makes Kafka's controller throw a NullPointerException inside
the event: a fault (UNKNOWN_SERVER_ERROR, the controller renounces). We raise the same kind of
fault, on purpose.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Final

from kraftsim.controller.configs.runtime_loggers import RuntimeLoggerManager
from kraftsim.controller.configs.topic_config_resolver import TopicConfigResolver
from kraftsim.controller.context import ControllerContext
from kraftsim.controller.java.hash_order import hash_order
from kraftsim.controller.java.strings import java_split, parse_java_int
from kraftsim.controller.managers.elr import clear_elr_records, disallowed_min_isr_change
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.controller.write_path import check_record_count
from kraftsim.metadata import topic_names
from kraftsim.metadata.authorizer.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kraftsim.metadata.config_defs.topic import TopicConfigKey, topic_configs
from kraftsim.metadata.image.configs import BROKER, BROKER_LOGGER, CLIENT_METRICS, TOPIC
from kraftsim.metadata.messages import ConfigRecord
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode, generic_message
from kraftsim.rpc.messages import AlterConfigsResponse, IncrementalAlterConfigsResponse

if TYPE_CHECKING:
    from kraftsim.rpc.messages import AlterConfigsRequest, IncrementalAlterConfigsRequest

ResourceResponse = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
LegacyResourceResponse = AlterConfigsResponse.AlterConfigsResourceResponse

# AlterConfigOp.OpType
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OP_NAMES: Final = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}
# ConfigResource.Type ids Kafka 3.9 knows; anything else is UNKNOWN.
KNOWN_TYPES: Final = frozenset({TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS})

# KafkaConfig's LIST-typed keys and their defaults (ConfigDef.convertToString; None: no default):
# the only broker configs APPEND and SUBTRACT accept, and what they start from when unset.
BROKER_LIST_CONFIGS: Final[dict[str, str | None]] = {
    "controller.quorum.bootstrap.servers": "",
    "controller.quorum.voters": "",
    "group.consumer.assignors": "org.apache.kafka.coordinator.group.assignor.UniformAssignor,"
                                "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
    "group.coordinator.rebalance.protocols": "classic",
    "kafka.metrics.reporters": "",
    "log.cleanup.policy": "delete",
    "metric.reporters": "",
    "process.roles": "",
    "sasl.enabled.mechanisms": "GSSAPI",
    "sasl.kerberos.principal.to.local.rules": "DEFAULT",
    "sasl.oauthbearer.expected.audience": None,
    "ssl.cipher.suites": "",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "zookeeper.ssl.cipher.suites": None,
    "zookeeper.ssl.enabled.protocols": None,
}

# The broker config listing a broker's cordoned log directories (4.3+, KIP-1066), split as
# ConfigurationControlManager splits it.
CORDONED_LOG_DIRS: Final = "cordoned.log.dirs"
_COMMA_WITH_WHITESPACE: Final = re.compile(r"\s*,\s*")

# ClientMetricsConfigs (KIP-714)
CLIENT_METRICS_KEYS: Final = ("metrics", "interval.ms", "match")
CLIENT_MATCH_PARAMS: Final = frozenset({"client_instance_id", "client_id", "client_software_name",
                                        "client_software_version", "client_source_address", "client_source_port"})

class ConfigurationControlManager:
    """Dynamic configs of topics, brokers (and the cluster default, ""), client-metrics
    subscriptions; and this process's log levels (BROKER_LOGGER)."""

    def __init__(self, ctx: ControllerContext, loggers: RuntimeLoggerManager | None = None) -> None:
        self.ctx = ctx
        self.loggers = loggers if loggers is not None else RuntimeLoggerManager(ctx.node_id)

    def routes(self) -> list[Route]:
        return [Route(Api.INCREMENTAL_ALTER_CONFIGS, "incrementalAlterConfigs", self.incremental_alter_configs),
                Route(Api.ALTER_CONFIGS, "legacyAlterConfigs", self.legacy_alter_configs)]

    # ----- IncrementalAlterConfigs ---------------------------------------------------------------

    def incremental_alter_configs(self, request: IncrementalAlterConfigsRequest,
                                  context: RequestContext) -> ControllerResult[IncrementalAlterConfigsResponse]:
        validate_only = bool(request.validate_only)
        responses: list[IncrementalAlterConfigsResponse.AlterConfigsResourceResponse] = []
        logger_responses: list[IncrementalAlterConfigsResponse.AlterConfigsResourceResponse] = []
        changes: dict[tuple[int, str], dict[str, tuple[int, str | None]]] = {}
        duplicates: set[tuple[int, str]] = set()
        for res in request.resources:
            rtype, rname = res.resource_type, res.resource_name
            if rtype == BROKER_LOGGER:
                err = self.loggers.apply(context, res, validate_only, self.ctx.authorizer)
                logger_responses.append(_response(rtype, rname, err, fallback=True))
            elif rtype not in KNOWN_TYPES:
                responses.append(_response(rtype, rname, ApiError(ErrorCode.UNSUPPORTED_VERSION,
                                                                  f"Unknown resource type {rtype}.")))
            elif (rtype, rname) not in duplicates:
                by_name: dict[str, tuple[int, str | None]] = {}
                for c in res.configs:  # a HashMap keyed by name: the last operation on a key wins
                    by_name[c.name] = (c.config_operation, c.value)
                if (rtype, rname) in changes:
                    duplicates.add((rtype, rname))
                    del changes[(rtype, rname)]
                    responses.append(_response(rtype, rname, ApiError(ErrorCode.INVALID_REQUEST,
                                                                      "Duplicate resource.")))
                else:
                    changes[(rtype, rname)] = by_name
        for resource in list(changes):
            err = self._authorize(context, resource)
            if err is not None:
                responses.append(_response(*resource, err))
                del changes[resource]

        records: list[RecordAndVersion] = []
        for resource, ops in changes.items():
            try:
                records.extend(self.alter_resource(resource, ops, context.from_envelope))
                responses.append(_response(*resource, None))
            except ApiError as e:
                responses.append(_response(*resource, e))
            check_record_count(len(records))  # Kafka's BoundedList: the whole request fails
        records.extend(clear_elr_records(self.ctx, records))
        check_record_count(len(records))
        responses.extend(logger_responses)
        return ControllerResult([] if validate_only else records,
                                IncrementalAlterConfigsResponse(responses=responses), atomic=True)

    # ----- AlterConfigs (legacy) ----------------------------------------------------------------

    def legacy_alter_configs(self, request: AlterConfigsRequest,
                             context: RequestContext) -> ControllerResult[AlterConfigsResponse]:
        responses: list[AlterConfigsResponse.AlterConfigsResourceResponse] = []
        changes: dict[tuple[int, str], dict[str, str | None]] = {}
        duplicates: set[tuple[int, str]] = set()
        for res in request.resources:
            rtype, rname = res.resource_type, res.resource_name
            if rtype not in KNOWN_TYPES:
                responses.append(_legacy_response(rtype, rname, ApiError(ErrorCode.UNSUPPORTED_VERSION,
                                                                        f"Unknown resource type {rtype}.")))
            elif (rtype, rname) not in duplicates:
                if (rtype, rname) in changes:
                    duplicates.add((rtype, rname))
                    del changes[(rtype, rname)]
                    responses.append(_legacy_response(rtype, rname, ApiError(ErrorCode.INVALID_REQUEST,
                                                                            "Duplicate resource.")))
                else:
                    changes[(rtype, rname)] = {c.name: c.value for c in res.configs}
        for resource in list(changes):
            err = self._authorize(context, resource)
            if err is not None:
                responses.append(_legacy_response(*resource, err))
                del changes[resource]

        records: list[RecordAndVersion] = []
        for resource, configs in changes.items():
            try:
                records.extend(self.replace_resource(resource, configs, context.from_envelope))
                responses.append(_legacy_response(*resource, None))
            except ApiError as e:
                responses.append(_legacy_response(*resource, e))
            check_record_count(len(records))
        records.extend(clear_elr_records(self.ctx, records))
        check_record_count(len(records))
        return ControllerResult([] if request.validate_only else records,
                                AlterConfigsResponse(responses=responses), atomic=True)

    def replace_resource(self, resource: tuple[int, str], configs: dict[str, str | None],
                         forwarded: bool = False) -> list[tuple[ConfigRecord, int]]:
        """legacyAlterConfigResource: the records that make ``configs`` the resource's whole set."""
        rtype, rname = resource
        current = self.ctx.image.configs.get(rtype, rname)
        altered: list[tuple[ConfigRecord, int]] = [
            (ConfigRecord(resource_type=rtype, resource_name=rname, name=key, value=configs[key]), 0)
            for key in hash_order(configs) if configs[key] != current.get(key) or rtype == BROKER]
        deleted: list[tuple[ConfigRecord, int]] = [
            (ConfigRecord(resource_type=rtype, resource_name=rname, name=key, value=None), 0)
            for key in current if key not in configs]
        self._check_cordoned(current, altered + deleted, forwarded)
        self.validate(resource, current, altered + deleted)
        return altered + deleted

    def _authorize(self, context: RequestContext, resource: tuple[int, str]) -> ApiError | None:
        rtype, rname = resource
        authorizer = self.ctx.authorizer
        if rtype == BROKER_LOGGER:  # only the legacy API gets here (ControllerApis.authorizeAlterResource)
            return ApiError(ErrorCode.INVALID_REQUEST, "Unexpected resource type BROKER_LOGGER.")
        if rtype == TOPIC:
            if not authorizer.authorize(context, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, rname):
                return ApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
        elif not authorizer.authorize(context, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
            return ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        return None

    def alter_resource(self, resource: tuple[int, str], ops: dict[str, tuple[int, str | None]],
                       forwarded: bool = False) -> list[tuple[ConfigRecord, int]]:
        """incrementalAlterConfigResource: the resource's records, or ApiError for the resource."""
        rtype, rname = resource
        current = self.ctx.image.configs.get(rtype, rname)
        records: list[tuple[ConfigRecord, int]] = []
        for key in hash_order(ops):
            op, value = ops[key]
            old = current.get(key)
            if op == SET:
                new = value
            elif op == DELETE:
                new = None
            elif op in (APPEND, SUBTRACT):
                new = self._append_or_subtract(rtype, key, old, op, value)
            else:
                # OpType.forId gives null and Kafka's switch on it throws: a fault, not an ApiError.
                raise RuntimeError(f"Unknown config operation {op} for {key}")
            if new != old or rtype == BROKER:
                records.append((ConfigRecord(resource_type=rtype, resource_name=rname, name=key, value=new), 0))
        self._check_cordoned(current, records, forwarded)
        self.validate(resource, current, records)
        return records

    def _append_or_subtract(self, rtype: int, key: str, old: str | None, op: int, value: str | None) -> str:
        defs = topic_configs(self.ctx.release.line)
        if not _is_list(defs, rtype, key):
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Can't {OP_NAMES[op]} to key {key} because its type is not LIST.")
        if value is None:
            raise RuntimeError(f"{OP_NAMES[op]} of {key} without a value")  # Java: NPE in the event
        base = old if old is not None else _default(defs, rtype, key)
        parts = [] if base is None else [p for p in java_split(base) if p]  # getParts
        for v in java_split(value):
            if op == APPEND:
                if v not in parts:
                    parts.append(v)
            elif v in parts:
                parts.remove(v)
        return ",".join(parts)

    def _check_cordoned(self, current: dict[str, str], records: list[tuple[ConfigRecord, int]],
                        forwarded: bool) -> None:
        """4.3+ (KIP-1066), record by record before the resource is validated: a broker's
        ``cordoned.log.dirs`` needs 4.3-IV0, and set on a controller directly (not forwarded by
        a broker, which checks the paths itself) it may only shrink to a subset of its value."""
        release = self.ctx.release
        if not release.knows_cordoned_log_dirs:
            return
        for rec, _ in records:
            if rec.name != CORDONED_LOG_DIRS or rec.resource_type != BROKER:
                continue
            if not release.cordoned_log_dirs_supported(self.ctx.image.metadata_version):
                raise ApiError(ErrorCode.INVALID_CONFIG, f"The {CORDONED_LOG_DIRS} configuration value cannot be set "
                                                         f"because it requires metadata.version >= 4.3-IV0")
            if forwarded or rec.value is None or not rec.value.strip():
                continue
            old = current.get(CORDONED_LOG_DIRS)
            old_dirs = [] if old is None else _COMMA_WITH_WHITESPACE.split(old.strip())
            if not all(d in old_dirs for d in _COMMA_WITH_WHITESPACE.split(rec.value.strip())):
                raise ApiError(ErrorCode.INVALID_CONFIG, f"When updating {CORDONED_LOG_DIRS} via controllers,  the "
                                                         f"new value must be a subset of the current configuration "
                                                         f"value.")

    # ----- validation (ControllerConfigurationValidator + the existence checker) ----------------

    def validate(self, resource: tuple[int, str], existing: dict[str, str],
                 records: list[tuple[ConfigRecord, int]]) -> None:
        rtype, rname = resource
        configs = dict(existing)
        for rec, _ in records:
            refused = disallowed_min_isr_change(self.ctx, rec)
            if refused is not None:
                raise refused
            if rec.value is None:
                configs.pop(rec.name, None)
            else:
                configs[rec.name] = rec.value
        if rtype == TOPIC:
            if not rname:
                raise ApiError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
            reason = topic_names.invalid_reason(rname)
            if reason is not None:
                raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")
            TopicConfigResolver(self.ctx).validate_all(configs, existing)
            if rname not in self.ctx.image.topics.by_name:
                raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{rname}' does not exist.")
        elif rtype == BROKER:
            if rname:
                node = parse_java_int(rname)
                if node is None:
                    raise ApiError(ErrorCode.INVALID_REQUEST, "Unable to parse broker name as a base 10 number.")
                if node < 0:
                    raise ApiError(ErrorCode.INVALID_REQUEST, "Invalid negative broker ID.")
                if node not in self.ctx.image.cluster.brokers and node not in self.ctx.voters:
                    raise ApiError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"No node with id {node} found.")
        elif rtype == CLIENT_METRICS:
            validate_client_metrics(rname, configs)


def validate_client_metrics(name: str, configs: dict[str, str]) -> None:
    """ClientMetricsConfigs.validate (KIP-714 subscriptions)."""
    if not name:
        raise ApiError(ErrorCode.INVALID_REQUEST, "Subscription name can't be empty")
    for key in configs:
        if key not in CLIENT_METRICS_KEYS:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Unknown client metrics configuration: {key}")
    if "interval.ms" in configs:
        interval = parse_java_int(configs["interval.ms"])
        if interval is None:  # NumberFormatException: neither an ApiException nor a ConfigException
            raise ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, None)
        if not 100 <= interval <= 3_600_000:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Invalid value {interval} for interval.ms, interval must be "
                                                      f"between 100 and 3600000 (1 hour)")
    if "match" in configs:
        for pattern in java_split(configs["match"]):
            pair = java_split(pattern, "=")
            ok = len(pair) == 2 and pair[0].strip() in CLIENT_MATCH_PARAMS
            if ok:
                try:
                    re.compile(pair[1].strip())
                except re.error:
                    ok = False
            if not ok:
                raise ApiError(ErrorCode.INVALID_CONFIG, f"Illegal client matching pattern: {pattern}")


def _is_list(defs: dict[str, TopicConfigKey], rtype: int, key: str) -> bool:
    """KafkaConfigSchema.isSplittable: only topic and broker configs have a schema."""
    if rtype == TOPIC:
        k = defs.get(key)
        return k is not None and k.type == "LIST"
    if rtype == BROKER:
        return key in BROKER_LIST_CONFIGS
    return False


def _default(defs: dict[str, TopicConfigKey], rtype: int, key: str) -> str | None:
    if rtype == TOPIC:
        return defs[key].default
    return BROKER_LIST_CONFIGS.get(key)


def _legacy_response(rtype: int, rname: str, err: ApiError | None) -> AlterConfigsResponse.AlterConfigsResourceResponse:
    return LegacyResourceResponse(error_code=0 if err is None else int(err.code),
                                  error_message=None if err is None else err.message,
                                  resource_type=rtype, resource_name=rname)


def _response(rtype: int, rname: str, err: ApiError | None,
              fallback: bool = False) -> IncrementalAlterConfigsResponse.AlterConfigsResourceResponse:
    """A resource's result. ``fallback``: the BROKER_LOGGER path puts the error's default message
    where there is none (ApiError.messageWithFallback)."""
    if err is None:
        return ResourceResponse(error_code=0, error_message=None, resource_type=rtype, resource_name=rname)
    message = err.message
    if message is None and fallback:
        message = generic_message(err.code)
    return ResourceResponse(error_code=int(err.code), error_message=message, resource_type=rtype, resource_name=rname)

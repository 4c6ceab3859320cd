"""DescribeConfigsManager: DescribeConfigs (api 32), as a Kafka 3.9 controller answers it.

Kafka's ``ControllerApis`` answers from its metadata cache and its own KafkaConfig
(``ConfigHelper``), writing nothing:

* Each resource is authorized first (DESCRIBE_CONFIGS on the topic for TOPIC, on the cluster for
  BROKER, BROKER_LOGGER and CLIENT_METRICS); refused ones come after the others, in request
  order, with TOPIC_/CLUSTER_AUTHORIZATION_FAILED and the error's default message. Any other
  resource type fails the whole request with INVALID_REQUEST.
* TOPIC: a legal name of an existing topic, else INVALID_TOPIC_EXCEPTION / UNKNOWN_TOPIC_OR_PARTITION.
  Every topic config with its value (the topic's own, else this node's broker-level one), source
  and synonyms (the topic's own setting, then the broker synonyms layer by layer).
* BROKER: this node's id lists every KafkaConfig definition and whatever else the node was
  configured with; "" lists the cluster-default dynamic configs; any other id is INVALID_REQUEST.
  Passwords, and configs of unknown type, are sensitive: no value.
* BROKER_LOGGER: this process's loggers and levels; CLIENT_METRICS: the subscription's configs.
* A resource's configs come in Scala HashMap order, as Kafka's do; ConfigurationKeys (if any)
  filters them (not for CLIENT_METRICS, which Kafka lists whole).
* Documentation is always null: kraftsim carries no config documentation (docs/differences.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Final

from kraftsim.controller.configs.dynamic_broker_config import DYNAMIC_DEFAULT_BROKER_CONFIG, BrokerConfigView
from kraftsim.controller.configs.runtime_loggers import RuntimeLoggerManager
from kraftsim.controller.context import ControllerContext
from kraftsim.controller.java.hash_order import hash_map_order, hash_order, scala_hash_map_order
from kraftsim.controller.java.strings import parse_java_int
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.metadata import topic_names
from kraftsim.metadata.authorizer.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from kraftsim.metadata.config_defs.broker import CONFIG_TYPE_IDS, UNKNOWN_TYPE, config_type, is_dynamic, maybe_sensitive
from kraftsim.metadata.config_defs.topic import (
    DEFAULT_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    convert_to_string,
    parse_type,
    topic_configs,
)
from kraftsim.metadata.image.configs import BROKER, BROKER_LOGGER, CLIENT_METRICS, TOPIC
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode, from_throwable_message, generic_message
from kraftsim.rpc.messages import DescribeConfigsResponse

if TYPE_CHECKING:
    from kraftsim.rpc.messages import DescribeConfigsRequest

    Resource = DescribeConfigsRequest.DescribeConfigsResource

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
Synonym = DescribeConfigsResponse.DescribeConfigsSynonym

DYNAMIC_BROKER_LOGGER_CONFIG: Final = 6
CLIENT_METRICS_CONFIG: Final = 7

EntryBuilder = Callable[[str], Entry]


def whole_request_error(request: DescribeConfigsRequest, version: int, code: int,
                        message: str | None) -> DescribeConfigsResponse:
    """DescribeConfigsRequest.getErrorResponse: every resource with the code and its default message."""
    return DescribeConfigsResponse(results=[
        Result(error_code=code, error_message=generic_message(code), resource_type=r.resource_type,
               resource_name=r.resource_name, configs=[])
        for r in request.resources])


class DescribeConfigsManager:
    """Reads configs for clients talking to the controller; owns no state."""

    def __init__(self, ctx: ControllerContext, loggers: RuntimeLoggerManager) -> None:
        self.ctx = ctx
        self.loggers = loggers

    def routes(self) -> list[Route]:
        return [Route(Api.DESCRIBE_CONFIGS, "describeConfigs", self.describe_configs, mutating=False,
                      error=whole_request_error)]

    def describe_configs(self, request: DescribeConfigsRequest,
                         context: RequestContext) -> ControllerResult[DescribeConfigsResponse]:
        allowed: list[Resource] = []
        refused: list[Resource] = []
        for res in request.resources:
            (allowed if self._authorized(context, res) else refused).append(res)
        synonyms = bool(request.include_synonyms)  # documentation: always null (module docstring)
        # One view of this node's broker config for the whole request, as Kafka reads one KafkaConfig.
        view = BrokerConfigView(self.ctx) if any(r.resource_type in (TOPIC, BROKER) for r in allowed) else None
        # A resource named again is answered again with the same result: the work of a request
        # grows with the distinct resources it names, not with its length.
        done: dict[tuple[int, str, tuple[str, ...] | None], Result] = {}
        results: list[Result] = []
        for res in allowed:
            key = (res.resource_type, res.resource_name,
                   None if res.configuration_keys is None else tuple(res.configuration_keys))
            if key not in done:
                done[key] = self._describe(res, synonyms, view)
            results.append(done[key])
        for res in refused:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED if res.resource_type == TOPIC \
                else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            results.append(Result(error_code=code, error_message=generic_message(code), configs=[],
                                  resource_type=res.resource_type, resource_name=res.resource_name))
        return ControllerResult([], DescribeConfigsResponse(results=results))

    def _authorized(self, context: RequestContext, res: Resource) -> bool:
        authorizer = self.ctx.authorizer
        if res.resource_type in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
            return authorizer.authorize(context, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
        if res.resource_type == TOPIC:
            return authorizer.authorize(context, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, res.resource_name)
        raise ApiError(ErrorCode.INVALID_REQUEST, f"Unexpected resource type {res.resource_type}")

    def _describe(self, res: Resource, include_synonyms: bool, view: BrokerConfigView | None) -> Result:
        rtype, name = res.resource_type, res.resource_name
        try:
            if rtype == TOPIC:
                assert view is not None
                configs = self._topic(name, res.configuration_keys, include_synonyms, view)
            elif rtype == BROKER:
                assert view is not None
                configs = self._broker(name, res.configuration_keys, include_synonyms, view)
            elif rtype == BROKER_LOGGER:
                configs = self._logger(name, res.configuration_keys)
            else:
                configs = self._client_metrics(name)
        except ApiError as e:
            return Result(error_code=e.code, error_message=from_throwable_message(e.code, e.message),
                          resource_type=rtype, resource_name=name, configs=[])
        # Kafka leaves ErrorMessage unset here: the schema's default, "" (not null).
        if configs is None:
            return Result(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message="",
                          resource_type=rtype, resource_name=name, configs=[])
        return Result(error_code=0, error_message="", resource_type=rtype, resource_name=name, configs=configs)

    @staticmethod
    def _listed(names: Iterable[str], keys: list[str] | None, entry: EntryBuilder,
                in_order: bool = False) -> list[Entry]:
        """ConfigHelper.createResponseConfig: all configs, or those ``keys`` names, in the order
        of the Scala map holding them. ``in_order`` (4.2+, ConfigHelperUtils): ``names`` are a
        stream already in order, which ``keys`` filters without re-ordering."""
        if in_order:
            wanted = set(keys or ())
            return [entry(n) for n in names if not wanted or n in wanted]
        ordered = scala_hash_map_order(names)
        if keys:
            wanted = set(keys)
            ordered = scala_hash_map_order(n for n in ordered if n in wanted)
        return [entry(n) for n in ordered]

    # ----- TOPIC ---------------------------------------------------------------------------------

    def _topic(self, name: str, keys: list[str] | None, include_synonyms: bool,
               view: BrokerConfigView) -> list[Entry] | None:
        reason = topic_names.invalid_reason(name)
        if reason is not None:
            raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")
        if name not in self.ctx.image.topics.by_name:
            return None
        own = self.ctx.image.configs.get(TOPIC, name)

        defs = topic_configs(self.ctx.release.line)

        def entry(config: str) -> Entry:
            key = defs.get(config)
            if key is None:  # set on the topic, not a topic config: of unknown type, so hidden
                hidden = [(config, None, DYNAMIC_TOPIC_CONFIG)] if include_synonyms else []
                return _entry(config, None, DYNAMIC_TOPIC_CONFIG, True, False, hidden, None)
            raw = own[config] if config in own else view.topic_default(key)
            try:
                value = convert_to_string(parse_type(config, key.type, raw), key.type)
            except ApiError:
                value = raw
            syns = [] if not key.synonyms else view.synonyms(key.synonyms[0][0], False)
            if config in own:
                syns.insert(0, (config, value, DYNAMIC_TOPIC_CONFIG))
            source = syns[0][2] if syns else DEFAULT_CONFIG
            return _entry(config, value, source, False, False, syns if include_synonyms else [], key.type)

        if view.lists_in_stream_order:
            # LogConfig's originals set on the topic that are not topic configs, in the order of a
            # HashMap of them, then its non-internal values (nonInternalValues: the parsed values'
            # HashMap refilled; the tables are of one size, so a bucket keeps definition order).
            undefined = hash_map_order(n for n in own if n not in defs)
            return self._listed([*undefined, *hash_order(defs)], keys, entry, in_order=True)
        return self._listed([*own, *defs], keys, entry)

    # ----- BROKER --------------------------------------------------------------------------------

    def _node_id(self, name: str) -> int:
        node = parse_java_int(name)
        if node is None:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}")
        return node

    def _broker(self, name: str, keys: list[str] | None, include_synonyms: bool,
                view: BrokerConfigView) -> list[Entry]:
        per_broker = bool(name)
        if per_broker and self._node_id(name) != self.ctx.node_id:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {self.ctx.node_id} or empty "
                                                      f"string, but received {name}")

        def entry(config: str) -> Entry:
            ctype = config_type(config, view.release)
            sensitive = maybe_sensitive(ctype)
            if per_broker:
                value = view.value(config)
                syns = view.synonyms(config, sensitive)
            else:
                value = view.cluster.get(config)
                syns = [s for s in view.synonyms(config, sensitive) if s[2] == DYNAMIC_DEFAULT_BROKER_CONFIG]
            source = syns[0][2] if syns else DEFAULT_CONFIG
            return _entry(config, None if sensitive else value, source, sensitive, not is_dynamic(config, view.release),
                          syns if include_synonyms else [], ctype)

        if view.lists_in_stream_order:  # the cluster default: its Scala map's order, as a stream
            names = view.listed_in_order() if per_broker else scala_hash_map_order(view.cluster)
            return self._listed(names, keys, entry, in_order=True)
        return self._listed(view.listed_names() if per_broker else view.cluster, keys, entry)

    # ----- BROKER_LOGGER, CLIENT_METRICS ---------------------------------------------------------

    def _logger(self, name: str, keys: list[str] | None) -> list[Entry]:
        if not name:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
        if self._node_id(name) != self.ctx.node_id:
            raise ApiError(ErrorCode.INVALID_REQUEST,
                           f"Unexpected broker id, expected {self.ctx.node_id} but received {name}")
        levels = self.loggers.levels()
        return self._listed(levels, keys, lambda n: Entry(
            name=n, value=levels[n], read_only=False, config_source=DYNAMIC_BROKER_LOGGER_CONFIG,
            is_sensitive=False, synonyms=[], config_type=0, documentation=None))

    def _client_metrics(self, name: str) -> list[Entry]:
        if not name:
            raise ApiError(ErrorCode.INVALID_REQUEST, "Client metrics subscription name must not be empty")
        configs = self.ctx.image.configs.get(CLIENT_METRICS, name)
        return [Entry(name=n, value=configs[n], read_only=False, config_source=CLIENT_METRICS_CONFIG,
                      is_sensitive=False, synonyms=[], config_type=0, documentation=None)
                for n in hash_map_order(configs)]


def _entry(name: str, value: str | None, source: int, sensitive: bool, read_only: bool,
           synonyms: Sequence[tuple[str, str | None, int]], ctype: str | None) -> Entry:
    return Entry(name=name, value=value, read_only=read_only, config_source=source, is_sensitive=sensitive,
                 synonyms=[Synonym(name=n, value=v, source=s) for n, v, s in synonyms],
                 config_type=UNKNOWN_TYPE if ctype is None else CONFIG_TYPE_IDS.get(ctype, UNKNOWN_TYPE),
                 documentation=None)

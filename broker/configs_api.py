"""DescribeConfigs (v0-4), answered by the broker itself as Kafka's ConfigHelper does: it is not a
forwardable API, a broker reads the configs from its replayed metadata.

A simulated broker has no ``server.properties`` of its own, so a topic config that the topic
does not set takes its value from the dynamic broker configs in the log (this broker's, then the
cluster default, through Kafka's synonyms) or else Kafka's default, with the matching source.
Topic config definitions (names, types, defaults, synonyms) are the controller's table of
Kafka 3.9's LogConfig. A BROKER resource lists the dynamic configs the log holds for it (a
Kafka broker would also list its several hundred static configs, which a simulated broker does
not have); BROKER_LOGGER lists no loggers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kraftsim.metadata.config_defs.topic import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    TopicConfigKey,
    topic_configs,
)
from kraftsim.metadata.image.configs import BROKER, BROKER_LOGGER, TOPIC
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.topic_names import invalid_reason
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import DescribeConfigsResponse

if TYPE_CHECKING:
    from kraftsim.rpc.messages import DescribeConfigsRequest

    Resource = DescribeConfigsRequest.DescribeConfigsResource

CLIENT_METRICS = 16
DYNAMIC_BROKER_LOGGER_CONFIG, CLIENT_METRICS_CONFIG = 6, 7
CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "CLASS": 8,
                "PASSWORD": 9}
R = DescribeConfigsResponse


def _convert(value: str, multiplier: int) -> str:
    if multiplier == 1:
        return value
    try:
        return str(int(value.strip()) * multiplier)
    except ValueError:
        return "0"


def describe_configs(image: MetadataImage, broker_id: int, fleet_ids: range, version: int,
                     req: DescribeConfigsRequest) -> DescribeConfigsResponse:
    results: list[DescribeConfigsResponse.DescribeConfigsResult] = []
    for res in req.resources:
        try:
            result = _describe(image, broker_id, fleet_ids, version, res, req.include_synonyms if version >= 1 else False)
        except _Invalid as e:
            result = R.DescribeConfigsResult(error_code=e.code, error_message=e.message, configs=[])
        result.resource_type = res.resource_type
        result.resource_name = res.resource_name
        results.append(result)
    return R(throttle_time_ms=0, results=results)


class _Invalid(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _wanted(res: Resource, name: str) -> bool:
    keys = res.configuration_keys
    return not keys or name in keys


def _describe(image: MetadataImage, broker_id: int, fleet_ids: range, version: int, res: Resource,
              synonyms: bool) -> DescribeConfigsResponse.DescribeConfigsResult:
    rtype, name = res.resource_type, res.resource_name
    configs = image.configs
    if rtype == TOPIC:
        reason = invalid_reason(name)
        if reason is not None:
            raise _Invalid(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")
        if name not in image.topics.by_name:
            return R.DescribeConfigsResult(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, configs=[])
        topic = configs.get(TOPIC, name)
        node = configs.get(BROKER, str(broker_id))
        cluster = configs.get(BROKER, "")
        entries = [_topic_entry(key, topic, node, cluster, version, synonyms)
                   for n, key in sorted(topic_configs(image.release.line).items()) if _wanted(res, n)]
        return R.DescribeConfigsResult(error_code=ErrorCode.NONE, configs=entries)
    if rtype == BROKER:
        if not name:
            layer = configs.get(BROKER, "")
            entries = [_plain(k, v, DYNAMIC_DEFAULT_BROKER_CONFIG, version, synonyms)
                       for k, v in sorted(layer.items()) if _wanted(res, k)]
            return R.DescribeConfigsResult(error_code=ErrorCode.NONE, configs=entries)
        if not name.strip().lstrip("-").isdigit() or int(name) not in fleet_ids:
            raise _Invalid(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {broker_id} or empty string, "
                                                      f"but received {name}")
        node, cluster = configs.get(BROKER, name), configs.get(BROKER, "")
        merged = {**{k: (v, DYNAMIC_DEFAULT_BROKER_CONFIG) for k, v in cluster.items()},
                  **{k: (v, DYNAMIC_BROKER_CONFIG) for k, v in node.items()}}
        entries = [_plain(k, v, src, version, synonyms, cluster.get(k) if src == DYNAMIC_BROKER_CONFIG else None)
                   for k, (v, src) in sorted(merged.items()) if _wanted(res, k)]
        return R.DescribeConfigsResult(error_code=ErrorCode.NONE, configs=entries)
    if rtype == BROKER_LOGGER:
        if not name:
            raise _Invalid(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
        return R.DescribeConfigsResult(error_code=ErrorCode.NONE, configs=[])
    if rtype == CLIENT_METRICS:
        if not name:
            raise _Invalid(ErrorCode.INVALID_REQUEST, "Client metrics subscription name must not be empty")
        entries = [_plain(k, v, CLIENT_METRICS_CONFIG, version, False)
                   for k, v in configs.get(CLIENT_METRICS, name).items()]
        return R.DescribeConfigsResult(error_code=ErrorCode.NONE, configs=entries)
    raise _Invalid(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {rtype}")


def _topic_entry(key: TopicConfigKey, topic: dict[str, str], node: dict[str, str], cluster: dict[str, str],
                 version: int, include_synonyms: bool) -> DescribeConfigsResponse.DescribeConfigsResourceResult:
    """ConfigHelper.createTopicConfigEntry: the value in force and its synonyms, highest first.
    Kafka ends the synonyms with the broker config's own default (e.g. log.retention.hours=168,
    DEFAULT_CONFIG); kraftsim has the topic configs' defaults but not the broker configs', so the
    list stops before it."""
    chain: list[tuple[str, str, int]] = []
    if key.name in topic:
        chain.append((key.name, topic[key.name], DYNAMIC_TOPIC_CONFIG))
    for layer, source in ((node, DYNAMIC_BROKER_CONFIG), (cluster, DYNAMIC_DEFAULT_BROKER_CONFIG)):
        for syn, _ in key.synonyms:
            if syn in layer:
                chain.append((syn, layer[syn], source))
    if chain and chain[0][2] == DYNAMIC_TOPIC_CONFIG:
        value, source = chain[0][1], DYNAMIC_TOPIC_CONFIG
    elif chain:
        mult = dict(key.synonyms)[chain[0][0]]
        value, source = _convert(chain[0][1], mult), chain[0][2]
    else:
        value, source = key.default, DEFAULT_CONFIG
    entry = R.DescribeConfigsResourceResult(name=key.name, value=value, read_only=False, is_sensitive=False,
                                            config_source=source, config_type=CONFIG_TYPES.get(key.type, 0))
    if version == 0:
        entry.is_default = source == DEFAULT_CONFIG
    if include_synonyms:
        entry.synonyms = [R.DescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in chain]
    return entry


def _plain(name: str, value: str, source: int, version: int, include_synonyms: bool,
           below: str | None = None) -> DescribeConfigsResponse.DescribeConfigsResourceResult:
    entry = R.DescribeConfigsResourceResult(name=name, value=value, read_only=False, is_sensitive=False,
                                            config_source=source, config_type=0)
    if version == 0:
        entry.is_default = False
    if include_synonyms:
        entry.synonyms = [R.DescribeConfigsSynonym(name=name, value=value, source=source)]
        if below is not None:
            entry.synonyms.append(R.DescribeConfigsSynonym(name=name, value=below,
                                                           source=DYNAMIC_DEFAULT_BROKER_CONFIG))
    return entry

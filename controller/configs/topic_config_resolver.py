"""The controller's side of topic configs: LogConfig.validate on the configs a request sets
(CreateTopics, IncrementalAlterConfigs and AlterConfigs share it), and the effective value and
source of each config when a topic does not set it (the v5+ CreateTopics response,
DescribeConfigs). The definitions themselves are data in ``metadata/config_defs/topic.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kraftsim.controller.context import ControllerContext
from kraftsim.metadata.config_defs.topic import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    JAVA_INT,
    STATIC_BROKER_CONFIG,
    ConfigError,
    TopicConfigKey,
    parse_type,
    topic_configs,
)
from kraftsim.metadata.image.configs import BROKER
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import CreateTopicsResponse

CreatableTopicConfigs = CreateTopicsResponse.CreatableTopicConfigs


def _convert(value: str, multiplier: int) -> str:
    """ConfigSynonym.HOURS/MINUTES_TO_MILLISECONDS: an unparsable number counts as 0."""
    if multiplier == 1:
        return value
    s = value.strip()
    n = int(s) if JAVA_INT.fullmatch(s) and -(1 << 31) <= int(s) < (1 << 31) else 0
    return str(n * multiplier)


_TURN_OFF_REMOTE_STORAGE = (
    "It is invalid to disable remote storage without deleting remote data. If you want to keep the remote "
    "data and turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. If you "
    "want to disable remote storage and delete all remote data, please set "
    "`remote.storage.enable=false,remote.log.delete.on.disable=true`.")


def _check_local_retention(value: Callable[[str], Any], total: str, local: str,
                           limited: Callable[[int], bool]) -> None:
    """validateRemoteStorageRetentionSize/Time: local retention within the total retention."""
    tv, lv = value(total), value(local)
    if limited(tv) and lv != -2:
        if lv == -1:
            raise ConfigError(local, lv, f"Value must not be -1 as {total} value is set as {tv}.")
        if lv > tv:
            raise ConfigError(local, lv, f"Value must not be more than {total} property value: {tv}")


class TopicConfigResolver:
    """Validates creation configs (LogConfig.validate as ControllerConfigurationValidator calls
    it) and resolves effective topic configs (KafkaConfigSchema.resolveEffectiveTopicConfigs)
    against the controller's static config, dynamic cluster default and dynamic node config."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.static: dict[str, str] = dict(getattr(ctx.config, "raw", {}) or {})
        configs = ctx.image.configs
        self.cluster = configs.get(BROKER, "")
        self.node = configs.get(BROKER, str(ctx.node_id))
        self.configs = topic_configs(ctx.release.line)  # this release's topic configs
        self._sorted = sorted(self.configs)
        self._base: list[tuple[str, str, int]] | None = None
        self._base_entries: dict[str, CreatableTopicConfigs] = {}

    def broker_value(self, key: TopicConfigKey) -> tuple[str, int]:
        """The value and source a topic config has when the topic does not set it."""
        for source, layer in ((DYNAMIC_BROKER_CONFIG, self.node), (DYNAMIC_DEFAULT_BROKER_CONFIG, self.cluster),
                              (STATIC_BROKER_CONFIG, self.static)):
            for syn, mult in key.synonyms:
                if syn in layer:
                    return _convert(layer[syn], mult), source
        return key.default, DEFAULT_CONFIG

    def validate(self, topic: str, configs: dict[str, str]) -> None:
        """A new topic's configs. Only configs the request sets are checked (CreateTopics skips
        validation for a topic without any)."""
        if not configs:
            return
        self.validate_all(configs, {})

    def validate_all(self, configs: dict[str, str], existing: dict[str, str]) -> None:
        """LogConfig.validate as the controller calls it: ``configs`` is every config the topic
        will have, ``existing`` what it has now (turning remote storage off is judged on it)."""
        defs = self.configs
        for name in configs:
            if name not in defs:
                raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        parsed: dict[str, object] = {}
        for key in defs.values():
            if key.name in configs:
                v = parse_type(key.name, key.type, configs[key.name])
                if key.validator is not None:
                    key.validator(key.name, v)
                parsed[key.name] = v

        def value(name: str) -> object:
            if name in parsed:
                return parsed[name]
            key = defs[name]
            try:
                return parse_type(name, key.type, self.broker_value(key)[0])
            except ApiError:
                return parse_type(name, key.type, key.default)

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
            _check_local_retention(value, "retention.bytes", "local.retention.bytes", lambda r: r > -1)
            _check_local_retention(value, "retention.ms", "local.retention.ms", lambda r: r != -1)
            if value("remote.log.copy.disable"):
                for total, local in (("retention.bytes", "local.retention.bytes"), ("retention.ms", "local.retention.ms")):
                    lv = value(local)
                    if lv != -2 and lv != value(total):
                        raise ApiError(ErrorCode.INVALID_CONFIG,
                                       f"When `remote.log.copy.disable` is set to true, the `{local}` and "
                                       f"`{total}` must be set to the identical value because there will be no "
                                       f"more logs copied to the remote storage.")
        elif (existing.get("remote.storage.enable", "false").lower() == "true"  # Boolean.parseBoolean
              and not value("remote.log.delete.on.disable")):
            raise ApiError(ErrorCode.INVALID_CONFIG, _TURN_OFF_REMOTE_STORAGE)

    def effective_configs(self, creation: dict[str, str]) -> list[CreatableTopicConfigs]:
        """The v5+ response's Configs: every topic config sorted by name, readOnly false, none
        sensitive (no topic config is a PASSWORD). Entries not set by the topic are shared."""
        if self._base is None:
            self._base = [(n, *self.broker_value(self.configs[n])) for n in self._sorted]
            for n, v, src in self._base:
                self._base_entries[n] = CreatableTopicConfigs(name=n, value=v, read_only=False, config_source=src,
                                                              is_sensitive=False)
        if not creation:
            return [self._base_entries[n] for n in self._sorted]
        out = []
        for n in self._sorted:
            if n in creation:
                out.append(CreatableTopicConfigs(name=n, value=creation[n], read_only=False,
                                                 config_source=DYNAMIC_TOPIC_CONFIG, is_sensitive=False))
            else:
                out.append(self._base_entries[n])
        return out


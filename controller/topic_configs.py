"""Topic configs as Kafka 3.9 defines them: names, types, defaults, validators and synonyms.

LogConfig's definitions (via KafkaConfigSchema), the validation a controller applies to the
configs a request sets (CreateTopics today; IncrementalAlterConfigs and AlterConfigs share it),
and the effective value and source of each config when a topic does not set it (the v5+
CreateTopics response, DescribeConfigs). Error messages are Kafka's, byte for byte: clients
show them verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.result import ApiError
from kraftsim.metadata.image.configs import BROKER
from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.error_codes import ErrorCode

Message = Any
CreatableTopicConfigs: Any = registry.response_class(ApiKey.CREATE_TOPICS).CreatableTopicConfigs

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


def parse_type(name: str, ctype: str, raw: str) -> object:
    """ConfigDef.parseType for a string value."""
    s = raw.strip()
    if ctype in ("SHORT", "INT", "LONG"):
        bits = {"SHORT": 15, "INT": 31, "LONG": 63}[ctype]
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


def convert_to_string(v: object, ctype: str | None) -> str | None:
    """ConfigDef.convertToString of a parsed value: a list joined by commas, no spaces."""
    if v is None:
        return None
    if isinstance(v, list):
        return ",".join(str(x) for x in v)
    return _show(v)


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
        """A new topic's configs. Only configs the request sets are checked (CreateTopics skips
        validation for a topic without any)."""
        if not configs:
            return
        self.validate_all(configs, {})

    def validate_all(self, configs: dict[str, str], existing: dict[str, str]) -> None:
        """LogConfig.validate as the controller calls it: ``configs`` is every config the topic
        will have, ``existing`` what it has now (turning remote storage off is judged on it)."""
        for name in configs:
            if name not in TOPIC_CONFIGS:
                raise ApiError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
        parsed: dict[str, object] = {}
        for key in TOPIC_CONFIGS.values():
            if key.name in configs:
                v = parse_type(key.name, key.type, configs[key.name])
                if key.validator is not None:
                    key.validator(key.name, v)
                parsed[key.name] = v

        def value(name: str) -> object:
            if name in parsed:
                return parsed[name]
            key = TOPIC_CONFIGS[name]
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


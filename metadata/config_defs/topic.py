"""Topic configs as each Kafka release defines them: names, types, defaults, validators and
synonyms (Kafka 3.9's, ``TOPIC_CONFIGS``, and what later releases changed, ``topic_configs``).

LogConfig's definitions (via KafkaConfigSchema), as data every part reads: the controller
validates and resolves them (``controller/configs/topic_config_resolver.py``), the simulated
brokers describe them. Error messages are Kafka's, byte for byte: clients show them verbatim.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.error_codes import ErrorCode


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


JAVA_INT = re.compile(r"[+-]?[0-9]+")
_JAVA_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)")
_COMMA = re.compile(r"\s*,\s*")


def parse_type(name: str, ctype: str, raw: str) -> object:
    """ConfigDef.parseType for a string value."""
    s = raw.strip()
    if ctype in ("SHORT", "INT", "LONG"):
        bits = {"SHORT": 15, "INT": 31, "LONG": 63}[ctype]
        if JAVA_INT.fullmatch(s):
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

_REMOVED_IN_4_0 = frozenset({"message.format.version", "message.timestamp.difference.max.ms",
                             "message.downconversion.enable"})


@cache
def topic_configs(release: str = "3.9") -> dict[str, TopicConfigKey]:
    """The topic configs of a Kafka release (its LogConfig, in definition order). From 4.0:
    three configs gone with the old message formats, message.timestamp.after.max.ms one hour by
    default; from 4.1 segment.bytes at least 1 MiB; in 4.2 and 4.4 max.decompressed.message.bytes;
    in 4.4 the remote copy lag and the dead letter queue's. (Internal configs, such as
    internal.segment.bytes from 4.1, are never described, and are not here.)"""
    if release.startswith("3."):
        return TOPIC_CONFIGS
    minor = int(release.split(".")[1])
    out: dict[str, TopicConfigKey] = {}
    for name, key in TOPIC_CONFIGS.items():
        if name in _REMOVED_IN_4_0:
            continue
        if name == "message.timestamp.after.max.ms":
            key = _k(name, "LONG", "3600000", _at_least(0), "log.message.timestamp.after.max.ms")
        elif name == "segment.bytes" and minor >= 1:
            key = _k(name, "INT", "1073741824", _at_least(1048576), "log.segment.bytes")
        out[name] = key
        if name == "max.message.bytes" and minor in (2, 4):
            out["max.decompressed.message.bytes"] = _k("max.decompressed.message.bytes", "INT", "2147483639",
                                                       _between(1, 2147483639), "max.decompressed.message.bytes")
        if name == "remote.log.copy.disable" and minor >= 4:
            out["remote.copy.lag.ms"] = _k("remote.copy.lag.ms", "LONG", "0", _at_least(-1), "log.remote.copy.lag.ms")
            out["remote.copy.lag.bytes"] = _k("remote.copy.lag.bytes", "LONG", "-1", _at_least(-1),
                                              "log.remote.copy.lag.bytes")
    if minor >= 4:
        out["errors.deadletterqueue.group.enable"] = _k("errors.deadletterqueue.group.enable", "BOOLEAN", "false", None)
    return out


# DescribeConfigsResponse.ConfigSource ids (KafkaConfigSchema.translateConfigSource).
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5

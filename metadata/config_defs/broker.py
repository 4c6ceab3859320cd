"""KafkaConfig's definitions as each Kafka release has them: what DescribeConfigs reports for a BROKER.

Facts of each release's broker config definitions, as data read from the release's own classes
(``broker_table.py``, generated): each config's name, type, default (as ``ConfigDef.convertToString``
renders it; None: no default), and whether it is internal (never listed unless set) or dynamically
updatable (read_only false; kept when it arrives in a ConfigRecord). Beside them, the rules
DynamicBrokerConfig applies to dynamic configs: their synonyms (one config spelled in
ms/minutes/hours, a listener override and its base name), which ones may only be set per broker,
which security configs only with a listener prefix. ``broker_configs(release)`` is one release's;
``BROKER_CONFIGS`` is Kafka 3.9's (what a ZooKeeper cluster's brokers, 3.9 at most, define).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Final

from kraftsim.metadata.config_defs import broker_table

BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = (
    "BOOLEAN", "STRING", "INT", "SHORT", "LONG", "DOUBLE", "LIST", "CLASS", "PASSWORD")
# DescribeConfigsResponse.ConfigType ids; a config of unknown type is UNKNOWN (0).
CONFIG_TYPE_IDS: Final = {BOOLEAN: 1, STRING: 2, INT: 3, SHORT: 4, LONG: 5, DOUBLE: 6, LIST: 7, CLASS: 8,
                          PASSWORD: 9}
UNKNOWN_TYPE: Final = 0

STATIC, DYNAMIC, INTERNAL = "static", "dynamic", "internal"


@dataclass(frozen=True, slots=True)
class BrokerConfigDef:
    name: str
    type: str
    default: str | None
    kind: str  # STATIC, DYNAMIC or INTERNAL

    @property
    def dynamic(self) -> bool:
        return self.kind == DYNAMIC

    @property
    def internal(self) -> bool:
        return self.kind == INTERNAL


def _minor(release: str) -> tuple[int, int]:
    major, minor = release.split(".")[:2]
    return int(major), int(minor)


def _lines_through(release: str) -> list[str]:
    """The releases after 3.9 the table knows, up to and including ``release``."""
    return [r for r in broker_table.DEFINED if _minor(r) <= _minor(release)]


@cache
def broker_configs(release: str = "3.9") -> dict[str, BrokerConfigDef]:
    """A release's broker configs by name, in its definition order (ConfigDef's): 3.9's with each
    later release's changes."""
    rows = {r[0]: r for r in broker_table.ROWS_3_9}
    order = list(rows)
    for line in _lines_through(release):
        removed = set(broker_table.REMOVED[line])
        moving = {n for n, _ in broker_table.PLACED[line]}
        order = [n for n in order if n not in removed and n not in moving]
        for name, prev in broker_table.PLACED[line]:
            order.insert(0 if prev is None else order.index(prev) + 1, name)
        rows.update((r[0], r) for r in broker_table.DEFINED[line])
    return {n: BrokerConfigDef(*rows[n]) for n in order}


BROKER_CONFIGS: Final[dict[str, BrokerConfigDef]] = broker_configs("3.9")

# Broker quotas: dynamic-only configs (DynamicConfig.Broker adds them to the dynamic ones).
QUOTA_CONFIGS: Final[dict[str, BrokerConfigDef]] = {n: BrokerConfigDef(n, LONG, "9223372036854775807", DYNAMIC) for n in (
    "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second")}

# SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only with a listener prefix.
DYNAMIC_SECURITY_CONFIGS: Final = frozenset({
    "ssl.key.password", "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.keystore.type", "ssl.truststore.certificates", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.type"})
# Listener configs set once for all brokers (DynamicListenerConfig): the cluster default may hold them.
CLUSTER_LEVEL_LISTENER_CONFIGS: Final = frozenset({"max.connections", "max.connection.creation.rate",
                                                   "num.network.threads"})


@cache
def per_broker_configs(release: str = "3.9") -> frozenset[str]:
    """Dynamic configs that only a broker's own resource may set, never the cluster default ("")
    (DynamicBrokerConfig.PerBrokerConfigs: the security configs, the listener ones but those set
    cluster-wide; from 4.0 not advertised.listeners, from 4.3 cordoned.log.dirs too)."""
    found = [names for line, names in broker_table.PER_BROKER.items() if _minor(line) <= _minor(release)]
    return frozenset(found[-1])


# Listener configs of a SASL mechanism: listener.name.L.MECHANISM.NAME has NAME as its base.
_LISTENER_MECHANISM_CONFIGS: Final = ("sasl.jaas.config", "sasl.login.callback.handler.class", "sasl.login.class",
                                      "sasl.server.callback.handler.class", "connections.max.reauth.ms")
_LISTENER_CONFIG: Final = re.compile(r"listener\.name\.[^.]*\.(.*)")
_SPELLINGS: Final = (("log.roll.ms", "log.roll.hours"), ("log.roll.jitter.ms", "log.roll.jitter.hours"),
                     ("log.retention.ms", "log.retention.minutes", "log.retention.hours"))


def listener_base(name: str) -> str | None:
    """The base name of a listener override (listener.name.L.NAME), else None."""
    m = _LISTENER_CONFIG.fullmatch(name)
    return None if m is None else m.group(1)


def broker_synonyms(name: str, match_listener_override: bool = True) -> list[str]:
    """A broker config's synonyms, highest precedence first, the config itself included."""
    for group in _SPELLINGS:
        if name in group:
            return list(group)
    if name == "log.flush.interval.ms":  # the scheduler interval stands in when it is unset
        return [name, "log.flush.scheduler.interval.ms"]
    base = listener_base(name) if match_listener_override else None
    if base is not None:
        mechanism = next((m for m in _LISTENER_MECHANISM_CONFIGS if base.endswith(m)), None)
        return [name, mechanism or base]
    return [name]


def _type_of(name: str, release: str) -> str | None:
    d = broker_configs(release).get(name) or QUOTA_CONFIGS.get(name)
    return None if d is None else d.type


def config_type(name: str, release: str = "3.9") -> str | None:
    """KafkaConfig.configType: a listener override has its base config's type; None: unknown."""
    t = _type_of(name, release)
    if t is not None:
        return t
    for syn in broker_synonyms(name):
        t = _type_of(syn, release)
        if t is not None:
            return t
    return None


def maybe_sensitive(ctype: str | None) -> bool:
    """A password, or a config of unknown type (its value might be one)."""
    return ctype is None or ctype == PASSWORD


def is_dynamic(name: str, release: str = "3.9") -> bool:
    """DynamicBrokerConfig.AllDynamicConfigs: not read-only in DescribeConfigs."""
    d = broker_configs(release).get(name)
    return d is not None and d.dynamic

"""This node's broker config as Kafka's DynamicBrokerConfig sees it: four layers and their merge.

A Kafka controller keeps the cluster-default ("") and its own node's BROKER configs from the
metadata image, but only what it could apply: a config that is not dynamically updatable, a
security config without a listener prefix, a value its type cannot parse, or (at the cluster
default) a config that may only be set per broker, is dropped from the layer. Above the static
``server.properties`` and the definitions' defaults, the node's layer wins over the default
layer; setting one spelling of a config (``log.retention.hours``) removes the others below it.
DescribeConfigs reads the layers (a config's synonyms, its source) and the merged result (its
value; the broker-level values a topic falls back to).
"""

from __future__ import annotations

from typing import Final

from kraftsim.controller.configs.server_config import KEYS
from kraftsim.controller.context import ControllerContext
from kraftsim.controller.java.hash_order import capacity_for, hash_order, table_size_for
from kraftsim.metadata.config_defs.broker import (
    CLUSTER_LEVEL_LISTENER_CONFIGS,
    DYNAMIC_SECURITY_CONFIGS,
    QUOTA_CONFIGS,
    BrokerConfigDef,
    broker_configs,
    broker_synonyms,
    listener_base,
    per_broker_configs,
)
from kraftsim.metadata.config_defs.topic import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    STATIC_BROKER_CONFIG,
    TopicConfigKey,
    convert_to_string,
    parse_type,
)
from kraftsim.metadata.image.configs import BROKER
from kraftsim.rpc.api_errors import ApiError

_RETENTION_MS = "log.retention.ms"  # KafkaConfig counts any negative retention as -1


def _parses(defs: dict[str, BrokerConfigDef], name: str, value: str) -> bool:
    """DynamicConfig.Broker's type check of one dynamic config (a listener override by its base
    name); configs it does not define pass."""
    base = listener_base(name) or name
    d = defs.get(base) or QUOTA_CONFIGS.get(base)
    if d is None or not (d.dynamic or base in QUOTA_CONFIGS):
        return True
    try:
        parse_type(base, d.type, value)
    except ApiError:
        return False
    return True


def dynamic_layer(stored: dict[str, str], per_broker: bool, release: str = "3.9") -> dict[str, str]:
    """DynamicBrokerConfig.fromPersistentProps: the stored configs a node of ``release`` keeps."""
    defs = broker_configs(release)
    only_per_broker = per_broker_configs(release)
    out: dict[str, str] = {}
    for name, value in stored.items():
        if not _parses(defs, name, value):
            continue
        d = defs.get(name)
        if d is not None and not d.dynamic:
            continue
        if name in DYNAMIC_SECURITY_CONFIGS:
            continue
        if not per_broker:
            base = listener_base(name)
            if name in only_per_broker or (base is not None and base not in CLUSTER_LEVEL_LISTENER_CONFIGS):
                continue
        out[name] = value
    return out


def _with_id_synonyms(props: dict[str, str]) -> dict[str, str]:
    """KafkaConfig.populateSynonyms: node.id and broker.id stand in for each other when only one is set."""
    if "broker.id" not in props and "node.id" in props:
        props["broker.id"] = props["node.id"]
    elif "node.id" not in props and "broker.id" in props:
        props["node.id"] = props["broker.id"]
    return props


# The configs whose kraftsim default replaces Kafka's in DescribeConfigs (docs/differences.md).
# Others keep Kafka's default: e.g. zookeeper.connection.timeout.ms, which Kafka leaves unset
# (falling back to the session timeout) and kraftsim's config resolves to a number.
OWN_DEFAULTS_SHOWN: Final = ("listeners", "controller.listener.names", "listener.security.protocol.map")


class BrokerConfigView:
    """The layers of this node's broker config, read from the image at one moment."""

    def __init__(self, ctx: ControllerContext) -> None:
        self.node_id = ctx.node_id
        self.release = release = ctx.release.line
        self.defs = defs = broker_configs(release)
        self.static = _with_id_synonyms(dict(getattr(ctx.config, "raw", {}) or {}))
        self.defaults: dict[str, str] = {n: d.default for n, d in defs.items() if d.default is not None}
        # Where server.properties leaves out a config kraftsim runs with a default of its own for
        # (a controller listener on 127.0.0.1:9093, where Kafka's definition has a broker's
        # PLAINTEXT://:9092 and a Kafka controller would not start), the default in force is shown.
        for name in OWN_DEFAULTS_SHOWN:
            own = KEYS[name].default
            if own and name not in self.static:
                self.defaults[name] = own
        configs = ctx.image.configs
        self.cluster = dynamic_layer(configs.get(BROKER, ""), per_broker=False, release=release)
        self.node = dynamic_layer(configs.get(BROKER, str(ctx.node_id)), per_broker=True, release=release)
        merged = dict(self.static)
        for layer in (self.cluster, self.node):
            for name, value in layer.items():
                for syn in broker_synonyms(name, match_listener_override=False):
                    merged.pop(syn, None)
                merged[name] = value
        self.current = merged

    def layers(self) -> tuple[tuple[int, dict[str, str]], ...]:
        """Highest precedence first, each with its ConfigSource."""
        return ((DYNAMIC_BROKER_CONFIG, self.node), (DYNAMIC_DEFAULT_BROKER_CONFIG, self.cluster),
                (STATIC_BROKER_CONFIG, self.static), (DEFAULT_CONFIG, self.defaults))

    def synonyms(self, name: str, sensitive: bool) -> list[tuple[str, str | None, int]]:
        """ConfigHelper.configSynonyms: (name, value, source) of every synonym of ``name`` set in
        a layer, layer by layer, starting at ``name``'s own first entry (none: empty)."""
        names = broker_synonyms(name)
        found = [(syn, None if sensitive else layer[syn], source)
                 for source, layer in self.layers() for syn in names if syn in layer]
        for i, (syn, _, _) in enumerate(found):
            if syn == name:
                return found[i:]
        return []

    def value(self, name: str) -> str | None:
        """The node's current value of a config it defines, as ConfigDef renders it (a config
        set but not defined: the string as set)."""
        d = self.defs.get(name)
        raw = self.current.get(name)
        if d is None or d.internal:
            return raw
        if raw is None:
            return self.defaults.get(name)
        try:
            return convert_to_string(parse_type(name, d.type, raw), d.type)
        except ApiError:
            return raw

    def listed_names(self) -> list[str]:
        """KafkaConfig's originals then its non-internal definitions: what a BROKER describe lists.
        Up to 4.1 they are one Scala map (the caller puts them in its order); see ``listed_in_order``."""
        names = [n for n, v in self.current.items() if v is not None]
        names.extend(n for n, d in self.defs.items() if not d.internal)
        return list(dict.fromkeys(names))

    @property
    def lists_in_stream_order(self) -> bool:
        """From 4.2 a node lists its BROKER (and TOPIC) configs as a Java stream
        (ConfigHelperUtils), in ``listed_in_order``'s order, where 3.9 to 4.1 made a Scala map of them."""
        major, minor = (int(x) for x in self.release.split(".")[:2])
        return (major, minor) >= (4, 2)

    def listed_in_order(self) -> list[str]:
        """ConfigHelperUtils.createResponseConfig (4.2+): the originals set (not null) that are not
        non-internal definitions, in the order of a HashMap of the originals, then every non-internal
        value in the order of AbstractConfig.nonInternalValues, a HashMap filled from the HashMap of
        all parsed values (ConfigDef.parse), itself filled in definition order."""
        public = {n for n, d in self.defs.items() if not d.internal}
        # originals() is a HashMap copy of all of them (a copy's table: tableSizeFor(n / 0.75 + 1)).
        undefined = hash_order((n for n, v in self.current.items() if v is not None and n not in public),
                               table_size_for(int(len(self.current) / 0.75 + 1)))
        parsed = hash_order(self.defs)
        return [*undefined, *hash_order((n for n in parsed if n in public), capacity_for(len(public)))]

    def topic_default(self, key: TopicConfigKey) -> str:
        """KafkaConfig.extractLogConfigMap: the broker-level value of a topic config (the first of
        its synonyms the node has, in ms where it is counted in hours or minutes)."""
        if key.name == "message.format.version":
            # KRaft: the inter-broker protocol is at least 3.0, so the log format setting is ignored.
            return key.default
        for syn, multiplier in key.synonyms:
            raw = self.current.get(syn)
            if raw is None:
                continue
            d = self.defs.get(syn)
            if d is None:  # a synonym this release does not define
                continue
            try:
                v = parse_type(syn, d.type, raw)
            except ApiError:
                continue
            if multiplier != 1 and isinstance(v, int):
                v = v * multiplier
            if key.synonyms[0][0] == _RETENTION_MS and isinstance(v, int) and v < 0:
                v = -1
            return convert_to_string(v, d.type) or ""
        return key.default

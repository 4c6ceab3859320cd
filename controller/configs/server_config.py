"""``server.properties`` for a kraftsim controller: Kafka's keys, types, defaults and checks.

Unknown keys get a warning naming the key (Kafka logs "The configuration 'x' was supplied but
isn't a known config"); an invalid value is a :class:`ConfigError` whose message names the key,
so ``kraftsim controller`` can exit at start-up with exactly one line.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraftsim.metadata import versions
from kraftsim.metadata.files import parse_java_properties
from kraftsim.rpc.security import SECURITY_PROTOCOL_NAMES

log = logging.getLogger("kraftsim.config")


class ConfigError(ValueError):
    """An invalid configuration value; the message names the key."""


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    def parse(v: str) -> int:
        n = int(v.strip())
        if lo is not None and n < lo:
            raise ValueError(f"must be at least {lo}")
        if hi is not None and n > hi:
            raise ValueError(f"must be at most {hi}")
        return n
    return parse


def _bool(v: str) -> bool:
    s = v.strip().lower()
    if s not in ("true", "false"):
        raise ValueError("must be true or false")
    return s == "true"


def _str(v: str) -> str:
    return v.strip()


def _list(v: str) -> list[str]:
    return [p.strip() for p in v.split(",") if p.strip()]


def _roles(v: str) -> list[str]:
    roles = _list(v)
    for r in roles:
        if r not in ("broker", "controller"):
            raise ValueError(f"unknown role {r!r}")
    if roles != ["controller"]:
        raise ValueError("kraftsim runs controllers only: process.roles must be 'controller'")
    return roles


_VOTER = re.compile(r"^(\d+)@(\[[^\]]+\]|[^:@]+):(\d+)$")


def _voters(v: str) -> list[tuple[int, str, int]]:
    out = []
    for part in _list(v):
        m = _VOTER.match(part)
        if not m:
            raise ValueError(f"{part!r} is not of the form id@host:port")
        out.append((int(m.group(1)), m.group(2).strip("[]"), int(m.group(3))))
    return out


_LISTENER = re.compile(r"^([A-Za-z0-9_\-]+)://(\[[^\]]*\]|[^:]*):(\d+)$")


def _listeners(v: str) -> list[tuple[str, str, int]]:
    out = []
    for part in _list(v):
        m = _LISTENER.match(part)
        if not m:
            raise ValueError(f"{part!r} is not of the form NAME://host:port")
        port = int(m.group(3))
        if port > 65535:
            raise ValueError(f"port {port} out of range")
        out.append((m.group(1).upper(), m.group(2).strip("[]"), port))
    return out


def _protocol_map(v: str) -> dict[str, str]:
    out = {}
    for part in _list(v):
        if ":" not in part:
            raise ValueError(f"{part!r} is not of the form LISTENER:PROTOCOL")
        name, proto = part.split(":", 1)
        proto = proto.strip().upper()
        if proto not in SECURITY_PROTOCOL_NAMES:
            raise ValueError(f"unknown security protocol {proto!r}")
        out[name.strip().upper()] = proto
    return out


def _ip_overrides(v: str) -> dict[str, int]:
    """``host:n,host2:n`` (Kafka's max.connections.per.ip.overrides)."""
    out: dict[str, int] = {}
    for part in _list(v):
        host, sep, n = part.rpartition(":")
        if not sep or not host or not n.strip().isdigit():
            raise ValueError(f"{part!r} is not of the form HOST:COUNT")
        out[host.strip()] = int(n)
    return out


def _release(v: str) -> str:
    line = v.strip()
    if line not in versions.release_lines():
        raise ValueError(f"must be one of {', '.join(versions.release_lines())}")
    return line


def _host_port(v: str) -> tuple[str, int]:
    host, _, port = v.strip().rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ValueError("must be host:port")
    return host.strip("[]"), int(port)


def _bootstrap_servers(v: str) -> list[tuple[str, int]]:
    """``host:port,...``: where a controller of a dynamic quorum (or an observer) first asks
    for the leader."""
    out = []
    for part in _list(v):
        try:
            out.append(_host_port(part))
        except ValueError:
            raise ValueError(f"{part!r} is not of the form host:port") from None
    return out


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    parse: Callable[[str], Any]
    default: str | None


MIB = 1024 * 1024
# The ranges of Kafka's INT and LONG config types: a value outside one is "Not a number of type ...".
JAVA_INT_MIN, JAVA_INT_MAX = -(2**31), 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1
KEYS: dict[str, Key] = {k.name: k for k in [
    Key("process.roles", _roles, None),
    Key("node.id", _int(0), None),
    Key("controller.quorum.voters", _voters, ""),
    Key("controller.quorum.bootstrap.servers", _bootstrap_servers, ""),
    Key("listeners", _listeners, "CONTROLLER://127.0.0.1:9093"),
    Key("controller.listener.names", _list, "CONTROLLER"),
    Key("listener.security.protocol.map", _protocol_map,
        "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"),
    Key("metadata.log.dir", _str, ""),
    Key("log.dirs", _list, ""),
    Key("log.dir", _str, "/tmp/kafka-logs"),
    Key("broker.session.timeout.ms", _int(1), "9000"),
    Key("broker.heartbeat.interval.ms", _int(1), "2000"),
    Key("metadata.log.segment.bytes", _int(1), str(1024 * MIB)),
    Key("metadata.log.segment.min.bytes", _int(1), str(8 * MIB)),
    Key("metadata.log.segment.ms", _int(1), str(7 * 24 * 3600 * 1000)),
    Key("metadata.max.retention.bytes", _int(-1), str(100 * MIB)),
    Key("metadata.max.retention.ms", _int(-1), str(7 * 24 * 3600 * 1000)),
    Key("metadata.log.max.record.bytes.between.snapshots", _int(1), str(20 * MIB)),
    Key("metadata.log.max.snapshot.interval.ms", _int(0), "3600000"),
    Key("metadata.max.idle.interval.ms", _int(0), "500"),
    Key("controller.quorum.append.linger.ms", _int(0), "25"),
    # Kafka's QuorumConfig: the Raft layer's timings (raft/core/config.py).
    Key("controller.quorum.election.timeout.ms", _int(0), "1000"),
    Key("controller.quorum.fetch.timeout.ms", _int(0), "2000"),
    Key("controller.quorum.election.backoff.max.ms", _int(0), "1000"),
    Key("controller.quorum.request.timeout.ms", _int(0), "2000"),
    Key("controller.quorum.retry.backoff.ms", _int(0), "20"),
    Key("num.partitions", _int(1), "1"),
    Key("default.replication.factor", _int(1, 32767), "1"),
    Key("delete.topic.enable", _bool, "true"),
    Key("auto.create.topics.enable", _bool, "true"),
    Key("zookeeper.connect", _str, ""),
    Key("zookeeper.metadata.migration.enable", _bool, "false"),
    Key("zookeeper.session.timeout.ms", _int(1), "18000"),
    Key("zookeeper.connection.timeout.ms", _int(1), "18000"),
    Key("zookeeper.metadata.migration.min.batch.size", _int(1), "200"),
    # Kafka's passwordEncoder settings: the migration decrypts and encrypts ZooKeeper's dynamic passwords.
    Key("password.encoder.secret", _str, ""),
    Key("password.encoder.keyfactory.algorithm", _str, ""),
    Key("password.encoder.cipher.algorithm", _str, "AES/CBC/PKCS5Padding"),
    Key("password.encoder.key.length", _int(8), "128"),
    Key("password.encoder.iterations", _int(1024), "4096"),
    Key("super.users", lambda v: [p.strip() for p in v.split(";") if p.strip()], ""),
    Key("authorizer.class.name", _str, ""),
    Key("allow.everyone.if.no.acl.found", _bool, "false"),
    Key("inter.broker.listener.name", _str, ""),
    Key("inter.broker.protocol.version", _str, ""),
    Key("security.inter.broker.protocol", _str, "PLAINTEXT"),
    Key("sasl.enabled.mechanisms", _list, "GSSAPI"),
    Key("sasl.mechanism.controller.protocol", _str, "GSSAPI"),
    Key("socket.request.max.bytes", _int(1), str(100 * MIB)),
    Key("connections.max.idle.ms", _int(1), "600000"),
    Key("queued.max.request.bytes", _int(-1), "-1"),
    Key("max.connections", _int(0), str(2**31 - 1)),
    Key("max.connections.per.ip", _int(0), str(2**31 - 1)),
    Key("max.connections.per.ip.overrides", _ip_overrides, ""),
    Key("socket.send.buffer.bytes", _int(-1), "102400"),
    Key("socket.receive.buffer.bytes", _int(-1), "102400"),
    Key("unstable.api.versions.enable", _bool, "false"),
    Key("unstable.feature.versions.enable", _bool, "false"),
    Key("min.insync.replicas", _int(1), "1"),
    Key("unclean.leader.election.enable", _bool, "false"),
    # The leader balancer (QuorumController's maybeBalancePartitionLeaders). Kafka's KRaft
    # controller balances every imbalanced partition it can: the ZooKeeper controller's per-broker
    # threshold, leader.imbalance.per.broker.percentage, is accepted (an INT, no other check) and
    # plays no part, as in Kafka 3.9's KRaft mode.
    Key("auto.leader.rebalance.enable", _bool, "true"),
    Key("leader.imbalance.check.interval.seconds", _int(1, JAVA_LONG_MAX), "300"),
    Key("leader.imbalance.per.broker.percentage", _int(JAVA_INT_MIN, JAVA_INT_MAX), "10"),
    Key("delegation.token.secret.key", _str, ""),
    Key("delegation.token.max.lifetime.ms", _int(1), "604800000"),
    Key("delegation.token.expiry.time.ms", _int(1), "86400000"),
    Key("delegation.token.expiry.check.interval.ms", _int(1), "3600000"),
    Key("delegation.token.master.key", _str, ""),  # the deprecated alias of delegation.token.secret.key
    Key("offsets.topic.replication.factor", _int(1, 32767), "3"),
    Key("kraftsim.http.listen", _host_port, "127.0.0.1:9464"),
    # Fault injection (kraftsim.faults, docs/faults.md): /faults on the HTTP listener, loopback only
    # unless a token is set.
    Key("kraftsim.faults.enable", _bool, "false"),
    Key("kraftsim.faults.token", _str, ""),
    # The Kafka release this controller is: its APIs and their versions, its features and
    # metadata.version levels, what format writes (metadata/versions.py).
    Key("kraftsim.release", _release, versions.DEFAULT_RELEASE),
]}
# Keys Kafka 4.0 removed with ZooKeeper: a 4.x controller warns of them as unknown and runs
# without them.
ZOOKEEPER_KEYS = frozenset(k for k in KEYS if k.startswith("zookeeper."))
PASSTHROUGH_PREFIXES = ("ssl.", "listener.name.", "sasl.", "log4j.", "metric.reporters", "kraftsim.")


class Config:
    """Parsed, validated values by Kafka key; ``get`` returns the typed value or default."""

    def __init__(self, raw: dict[str, str]) -> None:
        self.raw = dict(raw)
        self.values: dict[str, Any] = {}
        self.unknown: list[str] = []
        # The release first: which keys exist depends on it.
        line = self.raw.get("kraftsim.release", versions.DEFAULT_RELEASE)
        try:
            self.release = versions.release(_release(line))
        except ValueError as e:
            raise ConfigError(f"Invalid value {line!r} for configuration kraftsim.release: {e}") from e
        for name, text in self.raw.items():
            key = KEYS.get(name)
            if key is not None and name in ZOOKEEPER_KEYS and not self.release.is_3x:
                key = None
            if key is None:
                if not name.startswith(PASSTHROUGH_PREFIXES) or name.startswith("kraftsim."):
                    self.unknown.append(name)
                continue
            try:
                self.values[name] = key.parse(text)
            except (ValueError, TypeError) as e:
                raise ConfigError(f"Invalid value {text!r} for configuration {name}: {e}") from e
        for name in ("process.roles", "node.id"):
            if name not in self.values:
                raise ConfigError(f"Missing required configuration {name}")
        for name, key in KEYS.items():
            if name not in self.values and key.default is not None:
                self.values[name] = key.parse(key.default)
        self._cross_checks()

    def _cross_checks(self) -> None:
        names = self.values["controller.listener.names"]
        listeners = self.values["listeners"]
        if not names:
            raise ConfigError("controller.listener.names must name at least one listener")
        if not any(n == names[0] for n, _, _ in listeners):
            raise ConfigError(f"listeners must contain the controller listener {names[0]} "
                              f"(controller.listener.names)")
        pmap = self.values["listener.security.protocol.map"]
        for n, _, _ in listeners:
            if n not in pmap:
                raise ConfigError(f"listener.security.protocol.map has no entry for listener {n}")
        voters = self.values["controller.quorum.voters"]
        if not voters and not self.values["controller.quorum.bootstrap.servers"]:
            # Kafka 3.9's KafkaConfig: a static quorum names its voters, a dynamic one (KIP-853)
            # where to find it; with both, the voters are the quorum and the servers unused.
            raise ConfigError("If using process.roles, either controller.quorum.bootstrap.servers must contain the "
                              "set of bootstrap controllers or controller.quorum.voters must contain a parseable "
                              "set of controllers.")
        if voters and self.node_id not in {v[0] for v in voters}:
            raise ConfigError(f"controller.quorum.voters does not contain node.id {self.node_id}")
        if self.values["metadata.log.segment.bytes"] < self.values["metadata.log.segment.min.bytes"]:
            raise ConfigError(f"metadata.log.segment.bytes must be at least "
                              f"{self.values['metadata.log.segment.min.bytes']} (metadata.log.segment.min.bytes)")
        if self.values["zookeeper.metadata.migration.enable"] and not self.values["zookeeper.connect"]:
            raise ConfigError("zookeeper.connect is required when zookeeper.metadata.migration.enable=true")

    def get(self, name: str) -> Any:
        return self.values[name]

    @property
    def node_id(self) -> int:
        return int(self.values["node.id"])

    @property
    def metadata_log_dir(self) -> Path:
        d = self.values["metadata.log.dir"]
        if d:
            return Path(d)
        dirs = self.values["log.dirs"]
        return Path(dirs[0] if dirs else self.values["log.dir"])

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.values["log.dirs"] or [self.values["log.dir"]]
        return [Path(d) for d in dirs]

    @property
    def controller_listener(self) -> tuple[str, str, int]:
        name = self.values["controller.listener.names"][0]
        for n, host, port in self.values["listeners"]:
            if n == name:
                return n, host, port
        raise ConfigError(f"no listener named {name}")


def load(path: Path | None, overrides: Iterable[str] = ()) -> Config:
    """Read a properties file and ``k=v`` overrides (each behaves exactly like a file line)."""
    raw: dict[str, str] = {}
    if path is not None:
        try:
            text = path.read_text("latin-1")
        except OSError as e:
            raise ConfigError(f"cannot read {path}: {e.strerror or e}") from e
        raw.update(parse_java_properties(text))
    for ov in overrides:
        if "=" not in ov:
            raise ConfigError(f"--override {ov!r} is not of the form key=value")
        raw.update(parse_java_properties(ov))
    cfg = Config(raw)
    for name in cfg.unknown:
        log.warning("The configuration '%s' was supplied but isn't a known config.", name)
    return cfg

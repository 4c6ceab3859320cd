"""Kafka's ZooKeeper layout (``kafka.zk.ZkData``): the znode paths and their JSON, both ways.

A ZooKeeper-mode cluster keeps its metadata in these znodes; ``kraftsim zk seed`` writes them
and the migration's copy reads them, so both sides share one definition here. JSON is written
compactly, as Kafka's Jackson writes it; numbers that Kafka stores as strings (timestamps, the
producer id block bounds) stay strings. Entity names under ``/config`` are sanitized as Kafka's
``Sanitizer`` does (URL-encoding, with ``*`` and space percent-encoded), and ``<default>`` names
the default entity.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final
from urllib.parse import quote, unquote_plus

from kraftsim.metadata.authorizer.acl_bindings import AclPermissionType, PatternType
from kraftsim.metadata.authorizer.authorizer import AclOperation, ResourceType
from kraftsim.rpc.uuids import from_str, to_str

CONTROLLER: Final = "/controller"
CONTROLLER_EPOCH: Final = "/controller_epoch"
MIGRATION: Final = "/migration"
BROKER_IDS: Final = "/brokers/ids"
TOPICS: Final = "/brokers/topics"
CONFIG: Final = "/config"
CONFIG_CHANGES: Final = "/config/changes"
DELETE_TOPICS: Final = "/admin/delete_topics"
PRODUCER_ID_BLOCK: Final = "/latest_producer_id_block"
ACL_LITERAL: Final = "/kafka-acl"
ACL_EXTENDED: Final = "/kafka-acl-extended"
DELEGATION_TOKENS: Final = "/delegation_token/tokens"
CLUSTER_ID: Final = "/cluster/id"
DEFAULT_ENTITY: Final = "<default>"

# ConfigType.ALL: the entity types under /config.
TOPIC_CONFIG: Final = "topics"
CLIENT_CONFIG: Final = "clients"
USER_CONFIG: Final = "users"
BROKER_CONFIG: Final = "brokers"
IP_CONFIG: Final = "ips"
CONFIG_TYPES: Final = (TOPIC_CONFIG, CLIENT_CONFIG, USER_CONFIG, BROKER_CONFIG, IP_CONFIG)

# ZkData.PersistentZkPaths: what a broker (and the migration, createTopLevelPaths) makes sure exists.
PERSISTENT_PATHS: Final = ("/consumers", BROKER_IDS, TOPICS, CONFIG_CHANGES, DELETE_TOPICS, "/brokers/seqid",
                           "/isr_change_notification", PRODUCER_ID_BLOCK, "/log_dir_event_notification",
                           *(f"{CONFIG}/{t}" for t in CONFIG_TYPES))

# The SCRAM mechanisms Kafka stores as user config keys, with their record type codes.
SCRAM_MECHANISMS: Final = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}


class LayoutError(ValueError):
    """A znode whose content is not in Kafka's format."""


def dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


_DECODER: Final = json.JSONDecoder()
_JSON_SPACE: Final = " \t\n\r"


def loads(data: bytes | None, path: str) -> dict[str, Any]:
    """A znode's JSON object. One that starts with ``{`` and no zero byte after it is UTF-8 (the
    UTF-16 and UTF-32 that ``json.loads`` also detects start with a BOM or put zero bytes
    around the brace) and is decoded without the detection and the regular expressions of
    ``json.loads`` around its C scanner: half the cost, on a million partition states."""
    try:
        if data and data[0] == 0x7B and data[1:2] != b"\0":
            text = data.decode()
            value, end = _DECODER.raw_decode(text)
            if end != len(text) and text[end:].strip(_JSON_SPACE):
                raise json.JSONDecodeError("Extra data", text, end)
        else:
            value = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError) as e:
        raise LayoutError(f"{path}: not JSON: {e}") from None
    if not isinstance(value, dict):
        raise LayoutError(f"{path}: not a JSON object")
    return value


# ---- names -----------------------------------------------------------------------------------
def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: java.net.URLEncoder, then ``*`` and space percent-encoded."""
    return quote(name, safe="-._").replace("~", "%7E")


def desanitize(name: str) -> str:
    return unquote_plus(name)


def pascal(enum_name: str) -> str:
    """SecurityUtils' names for ACL enums in ZooKeeper: TRANSACTIONAL_ID -> TransactionalId."""
    return "".join(part.capitalize() for part in enum_name.split("_"))


def _from_pascal(enum_cls: type[IntEnum], name: str, path: str) -> int:
    for member in enum_cls:
        if pascal(member.name).lower() == name.lower():
            return int(member.value)
    raise LayoutError(f"{path}: unknown {enum_cls.__name__} {name!r}")


# ---- paths -----------------------------------------------------------------------------------
def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def config_path(entity_type: str, entity: str) -> str:
    """``entity`` as stored: already sanitized, or ``<default>``, or ``user/clients/client``."""
    return f"{CONFIG}/{entity_type}/{entity}"


def acl_root(pattern: int) -> str:
    """Literal patterns live under /kafka-acl; the others under /kafka-acl-extended/<pattern>."""
    if pattern == PatternType.LITERAL:
        return ACL_LITERAL
    return f"{ACL_EXTENDED}/{PatternType(pattern).name.lower()}"


def acl_path(pattern: int, resource_type: int, name: str) -> str:
    return f"{acl_root(pattern)}/{pascal(ResourceType(resource_type).name)}/{name}"


# ---- znode contents --------------------------------------------------------------------------
@dataclass(frozen=True)
class BrokerZNode:
    """/brokers/ids/<id> (version 5): what a ZooKeeper-mode broker registers."""
    broker_id: int
    host: str
    port: int
    endpoints: tuple[str, ...] = ()
    protocol_map: dict[str, str] = field(default_factory=dict)
    rack: str | None = None
    jmx_port: int = -1
    timestamp_ms: int = 0
    features: dict[str, dict[str, int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        body: dict[str, Any] = {"features": self.features, "listener_security_protocol_map": self.protocol_map,
                                "endpoints": list(self.endpoints), "jmx_port": self.jmx_port,
                                "port": self.port, "host": self.host, "version": 5,
                                "timestamp": str(self.timestamp_ms)}
        if self.rack is not None:
            body["rack"] = self.rack
        return dumps(body)

    @staticmethod
    def decode(broker_id: int, data: bytes | None) -> BrokerZNode:
        js = loads(data, broker_path(broker_id))
        return BrokerZNode(broker_id, js.get("host") or "", int(js.get("port", -1)), tuple(js.get("endpoints", ())),
                           dict(js.get("listener_security_protocol_map") or {}), js.get("rack"),
                           int(js.get("jmx_port", -1)), int(js.get("timestamp", 0)), dict(js.get("features") or {}))


@dataclass(frozen=True)
class TopicZNode:
    """/brokers/topics/<t> (version 3): the assignment and the topic id."""
    topic_id: uuid.UUID | None
    partitions: dict[int, list[int]]
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "version": 3,
            "partitions": {str(p): r for p, r in self.partitions.items()},
            "adding_replicas": {str(p): r for p, r in self.adding.items() if r},
            "removing_replicas": {str(p): r for p, r in self.removing.items() if r},
        }
        if self.topic_id is not None:
            body["topic_id"] = to_str(self.topic_id)
        return dumps(body)

    @staticmethod
    def decode(topic: str, data: bytes | None) -> TopicZNode:
        path = topic_path(topic)
        js = loads(data, path)

        def ints(key: str) -> dict[int, list[int]]:
            raw = js.get(key) or {}
            try:
                return {int(p): [int(b) for b in r] for p, r in raw.items()}
            except (TypeError, ValueError, AttributeError):
                raise LayoutError(f"{path}: bad {key}") from None

        tid = js.get("topic_id")
        try:
            topic_id = from_str(tid) if tid is not None else None
        except ValueError:
            raise LayoutError(f"{path}: bad topic_id {tid!r}") from None
        return TopicZNode(topic_id, ints("partitions"), ints("adding_replicas"), ints("removing_replicas"))


@dataclass(frozen=True)
class PartitionState:
    """/brokers/topics/<t>/partitions/<p>/state (version 1). Its zkVersion is the partition epoch."""
    leader: int
    leader_epoch: int
    controller_epoch: int
    isr: list[int]
    leader_recovery_state: int = 0

    def encode(self) -> bytes:
        body: dict[str, Any] = {"controller_epoch": self.controller_epoch, "leader": self.leader, "version": 1,
                                "leader_epoch": self.leader_epoch, "isr": self.isr}
        if self.leader_recovery_state != 0:  # only when not RECOVERED
            body["leader_recovery_state"] = self.leader_recovery_state
        return dumps(body)

    @staticmethod
    def decode(path: str, data: bytes | None) -> PartitionState:
        return PartitionState(*partition_state_fields(path, data))


def partition_state_fields(path: str, data: bytes | None) -> tuple[int, int, int, list[int], int]:
    """A partition state's (leader, leader_epoch, controller_epoch, isr, leader_recovery_state),
    without building a PartitionState: the copy reads a million of them."""
    js = loads(data, path)
    try:
        return (int(js["leader"]), int(js["leader_epoch"]), int(js["controller_epoch"]), [int(b) for b in js["isr"]],
                int(js.get("leader_recovery_state", 0)))
    except (KeyError, TypeError, ValueError):
        raise LayoutError(f"{path}: not a partition state") from None


def encode_config(config: dict[str, str]) -> bytes:
    """/config/<type>/<entity>: {"version":1,"config":{...}} (Kafka's Properties: string values)."""
    return dumps({"version": 1, "config": config})


def decode_config(path: str, data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    js = loads(data, path)
    config = js.get("config") or {}
    if not isinstance(config, dict):
        raise LayoutError(f"{path}: config is not an object")
    return {str(k): str(v) for k, v in config.items()}


@dataclass(frozen=True)
class ScramCredential:
    """A SCRAM credential as a user config value (ScramCredentialUtils' text form)."""
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def encode(self) -> str:
        import base64

        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @staticmethod
    def decode(text: str) -> ScramCredential:
        import base64
        import binascii

        try:
            fields = dict(part.split("=", 1) for part in text.split(","))
            b64 = base64.b64decode
            return ScramCredential(b64(fields["salt"]), b64(fields["stored_key"]), b64(fields["server_key"]),
                                   int(fields["iterations"]))
        except (KeyError, ValueError, binascii.Error):
            raise LayoutError("Invalid credential format") from None


@dataclass(frozen=True)
class ProducerIdBlock:
    """/latest_producer_id_block: the last block handed out (bounds as strings in the JSON)."""
    broker: int
    block_start: int
    block_end: int

    def encode(self) -> bytes:
        return dumps({"version": 1, "broker": self.broker, "block_start": str(self.block_start),
                      "block_end": str(self.block_end)})

    @staticmethod
    def decode(data: bytes | None) -> ProducerIdBlock:
        js = loads(data, PRODUCER_ID_BLOCK)
        try:
            return ProducerIdBlock(int(js["broker"]), int(js["block_start"]), int(js["block_end"]))
        except (KeyError, TypeError, ValueError):
            raise LayoutError(f"Failed to parse the producerId block json {data!r}") from None


@dataclass(frozen=True)
class AclEntry:
    """One element of a /kafka-acl* resource znode's "acls" list, as codes."""
    principal: str
    permission: int
    operation: int
    host: str

    def to_json(self) -> dict[str, str]:
        return {"principal": self.principal, "permissionType": pascal(AclPermissionType(self.permission).name),
                "operation": pascal(AclOperation(self.operation).name), "host": self.host}


def encode_acls(entries: list[AclEntry]) -> bytes:
    return dumps({"version": 1, "acls": [e.to_json() for e in entries]})


def decode_acls(path: str, data: bytes | None) -> list[AclEntry]:
    js = loads(data, path)
    out = []
    for e in js.get("acls") or []:
        try:
            out.append(AclEntry(str(e["principal"]), _from_pascal(AclPermissionType, e["permissionType"], path),
                                _from_pascal(AclOperation, e["operation"], path), str(e["host"])))
        except (KeyError, TypeError):
            raise LayoutError(f"{path}: bad ACL entry {e!r}") from None
    return out


def resource_type_code(name: str, path: str) -> int:
    return _from_pascal(ResourceType, name, path)


@dataclass(frozen=True)
class ControllerZNode:
    """/controller (version 2); a KRaft controller also writes its KRaft epoch."""
    broker_id: int
    timestamp_ms: int
    kraft_controller_epoch: int = -1

    def encode(self) -> bytes:
        return dumps({"kraftControllerEpoch": self.kraft_controller_epoch, "version": 2,
                      "brokerid": self.broker_id, "timestamp": str(self.timestamp_ms)})

    @staticmethod
    def decode(data: bytes | None) -> ControllerZNode:
        js = loads(data, CONTROLLER)
        try:
            return ControllerZNode(int(js["brokerid"]), int(js.get("timestamp", 0)),
                                   int(js.get("kraftControllerEpoch", -1)))
        except (KeyError, TypeError, ValueError):
            raise LayoutError(f"{CONTROLLER}: bad controller registration") from None


@dataclass(frozen=True)
class MigrationZNode:
    """/migration (version 0): where the KRaft controller records how far ZooKeeper is in sync."""
    kraft_controller_id: int = -1
    kraft_controller_epoch: int = -1
    kraft_metadata_offset: int = -1
    kraft_metadata_epoch: int = -1

    def encode(self) -> bytes:
        return dumps({"kraft_metadata_epoch": self.kraft_metadata_epoch,
                      "kraft_controller_id": self.kraft_controller_id,
                      "kraft_metadata_offset": self.kraft_metadata_offset,
                      "kraft_controller_epoch": self.kraft_controller_epoch, "version": 0})

    @staticmethod
    def decode(data: bytes | None) -> MigrationZNode:
        js = loads(data, MIGRATION)
        if js.get("version") != 0:
            raise LayoutError(f"Encountered unknown version {js.get('version')} when parsing migration json")
        try:
            return MigrationZNode(int(js["kraft_controller_id"]), int(js["kraft_controller_epoch"]),
                                  int(js["kraft_metadata_offset"]), int(js["kraft_metadata_epoch"]))
        except (KeyError, TypeError, ValueError):
            raise LayoutError(f"Failed to parse the migration json {data!r}") from None


@dataclass(frozen=True)
class TokenZNode:
    """/delegation_token/tokens/<id> (version 3): a token's information, principals sanitized."""
    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiry_timestamp: int

    def encode(self) -> bytes:
        return dumps({"owner": sanitize(self.owner), "renewers": [sanitize(r) for r in self.renewers],
                      "tokenRequester": sanitize(self.requester), "issueTimestamp": self.issue_timestamp,
                      "maxTimestamp": self.max_timestamp, "version": 3, "expiryTimestamp": self.expiry_timestamp,
                      "tokenId": self.token_id})

    @staticmethod
    def decode(path: str, data: bytes | None) -> TokenZNode | None:
        """None for an empty znode (Kafka skips it)."""
        if not data:
            return None
        js = loads(data, path)
        try:
            version = int(js["version"])
            if not 0 < version <= 3:
                raise LayoutError(f"{path}: unknown token version {version}")
            owner = _principal(desanitize(str(js["owner"])), path)
            requester = _principal(desanitize(str(js["tokenRequester"])), path) if version >= 3 else owner
            renewers = tuple(_principal(desanitize(str(r)), path) for r in js["renewers"])
            return TokenZNode(str(js["tokenId"]), owner, requester, renewers, int(js["issueTimestamp"]),
                              int(js["maxTimestamp"]), int(js["expiryTimestamp"]))
        except LayoutError:
            raise
        except (KeyError, TypeError, ValueError):
            raise LayoutError(f"{path}: not a delegation token") from None


def _principal(text: str, path: str) -> str:
    """SecurityUtils.parseKafkaPrincipal, printed back: TYPE:name."""
    kind, sep, name = text.partition(":")
    if not sep or not kind:
        raise LayoutError(f"{path}: expected a string in format principalType:principalName but got {text}")
    return f"{kind}:{name}"


def encode_cluster_id(cluster_id: str) -> bytes:
    """/cluster/id: the id a ZooKeeper-mode cluster's brokers share (its version is a string)."""
    return dumps({"version": "1", "id": cluster_id})


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes | None) -> int:
    try:
        return int((data or b"").decode())
    except ValueError:
        raise LayoutError(f"{CONTROLLER_EPOCH}: not a number: {data!r}") from None

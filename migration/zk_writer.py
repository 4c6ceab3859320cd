"""What the dual-write writes to ZooKeeper for topics (Kafka's KRaftMigrationZkWriter and
ZkTopicMigrationClient), decided without I/O.

The runner reads a topic's znodes, hands them here with the image's view of the topic, and
applies the operations returned in one fenced multi. Comparing with what ZooKeeper holds (rather
than replaying deltas blindly) makes every write idempotent: the reconcile after the copy
(SYNC_KRAFT_TO_ZK) and a retried delta both write only what differs.

Kafka's rules kept here: a new topic gets its topic znode (version 3, with its id and
assignment), an empty /config/topics entry, its partitions znode, and per partition a znode and
a state znode; a partition state carries the KRaft controller's epoch as ``controller_epoch``;
updates are set on any zkVersion; a deleted topic loses every znode under it, its config, then
itself. The partition-state comparison ignores ``controller_epoch`` so that a new KRaft epoch
does not rewrite every partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kraftsim.metadata.authorizer.acl_bindings import PatternType
from kraftsim.metadata.authorizer.authorizer import ResourceType
from kraftsim.metadata.image.topics import Topic
from kraftsim.migration import zk_layout as L
from kraftsim.migration.passwords import PasswordCodec, PasswordError, decoded, encoded
from kraftsim.migration.passwords import names as password_names
from kraftsim.migration.zk_client import ZkOp


@dataclass
class ZkTopicView:
    """What ZooKeeper holds for one topic, as the runner read it."""
    topic: L.TopicZNode | None
    has_config: bool = False
    has_partitions_znode: bool = False
    partition_znodes: set[int] = field(default_factory=set)
    states: dict[int, L.PartitionState] = field(default_factory=dict)


def partition_state(p_leader: int, leader_epoch: int, isr: tuple[int, ...], lrs: int,
                    controller_epoch: int) -> L.PartitionState:
    return L.PartitionState(p_leader, leader_epoch, controller_epoch, list(isr), lrs)


def topic_znode(topic: Topic) -> L.TopicZNode:
    parts = topic.partitions
    return L.TopicZNode(topic.id, {p: list(parts[p].replicas) for p in sorted(parts)},
                        {p: list(parts[p].adding_replicas) for p in sorted(parts) if parts[p].adding_replicas},
                        {p: list(parts[p].removing_replicas) for p in sorted(parts) if parts[p].removing_replicas})


def topic_ops(topic: Topic, zk: ZkTopicView, controller_epoch: int, only: set[int] | None = None) -> list[ZkOp]:
    """The writes that make ZooKeeper hold ``topic`` as the image does (``only``: just these
    partitions' states, when nothing else of the topic changed)."""
    name = topic.name
    ops: list[ZkOp] = []
    wanted = topic_znode(topic)
    if zk.topic is None:
        ops.append(ZkOp("create", L.topic_path(name), wanted.encode()))
        if not zk.has_config:
            ops.append(ZkOp("create", L.config_path(L.TOPIC_CONFIG, name), L.encode_config({})))
    elif zk.topic != wanted:
        ops.append(ZkOp("set", L.topic_path(name), wanted.encode()))
    if not zk.has_partitions_znode:
        ops.append(ZkOp("create", L.partitions_path(name), b""))
    for pid in sorted(topic.partitions):
        if only is not None and pid not in only and zk.topic is not None:
            continue
        p = topic.partitions[pid]
        state = partition_state(p.leader, p.leader_epoch, p.isr, p.leader_recovery_state, controller_epoch)
        if pid not in zk.partition_znodes:
            ops.append(ZkOp("create", L.partition_path(name, pid), b""))
        have = zk.states.get(pid)
        if have is None:
            ops.append(ZkOp("create", L.partition_state_path(name, pid), state.encode()))
        elif replace(have, controller_epoch=controller_epoch) != state:
            ops.append(ZkOp("set", L.partition_state_path(name, pid), state.encode()))
    return ops


def delete_topic_ops(name: str, subtree: list[str], has_config: bool) -> list[ZkOp]:
    """Kafka's deleteTopic: the topic's children (deepest first), its config, then the topic."""
    ops = [ZkOp("delete", path) for path in subtree]
    if has_config:
        ops.append(ZkOp("delete", L.config_path(L.TOPIC_CONFIG, name)))
    ops.append(ZkOp("delete", L.topic_path(name)))
    return ops


# ---- configs, client quotas, SCRAM, ACLs (Kafka's ZkConfigMigrationClient, ZkAclMigrationClient) -----
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
CONFIG_TYPE_OF_RESOURCE = {TOPIC_RESOURCE: L.TOPIC_CONFIG, BROKER_RESOURCE: L.BROKER_CONFIG}
# DynamicConfig's quota keys that are integral (LONG or INT); the others are DOUBLE.
INTEGRAL_QUOTA_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "connection_creation_rate"})
CONFIG_CHANGE_PREFIX = f"{L.CONFIG_CHANGES}/config_change_"
ACL_CHANGES = "/kafka-acl-changes/acl_changes_"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes/acl_changes_"


@dataclass(frozen=True)
class EntityZNode:
    """What one entity's znode must hold: ``content`` compared in decoded form (None: the znode
    must not exist), ``data`` what is written, and the change notification ZooKeeper-mode
    brokers watch for, created (sequential, outside the fenced multi, as Kafka does) after it."""
    path: str
    content: object
    data: bytes | None
    notification: tuple[str, bytes] | None
    parents: tuple[str, ...] = ()  # created beforehand when missing (Kafka's createRecursive)


def entity_op(want: EntityZNode, have: bytes | None, exists: bool, codec: PasswordCodec | None = None) -> ZkOp | None:
    if want.content is None:
        return ZkOp("delete", want.path) if exists else None
    if not exists:
        return ZkOp("create", want.path, want.data)
    try:
        same = _decoded(want.path, have, codec) == want.content
    except PasswordError:  # encrypted under another secret: rewritten under ours
        same = False
    return None if same else ZkOp("set", want.path, want.data)


def _decoded(path: str, data: bytes | None, codec: PasswordCodec | None = None) -> object:
    if path == L.PRODUCER_ID_BLOCK:  # compared as Kafka does: the next block's first id
        return L.ProducerIdBlock.decode(data).block_end + 1 if data else None
    if path.startswith(L.DELEGATION_TOKENS):
        return L.TokenZNode.decode(path, data)
    if path.startswith(L.ACL_LITERAL):  # also /kafka-acl-extended
        return frozenset(L.decode_acls(path, data)) if data else frozenset()
    if path.startswith(QUOTA_PATHS):
        return _quota_content(L.decode_config(path, data))
    props = L.decode_config(path, data)
    return decoded(props, codec) if codec is not None and password_names(props) else props


QUOTA_PATHS = tuple(f"{L.CONFIG}/{t}/" for t in (L.USER_CONFIG, L.CLIENT_CONFIG, L.IP_CONFIG))


def _quota_content(props: dict[str, str]) -> dict[str, object]:
    """Quotas compared as numbers (Kafka reads them as doubles: "100.0" and "100" are the same
    quota); SCRAM credentials as text."""
    out: dict[str, object] = {}
    for k, v in props.items():
        try:
            out[k] = v if k in L.SCRAM_MECHANISMS else float(v)
        except ValueError:
            out[k] = v
    return out


def _config_change(path: str) -> tuple[str, bytes]:
    return CONFIG_CHANGE_PREFIX, L.dumps({"version": 2, "entity_path": path[len(L.CONFIG) + 1:]})


def config_znode(resource_type: int, name: str, props: dict[str, str],
                  codec: PasswordCodec | None = None) -> EntityZNode:
    """A topic's or broker's configs (empty: the znode is deleted), passwords encrypted with
    ``codec`` in what is written and compared in the clear."""
    path = L.config_path(CONFIG_TYPE_OF_RESOURCE[resource_type], name or L.DEFAULT_ENTITY)
    data = L.encode_config(encoded(props, codec) if codec is not None and password_names(props) else props)
    return EntityZNode(path, dict(props) or None, data, _config_change(path))


def java_double(v: float) -> str:
    """Java's Double.toString, which Kafka uses for DOUBLE quota values."""
    from decimal import Decimal

    if v == 0 or 1e-3 <= abs(v) < 1e7:
        s = repr(float(v))
        return s if "e" not in s else f"{v:.1f}"
    sign, digits, exp = Decimal(repr(float(v))).normalize().as_tuple()
    ds = "".join(map(str, digits))
    e = len(ds) - 1 + int(exp)
    frac = ds[1:] or "0"
    return f"{'-' if sign else ''}{ds[0]}.{frac}E{e}"


def quota_props(quotas: dict[str, float]) -> dict[str, str]:
    return {k: str(int(v + 1e-6)) if k in INTEGRAL_QUOTA_KEYS else java_double(v) for k, v in quotas.items()}


def _quota_name(entries: dict[str, str | None], kind: str) -> str:
    name = entries[kind]
    if name is None:
        return L.DEFAULT_ENTITY
    return name if kind == "ip" else L.sanitize(name)


def quota_znode(entries: dict[str, str | None], quotas: dict[str, float],
                scram: dict[str, str] | None = None) -> EntityZNode | None:
    """A client quota entity's znode (a user's also holds its SCRAM credentials). An entity with
    nothing left keeps an empty config, as Kafka writes it. None: not an entity ZooKeeper holds."""
    parents: tuple[str, ...] = ()
    if "user" in entries and "client-id" not in entries:
        path = L.config_path(L.USER_CONFIG, _quota_name(entries, "user"))
    elif "user" in entries:
        user = L.config_path(L.USER_CONFIG, _quota_name(entries, "user"))
        parents = (user, f"{user}/clients")
        path = f"{user}/clients/{_quota_name(entries, 'client-id')}"
    elif "client-id" in entries:
        path = L.config_path(L.CLIENT_CONFIG, _quota_name(entries, "client-id"))
    elif "ip" in entries:
        path = L.config_path(L.IP_CONFIG, _quota_name(entries, "ip"))
    else:
        return None
    props = quota_props(quotas) | (scram or {})
    return EntityZNode(path, _quota_content(props), L.encode_config(props), _config_change(path), parents)


def acl_znode(resource_type: int, name: str, pattern: int, entries: list[L.AclEntry]) -> EntityZNode:
    """A resource pattern's ACLs (none left: the znode is deleted)."""
    path = L.acl_path(pattern, resource_type, name)
    type_name = L.pascal(ResourceType(resource_type).name)
    if pattern == PatternType.LITERAL:
        change = (ACL_CHANGES, f"{type_name}:{name}".encode())
    else:
        change = (ACL_EXTENDED_CHANGES, L.dumps({"version": 1, "resourceType": type_name, "name": name,
                                                 "patternType": L.pascal(PatternType(pattern).name)}))
    # ZooKeeper-mode brokers' authorizer creates the per-type parents at start-up; kraftsim makes sure.
    parents = (L.acl_root(pattern), f"{L.acl_root(pattern)}/{type_name}")
    return EntityZNode(path, frozenset(entries) or None, L.encode_acls(entries), change, parents)


PRODUCER_ID_BLOCK_SIZE = 1000


def producer_id_znode(next_producer_id: int) -> EntityZNode | None:
    """Kafka's writeProducerId: a block owned by no broker (-1) starting at the next producer id.
    Nothing while no block was ever handed out."""
    if next_producer_id < 0:
        return None
    block = L.ProducerIdBlock(-1, next_producer_id, next_producer_id + PRODUCER_ID_BLOCK_SIZE - 1)
    return EntityZNode(L.PRODUCER_ID_BLOCK, next_producer_id, block.encode(), None)


def token_znode(token_id: str, token: L.TokenZNode | None) -> EntityZNode:
    """A delegation token's znode (an expired or cancelled one: deleted)."""
    return EntityZNode(f"{L.DELEGATION_TOKENS}/{token_id}", token, token.encode() if token else None, None)

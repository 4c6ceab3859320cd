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

from kraftsim.metadata.image.topics import Topic
from kraftsim.migration import zk_layout as L
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

"""``kraftsim zk seed``: a ZooKeeper-mode cluster written straight into ZooKeeper.

What a ZooKeeper-mode Kafka cluster leaves there, in Kafka's layout (``zk_layout``): broker
registrations, topics with ids and round-robin assignments, partition states, topic and broker
configs, client quotas, SCRAM credentials, ACLs (literal and prefixed), the producer id block,
a delegation token per user, /controller_epoch and /controller. It is for migration rehearsals and benchmarks, so it is
deterministic (but for topic ids and SCRAM salts, which are random as in Kafka) and fast: znodes
go in multi-ops of a few hundred.

The broker registrations and /controller are ephemeral in a live ZooKeeper-mode cluster; here
no broker holds a session, so the seed writes them persistent (a simulated ZooKeeper-mode
broker registers with the KRaft controller itself).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from kraftsim.metadata.authorizer.acl_bindings import AclPermissionType, PatternType
from kraftsim.metadata.authorizer.authorizer import AclOperation, ResourceType
from kraftsim.migration import zk_layout as L
from kraftsim.rpc.uuids import random_uuid

OPS_PER_MULTI: Final = 250
SCRAM_ITERATIONS: Final = 4096


@dataclass(frozen=True)
class SeedSpec:
    brokers: int = 3
    topics: int = 10
    partitions: int = 3
    replication_factor: int = 2
    users: int = 2
    topic_prefix: str = "topic-"
    first_broker_id: int = 1
    broker_port: int = 9092
    zk_controller_epoch: int = 1
    cluster_id: str | None = None  # /cluster/id, when given (a broker started later keeps it)

    def check(self) -> None:
        if self.brokers < 1:
            raise ValueError("--brokers must be at least 1")
        if not 1 <= self.replication_factor <= self.brokers:
            raise ValueError(f"--replication-factor must be between 1 and --brokers ({self.brokers})")
        if self.topics < 0 or self.partitions < 1 or self.users < 0:
            raise ValueError("--topics and --users must be at least 0, --partitions at least 1")

    @property
    def broker_ids(self) -> list[int]:
        return list(range(self.first_broker_id, self.first_broker_id + self.brokers))

    def topic_names(self) -> list[str]:
        return [f"{self.topic_prefix}{i}" for i in range(self.topics)]

    def assignment(self, topic_index: int) -> dict[int, list[int]]:
        ids = self.broker_ids
        n = len(ids)
        return {p: [ids[(topic_index + p + r) % n] for r in range(self.replication_factor)]
                for p in range(self.partitions)}


def scram_credential(mechanism: str, password: str, salt: bytes | None = None,
                     iterations: int = SCRAM_ITERATIONS) -> L.ScramCredential:
    """RFC 5802's stored and server keys, as Kafka's ScramFormatter derives them."""
    digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
    salt = salt if salt is not None else os.urandom(16)
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", digest).digest()
    return L.ScramCredential(salt, stored_key, server_key, iterations)


def znodes(spec: SeedSpec, now_ms: int = 0) -> Iterator[tuple[str, bytes]]:
    """Every znode the seed creates, parents first (the persistent top-level paths aside)."""
    first = spec.broker_ids[0]
    if spec.cluster_id is not None:
        yield L.CLUSTER_ID, L.encode_cluster_id(spec.cluster_id)
    yield L.CONTROLLER_EPOCH, L.encode_controller_epoch(spec.zk_controller_epoch)
    yield L.CONTROLLER, L.ControllerZNode(first, now_ms).encode()
    for b in spec.broker_ids:
        port = spec.broker_port + b
        yield L.broker_path(b), L.BrokerZNode(b, "127.0.0.1", port, (f"PLAINTEXT://127.0.0.1:{port}",),
                                              {"PLAINTEXT": "PLAINTEXT"}, timestamp_ms=now_ms).encode()
    for i, topic in enumerate(spec.topic_names()):
        assignment = spec.assignment(i)
        yield L.topic_path(topic), L.TopicZNode(random_uuid(), assignment).encode()
        config = {"retention.ms": str(3_600_000 * (i % 24 + 1))} if i % 2 == 0 else {}
        if i % 3 == 0:
            config["cleanup.policy"] = "compact"
        yield L.config_path(L.TOPIC_CONFIG, topic), L.encode_config(config)
        yield L.partitions_path(topic), b""
        for p, replicas in assignment.items():
            yield L.partition_path(topic, p), b""
            state = L.PartitionState(replicas[0], 0, spec.zk_controller_epoch, list(replicas))
            yield L.partition_state_path(topic, p), state.encode()
    yield L.config_path(L.BROKER_CONFIG, L.DEFAULT_ENTITY), L.encode_config({"log.retention.ms": "604800000"})
    yield L.config_path(L.BROKER_CONFIG, str(first)), L.encode_config({"log.cleaner.threads": "2"})
    yield L.config_path(L.USER_CONFIG, L.DEFAULT_ENTITY), L.encode_config({"producer_byte_rate": "1048576"})
    yield L.config_path(L.CLIENT_CONFIG, L.DEFAULT_ENTITY), L.encode_config({"consumer_byte_rate": "2097152"})
    yield L.config_path(L.CLIENT_CONFIG, "client-1"), L.encode_config({"request_percentage": "50.0"})
    yield L.config_path(L.IP_CONFIG, "127.0.0.1"), L.encode_config({"connection_creation_rate": "100.0"})
    for u in range(spec.users):
        user = f"user-{u}@example"
        znode = L.sanitize(user)
        config = {"producer_byte_rate": str(1024 * (u + 1)),
                  "SCRAM-SHA-256": scram_credential("SCRAM-SHA-256", f"{user}-secret").encode()}
        if u % 2 == 0:
            config["SCRAM-SHA-512"] = scram_credential("SCRAM-SHA-512", f"{user}-secret").encode()
        yield L.config_path(L.USER_CONFIG, znode), L.encode_config(config)
        yield f"{L.CONFIG}/{L.USER_CONFIG}/{znode}/clients", b""
        yield (L.config_path(L.USER_CONFIG, f"{znode}/clients/client-{u}"),
               L.encode_config({"consumer_byte_rate": str(4096 * (u + 1))}))
        principal = f"User:{user}"
        allow = AclPermissionType.ALLOW
        yield from _acl(PatternType.LITERAL, ResourceType.TOPIC, spec.topic_names()[0] if spec.topics else "t",
                        [L.AclEntry(principal, allow, AclOperation.READ, "*"),
                         L.AclEntry(principal, allow, AclOperation.DESCRIBE, "*")])
        yield from _acl(PatternType.PREFIXED, ResourceType.GROUP, f"group-{u}-",
                        [L.AclEntry(principal, allow, AclOperation.READ, "*")])
    yield from _acl(PatternType.LITERAL, ResourceType.CLUSTER, "kafka-cluster",
                    [L.AclEntry("User:admin", AclPermissionType.ALLOW, AclOperation.ALL, "*"),
                     L.AclEntry("User:mallory", AclPermissionType.DENY, AclOperation.ALTER, "10.0.0.1")])
    yield L.PRODUCER_ID_BLOCK, L.ProducerIdBlock(first, 0, 999).encode()
    for u in range(spec.users):
        day = 86_400_000
        owner = f"User:user-{u}@example"
        yield (f"{L.DELEGATION_TOKENS}/token-{u}",
               L.TokenZNode(f"token-{u}", owner, owner, ("User:admin",) if u % 2 == 0 else (), now_ms,
                            now_ms + 7 * day, now_ms + day).encode())


def _acl(pattern: int, resource_type: int, name: str, entries: list[L.AclEntry]) -> Iterator[tuple[str, bytes]]:
    """ACL znodes: one per resource, its entries gathered (a later write for the same resource
    in the same seed replaces the znode's data with the union)."""
    yield L.acl_path(pattern, resource_type, name), L.encode_acls(entries)


def _merge_acl_znodes(nodes: Iterator[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """The same ACL resource named twice becomes one znode with every entry, in first-seen order."""
    out: dict[str, bytes] = {}
    for path, data in nodes:
        if path in out and path.startswith((L.ACL_LITERAL, L.ACL_EXTENDED)):
            old = L.decode_acls(path, out[path])
            new = [e for e in L.decode_acls(path, data) if e not in old]
            data = L.encode_acls(old + new)
        out[path] = data
    return list(out.items())


def _parents(path: str) -> Iterator[str]:
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        yield "/" + "/".join(parts[:i])


def seed(client: Any, spec: SeedSpec, now_ms: int = 0) -> int:
    """Write the cluster through a started kazoo client; returns the number of znodes created.

    The ZooKeeper must not hold a cluster already (a znode that exists fails the multi-op)."""
    spec.check()
    for path in L.PERSISTENT_PATHS:
        client.ensure_path(path)
    nodes = _merge_acl_znodes(znodes(spec, now_ms))
    known: set[str] = set(L.PERSISTENT_PATHS) | {"/brokers", "/config", "/admin"}
    ops: list[tuple[str, bytes]] = []
    for path, data in nodes:
        for parent in _parents(path):
            if parent not in known:
                known.add(parent)
                if client.exists(parent) is None:
                    ops.append((parent, b""))
        known.add(path)
        ops.append((path, data))
    for start in range(0, len(ops), OPS_PER_MULTI):
        txn = client.transaction()
        for path, data in ops[start:start + OPS_PER_MULTI]:
            if path in L.PERSISTENT_PATHS:  # created empty above
                txn.set_data(path, data)
            else:
                txn.create(path, data)
        results = txn.commit()
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            first = next(((p, r) for (p, _), r in zip(ops[start:start + OPS_PER_MULTI], results, strict=True)
                          if isinstance(r, Exception) and type(r).__name__ != "RolledBackError"), None)
            where = f" at {first[0]}" if first else ""
            raise SeedError(f"ZooKeeper refused the seed{where}: "
                            f"{type(first[1]).__name__ if first else type(failed[0]).__name__} "
                            f"(does it hold a cluster already?)")
    return len(ops)


class SeedError(Exception):
    pass

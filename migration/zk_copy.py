"""Reading a ZooKeeper-mode cluster into metadata records (Kafka's ``readAllMetadata``).

The sources come in Kafka's order: topics (each one batch: its TopicRecord, its topic configs,
its PartitionRecords), broker configs, client quotas with SCRAM credentials, the producer id
block, ACLs (at most 100 records a batch), then delegation tokens. Each source yields its own
batches; ``merged`` buffers them as Kafka's BufferingBatchConsumer does, into batches of at
least ``zookeeper.metadata.migration.min.batch.size`` records, never splitting one.

Reading is synchronous (a ZooKeeper client in a worker thread, its reads pipelined where it can);
nothing here writes anything. Names are visited in sorted order so that a copy is reproducible
(Kafka's order is that of its hash sets; the records are the same).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Final, Protocol

from kraftsim.metadata.authorizer.acl_bindings import PatternType
from kraftsim.metadata.messages import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    PartitionRecord,
    ProducerIdsRecord,
    TopicRecord,
    UserScramCredentialRecord,
)
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.migration import zk_layout as L
from kraftsim.migration.passwords import NoOpCodec, PasswordCodec, decoded
from kraftsim.rpc.uuids import random_uuid

MAX_ACL_BATCH: Final = 100  # ZkMigrationClient.MaxBatchSize
TOPIC_RESOURCE: Final = 2  # ConfigResource.Type.TOPIC
BROKER_RESOURCE: Final = 4  # ConfigResource.Type.BROKER
EntityData = ClientQuotaRecord.EntityData


class ZkReader(Protocol):
    """What the copy needs from ZooKeeper: data with its zkVersion (None when absent), children."""

    def get(self, path: str) -> tuple[bytes, int] | None: ...

    def children(self, path: str) -> list[str]: ...


STATES_PER_READ: Final = 2000  # partition states a round of reads asks for, in whole topics
Answer = tuple[bytes, int] | None


def get_many(zk: ZkReader, paths: list[str]) -> list[Answer]:
    """Pipelined reads when the reader can (``ZkSession.get_many``), else one by one."""
    many = getattr(zk, "get_many", None)
    if many is not None:
        return list(many(paths))
    return [zk.get(p) for p in paths]


def send_many(zk: ZkReader, paths: list[str]) -> Callable[[], list[Answer]]:
    """The reads sent now and their answers awaited when the function returned is called
    (``ZkSession.send_many``); a reader without it reads when called."""
    send = getattr(zk, "send_many", None)
    if send is not None:
        collect: Callable[[], list[Answer]] = send(paths)
        return collect
    return lambda: get_many(zk, paths)


@dataclass
class Manifest:
    """Kafka's MigrationManifest: what the copy saw, for the progress line and the final log."""
    znodes: int = 0
    records: int = 0
    batches: int = 0
    by_type: dict[str, int] = field(default_factory=dict)

    def count(self, batch: list[RecordAndVersion]) -> None:
        self.records += len(batch)
        for r, _ in batch:
            name = type(r).__name__
            self.by_type[name] = self.by_type.get(name, 0) + 1

    def __str__(self) -> str:
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(self.by_type.items()))
        return f"{self.znodes} znodes read, {self.records} records in {self.batches} batches ({kinds})"


class CountingReader:
    """A ZkReader that counts what it reads (the manifest's znodes)."""

    def __init__(self, zk: ZkReader, manifest: Manifest) -> None:
        self.zk = zk
        self.manifest = manifest

    def get(self, path: str) -> tuple[bytes, int] | None:
        self.manifest.znodes += 1
        return self.zk.get(path)

    def get_many(self, paths: list[str]) -> list[tuple[bytes, int] | None]:
        self.manifest.znodes += len(paths)
        return get_many(self.zk, paths)

    def send_many(self, paths: list[str]) -> Callable[[], list[Answer]]:
        self.manifest.znodes += len(paths)
        return send_many(self.zk, paths)

    def children(self, path: str) -> list[str]:
        return self.zk.children(path)


# ---- topics ------------------------------------------------------------------------------------
def topics_to_migrate(zk: ZkReader) -> list[str]:
    """Every topic but those pending deletion (brokers reconcile those after the migration)."""
    pending = set(zk.children(L.DELETE_TOPICS))
    return sorted(t for t in zk.children(L.TOPICS) if t not in pending)


def assigned_broker_ids(zk: ZkReader) -> set[int]:
    """Every broker named by a replica assignment: the migration waits for all of them. Only
    the replica lists are taken from each topic znode, and the distinct ids made ints once (not
    a TopicZNode per topic: this runs before the copy, on every topic, and takes half the time)."""
    ids: set[object] = set()
    topics = topics_to_migrate(zk)
    for topic, got in zip(topics, get_many(zk, [L.topic_path(t) for t in topics]), strict=True):
        if got is not None:
            path = L.topic_path(topic)
            try:
                for replicas in (L.loads(got[0], path).get("partitions") or {}).values():
                    ids.update(replicas)
            except (TypeError, AttributeError):
                raise L.LayoutError(f"{path}: bad partitions") from None
    try:
        return {int(b) for b in ids}  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise L.LayoutError(f"{L.TOPICS}: a replica assignment names a broker id that is not a number") from None


def registered_broker_ids(zk: ZkReader) -> set[int]:
    out = set()
    for child in zk.children(L.BROKER_IDS):
        try:
            out.add(int(child))
        except ValueError:
            continue
    return out


def _topic_batches(zk: ZkReader, topics: list[str], codec: PasswordCodec) -> Iterator[list[RecordAndVersion]]:
    """Per topic one batch: TopicRecord, its configs, its PartitionRecords. Every topic's znode
    and config znode are read first, at once (Kafka too reads every assignment first); then the
    partition states, in rounds of whole topics, each round's reads sent before the records of
    the round before it are built, so that ZooKeeper answers while they are."""
    n = len(topics)
    got = get_many(zk, [L.topic_path(t) for t in topics] + [L.config_path(L.TOPIC_CONFIG, t) for t in topics])
    rounds = _state_rounds(zk, topics, got[:n])
    current = next(rounds, None)
    while current is not None:
        chunk, paths, collect = current
        current = next(rounds, None)  # the next round's reads go out before this round's answers are used
        states = zip(paths, collect(), strict=True)
        for i, topic, t in chunk:
            if t.topic_id is None:
                raise L.LayoutError(f"{L.topic_path(topic)}: no topic_id (the ZooKeeper cluster must run 2.8 or "
                                    f"later)")
            batch: list[RecordAndVersion] = [(TopicRecord(name=topic, topic_id=t.topic_id), 0)]
            config = got[n + i]
            for key, value in decoded(L.decode_config(L.config_path(L.TOPIC_CONFIG, topic),
                                                      config[0] if config else None), codec).items():
                batch.append((ConfigRecord(resource_type=TOPIC_RESOURCE, resource_name=topic, name=key,
                                           value=value), 0))
            for p in sorted(t.partitions):
                path, state = next(states)
                batch.append((_partition_record(p, t.topic_id, t, path, state), 0))
            yield batch


Round = tuple[list[tuple[int, str, L.TopicZNode]], list[str], Callable[[], list[Answer]]]


def _state_rounds(zk: ZkReader, topics: list[str], znodes: list[Answer]) -> Iterator[Round]:
    """The topics (index, name, assignment; those whose znode is gone left out) in rounds of at
    least STATES_PER_READ partitions, each with its partition states' reads, sent as the round
    is taken (their paths, and the answers when called): the states of each topic's partitions
    in the order of their ids."""
    chunk: list[tuple[int, str, L.TopicZNode]] = []
    paths: list[str] = []
    for i, (topic, got) in enumerate(zip(topics, znodes, strict=True)):
        if got is None:
            continue
        t = L.TopicZNode.decode(topic, got[0])
        chunk.append((i, topic, t))
        paths += [L.partition_state_path(topic, p) for p in sorted(t.partitions)]
        if len(paths) >= STATES_PER_READ:
            yield chunk, paths, send_many(zk, paths)
            chunk, paths = [], []
    if chunk:
        yield chunk, paths, send_many(zk, paths)


def _partition_record(p: int, topic_id: uuid.UUID, t: L.TopicZNode, path: str,
                      state: tuple[bytes, int] | None) -> PartitionRecord:
    replicas = t.partitions[p]
    if state is None:
        # Kafka: no state znode means ISR = replicas, leader = the first, epochs 0.
        isr, leader, leader_epoch, partition_epoch, recovery = list(replicas), replicas[0], 0, 0, 0
    else:
        leader, leader_epoch, _, isr, recovery = L.partition_state_fields(path, state[0])
        partition_epoch = state[1]  # the state znode's zkVersion
    return PartitionRecord(partition_id=p, topic_id=topic_id, replicas=list(replicas),
                           removing_replicas=list(t.removing.get(p, ())), adding_replicas=list(t.adding.get(p, ())),
                           isr=isr, leader=leader, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                           leader_recovery_state=recovery)


# ---- configs, quotas, SCRAM ----------------------------------------------------------------------
def _broker_config_batches(zk: ZkReader, codec: PasswordCodec) -> Iterator[list[RecordAndVersion]]:
    for entity in sorted(zk.children(f"{L.CONFIG}/{L.BROKER_CONFIG}")):
        path = L.config_path(L.BROKER_CONFIG, entity)
        got = zk.get(path)
        name = "" if entity == L.DEFAULT_ENTITY else entity
        batch: list[RecordAndVersion] = [
            (ConfigRecord(resource_type=BROKER_RESOURCE, resource_name=name, name=k, value=v), 0)
            for k, v in decoded(L.decode_config(path, got[0] if got else None), codec).items()]
        if batch:
            yield batch


def _entity(entity_type: str, znode_name: str) -> EntityData:
    """Default quota entities have a null name (configs use ""); other names are desanitized."""
    name = None if znode_name == L.DEFAULT_ENTITY else L.desanitize(znode_name)
    return EntityData(entity_type=entity_type, entity_name=name)


def _quota_values(path: str, props: dict[str, str]) -> dict[str, float]:
    out = {}
    for k, v in props.items():
        try:
            out[k] = float(v)
        except ValueError:
            raise L.LayoutError(f"{path}: unexpected client quota configuration value: {k} -> {v}") from None
    return out


def _quota_batch(entity: list[EntityData], quotas: dict[str, float]) -> list[RecordAndVersion]:
    return [(ClientQuotaRecord(entity=list(entity), key=k, value=v), 0) for k, v in quotas.items()]


def _entity_type_batches(zk: ZkReader, config_type: str, entity_type: str) -> Iterator[list[RecordAndVersion]]:
    for znode in sorted(zk.children(f"{L.CONFIG}/{config_type}")):
        path = L.config_path(config_type, znode)
        got = zk.get(path)
        props = L.decode_config(path, got[0] if got else None)
        if config_type == L.USER_CONFIG:
            for mechanism, code in L.SCRAM_MECHANISMS.items():
                text = props.pop(mechanism, None)
                if text is not None:
                    c = L.ScramCredential.decode(text)
                    yield [(UserScramCredentialRecord(name=L.desanitize(znode), mechanism=code, salt=c.salt,
                                                      stored_key=c.stored_key, server_key=c.server_key,
                                                      iterations=c.iterations), 0)]
        quotas = _quota_values(path, props)
        if quotas:
            yield _quota_batch([_entity(entity_type, znode)], quotas)


def _quota_batches(zk: ZkReader) -> Iterator[list[RecordAndVersion]]:
    yield from _entity_type_batches(zk, L.USER_CONFIG, "user")
    yield from _entity_type_batches(zk, L.CLIENT_CONFIG, "client-id")
    for user in sorted(zk.children(f"{L.CONFIG}/{L.USER_CONFIG}")):
        for client in sorted(zk.children(f"{L.CONFIG}/{L.USER_CONFIG}/{user}/clients")):
            path = L.config_path(L.USER_CONFIG, f"{user}/clients/{client}")
            got = zk.get(path)
            quotas = _quota_values(path, L.decode_config(path, got[0] if got else None))
            yield _quota_batch([_entity("user", user), _entity("client-id", client)], quotas)
    yield from _entity_type_batches(zk, L.IP_CONFIG, "ip")


# ---- producer ids, ACLs ------------------------------------------------------------------------
def _producer_id_batches(zk: ZkReader) -> Iterator[list[RecordAndVersion]]:
    got = zk.get(L.PRODUCER_ID_BLOCK)
    if got is not None and got[0]:
        block = L.ProducerIdBlock.decode(got[0])
        yield [(ProducerIdsRecord(broker_id=block.broker, broker_epoch=-1, next_producer_id=block.block_end + 1), 0)]


def _acl_batches(zk: ZkReader) -> Iterator[list[RecordAndVersion]]:
    for pattern in (PatternType.LITERAL, PatternType.PREFIXED):
        root = L.acl_root(pattern)
        for type_name in sorted(zk.children(root)):
            resource_type = L.resource_type_code(type_name, root)
            for name in sorted(zk.children(f"{root}/{type_name}")):
                path = f"{root}/{type_name}/{name}"
                got = zk.get(path)
                if got is None:
                    continue
                batch: list[RecordAndVersion] = []
                for e in L.decode_acls(path, got[0]):
                    batch.append((AccessControlEntryRecord(
                        id=random_uuid(), resource_type=resource_type, resource_name=name, pattern_type=int(pattern),
                        principal=e.principal, host=e.host, operation=e.operation, permission_type=e.permission), 0))
                    if len(batch) == MAX_ACL_BATCH:
                        yield batch
                        batch = []
                if batch:
                    yield batch


def _token_batches(zk: ZkReader) -> Iterator[list[RecordAndVersion]]:
    """Every delegation token, in one batch."""
    batch: list[RecordAndVersion] = []
    for token_id in sorted(zk.children(L.DELEGATION_TOKENS)):
        path = f"{L.DELEGATION_TOKENS}/{token_id}"
        got = zk.get(path)
        t = L.TokenZNode.decode(path, got[0] if got else None)
        if t is not None:
            batch.append((DelegationTokenRecord(owner=t.owner, requester=t.requester, renewers=list(t.renewers),
                                                issue_timestamp=t.issue_timestamp, max_timestamp=t.max_timestamp,
                                                expiration_timestamp=t.expiry_timestamp, token_id=t.token_id), 0))
    if batch:
        yield batch


def read_all_metadata(zk: ZkReader, codec: PasswordCodec | None = None) -> Iterator[list[RecordAndVersion]]:
    """Every source's batches, in Kafka's order; topic and broker password configs decrypted
    with ``codec`` (Kafka's passwordEncoder)."""
    codec = codec or NoOpCodec()
    yield from _topic_batches(zk, topics_to_migrate(zk), codec)
    yield from _broker_config_batches(zk, codec)
    yield from _quota_batches(zk)
    yield from _producer_id_batches(zk)
    yield from _acl_batches(zk)
    yield from _token_batches(zk)


def merged(batches: Iterable[list[RecordAndVersion]], min_size: int) -> Iterator[list[RecordAndVersion]]:
    """BufferingBatchConsumer: whole batches gathered until at least ``min_size`` records."""
    buffered: list[RecordAndVersion] = []
    for batch in batches:
        buffered.extend(batch)
        if len(buffered) >= min_size:
            yield buffered
            buffered = []
    if buffered:
        yield buffered

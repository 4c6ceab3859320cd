"""Topics and partitions (TopicRecord, PartitionRecord, PartitionChangeRecord, RemoveTopicRecord,
ClearElrRecord).

Replay follows Kafka 3.9's ReplicationControlManager and PartitionRegistration.merge:

* PartitionRecord creates a partition, or replaces an existing one wholesale.
* PartitionChangeRecord is a delta: null lists and Leader = -2 / LeaderRecoveryState = -1 mean
  "unchanged". Any Leader other than -2 bumps the leader epoch (even if it names the current
  leader: that is how the controller forces a bump); every record bumps the partition epoch.
* Directories that are absent or all MIGRATING become MIGRATING for every replica, so a
  partition always has one directory per replica.
* ClearElrRecord (4.x) empties the ELR and LastKnownElr of every partition of the named topic
  (every topic when the name is empty) that has either, as a PartitionChangeRecord setting both
  to [] would: the partition epoch goes up by one, the leader epoch stays.
* RemoveTopicRecord drops the topic, its partitions and their index entries. Its topic configs
  live in the configs slice; MetadataImage removes them in the same replay.

The secondary indexes the controller reads on hot paths are maintained here, by replay only:
per-broker ISR (and ELR, as Kafka's index keeps it: ``ElrIndex``) membership, leaderless partitions (Kafka's OfflinePartitionsCount is
"leader == -1"), partitions whose leader is not replicas[0] (PreferredReplicaImbalanceCount),
partitions being reassigned, and the global partition count. Index entries use a small
per-topic int key instead of (uuid, partition) tuples to stay compact.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kraftsim.metadata import versions
from kraftsim.metadata.directories import MIGRATING
from kraftsim.metadata.image import interning
from kraftsim.metadata.image.errors import ReplayError, UnwritableMetadataError
from kraftsim.metadata.image.partition_sets import CHUNK_BITS, CHUNK_LOW, TOPIC_SHIFT, PartitionSet
from kraftsim.metadata.messages import PartitionRecord, TopicRecord
from kraftsim.metadata.records import FramedRecord, frame
from kraftsim.metadata.topic_names import has_collision_chars, unify_collision_chars
from kraftsim.rpc.message import Message

NO_LEADER = -1
NO_LEADER_CHANGE = -2
RECOVERED = 0
RECOVERING = 1
LRS_NO_CHANGE = -1


_EMPTY: tuple = interning.EMPTY
_I32 = struct.Struct(">i")
_TAIL_OFFSET = 3 + 4 + 16  # a PartitionRecord's frame header, partition id and topic id

# ISRs by number, for the ISR index entries a bulk load defers (TopicsImage.defer_isr): an entry
# is (topic chunk << 32 | ISR number) -> the bits of the partitions of that chunk with that ISR.
# Interned ISR tuples are few (a few thousand for a large cluster), so the numbering stays small.
_isr_numbers: dict[tuple[int, ...], int] = {}
_isr_by_number: list[tuple[int, ...]] = []


def isr_number(isr: tuple[int, ...]) -> int:
    n = _isr_numbers.get(isr)
    if n is None:
        n = _isr_numbers[isr] = len(_isr_by_number)
        _isr_by_number.append(isr)
    return n


_migrating: list[tuple[uuid.UUID, ...]] = []


def migrating_dirs(n: int) -> tuple[uuid.UUID, ...]:
    """The shared all-MIGRATING directory tuple for ``n`` replicas."""
    while len(_migrating) <= n:
        _migrating.append(interning.uuids((MIGRATING,) * len(_migrating)))
    return _migrating[n]


def _dirs(dirs: list[uuid.UUID] | tuple[uuid.UUID, ...] | None, n: int) -> tuple[uuid.UUID, ...]:
    """Kafka's defaultToMigrating: absent or all-MIGRATING lists become MIGRATING x n."""
    if not dirs:
        return migrating_dirs(n)
    for d in dirs:
        if d.int:  # not MIGRATING (uuid 0); .int avoids UUID.__eq__'s Python-level cost
            return interning.uuids(dirs)
    return migrating_dirs(n)


@dataclass(slots=True)
class Partition:
    """One partition's registration. Lists are shared interned tuples, and the fast replay path
    shares one Partition between partitions with the same registration (fast_replay.py): never
    mutate one in place; replay replaces it."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    directories: tuple[uuid.UUID, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    leader_recovery_state: int = RECOVERED
    removing_replicas: tuple[int, ...] = _EMPTY
    adding_replicas: tuple[int, ...] = _EMPTY
    elr: tuple[int, ...] = _EMPTY
    last_known_elr: tuple[int, ...] = _EMPTY

    def is_reassigning(self) -> bool:
        return bool(self.removing_replicas or self.adding_replicas)

    def directory(self, replica: int) -> uuid.UUID:
        for r, d in zip(self.replicas, self.directories, strict=True):
            if r == replica:
                return d
        raise KeyError(f"Replica {replica} is not assigned to this partition.")

    def to_record(self, topic_id: uuid.UUID, partition_id: int, mv: int,
                  release: versions.Release, elr_enabled: bool = False) -> tuple[Message, int]:
        """``elr_enabled``: the image's ELR feature (4.x writes the ELR fields, when not empty,
        only with it on, and drops them silently otherwise; 3.9 writes them from its 4.0-IV0 and
        refuses to lose them below)."""
        rec = PartitionRecord(
            partition_id=partition_id, topic_id=topic_id, replicas=list(self.replicas),
            isr=list(self.isr), removing_replicas=list(self.removing_replicas),
            adding_replicas=list(self.adding_replicas), leader=self.leader,
            leader_recovery_state=self.leader_recovery_state, leader_epoch=self.leader_epoch,
            partition_epoch=self.partition_epoch)
        if not release.is_3x:
            if elr_enabled:
                if self.elr:
                    rec.eligible_leader_replicas = list(self.elr)
                if self.last_known_elr:
                    rec.last_known_elr = list(self.last_known_elr)
        elif release.is_elr_supported(mv):
            if self.elr:
                rec.eligible_leader_replicas = list(self.elr)
            if self.last_known_elr:
                rec.last_known_elr = list(self.last_known_elr)
        elif self.elr or self.last_known_elr:
            raise UnwritableMetadataError("the eligible leader replicas of one or more partitions")
        if release.directory_assignment_supported(mv):
            rec.directories = list(self.directories)
        elif any(d != MIGRATING for d in self.directories):
            raise UnwritableMetadataError("the directory assignment state of one or more replicas")
        return rec, release.partition_record_version(mv)


_TAILS_MAX = 1 << 16


def _framed_records(frozen: list[tuple[uuid.UUID, str, dict[int, Partition]]],
                    mv: int, release: versions.Release, elr_enabled: bool) -> Iterator[tuple[Message | FramedRecord, int]]:
    """The topics' records, each PartitionRecord framed: its 3-byte header, partition id and
    topic id, then the tail (replicas onwards) that its Partition decides. Partitions replayed
    from the log share one Partition per shape (fast_replay), a few thousand for a million
    partitions, so a tail is framed once per shape by the general encoder (the bytes are the
    same by construction, and so are the errors: to_record refuses what it refused) and a
    snapshot of the create benchmark's million partitions spends a fraction of what a record
    object per partition, encoded, cost. The cache holds each Partition it names (an id is not
    reused while it is held) and is bounded (partitions changed one by one share nothing)."""
    tails: dict[int, tuple[Partition, bytes, bytes, int]] = {}
    pack = _I32.pack
    for tid, name, parts in frozen:
        yield TopicRecord(name=name, topic_id=tid), 0
        tb = tid.bytes
        for pid in sorted(parts):
            p = parts[pid]
            hit = tails.get(id(p))
            if hit is not None and hit[0] is p:
                yield FramedRecord(hit[1] + pack(pid) + tb + hit[2]), hit[3]
                continue
            rec, version = p.to_record(tid, pid, mv, release, elr_enabled)
            value = frame(rec, version)
            if value[3:_TAIL_OFFSET] != pack(pid) + tb:  # not that layout (a 3-byte header): as it is
                yield rec, version
                continue
            if len(tails) >= _TAILS_MAX:
                tails.clear()
            tails[id(p)] = (p, value[:3], value[_TAIL_OFFSET:], version)
            yield FramedRecord(value), version


@dataclass(slots=True, eq=False)
class Topic:
    """``key`` is a process-local small int naming the topic in the indexes; never reused."""

    id: uuid.UUID
    name: str
    key: int
    partitions: dict[int, Partition]

    def same_state(self, other: Topic) -> bool:
        return self.id == other.id and self.name == other.name and self.partitions == other.partitions

    def __repr__(self) -> str:
        return f"Topic({self.name!r}, {self.id}, {len(self.partitions)} partitions)"


class TopicsImage:
    __slots__ = ("by_id", "by_name", "by_key", "by_id_bytes", "colliding", "_isr", "defer_isr", "elr_index",
                 "leaderless", "imbalanced", "reassigning", "partition_count", "_next_key")

    def __init__(self) -> None:
        self.by_id: dict[uuid.UUID, Topic] = {}
        self.by_name: dict[str, Topic] = {}
        self.by_key: dict[int, Topic] = {}
        self.by_id_bytes: dict[bytes, Topic] = {}  # for the fast decode path (fast_replay.py)
        # normalized name -> names with '.'/'_' that map to it (CreateTopics collision check)
        self.colliding: dict[str, set[str]] = {}
        self._isr: dict[int, PartitionSet] = {}
        # New partitions a bulk load (fast_replay) added to the image but not yet to _isr.
        # Whatever reads or changes the ISR index writes them first, so the index is never seen
        # incomplete. A controller writes them in slices after it becomes active
        # (settle_isr_index), not before: a million partitions' take a second.
        self.defer_isr = IsrBacklog()
        self.elr_index = ElrIndex()
        self.leaderless = PartitionSet()
        self.imbalanced = PartitionSet()
        self.reassigning = PartitionSet()
        self.partition_count = 0
        self._next_key = 0

    # ----- reads -------------------------------------------------------------------------

    @property
    def isr_index(self) -> dict[int, PartitionSet]:
        """Broker id -> the partitions whose ISR holds it (complete: deferred entries written)."""
        if self.defer_isr:
            self.settle_isr_index()
        return self._isr

    def settle_isr_index(self, budget: int = 0) -> bool:
        """Write deferred ISR index entries into the index: all of them, or at most ``budget``
        partitions'. True when none are left."""
        backlog = self.defer_isr
        if not backlog:
            return True
        a = backlog.done
        b = len(backlog.chunks) if budget <= 0 else min(a + budget, len(backlog.chunks))
        index = self._isr
        isrs = _isr_by_number
        # Entries come in runs of one topic chunk (a load replays a topic's partitions in a
        # row): a run's bits are gathered per broker first, and each broker's set merged once.
        run_chunk = -1
        gathered: dict[int, int] = {}
        get = gathered.get
        for ck, number, low in zip(backlog.chunks[a:b], backlog.isrs[a:b], backlog.bits[a:b], strict=True):
            if ck != run_chunk:
                if gathered:
                    _merge_isr_run(index, run_chunk, gathered)
                    gathered.clear()
                run_chunk = ck
            bit = 1 << low
            for broker in isrs[number]:
                gathered[broker] = get(broker, 0) | bit
        if gathered:
            _merge_isr_run(index, run_chunk, gathered)
        backlog.done = b
        if b < len(backlog.chunks):
            return False
        backlog.clear()
        return True

    @property
    def topic_count(self) -> int:
        return len(self.by_id)

    @property
    def offline_partition_count(self) -> int:
        return len(self.leaderless)

    @property
    def preferred_replica_imbalance_count(self) -> int:
        return len(self.imbalanced)

    def partition(self, topic_id: uuid.UUID, partition_id: int) -> Partition | None:
        t = self.by_id.get(topic_id)
        return None if t is None else t.partitions.get(partition_id)

    def _resolve(self, pairs: Iterator[tuple[int, int]] | PartitionSet) -> Iterator[tuple[Topic, int, Partition]]:
        by_key = self.by_key
        for key, pid in pairs:
            t = by_key[key]
            yield t, pid, t.partitions[pid]

    def partitions_with_isr_member(self, broker_id: int) -> list[tuple[Topic, int, Partition]]:
        """A list (not a live iterator) so callers may replay changes while walking it."""
        s = self.isr_index.get(broker_id)
        return [] if s is None else list(self._resolve(s))

    def partitions_with_elr_member(self, broker_id: int) -> list[tuple[Topic, int, Partition]]:
        """Kafka's partitionsWithBrokerInElr: what its broker-to-ELR index lists (``ElrIndex``),
        which may name partitions the broker has left, one partition twice, and even deleted
        topics: for those Kafka's generateLeaderAndIsrUpdates throws, a fault, and so does this."""
        by_key = self.by_key
        out = []
        for key, pid in self.elr_index.entries(broker_id):
            t = by_key.get(key)
            if t is None:
                raise RuntimeError(f"A deleted topic existed in the ELR index of broker {broker_id}, "
                                   "but not in the topics map.")
            p = t.partitions.get(pid)
            if p is None:
                raise RuntimeError(f"Partition {t.id}:{pid} existed in the ELR index of broker {broker_id}, "
                                   "but not in the partitions map.")
            out.append((t, pid, p))
        return out

    def leaderless_partitions(self) -> list[tuple[Topic, int, Partition]]:
        return list(self._resolve(self.leaderless))

    def imbalanced_partitions(self) -> Iterator[tuple[Topic, int, Partition]]:
        """The partitions whose leader is not their preferred replica, lazily (the leader
        balancer stops at its cap): replay nothing while walking it."""
        return self._resolve(self.imbalanced)

    def reassigning_partitions(self) -> list[tuple[Topic, int, Partition]]:
        return list(self._resolve(self.reassigning))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TopicsImage):
            return NotImplemented
        if self.by_id.keys() != other.by_id.keys():
            return False
        return all(t.same_state(other.by_id[tid]) for tid, t in self.by_id.items())

    def __repr__(self) -> str:
        return f"TopicsImage({list(self.by_id.values())})"

    def records(self, mv: int, release: versions.Release, elr_enabled: bool = False) -> Iterator[tuple[Message, int]]:
        return self.frozen_records(mv, release, elr_enabled)

    def frozen_framed_records(self, mv: int, release: versions.Release,
                              elr_enabled: bool = False) -> Iterator[tuple[Message | FramedRecord, int]]:
        """:meth:`frozen_records` with each PartitionRecord framed (see ``_framed_records``)."""
        return _framed_records([(t.id, t.name, dict(t.partitions)) for t in self.by_id.values()], mv, release,
                               elr_enabled)

    def frozen_records(self, mv: int, release: versions.Release,
                       elr_enabled: bool = False) -> Iterator[tuple[Message, int]]:
        """Like :meth:`records`, over copies of the partition dicts taken now."""
        frozen = [(t.id, t.name, dict(t.partitions)) for t in self.by_id.values()]

        def generate() -> Iterator[tuple[Message, int]]:
            for tid, name, parts in frozen:
                yield TopicRecord(name=name, topic_id=tid), 0
                for pid in sorted(parts):
                    yield parts[pid].to_record(tid, pid, mv, release, elr_enabled)

        return generate()

    # ----- the only mutators (see journal.py) ---------------------------------------------

    def get_topic(self, topic_id: uuid.UUID) -> Topic | None:
        return self.by_id.get(topic_id)

    def swap_topic(self, topic_id: uuid.UUID, topic: Topic | None) -> Topic | None:
        """Install or remove a topic with all its partitions (and their index entries)."""
        old = self.by_id.get(topic_id)
        if old is not None:
            for pid, p in old.partitions.items():
                self._unindex(old.key, pid, p)
            # RemoveTopicRecord's replay: each ELR member of a partition loses its whole entry for
            # the topic (stale ones too); a broker in no ELR of it keeps its stale entries.
            self.elr_index.drop_topic(old.key, {b for p in old.partitions.values() for b in p.elr})
            del self.by_id[old.id]
            del self.by_name[old.name]
            del self.by_key[old.key]
            del self.by_id_bytes[old.id.bytes]
            if has_collision_chars(old.name):
                norm = unify_collision_chars(old.name)
                names = self.colliding.get(norm)
                if names is not None:
                    names.discard(old.name)
                    if not names:
                        del self.colliding[norm]
        if topic is not None:
            self.by_id[topic_id] = topic
            self.by_name[topic.name] = topic
            self.by_key[topic.key] = topic
            self.by_id_bytes[topic_id.bytes] = topic
            if has_collision_chars(topic.name):
                self.colliding.setdefault(unify_collision_chars(topic.name), set()).add(topic.name)
            for pid, p in topic.partitions.items():
                self._index(topic.key, pid, None, p)
        return old

    def get_partition(self, key: tuple[uuid.UUID, int]) -> Partition | None:
        t = self.by_id.get(key[0])
        return None if t is None else t.partitions.get(key[1])

    def swap_partition(self, key: tuple[uuid.UUID, int], new: Partition | None,
                       index_elr: bool = True) -> Partition | None:
        """``index_elr`` False leaves the ELR index as it was (ClearElrRecord's replay)."""
        t = self.by_id[key[0]]
        pid = key[1]
        parts = t.partitions
        old = parts.get(pid)
        if new is not None:
            self._index(t.key, pid, old, new, index_elr)
            parts[pid] = new
        elif old is not None:
            self._unindex(t.key, pid, old)
            del parts[pid]
        return old

    # ----- index maintenance -------------------------------------------------------------

    def swap_partition__elr_index_kept(self, key: tuple[uuid.UUID, int], new: Partition | None) -> Partition | None:
        """``swap_partition`` leaving the ELR index alone: ClearElrRecord's replay, and its undo
        (which then restores the index exactly, as Kafka's snapshot registry does)."""
        return self.swap_partition(key, new, False)

    def _index(self, key: int, pid: int, prev: Partition | None, new: Partition, index_elr: bool = True) -> None:
        if prev is None:
            self.partition_count += 1
            isr_index = self._isr  # adding commutes with the deferred entries: no need to settle
            # PartitionSet.add inlined: this loop runs RF times per partition on every load.
            ck = (key << TOPIC_SHIFT) | (pid >> CHUNK_BITS)
            bit = 1 << (pid & CHUNK_LOW)
            for b in new.isr:
                s = isr_index.get(b)
                if s is None:
                    s = isr_index[b] = PartitionSet()
                chunks = s._chunks
                mask = chunks.get(ck, 0)
                if not mask & bit:
                    chunks[ck] = mask | bit
                    s._count += 1
            if new.elr:
                self.elr_index.update(key, pid, _EMPTY, new.elr)
            if new.leader == NO_LEADER:
                self.leaderless.add(key, pid)
            if new.leader != (new.replicas[0] if new.replicas else NO_LEADER):
                self.imbalanced.add(key, pid)
            if new.removing_replicas or new.adding_replicas:
                self.reassigning.add(key, pid)
            return
        if prev.isr is not new.isr:
            if self.defer_isr:  # a removal must see the entry it removes
                self.settle_isr_index()
            _index_members(self._isr, key, pid, prev.isr, new.isr)
        if index_elr and prev.elr is not new.elr:
            self.elr_index.update(key, pid, prev.elr, new.elr)
        _flag(self.leaderless, key, pid, new.leader == NO_LEADER)
        _flag(self.imbalanced, key, pid, new.leader != (new.replicas[0] if new.replicas else NO_LEADER))
        _flag(self.reassigning, key, pid, bool(new.removing_replicas or new.adding_replicas))

    def _unindex(self, key: int, pid: int, p: Partition) -> None:
        self.partition_count -= 1
        if self.defer_isr:
            self.settle_isr_index()
        _index_members(self._isr, key, pid, p.isr, _EMPTY)
        if p.elr:
            self.elr_index.update(key, pid, p.elr, _EMPTY)
        self.leaderless.discard(key, pid)
        self.imbalanced.discard(key, pid)
        self.reassigning.discard(key, pid)


class ElrIndex:
    """Kafka's BrokersToElrs: broker id -> topic key -> the partition ids whose ELR holds it.

    Kept as Kafka keeps it, quirks included, because they show in the records: a list, not a
    set, updated by the sorted difference of a partition's old and new ELR on every partition
    replay. ClearElrRecord's replay does not update it (the cleared members stay listed), so a
    member that enters the ELR again is listed twice, and its partition is walked twice. Taking
    one id out of a list of several keeps the others and pads with partition 0 to one less than
    before (Java's ``new int[n - 1]``). RemoveTopicRecord drops, for each ELR member of each of
    the topic's partitions, the broker's whole entry for the topic."""

    __slots__ = ("members",)

    def __init__(self) -> None:
        self.members: dict[int, dict[int, list[int]]] = {}

    def brokers(self) -> set[int]:
        """The brokers with at least one entry."""
        return {b for b, topics in self.members.items() if any(topics.values())}

    def entries(self, broker_id: int) -> list[tuple[int, int]]:
        """(topic key, partition id) in list order, repeats included."""
        topics = self.members.get(broker_id)
        return [] if not topics else [(key, pid) for key, pids in topics.items() for pid in pids]

    def update(self, key: int, pid: int, prev: tuple[int, ...], new: tuple[int, ...]) -> None:
        for b in prev:
            if b not in new:
                self._remove(b, key, pid)
        for b in sorted(new):
            if b not in prev:
                self.members.setdefault(b, {}).setdefault(key, []).append(pid)

    def _remove(self, b: int, key: int, pid: int) -> None:
        # Kafka throws when the entry is missing; replay never asks for one it did not add, so
        # a missing entry (a topic already dropped) is left alone here.
        topics = self.members.get(b)
        pids = None if topics is None else topics.get(key)
        if topics is None or pids is None:
            return
        if len(pids) == 1:
            if pids[0] == pid:
                del topics[key]
                if not topics:
                    del self.members[b]
            return
        kept = [p for p in pids if p != pid]
        if len(kept) < len(pids):
            topics[key] = kept + [0] * (len(pids) - 1 - len(kept))

    def drop_topic(self, key: int, brokers: set[int]) -> None:
        """removeTopicEntryForBroker for each of ``brokers``."""
        for b in brokers:
            topics = self.members.get(b)
            if topics is not None:
                topics.pop(key, None)


class IsrBacklog:
    """The ISR index entries of new partitions a bulk load deferred, one per partition in three
    parallel arrays (its topic chunk, its ISR's number, its bit in the chunk): 14 bytes a
    partition, where a dict of ints would hold a hundred until the index is written."""

    __slots__ = ("chunks", "isrs", "bits", "done")

    def __init__(self) -> None:
        self.chunks = array("q")  # (topic key << TOPIC_SHIFT) | (partition id >> CHUNK_BITS)
        self.isrs = array("i")  # isr_number(isr)
        self.bits = array("H")  # partition id & CHUNK_LOW
        self.done = 0  # entries before this are in the index already

    def __len__(self) -> int:
        return len(self.chunks) - self.done

    def clear(self) -> None:
        del self.chunks[:], self.isrs[:], self.bits[:]
        self.done = 0


def _merge_isr_run(index: dict[int, PartitionSet], ck: int, gathered: dict[int, int]) -> None:
    """Add each broker's partition bits of the topic chunk ``ck`` to its ISR index set."""
    for broker, bits in gathered.items():
        members = index.get(broker)
        if members is None:
            members = index[broker] = PartitionSet()
        chunks = members._chunks
        mask = chunks.get(ck, 0)
        merged = mask | bits
        if merged != mask:
            chunks[ck] = merged
            members._count += merged.bit_count() - mask.bit_count()


def _flag(s: PartitionSet, key: int, pid: int, on: bool) -> None:
    if on:
        s.add(key, pid)
    else:
        s.discard(key, pid)


def _index_members(index: dict[int, PartitionSet], key: int, pid: int,
                   old: tuple[int, ...], new: tuple[int, ...]) -> None:
    for b in old:
        if b not in new:
            s = index.get(b)
            if s is not None:
                s.discard(key, pid)
                if not s:
                    del index[b]
    for b in new:
        if b not in old:
            s = index.get(b)
            if s is None:
                s = index[b] = PartitionSet()
            s.add(key, pid)


# ----- replay ------------------------------------------------------------------------------

def replay_topic(topics: TopicsImage, record: Any, undo: list | None) -> None:
    name: str = record.name
    tid: uuid.UUID = record.topic_id
    existing = topics.by_name.get(name)
    if existing is not None:
        if existing.id == tid:
            raise ReplayError(f"Found duplicate TopicRecord for {name} with topic ID {tid}")
        raise ReplayError(f"Found duplicate TopicRecord for {name} with a different ID than before. "
                          f"Previous ID was {existing.id} and new ID is {tid}")
    if tid in topics.by_id:
        # Kafka would silently re-point the id; no controller writes this, so refuse it.
        raise ReplayError(f"Found TopicRecord for {name} reusing the ID {tid} of topic {topics.by_id[tid].name}")
    key = topics._next_key
    topics._next_key = key + 1  # keys are never reused, not even when this record is undone
    topics.swap_topic(tid, Topic(tid, name, key, {}))
    if undo is not None:
        undo.append((topics.swap_topic, tid, None))


def _check_lrs(value: int, record: Any) -> None:
    if value != RECOVERED and value != RECOVERING:
        raise ReplayError(f"Value {value} is not a valid leader recovery state in {record}")


def replay_partition(topics: TopicsImage, record: Any, undo: list | None) -> None:
    t = topics.by_id.get(record.topic_id)
    pid: int = record.partition_id
    if t is None:
        raise ReplayError(f"Tried to create partition {record.topic_id}:{pid}, but no topic with that ID was found.")
    if pid < 0:
        raise ReplayError(f"Partition id {pid} in {record} is negative")
    replicas = interning.ints(record.replicas)
    raw_dirs = record.directories
    if raw_dirs and len(raw_dirs) != len(replicas):
        raise ReplayError(f"The lengths for replicas and directories do not match: {record}")
    lrs: int = record.leader_recovery_state
    if lrs != RECOVERED:
        _check_lrs(lrs, record)
    elr = record.eligible_leader_replicas
    lke = record.last_known_elr
    new = Partition(replicas, interning.ints(record.isr), _dirs(raw_dirs, len(replicas)), record.leader,
                    record.leader_epoch, record.partition_epoch, lrs,
                    interning.ints(record.removing_replicas) if record.removing_replicas else _EMPTY,
                    interning.ints(record.adding_replicas) if record.adding_replicas else _EMPTY,
                    interning.ints(elr) if elr else _EMPTY, interning.ints(lke) if lke else _EMPTY)
    key = (t.id, pid)
    old = topics.swap_partition(key, new)
    if undo is not None:
        undo.append((topics.swap_partition, key, old))


def replay_partition_change(topics: TopicsImage, record: Any, undo: list | None) -> None:
    """PartitionRegistration.merge, validated before anything changes."""
    t = topics.by_id.get(record.topic_id)
    pid: int = record.partition_id
    if t is None:
        raise ReplayError(f"Tried to create partition {record.topic_id}:{pid}, but no topic with that ID was found.")
    p = t.partitions.get(pid)
    if p is None:
        raise ReplayError(f"Tried to create partition {record.topic_id}:{pid}, but no partition with that id was found.")
    replicas = p.replicas if record.replicas is None else interning.ints(record.replicas)
    raw_dirs = record.directories
    if record.replicas is not None and raw_dirs and len(raw_dirs) != len(replicas):
        raise ReplayError(f"The lengths for replicas and directories do not match: {record}")
    dirs = _dirs(p.directories if raw_dirs is None else raw_dirs, len(replicas))
    if dirs and len(dirs) != len(replicas):
        raise ReplayError(f"The lengths for replicas and directories do not match after {record}")
    lrs = record.leader_recovery_state
    if lrs == LRS_NO_CHANGE:
        lrs = p.leader_recovery_state
    else:
        _check_lrs(lrs, record)
    new = Partition(
        replicas,
        p.isr if record.isr is None else interning.ints(record.isr),
        dirs,
        p.leader if record.leader == NO_LEADER_CHANGE else record.leader,
        p.leader_epoch if record.leader == NO_LEADER_CHANGE else p.leader_epoch + 1,
        p.partition_epoch + 1,
        lrs,
        p.removing_replicas if record.removing_replicas is None else interning.ints(record.removing_replicas),
        p.adding_replicas if record.adding_replicas is None else interning.ints(record.adding_replicas),
        p.elr if record.eligible_leader_replicas is None else interning.ints(record.eligible_leader_replicas),
        p.last_known_elr if record.last_known_elr is None else interning.ints(record.last_known_elr),
    )
    key = (t.id, pid)
    topics.swap_partition(key, new)
    if undo is not None:
        undo.append((topics.swap_partition, key, p))


def replay_clear_elr(topics: TopicsImage, record: Any, undo: list | None) -> None:
    """ReplicationControlManager.replay(ClearElrRecord): each partition with ELR or LastKnownElr
    merges a change that empties both (which bumps its partition epoch).

    Kafka's replay replaces the partitions without updating its broker-to-ELR index, so the
    cleared members stay listed there (``ElrIndex``): unregistering or restarting such a broker
    walks the partition again (writing the ISR pass's change a second time), and once the topic
    is deleted, faults."""
    name: str = record.topic_name
    if name:
        t = topics.by_name.get(name)
        if t is None:
            raise ReplayError(f"Unable to find a topic named {name} in order to clear its ELRs.")
        targets = [t]
    else:
        targets = list(topics.by_id.values())
    for t in targets:
        for pid, p in list(t.partitions.items()):
            if not p.elr and not p.last_known_elr:
                continue
            new = dataclasses.replace(p, partition_epoch=p.partition_epoch + 1, elr=_EMPTY, last_known_elr=_EMPTY)
            key = (t.id, pid)
            topics.swap_partition__elr_index_kept(key, new)
            if undo is not None:
                undo.append((topics.swap_partition__elr_index_kept, key, p))


def check_remove_topic(topics: TopicsImage, record: Any) -> Topic:
    t = topics.by_id.get(record.topic_id)
    if t is None:
        raise ReplayError(f"Can't find topic with ID {record.topic_id} to remove.")
    return t


def replay_remove_topic(topics: TopicsImage, record: Any, undo: list | None) -> Topic:
    """Removes the topic and its index entries; returns it so the caller can drop its configs."""
    t = check_remove_topic(topics, record)
    topics.swap_topic(t.id, None)
    if undo is not None:
        undo.append((topics.swap_topic, t.id, t))
    return t

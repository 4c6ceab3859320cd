"""The small values every part of the Raft node passes around: who a replica is, and where a
log ends.

A replica is named by its node id and, from kraft.version 1 (KIP-853), by the id of its metadata
log directory too: two incarnations of one node id on different disks are different replicas, so
a vote given to one is not a vote given to the other. ``directory_id`` is None when it is not
known (kraft.version 0, or a peer speaking a protocol version without the field), and then only
the node id is compared, as Kafka's ReplicaKey does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

NO_DIRECTORY_ID = uuid.UUID(int=0)  # the wire's "no directory id" (Uuid.ZERO_UUID)


@dataclass(frozen=True, slots=True)
class ReplicaKey:
    """A replica: node id, and directory id when known."""

    id: int
    directory_id: uuid.UUID | None = None

    @classmethod
    def of(cls, node_id: int, directory_id: uuid.UUID) -> ReplicaKey:
        """From the wire, where the zero uuid means "not known"."""
        return cls(node_id, None if directory_id == NO_DIRECTORY_ID else directory_id)

    @property
    def wire_directory_id(self) -> uuid.UUID:
        return self.directory_id or NO_DIRECTORY_ID

    def matches(self, other: ReplicaKey) -> bool:
        """Whether ``other`` is this replica: the ids agree and, if this key names a directory,
        the directories agree (a key without one matches any directory of its id)."""
        if self.id != other.id:
            return False
        return self.directory_id is None or self.directory_id == other.directory_id

    def sort_key(self) -> tuple[int, int]:
        return self.id, self.wire_directory_id.int

    def java_hash(self) -> int:
        """Kafka's ReplicaKey.hashCode, ``Objects.hash(id, directoryId)`` (an empty Optional
        hashes to 0, a Uuid to the fold of its two halves): the leader's replica maps are Java
        HashMaps, whose order DescribeQuorum lists them in."""
        d = 0
        if self.directory_id is not None:
            h = (self.directory_id.int >> 64) ^ (self.directory_id.int & 0xFFFFFFFFFFFFFFFF)
            d = ((h >> 32) ^ h) & 0xFFFFFFFF
        return ((31 * ((31 + self.id) & 0xFFFFFFFF)) + d) & 0xFFFFFFFF

    def __str__(self) -> str:
        return str(self.id) if self.directory_id is None else f"{self.id}:{self.directory_id}"


@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    """An end offset and the epoch of the record before it. Logs compare by epoch first, then
    offset: a log whose last record is from a later epoch is more up to date however short."""

    offset: int
    epoch: int

    def at_least(self, other: OffsetAndEpoch) -> bool:
        return (self.epoch, self.offset) >= (other.epoch, other.offset)

"""What a voter must remember across a crash: the epoch it is in, who leads it, and whom it
voted for (Kafka's ElectionState, the contents of ``quorum-state``).

The node writes it before acting on a transition (Kafka's durable transitions), so a voter that
crashes after granting a vote still remembers the vote when it restarts and cannot vote twice in
one epoch, and a leader that restarts knows it led and comes back resigned.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraftsim.metadata import files
from kraftsim.raft.core.keys import NO_DIRECTORY_ID, ReplicaKey
from kraftsim.rpc import uuids


@dataclass(frozen=True, slots=True)
class ElectionState:
    epoch: int
    leader_id: int | None = None
    voted_key: ReplicaKey | None = None
    voters: frozenset[int] = frozenset()  # written only in data_version 0 (static quorums)

    def is_leader(self, node_id: int) -> bool:
        return self.leader_id is not None and self.leader_id == node_id

    def is_voted_candidate(self, key: ReplicaKey) -> bool:
        """Whether this node voted for ``key``. A vote remembered without a directory id
        (kraft.version 0) counts for any directory of that id."""
        voted = self.voted_key
        if voted is None or voted.id != key.id:
            return False
        return voted.directory_id is None or voted.directory_id == key.directory_id

    def to_file(self, data_version: int) -> files.QuorumState:
        """Kafka's QuorumStateData in the given data_version (0: kraft.version 0, 1: from 1)."""
        voted = self.voted_key
        return files.QuorumState(
            leader_id=-1 if self.leader_id is None else self.leader_id,
            leader_epoch=self.epoch,
            voted_id=-1 if voted is None else voted.id,
            voters=sorted(self.voters) if data_version == 0 else [],
            voted_directory_id=uuids.to_str(NO_DIRECTORY_ID if voted is None else voted.wire_directory_id),
            data_version=data_version)

    @classmethod
    def from_file(cls, qs: files.QuorumState) -> ElectionState:
        voted = None
        if qs.voted_id != -1:
            voted = ReplicaKey.of(qs.voted_id, uuids.from_str(qs.voted_directory_id))
        return cls(epoch=qs.leader_epoch, leader_id=None if qs.leader_id == -1 else qs.leader_id,
                   voted_key=voted, voters=frozenset(qs.voters))

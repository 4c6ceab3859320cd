"""The voter set in the log: VotersRecord ↔ :class:`VoterSet` (Kafka's VoterSet.toVotersRecord
and fromVotersRecord), in Kafka's VoterSet order."""

from __future__ import annotations

from collections.abc import Iterable

from kraftsim.controller.java.hash_order import hashmap_capacity, spread, table_size_for
from kraftsim.metadata.messages import VotersRecord
from kraftsim.raft.core.keys import ReplicaKey
from kraftsim.raft.core.voters import Endpoints, VoterNode, VoterSet


def voter_set_of(record: VotersRecord) -> VoterSet:
    """A VotersRecord as a VoterSet: keys with their directory ids, endpoints by listener."""
    return VoterSet(
        VoterNode(ReplicaKey.of(v.voter_id, v.voter_directory_id),
                  Endpoints.of((e.name, e.host, e.port) for e in v.endpoints),
                  (v.kraft_version_feature.min_supported_version, v.kraft_version_feature.max_supported_version))
        for v in record.voters)


def java_voter_order(ids: Iterable[int]) -> list[int]:
    """Voter ids in the order Kafka's VoterSet lists them: its map is a copy (``new
    HashMap<>(voters)``) of a default HashMap filled in id order, so by bucket of the copy's table,
    then by bucket of the original's, then by id. Sorted for every id below the table size (the
    usual cluster); not for, say, 5 and 16 (16 first)."""
    ordered = sorted(ids)
    n = len(ordered)
    copy = table_size_for(int(n / 0.75 + 1.0))
    original = hashmap_capacity(n)
    return sorted(ordered, key=lambda i: (spread(i) & (copy - 1), spread(i) & (original - 1), i))


def voters_record_of(voters: VoterSet) -> VotersRecord:
    """A VoterSet as the VotersRecord Kafka writes (voters in its VoterSet's order, endpoints by
    listener)."""
    nodes = {n.key.id: n for n in voters.nodes()}
    return VotersRecord(version=0, voters=[
        VotersRecord.Voter(
            voter_id=n.key.id, voter_directory_id=n.key.wire_directory_id,
            endpoints=[VotersRecord.Endpoint(name=name, host=a.host, port=a.port) for name, a in n.endpoints.items()],
            kraft_version_feature=VotersRecord.KRaftVersionFeature(min_supported_version=n.kraft_versions[0],
                                                                   max_supported_version=n.kraft_versions[1]))
        for n in (nodes[i] for i in java_voter_order(nodes))])

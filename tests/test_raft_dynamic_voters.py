"""The Raft core with a voter set read from the log (kraft.version 1): what a new leader writes
at the start of its epoch, what a follower notes, and who is a voter by directory id."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

from kraftsim.metadata.batch import ControlRecordType, decode_control_record, encode_control_batch, read_batches
from kraftsim.metadata.messages import KRaftVersionRecord, VotersRecord
from kraftsim.raft.core.config import QuorumConfig
from kraftsim.raft.core.keys import ReplicaKey
from kraftsim.raft.core.memory_log import MemoryLog
from kraftsim.raft.core.node import RaftNode
from kraftsim.raft.core.state_store import FileQuorumStateStore
from kraftsim.raft.core.voters import Address, Endpoints, VoterNode, VoterSet
from kraftsim.raft.core.voters_records import voter_set_of, voters_record_of

L = "CONTROLLER"
DIR = uuid.UUID(int=7)


def dynamic_set(*ids: int, port: int = 9093) -> VoterSet:
    return VoterSet(VoterNode(ReplicaKey(i, uuid.UUID(int=i * 7)), Endpoints({L: Address(f"c{i}", port)}), (0, 1))
                    for i in ids)


def node(tmp_path: Path, node_id: int, voters: VoterSet, voters_offset: int | None, log: MemoryLog | None = None,
         directory: uuid.UUID | None = None) -> RaftNode:
    return RaftNode(node_id=node_id, directory_id=directory or uuid.UUID(int=node_id * 7), cluster_id="c",
                    voters=voters, listeners=Endpoints({L: Address(f"c{node_id}", 9093)}), listener_name=L,
                    log=log or MemoryLog(), store=FileQuorumStateStore(tmp_path / "quorum-state"),
                    config=QuorumConfig(), rng=random.Random(0), now_ms=0, kraft_version=1,
                    voters_offset=voters_offset)


def control_records(log: MemoryLog) -> list[list[tuple[ControlRecordType, object]]]:
    out = []
    for batch in read_batches(log.read(0, 1 << 20)):
        out.append([c for rec in batch.records() if (c := decode_control_record(rec)) is not None])
    return out


def test_a_lone_dynamic_voter_writes_the_voter_set_after_its_leader_change(tmp_path: Path) -> None:
    log = MemoryLog()
    n = node(tmp_path, 1, dynamic_set(1, port=9999), -1, log)
    assert n.is_leader()
    [batch] = control_records(log)
    assert [kind for kind, _ in batch] == [ControlRecordType.LEADER_CHANGE, ControlRecordType.KRAFT_VERSION,
                                           ControlRecordType.KRAFT_VOTERS]
    kv, voters = batch[1][1], batch[2][1]
    assert isinstance(kv, KRaftVersionRecord) and kv.kraft_version == 1
    assert isinstance(voters, VotersRecord)
    # Its own entry brought up to date: its listeners now, not the formatted ones.
    [voter] = voter_set_of(voters).nodes()
    assert (voter.key, voter.endpoints, voter.kraft_versions) == (
        ReplicaKey(1, DIR), Endpoints({L: Address("c1", 9093)}), (0, 1))
    assert n.voters_offset == 2
    state = json.loads((tmp_path / "quorum-state").read_text())
    assert state == {"leaderId": 1, "leaderEpoch": 1, "votedId": -1, "votedDirectoryId": "AAAAAAAAAAAAAAAAAAAAAA",
                     "data_version": 1}


def test_a_static_quorum_writes_only_its_leader_change(tmp_path: Path) -> None:
    log = MemoryLog()
    n = node(tmp_path, 1, VoterSet.static({1: Address("c1", 9093)}, L), None, log)
    assert n.is_leader()
    assert [[kind for kind, _ in b] for b in control_records(log)] == [[ControlRecordType.LEADER_CHANGE]]


def test_another_directory_of_a_voters_id_is_an_observer(tmp_path: Path) -> None:
    n = node(tmp_path, 1, dynamic_set(1), -1, directory=uuid.UUID(int=99))
    assert not n.quorum.is_voter() and not n.is_leader()


def test_a_follower_notes_the_voters_record_it_fetches(tmp_path: Path) -> None:
    n = node(tmp_path, 2, dynamic_set(1, 2, 3), -1)
    batch = encode_control_batch(0, [(ControlRecordType.KRAFT_VERSION, KRaftVersionRecord(version=0, kraft_version=1)),
                                     (ControlRecordType.KRAFT_VOTERS, voters_record_of(dynamic_set(1, 2, 3)))],
                                 epoch=1, timestamp=1)
    n.append_as_follower(bytes(batch))
    assert n.voters_offset == 1

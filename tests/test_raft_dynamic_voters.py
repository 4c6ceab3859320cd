"""The Raft core with a voter set read from the log (kraft.version 1): what a new leader writes
at the start of its epoch, what a follower notes, who is a voter by directory id, and the set in
force at an offset (snapshots, restarts)."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

from kraftsim.cli.storage import format_storage
from kraftsim.metadata import files
from kraftsim.metadata.batch import ControlRecordType, decode_control_record, encode_control_batch, read_batches
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.metadata.messages import KRaftVersionRecord, VotersRecord
from kraftsim.raft.client import RaftClient
from kraftsim.raft.core.config import QuorumConfig
from kraftsim.raft.core.keys import ReplicaKey
from kraftsim.raft.core.memory_log import MemoryLog
from kraftsim.raft.core.node import RaftNode
from kraftsim.raft.core.state_store import FileQuorumStateStore
from kraftsim.raft.core.voter_history import VoterSetHistory
from kraftsim.raft.core.voters import Address, Endpoints, VoterNode, VoterSet
from kraftsim.raft.core.voters_records import voter_set_of, voters_record_of
from kraftsim.raft.dynamic_voters import read_history
from kraftsim.rpc import uuids
from tests import harness

L = "CONTROLLER"
DIR = uuid.UUID(int=7)


def dynamic_set(*ids: int, port: int = 9093) -> VoterSet:
    return VoterSet(VoterNode(ReplicaKey(i, uuid.UUID(int=i * 7)), Endpoints({L: Address(f"c{i}", port)}), (0, 1))
                    for i in ids)


def node(tmp_path: Path, node_id: int, voters: VoterSet, voters_offset: int | None, log: MemoryLog | None = None,
         directory: uuid.UUID | None = None) -> RaftNode:
    """A node of ``voters``: at kraft.version 1 from a VotersRecord at ``voters_offset`` (-1: the
    bootstrap snapshot's), or, with None, a static quorum."""
    history = VoterSetHistory(voters)
    if voters_offset is not None:
        history.add_kraft_version(voters_offset, 1)
        history.add_voters(voters_offset, voters)
    return RaftNode(node_id=node_id, directory_id=directory or uuid.UUID(int=node_id * 7), cluster_id="c",
                    voters=voters, listeners=Endpoints({L: Address(f"c{node_id}", 9093)}), listener_name=L,
                    log=log or MemoryLog(), store=FileQuorumStateStore(tmp_path / "quorum-state"),
                    config=QuorumConfig(), rng=random.Random(0), now_ms=0, voter_history=history)


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
    assert n.history.latest_entry() == (2, voter_set_of(voters))
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
    assert n.history.latest_entry() == (1, dynamic_set(1, 2, 3))


def test_the_voter_set_in_force_at_an_offset_is_the_historys_for_snapshots_and_restarts(tmp_path: Path) -> None:
    """A lone voter formatted --standalone, then a second voter added: a snapshot below the
    addition carries the old set, one at it the new, and a restart reads both back in order (a
    truncation past the addition brings the old set back)."""
    cfg = harness.write_config(tmp_path, port=19093, node_id=1, controller_quorum_voters="",
                               controller_quorum_bootstrap_servers="127.0.0.1:19093")
    format_storage(cfg, "MkU3OEVBNTcwNTJENDM2Qk", "3.9", False, standalone=True)
    directory = uuids.from_str(files.MetaProperties.read(tmp_path / "data" / files.META_PROPERTIES).directory_id or "")
    me = VoterNode(ReplicaKey(1, directory), Endpoints({L: Address("127.0.0.1", 19093)}), (0, 1))
    two = VoterSet([me, VoterNode(ReplicaKey(2, uuid.UUID(int=2)), Endpoints({L: Address("c2", 9093)}), (0, 1))])
    mlog = MetadataLog.open(tmp_path / "data", LogConfig(linger_ms=0))
    try:
        client = RaftClient(node_id=1, directory_id=directory, cluster_id="c", voters=VoterSet(()), listener_name=L,
                            mlog=mlog, store=FileQuorumStateStore(mlog.directory / files.QUORUM_STATE),
                            config=QuorumConfig(), voter_history=read_history(mlog, VoterSet(())),
                            listeners=me.endpoints, bootstrap={-2: Address("127.0.0.1", 19093)})
        node = client.node
        assert node.is_leader()
        start_of_epoch = node.log.end_offset - 1  # LeaderChange, KRaftVersionRecord, VotersRecord
        added = node.append_control(node.epoch, [(ControlRecordType.KRAFT_VOTERS, voters_record_of(two))], 0)
        node.log.flush()
        assert node.quorum.voters == two

        def snapshot_set(offset: int) -> VoterSet:
            kinds = client.snapshot_control_records(offset)
            assert [k for k, _ in kinds] == [ControlRecordType.KRAFT_VERSION, ControlRecordType.KRAFT_VOTERS]
            record = kinds[1][1]
            assert isinstance(record, VotersRecord)
            return voter_set_of(record)

        assert snapshot_set(added - 1) == VoterSet([me])
        assert snapshot_set(added) == two
    finally:
        mlog.close()
    mlog = MetadataLog.open(tmp_path / "data", LogConfig(linger_ms=0))
    try:
        history = read_history(mlog, VoterSet(()))
    finally:
        mlog.close()
    assert [offset for offset, _ in history.entries()] == [-1, start_of_epoch, added]
    assert history.latest() == two and history.kraft_version() == 1
    history.truncate_new_entries(added)
    assert history.latest() == VoterSet([me])


def test_a_snapshot_trims_the_voter_sets_it_covers_but_the_one_in_force_at_its_end() -> None:
    one, two, three = dynamic_set(1), dynamic_set(1, 2), dynamic_set(1, 2, 3)
    history = VoterSetHistory(VoterSet(()))
    for offset, voters in ((-1, one), (10, two), (20, three)):
        history.add_voters(offset, voters)
    history.add_kraft_version(-1, 1)
    history.truncate_old_entries(15)  # Kafka's truncateOldEntries: the last at or below stays
    assert [offset for offset, _ in history.entries()] == [10, 20]
    assert history.entry_at(15) == two and history.kraft_version_at(15) == 1 and history.latest() == three
    history.truncate_old_entries(20)
    assert history.entries() == [(20, three)] and history.kraft_version() == 1
    history.truncate_old_entries(5)  # a snapshot below what it holds trims nothing
    assert history.entries() == [(20, three)]

"""Voter changes in the sans-I/O Raft node (KIP-853, Kafka 3.9): the voter set the log holds
(VotersRecord, KRaftVersionRecord) followed as it is appended, fetched, truncated and
snapshotted, and AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter on the leader, message by
message, with the cases of Kafka's KafkaRaftClientReconfigTest."""

from __future__ import annotations

import random
import uuid

from kraftsim.metadata.batch import ControlRecordType
from kraftsim.metadata.messages import KRaftVersionRecord
from kraftsim.raft.core import rpcs
from kraftsim.raft.core.config import QuorumConfig
from kraftsim.raft.core.events import InboundRequest, InboundResponse, OutboundRequest, OutboundResponse, RaftRequest
from kraftsim.raft.core.keys import ReplicaKey
from kraftsim.raft.core.memory_log import MemoryLog
from kraftsim.raft.core.node import RaftNode
from kraftsim.raft.core.state_store import MemoryQuorumStateStore
from kraftsim.raft.core.voter_history import VoterSetHistory, voters_record
from kraftsim.raft.core.voters import Address, Endpoints, VoterNode, VoterSet
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.message import Message
from kraftsim.rpc.messages import FetchResponse, FetchSnapshotResponse

E = ErrorCode
L = "CONTROLLER"
CLUSTER = "raft-reconfig-test-cluster"
T = 1000
FETCH_TIMEOUT = 2000


def key(i: int) -> ReplicaKey:
    return ReplicaKey(i, uuid.UUID(int=i))


def endpoints(i: int) -> Endpoints:
    return Endpoints({L: Address(f"c{i}", 9093)})


def voter(i: int) -> VoterNode:
    return VoterNode(key(i), endpoints(i), (0, 1))


def voter_set(*ids: int) -> VoterSet:
    return VoterSet(voter(i) for i in ids)


def dynamic_log(*ids: int) -> MemoryLog:
    """A log as ``format`` with a dynamic quorum leaves it: kraft.version 1 and the voters,
    committed at offsets 0-1 (epoch 0)."""
    log = MemoryLog()
    log.append_control_as_leader([(ControlRecordType.KRAFT_VERSION, KRaftVersionRecord(version=0, kraft_version=1)),
                                  (ControlRecordType.KRAFT_VOTERS, voters_record(voter_set(*ids)))],
                                 epoch=0, timestamp=0)
    log.flush()
    return log


def history_of(log: MemoryLog, static: VoterSet) -> VoterSetHistory:
    """What the start-up reader hands the node: the log's control records."""
    history = VoterSetHistory(static)
    history.add_batches(log.read(0, 1 << 30))
    return history


def node(node_id: int = 1, *, log: MemoryLog | None = None, voters: VoterSet | None = None, now: int = 0,
         seed: int = 0, **config: int) -> RaftNode:
    log = log if log is not None else dynamic_log(1, 2, 3)
    static = voters or VoterSet([])
    return RaftNode(node_id=node_id, directory_id=uuid.UUID(int=node_id), cluster_id=CLUSTER, voters=static,
                    listeners=endpoints(node_id), listener_name=L, log=log, store=MemoryQuorumStateStore(),
                    config=QuorumConfig(**config), rng=random.Random(seed), now_ms=now,
                    voter_history=history_of(log, static), bootstrap={i: Address(f"c{i}", 9093) for i in (1, 2, 3)})


def ask(n: RaftNode, message: RaftRequest, now: int, version: int = 0) -> Message | None:
    n.handle_request(InboundRequest(message, version, "token", L), now)
    out = [o for o in n.take_outbound() if isinstance(o, OutboundResponse)]
    return out[0].message if out else None


def answers(n: RaftNode) -> list[Message]:
    return [o.message for o in n.take_outbound() if isinstance(o, OutboundResponse)]


def requests_out(n: RaftNode) -> list[OutboundRequest]:
    return [o for o in n.take_outbound() if isinstance(o, OutboundRequest)]


def elect(n: RaftNode, now: int = 2 * T) -> int:
    """Node 1 stands and voter 2 grants; the LeaderChange is flushed. The time it won."""
    n.poll(now)
    votes = requests_out(n)
    r2 = next(r for r in votes if r.destination == 2)
    n.handle_response(InboundResponse(2, r2.correlation_id, rpcs.vote_response(L, 1, E.NONE, n.epoch, None, True,
                                                                               Endpoints())), now)
    assert n.role == "leader"
    n.poll(now)
    return now


def fetch(n: RaftNode, replica: int, offset: int, now: int, last_epoch: int | None = None) -> FetchResponse.PartitionData:
    epoch = n.epoch if last_epoch is None else last_epoch
    request = rpcs.fetch_request(CLUSTER, key(replica), n.epoch, offset, min(epoch, n.epoch), 0)
    response = ask(n, request, now, version=17)
    assert isinstance(response, FetchResponse) and response.error_code == 0, response
    return response.responses[0].partitions[0]


def commit(n: RaftNode, now: int, *replicas: int) -> None:
    """``replicas`` fetch up to the leader's end."""
    n.poll(now)
    for r in replicas:
        fetch(n, r, n.log.end_offset, now)
    n.poll(now)


# -- step 1: the voter set the log holds ---------------------------------------------------------

def test_a_static_quorum_keeps_its_configured_voters_and_kraft_version_0() -> None:
    static = VoterSet.static({i: Address(f"c{i}", 9093) for i in (1, 2, 3)}, L)
    n = node(log=MemoryLog(), voters=static)
    assert n.quorum.voters == static and n.quorum.kraft_version == 0 and n.history.latest_entry() is None


def test_the_voter_set_comes_from_the_logs_voters_record() -> None:
    n = node()
    assert n.quorum.voters == voter_set(1, 2, 3) and n.quorum.kraft_version == 1
    assert n.quorum.is_voter() and n.history.latest_entry() == (1, voter_set(1, 2, 3))


def test_the_leader_counts_the_new_sets_majority_as_soon_as_it_writes_it() -> None:
    n = node()
    now = elect(n)
    commit(n, now, 2)
    hw = n.high_watermark
    assert hw == n.log.end_offset
    # Four voters, uncommitted: the high watermark needs three of them now.
    last = n.append_control(n.epoch, [(ControlRecordType.KRAFT_VOTERS, voters_record(voter_set(1, 2, 3, 4)))], now)
    assert n.quorum.voters == voter_set(1, 2, 3, 4)
    assert set(n.quorum.state.voter_states) == {1, 2, 3, 4}  # type: ignore[union-attr]
    commit(n, now + 1, 2)
    assert n.high_watermark == hw  # the leader and 2 are not a majority of four
    commit(n, now + 2, 4)
    assert n.high_watermark == last + 1


def test_a_removed_voter_becomes_an_observer_of_the_leader_and_an_added_one_votes() -> None:
    leader = node()
    now = elect(leader)
    commit(leader, now, 2)
    leader.append_control(leader.epoch, [(ControlRecordType.KRAFT_VOTERS, voters_record(voter_set(1, 2)))], now)
    assert set(leader.quorum.state.voter_states) == {1, 2}  # type: ignore[union-attr]
    assert key(3) in leader.quorum.state.observer_states  # type: ignore[union-attr]

    # Follower 3 fetches the record that removes it: it keeps fetching, and no longer stands.
    follower = node(3)
    begin = rpcs.begin_quorum_epoch_request(CLUSTER, leader.epoch, 1, endpoints(1), key(3))
    ask(follower, begin, now)
    assert follower.quorum.is_voter()
    follower.poll(now)
    (request,) = requests_out(follower)
    records = leader.log.read(follower.log.end_offset, 1 << 20)
    response = rpcs.fetch_response(L, 17, E.NONE, leader.epoch, 1, endpoints(1), records=records, high_watermark=2)
    follower.handle_response(InboundResponse(1, request.correlation_id, response), now + 1)
    assert follower.quorum.voters == voter_set(1, 2) and not follower.quorum.is_voter()
    follower.poll(now + 10 * FETCH_TIMEOUT)
    assert follower.role == "follower"  # an observer never stands
    # The same record undone by a truncation (a new leader without it): a voter again.
    follower.history.truncate_new_entries(follower.log.end_offset - 1)
    assert follower.quorum.is_voter()


def test_a_truncated_voter_change_is_undone() -> None:
    n = node(3)
    begin = rpcs.begin_quorum_epoch_request(CLUSTER, 1, 1, endpoints(1), key(3))
    ask(n, begin, 0)
    leader_log = dynamic_log(1, 2, 3)
    leader_log.append_control_as_leader([(ControlRecordType.KRAFT_VOTERS, voters_record(voter_set(1, 2, 3, 4)))],
                                        epoch=1, timestamp=0)
    n.poll(1)
    (request,) = requests_out(n)
    response = rpcs.fetch_response(L, 17, E.NONE, 1, 1, endpoints(1), records=leader_log.read(2, 1 << 20),
                                   high_watermark=2)
    n.handle_response(InboundResponse(1, request.correlation_id, response), 2)
    assert n.quorum.voters == voter_set(1, 2, 3, 4)
    # A new leader in epoch 2 never had it: it tells 3 to truncate to offset 2.
    begin = rpcs.begin_quorum_epoch_request(CLUSTER, 2, 2, endpoints(2), key(3))
    ask(n, begin, 3)
    n.poll(4)
    (request,) = requests_out(n)
    response = rpcs.fetch_response(L, 17, E.NONE, 2, 2, endpoints(2))
    response.responses[0].partitions[0].diverging_epoch = FetchResponse.EpochEndOffset(epoch=0, end_offset=2)
    n.handle_response(InboundResponse(2, request.correlation_id, response), 5)
    assert n.log.end_offset == 2 and n.quorum.voters == voter_set(1, 2, 3)


def test_a_fetched_snapshot_brings_its_voter_set() -> None:
    source = dynamic_log(1, 2, 3)
    source.append_control_as_leader([(ControlRecordType.KRAFT_VOTERS, voters_record(voter_set(1, 2, 3, 5)))],
                                    epoch=1, timestamp=0)
    source.append_as_leader([b"x"], epoch=1, timestamp=0)
    source.flush()
    source.update_high_watermark(4)
    sid = source.take_snapshot(4)
    assert sid is not None
    data = source.snapshots[sid]
    n = node(3, log=MemoryLog(), voters=voter_set(1, 2, 3))
    ask(n, rpcs.begin_quorum_epoch_request(CLUSTER, 1, 1, endpoints(1), key(3)), 0)
    n.poll(1)
    (request,) = requests_out(n)
    response = rpcs.fetch_response(L, 17, E.NONE, 1, 1, endpoints(1))
    response.responses[0].partitions[0].snapshot_id = FetchResponse.SnapshotId(end_offset=4, epoch=1)
    n.handle_response(InboundResponse(1, request.correlation_id, response), 2)
    n.poll(3)
    (request,) = requests_out(n)
    answer = rpcs.fetch_snapshot_response(L, 1, E.NONE, 1, 1, Endpoints())
    ps = answer.topics[0].partitions[0]
    ps.snapshot_id = FetchSnapshotResponse.SnapshotId(end_offset=4, epoch=1)
    ps.size, ps.position, ps.unaligned_records = len(data), 0, data
    n.handle_response(InboundResponse(1, request.correlation_id, answer), 4)
    assert n.log.start_offset == 4
    assert n.history.latest_entry() == (3, voter_set(1, 2, 3, 5)) and n.quorum.kraft_version == 1


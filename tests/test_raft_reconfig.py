"""Voter changes in the sans-I/O Raft node (KIP-853, Kafka 3.9): the voter set the log holds
(VotersRecord, KRaftVersionRecord) followed as it is appended, fetched, truncated and
snapshotted, and AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter on the leader, message by
message, with the cases of Kafka's KafkaRaftClientReconfigTest."""

from __future__ import annotations

import asyncio
import random
import uuid
import weakref
from pathlib import Path

import pytest

from kraftsim.cli import metadata_quorum as quorum_cli
from kraftsim.metadata.batch import ControlRecordType, decode_control_record, read_batches
from kraftsim.metadata.files import MetaProperties
from kraftsim.metadata.messages import KRaftVersionRecord
from kraftsim.raft.core import rpcs
from kraftsim.raft.core.config import QuorumConfig
from kraftsim.raft.core.events import (
    InboundRequest,
    InboundResponse,
    Outbound,
    OutboundRequest,
    OutboundResponse,
    RaftRequest,
)
from kraftsim.raft.core.keys import OffsetAndEpoch, ReplicaKey
from kraftsim.raft.core.memory_log import MemoryLog
from kraftsim.raft.core.node import RaftNode
from kraftsim.raft.core.state_store import MemoryQuorumStateStore
from kraftsim.raft.core.voter_history import VoterSetHistory
from kraftsim.raft.core.voters import Address, Endpoints, VoterNode, VoterSet
from kraftsim.raft.core.voters_records import voters_record_of
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.message import Message
from kraftsim.rpc.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchResponse,
    FetchSnapshotResponse,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
)

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
                                  (ControlRecordType.KRAFT_VOTERS, voters_record_of(voter_set(*ids)))],
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


KEPT: weakref.WeakKeyDictionary[RaftNode, list[Outbound]] = weakref.WeakKeyDictionary()  # sent besides the
# answer :func:`ask` took, per node


def outbound(n: RaftNode) -> list[Outbound]:
    return KEPT.pop(n, []) + n.take_outbound()


def ask(n: RaftNode, message: RaftRequest, now: int, version: int = 0) -> Message | None:
    """Send ``message`` to the node; its immediate answer (None if it answers later). Whatever
    else it sends meanwhile (answers to earlier requests, its own requests) is kept."""
    n.handle_request(InboundRequest(message, version, message.api_key(), L), now)
    out = outbound(n)
    mine = [o for o in out if isinstance(o, OutboundResponse) and o.reply_to == message.api_key()]
    KEPT[n] = [o for o in out if not any(o is m for m in mine)]
    return mine[0].message if mine else None


def answers(n: RaftNode) -> list[Message]:
    """The answers to requests answered later."""
    out = outbound(n)
    KEPT[n] = [o for o in out if not isinstance(o, OutboundResponse)]
    return [o.message for o in out if isinstance(o, OutboundResponse)]


def requests_out(n: RaftNode) -> list[OutboundRequest]:
    out = outbound(n)
    KEPT[n] = [o for o in out if not isinstance(o, OutboundRequest)]
    return [o for o in out if isinstance(o, OutboundRequest)]


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
    last = n.append_control(n.epoch, [(ControlRecordType.KRAFT_VOTERS, voters_record_of(voter_set(1, 2, 3, 4)))], now)
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
    leader.append_control(leader.epoch, [(ControlRecordType.KRAFT_VOTERS, voters_record_of(voter_set(1, 2)))], now)
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
    leader_log.append_control_as_leader([(ControlRecordType.KRAFT_VOTERS, voters_record_of(voter_set(1, 2, 3, 4)))],
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
    source.append_control_as_leader([(ControlRecordType.KRAFT_VOTERS, voters_record_of(voter_set(1, 2, 3, 5)))],
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


def test_a_fetched_snapshot_without_voters_leaves_what_the_log_said() -> None:
    source = MemoryLog()
    source.append_as_leader([b"a", b"b", b"c"], epoch=1, timestamp=0)
    source.flush()
    source.update_high_watermark(3)
    sid = source.take_snapshot(3)
    assert sid is not None
    n = node(3)  # its log: the voters 1-3 at offset 1
    n.history.add_voters(5, voter_set(1, 2, 3, 4))  # and a change past the snapshot's end, to be cut
    ask(n, rpcs.begin_quorum_epoch_request(CLUSTER, 1, 1, endpoints(1), key(3)), 0)
    n.poll(1)
    (request,) = requests_out(n)
    response = rpcs.fetch_response(L, 17, E.NONE, 1, 1, endpoints(1))
    response.responses[0].partitions[0].snapshot_id = FetchResponse.SnapshotId(end_offset=3, epoch=1)
    n.handle_response(InboundResponse(1, request.correlation_id, response), 2)
    n.poll(3)
    (request,) = requests_out(n)
    answer = rpcs.fetch_snapshot_response(L, 1, E.NONE, 1, 1, Endpoints())
    ps = answer.topics[0].partitions[0]
    ps.snapshot_id = FetchSnapshotResponse.SnapshotId(end_offset=3, epoch=1)
    data = source.snapshots[sid]
    ps.size, ps.position, ps.unaligned_records = len(data), 0, data
    n.handle_response(InboundResponse(1, request.correlation_id, answer), 4)
    assert n.log.start_offset == 3
    assert n.history.latest_entry() == (1, voter_set(1, 2, 3)) and n.quorum.is_voter()



def control_records(log: MemoryLog, batch: int) -> list[tuple[str, Message]]:
    (b,) = read_batches(log.batches[batch].data)
    return [(k.name, m) for k, m in (decode_control_record(r) for r in b.records())]  # type: ignore[misc]


def test_a_new_leader_writes_its_own_entry_when_the_set_comes_from_the_checkpoint_or_differs() -> None:
    # The voters from the bootstrap checkpoint (offset -1, as format leaves them): the first
    # leader writes kraft.version and the set, its own entry its own, beside its LeaderChange.
    history = VoterSetHistory(VoterSet([]))
    history.add_voters(-1, voter_set(1, 2, 3))
    history.add_kraft_version(-1, 1)
    n = RaftNode(node_id=1, directory_id=uuid.UUID(int=1), cluster_id=CLUSTER, voters=VoterSet([]),
                 listeners=endpoints(1), listener_name=L, log=MemoryLog(), store=MemoryQuorumStateStore(),
                 config=QuorumConfig(), rng=random.Random(0), now_ms=0, voter_history=history)
    elect(n)
    kinds = control_records(n.log, 0)  # type: ignore[arg-type]
    assert [k for k, _ in kinds] == ["LEADER_CHANGE", "KRAFT_VERSION", "KRAFT_VOTERS"]
    assert n.history.latest_entry() == (2, voter_set(1, 2, 3))
    # From the log, equal to its own: the LeaderChange alone.
    m = node()
    elect(m)
    assert [k for k, _ in control_records(m.log, 1)] == ["LEADER_CHANGE"]  # type: ignore[arg-type]
    # Its entry differs (another kraft.version range): brought up to date.
    stale = MemoryLog()
    stale.append_control_as_leader([(ControlRecordType.KRAFT_VERSION, KRaftVersionRecord(version=0, kraft_version=1)),
                                    (ControlRecordType.KRAFT_VOTERS, voters_record_of(VoterSet(
                                        [VoterNode(key(1), endpoints(1), (0, 0)), voter(2), voter(3)])))],
                                   epoch=0, timestamp=0)
    stale.flush()
    o = node(log=stale)
    elect(o)
    assert [k for k, _ in control_records(o.log, 1)] == ["LEADER_CHANGE", "KRAFT_VERSION", "KRAFT_VOTERS"]
    assert o.quorum.voters == voter_set(1, 2, 3)


# -- step 2: AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter on the leader ------------------------

def add_request(i: int, *, cluster: str | None = CLUSTER, listener: str = L, directory: int | None = None,
                ack_when_committed: bool = True) -> Message:
    return AddRaftVoterRequest(cluster_id=cluster, timeout_ms=30_000, voter_id=i,
                               voter_directory_id=uuid.UUID(int=i if directory is None else directory),
                               listeners=[AddRaftVoterRequest.Listener(name=listener, host=f"c{i}", port=9093)],
                               ack_when_committed=ack_when_committed)


def remove_request(i: int, *, directory: int | None = None) -> Message:
    return RemoveRaftVoterRequest(cluster_id=CLUSTER, voter_id=i,
                                  voter_directory_id=uuid.UUID(int=i if directory is None else directory))


def update_request(i: int, epoch: int, *, host: str = "new-host", versions: tuple[int, int] = (0, 1)) -> Message:
    return UpdateRaftVoterRequest(
        cluster_id=CLUSTER, current_leader_epoch=epoch, voter_id=i, voter_directory_id=uuid.UUID(int=i),
        listeners=[UpdateRaftVoterRequest.Listener(name=L, host=host, port=9093)],
        kraft_version_feature=UpdateRaftVoterRequest.KRaftVersionFeature(min_supported_version=versions[0],
                                                                        max_supported_version=versions[1]))


def leader(**config: int) -> tuple[RaftNode, int]:
    """Node 1 leading voters 1-3 (kraft.version 1) with its epoch's first record committed."""
    n = node(**config)
    now = elect(n)
    commit(n, now, 2, 3)
    assert n.high_watermark == n.log.end_offset
    return n, now


def kraft_versions(lo: int, hi: int, error: int = E.NONE) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=error, supported_features=[
        ApiVersionsResponse.SupportedFeatureKey(name="kraft.version", min_version=lo, max_version=hi)])


def start_add(n: RaftNode, now: int, new: int = 4, *, ack_when_committed: bool = True) -> OutboundRequest:
    """Observer ``new`` has caught up; AddRaftVoter for it (v1 when ``ack_when_committed`` is
    false): the leader asks it ApiVersions."""
    fetch(n, new, n.log.end_offset, now)
    message = add_request(new, ack_when_committed=ack_when_committed)
    assert ask(n, message, now, version=0 if ack_when_committed else 1) is None  # answered later
    (request,) = [r for r in requests_out(n) if isinstance(r.message, ApiVersionsRequest)]
    assert isinstance(request.message, ApiVersionsRequest)
    assert (request.destination, request.address) == (new, Address(f"c{new}", 9093))
    return request


def test_add_voter_writes_the_new_set_once_the_observer_is_checked_and_answers_when_committed() -> None:
    n, now = leader()
    request = start_add(n, now)
    n.handle_response(InboundResponse(4, request.correlation_id, kraft_versions(0, 1)), now + 1)
    assert n.quorum.voters == voter_set(1, 2, 3, 4)
    assert n.history.latest_entry() == (n.log.end_offset - 1, voter_set(1, 2, 3, 4))
    assert n.log.batches[-1].epoch == n.epoch
    commit(n, now + 2, 2)
    assert answers(n) == []  # the leader and 2 are not a majority of four
    commit(n, now + 3, 4)
    (answer,) = answers(n)
    assert answer == AddRaftVoterResponse(error_code=E.NONE, error_message="NONE")


def test_add_voter_v1_without_ack_when_committed_answers_once_written_and_stays_pending_until_committed() -> None:
    n, now = leader()
    request = start_add(n, now, ack_when_committed=False)
    assert answers(n) == []  # nothing written yet: the new voter has not answered ApiVersions
    n.handle_response(InboundResponse(4, request.correlation_id, kraft_versions(0, 1)), now + 1)
    assert n.history.latest_entry() == (n.log.end_offset - 1, voter_set(1, 2, 3, 4))
    assert n.high_watermark is not None and n.high_watermark < n.log.end_offset
    assert answers(n) == [AddRaftVoterResponse(error_code=E.NONE, error_message="NONE")]  # written, not committed
    # Still one change in flight: the next is refused until this record commits.
    busy = ask(n, remove_request(3), now + 2)
    assert busy == RemoveRaftVoterResponse(error_code=E.REQUEST_TIMED_OUT, error_message=(
        "Request timed out waiting for leader to handle previous voter change request"))
    commit(n, now + 3, 2, 4)
    assert answers(n) == []  # committed: no second answer
    assert ask(n, remove_request(3), now + 4) is None  # and the next change may start


def test_add_voter_acked_on_its_write_gets_no_second_answer_on_timeout_or_lost_leadership() -> None:
    n, now = leader()
    request = start_add(n, now, ack_when_committed=False)
    n.handle_response(InboundResponse(4, request.correlation_id, kraft_versions(0, 1)), now + 1)
    assert [a.error_code for a in answers(n)] == [E.NONE]  # type: ignore[attr-defined]
    n.poll(now + 2000)  # the change times out uncommitted: it is no longer pending, and says nothing
    assert answers(n) == []
    refused = ask(n, remove_request(3), now + 2001)  # refused for the uncommitted record, not a pending change
    assert isinstance(refused, RemoveRaftVoterResponse) and refused.error_code == E.REQUEST_TIMED_OUT
    assert refused.error_message.startswith("Request timed out waiting for voters to commit the latest voter change")
    n2, now2 = leader()
    request = start_add(n2, now2, ack_when_committed=False)
    n2.handle_response(InboundResponse(4, request.correlation_id, kraft_versions(0, 1)), now2 + 1)
    assert [a.error_code for a in answers(n2)] == [E.NONE]  # type: ignore[attr-defined]
    ask(n2, rpcs.begin_quorum_epoch_request(CLUSTER, n2.epoch + 1, 2, endpoints(2), key(1)), now2 + 2)
    assert answers(n2) == []


def test_add_voter_refusals_in_kafkas_order() -> None:
    n, now = leader()
    assert ask(n, add_request(4, cluster="other"), now) == AddRaftVoterResponse(
        error_code=E.INCONSISTENT_CLUSTER_ID,
        error_message=f'The given id "other" doesn\'t match the cluster id "{CLUSTER}"')
    no_dir = ask(n, add_request(4, directory=0), now)
    assert isinstance(no_dir, AddRaftVoterResponse) and no_dir.error_code == E.INVALID_REQUEST
    assert no_dir.error_message == "Add voter request didn't include a valid voter"
    wrong_listener = ask(n, add_request(4, listener="OTHER"), now)
    assert isinstance(wrong_listener, AddRaftVoterResponse) and wrong_listener.error_code == E.INVALID_REQUEST
    assert wrong_listener.error_message == ("Add voter request didn't include the endpoint (Endpoints(endpoints="
                                            "{ListenerName(OTHER)=c4/<unresolved>:9093})) for the default listener "
                                            "ListenerName(CONTROLLER)")
    duplicate = ask(n, add_request(3), now)
    assert isinstance(duplicate, AddRaftVoterResponse) and duplicate.error_code == E.DUPLICATE_VOTER
    assert duplicate.error_message.startswith("The voter id for ReplicaKey(id=3, directoryId=Optional[")
    follower = node(2)
    assert ask(follower, add_request(4), now) == AddRaftVoterResponse(error_code=E.NOT_LEADER_OR_FOLLOWER)


def test_add_voter_waits_for_the_leaders_first_commit_and_one_change_at_a_time() -> None:
    n = node()
    now = elect(n)
    refused = ask(n, add_request(4), now)
    assert isinstance(refused, AddRaftVoterResponse) and refused.error_code == E.REQUEST_TIMED_OUT
    assert refused.error_message == ("Request timed out waiting for leader to establish HWM and fence previous voter "
                                     "changes")
    commit(n, now, 2, 3)
    start_add(n, now)
    for second in (add_request(5), remove_request(3)):
        busy = ask(n, second, now + 1)
        assert busy.error_code == E.REQUEST_TIMED_OUT  # type: ignore[union-attr]
        assert busy.error_message == ("Request timed out waiting for leader to handle previous voter "  # type: ignore[union-attr]
                                      "change request")
    assert ask(n, update_request(2, n.epoch), now + 1).error_code == E.REQUEST_TIMED_OUT  # type: ignore[union-attr]


def test_a_voter_change_is_refused_while_the_last_voters_record_is_uncommitted() -> None:
    n, now = leader()
    n.append_control(n.epoch, [(ControlRecordType.KRAFT_VOTERS, voters_record_of(voter_set(1, 2, 3, 5)))], now)
    n.poll(now)
    refused = ask(n, remove_request(3), now)
    offset = n.log.end_offset - 1
    assert refused == RemoveRaftVoterResponse(
        error_code=E.REQUEST_TIMED_OUT,
        error_message=f"Request timed out waiting for voters to commit the latest voter change at Optional[{offset}] "
                      f"with HWM {n.high_watermark}")


def test_add_voter_aborts_for_an_incompatible_or_lagging_or_silent_new_voter() -> None:
    n, now = leader()
    request = start_add(n, now)
    n.handle_response(InboundResponse(4, request.correlation_id, kraft_versions(0, 0)), now + 1)
    (answer,) = answers(n)
    assert answer.error_code == E.INVALID_REQUEST  # type: ignore[attr-defined]
    assert answer.error_message.endswith("since the kraft.version range (min: 0, max: 0 doesn't support the "  # type: ignore[attr-defined]
                                         "finalized version 1")
    assert n.quorum.voters == voter_set(1, 2, 3)

    # An observer that never caught up (it fetched from offset 0 while the log was longer).
    fetch(n, 5, 0, now + 2, last_epoch=0)
    assert ask(n, add_request(5), now + 2) is None
    (request,) = requests_out(n)
    n.handle_response(InboundResponse(5, request.correlation_id, kraft_versions(0, 1)), now + 3)
    (answer,) = answers(n)
    assert answer.error_code == E.REQUEST_TIMED_OUT  # type: ignore[attr-defined]
    assert answer.error_message.endswith("since it is lagging behind")  # type: ignore[attr-defined]

    # No answer to ApiVersions within the request timeout.
    start_add(n, now + 4, new=6)
    n.poll(now + 4 + 1999)
    assert answers(n) == []
    n.poll(now + 4 + 2000)
    (answer,) = answers(n)
    assert answer == AddRaftVoterResponse(error_code=E.REQUEST_TIMED_OUT, error_message="The request timed out.")


def test_voter_changes_need_kraft_version_1() -> None:
    static = VoterSet.static({i: Address(f"c{i}", 9093) for i in (1, 2, 3)}, L)
    n = node(log=MemoryLog(), voters=static)
    now = elect(n)
    n.poll(now)
    for r in (2, 3):
        request = rpcs.fetch_request(CLUSTER, ReplicaKey(r), n.epoch, n.log.end_offset, n.epoch, 0)
        ask(n, request, now, version=17)
    assert n.high_watermark is not None
    assert ask(n, add_request(4), now) == AddRaftVoterResponse(
        error_code=E.UNSUPPORTED_VERSION,
        error_message="Cluster doesn't support adding voter because the kraft.version feature is 0")
    assert ask(n, remove_request(3), now) == RemoveRaftVoterResponse(
        error_code=E.UNSUPPORTED_VERSION,
        error_message="Cluster doesn't support removing voter because the kraft.version feature is 0")
    assert ask(n, update_request(2, n.epoch), now).error_code == E.UNSUPPORTED_VERSION  # type: ignore[union-attr]


def test_remove_voter_is_answered_once_the_smaller_set_commits() -> None:
    n, now = leader()
    missing = ask(n, remove_request(3, directory=9), now)  # the right id, another directory
    assert missing.error_code == E.VOTER_NOT_FOUND  # type: ignore[union-attr]
    assert ask(n, remove_request(3), now) is None
    assert n.quorum.voters == voter_set(1, 2)
    commit(n, now + 1, 3)
    assert answers(n) == []  # 3 no longer counts
    commit(n, now + 2, 2)
    assert answers(n) == [RemoveRaftVoterResponse(error_code=E.NONE, error_message="NONE")]
    assert n.role == "leader"


def test_a_leader_that_removes_itself_resigns_once_the_change_commits() -> None:
    n, now = leader()
    assert ask(n, remove_request(1), now) is None
    n.poll(now)
    assert n.role == "leader" and n.high_watermark is not None and not n.quorum.is_voter()
    commit(n, now + 1, 2)
    assert answers(n) == []  # the leader's own copy no longer counts: 2 of {2, 3} needed
    commit(n, now + 2, 3)
    assert answers(n) == [RemoveRaftVoterResponse(error_code=E.NONE, error_message="NONE")]
    n.poll(now + 3)
    assert n.role == "resigned"
    ends = requests_out(n)
    assert {r.destination for r in ends} == {2, 3}


def test_a_pending_change_times_out_or_fails_with_the_leadership() -> None:
    n, now = leader()
    assert ask(n, remove_request(3), now) is None
    n.poll(now + 2000)
    assert answers(n) == [RemoveRaftVoterResponse(error_code=E.REQUEST_TIMED_OUT, error_message="The request timed out.")]
    # The record stays in the log; once committed, another change may start, then lose the epoch.
    commit(n, now + 2001, 2)
    assert ask(n, remove_request(2), now + 2002) is None
    ask(n, rpcs.begin_quorum_epoch_request(CLUSTER, n.epoch + 1, 2, endpoints(2), key(1)), now + 2003)
    assert answers(n) == [RemoveRaftVoterResponse(error_code=E.NOT_LEADER_OR_FOLLOWER,
                                                  error_message="For requests intended only for the leader, this "
                                                                "error indicates that the broker is not the current "
                                                                "leader. For requests intended for any replica, this "
                                                                "error indicates that the broker is not a replica of "
                                                                "the topic partition.")]


def test_update_voter_writes_the_new_endpoints_and_answers_at_once() -> None:
    n, now = leader()
    answer = ask(n, update_request(2, n.epoch), now)
    assert isinstance(answer, UpdateRaftVoterResponse) and answer.error_code == E.NONE
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch, answer.current_leader.host,
            answer.current_leader.port) == (1, n.epoch, "c1", 9093)
    assert n.quorum.voters.listeners(2) == Endpoints({L: Address("new-host", 9093)})
    assert n.quorum.voters.node(2).kraft_versions == (0, 1)  # type: ignore[union-attr]


def test_update_voter_refusals() -> None:
    n, now = leader()
    stale = ask(n, update_request(2, n.epoch - 1), now)
    assert stale.error_code == E.FENCED_LEADER_EPOCH  # type: ignore[union-attr]
    assert ask(n, update_request(2, n.epoch, versions=(1, 0)), now).error_code == E.INVALID_REQUEST  # type: ignore[union-attr]
    assert ask(n, update_request(2, n.epoch, versions=(2, 3)), now).error_code == E.INVALID_REQUEST  # type: ignore[union-attr]
    assert ask(n, update_request(7, n.epoch), now).error_code == E.VOTER_NOT_FOUND  # type: ignore[union-attr]
    assert n.quorum.voters == voter_set(1, 2, 3)


def test_an_observer_that_granted_a_vote_does_not_wake_in_a_loop() -> None:
    # A candidate whose log already adds node 4 asks it for its vote; node 4's log does not yet.
    n = node(4)
    request = rpcs.vote_request(CLUSTER, 1, key(1), key(4), OffsetAndEpoch(2, 0))
    answer = ask(n, request, 0, version=1)
    assert answer.topics[0].partitions[0].vote_granted  # type: ignore[union-attr]
    assert n.role == "voted" and not n.quorum.is_voter()
    late = 10 * T
    assert n.poll(late) > late  # its voter's election timer ran out long ago: no reason to wake now


# -- kraftsim metadata-quorum add-controller / remove-controller: what is refused before asking ----

@pytest.mark.parametrize("argv,config,error", [
    (["add-controller"], None, "You must supply the configuration file of the controller you are adding when using "
                               "add-controller."),
    (["add-controller"], "process.roles=controller\n",
     "node.id not found in configuration file. Is this a valid controller configuration file?"),
    (["add-controller"], "node.id=4\nprocess.roles=broker\n",
     "process.roles did not contain 'controller' in configuration file. Is this a valid controller configuration "
     "file?"),
    (["add-controller"], "node.id=4\nprocess.roles=controller\n",
     "Neither metadata.log.dir nor log.dirs were found. Is this a valid controller configuration file?"),
    (["remove-controller", "--controller-id", "-1", "--controller-directory-id", "AAAAAAAAAAAAAAAAAAAAAA"], None,
     "Invalid negative --controller-id: -1"),
])
def test_the_controller_tools_refusals_before_asking_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               argv: list[str], config: str | None,
                                                               error: str) -> None:
    options = ["--bootstrap-controller", "127.0.0.1:1"]
    if config is not None:
        (tmp_path / "c.properties").write_text(config)
        options += ["--command-config", str(tmp_path / "c.properties")]
    assert quorum_cli.main([*options, *argv]) == 1
    assert capsys.readouterr().err.strip() == error


def test_the_controller_tools_dry_runs_print_kafkas_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    MetaProperties("cluster", 4, "5a7yTUvwQdC3wSWd0vF8dw").write(data / "meta.properties")
    (tmp_path / "c.properties").write_text(f"node.id=4\nprocess.roles=controller\nmetadata.log.dir={data}\n"
                                           "listeners=CONTROLLER://[::1]:9097,OTHER://h:1\n"
                                           "controller.listener.names=CONTROLLER\n")
    assert quorum_cli.main(["--bootstrap-controller", "127.0.0.1:1", "--command-config", str(tmp_path / "c.properties"),
                            "add-controller", "--dry-run"]) == 0
    assert quorum_cli.main(["--bootstrap-controller", "127.0.0.1:1", "remove-controller", "-i", "4", "-d",
                            "5a7yTUvwQdC3wSWd0vF8dw", "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "DRY RUN of adding controller 4 with directory id 5a7yTUvwQdC3wSWd0vF8dw and endpoints: CONTROLLER://[::1]:9097",
        "DRY RUN of removing  KRaft controller 4 with directory id 5a7yTUvwQdC3wSWd0vF8dw"]


# -- served: a lone voter made dynamic by a kraft.version upgrade, over real sockets --------------

async def test_a_controller_adds_a_caught_up_observer_then_removes_it_and_updates_itself(tmp_path: Path) -> None:
    """A 4.4 controller upgraded to kraft.version 1 (its VotersRecord names it alone): an
    observer fetching at the log end is added (the leader asks the address given ApiVersions,
    here the controller's own listener), answered once the two-voter set commits; then removed,
    and the leader's own endpoints updated."""
    from tests import harness
    from tests.test_controller import UF, Cluster
    from tests.test_raft import DIR, fetch_request

    c = Cluster(tmp_path, kraftsim_release="4.4")
    await c.start()
    try:
        ctl = c.controller
        node = ctl.raft.node
        up = await c.req(UF(feature_updates=[UF.FeatureUpdateKey(feature="kraft.version", max_version_level=1,
                                                                 upgrade_type=1)], timeout_ms=5000), 1)
        assert up.error_code == 0 and node.quorum.kraft_version == 1
        leader_key = node.quorum.local_key
        assert node.quorum.voters.keys() == [leader_key] and leader_key.directory_id is not None

        async def observer_fetch() -> None:
            await c.req(fetch_request(c, ctl.mlog.end_offset, ctl.epoch, replica=4000), 17)

        await observer_fetch()
        port = c.running.server.port
        add = asyncio.ensure_future(c.req(AddRaftVoterRequest(
            cluster_id=c.cluster_id, timeout_ms=5000, voter_id=4000, voter_directory_id=DIR,
            listeners=[AddRaftVoterRequest.Listener(name="CONTROLLER", host="127.0.0.1", port=port)]), 0))
        await harness.poll_until(lambda: 4000 in node.quorum.voters.ids(), what="the VotersRecord adding 4000")
        assert not add.done()  # uncommitted: 4000 has not fetched it
        await observer_fetch()
        assert await asyncio.wait_for(add, 10) == AddRaftVoterResponse(error_code=E.NONE, error_message="NONE")

        removed = await c.req(RemoveRaftVoterRequest(cluster_id=c.cluster_id, voter_id=4000,
                                                     voter_directory_id=DIR), 0)
        assert removed == RemoveRaftVoterResponse(error_code=E.NONE, error_message="NONE")
        assert node.quorum.voters.keys() == [leader_key]
        updated = await c.req(UpdateRaftVoterRequest(
            cluster_id=c.cluster_id, current_leader_epoch=ctl.epoch, voter_id=leader_key.id,
            voter_directory_id=leader_key.directory_id,
            listeners=[UpdateRaftVoterRequest.Listener(name="CONTROLLER", host="localhost", port=port)],
            kraft_version_feature=UpdateRaftVoterRequest.KRaftVersionFeature(min_supported_version=0,
                                                                            max_supported_version=1)), 0)
        assert updated.error_code == E.NONE and updated.current_leader.leader_id == leader_key.id
        await harness.poll_until(lambda: node.high_watermark is not None and node.history.latest_entry()[0]
                                 < node.high_watermark, what="the update committed")
        assert node.quorum.voters.listeners(leader_key.id) == Endpoints({"CONTROLLER": Address("localhost", port)})
    finally:
        await c.stop()


def test_a_follower_whose_entry_is_out_of_date_asks_the_leader_to_update_it() -> None:
    # Voter 2's entry says kraft.version 0-0; it supports 0-1. After three fetch timeouts of
    # following, it sends UpdateRaftVoter instead of one Fetch, then fetches again.
    log = MemoryLog()
    log.append_control_as_leader([(ControlRecordType.KRAFT_VERSION, KRaftVersionRecord(version=0, kraft_version=1)),
                                  (ControlRecordType.KRAFT_VOTERS, voters_record_of(VoterSet(
                                      [voter(1), VoterNode(key(2), endpoints(2), (0, 0)), voter(3)])))],
                                 epoch=0, timestamp=0)
    log.flush()
    n = node(2, log=log)
    ask(n, rpcs.begin_quorum_epoch_request(CLUSTER, 1, 1, endpoints(1), key(2)), 0)
    sent = []
    now = 0
    while now <= 3 * FETCH_TIMEOUT + 500:
        n.poll(now)
        for request in requests_out(n):
            sent.append(type(request.message).__name__)
            if isinstance(request.message, UpdateRaftVoterRequest):
                assert request.message.kraft_version_feature.max_supported_version == 1
                assert [(li.name, li.host, li.port) for li in request.message.listeners] == [(L, "c2", 9093)]
                answer: Message = UpdateRaftVoterResponse(error_code=E.NONE, current_leader=(
                    UpdateRaftVoterResponse.CurrentLeader(leader_id=1, leader_epoch=1)))
            else:
                answer = rpcs.fetch_response(L, 17, E.NONE, 1, 1, endpoints(1), high_watermark=2)
            n.handle_response(InboundResponse(1, request.correlation_id, answer), now)  # type: ignore[arg-type]
        now += 500
    assert n.role == "follower"
    assert sent.count("UpdateRaftVoterRequest") == 1 and sent[-1] == "FetchRequest"
    assert sent.index("UpdateRaftVoterRequest") >= 3 * FETCH_TIMEOUT // 500  # after some rounds of Fetch

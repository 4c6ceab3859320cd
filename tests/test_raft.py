"""The Raft RPCs over real sockets: Fetch (every case a KRaft observer meets), FetchSnapshot,
DescribeQuorum, and Vote / BeginQuorumEpoch / EndQuorumEpoch, answered by a lone voter."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from kraftsim.metadata.batch import IncompleteBatchError, read_batches
from kraftsim.metadata.files import METADATA_TOPIC_ID
from kraftsim.metadata.records import unframe
from kraftsim.rpc.clock import ManualClock
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import (
    BeginQuorumEpochRequest,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    VoteRequest,
)
from tests import harness
from tests.test_controller import CT, Cluster, registration

E = ErrorCode
OBSERVER = 7
DIR = uuid.UUID(int=0x77 << 64 | 7)


def fetch_request(c: Cluster, offset: int, last_epoch: int, *, epoch: int | None = None, wait_ms: int = 0,
                  replica: int = OBSERVER, topic_id: uuid.UUID = METADATA_TOPIC_ID,
                  cluster_id: str | None = "same", version: int = 17) -> Any:
    """A KRaft observer's fetch: from v15 the replica is in ReplicaState, before in ReplicaId."""
    return FetchRequest(
        cluster_id=c.cluster_id if cluster_id == "same" else cluster_id, replica_id=replica if version < 15 else -1,
        replica_state=FetchRequest.ReplicaState(replica_id=replica if version >= 15 else -1, replica_epoch=-1),
        max_wait_ms=wait_ms,
        min_bytes=0, max_bytes=8 << 20, topics=[FetchRequest.FetchTopic(topic="__cluster_metadata", topic_id=topic_id,
                                                                         partitions=[FetchRequest.FetchPartition(
            partition=0, current_leader_epoch=c.controller.epoch if epoch is None else epoch, fetch_offset=offset,
            last_fetched_epoch=last_epoch, partition_max_bytes=8 << 20, replica_directory_id=DIR)])])


def partition(resp: Any) -> Any:
    assert resp.error_code == 0, resp
    return resp.responses[0].partitions[0]


def offsets_in(records: bytes) -> list[int]:
    """Offsets of the whole batches in a fetch's records (a cut-off last batch is dropped)."""
    out: list[int] = []
    try:
        for batch in read_batches(records):
            out.extend(r.offset for r in batch.records())
    except IncompleteBatchError:
        pass
    return out


def record_types(records: bytes) -> list[str]:
    out = []
    try:
        for batch in read_batches(records):
            if not batch.is_control:
                out.extend(type(unframe(r.value)[0]).__name__ for r in batch.records())
    except IncompleteBatchError:
        pass
    return out


@pytest.fixture
async def cluster(tmp_path: Path) -> Any:
    c = Cluster(tmp_path)
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


async def create(c: Cluster, name: str, partitions: int = 1) -> None:
    r = await c.req(CT(topics=[CT.CreatableTopic(name=name, num_partitions=partitions, replication_factor=-1)],
                       timeout_ms=5000, validate_only=False), 7)
    assert r.topics[0].error_code in (0, E.INVALID_REPLICATION_FACTOR)


async def test_fetch_from_zero_serves_the_log_with_the_high_watermark(cluster: Cluster) -> None:
    c = cluster
    ctl = c.controller
    p = partition(await c.req(fetch_request(c, 0, 0), 17))
    assert p.error_code == 0 and p.log_start_offset == 0
    assert p.high_watermark == ctl.raft.committed_offset + 1 == ctl.mlog.end_offset
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (3000, ctl.epoch)
    assert offsets_in(p.records) == list(range(ctl.mlog.end_offset))
    assert record_types(p.records)[:2] == ["BeginTransactionRecord", "FeatureLevelRecord"]
    assert p.diverging_epoch.epoch == -1 and p.snapshot_id.epoch == -1


async def test_fetch_from_the_middle_starts_at_the_batch_holding_the_offset(cluster: Cluster) -> None:
    c = cluster
    epoch, _ = await c.register(1)  # a batch of its own at offset `epoch`
    await c.unfence(1, epoch)
    p = partition(await c.req(fetch_request(c, epoch, c.controller.epoch), 17))
    offsets = offsets_in(p.records)
    assert offsets[0] == epoch and offsets[-1] == c.controller.mlog.end_offset - 1
    assert record_types(p.records)[0] == "RegisterBrokerRecord"


async def test_a_long_poll_at_the_end_is_woken_by_a_commit(cluster: Cluster) -> None:
    c = cluster
    end = c.controller.mlog.end_offset
    assert c.client is not None
    polling = c.client.send(fetch_request(c, end, c.controller.epoch, wait_ms=60_000), 17)
    await asyncio.sleep(0)
    assert not polling.done()
    other = await harness.connect(c.running)  # the poll holds its own connection, as Kafka's would
    try:
        r = await other.request(registration(1, c.cluster_id), 3)  # a write: a RegisterBrokerRecord
        assert r.error_code == 0
    finally:
        await other.close()
    p = partition(await asyncio.wait_for(polling, 30))
    assert offsets_in(p.records)[0] == end


async def test_a_long_poll_with_nothing_new_answers_empty_after_its_wait(cluster: Cluster) -> None:
    c = cluster
    end = c.controller.mlog.end_offset
    p = partition(await c.req(fetch_request(c, end, c.controller.epoch, wait_ms=50), 17))
    assert p.error_code == 0 and p.records in (b"", None) and p.high_watermark == end


async def test_a_diverging_fetcher_is_told_where_to_truncate(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    await c.start()
    first_epoch = c.controller.epoch
    await create(c, "in-first-epoch")
    end_of_first = c.controller.mlog.end_offset
    await c.restart()  # a new leader epoch starts at end_of_first
    try:
        await create(c, "in-second-epoch")
        epoch = c.controller.epoch
        assert epoch == first_epoch + 1
        # It claims offsets of the first epoch past where that epoch ended.
        p = partition(await c.req(fetch_request(c, end_of_first + 3, first_epoch), 17))
        assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (first_epoch, end_of_first)
        assert p.records in (b"", None)
        # It claims the current epoch beyond the log end.
        p = partition(await c.req(fetch_request(c, c.controller.mlog.end_offset + 5, epoch), 17))
        assert (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (epoch, c.controller.mlog.end_offset)
        # A consistent fetcher is served.
        p = partition(await c.req(fetch_request(c, end_of_first, first_epoch), 17))
        assert p.diverging_epoch.epoch == -1 and offsets_in(p.records)[0] == end_of_first
    finally:
        await c.stop()


async def test_below_the_log_start_gets_the_snapshot_id_and_fetch_snapshot_serves_it_in_chunks(
        tmp_path: Path) -> None:
    c = Cluster(tmp_path, metadata_log_segment_bytes="1024", metadata_log_segment_min_bytes="1024",
                metadata_max_retention_bytes="0")
    await c.start()
    try:
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        for i in range(3):
            await create(c, f"t{i}", 10)  # each its own batch, the segments roll at 1 KiB
        ctl = c.controller
        assert await ctl.snapshot(force=True) is not None
        await create(c, "t3", 10)
        sid = await ctl.snapshot(force=True)
        assert sid is not None and ctl.mlog.start_offset == 0  # retention runs on a timer of its own
        ctl.clean_log()  # what that timer does a minute after start: over the retention bytes
        assert ctl.mlog.start_offset == sid.end_offset and ctl.mlog.snapshots() == [sid]
        assert ctl.mlog.segments.start_offset < sid.end_offset  # the segment holding it stays
        p = partition(await c.req(fetch_request(c, 0, 0), 17))  # an empty fetcher: straight to the snapshot
        assert (p.snapshot_id.end_offset, p.snapshot_id.epoch) == (sid.end_offset, sid.epoch)
        assert p.records in (b"", None) and p.log_start_offset == ctl.mlog.start_offset
        p = partition(await c.req(fetch_request(c, 1, ctl.epoch), 17))  # behind the log start
        assert (p.snapshot_id.end_offset, p.snapshot_id.epoch) == (sid.end_offset, sid.epoch)
        data = ctl.mlog.snapshot_path(sid).read_bytes()
        chunks, pos = [], 0
        while pos < len(data):
            r = await c.req(FetchSnapshotRequest(cluster_id=c.cluster_id, replica_id=OBSERVER, max_bytes=100, topics=[
                FetchSnapshotRequest.TopicSnapshot(name="__cluster_metadata", partitions=[
                    FetchSnapshotRequest.PartitionSnapshot(
                        partition=0, current_leader_epoch=ctl.epoch, position=pos,
                        snapshot_id=FetchSnapshotRequest.SnapshotId(end_offset=sid.end_offset, epoch=sid.epoch))])]), 1)
            ps = r.topics[0].partitions[0]
            assert ps.error_code == 0 and ps.size == len(data) and ps.position == pos
            assert len(ps.unaligned_records) == min(100, len(data) - pos)
            chunks.append(ps.unaligned_records)
            pos += len(ps.unaligned_records)
        assert b"".join(chunks) == data
    finally:
        await c.stop()


async def test_the_log_is_cleaned_a_minute_after_start_and_the_marked_files_deleted_a_minute_later(
        tmp_path: Path) -> None:
    """KafkaRaftClient's cleaner: KafkaMetadataLog.maybeClean a minute after start and every
    minute after; what it renamed *.deleted goes after the file delete delay (a minute)."""
    clock = ManualClock()
    c = Cluster(tmp_path, clock, metadata_log_segment_bytes="1024", metadata_log_segment_min_bytes="1024",
                metadata_max_retention_bytes="1")
    await c.start()
    try:
        ctl = c.controller
        mlog = ctl.mlog
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        await create(c, "a", 10)
        first = await ctl.snapshot(force=True)
        await create(c, "b", 10)
        latest = await ctl.snapshot(force=True)
        assert first is not None and latest is not None and mlog.start_offset == 0

        def listing() -> list[str]:
            return sorted(p.name for p in mlog.directory.iterdir() if ".log" in p.name or ".checkpoint" in p.name)

        clock.advance(59_999)  # (the broker's session expires meanwhile: more records)
        await asyncio.sleep(0.05)
        assert not any(n.endswith(".deleted") for n in listing()) and mlog.start_offset == 0  # not yet
        clock.advance(1)
        await harness.poll_until(lambda: mlog.start_offset == latest.end_offset)
        marked = [n for n in listing() if n.endswith(".deleted")]
        assert first.file_name + ".deleted" in marked and any(n.endswith(".log.deleted") for n in marked)
        clock.advance(59_999)
        await asyncio.sleep(0.05)
        assert [n for n in listing() if n.endswith(".deleted")] == marked
        clock.advance(1)
        await harness.poll_until(lambda: not any(n.endswith(".deleted") for n in listing()))
        assert mlog.snapshots() == [latest]
        # After a restart the log starts at its first segment (at or below the snapshot): served from there.
        await c.restart()
        mlog = c.controller.mlog
        assert mlog.segments.start_offset == mlog.start_offset <= latest.end_offset
        p = partition(await c.req(fetch_request(c, mlog.start_offset, epoch=c.controller.epoch,
                                                last_epoch=1), 17))
        assert p.error_code == 0 and p.snapshot_id.end_offset == -1 and p.log_start_offset == mlog.start_offset
    finally:
        await c.stop()


def snapshot_request(c: Cluster, end_offset: int, epoch: int, position: int = 0, leader_epoch: int | None = None,
                     topic: str = "__cluster_metadata") -> Any:
    return FetchSnapshotRequest(cluster_id=c.cluster_id, replica_id=OBSERVER, max_bytes=1000, topics=[
        FetchSnapshotRequest.TopicSnapshot(name=topic, partitions=[FetchSnapshotRequest.PartitionSnapshot(
            partition=0, current_leader_epoch=c.controller.epoch if leader_epoch is None else leader_epoch,
            position=position, snapshot_id=FetchSnapshotRequest.SnapshotId(end_offset=end_offset, epoch=epoch))])])


async def test_fetch_snapshot_errors(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """Every partition-level error is answered as a Kafka 3.9 controller answers it: that
    partition has no records, ControllerApis fails to size the response and sends
    UNKNOWN_SERVER_ERROR with no topics instead."""
    c = cluster
    await create(c, "x")
    sid = await c.controller.snapshot(force=True)
    size = c.controller.mlog.snapshot_path(sid).stat().st_size

    async def error(req: Any) -> tuple[int, list[Any], list[Any]]:
        r = await c.req(req, 1)
        return r.error_code, r.topics, r.node_endpoints

    failed = (E.UNKNOWN_SERVER_ERROR, [], [])
    with caplog.at_level("ERROR", "kraftsim.raft"):
        assert await error(snapshot_request(c, sid.end_offset + 1, sid.epoch)) == failed  # SNAPSHOT_NOT_FOUND
        assert await error(snapshot_request(c, 0, 0)) == failed  # the bootstrap id is never served
        assert await error(snapshot_request(c, sid.end_offset, sid.epoch, position=size)) == failed
        assert await error(snapshot_request(c, sid.end_offset, sid.epoch, position=-1)) == failed
        assert await error(snapshot_request(c, sid.end_offset, sid.epoch, leader_epoch=0)) == failed
        assert await error(snapshot_request(c, sid.end_offset, sid.epoch, leader_epoch=99)) == failed
        assert await error(snapshot_request(c, sid.end_offset, sid.epoch, topic="other")) == failed
    assert [m.split(" failed with ")[1].split(";")[0] for m in caplog.messages] == [
        "SNAPSHOT_NOT_FOUND", "SNAPSHOT_NOT_FOUND", "POSITION_OUT_OF_RANGE", "POSITION_OUT_OF_RANGE",
        "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "UNKNOWN_TOPIC_OR_PARTITION"]
    bad = snapshot_request(c, sid.end_offset, sid.epoch)
    bad.cluster_id = "someone-else"
    assert (await c.req(bad, 1)).error_code == E.INCONSISTENT_CLUSTER_ID


async def test_fetch_errors(cluster: Cluster) -> None:
    c = cluster
    epoch = c.controller.epoch
    assert (await c.req(fetch_request(c, 0, 0, cluster_id="other"), 17)).error_code == E.INCONSISTENT_CLUSTER_ID
    assert (await c.req(fetch_request(c, 0, 0, topic_id=uuid.UUID(int=9)), 17)).error_code == E.INVALID_REQUEST
    bad = [fetch_request(c, -1, 0), fetch_request(c, 0, -1), fetch_request(c, 5, epoch + 1, epoch=epoch)]
    for req in bad:
        assert partition(await c.req(req, 17)).error_code == E.INVALID_REQUEST
    assert partition(await c.req(fetch_request(c, 0, 0, epoch=epoch - 1), 17)).error_code == E.FENCED_LEADER_EPOCH
    assert partition(await c.req(fetch_request(c, 0, 0, epoch=epoch + 1), 17)).error_code == E.UNKNOWN_LEADER_EPOCH
    req = fetch_request(c, 0, 0)
    req.max_wait_ms = -1
    assert partition(await c.req(req, 17)).error_code == E.INVALID_REQUEST
    # Before v13 the topic is named, not identified: Kafka's Raft client checks the id.
    assert (await c.req(fetch_request(c, 0, 0, version=12), 12)).error_code == E.INVALID_REQUEST


async def test_fetch_at_every_version_from_13(cluster: Cluster) -> None:
    c = cluster
    end = c.controller.mlog.end_offset
    for v in range(13, 18):
        resp = await c.req(fetch_request(c, 0, 0, version=v), v)
        p = partition(resp)
        assert offsets_in(p.records) == list(range(end)), v
        assert bool(resp.node_endpoints) == (v >= 17)


async def test_a_41_controller_fetches_at_v18_and_its_leader_answers_a_stale_high_watermark_at_once(
        tmp_path: Path) -> None:
    """Kafka 4.1 (KIP-1166): the Raft network of a 4.4 controller fetches at v18, which a 4.4
    leader serves, with the fetcher's high watermark; the leader, ahead of it, answers at once a
    fetch at its log end that would otherwise wait its whole MaxWaitMs."""
    from kraftsim.raft.core import rpcs
    from kraftsim.raft.core.events import OutboundRequest
    from kraftsim.raft.core.keys import ReplicaKey
    from kraftsim.raft.core.voters import Address
    from kraftsim.raft.network import RaftNetwork
    from kraftsim.rpc.api_keys import ApiKey

    c = Cluster(tmp_path, kraftsim_release="4.4")
    await c.start()
    answers: list[Any] = []
    network = RaftNetwork("raft-client-7", 30_000, lambda peer, corr, r: answers.append(r),
                          lambda peer, corr, key, error: answers.append(error),
                          c.controller.raft.network.speaks)
    try:
        ctl = c.controller
        assert ctl.raft.network.speaks == {ApiKey.FETCH: (4, 18), ApiKey.VOTE: (0, 2)}
        assert ctl.raft.node.pre_vote
        end = ctl.mlog.end_offset
        assert ctl.raft.node.high_watermark == end
        fetch = rpcs.fetch_request(c.cluster_id, ReplicaKey(OBSERVER, DIR), ctl.epoch, end, ctl.epoch, 60_000, -1)
        network.send(OutboundRequest(1, 3000, Address("127.0.0.1", c.running.server.port), fetch))
        await harness.poll_until(lambda: answers, what="the v18 fetch answered before its MaxWaitMs")
        p = partition(answers[0])
        assert p.high_watermark == end and not p.records
        peer = next(iter(network._peers.values()))
        assert peer.client is not None and peer.client.pick_version(ApiKey.FETCH, FetchRequest) == 18
    finally:
        await network.close()


@pytest.mark.parametrize("release,answer", [("3.9", ErrorCode.UNSUPPORTED_VERSION), ("4.0", "answered")])
async def test_a_pre_vote_goes_at_vote_v2_and_fails_unsupported_version_before_a_39_voter(
        tmp_path: Path, release: str, answer: object) -> None:
    """KIP-996: a 4.0 controller's Raft network speaks Vote v2, so its pre-vote reaches a 4.0 voter
    (here a lone leader, which answers it and refuses it, as a leader refuses every pre-vote); to a 3.9 voter,
    which serves Vote v1 at most, it cannot be encoded and fails with UNSUPPORTED_VERSION, as
    Kafka's client fails it, which makes the asker stand at once."""
    from kraftsim.raft.core import rpcs
    from kraftsim.raft.core.events import OutboundRequest
    from kraftsim.raft.core.keys import OffsetAndEpoch, ReplicaKey
    from kraftsim.raft.core.voters import Address
    from kraftsim.raft.network import RaftNetwork
    from kraftsim.rpc.api_keys import ApiKey

    c = Cluster(tmp_path, kraftsim_release=release)
    await c.start()
    answers: list[Any] = []
    network = RaftNetwork("raft-client-7", 30_000, lambda peer, corr, r: answers.append(r),
                          lambda peer, corr, key, error: answers.append(error), {ApiKey.VOTE: (0, 2)})
    try:
        ctl = c.controller
        assert ctl.raft.node.pre_vote == (release != "3.9")
        epoch, end = ctl.epoch, ctl.mlog.end_offset
        request = rpcs.vote_request(c.cluster_id, epoch, ReplicaKey(OBSERVER, DIR), ReplicaKey(ctl.node_id, None),
                                    OffsetAndEpoch(end, epoch), pre_vote=True)
        network.send(OutboundRequest(1, ctl.node_id, Address("127.0.0.1", c.running.server.port), request))
        await harness.poll_until(lambda: answers, what="the pre-vote answered or failed")
        if answer == "answered":
            p = answers[0].topics[0].partitions[0]
            # A lone voter leads its epoch: a leader refuses every pre-vote, with no error.
            assert (p.error_code, p.vote_granted, p.leader_epoch) == (0, False, epoch)
        else:
            assert answers == [answer]
        assert ctl.epoch == epoch and ctl.raft.node.is_leader()
    finally:
        await network.close()
        await c.stop()


async def test_describe_quorum_shows_the_leader_and_its_observers(cluster: Cluster) -> None:
    c = cluster
    ctl = c.controller
    end = ctl.mlog.end_offset
    await c.req(fetch_request(c, end - 2, ctl.epoch), 17)  # observer 7, two records behind
    req = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
    r = await c.req(req, 2)
    p = r.topics[0].partitions[0]
    assert (p.error_code, p.leader_id, p.leader_epoch, p.high_watermark) == (0, 3000, ctl.epoch, end)
    [leader] = p.current_voters
    assert leader.replica_id == 3000 and leader.log_end_offset == end and leader.last_fetch_timestamp > 0
    [obs] = p.observers
    assert (obs.replica_id, obs.replica_directory_id, obs.log_end_offset) == (OBSERVER, DIR, end - 2)
    assert obs.last_fetch_timestamp > 0 and obs.last_caught_up_timestamp == -1
    await c.req(fetch_request(c, end, ctl.epoch), 17)  # caught up now
    [obs] = (await c.req(req, 2)).topics[0].partitions[0].observers
    assert obs.log_end_offset == end and obs.last_caught_up_timestamp > 0
    assert [(n.node_id, [(x.name, x.port) for x in n.listeners]) for n in r.nodes] == [(3000, [("CONTROLLER", 9093)])]
    r0 = await c.req(req, 0)
    assert r0.topics[0].partitions[0].current_voters[0].replica_id == 3000 and not r0.nodes
    wrong = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="other", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])
    assert (await c.req(wrong, 2)).topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION


async def test_vote_and_quorum_epoch_requests_answered_as_a_single_voter_leader(cluster: Cluster) -> None:
    c = cluster
    await c.restart()  # epoch 2, so that an older epoch can be a valid one
    epoch = c.controller.epoch
    assert epoch == 2

    def vote(candidate_epoch: int, last_epoch: int, voter_id: int = 3000) -> Any:
        return VoteRequest(cluster_id=c.cluster_id, voter_id=voter_id, topics=[VoteRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[VoteRequest.PartitionData(
                partition_index=0, candidate_epoch=candidate_epoch, candidate_id=3001,
                last_offset_epoch=last_epoch, last_offset=10)])])

    p = (await c.req(vote(epoch, epoch - 1), 1)).topics[0].partitions[0]
    assert (p.error_code, p.leader_id, p.leader_epoch, p.vote_granted) == (0, 3000, epoch, False)
    assert (await c.req(vote(epoch - 1, 0), 1)).topics[0].partitions[0].error_code == E.FENCED_LEADER_EPOCH
    assert (await c.req(vote(epoch, epoch), 1)).topics[0].partitions[0].error_code == E.INVALID_REQUEST
    assert (await c.req(vote(epoch, 0, voter_id=5), 1)).topics[0].partitions[0].error_code == E.INVALID_VOTER_KEY
    begin = BeginQuorumEpochRequest(cluster_id=c.cluster_id, voter_id=3000, topics=[
        BeginQuorumEpochRequest.TopicData(topic_name="__cluster_metadata", partitions=[
            BeginQuorumEpochRequest.PartitionData(partition_index=0, leader_id=3001, leader_epoch=epoch - 1)])])
    assert (await c.req(begin, 1)).topics[0].partitions[0].error_code == E.FENCED_LEADER_EPOCH
    end = EndQuorumEpochRequest(cluster_id="other", topics=[])
    assert (await c.req(end, 1)).error_code == E.INCONSISTENT_CLUSTER_ID


async def test_metadata_quorum_replication_table(cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    """``kraftsim metadata-quorum describe --replication``: Kafka's table, the leader then observers,
    each column padded to its widest cell and followed by a tab."""
    import argparse
    import base64

    from kraftsim.cli import metadata_quorum as quorum_cli

    c = cluster
    end = c.controller.mlog.end_offset
    await c.req(fetch_request(c, end - 1, c.controller.epoch), 17)
    args = argparse.Namespace(bootstrap_server=None, bootstrap_controller=f"127.0.0.1:{c.running.server.port}",
                              command_config=None, quorum_command="describe", status=False, replication=True,
                              human_readable=False)
    assert await asyncio.to_thread(quorum_cli.run, args) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [[x.strip() for x in line.rstrip("\t").split("\t")] for line in lines]
    observer_dir = base64.urlsafe_b64encode(DIR.bytes).rstrip(b"=").decode()  # Kafka's Uuid.toString
    assert rows[0] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                       "LastCaughtUpTimestamp", "Status"]
    assert rows[1][:4] == ["3000", "AAAAAAAAAAAAAAAAAAAAAA", str(end), "0"] and rows[1][6] == "Leader"
    assert rows[2][:4] == [str(OBSERVER), observer_dir, str(end - 1), "1"] and rows[2][6] == "Observer"
    assert int(rows[2][4]) > 0 and rows[2][5] == "-1"
    widths = {len(line.split("\t")[1]) for line in lines}
    assert widths == {22}  # the DirectoryId column: every cell padded to the widest


async def test_a_directory_an_earlier_release_left_starts_in_the_next_epoch(tmp_path: Path) -> None:
    """An earlier kraftsim wrote quorum-state itself, as a single-voter leader's: its JSON is
    Kafka's, and the Raft node reads it as any voter would (it led that epoch: it comes back
    resigned, stands, wins alone the next one), on the log and checkpoints it left."""
    import json

    c = Cluster(tmp_path)
    await c.start()
    epoch, _ = await c.register(1)
    await c.unfence(1, epoch)
    await create(c, "from-before")
    await c.stop()
    qs = tmp_path / "data" / "__cluster_metadata-0" / "quorum-state"
    # Byte for byte what the earlier release's single-voter election wrote, in a later epoch.
    qs.write_text('{"clusterId":"","leaderId":3000,"leaderEpoch":7,"votedId":-1,"appliedOffset":0,'
                  '"currentVoters":[{"voterId":3000}],"data_version":0}')
    await c.start()
    try:
        assert c.controller.epoch == 8 and c.controller.active
        assert "from-before" in c.controller.image.topics.by_name
        assert json.loads(qs.read_text()) == {"clusterId": "", "leaderId": 3000, "leaderEpoch": 8, "votedId": -1,
                                              "appliedOffset": 0, "currentVoters": [{"voterId": 3000}],
                                              "data_version": 0}
        await create(c, "after")
        assert "after" in c.controller.image.topics.by_name
    finally:
        await c.stop()

"""The Raft RPCs a broker and the tools send, against a real Kafka 3.9 controller
(differential): Fetch in each case an observer meets (and Fetch v18's high watermark against
Kafka 4.4), FetchSnapshot's errors, DescribeQuorum,
and Vote / BeginQuorumEpoch / EndQuorumEpoch from a node that is not a voter. Responses are
compared after the RAFT normalisation (offsets relative, records decoded, times and ports
masked)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kraftsim.metadata.batch import IncompleteBatchError
from kraftsim.metadata.files import METADATA_TOPIC_DIR, METADATA_TOPIC_ID
from kraftsim.metadata.segments import iter_file_batches
from kraftsim.metadata.snapshots import SnapshotId, list_snapshots
from kraftsim.rpc.messages import DescribeQuorumRequest, FetchRequest, FetchSnapshotRequest
from tests.kafka import differential as d
from tests.kafka.conftest import PAIR_CONFIG, PairNodes, close, connect
from tests.kafka.differential import Call, TopicSpec
from tests.kafka.harness import KafkaNode, KraftsimNode, random_cluster_id

pytestmark = pytest.mark.kafka

OBSERVER = 9
DIRECTORY = uuid.UUID(int=0x5CE7A210 << 96 | 999)
LEADER_EPOCH = 1  # a fresh controller's first epoch, on both sides


def fetch(offset: int | str | Callable[[d.Side], int], last_epoch: int = LEADER_EPOCH, *,
          leader_epoch: int = LEADER_EPOCH, cluster_id: str | None = "same", topic_id: uuid.UUID = METADATA_TOPIC_ID,
          wait_ms: int = 0, partition: int = 0, replica: int = OBSERVER, version: int = 17,
          high_watermark: int | str | None = None) -> d.Builder:
    """``offset``: relative to the scenario's start, "end" for the side's log end, an int
    below 0 taken as an absolute (invalid) offset, or a function of the side giving one.
    ``high_watermark`` (Fetch v18): the fetcher's, absolute, or "end" for the side's log end."""
    def build(side: d.Side) -> Any:
        if callable(offset):
            off = offset(side)
        elif offset == "end":
            off = side.last_offset() + 1
        elif isinstance(offset, int) and offset < 0:
            off = offset
        else:
            off = side.offset(int(offset))
        side.view.fetch_offset = max(off, 0)
        state = FetchRequest.ReplicaState(replica_id=replica if version >= 15 else -1, replica_epoch=-1)
        return FetchRequest(
            cluster_id=side.cluster_id if cluster_id == "same" else cluster_id,
            replica_id=replica if version < 15 else -1, max_wait_ms=wait_ms, min_bytes=0, max_bytes=8 << 20,
            replica_state=state,
            topics=[FetchRequest.FetchTopic(topic="__cluster_metadata", topic_id=topic_id, partitions=[
                FetchRequest.FetchPartition(partition=partition, current_leader_epoch=leader_epoch, fetch_offset=off,
                                            last_fetched_epoch=last_epoch, partition_max_bytes=8 << 20,
                                            replica_directory_id=DIRECTORY,
                                            **({} if high_watermark is None else {"high_watermark": (
                                                side.last_offset() + 1 if high_watermark == "end"
                                                else int(high_watermark))}))])])
    return build


def describe_quorum(topic: str = "__cluster_metadata") -> d.Builder:
    return lambda side: DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name=topic, partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])


def fetch_snapshot(end_offset: int | Callable[[d.Side], SnapshotId], epoch: int = LEADER_EPOCH, position: int = 0,
                   max_bytes: int = 1 << 20, leader_epoch: int = LEADER_EPOCH) -> d.Builder:
    """The snapshot ``end_offset``-``epoch`` (absolute), or the one a function of the side names."""
    def build(side: d.Side) -> Any:
        sid = end_offset(side) if callable(end_offset) else SnapshotId(end_offset, epoch)
        return FetchSnapshotRequest(
            cluster_id=side.cluster_id, replica_id=OBSERVER, max_bytes=max_bytes, topics=[
                FetchSnapshotRequest.TopicSnapshot(name="__cluster_metadata", partitions=[
                    FetchSnapshotRequest.PartitionSnapshot(
                        partition=0, current_leader_epoch=leader_epoch, position=position,
                        snapshot_id=FetchSnapshotRequest.SnapshotId(end_offset=sid.end_offset, epoch=sid.epoch))])])
    return build


async def test_raft_rpcs(pair_factory: Callable[..., PairNodes]) -> None:
    pair = await connect(pair_factory("raft"))
    try:
        t = await d.check(pair, [
            Call("describe the quorum", describe_quorum(), 2),
            Call("describe the quorum v0", describe_quorum(), 0),
            Call("describe another topic", describe_quorum("other"), 2),
            Call("register 1", d.register(1)),
            Call("unfence 1", d.heartbeat(1)),
            Call("topic", d.create_topics(TopicSpec("raft", assignments={0: [1], 1: [1]}))),
            Call("fetch from the scenario's start", fetch(0)),
            Call("fetch from the middle", fetch(2)),
            Call("fetch at the end (nothing new)", fetch("end")),
            Call("fetch at the end, v13 (topic by id from v13)", fetch("end", version=13), 13),
            Call("describe the quorum with an observer", describe_quorum(), 2),
            Call("a leader epoch from the future", fetch(1, last_epoch=LEADER_EPOCH + 5, leader_epoch=LEADER_EPOCH + 5)),
            Call("a diverging epoch", fetch(2, last_epoch=0)),
            Call("a stale leader epoch", fetch(0, last_epoch=0, leader_epoch=0)),
            Call("last fetched epoch above the leader epoch", fetch(0, last_epoch=LEADER_EPOCH + 1)),
            Call("a negative offset", fetch(-5)),
            Call("another cluster", fetch(0, cluster_id="AAAAAAAAAAAAAAAAAAAAAA")),
            Call("an unknown topic id", fetch(0, topic_id=uuid.UUID(int=12345))),
            Call("another partition", fetch(0, partition=1)),
            # A partition-level error has no records, which Kafka 3.9's controller fails to size:
            # it answers UNKNOWN_SERVER_ERROR instead.
            Call("fetch a snapshot that does not exist", fetch_snapshot(1, 1)),
            Call("fetch a snapshot in a leader epoch from the future", fetch_snapshot(1, 1, leader_epoch=6)),
        ])
    finally:
        await close(pair)
    first = t.response("fetch from the scenario's start")["responses"][0]["partitions"][0]
    assert [r.get("type") for r in first["records"]][:2] == ["RegisterBrokerRecord", "BrokerRegistrationChangeRecord"], first
    def part(label: str) -> Any:
        return t.response(label)["responses"][0]["partitions"][0]

    assert part("a leader epoch from the future")["error_code"] == 75  # UNKNOWN_LEADER_EPOCH
    assert part("a stale leader epoch")["error_code"] == 74  # FENCED_LEADER_EPOCH
    assert part("a diverging epoch")["diverging_epoch"] == {"epoch": 0, "end_offset": "base-5"}  # epoch 0 ends at 0
    assert t.error("fetch a snapshot that does not exist") == -1  # UNKNOWN_SERVER_ERROR
    observers = t.response("describe the quorum with an observer")["topics"][0]["partitions"][0]["observers"]
    # One observer per (id, directory): the v13 fetch carries no directory id, the v17 ones do.
    assert sorted((o["replica_id"], o["replica_directory_id"]) for o in observers) == [
        (OBSERVER, "00000000-0000-0000-0000-000000000000"), (OBSERVER, str(DIRECTORY))]


async def test_fetch_v18_with_the_fetchers_high_watermark(shared_pair_44: d.Pair) -> None:
    """Kafka 4.1+ (KIP-1166), against Kafka 4.4: a fetch at the log end from a fetcher whose high
    watermark is behind the leader's is answered at once, long MaxWaitMs or not (the deadline
    fails a side that parks it); one holding the leader's waits its MaxWaitMs for nothing new."""
    t = await asyncio.wait_for(d.check(shared_pair_44, [
        Call("v18 at the end, high watermark behind", fetch("end", wait_ms=600_000, high_watermark=-1, version=18), 18),
        Call("v18 at the end, high watermark the leader's",
             fetch("end", wait_ms=200, high_watermark="end", version=18), 18),
    ]), 60)
    for label in ("v18 at the end, high watermark behind", "v18 at the end, high watermark the leader's"):
        p = t.response(label)["responses"][0]["partitions"][0]
        assert p["error_code"] == 0 and not p["records"], (label, p)


# -- retention: the log start offset after snapshots ----------------------------------------------

# Snapshots every 3,000 bytes of batches and segments of 4 KiB: a few hundred records make
# several of each. Both controllers clean their log a minute after they start (KafkaRaftClient).
SNAPSHOT_BYTES = 3000
SNAPSHOTTING = {"metadata.log.max.record.bytes.between.snapshots": str(SNAPSHOT_BYTES),
                "metadata.log.segment.min.bytes": "1024", "metadata.log.segment.bytes": "4096"}


def snapshots_of(side: d.Side) -> list[SnapshotId]:
    return list_snapshots(side.node.metadata_dir / METADATA_TOPIC_DIR)


def latest_snapshot(side: d.Side) -> SnapshotId:
    return snapshots_of(side)[-1]


def earliest_snapshot(side: d.Side) -> SnapshotId:
    return snapshots_of(side)[0]


def bytes_past_the_latest_snapshot(side: d.Side) -> int:
    """The bytes of the batches after the latest snapshot: at SNAPSHOT_BYTES or more, a
    snapshot is due at the last commit (each side writes it in the background)."""
    snapshots = snapshots_of(side)
    start = snapshots[-1].end_offset if snapshots else 0
    total = 0
    for segment in sorted((side.node.metadata_dir / METADATA_TOPIC_DIR).glob("*.log")):
        try:
            for _, batch in iter_file_batches(segment, verify_crc=False):
                if batch.base_offset >= start:
                    total += batch.batch_length + 12  # its size on disk, as both sides count it
        except IncompleteBatchError:
            pass
    return total


async def snapshots_settled(pair: d.Pair, timeout: float = 60) -> None:
    """Poll, with a deadline, until neither side owes a snapshot, then until both sides' files
    are alike. (Equal listings alone can be a moment when both still write the last one.)"""
    deadline = time.monotonic() + timeout
    while (any(bytes_past_the_latest_snapshot(s) >= SNAPSHOT_BYTES for s in (pair.kafka, pair.kraftsim))
           and time.monotonic() < deadline):
        await asyncio.sleep(0.1)
    await d.files_settled(pair, timeout=max(1.0, deadline - time.monotonic()))


def kafka_then_kraftsim(directory: Path, **overrides: str) -> PairNodes:
    """A pair formatted alike, started one after the other: kraftsim once Kafka is ready. Each
    cleans its log a minute after its own start, so kraftsim's first cleaning comes after
    Kafka's, and (Kafka starting in well under a minute) before Kafka deletes what it marked."""
    cid = random_cluster_id()
    config = {**PAIR_CONFIG, **SNAPSHOTTING, **{k.replace("_", "."): v for k, v in overrides.items()}}
    kafka = KafkaNode(directory / "kafka", cluster_id=cid, overrides=dict(config))
    kafka.format()
    kafka.start()
    try:  # its ports chosen only now: the JVM's own connections take ephemeral ports too
        kraftsim = KraftsimNode(directory / "kraftsim", cluster_id=cid, overrides=dict(config))
        kraftsim.format()
        kraftsim.start()
    except BaseException:
        kafka.stop()
        raise
    return PairNodes(kafka, kraftsim)


def workload() -> list[d.Step]:
    """Three brokers, then a topic whose one batch is over the snapshot threshold but fits in a
    segment (so the first snapshot falls on it on both sides, wherever each started counting),
    then 40 small topics: a snapshot about every tenth, a segment about every twelfth."""
    steps: list[d.Step] = [Call(f"register {b}", d.register(b)) for b in (1, 2, 3)]
    steps += [Call(f"unfence {b}", d.heartbeat(b)) for b in (1, 2, 3)]
    steps.append(Call("a topic of one big batch", d.create_topics(TopicSpec(
        "big", assignments={p: [1 + p % 3] for p in range(45)}))))
    steps += [Call(f"topic {i}", d.create_topics(TopicSpec(
        f"topic-{i}", assignments={p: [1 + (i + p) % 3] for p in range(3)}))) for i in range(40)]
    return steps


def cleaned(names: list[str]) -> bool:
    """Done cleaning, with a retention this small: every snapshot but the latest marked for
    deletion. (Kafka renames a segment, then the snapshots before it, and so on: a listing taken
    while it cleans shows part of it.)"""
    return sum(n.endswith(".checkpoint") for n in names) == 1 and any(n.endswith(".checkpoint.deleted") for n in names)


def probes(leader_epoch: int = LEADER_EPOCH) -> list[d.Step]:
    """Fetch and FetchSnapshot where the log start and the snapshots decide the answer."""
    return [
        Call("fetch from 0: sent to the latest snapshot", fetch(lambda side: 0, leader_epoch=leader_epoch)),
        Call("fetch from the scenario's start", fetch(0, leader_epoch=leader_epoch)),
        Call("fetch at the latest snapshot", fetch(lambda side: latest_snapshot(side).end_offset,
                                                   leader_epoch=leader_epoch)),
        Call("fetch below the latest snapshot", fetch(lambda side: latest_snapshot(side).end_offset - 1,
                                                      leader_epoch=leader_epoch)),
        Call("fetch at the earliest snapshot, last epoch 0",
             fetch(lambda side: earliest_snapshot(side).end_offset, last_epoch=0, leader_epoch=leader_epoch)),
        Call("fetch at the end", fetch("end", leader_epoch=leader_epoch)),
        Call("fetch the latest snapshot", fetch_snapshot(latest_snapshot, max_bytes=100, leader_epoch=leader_epoch)),
        Call("fetch the earliest snapshot", fetch_snapshot(earliest_snapshot, max_bytes=100, leader_epoch=leader_epoch)),
        Call("fetch the latest snapshot's second chunk",
             fetch_snapshot(latest_snapshot, position=100, max_bytes=100, leader_epoch=leader_epoch)),
        # Marked for deletion: gone for FetchSnapshot, whose partition-level errors a Kafka 3.9
        # controller answers UNKNOWN_SERVER_ERROR (it fails to size a partition without records).
        Call("fetch a snapshot marked for deletion", fetch_snapshot(marked_snapshot, leader_epoch=leader_epoch)),
        Call("fetch a snapshot in an old leader epoch", fetch_snapshot(latest_snapshot, leader_epoch=leader_epoch - 1)),
        Call("describe the quorum", describe_quorum(), 2),
    ]


def marked_snapshot(side: d.Side) -> SnapshotId:
    """The oldest snapshot marked for deletion, else one that never was."""
    marked = sorted(p.name for p in (side.node.metadata_dir / METADATA_TOPIC_DIR).glob("*.checkpoint.deleted"))
    sid = SnapshotId.parse(marked[0].removesuffix(".deleted")) if marked else None
    return sid or SnapshotId(1, 1)


async def retention_case(nodes: PairNodes) -> tuple[d.Transcript, d.Transcript, d.Transcript]:
    pair = await connect(nodes)
    try:
        await d.check(pair, workload())
        await snapshots_settled(pair)
        before = await d.check(pair, [d.Files("after the snapshots"), *probes()])
        after = await d.check(pair, [
            # A minute after its start, each side cleans: over its retention, every snapshot but
            # the latest is marked for deletion (*.deleted), and the segments only they needed.
            d.AwaitFiles("cleaned", cleaned, timeout=180),
            *probes(),
        ])
    finally:
        await close(pair)
    # Restarted: what was marked is deleted, and the log, empty past its start (the latest
    # snapshot), is truncated to that snapshot (KafkaMetadataLog.truncateToLatestSnapshot).
    nodes.stop()
    nodes.start()
    pair = await connect(nodes)
    try:
        restarted = await d.check(pair, [d.Files("after a restart"), *probes(LEADER_EPOCH + 1)])
    finally:
        await close(pair)
    return before, after, restarted


@pytest.mark.slow  # a minute and more: Kafka's cleaner runs a minute after its start
async def test_the_log_start_offset_after_retention(tmp_path: Path) -> None:
    """KafkaMetadataLog.maybeClean, a minute after start: over metadata.max.retention.bytes
    (one pair) or metadata.max.retention.ms (the other), the log start offset moves up to the
    latest snapshot, the older snapshots and the segments wholly below it are renamed *.deleted,
    and a fetch below the log start is sent to the latest snapshot. After a restart the marked
    files are gone and the log starts at its first segment, below that snapshot."""
    by_size = kafka_then_kraftsim(tmp_path / "size", metadata_max_retention_bytes="1",
                                  metadata_max_retention_ms="-1")
    try:
        by_time = kafka_then_kraftsim(tmp_path / "time", metadata_max_retention_bytes="-1",
                                      metadata_max_retention_ms="1")
        try:
            results = await asyncio.gather(retention_case(by_size), retention_case(by_time))
        finally:
            by_time.stop()
    finally:
        by_size.stop()
    for before, after, restarted in results:
        files = before["after the snapshots"]["files"]
        assert sum(f.endswith(".checkpoint") for f in files) >= 4 and not any(f.endswith(".deleted") for f in files)
        assert "timeout" not in after["cleaned"]
        cleaned = after["cleaned"]["files"]
        assert sum(f.endswith(".checkpoint") for f in cleaned) == 1
        assert sum(f.endswith(".checkpoint.deleted") for f in cleaned) >= 3
        start = after.response("fetch at the latest snapshot")["responses"][0]["partitions"][0]
        assert start["log_start_offset"] == before.response("fetch from 0: sent to the latest snapshot")[
            "responses"][0]["partitions"][0]["snapshot_id"]["end_offset"]
        below = after.response("fetch below the latest snapshot")["responses"][0]["partitions"][0]
        assert below["snapshot_id"]["end_offset"] == start["log_start_offset"] and below["records"] == []
        assert after.response("fetch a snapshot marked for deletion") == {
            "throttle_time_ms": 0, "error_code": -1, "topics": [], "node_endpoints": []}
        assert restarted["after a restart"]["files"][-1].endswith(".log")  # a new segment at the snapshot

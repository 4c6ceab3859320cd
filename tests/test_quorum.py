"""A quorum of kraftsim controller processes over real sockets: Kafka's election among three
voters, replication to byte-identical logs, each role's answers, kill -9 of the leader under
load with a heartbeating fleet, a leader cut off from its majority, a rejoining old leader's
divergent tail, a follower that starts from a snapshot, and a restart of the whole quorum.

Timings are short (``quorum_harness.FAST_RAFT``); every wait polls with a deadline."""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from kraftsim.metadata.files import QUORUM_STATE, MetaProperties, new_directory_id
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.legacy import decode_value
from kraftsim.metadata.loader import load_image
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.metadata.segments import iter_file_batches
from kraftsim.metadata.snapshots import list_snapshots
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreateTopicsRequest,
    DescribeClusterRequest,
    DescribeQuorumRequest,
)
from tests import harness
from tests.quorum_harness import Node, Quorum, poll

E = ErrorCode
CT = CreateTopicsRequest
BROKERS = (1, 2, 3)


@pytest.fixture
def quorum(tmp_path: Path) -> Any:
    q = Quorum(tmp_path)
    q.start()
    try:
        yield q
    finally:
        q.stop_all()


# ---- helpers --------------------------------------------------------------------------------------

def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def connect(node: Node) -> KafkaClient:
    client = await KafkaClient.connect("127.0.0.1", node.port, client_id="quorum-test")
    await client.negotiate()
    return client


async def register_and_unfence(node: Node, cluster_id: str, brokers: tuple[int, ...] = BROKERS) -> dict[int, int]:
    c = await connect(node)
    epochs = {}
    try:
        for b in brokers:
            r = await c.request(BrokerRegistrationRequest(
                broker_id=b, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
                listeners=[BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="h", port=9092,
                                                              security_protocol=0)],
                features=[BrokerRegistrationRequest.Feature(name="metadata.version", min_supported_version=7,
                                                            max_supported_version=21)],
                log_dirs=[uuid.uuid4()]), 3)
            assert r.error_code == 0, r
            epochs[b] = r.broker_epoch
        for b, epoch in epochs.items():
            r = await c.request(BrokerHeartbeatRequest(broker_id=b, broker_epoch=epoch,
                                                       current_metadata_offset=2**62), 1)
            assert r.error_code == 0 and not r.is_fenced, r
    finally:
        await c.close()
    return epochs


async def create_topics(node: Node, names: list[str]) -> None:
    c = await connect(node)
    try:
        for name in names:
            r = await c.request(CT(topics=[CT.CreatableTopic(name=name, num_partitions=2, replication_factor=3)],
                                   timeout_ms=10_000), 7)
            assert r.topics[0].error_code == 0, r
    finally:
        await c.close()


def batches_below(node: Node, end: int) -> list[bytes]:
    """The raw bytes of every batch of ``node``'s log wholly below offset ``end``."""
    out = []
    for seg in sorted(node.data.glob("*.log")):
        for _, batch in iter_file_batches(seg):
            if batch.last_offset < end:
                out.append(bytes(batch.raw))
    return out


def committed(node: Node) -> int:
    h = node.health()
    return int(h[1]["committedOffset"]) if h is not None else -1  # type: ignore[arg-type]


def quorum_state(node: Node) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((node.data / QUORUM_STATE).read_text())
    return state


def image_of(node: Node) -> MetadataImage:
    mlog = MetadataLog.open(node.directory / "data", LogConfig(linger_ms=0))
    try:
        image, _ = load_image(mlog, MetadataImage)
    finally:
        mlog.close()
    return image


def kraftsim_cli(*args: str) -> tuple[int, list[str], str]:
    r = harness.kraftsim(*args, timeout=60)
    return r.returncode, r.stdout.splitlines(), r.stderr


def describe_quorum() -> DescribeQuorumRequest:
    return DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])


# ---- a quorum forms, replicates, and each node answers as its role --------------------------------

def test_three_voters_elect_one_leader_replicate_and_answer_as_their_roles(quorum: Quorum) -> None:
    q = quorum
    assert q.cluster_id is not None
    leader = q.leader()
    followers = [i for i in q.nodes if i != leader]
    lead = q.nodes[leader]
    # Kafka's election state, persisted: the leader and its epoch on every voter.
    states = {i: quorum_state(n) for i, n in q.nodes.items()}
    epoch = states[leader]["leaderEpoch"]
    assert states[leader]["leaderId"] == leader and states[leader]["votedId"] == -1
    assert states[leader]["data_version"] == 0
    assert [v["voterId"] for v in states[leader]["currentVoters"]] == sorted(q.nodes)
    for i in followers:
        assert (states[i]["leaderId"], states[i]["leaderEpoch"]) == (leader, epoch), states[i]

    run(register_and_unfence(lead, q.cluster_id))
    run(create_topics(lead, [f"t{i}" for i in range(20)]))
    hw = committed(lead) + 1
    poll(lambda: all(committed(q.nodes[i]) + 1 >= hw for i in followers), 20, "the followers committing")
    # Every voter's log holds the same batches, byte for byte, up to the high watermark.
    expected = batches_below(lead, hw)
    assert len(expected) > 20
    for i in followers:
        assert batches_below(q.nodes[i], hw) == expected, f"node {i}'s log differs from the leader's"

    async def roles() -> None:
        for i in followers:
            c = await connect(q.nodes[i])
            try:
                r = await c.request(CT(topics=[CT.CreatableTopic(name="x", num_partitions=1, replication_factor=3)],
                                       timeout_ms=5000), 7)
                assert (r.topics[0].error_code, r.topics[0].error_message) == (
                    E.NOT_CONTROLLER, f"The active controller appears to be node {leader}."), r
                p = (await c.request(describe_quorum(), 2)).topics[0].partitions[0]
                assert p.error_code == E.NOT_LEADER_OR_FOLLOWER, p
                cluster = await c.request(DescribeClusterRequest(endpoint_type=2), 1)
                assert cluster.error_code == 0 and cluster.controller_id == leader, cluster
                assert sorted(b.broker_id for b in cluster.brokers) == sorted(q.nodes)  # all registered
            finally:
                await c.close()
        c = await connect(lead)
        try:
            p = (await c.request(describe_quorum(), 2)).topics[0].partitions[0]
            assert (p.error_code, p.leader_id, p.leader_epoch) == (0, leader, epoch)
            assert [v.replica_id for v in p.current_voters] == sorted(q.nodes)
            assert all(v.log_end_offset >= hw and v.last_fetch_timestamp > 0 for v in p.current_voters), p
        finally:
            await c.close()

    run(roles())
    for i, n in q.nodes.items():
        m = n.metrics()
        assert m["activecontrollercount"] == (1 if i == leader else 0), (i, m)
        assert m["lastcommittedrecordoffset"] >= hw - 1 and m["newactivecontrollerscount"] >= 1, (i, m)
        status, doc = n.health() or (0, {})
        assert status == 200 and doc["leaderId"] == leader and doc["role"] == (
            "active controller" if i == leader else "voter"), doc
    # Kafka's tool, pointed at a follower, finds the leader and describes every voter.
    rc, out, err = kraftsim_cli("metadata-quorum", "--bootstrap-controller", q.nodes[followers[0]].address,
                                "describe", "--status")
    assert rc == 0, err
    assert f"LeaderId:               {leader}" in out and f"LeaderEpoch:            {epoch}" in out
    voters_line = next(line for line in out if line.startswith("CurrentVoters:"))
    for n in q.nodes.values():
        assert f'{{"id": {n.node_id}, "directoryId": null, "endpoints": ["CONTROLLER://127.0.0.1:{n.port}"]}}' \
            in voters_line, voters_line
    rc, out, err = kraftsim_cli("metadata-quorum", "--bootstrap-controller", q.bootstrap, "describe", "--replication")
    assert rc == 0, err
    rows = [[x.strip() for x in line.rstrip("\t").split("\t")] for line in out[1:]]
    assert sorted((int(r[0]), r[6]) for r in rows) == sorted(
        [(leader, "Leader")] + [(i, "Follower") for i in followers])
    # Voter changes: the tool reads the new controller's own config; a static quorum
    # (kraft.version 0) refuses them with Kafka's exception, the dry runs only print.
    (q.nodes[leader].directory.parent / "newcomer").mkdir()
    newcomer = harness.write_config(q.nodes[leader].directory.parent / "newcomer", port=q.nodes[leader].port + 900,
                                    node_id=4000)
    (newcomer.parent / "data").mkdir()
    new_dir = new_directory_id()
    MetaProperties(q.cluster_id or "", 4000, new_dir).write(newcomer.parent / "data" / "meta.properties")
    rc, out, err = kraftsim_cli("metadata-quorum", "--bootstrap-controller", q.nodes[followers[0]].address,
                                "--command-config", str(newcomer), "add-controller", "--dry-run")
    assert (rc, out) == (0, [f"DRY RUN of adding controller 4000 with directory id {new_dir} and endpoints: "
                             f"CONTROLLER://127.0.0.1:{q.nodes[leader].port + 900}"]), err
    rc, out, err = kraftsim_cli("metadata-quorum", "--bootstrap-controller", q.bootstrap,
                                "--command-config", str(newcomer), "add-controller")
    assert (rc, out, err.strip()) == (1, [], "org.apache.kafka.common.errors.UnsupportedVersionException: Cluster "
                                            "doesn't support adding voter because the kraft.version feature is 0")
    follower_dir = MetaProperties.read(q.nodes[followers[0]].directory / "data" / "meta.properties").directory_id
    rc, out, err = kraftsim_cli("metadata-quorum", "--bootstrap-controller", q.bootstrap, "remove-controller",
                                "--controller-id", str(followers[0]), "--controller-directory-id", follower_dir)
    assert (rc, out, err.strip()) == (1, [], "org.apache.kafka.common.errors.UnsupportedVersionException: Cluster "
                                            "doesn't support removing voter because the kraft.version feature is 0")


# ---- kill -9 of the leader under load, with a heartbeating fleet ------------------------------------

FLEET = 20
CONNECTIONS = 4
IN_FLIGHT = 8


async def load_until_kill(q: Quorum, leader: int, kill_after: int) -> set[str]:
    """Pipelined CreateTopics on the leader until ``kill_after`` are acknowledged, then kill -9
    of the leader while more are in flight; the names acknowledged (each answer a success)."""
    acked: set[str] = set()
    killed = asyncio.Event()
    counter = iter(range(10**9))

    async def connection(n: int) -> None:
        c = await connect(q.nodes[leader])
        window: dict[asyncio.Future[Any], str] = {}
        try:
            while not killed.is_set():
                while len(window) < IN_FLIGHT:
                    name = f"load-{n}-{next(counter)}"
                    window[c.send(CT(topics=[CT.CreatableTopic(name=name, num_partitions=1, replication_factor=3)],
                                     timeout_ms=30_000), 7)] = name
                done, _ = await asyncio.wait(list(window), return_when=asyncio.FIRST_COMPLETED)
                for f in done:
                    name = window.pop(f)
                    if f.exception() is not None:  # the connection went with the leader
                        await asyncio.gather(*window, return_exceptions=True)
                        return
                    assert f.result().topics[0].error_code == 0, f.result()
                    acked.add(name)
                if len(acked) >= kill_after and not killed.is_set():
                    q.kill(leader)
                    killed.set()
            for f, name in window.items():  # answers already on their way count as acknowledged
                try:
                    r = await asyncio.wait_for(f, 10)
                except (TimeoutError, OSError):
                    continue
                if r.topics[0].error_code == 0:
                    acked.add(name)
        finally:
            c.abort()

    await asyncio.gather(*(connection(n) for n in range(CONNECTIONS)))
    return acked


def fence_records(records: list[tuple[int, str, Any]]) -> list[tuple[int, str, Any]]:
    return [r for r in records if r[1] == "FenceBrokerRecord"
            or (r[1] == "BrokerRegistrationChangeRecord" and r[2].fenced == 1)]


def records_with_values(node: Node) -> list[tuple[int, str, Any]]:
    mlog = MetadataLog.open(node.directory / "data", LogConfig(linger_ms=0))
    out = []
    try:
        for batch in mlog.batches(0):
            if batch.is_control:
                continue
            for rec in batch.records():
                assert rec.value is not None
                msg, _ = decode_value(rec.value, False)
                out.append((rec.offset, type(msg).__name__, msg))
    finally:
        mlog.close()
    return out


@pytest.mark.slow
def test_kill_9_of_the_leader_under_load_a_follower_takes_over_and_the_fleet_follows(quorum: Quorum,
                                                                                   tmp_path: Path) -> None:
    from kraftsim.broker.observer import MetadataObserver
    from tests.fleet_harness import FleetProcess

    q = quorum
    leader = q.leader()
    fleet = FleetProcess(tmp_path / "fleet", q.bootstrap, FLEET)
    try:
        async def scenario() -> tuple[set[str], int]:
            view = MetadataObserver([("127.0.0.1", n.port) for n in q.nodes.values()], q.cluster_id, 9999,
                                    uuid.uuid4())
            view.start()
            try:
                ids = set(range(1, FLEET + 1))

                def all_unfenced() -> bool:
                    brokers = view.image.cluster.brokers
                    return all(i in brokers and not brokers[i].fenced for i in ids)

                await async_poll(all_unfenced, 60, "the fleet unfenced")
                acked = await load_until_kill(q, leader, kill_after=150)
                assert len(acked) >= 150
                new = await asyncio.to_thread(q.leader, None, 30.0, leader)
                # The fleet follows the new leader: it answers the heartbeats, nobody is fenced.
                await async_poll(lambda: view.stats.leader[0] == new, 30, "the view following the new leader")
                await async_poll(lambda: all(n in view.image.topics.by_name for n in acked), 30,
                                 "every acknowledged topic on the new leader")
                await async_poll(all_unfenced, 30, "the fleet unfenced after the failover")
                return acked, new
            finally:
                await view.stop()

        acked, new = run(scenario())
        assert new != leader
        # The old leader comes back as a follower and catches up.
        q.start(leader)
        assert q.leader(timeout=60) == new
        hw = committed(q.nodes[new]) + 1
        poll(lambda: committed(q.nodes[leader]) + 1 >= hw, 30, "the old leader catching up")
        before_shutdown = committed(q.nodes[new])  # the fleet's controlled shutdown fences them all
        fleet.signal(signal.SIGTERM)
        assert run(fleet.wait_exit(60)) == 0, fleet.output()[-3000:]
        out = fleet.output()
        assert "(again after a controller restart: 0)" in out, out[-2000:]  # sessions kept, as Kafka's brokers
    finally:
        fleet.kill()
    q.stop_all()
    records = records_with_values(q.nodes[new])
    fenced = fence_records([r for r in records if r[0] <= before_shutdown])
    assert not fenced, fenced[:5]
    topics = {r[2].name for r in records if r[1] == "TopicRecord"}
    assert acked <= topics, sorted(acked - topics)[:5]
    # The rejoined old leader's log agrees with the new leader's up to what was committed.
    assert batches_below(q.nodes[leader], hw) == batches_below(q.nodes[new], hw)


async def async_poll(cond: Any, timeout: float, what: str) -> None:
    await harness.poll_until(cond, timeout, 0.05, what=what)


# ---- a leader cut off from its majority resigns; back, it truncates its divergent tail -------------

@pytest.mark.slow
def test_a_cut_off_leader_resigns_and_rejoining_truncates_its_divergent_tail(quorum: Quorum) -> None:
    q = quorum
    assert q.cluster_id is not None
    leader = q.leader()
    followers = [i for i in q.nodes if i != leader]
    run(register_and_unfence(q.nodes[leader], q.cluster_id))
    run(create_topics(q.nodes[leader], ["before"]))
    for i in followers:
        q.freeze(i)  # the leader alone: it can append, not commit

    async def unacknowledged() -> list[tuple[int, str | None]]:
        c = await connect(q.nodes[leader])
        try:
            pending = [c.send(CT(topics=[CT.CreatableTopic(name=f"lost-{i}", num_partitions=1, replication_factor=3)],
                                 timeout_ms=30_000), 7) for i in range(3)]
            answers = await asyncio.wait_for(asyncio.gather(*pending), 30)
        finally:
            await c.close()
        return [(r.topics[0].error_code, r.topics[0].error_message) for r in answers]

    # No majority fetches: after 1.5 fetch timeouts the leader resigns, and the writes it could
    # not commit are answered NOT_CONTROLLER.
    answers = run(unacknowledged())
    assert [code for code, _ in answers] == [E.NOT_CONTROLLER] * 3, answers
    status, doc = q.nodes[leader].health() or (0, {})
    assert status == 503 and doc["status"] != "active", doc
    assert q.nodes[leader].metrics()["activecontrollercount"] == 0
    assert "resigned from epoch" in q.nodes[leader].output()
    # Its log holds the three topics' records past what was committed: a divergent tail.
    q.kill(leader)
    tail = {r[2].name for r in records_with_values(q.nodes[leader]) if r[1] == "TopicRecord"}
    assert {"lost-0", "lost-1", "lost-2"} <= tail, tail
    for i in followers:
        q.thaw(i)
    new = q.leader(among=followers, timeout=60)
    run(create_topics(q.nodes[new], ["after"]))
    q.start(leader)
    final = q.leader(timeout=60)
    assert final != leader  # its log is behind theirs (an older last epoch): it cannot win
    hw = committed(q.nodes[final]) + 1
    poll(lambda: committed(q.nodes[leader]) + 1 >= hw, 30, "the old leader catching up")
    assert "truncated the metadata log" in q.nodes[leader].output()
    assert batches_below(q.nodes[leader], hw) == batches_below(q.nodes[final], hw)
    q.stop_all()
    for n in q.nodes.values():
        topics = set(image_of(n).topics.by_name)
        assert {"before", "after"} <= topics and not {"lost-0", "lost-1", "lost-2"} & topics, (n.node_id, topics)


def test_a_voter_partition_fault_cuts_the_leader_off_it_resigns_and_rejoins(tmp_path: Path) -> None:
    """kraftsim.faults' voter-partition, injected on the leader: its links to the other voters cut
    both ways (it keeps serving its HTTP listener and every other client). The majority elects
    one of its own, the cut-off leader resigns, and once the fault ends it follows the leader and
    catches up."""
    from kraftsim.faults.client import FaultApiError, FaultClient

    q = Quorum(tmp_path, kraftsim_faults_enable="true")
    q.start()
    try:
        leader = q.leader()
        others = [i for i in q.nodes if i != leader]
        faults = FaultClient(f"http://127.0.0.1:{q.nodes[leader].http_port}")
        with pytest.raises(FaultApiError, match="not a voter of the quorum"):
            faults.add("voter-partition", voter=leader, peers=[1])
        fault = faults.add("voter-partition", voter=leader, duration="5s")
        new = q.leader(among=others, timeout=30)
        # It resigns 1.5 fetch timeouts after it last heard a majority: maybe after the election.
        poll(lambda: (q.nodes[leader].health() or (0, {}))[1].get("status") not in (None, "active"), 30,
             "the cut-off leader resigning")
        assert (q.nodes[leader].health() or (0, {}))[1].get("injectedFaults")
        assert "links to voter(s)" in q.nodes[leader].output()
        assert q.cluster_id is not None
        run(register_and_unfence(q.nodes[new], q.cluster_id))
        run(create_topics(q.nodes[new], ["while-cut-off"]))
        poll(lambda: not faults.active(), 30, f"fault {fault['id']} ending")
        # Settled. Without pre-vote, the returning voter's higher epoch (it stood alone while cut
        # off) may make the leader step down once, as in Kafka 3.9; its log, behind, cannot win.
        final = q.leader(timeout=30)
        assert final != leader
        hw = committed(q.nodes[final]) + 1
        poll(lambda: committed(q.nodes[leader]) + 1 >= hw, 30, "the old leader catching up")
    finally:
        q.stop_all()
    assert "while-cut-off" in image_of(q.nodes[leader]).topics.by_name


# ---- a follower that starts empty fetches the leader's snapshot ----------------------------------

@pytest.mark.slow
def test_a_follower_far_behind_fetches_the_leaders_snapshot(tmp_path: Path) -> None:
    q = Quorum(tmp_path, metadata_log_max_record_bytes_between_snapshots="1")
    q.start()
    try:
        assert q.cluster_id is not None
        leader = q.leader()
        behind = next(i for i in q.nodes if i != leader)
        assert q.stop(behind) == 0
        lead = q.nodes[leader]
        run(register_and_unfence(lead, q.cluster_id))
        run(create_topics(lead, [f"s{i}" for i in range(40)]))
        # A snapshot of everything committed: the follower has nothing to replay after loading it.
        poll(lambda: (s := list_snapshots(lead.data)) and s[-1].end_offset == committed(lead) + 1, 30,
             "a snapshot of the whole log on the leader")
        # The follower loses its log (not its quorum-state): it has everything to fetch.
        for p in q.nodes[behind].data.iterdir():
            if p.name.endswith((".log", ".checkpoint")) or "checkpoint" in p.name:
                p.unlink()
        q.start(behind)
        assert q.leader(timeout=60) == leader
        hw = committed(lead) + 1
        poll(lambda: committed(q.nodes[behind]) + 1 >= hw, 30, "the empty follower catching up")
        # Its new incarnation registers once the fetched snapshot's metadata.version allows it,
        # with no later commit to prompt it (Kafka's registration manager sees the snapshot load).
        registered = f"controller {behind} registered incarnation"
        poll(lambda: registered in q.nodes[behind].output().rsplit("loaded the metadata log", 1)[1], 30,
             "the restarted follower registered")
        out = q.nodes[behind].output()
        assert "fetched snapshot" in out and "reloading the image from it" in out, out[-3000:]
        fetched = list_snapshots(q.nodes[behind].data)
        assert fetched and fetched[0] in list_snapshots(lead.data)
        sid = fetched[0]
        assert (q.nodes[behind].data / sid.file_name).read_bytes() == (lead.data / sid.file_name).read_bytes()
        # Its log starts where the snapshot ends, and agrees with the leader's from there.
        first_segment = min(q.nodes[behind].data.glob("*.log"))
        assert int(first_segment.name[:20]) == sid.end_offset
        theirs = [b for b in batches_below(lead, hw) if int.from_bytes(b[:8], "big") >= sid.end_offset]
        assert batches_below(q.nodes[behind], hw) == theirs
        q.stop_all()
        assert set(image_of(q.nodes[behind]).topics.by_name) == set(image_of(lead).topics.by_name)
    finally:
        q.stop_all()


# ---- the whole quorum restarted -------------------------------------------------------------------

def test_the_whole_quorum_restarted_elects_again_and_keeps_everything(quorum: Quorum) -> None:
    q = quorum
    assert q.cluster_id is not None
    leader = q.leader()
    run(register_and_unfence(q.nodes[leader], q.cluster_id))
    run(create_topics(q.nodes[leader], ["kept-a", "kept-b"]))
    epoch = quorum_state(q.nodes[leader])["leaderEpoch"]
    for i in q.nodes:
        assert q.stop(i) == 0  # SIGTERM: a clean exit, the leader handing over first
    q.start()
    again = q.leader(timeout=60)
    assert quorum_state(q.nodes[again])["leaderEpoch"] > epoch
    rc, out, err = kraftsim_cli("metadata-quorum", "--bootstrap-controller", q.bootstrap, "describe", "--status")
    assert rc == 0 and f"LeaderId:               {again}" in out, (out, err)
    run(create_topics(q.nodes[again], ["after-restart"]))
    q.stop_all()
    for n in q.nodes.values():
        assert {"kept-a", "kept-b"} <= set(image_of(n).topics.by_name)

"""Quorums mixing kraftsim and real Kafka 3.9 controllers: the Raft oracle.

Two static quorums (``controller.quorum.voters``, kraft.version 0), every directory formatted
with the same cluster id by its own side's format tool: one kraftsim voter with two Kafka
controllers, and two kraftsim voters with one Kafka controller. In each, a leader of one kind is
elected first (the Raft timings bias it: the side meant to win first stands sooner) and the
other kind votes for it, registers with it and replicates its log; one voter of the other kind
starts after the leader's first snapshot and is sent it (FetchSnapshot); once every voter has
registered, the leader upgrades metadata.version over their ranges. Brokers register and
heartbeat throughout: a real Kafka 3.9 broker with a producer writing (acks=all) beside the
kraftsim leader, the simulated fleet (``kraftsim brokers``) beside the Kafka leader. The leader,
its followers frozen, appends records no follower gets; it is killed with SIGKILL, one of the
other kind wins, the brokers stay unfenced and the new leader answers CreateTopics; the killed
node comes back as a follower of the other kind and cuts its divergent tail. At the end every
voter's log holds the same batches, byte for byte, up to the high watermark (from the latest
log start among them: a voter that started late is sent the leader's snapshot), two snapshots
of the same offset hold the same records, and nothing the broker acknowledged is lost.

Each node writes its own snapshots (every half kilobyte of records here), so their offsets
differ between nodes, and a snapshot's file is each writer's own (timestamps, record order):
docs/differences.md says what differs."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftsim.broker.observer import MetadataObserver
from kraftsim.metadata import files
from kraftsim.metadata.batch import IncompleteBatchError
from kraftsim.metadata.legacy import decode_value
from kraftsim.metadata.segments import iter_file_batches
from kraftsim.metadata.snapshots import iter_snapshot_values, list_snapshots
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    IncrementalAlterConfigsRequest,
    UpdateFeaturesRequest,
)
from tests.fleet_harness import FleetProcess
from tests.harness import free_port, poll_sync, poll_until
from tests.kafka.harness import KafkaNode, KraftsimNode, Node, kafka_metadata_quorum, random_cluster_id
from tests.quorum_harness import FAST_RAFT

pytestmark = [pytest.mark.kafka, pytest.mark.story]

CT = CreateTopicsRequest
FLEET = 3
FIRST_ID = 3001  # controller ids apart from the fleet's broker ids (1..FLEET)
# Formatted at 3.8-IV0 (level 20), upgraded to 3.9-IV0 (21) by the first leader: the other kind
# replays the FeatureLevelRecord and its supported range is what the leader checks.
FORMATTED, UPGRADED = "3.8", 21

# Both sides' Raft keys. The side meant to win an election stands after 0.5-1 s without a leader
# (FAST_RAFT); the other waits 2-4 s, and 3 s without its leader's answer before it stands.
EAGER = {k.replace("_", "."): v for k, v in FAST_RAFT.items()}
PATIENT = {**EAGER, "controller.quorum.election.timeout.ms": "2000",
           "controller.quorum.fetch.timeout.ms": "3000"}
COMMON = {
    "metadata.max.idle.interval.ms": "0",  # no NoOpRecord on a timer: every node's log stays still when idle
    "controller.quorum.append.linger.ms": "0",
    "broker.session.timeout.ms": "9000",
    "broker.heartbeat.interval.ms": "500",
    # A snapshot after every half kilobyte of records, on every node, of whichever kind; segments
    # of 4 KiB (above any batch these scenarios write: Kafka refuses to append a batch larger
    # than a segment, and halts).
    "metadata.log.segment.min.bytes": "4096",
    "metadata.log.segment.bytes": "4096",
    "metadata.log.max.record.bytes.between.snapshots": "512",
}


class MixedQuorum:
    """Voters ``FIRST_ID..`` of the kinds in ``kinds`` ("s" kraftsim, "k" Kafka), in that order;
    the kinds in ``eager`` get the short election timeouts."""

    def __init__(self, tmp: Path, kinds: str, eager: str) -> None:
        self.cluster_id = random_cluster_id()
        ports = {FIRST_ID + i: free_port() for i in range(len(kinds))}
        self.voters = voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
        self.nodes: dict[int, Node] = {}
        for (node_id, port), kind in zip(ports.items(), kinds, strict=True):
            cfg = {**COMMON, **(EAGER if kind in eager else PATIENT), "controller.quorum.voters": voters}
            node: Node
            if kind == "s":
                node = KraftsimNode(tmp / f"kraftsim-{node_id}", node_id=node_id, cluster_id=self.cluster_id,
                                    port=port, overrides=cfg, release_version=FORMATTED)
            else:
                node = KafkaNode(tmp / f"kafka-{node_id}", node_id=node_id, cluster_id=self.cluster_id, port=port,
                                 overrides=cfg, release_version=FORMATTED)
            node.format()  # each side's own format tool, the same cluster id and voters
            self.nodes[node_id] = node

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    def of_kind(self, kind: str) -> list[int]:
        return [i for i, n in self.nodes.items() if n.kind == kind]

    def kill_all(self) -> None:
        for n in self.nodes.values():
            n.kill()


def describe_quorum_request() -> DescribeQuorumRequest:
    return DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])


async def describe(node: Node) -> DescribeQuorumResponse.PartitionData | None:
    """The leader's DescribeQuorum partition, or None from a node that is not the leader (or down)."""
    host, port = node.bootstrap.rsplit(":", 1)
    try:
        client = await KafkaClient.connect(host, int(port), client_id="mixed-quorum-test")
    except OSError:
        return None
    try:
        r = await client.request(describe_quorum_request(), 1)
    except (TimeoutError, OSError, ConnectionError):
        return None
    finally:
        await client.close()
    if r.error_code or not r.topics or r.topics[0].partitions[0].error_code:
        return None
    return r.topics[0].partitions[0]


async def settled(q: MixedQuorum, want: set[int], timeout: float = 60) -> DescribeQuorumResponse.PartitionData:
    """The leader's view once its leader is in ``want`` and every running voter has its whole log."""
    found: list[DescribeQuorumResponse.PartitionData] = []

    async def check() -> bool:
        for node in q.nodes.values():
            if not node.running:
                continue
            p = await describe(node)
            if p is None or p.leader_id not in want:
                continue
            ends = {v.replica_id: v.log_end_offset for v in p.current_voters}
            leo = ends[p.leader_id]
            if p.high_watermark == leo and all(ends[i] == leo for i, n in q.nodes.items() if n.running):
                found[:] = [p]
                return True
        return False

    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"no leader among {sorted(want)} with every running voter caught up within "
                                 f"{timeout}s")
        await asyncio.sleep(0.1)
    return found[0]


async def create_topic(node: Node, name: str, rf: int = 3) -> None:
    host, port = node.bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port), client_id="mixed-quorum-test")
    try:
        r = await client.request(CT(topics=[CT.CreatableTopic(name=name, num_partitions=1 if rf == 1 else 3, replication_factor=rf)],
                                    timeout_ms=10_000), 7)
        assert r.topics[0].error_code == 0, r
    finally:
        await client.close()


async def upgrade_metadata_version(node: Node, level: int) -> None:
    host, port = node.bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port), client_id="mixed-quorum-test")
    try:
        r = await client.request(UpdateFeaturesRequest(timeout_ms=10_000, feature_updates=[
            UpdateFeaturesRequest.FeatureUpdateKey(feature="metadata.version", max_version_level=level,
                                                   upgrade_type=1)]), 1)
        assert r.error_code == 0 and all(f.error_code == 0 for f in r.results), r
    finally:
        await client.close()


def freeze(node: Node) -> None:
    """SIGSTOP: the node holds its connections and answers nothing."""
    assert node.proc is not None
    node.proc.send_signal(signal.SIGSTOP)


def thaw(node: Node) -> None:
    if node.proc is not None and node.proc.poll() is None:
        node.proc.send_signal(signal.SIGCONT)


async def append_uncommitted(leader: Node, name: str, hw: int, rf: int = 3) -> None:
    """Send CreateTopics to a leader whose followers are frozen, and wait until its log holds
    the records past the high watermark (the leader's own log end, in its DescribeQuorum).

    First every follower's last fetch must be older than a fetch's longest wait (500 ms), as the
    leader reports it: a fetch still parked at the leader would be answered with the records
    into the frozen follower's socket, which it reads once thawed."""
    def parked_fetches(p: DescribeQuorumResponse.PartitionData) -> list[int]:
        now = time.time() * 1000
        return [v.replica_id for v in p.current_voters
                if v.replica_id != p.leader_id and now - v.last_fetch_timestamp < 1000]

    deadline = time.monotonic() + 30
    while (p := await describe(leader)) is None or parked_fetches(p):
        if time.monotonic() > deadline:
            raise AssertionError(f"{leader}: followers still fetching: {p}")
        await asyncio.sleep(0.1)
    host, port = leader.bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port), client_id="mixed-quorum-test")
    pending = asyncio.ensure_future(client.request(
        CT(topics=[CT.CreatableTopic(name=name, num_partitions=1, replication_factor=rf)], timeout_ms=30_000), 7,
        timeout=None))
    try:
        deadline = time.monotonic() + 30
        while True:
            p = await describe(leader)
            if p is not None:
                ends = {v.replica_id: v.log_end_offset for v in p.current_voters}
                if ends[p.leader_id] > hw + 1 and p.high_watermark == hw:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"{leader} did not append {name} past its high watermark {hw}")
            await asyncio.sleep(0.05)
    finally:
        pending.cancel()
        await client.close()


def batches(node: Node, end: int) -> list[tuple[int, int, bytes]]:
    """(base offset, partition leader epoch, raw bytes) of every batch of ``node``'s metadata log
    wholly below ``end``."""
    out = []
    for seg in sorted((node.metadata_dir / "__cluster_metadata-0").glob("*.log")):
        try:
            for _, batch in iter_file_batches(seg):
                if batch.last_offset < end:
                    out.append((batch.base_offset, batch.partition_leader_epoch, bytes(batch.raw)))
        except IncompleteBatchError:
            pass  # a running node's tail, past ``end``
    return out


def record_types(node: Node, end: int) -> list[str]:
    names = []
    for seg in sorted((node.metadata_dir / "__cluster_metadata-0").glob("*.log")):
        try:
            for _, batch in iter_file_batches(seg):
                if batch.last_offset >= end or batch.is_control:
                    continue
                names += [type(decode_value(r.value, False)[0]).__name__ for r in batch.records()
                          if r.value is not None]
        except IncompleteBatchError:
            pass
    return names


def snapshots(node: Node) -> dict[str, list[bytes]]:
    """Each snapshot's records (their serialized values), by file name."""
    d = node.metadata_dir / "__cluster_metadata-0"
    return {s.file_name: list(iter_snapshot_values(d / s.file_name)) for s in list_snapshots(d)}


def assert_same_snapshots(q: MixedQuorum) -> int:
    """Where two nodes wrote a snapshot of the same offset and epoch, it holds the same records
    (the batches' timestamps differ: each node wrote its own file when it did; and the order of
    topics and of one resource's configs: Kafka walks its hash maps, kraftsim its image's
    insertion order). Returns how many snapshots nodes of both kinds shared."""
    seen: dict[str, tuple[int, list[bytes]]] = {}
    shared = 0
    for i, node in q.nodes.items():
        for name, in_order in snapshots(node).items():
            values = sorted(in_order)
            if name in seen:
                j, theirs = seen[name]
                assert values == theirs, f"snapshot {name}: node {i}'s records differ from node {j}'s"
                shared += q.nodes[j].kind != node.kind
            else:
                seen[name] = (i, values)
    return shared


def assert_same_logs(nodes: dict[int, Node], hw: int) -> None:
    """Every node holds the same batches, byte for byte, from the latest log start among them
    (a voter that started late may have been sent a snapshot, and its log starts there) up to
    ``hw``."""
    logs = {i: batches(n, hw) for i, n in nodes.items()}
    start = max(log[0][0] if log else hw for log in logs.values())
    assert start < hw - 1, f"no voter's log holds batches between {start} and {hw}"
    logs = {i: [b for b in log if b[0] >= start] for i, log in logs.items()}
    first, *rest = logs
    assert logs[first], f"node {first} holds no batch below {hw}"
    assert logs[first][-1][0] <= hw - 1
    for i in rest:
        assert [b[:2] for b in logs[i]] == [b[:2] for b in logs[first]], (i, first)
        assert logs[i] == logs[first], f"node {i}'s batches differ from node {first}'s below {hw}"


class Producing:
    """A confluent-kafka producer (idempotent, acks=all) writing to ``topic`` in a thread until
    stopped; what the broker acknowledged is read back afterwards."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        import confluent_kafka as ck

        self.bootstrap, self.topic = bootstrap, topic
        self.acked: set[str] = set()
        self.errors: list[str] = []
        self.stopping = threading.Event()
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                     "linger.ms": 5, "message.timeout.ms": 60_000})
        self.thread = threading.Thread(target=self._run, name="mixed-quorum-producer", daemon=True)
        self.thread.start()

    def _delivered(self, err: object, msg: Any) -> None:
        if err is None:
            self.acked.add(msg.value().decode())
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            try:
                self.producer.produce(self.topic, value=f"m-{i}".encode(), on_delivery=self._delivered)
                i += 1
            except BufferError:
                pass
            self.producer.poll(0.005)
        self.producer.flush(60)

    def stop(self) -> set[str]:
        self.stopping.set()
        self.thread.join(90)
        assert not self.thread.is_alive(), "the producer did not flush within 60 s"
        assert not self.errors, self.errors[:3]
        return self.acked

    def read_back(self, expected: int) -> set[str]:
        import confluent_kafka as ck

        c = ck.Consumer({"bootstrap.servers": self.bootstrap, "group.id": "mixed-quorum-check",
                         "enable.auto.commit": False})
        c.assign([ck.TopicPartition(self.topic, 0, ck.OFFSET_BEGINNING)])
        seen: set[str] = set()
        deadline = time.monotonic() + 60
        try:
            while len(seen) < expected and time.monotonic() < deadline:
                for m in c.consume(1000, 0.5):
                    if m.error() is None:
                        seen.add(m.value().decode())
        finally:
            c.close()
        return seen


async def failover(q: MixedQuorum, first_kind: str, tmp: Path, late: int, real_broker: bool = False) -> None:
    """The scenario both quorums play: a leader of ``first_kind``; brokers registered (the
    simulated fleet, or a real Kafka 3.9 broker with a producer writing throughout); the leader
    killed, one of the other kind leading, the brokers unfenced, the killed node back as a
    follower. Voter ``late``, of the other kind, starts once the leader has written a snapshot:
    its Fetch at offset 0 is answered with the snapshot's id, and it fetches it (FetchSnapshot)."""
    other = "k" if first_kind == "s" else "s"
    kind_of = {"s": "kraftsim", "k": "kafka"}
    p = await settled(q, set(q.of_kind(kind_of[first_kind])))
    leader = p.leader_id
    fleet: FleetProcess | None = None
    broker: KafkaNode | None = None
    producing: Producing | None = None
    if real_broker:
        broker = KafkaNode(tmp / "broker", role="broker", node_id=1, cluster_id=q.cluster_id, voters=q.voters,
                           overrides={"broker.heartbeat.interval.ms": "500"}, release_version=FORMATTED)
        broker.format()
        await asyncio.to_thread(broker.start)
        ids, rf = {1}, 1
    else:
        fleet = FleetProcess(tmp / "fleet", q.bootstrap, FLEET)
        ids, rf = set(range(1, FLEET + 1)), 3
    view = MetadataObserver([tuple(n.bootstrap.rsplit(":", 1)) for n in q.nodes.values()],  # type: ignore[misc]
                            q.cluster_id, 9999, uuid.uuid4())

    def all_unfenced() -> bool:
        brokers = view.image.cluster.brokers
        return all(i in brokers and not brokers[i].fenced for i in ids)

    view.start()
    try:
        await poll_until(all_unfenced, 60, 0.1, what="the brokers registered and unfenced")
        await create_topic(q.nodes[leader], "before-failover", rf)
        if broker is not None:
            producing = Producing(broker.bootstrap, "before-failover")
        lead_dir = q.nodes[leader].metadata_dir / "__cluster_metadata-0"
        await poll_until(lambda: list_snapshots(lead_dir), 30, 0.1, what="a snapshot on the leader")
        await asyncio.to_thread(q.nodes[late].start, False)
        # Every voter has the leader's whole log, whatever its kind; the late one was sent the
        # leader's snapshot, byte for byte, and its log starts there.
        p = await settled(q, {leader})
        late_dir = q.nodes[late].metadata_dir / "__cluster_metadata-0"
        fetched = list_snapshots(late_dir)[0]
        assert (late_dir / fetched.file_name).read_bytes() == (lead_dir / fetched.file_name).read_bytes()
        assert all(b[0] >= fetched.end_offset for b in batches(q.nodes[late], p.high_watermark))
        # Every voter registered (ControllerRegistration), the leader upgrades over their ranges.
        await poll_until(lambda: set(view.image.cluster.controllers) == set(q.nodes), 30, 0.1,
                         what="every voter registered")
        assert view.image.features.effective_metadata_version() == UPGRADED - 1
        await upgrade_metadata_version(q.nodes[leader], UPGRADED)
        hw_before = (await settled(q, {leader})).high_watermark
        # The followers frozen, the leader appends a topic no follower will ever have: the
        # killed leader's divergent tail, which it must cut when it comes back.
        followers = [i for i in q.nodes if i != leader]
        for i in followers:
            freeze(q.nodes[i])
        try:
            await append_uncommitted(q.nodes[leader], "never-committed", hw_before, rf)
            q.nodes[leader].kill()
        finally:
            for i in followers:
                thaw(q.nodes[i])
        p = await settled(q, set(q.of_kind(kind_of[other])), timeout=60)
        new = p.leader_id
        await create_topic(q.nodes[new], "after-failover", rf)
        await poll_until(lambda: "after-failover" in view.image.topics.by_name, 30, 0.1,
                         what="the new leader's topic replayed by an observer")
        await poll_until(all_unfenced, 30, 0.1, what="the brokers unfenced under the new leader")
        assert "never-committed" not in view.image.topics.by_name
        assert view.image.features.effective_metadata_version() == UPGRADED
        brokers = view.image.cluster.brokers
        assert all(brokers[i].epoch < hw_before for i in ids), "a broker registered again after the failover"
        # The killed leader comes back as a follower of the other kind and catches up.
        await asyncio.to_thread(q.nodes[leader].start, False)
        p = await settled(q, {new}, timeout=90)
        assert p.leader_id == new
        if producing is not None:
            acked = await asyncio.to_thread(producing.stop)
            assert acked, "the producer had nothing acknowledged"
            missing = acked - await asyncio.to_thread(producing.read_back, len(acked))
            assert not missing, f"{len(missing)} acknowledged messages lost: {sorted(missing)[:5]}"
    finally:
        await view.stop()
        if producing is not None:
            producing.stopping.set()
        if fleet is not None:
            fleet.kill()
        if broker is not None:
            broker.kill()
    assert_same_logs(q.nodes, p.high_watermark)
    assert all(snapshots(n) for n in q.nodes.values()), "a node wrote no snapshot"
    assert_same_snapshots(q)
    types = record_types(q.nodes[leader], p.high_watermark)
    assert types.count("RegisterControllerRecord") >= len(q.nodes), types
    assert "TopicRecord" in types


@pytest.fixture
def quorum(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[MixedQuorum]:
    kinds, eager = request.param
    q = MixedQuorum(tmp_path, kinds, eager)
    yield q
    q.kill_all()


@pytest.mark.parametrize("quorum", [("skk", "s")], indirect=True)
def test_kraftsim_leads_two_kafka_controllers_then_kafka_takes_over(quorum: MixedQuorum, tmp_path: Path) -> None:
    q = quorum
    late = FIRST_ID + 2
    for i, n in q.nodes.items():
        if i != late:
            n.start(wait=False)
    asyncio.run(failover(q, "s", tmp_path, late, real_broker=True))


@pytest.mark.parametrize("quorum", [("ssk", "k")], indirect=True)
def test_kafka_leads_two_kraftsim_voters_then_kraftsim_takes_over(quorum: MixedQuorum, tmp_path: Path) -> None:
    q = quorum
    kafka = q.nodes[q.of_kind("kafka")[0]]
    kafka.start(wait=False)
    # The Kafka voter stands alone until a kraftsim voter is up, and then wins at once.
    assert isinstance(kafka, KafkaNode)
    kafka.wait_log("Completed transition to CandidateState", timeout=90)
    q.nodes[FIRST_ID].start(wait=False)
    asyncio.run(failover(q, "k", tmp_path, FIRST_ID + 1))


# -- a dynamic quorum changed with Kafka's tool -------------------------------------------------

IAC = IncrementalAlterConfigsRequest


async def ask(node: Node, request: Any, version: int) -> Any:
    host, port = node.bootstrap.rsplit(":", 1)
    client = await KafkaClient.connect(host, int(port), client_id="mixed-quorum-test")
    try:
        return await client.request(request, version)
    finally:
        await client.close()


async def controller_views(node: Node) -> tuple[int | None, tuple[int, str | None]]:
    """What a controller says of the quorum outside Raft: the kraft.version ApiVersions
    finalizes, and its answer to a dynamic broker config naming it by id (Kafka checks the id
    against the controller.quorum.voters it started with, not the voters in the log)."""
    versions = await ask(node, ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    kraft = next((f.max_version_level for f in versions.finalized_features if f.name == "kraft.version"), None)
    alter = await ask(node, IAC(resources=[IAC.AlterConfigsResource(
        resource_type=4, resource_name=str(node.node_id),
        configs=[IAC.AlterableConfig(name="log.cleaner.threads", config_operation=0, value="2")])],
        validate_only=True), 1)
    r = alter.responses[0]
    return kraft, (r.error_code, r.error_message)


def change_voters(leader: Node, *args: str, want: str, config: Path | None = None) -> None:
    """Kafka 3.9.2's kafka-metadata-quorum against ``leader``, asked again while the leader is not
    ready for it (a newcomer lagging or not yet answering ApiVersions, the last change not yet
    committed: REQUEST_TIMED_OUT, as an operator would), until it prints ``want``."""
    def run() -> bool:
        r = kafka_metadata_quorum("--bootstrap-controller", leader.bootstrap,
                                  *(("--command-config", str(config)) if config else ()), *args)
        if r.returncode == 0:
            assert want in r.stdout.splitlines(), r.stdout
            return True
        assert "TimeoutException" in r.stderr or "lagging behind" in r.stderr or "API_VERSIONS" in r.stderr, r.stderr
        return False

    poll_sync(run, 90, 0.5, what=f"kafka-metadata-quorum {args[0]} accepted by {leader}")


async def leading(node: Node, voters: set[int], timeout: float = 60) -> DescribeQuorumResponse.PartitionData:
    """``node``'s DescribeQuorum once it leads ``voters`` and every node, voter or observer, has
    its whole log."""
    async def check() -> DescribeQuorumResponse.PartitionData | None:
        p = await describe(node)
        if p is None or p.leader_id != node.node_id or {v.replica_id for v in p.current_voters} != voters:
            return None
        ends = [r.log_end_offset for r in (*p.current_voters, *p.observers)]
        return p if len(ends) == 2 and all(e == p.high_watermark for e in ends) else None

    deadline = time.monotonic() + timeout
    while (p := await check()) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"{node} did not lead {sorted(voters)} with both logs caught up within {timeout}s")
        await asyncio.sleep(0.1)
    return p


def test_kafkas_tool_adds_and_removes_voters_of_either_kind_under_either_leader(tmp_path: Path) -> None:
    """A kraftsim controller formatted --standalone leads; a Kafka 3.9.2 controller formatted
    --no-initial-controllers follows it as an observer and Kafka's ``kafka-metadata-quorum
    add-controller`` makes it a voter. The tool then removes the kraftsim leader, which resigns
    once that is committed, and the Kafka controller, alone in the new set, takes over; the
    kraftsim controller follows it as an observer, is added back and removed again, by the same
    tool, now through the Kafka leader. Each controller reports kraft.version 1 and refuses a
    broker config naming it as Kafka does; both logs hold the same batches, byte for byte."""
    cid = random_cluster_id()
    ports = free_port(), free_port()
    cfg = {**COMMON, **EAGER, "controller.quorum.voters": "",
           "controller.quorum.bootstrap.servers": ",".join(f"127.0.0.1:{p}" for p in ports)}
    sim = KraftsimNode(tmp_path / "kraftsim", node_id=FIRST_ID, cluster_id=cid, port=ports[0], overrides=dict(cfg))
    kafka = KafkaNode(tmp_path / "kafka", node_id=FIRST_ID + 1, cluster_id=cid, port=ports[1], overrides=dict(cfg))
    sim.format("--standalone")
    kafka.format("--no-initial-controllers")
    dirs = {n.node_id: files.MetaProperties.read(n.data_dir / files.META_PROPERTIES).directory_id for n in (sim, kafka)}
    added = {n.node_id: f"Added controller {n.node_id} with directory id {dirs[n.node_id]} and endpoints: "
                        f"CONTROLLER://{n.bootstrap}" for n in (sim, kafka)}
    removed = {i: f"Removed  KRaft controller {i} with directory id {d}" for i, d in dirs.items()}
    remove_sim = ("remove-controller", "--controller-id", str(sim.node_id), "--controller-directory-id",
                  dirs[sim.node_id] or "")
    try:
        sim.start()
        kafka.start(wait=False)
        change_voters(sim, "add-controller", want=added[kafka.node_id], config=kafka.properties_path)
        asyncio.run(leading(sim, {sim.node_id, kafka.node_id}))
        ours = asyncio.run(controller_views(sim))
        # The kraftsim leader removes itself: it resigns once that is committed, and the Kafka
        # controller, the new set's only voter, elects itself.
        change_voters(sim, *remove_sim, want=removed[sim.node_id])
        asyncio.run(leading(kafka, {kafka.node_id}))
        theirs = asyncio.run(controller_views(kafka))
        assert ours[0] == theirs[0] == 1
        # BROKER_ID_NOT_REGISTERED from both: neither id is in controller.quorum.voters.
        assert (ours[1][0], str(ours[1][1]).replace(str(sim.node_id), "<id>")) == \
            (theirs[1][0], str(theirs[1][1]).replace(str(kafka.node_id), "<id>")), (ours, theirs)
        change_voters(kafka, "add-controller", want=added[sim.node_id], config=sim.properties_path)
        asyncio.run(leading(kafka, {sim.node_id, kafka.node_id}))
        assert asyncio.run(controller_views(sim))[0] == 1
        change_voters(kafka, *remove_sim, want=removed[sim.node_id])
        p = asyncio.run(leading(kafka, {kafka.node_id}))
        assert_same_logs({n.node_id: n for n in (sim, kafka)}, p.high_watermark)
    finally:
        kafka.kill()
        sim.kill()

"""A KIP-853 dynamic quorum of kraftsim controller processes: three voters formatted with the
same ``--initial-controllers`` read their voter set from the bootstrap snapshot, elect a leader
that writes the set into the log after its LeaderChange, keep ``quorum-state`` at data_version 1,
and describe themselves with directory ids and endpoints; a controller formatted with
``--no-initial-controllers`` finds the leader through controller.quorum.bootstrap.servers,
replicates and replays as an observer, and answers NOT_CONTROLLER."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftsim.metadata.batch import decode_control_record
from kraftsim.metadata.files import META_PROPERTIES, QUORUM_STATE, MetaProperties
from kraftsim.metadata.messages import VotersRecord
from kraftsim.metadata.segments import iter_file_batches
from kraftsim.metadata.snapshots import list_snapshots
from kraftsim.rpc import uuids
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import (
    ApiVersionsRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreateTopicsRequest,
    DescribeQuorumRequest,
)
from tests import harness
from tests.quorum_harness import Node, Quorum, poll

CT = CreateTopicsRequest


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[Quorum]:
    q = Quorum(tmp_path, size=3, dynamic=True, observers=1, metadata_log_max_record_bytes_between_snapshots="4096")
    q.start()
    try:
        yield q
    finally:
        q.stop_all()


def committed(node: Node) -> int:
    h = node.health()
    return int(h[1]["committedOffset"]) if h is not None else -1  # type: ignore[arg-type]


async def ask(node: Node, request: Any, version: int) -> Any:
    c = await KafkaClient.connect("127.0.0.1", node.port, client_id="dynamic-quorum-test")
    try:
        await c.negotiate()
        return await c.request(request, version)
    finally:
        await c.close()


def describe_quorum() -> DescribeQuorumRequest:
    return DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])])


def first_batch(path: Path) -> list[str]:
    """The control records of the first batch of a segment or snapshot, by type."""
    _, batch = next(iter_file_batches(path))
    return [ctl[0].name for rec in batch.records() if (ctl := decode_control_record(rec)) is not None]


async def create_topics(node: Node, cluster_id: str, names: list[str]) -> None:
    """One broker registered and unfenced (supporting kraft.version 1, which a kraft.version 1
    quorum requires of it, as Kafka's does), then ``names`` created on it."""
    c = await KafkaClient.connect("127.0.0.1", node.port, client_id="dynamic-quorum-test")
    try:
        await c.negotiate()
        reg = await c.request(BrokerRegistrationRequest(
            broker_id=1, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
            listeners=[BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
            features=[BrokerRegistrationRequest.Feature(name="metadata.version", min_supported_version=7,
                                                        max_supported_version=21),
                      BrokerRegistrationRequest.Feature(name="kraft.version", min_supported_version=0,
                                                        max_supported_version=1)],
            log_dirs=[uuid.uuid4()]), 3)
        assert reg.error_code == 0, reg
        hb = await c.request(BrokerHeartbeatRequest(broker_id=1, broker_epoch=reg.broker_epoch,
                                                    current_metadata_offset=2**62), 1)
        assert hb.error_code == 0 and not hb.is_fenced, hb
        for name in names:
            r = await c.request(CT(topics=[CT.CreatableTopic(name=name, num_partitions=1, replication_factor=1)],
                                   timeout_ms=10_000), 7)
            assert r.topics[0].error_code == 0, r
    finally:
        await c.close()


@pytest.mark.slow  # a quorum of four processes, a snapshot, and a restart of all of them
def test_initial_controllers_form_a_quorum_and_an_observer_follows_it(quorum: Quorum) -> None:
    q = quorum
    voters = sorted(q.directory_ids)
    [observer] = [i for i in q.nodes if i not in q.directory_ids]
    leader = q.leader()
    lead = q.nodes[leader]
    # Every voter keeps Kafka's kraft.version 1 quorum-state: no voter list, a voted directory.
    for i in voters:
        state = json.loads((q.nodes[i].data / QUORUM_STATE).read_text())
        assert set(state) == {"leaderId", "leaderEpoch", "votedId", "votedDirectoryId", "data_version"}, state
        assert (state["data_version"], state["leaderId"]) == (1, leader), state
    # The leader opened its first epoch with the voter set, in the LeaderChange's batch.
    assert first_batch(sorted(lead.data.glob("*.log"))[0]) == ["LEADER_CHANGE", "KRAFT_VERSION", "KRAFT_VOTERS"]

    # The observer finds the leader through the bootstrap servers, fetches and replays.
    obs = q.nodes[observer]
    poll(lambda: (h := obs.health()) is not None and h[1].get("leaderId") == leader, 30,
         "the observer following the leader")
    status, doc = obs.health() or (0, {})
    assert doc["role"] == "observer", doc
    hw = committed(lead)
    poll(lambda: committed(obs) >= hw, 30, "the observer catching up")
    r = asyncio.run(ask(obs, CT(topics=[CT.CreatableTopic(name="x", num_partitions=1, replication_factor=1)],
                                 timeout_ms=5000), 7))
    assert (r.topics[0].error_code, r.topics[0].error_message) == (
        ErrorCode.NOT_CONTROLLER, f"The active controller appears to be node {leader}."), r

    # DescribeQuorum v2: the voters with their directory ids, their endpoints, and the observer.
    def described() -> Any:
        p = asyncio.run(ask(lead, describe_quorum(), 2))
        part = p.topics[0].partitions[0]
        return p if part.observers else None

    resp = poll(described, 30, "the observer in DescribeQuorum")
    part = resp.topics[0].partitions[0]  # type: ignore[attr-defined]
    assert [(v.replica_id, uuids.to_str(v.replica_directory_id)) for v in part.current_voters] == [
        (i, q.directory_ids[i]) for i in voters]
    assert [o.replica_id for o in part.observers] == [observer]
    nodes = {n.node_id: [(x.name, x.host, x.port) for x in n.listeners]
             for n in resp.nodes}  # type: ignore[attr-defined]
    for i in voters:
        assert nodes[i] == [("CONTROLLER", "127.0.0.1", q.nodes[i].port)], nodes

    # Kafka's tool, through any voter, shows the voters with their directory ids.
    r2 = harness.kraftsim("metadata-quorum", "--bootstrap-controller", q.nodes[voters[0]].address,
                          "describe", "--status", timeout=60)
    assert r2.returncode == 0, r2.stderr
    line = next(x for x in r2.stdout.splitlines() if x.startswith("CurrentVoters:"))
    for i in voters:
        assert f'{{"id": {i}, "directoryId": "{q.directory_ids[i]}", ' \
               f'"endpoints": ["CONTROLLER://127.0.0.1:{q.nodes[i].port}"]}}' in line, line

    # A snapshot carries the voter set after its header, as Kafka's does, and a quorum restarted
    # on it (its log may be cleaned past the VotersRecord) starts from it.
    asyncio.run(create_topics(lead, q.cluster_id, [f"topic-{i:03d}" for i in range(60)]))
    snaps = poll(lambda: [sid for sid in list_snapshots(lead.data) if sid.end_offset > 0], 30, "a snapshot")
    snapshot = lead.data / snaps[-1].file_name  # type: ignore[index]
    assert first_batch(snapshot) == ["SNAPSHOT_HEADER", "KRAFT_VERSION", "KRAFT_VOTERS"]
    for i in q.nodes:
        q.stop(i)
    for i in q.nodes:
        (q.nodes[i].data / QUORUM_STATE).unlink()  # nothing remembered but the log
    q.start()
    leader = q.leader()
    part = asyncio.run(ask(q.nodes[leader], describe_quorum(), 2)).topics[0].partitions[0]
    assert [(v.replica_id, uuids.to_str(v.replica_directory_id)) for v in part.current_voters] == [
        (i, q.directory_ids[i]) for i in voters]


def voters_records(node: Node) -> list[list[tuple[int, str]]]:
    """Every VotersRecord in the node's log segments, as (id, directory id) lists, in order."""
    out = []
    for segment in sorted(node.data.glob("*.log")):
        for _, batch in iter_file_batches(segment):
            if batch.is_control:
                out += [[(v.voter_id, uuids.to_str(v.voter_directory_id)) for v in ctl[1].voters]
                        for rec in batch.records()
                        if (ctl := decode_control_record(rec)) is not None and isinstance(ctl[1], VotersRecord)]
    return out


@pytest.mark.slow  # two processes and four runs of the tool
def test_an_observer_is_added_as_a_voter_and_removed_by_the_metadata_quorum_tool(tmp_path: Path) -> None:
    """A voter formatted --standalone and a controller formatted --no-initial-controllers:
    ``kraftsim metadata-quorum add-controller`` with the newcomer's own config makes it a voter
    (DescribeQuorum lists two, the log holds the new VotersRecord), ``remove-controller`` takes it
    out again."""
    q = Quorum(tmp_path, size=1, dynamic=True, observers=1, standalone=True)
    q.start()
    try:
        [voter] = q.directory_ids
        [observer] = [i for i in q.nodes if i != voter]
        lead, obs = q.nodes[voter], q.nodes[observer]
        assert q.leader(among=[voter]) == voter
        obs_dir = MetaProperties.read(obs.directory / "data" / META_PROPERTIES).directory_id
        assert obs_dir is not None
        poll(lambda: (h := obs.health()) is not None and h[1].get("leaderId") == voter, 30,
             "the observer following the leader")

        def current_voters() -> list[tuple[int, str]]:
            part = asyncio.run(ask(lead, describe_quorum(), 2)).topics[0].partitions[0]
            return [(v.replica_id, uuids.to_str(v.replica_directory_id)) for v in part.current_voters]

        assert current_voters() == [(voter, q.directory_ids[voter])]
        # The leader adds an observer only once it has checked it: asked again until then.
        added = f"Added controller {observer} with directory id {obs_dir} and endpoints: CONTROLLER://{obs.address}"

        def add() -> bool:
            r = harness.kraftsim("metadata-quorum", "--bootstrap-controller", lead.address,
                                 "--command-config", str(obs.config), "add-controller", timeout=60)
            if r.returncode == 0:
                assert r.stdout.splitlines() == [added], r.stdout
                return True
            # Kafka's leader aborts an add it cannot check yet (the newcomer lagging, or its
            # ApiVersions not answered): REQUEST_TIMED_OUT, which the operator asks again after.
            assert "since it is lagging behind" in r.stderr or "since API_VERSIONS returned an error" in r.stderr, \
                r.stderr
            return False

        poll(add, 60, "add-controller accepted", interval=0.5)
        both = sorted([(voter, q.directory_ids[voter]), (observer, obs_dir)])
        assert sorted(current_voters()) == both
        assert sorted(voters_records(lead)[-1]) == both
        poll(lambda: (h := obs.health()) is not None and h[1].get("role") == "voter", 30, "the newcomer a voter")

        r = harness.kraftsim("metadata-quorum", "--bootstrap-controller", lead.address, "remove-controller",
                             "--controller-id", str(observer), "--controller-directory-id", obs_dir, timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines() == [f"Removed  KRaft controller {observer} with directory id {obs_dir}"]
        assert current_voters() == [(voter, q.directory_ids[voter])]
        assert voters_records(lead)[-1] == [(voter, q.directory_ids[voter])]
        poll(lambda: (h := obs.health()) is not None and h[1].get("role") == "observer", 30,
             "the removed controller an observer again")
    finally:
        q.stop_all()


def finalized_kraft_version(node: Node) -> int | None:
    """The kraft.version the controller's ApiVersions finalizes (None: not listed)."""
    r = asyncio.run(ask(node, ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3))
    return next((f.max_version_level for f in r.finalized_features if f.name == "kraft.version"), None)


@pytest.mark.slow  # one process, started twice
def test_a_lone_voter_upgraded_to_kraft_version_1_keeps_its_voter_set_through_a_restart(tmp_path: Path) -> None:
    """Kafka 4.1's kraft.version upgrade (kraftsim.release 4.1): a lone static voter writes the
    KRaftVersionRecord and its own VotersRecord; ApiVersions finalizes kraft.version 1 at once,
    and after a restart the node reads its quorum from the log (its id, directory id and
    endpoint), still leads, still writes, and still says kraft.version 1."""
    q = Quorum(tmp_path, size=1, kraftsim_release="4.1")
    [node_id] = q.nodes
    node = q.nodes[node_id]
    q.start()
    try:
        assert q.leader() == node_id
        assert finalized_kraft_version(node) is None  # 0: not listed
        r = harness.kraftsim("features", "--bootstrap-controller", node.address, "upgrade",
                             "--feature", "kraft.version=1", timeout=60)
        assert (r.returncode, r.stdout.splitlines()) == (0, ["kraft.version was upgraded to 1."]), r.stderr
        assert finalized_kraft_version(node) == 1
        directory = MetaProperties.read(node.directory / "data" / META_PROPERTIES).directory_id
        assert directory is not None
        assert voters_records(node) == [[(node_id, directory)]]

        def described() -> list[tuple[int, str, list[tuple[str, int]]]]:
            resp = asyncio.run(ask(node, describe_quorum(), 2))
            part = resp.topics[0].partitions[0]
            ports = {n.node_id: [(li.name, li.port) for li in n.listeners] for n in resp.nodes}
            return [(v.replica_id, uuids.to_str(v.replica_directory_id), ports.get(v.replica_id, []))
                    for v in part.current_voters]

        before = described()
        assert before == [(node_id, directory, [("CONTROLLER", node.port)])]
        assert q.stop(node_id) == 0
        q.start(node_id)
        assert q.leader() == node_id
        assert described() == before
        assert finalized_kraft_version(node) == 1
        asyncio.run(create_topics(node, q.cluster_id, ["after-restart"]))
    finally:
        q.stop_all()

"""A KIP-853 dynamic quorum beside Kafka 3.9.2: ``format --initial-controllers`` / ``--standalone``
writes what Kafka's storage tool writes, each side reads the other's files, and the refusals are
Kafka's (Kafka's storage tool is one JVM run, warm through tool_server); then one pair of
controllers formatted --standalone, described by Kafka's own tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftsim.metadata import files
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.metadata.snapshots import last_contained_timestamp
from kraftsim.rpc import uuids
from tests.harness import poll_sync
from tests.kafka.conftest import PAIR_CONFIG, PairNodes
from tests.kafka.harness import (
    KafkaNode,
    KraftsimNode,
    ToolResult,
    dump_log,
    kafka_features,
    kafka_metadata_quorum,
    kafka_storage,
    kraftsim_cli,
    random_cluster_id,
)
from tests.kafka.provision import RELEASES
from tests.quorum_harness import Quorum, read_voters

pytestmark = pytest.mark.kafka

DIRS = ["I7SfA9gyQImvGV3euyxX6A", "A-fmgU6kQJ2Aa_EJtJLBWg", "07R5amHmR32VDA6jHkGbTA"]


def dynamic(port: int) -> dict[str, str]:
    """The overrides that make a controller one of a dynamic quorum: no voters, bootstrap servers."""
    return {"controller.quorum.voters": "", "controller.quorum.bootstrap.servers": f"127.0.0.1:{port}"}


def pair(tmp_path: Path, node_id: int = 1, port: int = 19193, release: str = "3.9") -> tuple[KafkaNode, KraftsimNode]:
    """Two directories to format alike: by Kafka's storage tool of ``release``, and by kraftsim
    playing that release."""
    cid = random_cluster_id()
    ours = {**dynamic(port), **({"kraftsim.release": release} if release != "3.9" else {})}
    return (KafkaNode(tmp_path / "kafka", node_id=node_id, port=port, cluster_id=cid, overrides=dynamic(port),
                      kafka_version=RELEASES[release], release_version=release),
            KraftsimNode(tmp_path / "kraftsim", node_id=node_id, port=port, cluster_id=cid, overrides=ours,
                         release_version=release))


def formatting(r: ToolResult, node: KafkaNode | KraftsimNode) -> list[str]:
    """What a format said of the directories (4.x also echoes its bootstrap records)."""
    return [line.replace(str(node.data_dir), "<dir>") for line in r.stdout.splitlines()
            if line.startswith("Formatting ")]


def masked(path: Path) -> bytes:
    """A snapshot file with what must differ between two runs zeroed: each batch's CRC and
    timestamps, and the header's LastContainedLogTimestamp (the format's clock)."""
    data = bytearray(path.read_bytes())
    ts = last_contained_timestamp(path)
    pos = 0
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos + 8:pos + 12], "big")
        data[pos + 17:pos + 21] = bytes(4)  # crc
        data[pos + 27:pos + 43] = bytes(16)  # base and max timestamp
        pos += 12 + length
    if ts:
        data = bytearray(data.replace(ts.to_bytes(8, "big"), bytes(8)))
    return bytes(data)


def meta_properties(node: KafkaNode | KraftsimNode) -> list[str]:
    """meta.properties without its date comment."""
    return [line for line in (node.data_dir / files.META_PROPERTIES).read_text().splitlines()
            if not line.startswith("#")]


def dump_records(path: Path) -> list[str]:
    """kafka-dump-log's record lines for ``path``, less the times."""
    r = dump_log(path).check()
    out = []
    for line in r.stdout.splitlines():
        if line.startswith("| offset:"):
            body = line.split("valueSize:", 1)[1]
            out.append(body.split(" ", 2)[2] if "SnapshotHeader" not in body else "SnapshotHeader")
    return out


@pytest.mark.parametrize("release", ["3.9", "4.4"])  # 4.4 keeps its bootstrap records in the snapshot too
def test_initial_controllers_write_what_kafkas_storage_tool_writes(tmp_path: Path, release: str) -> None:
    kafka, sim = pair(tmp_path, release=release)
    voters = f"1@127.0.0.1:19193:{DIRS[0]},2@127.0.0.1:19194:{DIRS[1]},3@127.0.0.1:19195:{DIRS[2]}"
    k = kafka.format("--initial-controllers", voters)
    s = sim.format("--initial-controllers", voters)
    assert formatting(s, sim) == formatting(k, kafka) != []
    assert meta_properties(sim) == meta_properties(kafka)
    snapshot = Path(files.METADATA_TOPIC_DIR) / files.BOOTSTRAP_SNAPSHOT
    names = [snapshot] if release == "4.4" else [Path(files.BOOTSTRAP_CHECKPOINT), snapshot]
    for name in names:
        assert masked(sim.data_dir / name) == masked(kafka.data_dir / name), name
        # The masked time is the format's (not 0) where Kafka's is.
        assert (last_contained_timestamp(sim.data_dir / name) > 0) == \
            (last_contained_timestamp(kafka.data_dir / name) > 0), name
    assert sorted(p.name for p in sim.data_dir.rglob("*")) == sorted(p.name for p in kafka.data_dir.rglob("*"))
    # Kafka's kafka-dump-log reads ours as it reads its own.
    assert dump_records(sim.data_dir / snapshot) == dump_records(kafka.data_dir / snapshot)
    assert "KRaftVoters" in " ".join(dump_records(sim.data_dir / snapshot))


def test_a_non_voter_directory_and_the_voters_order_are_kafkas(tmp_path: Path) -> None:
    """Node 1 is not among the voters (its directory gets an id of its own), and the voters are
    listed in Kafka's VoterSet (HashMap) order: 16, 33, 2, 5."""
    kafka, sim = pair(tmp_path)
    voters = f"5@h5:9005:{DIRS[0]},16@h16:9016:{DIRS[1]},33@h33:9033:{DIRS[2]},2@h2:9002:{DIRS[0]}"
    k = kafka.format("-I", voters)
    s = sim.format("-I", voters)
    assert formatting(s, sim) == formatting(k, kafka) == ["Formatting dynamic metadata directory <dir> with "
                                                          "metadata.version 3.9-IV0."]
    snapshot = Path(files.METADATA_TOPIC_DIR) / files.BOOTSTRAP_SNAPSHOT
    assert masked(sim.data_dir / snapshot) == masked(kafka.data_dir / snapshot)
    ids = [line for line in (meta_properties(kafka) + meta_properties(sim)) if line.startswith("directory.id=")]
    assert len(set(ids)) == 2 and not any(d in line for d in DIRS for line in ids)


def test_standalone_and_our_reader_of_kafkas_files(tmp_path: Path) -> None:
    kafka, sim = pair(tmp_path, node_id=7)
    k = kafka.format("--standalone")
    s = sim.format("--standalone")
    assert s.stdout.replace(str(sim.data_dir), "<dir>") == k.stdout.replace(str(kafka.data_dir), "<dir>")
    for node in (kafka, sim):
        mlog = MetadataLog.open(node.data_dir, LogConfig(linger_ms=0))
        try:
            got = read_voters(mlog)
        finally:
            mlog.close()
        mine = files.MetaProperties.read(node.data_dir / files.META_PROPERTIES).directory_id
        assert got.kraft_version == 1, node
        assert got.voters is not None
        [voter] = got.voters.nodes()
        assert (voter.key.id, uuids.to_str(voter.key.directory_id or uuids.ZERO)) == (7, mine), node
        assert [(n, str(a)) for n, a in voter.endpoints.items()] == [("CONTROLLER", "127.0.0.1:19193")], node
        assert voter.kraft_versions == (0, 1)


@pytest.mark.parametrize(("args", "static"), [((), False), (("--standalone", "-N"), False), (("-I", "1@h:1:bad"), False),
                                              (("--no-initial-controllers",), False), (("--standalone",), True),
                                              (("-I", "1@h:1:bad"), True), (("-N",), True)])
def test_the_refusals_are_kafkas(tmp_path: Path, args: tuple[str, ...], static: bool) -> None:
    """``static``: the node also names controller.quorum.voters."""
    kafka, sim = pair(tmp_path)
    if static:
        for node in (kafka, sim):
            node.overrides["controller.quorum.voters"] = f"1@127.0.0.1:{node.port}"
    k = kafka.format(*args, check=False)
    s = sim.format(*args, check=False)
    assert (s.returncode == 0) == (k.returncode == 0), (k, s)
    if k.returncode == 0:
        assert s.stdout.replace(str(sim.data_dir), "<dir>") == k.stdout.replace(str(kafka.data_dir), "<dir>")
        return
    # Kafka's argument errors come from argparse4j, its bad voter strings as an uncaught
    # exception's message: kraftsim says the same words in one line.
    last = [line for line in k.stderr.splitlines() if line.strip()]
    theirs = " ".join(" ".join(last).split())
    ours = s.stderr.strip().splitlines()
    assert len(ours) == 1, s.stderr
    words = ours[0].removeprefix("kraftsim format: ").removeprefix("kraftsim: error: ")
    assert " ".join(words.split()) in theirs, (theirs, ours)


def test_kraftsim_cli_names_the_flags_as_kafka() -> None:
    r = kraftsim_cli("format", "--help")
    for flag in ("--standalone, -s", "--no-initial-controllers, -N", "--initial-controllers"):
        assert flag in r.stdout, r.stdout


def described(node: KafkaNode | KraftsimNode, *args: str) -> list[str]:
    """Kafka's tool's lines about ``node``, with what differs by nature masked: the node's
    directory id and port, and the fetch timestamps."""
    r = kafka_metadata_quorum("--bootstrap-controller", node.bootstrap, *args).check()
    mine = files.MetaProperties.read(node.data_dir / files.META_PROPERTIES).directory_id
    out = []
    for line in r.stdout.splitlines():
        line = line.replace(mine, "<dir>").replace(str(node.port), "<port>")
        cells = line.split("\t")
        if len(cells) > 5 and cells[4].strip().isdigit():
            cells[4:6] = ["<ts>", "<ts>"]
        out.append("\t".join(cells))
    return out


def test_a_standalone_controller_is_described_as_kafkas(tmp_path: Path) -> None:
    cid = random_cluster_id()
    kafka = KafkaNode(tmp_path / "kafka", cluster_id=cid, overrides={**PAIR_CONFIG})
    sim = KraftsimNode(tmp_path / "kraftsim", cluster_id=cid, overrides={**PAIR_CONFIG})
    for node in (kafka, sim):
        node.overrides.update(dynamic(node.port))
        node.format("--standalone")
    pair = PairNodes(kafka, sim).start()
    try:
        for args in (("describe", "--status"), ("describe", "--replication")):
            assert described(sim, *args) == described(kafka, *args), args
        features = [kafka_features("--bootstrap-controller", n.bootstrap, "describe").check().stdout
                    for n in (kafka, sim)]
        assert "Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\tFinalizedVersionLevel: 1" \
            in features[0]
        assert features[1] == features[0]
    finally:
        pair.stop()
    for node in (kafka, sim):
        assert (node.data_dir / files.METADATA_TOPIC_DIR / files.QUORUM_STATE).read_text() == \
            f'{{"leaderId":{node.node_id},"leaderEpoch":1,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA",' \
            '"data_version":1}', node


def test_each_starts_on_the_others_standalone_format(tmp_path: Path) -> None:
    """Kafka 3.9.2 runs a dynamic quorum kraftsim formatted, and kraftsim one Kafka formatted:
    each is the single voter its directory names."""
    cid = random_cluster_id()
    kafka = KafkaNode(tmp_path / "kafka", cluster_id=cid, overrides={**PAIR_CONFIG})
    sim = KraftsimNode(tmp_path / "kraftsim", cluster_id=cid, overrides={**PAIR_CONFIG})
    for node in (kafka, sim):
        node.overrides.update(dynamic(node.port))
        node.write_properties()
    kraftsim_cli("format", "-t", cid, "-c", str(kafka.properties_path), "--standalone").check()
    kafka_storage("format", "-t", cid, "-c", str(sim.properties_path), "--standalone").check()
    pair = PairNodes(kafka, sim).start()
    try:
        for node in (kafka, sim):
            mine = files.MetaProperties.read(node.data_dir / files.META_PROPERTIES).directory_id
            out = kafka_metadata_quorum("--bootstrap-controller", node.bootstrap, "describe", "--status").check()
            assert f'[{{"id": {node.node_id}, "directoryId": "{mine}", ' \
                   f'"endpoints": ["CONTROLLER://127.0.0.1:{node.port}"]}}]' in out.stdout, (node, out.stdout)
    finally:
        pair.stop()


@pytest.mark.slow  # two Kafka controllers and two kraftsim ones, one after the other
def test_an_observer_of_either_kind_follows_a_leader_of_the_other(tmp_path: Path) -> None:
    """A controller formatted --no-initial-controllers finds a --standalone leader through
    controller.quorum.bootstrap.servers and fetches from it: a Kafka 3.9.2 observer of a
    kraftsim leader, and a kraftsim observer of a Kafka leader; each leader lists the other kind
    among its observers, with its directory id, caught up."""
    def observed(leader: KafkaNode | KraftsimNode, observer: KafkaNode | KraftsimNode) -> None:
        mine = files.MetaProperties.read(observer.data_dir / files.META_PROPERTIES).directory_id

        def caught_up() -> bool:
            rows = kafka_metadata_quorum("--bootstrap-controller", leader.bootstrap, "describe",
                                         "--replication").check().stdout.splitlines()[1:]
            cells = {r.split("\t")[0].strip(): [c.strip() for c in r.split("\t")] for r in rows}
            row = cells.get(str(observer.node_id))
            return row is not None and row[1] == mine and row[3] == "0" and row[6] == "Observer"

        poll_sync(caught_up, 60, 1.0, what=f"{observer} caught up as an observer of {leader}")

    for name, leader_kind, observer_kind in (("a", KraftsimNode, KafkaNode), ("b", KafkaNode, KraftsimNode)):
        cid = random_cluster_id()
        leader = leader_kind(tmp_path / name / "leader", node_id=1, cluster_id=cid, overrides={**PAIR_CONFIG})
        leader.overrides.update(dynamic(leader.port))
        observer = observer_kind(tmp_path / name / "observer", node_id=2, cluster_id=cid,
                                 overrides={**PAIR_CONFIG, **dynamic(leader.port)})
        leader.format("--standalone")
        observer.format("--no-initial-controllers")
        leader.start()
        try:
            observer.start(wait=False)
            observed(leader, observer)
        finally:
            observer.stop()
            leader.stop()


@pytest.mark.slow  # two kraftsim controllers and Kafka's tool, asked until the leader takes the add
def test_kafkas_metadata_quorum_tool_adds_and_removes_a_kraftsim_controller(tmp_path: Path) -> None:
    """Kafka 3.9.2's ``kafka-metadata-quorum add-controller``, given a kraftsim observer's own
    config (formatted --no-initial-controllers), makes it a voter of a kraftsim --standalone
    quorum, and its ``remove-controller`` takes it out: the tool's lines are Kafka's, and
    ``describe --status`` shows the voters each time."""
    q = Quorum(tmp_path, size=1, dynamic=True, observers=1, standalone=True)
    q.start()
    try:
        [voter] = q.directory_ids
        [observer] = [i for i in q.nodes if i != voter]
        lead, obs = q.nodes[voter], q.nodes[observer]
        assert q.leader(among=[voter]) == voter
        obs_dir = files.MetaProperties.read(obs.directory / "data" / files.META_PROPERTIES).directory_id
        added = f"Added controller {observer} with directory id {obs_dir} and endpoints: CONTROLLER://{obs.address}"

        def add() -> bool:
            r = kafka_metadata_quorum("--bootstrap-controller", lead.address, "--command-config", str(obs.config),
                                      "add-controller")
            if r.returncode == 0:
                assert added in r.stdout.splitlines(), r.stdout
                return True
            # Kafka's leader aborts an add it cannot check yet (the newcomer lagging, or its
            # ApiVersions not answered): REQUEST_TIMED_OUT, which the operator asks again after.
            assert "since it is lagging behind" in r.stderr or "since API_VERSIONS returned an error" in r.stderr, \
                r.stderr
            return False

        poll_sync(add, 90, 1.0, what="Kafka's add-controller accepted")

        def voters_line() -> str:
            out = kafka_metadata_quorum("--bootstrap-controller", lead.address, "describe", "--status").check().stdout
            return next(x for x in out.splitlines() if x.startswith("CurrentVoters:"))

        line = voters_line()
        assert f'"id": {voter}, "directoryId": "{q.directory_ids[voter]}"' in line, line
        assert f'"id": {observer}, "directoryId": "{obs_dir}", "endpoints": ["CONTROLLER://{obs.address}"]' in line
        r = kafka_metadata_quorum("--bootstrap-controller", lead.address, "remove-controller", "--controller-id",
                                  str(observer), "--controller-directory-id", obs_dir or "").check()
        assert f"Removed  KRaft controller {observer} with directory id {obs_dir}" in r.stdout.splitlines(), r.stdout
        line = voters_line()
        assert f'"id": {observer}' not in line and f'"id": {voter}' in line, line
    finally:
        q.stop_all()

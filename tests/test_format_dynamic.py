"""``kraftsim format`` for a KIP-853 dynamic quorum (--standalone, --initial-controllers,
--no-initial-controllers): the files and the refusals of Kafka 3.9's storage tool. Real Kafka's
side of the comparison is tests/kafka/test_dynamic_quorum.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraftsim.cli.storage import FormatError, format_storage
from kraftsim.controller.configs.server_config import ConfigError, load
from kraftsim.metadata import files
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.metadata.snapshots import read_snapshot_file
from kraftsim.raft.core.keys import ReplicaKey
from kraftsim.raft.core.voters import Address
from kraftsim.rpc import uuids
from tests import harness
from tests.quorum_harness import read_voters

CID = "MkU3OEVBNTcwNTJENDM2Qk"
DIRS = ["I7SfA9gyQImvGV3euyxX6A", "A-fmgU6kQJ2Aa_EJtJLBWg", "07R5amHmR32VDA6jHkGbTA"]


def dynamic_config(tmp_path: Path, node_id: int = harness.NODE_ID, port: int = 19093) -> Path:
    """A controller of a dynamic quorum: bootstrap servers, no voters."""
    return harness.write_config(tmp_path, port=port, node_id=node_id, controller_quorum_voters="",
                                controller_quorum_bootstrap_servers=f"127.0.0.1:{port}")


def snapshot(tmp_path: Path) -> Path:
    return tmp_path / "data" / files.METADATA_TOPIC_DIR / files.BOOTSTRAP_SNAPSHOT


def log_voters(tmp_path: Path) -> tuple[int, dict[int, tuple[str, Address | None, tuple[int, int]]]]:
    mlog = MetadataLog.open(tmp_path / "data", LogConfig(linger_ms=0))
    try:
        got = read_voters(mlog)
    finally:
        mlog.close()
    assert got.voters is not None
    return got.kraft_version, {n.key.id: (uuids.to_str(n.key.directory_id or uuids.ZERO),
                                          n.endpoints.address("CONTROLLER"), n.kraft_versions)
                               for n in got.voters.nodes()}


def test_standalone_writes_the_bootstrap_snapshot_with_this_node_the_only_voter(tmp_path: Path) -> None:
    cfg = dynamic_config(tmp_path)
    out = format_storage(cfg, CID, "3.9", False, standalone=True)
    assert out == [f"Formatting dynamic metadata voter directory {tmp_path / 'data'} with metadata.version 3.9-IV0."]
    mp = files.MetaProperties.read(tmp_path / "data" / files.META_PROPERTIES)
    kraft_version, voters = log_voters(tmp_path)
    assert kraft_version == 1
    assert voters == {harness.NODE_ID: (mp.directory_id, Address("127.0.0.1", 19093), (0, 1))}
    assert list(read_snapshot_file(snapshot(tmp_path))) == []  # control records only
    # The bootstrap records are those of a static quorum: kraft.version has no FeatureLevelRecord.
    assert [m.name for m, _ in read_snapshot_file(tmp_path / "data" / files.BOOTSTRAP_CHECKPOINT)] == \
        ["metadata.version"]


def test_initial_controllers_give_each_voter_its_directory_id(tmp_path: Path) -> None:
    voters = f"1@127.0.0.1:9001:{DIRS[0]},2@[::1]:9002:{DIRS[1]},3@h3:9003:{DIRS[2]}"
    cfg = dynamic_config(tmp_path, node_id=2)
    out = format_storage(cfg, CID, "3.9", False, initial_controllers=voters)
    assert out[0].startswith("Formatting dynamic metadata voter directory ")
    assert files.MetaProperties.read(tmp_path / "data" / files.META_PROPERTIES).directory_id == DIRS[1]
    assert log_voters(tmp_path) == (1, {1: (DIRS[0], Address("127.0.0.1", 9001), (0, 1)),
                                        2: (DIRS[1], Address("::1", 9002), (0, 1)),
                                        3: (DIRS[2], Address("h3", 9003), (0, 1))})


def test_a_node_not_among_the_initial_controllers_gets_the_snapshot_and_its_own_directory(tmp_path: Path) -> None:
    cfg = dynamic_config(tmp_path, node_id=4)
    out = format_storage(cfg, CID, "3.9", False, initial_controllers=f"1@h:1:{DIRS[0]}")
    assert out[0].startswith("Formatting dynamic metadata directory ")
    assert files.MetaProperties.read(tmp_path / "data" / files.META_PROPERTIES).directory_id != DIRS[0]
    assert set(log_voters(tmp_path)[1]) == {1}


def test_no_initial_controllers_is_a_static_format(tmp_path: Path) -> None:
    cfg = dynamic_config(tmp_path)
    out = format_storage(cfg, CID, "3.9", False, no_initial_controllers=True)
    assert out[0].startswith("Formatting metadata directory ")
    assert not snapshot(tmp_path).exists()
    assert (tmp_path / "data" / files.BOOTSTRAP_CHECKPOINT).exists()


def test_a_static_quorum_formats_as_before(tmp_path: Path) -> None:
    cfg = harness.write_config(tmp_path)
    assert format_storage(cfg, CID, "3.9", False)[0].startswith("Formatting metadata directory ")
    assert not snapshot(tmp_path).exists()


def test_static_voters_refuse_a_dynamic_format(tmp_path: Path) -> None:
    cfg = harness.write_config(tmp_path)
    for kw in ({"standalone": True}, {"initial_controllers": "1@h:1:bad"}):
        with pytest.raises(FormatError, match="^You cannot specify controller.quorum.voters and format the node "
                                              "with --initial-controllers or --standalone. If you want"):
            format_storage(cfg, CID, "3.9", False, **kw)  # type: ignore[arg-type]
    assert format_storage(cfg, CID, "3.9", False, no_initial_controllers=True)[0].startswith(
        "Formatting metadata directory ")


@pytest.mark.parametrize(("value", "message"), [
    ("1@h:1:bad", "Failed to parse directory ID in dynamic voter string."),
    (f"1@h:1:{DIRS[0]},1@h:2:{DIRS[1]}", "Node id 1 was specified more than once."),
    (f"1h:1:{DIRS[0]}", "No @ found in dynamic voter string."),
    (f"x@h:1:{DIRS[0]}", "Failed to parse node id in dynamic voter string."),
    (f"1@h:70000:{DIRS[0]}", "Invalid port 70000 in dynamic voter string."),
    (f"1@[::1:1:{DIRS[0]}", "Hostname began with left bracket, but no right bracket was found."),
    (",", "No voters given."),
])
def test_initial_controllers_refused_in_kafkas_words(tmp_path: Path, value: str, message: str) -> None:
    with pytest.raises(FormatError) as e:
        format_storage(dynamic_config(tmp_path), CID, "3.9", False, initial_controllers=value)
    assert str(e.value) == message
    assert not (tmp_path / "data").exists()


def test_without_voters_a_controller_must_name_its_quorum(tmp_path: Path) -> None:
    with pytest.raises(FormatError) as e:
        format_storage(dynamic_config(tmp_path), CID, "3.9", False)
    assert str(e.value) == ("Because controller.quorum.voters is not set on this controller, you must specify one "
                            "of the following: --standalone, --initial-controllers, or --no-initial-controllers.")


def test_the_three_flags_exclude_each_other_on_the_command_line(tmp_path: Path) -> None:
    cfg = dynamic_config(tmp_path)
    r = harness.kraftsim("format", "-t", CID, "-c", str(cfg), "--standalone", "-N")
    assert r.returncode != 0
    assert "argument --no-initial-controllers/-N: not allowed with argument --standalone/-s" in r.stderr
    r = harness.kraftsim("format", "-t", CID, "-c", str(cfg), "-I", f"{harness.NODE_ID}@127.0.0.1:19093:{DIRS[0]}")
    assert r.returncode == 0, r.stderr
    assert files.MetaProperties.read(tmp_path / "data" / files.META_PROPERTIES).directory_id == DIRS[0]


def test_a_controller_needs_voters_or_bootstrap_servers(tmp_path: Path) -> None:
    cfg = harness.write_config(tmp_path, controller_quorum_voters="")
    with pytest.raises(ConfigError, match="either controller.quorum.bootstrap.servers must contain"):
        load(cfg)
    assert load(dynamic_config(tmp_path)).get("controller.quorum.bootstrap.servers") == [("127.0.0.1", 19093)]


def test_the_replica_key_of_a_voter_carries_its_directory(tmp_path: Path) -> None:
    format_storage(dynamic_config(tmp_path), CID, "3.9", False, initial_controllers=f"{harness.NODE_ID}@h:1:{DIRS[0]}")
    mlog = MetadataLog.open(tmp_path / "data", LogConfig(linger_ms=0))
    try:
        voters = read_voters(mlog).voters
    finally:
        mlog.close()
    assert voters is not None
    assert voters.is_voter(ReplicaKey(harness.NODE_ID, uuids.from_str(DIRS[0])))
    assert not voters.is_voter(ReplicaKey(harness.NODE_ID, uuids.from_str(DIRS[1])))

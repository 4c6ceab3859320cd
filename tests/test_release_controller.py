"""A controller is one Kafka release (``kraftsim.release``): what it says at start-up, the
directories and logs it refuses to run, the records it refuses to read, and the simulated
brokers that join it as brokers of its release."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kraftsim.metadata import files, versions
from kraftsim.metadata import records as recs
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.loader import LoadError, load_image
from kraftsim.metadata.log import LogConfig, MetadataLog
from tests import harness
from tests.fleet_harness import ClusterView, FleetProcess
from tests.kafka.harness import KraftsimNode, random_cluster_id

FEATURE = recs.by_name("FeatureLevelRecord")
REGISTER = recs.by_name("RegisterBrokerRecord")
CLEAR_ELR = recs.by_name("ClearElrRecord")


def _config(tmp_path: Path, release: str) -> Path:
    return harness.write_config(tmp_path, harness.free_port(), harness.free_port(), kraftsim_release=release)


def test_start_up_names_the_release_and_a_foreign_format_is_refused_in_one_line(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "4.4")
    r = harness.kraftsim("format", "-t", random_cluster_id(), "-c", str(cfg))
    assert r.returncode == 0 and "4.4-IV2" in r.stdout
    assert (tmp_path / "data" / files.METADATA_TOPIC_DIR / files.BOOTSTRAP_SNAPSHOT).exists()
    assert not (tmp_path / "data" / files.BOOTSTRAP_CHECKPOINT).exists()
    r = harness.kraftsim("controller", str(cfg), "--override", "kraftsim.release=3.9")
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "kraftsim controller: Cannot run the bootstrap metadata.version 4.4-IV2 (level 33) of "
        f"{tmp_path / 'data' / files.METADATA_TOPIC_DIR / files.BOOTSTRAP_SNAPSHOT}: a Kafka 3.9 controller runs "
        "3.0-IV1 to 3.9-IV0"]
    r = harness.kraftsim("controller", str(cfg), "--override", "kraftsim.release=4.5")
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1 and "kraftsim.release" in r.stderr


def test_a_4x_controller_refuses_a_level_below_its_minimum(tmp_path: Path) -> None:
    """3.3-IV0 (level 4) is a 3.9 level no 4.x release runs: refused in a bootstrap, in one
    line, and in a log, as Kafka's replay of the FeatureLevelRecord refuses it."""
    cfg = _config(tmp_path, "3.9")
    harness.format_dir(cfg, "3.3-IV0")
    r = harness.kraftsim("controller", str(cfg), "--override", "kraftsim.release=4.4", timeout=30)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert "Cannot run the bootstrap metadata.version 3.3-IV0 (level 4)" in r.stderr
    assert "a Kafka 4.4 controller runs 3.3-IV3 to 4.4-IV2" in r.stderr
    log = MetadataLog.open(tmp_path / "log", LogConfig(linger_ms=0))
    log.append_records([(FEATURE(name="metadata.version", feature_level=4), 0)], epoch=1, timestamp=1)
    log.flush_now()
    r44 = versions.release("4.4")
    with pytest.raises(LoadError, match="but this controller only supports versions 7-33"):
        load_image(log, lambda: MetadataImage(r44.supported_features(), r44))
    log.close()


def _log_with(tmp_path: Path, *items: tuple[object, int]) -> MetadataLog:
    log = MetadataLog.open(tmp_path, LogConfig(linger_ms=0))
    log.append_records([(FEATURE(name="metadata.version", feature_level=21), 0), *items], epoch=1,  # type: ignore[list-item]
                       timestamp=1)
    log.flush_now()
    return log


@pytest.mark.parametrize("release,error", [
    ("3.9", "Unknown metadata id 28"),  # ClearElrRecord: 4.0+
    ("4.4", "Unable to find a topic named t in order to clear its ELRs."),  # defined: replayed, refused here
])
def test_a_record_type_the_release_does_not_define_is_refused_on_load(tmp_path: Path, release: str,
                                                                      error: str) -> None:
    log = _log_with(tmp_path, (CLEAR_ELR(topic_name="t"), 0))
    r = versions.release(release)
    with pytest.raises(LoadError, match=error):
        load_image(log, lambda: MetadataImage(r.supported_features(), r))
    log.close()


def test_a_record_version_the_release_does_not_define_is_refused_on_load(tmp_path: Path) -> None:
    """RegisterBrokerRecord v4 (4.3+): a 3.9 controller cannot read it, a 4.4 one can."""
    reg = REGISTER(broker_id=1, incarnation_id=uuid.UUID(int=7), broker_epoch=1, end_points=[], features=[],
                   fenced=True, log_dirs=[uuid.UUID(int=9)])
    log = _log_with(tmp_path, (reg, 4))
    r39 = versions.release("3.9")
    with pytest.raises(LoadError, match="Failed to deserialize record with type 0: Can't read version 4 of "
                                        "RegisterBrokerRecord"):
        load_image(log, lambda: MetadataImage(r39.supported_features(), r39))
    r44 = versions.release("4.4")
    image, _ = load_image(log, lambda: MetadataImage(r44.supported_features(True), r44))
    assert 1 in image.cluster.brokers
    log.close()


async def test_simulated_brokers_are_of_the_controllers_release(tmp_path: Path) -> None:
    """``kraftsim brokers`` without --release: brokers of the release the controller's
    ApiVersions tells (4.4: they support share.version 2, which 4.4 finalizes, so they register;
    once caught up, their heartbeats (v2) report no cordoned log directory, which is recorded)."""
    node = KraftsimNode(tmp_path / "controller", cluster_id=random_cluster_id(),
                        release_version="4.4", overrides={"kraftsim.release": "4.4"})
    node.format()
    node.start()
    view = ClusterView(node.bootstrap, node.cluster_id, release=versions.release("4.4")).start()
    fleet = FleetProcess(tmp_path / "fleet", node.bootstrap, 2, "--cluster-id", node.cluster_id)
    try:
        await fleet.wait_log(r"brokers of Kafka 4\.4")
        await view.until(lambda img: view.unfenced({1, 2}) == {1, 2}, 60, "both brokers unfenced")
        reg = view.image.cluster.brokers[1]
        assert reg.supported_features["share.version"] == (0, 2)
        assert reg.supported_features["metadata.version"] == (7, 33)
        await view.until(lambda img: all(img.cluster.brokers[b].cordoned_directories == () for b in (1, 2)), 30,
                         "the brokers' cordoned log directories (none) recorded")
    finally:
        fleet.kill()
        await view.stop()
        node.stop()

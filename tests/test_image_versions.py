"""metadata.version tables and the gates/record versions derived from them, per release: 3.9's
levels 22 and 23 keep their 3.9 meaning, which 4.x gave to other levels."""

from __future__ import annotations

import pytest

from kraftsim.metadata import versions

v = versions.release("3.9")
v44 = versions.release("4.4")


def test_table_names_and_releases() -> None:
    assert [x.level for x in v.versions] == list(range(1, 24))
    assert v.name(1) == "3.0-IV1" and v.name(7) == "3.3-IV3" and v.name(21) == "3.9-IV0"
    assert v.level_for_release("3.8") == 20 and v.level_for_release("3.7") == 19
    assert v.level_for_release("3.3") == 7 and v.from_name("3.6-IV1") == 13 and v.from_name("3.9") == 21
    with pytest.raises(KeyError):
        v.level_for_release("4.0")  # unstable in 3.9, so not a release it can name
    assert (v.minimum, v.minimum_bootstrap, v.latest_production) == (1, 4, 21)
    assert v.get(21).production and not v.get(22).production
    assert (v44.minimum, v44.minimum_bootstrap, v44.latest_production, v44.latest_testing) == (7, 7, 33, 34)
    assert v44.name(33) == "4.4-IV2" and v44.from_name("4.4") == 33 and not v44.is_known(6)


def test_metadata_changed() -> None:
    assert v.get(7).metadata_changed and not v.get(12).metadata_changed
    assert not v.metadata_changed_between(17, 21)  # 3.7-IV3 .. 3.9-IV0 changed nothing
    assert v.metadata_changed_between(16, 21)  # crosses 3.7-IV2
    # 3.9's 4.0-IV0 changed metadata; 4.x's did not, its 4.0-IV1 does.
    assert v.get(22).metadata_changed and not v44.get(22).metadata_changed and v44.get(23).metadata_changed


@pytest.mark.parametrize("level,rb,pr", [(6, 0, 0), (7, 1, 0), (8, 2, 0), (16, 2, 0), (17, 3, 1), (21, 3, 1), (22, 3, 2)])
def test_record_versions(level: int, rb: int, pr: int) -> None:
    assert v.register_broker_record_version(level) == rb
    assert v.partition_record_version(level) == pr == v.partition_change_record_version(level)


def test_the_same_level_gates_differently_per_release() -> None:
    """3.9's 4.0-IV0 (22) turns on ELR and PartitionRecord v2; from 4.0 it is 4.0-IV1 (23)."""
    assert v.is_elr_supported(22) and v.partition_record_version(22) == 2
    assert not v44.is_elr_supported(22) and v44.partition_record_version(22) == 1
    assert v44.is_elr_supported(23) and v44.partition_record_version(23) == 2
    assert v44.register_broker_record_version(29) == 3 and v44.register_broker_record_version(30) == 4
    assert v44.gate("isCordonedLogDirsSupported", 30) and v.gate("isCordonedLogDirsSupported", 21) is None
    assert v44.gate("isControllerUnregistrationSupported", 33) and not v44.gate("isControllerUnregistrationSupported", 32)
    # Switches 4.0 dropped because every level it runs has them.
    assert v44.is_noop_supported(7) and v44.is_in_controlled_shutdown_supported(7)


def test_gates() -> None:
    assert not v.is_noop_supported(4) and v.is_noop_supported(5)
    assert not v.is_migration_supported(7) and v.is_migration_supported(8)
    assert not v.is_scram_supported(10) and v.is_scram_supported(11)
    assert v.is_leader_epoch_bump_required_on_isr_shrink(11) and not v.is_leader_epoch_bump_required_on_isr_shrink(12)
    assert not v.metadata_transactions_supported(12) and v.metadata_transactions_supported(13)
    assert not v.delegation_tokens_supported(13) and v.delegation_tokens_supported(14)
    assert not v.controller_registration_supported(14) and v.controller_registration_supported(15)
    assert not v.directory_assignment_supported(16) and v.directory_assignment_supported(17)
    assert not v.is_elr_supported(21)
    with pytest.raises(ValueError):
        v.register_controller_record_version(14)
    assert v.broker_registration_change_record_version() == 0
    assert v.broker_registration_change_record_version(in_controlled_shutdown=True) == 1
    assert v.broker_registration_change_record_version(log_dirs=True) == 2


def test_other_features() -> None:
    assert v.supported_features() == {"metadata.version": (1, 21), "kraft.version": (0, 1)}
    assert v.supported_features(enable_unstable=True) == {
        "metadata.version": (1, 23), "kraft.version": (0, 1), "transaction.version": (0, 2)}
    assert v.default_level("kraft.version", 20) == 0 and v.default_level("kraft.version", 21) == 1
    assert v.feature("group.version") is None  # not in 3.9's Features
    assert v44.default_level("share.version", 30) == 1 and v44.default_level("share.version", 31) == 2
    assert v44.feature_level("eligible.leader.replicas.version", 1).dependencies == (("metadata.version", 23),)
    assert versions.supported_range({}, "x") == (0, 0)


def test_the_release_a_controller_advertises() -> None:
    for line in versions.release_lines():
        r = versions.release(line)
        assert versions.release_advertising(r.supported_features()) is r
    # With unstable API versions 4.1 advertises what 4.2 does without: a production match wins.
    assert versions.release_advertising(versions.release("4.1").supported_features(True)).line == "4.2"
    assert versions.release_advertising(v.supported_features(True)) is v

"""FeatureControlManager against images built by replaying records (reference §4.1-4.4).

Every rejection is checked with Kafka 3.9's exact message, because operators and scripts match
on those strings; the order of the checks matters as much, since only the first failure is
reported.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import pytest

from kraftsim.controller.managers.features import (
    FeatureControlManager,
    UpgradeType,
    range_to_string,
    reason_not_supported,
)
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.write_path import MAX_RECORDS_PER_USER_OP
from kraftsim.metadata import versions
from kraftsim.metadata.image.migration import ZkMigrationState
from kraftsim.metadata.records import by_name
from kraftsim.rpc import registry
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.error_response import error_response
from kraftsim.rpc.message import Message
from tests.controller_harness import WriteHarness, request_context

FeatureLevelRecord = by_name("FeatureLevelRecord")
RegisterBrokerRecord = by_name("RegisterBrokerRecord")
RegisterControllerRecord = by_name("RegisterControllerRecord")
ZkMigrationStateRecord = by_name("ZkMigrationStateRecord")
Req = registry.request_class(ApiKey.UPDATE_FEATURES)
Resp = registry.response_class(ApiKey.UPDATE_FEATURES)
UF = [request_context(ApiKey.UPDATE_FEATURES, v) for v in (0, 1)]

NODE = 3000
MV = versions.FEATURE_NAME
KV = versions.KRAFT_VERSION
TV = versions.TRANSACTION_VERSION
INVALID = ErrorCode.INVALID_UPDATE_VERSION
# What a 3.9 broker or controller advertises.
FULL: dict[str, tuple[int, int]] = {MV: (1, 21), KV: (0, 1)}


# ----- builders (shared with test_features_cli) ---------------------------------------------

def mv(level: int) -> Message:
    return FeatureLevelRecord(name=MV, feature_level=level)


def feature(name: str, level: int) -> Message:
    return FeatureLevelRecord(name=name, feature_level=level)


def broker(broker_id: int, features: dict[str, tuple[int, int]]) -> Message:
    return RegisterBrokerRecord(
        broker_id=broker_id, incarnation_id=uuid.uuid4(), broker_epoch=100 + broker_id,
        end_points=[RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="localhost",
                                                        port=9092 + broker_id, security_protocol=0)],
        features=[RegisterBrokerRecord.BrokerFeature(name=n, min_supported_version=lo, max_supported_version=hi)
                  for n, (lo, hi) in features.items()])


def controller(controller_id: int, features: dict[str, tuple[int, int]]) -> Message:
    return RegisterControllerRecord(
        controller_id=controller_id, incarnation_id=uuid.uuid4(),
        end_points=[RegisterControllerRecord.ControllerEndpoint(name="CONTROLLER", host="localhost",
                                                                port=9093, security_protocol=0)],
        features=[RegisterControllerRecord.ControllerFeature(name=n, min_supported_version=lo,
                                                             max_supported_version=hi)
                  for n, (lo, hi) in features.items()])


def migration(state: ZkMigrationState) -> Message:
    return ZkMigrationStateRecord(zk_migration_state=int(state))


def config(**extra: str) -> dict[str, str]:
    return {k.replace("_", "."): v for k, v in extra.items()}


_HARNESS: dict[int, WriteHarness] = {}


def manager(records: Iterable[Message] = (mv(21),), voters: Iterable[int] = (NODE,),
            supported: dict[str, tuple[int, int]] | None = None,
            cfg: dict[str, str] | None = None, release: versions.Release | None = None) -> FeatureControlManager:
    """The manager of a controller whose write path has carried ``records``."""
    h = WriteHarness(mv=None, config=cfg, voters=list(voters), release=release)
    m = FeatureControlManager(h.ctx, supported)
    h.writer.listeners.append(m.note_batch)  # as the controller wires it (FinalizedFeaturesEpoch)
    records = list(records)
    if records:
        h.replay(*records)
    _HARNESS[id(h.ctx)] = h
    return m


def request(*updates: tuple[str, int, int], validate_only: bool = False) -> Message:
    return Req(feature_updates=[Req.FeatureUpdateKey(feature=n, max_version_level=lv, upgrade_type=t)
                                for n, lv, t in updates], validate_only=validate_only)


def results(result: ControllerResult[Message]) -> list[tuple[str, int, str | None]]:
    assert result.response is not None
    return [(r.feature, r.error_code, r.error_message) for r in result.response.results]


def one(m: FeatureControlManager, name: str, level: int,
        utype: UpgradeType = UpgradeType.UPGRADE) -> tuple[int, str | None, list[tuple[str, int]]]:
    """Update one feature; (error code, message, [(name, level)] of the records written)."""
    res = m.update_features(request((name, level, int(utype))), UF[1])
    [(got, code, msg)] = results(res)
    assert got == name
    return code, msg, [(r.name, r.feature_level) for r, v in res.records]


def apply(m: FeatureControlManager, res: ControllerResult[Message]) -> None:
    """What the controller does with the result: the write path, then commit."""
    _HARNESS[id(m.ctx)].apply(res)


def invalid(level: int, name: str, reason: str) -> tuple[int, str, list[tuple[str, int]]]:
    return INVALID, f"Invalid update version {level} for feature {name}. {reason}", []


def invalid_mv(level: int, reason: str) -> tuple[int, str, list[tuple[str, int]]]:
    return INVALID, f"Invalid metadata.version {level}. {reason}", []


# ----- ApiVersions view ---------------------------------------------------------------------

def test_supported_features_production_and_unstable() -> None:
    assert manager().supported_features() == {MV: (1, 21), KV: (0, 1)}
    unstable = manager([mv(21)], cfg=config(unstable_feature_versions_enable="true"))
    assert unstable.supported_features() == {MV: (1, 23), KV: (0, 1), versions.TRANSACTION_VERSION: (0, 2)}


def test_finalized_features_come_in_kafkas_hash_map_order() -> None:
    from kraftsim.controller.managers.features import java_finalized_order, java_supported_order

    # As a Kafka 3.9.2 controller lists them: FinalizedFeatures copies one feature into a table of
    # four buckets, where transaction.version comes before metadata.version.
    assert list(java_finalized_order({TV: 1}, 21)) == [TV, MV]
    assert java_finalized_order({}, 21) == {MV: 21}
    assert java_finalized_order({TV: 1, KV: 0}, 21) == {TV: 1, MV: 21}  # level 0 is not finalized
    assert list(java_supported_order({MV: (1, 23), KV: (0, 1), TV: (0, 2)})) == [KV, MV, TV]


def test_finalized_features_epoch_is_the_last_features_change_and_mv_is_always_listed() -> None:
    m = manager([mv(21), broker(1, FULL), feature(KV, 1)])  # one batch, offsets 1-3
    assert m.finalized_features() == (3, {MV: 21, KV: 1})
    apply(m, ControllerResult([(broker(2, FULL), 0)], None))  # not a features change: no new epoch
    assert m.finalized_features()[0] == 3
    empty = manager([])
    assert empty.finalized_features() == (-1, {MV: versions.release().minimum})


def test_finalized_features_epoch_of_a_change_inside_a_transaction_is_the_end_of_it() -> None:
    begin, end = by_name("BeginTransactionRecord"), by_name("EndTransactionRecord")
    m = manager([])
    apply(m, ControllerResult([(begin(name="Bootstrap records"), 0), (mv(21), 0)], None, False))
    assert m.finalized_features()[0] == -1  # not published while the transaction is open
    apply(m, ControllerResult([(broker(1, FULL), 0), (end(), 0)], None, False))
    assert m.finalized_features()[0] == 4  # LeaderChange 0, Begin 1, FeatureLevel 2, broker 3, End 4


# ----- §4.2 per-feature checks, in order ----------------------------------------------------

@pytest.mark.parametrize("code", [0, 4, 127, -1])
def test_unknown_upgrade_type(code: int) -> None:
    m = manager()
    res = m.update_features(request((KV, 1, code)), UF[1])
    assert results(res) == [(KV, INVALID, f"Invalid update version 1 for feature {KV}. "
                                          "The controller does not support the given upgrade type.")]
    assert res.records == []


def test_unknown_upgrade_type_is_checked_before_a_negative_level() -> None:
    assert one(manager(), KV, -1, UpgradeType.UNKNOWN) == invalid(
        -1, KV, "The controller does not support the given upgrade type.")


def test_negative_level() -> None:
    assert one(manager(), KV, -3) == invalid(-3, KV, "A feature version cannot be less than 0.")
    assert one(manager(), MV, -1, UpgradeType.SAFE_DOWNGRADE) == invalid(
        -1, MV, "A feature version cannot be less than 0.")


def test_local_controller_range() -> None:
    m = manager()
    assert one(m, KV, 2) == invalid(2, KV, f"Local controller {NODE} only supports versions 0-1")
    assert one(m, MV, 22) == invalid(22, MV, f"Local controller {NODE} only supports versions 1-21")
    assert one(m, "group.version", 1) == invalid(1, "group.version",
                                                 f"Local controller {NODE} does not support this feature.")
    # metadata.version can never be removed: 0 is outside every node's range.
    assert one(m, MV, 0, UpgradeType.SAFE_DOWNGRADE) == invalid(
        0, MV, f"Local controller {NODE} only supports versions 1-21")


def test_range_rendering() -> None:
    assert range_to_string(1, 21) == "1-21"
    assert range_to_string(3, 3) == "3"
    assert range_to_string(2, 32767) == "2+"
    assert reason_not_supported(5, "Broker 1", (2, 32767)) is None
    assert reason_not_supported(1, "Broker 1", (2, 32767)) == "Broker 1 only supports versions 2+"
    assert reason_not_supported(1, "Broker 1", (0, 0)) == "Broker 1 does not support this feature."
    assert reason_not_supported(0, "Broker 1", (0, 0)) is None
    m = manager(supported={MV: (1, 21), KV: (1, 1)})
    assert one(m, KV, 0, UpgradeType.SAFE_DOWNGRADE) == invalid(0, KV, f"Local controller {NODE} only supports versions 1")


def test_every_registered_broker_range_first_failure_in_id_order() -> None:
    m = manager([mv(20), broker(2, {MV: (1, 20), KV: (0, 1)}), broker(1, {MV: (1, 19)})])
    assert one(m, MV, 21) == invalid(21, MV, "Broker 1 only supports versions 1-19")
    # A feature the broker does not list counts as [0, 0].
    assert one(m, KV, 1) == invalid(1, KV, "Broker 1 does not support this feature.")
    assert one(m, MV, 19, UpgradeType.SAFE_DOWNGRADE)[0] == 0


def test_fenced_brokers_count_too() -> None:
    # RegisterBrokerRecord starts fenced: Kafka checks every registration, fenced or not.
    m = manager([mv(21), broker(5, {MV: (1, 21)})])
    assert m.ctx.image.cluster.brokers[5].fenced
    assert one(m, KV, 1) == invalid(1, KV, "Broker 5 does not support this feature.")


def test_registered_controllers_checked_from_3_7() -> None:
    recs = [mv(versions.IBP_3_7_IV0), controller(NODE, {MV: (1, 15)}),
            controller(3001, {MV: (1, 20), KV: (0, 1)}), controller(3002, {MV: (1, 21), KV: (0, 1)})]
    m = manager(recs, voters=(NODE, 3001, 3002))
    assert one(m, MV, 21) == invalid(21, MV, "Controller 3001 only supports versions 1-20")
    # The local controller's own registration is skipped: its software range was checked.
    assert one(m, MV, 20) == (0, None, [(MV, 20)])
    m2 = manager(recs[:2] + [controller(3001, {MV: (1, 21)})], voters=(NODE, 3001))
    assert one(m2, KV, 1) == invalid(1, KV, "Controller 3001 does not support this feature.")


def test_every_voter_must_have_registered_from_3_7() -> None:
    recs = [mv(versions.IBP_3_7_IV0), controller(3001, FULL)]
    m = manager(recs, voters=(NODE, 3001, 3002, 3003))
    assert one(m, MV, 21) == invalid(
        21, MV, "controller 3002 has not registered, and may not support this feature")
    # The local node never needs a registration of its own.
    assert one(manager(recs, voters=(NODE, 3001)), MV, 21) == (0, None, [(MV, 21)])


def test_a_quorum_of_several_voters_refuses_to_upgrade_kraft_version() -> None:
    """Kafka 4.1+ upgrades kraft.version in its Raft layer, writing a VotersRecord of every voter;
    kraftsim writes it for a lone voter only, and a quorum of several says so."""
    r44 = versions.release("4.4")
    top = r44.supported_features()[MV][1]
    voters = {NODE: (0, 1), 3001: (0, 1)}
    recs = [mv(top), *(controller(v, {MV: (1, top), KV: kv}) for v, kv in voters.items())]
    upgrade = request((KV, 1, int(UpgradeType.UPGRADE)))
    res = manager(recs, voters=tuple(voters), release=r44).update_features(upgrade, UF[1])
    assert res.response is not None and not res.records
    assert (res.response.error_code, res.response.error_message) == (
        INVALID, "The update failed for all features since the following feature had an error: "
                 "Invalid update version 1 for feature kraft.version. kraftsim upgrades kraft.version only in a quorum of one voter.")
    res = manager(recs[:2], voters=(NODE,), release=r44).update_features(upgrade, UF[1])
    assert res.response is not None and res.response.error_code == 0
    assert [type(r).__name__ for r, _ in res.records] == ["NoOpRecord"]  # the Raft layer writes the rest


def test_brokers_are_checked_before_controllers() -> None:
    m = manager([mv(21), broker(1, {MV: (1, 20)})], voters=(NODE, 3009))
    assert one(m, MV, 21, UpgradeType.UPGRADE)[1] == f"Invalid update version 21 for feature {MV}. " \
        "Broker 1 only supports versions 1-20"


def test_controller_checks_skipped_below_3_7() -> None:
    recs = [mv(versions.IBP_3_6_IV2), controller(3001, {MV: (1, 14)})]
    m = manager(recs, voters=(NODE, 3001, 3002))
    assert one(m, MV, 21) == (0, None, [(MV, 21)])


def test_downgrade_needs_a_downgrade_type() -> None:
    m = manager([mv(21), feature(KV, 1)])
    assert one(m, KV, 0) == invalid(0, KV, "Can't downgrade the version of this feature without setting "
                                           "the upgrade type to either safe or unsafe downgrade.")
    assert one(m, MV, 20) == invalid(20, MV, "Can't downgrade the version of this feature without setting "
                                             "the upgrade type to either safe or unsafe downgrade.")


@pytest.mark.parametrize("utype", [UpgradeType.SAFE_DOWNGRADE, UpgradeType.UNSAFE_DOWNGRADE])
def test_cannot_downgrade_to_a_newer_version(utype: UpgradeType) -> None:
    m = manager([mv(20)])
    assert one(m, KV, 1, utype) == invalid(1, KV, "Can't downgrade to a newer version.")
    assert one(m, MV, 21, utype) == invalid(21, MV, "Can't downgrade to a newer version.")


@pytest.mark.parametrize("utype", list(UpgradeType)[1:])
def test_same_level_is_allowed_with_any_type_and_still_written(utype: UpgradeType) -> None:
    m = manager([mv(21), feature(KV, 1)])
    assert one(m, KV, 1, utype) == (0, None, [(KV, 1)])
    assert one(m, MV, 21, utype) == (0, None, [(MV, 21)])


def test_support_checks_come_before_the_direction_checks() -> None:
    # Downgrading to an unsupported level names the support problem, not the upgrade type.
    m = manager([mv(21), broker(1, {MV: (10, 21)})])
    assert one(m, MV, 9) == invalid(9, MV, "Broker 1 only supports versions 10-21")


# ----- §4.3 metadata.version ------------------------------------------------------------------

def test_unknown_metadata_version() -> None:
    m = manager(supported={MV: (1, 40)})
    assert one(m, MV, 30) == invalid_mv(30, "Unknown metadata.version.")


@pytest.mark.parametrize("state", [ZkMigrationState.PRE_MIGRATION, ZkMigrationState.MIGRATION])
def test_no_metadata_version_change_during_zk_migration(state: ZkMigrationState) -> None:
    m = manager([mv(20), migration(state)])
    assert one(m, MV, 21) == invalid_mv(21, "Unable to modify metadata.version while a ZK migration is in progress.")
    # Other features are not gated by the migration.
    assert one(m, KV, 1) == (0, None, [(KV, 1)])


@pytest.mark.parametrize("state", [ZkMigrationState.NONE, ZkMigrationState.POST_MIGRATION])
def test_metadata_version_change_allowed_outside_migration(state: ZkMigrationState) -> None:
    assert one(manager([mv(20), migration(state)]), MV, 21) == (0, None, [(MV, 21)])


@pytest.mark.parametrize("level", [1, 2, 3])
def test_metadata_version_below_3_3_iv0(level: int) -> None:
    m = manager([mv(21)])
    assert one(m, MV, level, UpgradeType.SAFE_DOWNGRADE) == invalid_mv(
        level, "Unable to set a metadata.version less than 3.3-IV0")


def test_minimum_bootstrap_is_allowed_when_nothing_changed_on_the_way() -> None:
    # 3.3-IV0 (4) from 3.2... is impossible; from 4 itself it is a same-level write.
    assert one(manager([mv(4)]), MV, 4) == (0, None, [(MV, 4)])


def test_downgrade_across_a_metadata_change() -> None:
    m = manager([mv(21)])
    # 3.7-IV2 (17) changed records; 21 -> 16 crosses it.
    assert one(m, MV, 16, UpgradeType.SAFE_DOWNGRADE) == invalid_mv(
        16, "Refusing to perform the requested downgrade because it might delete metadata information.")
    assert one(m, MV, 16, UpgradeType.UNSAFE_DOWNGRADE) == invalid_mv(
        16, "Unsafe metadata downgrade is not supported in this version.")


@pytest.mark.parametrize("utype", [UpgradeType.SAFE_DOWNGRADE, UpgradeType.UNSAFE_DOWNGRADE])
def test_downgrade_without_a_metadata_change(utype: UpgradeType) -> None:
    # 3.7-IV3 (18) .. 3.9-IV0 (21) changed no record format.
    m = manager([mv(21)])
    assert one(m, MV, 17, utype) == (0, None, [(MV, 17)])  # 17 itself changed; crossing 18..21 did not
    assert one(m, MV, 18, utype) == (0, None, [(MV, 18)])


def test_metadata_version_upgrade_record_and_replay() -> None:
    m = manager([mv(versions.IBP_3_3_IV0)])
    res = m.update_features(request((MV, 21, 1)), UF[1])
    assert results(res) == [(MV, 0, None)]
    assert [(r.name, r.feature_level, v) for r, v in res.records] == [(MV, 21, 0)]
    apply(m, res)
    assert m.ctx.image.metadata_version == 21


# ----- §4.4 records and response --------------------------------------------------------------

def test_partial_success_is_one_atomic_batch() -> None:
    m = manager([mv(20), broker(1, FULL)])
    res = m.update_features(request((MV, 21, 1), (KV, 2, 1), ("group.version", 1, 1), (KV + "x", 0, 2)), UF[1])
    assert results(res) == [  # ordered by name, as Kafka's TreeMap orders them
        ("group.version", INVALID, f"Invalid update version 1 for feature group.version. "
                                   f"Local controller {NODE} does not support this feature."),
        (KV, INVALID, f"Invalid update version 2 for feature {KV}. Local controller {NODE} only supports versions 0-1"),
        (KV + "x", 0, None),  # disabling an unknown feature passes every [0, 0] range
        (MV, 0, None),
    ]
    assert res.atomic is True
    assert [(r.name, r.feature_level) for r, _ in res.records] == [(KV + "x", 0), (MV, 21)]
    assert res.response.error_code == 0


def test_validate_only_writes_nothing_and_reports_the_same() -> None:
    m = manager([mv(20)])
    req = request((MV, 21, 1), (KV, 2, 1))
    real = m.update_features(req, UF[1])
    dry = m.update_features(request((MV, 21, 1), (KV, 2, 1), validate_only=True), UF[1])
    assert dry.records == []
    assert results(dry) == results(real)
    assert len(real.records) == 1


def test_level_zero_removes_a_feature() -> None:
    m = manager([mv(21), feature(KV, 1)])
    assert m.finalized_features()[1] == {MV: 21, KV: 1}
    res = m.update_features(request((KV, 0, int(UpgradeType.SAFE_DOWNGRADE))), UF[1])
    assert results(res) == [(KV, 0, None)]
    assert [(r.name, r.feature_level) for r, _ in res.records] == [(KV, 0)]
    apply(m, res)
    assert m.finalized_features() == (3, {MV: 21})  # the KV record at offset 3
    assert m.ctx.image.features.level(KV) == 0


def test_duplicate_feature_names_last_entry_wins() -> None:
    m = manager([mv(21)])
    res = m.update_features(request((KV, 1, 1), (KV, 5, 1)), UF[1])
    assert results(res) == [(KV, INVALID, f"Invalid update version 5 for feature {KV}. "
                                          f"Local controller {NODE} only supports versions 0-1")]
    res = m.update_features(request((KV, 5, 1), (KV, 1, 1)), UF[1])
    assert results(res) == [(KV, 0, None)]
    assert len(res.records) == 1


def test_empty_request_is_an_empty_success() -> None:
    res = manager().update_features(request(), UF[1])
    assert res.records == [] and results(res) == []


def test_oversized_batch_fails_the_whole_request() -> None:
    m = manager()
    req = request(*[(f"f{i}", 0, int(UpgradeType.SAFE_DOWNGRADE)) for i in range(MAX_RECORDS_PER_USER_OP + 1)])
    with pytest.raises(ApiError) as e:
        m.update_features(req, UF[1])
    assert e.value.code == ErrorCode.POLICY_VIOLATION
    assert e.value.message == "Unable to perform excessively large batch operation."
    resp = error_response(req, 1, e.value.code, e.value.message)  # what the API layer sends
    assert (resp.error_code, resp.error_message, resp.results) == (44, e.value.message, [])


# ----- v0: AllowDowngrade is ignored, as a 3.9 controller ignores it ------------------------

def v0_request(*updates: tuple[str, int, bool]) -> Message:
    return Req(feature_updates=[Req.FeatureUpdateKey(feature=n, max_version_level=lv, allow_downgrade=a)
                                for n, lv, a in updates])


DOWNGRADE_NEEDS_TYPE = ("Can't downgrade the version of this feature without setting the upgrade type to either "
                        "safe or unsafe downgrade.")


@pytest.mark.parametrize("allow", [True, False])
def test_v0_reads_the_default_upgrade_type_whatever_allow_downgrade_says(allow: bool) -> None:
    m = manager([mv(21), feature(KV, 1)])
    # Round-trip through the wire so the request is exactly what a v0 client sends.
    req = Req.decode(v0_request((KV, 0, allow), (MV, 20, allow), (TV, 0, allow)).encode(0), 0)
    assert {fu.upgrade_type for fu in req.feature_updates} == {int(UpgradeType.UPGRADE)}
    res = m.update_features(req, UF[0])
    assert results(res) == [
        (KV, INVALID, f"Invalid update version 0 for feature {KV}. {DOWNGRADE_NEEDS_TYPE}"),
        (MV, INVALID, f"Invalid update version 20 for feature {MV}. {DOWNGRADE_NEEDS_TYPE}"),
        (TV, 0, None),  # the same level: no downgrade
    ]
    assert [(r.name, r.feature_level) for r, _ in res.records] == [(TV, 0)]


def test_v0_upgrade_with_allow_downgrade_is_an_upgrade() -> None:
    req = Req.decode(v0_request((MV, 21, True)).encode(0), 0)
    res = manager([mv(20)]).update_features(req, UF[0])
    assert results(res) == [(MV, 0, None)]
    assert [(r.name, r.feature_level) for r, _ in res.records] == [(MV, 21)]


def test_v1_ignores_allow_downgrade_and_v0_has_no_validate_only() -> None:
    req = request((KV, 1, 1), validate_only=True)
    decoded = Req.decode(req.replace(validate_only=False).encode(0), 0)
    assert decoded.validate_only is False
    res = manager().update_features(decoded, UF[0])
    assert len(res.records) == 1


@pytest.mark.parametrize("version", [0, 1])
def test_response_encodes_at_every_version(version: int) -> None:
    m = manager([mv(20)])
    res = m.update_features(request((MV, 21, 1), (KV, 9, 1)), UF[1])
    assert res.response is not None
    back = Resp.decode(res.response.encode(version), version)
    assert [(r.feature, r.error_code, r.error_message) for r in back.results] == results(res)
    assert back.error_code == 0
    assert versions.release().controller_apis[57] == (0, 1)  # a 3.9 controller has no v2 (top-level-only errors)

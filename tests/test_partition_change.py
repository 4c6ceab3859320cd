"""PartitionChangeBuilder (controller/managers/partition_change.py): elections, ISR, epochs, no-ops.

Each produced record is also replayed into an image to check the epochs Kafka's merge gives.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from kraftsim.controller.managers.partition_change import Election, PartitionChangeBuilder, build, election_from_wire
from kraftsim.metadata import versions
from kraftsim.metadata.image import MetadataImage
from kraftsim.metadata.image.topics import RECOVERING, Partition
from kraftsim.metadata.records import by_name

R = by_name
TID = uuid.UUID(int=0xBEEF)
MV = versions.IBP_3_9_IV0


def image(mv: int = MV, replicas: tuple[int, ...] = (1, 2, 3), isr: tuple[int, ...] | None = None,
          leader: int = 1, lrs: int = 0, **kw: object) -> MetadataImage:
    img = MetadataImage()
    img.replay(R("FeatureLevelRecord")(name="metadata.version", feature_level=mv), 0)
    img.replay(R("TopicRecord")(name="t", topic_id=TID), 1)
    img.replay(R("PartitionRecord")(partition_id=0, topic_id=TID, replicas=list(replicas),
                                    isr=list(replicas if isr is None else isr), leader=leader,
                                    leader_recovery_state=lrs, leader_epoch=5, partition_epoch=7, **kw), 2)
    return img


def part(img: MetadataImage) -> Partition:
    p = img.topics.partition(TID, 0)
    assert p is not None
    return p


def accept(*ok: int) -> Callable[[int], bool]:
    return lambda r: r in ok


def run(img: MetadataImage, acceptable: Callable[[int], bool], **kw: object):  # type: ignore[no-untyped-def]
    return build(part(img), TID, 0, acceptable, img.metadata_version, **kw)


def apply(img: MetadataImage, rv) -> Partition:  # type: ignore[no-untyped-def]
    rec, version = rv
    rec.encode(version)  # writable at the version chosen
    img.replay(rec, img.offset + 1)
    return part(img)


# ----- no-ops -----------------------------------------------------------------------------------

def test_nothing_changes_no_record() -> None:
    img = image()
    assert run(img, accept(1, 2, 3)) is None
    assert run(img, accept(1, 2, 3), target_isr=(1, 2, 3)) is None
    # Leaderless and nobody acceptable: still nothing to write.
    img = image(isr=(1,), leader=-1)
    assert run(img, accept()) is None


def test_preferred_election_not_needed_when_already_preferred() -> None:
    assert run(image(), accept(1, 2, 3), election=Election.PREFERRED) is None


# ----- elections ------------------------------------------------------------------------------

def test_preferred_moves_leader_to_first_replica() -> None:
    img = image(leader=2)
    rv = run(img, accept(1, 2, 3), election=Election.PREFERRED)
    rec, _ = rv
    assert (rec.leader, rec.isr, rec.leader_recovery_state) == (1, None, -1)
    p = apply(img, rv)
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (1, 6, 8)


def test_preferred_keeps_current_leader_when_first_replica_unacceptable() -> None:
    assert run(image(leader=3), accept(2, 3), election=Election.PREFERRED) is None


def test_preferred_falls_back_to_replica_order_among_rest() -> None:
    rec, _ = run(image(leader=1, isr=(1, 2, 3)), accept(3, 2), election=Election.PREFERRED)
    assert rec.leader == 2


def test_online_keeps_valid_leader_and_otherwise_picks_in_replica_order() -> None:
    img = image(replicas=(3, 1, 2), leader=1)
    assert run(img, accept(1, 2, 3)) is None
    rec, _ = run(img, accept(2, 3), target_isr=(3, 2))  # 1 leaves the ISR and leadership
    assert (rec.leader, rec.isr) == (3, [3, 2])


def test_online_does_not_pick_outside_isr() -> None:
    img = image(isr=(1,), leader=1)
    rec, _ = run(img, accept(2, 3), target_isr=())
    assert rec.leader == -1 and rec.isr is None  # an empty ISR is never written
    p = apply(img, (rec, 1))
    assert (p.leader, p.isr, p.leader_epoch) == (-1, (1,), 6)


def test_unclean_picks_acceptable_replica_outside_isr_and_marks_recovering() -> None:
    img = image(isr=(1,), leader=-1)
    rv = run(img, accept(3, 2), election=Election.UNCLEAN)
    rec, version = rv
    assert (rec.leader, rec.isr, rec.leader_recovery_state, version) == (2, [2], RECOVERING, 1)
    p = apply(img, rv)
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)


def test_unclean_prefers_clean_choice() -> None:
    rec, _ = run(image(isr=(1, 3), leader=1), accept(2, 3), target_isr=(3,), election=Election.UNCLEAN)
    assert (rec.leader, rec.isr, rec.leader_recovery_state) == (3, [3], -1)


def test_unclean_already_recovering_or_old_mv_has_no_recovery_field() -> None:
    rec, _ = run(image(isr=(1,), leader=-1, lrs=RECOVERING), accept(2), election=Election.UNCLEAN)
    assert rec.leader_recovery_state == -1 and rec.isr == [2]
    rec, _ = run(image(mv=versions.IBP_3_1_IV0, isr=(1,), leader=-1), accept(2), election=Election.UNCLEAN)
    assert rec.leader_recovery_state == -1 and rec.isr == [2]


def test_election_wire_values() -> None:
    assert election_from_wire(0) == Election.PREFERRED and election_from_wire(1) == Election.UNCLEAN
    with pytest.raises(ValueError):
        election_from_wire(2)


# ----- ISR changes and leader-epoch bumps -------------------------------------------------------------

@pytest.mark.parametrize("mv,zk,bump", [(versions.IBP_3_5_IV2, False, True), (versions.IBP_3_6_IV0, False, False),
                                        (MV, False, False), (MV, True, True)])
def test_isr_shrink_bumps_leader_epoch_below_3_6_or_with_migration(mv: int, zk: bool, bump: bool) -> None:
    img = image(mv=mv)
    rv = run(img, accept(1, 2, 3), target_isr=(1, 2), zk_migration_enabled=zk)
    rec, _ = rv
    assert rec.isr == [1, 2]
    assert rec.leader == (1 if bump else -2)
    p = apply(img, rv)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, (1, 2), 6 if bump else 5, 8)


def test_isr_expansion_never_bumps_leader_epoch() -> None:
    img = image(mv=versions.IBP_3_5_IV2, isr=(1, 2))
    rec, _ = run(img, accept(1, 2, 3), target_isr=(1, 2, 3))
    assert (rec.isr, rec.leader) == ([1, 2, 3], -2)


def test_isr_reorder_is_a_change() -> None:
    rec, _ = run(image(), accept(1, 2, 3), target_isr=(1, 3, 2))
    assert rec.isr == [1, 3, 2]


def test_leader_removed_from_isr_elects_and_bumps_once() -> None:
    img = image()
    rv = run(img, accept(2, 3), target_isr=(2, 3))
    rec, _ = rv
    assert (rec.leader, rec.isr) == (2, [2, 3])
    p = apply(img, rv)
    assert (p.leader_epoch, p.partition_epoch) == (6, 8)


def test_target_recovery_state_change() -> None:
    img = image(isr=(2,), leader=2, lrs=RECOVERING)
    rec, _ = run(img, accept(1, 2, 3), target_leader_recovery_state=0)
    assert (rec.leader_recovery_state, rec.leader, rec.isr) == (0, -2, None)


# ----- record versions, directories, reassignment -------------------------------------------------------

@pytest.mark.parametrize("mv,version", [(versions.IBP_3_0_IV1, 0), (versions.IBP_3_7_IV1, 0),
                                        (versions.IBP_3_7_IV2, 1), (MV, 1), (versions.IBP_4_0_IV0, 2)])
def test_record_version_by_mv(mv: int, version: int) -> None:
    supported = versions.release().supported_features(enable_unstable=True)
    img = MetadataImage(supported)
    img.replay(R("FeatureLevelRecord")(name="metadata.version", feature_level=mv), 0)
    img.replay(R("TopicRecord")(name="t", topic_id=TID), 1)
    img.replay(R("PartitionRecord")(partition_id=0, topic_id=TID, replicas=[1, 2], isr=[1, 2], leader=1,
                                    leader_epoch=0, partition_epoch=0), 2)
    rv = run(img, accept(1, 2), target_isr=(1,))
    assert rv is not None and rv[1] == version and rv[0].directories is None
    apply(img, rv)


def test_dropping_replicas_bumps_epoch_and_assigns_default_dirs() -> None:
    d = [uuid.UUID(int=(i + 1) << 64) for i in range(4)]
    img = image(directories=d[:3])
    p = part(img)
    rv = PartitionChangeBuilder(p, TID, 0, accept(1, 2, 3, 4), MV, default_dir=lambda b: d[b - 1],
                                target_replicas=[1, 2, 4], target_isr=[1, 2]).build()
    rec, _ = rv
    assert rec.replicas == [1, 2, 4] and rec.leader == 1  # 3 dropped: forced leader-epoch bump
    assert rec.directories == [d[0], d[1], d[3]]
    p = apply(img, rv)
    assert (p.replicas, p.directories, p.leader_epoch) == ((1, 2, 4), (d[0], d[1], d[3]), 6)


def test_directories_not_written_below_3_7_iv2() -> None:
    img = image(mv=versions.IBP_3_7_IV1)
    rec, _ = PartitionChangeBuilder(part(img), TID, 0, accept(1, 2, 3, 4), img.metadata_version,
                                    target_replicas=[1, 2, 3, 4]).build()
    assert rec.directories is None and rec.replicas == [1, 2, 3, 4] and rec.leader == -2


def test_reassignment_completes_when_isr_covers_target() -> None:
    # Moving [1,2,3] -> [1,2,4]: replicas [1,2,3,4], removing [3], adding [4].
    img = image(replicas=(1, 2, 3, 4), isr=(1, 2, 3), removing_replicas=[3], adding_replicas=[4])
    p = part(img)
    rv = PartitionChangeBuilder(p, TID, 0, accept(1, 2, 3, 4), MV, default_dir=lambda b: uuid.UUID(int=0),
                                target_isr=[1, 2, 3, 4]).build()
    rec, _ = rv
    assert (rec.replicas, rec.isr, rec.removing_replicas, rec.adding_replicas) == ([1, 2, 4], [1, 2, 4], [], [])
    assert rec.leader == 1  # replica 3 dropped
    p = apply(img, rv)
    assert (p.replicas, p.isr, p.removing_replicas, p.adding_replicas, p.leader) == ((1, 2, 4), (1, 2, 4), (), (), 1)


def test_reassignment_not_complete_while_adding_missing_from_isr() -> None:
    img = image(replicas=(1, 2, 3, 4), isr=(1, 2, 3), removing_replicas=[3], adding_replicas=[4])
    assert run(img, accept(1, 2, 3, 4)) is None


def test_elr_not_modelled() -> None:
    img = image()
    with pytest.raises(NotImplementedError):
        PartitionChangeBuilder(part(img), TID, 0, accept(1), MV, eligible_leader_replicas_enabled=True)

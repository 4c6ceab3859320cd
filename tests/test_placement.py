"""StripedReplicaPlacer: rack spread, striping, leader balance, errors, determinism."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftsim.controller.managers.placement import (
    InvalidReplicationFactor,
    StripedReplicaPlacer,
    UsableBroker,
    check_replication_factor,
)
from kraftsim.rpc.error_codes import ErrorCode


def brokers(n: int, racks: int = 0, fenced: tuple[int, ...] = ()) -> list[UsableBroker]:
    return [UsableBroker(i, f"r{i % racks}" if racks else None, i in fenced) for i in range(n)]


def place(n: int, rf: int, bs: list[UsableBroker], seed: int = 1) -> list[list[int]]:
    return StripedReplicaPlacer(random.Random(seed)).place(n, rf, bs)


def test_replication_factor_and_distinct_replicas() -> None:
    for p in place(100, 3, brokers(7)):
        assert len(p) == 3 and len(set(p)) == 3


def test_replicas_spread_over_racks() -> None:
    bs = brokers(12, racks=3)
    rack = {b.id: b.rack for b in bs}
    for p in place(200, 3, bs):
        assert len({rack[b] for b in p}) == 3
    for p in place(200, 5, bs):  # more replicas than racks: every rack still used
        assert len({rack[b] for b in p}) == 3


def test_leaders_spread_evenly() -> None:
    parts = place(3000, 3, brokers(30, racks=3))
    leaders = Counter(p[0] for p in parts)
    assert set(leaders) == set(range(30))
    assert max(leaders.values()) - min(leaders.values()) <= 2
    replicas = Counter(b for p in parts for b in p)
    assert max(replicas.values()) - min(replicas.values()) <= 3


def test_leaders_spread_without_racks() -> None:
    leaders = Counter(p[0] for p in place(600, 2, brokers(6)))
    assert set(leaders.values()) == {100}


def test_deterministic_with_seed_and_different_without() -> None:
    bs = brokers(9, racks=3)
    assert place(50, 3, bs, seed=42) == place(50, 3, bs, seed=42)
    assert any(place(50, 3, bs, seed=s) != place(50, 3, bs, seed=42) for s in range(5))


def test_fenced_brokers_only_as_followers_after_unfenced() -> None:
    bs = brokers(4, fenced=(2, 3))
    for p in place(50, 3, bs):
        assert p[0] in (0, 1)
        assert set(p[:2]) == {0, 1}  # unfenced first, then a fenced one
    for p in place(50, 2, bs):
        assert set(p) == {0, 1}


def test_single_unfenced_broker_does_not_loop() -> None:
    assert place(5, 1, brokers(1)) == [[0]] * 5


@pytest.mark.parametrize("n,rf,bs,message", [
    (1, 0, brokers(3), "Invalid replication factor 0: the replication factor must be positive."),
    (1, 4, brokers(3), "The target replication factor of 4 cannot be reached because only 3 broker(s) are "
                       "registered."),
    (1, 1, brokers(2, fenced=(0, 1)), "All brokers are currently fenced."),
    (1, 1, [], "All brokers are currently fenced."),
])
def test_errors(n: int, rf: int, bs: list[UsableBroker], message: str) -> None:
    with pytest.raises(InvalidReplicationFactor) as e:
        place(n, rf, bs)
    assert (e.value.code, e.value.message) == (ErrorCode.INVALID_REPLICATION_FACTOR, message)


def test_no_rack_sorts_first_and_mixed_racks_work() -> None:
    bs = [UsableBroker(1, None, False), UsableBroker(2, "a", False), UsableBroker(3, "b", False)]
    for p in place(30, 3, bs):
        assert sorted(p) == [1, 2, 3]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.integers(0, 4), st.sets(st.integers(0, 11)), st.integers(1, 5), st.integers(0, 60),
       st.integers(0, 2**32))
def test_place_many_is_place_one_at_a_time(n: int, racks: int, fenced: set[int], rf: int, count: int,
                                           seed: int) -> None:
    """The placer's loop (_RackList.place_many, _BrokerList.next inlined) hands out the same
    replica lists, from the same random draws, as the plain walk (place_one) called once per
    partition: racks or none, fenced brokers, replication factors over the rack count,
    reshuffles, and the same refusals."""
    from kraftsim.controller.managers.placement import _RackList

    bs = [UsableBroker(i, f"r{i % racks}" if racks and i % 5 else None, i in fenced) for i in range(n)]

    def outcome(many: bool) -> tuple[object, object]:
        rng = random.Random(seed)
        rl = _RackList(rng, bs)
        try:
            got = rl.place_many(count, rf) if many else [place_one(rl, rf) for _ in range(count)]
        except InvalidReplicationFactor as e:
            got = e.message if many or count else None
        return got, rng.getstate()

    many, single = outcome(True), outcome(False)
    assert many[1] == single[1]
    assert many[0] == single[0] or (count == 0 and isinstance(many[0], str))


def place_one(rl: Any, replication_factor: int) -> list[int]:
    """Kafka's StripedReplicaPlacer walk for one partition, written plainly over
    ``_BrokerList.next``: the oracle of ``_RackList.place_many``'s inlined loop."""
    check_replication_factor(replication_factor, rl.num_total, rl.num_unfenced)
    if rl.epoch == rl.num_unfenced and rl.num_unfenced > 1:  # a round over: reshuffle
        rl.shuffle()
        rl.epoch = 0
    names, racks = rl.rack_names, rl.racks
    if rl.offset == len(names):
        rl.offset = 0
    epoch = rl.epoch
    first = rl.offset  # the leader: the first unfenced broker walking the racks from the offset
    while (leader := racks[names[first]].unfenced.next(epoch)) < 0:
        first = (first + 1) % len(names)
    out = [leader]
    rack_index = rl.offset  # followers: one per rack in turn, skipping the leader's rack once
    for _ in range(1, replication_factor):
        result = -1
        while result < 0:
            if rack_index == first:
                first = -1
            else:
                rack = racks[names[rack_index]]
                result = rack.unfenced.next(epoch)
                if result < 0:
                    result = rack.fenced.next(epoch)
            rack_index = (rack_index + 1) % len(names)
        out.append(result)
    rl.epoch += 1
    rl.offset += 1
    return out

"""Replica placement: Kafka 3.9's ``StripedReplicaPlacer``, and which brokers it may use.

Why striped: partition ``p`` starts one rack (and, within a rack, one broker) further along than
partition ``p-1``, so leaders spread evenly and the replicas of a partition land on distinct
racks whenever there are enough racks. Racks and brokers start at random offsets so many small
topics do not all put their leaders on the same broker; after one full round over the unfenced
brokers the rack and broker orders are shuffled so the same pattern does not repeat.

Usable brokers are every registered broker *not in controlled shutdown*; fenced brokers are
usable too, but only as followers and only once the unfenced brokers of a rack are exhausted
(the leader, the first replica, is always unfenced). This is Kafka's behaviour, not the
"unfenced only" simplification; the ISR of a new partition then excludes the fenced replicas.

The placer's error messages are Kafka's bare InvalidReplicationFactorException messages; the
caller (CreateTopics, CreatePartitions) prefixes "Unable to replicate the partition N time(s): ".
Randomness comes from an injectable :class:`random.Random` so tests are deterministic. The
random sequence is not Java's, so concrete placements differ from a real Kafka; the properties
(striping, rack spread, leader balance) are the same.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from kraftsim.metadata.image.image import MetadataImage
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.error_codes import ErrorCode


@dataclass(frozen=True, slots=True)
class UsableBroker:
    id: int
    rack: str | None
    fenced: bool


class InvalidReplicationFactor(ApiError):
    """INVALID_REPLICATION_FACTOR with the placer's bare message."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.INVALID_REPLICATION_FACTOR, message)


def usable_brokers(image: MetadataImage,
                   shutting_down: Callable[[int], bool] | None = None) -> Iterator[UsableBroker]:
    """Registered brokers not in controlled shutdown and not with every log directory cordoned
    (BrokerHeartbeatManager.usableBrokers).

    ``shutting_down`` is the active controller's heartbeat soft state (a controlled-shutdown
    offset), and when given it is the only judge, as in Kafka: the image's InControlledShutdown
    flag survives a failover, but the new active controller's heartbeat manager starts without
    shutdown offsets, so such a broker is usable again until it asks to shut down anew. Without
    it (tools reading an image) the image's flag stands in."""
    for b in image.cluster.brokers.values():
        if shutting_down(b.id) if shutting_down is not None else b.in_controlled_shutdown:
            continue
        if not b.has_uncordoned_dirs:  # 4.3+: every directory cordoned (KIP-1066)
            continue
        yield UsableBroker(b.id, b.rack, b.fenced)


class _BrokerList:
    """The brokers of one rack (fenced or unfenced), walked round-robin from a moving offset."""

    __slots__ = ("brokers", "index", "offset", "epoch")

    def __init__(self) -> None:
        self.brokers: list[int] = []
        self.index = 0
        self.offset = 0
        self.epoch = 0

    def initialize(self, rng: random.Random) -> None:
        if self.brokers:
            self.brokers.sort()
            self.offset = rng.randrange(len(self.brokers))

    def shuffle(self, rng: random.Random) -> None:
        rng.shuffle(self.brokers)

    def next(self, epoch: int) -> int:
        """The next broker for this placement round, or -1 once every broker was handed out."""
        brokers = self.brokers
        n = len(brokers)
        if not n:
            return -1
        if self.epoch != epoch:
            self.epoch = epoch
            self.index = 0
            self.offset = (self.offset + 1) % n
        if self.index >= n:
            return -1
        broker = brokers[(self.index + self.offset) % n]
        self.index += 1
        return broker


class _Rack:
    """A rack's brokers: followers come from its unfenced brokers first, then its fenced ones."""

    __slots__ = ("fenced", "unfenced")

    def __init__(self) -> None:
        self.fenced = _BrokerList()
        self.unfenced = _BrokerList()


def _rack_order(name: str | None) -> tuple[int, str]:
    """OptionalStringComparator: brokers without a rack sort before every named rack."""
    return (0, "") if name is None else (1, name)


class _RackList:
    """One topic's placement state: created per CreateTopics topic, as Kafka does."""

    def __init__(self, rng: random.Random, brokers: Iterable[UsableBroker]) -> None:
        self.rng = rng
        self.racks: dict[str | None, _Rack] = {}
        total = unfenced = 0
        for b in brokers:
            rack = self.racks.get(b.rack)
            if rack is None:
                rack = self.racks[b.rack] = _Rack()
            if b.fenced:
                rack.fenced.brokers.append(b.id)
            else:
                rack.unfenced.brokers.append(b.id)
                unfenced += 1
            total += 1
        self.rack_names: list[str | None] = sorted(self.racks, key=_rack_order)
        for name in self.rack_names:  # deterministic for a seeded rng (Kafka: HashMap order)
            rack = self.racks[name]
            rack.fenced.initialize(rng)
            rack.unfenced.initialize(rng)
        self.num_total = total
        self.num_unfenced = unfenced
        self.epoch = 0
        self.offset = rng.randrange(len(self.rack_names)) if self.rack_names else 0

    def shuffle(self) -> None:
        self.rng.shuffle(self.rack_names)
        for name in sorted(self.racks, key=_rack_order):
            rack = self.racks[name]
            rack.fenced.shuffle(self.rng)
            rack.unfenced.shuffle(self.rng)

    def place_many(self, count: int, replication_factor: int, cordoned_words: bool = False) -> list[list[int]]:
        """Replica lists for ``count`` partitions, the leader first: Kafka's walk for one
        partition, repeated, with the refusals checked once (nothing they look at changes in
        between) and ``_BrokerList.next`` inlined for unfenced brokers (a million partitions
        call it three million times). ``tests/test_placement.py`` keeps the plain walk, one
        partition at a time over ``_BrokerList.next``, as its oracle.

        After as many partitions as there are unfenced brokers, the racks and brokers are
        reshuffled so the next round does not repeat the same assignments (never for a single
        unfenced broker: that loops)."""
        check_replication_factor(replication_factor, self.num_total, self.num_unfenced, cordoned_words)
        racks = self.racks
        names = self.rack_names  # shuffle() shuffles it in place
        nracks = len(names)
        reshuffle_at = self.num_unfenced if self.num_unfenced > 1 else -1
        epoch, offset = self.epoch, self.offset
        placed: list[list[int]] = []
        for _ in range(count):
            if epoch == reshuffle_at:
                self.shuffle()
                epoch = 0
            if offset == nracks:
                offset = 0
            # The leader: the first unfenced broker found walking the racks from the offset.
            first = offset
            while True:
                bl = racks[names[first]].unfenced
                brokers = bl.brokers
                n = len(brokers)
                if n:
                    if bl.epoch != epoch:
                        bl.epoch = epoch
                        bl.index = 0
                        bl.offset = (bl.offset + 1) % n
                    index = bl.index
                    if index < n:
                        bl.index = index + 1
                        leader = brokers[(index + bl.offset) % n]
                        break
                first += 1
                if first == nracks:
                    first = 0
            out = [leader]
            # Followers: one per rack in turn, skipping the leader's rack once; unfenced
            # brokers first, then fenced ones.
            rack_index = offset
            for _ in range(1, replication_factor):
                result = -1
                while result < 0:
                    if rack_index == first:
                        first = -1
                    else:
                        rack = racks[names[rack_index]]
                        bl = rack.unfenced
                        brokers = bl.brokers
                        n = len(brokers)
                        if n:
                            if bl.epoch != epoch:
                                bl.epoch = epoch
                                bl.index = 0
                                bl.offset = (bl.offset + 1) % n
                            index = bl.index
                            if index < n:
                                bl.index = index + 1
                                result = brokers[(index + bl.offset) % n]
                        if result < 0:
                            result = rack.fenced.next(epoch)
                    rack_index += 1
                    if rack_index == nracks:
                        rack_index = 0
                out.append(result)
            placed.append(out)
            epoch += 1
            offset += 1
        self.epoch, self.offset = epoch, offset
        return placed


def check_replication_factor(replication_factor: int, num_total: int, num_unfenced: int,
                             cordoned_words: bool = False) -> None:
    """The placer's three refusals, in StripedReplicaPlacer.place's order; ``cordoned_words``:
    as 4.3+ word them, naming cordoned log directories too."""
    if replication_factor <= 0:
        raise InvalidReplicationFactor(f"Invalid replication factor {replication_factor}: "
                                       f"the replication factor must be positive.")
    if num_unfenced == 0:
        raise InvalidReplicationFactor("All brokers are currently fenced, or have all their log directories cordoned."
                                       if cordoned_words else "All brokers are currently fenced.")
    if replication_factor > num_total:
        tail = " or some brokers have all their log directories cordoned." if cordoned_words else "."
        raise InvalidReplicationFactor(f"The target replication factor of {replication_factor} cannot be "
                                       f"reached because only {num_total} broker(s) are registered{tail}")


class StripedReplicaPlacer:
    """Places one topic's partitions; keep one instance (and its rng) per controller."""

    def __init__(self, rng: random.Random | None = None, cordoned_words: bool = False) -> None:
        self.rng = rng if rng is not None else random.Random()
        self.cordoned_words = cordoned_words  # refusals in 4.3+'s words (check_replication_factor)

    def place(self, num_partitions: int, replication_factor: int,
              brokers: Iterable[UsableBroker]) -> list[list[int]]:
        """Replica lists for partitions 0..num_partitions-1; the first replica is the leader."""
        racks = _RackList(self.rng, brokers)
        check_replication_factor(replication_factor, racks.num_total, racks.num_unfenced, self.cordoned_words)
        return racks.place_many(num_partitions, replication_factor, self.cordoned_words)

"""A compact set of (topic key, partition id) pairs, used by the image's secondary indexes.

The ISR-membership index holds replication-factor entries per partition; a Python set of tuples
would cost ~100 bytes per entry and dominate the image at 1M partitions. Instead each topic's
partitions are packed as bits of an int, split in chunks of 4096 partitions so that updating a
huge topic copies at most 512 bytes. A topic with a handful of partitions on a broker costs one
dict entry and one small int.
"""

from __future__ import annotations

from collections.abc import Iterator

CHUNK_BITS = 12
CHUNK_SIZE = 1 << CHUNK_BITS
_LOW = CHUNK_SIZE - 1
CHUNK_LOW = _LOW
TOPIC_SHIFT = 20  # room for partition ids < 2**32 in the chunk index


class PartitionSet:
    """Set of partitions keyed by (topic key, partition id >= 0). len() is O(1)."""

    __slots__ = ("_chunks", "_count")

    def __init__(self) -> None:
        self._chunks: dict[int, int] = {}
        self._count = 0

    def add(self, topic_key: int, partition_id: int) -> None:
        key = (topic_key << TOPIC_SHIFT) | (partition_id >> CHUNK_BITS)
        bit = 1 << (partition_id & _LOW)
        chunks = self._chunks
        mask = chunks.get(key, 0)
        if not mask & bit:
            chunks[key] = mask | bit
            self._count += 1

    def discard(self, topic_key: int, partition_id: int) -> None:
        key = (topic_key << TOPIC_SHIFT) | (partition_id >> CHUNK_BITS)
        bit = 1 << (partition_id & _LOW)
        chunks = self._chunks
        mask = chunks.get(key, 0)
        if mask & bit:
            mask ^= bit
            if mask:
                chunks[key] = mask
            else:
                del chunks[key]
            self._count -= 1

    def contains(self, topic_key: int, partition_id: int) -> bool:
        key = (topic_key << TOPIC_SHIFT) | (partition_id >> CHUNK_BITS)
        return bool(self._chunks.get(key, 0) >> (partition_id & _LOW) & 1)

    def __contains__(self, item: tuple[int, int]) -> bool:
        return self.contains(item[0], item[1])

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """(topic key, partition id) pairs; order is unspecified. Do not mutate while iterating."""
        for key, mask in self._chunks.items():
            topic_key = key >> TOPIC_SHIFT
            base = (key & ((1 << TOPIC_SHIFT) - 1)) << CHUNK_BITS
            while mask:
                low = mask & -mask
                yield topic_key, base + low.bit_length() - 1
                mask ^= low

    def clear(self) -> None:
        self._chunks.clear()
        self._count = 0

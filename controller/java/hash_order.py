"""The order in which Java's ``HashMap``/``HashSet`` hand back string keys.

Kafka's controller sometimes walks a ``HashMap<String, ...>`` to produce records or results:
CreateTopics collects a topic's configs into one (``computeConfigChanges``) and writes a
ConfigRecord per entry in its order; the config names of one IncrementalAlterConfigs resource
become ConfigRecords in that order; the topics of a CreatePartitions request come back in
``HashSet`` order. That order is a pure function of the strings, so reproducing it keeps our
log and our responses byte-identical to a real controller's, where a "nicer" order (the
request's) would be a visible difference.

The model: ``String.hashCode`` over UTF-16 units, spread as ``h ^ (h >>> 16)``, bucket
``hash & (capacity - 1)``, capacity 16 doubled while more than 3/4 full, and insertion order
within a bucket (a resize splits a bucket without reordering it). Not modelled: buckets of 8+
colliding keys in a table of 64+, which Java turns into trees with their own order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

_MASK = 0xFFFFFFFF
T = TypeVar("T")


def _unsigned_hash(s: str) -> int:
    h = 0
    if s.isascii():
        for c in s.encode("ascii"):
            h = (31 * h + c) & _MASK
        return h
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _MASK
    return h


def string_hash(s: str) -> int:
    """Java's ``String.hashCode()``, a signed 32-bit int."""
    h = _unsigned_hash(s)
    return h - (1 << 32) if h & 0x80000000 else h


def capacity_for(size: int) -> int:
    """The table size a HashMap reaches after ``size`` distinct insertions."""
    cap = 16
    while size > cap * 3 // 4:
        cap *= 2
    return cap


def hash_order(keys: Iterable[str], capacity: int | None = None) -> list[str]:
    """``keys`` (distinct, in insertion order) in the order a Java HashMap iterates them.

    ``capacity`` is the table size when keys were removed after insertion (a table never
    shrinks); by default it follows from the number of keys."""
    items = list(keys)
    cap = capacity if capacity is not None else capacity_for(len(items))
    mask = cap - 1

    def bucket(k: str) -> int:
        h = _unsigned_hash(k)
        return (h ^ (h >> 16)) & mask

    return sorted(items, key=bucket)  # sorted() is stable: insertion order within a bucket


def hash_map_order(keys: Iterable[str]) -> list[str]:
    """The distinct ``keys`` in the order a ``new HashMap<>()`` filled with them (in this order,
    a repeated key keeping its first place) iterates."""
    return hash_order(dict.fromkeys(keys))


def table_size_for(capacity: int) -> int:
    """HashMap.tableSizeFor: the power of two a ``new HashMap<>(capacity)`` starts with."""
    n = 1
    while n < capacity:
        n *= 2
    return n


def hashmap_capacity(max_size: int, initial: int | None = None) -> int:
    """The table size of a HashMap that once held ``max_size`` entries (a table never shrinks).

    ``initial`` is the constructor's capacity argument (None: ``new HashMap<>()``, 16 buckets).
    Small presized maps matter: a ``new HashMap<>(3)`` keeps 4 buckets for 3 keys, so its order
    differs from a default map's."""
    if initial is None:
        cap, threshold = 16, 12
    else:
        cap = table_size_for(initial)
        threshold = int(cap * 0.75)
    for size in range(1, max_size + 1):
        if size > threshold:
            old = cap
            cap *= 2
            threshold = threshold * 2 if old >= 16 else int(cap * 0.75)
    return cap


def concurrent_hashmap_capacity(max_size: int) -> int:
    """The table size of a default ``new ConcurrentHashMap<>()`` that once held ``max_size``
    entries: it doubles when its size reaches three quarters of the table (a HashMap only once
    it exceeds that)."""
    cap = 16
    while max_size >= cap - (cap >> 2):
        cap <<= 1
    return cap


def spread(h: int) -> int:
    """HashMap.hash: the high half folded into the low one, on the unsigned 32-bit value."""
    h &= _MASK
    return h ^ (h >> 16)


def order_by_hash(keys: Iterable[T], hash_of: Callable[[T], int], capacity: int) -> list[T]:
    """``keys`` (distinct, in insertion order) in the order a HashMap of ``capacity`` buckets
    iterates them, for keys whose ``hashCode`` is ``hash_of(key)``."""
    mask = capacity - 1
    return sorted(keys, key=lambda k: spread(hash_of(k)) & mask)


def string_map_hash(entries: Iterable[tuple[str, str | None]]) -> int:
    """``Map<String, String>.hashCode()``: the sum of ``key.hashCode() ^ value.hashCode()``
    (a null value hashes to 0), as a signed 32-bit int."""
    h = 0
    for k, v in entries:
        h = (h + (_unsigned_hash(k) ^ (0 if v is None else _unsigned_hash(v)))) & _MASK
    return h - (1 << 32) if h & 0x80000000 else h


def scala_table_size(size: int) -> int:
    """The table of a Scala 2.13 ``mutable.HashMap`` built up from empty with ``size`` keys: 16
    buckets, doubled before an insertion would bring the count to three quarters."""
    cap = 16
    while size >= int(cap * 0.75):
        cap *= 2
    return cap


def scala_hash_map_order(keys: Iterable[str]) -> list[str]:
    """The distinct ``keys`` (in insertion order) in the order a Scala 2.13 ``mutable.HashMap``
    built from empty iterates them: by bucket (the spread hash masked by the table size), and
    within a bucket by spread hash as a signed int, insertion order breaking ties. Kafka's
    DescribeConfigs lists a resource's configs in that order.

    Not modelled: a put of a key already present can grow the table a step early; only a map
    filled by first adding keys then re-adding some, within one key of a threshold, differs."""
    items = list(dict.fromkeys(keys))
    mask = scala_table_size(len(items)) - 1

    def position(k: str) -> tuple[int, int]:
        h = spread(_unsigned_hash(k))
        return h & mask, h - (1 << 32) if h & 0x80000000 else h

    return sorted(items, key=position)

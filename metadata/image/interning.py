"""Share identical replica lists, ISRs and directory lists between partitions.

A million partitions over a few dozen brokers use only a few thousand distinct replica tuples,
so keeping one tuple object per distinct value (instead of one list per partition) is most of
the memory saving that lets 1M partitions fit. The caches only grow; their size is bounded by
the number of distinct assignments, which is small next to the partition count.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

EMPTY: tuple = ()

_ints: dict[tuple[int, ...], tuple[int, ...]] = {EMPTY: EMPTY}
_uuids: dict[uuid.UUID, uuid.UUID] = {}
_uuid_tuples: dict[tuple[uuid.UUID, ...], tuple[uuid.UUID, ...]] = {EMPTY: EMPTY}


def ints(values: Iterable[int]) -> tuple[int, ...]:
    """The shared tuple equal to ``values``."""
    t = tuple(values)
    got = _ints.get(t)
    if got is None:
        _ints[t] = t
        return t
    return got


def a_uuid(u: uuid.UUID) -> uuid.UUID:
    """The shared UUID object equal to ``u`` (directory ids repeat across millions of replicas)."""
    got = _uuids.get(u)
    if got is None:
        _uuids[u] = u
        return u
    return got


def uuids(values: Iterable[uuid.UUID]) -> tuple[uuid.UUID, ...]:
    """The shared tuple of shared UUIDs equal to ``values``."""
    t = tuple(values)
    got = _uuid_tuples.get(t)
    if got is None:
        t = tuple(a_uuid(u) for u in t)
        _uuid_tuples[t] = t
        return t
    return got


_ints_by_raw: dict[bytes, tuple[int, ...]] = {}
_uuids_by_raw: dict[bytes, tuple[uuid.UUID, ...]] = {}


def ints_from_raw(raw: bytes) -> tuple[int, ...]:
    """The shared tuple for big-endian int32s as they sit in a record (fast decode path)."""
    got = _ints_by_raw.get(raw)
    if got is None:
        got = ints(int.from_bytes(raw[i:i + 4], "big", signed=True) for i in range(0, len(raw), 4))
        _ints_by_raw[raw] = got
    return got


def uuids_from_raw(raw: bytes) -> tuple[uuid.UUID, ...]:
    """The shared tuple for 16-byte UUIDs as they sit in a record (fast decode path)."""
    got = _uuids_by_raw.get(raw)
    if got is None:
        got = uuids(uuid.UUID(bytes=raw[i:i + 16]) for i in range(0, len(raw), 16))
        _uuids_by_raw[raw] = got
    return got

"""Replay straight from framed record bytes, with a fast path for PartitionRecord.

Loading a snapshot or catching up on a log is dominated by PartitionRecords (a million of them
for a large cluster). Building a generic record object per partition and then converting its
lists into the image's interned tuples does the work twice; here the common shape of a
PartitionRecord (frame v1, record v0/v1/v2, no removing/adding replicas, no tagged fields) is read
directly into the image. Everything after the partition and topic ids is decoded once per
distinct byte string into a Partition that all partitions with those bytes share (Partitions
are never mutated in place; replay replaces them), so a record costs a few dict lookups.

Anything else, including any byte sequence the fast path is unsure about, goes through
``unframe()`` and ``MetadataImage.replay``, so errors (DecodeError, ReplayError) are exactly
those of the general path and the resulting state is identical (tests check both).
"""

from __future__ import annotations

import gc
import struct
from collections.abc import Iterable
from typing import Any

from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.image.interning import ints_from_raw, uuids_from_raw
from kraftsim.metadata.image.journal import Start
from kraftsim.metadata.image.partition_sets import CHUNK_BITS, CHUNK_LOW, TOPIC_SHIFT
from kraftsim.metadata.image.topics import NO_LEADER, Partition, isr_number, migrating_dirs
from kraftsim.metadata.records import unframe

_I32 = struct.Struct(">i")
_I32x3 = struct.Struct(">iii")
_PARTITION_RECORD = 3
_HEAD_V0 = bytes((1, _PARTITION_RECORD, 0))
_HEAD_V1 = bytes((1, _PARTITION_RECORD, 1))
# v2 (4.0-IV1 in 4.x, 3.9's 4.0-IV0) only adds tagged fields (the ELR lists): without them its
# bytes after the ids are v1's, and it shares v1's shapes.
_HEAD_V2 = bytes((1, _PARTITION_RECORD, 2))
_LEADERLESS = 1
_IMBALANCED = 2
_CACHE_MAX = 1 << 17
_MISSING: Any = object()

# A PartitionRecord's bytes after its partition id and topic id (replicas, ISR, leader, epochs,
# directories) - its "shape" - are the same for most partitions of a cluster: a few thousand
# shapes cover a million partitions. Each shape is decoded once into a Partition that every
# partition of that shape shares (Partitions are never mutated: replay replaces them), with its
# ISR's number for the deferred ISR index (TopicsImage.defer_isr) and its index flags. None: not
# the plain shape.
_Shape = tuple[Partition, int, int]
_shapes: tuple[dict[bytes, _Shape | None], dict[bytes, _Shape | None]] = ({}, {})


def _shape(tail: bytes, version: int) -> _Shape | None:
    """Decode (and cache) a PartitionRecord's tail: None unless it is the plain shape (no
    removing/adding replicas, no tagged fields, directories absent or one per replica)."""
    cache = _shapes[version]
    if len(cache) >= _CACHE_MAX:  # epochs vary in a long-lived cluster: keep the cache bounded
        cache.clear()
    cache[tail] = got = _decode_shape(tail, version)
    return got


def _decode_shape(buf: bytes, version: int) -> _Shape | None:
    blen = len(buf)
    try:
        n = buf[0] - 1
        if n < 0 or n > 126:
            return None
        end = 1 + 4 * n
        if end > blen:
            return None
        replicas = ints_from_raw(buf[1:end])
        pos = end
        m = buf[pos] - 1
        if m < 0 or m > 126:
            return None
        end = pos + 1 + 4 * m
        if end > blen:
            return None
        isr = ints_from_raw(buf[pos + 1:end])
        pos = end
        if buf[pos] != 1 or buf[pos + 1] != 1:  # removing / adding replicas present
            return None
        leader, leader_epoch, partition_epoch = _I32x3.unpack_from(buf, pos + 2)
        pos += 14
        if version == 1:
            d = buf[pos] - 1
            if d < 0 or d > 126 or (d and d != n):
                return None
            end = pos + 1 + 16 * d
            if end > blen:
                return None
            dirs = uuids_from_raw(buf[pos + 1:end]) if d else migrating_dirs(n)
            pos = end
        else:
            dirs = migrating_dirs(n)
        if pos + 1 != blen or buf[pos] != 0:  # tagged fields, or a length mismatch
            return None
    except (IndexError, struct.error):
        return None
    isr_id = isr_number(isr)
    flags = (_LEADERLESS if leader == NO_LEADER else 0) \
        | (_IMBALANCED if leader != (replicas[0] if replicas else NO_LEADER) else 0)
    return Partition(replicas, isr, dirs, leader, leader_epoch, partition_epoch), isr_id, flags


def replay_framed(image: MetadataImage, value: bytes, offset: int, timestamp_ms: int = 0) -> None:
    """Decode one framed metadata record value and replay it at ``offset``; DecodeError for a
    record type or version the image's release does not define."""
    if not _partition_from_bytes(image, value, offset, timestamp_ms):
        record, version = unframe(value)
        image.check_defined(record, version)
        image.replay(record, offset, timestamp_ms)


def replay_with_value(image: MetadataImage, record: Any, value: bytes, offset: int, timestamp_ms: int = 0) -> None:
    """Replay ``record``, whose framed value is ``value``, at ``offset``: a PartitionRecord of
    the plain shape from its bytes (the write path has just framed it, and a shared Partition
    costs a few lookups where the record object costs its lists' interning), anything else
    from the object, as ``MetadataImage.replay`` does."""
    if not _partition_from_bytes(image, value, offset, timestamp_ms):
        image.replay(record, offset, timestamp_ms)


def replay_at_append(image: MetadataImage, records: list[tuple[Any, int]], values: list[bytes], offset: int,
                     timestamp_ms: int = 0) -> None:
    """The write path's replay of a batch it is about to append: ``replay_with_value`` of each
    record (``values`` are their framed bytes) at consecutive offsets from ``offset``, in one
    loop with its lookups hoisted, on an image journaling since the write path's mark.

    Each plain PartitionRecord is journaled as ``_partition_from_bytes`` journals it (its swap
    entry and its Start), so a revert, a commit or a delta sees the same journal; a new
    partition's ISR-index entry goes to ``TopicsImage.defer_isr``, as in ``replay_framed_all``
    (whatever reads or changes the index writes it first), and before it returns or raises the
    batch writes as many entries as it deferred, so their cost stays with the request that made
    them (a load's leftovers, older, go first). A 10,000-partition CreateTopics batch spends a third of what replaying each
    record on its own cost. On error the image holds the records before the failing one (its
    offset says which), as after ``replay_with_value`` of each in turn."""
    undo = image._undo
    if undo is None:  # nothing to journal: the general path decides
        for i, value in enumerate(values):
            replay_with_value(image, records[i][0], value, offset + i, timestamp_ms)
        return
    starts = image._starts
    base = image._base
    topics = image.topics
    by_id_bytes = topics.by_id_bytes
    index = topics._index
    swap = topics.swap_partition
    unpack_i32 = _I32.unpack_from
    v0, v1 = _shapes[0].get, _shapes[1].get
    shape_of = _shape
    head_v1, head_v0, head_v2 = _HEAD_V1, _HEAD_V0, _HEAD_V2
    backlog = topics.defer_isr
    defer_chunk, defer_isr, defer_bit = backlog.chunks.append, backlog.isrs.append, backlog.bits.append
    deferred = 0  # ISR index entries this batch left in the backlog
    added = 0  # new partitions not yet counted in topics.partition_count
    prev_offset, prev_ts = image.offset, image.last_timestamp_ms  # the image's, record by record
    last: int | None = None  # the offset of the last record applied here and not yet settled

    def settle() -> None:
        """Write what the loop deferred but the ISR index: the partition count, the offset."""
        nonlocal added, last
        topics.partition_count += added
        added = 0
        if last is not None:
            image.offset = last
            if timestamp_ms:
                image.last_timestamp_ms = timestamp_ms
            last = None

    missing = _MISSING
    last_tb = b""
    t = None
    n = len(values)
    i = 0
    try:
        while i < n:
            buf = values[i]
            at = offset + i
            head = buf[:3]
            if head == head_v1 or head == head_v2:
                shape = v1(buf[23:], missing)
                if shape is missing:
                    shape = shape_of(buf[23:], 1)
            elif head == head_v0:
                shape = v0(buf[23:], missing)
                if shape is missing:
                    shape = shape_of(buf[23:], 0)
            else:
                shape = None
            if shape is not None:
                tb = buf[7:23]
                if tb != last_tb:
                    t = by_id_bytes.get(tb)
                    last_tb = tb
                pid = unpack_i32(buf, 3)[0]
                if t is not None and pid >= 0:
                    new, isr_id, flags = shape
                    parts = t.partitions
                    old = parts.get(pid)
                    if old is not None:  # a replacement (the index writes deferred entries first if it must)
                        settle()
                        index(t.key, pid, old, new)
                    else:
                        defer_chunk((t.key << TOPIC_SHIFT) | (pid >> CHUNK_BITS))
                        defer_isr(isr_id)
                        defer_bit(pid & CHUNK_LOW)
                        deferred += 1
                        added += 1
                        if flags:  # no ELR and no reassignment in this shape
                            if flags & _LEADERLESS:
                                topics.leaderless.add(t.key, pid)
                            if flags & _IMBALANCED:
                                topics.imbalanced.add(t.key, pid)
                    parts[pid] = new
                    undo.append((swap, (t.id, pid), old))
                    starts.append(Start(at, base + len(undo) - 1, prev_offset, prev_ts))
                    prev_offset = last = at
                    if timestamp_ms:
                        prev_ts = timestamp_ms
                    i += 1
                    continue
            settle()
            last_tb = b""  # it may add or remove a topic
            replay_with_value(image, records[i][0], buf, at, timestamp_ms)
            i += 1
            prev_offset, prev_ts = image.offset, image.last_timestamp_ms
            journal = image._undo
            if journal is None:  # the journal stopped (no caller does that): the general path
                break
            undo, starts, base = journal, image._starts, image._base
    finally:
        settle()
        if deferred:  # as many entries as this batch deferred: a load's leftovers go first
            topics.settle_isr_index(deferred)
    while i < n:
        replay_with_value(image, records[i][0], values[i], offset + i, timestamp_ms)
        i += 1


def _partition_from_bytes(image: MetadataImage, value: bytes, offset: int, timestamp_ms: int) -> bool:
    """Replay ``value`` if it is a PartitionRecord of the plain shape for a known topic (True);
    else leave the image as it was (False) for the general path, which decides what is wrong."""
    head = value[:3]
    if head == _HEAD_V1 or head == _HEAD_V0 or head == _HEAD_V2:
        tail = value[23:]
        layout = 1 if value[2] else 0
        cache = _shapes[layout]
        shape = cache[tail] if tail in cache else _shape(tail, layout)
        t = image.topics.by_id_bytes.get(value[7:23])
        if shape is not None and t is not None:
            pid = _I32.unpack_from(value, 3)[0]
            if pid >= 0:
                prev_offset, prev_ts = image.offset, image.last_timestamp_ms
                new = shape[0]
                topics = image.topics
                parts = t.partitions
                old = parts.get(pid)
                topics._index(t.key, pid, old, new)  # TopicsImage.swap_partition, inlined
                parts[pid] = new
                undo = image._undo
                if undo is not None:  # journal it, and its Start, as replay() does
                    undo.append((topics.swap_partition, (t.id, pid), old))
                    image._starts.append(Start(offset, image._base + len(undo) - 1, prev_offset, prev_ts))
                image.offset = offset
                if timestamp_ms:
                    image.last_timestamp_ms = timestamp_ms
                return True
    return False


def replay_framed_all(image: MetadataImage, values: Iterable[bytes], offset: int, timestamp_ms: int = 0,
                      step: int = 0) -> None:
    """Replay many framed values, all at ``offset`` (a snapshot's records), or with ``step=1``
    at consecutive offsets from ``offset`` (a log batch's): what ``replay_framed`` does for
    each, in one loop with its lookups hoisted. A plain PartitionRecord costs a few dict
    lookups: its shape is shared (see ``_shape``), and a new partition's ISR-index entries are
    left in ``TopicsImage.defer_isr``, which the index writes before anything reads or changes
    it. The partition count and the offset are written before any other record, at the end,
    and on error, so every other replay sees them current.

    A journaling image (one Start per record; also from a record that begins a transaction
    on) and every value the in-place decode is unsure about go through ``replay_framed``, so
    errors and the resulting state are the same."""
    if image.journaling:  # not `image._undo is not None`: mypy would narrow _undo to None below, and mypyc trusts it
        for value in values:
            replay_framed(image, value, offset, timestamp_ms)
            offset += step
        return
    topics = image.topics
    by_id_bytes = topics.by_id_bytes
    index = topics._index
    unpack_i32 = _I32.unpack_from
    v0, v1 = _shapes[0].get, _shapes[1].get
    shape_of = _shape
    slow = replay_framed
    head_v1, head_v0, head_v2 = _HEAD_V1, _HEAD_V0, _HEAD_V2
    backlog = topics.defer_isr  # a new partition's ISR index entry, written later (TopicsImage)
    defer_chunk, defer_isr, defer_bit = backlog.chunks.append, backlog.isrs.append, backlog.bits.append
    added = 0  # new partitions not yet counted in topics.partition_count
    last: int | None = None  # the offset of the last record applied here and not yet settled

    def settle() -> None:
        """Write what the loop deferred but the ISR index: the partition count, the offset."""
        nonlocal added, last
        topics.partition_count += added
        added = 0
        if last is not None:
            image.offset = last
            if timestamp_ms:
                image.last_timestamp_ms = timestamp_ms
            last = None

    missing = _MISSING
    last_tb = b""
    t = None
    parts: dict[int, Partition] = {}
    tkey = tbase = 0
    it = iter(values)
    offset -= step
    try:
        for buf in it:
            offset += step
            head = buf[:3]
            if head == head_v1 or head == head_v2:
                shape = v1(buf[23:], missing)
                if shape is missing:
                    shape = shape_of(buf[23:], 1)
            elif head == head_v0:
                shape = v0(buf[23:], missing)
                if shape is missing:
                    shape = shape_of(buf[23:], 0)
            else:
                shape = None
            if shape is not None:
                tb = buf[7:23]
                if tb != last_tb:  # a new topic: its lookups once, not per partition
                    last_tb = tb
                    t = by_id_bytes.get(tb)
                    if t is not None:
                        parts, tkey = t.partitions, t.key
                        tbase = tkey << TOPIC_SHIFT
                pid = unpack_i32(buf, 3)[0]
                if t is not None and pid >= 0:
                    new, isr_id, flags = shape
                    if pid in parts:  # a replacement (the index writes deferred entries first if it must)
                        settle()
                        index(tkey, pid, parts[pid], new)
                    else:
                        defer_chunk(tbase | (pid >> CHUNK_BITS))
                        defer_isr(isr_id)
                        defer_bit(pid & CHUNK_LOW)
                        added += 1
                        if flags:  # no ELR and no reassignment in this shape
                            if flags & _LEADERLESS:
                                topics.leaderless.add(tkey, pid)
                            if flags & _IMBALANCED:
                                topics.imbalanced.add(tkey, pid)
                    parts[pid] = new
                    last = offset
                    continue
            settle()
            last_tb = b""  # it may add or remove a topic
            slow(image, buf, offset, timestamp_ms)
            if image._undo is not None:  # it began a transaction: journal from here on
                break
    finally:
        settle()
    for buf in it:  # only after a break: the image journals now
        offset += step
        slow(image, buf, offset, timestamp_ms)


def replay_snapshot_values(image: MetadataImage, values: Iterable[bytes], offset: int) -> None:
    """``replay_framed_all`` with the cyclic garbage collector paused: a snapshot load allocates
    a million Partitions that make no cycles, and each collection the allocations trigger
    would walk them all again (10-25% of the load). Restored afterwards, even on error."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        replay_framed_all(image, values, offset)
    finally:
        if was_enabled:
            gc.enable()

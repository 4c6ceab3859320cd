"""Replay straight from framed record bytes, with a fast path for PartitionRecord.

Loading a snapshot or catching up on a log is dominated by PartitionRecords (a million of them
for a large cluster). Building a generic record object per partition and then converting its
lists into the image's interned tuples does the work twice; here the common shape of a
PartitionRecord (frame v1, record v0/v1, no removing/adding replicas, no tagged fields) is read
directly into the image, keying the interned replica and directory tuples by their raw bytes.

Anything else, including any byte sequence the fast path is unsure about, goes through
``unframe()`` and ``MetadataImage.replay``, so errors (DecodeError, ReplayError) are exactly
those of the general path and the resulting state is identical (tests check both).
"""

from __future__ import annotations

import gc
import struct
from collections.abc import Iterable

from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.image.interning import ints_from_raw, uuids_from_raw
from kraftsim.metadata.image.journal import Start
from kraftsim.metadata.image.partition_sets import CHUNK_BITS, CHUNK_LOW, TOPIC_SHIFT, PartitionSet
from kraftsim.metadata.image.topics import NO_LEADER, Partition, migrating_dirs
from kraftsim.metadata.records import unframe

_I32 = struct.Struct(">i")
_I32x3 = struct.Struct(">iii")
_PARTITION_RECORD = 3


def replay_framed(image: MetadataImage, value: bytes, offset: int, timestamp_ms: int = 0) -> None:
    """Decode one framed metadata record value and replay it at ``offset``."""
    if len(value) > 3 and value[0] == 1 and value[1] == _PARTITION_RECORD and value[2] <= 1:
        prev_offset, prev_ts = image.offset, image.last_timestamp_ms
        if _partition_fast(image, value, value[2]):
            undo = image._undo
            if undo is not None:  # its one entry is the last; journal its Start like replay() does
                image._starts.append(Start(offset, image._base + len(undo) - 1, prev_offset, prev_ts))
            image.offset = offset
            if timestamp_ms:
                image.last_timestamp_ms = timestamp_ms
            return
    image.replay(unframe(value)[0], offset, timestamp_ms)


def _partition_fast(image: MetadataImage, buf: bytes, version: int) -> bool:
    """Apply a plain PartitionRecord; False (nothing changed) to fall back to the general path."""
    topics = image.topics
    blen = len(buf)
    try:
        pid = _I32.unpack_from(buf, 3)[0]
        t = topics.by_id_bytes.get(buf[7:23])
        if t is None or pid < 0:
            return False
        pos = 23
        n = buf[pos] - 1
        if n < 0 or n > 126:
            return False
        end = pos + 1 + 4 * n
        if end > blen:
            return False
        replicas = ints_from_raw(buf[pos + 1:end])
        pos = end
        m = buf[pos] - 1
        if m < 0 or m > 126:
            return False
        end = pos + 1 + 4 * m
        if end > blen:
            return False
        isr = ints_from_raw(buf[pos + 1:end])
        pos = end
        if buf[pos] != 1 or buf[pos + 1] != 1:  # removing / adding replicas present
            return False
        leader, leader_epoch, partition_epoch = _I32x3.unpack_from(buf, pos + 2)
        pos += 14
        if version == 1:
            d = buf[pos] - 1
            if d < 0 or d > 126 or (d and d != n):
                return False
            end = pos + 1 + 16 * d
            if end > blen:
                return False
            dirs = uuids_from_raw(buf[pos + 1:end]) if d else migrating_dirs(n)
            pos = end
        else:
            dirs = migrating_dirs(n)
        if pos + 1 != blen or buf[pos] != 0:  # tagged fields, or a length mismatch
            return False
    except (IndexError, struct.error):
        return False
    new = Partition(replicas, isr, dirs, leader, leader_epoch, partition_epoch)
    parts = t.partitions
    old = parts.get(pid)
    topics._index(t.key, pid, old, new)  # TopicsImage.swap_partition, inlined for the load path
    parts[pid] = new
    undo = image._undo
    if undo is not None:
        undo.append((topics.swap_partition, (t.id, pid), old))
    return True


def replay_framed_all(image: MetadataImage, values: Iterable[bytes], offset: int, timestamp_ms: int = 0,
                      step: int = 0) -> None:
    """Replay many framed values, all at ``offset`` (a snapshot's records), or with ``step=1``
    at consecutive offsets from ``offset`` (a log batch's): what ``replay_framed`` does for
    each, in one loop with its lookups hoisted and the common PartitionRecord decoded in place,
    with no per-record object but the Partition kept.

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
    isr_index = topics.isr_index
    unpack_i32 = _I32.unpack_from
    unpack_i32x3 = _I32x3.unpack_from
    ints = ints_from_raw
    uuids = uuids_from_raw
    slow = replay_framed
    new_partition = Partition
    it = iter(values)
    offset -= step
    for buf in it:
        offset += step
        blen = len(buf)
        # Frame v1, PartitionRecord v0/v1, then the same checks as _partition_fast, in place.
        if blen < 40 or buf[0] != 1 or buf[1] != _PARTITION_RECORD or buf[2] > 1:
            slow(image, buf, offset, timestamp_ms)
            if image._undo is not None:  # it began a transaction: journal from here on
                break
            continue
        t = by_id_bytes.get(buf[7:23])
        n = buf[23] - 1
        end = 24 + 4 * n
        if t is None or n < 0 or n > 126 or end >= blen:
            slow(image, buf, offset, timestamp_ms)
            if image._undo is not None:  # it began a transaction: journal from here on
                break
            continue
        m = buf[end] - 1
        pos = end + 1
        end = pos + 4 * m
        if m < 0 or m > 126 or end + 14 > blen or buf[end] != 1 or buf[end + 1] != 1:
            slow(image, buf, offset, timestamp_ms)
            if image._undo is not None:  # it began a transaction: journal from here on
                break
            continue
        pid = unpack_i32(buf, 3)[0]
        if pid < 0:
            slow(image, buf, offset, timestamp_ms)
            if image._undo is not None:  # it began a transaction: journal from here on
                break
            continue
        replicas = ints(buf[24:24 + 4 * n])
        isr = ints(buf[pos:end])
        leader, leader_epoch, partition_epoch = unpack_i32x3(buf, end + 2)
        pos = end + 14
        if buf[2] == 1:
            d = buf[pos] - 1 if pos < blen else -1
            dend = pos + 1 + 16 * d
            if d < 0 or d > 126 or (d and d != n) or dend > blen:
                slow(image, buf, offset, timestamp_ms)
                continue
            dirs = uuids(buf[pos + 1:dend]) if d else migrating_dirs(n)
            pos = dend
        else:
            dirs = migrating_dirs(n)
        if pos + 1 != blen or buf[pos] != 0:  # tagged fields, or a length mismatch
            slow(image, buf, offset, timestamp_ms)
            if image._undo is not None:  # it began a transaction: journal from here on
                break
            continue
        new = new_partition(replicas, isr, dirs, leader, leader_epoch, partition_epoch)
        parts = t.partitions
        old = parts.get(pid)
        if old is None:  # TopicsImage._index of a new partition, written out (RF times per record)
            key = t.key
            topics.partition_count += 1
            ck = (key << TOPIC_SHIFT) | (pid >> CHUNK_BITS)
            bit = 1 << (pid & CHUNK_LOW)
            for b in isr:
                members = isr_index.get(b)
                if members is None:
                    members = isr_index[b] = PartitionSet()
                chunks = members._chunks
                mask = chunks.get(ck, 0)
                if not mask & bit:
                    chunks[ck] = mask | bit
                    members._count += 1
            # No ELR and no reassignment in this shape (the in-place decode requires both empty).
            if leader == NO_LEADER:
                topics.leaderless.add(key, pid)
            if leader != (replicas[0] if replicas else NO_LEADER):
                topics.imbalanced.add(key, pid)
        else:
            index(t.key, pid, old, new)
        parts[pid] = new
        image.offset = offset
        if timestamp_ms:
            image.last_timestamp_ms = timestamp_ms
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

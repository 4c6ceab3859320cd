"""Helpers that generated codec code calls into.

Kept tiny and allocation-free on the common paths: the generated code inlines the one-byte
varint case and only falls back here for longer values.
"""

from __future__ import annotations

import struct
import uuid as _uuid

from kraftsim.rpc.codec_errors import DecodeError, EncodeError

_UUID_NEW = object.__new__
_UUID_SETATTR = object.__setattr__
_SAFE_UNKNOWN = _uuid.SafeUUID.unknown
_U32 = struct.Struct(">I")
MAX_STRING = 0x7FFF  # Kafka's limit on a string's encoded length
MISSING = object()  # sentinel for "use the schema default" in generated __init__ signatures
ZERO_UUID = _uuid.UUID(int=0)


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """Unsigned varint (at most 5 bytes, int32 range as Kafka reads it)."""
    value = 0
    shift = 0
    for i in range(5):
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value > 0xFFFFFFFF:
                raise DecodeError("unsigned varint out of range")
            return value, pos + i + 1
        shift += 7
    raise DecodeError("unsigned varint longer than 5 bytes")


def _compact_bounds(buf: bytes, pos: int, nullable: bool, where: str, limit: int | None) -> tuple[int, int]:
    """Where compact bytes or a compact string lie: (start, end), or (next position, -1) for null."""
    n, pos = read_uvarint(buf, pos)
    return _bounds(n, pos, len(buf), nullable, where, limit)


def _bounds(n: int, pos: int, blen: int, nullable: bool, where: str, limit: int | None) -> tuple[int, int]:
    """The checks of :func:`_compact_bounds` on a length ``n`` (plus one) read at ``pos``."""
    n -= 1
    if n < 0:
        if nullable:
            return pos, -1
        raise DecodeError(f"{where}: null or negative length in a non-nullable field")
    if limit is not None and n > limit:
        raise DecodeError(f"{where}: string longer than {limit}")
    end = pos + n
    if end > blen:
        raise DecodeError(f"{where}: runs past the end")
    return pos, end


def read_compact_string(buf: bytes, pos: int, nullable: bool, where: str) -> tuple[str | None, int]:
    """A compact string the generated code did not read inline: null, or a multi-byte length."""
    start, end = _compact_bounds(buf, pos, nullable, where, MAX_STRING)
    if end < 0:
        return None, start
    return buf[start:end].decode("utf-8", "replace"), end


def read_compact_bytes(buf: bytes, pos: int, nullable: bool, where: str) -> tuple[bytes | None, int]:
    """Compact bytes the generated code did not read inline: null, or a multi-byte length."""
    start, end = _compact_bounds(buf, pos, nullable, where, None)
    if end < 0:
        return None, start
    return buf[start:end], end


# The same readers for the view decoders (``Message.decode(..., views=True)``), whose buffer is
# a read-only memoryview of the frame (a large response is received into a bytearray, which has
# no zero-copy way to become bytes). Only ``records`` fields come out as views of it; strings,
# bytes and varints are read from small copies, so they are the same values as from bytes.


def read_uvarint_view(buf: memoryview, pos: int) -> tuple[int, int]:
    """:func:`read_uvarint` in a memoryview (from a copy of the at most 5 bytes it can take)."""
    value, n = read_uvarint(bytes(buf[pos:pos + 5]), 0)
    return value, pos + n


def _compact_bounds_view(buf: memoryview, pos: int, nullable: bool, where: str, limit: int | None) -> tuple[int, int]:
    n, pos = read_uvarint_view(buf, pos)
    return _bounds(n, pos, len(buf), nullable, where, limit)


def read_compact_string_view(buf: memoryview, pos: int, nullable: bool, where: str) -> tuple[str | None, int]:
    """:func:`read_compact_string` in a memoryview."""
    start, end = _compact_bounds_view(buf, pos, nullable, where, MAX_STRING)
    if end < 0:
        return None, start
    return str(buf[start:end], "utf-8", "replace"), end


def read_compact_bytes_view(buf: memoryview, pos: int, nullable: bool, where: str) -> tuple[bytes | None, int]:
    """:func:`read_compact_bytes` in a memoryview: a ``bytes`` field is still bytes."""
    start, end = _compact_bounds_view(buf, pos, nullable, where, None)
    if end < 0:
        return None, start
    return bytes(buf[start:end]), end


def read_compact_records_view(buf: memoryview, pos: int, nullable: bool, where: str) -> tuple[memoryview | None, int]:
    """A compact ``records`` field as a slice of the view: the bytes are not copied."""
    start, end = _compact_bounds_view(buf, pos, nullable, where, None)
    if end < 0:
        return None, start
    return buf[start:end], end


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag signed varint (int32)."""
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag signed varlong (int64, at most 10 bytes)."""
    value = 0
    shift = 0
    for i in range(10):
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value >> 64:
                raise DecodeError("varlong out of range")
            return (value >> 1) ^ -(value & 1), pos + i + 1
        shift += 7
    raise DecodeError("varlong longer than 10 bytes")


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        value &= 0xFFFFFFFF
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_unknown_tags(out: bytearray, tags: list[tuple[int, bytes]]) -> None:
    """A tag section holding only tags this version does not know (re-emitted as read)."""
    tags = sorted(tags, key=_first)
    write_uvarint(out, len(tags))
    for tag, data in tags:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data


def write_tags(out: bytearray, tags: list[tuple[int, bytes | bytearray]], unknown: list | None) -> None:
    if unknown:
        known = {t for t, _ in tags}
        for t, _ in unknown:
            if t in known:
                raise EncodeError(f"unknown tagged field {t} collides with a known tag")
        tags = tags + list(unknown)
        tags.sort(key=_first)
    write_uvarint(out, len(tags))
    for tag, data in tags:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data


def _first(t: tuple[int, bytes | bytearray]) -> int:
    return t[0]


def bad(msg: str) -> DecodeError:
    return DecodeError(msg)

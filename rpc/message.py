"""Base classes of generated messages and the entry points to encode and decode them."""

from __future__ import annotations

import struct
from typing import Any, ClassVar, Self

from kraftsim.rpc.codec_errors import CodecError, DecodeError, EncodeError

# Everything a decoder can trip over in hostile bytes; each becomes a DecodeError.
DECODE_FAILURES = (IndexError, struct.error, ValueError, TypeError, OverflowError, MemoryError, RecursionError)
ENCODE_FAILURES = (AttributeError, TypeError, struct.error, ValueError, OverflowError)


class Struct:
    """A schema struct: slotted attributes named in snake_case after the schema fields."""

    __slots__: tuple[str, ...] = ()
    _struct_spec: ClassVar[Any]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, a) == getattr(other, a) for a in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        parts = ", ".join(f"{a}={getattr(self, a)!r}" for a in self.__slots__
                          if a != "unknown_tagged_fields" or getattr(self, a))
        return f"{type(self).__qualname__}({parts})"

    def replace(self, **changes: Any) -> Self:
        """A shallow copy with some fields changed (messages are plain mutable values)."""
        new = object.__new__(type(self))
        for a in self.__slots__:
            object.__setattr__(new, a, changes.pop(a) if a in changes else getattr(self, a))
        if changes:
            raise TypeError(f"unknown fields {sorted(changes)}")
        return new


class Message(Struct):
    """A top-level schema: request, response, header, metadata record or data file."""

    __slots__ = ()
    _spec: ClassVar[Any]
    _encoders: ClassVar[tuple]
    _decoders: ClassVar[tuple]
    _view_decoders: ClassVar[tuple | None] = None  # generated for messages with records fields
    _source: ClassVar[str]

    @classmethod
    def api_key(cls) -> int | None:
        return cls._spec.api_key

    @classmethod
    def lowest_version(cls) -> int:
        return cls._spec.valid.lo

    @classmethod
    def highest_version(cls) -> int:
        hi = cls._spec.valid.hi
        return cls._spec.valid.lo if hi is None else hi

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return version in cls._spec.flexible

    def encode(self, version: int) -> bytes:
        out = bytearray()
        self.encode_into(out, version)
        return bytes(out)

    def encode_into(self, out: bytearray, version: int) -> None:
        try:
            enc = self._encoders[version] if version >= 0 else None
        except IndexError:
            enc = None
        if enc is None:
            raise EncodeError(f"{type(self).__name__} has no version {version}")
        try:
            enc(self, out)
        except CodecError:
            raise
        except ENCODE_FAILURES as e:
            raise EncodeError(f"{type(self).__name__} v{version}: {e}") from e

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int, strict: bool = True,
               views: bool = False) -> Self:
        """Decode a whole buffer; ``strict`` also rejects trailing bytes. ``views``: see
        :meth:`decode_from`."""
        obj, pos = cls.decode_from(data, 0, version, views)
        if strict and pos != len(data):
            raise DecodeError(f"{cls.__name__} v{version}: {len(data) - pos} trailing bytes")
        return obj

    @classmethod
    def decode_from(cls, data: bytes | bytearray | memoryview, pos: int, version: int,
                    views: bool = False) -> tuple[Self, int]:
        """``views``: ``records`` fields come out as read-only memoryviews of ``data`` instead
        of copies (a Fetch response's megabytes are not copied; the view keeps ``data`` alive,
        so ``data`` must not be changed afterwards). Everything else decodes as without."""
        if views and cls._view_decoders is not None:
            decoders = cls._view_decoders
            data = view_of(data)
        else:
            decoders = cls._decoders
            if type(data) is not bytes:
                data = bytes(data)
        try:
            dec = decoders[version] if version >= 0 else None
        except IndexError:
            dec = None
        if dec is None:
            raise DecodeError(f"{cls.__name__} has no version {version}")
        try:
            return dec(data, pos)
        except CodecError:
            raise
        except DECODE_FAILURES as e:
            raise DecodeError(f"{cls.__name__} v{version}: malformed ({type(e).__name__}: {e})") from e


def view_of(data: bytes | bytearray | memoryview) -> memoryview:
    """A read-only byte view of ``data`` (what view decoders read): records sliced out of it
    cannot be written through, and hash and compare as bytes do."""
    view = data if type(data) is memoryview else memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view if view.readonly else view.toreadonly()

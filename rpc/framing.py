"""Sans-I/O splitting of a TCP byte stream into Kafka frames (4-byte big-endian size prefix).

The size check happens on the prefix alone, before a single byte of the body is buffered, so a
hostile 2 GiB prefix costs nothing (Kafka's ``socket.request.max.bytes``).
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameError(Exception):
    """The stream cannot be framed any more: the connection must be closed."""


class FrameReader:
    __slots__ = ("_buf", "max_size")

    def __init__(self, max_size: int) -> None:
        self._buf = bytearray()
        self.max_size = max_size

    def feed(self, data: bytes) -> list[bytes]:
        """Append received bytes; return every complete frame (without size prefix)."""
        buf = self._buf
        if not buf and len(data) >= 4:
            # Fast path: the common case of whole frames arriving in one read.
            frames = []
            pos = 0
            n = len(data)
            while n - pos >= 4:
                size = _SIZE.unpack_from(data, pos)[0]
                if size <= 0 or size > self.max_size:
                    raise FrameError(f"frame size {size} outside 1..{self.max_size}")
                end = pos + 4 + size
                if end > n:
                    break
                frames.append(data[pos + 4:end])
                pos = end
            if pos < n:
                buf += data[pos:]
                self._check_prefix()
            return frames
        buf += data
        return self._drain()

    def _check_prefix(self) -> None:
        buf = self._buf
        if len(buf) >= 4:
            size = _SIZE.unpack_from(buf, 0)[0]
            if size <= 0 or size > self.max_size:
                raise FrameError(f"frame size {size} outside 1..{self.max_size}")

    def _drain(self) -> list[bytes]:
        buf = self._buf
        frames = []
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            size = _SIZE.unpack_from(buf, pos)[0]
            if size <= 0 or size > self.max_size:
                raise FrameError(f"frame size {size} outside 1..{self.max_size}")
            end = pos + 4 + size
            if end > n:
                break
            with memoryview(buf) as view:  # one copy out of the buffer, not two
                frames.append(bytes(view[pos + 4:end]))
            pos = end
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def pending_size(self) -> int:
        """The size of the frame being received (its prefix read, its body not yet whole), or 0."""
        buf = self._buf
        if len(buf) < 4:
            return 0
        return _SIZE.unpack_from(buf, 0)[0]

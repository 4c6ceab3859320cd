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


class FrameBuffer:
    """Frames received straight into one reusable buffer, for an ``asyncio.BufferedProtocol``.

    A client reading large responses (a Raft observer's 8 MiB fetches) otherwise gets them in
    256 KiB chunks, each a fresh bytes object appended to a growing buffer: fresh memory per
    chunk and a Python call per chunk. Here the socket reads into the free end of one buffer
    sized for the frame in progress, kept between frames; each whole frame is copied out once.
    """

    __slots__ = ("_buf", "_start", "_end", "max_size")

    MIN_SIZE = 256 * 1024
    MIN_FREE = 64 * 1024
    KEEP = 16 * 1024 * 1024  # a buffer larger than this is not kept once empty

    def __init__(self, max_size: int) -> None:
        self._buf = bytearray(self.MIN_SIZE)
        self._start = 0  # first byte not yet framed
        self._end = 0  # end of the bytes received
        self.max_size = max_size

    def get_buffer(self) -> memoryview:
        """Where the next read goes: the free end of the buffer, made large enough for the rest
        of the frame in progress (whose size prefix has been checked already)."""
        buf = self._buf
        start, end = self._start, self._end
        if start:
            n = end - start
            buf[:n] = buf[start:end]
            self._start, self._end = start, end = 0, n
        if end == 0 and len(buf) > self.KEEP:
            self._buf = buf = bytearray(self.MIN_SIZE)
        need = self.MIN_FREE
        if end >= 4:
            need = max(need, 4 + _SIZE.unpack_from(buf, 0)[0] - end)
        free = len(buf) - end
        if free < need:
            buf.extend(bytes(need - free))
        return memoryview(buf)[end:]

    def updated(self, nbytes: int) -> list[bytes]:
        """``nbytes`` were read into the buffer: every frame now complete (without size prefix)."""
        self._end += nbytes
        buf = self._buf
        end = self._end
        pos = self._start
        frames = []
        while end - pos >= 4:
            size = _SIZE.unpack_from(buf, pos)[0]
            if size <= 0 or size > self.max_size:
                raise FrameError(f"frame size {size} outside 1..{self.max_size}")
            stop = pos + 4 + size
            if stop > end:
                break
            with memoryview(buf) as view:
                frames.append(bytes(view[pos + 4:stop]))
            pos = stop
        if pos == end:
            self._start = self._end = 0
        else:
            self._start = pos
        return frames

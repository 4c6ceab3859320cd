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


class FrameReceiver:
    """Frames received straight into memory, for an ``asyncio.BufferedProtocol`` (the client's
    side; the server keeps :class:`FrameReader`).

    The socket reads into a small scratch buffer kept for the connection; a frame that fits in
    it (at most ``LARGE`` bytes) is copied out as bytes, as :class:`FrameReader` does. A larger
    frame (a Fetch response's megabytes) gets a fresh bytearray of its size as soon as its prefix
    is read, and from then on the socket reads the rest of the frame straight into it: its bytes
    are written once, and the bytearray itself is handed on, so a view decoder can leave its
    records where they were received. Never reused: a caller may keep views into it for as long
    as it likes. The prefix is checked before anything is allocated, so memory stays bounded by
    the scratch buffer plus one frame of at most ``max_size``.
    """

    __slots__ = ("_scratch", "_start", "_end", "_big", "_fill", "max_size")

    SCRATCH = 32 * 1024
    LARGE = SCRATCH // 2  # frames above this go to a buffer of their own (smaller ones fit in the scratch)

    def __init__(self, max_size: int) -> None:
        self._scratch = bytearray(self.SCRATCH)
        self._start = 0  # first byte in the scratch buffer not yet framed
        self._end = 0  # end of the bytes received into it
        self._big: bytearray | None = None  # the large frame being received
        self._fill = 0  # bytes of it received
        self.max_size = max_size

    def get_buffer(self) -> memoryview:
        """Where the next read goes: the rest of a large frame being received (exactly: the
        bytes after it stay in the socket for the next read), else the free end of the scratch
        buffer. Never empty."""
        big = self._big
        if big is not None:
            return memoryview(big)[self._fill:]
        return memoryview(self._scratch)[self._end:]

    def updated(self, nbytes: int) -> list[bytes | bytearray]:
        """``nbytes`` were read into the last :meth:`get_buffer`: every frame now complete
        (without size prefix), as bytes (small ones) or a bytearray of its own (large ones)."""
        big = self._big
        if big is not None:
            self._fill += nbytes
            if self._fill < len(big):
                return []
            self._big = None
            return [big]
        scratch = self._scratch
        pos = self._start
        end = self._end = self._end + nbytes
        frames: list[bytes | bytearray] = []
        while end - pos >= 4:
            size = _SIZE.unpack_from(scratch, pos)[0]
            if size <= 0 or size > self.max_size:
                raise FrameError(f"frame size {size} outside 1..{self.max_size}")
            pos += 4
            if size > self.LARGE:
                have = min(end - pos, size)
                frame = bytearray(size)
                frame[:have] = memoryview(scratch)[pos:pos + have]
                pos += have
                if have < size:  # the rest is read into it; the scratch buffer is empty now
                    self._big, self._fill = frame, have
                    break
                frames.append(frame)
                continue
            stop = pos + size
            if stop > end:
                pos -= 4
                break
            frames.append(bytes(memoryview(scratch)[pos:stop]))
            pos = stop
        if pos == end:
            self._start = self._end = 0
        elif pos + self.LARGE + 4 > len(scratch):  # room for the rest of a small frame
            n = end - pos
            scratch[:n] = scratch[pos:end]  # through a copy: the two ranges may overlap
            self._start, self._end = 0, n
        else:
            self._start = pos
        return frames

    @property
    def buffered(self) -> int:
        """Bytes received and not yet handed on as frames."""
        return self._fill if self._big is not None else self._end - self._start

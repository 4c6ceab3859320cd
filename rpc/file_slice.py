"""Records served from a file without reading them into memory first (Kafka's FileRecords slice).

A Fetch answer is mostly segment bytes. Reading them into a buffer, copying that buffer into the
encoded response and handing the response to the transport costs three fresh multi-megabyte
buffers per Fetch, and on a virtual machine each fresh page is a fault: together that cost more
than the copying. So the Raft Fetch handler returns a :class:`FileSlice` in the records field;
the generated encoder leaves a hole for it (:class:`SliceOut`), the response is framed as a
:class:`SplitFrame` (bytes, slice, bytes) and the server sends the slice with ``sendfile`` as far
as the socket takes it, reading only the rest.
"""

from __future__ import annotations

import os


class FileSlice:
    """``length`` bytes of an open file from ``offset``; holds its own descriptor (a duplicate), so
    the segment may be closed or deleted before the slice is sent."""

    __slots__ = ("fd", "offset", "length")

    def __init__(self, fd: int, offset: int, length: int) -> None:
        self.fd = os.dup(fd)
        self.offset = offset
        self.length = length

    def __len__(self) -> int:
        return self.length

    def read(self, skip: int = 0) -> bytes:
        """The slice's bytes (from ``skip`` on), read now; then the descriptor is closed."""
        try:
            return os.pread(self.fd, self.length - skip, self.offset + skip)
        finally:
            self.close()

    def __bytes__(self) -> bytes:
        return self.read()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileSlice(fd={self.fd}, offset={self.offset}, length={self.length})"


class SliceOut(bytearray):
    """An encoder's output that records where file slices go instead of copying them in."""

    __slots__ = ("slices",)

    def __init__(self) -> None:
        super().__init__()
        self.slices: list[tuple[int, FileSlice]] = []


def put_slice(out: bytearray, s: FileSlice) -> None:
    """Called by generated encoders for a records field holding a :class:`FileSlice`."""
    if out.__class__ is SliceOut:
        out.slices.append((len(out), s))
    else:
        out += s.read()


class SplitFrame:
    """A response frame as parts: bytes and file slices, in order; the size prefix counts all."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[bytes | FileSlice]) -> None:
        self.parts = parts

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    def __bytes__(self) -> bytes:
        return b"".join(p.read() if isinstance(p, FileSlice) else p for p in self.parts)

    @staticmethod
    def of(prefix: bytes, out: SliceOut) -> SplitFrame:
        parts: list[bytes | FileSlice] = []
        at = 0
        view = memoryview(out)
        try:
            first = prefix
            for pos, s in out.slices:
                parts.append(first + bytes(view[at:pos]))
                parts.append(s)
                first = b""
                at = pos
            parts.append(bytes(view[at:]))
        finally:
            view.release()
        return SplitFrame(parts)

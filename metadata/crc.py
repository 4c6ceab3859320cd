"""CRC-32C (Castagnoli), the checksum of every RecordBatch v2.

Every batch appended to or read from the metadata log is checksummed once, so this must be a C
implementation: pure Python is thousands of times slower. ``google_crc32c`` is the declared
dependency; when its C extension is missing (it silently falls back to pure Python on
platforms without a wheel) we use the ``crc32c`` package instead, and only then the slow path.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["crc32c", "IMPLEMENTATION"]

_extend: Callable[[int, bytes], int]
IMPLEMENTATION: str

try:
    import google_crc32c as _g

    if _g.implementation != "c":
        raise ImportError("google_crc32c has no C extension here")
    from google_crc32c import _crc32c as _gc  # the extension itself: skips a Python wrapper call

    _extend = _gc.extend
    IMPLEMENTATION = "google_crc32c (C)"
    _BYTES_ONLY = True  # its C code parses "y#": plain bytes only, no memoryview/bytearray
except ImportError:
    try:
        import crc32c as _c

        def _extend(value: int, data: bytes) -> int:
            return _c.crc32c(data, value)

        IMPLEMENTATION = "crc32c package (C)"
        _BYTES_ONLY = False  # takes any buffer
    except ImportError:  # pragma: no cover - last resort, correct but slow
        import google_crc32c as _g

        _extend = _g.extend
        IMPLEMENTATION = "google_crc32c (pure Python, slow)"
        _BYTES_ONLY = True


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``value`` (the CRC of the bytes before it)."""
    if _BYTES_ONLY and type(data) is not bytes:
        data = bytes(data)  # one memcpy; far cheaper than the Python call itself for batch sizes
    return _extend(value, data)  # type: ignore[arg-type]

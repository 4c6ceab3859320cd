"""The two system calls the metadata log and the snapshot writer make to put data on disk.

Everything that writes log segments, snapshots or the small files of the metadata directory
(``files.atomic_write``) calls ``fileio.write`` and ``fileio.fsync`` instead of ``os`` directly,
so that a test can make the disk fail (ENOSPC, EIO) for the real code path, in process (or in a
controller process it starts, ``tests/faulty_controller.py``), without a small filesystem to fill.
"""

from __future__ import annotations

import os
from collections.abc import Callable

write: Callable[[int, bytes | bytearray | memoryview], int] = os.write
fsync: Callable[[int], None] = os.fsync

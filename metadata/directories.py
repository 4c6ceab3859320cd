"""Log directory ids (KIP-858): the reserved ids and what "online" means for a replica's dir.

Kafka's ``DirectoryId``: a replica's directory is a uuid; the first 100 are reserved, of which
three mean something: MIGRATING (assigned before directory assignment existed), UNASSIGNED (the
broker has not said yet) and LOST (the directory went offline).
"""

from __future__ import annotations

import uuid
from typing import Final

MIGRATING: Final = uuid.UUID(int=0)
UNASSIGNED: Final = uuid.UUID(int=1)
LOST: Final = uuid.UUID(int=2)
_SIGNED_LONG_MAX: Final = (1 << 63) - 1


def is_reserved(d: uuid.UUID) -> bool:
    """DirectoryId.reserved: the first 100 uuids (Java compares the low half as a signed long)."""
    v = d.int
    if v >> 64:
        return False
    lsb = v & 0xFFFFFFFFFFFFFFFF
    return lsb > _SIGNED_LONG_MAX or lsb < 100


def is_online(directory: uuid.UUID, online: tuple[uuid.UUID, ...]) -> bool:
    """DirectoryId.isOnline: UNASSIGNED and MIGRATING count as online, LOST never; a broker
    without registered dirs (upgraded from before 3.7-IV2) is assumed online."""
    v = directory.int
    if v < 2:
        return True
    if v == LOST.int:
        return False
    return not online or directory in online

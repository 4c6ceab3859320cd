"""SCRAM credentials by (user, mechanism) (UserScramCredentialRecord / Remove...).

Mechanism ids: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512. Removing a credential that does not exist is a
fatal replay error, as in ScramControlManager. Snapshots need MV >= 3.5-IV2.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kraftsim.metadata import versions
from kraftsim.metadata.image.errors import ReplayError, UnwritableMetadataError
from kraftsim.metadata.messages import UserScramCredentialRecord
from kraftsim.rpc.message import Message

SCRAM_SHA_256 = 1
SCRAM_SHA_512 = 2


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class ScramImage:
    __slots__ = ("credentials",)

    def __init__(self) -> None:
        self.credentials: dict[tuple[str, int], ScramCredential] = {}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScramImage):
            return NotImplemented
        return self.credentials == other.credentials

    def __repr__(self) -> str:
        return f"ScramImage({sorted(self.credentials)})"

    def records(self, mv: int, release: versions.Release) -> Iterator[tuple[Message, int]]:
        if not self.credentials:
            return
        if not release.is_scram_supported(mv):
            raise UnwritableMetadataError(f"SCRAM credentials of {sorted({u for u, _ in self.credentials})}")
        # Kafka's ScramImage groups by mechanism, then user.
        for user, mech in sorted(self.credentials, key=lambda k: (k[1], k[0])):
            c = self.credentials[(user, mech)]
            yield UserScramCredentialRecord(name=user, mechanism=mech, salt=c.salt, stored_key=c.stored_key,
                                            server_key=c.server_key, iterations=c.iterations), 0

    # --- the only mutator (see journal.py) ---------------------------------------------------

    def get_credential(self, key: tuple[str, int]) -> ScramCredential | None:
        return self.credentials.get(key)

    def swap_credential(self, key: tuple[str, int], cred: ScramCredential | None) -> ScramCredential | None:
        old = self.credentials.pop(key, None) if cred is None else self.credentials.get(key)
        if cred is not None:
            self.credentials[key] = cred
        return old


def replay_scram(scram: ScramImage, record: Any, undo: list | None) -> None:
    key = (record.name, record.mechanism)
    old = scram.swap_credential(key, ScramCredential(
        bytes(record.salt), bytes(record.stored_key), bytes(record.server_key), record.iterations))
    if undo is not None:
        undo.append((scram.swap_credential, key, old))


def replay_remove_scram(scram: ScramImage, record: Any, undo: list | None) -> None:
    key = (record.name, record.mechanism)
    if key not in scram.credentials:
        raise ReplayError(f"Unable to find credential to delete: {record.name} mechanism {record.mechanism}")
    old = scram.swap_credential(key, None)
    if undo is not None:
        undo.append((scram.swap_credential, key, old))

"""Client quotas (ClientQuotaRecord).

An entity is Kafka's ClientQuotaEntity: a map of entity type ("user", "client-id", "ip") to name
(None = the default entity). It is stored as a sorted tuple of pairs so it can key a dict and so
the order the record lists them in does not matter. Remove=true deletes a key; an entity with no
keys left disappears.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kraftsim.metadata.image.journal import get_nested, swap_nested
from kraftsim.metadata.messages import ClientQuotaRecord
from kraftsim.rpc.message import Message

Entity = tuple[tuple[str, str | None], ...]


def entity_of(entries: list) -> Entity:
    """Later duplicates of an entity type win, as putting them into a map does."""
    m: dict[str, str | None] = {}
    for e in entries:
        m[e.entity_type] = e.entity_name
    return tuple(sorted(m.items()))


class QuotasImage:
    __slots__ = ("entities",)

    def __init__(self) -> None:
        self.entities: dict[Entity, dict[str, float]] = {}

    def get(self, entity: Entity) -> dict[str, float]:
        return self.entities.get(entity, {})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QuotasImage):
            return NotImplemented
        return self.entities == other.entities

    def __repr__(self) -> str:
        return f"QuotasImage({self.entities})"

    def records(self) -> Iterator[tuple[Message, int]]:
        for entity in sorted(self.entities, key=lambda e: [(t, n is None, n or "") for t, n in e]):
            data = self.entities[entity]
            for key in sorted(data):
                yield ClientQuotaRecord(
                    entity=[ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                    key=key, value=data[key], remove=False), 0

    # --- the only mutator (see journal.py) ---------------------------------------------------

    def get_quota(self, key: tuple[Entity, str]) -> float | None:
        return get_nested(self.entities, key)

    def swap_quota(self, key: tuple[Entity, str], value: float | None) -> float | None:
        return swap_nested(self.entities, key, value)


def replay_client_quota(quotas: QuotasImage, record: Any, undo: list | None) -> None:
    key = (entity_of(record.entity), record.key)
    old = quotas.swap_quota(key, None if record.remove else record.value)
    if undo is not None:
        undo.append((quotas.swap_quota, key, old))

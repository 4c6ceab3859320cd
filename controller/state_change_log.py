"""One Kafka-like log line per state change that matters, as each batch is appended.

A record listener of the write path (``WritePath.listeners``): operators grep these lines the
way they grep a Kafka controller's log, so the wording follows Kafka's where Kafka has one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kraftsim.metadata.record_types import RecordType
from kraftsim.metadata.records import FramedRecord, RecordAndVersion

if TYPE_CHECKING:
    from kraftsim.metadata.messages import BrokerRegistrationChangeRecord

log = logging.getLogger("kraftsim.controller")


def _registration_change(r: BrokerRegistrationChangeRecord) -> str:
    parts = []
    if r.fenced == 1:
        parts.append(f"Fenced broker {r.broker_id}")
    elif r.fenced == -1:
        parts.append(f"Unfenced broker {r.broker_id}")
    if r.in_controlled_shutdown == 1:
        parts.append(f"Broker {r.broker_id} entered controlled shutdown")
    if r.log_dirs:
        parts.append(f"Broker {r.broker_id} now has online log dirs {len(r.log_dirs)}")
    return "; ".join(parts) or f"Updated the registration of broker {r.broker_id}"


# Record type -> its line; each takes a record of its key's type (or a FramedRecord of one).
LINES: dict[int, Callable[[Any], str]] = {
    RecordType.REGISTER_BROKER_RECORD:
        lambda r: f"Registered broker {r.broker_id} with epoch {r.broker_epoch} and incarnation "
                  f"{r.incarnation_id}{' (fenced)' if r.fenced else ''}",
    RecordType.UNREGISTER_BROKER_RECORD: lambda r: f"Unregistered broker {r.broker_id} (epoch {r.broker_epoch})",
    RecordType.TOPIC_RECORD: lambda r: f"Created topic {r.name} with topic id {r.topic_id}",
    RecordType.FENCE_BROKER_RECORD: lambda r: f"Fenced broker {r.id}",
    RecordType.UNFENCE_BROKER_RECORD: lambda r: f"Unfenced broker {r.id}",
    RecordType.REMOVE_TOPIC_RECORD: lambda r: f"Removed topic with id {r.topic_id}",
    RecordType.FEATURE_LEVEL_RECORD: lambda r: f"Finalized feature {r.name} at level {r.feature_level}",
    RecordType.BROKER_REGISTRATION_CHANGE_RECORD: _registration_change,
    RecordType.ZK_MIGRATION_STATE_RECORD: lambda r: f"ZK migration state is now {r.zk_migration_state}",
}


def log_state_changes(records: list[RecordAndVersion], base_offset: int) -> None:
    for i, (record, _) in enumerate(records):
        # A FramedRecord's api key is its value's second byte when below 0x80 (every key in
        # LINES is; a longer uvarint matches none): a method call saved per new partition.
        describe = LINES.get(record.value[1] if type(record) is FramedRecord else (record.api_key() or -1))
        if describe is not None:
            log.info("%s (offset %d)", describe(record), base_offset + i)

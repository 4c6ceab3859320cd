"""The next producer-id block (ProducerIdsRecord).

Only ``next_producer_id`` is state a snapshot carries: Kafka writes BrokerId/BrokerEpoch as -1
in snapshots, so ``broker_id``/``broker_epoch`` (who took the last block) are informational and
outside equality. Replay requires the next id to grow strictly once a block has been handed out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kraftsim.metadata.image.errors import ReplayError
from kraftsim.metadata.messages import ProducerIdsRecord
from kraftsim.rpc.message import Message

BLOCK_SIZE = 1000


class ProducerIdsImage:
    __slots__ = ("next_producer_id", "broker_id", "broker_epoch")

    def __init__(self) -> None:
        self.next_producer_id = -1  # -1: no block ever handed out
        self.broker_id = -1
        self.broker_epoch = -1

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerIdsImage):
            return NotImplemented
        return self.next_producer_id == other.next_producer_id

    def __repr__(self) -> str:
        return f"ProducerIdsImage(next_producer_id={self.next_producer_id})"

    def records(self) -> Iterator[tuple[Message, int]]:
        if self.next_producer_id >= 0:
            yield ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=self.next_producer_id), 0

    # --- the only mutator (see journal.py): (next id, broker id, broker epoch) ----------------

    def get_producer_ids(self, _key: None) -> tuple[int, int, int]:
        return self.next_producer_id, self.broker_id, self.broker_epoch

    def swap_producer_ids(self, _key: None, value: tuple[int, int, int]) -> tuple[int, int, int]:
        old = (self.next_producer_id, self.broker_id, self.broker_epoch)
        self.next_producer_id, self.broker_id, self.broker_epoch = value
        return old


def replay_producer_ids(image: ProducerIdsImage, record: Any, undo: list | None) -> None:
    nxt: int = record.next_producer_id
    if image.next_producer_id >= 0 and nxt <= image.next_producer_id:
        raise ReplayError(f"Next Producer ID from replayed record ({nxt}) is not greater than "
                          f"current next Producer ID ({image.next_producer_id})")
    old = image.swap_producer_ids(None, (nxt, record.broker_id, record.broker_epoch))
    if undo is not None:
        undo.append((image.swap_producer_ids, None, old))

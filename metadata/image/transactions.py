"""Open metadata transaction (Begin/End/AbortTransactionRecord, KIP-868, MV >= 3.6-IV1).

Replay only tracks which transaction is open and where it began. Undoing an aborted
transaction's records is the controller's job (it reverts its timeline snapshot to the offset
before the BeginTransactionRecord); a plain image cannot do it by itself. These records never
appear in a snapshot, so this state is outside image equality.
"""

from __future__ import annotations

from typing import Any

from metadata.image.errors import ReplayError


class TransactionState:
    __slots__ = ("name", "start_offset")

    def __init__(self) -> None:
        self.name: str | None = None
        self.start_offset = -1

    @property
    def open(self) -> bool:
        return self.start_offset != -1

    def __repr__(self) -> str:
        return f"TransactionState(name={self.name!r}, start_offset={self.start_offset})"


def replay_begin(state: TransactionState, record: Any, offset: int, in_snapshot: bool) -> None:
    if in_snapshot:
        raise ReplayError("BeginTransactionRecord cannot appear within a snapshot.")
    if state.open:
        raise ReplayError(f"Can't replay a BeginTransactionRecord at {offset} because the "
                          f"transaction at {state.start_offset} was never closed.")
    state.name = record.name
    state.start_offset = offset


def replay_end(state: TransactionState, offset: int, in_snapshot: bool, what: str) -> None:
    """End and Abort close the transaction the same way as far as replay is concerned."""
    if in_snapshot:
        raise ReplayError(f"{what} cannot appear within a snapshot.")
    if not state.open:
        raise ReplayError(f"Can't replay an {what} at {offset} because there is no open transaction.")
    state.name = None
    state.start_offset = -1

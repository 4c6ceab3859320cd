"""Open metadata transaction (Begin/End/AbortTransactionRecord, KIP-868, MV >= 3.6-IV1).

Replay tracks which transaction is open and where it began; the image keeps its undo journal on
while one is open, and an AbortTransactionRecord takes every record since the Begin back (see
``MetadataImage``). These records never appear in a snapshot, so this state is outside image
equality.
"""

from __future__ import annotations

from typing import Any

from kraftsim.metadata.image.errors import ReplayError


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

    # --- the only mutator (see journal.py): (name, start offset) ------------------------------

    def get_transaction(self, _key: None) -> tuple[str | None, int]:
        return self.name, self.start_offset

    def swap_transaction(self, _key: None, value: tuple[str | None, int]) -> tuple[str | None, int]:
        old = (self.name, self.start_offset)
        self.name, self.start_offset = value
        return old


def replay_begin(state: TransactionState, record: Any, offset: int, in_snapshot: bool,
                 undo: list | None) -> None:
    if in_snapshot:
        raise ReplayError("BeginTransactionRecord cannot appear within a snapshot.")
    if state.open:
        raise ReplayError(f"Can't replay a BeginTransactionRecord at {offset} because the "
                          f"transaction at {state.start_offset} was never closed.")
    old = state.swap_transaction(None, (record.name, offset))
    if undo is not None:
        undo.append((state.swap_transaction, None, old))


def check_end(state: TransactionState, offset: int, in_snapshot: bool, what: str) -> None:
    if in_snapshot:
        raise ReplayError(f"{what} cannot appear within a snapshot.")
    if not state.open:
        raise ReplayError(f"Can't replay an {what} at {offset} because there is no open transaction.")


def replay_end(state: TransactionState, offset: int, in_snapshot: bool, undo: list | None) -> None:
    check_end(state, offset, in_snapshot, "EndTransactionRecord")
    old = state.swap_transaction(None, (None, -1))
    if undo is not None:
        undo.append((state.swap_transaction, None, old))

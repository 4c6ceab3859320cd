"""The image's undo journal: what lets a replayed record be taken back.

Kafka keeps its controller state in timeline data structures so that it can revert to the last
committed offset (a resigning leader, a failed write) and drop an aborted metadata transaction.
kraftsim gets the same from a journal of *swaps*. Every change a replay function makes to a slice
goes through one of the slice's ``swap_<kind>(key, value)`` methods, which installs ``value``
(``None`` = absent), keeps the slice's indexes in step, and returns the value it replaced. While
the journal is on, replay records ``(swap, key, previous)`` for each such change, and one
:class:`Start` per record. Undoing is calling the swaps again, newest first, with the previous
values. Since each swap returns what it replaced, undoing a stretch also yields the entries that
would redo it: an AbortTransactionRecord journals exactly those, so reverting past an abort
brings its transaction back, and a delta across it stays exact.

The journal is only on while someone may revert: a caller's mark (the controller marks every
uncommitted batch), or an open metadata transaction. Replay of a committed log outside
transactions pays nothing but one ``is None`` test per change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Swap = Callable[[Any, Any], Any]
Entry = tuple[Swap, Any, Any]


@dataclass(slots=True)
class Start:
    """Where one replayed record's entries begin, and the image position before it.

    Not frozen, though nothing changes one: a frozen dataclass sets its fields through
    ``object.__setattr__``, 0.5 µs against 0.15, and the write path makes one per record (a
    million for a 1M-partition create)."""

    offset: int
    index: int
    prev_offset: int
    prev_timestamp_ms: int


def apply_entries(entries: list[Entry]) -> list[Entry]:
    """Apply entries newest first; return the entries that would take this back."""
    inverse: list[Entry] = []
    for swap, key, value in reversed(entries):
        inverse.append((swap, key, swap(key, value)))
    return inverse


def kind_of(swap: Swap) -> str:
    """``TopicsImage.swap_partition`` -> ``"partition"`` (the slice's ``get_partition`` reads it);
    a variant named ``swap_partition__<how>`` is of the same kind."""
    return getattr(swap, "__name__", "").removeprefix("swap_").partition("__")[0]


def get_nested(outer: dict[Any, dict[Any, Any]], key: tuple[Any, Any]) -> Any:
    inner = outer.get(key[0])
    return None if inner is None else inner.get(key[1])


def swap_nested(outer: dict[Any, dict[Any, Any]], key: tuple[Any, Any], value: Any) -> Any:
    """The swap of a two-level map (configs by resource, quotas by entity): None removes the
    key, and an inner map left empty disappears, so "nothing set" has one representation."""
    first, second = key
    inner = outer.get(first)
    old = None if inner is None else inner.get(second)
    if value is None:
        if inner is not None and second in inner:
            del inner[second]
            if not inner:
                del outer[first]
    elif inner is None:
        outer[first] = {second: value}
    else:
        inner[second] = value
    return old

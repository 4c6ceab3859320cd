"""Where the election state is kept: Kafka's ``quorum-state`` file, or memory for simulations.

Writes are synchronous and durable when they return (the file store writes a temporary file,
fsyncs it and renames it over the old one): the node answers a Vote only after the vote is
written, so the store must not return before it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from kraftsim.metadata import files
from kraftsim.raft.core.election_state import ElectionState


class QuorumStateStore(Protocol):
    def read(self) -> ElectionState | None:
        """The last state written, None when none ever was."""
        ...

    def write(self, state: ElectionState, kraft_version: int) -> None:
        """Durably replace the state (data_version 0 for kraft.version 0, else 1)."""
        ...


class FileQuorumStateStore:
    """``<metadata.log.dir>/__cluster_metadata-0/quorum-state`` in Kafka's JSON."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> ElectionState | None:
        if not self.path.exists():
            return None
        return ElectionState.from_file(files.QuorumState.read(self.path))

    def write(self, state: ElectionState, kraft_version: int) -> None:
        state.to_file(0 if kraft_version == 0 else 1).write(self.path)


class MemoryQuorumStateStore:
    """The store of a simulated node: it outlives the node (a crash loses nothing written), and
    counts writes so tests can see that a transition was persisted before it was acted on."""

    def __init__(self) -> None:
        self.state: ElectionState | None = None
        self.writes = 0

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState, kraft_version: int) -> None:
        self.state = state
        self.writes += 1

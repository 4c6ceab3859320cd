"""The voter set and kraft.version as the log says them, offset by offset (Kafka's
KRaftControlRecordStateMachine over its VoterSetHistory and kraft.version LogHistory).

A dynamic quorum (kraft.version 1, KIP-853) keeps its voters in the log: every VotersRecord is
the whole set from its offset on, every KRaftVersionRecord the finalized kraft.version. The
replica uses the *latest* entry, committed or not, as Kafka does: the leader counts the new set's
majority for the high watermark as soon as it has written a VotersRecord, a removed replica
fetches as an observer once it has it, an added one starts voting. That is safe because a leader
has at most one change uncommitted and two successive sets share a majority: any majority of
either holds what a majority of the other acknowledged.

Entries come from three places: the control batches the replica appends (as leader or as
follower), the snapshot a follower fetches (its last VotersRecord and KRaftVersionRecord), and,
at start-up, what ``kraftsim.raft.dynamic_voters.read_history`` read from the log on disk (each
VotersRecord and KRaftVersionRecord at its offset; a snapshot's at the snapshot's end offset - 1).
A truncation of the log cuts the entries at or after the new end; a fetched snapshot that names
a voter set replaces them all. A snapshot this replica writes trims the entries it covers, as
Kafka's KafkaRaftClient does when its snapshot writer freezes: of those at or below the
snapshot's end offset only the last stays, so that the set in force where the log may now start
is still known and the history does not grow with every voter change the log ever held. With no
VotersRecord at all (a static quorum, kraft.version 0) the static set
(``controller.quorum.voters``) is the set at every offset.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from kraftsim.metadata.batch import BatchError, ControlRecordType, decode_control_record, read_batches
from kraftsim.metadata.messages import KRaftVersionRecord, VotersRecord
from kraftsim.raft.core.voters import VoterSet
from kraftsim.raft.core.voters_records import voter_set_of
from kraftsim.rpc.message import Message

_CONTROL_ATTRIBUTE = 0x20
_BATCH_HEADER = 61  # RecordBatch v2: base offset 8, length 4, ... records count ends at byte 61


class VoterSetHistory:
    """(offset, value) entries in offset order, for the voter set and for kraft.version."""

    __slots__ = ("static", "_voter_offsets", "_voter_sets", "_kv_offsets", "_kv_levels", "static_kraft_version",
                 "version")

    def __init__(self, static: VoterSet, kraft_version: int = 0) -> None:
        self.static = static
        self.static_kraft_version = kraft_version
        self._voter_offsets: list[int] = []
        self._voter_sets: list[VoterSet] = []
        self._kv_offsets: list[int] = []
        self._kv_levels: list[int] = []
        self.version = 0  # bumped on every change: a cheap "did the set move?" for the leader

    # -- reading -------------------------------------------------------------------------------
    def latest(self) -> VoterSet:
        return self._voter_sets[-1] if self._voter_sets else self.static

    def latest_entry(self) -> tuple[int, VoterSet] | None:
        """The last VotersRecord's offset and set; None for a set that never came from the log."""
        return (self._voter_offsets[-1], self._voter_sets[-1]) if self._voter_sets else None

    def kraft_version(self) -> int:
        return self._kv_levels[-1] if self._kv_levels else self.static_kraft_version

    def entry_at(self, offset: int) -> VoterSet | None:
        """The set the log holds in force at ``offset``; None where the log names none (a static
        quorum, or an observer that has not fetched its quorum's set yet)."""
        i = bisect.bisect_right(self._voter_offsets, offset)
        return self._voter_sets[i - 1] if i else None

    def kraft_version_at(self, offset: int) -> int:
        i = bisect.bisect_right(self._kv_offsets, offset)
        return self._kv_levels[i - 1] if i else self.static_kraft_version

    def entries(self) -> list[tuple[int, VoterSet]]:
        return list(zip(self._voter_offsets, self._voter_sets, strict=True))

    # -- writing -------------------------------------------------------------------------------
    def add_voters(self, offset: int, voters: VoterSet) -> None:
        if self._voter_offsets and offset <= self._voter_offsets[-1]:
            raise ValueError(f"voter set at {offset}, not after the last one at {self._voter_offsets[-1]}")
        self._voter_offsets.append(offset)
        self._voter_sets.append(voters)
        self.version += 1

    def add_kraft_version(self, offset: int, level: int) -> None:
        if self._kv_offsets and offset <= self._kv_offsets[-1]:
            raise ValueError(f"kraft.version at {offset}, not after the last one at {self._kv_offsets[-1]}")
        self._kv_offsets.append(offset)
        self._kv_levels.append(level)
        self.version += 1

    def truncate_new_entries(self, end_offset: int) -> None:
        """The log was cut to ``end_offset``: entries at or after it are gone."""
        i = bisect.bisect_left(self._voter_offsets, end_offset)
        j = bisect.bisect_left(self._kv_offsets, end_offset)
        if i < len(self._voter_offsets) or j < len(self._kv_offsets):
            del self._voter_offsets[i:], self._voter_sets[i:], self._kv_offsets[j:], self._kv_levels[j:]
            self.version += 1

    def truncate_old_entries(self, start_offset: int) -> None:
        """A snapshot ending at ``start_offset`` was written: of the entries at or below it only
        the last stays (Kafka's truncateOldEntries), the one in force from there on."""
        i = bisect.bisect_right(self._voter_offsets, start_offset) - 1
        j = bisect.bisect_right(self._kv_offsets, start_offset) - 1
        if i > 0 or j > 0:
            del self._voter_offsets[:max(i, 0)], self._voter_sets[:max(i, 0)]
            del self._kv_offsets[:max(j, 0)], self._kv_levels[:max(j, 0)]
            self.version += 1

    def clear(self) -> None:
        if self._voter_offsets or self._kv_offsets:
            self._voter_offsets.clear()
            self._voter_sets.clear()
            self._kv_offsets.clear()
            self._kv_levels.clear()
            self.version += 1

    # -- from the log ------------------------------------------------------------------------------
    def add_control(self, offset: int, kind: ControlRecordType, message: Message) -> None:
        if kind is ControlRecordType.KRAFT_VOTERS and isinstance(message, VotersRecord):
            self.add_voters(offset, voter_set_of(message))
        elif kind is ControlRecordType.KRAFT_VERSION and isinstance(message, KRaftVersionRecord):
            self.add_kraft_version(offset, message.kraft_version)

    def add_batches(self, data: bytes) -> None:
        """Whole RecordBatch v2 batches, as appended: the control ones are read, the others
        skipped by their header alone (the metadata is for the state machine, not Raft)."""
        for raw in _control_batches(data):
            try:
                for batch in read_batches(raw):
                    for rec in batch.records():
                        decoded = decode_control_record(rec)
                        if decoded is not None:
                            self.add_control(rec.offset, *decoded)
            except BatchError:
                return

    def add_snapshot(self, data: bytes, last_offset: int) -> None:
        """A snapshot's batches: its last VotersRecord and KRaftVersionRecord stand at
        ``last_offset`` (the snapshot's last contained offset), as Kafka loads a snapshot's."""
        voters: VoterSet | None = None
        level: int | None = None
        for raw in _control_batches(data):
            try:
                for batch in read_batches(raw):
                    for rec in batch.records():
                        decoded = decode_control_record(rec)
                        if decoded is None:
                            continue
                        kind, message = decoded
                        if kind is ControlRecordType.KRAFT_VOTERS and isinstance(message, VotersRecord):
                            voters = voter_set_of(message)
                        elif kind is ControlRecordType.KRAFT_VERSION and isinstance(message, KRaftVersionRecord):
                            level = message.kraft_version
            except BatchError:
                break
        if voters is not None:
            self.add_voters(last_offset, voters)
        if level is not None:
            self.add_kraft_version(last_offset, level)


def _control_batches(data: bytes) -> Iterable[bytes]:
    """Each whole control batch in ``data``."""
    pos, n = 0, len(data)
    while pos + _BATCH_HEADER <= n:
        size = 12 + int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        if size < _BATCH_HEADER or pos + size > n:
            return
        attributes = int.from_bytes(data[pos + 21:pos + 23], "big")
        if attributes & _CONTROL_ATTRIBUTE:
            yield data[pos:pos + size]
        pos += size

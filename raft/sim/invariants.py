"""The safety properties every step of a simulation must keep, checked from what each node
shows (:class:`NodeView`), so that a hand-made history can be checked as well as a real run.

- One leader per epoch: no two nodes lead, follow or remember different leaders of one epoch,
  and no voter votes for two candidates in one epoch, crashes and restarts included.
- Epochs never go back on a node, and a running node's epoch is the one it persisted.
- A node's high watermark, whenever it knows one, never goes back while it runs (a new leader
  or a resigned one knows none for a while, as in Kafka), and a leader never exposes one below
  what is already committed.
- Committed records never change: every node's log and snapshot below its high watermark holds
  exactly the records committed there; so any two logs agree up to the smaller high watermark.
- Committed records are never lost: a majority of voters hold them durably (flushed), and the
  leader holds them all (Raft's leader completeness).

With voter changes (KIP-853) the voters are those the log names, and:

- At most one voter change is in flight: no log holds two VotersRecords past what is committed.
- Two successive voter sets in any log share a majority (they differ by one voter at most).
- "A majority of voters" above is a majority of the last committed voter set, or of an
  uncommitted one seen since (a leader counts its new set at once, so records may commit under
  it even if it is truncated later; any majority of it meets any majority of the committed one).

Other checks plug in through :attr:`InvariantChecker.extra_checks`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kraftsim.metadata.batch import IncompleteBatchError, decode_control_record, read_batches
from kraftsim.metadata.messages import VotersRecord
from kraftsim.raft.core.election_state import ElectionState
from kraftsim.raft.core.keys import OffsetAndEpoch
from kraftsim.raft.core.memory_log import MemoryLog
from kraftsim.raft.core.voter_history import VoterSetHistory
from kraftsim.raft.core.voters import VoterSet
from kraftsim.raft.core.voters_records import voter_set_of

CONTROL_FLAG = 0x20


class InvariantViolation(AssertionError):
    """A safety property broke: the message says which, on which node."""


@dataclass(slots=True)
class NodeView:
    """One node as the checker sees it at one step."""

    node_id: int
    incarnation: int
    voter: bool
    up: bool
    role: str
    epoch: int
    leader_id: int | None
    high_watermark: int | None
    log: MemoryLog
    persisted: ElectionState | None
    voted_for: int | None = None  # the candidate this node voted for in ``epoch`` (itself, as a candidate)
    voter_history: VoterSetHistory | None = None  # the voter sets its log names (a dynamic quorum, running)


@dataclass(slots=True)
class _Cursor:
    """How far a node's log is known to match the committed records, for one log generation."""

    log: MemoryLog | None = None
    generation: int = -1
    upto: int = 0

    def sync(self, log: MemoryLog) -> None:
        """Start again from the log's start if the log was replaced, or rewritten below its end."""
        if self.log is not log or self.generation != log.generation or self.upto < log.start_offset:
            self.log, self.generation, self.upto = log, log.generation, log.start_offset


def is_control(data: bytes) -> bool:
    return len(data) > 22 and bool(data[22] & CONTROL_FLAG)  # the low byte of Attributes (offset 21-22)


def batch_epoch(data: bytes) -> int:
    return int.from_bytes(data[12:16], "big", signed=True)  # PartitionLeaderEpoch


@dataclass
class InvariantChecker:
    voters: int
    leaders: dict[int, int] = field(default_factory=dict)  # epoch -> leader id
    committed: dict[int, bytes] = field(default_factory=dict)  # batch base offset -> its bytes
    committed_end: int = 0  # every offset below is committed
    committed_records: int = 0  # records of the workload (not control records) among them
    checks: int = 0
    extra_checks: list[Callable[[list[NodeView]], None]] = field(default_factory=list)
    _epochs: dict[int, int] = field(default_factory=dict)
    _hw: dict[tuple[int, int], int] = field(default_factory=dict)
    _verified: dict[int, _Cursor] = field(default_factory=dict)
    _durable: dict[int, _Cursor] = field(default_factory=dict)
    _complete: dict[int, _Cursor] = field(default_factory=dict)
    _snapshots_seen: dict[int, OffsetAndEpoch | None] = field(default_factory=dict)
    _epoch_first: dict[int, int] = field(default_factory=dict)  # epoch -> its first committed offset
    _votes: dict[tuple[int, int], int] = field(default_factory=dict)  # (voter, epoch) -> candidate
    _committed_at_claim: dict[int, int] = field(default_factory=dict)  # epoch -> committed end when its leader was seen
    # A dynamic quorum: the voter sets a committed record must be durable on a majority of one of
    # (the committed set, then any pending one); None for a static quorum.
    _voter_sets: list[VoterSet] | None = None
    _committed_voters: dict[int, VoterSet] = field(default_factory=dict)  # offset -> committed VotersRecord
    _last_committed_voters: int = -1
    _histories_checked: dict[int, tuple[int, int]] = field(default_factory=dict)  # node -> (history, version)
    # Uncommitted sets seen since the last committed one: a leader counts its latest set at once,
    # so records may commit under one that is truncated later (safe: any majority of it meets any
    # majority of the committed set).
    _pending_seen: list[VoterSet] = field(default_factory=list)

    def check(self, views: list[NodeView]) -> None:
        for v in views:
            self._check_leader_and_epoch(v)
            if v.up:
                self._check_high_watermark(v)
        for v in views:
            self._check_snapshot(v)
            if v.up and v.high_watermark is not None:
                self._check_committed_prefix(v)
        if any(v.voter_history is not None for v in views):
            self._check_voter_sets(views)
        self._check_durable_majority(views)
        for v in views:
            if v.up and v.role == "leader":
                self._check_leader_complete(v)
        for extra in self.extra_checks:
            extra(views)
        self.checks += 1

    # -- elections ---------------------------------------------------------------------------
    def _claim(self, epoch: int, leader: int, who: str) -> None:
        self._committed_at_claim.setdefault(epoch, self.committed_end)
        known = self.leaders.setdefault(epoch, leader)
        if known != leader:
            raise InvariantViolation(f"two leaders in epoch {epoch}: {known} and {leader} ({who})")

    def _check_leader_and_epoch(self, v: NodeView) -> None:
        if v.persisted is not None:
            if v.persisted.leader_id is not None:
                self._claim(v.persisted.epoch, v.persisted.leader_id, f"node {v.node_id}'s quorum-state")
            last = self._epochs.get(v.node_id, 0)
            if v.persisted.epoch < last:
                raise InvariantViolation(f"node {v.node_id}'s epoch went back from {last} to {v.persisted.epoch}")
            self._epochs[v.node_id] = v.persisted.epoch
        if not v.up:
            return
        if v.persisted is not None and v.epoch != v.persisted.epoch:
            raise InvariantViolation(f"node {v.node_id} is in epoch {v.epoch} but persisted {v.persisted.epoch}")
        if v.epoch < self._epochs.get(v.node_id, 0):
            raise InvariantViolation(f"node {v.node_id} runs in epoch {v.epoch}, below {self._epochs[v.node_id]}")
        self._epochs[v.node_id] = max(self._epochs.get(v.node_id, 0), v.epoch)
        if v.leader_id is not None:
            self._claim(v.epoch, v.leader_id, f"node {v.node_id} as {v.role}")
        if v.voted_for is not None:
            known = self._votes.setdefault((v.node_id, v.epoch), v.voted_for)
            if known != v.voted_for:
                raise InvariantViolation(f"node {v.node_id} voted for {known} and for {v.voted_for} in epoch {v.epoch}")
        if v.role == "leader" and v.leader_id != v.node_id:
            raise InvariantViolation(f"node {v.node_id} leads epoch {v.epoch} but names {v.leader_id}")

    # -- the high watermark ---------------------------------------------------------------------
    def _check_high_watermark(self, v: NodeView) -> None:
        hw = v.high_watermark
        key = (v.node_id, v.incarnation)
        last = self._hw.get(key)
        if hw is None:
            return  # not known (yet) in this state: a new leader learns it again, a resigned one drops it
        if last is not None and hw < last:
            raise InvariantViolation(f"node {v.node_id}'s high watermark went back from {last} to {hw}")
        if hw > v.log.end_offset:
            raise InvariantViolation(f"node {v.node_id}'s high watermark {hw} is past its log end {v.log.end_offset}")
        self._hw[key] = hw
        # The leader of the latest epoch never exposes less than is committed (a deposed leader
        # that has not heard yet may: it never learnt what its successor committed).
        if v.role == "leader" and v.epoch >= max(self.leaders, default=0) and hw < self.committed_end:
            raise InvariantViolation(f"leader {v.node_id} of epoch {v.epoch} exposes high watermark {hw}, below "
                                     f"the committed {self.committed_end}")

    def committed_through(self, epoch: int) -> int:
        """The end of the committed records of epochs up to ``epoch``: what a leader of that epoch
        must hold (a deposed leader that has not heard yet lacks what its successors committed)."""
        later = [offset for e, offset in self._epoch_first.items() if e > epoch]
        return min(later) if later else self.committed_end

    # -- committed records -----------------------------------------------------------------------
    def _commit(self, base: int, last: int, data: bytes, who: str) -> None:
        known = self.committed.get(base)
        if known is None:
            self.committed[base] = data
            epoch = batch_epoch(data)
            self._epoch_first[epoch] = min(base, self._epoch_first.get(epoch, base))
            if not is_control(data):
                self.committed_records += last - base + 1
            else:
                self._note_committed_voters(data)
        elif known != data:
            raise InvariantViolation(f"committed batch at offset {base} differs on {who}")

    def _note_committed_voters(self, data: bytes) -> None:
        for batch in read_batches(data):
            for rec in batch.records():
                decoded = decode_control_record(rec)
                if decoded is not None and isinstance(decoded[1], VotersRecord):
                    self._committed_voters[rec.offset] = voter_set_of(decoded[1])

    def _check_snapshot(self, v: NodeView) -> None:
        """A snapshot holds committed records only: the ones below its end."""
        sid = v.log.earliest_snapshot_id()
        if sid is None or self._snapshots_seen.get(v.node_id) == sid:
            return
        self._snapshots_seen[v.node_id] = sid
        data = v.log.snapshots.get(sid, b"")
        try:
            for b in read_batches(data):
                if b.base_offset >= sid.offset:
                    raise InvariantViolation(f"snapshot {sid} on node {v.node_id} holds offset {b.base_offset}")
                self._commit(b.base_offset, b.last_offset, bytes(b.raw), f"node {v.node_id}'s snapshot {sid}")
        except IncompleteBatchError:
            raise InvariantViolation(f"snapshot {sid} on node {v.node_id} is cut short") from None
        self.committed_end = max(self.committed_end, sid.offset)

    def _check_committed_prefix(self, v: NodeView) -> None:
        """The node's log below its high watermark: committed, so it must match (or become) the
        committed records."""
        hw = v.high_watermark
        assert hw is not None
        cursor = self._verified.setdefault(v.node_id, _Cursor())
        log = v.log
        cursor.sync(log)
        if hw > cursor.upto:
            for b in log.batches_from(cursor.upto):
                if b.base_offset >= hw:
                    break
                self._commit(b.base_offset, b.last_offset, b.data, f"node {v.node_id}")
                cursor.upto = b.last_offset + 1
            self.committed_end = max(self.committed_end, hw)

    def _matched(self, cursors: dict[int, _Cursor], v: NodeView, limit: int) -> int:
        """How far from its start the node's log holds exactly the committed batches, up to
        ``limit``."""
        cursor = cursors.setdefault(v.node_id, _Cursor())
        log = v.log
        cursor.sync(log)
        if cursor.upto < min(limit, self.committed_end):
            for b in log.batches_from(cursor.upto):
                if b.base_offset >= self.committed_end or b.last_offset >= limit:
                    break
                known = self.committed.get(b.base_offset)
                if known is None or known != b.data:
                    break
                cursor.upto = b.last_offset + 1
        return cursor.upto

    def _check_durable_majority(self, views: list[NodeView]) -> None:
        target = self.committed_end
        if target == 0:
            return
        if self._voter_sets is None:
            durable = [v.node_id for v in views if v.voter
                       and self._matched(self._durable, v, v.log.flushed_end_offset) >= target]
            if len(durable) < self.voters // 2 + 1:
                raise InvariantViolation(f"committed offsets below {target} are durable on voters {durable} only, "
                                         f"not a majority of {self.voters}")
            return
        holders = {v.node_id for v in views if self._matched(self._durable, v, v.log.flushed_end_offset) >= target}
        for voters in self._voter_sets:
            if len(holders & voters.ids()) >= voters.majority_size():
                return
        raise InvariantViolation(f"committed offsets below {target} are durable on {sorted(holders)} only, not a "
                                 f"majority of any of the voter sets {self._voter_sets}")

    def _check_voter_sets(self, views: list[NodeView]) -> None:
        """One change in flight, successive sets sharing a majority; and which sets a committed
        record must be durable on a majority of (the committed one, or the pending one)."""
        target = self.committed_end
        pending: list[VoterSet] = []
        for v in views:
            history = v.voter_history
            if history is None:
                continue
            entries = history.entries()
            seen = (id(history), history.version)
            if self._histories_checked.get(v.node_id) != seen:  # unchanged since checked: skip
                self._histories_checked[v.node_id] = seen
                previous: VoterSet | None = None  # the first comes from a snapshot or the bootstrap checkpoint
                for offset, voters in entries:
                    if previous is not None and not previous.overlapping_majority(voters):
                        raise InvariantViolation(f"node {v.node_id}'s log changes voters from {previous} to "
                                                 f"{voters} at offset {offset}: they share no majority")
                    previous = voters
            below = [offset for offset, _ in entries if offset < v.log.start_offset]
            if len(below) > 1:  # a snapshot trims what it covers but the set in force at its end
                raise InvariantViolation(f"node {v.node_id} keeps {len(below)} voter sets below its log start "
                                         f"{v.log.start_offset}, at offsets {below}")
            in_flight = [offset for offset, _ in entries if offset >= target]
            if len(in_flight) > 1:
                raise InvariantViolation(f"node {v.node_id}'s log holds {len(in_flight)} uncommitted voter changes, "
                                         f"at offsets {in_flight} (committed below {target})")
            pending += [voters for offset, voters in entries if offset >= target]
        if self._committed_voters:
            last = max(self._committed_voters)
            if last != self._last_committed_voters:
                self._last_committed_voters = last
                self._pending_seen = []
            for voters in pending:
                if voters not in self._pending_seen:
                    self._pending_seen.append(voters)
            self._voter_sets = [self._committed_voters[last], *self._pending_seen]

    def _check_leader_complete(self, v: NodeView) -> None:
        # What was committed before this leader's epoch was first seen (what its election
        # guarantees), and no more than what epochs up to its own committed: records of an old
        # epoch that a later leader committed need not be in a leader elected before that.
        needed = min(self.committed_through(v.epoch), self._committed_at_claim.get(v.epoch, self.committed_end))
        if self._matched(self._complete, v, v.log.end_offset) < needed:
            raise InvariantViolation(f"leader {v.node_id} of epoch {v.epoch} lacks committed records below {needed}")

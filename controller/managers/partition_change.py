"""PartitionChangeBuilder: how leaders and ISRs change (Kafka 3.9's ``PartitionChangeBuilder``).

Given a partition, a target state (ISR, replicas, reassignment lists, recovery state), an election
type and an "acceptable leader" predicate, :meth:`PartitionChangeBuilder.build` returns the
PartitionChangeRecord that moves the partition there, or None when nothing would change. The
order of the steps is Kafka's, because each step reads what the previous ones decided:

1. complete a reassignment if the target ISR now covers the target replicas;
2. with ELR on, work out the target ELR (below);
3. elect a leader (keep the current one if still valid, else the first valid replica in replica
   order; PREFERRED tries replicas[0] first; UNCLEAN may pick an acceptable replica outside the
   ISR, forcing ISR = [leader] and LeaderRecoveryState RECOVERING). A valid leader is in the
   target ISR, or in the target ELR when that ISR is empty; a leader taken from the ELR becomes
   the whole ISR and leaves the ELR. With ISR and ELR empty, the partition's single
   LastKnownElr member (its last leader) is elected, as an unclean election, if acceptable;
4. bump the leader epoch (Leader = current leader) if replicas are dropped;
5. write the ELR if it changed; an unclean election, or ELR off, empties it;
6. set the ISR if it changed and the election did not already set it. Without ELR an empty ISR
   is never written (the last member stays, with leader -1, until it comes back); with ELR it is;
7. bump the leader epoch on ISR shrink below metadata.version 3.6-IV0 (KAFKA-15021) or while the
   ZK migration is enabled;
8. with ELR on, LastKnownElr holds the last leader once the partition becomes leaderless, and
   is emptied when it has a leader again;
9. directories (metadata.version >= 3.7-IV2), replicas, removing/adding, recovery state.

Eligible leader replicas (KIP-966) are Kafka 4.x's, on when eligible.leader.replicas.version >= 1
is finalized (``eligible_leader_replicas_enabled``; the caller also passes the topic's effective
min.insync.replicas, capped at its replication factor). While the target ISR is below that
minimum, the ELR becomes (ELR + current ISR) - target ISR - replicas that shut down uncleanly, in
the iteration order of Java's HashSet of those broker ids; an ISR at the minimum empties it.
Kafka also computes a "real" LastKnownElr there, but writes it only when its "last known leader
in balanced recovery" is off, which no controller path does: it is not modelled. 3.9's own ELR
(its unstable 4.0-IV0 plus a config) is not modelled: asking for ELR under 3.9 raises
NotImplementedError.

The builder never reads or mutates the image: the caller passes the partition and a predicate
(see ``ClusterControlManager.leader_acceptor``), which keeps it testable and lets every caller
(fencing, unfencing, ElectLeaders, AlterPartition, reassignments) share it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Final, TypedDict, Unpack

from kraftsim.controller.java.hash_order import hashmap_capacity, order_by_hash
from kraftsim.metadata import versions
from kraftsim.metadata.image.topics import NO_LEADER, NO_LEADER_CHANGE, RECOVERING, Partition
from kraftsim.metadata.messages import PartitionChangeRecord

DefaultDirProvider = Callable[[int], uuid.UUID]


class Election(IntEnum):
    """PartitionChangeBuilder.Election. (The ElectLeaders wire values differ: 0 PREFERRED,
    1 UNCLEAN; map them with :func:`election_from_wire`.)"""

    PREFERRED = 0
    ONLINE = 1
    UNCLEAN = 2


PREFERRED: Final = Election.PREFERRED
ONLINE: Final = Election.ONLINE
UNCLEAN: Final = Election.UNCLEAN


def election_from_wire(election_type: int) -> Election:
    """ElectLeaders' ElectionType byte: 0 PREFERRED, 1 UNCLEAN."""
    if election_type == 0:
        return Election.PREFERRED
    if election_type == 1:
        return Election.UNCLEAN
    raise ValueError(f"Unknown election type {election_type}")


class Targets(TypedDict, total=False):
    """Targets a caller hands through to the builder's keywords."""

    target_isr: Sequence[int]
    target_replicas: Sequence[int]
    target_removing: Sequence[int]
    target_adding: Sequence[int]
    target_leader_recovery_state: int
    election: Election


class ElrTargets(TypedDict, total=False):
    """What a 4.x controller tells the builder about ELR (see ``managers/elr.py``)."""

    eligible_leader_replicas_enabled: bool
    min_isr: int


def _contains_all(a: Sequence[int], b: Sequence[int]) -> bool:
    """Replicas.contains(a, b): every member of b is in a."""
    if len(b) <= 3:  # the common case: membership tests beat building sets
        return all(x in a for x in b)
    return set(b).issubset(a)


class PartitionChangeBuilder:
    """One partition change. Set targets (constructor keywords or the fluent setters), then
    :meth:`build`. Lists are plain tuples/lists of broker ids; the partition is not mutated."""

    __slots__ = ("partition", "topic_id", "partition_id", "is_acceptable_leader", "metadata_version",
                 "target_isr", "target_replicas", "target_removing", "target_adding",
                 "target_leader_recovery_state", "election", "zk_migration_enabled",
                 "default_dir", "target_directories", "release", "elr_enabled", "min_isr",
                 "unclean_shutdown_replicas", "target_elr")

    def __init__(self, partition: Partition, topic_id: uuid.UUID, partition_id: int,
                 is_acceptable_leader: Callable[[int], bool], metadata_version: int, *,
                 target_isr: Sequence[int] | None = None,
                 target_replicas: Sequence[int] | None = None,
                 target_removing: Sequence[int] | None = None,
                 target_adding: Sequence[int] | None = None,
                 target_leader_recovery_state: int | None = None,
                 election: Election = Election.ONLINE,
                 zk_migration_enabled: bool = False,
                 eligible_leader_replicas_enabled: bool = False,
                 min_isr: int = 1,
                 unclean_shutdown_replicas: Sequence[int] = (),
                 default_dir: DefaultDirProvider | None = None,
                 release: versions.Release | None = None) -> None:
        """``release``: whose gates the metadata.version is read with (3.9 unless given).
        ``min_isr``: the topic's effective min.insync.replicas capped at its replication factor
        (read only with ELR on). ``unclean_shutdown_replicas``: brokers that never enter the ELR."""
        self.release = versions.release() if release is None else release
        if eligible_leader_replicas_enabled and self.release.is_3x:
            raise NotImplementedError("3.9's eligible leader replicas (KIP-966) are not modelled")
        self.elr_enabled = eligible_leader_replicas_enabled
        self.min_isr = min_isr
        self.unclean_shutdown_replicas = unclean_shutdown_replicas
        self.target_elr: Sequence[int] = partition.elr
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.metadata_version = metadata_version
        self.target_isr: Sequence[int] = partition.isr if target_isr is None else target_isr
        self.target_replicas: Sequence[int] = partition.replicas if target_replicas is None else target_replicas
        self.target_removing: Sequence[int] = (partition.removing_replicas if target_removing is None
                                               else target_removing)
        self.target_adding: Sequence[int] = partition.adding_replicas if target_adding is None else target_adding
        self.target_leader_recovery_state = (partition.leader_recovery_state
                                             if target_leader_recovery_state is None
                                             else target_leader_recovery_state)
        self.election = election
        self.zk_migration_enabled = zk_migration_enabled
        self.default_dir = default_dir
        # Explicit per-replica directory overrides (setDirectory); the partition's own
        # assignment is the fallback, then default_dir for replicas it does not have.
        self.target_directories: dict[int, uuid.UUID] | None = None

    def set_directory(self, broker_id: int, directory: uuid.UUID) -> PartitionChangeBuilder:
        if self.target_directories is None:
            self.target_directories = {}
        self.target_directories[broker_id] = directory
        return self

    # ----- election ----------------------------------------------------------------------

    def _valid(self, replica: int) -> bool:
        """isValidNewLeader: in the target ISR, or in the target ELR when that ISR is empty; and
        acceptable."""
        isr = self.target_isr
        return ((replica in isr or (not isr and replica in self.target_elr))
                and self.is_acceptable_leader(replica))

    def _can_elect_last_known_leader(self) -> bool:
        """canElectLastKnownLeader: ELR on, ISR and ELR empty, the partition's LastKnownElr a
        single broker that is acceptable (4.0 skips that last check)."""
        if not self.elr_enabled or self.target_elr or self.target_isr:
            return False
        lke = self.partition.last_known_elr
        if len(lke) != 1:
            return False
        return self.release.line == "4.0" or self.is_acceptable_leader(lke[0])

    def elect_leader(self) -> tuple[int, bool]:
        """(leader, unclean). NO_LEADER when nobody qualifies."""
        p = self.partition
        replicas = self.target_replicas
        if self.election == Election.PREFERRED:
            if replicas and self._valid(replicas[0]):
                return replicas[0], False
            if self._valid(p.leader):
                return p.leader, False
            for r in replicas[1:]:
                if self._valid(r):
                    return r, False
            if self._can_elect_last_known_leader():
                return p.last_known_elr[0], True
            return NO_LEADER, False
        if self._valid(p.leader):
            return p.leader, False
        for r in replicas:
            if self._valid(r):
                return r, False
        if self._can_elect_last_known_leader():
            return p.last_known_elr[0], True
        if self.election == Election.UNCLEAN:
            accept = self.is_acceptable_leader
            for r in replicas:
                if accept(r):
                    return r, True
        return NO_LEADER, False

    def _populate_target_elr(self) -> None:
        """maybePopulateTargetElr (ELR on): an ISR at min ISR empties the ELR; below it, the ELR
        gathers the current ISR, minus the target ISR and brokers that shut down uncleanly. Java
        builds it as a HashSet of the ELR, then the current ISR, and walks it: broker ids come
        out in bucket order (id mod the table size for ids below 65536)."""
        target_isr = self.target_isr
        if len(target_isr) >= self.min_isr:
            self.target_elr = ()
            return
        candidates = list(dict.fromkeys((*self.target_elr, *self.partition.isr)))
        ordered = order_by_hash(candidates, _int_hash, hashmap_capacity(len(candidates), 16))
        unclean = self.unclean_shutdown_replicas
        self.target_elr = tuple(r for r in ordered if r not in target_isr and r not in unclean)

    # ----- build -------------------------------------------------------------------------

    def _complete_reassignment(self) -> None:
        removing = self.target_removing
        if not removing and not self.target_adding:
            return
        isr = list(self.target_isr)
        replicas = list(self.target_replicas)
        if removing:
            isr = [r for r in isr if r not in removing]
            if not isr:
                return
            replicas = [r for r in replicas if r not in removing]
            if not replicas:
                return
        if not _contains_all(isr, replicas):
            return
        self.target_isr = isr
        self.target_replicas = replicas
        self.target_removing = ()
        self.target_adding = ()

    def build(self) -> tuple[PartitionChangeRecord, int] | None:
        """The (PartitionChangeRecord, version) for the image's metadata.version, or None."""
        p = self.partition
        mv = self.metadata_version
        self._complete_reassignment()
        # Fields start at "no change": Leader -2, LeaderRecoveryState -1, lists None.
        record = PartitionChangeRecord(topic_id=self.topic_id, partition_id=self.partition_id)
        changed = False

        elr_on = self.elr_enabled
        if elr_on:
            self._populate_target_elr()

        leader, unclean = self.elect_leader()
        if leader != p.leader:
            if leader in self.target_elr:  # a leader out of the ELR is the whole ISR
                self.target_isr = (leader,)
                self.target_elr = tuple(r for r in self.target_elr if r != leader)
            record.leader = leader
            changed = True
            if unclean:
                # Forcibly ISR = [leader]; data may be lost, so the leader must recover first.
                record.isr = [leader]
                if p.leader_recovery_state != RECOVERING and self.release.is_leader_recovery_supported(mv):
                    record.leader_recovery_state = RECOVERING

        target_replicas = self.target_replicas
        if record.leader == NO_LEADER_CHANGE and not _contains_all(target_replicas, p.replicas):
            record.leader = p.leader  # dropping replicas forces a leader epoch bump
            changed = True

        # maybeUpdateRecordElr: an unclean election, or ELR off, empties the ELR.
        target_elr = self.target_elr if elr_on and record.isr is None else ()
        if tuple(target_elr) != p.elr:
            record.eligible_leader_replicas = list(target_elr)
            changed = True

        target_isr = self.target_isr
        if record.isr is None and (target_isr or elr_on) and tuple(target_isr) != p.isr:
            record.isr = list(target_isr)
            changed = True

        if ((self.release.is_leader_epoch_bump_required_on_isr_shrink(mv) or self.zk_migration_enabled)
                and record.leader == NO_LEADER_CHANGE and record.isr is not None
                and not _contains_all(record.isr, p.isr)):
            record.leader = p.leader
            changed = True

        if elr_on and self._update_last_known_leader(record):
            changed = True

        if target_replicas:
            if self.release.directory_assignment_supported(mv):
                dirs = self._directories(target_replicas)
                if dirs != p.directories:
                    record.directories = list(dirs)
                    changed = True
            if tuple(target_replicas) != p.replicas:
                record.replicas = list(target_replicas)
                changed = True
        if tuple(self.target_removing) != p.removing_replicas:
            record.removing_replicas = list(self.target_removing)
            changed = True
        if tuple(self.target_adding) != p.adding_replicas:
            record.adding_replicas = list(self.target_adding)
            changed = True
        if self.target_leader_recovery_state != p.leader_recovery_state:
            record.leader_recovery_state = self.target_leader_recovery_state
            changed = True

        if not changed:  # Kafka's changeRecordIsNoOp
            return None
        return record, self.release.partition_change_record_version(mv)

    def _update_last_known_leader(self, record: PartitionChangeRecord) -> bool:
        """maybeUpdateLastKnownLeader: LastKnownElr = [last leader] when the partition first
        becomes leaderless, [] once it has a leader again. 4.0 keys the first on an ISR written
        empty and the second on a partition that has or keeps a leader."""
        p = self.partition
        lke = p.last_known_elr
        if self.release.line == "4.0":
            if record.isr is not None and not record.isr and (len(lke) != 1 or lke[0] != p.leader):
                record.last_known_elr = [p.leader]
                return True
            if lke and (record.leader >= 0 or (p.leader != NO_LEADER and record.leader != NO_LEADER)):
                record.last_known_elr = []
                return True
            return False
        if record.leader == NO_LEADER and not lke:
            record.last_known_elr = [p.leader]
            return True
        if record.leader >= 0 and lke:
            record.last_known_elr = []
            return True
        return False

    def _directories(self, replicas: Sequence[int]) -> tuple[uuid.UUID, ...]:
        p = self.partition
        if self.target_directories is None and replicas is p.replicas:
            return p.directories  # the common case: nothing reassigned, nothing overridden
        current = dict(zip(p.replicas, p.directories, strict=True))
        if self.target_directories:
            current.update(self.target_directories)
        out = []
        for r in replicas:
            d = current.get(r)
            if d is None:
                if self.default_dir is None:
                    raise RuntimeError("DefaultDirProvider is not set")
                d = self.default_dir(r)
            out.append(d)
        return tuple(out)


def _int_hash(i: int) -> int:
    """Integer.hashCode."""
    return i


def build(partition: Partition, topic_id: uuid.UUID, partition_id: int,
          is_acceptable_leader: Callable[[int], bool], metadata_version: int,
          **targets: Unpack[Targets]) -> tuple[PartitionChangeRecord, int] | None:
    """One-shot form: ``build(p, tid, pid, accept, mv, target_isr=[...], election=UNCLEAN)``."""
    return PartitionChangeBuilder(partition, topic_id, partition_id, is_acceptable_leader,
                                  metadata_version, **targets).build()

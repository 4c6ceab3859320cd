"""PartitionChangeBuilder: how leaders and ISRs change (Kafka 3.9's ``PartitionChangeBuilder``).

Given a partition, a target state (ISR, replicas, reassignment lists, recovery state), an election
type and an "acceptable leader" predicate, :meth:`PartitionChangeBuilder.build` returns the
PartitionChangeRecord that moves the partition there, or None when nothing would change. The
order of the steps is Kafka's, because each step reads what the previous ones decided:

1. complete a reassignment if the target ISR now covers the target replicas;
2. elect a leader (keep the current one if still valid, else the first valid replica in replica
   order; PREFERRED tries replicas[0] first; UNCLEAN may pick an acceptable replica outside the
   ISR, forcing ISR = [leader] and LeaderRecoveryState RECOVERING);
3. bump the leader epoch (Leader = current leader) if replicas are dropped;
4. clear ELR fields if the partition carries any (ELR itself is not modelled, see below);
5. set the ISR if it changed and the election did not already set it. An empty ISR is never
   written: the last member of the ISR stays there, with leader -1, until it comes back;
6. bump the leader epoch on ISR shrink below metadata.version 3.6-IV0 (KAFKA-15021) or while the
   ZK migration is enabled;
7. directories (metadata.version >= 3.7-IV2), replicas, removing/adding, recovery state.

Eligible leader replicas (KIP-966) need metadata.version 4.0-IV0, unstable in 3.9, plus a config;
they are not modelled: asking for them raises NotImplementedError.

The builder never reads or mutates the image: the caller passes the partition and a predicate
(see ``ClusterControlManager.leader_acceptor``), which keeps it testable and lets every caller
(fencing, unfencing, ElectLeaders, AlterPartition, reassignments) share it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Final, TypedDict, Unpack

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
                 "default_dir", "target_directories", "release")

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
                 default_dir: DefaultDirProvider | None = None,
                 release: versions.Release | None = None) -> None:
        """``release``: whose gates the metadata.version is read with (3.9 unless given)."""
        if eligible_leader_replicas_enabled:
            raise NotImplementedError("eligible leader replicas (KIP-966) are not modelled")
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.metadata_version = metadata_version
        self.release = versions.release() if release is None else release
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
        """isValidNewLeader without ELR: in the target ISR and acceptable."""
        return replica in self.target_isr and self.is_acceptable_leader(replica)

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
            return NO_LEADER, False
        if self._valid(p.leader):
            return p.leader, False
        for r in replicas:
            if self._valid(r):
                return r, False
        if self.election == Election.UNCLEAN:
            accept = self.is_acceptable_leader
            for r in replicas:
                if accept(r):
                    return r, True
        return NO_LEADER, False

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

        leader, unclean = self.elect_leader()
        if leader != p.leader:
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

        if p.elr:  # ELR is off: clear whatever an earlier metadata.version left behind
            record.eligible_leader_replicas = []
            changed = True

        target_isr = self.target_isr
        if record.isr is None and target_isr and tuple(target_isr) != p.isr:
            record.isr = list(target_isr)
            changed = True

        if ((self.release.is_leader_epoch_bump_required_on_isr_shrink(mv) or self.zk_migration_enabled)
                and record.leader == NO_LEADER_CHANGE and record.isr is not None
                and not _contains_all(record.isr, p.isr)):
            record.leader = p.leader
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


def build(partition: Partition, topic_id: uuid.UUID, partition_id: int,
          is_acceptable_leader: Callable[[int], bool], metadata_version: int,
          **targets: Unpack[Targets]) -> tuple[PartitionChangeRecord, int] | None:
    """One-shot form: ``build(p, tid, pid, accept, mv, target_isr=[...], election=UNCLEAN)``."""
    return PartitionChangeBuilder(partition, topic_id, partition_id, is_acceptable_leader,
                                  metadata_version, **targets).build()
